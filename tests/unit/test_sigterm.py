"""Stopping like a container is stopped: SIGTERM to ``lorekeeper serve --direct`` during a turn and to
``lorekeeper ingest`` during its pipeline, as real processes (podman and Kubernetes send SIGTERM, then
SIGKILL after a grace period).

Before jobs/stopping.py, Ray's handler (installed by ``ray.init``) called ``sys.exit`` wherever the main
thread was: the API aborted with exit 134 and a traceback, and an ingest died by the signal at the end of
its run (``ray.shutdown`` set SIGTERM back to the default action).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from jobs.stopping import EXIT_INTERRUPTED
from lorekeeper.serve_cli import GRACE_SECONDS
from tests.unit.serve_support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

FATE = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "rulebooks" / "fate-srd"
PIECES = [f"word{n} " for n in range(12)]


class _SlowModel(ThreadingHTTPServer):
    """An OpenAI-compatible endpoint that streams its narration a piece every 0.4 s (a slow model), so a
    turn is still in flight when SIGTERM arrives; extraction gets an empty proposal list."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.streaming = threading.Event()


class _SlowHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes
    server: _SlowModel

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        if not body.get("stream"):
            data = {"choices": [{"index": 0, "message": {"role": "assistant", "content": '{"proposals": []}'}}]}
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"id": "x", "object": "chat.completion", "model": "slow", **data}).encode())
            return
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.server.streaming.set()
        for piece in PIECES:
            time.sleep(0.4)
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "slow"}
            chunk["choices"] = [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def slow_model() -> Iterator[_SlowModel]:
    server = _SlowModel()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lorekeeper.cli", *args],
        cwd=cwd,
        env={**os.environ, **env, "RAY_USAGE_STATS_ENABLED": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killed whole if the test fails
    )


def _family(process: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(process.pid).children(recursive=True)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _stop_and_wait(process: subprocess.Popen[str], timeout: float) -> tuple[int, str, float]:
    """SIGTERM, then the exit code, the output and the seconds it took (the group is killed on timeout)."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"still running {timeout}s after SIGTERM:\n{output[-3000:]}")
    return process.returncode, output, time.monotonic() - started


def _kill_group(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def _gone(processes: list[psutil.Process], within: float = 15.0) -> list[str]:
    """The processes still alive after ``within`` seconds (their command lines)."""
    _, alive = psutil.wait_procs(processes, timeout=within)
    return [" ".join(p.cmdline()[:2]) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("mode", [["--direct"], []], ids=["direct", "ray-serve"])
def test_serve_finishes_the_turn_in_flight_and_exits_0_on_sigterm(
    tmp_path: Path, slow_model: _SlowModel, mode: list[str]
) -> None:
    """``lorekeeper serve --direct`` and ``lorekeeper serve`` (Ray Serve, what the image's API runs; the
    container lane's 'podman stop during a turn' checks the same in a container)."""
    port = free_port()
    env = {
        "LOREKEEPER_DATA_DIR": str(tmp_path / "data"),
        "LOREKEEPER_NARRATOR_ENGINE": "openai",
        "LOREKEEPER_NARRATOR_BASE_URL": f"http://127.0.0.1:{slow_model.server_port}/v1",
        "LOREKEEPER_NARRATOR_MODEL": "slow",
    }
    server = _start(["serve", *mode, "--port", str(port)], env, tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert server.poll() is None, server.communicate()[0][-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("the API did not answer /health")
        with httpx.Client(base_url=url, timeout=60) as http:
            world = http.post("/api/v1/worlds", json={"name": "Stopped"}).json()
            body = {"world_id": world["id"], "name": "Mid-turn", "profile": {"genre": "mystery"}}
            campaign = http.post("/api/v1/campaigns", json=body).json()
        answer: dict[str, Any] = {}

        def play() -> None:
            with httpx.Client(base_url=url, timeout=60) as http:
                response = http.post(f"/api/v1/campaigns/{campaign['id']}/turns", json={"text": "I knock"})
                try:
                    answer.update(status=response.status_code, body=response.json())
                except ValueError:  # not JSON: say what came instead
                    answer.update(status=response.status_code, body=response.text[:500])

        turn = threading.Thread(target=play)
        turn.start()
        assert slow_model.streaming.wait(60), "the turn never reached the model"
        family = _family(server)
        code, output, seconds = _stop_and_wait(server, timeout=GRACE_SECONDS + 30)
        turn.join(10)
    finally:
        _kill_group(server)
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and "SIGTERM received" not in output, output[-3000:]
    assert "stop_requested" in output
    # the turn in flight was answered in full, after the signal
    assert answer.get("status") in (200, 201), answer
    assert "".join(PIECES).strip() in json.dumps(answer["body"]), answer
    assert seconds < GRACE_SECONDS + 15
    assert not _gone(family), "Ray and store child processes outlived the API"
    # the acknowledged turn is in the graph: the campaign's head is that turn, read back in a new process
    check = subprocess.run(
        [sys.executable, "-c", _READ_HEAD, campaign["id"]],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout.strip().splitlines()[-1]) == answer["body"]["turn_id"], check.stdout


_READ_HEAD = """
import json, sys
from schemas.settings import get_settings
from lorekeeper.command_context import story_service
with story_service(get_settings()) as story:
    print(json.dumps(story.get_campaign(sys.argv[1]).head_turn_id))
"""


def test_ingest_stops_on_sigterm_records_the_unfinished_files_and_exits_143(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    for name in ("fate-accelerated-SRD.md", "Fate-Condensed-SRD-CC-BY.md"):
        shutil.copy(FATE / name, books / name)  # a temporary copy, never into the project
    env = {"LOREKEEPER_DATA_DIR": str(tmp_path / "data")}
    args = ["ingest", str(books), "--library", "stopped", "--progress-interval", "0.5", "--executor", "ray"]
    ingest = _start(args, env, tmp_path)
    try:
        # once the pipeline runs (a stage actor's process among its children): the driver waits for
        # the next batch, inside Ray Data's iterator
        deadline = time.monotonic() + 180
        while not any("ray::MapWorker" in " ".join(_cmdline(p)) for p in _family(ingest)):
            assert ingest.poll() is None, ingest.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the pipeline never started"
            time.sleep(0.2)
        family = _family(ingest)
        code, output, seconds = _stop_and_wait(ingest, timeout=60)
    finally:
        _kill_group(ingest)
    assert code == EXIT_INTERRUPTED, output[-3000:]
    assert "ingest stopped by SIGTERM" in output and "Traceback" not in output, output[-3000:]
    assert seconds < 30
    assert not _gone(family), "Ray and store child processes outlived the ingest"
    # both files are recorded as failed, saying why and what to do; nothing is left "processing"
    check = subprocess.run(
        [sys.executable, "-c", _READ_JOBS], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stderr[-2000:]
    jobs = json.loads(check.stdout.strip().splitlines()[-1])
    assert len(jobs) == 2 and all(status == "failed" for status, _ in jobs), jobs
    assert all("stopped by SIGTERM" in (error or "") for _, error in jobs), jobs


@pytest.mark.parametrize("after_s", [0.0, 6.0])
def test_in_process_ingest_stops_on_sigterm_and_exits_143(tmp_path: Path, after_s: float) -> None:
    """The stages in this process stop between two batches: as the model loads (0 s after the stages'
    stores open) and while the first file is embedded or written (6 s later)."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("fate-accelerated-SRD.md", "Fate-Condensed-SRD-CC-BY.md"):
        shutil.copy(FATE / name, books / name)
    data = tmp_path / "data"
    args = ["ingest", str(books), "--library", "stopped", "--progress-interval", "0.5", "--executor", "local"]
    ingest = _start(args, {"LOREKEEPER_DATA_DIR": str(data)}, tmp_path)
    try:
        deadline = time.monotonic() + 180
        while not (data / "vectors").exists():  # the write stage has opened its stores: the stages run
            assert ingest.poll() is None, ingest.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the stages never started"
            time.sleep(0.1)
        time.sleep(after_s)
        family = _family(ingest)
        code, output, seconds = _stop_and_wait(ingest, timeout=60)
    finally:
        _kill_group(ingest)
    assert code == EXIT_INTERRUPTED, output[-3000:]
    assert "ingest stopped by SIGTERM" in output and "Traceback" not in output, output[-3000:]
    assert seconds < 30
    assert not _gone(family), "store child processes outlived the ingest"
    check = subprocess.run(
        [sys.executable, "-c", _READ_JOBS],
        env={**os.environ, "LOREKEEPER_DATA_DIR": str(data)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    jobs = json.loads(check.stdout.strip().splitlines()[-1])
    # a file finished before the signal stays completed; every other one failed, saying why
    assert len(jobs) == 2 and {status for status, _ in jobs} <= {"completed", "failed"}, jobs
    failed = [error for status, error in jobs if status == "failed"]
    assert failed and all("stopped by SIGTERM" in (error or "") for error in failed), jobs


_READ_JOBS = """
import json
from schemas.settings import get_settings
from stores.catalog import Catalog
from stores.factory import open_graph_store
graph = open_graph_store(get_settings())
try:
    print(json.dumps([[job.status.value, job.error] for job in Catalog(graph).list_jobs(limit=100)]))
finally:
    graph.close()
"""
