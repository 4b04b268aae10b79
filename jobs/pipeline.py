"""The ingest job: discover files, run the Ray Data pipeline, and make finished items visible.

``run_ingest`` is what ``lorekeeper ingest``, ``python -m jobs ingest`` (a Ray Job entrypoint) and the
ingest API call. It runs on local Ray by default and on a cluster when ``RAY_ADDRESS`` is set.

An item becomes visible to search only when every one of its chunks is in every store: the write
stage reports each written chunk back to the driver, and the driver flips the item to ``ready`` (and
supersedes its previous version) once the count matches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from jobs import metrics, stopping
from jobs.plan import IngestOptions, StagePlan, plan_stages
from jobs.rows import RowStatus, SourceRow, WrittenRow
from jobs.rule_facts import FACT_FILE_TYPES, RULE_FACTS_READ, rule_tables
from jobs.sources import SourceFile, discover
from jobs.stages import EmbedStage, ExtractStage, WriteStage, retrying
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
from schemas.settings import BlobBackend, GraphBackend, Settings, TextBackend, VectorBackend
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store
from stores.source_facts import SourceFactStore

if TYPE_CHECKING:
    import ray.data

log = structlog.get_logger(__name__)


@dataclass
class FileOutcome:
    """How one file ended."""

    job_id: str
    source_ref: str
    status: str  # completed | skipped | failed
    item_uid: str | None = None
    chunks: int = 0
    pages: int = 0
    concepts: int = 0
    #: rulebook source facts read from the file, and how many per entry kind
    facts: int = 0
    facts_by_kind: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    #: what the reader could not keep as the file had it, and why (the job's warnings)
    warnings: list[str] = field(default_factory=list)
    #: structure figures of the extracted file: headings_by_level, entries, furniture_dropped
    structure: dict[str, Any] | None = None


@dataclass
class IngestReport:
    """What an ingest run did, for the summary table and the API."""

    library_uid: str
    embedding_model: str
    files: list[FileOutcome] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0
    #: rows each stage handled per Ray node id: {"extract": {node_id: rows}, "embed": …, "write": …}
    stage_nodes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    @property
    def counts(self) -> Counter[str]:
        return Counter(f.status for f in self.files)

    @property
    def chunks(self) -> int:
        return sum(f.chunks for f in self.files)

    @property
    def pages(self) -> int:
        return sum(f.pages for f in self.files)

    @property
    def facts(self) -> int:
        return sum(f.facts for f in self.files)


ProgressCallback = Callable[[str, dict[str, Any]], None]


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


def start_ray() -> bool:
    """Connect to ``RAY_ADDRESS`` or start local Ray. Returns whether this call started it."""
    import ray

    if ray.is_initialized():
        return False
    # Without RAY_ADDRESS, a Ray of our own: ray.init() would otherwise join any cluster that a
    # `ray start` left on this machine (a Ray Job's driver always has RAY_ADDRESS set).
    address = os.environ.get("RAY_ADDRESS") or "local"
    if address == "local":
        # Local runs need no cluster token; a cluster keeps its own auth settings.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    stopping.init_ray(  # ray.init, keeping a command's SIGTERM handling (Ray's would exit mid-write)
        address=address,
        include_dashboard=False,
        log_to_driver=os.environ.get("LOREKEEPER_RAY_LOGS", "") == "1",
        configure_logging=False,
        logging_level=logging.WARNING,
        runtime_env={
            "env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        },
    )
    return True


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
    started = time.perf_counter()
    notify = on_progress or (lambda event, fields: None)
    if settings.rule_facts:
        rule_tables(settings)  # a bad LOREKEEPER_RULE_FAMILIES fails the run here, naming file and key
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
    report = IngestReport(library_uid=library.uid, embedding_model=embedder.name)

    pending: list[tuple[IngestJob, SourceFile]] = []
    if jobs is None:
        files = list(discover(inputs, blob_store=blob))
        jobs = []
        for file in files:
            job = IngestJob(
                origin=file.source,
                source_ref=file.ref,
                s3_key=file.key,
                library_uid=library.uid,
                collection_uid=collection.uid if collection else None,
                embedding_model=embedder.name,
            )
            retrying("save_job", partial(catalog.save_job, job))
            jobs.append(job)
            pending.append((job, file))
    else:
        for job in jobs:
            pending.append((job, _source_of(job)))
    notify("files_found", {"files": len(pending)})

    runnable: list[SourceRow] = []
    for job, file in pending:
        reason = _precheck(file, options)
        if reason is not None:
            retrying("fail_job", partial(_fail_job, catalog, job, reason))
            report.files.append(FileOutcome(job.id, job.source_ref, "failed", error=reason))
            notify("file_done", {"status": "failed", "source_ref": job.source_ref, "error": reason})
            continue
        unchanged = retrying(
            "unchanged_check",
            partial(_unchanged_local_file, catalog, library, job, file, rule_facts=settings.rule_facts),
        )
        if unchanged is not None:
            report.files.append(FileOutcome(job.id, job.source_ref, "skipped", unchanged))
            notify("file_done", {"status": "skipped", "item_uid": unchanged})
            continue
        runnable.append(SourceRow(job.id, file.ref, file.name, file.source, file.bucket, file.key))
    if runnable:
        _run_pipeline(runnable, options, settings, library, embedder, catalog, report, notify)
    report.seconds = time.perf_counter() - started
    graph.close()
    _record_metrics(report, library)
    return report


def _record_metrics(report: IngestReport, library: Library) -> None:
    kind = library.type.value
    for outcome in report.files:
        metrics.INGEST_JOBS.labels(status="failed" if outcome.status == "failed" else "completed").inc()
        if outcome.status == "completed":
            metrics.CHUNKS_CREATED.labels(library_type=kind).inc(outcome.chunks)
            metrics.CONCEPTS_EXTRACTED.inc(outcome.concepts)
            metrics.EMBEDDINGS_GENERATED.labels(model=report.embedding_model).inc(outcome.chunks)
    if report.chunks:
        metrics.EMBEDDING_DURATION.labels(model=report.embedding_model).observe(report.embed_seconds / report.chunks)
    metrics.INGEST_DURATION.labels(library_type=kind).observe(report.seconds)


def _source_of(job: IngestJob) -> SourceFile:
    """Where a job's file is: a path the workers can read, or an object-store key (S3, an upload, or the
    copy of a source-bucket object in the product's layout)."""
    from pathlib import Path

    if job.origin is IngestSource.PATH:
        path = Path(job.source_ref)
        size = path.stat().st_size if path.is_file() else 0
        return SourceFile(ref=job.source_ref, name=path.name, size=size, source=IngestSource.PATH)
    if job.raw_key:  # copied from the source bucket into the product's bucket
        name = job.raw_key.rsplit("/", 1)[-1]
        return SourceFile(ref=job.source_ref, name=name, size=1, source=IngestSource.S3, key=job.raw_key)
    bucket = None
    key = job.s3_key or ""
    if job.origin is IngestSource.S3 and job.source_ref.startswith("s3://"):
        bucket, _, ref_key = job.source_ref.removeprefix("s3://").partition("/")
        key = key or ref_key
    # The key's last segment, not the source_ref: a caller's own source_ref need not be a file name.
    name = key.rsplit("/", 1)[-1]
    # The size is checked by the worker once the bytes are fetched.
    return SourceFile(ref=job.source_ref, name=name, size=1, source=job.origin, bucket=bucket, key=key)


def _fail_job(catalog: Catalog, job: IngestJob, reason: str) -> None:
    job = catalog.get_job(job.id)
    now = utc_now()
    failed = job.validated_copy(
        status=JobStatus.FAILED, error=reason, started_at=job.started_at or now, completed_at=now
    )
    catalog.save_job(failed)
    log.error("embed_job_failed", job_id=job.id, exception_type="IngestRejected", message=reason, traceback=None)


def _fail_job_by_id(catalog: Catalog, job_id: str, reason: str) -> None:
    _fail_job(catalog, catalog.get_job(job_id), reason)


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
    import ray

    try:
        started_ray = start_ray()
    except stopping.Interrupted as exc:  # SIGTERM while Ray started: no file began, all wait for a rerun
        _Tally(catalog, report, notify).close_unfinished(runnable, str(exc))
        return
    _configure_ray_data()
    try:
        ds = _dataset(runnable, options, settings, library, embedder)
        tally = _Tally(catalog, report, notify)
        pipeline_error: str | None = None
        try:
            batches = iter(ds.iter_batches(batch_format="numpy", batch_size=None))
            while True:
                # SIGTERM stops the run only while it waits for the next batch: the rows of a batch
                # are all written and counted, then the unfinished files are failed as interrupted.
                with stopping.interruptible():
                    batch = next(batches, None)
                if batch is None:
                    break
                for row in WrittenRow.decode(batch):
                    tally.take(row)
        except stopping.Interrupted as exc:
            pipeline_error = str(exc)
            log.warning("ingest_pipeline_stopped", reason=pipeline_error)
        except Exception as exc:  # noqa: BLE001 - a stage that cannot start (a store down) fails its jobs
            pipeline_error = str(exc) if isinstance(exc, LorekeeperError) else f"{type(exc).__name__}: {exc}"
            cause = _root_cause(exc)
            if cause is not None:
                pipeline_error = str(cause)
            log.error("ingest_pipeline_failed", error=pipeline_error)
        tally.close_unfinished(runnable, pipeline_error)
    finally:
        if started_ray:
            ray.shutdown()
            stopping.reclaim()
    _optimize_vectors(settings, options.vector_collection)


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


@dataclass
class _Tally:
    """The written rows the driver has heard back, per item: an item is finalized once all its chunks are in."""

    catalog: Catalog
    report: IngestReport
    notify: ProgressCallback
    written: Counter[str] = field(default_factory=Counter)
    expected: dict[str, int] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)
    job_of: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)  # job ids whose outcome is in the report
    structures: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def take(self, row: WrittenRow) -> None:
        report, job_id, item_uid = self.report, row.job_id, row.item_uid
        report.embed_seconds += row.embed_seconds
        for stage, node in (("extract", row.extract_node), ("embed", row.embed_node), ("write", row.write_node)):
            report.stage_nodes[stage][node] += 1
        if row.status in (RowStatus.SKIPPED, RowStatus.FAILED) and not row.chunk_uid:
            status = row.status.value
            job = _job(self.catalog, job_id)
            ref = job.source_ref if job is not None else job_id
            outcome = FileOutcome(job_id, ref, status, item_uid or None, error=row.error)
            if job is not None and row.status is RowStatus.SKIPPED:  # facts read for an unchanged item
                outcome.facts, outcome.facts_by_kind = job.facts_extracted, dict(job.facts_by_kind)
            report.files.append(outcome)
            self.done.add(job_id)
            self.notify("file_done", {"status": status, "item_uid": item_uid, "error": row.error or ""})
            return
        self.job_of[item_uid] = job_id
        self.expected[item_uid] = row.item_chunks
        self.pages[item_uid] = row.item_pages
        if item_uid not in self.structures:
            self.structures[item_uid] = row.structure or None
        self.written[item_uid] += 1
        if row.status is RowStatus.FAILED:
            self.errors[item_uid] = row.error or ""
        self.notify("chunks_written", {"chunks": 1})
        if self.written[item_uid] == self.expected[item_uid] and job_id not in self.done:
            outcome = retrying("finalize", self._finalizer(job_id, item_uid, self.errors.get(item_uid)))
            self.done.add(job_id)  # only once it is recorded: else close_unfinished closes it
            outcome.structure = self.structures.get(item_uid)
            report.files.append(outcome)
            self.notify("file_done", {"status": outcome.status, "item_uid": item_uid, "pages": outcome.pages})

    def _finalizer(self, job_id: str, item_uid: str, error: str | None) -> Callable[[], FileOutcome]:
        return partial(_finalize, self.catalog, job_id, item_uid, self.written[item_uid], self.pages[item_uid], error)

    def close_unfinished(self, runnable: list[SourceRow], pipeline_error: str | None) -> None:
        """Fail the items and files the pipeline did not finish."""
        for item_uid, job_id in self.job_of.items():
            if job_id not in self.done:
                self.done.add(job_id)
                reason = (
                    self.errors.get(item_uid)
                    or pipeline_error
                    or f"only {self.written[item_uid]} of {self.expected[item_uid]} chunks were written"
                )
                self.report.files.append(
                    _close_unfinished(job_id, item_uid, reason, self._finalizer(job_id, item_uid, reason))
                )
        for source in runnable:
            if source.job_id not in self.done:
                reason = pipeline_error or "the pipeline ended before this file was processed"
                self.report.files.append(
                    _close_unfinished(
                        source.job_id,
                        None,
                        reason,
                        partial(_fail_job_by_id, self.catalog, source.job_id, reason),
                        ref=source.ref,
                    )
                )


def _close_unfinished(
    job_id: str, item_uid: str | None, reason: str, close: Callable[[], Any], *, ref: str | None = None
) -> FileOutcome:
    """Fail a file the pipeline did not finish; if even that cannot be recorded, say so in the report
    (the job stays open in the catalog and the next run or the API's requeue picks it up)."""
    try:
        outcome = retrying("close_job", close)
    except LorekeeperError as exc:
        log.error("ingest_job_close_failed", job_id=job_id, item_uid=item_uid, error=str(exc))
        return FileOutcome(job_id, ref or job_id, "failed", item_uid, error=f"{reason}; not recorded: {exc}")
    if isinstance(outcome, FileOutcome):
        return outcome
    return FileOutcome(job_id, ref or job_id, "failed", item_uid, error=reason)


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


def _root_cause(exc: BaseException) -> LorekeeperError | None:
    """Our own error behind a Ray wrapper (RayTaskError, actor-died errors), if there is one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, LorekeeperError):
            return current
        inner = getattr(current, "cause", None)  # RayTaskError keeps the original here
        current = inner if isinstance(inner, BaseException) else (current.__cause__ or current.__context__)
    return None


def _job(catalog: Catalog, job_id: str) -> IngestJob | None:
    try:
        return catalog.get_job(job_id)
    except LorekeeperError:
        return None


def _finalize(catalog: Catalog, job_id: str, item_uid: str, chunks: int, pages: int, error: str | None) -> FileOutcome:
    """Make an item visible (superseding its previous version) or fail it, and close its job."""
    job = catalog.get_job(job_id)
    if error:
        catalog.set_item_status(item_uid, ItemStatus.FAILED, error=error)
        catalog.save_job(job.validated_copy(status=JobStatus.FAILED, error=error, completed_at=utc_now()))
        log.error("embed_job_failed", job_id=job_id, item_uid=item_uid, exception_type="WriteFailed", message=error)
        return FileOutcome(job_id, job.source_ref, "failed", item_uid, error=error)
    item = catalog.get_item(item_uid)
    if item.supersedes_uid:
        marked = catalog.supersede(item.supersedes_uid, item_uid)
        log.info("ingest_item_superseded", old_item_uid=item.supersedes_uid, item_uid=item_uid, chunks=marked)
    if job.facts_extracted:
        # the facts were saved before their chunks reached the graph; they turn visible with the item
        SourceFactStore(catalog.graph).link_chunks(item_uid)
    catalog.set_item_status(item_uid, ItemStatus.READY)
    catalog.refresh_related(item_uid)
    catalog.save_job(
        job.validated_copy(
            status=JobStatus.COMPLETED,
            chunks_created=chunks,
            completed_at=utc_now(),
            progress=IngestProgress(fraction=1.0, stage=IngestStage.WRITING, message=f"{chunks} chunks"),
        )
    )
    log.info(
        "embed_job_completed", job_id=job_id, item_uid=item_uid, chunks=chunks, pages=pages, warnings=len(job.warnings)
    )
    return FileOutcome(
        job_id,
        job.source_ref,
        "completed",
        item_uid,
        chunks=chunks,
        pages=pages,
        concepts=job.concepts_extracted,
        facts=job.facts_extracted,
        facts_by_kind=dict(job.facts_by_kind),
        warnings=list(job.warnings),
    )
