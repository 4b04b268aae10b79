"""The harness the kill tests share: run a child process, SIGKILL it where it paused, wait for its graph to stop.

A child prints ``PAUSED <point>`` and sleeps at the moment named on its command line; :func:`kill_at` reads its
output up to that line, kills it for real (SIGKILL) and waits until the embedded graph's redis-server it started
in its data folder has stopped too (its watchdog stops it), so the restart finds the folder as a crash leaves it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def graph_servers_on(folder: Path) -> set[int]:
    """redis-server processes working in ``folder`` (a child's embedded graph)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"redis" not in (entry / "cmdline").read_bytes() or (entry / "cwd").resolve() != folder.resolve():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
                found.add(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def run_child(module: str, *args: str, timeout: float = 600) -> str:
    """Run ``python -m module args`` to its end; returns its standard output (a failure shows its stderr)."""
    run = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def kill_at(module: str, args: list[str], point: str, graph: Path) -> None:
    """Run ``python -m module args`` until it prints ``PAUSED point``, SIGKILL it there, and wait for the graph
    server working in ``graph`` to stop."""
    child = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        seen = []
        for line in child.stdout:  # its logs, until it pauses (or ends without pausing)
            seen.append(line)
            if line.startswith("PAUSED"):
                break
        assert seen and seen[-1].strip() == f"PAUSED {point}", f"no pause at {point}: {''.join(seen)[-2000:]}"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    deadline = time.monotonic() + 30
    while graph_servers_on(graph) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not graph_servers_on(graph), "the killed child's graph server outlived it"


def pause(point: str) -> None:
    """In a child: say where it stopped and wait there to be killed."""
    print(f"PAUSED {point}", flush=True)
    time.sleep(600)
    raise SystemExit(f"not killed at {point}")


@contextmanager
def restarted(data: Path, minilm: Any) -> Iterator[Any]:
    """The story as the server opens it on ``data`` after a kill (start-up catch-up included)."""
    from narrator.engines import EchoEngine
    from schemas.serving import ServeSettings
    from schemas.settings import Settings
    from serve.services import SingleEngine, open_services
    from story.recall_index import open_recall_index

    settings = Settings(data_dir=data)
    recall = open_recall_index(settings, embedder=minilm)
    try:
        with open_services(
            settings,
            ServeSettings(api_host="127.0.0.1"),
            narrator=SingleEngine(EchoEngine("echo")),
            with_search=False,
            recall=recall,
        ) as services:
            yield services.story
    finally:
        recall.close()
