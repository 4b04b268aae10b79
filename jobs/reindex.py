"""Rebuild the derived indexes (full text and vectors) from the system of record (graph + blob store).

``lorekeeper reindex`` drops nothing it cannot rebuild: it reads every active chunk of every ready
item from the graph, its text from the blob store, re-embeds it and upserts it into both indexes.
With ``drop=True`` the indexes are emptied first, so records of superseded or deleted items go too.

An item it cannot rebuild (its record or a chunk's cannot be read from the graph, a chunk's text is missing
from the blob store or is not UTF-8) is skipped and reported (event ``reindex_item_skipped``, and in
:attr:`ReindexReport.skipped`); every other item is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from jobs.stages import embedding_text, index_records
from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
from schemas.errors import NotFound
from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store, open_text_index, open_vector_index
from stores.vector.base import VectorSpace

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SkippedItem:
    """An item a reindex could not rebuild: its record or a chunk's is unreadable, or a chunk's text is missing."""

    item_uid: str
    problem: str


@dataclass
class ReindexReport:
    items: int = 0
    chunks: int = 0
    skipped: list[SkippedItem] = field(default_factory=list)

    def skip(self, item_uid: str, exc: Exception) -> None:
        """Skip an item (logged as ``reindex_item_skipped``); the reindex goes on with the next."""
        problem = f"{type(exc).__name__}: {exc}"
        log.warning("reindex_item_skipped", item_uid=item_uid, problem=problem)
        self.skipped.append(SkippedItem(item_uid, problem))


def reindex(
    settings: Settings,
    *,
    collection: str = "chunks",
    embedding: EmbeddingConfig | None = None,
    drop: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> ReindexReport:
    """Rebuild the full-text index and the vector collection from the graph and the blob store."""
    graph, blob = open_graph_store(settings), open_blob_store(settings)
    text, vectors = open_text_index(settings), open_vector_index(settings)
    embedder = SentenceTransformerEmbedder(embedding)
    report = ReindexReport()
    try:
        catalog = Catalog(graph)
        libraries = {lib.uid: lib for lib in catalog.list_libraries()}
        if drop:
            vectors.drop_collection(collection)
            for library_uid in libraries:
                text.delete_by_filter(SearchFilters(library=[library_uid]))
        text.ensure()
        vectors.ensure_collection(collection, VectorSpace(name="dense", dim=embedder.dim))
        seen_items: set[str] = set()
        for item, chunks in catalog.active_chunks(batch_size=256, on_unreadable=report.skip):
            if not chunks:
                continue
            try:
                library = libraries[item.library_uid]
                texts = [blob.get(c.text_key).decode("utf-8") for c in chunks]
            except (KeyError, NotFound, UnicodeDecodeError) as exc:  # no library, a chunk's text gone or not UTF-8
                report.skip(item.uid, exc)
                continue
            vectors_ = embedder.embed_documents(
                [embedding_text(c.heading_path, t) for c, t in zip(chunks, texts, strict=True)]
            )
            records = [
                index_records(library, item, chunk, body, vector, embedder.name)
                for chunk, body, vector in zip(chunks, texts, vectors_, strict=True)
            ]
            docs = [doc for doc, _ in records]
            points = [point for _, point in records]
            text.upsert(docs)
            vectors.upsert(collection, points)
            report.chunks += len(chunks)
            seen_items.add(item.uid)
            if on_progress:
                on_progress(len(chunks))
        vectors.optimize(collection)
        report.items = len(seen_items)
        log.info(
            "reindex_completed",
            items=report.items,
            chunks=report.chunks,
            skipped_items=len(report.skipped),
            model=embedder.name,
        )
        return report
    finally:
        for store in (text, vectors, graph, blob):
            store.close()
