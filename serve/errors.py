"""How the HTTP API answers errors: one JSON body, the status of the error's class, declared in the OpenAPI.

Every error answer is ``{"error": code, "message": ...}`` (:class:`ErrorBody`): a
:class:`~schemas.errors.LorekeeperError` with its own status (a story's missing campaign is 404, a
clash 409, an unavailable store 503), a request that fails its schema 422 with the problems listed,
data a model refuses 400, and anything unexpected 500 with a request id and no stack trace (the
details go to the log). :func:`install_error_handlers` puts them on an app;
:func:`declare_errors` lists each route's error statuses in its OpenAPI schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.errors import LorekeeperError
from serve.auth import Unauthorized

log = structlog.get_logger(__name__)


class TooMany(LorekeeperError):
    """Over capacity: come back after ``retry_after`` seconds."""

    status_code = 429
    code = "over_capacity"


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
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
    problems = [{"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")} for e in errors[:20]]
    first = problems[0] if problems else {"where": default_where, "problem": "invalid"}
    return error_response(status, code, f"{first['where']}: {first['problem']}", problems=problems)


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
    code = codes.get(exc.status_code, "http_error")
    if exc.status_code == 404 and request.scope.get("endpoint") is None:
        # no route matched: a wrong path, which a client must not read as "no such record"
        code, detail = "no_such_route", f"no route {request.method} {request.url.path}"
        response = error_response(404, code, detail)
        response.headers.update(exc.headers or {})
        return response
    response = error_response(exc.status_code, code, str(exc.detail))
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
    501: "Not available on this server (e.g. recall without a memory index)",
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
    reads = path.endswith(("/search", "/recall"))  # POSTed queries: they change nothing
    if writes and path.startswith("/api/v1/") and not reads:
        statuses.add(409)
    if path.endswith("/recall"):
        statuses.add(501)
    if writes and path.endswith(_CAPACITY_ROUTES):
        statuses.add(429)
    return sorted(statuses)


def declare_errors(app: FastAPI) -> None:
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
    return error_response(500, "internal", f"the server failed (request {request_id}); the details are in its log")


def install_error_handlers(app: FastAPI) -> None:
    """Every error answered as an :class:`ErrorBody` with its status."""
    app.add_exception_handler(LorekeeperError, _lorekeeper_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ValidationError, _data_error)
    app.add_exception_handler(Exception, _unexpected)
