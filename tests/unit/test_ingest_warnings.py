"""What an ingest kept, and why, reaches its result: the job, the item and the run's report carry the reader's
warnings.

The reported bug: a book of HTML nested 50,000 elements deep completed its ingest with no reason given for what
it kept. The reader knew (it read the page flat past the parser's depth limit and said so), but the warning
went no further than an item property the API does not show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.pipeline import run_ingest
from jobs.plan import IngestOptions
from schemas.settings import load_settings
from stores.catalog import Catalog
from stores.factory import open_graph_store

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

DEPTH = 50_000
EVERY = 1_000


def deep_book(path: Path) -> Path:
    """A book whose body is nested DEPTH ``<div>`` deep, a paragraph every EVERY levels, and a chapter after."""
    levels = "".join(
        f"<div><p>At depth {n} the archivists keep scroll {n} of the drowned library.</p>"
        if n % EVERY == 0
        else "<div>"
        for n in range(DEPTH)
    )
    path.write_text(
        "<html><body><h1>The Deep Archive</h1>"
        + levels
        + "</div>" * DEPTH
        + "<h2>Tides</h2><p>The tide turns every six hours.</p></body></html>",
        encoding="utf-8",
    )
    return path


def test_a_deeply_nested_html_book_says_what_it_kept_and_why(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    book = deep_book(tmp_path / "deep-archive.html")

    report = run_ingest([str(book)], IngestOptions(library="lore", library_type="lore"), settings=settings)
    import ray

    ray.shutdown()

    (outcome,) = report.files
    assert outcome.status == "completed", outcome.error
    (warning,) = outcome.warnings
    assert f"nested {DEPTH + 2:,} elements deep" in warning and "limit of 256" in warning
    assert f"kept {DEPTH // EVERY + 3} blocks" in warning  # the title, the paragraphs, the chapter and its own
    graph = open_graph_store(settings)
    try:
        catalog = Catalog(graph)
        assert catalog.get_job(outcome.job_id).warnings == [warning]
        assert catalog.get_item(outcome.item_uid or "").warnings == [warning]
    finally:
        graph.close()
