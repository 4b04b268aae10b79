"""A small ingest's stages in this process: the same stage classes and sinks as the Ray Data pipeline.

For a job of a few files and a couple of thousand chunks, local Ray costs more than it saves: starting
Ray, its Data planning and three actor pools, and loading the embedding model in the embed actor took
15-20 s on two cores before the first batch, about what embedding 2,000 chunks takes. Here the stages
run one after another in the driver, with the two overlaps that matter on a small job:

* the embedding model loads (:class:`~jobs.stages.EmbedStage`'s constructor, in a thread) while the
  stages' stores open and the first file is extracted;
* the next file is extracted (in a second thread) while the current one is embedded and written.

Each file is embedded in batches of the plan's embed batch size and written when it is all embedded, so
it is finalized (searchable) and counted as done before the next file's chunks are embedded: the
progress moves from the first file. Rows pass between the stages encoded exactly as Ray Data carries
them (:mod:`jobs.rows`), and every written row goes to the same :class:`~jobs.report.Tally`, so the
two executors write the same chunks with the same ids and finalize items the same way.

SIGTERM stops the run between two batches (never inside a write): the files not finished are failed as
interrupted, as on Ray.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from jobs import stopping
from jobs.plan import IngestOptions, plan_stages
from jobs.report import IngestReport, ProgressCallback, Tally, failure_reason
from jobs.rows import ChunkRow, SourceRow, WrittenRow
from jobs.stages import EmbedStage, ExtractStage, WriteStage
from jobs.timeline import Timeline
from models.embedding import SentenceTransformerEmbedder, available_cpus
from schemas.knowledge import Library
from schemas.settings import Settings
from stores.catalog import Catalog

log = structlog.get_logger(__name__)

T = TypeVar("T")


def run_in_process(
    runnable: list[SourceRow],
    options: IngestOptions,
    settings: Settings,
    library: Library,
    embedder: SentenceTransformerEmbedder,
    catalog: Catalog,
    report: IngestReport,
    notify: ProgressCallback,
) -> None:
    """Extract, embed and write ``runnable`` here, tallying every written row (the signature of the Ray run)."""
    timeline = report.timeline
    plan = plan_stages(available_cpus(), 0.0, embedded_stores=True)
    tally = Tally(catalog, report, notify)
    model = _in_daemon_thread(_load_model, options, report)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-extract")
    extract: ExtractStage | None = None
    write: WriteStage | None = None
    error: str | None = None
    try:
        with timeline.span("stage_opening"):
            extract = ExtractStage(settings, options, library, embedder.max_tokens)
            write = WriteStage(settings, options, library, embedder.name, embedder.dim)
        begin = timeline.now()
        ahead: Future[dict[str, Any]] | None = pool.submit(extract, SourceRow.encode(runnable[:1]))
        for index in range(len(runnable)):
            with stopping.interruptible():  # only waiting here: SIGTERM stops the run between files
                extracted = ahead.result() if ahead is not None else {}
            following = runnable[index + 1 : index + 2]
            ahead = pool.submit(extract, SourceRow.encode(following)) if following else None
            for row in _embed_and_write(extracted, model, write, plan.embed_batch_size, timeline):
                tally.take(row)
            if "first_batch" not in timeline.spans:
                timeline.record("first_batch", begin, timeline.now())
        timeline.record("pipeline", begin, timeline.now())
    except stopping.Interrupted as exc:
        error = str(exc)
        log.warning("ingest_pipeline_stopped", reason=error, executor="local")
    except Exception as exc:  # noqa: BLE001 - a stage that cannot start (a store down) fails its jobs
        error = failure_reason(exc)
        log.error("ingest_pipeline_failed", error=error, executor="local")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a file being extracted finishes its writes
        for stage in (extract, write):  # the stores close before the vector index is optimized
            if stage is not None:
                stage.close()
    tally.close_unfinished(runnable, error)


MODEL_LOAD_THREAD = "ingest-model-load"


def leave_if_model_loading(code: int) -> None:
    """Exit with ``code`` now, the exit handlers run, where a stopped run left the model loading.

    A run stopped by SIGTERM while the model loads does not wait for the load (:func:`_in_daemon_thread`);
    the interpreter's finalization then met torch mid-load in that thread and aborted ("terminate called
    without an active exception", exit -6 instead of 143). The stores are closed and the jobs recorded by
    then: the exit handlers (the embedded servers' stops among them) run here, and the process leaves
    without finalizing. Returns where no load is under way.
    """
    if not any(t.name == MODEL_LOAD_THREAD and t.is_alive() for t in threading.enumerate()):
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def _in_daemon_thread(fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` in a daemon thread: a run stopped by SIGTERM while the model loads exits at once
    instead of waiting for the load (it writes nothing), which a pool thread would make it do."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name=MODEL_LOAD_THREAD, daemon=True).start()
    return future


def _load_model(options: IngestOptions, report: IngestReport) -> EmbedStage:
    """The embed stage (its constructor loads the model and runs a warm-up pass), timed as ``model_load``."""
    with report.timeline.span("model_load"):
        return EmbedStage(options)


def _embed_and_write(
    extracted: dict[str, Any],
    model: Future[EmbedStage],
    write: WriteStage,
    batch_size: int,
    timeline: Timeline,
) -> list[WrittenRow]:
    """One file's rows embedded in batches of ``batch_size`` and written together (status rows pass through)."""
    rows = ChunkRow.decode(extracted)
    if not rows:
        return []
    with stopping.interruptible():
        embed = model.result()  # a model that fails to load fails the run's files with its reason
    embedded: dict[str, Any] = {}
    for start in range(0, len(rows), batch_size):
        signum = stopping.requested()
        if signum is not None:  # between two batches: nothing half-written
            raise stopping.Interrupted(signum)
        part = embed(ChunkRow.encode(rows[start : start + batch_size]))
        for column, values in part.items():
            embedded.setdefault(column, []).extend(values)
    return WrittenRow.decode(write(embedded))
