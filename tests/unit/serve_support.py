"""Helpers for the serving tests: the API on the embedded stores, with an engine bound like vLLM is."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from schemas.serving import ServeSettings


def extraction(*proposals: dict[str, Any]) -> str:
    """What an extractor model answers: typed proposals as JSON."""
    return json.dumps({"proposals": list(proposals)})


def new_character(name: str, confidence: float = 0.95) -> dict[str, Any]:
    return {"content": {"type": "entity", "kind": "character", "name": name}, "confidence": confidence, "quote": name}


@contextmanager
def api_services(
    serve: ServeSettings | None = None, *, answers: list[str] | None = None, delay_s: float = 0.0, **options: Any
) -> Iterator[Any]:
    """Services on this test's embedded stores with the echo engine in the narrator's place (``options`` go to
    :func:`~serve.services.open_services`, e.g. ``with_recall=False``)."""
    from narrator.engines import EchoEngine
    from schemas.settings import get_settings
    from serve.services import SingleEngine, check_binding, open_services

    serve = serve or ServeSettings(api_host="127.0.0.1")
    engine = EchoEngine("echo-narrator", structured_outputs=answers, delay_s=delay_s)
    with open_services(get_settings(), serve, narrator=SingleEngine(engine), **options) as services:
        services.open = check_binding(serve, services.keys)
        yield services


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs of a server-sent event stream."""
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines.get("event", "message"), json.loads(lines["data"])))
    return events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def on_local_ray(config: Any, settings: Any, serve_settings: Any, engines: Any = None) -> Iterator[str]:
    """The Ray Serve application of ``config`` (an ``AppConfig``) on a local Ray; yields its base URL.

    ``settings`` and ``serve_settings`` are bound into every replica (no replica reads the
    environment for them), and ``engines`` (an engine factory) when given; Ray and Serve stop when
    the block ends.
    """
    import os

    import ray
    from ray import serve

    from serve.deployments import build_application

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    ray.init(address="local", num_cpus=4, include_dashboard=False, configure_logging=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        bound = {"engines": engines} if engines is not None else {}
        app = build_application(config, settings, serve_settings, **bound)
        serve.run(app, name="lorekeeper", route_prefix="/", blocking=False)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
