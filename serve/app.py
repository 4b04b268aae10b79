"""The HTTP API's app: the routes of :mod:`serve.routes` over :class:`~serve.services.Services`, with auth,
error answers, size limits and metrics, the ingest routes as a plugin, and the MCP server at ``/mcp``.

:func:`create_app` builds it; ``lorekeeper serve --direct`` serves it with uvicorn alone, and the Ray
Serve ingress (:mod:`serve.deployments`, whose ``build_app`` is the Ray Serve import path) serves the
very same app on its replicas. This module never imports the Ray wiring.

Rules every route follows:

* **who**: ``Authorization: Bearer KEY``; each operation's access rule (:mod:`serve.operations`) says
  which role it needs on which campaign (a scene, turn or fact is reached through its campaign); an
  admin key reaches everything; open only on loopback without keys;
* **errors**: a JSON body ``{"error": code, "message": ...}`` with the status of the error class
  (:mod:`serve.errors`); unexpected failures are logged with a request id and answered 500 without a
  stack trace;
* **size**: bodies over ``LOREKEEPER_MAX_REQUEST_BYTES`` (uploads: ``…_MAX_UPLOAD_BYTES``) get 413;
* **capacity**: turns beyond ``LOREKEEPER_MAX_CONCURRENT_TURNS`` on a replica get 429 + Retry-After.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from schemas.errors import InvalidRequest
from serve.deps import admin
from serve.errors import declare_errors, install_error_handlers
from serve.middleware import BodyLimit, Measured
from serve.routes import routers
from serve.services import Services

Plugin = Callable[[FastAPI, Any, Any], Any]
"""An extra set of routes: ``plugin(app, admin_dependency, settings)`` adds them on the stores of the
app's :class:`~schemas.settings.Settings`, and may return a lifespan (``lifespan(app)`` → an async
context manager) that the app enters at start-up (the ingest API does)."""


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
    install_error_handlers(app)
    for router in routers():
        app.include_router(router)
    for plugin in plugins:
        mount = load_plugin(plugin) if isinstance(plugin, str) else plugin
        plugin_lifespan = mount(app, Depends(admin), services.settings)
        if plugin_lifespan is not None:
            extra_lifespans.append(plugin_lifespan)
    if mcp and services.serve.mcp_port is None:  # else MCP has a port of its own (serve.mcp.create_mcp_app)
        from serve.mcp import mount_mcp

        extra_lifespans.append(mount_mcp(app, services))
    declare_errors(app)
    app.add_middleware(
        BodyLimit,
        limit=services.serve.max_request_bytes,
        upload_limit=services.serve.max_upload_bytes,
        upload_paths=("/campaigns/import", "/library/ingest", "/media"),  # media: JSON, base64, story-bounded
    )
    app.add_middleware(Measured)
    return app
