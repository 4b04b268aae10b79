"""Runs ingest jobs in the background for the API: a queue, one worker thread, restart recovery.

Jobs live in the graph, so the queue is only a cache of it: on start-up every job still pending or
processing (a previous process died under it) is queued again, and re-running is safe because every
write is idempotent. A job that names a local path is run only if the path lies under the allowed
ingest roots, checked again here because a requeued job was not necessarily written by the API.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from jobs import events
from jobs.plan import IngestExecutor, IngestOptions
from jobs.sources import copy_from_source_bucket, resolve_within
from schemas.common import JobStatus, utc_now
from schemas.errors import Conflict, InvalidRequest, LorekeeperError
from schemas.knowledge import IngestJob, IngestProgress, IngestSource, IngestStage
from schemas.ray_head import warm_address
from schemas.settings import Settings
from stores.catalog import Catalog

log = structlog.get_logger(__name__)

RunJobs = Callable[[list[IngestJob], IngestOptions], object]

RUNNER_QUEUE = "ingest-runner"
"""The queue the API dispatches jobs to (named in ``ingest_task_dispatched``): this runner's."""


class IngestRunner:
    """A FIFO of job ids worked off by one daemon thread (ingestion saturates the machine anyway).

    Args:
        allowed_roots: the folders a path job may read (the API's ingest roots).
        run_jobs: what runs a job (the Ray Data pipeline unless a test binds another).
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        *,
        allowed_roots: Sequence[Path],
        run_jobs: RunJobs | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.allowed_roots = [Path(root).resolve() for root in allowed_roots]
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._run_jobs = run_jobs or self._run_pipeline
        self._idle = threading.Event()
        self._idle.set()

    def start(self) -> None:
        """Queue the jobs a previous process left unfinished, then start the worker."""
        for status in (JobStatus.PROCESSING, JobStatus.PENDING):
            for job in reversed(self.catalog.list_jobs(status=status, limit=10_000)):
                if status is JobStatus.PROCESSING:
                    job = job.validated_copy(
                        status=JobStatus.PENDING, started_at=None, progress=IngestProgress(message="requeued")
                    )
                    self.catalog.save_job(job)
                log.info("ingest_job_requeued", job_id=job.id)
                self._queue.put(job.id)
        self._thread = threading.Thread(target=self._work, name=RUNNER_QUEUE, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def submit(self, job: IngestJob) -> IngestJob:
        self.catalog.save_job(job)
        self._idle.clear()
        self._queue.put(job.id)
        return job

    def retry(self, job_id: str) -> IngestJob:
        """Queue a failed job again.

        Raises:
            NotFound: no such job.
            Conflict: the job has not failed.
        """
        job = self.catalog.get_job(job_id)
        if job.status is not JobStatus.FAILED:
            raise Conflict("ingest", f"job {job_id} is {job.status.value}; only failed jobs can be retried")
        job = job.validated_copy(
            status=JobStatus.PENDING,
            retry_count=job.retry_count + 1,
            error=None,
            started_at=None,
            completed_at=None,
            chunks_created=0,
            progress=IngestProgress(message=f"retry {job.retry_count + 1}"),
        )
        return self.submit(job)

    def wait_idle(self, timeout: float = 600.0) -> bool:
        """Block until the queue is empty and no job runs (for tests and orderly shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.1)
        return False

    def _work(self) -> None:
        while True:
            job_id = self._queue.get()
            try:
                if job_id is None:
                    return
                self._run_one(job_id)
            finally:
                self._queue.task_done()

    def _run_one(self, job_id: str) -> None:
        try:
            job = self.catalog.get_job(job_id)
            if job.status is not JobStatus.PENDING:
                return
            self._check_source(job)
            library = self.catalog.get_library(job.library_uid or "")
            collection = None
            if job.collection_uid:
                collection = next(
                    (c.name for c in self.catalog.list_collections(library.uid) if c.uid == job.collection_uid), None
                )
            options = IngestOptions(
                library=library.name,
                library_type=library.type,
                collection=collection,
                classification=job.classification,
                executor=IngestExecutor(self.settings.ingest_executor),
                # a `lorekeeper up` head, looked up per job: it may have started after this server
                ray_address=warm_address(self.settings.data_dir),
            )
            if job.origin is IngestSource.SOURCE_BUCKET:
                job = self._copy_from_source(job, options.max_file_bytes)
            self._run_jobs([job], options)
        except Exception as exc:  # noqa: BLE001 - the worker must outlive any one job
            reason = str(exc) if isinstance(exc, LorekeeperError) else f"{type(exc).__name__}: {exc}"
            events.job_failed(job_id, None, type(exc).__name__, reason, exc)
            try:
                job = self.catalog.get_job(job_id)
                if job.status is not JobStatus.COMPLETED:
                    # a job refused before it started still needs a start: a job ends after it starts
                    now = utc_now()
                    self.catalog.save_job(
                        job.validated_copy(
                            status=JobStatus.FAILED, error=reason, started_at=job.started_at or now, completed_at=now
                        )
                    )
            except LorekeeperError:
                log.error("ingest_job_unrecorded", job_id=job_id)

    def _copy_from_source(self, job: IngestJob, max_bytes: int) -> IngestJob:
        """Mark the job fetching and copy its object from the source bucket into the product's layout
        (:func:`jobs.sources.copy_from_source_bucket`); a failure fails the job before any item exists."""
        from stores.factory import open_blob_store, open_source_blob_store

        job = job.validated_copy(
            status=JobStatus.PROCESSING, started_at=utc_now(), progress=IngestProgress(stage=IngestStage.FETCHING)
        )
        self.catalog.save_job(job)
        source = open_source_blob_store(self.settings)
        if source is None:
            raise InvalidRequest("ingest", "the job names the source bucket but LOREKEEPER_SOURCE_BLOB_URL is not set")
        product = open_blob_store(self.settings)
        try:
            job = copy_from_source_bucket(job, source, product, max_bytes=max_bytes)
        finally:
            source.close()
            product.close()
        self.catalog.save_job(job)
        return job

    def _check_source(self, job: IngestJob) -> None:
        """Refuse a path job outside the allowed roots (the worker then records it as failed).

        Checked for every job run, not only at submission: after a restart every pending job found in
        the graph is run unattended, whatever wrote it, and the roots may have been narrowed since.
        """
        if job.origin is IngestSource.PATH and resolve_within(job.source_ref, self.allowed_roots) is None:
            log.warning("ingest_job_outside_roots", job_id=job.id, source_ref=job.source_ref)
            raise InvalidRequest("ingest", f"{job.source_ref} is outside the allowed ingest roots; not read")

    def _run_pipeline(self, jobs: list[IngestJob], options: IngestOptions) -> object:
        from jobs.pipeline import run_ingest

        return run_ingest([], options, settings=self.settings, jobs=jobs)
