"""Embedded vector engines head to head: qdrant-client local mode (a folder) against qdrant-edge.

For each engine and size, in a fresh process (so memory numbers are its own), through Lorekeeper's own
store classes (what the application gets, conversions included):

- upsert throughput (points/s) of 384-d clustered vectors carrying every filter field, in batches of
  512 as the ingest sink writes them; for edge also the final ``optimize()`` (HNSW build);
- search latency p50/p95 over ~200 queries, unfiltered and filtered (one library and status=active,
  ~18 % of the points);
- recall@10 against numpy brute force on the same vectors and filter;
- resident memory: the peak of the process, and what the engine added over the loaded dataset.

Local mode writes each point to SQLite with its own commit; when the 10k run says a folder upsert of
the larger size would exceed ``--local-upsert-budget-s``, the larger size is loaded into local mode *in
memory* instead (its search path is the same numpy brute force), and the result says so. Queries stop
early when one series exceeds ``--query-budget-s``; the result records how many ran.

Usage::

    python benchmarks/vector_search.py            # 10k and 100k, ~5 minutes on 2 cores
    python benchmarks/vector_search.py --quick    # 2k and 10k, 60 queries, ~1 minute

Writes benchmarks/results/vector_search.json and benchmarks/results/vector_search.png.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from benchmarks.common import machine_info  # noqa: E402
from schemas.search import SearchFilters  # noqa: E402
from stores.vector.base import VectorPoint, VectorSpace  # noqa: E402

DIM = 384
CLUSTERS = 100
UPSERT_BATCH = 512
LATENCY_GOAL_P95_MS = 30.0
FILTER = SearchFilters(library="lib-2", status="active")
COLLECTION = "bench"


# -- data -----------------------------------------------------------------------------------------


def make_data(n: int, seed: int = 42) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``n`` clustered unit-ish vectors (so HNSW meets realistic neighbourhoods) and their payloads."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(CLUSTERS, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, CLUSTERS, n)] + 0.6 * rng.normal(size=(n, DIM)).astype(np.float32)
    payloads = []
    for k in range(n):
        payload: dict[str, Any] = {
            "library": f"lib-{k % 5}",
            "library_type": ("rulebook", "lore")[k % 2],
            "collection": f"col-{k % 20}",
            "item": f"item-{k % 1000}",
            "classification": ("canon", "reference", "inspiration")[k % 3],
            "status": "superseded" if k % 10 == 0 else "active",
            "model": "all-MiniLM-L6-v2",
        }
        if k % 2:
            payload["campaign"] = f"camp-{k % 4}"
        payloads.append(payload)
    return vectors, payloads


def make_queries(vectors: np.ndarray, count: int, seed: int = 7) -> np.ndarray:
    """Queries near stored points (as a question is near the chunk that answers it)."""
    rng = np.random.default_rng(seed)
    picks = vectors[rng.integers(0, len(vectors), count)]
    return picks + 0.3 * rng.normal(size=picks.shape).astype(np.float32)


def ground_truth(vectors: np.ndarray, mask: np.ndarray | None, queries: np.ndarray, k: int = 10) -> list[set[int]]:
    """Exact cosine top-``k`` row numbers per query, restricted to ``mask`` when given."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    truths = []
    for query in queries:
        scores = unit @ (query / np.linalg.norm(query))
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, k)[:k]
        truths.append({int(i) for i in top})
    return truths


# -- one engine at one size, in its own process ---------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _open(engine: str, storage: str, folder: Path) -> Any:
    if engine == "edge":
        from stores.vector.edge import QdrantEdgeVectorIndex

        return QdrantEdgeVectorIndex(folder / "edge")
    from stores.vector.qdrant import QdrantVectorIndex

    return QdrantVectorIndex(path=folder / "local") if storage == "path" else QdrantVectorIndex()


def _latencies(
    index: Any, queries: np.ndarray, filters: SearchFilters | None, budget_s: float
) -> tuple[list[float], list[set[int]]]:
    times, found = [], []
    for query in queries[:10]:  # warm caches and lazy opens
        index.search(COLLECTION, query.tolist(), filters=filters, limit=10)
    started = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        hits = index.search(COLLECTION, query.tolist(), filters=filters, limit=10)
        times.append((time.perf_counter() - t0) * 1000)
        found.append({int(h.id.removeprefix("chunk-")) for h in hits})
        if time.perf_counter() - started > budget_s:
            break
    return times, found


def _series(times: list[float], found: list[set[int]], truth: list[set[int]]) -> dict[str, Any]:
    recall = [len(f & t) / 10 for f, t in zip(found, truth, strict=False)]
    return {
        "queries": len(times),
        "p50_ms": round(float(np.percentile(times, 50)), 3),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "recall_at_10": round(float(np.mean(recall)), 4),
    }


def run_one(engine: str, n: int, storage: str, n_queries: int, query_budget_s: float) -> dict[str, Any]:
    """Load ``n`` points into ``engine`` and measure it; runs in a child process."""
    vectors, payloads = make_data(n)
    queries = make_queries(vectors, n_queries)
    mask = np.array([FILTER.matches(p) for p in payloads])
    truth_all = ground_truth(vectors, None, queries)
    truth_filtered = ground_truth(vectors, mask, queries)
    baseline_mb = _rss_mb()

    folder = Path(tempfile.mkdtemp(prefix=f"bench-{engine}-"))
    index = _open(engine, storage, folder)
    try:
        index.ensure_collection(COLLECTION, VectorSpace(name="dense", dim=DIM))
        started = time.perf_counter()
        for start in range(0, n, UPSERT_BATCH):
            batch = [
                VectorPoint(id=f"chunk-{k}", vector=vectors[k].tolist(), payload=payloads[k])
                for k in range(start, min(n, start + UPSERT_BATCH))
            ]
            index.upsert(COLLECTION, batch)
        upsert_s = time.perf_counter() - started
        optimize_s = 0.0
        if engine == "edge":
            started = time.perf_counter()
            index.optimize(COLLECTION)  # what ingest does at the end of a job
            optimize_s = time.perf_counter() - started
        assert index.count(COLLECTION) == n

        unfiltered = _series(*_latencies(index, queries, None, query_budget_s), truth_all)
        filtered = _series(*_latencies(index, queries, FILTER, query_budget_s), truth_filtered)
        disk_mb = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
        return {
            "engine": engine,
            "storage": storage,
            "points": n,
            "upsert_s": round(upsert_s, 2),
            "upsert_points_per_s": round(n / upsert_s),
            "optimize_s": round(optimize_s, 2),
            "ready_s": round(upsert_s + optimize_s, 2),
            "unfiltered": unfiltered,
            "filtered": filtered,
            "filter_selectivity": round(float(mask.mean()), 3),
            "rss_peak_mb": round(_peak_rss_mb()),
            "rss_engine_mb": round(_rss_mb() - baseline_mb),
            "disk_mb_apparent": round(disk_mb),
        }
    finally:
        index.close()
        shutil.rmtree(folder, ignore_errors=True)


def _child(queue: Any, *args: Any) -> None:
    try:
        queue.put(run_one(*args))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which prints it
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def run_isolated(*args: Any) -> dict[str, Any]:
    """:func:`run_one` in a fresh interpreter (spawn), so each result's memory is its own."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, *args))
    proc.start()
    result = queue.get()
    proc.join()
    if "error" in result:
        raise RuntimeError(f"{args[:3]} failed: {result['error']}")
    return result


# -- report ---------------------------------------------------------------------------------------


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    colours = {"qdrant_local": "tab:orange", "edge": "tab:blue"}
    for engine in ("qdrant_local", "edge"):
        rows = sorted((r for r in results if r["engine"] == engine), key=lambda r: r["points"])
        if not rows:
            continue
        sizes = [r["points"] for r in rows]
        for kind, style in (("unfiltered", "-o"), ("filtered", "--s")):
            axes[0].plot(
                sizes, [r[kind]["p95_ms"] for r in rows], style, color=colours[engine], label=f"{engine} {kind}"
            )
            axes[2].plot(
                sizes, [r[kind]["recall_at_10"] for r in rows], style, color=colours[engine], label=f"{engine} {kind}"
            )
        axes[1].plot(sizes, [r["upsert_points_per_s"] for r in rows], "-o", color=colours[engine], label=engine)
    axes[0].axhline(LATENCY_GOAL_P95_MS, color="red", linestyle=":", label="goal p95 30 ms")
    axes[0].set(xscale="log", yscale="log", xlabel="points", ylabel="search p95 (ms)", title="Search latency p95")
    axes[1].set(xscale="log", yscale="log", xlabel="points", ylabel="points/s", title="Upsert throughput")
    axes[2].set(xscale="log", ylim=(0.8, 1.01), xlabel="points", ylabel="recall@10", title="Recall vs brute force")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Embedded vector engines, {DIM}-d clustered vectors, {platform.machine()} {mp.cpu_count()} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "engine        storage points  upsert/s  optimize_s  p50/p95 ms (unf.)  p50/p95 ms (filt.)  "
        "recall unf/filt  rss MB",
    ]
    for r in results:
        u, f = r["unfiltered"], r["filtered"]
        lines.append(
            f"{r['engine']:<13} {r['storage']:<7} {r['points']:>6}  {r['upsert_points_per_s']:>8}  "
            f"{r['optimize_s']:>10}  {u['p50_ms']:>7.2f}/{u['p95_ms']:<9.2f} {f['p50_ms']:>8.2f}/{f['p95_ms']:<9.2f} "
            f"{u['recall_at_10']:.3f}/{f['recall_at_10']:.3f}      {r['rss_peak_mb']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2k and 10k points, 60 queries")
    parser.add_argument("--sizes", type=int, nargs="+", help="point counts (default 10000 100000)")
    parser.add_argument("--queries", type=int, help="queries per series (default 200)")
    parser.add_argument("--query-budget-s", type=float, default=30.0, help="cap per latency series")
    parser.add_argument(
        "--local-upsert-budget-s",
        type=float,
        default=150.0,
        help="largest local-mode folder upsert attempted; beyond it, local mode runs in memory",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    sizes = sorted(args.sizes or ([2_000, 10_000] if args.quick else [10_000, 100_000]))
    n_queries = args.queries or (60 if args.quick else 200)

    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    local_rate: float | None = None
    for n in sizes:
        for engine in ("edge", "qdrant_local"):
            storage = "path"
            if engine == "qdrant_local" and local_rate is not None and n / local_rate > args.local_upsert_budget_s:
                storage = "memory"
                print(
                    f"local mode: a folder upsert of {n} points would take ~{n / local_rate:.0f}s; "
                    "measuring search in memory instead",
                    flush=True,
                )
            result = run_isolated(engine, n, storage, n_queries, args.query_budget_s)
            if engine == "qdrant_local" and storage == "path":
                local_rate = result["upsert_points_per_s"]
            elif engine == "qdrant_local":
                result["note"] = (
                    f"folder upsert skipped (~{n / local_rate:.0f}s at the measured "
                    f"{local_rate:.0f} points/s); upsert/s is in-memory"
                )
            results.append(result)
            print(table([result]).splitlines()[-1], flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "vector_search",
        "dim": DIM,
        "clusters": CLUSTERS,
        "filter": FILTER.conditions(),
        "latency_goal_p95_ms": LATENCY_GOAL_P95_MS,
        "machine": machine_info(),
        "quick": args.quick,
        "wall_s": round(time.perf_counter() - started, 1),
        "results": results,
    }
    (args.out / "vector_search.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(results, args.out / "vector_search.png")
    print(table(results))
    print(f"wrote {args.out / 'vector_search.json'} and vector_search.png in {report['wall_s']}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
