"""Hybrid retrieval: a vector leg and a BM25 leg, fused by weighted reciprocal rank fusion.

Only chunks of *visible* items are returned (ready and enabled in the graph), so an item appears
in search only once all its chunks are in every store, and a superseded version disappears as soon
as its replacement is ready, while its chunks stay in the graph for the citations that point at them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from pydantic import BaseModel, ConfigDict, Field

from models.embedding import Embedder
from schemas.errors import NotFound
from schemas.search import SearchFilters, SearchHit
from stores.catalog import Catalog
from stores.graph.base import GraphStore
from stores.text.base import TextIndex
from stores.vector.base import VectorIndex

log = structlog.get_logger(__name__)


class HybridConfig(BaseModel):
    """Weights and depths of the fused search."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vector_weight: float = Field(default=1.0, ge=0)
    text_weight: float = Field(default=1.0, ge=0)
    rrf_k: int = Field(default=60, gt=0, description="RRF constant: larger flattens the rank curve.")
    candidates: int = Field(default=50, gt=0, le=1000, description="Hits fetched from each leg before fusing.")
    collection: str = Field(default="chunks", description="Vector collection of chunk embeddings.")


HYBRID_RRF = HybridConfig()
"""The default preset: equal weights, k = 60."""


@dataclass
class _Candidate:
    chunk_id: str
    item_uid: str = ""
    title: str = ""
    text: str = ""
    page_start: int | None = None
    page_end: int | None = None
    heading_path: tuple[str, ...] = ()
    fused: float = 0.0


class HybridSearcher:
    """Vector + full text over the chunk indexes, fused, filtered to visible items."""

    def __init__(
        self,
        *,
        text: TextIndex,
        vectors: VectorIndex,
        graph: GraphStore,
        embedder: Embedder,
        config: HybridConfig = HYBRID_RRF,
    ) -> None:
        self.text = text
        self.vectors = vectors
        self.catalog = Catalog(graph)
        self.embedder = embedder
        self.config = config

    def search(self, query: str, *, filters: SearchFilters | None = None, limit: int = 10) -> list[SearchHit]:
        """The best ``limit`` chunks for ``query``, best first, with citations and per-leg scores."""
        started = time.perf_counter()
        depth = max(self.config.candidates, limit * 3)
        text_hits = self.text.search(query, filters=filters, limit=depth, highlight=True)
        vector = self.embedder.embed_query(query)
        try:
            vector_hits = self.vectors.search(self.config.collection, vector.tolist(), filters=filters, limit=depth)
        except NotFound:  # nothing ingested yet: the collection does not exist
            vector_hits = []

        candidates: dict[str, _Candidate] = {}
        scores: dict[str, dict[str, float]] = {}
        ranks: dict[str, dict[str, int]] = {}
        highlights: dict[str, list[str]] = {}
        for rank, hit in enumerate(text_hits, start=1):
            c = candidates.setdefault(hit.id, _Candidate(hit.id))
            c.title, c.text = hit.title, hit.text
            c.item_uid = str(hit.fields.get("item", ""))
            c.page_start, c.page_end = hit.data.get("page_start"), hit.data.get("page_end")
            c.heading_path = tuple(hit.data.get("heading_path") or ())
            c.fused += self.config.text_weight / (self.config.rrf_k + rank)
            scores.setdefault(hit.id, {})["text"] = hit.score
            ranks.setdefault(hit.id, {})["text"] = rank
            highlights[hit.id] = hit.highlights
        for rank, vhit in enumerate(vector_hits, start=1):
            c = candidates.setdefault(vhit.id, _Candidate(vhit.id))
            payload = vhit.payload
            if not c.item_uid:
                c.item_uid = str(payload.get("item", ""))
                c.title = str(payload.get("title", ""))
                c.page_start, c.page_end = payload.get("page_start"), payload.get("page_end")
                c.heading_path = tuple(payload.get("heading_path") or ())
            c.fused += self.config.vector_weight / (self.config.rrf_k + rank)
            scores.setdefault(vhit.id, {})["vector"] = vhit.score
            ranks.setdefault(vhit.id, {})["vector"] = rank

        visible = self.catalog.visible_items(c.item_uid for c in candidates.values())
        ordered = sorted(
            (c for c in candidates.values() if c.item_uid in visible), key=lambda c: (-c.fused, c.chunk_id)
        )[:limit]
        for c in ordered:
            if not c.text:  # found by the vector leg only: the text index holds the text too
                c.text = self.text.get(c.chunk_id).text
        hits = [
            SearchHit(
                chunk_id=c.chunk_id,
                item_uid=c.item_uid,
                title=c.title,
                text=c.text,
                page_start=c.page_start,
                page_end=c.page_end,
                heading_path=list(c.heading_path),
                score=round(c.fused, 6),
                scores=scores.get(c.chunk_id, {}),
                ranks=ranks.get(c.chunk_id, {}),
                highlights=highlights.get(c.chunk_id, []),
            )
            for c in ordered
        ]
        log.info(
            "search_completed",
            text_hits=len(text_hits),
            vector_hits=len(vector_hits),
            returned=len(hits),
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return hits

    def search_many(self, queries: Sequence[str], *, limit: int = 10) -> list[list[SearchHit]]:
        return [self.search(q, limit=limit) for q in queries]
