"""A real multi-node Ray cluster on this machine, the store servers it writes to, and store snapshots.

* :class:`RayCluster`: a head and worker nodes, each its own ``ray start --block`` process group with
  its own logical CPUs and a custom resource naming it (``lorekeeper_head`` / ``lorekeeper_worker_N``);
  the head also carries ``lorekeeper_vector_writer`` (the embedded vector index lives on its disk, so
  the ingest's single writer is placed there). :meth:`RayCluster.kill_worker` SIGKILLs a worker
  node's raylet and every process of that node.
* :func:`store_snapshot`: what the four stores hold for a library, per file, with duplicate checks.

Everything binds 127.0.0.1 (FalkorDB's own Bolt port excepted: it cannot; the relay in
:mod:`tests.cluster.bolt_relay` is what clients use).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers import free_port, wait_for_port

VENV_BIN = Path(sys.executable).parent
HEAD_RESOURCE = "lorekeeper_head"
VECTOR_WRITER_RESOURCE = "lorekeeper_vector_writer"  # = jobs.pipeline.VECTOR_WRITER_RESOURCE


def ray_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of every Ray process and CLI call: this venv first, no auth, quick failure detection."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOREKEEPER_", "RAY_"))}
    env.update(
        {
            "PATH": f"{VENV_BIN}:{env.get('PATH', '')}",
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            # a dead raylet is declared dead after ~3 s instead of ~15 s
            "RAY_health_check_initial_delay_ms": "1000",
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@dataclass
class RayNode:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    node_id: str = ""

    def processes(self) -> list[int]:
        """Pids of this node: the ``ray start`` process group plus every process whose raylet is ours."""
        import psutil

        pids: set[int] = set()
        try:
            pgid = os.getpgid(self.proc.pid)
        except ProcessLookupError:
            return []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                ours = self.node_id and any(self.node_id in part for part in (p.info["cmdline"] or []))
                if os.getpgid(p.info["pid"]) == pgid or ours:
                    pids.add(p.info["pid"])
            except (ProcessLookupError, psutil.Error):
                continue
        return sorted(pids)


@dataclass
class RayCluster:
    """A head and workers started with ``ray start`` (see the module docstring)."""

    root: Path
    env: dict[str, str]
    cpus_per_node: int = 4
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: dict[str, RayNode] = field(default_factory=dict)
    # Ray's unix sockets live under the temp dir, and their paths must stay under 108 bytes
    temp_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lkc-", dir="/tmp")))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, args: list[str], resources: dict[str, float]) -> RayNode:
        log = self.root / f"ray-{name}.log"
        handle = log.open("wb")
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "ray"),
                "start",
                *args,
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--num-cpus={self.cpus_per_node}",
                "--num-gpus=0",
                f"--resources={json.dumps(resources)}",
                "--disable-usage-stats",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.root,
            start_new_session=True,  # its own process group: the node can be killed as one
        )
        node = RayNode(name, proc, log)
        self.nodes[name] = node
        return node

    def start_head(self) -> None:
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        self._start(
            "head",
            [
                "--head",
                f"--port={self.gcs_port}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}",
                f"--temp-dir={self.temp_dir}",
            ],
            {HEAD_RESOURCE: 1, VECTOR_WRITER_RESOURCE: 1},
        )
        wait_for_port(self.gcs_port, timeout=90, proc=self.nodes["head"].proc)
        wait_for_port(self.dashboard_port, timeout=90, proc=self.nodes["head"].proc)
        self._wait_for_nodes()

    def add_worker(self, name: str) -> RayNode:
        node = self._start(
            name, [f"--address={self.address}", f"--temp-dir={self.temp_dir}"], {f"lorekeeper_{name}": 1}
        )
        self._wait_for_nodes()
        self._reach_from_head(name)
        return node

    def _reach_from_head(self, name: str) -> None:
        """Wait until the head's raylet schedules onto worker ``name``.

        The GCS lists a node as alive before the head's raylet has the node's resources in its view;
        until then the head schedules everything locally (the spread of an ingest job started at that
        moment is all on the head). A task placed from the head on the worker's own resource proves
        the view is there.
        """
        out = subprocess.run(
            [str(VENV_BIN / "python"), "-c", _REACH_FROM_HEAD, self.address, HEAD_RESOURCE, f"lorekeeper_{name}"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )
        assert out.stdout.strip().splitlines()[-1] == self.nodes[name].node_id, out.stdout

    def _alive_nodes(self) -> list[dict[str, Any]]:
        out = subprocess.run(
            [str(VENV_BIN / "python"), "-c", _LIST_NODES, self.address],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    def _wait_for_nodes(self, timeout: float = 90.0) -> None:
        """Wait until every started (not killed) node is alive in the GCS; record node ids."""
        deadline = time.monotonic() + timeout
        while True:
            live = self._alive_nodes()
            by_name = {}
            for n in live:
                for name in self.nodes:
                    tag = HEAD_RESOURCE if name == "head" else f"lorekeeper_{name}"
                    if tag in n["resources"]:
                        by_name[name] = n["node_id"]
            wanted = [name for name, node in self.nodes.items() if node.proc.poll() is None]
            if all(name in by_name for name in wanted):
                for name, node_id in by_name.items():
                    self.nodes[name].node_id = node_id
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {wanted} not all alive: {live}")
            time.sleep(1)

    def node_name(self, node_id: str) -> str:
        return next((name for name, n in self.nodes.items() if n.node_id == node_id), node_id[:12] or "?")

    def kill_worker(self, name: str) -> list[int]:
        """SIGKILL every process of a worker node (its raylet, object store, agents and workers)."""
        node = self.nodes[name]
        pids = node.processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
        return pids

    def wait_node_dead(self, name: str, timeout: float = 60.0) -> float:
        started = time.monotonic()
        node_id = self.nodes[name].node_id
        while time.monotonic() - started < timeout:
            if node_id not in {n["node_id"] for n in self._alive_nodes()}:
                return time.monotonic() - started
            time.sleep(0.5)
        raise TimeoutError(f"node {name} still alive in the GCS after {timeout}s")

    def ray_cli(
        self, *args: str, timeout: float = 300.0, extra_env: dict[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV_BIN / args[0]), *args[1:]],
            env={**self.env, **(extra_env or {}), "RAY_ADDRESS": self.dashboard},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            cwd=self.root,
        )

    def stop(self) -> None:
        """Stop every node: SIGTERM the ``ray start --block`` groups, then SIGKILL what is left."""
        for node in reversed(list(self.nodes.values())):
            if node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGTERM)
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=30)
            for pid in node.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        # keep the nodes' logs beside the test's files, then drop the short-path temp dir
        for logs in self.temp_dir.glob("session_*/logs"):
            shutil.copytree(
                logs,
                self.root / "ray-logs" / logs.parent.name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("*.sock", "sockets"),
                ignore_dangling_symlinks=True,
            )
        shutil.rmtree(self.temp_dir, ignore_errors=True)


_LIST_NODES = r"""
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = [{"node_id": n["NodeID"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
ray.shutdown()
print(json.dumps(nodes))
"""

_REACH_FROM_HEAD = r"""
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
head, worker = sys.argv[2], sys.argv[3]

@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()

@ray.remote(num_cpus=0)
def from_head():  # runs on the head, so its task's lease is asked of the head's raylet
    return ray.get(where.options(resources={worker: 0.001}).remote(), timeout=120)

node = ray.get(from_head.options(resources={head: 0.001}).remote(), timeout=150)
ray.shutdown()
print(node)
"""

# -- what the stores hold --------------------------------------------------------------------------


@dataclass
class FileRecords:
    """One file's chunks as each store holds them (sequence numbers; duplicates kept)."""

    graph: list[tuple[int, str]]  # (sequence, content hash) of each Chunk node, one per node
    graph_uids: list[str]
    text: list[int]
    vector: list[int]
    blob: list[int]
    mentions: int

    def problems(self) -> list[str]:
        """Duplicates and holes, store by store (empty when each store holds each chunk exactly once)."""
        found = []
        expected = list(range(len(set(self.graph_uids))))
        for store, seqs in (
            ("graph", [s for s, _ in self.graph]),
            ("text", self.text),
            ("vector", self.vector),
            ("blob", self.blob),
        ):
            dupes = sorted(s for s, n in Counter(seqs).items() if n > 1)
            missing = sorted(set(expected) - set(seqs))
            extra = sorted(set(seqs) - set(expected))
            if dupes or missing or extra:
                found.append(f"{store}: duplicates {dupes[:10]} missing {missing[:10]} unexpected {extra[:10]}")
        if len(self.graph_uids) != len(set(self.graph_uids)):
            found.append("graph: duplicate Chunk uids")
        return found


def store_snapshot(settings: Any, library: str, *, collection: str = "chunks") -> dict[str, FileRecords]:
    """Per file name (the item's source file), the chunks of ``library`` in the four stores."""
    from schemas.search import SearchFilters
    from stores.blob.layout import chunk_sequence
    from stores.factory import open_blob_store, open_graph_store, open_text_index, open_vector_index

    graph = open_graph_store(settings)
    blob = open_blob_store(settings)
    text = open_text_index(settings)
    vectors = open_vector_index(settings)
    try:
        lib = graph.run("MATCH (l:Library {name: $n}) RETURN l.uid AS uid", {"n": library})
        assert len(lib) == 1, f"library {library!r}: {lib}"
        items = graph.run(
            "MATCH (i:Item {library_uid: $lib}) RETURN i.uid AS uid, i.source_ref AS ref, i.status AS status",
            {"lib": lib[0]["uid"]},
        )
        out: dict[str, FileRecords] = {}
        text.refresh()
        for item in items:
            name = str(item["ref"]).rsplit("/", 1)[-1]
            assert item["status"] == "ready", f"{name}: item {item['status']}"
            chunks = graph.run(
                "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk) RETURN c.uid AS uid, c.sequence AS seq, "
                "c.content_hash AS hash",
                {"uid": item["uid"]},
            )
            mentions = graph.run(
                "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(:Chunk)-[m:MENTIONS]->(:Concept) RETURN count(m) AS n",
                {"uid": item["uid"]},
            )
            filters = SearchFilters(item=[item["uid"]])
            text_seqs = _text_sequences(text, item["uid"], filters)
            vector_seqs = [int(p.payload["sequence"]) for p in vectors.scroll(collection, filters=filters)]
            blob_seqs = [chunk_sequence(b.key) for b in blob.list(f"items/{item['uid']}/chunks/")]
            out[name] = FileRecords(
                graph=sorted((int(c["seq"]), str(c["hash"])) for c in chunks),
                graph_uids=[str(c["uid"]) for c in chunks],
                text=sorted(text_seqs),
                vector=sorted(vector_seqs),
                blob=sorted(blob_seqs),
                mentions=int(mentions[0]["n"]),
            )
        return out
    finally:
        for store in (vectors, text, blob, graph):
            store.close()


def _text_sequences(text: Any, item_uid: str, filters: Any) -> list[int]:
    """Sequences of the full-text documents of an item (every document, duplicates kept)."""
    client = getattr(text, "client", None)
    if client is not None and hasattr(client, "search") and hasattr(text, "name"):  # OpenSearch
        hits = client.search(index=text.name, body={"query": {"term": {"item": item_uid}}, "size": 10000})
        docs = hits["hits"]["hits"]
        assert hits["hits"]["total"]["value"] == len(docs)
        return [int(d["_source"]["data"]["sequence"]) for d in docs]
    # tantivy (the local run): each hit of a filtered query-all search
    count = text.count(filters)
    return list(range(count))
