"""The ingest job: discover files, run the stages (Ray Data, or in this process), make finished items visible.

``run_ingest`` is what ``lorekeeper ingest``, ``python -m jobs ingest`` (a Ray Job entrypoint) and the
ingest API call. It runs on a cluster when ``RAY_ADDRESS`` is set; otherwise a small job (see
:func:`jobs.plan.choose_executor`) runs the same stage classes in this process (:mod:`jobs.inprocess`)
and a larger one on local Ray. The report says which ran and why, with a timeline of its phases.

An item becomes visible to search only when every one of its chunks is in every store: the write
stage reports each written chunk back to the driver, and the driver flips the item to ``ready`` (and
supersedes its previous version) once the count matches.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import structlog

from jobs import metrics, stopping
from jobs.inprocess import run_in_process
from jobs.plan import IngestExecutor, IngestOptions, StagePlan, choose_executor, plan_stages
from jobs.report import FileOutcome, IngestReport, ProgressCallback, Tally, fail_job, failure_reason
from jobs.rows import SourceRow, WrittenRow
from jobs.rule_facts import FACT_FILE_TYPES, RULE_FACTS_READ, rule_tables
from jobs.sources import SourceFile, discover
from jobs.stages import EmbedStage, ExtractStage, WriteStage, retrying
from jobs.timeline import Timeline
from models.embedding import SentenceTransformerEmbedder
from schemas.common import JobStatus, utc_now
from schemas.errors import LorekeeperError
from schemas.knowledge import (
    Collection,
    FileType,
    IngestJob,
    IngestProgress,
    IngestSource,
    IngestStage,
    ItemStatus,
    Library,
)
from schemas.logs import worker_setup_hook
from schemas.settings import BlobBackend, GraphBackend, Settings, TextBackend, VectorBackend
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store

if TYPE_CHECKING:
    import ray.data

log = structlog.get_logger(__name__)


def ensure_library(catalog: Catalog, options: IngestOptions) -> tuple[Library, Collection | None]:
    """The library (and collection) named by the options, created on first use."""
    library = catalog.find_library(options.library)
    if library is None:
        library = catalog.save_library(Library(name=options.library, type=options.library_type))
    elif library.type is not options.library_type:
        log.warning(
            "ingest_library_type_kept", library=library.name, existing=library.type.value, asked=options.library_type
        )
    collection = None
    if options.collection:
        collection = catalog.find_collection(library.uid, options.collection)
        if collection is None:
            collection = catalog.save_collection(Collection(library_uid=library.uid, name=options.collection))
    return library, collection


def _embedded(settings: Settings) -> bool:
    return (
        settings.text_location().backend is TextBackend.TANTIVY
        or settings.vector_location().backend is not VectorBackend.QDRANT_SERVER
        or settings.graph_location().backend is GraphBackend.EMBEDDED
        or settings.blob_location().backend is BlobBackend.LOCAL
    )


def _precheck(file: SourceFile, options: IngestOptions) -> str | None:
    """Why a file fails before any worker touches it, or None."""
    try:
        FileType.from_filename(file.name)
    except ValueError as exc:
        return str(exc)
    if file.size == 0:
        return f"{file.name}: the file is empty"
    if file.size > options.max_file_bytes:
        return f"{file.name}: {file.size} bytes is over the limit of {options.max_file_bytes} bytes"
    return None


def _unchanged_local_file(
    catalog: Catalog, library: Library, job: IngestJob, file: SourceFile, *, rule_facts: bool = False
) -> str | None:
    """The ready item a local file is unchanged from, with its job closed as skipped; else None.

    Checked on the driver so that a re-run over unchanged files finishes in seconds, without
    starting Ray or loading a model. (Object-store sources are checked by the extract stage.) With
    ``rule_facts``, an item whose facts were never read goes on to the extract stage, which reads
    them and skips the rest.
    """
    if file.source is not IngestSource.PATH:
        return None
    versions = catalog.items_for_source(library.uid, job.source_ref)
    current = next((v for v in versions if v.status is ItemStatus.READY), None)
    if current is None:
        return None
    if rule_facts and current.file_type in FACT_FILE_TYPES and not catalog.item_props(current.uid).get(RULE_FACTS_READ):
        return None
    digest = hashlib.sha256()
    with open(file.ref, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != current.content_hash:
        return None
    now = utc_now()
    catalog.save_job(
        catalog.get_job(job.id).validated_copy(
            item_uid=current.uid,
            status=JobStatus.COMPLETED,
            started_at=now,
            completed_at=now,
            progress=IngestProgress(fraction=1.0, stage=IngestStage.FETCHING, message="unchanged; skipped"),
        )
    )
    log.info("ingest_item_unchanged", job_id=job.id, item_uid=current.uid)
    return current.uid


def start_ray(warm: str | None = None) -> bool:
    """Connect to ``RAY_ADDRESS``, else to ``warm`` (the head ``lorekeeper up`` keeps running), else start
    local Ray. Returns whether this call connected (the caller then disconnects; a head it attached to
    keeps running)."""
    import ray

    if ray.is_initialized():
        return False
    # Without RAY_ADDRESS or a warm head, a Ray of our own: ray.init() would otherwise join any cluster
    # that a `ray start` left on this machine (a Ray Job's driver always has RAY_ADDRESS set).
    address = os.environ.get("RAY_ADDRESS") or warm or "local"
    log.info("ingest_ray_address", address=address, warm=bool(warm) and address == warm)
    if address == "local" or address == warm:
        # Local runs need no cluster token; a cluster keeps its own auth settings.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    stopping.init_ray(  # ray.init, keeping a command's SIGTERM handling (Ray's would exit mid-write)
        address=address,
        include_dashboard=False,
        log_to_driver=os.environ.get("LOREKEEPER_RAY_LOGS", "") == "1",
        configure_logging=False,
        logging_level=logging.WARNING,
        runtime_env=_runtime_env(),
    )
    return True


def _runtime_env() -> dict[str, object]:
    """The workers' environment: offline models, and this process's log configuration (schemas.logs), so a
    stage actor writes the same JSON lines as the driver, with the job and item it is working on."""
    env: dict[str, object] = {
        "env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    }
    hook = worker_setup_hook()
    if hook is not None:
        env["worker_process_setup_hook"] = hook
    return env


_BLOCK_BYTES = 1 << 20

#: A custom Ray resource marking the node whose disk holds the embedded vector index (the head);
#: when the cluster has it, the single write stage actor is placed there.
VECTOR_WRITER_RESOURCE = "lorekeeper_vector_writer"


def _configure_ray_data() -> None:
    """Blocks of about a megabyte; our progress display replaces Ray Data's (its logs go to the Ray log files)."""
    import ray.data

    context = ray.data.DataContext.get_current()
    # A long book's chunks leave extraction as one batch; blocks of about a megabyte (a few hundred
    # chunks) let its first embeddings reach the writer while the rest are still being embedded.
    context.target_max_block_size = _BLOCK_BYTES
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.enable_auto_log_stats = False
    if os.environ.get("LOREKEEPER_RAY_LOGS", "") != "1":
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        logging.getLogger("ray").setLevel(logging.WARNING)


def _stage_plan(settings: Settings) -> StagePlan:
    import ray

    resources = ray.cluster_resources()
    return plan_stages(resources.get("CPU", 1.0), resources.get("GPU", 0.0), embedded_stores=_embedded(settings))


def run_ingest(
    inputs: Sequence[str],
    options: IngestOptions,
    *,
    settings: Settings,
    jobs: Sequence[IngestJob] | None = None,
    on_progress: ProgressCallback | None = None,
) -> IngestReport:
    """Ingest files and folders (or ``s3://bucket/prefix``) into the configured stores.

    Args:
        inputs: paths or S3 URLs; ignored when ``jobs`` are given.
        options: library, type, classification and model settings.
        settings: the stores to write to.
        jobs: existing pending jobs to run (the API and retries); their ``source_ref`` says what to read.
        on_progress: called with ``(event, fields)`` as files finish and chunks are written.

    Returns:
        One outcome per file; failures are in the report, never raised.

    Raises:
        InvalidRequest: an input path that does not exist.
        TableError: ``settings.rule_families`` names a family that is not shipped or a bad table file.
    """
    timeline = Timeline()
    notify = on_progress or (lambda event, fields: None)
    if settings.rule_facts:
        rule_tables(settings)  # a bad LOREKEEPER_RULE_FAMILIES fails the run here, naming file and key
    with timeline.span("store_opening"):
        graph = open_graph_store(settings)
        catalog = Catalog(graph)
        from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

        # Every store call of the driver is idempotent and retried: a store that restarts mid-job (a
        # crashed embedded graph) costs seconds, never the job or a file left "processing".
        retrying("ensure_schema", partial(graph.ensure_schema, LOREKEEPER_GRAPH_SCHEMA))
        blob = open_blob_store(settings)
        retrying("ensure_bucket", blob.ensure_bucket)
        library, collection = retrying("ensure_library", partial(ensure_library, catalog, options))
    embedder = SentenceTransformerEmbedder(options.embedding)
    report = IngestReport(library_uid=library.uid, embedding_model=embedder.name, timeline=timeline)
    with timeline.span("discovery"):
        if jobs is None:
            pending = _new_jobs(catalog, discover(inputs, blob_store=blob), library, collection, embedder.name)
        else:
            pending = [(job, _source_of(job)) for job in jobs]
        notify("files_found", {"files": len(pending)})
        runnable = _runnable(pending, options, settings, catalog, library, report, notify)
    if runnable:
        executor, why = choose_executor(
            options, [(file.name, file.size) for _, file in runnable], cluster=os.environ.get("RAY_ADDRESS")
        )
        report.executor, report.executor_reason = executor.value, why
        log.info("ingest_executor_chosen", executor=executor.value, reason=why, files=len(runnable))
        rows = [SourceRow(job.id, f.ref, f.name, f.source, f.bucket, f.key) for job, f in runnable]
        run = run_in_process if executor is IngestExecutor.LOCAL else _run_pipeline
        run(rows, options, settings, library, embedder, catalog, report, notify)
        with timeline.span("vector_optimize"):
            _optimize_vectors(settings, options.vector_collection)
    report.seconds = timeline.now()
    graph.close()
    _record_metrics(report, library)
    return report


def _new_jobs(
    catalog: Catalog,
    files: Iterable[SourceFile],
    library: Library,
    collection: Collection | None,
    model: str,
) -> list[tuple[IngestJob, SourceFile]]:
    """A pending job saved for each file found."""
    pending = []
    for file in files:
        job = IngestJob(
            origin=file.source,
            source_ref=file.ref,
            s3_key=file.key,
            library_uid=library.uid,
            collection_uid=collection.uid if collection else None,
            embedding_model=model,
        )
        retrying("save_job", partial(catalog.save_job, job))
        pending.append((job, file))
    return pending


def _runnable(
    pending: list[tuple[IngestJob, SourceFile]],
    options: IngestOptions,
    settings: Settings,
    catalog: Catalog,
    library: Library,
    report: IngestReport,
    notify: ProgressCallback,
) -> list[tuple[IngestJob, SourceFile]]:
    """The files the stages must run: those failing the precheck and unchanged local ones are closed here."""
    runnable = []
    for job, file in pending:
        reason = _precheck(file, options)
        if reason is not None:
            retrying("fail_job", partial(fail_job, catalog, job, reason))
            report.files.append(FileOutcome(job.id, job.source_ref, "failed", error=reason))
            report.timeline.mark("first_file_done")
            notify("file_done", {"status": "failed", "source_ref": job.source_ref, "error": reason})
            continue
        unchanged = retrying(
            "unchanged_check",
            partial(_unchanged_local_file, catalog, library, job, file, rule_facts=settings.rule_facts),
        )
        if unchanged is not None:
            report.files.append(FileOutcome(job.id, job.source_ref, "skipped", unchanged))
            report.timeline.mark("first_file_done")
            notify("file_done", {"status": "skipped", "item_uid": unchanged})
            continue
        runnable.append((job, file))
    return runnable


def _record_metrics(report: IngestReport, library: Library) -> None:
    kind = library.type.value
    for outcome in report.files:
        metrics.INGEST_JOBS.labels(status="failed" if outcome.status == "failed" else "completed").inc()
    # chunks, concepts and embeddings are counted by the stages, where the work runs (Ray's export)
    metrics.INGEST_DURATION.labels(library_type=kind).observe(report.seconds)


def _source_of(job: IngestJob) -> SourceFile:
    """Where a job's file is: a path the workers can read, or an object-store key (S3, an upload, or the
    copy of a source-bucket object in the product's layout)."""
    from pathlib import Path

    if job.origin is IngestSource.PATH:
        path = Path(job.source_ref)
        size = path.stat().st_size if path.is_file() else 0
        return SourceFile(ref=job.source_ref, name=path.name, size=size, source=IngestSource.PATH)
    # an object's size is the one the door checked it against (file_size), else unknown until it is fetched
    size = job.file_size or 1
    if job.raw_key:  # copied from the source bucket into the product's bucket
        name = job.raw_key.rsplit("/", 1)[-1]
        return SourceFile(ref=job.source_ref, name=name, size=size, source=IngestSource.S3, key=job.raw_key)
    bucket = None
    key = job.s3_key or ""
    if job.origin is IngestSource.S3 and job.source_ref.startswith("s3://"):
        bucket, _, ref_key = job.source_ref.removeprefix("s3://").partition("/")
        key = key or ref_key
    # The key's last segment, not the source_ref: a caller's own source_ref need not be a file name.
    name = key.rsplit("/", 1)[-1]
    # The size is checked by the worker once the bytes are fetched.
    return SourceFile(ref=job.source_ref, name=name, size=size, source=job.origin, bucket=bucket, key=key)


def _run_pipeline(
    runnable: list[SourceRow],
    options: IngestOptions,
    settings: Settings,
    library: Library,
    embedder: SentenceTransformerEmbedder,
    catalog: Catalog,
    report: IngestReport,
    notify: ProgressCallback,
) -> None:
    timeline = report.timeline
    try:
        with timeline.span("ray_start"):  # importing Ray (seconds) included
            import ray

            started_ray = start_ray(options.ray_address)
    except stopping.Interrupted as exc:  # SIGTERM while Ray started: no file began, all wait for a rerun
        Tally(catalog, report, notify).close_unfinished(runnable, str(exc))
        return
    try:
        with timeline.span("ray_data_planning"):
            _configure_ray_data()
            ds = _dataset(runnable, options, settings, library, embedder)
        tally = Tally(catalog, report, notify)
        pipeline_error: str | None = None
        begin = timeline.now()
        try:
            batches = iter(ds.iter_batches(batch_format="numpy", batch_size=None))
            while True:
                # SIGTERM stops the run only while it waits for the next batch: the rows of a batch
                # are all written and counted, then the unfinished files are failed as interrupted.
                with stopping.interruptible():
                    batch = next(batches, None)
                if batch is None:
                    break
                # actors started, the model loaded, a first block extracted, embedded and written
                if "first_batch" not in timeline.spans:
                    timeline.record("first_batch", begin, timeline.now())
                for row in WrittenRow.decode(batch):
                    tally.take(row)
        except stopping.Interrupted as exc:
            pipeline_error = str(exc)
            log.warning("ingest_pipeline_stopped", reason=pipeline_error)
        except Exception as exc:  # noqa: BLE001 - a stage that cannot start (a store down) fails its jobs
            pipeline_error = failure_reason(exc)
            log.error("ingest_pipeline_failed", error=pipeline_error)
        timeline.record("pipeline", begin, timeline.now())
        tally.close_unfinished(runnable, pipeline_error)
    finally:
        if started_ray:
            with timeline.span("ray_shutdown"):
                ray.shutdown()
                stopping.reclaim()


def _dataset(
    runnable: list[SourceRow],
    options: IngestOptions,
    settings: Settings,
    library: Library,
    embedder: SentenceTransformerEmbedder,
) -> ray.data.Dataset:
    """The pipeline's dataset: one block per file, then the extract, embed and write stages."""
    import ray.data

    plan = _stage_plan(settings)
    ds: ray.data.Dataset = ray.data.from_items(SourceRow.items(runnable), override_num_blocks=len(runnable))
    ds = ds.map_batches(
        ExtractStage,
        fn_constructor_kwargs={
            "settings": settings,
            "options": options,
            "library": library,
            "max_model_tokens": embedder.max_tokens,
        },
        batch_format="numpy",
        **ExtractStage.map_options(plan),
    )
    ds = ds.map_batches(
        EmbedStage, fn_constructor_kwargs={"options": options}, batch_format="numpy", **EmbedStage.map_options(plan)
    )
    write_options = WriteStage.map_options(plan)
    if settings.vector_location().backend is not VectorBackend.QDRANT_SERVER and ray.cluster_resources().get(
        VECTOR_WRITER_RESOURCE
    ):
        write_options["resources"] = {VECTOR_WRITER_RESOURCE: 0.001}
    return ds.map_batches(
        WriteStage,
        fn_constructor_kwargs={
            "settings": settings,
            "options": options,
            "library": library,
            "model": embedder.name,
            "dim": embedder.dim,
        },
        batch_format="numpy",
        **write_options,
    )


def _optimize_vectors(settings: Settings, collection: str) -> None:
    """Build the vector index's search structures once the writers are gone (embedded engines lock
    their folder to one process, so this runs after the pipeline's actors have exited)."""
    from stores.factory import open_vector_index

    vectors = open_vector_index(settings)
    try:
        retrying("vector_optimize", partial(vectors.optimize, collection))
    except LorekeeperError as exc:
        log.warning("vector_optimize_skipped", collection=collection, error=str(exc))
    finally:
        vectors.close()
