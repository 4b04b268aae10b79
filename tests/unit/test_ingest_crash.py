"""kill -9 of the embedded graph server while ``lorekeeper ingest`` runs, at several moments.

The driver and the Ray workers each hold a client of the folder's one FalkorDB server. Killing it
mid-job must never leave two servers on the folder (that destroyed the append-only log), and the job
must end with a folder that starts, holds every acknowledged write and has no item or job left
``processing``; what was completed is whole in every store (no duplicate, no missing chunk).
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
from pathlib import Path

import pytest

from schemas.search import SearchFilters
from schemas.settings import load_settings
from stores.factory import open_graph_store, open_text_index, open_vector_index
from tests.corpus import corpus_file

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _servers_on(folder: Path) -> set[int]:
    """Top-level redis-servers working in ``folder`` (fork children of one are not counted)."""
    procs: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"redis" not in (entry / "cmdline").read_bytes() or (entry / "cwd").resolve() != folder:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            if fields[0] not in ("Z", "X"):
                procs[int(entry.name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return {pid for pid, parent in procs.items() if parent not in procs}


class _Killer(threading.Thread):
    """SIGKILLs the folder's server as soon as it runs and then every ``every_s``, ``times`` times."""

    def __init__(self, folder: Path, *, times: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.folder, self.times, self.every_s = folder, times, every_s
        self.kills: list[float] = []
        self.most_at_once = 0
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        next_kill = 0.0
        while not self.stop.is_set():
            servers = _servers_on(self.folder)
            self.most_at_once = max(self.most_at_once, len(servers))
            now = time.monotonic() - started
            if servers and len(self.kills) < self.times and now >= next_kill:
                for pid in servers:
                    os.kill(pid, signal.SIGKILL)
                self.kills.append(round(now, 1))
                next_kill = now + self.every_s
            time.sleep(0.02)


@pytest.mark.parametrize("executor", ["local", "ray"])  # the stages in the driver, and on Ray's actors
def test_graph_server_killed_during_ingest_leaves_a_whole_folder(tmp_path: Path, executor: str) -> None:
    books = tmp_path / "books"
    books.mkdir()
    for name in ("fate-accelerated-SRD.md", "Fate-Condensed-SRD-CC-BY.md"):
        shutil.copy(corpus_file(f"rulebooks/fate-srd/{name}"), books / name)
    data = tmp_path / "data"
    graph_folder = (data / "graph").resolve()
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(data), "RAY_AUTH_MODE": "disabled"}
    killer = _Killer(graph_folder, times=4, every_s=4.0)
    killer.start()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "lorekeeper.cli", "ingest", str(books), "--library", "fate", "--json"]
            + ["--executor", executor],
            capture_output=True,
            text=True,
            timeout=420,
            cwd=ROOT,
            env=env,
        )
    finally:
        killer.stop.set()
        killer.join(timeout=10)
    assert len(killer.kills) >= 3, f"the ingest ended before the kills ({killer.kills}): {run.stderr[-2000:]}"
    assert killer.most_at_once <= 1, "two graph servers ran on one data folder"
    # A server restarted by a Ray worker is stopped by that worker's watchdog once Ray ends the worker,
    # which may be a moment after the CLI returns.
    deadline = time.monotonic() + 30
    while _servers_on(graph_folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _servers_on(graph_folder) == set(), "a graph server outlived the ingest"

    settings = load_settings(data_dir=data)
    graph, text, vectors = open_graph_store(settings), open_text_index(settings), open_vector_index(settings)
    try:
        jobs = graph.run("MATCH (j:IngestJob) RETURN j.status AS status, j.error AS error")
        items = graph.run("MATCH (i:Item) RETURN i.uid AS uid, i.status AS status")
        assert jobs and all(j["status"] in ("completed", "failed") for j in jobs), jobs
        assert all(i["status"] in ("ready", "failed") for i in items), items
        if run.returncode == 0:
            report = json.loads(run.stdout)
            assert {f["status"] for f in report["files"]} <= {"completed", "failed"}
        ready = [i["uid"] for i in items if i["status"] == "ready"]
        for uid in ready:
            chunks = graph.run("MATCH (c:Chunk {item_uid: $u}) RETURN c.uid AS uid", {"u": uid})
            uids = [c["uid"] for c in chunks]
            assert uids and len(uids) == len(set(uids))
            assert text.count(SearchFilters(item=[uid])) == len(uids)
            assert vectors.count("chunks", SearchFilters(item=[uid])) == len(uids)
    finally:
        for store in (graph, text, vectors):
            store.close()
