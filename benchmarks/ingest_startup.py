"""Where a person waits: a small ingest in this process vs on local Ray vs embedding its chunks alone,
and ``serve --direct``'s time to its first ``/health`` with the models warming in the background vs
loaded first (``--eager``, the order before), all in one run, interleaved.

Usage::

    .venv/bin/python benchmarks/ingest_startup.py               # 2 rounds, ~15 minutes on 2 busy cores
    .venv/bin/python benchmarks/ingest_startup.py --rounds 3 --folder ../shared/corpus/rulebooks/fate-srd

Measured, each variant a fresh process on a fresh data folder, rounds interleaved (the order of the
variants alternates round to round, the machine is shared and its load swings):

1. **ingest**: ``lorekeeper ingest FOLDER --json --executor local`` and ``--executor ray`` (the README's
   first command; ``auto`` picks ``local`` for this folder): the process's wall time, and from the
   report's phase timeline the job's total, the first file done and the first searchable chunk.
2. **embedding alone**: the same files extracted and chunked in one process, the model loaded, then
   bare ``SentenceTransformer.encode`` (its defaults) timed over exactly the texts the embed stage gets
   (heading path + text). Goal: end to end >= 0.8x this (``embed_alone_s / ingest_s``), first
   searchable chunk under 15 s.
3. **serve start-up**: ``lorekeeper serve --direct`` on the data folder of a finished ingest, polled
   every 0.1 s: seconds from the process start to the first ``/health`` answer, and to ``ready``
   (nothing warming), with the search models warming in the background (now) and with ``--eager``
   (models, and Ray for the ingest routes, before listening: what the server did before). Goal: first
   ``/health`` within 10 s.

Writes ``benchmarks/results/ingest_startup.json`` (every run, medians, load averages) and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import CORPUS, RESULTS, machine_info, round_floats  # noqa: E402

FOLDER = CORPUS / "rulebooks" / "fate-srd"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

EMBED_ALONE = """
import json, sys, time
from pathlib import Path
from jobs.chunk import chunk_document
from jobs.extract import extract_document
from jobs.plan import fit_chunking
from jobs.stages import embedding_text
from jobs.tokens import TokenCounter
from models.embedding import SentenceTransformerEmbedder
from schemas.knowledge import Library, LibraryType

embedder = SentenceTransformerEmbedder()
chunking = fit_chunking(Library(name="b", type=LibraryType.RULEBOOK).effective_chunking(), embedder.max_tokens)
texts = []
for path in sorted(Path(sys.argv[1]).iterdir()):
    doc = extract_document(path.read_bytes(), path.name)
    texts += [embedding_text(c.heading_path, c.text) for c in chunk_document(doc, chunking, TokenCounter())]
model = embedder.model
model.encode(["warm-up"])
started = time.perf_counter()
model.encode(texts)
print(json.dumps({"chunks": len(texts), "embed_s": time.perf_counter() - started}))
"""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def run_ingest(folder: Path, executor: str, work: Path, warm: Path | None = None) -> dict[str, Any]:
    """One ``lorekeeper ingest --json`` in a fresh process on a fresh data folder; with ``warm`` (the record of
    a ``lorekeeper up`` head), the folder gets that record, so the ingest attaches to the running head."""
    data = work / f"data-{executor}-{time.monotonic_ns()}"
    if warm is not None:
        (data / "ray").mkdir(parents=True)
        shutil.copy(warm, data / "ray" / "head.json")
    env = {**os.environ, **ENV, "LOREKEEPER_DATA_DIR": str(data)}
    env.pop("RAY_ADDRESS", None)
    load = _load()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "lorekeeper.cli", "ingest", str(folder), "--library", "bench", "--type", "rulebook"]
        + ["--json", "--executor", executor],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ingest --executor {executor} failed: {done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    timeline = report["timeline"]
    return {
        "variant": f"ingest {executor}" + (" (warm)" if warm is not None else ""),
        "wall_s": wall,
        "job_s": report["seconds"],
        "chunks": sum(f["chunks"] for f in report["files"]),
        "first_file_done_s": timeline["first_file_done_s"],
        "first_searchable_s": timeline["first_searchable_s"],
        "phases": {name: span["seconds"] for name, span in timeline["phases"].items()},
        "executor": report["executor"],
        "executor_reason": report["executor_reason"],
        "load_before": load,
        "load_after": _load(),
        "data": str(data),
    }


@contextmanager
def warm_head(work: Path) -> Iterator[Path]:
    """``lorekeeper up`` for the run (its record's path), ``lorekeeper down`` after it."""
    env = {**os.environ, **ENV, "LOREKEEPER_DATA_DIR": str(work / "head")}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "lorekeeper.cli"]
    started = time.perf_counter()
    subprocess.run([*command, "up"], env=env, cwd=work, check=True, timeout=600)
    print(json.dumps({"lorekeeper_up_s": round(time.perf_counter() - started, 2)}), flush=True)
    try:
        yield work / "head" / "ray" / "head.json"
    finally:
        subprocess.run([*command, "down"], env=env, cwd=work, check=False, timeout=600)


def run_embed_alone(folder: Path) -> dict[str, Any]:
    load = _load()
    done = subprocess.run(
        [sys.executable, "-c", EMBED_ALONE, str(folder)],
        env={**os.environ, **ENV},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"embedding alone failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"variant": "embed alone", **result, "load_before": load, "load_after": _load()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_serve(data: str, eager: bool, work: Path) -> dict[str, Any]:
    """Seconds from ``serve --direct`` starting to its first ``/health`` answer and to ``ready``."""
    import httpx

    port = _free_port()
    env = {**os.environ, **ENV, "LOREKEEPER_DATA_DIR": data, "LOREKEEPER_API_PORT": str(port)}
    args = [sys.executable, "-m", "lorekeeper.cli", "serve", "--direct"] + (["--eager"] if eager else [])
    load = _load()
    started = time.perf_counter()
    process = subprocess.Popen(
        args, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    first: float | None = None
    first_body: dict[str, Any] = {}
    ready: float | None = None
    try:
        while time.perf_counter() - started < 300 and process.poll() is None:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            now = time.perf_counter() - started
            if first is None:
                first, first_body = now, body
            if body.get("ready", not body.get("warming")):
                ready = now
                break
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)
    return {
        "variant": "serve eager (before)" if eager else "serve warming (now)",
        "first_health_s": first,
        "ready_s": ready,
        "first_warming": first_body.get("warming"),
        "load_before": load,
        "load_after": _load(),
    }


def _median(runs: list[dict[str, Any]], variant: str, key: str) -> float | None:
    values = [r[key] for r in runs if r["variant"] == variant and r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    embed = _median(runs, "embed alone", "embed_s")
    out: dict[str, Any] = {"embed_alone_s": embed}
    for executor, variant in (("local", "ingest local"), ("ray", "ingest ray"), ("ray_warm", "ingest ray (warm)")):
        wall, job = _median(runs, variant, "wall_s"), _median(runs, variant, "job_s")
        if wall is None:
            continue
        phases = [r["phases"] for r in runs if r["variant"] == variant]
        out[executor] = {
            "wall_s": wall,
            "job_s": job,
            "first_file_done_s": _median(runs, variant, "first_file_done_s"),
            "first_searchable_s": _median(runs, variant, "first_searchable_s"),
            "vs_embed_alone_wall": embed / wall if embed and wall else None,
            "vs_embed_alone_job": embed / job if embed and job else None,
            "phases_median_s": {
                name: statistics.median(p[name] for p in phases if name in p)
                for name in ("ray_start", "ray_data_planning", "first_batch", "ray_shutdown")
                if any(name in p for p in phases)
            },
        }
    for eager, name in ((False, "serve_now"), (True, "serve_before")):
        variant = "serve eager (before)" if eager else "serve warming (now)"
        out[name] = {
            "first_health_s": _median(runs, variant, "first_health_s"),
            "ready_s": _median(runs, variant, "ready_s"),
        }
    return out


def plot(runs: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [n for n in ("ingest local", "ingest ray", "ingest ray (warm)") if any(r["variant"] == n for r in runs)]
    for i, name in enumerate(names):
        walls = [r["wall_s"] for r in runs if r["variant"] == name]
        firsts = [r["first_searchable_s"] for r in runs if r["variant"] == name]
        left.scatter([i - 0.1] * len(walls), walls, color="tab:blue", label="end to end (process)" if i == 0 else None)
        left.scatter([i + 0.1] * len(firsts), firsts, color="tab:green", label="first searchable" if i == 0 else None)
    embeds = [r["embed_s"] for r in runs if r["variant"] == "embed alone"]
    if embeds:
        left.axhline(statistics.median(embeds), color="tab:gray", linestyle="--", label="embedding alone")
        left.axhline(statistics.median(embeds) / 0.8, color="tab:red", linestyle=":", label="goal: 0.8x")
    left.axhline(15, color="tab:green", linestyle=":", label="goal: first searchable 15 s")
    left.set_xticks(range(len(names)), names)
    left.set_ylabel("seconds")
    left.set_title(f"ingest of {summary.get('chunks', '?')} chunks (each dot a run)")
    left.legend(fontsize=7)
    if not any(r["variant"].startswith("serve") for r in runs):  # --parts warm: where the ingest's start went
        _plot_phases(right, runs, names)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return
    variants = ["serve warming (now)", "serve eager (before)"]
    for i, name in enumerate(variants):
        first = [r["first_health_s"] for r in runs if r["variant"] == name and r["first_health_s"] is not None]
        ready = [r["ready_s"] for r in runs if r["variant"] == name and r["ready_s"] is not None]
        right.scatter([i - 0.1] * len(first), first, color="tab:blue", label="first /health" if i == 0 else None)
        right.scatter([i + 0.1] * len(ready), ready, color="tab:orange", label="ready" if i == 0 else None)
    right.axhline(10, color="tab:red", linestyle=":", label="goal: 10 s")
    right.set_xticks(range(len(variants)), variants)
    right.set_ylabel("seconds from process start")
    right.set_title("serve --direct start-up")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_phases(ax: Any, runs: list[dict[str, Any]], names: list[str]) -> None:
    """Median seconds of the Ray phases of each ingest variant, stacked."""
    bottom = [0.0] * len(names)
    for phase in ("ray_start", "ray_data_planning", "first_batch", "ray_shutdown"):
        heights = []
        for name in names:
            values = [r["phases"][phase] for r in runs if r["variant"] == name and phase in r.get("phases", {})]
            heights.append(statistics.median(values) if values else 0.0)
        ax.bar(range(len(names)), heights, bottom=bottom, label=phase)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds (median)")
    ax.set_title("the job's Ray phases")
    ax.legend(fontsize=7)


def save(runs: list[dict[str, Any]], args: argparse.Namespace, started: float, *, final: bool) -> dict[str, Any]:
    """Write the JSON (after every run, so a cut-short run keeps what it measured) and, at the end, the plot."""
    kept = [{k: v for k, v in run.items() if k != "data"} for run in runs]
    summary = summarize(kept)
    summary["chunks"] = next((r["chunks"] for r in kept if r["variant"].startswith("ingest")), None)
    folder = args.folder.resolve()
    result = {
        "benchmark": "ingest_startup",
        "folder": str(folder.relative_to(CORPUS.resolve())) if folder.is_relative_to(CORPUS.resolve()) else str(folder),
        "rounds": args.rounds,
        "complete": final,
        "seconds": round(time.time() - started, 1),
        "machine": machine_info(load_average=True),
        "summary": summary,
        "runs": kept,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(round_floats(result, 3), indent=2) + "\n")
    if final:
        plot(kept, summary, args.out.with_suffix(".png"))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest_startup.json")
    parser.add_argument(
        "--parts",
        choices=("all", "warm"),
        default="all",
        help="warm: only the ingest on Ray, with its own Ray vs attached to a `lorekeeper up` head, interleaved.",
    )
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    started = time.time()

    def add(run: dict[str, Any]) -> None:
        runs.append(run)
        print(json.dumps(round_floats({k: v for k, v in run.items() if k != "data"}, 2)), flush=True)
        save(runs, args, started, final=False)

    with tempfile.TemporaryDirectory(prefix="lk-startup-") as tmp:
        work = Path(tmp)
        if args.parts == "warm":
            with warm_head(work) as head:
                for round_ in range(args.rounds):
                    for warm in (None, head) if round_ % 2 == 0 else (head, None):
                        add(run_ingest(args.folder, "ray", work, warm) | {"round": round_})
            summary = save(runs, args, started, final=True)
            print(json.dumps(round_floats(summary, 3), indent=2))
            return
        for round_ in range(args.rounds):
            order = ["local", "ray"] if round_ % 2 == 0 else ["ray", "local"]
            for executor in order:
                add(run_ingest(args.folder, executor, work) | {"round": round_})
            with warm_head(work) as head:  # the same ingest attached to a `lorekeeper up` head
                add(run_ingest(args.folder, "ray", work, head) | {"round": round_})
            add(run_embed_alone(args.folder) | {"round": round_})
            data = next(r["data"] for r in runs if r["variant"] == "ingest local")
            for eager in (False, True) if round_ % 2 == 0 else (True, False):
                add(run_serve(data, eager, work) | {"round": round_})
    summary = save(runs, args, started, final=True)
    print(json.dumps(round_floats(summary, 3), indent=2))


if __name__ == "__main__":
    main()
