"""Open a ready-to-use searcher over the configured stores (the CLI, the API and the narrator build it
the same way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from models.embedding import EmbeddingConfig, SentenceTransformerEmbedder
from models.rerank import RerankConfig, Reranker, build_reranker
from schemas.settings import Settings
from search.hybrid import HYBRID_RRF, HybridConfig, HybridSearcher
from stores.factory import open_graph_store, open_text_index, open_vector_index

_FROM_SETTINGS: Reranker = object()  # type: ignore[assignment]


def config_from_settings(settings: Settings) -> HybridConfig:
    """The default preset (:data:`HYBRID_RRF`) with what the ``LOREKEEPER_SEARCH_*`` and
    ``LOREKEEPER_RERANK_CANDIDATES`` settings change."""
    changes: dict[str, float | int] = {"rerank_candidates": settings.rerank_candidates}
    for leg in ("vector", "text", "graph", "coverage"):
        weight = getattr(settings, f"search_{leg}_weight")
        if weight is not None:
            changes[f"{leg}_weight"] = weight
    if settings.search_rrf_k is not None:
        changes["rrf_k"] = settings.search_rrf_k
    return HYBRID_RRF.model_copy(update=changes)


def reranker_from_settings(settings: Settings) -> Reranker | None:
    """The cross-encoder named by ``LOREKEEPER_RERANKER_MODEL`` (loaded on first use), or None."""
    if not settings.reranker_model:
        return None
    return build_reranker(
        RerankConfig(model=settings.reranker_model, device=settings.reranker_device, threads=settings.reranker_threads)
    )


@contextmanager
def open_searcher(
    settings: Settings,
    *,
    embedding: EmbeddingConfig | None = None,
    config: HybridConfig | None = None,
    reranker: Reranker | None = _FROM_SETTINGS,
) -> Iterator[HybridSearcher]:
    """A :class:`HybridSearcher` on the configured stores; the stores close when the block ends.

    Args:
        settings: where the stores are and which reranker to use.
        embedding: the query embedding model (the ingestion default, on ``search_threads`` threads, when None).
        config: weights and depths; from the settings when None.
        reranker: a reranker to use instead of the configured one (None = no re-ranking).
    """
    if reranker is _FROM_SETTINGS:
        reranker = reranker_from_settings(settings)
    text, vectors, graph = open_text_index(settings), open_vector_index(settings), open_graph_store(settings)
    searcher = HybridSearcher(
        text=text,
        vectors=vectors,
        graph=graph,
        embedder=SentenceTransformerEmbedder(embedding or EmbeddingConfig(threads=settings.search_threads)),
        config=config or config_from_settings(settings),
        reranker=reranker,
    )
    try:
        yield searcher
    finally:
        searcher.close()
        for store in (text, vectors, graph):
            store.close()
