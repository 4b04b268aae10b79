"""The Narrator deployment's autoscaling, shown: a burst of tables on local Ray, then idle; replicas over time.

The application is the one ``lorekeeper serve`` runs (Ingress → Narrator / Search / Gate on the embedded
stores), with the Narrator autoscaled from the serving settings (``LOREKEEPER_NARRATOR_MIN_REPLICAS``,
``…_MAX_REPLICAS``, ``…_TARGET_ONGOING_REQUESTS``, ``…_UPSCALE_DELAY_S``, ``…_DOWNSCALE_DELAY_S``; the
benchmark sets short delays so a run takes minutes, not the production defaults' ten).

The engine is a paced one: the echo engine with a fixed delay before each streamed word (``--word-ms``),
so a narration holds its replica for about a second the way a model's decoding does, without a model's
CPU cost on a shared 2-core machine. It shows the load shape (requests in flight per replica) that drives
the autoscaler, not a model's throughput: say so beside the figures.

Phases: ``--idle-before`` seconds idle, ``--tables`` tables each playing turns back to back over HTTP for
``--burst`` seconds, then idle until the Narrator is back at its minimum (or ``--idle-after`` seconds).
Every second it records the Narrator's running replicas (``serve.status()``), the tables playing and
the turns done.

Writes ``benchmarks/results/serving_autoscale.json`` and ``serving_autoscale.png``.

    .venv/bin/python benchmarks/serving_autoscale.py [--tables 16] [--burst 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.common import RESULTS  # noqa: E402


class PacedEngines:
    """Every seat's engine: the echo engine with ``word_s`` before each word (the narration paced like
    decoding; its structured answer, the extraction, is immediate and empty)."""

    def __init__(self, word_s: float) -> None:
        self.word_s = word_s

    def __call__(self, settings: Any, *, role: str = "narrator") -> Any:
        from narrator.engines import EchoEngine

        return EchoEngine("paced", delay_s=self.word_s if role == "narrator" else 0.0)


def narrator_replicas() -> int:
    """Running Narrator replicas of the application, from Serve's own status."""
    from ray import serve

    status = serve.status().applications.get("lorekeeper")
    if status is None or "Narrator" not in status.deployments:
        return 0
    states = status.deployments["Narrator"].replica_states
    return int(sum(count for state, count in states.items() if str(getattr(state, "value", state)) == "RUNNING"))


class Recorder:
    """Samples the replicas, the tables playing and the turns done every ``interval`` seconds."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.started = time.monotonic()
        self.samples: list[dict[str, Any]] = []
        self.tables = 0
        self.turns = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                replicas = narrator_replicas()
            except Exception:  # noqa: BLE001 - a status call that times out under load is a gap, not an end
                replicas = -1
            self.samples.append(
                {"t_s": self.now(), "replicas": replicas, "tables": self.tables, "turns": self.turns, "load1": _load()}
            )
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


async def burst(url: str, campaigns: list[str], seconds: float, recorder: Recorder) -> list[float]:
    """Every table plays turns back to back for ``seconds``; the latency of each turn."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=len(campaigns) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def table(campaign_id: str) -> None:
            recorder.tables += 1
            i = 0
            try:
                while time.monotonic() < deadline:
                    started = time.perf_counter()
                    response = await client.post(
                        f"/api/v1/campaigns/{campaign_id}/turns", json={"text": f"We press on through the pass, {i}."}
                    )
                    if response.status_code == 201:
                        latencies.append(time.perf_counter() - started)
                        recorder.turns += 1
                    else:
                        recorder.failed += 1
                    i += 1
            finally:
                recorder.tables -= 1

        await asyncio.gather(*(table(c) for c in campaigns))
    return latencies


def _campaigns(url: str, count: int) -> list[str]:
    with httpx.Client(base_url=url, timeout=300) as client:
        world = client.post("/api/v1/worlds", json={"name": "Burst", "axioms": []})
        world.raise_for_status()
        out = []
        for i in range(count):
            body = {"world_id": world.json()["id"], "name": f"Table {i}", "profile": {"genre": "fantasy"}}
            made = client.post("/api/v1/campaigns", json=body)
            made.raise_for_status()
            out.append(made.json()["id"])
        return out


def run(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig, narrator_deployment
    from tests.unit.serve_support import on_local_ray

    serve_settings = ServeSettings(
        narrator_engine=EngineKind.ECHO,
        narrator_model="paced",
        max_concurrent_turns=1024,
        narrator_min_replicas=args.min_replicas,
        narrator_max_replicas=args.max_replicas,
        narrator_target_ongoing_requests=args.target,
        narrator_upscale_delay_s=args.upscale_delay,
        narrator_downscale_delay_s=args.downscale_delay,
    )
    narrator = narrator_deployment(serve_settings)
    narrator = narrator.model_copy(update={"num_cpus": 0.25})  # four replicas fit 2 shared cores' shares
    config = AppConfig(
        plugins=[],
        mcp=False,
        narrator=narrator,
        search=DeploymentConfig(num_cpus=0.25, max_ongoing_requests=256),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25, max_ongoing_requests=512),
    )
    settings = load_settings(data_dir=data)
    with on_local_ray(config, settings, serve_settings, engines=PacedEngines(args.word_ms / 1000)) as url:
        campaigns = _campaigns(url, args.tables)
        recorder = Recorder()
        recorder.start()
        time.sleep(args.idle_before)
        burst_start = recorder.now()
        latencies = asyncio.run(burst(url, campaigns, args.burst, recorder))
        burst_end = recorder.now()
        deadline = time.monotonic() + args.idle_after
        while time.monotonic() < deadline:
            time.sleep(1)
            if (
                recorder.samples
                and recorder.samples[-1]["replicas"] == args.min_replicas
                and (recorder.now() - burst_end > args.downscale_delay)
            ):
                break
        time.sleep(3)
        recorder.stop()
    samples = recorder.samples
    peak = max(s["replicas"] for s in samples)
    first_up = next((s["t_s"] for s in samples if s["t_s"] >= burst_start and s["replicas"] > args.min_replicas), None)
    peak_at = next((s["t_s"] for s in samples if s["replicas"] == peak), None)
    back = next((s["t_s"] for s in samples if s["t_s"] > burst_end and s["replicas"] == args.min_replicas), None)
    latencies.sort()
    return {
        "autoscaling": narrator.autoscaling.model_dump() if narrator.autoscaling else None,
        "engine": f"echo, {args.word_ms} ms before each streamed word (load shape only, not a model's cost)",
        "tables": args.tables,
        "burst_s": [burst_start, burst_end],
        "turns": recorder.turns,
        "failed_turns": recorder.failed,
        "turn_p50_ms": round(latencies[len(latencies) // 2] * 1000, 1) if latencies else None,
        "peak_replicas": peak,
        "first_scale_up_after_burst_start_s": round(first_up - burst_start, 1) if first_up is not None else None,
        "peak_after_burst_start_s": round(peak_at - burst_start, 1) if peak_at is not None else None,
        "back_to_min_after_burst_end_s": round(back - burst_end, 1) if back is not None else None,
        "samples": samples,
    }


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = results["samples"]
    t = [s["t_s"] for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.step(t, [s["replicas"] for s in samples], where="post", label="Narrator replicas (running)", color="C0")
    ax.set(xlabel="seconds", ylabel="replicas")
    ax.set_ylim(0, results["autoscaling"]["max_replicas"] + 1)
    twin = ax.twinx()
    twin.plot(t, [s["tables"] for s in samples], color="C1", alpha=0.6, label="tables playing")
    twin.set_ylabel("tables playing")
    start, end = results["burst_s"]
    ax.axvspan(start, end, color="grey", alpha=0.15, label="burst")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=8)
    a = results["autoscaling"]
    ax.set_title(
        f"Narrator autoscaling: {results['tables']} tables, target {a['target_ongoing_requests']} in flight/replica, "
        f"delays up {a['upscale_delay_s']} s / down {a['downscale_delay_s']} s",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=16)
    parser.add_argument("--burst", type=float, default=60.0, help="Seconds the tables play.")
    parser.add_argument("--idle-before", type=float, default=10.0)
    parser.add_argument("--idle-after", type=float, default=90.0, help="Most seconds to wait for the scale-down.")
    parser.add_argument("--word-ms", type=float, default=60.0, help="Delay before each streamed word.")
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=4)
    parser.add_argument("--target", type=float, default=2.0, help="Target requests in flight per replica.")
    parser.add_argument("--upscale-delay", type=float, default=3.0)
    parser.add_argument("--downscale-delay", type=float, default=15.0)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lk-autoscale-") as tmp:
        results = run(args, Path(tmp))
    results = {
        "benchmark": "serving_autoscale",
        **results,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serving_autoscale.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, RESULTS / "serving_autoscale.png")
    summary = {k: v for k, v in results.items() if k != "samples"}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
