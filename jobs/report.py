"""What an ingest did, and the driver's tally of it: one outcome per file, items finalized as their chunks land.

Both executors (the Ray Data pipeline of :mod:`jobs.pipeline` and the in-process run of
:mod:`jobs.inprocess`) hand every written row to one :class:`Tally`, which makes an item visible to
search only when every one of its chunks is in every store, and closes the files a run did not finish.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from jobs import events
from jobs.rows import RowStatus, SourceRow, WrittenRow
from jobs.stages import retrying
from jobs.timeline import Timeline
from schemas.common import JobStatus, utc_now
from schemas.errors import LorekeeperError
from schemas.knowledge import IngestJob, IngestProgress, IngestStage, ItemStatus
from stores.catalog import Catalog
from stores.source_facts import SourceFactStore

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
    #: where the stages ran ("local": this process; "ray") and why (chosen by size, or asked for)
    executor: str = ""
    executor_reason: str = ""
    #: when each phase ran (Ray start, model load, first file done, …), on the job's clock
    timeline: Timeline = field(default_factory=Timeline)

    def timeline_dict(self) -> dict[str, Any]:
        """The phase timeline for the summary and ``--json`` (see :meth:`Timeline.to_dict`)."""
        return self.timeline.to_dict(self.seconds)

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


def fail_job(catalog: Catalog, job: IngestJob, reason: str) -> None:
    job = catalog.get_job(job.id)
    now = utc_now()
    failed = job.validated_copy(
        status=JobStatus.FAILED, error=reason, started_at=job.started_at or now, completed_at=now
    )
    catalog.save_job(failed)
    events.job_failed(job.id, job.item_uid, "IngestRejected", reason)


def _fail_job_by_id(catalog: Catalog, job_id: str, reason: str) -> None:
    fail_job(catalog, catalog.get_job(job_id), reason)


@dataclass
class Tally:
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
            report.timeline.mark("first_file_done")
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
            report.timeline.mark("first_file_done")
            if outcome.status == "completed":  # the item is ready: its chunks answer searches from now on
                report.timeline.mark("first_searchable")
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
        events.job_failed(job_id, item_uid, "WriteFailed", error)
        return FileOutcome(job_id, job.source_ref, "failed", item_uid, error=error)
    item = catalog.get_item(item_uid)
    if item.supersedes_uid:
        marked = catalog.supersede(item.supersedes_uid, item_uid)
        log.info("ingest_item_superseded", old_item_uid=item.supersedes_uid, item_uid=item_uid, chunks=marked)
    if job.facts_extracted:
        # the facts were saved before their chunks reached the graph; they turn visible with the item
        SourceFactStore(catalog.graph).link_chunks(item_uid)
    catalog.set_item_status(item_uid, ItemStatus.READY)
    events.graph_build(job_id, item_uid, partial(catalog.refresh_related, item_uid))
    catalog.save_job(
        job.validated_copy(
            status=JobStatus.COMPLETED,
            chunks_created=chunks,
            completed_at=utc_now(),
            progress=IngestProgress(fraction=1.0, stage=IngestStage.WRITING, message=f"{chunks} chunks"),
        )
    )
    took = (utc_now() - job.started_at).total_seconds() if job.started_at else None
    events.job_completed(
        job_id, item_uid, took, chunks, job.concepts_extracted, pages=pages, warnings=len(job.warnings)
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


def failure_reason(exc: Exception) -> str:
    """Why a run's stages failed, for the files it did not finish: our own error behind any Ray wrapper."""
    cause = _root_cause(exc)
    if cause is not None:
        return str(cause)
    return str(exc) if isinstance(exc, LorekeeperError) else f"{type(exc).__name__}: {exc}"


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
