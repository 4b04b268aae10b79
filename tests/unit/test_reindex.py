"""``reindex`` rebuilds both derived indexes from the graph and the blob store alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.pipeline import run_ingest
from jobs.plan import IngestOptions
from jobs.reindex import reindex
from schemas.settings import load_settings
from search.service import open_searcher
from stores.factory import open_text_index, open_vector_index

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


def test_reindex_after_losing_both_indexes(tmp_path: Path) -> None:
    import shutil

    settings = load_settings(data_dir=tmp_path / "data")
    book = tmp_path / "lore.md"
    book.write_text(
        "# The Drowned Library\n\nBeneath the tide, archivist crabs guard scrolls of the old empire.\n\n"
        "# Tides\n\nThe tide turns every six hours; the library is dry for one of them.\n"
    )
    report = run_ingest([str(book)], IngestOptions(library="lore", library_type="lore"), settings=settings)
    assert report.counts["completed"] == 1
    import ray

    ray.shutdown()
    # The indexes are derived: lose them both.
    shutil.rmtree(settings.text_location().path)
    shutil.rmtree(settings.vector_location().path)

    rebuilt = reindex(settings)
    assert (rebuilt.items, rebuilt.chunks) == (1, report.chunks)
    text, vectors = open_text_index(settings), open_vector_index(settings)
    assert text.count() == vectors.count("chunks") == report.chunks
    text.close()
    vectors.close()
    with open_searcher(settings) as searcher:
        hits = searcher.search("who guards the scrolls", limit=3)
    assert "archivist crabs" in hits[0].text and hits[0].heading_path == ["The Drowned Library"]
