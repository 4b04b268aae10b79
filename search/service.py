"""Open a ready-to-use searcher over the configured stores (the CLI and the API build it the same way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
from schemas.settings import Settings, get_settings
from search.hybrid import HYBRID_RRF, HybridConfig, HybridSearcher
from stores.factory import open_graph_store, open_text_index, open_vector_index


@contextmanager
def open_searcher(
    settings: Settings | None = None,
    *,
    embedding: EmbeddingConfig | None = None,
    config: HybridConfig = HYBRID_RRF,
) -> Iterator[HybridSearcher]:
    """A :class:`HybridSearcher` on the configured stores; the stores close when the block ends."""
    settings = settings or get_settings()
    text, vectors, graph = open_text_index(settings), open_vector_index(settings), open_graph_store(settings)
    try:
        yield HybridSearcher(
            text=text, vectors=vectors, graph=graph, embedder=SentenceTransformerEmbedder(embedding), config=config
        )
    finally:
        for store in (text, vectors, graph):
            store.close()
