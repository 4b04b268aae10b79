"""The ingest runner: what it runs after a restart, and what it refuses to read."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.plan import IngestOptions
from jobs.runner import IngestRunner
from schemas.common import JobStatus
from schemas.knowledge import IngestJob, IngestSource, Library
from schemas.settings import load_settings
from stores.catalog import Catalog

pytestmark = pytest.mark.servers


def test_a_persisted_pending_job_outside_the_roots_is_failed_not_run(tmp_path: Path, embedded_graph: object) -> None:
    books, private = tmp_path / "books", tmp_path / "private"
    books.mkdir()
    private.mkdir()
    (books / "lore.md").write_text("# Lore\n")
    (private / "secrets.md").write_text("the admin password is swordfish\n")
    (books / "escape.md").symlink_to(private / "secrets.md")  # inside by name, outside once resolved
    catalog = Catalog(embedded_graph)  # type: ignore[arg-type]
    library = catalog.save_library(Library(name="books", type="lore"))

    def job(path: Path) -> IngestJob:
        return catalog.save_job(IngestJob(source=IngestSource.PATH, source_ref=str(path), library_uid=library.uid))

    # As a previous process (or a crafted import) left them in the graph: pending, never checked here.
    inside, outside, linked = job(books / "lore.md"), job(private / "secrets.md"), job(books / "escape.md")
    ran: list[str] = []

    def run_jobs(jobs: list[IngestJob], options: IngestOptions) -> None:
        ran.extend(j.id for j in jobs)

    runner = IngestRunner(load_settings(data_dir=tmp_path / "data"), catalog, allowed_roots=[books], run_jobs=run_jobs)
    runner.start()
    assert runner.wait_idle(30)
    runner.stop()

    assert ran == [inside.id]
    for refused in (outside, linked):
        failed = catalog.get_job(refused.id)
        assert failed.status is JobStatus.FAILED
        assert failed.error is not None and "outside the allowed ingest roots" in failed.error
