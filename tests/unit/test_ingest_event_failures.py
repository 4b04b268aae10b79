"""The ``…_failed`` events of the embed and write stages (docs/ingest-events.md, "checked: unit"): a real
failure of the real model or of the real embedded stores, logged per item with the fields the table names.

The end-to-end run (tests/unit/test_ingest_events.py) cannot make either fail on purpose; here the
embedding model is given what it cannot read, and the write stage a vector of the wrong size for its
collection, which the embedded vector index refuses.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from jobs import events
from jobs.plan import IngestOptions
from jobs.rows import ChunkRow, ConceptRefs, EmbeddedRow, RowStatus, chunk_uid
from jobs.stages import EmbedStage, WriteStage
from schemas.knowledge import (
    Classification,
    FileType,
    Item,
    ItemStatus,
    Library,
    LibraryType,
)
from schemas.settings import load_settings
from stores.catalog import Catalog
from stores.factory import open_graph_store

pytestmark = [pytest.mark.servers, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ingest-events.md"


def _row(job_id: str, item_uid: str, sequence: int, text: str, chunks: int) -> ChunkRow:
    return ChunkRow(
        job_id=job_id,
        item_uid=item_uid,
        chunk_uid=chunk_uid(item_uid, sequence),
        sequence=sequence,
        text=text,
        heading_path=["Aspects"],
        page_start=None,
        page_end=None,
        token_count=len(text.split()),
        concepts=ConceptRefs(),
        item_chunks=chunks,
        item_pages=1,
        structure={},
        status=RowStatus.CHUNK,
        error=None,
        extract_node="",
    )


def _fields(event: str) -> list[str]:
    from tests.unit.test_ingest_events import table

    return list(table()[event].fields)


def test_a_failed_embedding_is_logged_per_item_of_the_batch() -> None:
    stage = EmbedStage(IngestOptions(library="fate", library_type=LibraryType.RULEBOOK))
    rows = [_row("ingest_a", "item_a", 3, "An aspect is a phrase.", 9), _row("ingest_b", "item_b", 0, "Stunts.", 2)]
    by_item = {(row.job_id, row.item_uid): [row] for row in rows}
    with capture_logs() as logs, pytest.raises(Exception) as raised:
        # what the model cannot read (not text) fails the real embedding call
        events.embed_batch(stage.embedder.name, stage.dim, by_item, partial(stage.embedder.embed_documents, [None]))
    failed = [line for line in logs if line["event"] == "embed_vectors_failed"]
    assert [(line["job_id"], line["item_uid"], line["chunk_index"]) for line in failed] == [
        ("ingest_a", "item_a", 3),
        ("ingest_b", "item_b", 0),
    ]
    for line in failed:
        assert line["log_level"] == "error" and line["error"] == str(raised.value)
        assert set(_fields("embed_vectors_failed")) <= set(line)
    assert not [line for line in logs if line["event"] == "embed_vectors_complete"]


def test_a_failed_write_is_logged_and_fails_the_items_rows(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    catalog = Catalog(open_graph_store(settings))
    library = catalog.save_library(Library(name="fate", type=LibraryType.RULEBOOK))
    item = Item(
        uid="item_write",
        library_uid=library.uid,
        title="Fate",
        file_type=FileType.MARKDOWN,
        size_bytes=10,
        content_hash="0" * 64,
        classification=Classification.CANON,
        source_ref="fate.md",
        raw_key="items/item_write/original/fate.md",
        status=ItemStatus.PROCESSING,
    )
    catalog.save_item(item)
    catalog.graph.close()
    options = IngestOptions(library="fate", library_type=LibraryType.RULEBOOK)
    stage = WriteStage(settings, options, library, "test-model", dim=8)
    try:
        rows = [
            EmbeddedRow.of(_row("ingest_w", item.uid, n, f"Chunk {n} about aspects.", 2), np.ones(4), 0.0, "")
            for n in range(2)
        ]
        with capture_logs() as logs:
            written = stage(EmbeddedRow.encode(rows))
    finally:
        stage.__del__()  # closes its stores, as Ray Data does when it retires the actor
    (failed,) = [line for line in logs if line["event"] == "embed_graph_write_failed"]
    assert failed["job_id"] == "ingest_w" and failed["item_uid"] == item.uid and failed["chunk_index"] == 0
    assert failed["log_level"] == "error" and set(_fields("embed_graph_write_failed")) <= set(failed)
    assert not [line for line in logs if line["event"] == "embed_graph_write_complete"]
    statuses = set(written["status"])
    assert statuses == {RowStatus.FAILED.value}, statuses
