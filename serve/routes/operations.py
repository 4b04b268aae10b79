"""The REST door of every operation, generated from the table (:data:`serve.operations.OPERATIONS`).

Each route is an adapter: the operation's ids from the path, its request model from the JSON body (a
write) or the query string (a read), the caller from ``Authorization: Bearer KEY``, then
:func:`serve.operations.invoke`. Two answers are shaped for HTTP: a campaign bundle is the zip itself,
and an operation with a stream form (a turn, a retake) answers server-sent events when its request
says ``"stream": true``.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from schemas.errors import InvalidRequest, LorekeeperError
from schemas.serving import CampaignBundle
from schemas.text import RecordId
from serve.deps import API, principal
from serve.operations import OPERATIONS, Empty, Operation, invoke, stream

log = structlog.get_logger(__name__)


def router() -> APIRouter:
    """A route for every operation with a REST door."""
    r = APIRouter(prefix=API)
    for op in OPERATIONS.values():
        if op.rest is not None:
            r.add_api_route(
                op.rest.path,
                _endpoint(op),
                methods=[op.rest.method],
                status_code=op.rest.status,
                response_model=None if op.rest.raw_body else op.output,
                name=op.name,
                summary=op.summary,
                tags=[op.family],
            )
    return r


def _request_parameter(op: Operation) -> inspect.Parameter | None:
    """The request model as FastAPI reads it: a JSON body for a write, the query string for a read."""
    assert op.rest is not None
    if op.body is Empty or op.rest.raw_body:
        return None
    kind = inspect.Parameter.KEYWORD_ONLY
    if op.rest.method == "GET":
        return inspect.Parameter("body", kind, annotation=Annotated[op.body, Query()])
    if op.optional_body:
        return inspect.Parameter("body", kind, annotation=Annotated[op.body | None, Body()], default=None)
    return inspect.Parameter("body", kind, annotation=Annotated[op.body, Body()])


def _endpoint(op: Operation) -> Any:
    async def endpoint(request: Request, caller: Any, **params: Any) -> Any:
        services = request.app.state.services
        ids = {name: params[name] for name in op.ids}
        body = params.get("body")
        if body is None:
            body = await _raw(op, request) if op.rest and op.rest.raw_body else op.body()
        if op.stream is not None and getattr(body, "stream", False):
            events = await stream(op, services, caller, ids, body)
            return StreamingResponse(
                _sse(events), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        result = await invoke(op, services, caller, ids, body)
        if isinstance(result, CampaignBundle):
            disposition = f'attachment; filename="{result.filename}"'
            return Response(result.data, media_type=result.media_type, headers={"Content-Disposition": disposition})
        return result

    kind = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter("request", kind, annotation=Request),
        inspect.Parameter("caller", kind, annotation=Annotated[Any, Depends(principal)]),
        *(inspect.Parameter(name, kind, annotation=Annotated[RecordId, Path()]) for name in op.ids),
    ]
    request_parameter = _request_parameter(op)
    if request_parameter is not None:
        parameters.append(request_parameter)
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    endpoint.__name__ = op.name
    endpoint.__doc__ = op.handler.__doc__
    return endpoint


async def _raw(op: Operation, request: Request) -> Any:
    data = await request.body()
    if not data:
        raise InvalidRequest("serve", f"send the upload as the request body ({op.summary.lower()})")
    return op.body(data=data)


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Server-sent events; an error after the status was sent is said in the stream."""
    try:
        async for event in events:
            yield _event(event.pop("event"), event)
    except LorekeeperError as exc:
        yield _event("error", exc.to_dict())
    except Exception as exc:  # the stream has started: the status is sent, so say it in the stream
        request_id = uuid.uuid4().hex[:12]
        log.error("turn_stream_failed", request_id=request_id, error=repr(exc), exc_info=exc)
        yield _event("error", {"error": "internal", "message": f"the turn failed (request {request_id})"})


def _event(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()
