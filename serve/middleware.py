"""The API's ASGI middleware, plain ASGI so that streaming responses pass through untouched."""

from __future__ import annotations

import time

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve.errors import error_response
from serve.metrics import HTTP_DURATION, HTTP_REQUESTS


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
            await error_response(413, "request_too_large", f"the body is over {limit} bytes")(scope, receive, send)
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
