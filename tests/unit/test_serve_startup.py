"""``serve --direct`` listens before its slow parts are loaded: ``/health`` lists what is still warming
(live, not yet ready) and turns ready once it is done; a part that fails to warm is logged and loads on
first use."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from serve.warming import Warming
from tests.unit.serve_support import api_services, free_port, running

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

ROOT = Path(__file__).resolve().parents[2]


def test_health_lists_what_is_warming_and_is_ready_once_it_is_done() -> None:
    from serve.app import create_app

    release = threading.Event()
    with api_services(with_recall=False) as services, running(create_app(services)) as url:
        services.warming.start("search", lambda: release.wait(30))
        warming = httpx.get(f"{url}/health", timeout=10)
        assert warming.status_code == 200  # live: it answers while the models load
        assert warming.json()["warming"] == ["search"] and warming.json()["ready"] is False
        release.set()
        assert services.warming.wait(10)
        ready = httpx.get(f"{url}/health", timeout=10).json()
        assert ready["warming"] == [] and ready["ready"] is True


def test_a_part_that_fails_to_warm_is_logged_and_no_longer_warming() -> None:
    warming = Warming()

    def broken() -> None:
        raise OSError("model folder unreadable")

    with capture_logs() as logs:
        warming.start("search", broken).join(10)
    assert warming.names() == [] and "model folder unreadable" in warming.failed()["search"]
    assert [entry["event"] for entry in logs] == ["serve_warm_failed"]


def _first_health(process: subprocess.Popen[str], url: str, deadline_s: float) -> tuple[float, dict[str, object]]:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        assert process.poll() is None, process.communicate()[0][-3000:]
        try:
            answer = httpx.get(f"{url}/health", timeout=5)
            return time.monotonic() - started, answer.json()
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"no /health answer within {deadline_s} s")


@pytest.mark.slow
def test_serve_direct_answers_health_while_the_search_models_warm(tmp_path: Path) -> None:
    """As a user runs it the first time: a real process on a fresh data folder and a user cache with no ONNX
    copy of the embedding model yet, so the search warm-up loads torch and exports the copy (seconds); the
    first answer comes before that, and the same server turns ready by itself. (With a copy kept by an
    earlier process the warm-up opens it without torch and is often done before the first answer.)"""
    port = free_port()
    env = {
        **os.environ,
        "LOREKEEPER_DATA_DIR": str(tmp_path / "data"),
        "LOREKEEPER_API_PORT": str(port),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # no kept ONNX copy: the warm-up takes seconds
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "lorekeeper.cli", "serve", "--direct"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        seconds, first = _first_health(process, url, 120)
        assert first["warming"] == ["search"] and first["ready"] is False, first
        deadline = time.monotonic() + 180
        while not (body := httpx.get(f"{url}/health", timeout=10).json())["ready"]:
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
        assert body["warming"] == [] and body["status"] == "ok", body
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output[-3000:]
    print(json.dumps({"first_health_s": round(seconds, 2)}))
