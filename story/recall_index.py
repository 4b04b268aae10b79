"""The memory index: a campaign's records in a vector collection and a full-text index, recalled along
a lineage.

A record anchored at ``(branch, depth)`` is visible from a position whose lineage has a segment
``(branch, max_depth)`` with ``depth <= max_depth`` (:mod:`story.lineage`). Both engines filter on
exact keyword terms, not ranges, so the depth comparison is written as terms: a record carries one
*lineage key* per dyadic block that holds its depth (``branch:level:depth >> level`` for every level),
and a segment is the union of the few blocks that tile ``[0, max_depth]`` (one per set bit of
``max_depth + 1``). "Any of the segment keys" then matches exactly the records on the lineage, in
Qdrant, qdrant-edge, tantivy and OpenSearch alike, with ~25 terms per record and at most ~25 per
segment. The few records a keyword cannot judge (canon committed on a parent branch at the fork
turn after the fork, :class:`story.lineage.Segment` ``seq_cutoff``) are dropped after the search by
:meth:`Lineage.contains`, which every hit passes anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import structlog
from pydantic import BaseModel, ConfigDict, Field

from models.embedding import Embedder, EmbeddingConfig, SentenceTransformerEmbedder
from models.fusion import rrf
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.factory import open_memory_text_index, open_vector_index
from stores.text.base import TextDocument, TextIndex
from stores.vector.base import VectorIndex, VectorPoint, VectorSpace
from story.lineage import Lineage

log = structlog.get_logger(__name__)

LINEAGE_LEVELS = 25  # depths up to 2**24 - 1 (16.7 M turns on one line)
MEMORY_COLLECTION = "memory"


def lineage_keys(branch_id: str, depth: int) -> list[str]:
    """The keys of a record anchored at ``(branch_id, depth)``: one per dyadic block holding ``depth``."""
    if not 0 <= depth < 1 << (LINEAGE_LEVELS - 1):
        raise ValueError(f"depth {depth} is outside 0..{(1 << (LINEAGE_LEVELS - 1)) - 1}")
    return [f"{branch_id}:{level}:{depth >> level}" for level in range(LINEAGE_LEVELS)]


def lineage_cover(lineage: Lineage) -> list[str]:
    """The keys whose union is every position on ``lineage``: per segment, blocks tiling ``[0, max_depth]``."""
    keys: list[str] = []
    for segment in lineage.segments:
        end = segment.max_depth + 1  # depths 0 .. max_depth
        start = 0
        for level in range(LINEAGE_LEVELS - 1, -1, -1):
            size = 1 << level
            if start + size <= end:
                keys.append(f"{segment.branch_id}:{level}:{start >> level}")
                start += size
    return keys


class RecallConfig(BaseModel):
    """How records are indexed and how a recall ranks them (the levers the recall benchmark measures).

    Attributes:
        vector_weight, text_weight: RRF weights of the two legs.
        rrf_k: the RRF constant.
        candidates: how many hits each leg brings to fusion.
        time_in_text: index the record's ``story_time`` with its text (as the heading).
        speakers_in_text: index who spoke with the text (as the title).
        recency_weight: adds ``weight * depth / head depth`` to the fused score (0 = off).
        salience_weight: adds ``weight * salience`` to the fused score (0 = off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    vector_weight: float = Field(default=1.0, ge=0)
    text_weight: float = Field(default=1.0, ge=0)
    rrf_k: int = Field(default=60, ge=1)
    candidates: int = Field(default=50, ge=1, le=1000)
    time_in_text: bool = True
    speakers_in_text: bool = True
    recency_weight: float = Field(default=0.0, ge=0)
    salience_weight: float = Field(default=0.0, ge=0)


class RecallIndex:
    """A campaign memory index over a text index and a vector collection (both derived, rebuildable).

    Args:
        text: the full-text index that holds memory records only (not the knowledge index).
        vectors: the vector store; records go to ``collection``.
        embedder: embeds records and queries (the ingestion model by default).
        collection: the vector collection of memory records.
        config: ranking and indexing levers.
    """

    def __init__(
        self,
        text: TextIndex,
        vectors: VectorIndex,
        embedder: Embedder,
        *,
        collection: str = MEMORY_COLLECTION,
        config: RecallConfig | None = None,
    ) -> None:
        self.text = text
        self.vectors = vectors
        self.embedder = embedder
        self.collection = collection
        self.config = config or RecallConfig()
        self._ready = False

    def ensure(self) -> None:
        """Create the collection and the text index if missing (idempotent)."""
        if not self._ready:
            self.text.ensure()
            self.vectors.ensure_collection(self.collection, VectorSpace(name="dense", dim=self.embedder.dim))
            self._ready = True

    def close(self) -> None:
        """Close both indexes (the recall index owns them when built by :func:`open_recall_index`)."""
        self.text.close()
        self.vectors.close()

    # -- writes ---------------------------------------------------------------------------------------

    def indexed_text(self, record: RecallRecord) -> str:
        """The text a record is embedded as: when, who, the context, then the record itself."""
        parts = []
        if self.config.time_in_text and record.story_time:
            parts.append(f"({record.story_time})")
        if self.config.speakers_in_text and record.speakers:
            parts.append(", ".join(record.speakers) + ":")
        head = " ".join(parts)
        body = f"{record.context}\n{record.text}" if record.context else record.text
        return f"{head} {body}" if head else body

    def write(self, records: Sequence[RecallRecord], vectors: np.ndarray | None = None) -> int:
        """Upsert records into both indexes (idempotent by id); embeds them unless ``vectors`` are given."""
        if not records:
            return 0
        self.ensure()
        if vectors is None:
            vectors = self.embedder.embed_documents([self.indexed_text(r) for r in records])
        if len(vectors) != len(records):
            raise ValueError(f"{len(records)} records but {len(vectors)} vectors")
        # text first, vectors last: a record the vector collection holds is in both (present() relies on it)
        self.text.upsert([self._document(r) for r in records])
        self.vectors.upsert(
            self.collection,
            [
                VectorPoint(id=r.id, vector=[float(x) for x in v], payload=self._payload(r))
                for r, v in zip(records, vectors, strict=True)
            ],
        )
        self.text.refresh()
        return len(records)

    def _fields(self, record: RecallRecord) -> dict[str, str | list[str]]:
        fields: dict[str, str | list[str]] = {
            "campaign": record.campaign_id,
            "kind": record.kind.value,
            "lineage": lineage_keys(record.branch_id, record.depth),
        }
        if record.observers:
            fields["observer"] = list(record.observers)
        return fields

    def _document(self, record: RecallRecord) -> TextDocument:
        return TextDocument(
            id=record.id,
            text=f"{record.context}\n{record.text}" if record.context else record.text,
            title=", ".join(record.speakers) if self.config.speakers_in_text else "",
            heading=(record.story_time or "") if self.config.time_in_text else "",
            fields=self._fields(record),
            data={"record": record.model_dump(mode="json", exclude={"context"})},
        )

    def _payload(self, record: RecallRecord) -> dict[str, object]:
        return {**self._fields(record), "record": record.model_dump(mode="json", exclude={"context"})}

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the vector collection holds (the repair check after a crash)."""
        if not ids:
            return set()
        self.ensure()
        return {p.id for p in self.vectors.get(self.collection, list(ids))}

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self.ensure()
            self.text.delete(list(ids))
            self.vectors.delete(self.collection, list(ids))
            self.text.refresh()

    def delete_campaign(self, campaign_id: str) -> None:
        """Remove every record of a campaign (before a rebuild, or when the campaign is deleted)."""
        self.ensure()
        filters = SearchFilters(campaign=[campaign_id])
        self.text.delete_by_filter(filters)
        self.vectors.delete_by_filter(self.collection, filters)
        self.text.refresh()

    def count(self, campaign_id: str) -> int:
        self.ensure()
        return self.vectors.count(self.collection, SearchFilters(campaign=[campaign_id]))

    # -- recall ---------------------------------------------------------------------------------------

    def search(
        self,
        campaign_id: str,
        query: str,
        *,
        lineage: Lineage,
        observer: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
        query_vector: np.ndarray | None = None,
    ) -> list[RecallHit]:
        """Hybrid recall (vector + BM25, fused by RRF) of the records on ``lineage``, best first."""
        self.ensure()
        kind_values = sorted({k.value for k in kinds}) if kinds else None
        filters = SearchFilters(
            campaign=[campaign_id],
            lineage=lineage_cover(lineage),
            observer=[observer] if observer else None,
            kind=kind_values,
        )
        cfg = self.config
        depth = max(cfg.candidates, limit)
        records: dict[str, RecallRecord] = {}
        legs: dict[str, list[tuple[str, float]]] = {}
        if cfg.vector_weight > 0:
            vector = query_vector if query_vector is not None else self.embedder.embed_query(query)
            hits = self.vectors.search(self.collection, vector.tolist(), filters=filters, limit=depth)
            legs["vector"] = [(h.id, h.score) for h in hits]
            for h in hits:
                records.setdefault(h.id, RecallRecord.model_validate(h.payload["record"]))
        if cfg.text_weight > 0:
            text_hits = self.text.search(query, filters=filters, limit=depth, highlight=False)
            legs["text"] = [(h.id, h.score) for h in text_hits]
            for th in text_hits:
                records.setdefault(th.id, RecallRecord.model_validate(th.data["record"]))
        fused = rrf(legs, {"vector": cfg.vector_weight, "text": cfg.text_weight}, k=cfg.rrf_k)
        head_depth = max(lineage.depth, 1)
        hits_out: list[RecallHit] = []
        for doc in fused:
            record = records[doc.id]
            if not lineage.contains(record.branch_id, record.depth, record.seq):
                continue
            score = doc.score
            score += cfg.recency_weight * record.depth / head_depth
            score += cfg.salience_weight * record.salience
            hits_out.append(_hit(record, score, doc.scores, doc.ranks))
        hits_out.sort(key=lambda h: (-h.score, h.id))
        return hits_out[:limit]


def _hit(record: RecallRecord, score: float, scores: dict[str, float], ranks: dict[str, int]) -> RecallHit:
    return RecallHit(
        id=record.id,
        kind=record.kind,
        turn_id=record.anchor_turn_id,
        ref=record.ref,
        text=record.text,
        scene_id=record.scene_id,
        speakers=record.speakers,
        story_time=record.story_time,
        branch_id=record.branch_id,
        depth=record.depth,
        score=score,
        scores=scores,
        ranks=ranks,
    )


def open_recall_index(
    settings: Settings, *, embedder: Embedder | None = None, config: RecallConfig | None = None
) -> RecallIndex:
    """The memory index on the configured stores: the memory text index and the memory collection.

    The vector store is opened here (its own client); the caller closes the index when done.
    """
    return RecallIndex(
        open_memory_text_index(settings),
        open_vector_index(settings),
        embedder or SentenceTransformerEmbedder(EmbeddingConfig(threads=settings.search_threads)),
        collection=settings.memory_collection,
        config=config,
    )
