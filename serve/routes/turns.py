"""Turns and takes: play a turn (JSON or a server-sent event stream), retake it, choose a take, read its provenance.

A turn runs under the replica's capacity (:class:`~serve.services.Capacity`): past it the caller gets
429 with Retry-After at once rather than a queue that grows until timeouts.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from narrator.turn import TurnOutcome
from schemas.errors import LorekeeperError
from schemas.serving import TakeRequest, TurnRequest
from schemas.story import Take, Turn, TurnProvenance
from serve.deps import API, PrincipalDep, ServicesDep, turn_in
from serve.errors import TooMany
from serve.metrics import TURNS_REFUSED
from serve.services import Services

log = structlog.get_logger(__name__)


def router() -> APIRouter:
    """Turns, takes and provenance."""
    r = APIRouter(prefix=API, tags=["story"])

    @r.post("/campaigns/{campaign_id}/turns", status_code=201, response_model=TurnOutcome)
    async def play_turn(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: TurnRequest) -> Response:
        caller.require_campaign(campaign_id)
        # before any status is sent: a stream could no longer answer 404
        await s.run(s.story.get_campaign, campaign_id)
        return await _narrated(s, lambda: s.flow.play(campaign_id, body), stream=body.stream)

    @r.get("/campaigns/{campaign_id}/turns", response_model=list[Turn])
    async def history(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, last: Annotated[int | None, Query(ge=1, le=1000)] = 50
    ) -> list[Turn]:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.history, campaign_id, last=last)  # type: ignore[no-any-return]

    @r.post("/campaigns/{campaign_id}/turns/{turn_id}/takes", status_code=201, response_model=TurnOutcome)
    async def retake(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str, body: TakeRequest | None = None
    ) -> Response:
        await turn_in(s, caller, campaign_id, turn_id)
        return await _narrated(s, lambda: s.flow.retake(campaign_id, turn_id), stream=bool(body and body.stream))

    @r.get("/campaigns/{campaign_id}/turns/{turn_id}/takes", response_model=list[Take])
    async def takes(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str) -> list[Take]:
        await turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.takes, turn_id)  # type: ignore[no-any-return]

    @r.put("/campaigns/{campaign_id}/turns/{turn_id}/takes/{take_id}/select", response_model=Take)
    async def select_take(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str, take_id: str) -> Take:
        await turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.select_take, turn_id, take_id)  # type: ignore[no-any-return]

    @r.get("/campaigns/{campaign_id}/turns/{turn_id}/provenance", response_model=TurnProvenance)
    async def provenance(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str) -> TurnProvenance:
        await turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.provenance, turn_id)  # type: ignore[no-any-return]

    return r


async def _narrated(s: Services, events: Callable[[], AsyncIterator[dict[str, Any]]], *, stream: bool) -> Response:
    """Run a turn under the replica's capacity: SSE events when streaming, else the outcome as JSON."""
    slot = s.capacity.acquire()
    if slot is None:
        TURNS_REFUSED.inc()
        raise TooMany(
            f"this server is narrating {s.capacity.limit} turns already; retry shortly",
            retry_after=s.capacity.retry_after_s,
        )
    if not stream:
        try:
            outcome: dict[str, Any] = {}
            async for event in events():
                if event["event"] == "done":
                    outcome = event
            return JSONResponse(TurnOutcome.model_validate(outcome).model_dump(mode="json"), status_code=201)
        finally:
            slot.release()

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events():
                yield _sse(event.pop("event"), event)
        except LorekeeperError as exc:
            yield _sse("error", exc.to_dict())
        except Exception as exc:  # the stream has started: the status is sent, so say it in the stream
            request_id = uuid.uuid4().hex[:12]
            log.error("turn_stream_failed", request_id=request_id, error=repr(exc), exc_info=exc)
            yield _sse("error", {"error": "internal", "message": f"the turn failed (request {request_id})"})
        finally:
            slot.release()

    stream_body = body()
    # A client gone before the stream starts leaves the generator unstarted (its finally never runs):
    # the slot goes back when the generator is collected.
    weakref.finalize(stream_body, slot.release)
    return StreamingResponse(stream_body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()
