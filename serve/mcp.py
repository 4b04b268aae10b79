"""The MCP server at ``/mcp`` (streamable HTTP, MCP SDK): a tool for every operation of the API.

The tools are generated from the operation table (:data:`serve.operations.OPERATIONS`): each
operation's ids and request fields are its tool's arguments, and the tool calls the same
:func:`~serve.operations.invoke` as the REST route, so its access rule, defaults and errors are the
REST door's (an error is the tool's error message ``code: message``, with REST's code). The few REST
routes without a tool are listed in :data:`serve.operations.REST_ONLY_ROUTES` with their reasons.
Resources: ``lorekeeper://library-types`` (each type's chunking defaults) and ``lorekeeper://libraries``
(the ``list_libraries`` answer, with counts). ``/mcp/health`` beside the endpoint answers the health
check without a key, like ``/health``.

Auth is the REST API's: the same ``Authorization: Bearer KEY``, checked before a request reaches the
MCP session; with ``LOREKEEPER_MCP_REQUIRE_KEY=false`` a caller without a key is served as a key of no
campaign (the shared knowledge: search, library, health). MCP is mounted at ``/mcp`` on the API's
port, or served on a port of its own (``LOREKEEPER_MCP_PORT``, :func:`create_mcp_app`).
Every call is logged at debug level (``mcp_tool_called`` with its arguments,
``mcp_tool_response`` with sizes and durations; docs/ingest-events.md) and counted
(``lorekeeper_mcp_tool_invocations_total{tool,status}``, ``lorekeeper_mcp_tool_duration_seconds{tool}``).
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import structlog
from fastapi import FastAPI
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.utilities.func_metadata import FuncMetadata
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from starlette.types import ASGIApp, Receive, Scope, Send

from schemas.errors import LorekeeperError
from schemas.knowledge import CHUNKING_DEFAULTS, LibraryType
from schemas.text import RecordId
from serve.auth import Principal, Unauthorized
from serve.metrics import MCP_CALLS, MCP_DURATION
from serve.operations import OPERATIONS, Empty, Operation, invoke
from serve.services import Services

log = structlog.get_logger(__name__)

T = TypeVar("T")
_PRINCIPAL = "lorekeeper.principal"

KEYLESS = Principal(key_id="keyless")
"""An MCP caller without a key where ``LOREKEEPER_MCP_REQUIRE_KEY`` is false: a key of no campaign."""


def _caller(ctx: Context[Any, Any, Any]) -> Principal:
    request = ctx.request_context.request
    principal = getattr(request, "scope", {}).get(_PRINCIPAL) if request is not None else None
    if principal is None:
        raise Unauthorized("send an API key as 'Authorization: Bearer KEY'")
    return principal  # type: ignore[no-any-return]


_ARGUMENT_PREVIEW = 200


def _logged(value: Any) -> Any:
    """An argument as ``mcp_tool_called`` logs it: a long text (an imported bundle) cut to its start."""
    if isinstance(value, str) and len(value) > _ARGUMENT_PREVIEW:
        return f"{value[:_ARGUMENT_PREVIEW]}… ({len(value)} characters)"
    if isinstance(value, dict):
        return {key: _logged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_logged(item) for item in value[:50]]
    return value


def _items(result: object) -> int:
    """How many records a tool's answer holds: a list's length, or the longest list an object carries."""
    try:
        data = json.loads(result) if isinstance(result, str) else result
    except ValueError:
        return 1
    if isinstance(data, list):
        return len(data)
    if isinstance(data, dict):
        return max((len(v) for v in data.values() if isinstance(v, list)), default=1)
    return 1


def _tool(name: str) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    """Log, time and count a tool; turn a Lorekeeper error into the tool's error message.

    ``mcp_tool_called`` carries every argument (secrets masked by the log configuration), and what the
    tool's search logs (``mcp_search_…``, ``mcp_graph_…``) carries the same ``mcp_call_id``;
    ``mcp_tool_response`` the answer's size in bytes and records, or the error's code, and the time.
    """

    def wrap(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> T:
            started = time.perf_counter()
            arguments = kwargs.get("arguments") or {}
            with structlog.contextvars.bound_contextvars(mcp_call_id=uuid.uuid4().hex[:16]):
                log.debug("mcp_tool_called", tool=name, arguments=_logged(arguments))
                status, result, size, items = "ok", None, 0, 0
                try:
                    result = await fn(*args, **kwargs)
                    size = len(result) if isinstance(result, str) else len(json.dumps(result, default=str))
                    items = _items(result)
                except LorekeeperError as exc:
                    status = exc.code
                    raise ValueError(f"{exc.code}: {exc.client_message}") from None
                except ValidationError as exc:  # the arguments broke the request model: as REST's 422
                    status = "validation_failed"
                    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:20])
                    raise ValueError(f"validation_failed: {problems}") from None
                except Exception:
                    status = "error"
                    raise
                finally:
                    elapsed = time.perf_counter() - started
                    MCP_CALLS.labels(tool=name, status=status).inc()
                    MCP_DURATION.labels(tool=name).observe(elapsed)
                    log.debug(
                        "mcp_tool_response",
                        tool=name,
                        status=status,
                        bytes=size,
                        items=items,
                        duration_ms=round(elapsed * 1000, 2),
                    )
            return result  # type: ignore[return-value]  # set unless the call raised

        return call

    return wrap


def build_mcp(services: Services, *, protect_hosts: bool) -> FastMCP[Any]:
    """The MCP server over ``services`` (its HTTP app is mounted by :func:`mount_mcp`)."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=protect_hosts,
        allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )
    server: FastMCP[Any] = FastMCP(
        "lorekeeper",
        instructions=(
            "Lorekeeper: search ingested rulebooks and lore (with citations), run a campaign's table (turns, "
            "scenes and the gate that makes their proposals canon, undo, branches, checkpoints, retcons, keys), "
            "read its canon as of any turn and recall what happened in it by meaning."
        ),
        stateless_http=True,
        json_response=True,
        streamable_http_path="/mcp",
        transport_security=security,
    )
    for op in OPERATIONS.values():
        if op.mcp:
            _add_tool(server, services, op)
    _resources(server, services)
    return server


class _Verbatim(FuncMetadata):
    """Hands a tool its arguments as sent: the operation's request model validates them, as REST's body is
    (the SDK's own check would drop unknown arguments without a word and answer in its own words)."""

    async def call_fn_with_arg_validation(
        self,
        fn: Callable[..., Any],
        fn_is_async: bool,
        arguments_to_validate: dict[str, Any],
        arguments_to_pass_directly: dict[str, Any] | None,
    ) -> Any:
        return await fn(arguments=dict(arguments_to_validate or {}), **(arguments_to_pass_directly or {}))


def _arguments(op: Operation, arguments: dict[str, Any]) -> tuple[dict[str, str], BaseModel]:
    """The ids and the request model of ``op`` from a tool call's arguments.

    Raises:
        ValidationError: an id missing or not a string, an unknown argument, or a field the model refuses.
    """
    fields: dict[str, Any] = {name: (RecordId, ...) for name in op.ids}
    ids_model = create_model(f"{op.name}_ids", __config__=ConfigDict(extra="ignore"), **fields)
    ids = ids_model.model_validate({k: v for k, v in arguments.items() if k in op.ids}).model_dump()
    if any(name not in arguments for name in op.ids):  # report a missing id with the rest of the request
        ids_model.model_validate(arguments)
    body = op.body.model_validate({k: v for k, v in arguments.items() if k not in op.ids})
    return ids, body


def _add_tool(server: FastMCP[Any], services: Services, op: Operation) -> None:
    """The operation as a tool: its ids and its request model's fields are the tool's arguments, and the
    tool's input schema is theirs, so a client sees the bounds that REST's schema states."""
    clash = set(op.ids) & set(op.body.model_fields)
    assert not clash, f"{op.name}: ids and request fields share names {clash}"

    @_tool(op.name)
    async def call(arguments: dict[str, Any], ctx: Context[Any, Any, Any]) -> str:
        ids, body = _arguments(op, arguments)
        result = await invoke(op, services, _caller(ctx), ids, body)
        return json.dumps(TypeAdapter(op.output).dump_python(result, mode="json"))

    call.__name__ = op.name
    server.add_tool(call, name=op.name, description=op.handler.__doc__ or op.summary, structured_output=False)
    tool = server._tool_manager.get_tool(op.name)
    assert tool is not None
    tool.fn_metadata = _Verbatim(**{name: getattr(tool.fn_metadata, name) for name in FuncMetadata.model_fields})
    fields: dict[str, Any] = {name: (RecordId, ...) for name in op.ids}
    fields.update({name: (f.annotation, f) for name, f in op.body.model_fields.items()})
    config = ConfigDict(extra="forbid")
    tool.parameters = create_model(f"{op.name}_arguments", __config__=config, **fields).model_json_schema()


def _resources(server: FastMCP[Any], services: Services) -> None:
    """The library types with their chunking defaults, and the libraries."""

    @server.resource("lorekeeper://library-types", mime_type="application/json")
    def library_types() -> str:
        """Library types and the chunking defaults each carries (a library may override them)."""
        return json.dumps({t.value: CHUNKING_DEFAULTS[t].model_dump(mode="json") for t in LibraryType})

    @server.resource("lorekeeper://libraries", mime_type="application/json")
    async def libraries() -> str:
        """The libraries of this server, with their item, chunk and concept counts (as ``list_libraries``)."""
        op = OPERATIONS["list_libraries"]  # the shared knowledge: the caller passed the door's key check
        found = await invoke(op, services, KEYLESS, {}, Empty())
        return json.dumps(TypeAdapter(op.output).dump_python(found, mode="json"))


class _Authenticated:
    """Checks the bearer key before the MCP session sees the request, and passes the principal on."""

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
        try:
            principal = await self._principal(key or None)
        except LorekeeperError as exc:
            from fastapi.responses import JSONResponse

            response = JSONResponse(exc.to_dict(), status_code=exc.status_code, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope[_PRINCIPAL] = principal
        await self.app(scope, receive, send)

    async def _principal(self, key: str | None) -> Principal:
        try:
            return await self.services.authenticate(key)
        except Unauthorized:
            if key is None and not self.services.serve.mcp_require_key:
                return KEYLESS  # no key, and none required: the shared knowledge only
            raise


def mount_mcp(app: FastAPI, services: Services) -> Callable[[FastAPI], Any]:
    """Mount the MCP server at ``/mcp`` and its health check at ``/mcp/health``; returns the lifespan that
    runs its session manager."""
    from fastapi.responses import JSONResponse
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def health(_: Request) -> Response:
        """The health check (no key), as ``/health``: 503 when any part is down."""
        found = await services.health()
        return JSONResponse(found.model_dump(mode="json"), status_code=200 if found.status == "ok" else 503)

    server = build_mcp(services, protect_hosts=services.open)
    # A route, not a mount: "/mcp" itself answers (a mount would redirect it to "/mcp/").
    endpoint = _Authenticated(server.streamable_http_app(), services)
    app.router.routes.append(Route("/mcp/health", endpoint=health, methods=["GET"]))
    app.router.routes.append(Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"]))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return lifespan


def create_mcp_app(services: Services) -> FastAPI:
    """MCP on a port of its own (``LOREKEEPER_MCP_PORT``): ``/mcp`` and ``/mcp/health`` over the API's services
    and keys; the API then leaves ``/mcp`` out (:func:`serve.app.create_app`)."""
    app = FastAPI(title="Lorekeeper MCP", openapi_url=None, docs_url=None, redoc_url=None)
    app.router.lifespan_context = mount_mcp(app, services)
    return app
