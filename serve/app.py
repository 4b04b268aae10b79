"""The HTTP API: every ``/api/v1`` route, the OpenAI-compatible passthrough, ``/health``, ``/metrics``, ``/mcp``.

:func:`create_app` builds the FastAPI app over :class:`~serve.services.Services`; the Ray Serve
ingress (:mod:`serve.deployments`) serves the very same app on its replicas, and ``lorekeeper serve
--direct`` serves it with uvicorn alone. ``build_app`` is the Ray Serve import path
(``serve run serve.app:build_app`` / ``cluster/serve-config.yaml``).

Rules every route follows:

* **who**: ``Authorization: Bearer KEY``; a campaign key reaches its campaigns only (a scene, turn or
  fact is reached through its campaign), an admin key everything; open only on loopback without keys;
* **errors**: a JSON body ``{"error": code, "message": ...}`` with the status of the error class;
  unexpected failures are logged with a request id and answered 500 without a stack trace;
* **size**: bodies over ``LOREKEEPER_MAX_REQUEST_BYTES`` (uploads: ``…_MAX_UPLOAD_BYTES``) get 413;
* **capacity**: turns beyond ``LOREKEEPER_MAX_CONCURRENT_TURNS`` on a replica get 429 + Retry-After.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import InvalidRequest, LorekeeperError, NotFound
from schemas.search import SearchHit, SearchRequest
from schemas.serving import (
    BranchCreate,
    CampaignCreate,
    CheckpointCreate,
    CommitRequest,
    EndSceneRequest,
    ProposalCreate,
    RetconRequest,
    SceneCreate,
    TakeRequest,
    TurnRequest,
    WorldCreate,
)
from schemas.story import (
    Branch,
    Campaign,
    Checkpoint,
    GateReport,
    ProposalStatus,
    ProposedChange,
    Scene,
    Take,
    Turn,
    TurnProvenance,
    World,
    WorldStateView,
)
from serve.auth import Principal, Unauthorized
from serve.context import estimate_tokens
from serve.metrics import GATE_DECISIONS, HTTP_DURATION, HTTP_REQUESTS, TURNS_REFUSED
from serve.narration import TurnOutcome
from serve.services import Services

log = structlog.get_logger(__name__)

API = "/api/v1"
Plugin = Callable[[FastAPI, Any], Any]
"""An extra set of routes: ``plugin(app, admin_dependency)`` adds them, and may return a lifespan
(``lifespan(app)`` → an async context manager) that the app enters at start-up (the ingest API does)."""


class TooMany(LorekeeperError):
    """Over capacity: come back after ``retry_after`` seconds."""

    status_code = 429
    code = "over_capacity"


# -- errors ---------------------------------------------------------------------------------------


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status)


async def _lorekeeper_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LorekeeperError)
    response = JSONResponse(exc.to_dict(), status_code=exc.status_code)
    if isinstance(exc, TooMany):
        response.headers["Retry-After"] = str(exc.context.get("retry_after", 1))
    if isinstance(exc, Unauthorized):
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _problems(status: int, code: str, errors: Sequence[Any], default_where: str) -> JSONResponse:
    """A validation failure as the error body: the first problem as the message, up to 20 listed."""
    problems = [
        {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")} for e in errors[:20]
    ]
    first = problems[0] if problems else {"where": default_where, "problem": "invalid"}
    return _error(status, code, f"{first['where']}: {first['problem']}", problems=problems)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return _problems(422, "validation_failed", exc.errors(), "body")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {
        404: "not_found",
        405: "method_not_allowed",
        401: "unauthorized",
        403: "forbidden",
        413: "request_too_large",
    }
    response = _error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))
    response.headers.update(exc.headers or {})  # 405's Allow, 401's WWW-Authenticate
    return response


async def _data_error(request: Request, exc: Exception) -> Response:
    """A model built from the caller's data refused it (a rule beyond the request body's schema)."""
    assert isinstance(exc, ValidationError)
    return _problems(400, "invalid_request", exc.errors(), exc.title)


class ErrorBody(BaseModel):
    """The JSON body of every error answer."""

    model_config = ConfigDict(extra="allow")

    error: str = Field(description="A stable code: not_found, forbidden, store_unavailable, …")
    message: str = Field(description="What went wrong, for a person.")


_ERROR_DESCRIPTIONS = {
    400: "Malformed input, or a domain rule it breaks",
    401: "No API key, or an unknown or revoked one",
    403: "The key may not use this campaign or operation",
    404: "No such record (or one the key may not see)",
    409: "Clashes with what is stored (a concurrent change, an existing import)",
    413: "The request body is over the size limit",
    429: "Over capacity; retry after the Retry-After seconds",
    503: "A store or engine is unavailable; retrying later may succeed",
}
_CAPACITY_ROUTES = ("/turns", "/takes", "/v1/chat/completions")


def _error_statuses(path: str, method: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer, from what it is: its path ids, body and method.

    Every route but the two ops routes needs a key (401, 403), reads a store or an engine (503) and
    checks its input (400); the rest follows from the route's shape.
    """
    if path == "/metrics":
        return []
    if path == "/health":
        return [503]
    statuses = {400, 401, 403, 503}
    if "{" in path:
        statuses.add(404)
    writes = method in ("post", "put", "patch", "delete")
    if writes or "requestBody" in operation:
        statuses.add(413)
    if writes and path.startswith("/api/v1/") and not path.endswith("/search"):
        statuses.add(409)
    if writes and path.endswith(_CAPACITY_ROUTES):
        statuses.add(429)
    return sorted(statuses)


def _declare_errors(app: FastAPI) -> None:
    """Make the OpenAPI list each route's error statuses with :class:`ErrorBody`, so a generated client
    knows them (FastAPI itself declares only 422)."""

    build = app.openapi  # FastAPI's own: it caches the schema in app.openapi_schema

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorBody"] = ErrorBody.model_json_schema()
        body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                for status in _error_statuses(path, method, operation):
                    responses.setdefault(str(status), {"description": _ERROR_DESCRIPTIONS[status], "content": body})
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _unexpected(request: Request, exc: Exception) -> Response:
    request_id = uuid.uuid4().hex[:12]
    log.error("api_unexpected_error", request_id=request_id, path=request.url.path, error=repr(exc), exc_info=exc)
    return _error(500, "internal", f"the server failed (request {request_id}); the details are in its log")


# -- middleware (plain ASGI: streaming responses pass through untouched) ------------------------------


class BodyLimit:
    """413 for a body over the limit, whether it declares its length or streams it."""

    def __init__(self, app: ASGIApp, *, limit: int, upload_limit: int, upload_paths: tuple[str, ...]) -> None:
        self.app = app
        self.limit = limit
        self.upload_limit = upload_limit
        self.upload_paths = upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.upload_limit if path.endswith(self.upload_paths) else self.limit
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _error(413, "request_too_large", f"the body is over {limit} bytes")(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # an HTTPException: FastAPI re-raises it while reading a body (anything else becomes 400)
                    raise HTTPException(413, f"the body is over {limit} bytes")
            return message

        await self.app(scope, counted, send)


class Measured:
    """Counts and times requests by route template (never by raw path: ids would explode the labels)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            HTTP_REQUESTS.labels(route=route, status=str(status)).inc()
            HTTP_DURATION.labels(route=route).observe(time.perf_counter() - started)


# -- dependencies ---------------------------------------------------------------------------------


def _services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(_services)]


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def principal(request: Request, services: ServicesDep) -> Principal:
    """The caller; open (admin) only on a loopback API with no keys."""
    return await services.authenticate(bearer(request))


PrincipalDep = Annotated[Principal, Depends(principal)]


async def admin(caller: PrincipalDep) -> Principal:
    caller.require_admin()
    return caller


AdminDep = Annotated[Principal, Depends(admin)]


async def _turn_in(services: Services, caller: Principal, campaign_id: str, turn_id: str) -> Turn:
    caller.require_campaign(campaign_id)
    return await services.turn_in(campaign_id, turn_id)  # a turn of the campaign: the campaign exists


# -- bodies the routes answer with -------------------------------------------------------------


class SearchResponse(BaseModel):
    query: str
    hits: list[SearchHit]
    took_ms: float


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(pattern="^(system|user|assistant|developer|tool)$")
    content: str = Field(max_length=200_000)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=32_768)
    temperature: float = Field(default=0.8, ge=0, le=2)
    seed: int | None = None
    stream: bool = False


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


# -- the routers ----------------------------------------------------------------------------------


def story_router() -> APIRouter:
    r = APIRouter(prefix=API, tags=["story"])

    @r.post("/worlds", status_code=201, response_model=World)
    async def create_world(s: ServicesDep, _: AdminDep, body: WorldCreate) -> World:
        return await s.run(s.story.create_world, body.name, description=body.description, axioms=body.axioms)  # type: ignore[no-any-return]

    @r.get("/worlds/{world_id}", response_model=World)
    async def get_world(s: ServicesDep, _: AdminDep, world_id: str) -> World:
        return await s.run(s.story.get_world, world_id)  # type: ignore[no-any-return]

    @r.post("/campaigns", status_code=201, response_model=Campaign)
    async def create_campaign(s: ServicesDep, _: AdminDep, body: CampaignCreate) -> Campaign:
        return await s.run(  # type: ignore[no-any-return]
            s.story.create_campaign, body.world_id, body.name, body.profile, narrator_rules=body.narrator_rules
        )

    @r.get("/campaigns", response_model=list[Campaign])
    async def list_campaigns(s: ServicesDep, caller: PrincipalDep, world_id: str | None = None) -> list[Campaign]:
        campaigns: list[Campaign] = await s.run(s.story.list_campaigns, world_id)
        return [c for c in campaigns if caller.admin or c.id in caller.campaigns]

    @r.get("/campaigns/{campaign_id}", response_model=Campaign)
    async def get_campaign(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.get_campaign, campaign_id)  # type: ignore[no-any-return]

    # turns and takes --------------------------------------------------------------------------

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
        await _turn_in(s, caller, campaign_id, turn_id)
        return await _narrated(s, lambda: s.flow.retake(campaign_id, turn_id), stream=bool(body and body.stream))

    @r.get("/campaigns/{campaign_id}/turns/{turn_id}/takes", response_model=list[Take])
    async def takes(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str) -> list[Take]:
        await _turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.takes, turn_id)  # type: ignore[no-any-return]

    @r.put("/campaigns/{campaign_id}/turns/{turn_id}/takes/{take_id}/select", response_model=Take)
    async def select_take(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str, take_id: str) -> Take:
        await _turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.select_take, turn_id, take_id)  # type: ignore[no-any-return]

    @r.get("/campaigns/{campaign_id}/turns/{turn_id}/provenance", response_model=TurnProvenance)
    async def provenance(s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str) -> TurnProvenance:
        await _turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.provenance, turn_id)  # type: ignore[no-any-return]

    # the head, branches and checkpoints ---------------------------------------------------------

    @r.post("/campaigns/{campaign_id}/undo", response_model=Campaign)
    async def undo(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.undo, campaign_id)  # type: ignore[no-any-return]

    @r.post("/campaigns/{campaign_id}/redo", response_model=Campaign)
    async def redo(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Campaign:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.redo, campaign_id)  # type: ignore[no-any-return]

    @r.get("/campaigns/{campaign_id}/branches", response_model=list[Branch])
    async def branches(s: ServicesDep, caller: PrincipalDep, campaign_id: str, include_archived: bool = False) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.branches, campaign_id, include_archived=include_archived)

    @r.post("/campaigns/{campaign_id}/branches", status_code=201, response_model=Branch)
    async def create_branch(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: BranchCreate) -> Any:
        await _turn_in(s, caller, campaign_id, body.from_turn_id)
        return await s.run(s.story.create_branch, campaign_id, body.from_turn_id, name=body.name)

    @r.post("/campaigns/{campaign_id}/branches/{branch_id}/switch", response_model=Campaign)
    async def switch_branch(s: ServicesDep, caller: PrincipalDep, campaign_id: str, branch_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.switch_branch, campaign_id, branch_id)

    @r.post("/campaigns/{campaign_id}/checkpoints", status_code=201, response_model=Checkpoint)
    async def create_checkpoint(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: CheckpointCreate) -> Any:
        caller.require_campaign(campaign_id)
        if body.turn_id is not None:
            await _turn_in(s, caller, campaign_id, body.turn_id)
        return await s.run(
            s.story.create_checkpoint,
            campaign_id,
            body.name,
            turn_id=body.turn_id,
            kind=body.kind,
            description=body.description,
        )

    @r.get("/campaigns/{campaign_id}/checkpoints", response_model=list[Checkpoint])
    async def checkpoints(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.checkpoints, campaign_id)

    @r.post("/campaigns/{campaign_id}/checkpoints/{checkpoint_id}/restore", response_model=Campaign)
    async def restore(s: ServicesDep, caller: PrincipalDep, campaign_id: str, checkpoint_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.restore_checkpoint, campaign_id, checkpoint_id)

    @r.get("/campaigns/{campaign_id}/state", response_model=WorldStateView)
    async def state(
        s: ServicesDep, caller: PrincipalDep, campaign_id: str, turn_id: str | None = None, branch_id: str | None = None
    ) -> Any:
        caller.require_campaign(campaign_id)
        if turn_id is not None:
            await _turn_in(s, caller, campaign_id, turn_id)
        return await s.run(s.story.state, campaign_id, turn_id=turn_id, branch_id=branch_id)

    # scenes, proposals, the gate ----------------------------------------------------------------

    @r.post("/campaigns/{campaign_id}/scenes", status_code=201, response_model=Scene)
    async def start_scene(s: ServicesDep, caller: PrincipalDep, campaign_id: str, body: SceneCreate) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(
            s.story.start_scene,
            campaign_id,
            title=body.title,
            location_entity_id=body.location_entity_id,
            participant_entity_ids=body.participant_entity_ids,
        )

    @r.get("/campaigns/{campaign_id}/scenes", response_model=list[Scene])
    async def scenes(s: ServicesDep, caller: PrincipalDep, campaign_id: str) -> Any:
        caller.require_campaign(campaign_id)
        return await s.run(s.story.scenes, campaign_id)

    @r.get("/scenes/{scene_id}", response_model=Scene)
    async def get_scene(s: ServicesDep, caller: PrincipalDep, scene_id: str) -> Scene:
        return await s.scene_for(caller, scene_id)

    @r.post("/scenes/{scene_id}/proposals", status_code=201, response_model=ProposedChange)
    async def propose(s: ServicesDep, caller: PrincipalDep, scene_id: str, body: ProposalCreate) -> Any:
        await s.scene_for(caller, scene_id)
        caller.require_authority(body.authority)
        fields = body.model_dump(exclude_none=True)
        fields.setdefault("proposed_by", caller.key_id)
        return await s.run(s.story.propose, scene_id, **fields)

    @r.get("/scenes/{scene_id}/proposals", response_model=list[ProposedChange])
    async def proposals(
        s: ServicesDep, caller: PrincipalDep, scene_id: str, status: ProposalStatus | None = None
    ) -> Any:
        await s.scene_for(caller, scene_id)
        return await s.run(s.story.proposals, scene_id, status)

    @r.post("/scenes/{scene_id}/commit", response_model=GateReport)
    async def commit(s: ServicesDep, caller: PrincipalDep, scene_id: str, body: CommitRequest) -> GateReport:
        await s.scene_for(caller, scene_id)
        report: GateReport = await s.run(s.gate.commit, scene_id, body.proposal_ids)
        _count(report)
        return report

    @r.post("/scenes/{scene_id}/end", response_model=GateReport)
    async def end_scene(
        s: ServicesDep, caller: PrincipalDep, scene_id: str, body: EndSceneRequest | None = None
    ) -> Any:
        await s.scene_for(caller, scene_id)
        report: GateReport = await s.run(s.gate.end_scene, scene_id, summary=body.summary if body else None)
        _count(report)
        return report

    @r.post("/facts/{fact_id}/retcon")
    async def retcon(s: ServicesDep, caller: PrincipalDep, fact_id: str, body: RetconRequest) -> dict[str, Any]:
        caller.require_campaign(body.campaign_id)
        caller.require_authority(body.authority)
        if body.authority.value not in ("gm", "source"):
            raise InvalidRequest("story", "a retcon is declared with gm (or source) authority")
        new_id = await s.run(
            s.story.retcon,
            body.campaign_id,
            fact_id,
            reason=body.reason,
            value=body.value,
            object_entity_id=body.object_entity_id,
            authority=body.authority,
        )
        return {"fact_id": fact_id, "status": "retconned", "replaced_by": new_id}

    # export and import ------------------------------------------------------------------------

    @r.get("/campaigns/{campaign_id}/export")
    async def export(
        s: ServicesDep,
        caller: PrincipalDep,
        campaign_id: str,
        include_knowledge: Annotated[
            bool,
            Query(description="Also carry the library passages the campaign cites (its provenance), their "
                  "items and libraries, so the bundle is whole in a store that never ingested them."),
        ] = False,
    ) -> Response:
        import io

        caller.require_campaign(campaign_id)
        buffer = io.BytesIO()
        await s.run(s.story.export_campaign, campaign_id, buffer, include_knowledge=include_knowledge)
        return Response(
            buffer.getvalue(),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{campaign_id}.lorekeeper.zip"'},
        )

    @r.post("/campaigns/import", status_code=201, response_model=Campaign)
    async def import_campaign(s: ServicesDep, _: AdminDep, request: Request) -> Any:
        data = await request.body()
        if not data:
            raise InvalidRequest("story", "send the bundle (a .zip from the export route) as the request body")
        return await s.run(s.story.import_campaign, data)

    return r


def _count(report: GateReport) -> None:
    for decision in report.decisions:
        GATE_DECISIONS.labels(
            decision=decision.status.value, authority=decision.authority.value if decision.authority else "unknown"
        ).inc()


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


def search_router() -> APIRouter:
    r = APIRouter(prefix=API, tags=["search"])

    @r.post("/search", response_model=SearchResponse)
    async def search(s: ServicesDep, caller: PrincipalDep, body: SearchRequest) -> SearchResponse:
        for campaign_id in body.filters.campaign or []:
            caller.require_campaign(campaign_id)
        if s.search is None:
            raise NotFound("search", "search is not configured on this server")
        started = time.perf_counter()
        hits = await s.run(s.search.search, body.query, filters=body.filters, limit=body.limit, rerank=body.rerank)
        return SearchResponse(query=body.query, hits=hits, took_ms=round((time.perf_counter() - started) * 1000, 2))

    return r


def openai_router() -> APIRouter:
    """``/v1/chat/completions`` for clients that only want the model (any valid key)."""
    r = APIRouter(tags=["openai"])

    @r.post("/v1/chat/completions")
    async def chat(s: ServicesDep, _: PrincipalDep, body: ChatRequest) -> Response:
        engine = s.narrator.default
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        max_tokens = body.max_completion_tokens or body.max_tokens or s.serve.narrator_max_tokens
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        pieces = engine.stream(messages, max_tokens=max_tokens, temperature=body.temperature, seed=body.seed)
        if body.stream:

            async def chunks() -> AsyncIterator[bytes]:
                def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                    doc = {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": engine.model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    return f"data: {json.dumps(doc)}\n\n".encode()

                yield chunk({"role": "assistant"})
                try:
                    async for piece in pieces:
                        yield chunk({"content": piece})
                except LorekeeperError as exc:
                    yield f"data: {json.dumps(exc.to_dict())}\n\n".encode()
                yield chunk({}, "stop")
                yield b"data: [DONE]\n\n"

            return StreamingResponse(chunks(), media_type="text/event-stream")
        text = "".join([piece async for piece in pieces])
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": engine.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": _usage(messages, text),
            }
        )

    @r.get("/v1/models")
    async def models(s: ServicesDep, _: PrincipalDep) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": s.narrator.default.model, "object": "model", "owned_by": "lorekeeper"}],
        }

    return r


def _usage(messages: list[dict[str, str]], text: str) -> dict[str, int]:
    """Token counts by estimate (about four characters a token): engines stream text, not token ids."""
    prompt = sum(estimate_tokens(m["content"]) for m in messages)
    completion = estimate_tokens(text)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def ops_router() -> APIRouter:
    r = APIRouter(tags=["ops"])

    @r.get("/health")
    async def health(s: ServicesDep) -> Response:
        checks = await s.health()
        healthy = all(v == "ok" for v in checks.values())
        try:
            is_open = await s.is_open()
        except LorekeeperError:
            is_open = False  # the graph is down (the checks say so): report closed, never open
        body = {"status": "ok" if healthy else "degraded", "checks": checks, "open": is_open}
        return JSONResponse(body, status_code=200 if healthy else 503)

    @r.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return r


def load_plugin(spec: str) -> Plugin:
    """``"package.module:function"`` → the function (how the ingest routes join without an import)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise InvalidRequest("serve", f"a plugin is 'module:function', not {spec!r}")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def create_app(
    services: Services,
    *,
    plugins: Iterable[Plugin | str] = (),
    mcp: bool = True,
    lifespan_hooks: Iterable[Callable[[FastAPI], Awaitable[None]]] = (),
) -> FastAPI:
    """The FastAPI app over ``services`` (opened and closed by the caller)."""
    extra_lifespans: list[Any] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Store calls run in threads and mostly wait on the stores: the default pool (cores + 4) would
        # queue a busy table's reads behind another's.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=services.serve.max_concurrent_turns + 16, thread_name_prefix="api")
        )
        async with AsyncExitStack() as stack:
            for enter in extra_lifespans:
                await stack.enter_async_context(enter(app))
            for hook in lifespan_hooks:
                await hook(app)
            yield

    app = FastAPI(
        title="Lorekeeper",
        version="0.1.0",
        description="AI-narrated tabletop play: knowledge search, a canon graph, branching campaigns and a narrator.",
        lifespan=lifespan,
    )
    app.state.services = services
    app.add_exception_handler(LorekeeperError, _lorekeeper_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ValidationError, _data_error)
    app.add_exception_handler(Exception, _unexpected)
    app.include_router(story_router())
    app.include_router(search_router())
    app.include_router(openai_router())
    app.include_router(ops_router())
    for plugin in plugins:
        mount = load_plugin(plugin) if isinstance(plugin, str) else plugin
        plugin_lifespan = mount(app, Depends(admin))
        if plugin_lifespan is not None:
            extra_lifespans.append(plugin_lifespan)
    if mcp:
        from serve.mcp import mount_mcp

        extra_lifespans.append(mount_mcp(app, services))
    _declare_errors(app)
    app.add_middleware(
        BodyLimit,
        limit=services.serve.max_request_bytes,
        upload_limit=services.serve.max_upload_bytes,
        upload_paths=("/campaigns/import", "/library/ingest"),
    )
    app.add_middleware(Measured)
    return app


def build_app(args: dict[str, Any] | None = None) -> Any:
    """The Ray Serve application (``serve run serve.app:build_app``); see :mod:`serve.deployments`."""
    from serve.deployments import build_application

    return build_application(args or {})
