"""Serving overhead per turn on the CPU, with the engine replaced by an instant one bound where vLLM binds.

What a turn costs besides the model: context assembly (state fold, axioms, memories, recent turns, a
knowledge search with its query embedding), persistence (turn, take, prompt snapshot, retrieval
record, staged proposals) and routing. Measured in one run, on the embedded stores, at 1, 8 and 32
concurrent tables, each table playing ``--turns`` turns one after another:

* **direct** — :class:`~narrator.turn.TurnFlow` called in this process (the services, no HTTP);
* **http** — the same FastAPI app over HTTP with uvicorn in this process (``lorekeeper serve --direct``);
* **ray_serve** — the Ray Serve application on local Ray (Ingress → Narrator/Search/Gate deployments).

Each path reports p50/p95 turn latency and turns per second; the ratios ray_serve/direct and
http/direct sit side by side. The echo engine streams its pieces with no delay; its extraction
answer is empty, on every path alike, so a turn stages no proposal.

Goal (issue 5): p95 <= 20 ms at 32 tables. On a shared 2-core machine 32 concurrent tables queue
for the cores, so the latency at 32 is mostly waiting: the CPU time per turn is reported beside it.

Before the timed runs it counts, on one table with some history, the graph round trips a turn makes
before the model runs (every query the embedded graph executes between the turn's start and the
engine's first call) and after it, and the CPU time of a turn on the direct path (one table, so no
queueing).

Writes ``benchmarks/results/serving_overhead.json`` and ``serving_overhead.png``.

    .venv/bin/python benchmarks/serving_overhead.py [--turns 10] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.common import RESULTS, percentile_ms  # noqa: E402

console = Console()


def pct(samples: list[float], q: float) -> float:
    return round(percentile_ms(samples, q), 2)


def summarise(latencies: list[float], wall: float, cpu: float | None) -> dict[str, Any]:
    turns = len(latencies)
    return {
        "turns": turns,
        "p50_ms": pct(latencies, 0.5),
        "p95_ms": pct(latencies, 0.95),
        "mean_ms": round(statistics.mean(latencies) * 1000, 2),
        "turns_per_s": round(turns / wall, 1),
        "cpu_ms_per_turn": round(cpu / turns * 1000, 2) if cpu is not None else None,
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the three paths ------------------------------------------------------------------------------


async def _tables_direct(services: Any, campaigns: list[str], turns: int) -> list[float]:
    from schemas.serving import TurnRequest

    latencies: list[float] = []

    async def table(campaign_id: str) -> None:
        for i in range(turns):
            started = time.perf_counter()
            async for _ in services.flow.play(campaign_id, TurnRequest(text=f"I search the cellar, step {i}.")):
                pass
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(table(c) for c in campaigns))
    return latencies


async def _tables_http(base_url: str, campaigns: list[str], turns: int) -> list[float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(campaigns) + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:

        async def table(campaign_id: str) -> None:
            for i in range(turns):
                started = time.perf_counter()
                response = await client.post(
                    f"/api/v1/campaigns/{campaign_id}/turns", json={"text": f"I search the cellar, step {i}."}
                )
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201:
                    raise RuntimeError(f"turn failed: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(table(c) for c in campaigns))
    return latencies


def _campaigns_http(base_url: str, count: int) -> list[str]:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        world = client.post("/api/v1/worlds", json={"name": "Bench", "axioms": ["The dead stay dead."]}).json()
        return [
            client.post(
                "/api/v1/campaigns",
                json={"world_id": world["id"], "name": f"Table {i}", "profile": {"genre": "fantasy"}},
            ).json()["id"]
            for i in range(count)
        ]


class _Counted:
    """Counts the graph's round trips (one per query the engine executes) and marks where the model starts."""

    def __init__(self, graph: Any) -> None:
        self.calls = 0
        self.at_model: list[int] = []
        execute = graph._execute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return execute(*args, **kwargs)

        graph._execute = counted


def round_trips(services: Any, campaign_id: str, turns: int = 20) -> dict[str, Any]:
    """Graph round trips per turn before the model runs and in all, and CPU ms per turn, on one table."""
    from schemas.serving import TurnRequest

    counter = _Counted(services.story.graph)
    engine = services.narrator.default
    stream = engine.stream

    def marked(*args: Any, **kwargs: Any) -> Any:
        counter.at_model.append(counter.calls)
        return stream(*args, **kwargs)

    engine.stream = marked

    async def one(i: int) -> None:
        async for _ in services.flow.play(campaign_id, TurnRequest(text=f"I open the door, step {i}.")):
            pass

    before: list[int] = []
    total: list[int] = []
    try:
        for i in range(5):  # some history first: recent turns, a state to fold
            asyncio.run(one(i))
        cpu = _cpu()
        for i in range(turns):
            start = counter.calls
            asyncio.run(one(i))
            before.append(counter.at_model[-1] - start)
            total.append(counter.calls - start)
        cpu_ms = (_cpu() - cpu) / turns * 1000
    finally:
        engine.stream = stream
    return {
        "graph_round_trips_before_model": statistics.median(before),
        "graph_round_trips_per_turn": statistics.median(total),
        "cpu_ms_per_turn_one_table": round(cpu_ms, 2),
        "turns": turns,
    }


class PhaseTimer:
    """Times, on the direct path, the same calls the ingress makes to other deployments on Ray Serve (named
    as ``lorekeeper_serve_hop_seconds`` names them), so the two breakdowns sit side by side."""

    def __init__(self, services: Any) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        index = services.story.recall_index
        self._wrap(services.flow.searcher, "search", "Search.search")
        self._wrap(index, "search", "Search.recall_search")
        self._wrap(index, "write", "Search.recall_write")
        engine = services.narrator.default
        self._wrap_async(engine, "structured", "Narrator.structured")
        stream = engine.stream

        async def timed_stream(*args: Any, **kwargs: Any) -> Any:
            started, first = time.perf_counter(), True
            async for piece in stream(*args, **kwargs):
                if first:
                    self._add("Narrator.stream_first_piece", started)
                    first = False
                yield piece
            self._add("Narrator.stream", started)

        engine.stream = timed_stream

    def _add(self, name: str, started: float) -> None:
        self.sums[f"{name}.sum"] = self.sums.get(f"{name}.sum", 0.0) + time.perf_counter() - started
        self.counts[f"{name}.count"] = self.counts.get(f"{name}.count", 0.0) + 1

    def _wrap(self, obj: Any, method: str, name: str) -> None:
        call = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self._add(name, started)

        setattr(obj, method, timed)

    def _wrap_async(self, obj: Any, method: str, name: str) -> None:
        call = getattr(obj, method)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                self._add(name, started)

        setattr(obj, method, timed)

    def snapshot(self) -> dict[str, float]:
        return {**self.sums, **self.counts}


def run_direct_and_http(levels: list[int], turns: int, data: Path, *, cost_only: bool = False) -> dict[str, Any]:
    from narrator.engines import EchoEngine
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from schemas.story import StoryProfile
    from serve.app import create_app
    from serve.services import SingleEngine, open_services
    from tests.unit.serve_support import running

    settings = load_settings(data_dir=data / "direct")
    # echo everywhere: the default engine is the embedded model now, and its extractor seat would follow it
    serve = ServeSettings(api_host="127.0.0.1", narrator_engine=EngineKind.ECHO, max_concurrent_turns=1024)
    engine = EchoEngine("instant")
    out: dict[str, Any] = {"direct": {}, "http": {}}
    with open_services(settings, serve, narrator=SingleEngine(engine)) as services:
        services.open = True
        world = services.story.create_world("Bench", axioms=["The dead stay dead."])
        lone = services.story.create_campaign(world.id, "Round trips", StoryProfile(genre="fantasy")).id
        out["turn_cost"] = round_trips(services, lone)
        console.print(f"turn cost: {out['turn_cost']}")
        if cost_only:
            return out
        timer = PhaseTimer(services)
        for level in levels:
            campaigns = [
                services.story.create_campaign(world.id, f"Direct {level}-{i}", StoryProfile(genre="fantasy")).id
                for i in range(level)
            ]
            asyncio.run(_tables_direct(services, campaigns[:1], 1))  # warm the embedder and caches
            cpu, started, before = _cpu(), time.perf_counter(), timer.snapshot()
            latencies = asyncio.run(_tables_direct(services, campaigns, turns))
            out["direct"][str(level)] = summarise(latencies, time.perf_counter() - started, _cpu() - cpu)
            out["direct"][str(level)]["phases"] = breakdown(before, timer.snapshot(), len(latencies))
            console.print(f"direct  x{level}: {out['direct'][str(level)]}")
        with running(create_app(services, plugins=[], mcp=False)) as url:
            for level in levels:
                campaigns = _campaigns_http(url, level)
                asyncio.run(_tables_http(url, campaigns[:1], 1))
                cpu, started = _cpu(), time.perf_counter()
                latencies = asyncio.run(_tables_http(url, campaigns, turns))
                out["http"][str(level)] = summarise(latencies, time.perf_counter() - started, _cpu() - cpu)
                console.print(f"http    x{level}: {out['http'][str(level)]}")
    return out


_HOP = re.compile(r'^lorekeeper_serve_hop_seconds_(sum|count)\{deployment="(\w+)",method="(\w+)"\} (\S+)$')
_TURN_HTTP = re.compile(r'^lorekeeper_http_request_duration_seconds_(sum|count)\{route="([^"]*turns)"\} (\S+)$')


def _scrape(base_url: str) -> dict[str, float]:
    """The ingress's hop and turn-route timings (sums and counts) from its ``/metrics``."""
    text = httpx.get(f"{base_url}/metrics", timeout=60).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if match := _HOP.match(line):
            kind, deployment, method, value = match.groups()
            out[f"{deployment}.{method}.{kind}"] = float(value)
        elif match := _TURN_HTTP.match(line):
            kind, _, value = match.groups()
            out[f"ingress.turn_route.{kind}"] = out.get(f"ingress.turn_route.{kind}", 0.0) + float(value)
    return out


def breakdown(before: dict[str, float], after: dict[str, float], turns: int) -> dict[str, dict[str, float]]:
    """Per turn, for each hop the ingress made (and the turn route inside the ingress): calls and mean ms."""
    out: dict[str, dict[str, float]] = {}
    for key in sorted(after):
        if not key.endswith(".count"):
            continue
        name = key.removesuffix(".count")
        calls = after[key] - before.get(key, 0.0)
        if calls <= 0:
            continue
        total = after[f"{name}.sum"] - before.get(f"{name}.sum", 0.0)
        out[name] = {
            "calls_per_turn": round(calls / turns, 2),
            "ms_per_call": round(total / calls * 1000, 2),
            "ms_per_turn": round(total / turns * 1000, 2),
        }
    return out


def run_ray_serve(levels: list[int], turns: int, data: Path) -> dict[str, Any]:
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig
    from tests.unit.serve_support import on_local_ray

    settings = load_settings(data_dir=data / "ray")
    serve_settings = ServeSettings(narrator_engine=EngineKind.ECHO, narrator_model="instant", max_concurrent_turns=1024)
    config = AppConfig(
        plugins=[],
        mcp=False,
        narrator=DeploymentConfig(num_replicas=1, num_cpus=0.5, max_ongoing_requests=256),
        search=DeploymentConfig(num_cpus=0.5, max_ongoing_requests=256),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25, max_ongoing_requests=512),
    )
    out: dict[str, Any] = {}
    with on_local_ray(config, settings, serve_settings) as url:
        for level in levels:
            campaigns = _campaigns_http(url, level)
            asyncio.run(_tables_http(url, campaigns[:1], 1))
            before, started = _scrape(url), time.perf_counter()
            latencies = asyncio.run(_tables_http(url, campaigns, turns))
            out[str(level)] = summarise(latencies, time.perf_counter() - started, None)
            out[str(level)]["phases"] = breakdown(before, _scrape(url), len(latencies))
            console.print(f"ray     x{level}: {out[str(level)]}")
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["levels"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, marker in (("direct", "o"), ("http", "s"), ("ray_serve", "^")):
        if name not in results["paths"]:
            continue
        rows = [results["paths"][name][str(level)] for level in levels]
        ax1.plot(levels, [r["p95_ms"] for r in rows], marker=marker, label=f"{name} p95")
        ax1.plot(levels, [r["p50_ms"] for r in rows], marker=marker, linestyle=":", label=f"{name} p50")
        ax2.plot(levels, [r["turns_per_s"] for r in rows], marker=marker, label=name)
    ax1.axhline(20, color="grey", linestyle="--", linewidth=0.8, label="goal p95 at 32")
    ax1.set(xscale="log", yscale="log", xlabel="concurrent tables", ylabel="turn latency (ms)", title="Turn latency")
    ax1.set_xticks(levels, [str(level) for level in levels])
    ax2.set(xscale="log", xlabel="concurrent tables", ylabel="turns / s", title="Throughput (instant engine)")
    ax2.set_xticks(levels, [str(level) for level in levels])
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.suptitle(f"Serving overhead per turn, {results['machine']['cpus']} CPUs, embedded stores")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10, help="Turns each table plays.")
    parser.add_argument("--levels", default="1,8,32", help="Concurrent tables, comma separated.")
    parser.add_argument("--quick", action="store_true", help="3 turns per table at 1 and 8 tables.")
    parser.add_argument("--no-ray", action="store_true", help="Skip the Ray Serve path.")
    parser.add_argument("--cost-only", action="store_true", help="Only the round trips and CPU of a turn; prints them.")
    args = parser.parse_args()
    if args.cost_only:
        with tempfile.TemporaryDirectory(prefix="lk-serving-") as tmp:
            print(json.dumps(run_direct_and_http([], 0, Path(tmp), cost_only=True)["turn_cost"]))
        return
    levels = [1, 8] if args.quick else [int(x) for x in args.levels.split(",")]
    turns = 3 if args.quick else args.turns
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lk-serving-") as tmp:
        data = Path(tmp)
        paths = run_direct_and_http(levels, turns, data)
        turn_cost = paths.pop("turn_cost")
        if not args.no_ray:
            paths["ray_serve"] = run_ray_serve(levels, turns, data)
    ratios, p50_ratios = (
        {
            name: {
                str(level): round(paths[name][str(level)][key] / paths["direct"][str(level)][key], 2)
                for level in levels
            }
            for name in ("http", "ray_serve")
            if name in paths
        }
        for key in ("p95_ms", "p50_ms")
    )
    results = {
        "benchmark": "serving_overhead",
        "levels": levels,
        "turns_per_table": turns,
        "paths": paths,
        "p95_ratio_to_direct": ratios,
        "p50_ratio_to_direct": p50_ratios,
        "turn_cost": turn_cost,
        "goal": {"p95_ms_at_32": 20, "ray_serve_p50_ratio_to_direct": 1.5},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serving_overhead.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, RESULTS / "serving_overhead.png")
    table = Table("path", *[f"x{level} p50/p95 ms" for level in levels], *[f"x{level} turns/s" for level in levels])
    for name, rows in paths.items():
        table.add_row(
            name,
            *[f"{rows[str(level)]['p50_ms']}/{rows[str(level)]['p95_ms']}" for level in levels],
            *[str(rows[str(level)]["turns_per_s"]) for level in levels],
        )
    console.print(table)
    console.print(f"p95 ratio to direct: {ratios}")
    console.print(f"p50 ratio to direct: {p50_ratios}")


if __name__ == "__main__":
    main()
