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

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
import structlog
from pydantic import BaseModel, ConfigDict, Field

from models.embedding import Embedder, EmbeddingConfig, SentenceTransformerEmbedder
from models.fusion import rrf
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.factory import open_memory_text_index, open_vector_index
from stores.text.base import TextDocument, TextHit, TextIndex
from stores.vector.base import VectorHit, VectorIndex, VectorPoint, VectorSpace
from story.lineage import Lineage
from story.recall_cues import (
    content_stems,
    feedback_terms,
    inferential,
    listing,
    named_speakers,
    story_date,
    time_range,
    without_names,
)

log = structlog.get_logger(__name__)

LINEAGE_LEVELS = 25  # depths up to 2**24 - 1 (16.7 M turns on one line)
MEMORY_COLLECTION = "memory"
VECTOR_LEGS = frozenset({"vector", "vector_without_names", "feedback_vector"})  # their raw scores are returned
UNMATCHED_DEPTH = 10  # the text leg's best records RecallConfig.unmatched_text_weight reads
# a test of legs (name -> ids and scores, in rank order) and the records they found
LegsCheck = Callable[[Mapping[str, list[tuple[str, float]]], Mapping[str, RecallRecord]], bool]


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
    """How records are indexed and how a recall ranks them (the levers ``benchmarks/memory_recall.py``
    measures; the defaults are the ones that held up there, on conversations not fitted to).

    Indexing (changing these needs a rebuild of the index):

    Attributes:
        time_in_text: index the record's ``story_time`` with its text.
        speakers_in_text: index who spoke with the text.
        text_layout: ``joined``: the full-text document is one text, ``(time) speakers: text``, with
            its window around it; ``fields``: speakers as the title (boosted x2 by the text index),
            the time as the heading (x0.5), the text in the body.
        window_before: a turn record's full-text document also holds the text of this many turns before
            it in its scene on its branch (those written with it, or indexed already): a reply is found
            by the words of the question it answers. Only turns before it: they are its ancestors
            (a branch is a straight line), while a later turn may be undone or left on another line of
            the story, and its words must not lead recall to a turn it never reached. A record with no
            such neighbour keeps the ``context`` its builder gave it.
        context_in_vector: embed the window (or ``context``) too; off, the vector is the record's own.

    Ranking:

    Attributes:
        vector_weight, text_weight: RRF weights of the two legs.
        rrf_k: the RRF constant.
        candidates: how many hits each leg brings to fusion.
        neighbour_share: a candidate turn gains this share of the fused score of each candidate turn
            next to it in the same scene (what is recalled together was told together).
        time_boost: when the query names a calendar time (:func:`story.recall_cues.time_range`), the
            score of a record whose ``story_time`` falls in it (or up to ``time_after_days`` after)
            is multiplied by ``1 + time_boost``.
        speaker_boost: when the query names some (not all) of the candidates' speakers, the score of
            a record they spoke is multiplied by ``1 + speaker_boost``.
        expand_share: a candidate memory, summary or fact lends this share of its fused score to the
            candidate turns of its scene (recall through what was remembered of a scene).
        recency_weight: adds ``weight * depth / head depth`` to the fused score (0 = off).
        salience_weight: adds ``weight * salience`` to the fused score (0 = off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    time_in_text: bool = True
    speakers_in_text: bool = True
    text_layout: Literal["joined", "fields"] = "joined"
    window_before: int = Field(default=2, ge=0, le=8)
    context_in_vector: bool = False

    vector_weight: float = Field(default=1.0, ge=0)
    text_weight: float = Field(default=3.0, ge=0)
    rrf_k: int = Field(default=60, ge=1)
    candidates: int = Field(default=100, ge=1, le=1000)
    neighbour_share: float = Field(default=0.1, ge=0, le=1)
    time_boost: float = Field(default=0.5, ge=0)
    time_after_days: int = Field(default=14, ge=0)
    speaker_boost: float = Field(default=0.0, ge=0)
    expand_share: float = Field(default=0.05, ge=0)
    recency_weight: float = Field(default=0.0, ge=0)
    salience_weight: float = Field(default=0.0, ge=0)
    inference_text_weight: float | None = Field(
        default=0.5,
        ge=0,
        description="the text leg's RRF weight for a query that asks for an inference ('would', 'might', "
        "'likely', 'could': story.recall_cues.inferential), whose answer is told in other words than the "
        "question's; None: text_weight. LoCoMo dev open-domain recall@10 0.331 -> 0.354 at 0.5, synthetic "
        "0.188 -> 0.250 (with inference_text_without_names: 0.377 and 0.469)",
    )
    inference_text_without_names: bool = Field(
        default=True,
        description="for such a query, the text leg searches it without the speakers' names (a second BM25 "
        "search, RecallIndex.collect), which otherwise match every turn of theirs and windows that hold them",
    )
    feedback_depth: int = Field(
        default=5,
        ge=0,
        le=50,
        description="pseudo-relevance feedback: the first round's best this many records (the BM25 leg's, or the "
        "round ranked under this config without feedback: feedback_from) lead a second round of search; 0 = off",
    )
    feedback_vector_weight: float = Field(
        default=0.0,
        ge=0,
        description="RRF weight of the second round's vector list, searched with the query vector blended with "
        "the mean of the feedback records' vectors (Rocchio); 0 = no second vector search. Measured worse on "
        "both sets (depth 3-10, share 0.3-0.7, weight 0.5-1: LoCoMo dev recall@10 0.796 -> 0.760-0.786, "
        "synthetic 0.687 -> 0.583-0.641), so off",
    )
    feedback_vector_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="the feedback records' share of the blended query vector (1 - share is the query's)",
    )
    feedback_text_weight: float = Field(
        default=1.0,
        ge=0,
        description="RRF weight of the second round's BM25 list, searched with the query plus the feedback "
        "records' distinctive words (RM3-like, story.recall_cues.feedback_terms); not for a query asking for "
        "an inference (whose text leg is weighed down already); 0 = no second BM25 search. Alone, same run: "
        "LoCoMo dev recall@10 0.796 -> 0.806, synthetic 0.687 -> 0.693",
    )
    feedback_terms: int = Field(
        default=10, ge=1, le=50, description="how many distinctive words the feedback adds to the BM25 query"
    )
    feedback_from: Literal["fused", "text"] = Field(
        default="text",
        description="which first round leads the BM25 feedback: ``text``, the BM25 leg's own best records against its "
        "own candidates, so the second BM25 search runs on the leg's thread while the query is embedded and searched "
        "(where the leg came back short, a small campaign's or a rare word's, the fused round leads instead); "
        "``fused``, the first round ranked under this config without feedback, after the vector search. Same run, "
        "LoCoMo dev / synthetic recall@10: fused, depth 10 0.808 / 0.776; fused, 5: 0.810 / 0.770; text, 10: "
        "0.812 / 0.764; text, 5: 0.813 / 0.776; text, 3: 0.806 / 0.770; text, 20: 0.806 / 0.770",
    )
    unmatched_text_weight: float | None = Field(
        default=0.25,
        ge=0,
        description="the RRF weight of the BM25 legs (text and its feedback) when none of the text leg's "
        f"{UNMATCHED_DEPTH} best records holds a content word of the query beyond the speakers' names (stemmed, "
        "function words and small talk left out): the leg matched only names and small words ('What pets does "
        "Ava have?' against 'I adopted a beagle'), so its order says nothing; None = text_weight always. Same "
        "run: LoCoMo dev recall@10 0.813 -> 0.812, synthetic (seed 13) 0.776 -> 0.836 (0.5: 0.805; 0.1: 0.833); "
        "synthetic seeds not looked at while choosing it, 99: 0.756 -> 0.803, 7: 0.747 -> 0.803",
    )
    listing_text_weight: float | None = Field(
        default=1.0,
        ge=0,
        description="the text leg's RRF weight (at most text_weight) for a query asking for the members of a kind "
        "('What pets does Ava have?', 'Which instruments does Rosa play?': story.recall_cues.listing), whose "
        "words match lines that name the kind rather than those that name its members; None: text_weight",
    )
    listing_vector_without_names_weight: float | None = Field(
        default=1.0,
        ge=0,
        description="for such a query, the names-free vector search's RRF weight (at least "
        "vector_without_names_weight): the embedding relates a kind to its members. With listing_text_weight "
        "1, same run: LoCoMo dev recall@10 of these questions (54 of 997) 0.540 -> 0.564, generated (16 "
        "of 174, seed 13) 0.344 -> 0.438; None: vector_without_names_weight",
    )
    vector_without_names_weight: float = Field(
        default=0.5,
        ge=0,
        description="for a query naming some (not all) of the candidates' speakers, RRF weight of a second vector "
        "search of it without their names (one more query embedding, RecallIndex.collect): a short question's "
        "vector is pulled to every line of a speaker it names, whose name heads the embedded text. With the "
        "text feedback, same run (candidates gathered once): LoCoMo dev recall@10 0.796 -> 0.809, synthetic "
        "0.687 -> 0.776; 0 = off",
    )


@dataclass(slots=True)
class Candidates:
    """What the legs of one recall found, before ranking: each leg's ids in rank order with their raw
    scores, and the records by id. :meth:`RecallIndex.rank` ranks them under any configuration, so a
    benchmark searches once and compares rankings."""

    query: str
    lineage: Lineage
    legs: dict[str, list[tuple[str, float]]]
    records: dict[str, RecallRecord]
    kinds: frozenset[RecallKind] | None = None
    query_vector: np.ndarray | None = None  # the query's, where the vector leg ran (a second round may blend it)
    also_vectors: dict[str, np.ndarray] = field(default_factory=dict)  # of gather's ``also_embed`` texts
    # their vector hits, searched in the query's batch under the legs' filters and depth; not decoded
    # into ``records`` (rank reads every record's speakers), so a leg that uses them decodes them
    also_hits: dict[str, list[VectorHit]] = field(default_factory=dict)


@dataclass(slots=True)
class _TextRound:
    """What :meth:`RecallIndex._text_round` found on the BM25 leg's thread: legs and their records."""

    legs: dict[str, list[tuple[str, float]]]
    records: dict[str, RecallRecord]


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
        self._pool: ThreadPoolExecutor | None = None
        # the speakers a campaign's recalls have met (a few campaigns' worth): a question naming some
        # of them is embedded with its name-free form in one batch, before the first round
        self._speakers: OrderedDict[str, frozenset[str]] = OrderedDict()

    def ensure(self) -> None:
        """Create the collection and the text index if missing (idempotent)."""
        if not self._ready:
            self.text.ensure()
            self.vectors.ensure_collection(self.collection, VectorSpace(name="dense", dim=self.embedder.dim))
            self._ready = True

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_pool": None}  # a thread pool does not travel; the next search makes one

    def _legs(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recall-leg")
        return self._pool

    def close(self) -> None:
        """Close both indexes (the recall index owns them when built by :func:`open_recall_index`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self.text.close()
        self.vectors.close()

    # -- writes ---------------------------------------------------------------------------------------

    def head(self, record: RecallRecord) -> str:
        """What the record is prefixed with where it is indexed as one text: ``(time) speakers:``."""
        parts = []
        if self.config.time_in_text and record.story_time:
            parts.append(f"({record.story_time})")
        if self.config.speakers_in_text and record.speakers:
            parts.append(", ".join(record.speakers) + ":")
        return " ".join(parts)

    def indexed_text(self, record: RecallRecord, context: str | None = None) -> str:
        """The text a record is embedded as: when, who, then the record itself, after its context when
        ``context_in_vector`` (``context`` if given, else the record's own)."""
        head = self.head(record)
        body = f"{head} {record.text}" if head else record.text
        context = record.context if context is None else context
        if self.config.context_in_vector and context:
            return f"{context}\n{body}"
        return body

    def windows(self, records: Sequence[RecallRecord]) -> dict[str, str]:
        """The context of each turn record from its neighbours in ``records``: the turns of the same
        scene and branch at the ``window_before`` depths just before it (its ancestors: never a later
        turn, which may be undone or on another line), as ``speakers: text`` lines in story order.
        Records without a neighbour in the batch are left out (they keep their own ``context``)."""
        cfg = self.config
        if cfg.window_before == 0:
            return {}
        by_place: dict[tuple[str, str, str, int], RecallRecord] = {}
        for record in records:
            if record.kind is RecallKind.TURN and record.scene_id is not None:
                by_place[(record.campaign_id, record.branch_id, record.scene_id, record.depth)] = record
        out: dict[str, str] = {}
        for (campaign, branch, scene, depth), record in by_place.items():
            lines = []
            for offset in range(-cfg.window_before, 0):
                other = by_place.get((campaign, branch, scene, depth + offset))
                if other is not None:
                    who = ", ".join(other.speakers)
                    lines.append((offset, f"{who}: {other.text}" if who else other.text))
            if lines:
                out[record.id] = "\n".join(line for _, line in sorted(lines))
        return out

    def write(self, records: Sequence[RecallRecord], vectors: np.ndarray | None = None) -> int:
        """Upsert records into both indexes (idempotent by id); embeds them unless ``vectors`` are given.

        A turn record's window (:meth:`windows`) is made of the turns of its scene in the batch and,
        for depths the batch does not hold, of those already in the index; the indexed turns whose
        window now holds a written turn get their full-text document rewritten, so a turn recorded
        alone during play is indexed as a bulk import would index it.
        """
        if not records:
            return 0
        self.ensure()
        indexed = self._indexed_neighbours(records)
        windows = self.windows([*records, *indexed])
        if vectors is None:
            vectors = self.embedder.embed_documents([self.indexed_text(r, windows.get(r.id)) for r in records])
        if len(vectors) != len(records):
            raise ValueError(f"{len(records)} records but {len(vectors)} vectors")
        self._write_text(records, indexed, windows)
        return self.write_vectors(records, vectors)

    def write_text(self, records: Sequence[RecallRecord]) -> None:
        """The full-text half of :meth:`write`, which needs no vectors: a bulk writer runs it while the
        records are embedded, then calls :meth:`write_vectors` (the repair check looks for the vectors,
        so a crash between the two leaves the records to be written again)."""
        if records:
            self.ensure()
            indexed = self._indexed_neighbours(records)
            self._write_text(records, indexed, self.windows([*records, *indexed]))

    def _write_text(
        self, records: Sequence[RecallRecord], indexed: Sequence[RecallRecord], windows: Mapping[str, str]
    ) -> None:
        rewritten = [r for r in indexed if _window_holds(self.config, r, records)]
        self.text.upsert([self._document(r, windows.get(r.id)) for r in [*records, *rewritten]])
        self.text.refresh()

    def write_vectors(self, records: Sequence[RecallRecord], vectors: np.ndarray) -> int:
        """The vector half of :meth:`write`: ``records`` with their vectors, in order. Returns how many."""
        if len(vectors) != len(records):
            raise ValueError(f"{len(records)} records but {len(vectors)} vectors")
        if not records:
            return 0
        self.ensure()
        self.vectors.upsert(
            self.collection,
            [
                # tolist gives the same Python floats as float() per element, ~2x faster
                VectorPoint(id=r.id, vector=np.asarray(v).tolist(), payload=self._payload(r))
                for r, v in zip(records, vectors, strict=True)
            ],
        )
        return len(records)

    def indexed_texts(self, records: Sequence[RecallRecord]) -> list[str]:
        """The texts :meth:`write` embeds for ``records`` written together, in order (their windows
        included when ``context_in_vector``): a caller that embedded them already passes the vectors."""
        if not self.config.context_in_vector:
            return [self.indexed_text(r) for r in records]  # the window is not embedded: no store read
        self.ensure()
        windows = self.windows([*records, *self._indexed_neighbours(records)])
        return [self.indexed_text(r, windows.get(r.id)) for r in records]

    def _indexed_neighbours(self, records: Sequence[RecallRecord]) -> list[RecallRecord]:
        """The turn records already indexed within reach of the written turns' windows (depths up to
        ``window_before`` away on their branch, the same scene) that the batch lacks: enough to
        rebuild the window of every indexed turn whose window holds a written one."""
        cfg = self.config
        reach = cfg.window_before
        if reach == 0:
            return []
        turns = [r for r in records if r.kind is RecallKind.TURN and r.scene_id is not None]
        held = {(r.campaign_id, r.branch_id, r.depth) for r in turns}
        scenes = {(r.campaign_id, r.branch_id, r.scene_id) for r in turns}
        wanted: dict[str, set[str]] = {}
        for r in turns:
            for depth in range(max(0, r.depth - reach), r.depth + reach + 1):
                if (r.campaign_id, r.branch_id, depth) not in held:
                    wanted.setdefault(r.campaign_id, set()).add(f"{r.branch_id}:0:{depth}")  # one depth's key
        written = {r.id for r in records}
        out: list[RecallRecord] = []
        for campaign_id, keys in wanted.items():
            filters = SearchFilters(campaign=[campaign_id], kind=[RecallKind.TURN.value], lineage=sorted(keys))
            for point in self.vectors.scroll(self.collection, filters=filters):
                record = _stored_record(point.payload["record"])
                if record.id not in written and (record.campaign_id, record.branch_id, record.scene_id) in scenes:
                    out.append(record)
        return out

    def _fields(self, record: RecallRecord) -> dict[str, str | list[str]]:
        fields: dict[str, str | list[str]] = {
            "campaign": record.campaign_id,
            "kind": record.kind.value,
            "lineage": lineage_keys(record.branch_id, record.depth),
        }
        if record.observers:
            fields["observer"] = list(record.observers)
        return fields

    def _document(self, record: RecallRecord, window: str | None = None) -> TextDocument:
        context = window if window is not None else record.context
        if self.config.text_layout == "joined":
            head = self.head(record)
            body = f"{head} {record.text}" if head else record.text
            title = heading = ""
        else:
            body = record.text
            title = ", ".join(record.speakers) if self.config.speakers_in_text else ""
            heading = (record.story_time or "") if self.config.time_in_text else ""
        return TextDocument(
            id=record.id,
            text=f"{context}\n{body}" if context else body,
            title=title,
            heading=heading,
            fields=self._fields(record),
            data={"record": record.model_dump(mode="json", exclude={"context"})},
        )

    def _payload(self, record: RecallRecord) -> dict[str, object]:
        # the record as one JSON string, not a nested object: qdrant-edge converts a payload's every string
        # value trying number types first, so 5,000 records upserted in 0.44 s against 0.62 s, and a search's
        # 100 payloads came back in 2.5 ms against 3.3 ms (_stored_record reads both forms)
        return {**self._fields(record), "record": record.model_dump_json(exclude={"context"})}

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

    def stored_texts(self, campaign_id: str) -> dict[str, str]:
        """Every record of a campaign the index holds, by id, with the text it holds (what a
        reconciliation with the graph compares: :mod:`story.recall_sync`)."""
        self.ensure()
        points = self.vectors.scroll(self.collection, filters=SearchFilters(campaign=[campaign_id]))
        return {point.id: _stored_record(point.payload["record"]).text for point in points}

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
        """Hybrid recall (vector + BM25, fused by RRF, then re-scored) of the records on ``lineage``, best first."""
        found = self.collect(
            campaign_id, query, lineage=lineage, observer=observer, kinds=kinds, limit=limit, query_vector=query_vector
        )
        return self.rank(found, limit=limit)

    def collect(
        self,
        campaign_id: str,
        query: str,
        *,
        lineage: Lineage,
        observer: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
        query_vector: np.ndarray | None = None,
        depth: int | None = None,
    ) -> Candidates:
        """:meth:`gather`, then the searches some levers add: for a query asking for an inference that
        names speakers (with ``inference_text_without_names``) a second BM25 search of it without their
        names, kept as the leg ``text_without_names`` that :meth:`rank` uses in place of ``text`` under
        such a config; with ``feedback_depth``, a second round (:meth:`feedback`); for a query naming some
        of the speakers (with ``vector_without_names_weight``), a vector search of it without their
        names, the leg ``vector_without_names``."""
        cfg = self.config
        rocchio = cfg.feedback_depth > 0 and cfg.feedback_vector_weight > 0 and cfg.vector_weight > 0
        also: list[str] = []
        also_search: LegsCheck | None = None
        if query_vector is None and cfg.vector_without_names_weight > 0 and cfg.vector_weight > 0:
            known = self._speakers.get(campaign_id, frozenset())
            named = named_speakers(query, set(known)) if known else set()
            if named and named != known and (guess := without_names(query, named)):
                # one batch of two costs little more than one query, embedded and searched: the names-free
                # leg below then needs no second embedding nor search (it uses them only if it strips the
                # same names, which the BM25 leg's speakers tell before the search when it is done by then)
                also.append(guess)
                also_search = partial(_names_among, frozenset(named), cfg.candidates)
        found = self.gather(
            campaign_id,
            query,
            lineage=lineage,
            observer=observer,
            kinds=kinds,
            limit=limit,
            query_vector=query_vector,
            depth=depth,
            also_embed=also,
            also_search=also_search,
        )
        early = found.also_vectors
        filters = self._filters(campaign_id, lineage, observer, found.kinds)
        searched = max(depth or cfg.candidates, limit)  # the depth gather searched to
        if cfg.inference_text_without_names and cfg.text_weight > 0 and inferential(query):
            named = named_speakers(query, {s for r in found.records.values() for s in r.speakers})
            if named:
                stripped = without_names(query, named)
                hits = self.text.search(stripped, filters=filters, limit=searched, highlight=False)
                _decode(found.records, ((h.id, h.data) for h in hits))
                found.legs["text_without_names"] = _bm25_order(hits)
        if cfg.feedback_depth > 0 and (rocchio or cfg.feedback_text_weight > 0):
            found.legs.update(self.feedback(found, filters, depth=searched))
        if cfg.vector_without_names_weight > 0 and cfg.vector_weight > 0:
            fused = {i for hits in found.legs.values() for i, _ in hits[: cfg.candidates]}  # whatever the depth
            speakers = {s for i in fused for s in found.records[i].speakers}
            self._remember_speakers(campaign_id, speakers)
            named = named_speakers(query, speakers)
            stripped = without_names(query, named) if named and named != speakers else ""
            if stripped:
                points = found.also_hits.get(stripped)  # searched in gather's batch (same filters, depth)
                if points is None:
                    vector = early[stripped] if stripped in early else self.embedder.embed_query(stripped)
                    points = self.vectors.search(self.collection, vector.tolist(), filters=filters, limit=searched)
                _decode(found.records, ((p.id, p.payload) for p in points))
                found.legs["vector_without_names"] = [(p.id, p.score) for p in points]
        return found

    def _remember_speakers(self, campaign_id: str, speakers: set[str]) -> None:
        """Add ``speakers`` to what :meth:`collect` knows of the campaign (the last 256 campaigns kept)."""
        if not speakers:
            return
        known = self._speakers.get(campaign_id, frozenset())
        if not speakers <= known:
            self._speakers[campaign_id] = known | speakers
        try:  # concurrent recalls may evict it in between: the cache is a hint, never an error
            self._speakers.move_to_end(campaign_id)
            while len(self._speakers) > 256:
                self._speakers.popitem(last=False)
        except KeyError:
            pass

    def _filters(
        self, campaign_id: str, lineage: Lineage, observer: str | None, kinds: frozenset[RecallKind] | None
    ) -> SearchFilters:
        """The filters :meth:`gather` searches under (every kind when expansion may lead to turns)."""
        searched = kinds
        if searched is not None and self.config.expand_share > 0 and RecallKind.TURN in searched:
            searched = None
        return SearchFilters(
            campaign=[campaign_id],
            lineage=lineage_cover(lineage),
            observer=[observer] if observer else None,
            kind=sorted(k.value for k in searched) if searched else None,
        )

    def feedback(
        self, found: Candidates, filters: SearchFilters, *, depth: int, config: RecallConfig | None = None
    ) -> dict[str, list[tuple[str, float]]]:
        """The second round of a recall (pseudo-relevance feedback): the ``feedback_depth`` best records
        of the first (:meth:`rank` without feedback) searched for again, as legs for :meth:`rank` to fuse.

        ``feedback_vector``: the query vector blended with the mean of the feedback records' vectors
        (Rocchio), one more vector search. ``feedback_text``: the query and the feedback records'
        distinctive words (:func:`story.recall_cues.feedback_terms`, against the text of every record
        the legs bring to fusion), one more BM25 search, unless the BM25 leg led its own feedback on its
        thread already (:func:`_text_led`, :meth:`_text_round`). The records found are added to
        ``found.records``.
        """
        cfg = config or self.config
        fused_text = (
            not _text_led(cfg, len(found.legs.get("text", ())), depth)
            and cfg.feedback_text_weight > 0
            and cfg.text_weight > 0
            and not inferential(found.query)
        )
        rocchio = cfg.feedback_vector_weight > 0 and cfg.vector_weight > 0 and found.query_vector is not None
        if not (fused_text or rocchio):
            return {}
        first = self.rank(
            found,
            limit=cfg.feedback_depth,
            config=cfg.model_copy(update={"feedback_vector_weight": 0.0, "feedback_text_weight": 0.0}),
        )
        legs: dict[str, list[tuple[str, float]]] = {}
        if not first:
            return legs
        ids = [h.id for h in first]
        if rocchio:
            points = self.vectors.get(self.collection, ids)
            if points:
                mean = np.mean([p.vector for p in points], axis=0)
                query = np.asarray(found.query_vector, dtype=np.float64)
                blended = (1 - cfg.feedback_vector_share) * query / max(float(np.linalg.norm(query)), 1e-12)
                blended += cfg.feedback_vector_share * mean / max(float(np.linalg.norm(mean)), 1e-12)
                hits = self.vectors.search(self.collection, blended.tolist(), filters=filters, limit=depth)
                legs["feedback_vector"] = [(h.id, h.score) for h in hits]
                _decode(found.records, ((h.id, h.payload) for h in hits))
        if fused_text:
            # the background is what the legs bring to fusion, whatever depth they were searched to
            pool = {i for hits in found.legs.values() for i, _ in hits[: cfg.candidates]}
            background = [found.records[i].text for i in pool]
            words = feedback_terms(found.query, [found.records[i].text for i in ids], background, cfg.feedback_terms)
            if words:
                text_hits = self.text.search(
                    f"{found.query} {' '.join(words)}", filters=filters, limit=depth, highlight=False
                )
                legs["feedback_text"] = _bm25_order(text_hits)
                _decode(found.records, ((h.id, h.data) for h in text_hits))
        return legs

    def gather(
        self,
        campaign_id: str,
        query: str,
        *,
        lineage: Lineage,
        observer: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
        query_vector: np.ndarray | None = None,
        depth: int | None = None,
        also_embed: Sequence[str] = (),
        also_search: LegsCheck | None = None,
    ) -> Candidates:
        """Run the legs: the ``depth`` best records of each (``candidates`` by default) on ``lineage``.

        The BM25 leg (and its own feedback round, :meth:`_text_round`) runs on a thread while the query
        is embedded and the vector leg searches. ``also_embed``: texts embedded in the query's batch
        (when the query is embedded here) and searched in its batch of vector searches, their vectors in
        ``Candidates.also_vectors`` and their hits in ``Candidates.also_hits``; ``also_search``, given the
        BM25 legs and their records when that leg is done before the vector search, says whether to
        search them (an unused search is not free: HNSW searches a batch one query at a time). With
        ``expand_share`` on and turns asked for, the legs search every kind, so a memory or a summary
        can lead to its scene's turns; :meth:`rank` keeps only the kinds asked for.
        """
        self.ensure()
        cfg = self.config
        wanted = frozenset(kinds) if kinds else None
        filters = self._filters(campaign_id, lineage, observer, wanted)
        depth = max(depth or cfg.candidates, limit)
        records: dict[str, RecallRecord] = {}
        legs: dict[str, list[tuple[str, float]]] = {}
        text_leg: Future[_TextRound] | None = None
        if cfg.text_weight > 0 and cfg.vector_weight > 0 and query_vector is None:
            # BM25 runs while the model embeds the query (torch releases the GIL): ~a third off a recall
            text_leg = self._legs().submit(self._text_round, query, filters, depth, lineage, wanted)
        also: dict[str, np.ndarray] = {}
        also_hits: dict[str, list[VectorHit]] = {}
        if cfg.vector_weight > 0:
            if query_vector is None and also_embed:
                batch = self.embedder.embed_documents([query, *also_embed])
                query_vector, also = batch[0], dict(zip(also_embed, batch[1:], strict=True))
                told = text_leg.result() if text_leg is not None and text_leg.done() else None  # no waiting
                if also_search is None or told is None or also_search(told.legs, told.records):
                    # one planned batch of searches under one filter estimate: two exact searches of a
                    # position early in a long campaign took ~7 ms together against ~11 ms one by one
                    found = self.vectors.search_batch(
                        self.collection, [v.tolist() for v in batch], filters=filters, limit=depth
                    )
                    hits, also_hits = found[0], dict(zip(also_embed, found[1:], strict=True))
                else:
                    hits = self.vectors.search(self.collection, query_vector.tolist(), filters=filters, limit=depth)
            else:
                if query_vector is None:
                    query_vector = self.embedder.embed_query(query)
                hits = self.vectors.search(self.collection, query_vector.tolist(), filters=filters, limit=depth)
            legs["vector"] = [(h.id, h.score) for h in hits]
            _decode(records, ((h.id, h.payload) for h in hits))
        if cfg.text_weight > 0:
            done = (
                text_leg.result() if text_leg is not None else self._text_round(query, filters, depth, lineage, wanted)
            )
            legs.update(done.legs)
            for rid, record in done.records.items():
                records.setdefault(rid, record)
        return Candidates(
            query=query,
            lineage=lineage,
            legs=legs,
            records=records,
            kinds=wanted,
            query_vector=query_vector,
            also_vectors=also,
            also_hits=also_hits,
        )

    def _text_round(
        self, query: str, filters: SearchFilters, depth: int, lineage: Lineage, wanted: frozenset[RecallKind] | None
    ) -> _TextRound:
        """The BM25 leg (``text``) and, where it leads the feedback (:func:`_text_led`), its own feedback
        round (``feedback_text``): the query plus the distinctive words of the leg's best ``feedback_depth``
        records on the lineage (of the kinds asked for) against the leg's candidates, searched again."""
        cfg = self.config
        found = _TextRound(legs={}, records={})
        hits = self.text.search(query, filters=filters, limit=depth, highlight=False)
        found.legs["text"] = _bm25_order(hits)
        _decode(found.records, ((h.id, h.data) for h in hits))
        if not (_text_led(cfg, len(hits), depth) and cfg.feedback_text_weight > 0 and not inferential(query)):
            return found
        best: list[str] = []
        for rid, _ in found.legs["text"]:
            record = found.records[rid]
            if (wanted is None or record.kind in wanted) and lineage.contains(
                record.branch_id, record.depth, record.seq
            ):
                best.append(record.text)
                if len(best) == cfg.feedback_depth:
                    break
        pool = [found.records[h.id].text for h in hits[: cfg.candidates]]
        words = feedback_terms(query, best, pool, cfg.feedback_terms) if best else []
        if words:
            again = self.text.search(f"{query} {' '.join(words)}", filters=filters, limit=depth, highlight=False)
            found.legs["feedback_text"] = _bm25_order(again)
            _decode(found.records, ((h.id, h.data) for h in again))
        return found

    def rank(self, found: Candidates, *, limit: int = 10, config: RecallConfig | None = None) -> list[RecallHit]:
        """Fuse and re-score what :meth:`gather` found (under ``config``, this index's by default), best first.

        Steps, each off at 0: RRF of the legs (each cut to ``candidates``; for a query asking for the
        members of a kind, the text leg weighed at most ``listing_text_weight`` and the names-free vector
        leg at least ``listing_vector_without_names_weight``; for a query asking for an
        inference, the text leg weighed ``inference_text_weight`` and searched without the speakers'
        names when :meth:`collect` did so; the legs :meth:`collect` adds, ``feedback_text``,
        ``feedback_vector`` and ``vector_without_names``, weighed by their levers); the time and speaker
        boosts; a share of each neighbouring turn's score; a share of each memory's, summary's or
        fact's score to its scene's turns; recency and salience. Records off the lineage (the few
        a keyword cannot judge) and kinds not asked for are dropped.
        """
        cfg = config or self.config
        vectors, texts, feedback = cfg.vector_weight > 0, cfg.text_weight > 0, cfg.feedback_depth > 0
        weights = {
            "vector": cfg.vector_weight,
            "text": cfg.text_weight,
            # the legs a leg's lever adds are off with that leg
            "feedback_vector": cfg.feedback_vector_weight if feedback and vectors else 0.0,
            "feedback_text": cfg.feedback_text_weight if feedback and texts else 0.0,
            "vector_without_names": cfg.vector_without_names_weight if vectors else 0.0,
        }
        given = dict(found.legs)
        if listing(found.query):
            if cfg.listing_text_weight is not None:
                weights["text"] = min(weights["text"], cfg.listing_text_weight)
            if cfg.listing_vector_without_names_weight is not None and vectors:
                weights["vector_without_names"] = max(
                    weights["vector_without_names"], cfg.listing_vector_without_names_weight
                )
        if inferential(found.query):
            if cfg.inference_text_weight is not None:
                weights["text"] = cfg.inference_text_weight
            if cfg.inference_text_without_names and "text_without_names" in given:
                given["text"] = given["text_without_names"]
        if cfg.unmatched_text_weight is not None and given.get("text"):
            speakers = {s for r in found.records.values() for s in r.speakers}
            asked = content_stems(without_names(found.query, named_speakers(found.query, speakers)))
            best = given["text"][:UNMATCHED_DEPTH]
            if asked and not any(asked & content_stems(found.records[i].text) for i, _ in best):
                weights["text"] = min(weights["text"], cfg.unmatched_text_weight)
                weights["feedback_text"] = min(weights["feedback_text"], cfg.unmatched_text_weight)
        legs = {leg: hits[: cfg.candidates] for leg, hits in given.items() if weights.get(leg, 0) > 0}
        fused = rrf(legs, weights, k=cfg.rrf_k)
        lineage = found.lineage
        records = {}
        for doc in fused:
            record = found.records[doc.id]
            if lineage.contains(record.branch_id, record.depth, record.seq):
                records[doc.id] = record
        scores = {doc.id: doc.score for doc in fused if doc.id in records}
        if cfg.time_boost > 0 and (when := time_range(found.query)) is not None:
            for rid, record in records.items():
                day = story_date(record.story_time)
                if day is not None and when.holds(day, after_days=cfg.time_after_days):
                    scores[rid] *= 1 + cfg.time_boost
        if cfg.speaker_boost > 0:
            speakers = {s for r in records.values() for s in r.speakers}
            named = named_speakers(found.query, speakers)
            if named and named != speakers:
                for rid, record in records.items():
                    if named.intersection(record.speakers):
                        scores[rid] *= 1 + cfg.speaker_boost
        if cfg.neighbour_share > 0 or cfg.expand_share > 0:
            scores = _spread(records, scores, cfg.neighbour_share, cfg.expand_share)
        head_depth = max(lineage.depth, 1)
        final: list[tuple[float, str]] = []
        for rid, record in records.items():
            if found.kinds is not None and record.kind not in found.kinds:
                continue
            score = scores[rid]
            score += cfg.recency_weight * record.depth / head_depth
            score += cfg.salience_weight * record.salience
            final.append((-score, rid))
        final.sort()
        by_id = {doc.id: doc for doc in fused}
        return [_hit(records[rid], -neg, by_id[rid].scores, by_id[rid].ranks) for neg, rid in final[:limit]]


def _text_led(config: RecallConfig, text_hits: int, depth: int) -> bool:
    """Whether the BM25 leg leads the text feedback itself: ``feedback_from="text"`` and a leg that came back
    full (its candidates are then a background that tells a distinctive word; a short leg, a small
    campaign's or a rare word's, is little more than its own best records, so the fused round leads)."""
    return config.feedback_from == "text" and config.feedback_depth > 0 and text_hits >= min(depth, config.candidates)


def _names_among(
    named: frozenset[str],
    candidates: int,
    legs: Mapping[str, list[tuple[str, float]]],
    records: Mapping[str, RecallRecord],
) -> bool:
    """Whether the speakers of the legs' candidates (each leg's first ``candidates``) include all of
    ``named``: then :meth:`RecallIndex.collect`'s names-free leg strips those names (unless the vector
    leg brings another speaker the query names), and its search is worth running early."""
    speakers = {s for hits in legs.values() for i, _ in hits[:candidates] for s in records[i].speakers}
    return named <= speakers


def _decode(records: dict[str, RecallRecord], hits: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Add the records of ``hits`` (id, payload holding ``record``) to ``records``: each decoded once,
    whichever leg found it first."""
    for rid, payload in hits:
        if rid not in records:
            records[rid] = _stored_record(payload["record"])


def _stored_record(stored: str | Mapping[str, Any]) -> RecallRecord:
    """The record a payload or a text document holds: a JSON string (vector payloads), or an object (text
    documents, and vector payloads written before records were stored as strings)."""
    if isinstance(stored, str):
        return RecallRecord.model_validate_json(stored)
    return RecallRecord.model_validate(stored)


def _window_holds(config: RecallConfig, record: RecallRecord, written: Sequence[RecallRecord]) -> bool:
    """Whether ``record``'s window reaches one of the ``written`` turns (same branch and scene)."""
    place = (RecallKind.TURN, record.branch_id, record.scene_id)
    return any(
        (other.kind, other.branch_id, other.scene_id) == place
        and other.id != record.id
        and -config.window_before <= other.depth - record.depth < 0
        for other in written
    )


def _spread(
    records: dict[str, RecallRecord], scores: dict[str, float], neighbour_share: float, expand_share: float
) -> dict[str, float]:
    """Scores after each candidate turn takes ``neighbour_share`` of the scores of the candidate turns
    next to it (same branch and scene, depth +-1) and ``expand_share`` of the scores of the candidate
    memories, summaries and facts of its scene. Shares are taken from the scores before spreading."""
    turns: dict[tuple[str, str | None, int], str] = {}
    by_scene: dict[str, list[str]] = {}  # every candidate is on the lineage: a scene's turns there, any branch
    for rid, record in records.items():
        if record.kind is RecallKind.TURN:
            turns[(record.branch_id, record.scene_id, record.depth)] = rid
            if record.scene_id is not None:
                by_scene.setdefault(record.scene_id, []).append(rid)
    out = dict(scores)
    if neighbour_share > 0:
        for (branch, scene, depth), rid in turns.items():
            if scene is None:
                continue
            for other in (turns.get((branch, scene, depth - 1)), turns.get((branch, scene, depth + 1))):
                if other is not None:
                    out[rid] += neighbour_share * scores[other]
    if expand_share > 0:
        for rid, record in records.items():
            if record.kind is RecallKind.TURN or record.scene_id is None:
                continue
            for turn_id in by_scene.get(record.scene_id, ()):
                out[turn_id] += expand_share * scores[rid]
    return out


def _bm25_order(hits: Sequence[TextHit]) -> list[tuple[str, float]]:
    """A BM25 leg's ids and scores in rank order, ties by id: the engine breaks ties by where a document
    sits in its segments, which other campaigns' writes move."""
    return sorted(((h.id, h.score) for h in hits), key=lambda pair: (-pair[1], pair[0]))


def _hit(record: RecallRecord, score: float, scores: dict[str, float], ranks: dict[str, int]) -> RecallHit:
    """A ranked record as a hit. Of the legs' raw scores only the vector legs' are given (the cosine of
    the query and the record, which nothing else in the index moves): a BM25 score is computed with the
    statistics of the whole memory index, which every campaign shares, so it would tell one campaign how
    often the others use a word. Its rank is given instead; the fused ``score`` comes from ranks."""
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
        scores={leg: value for leg, value in scores.items() if leg in VECTOR_LEGS},
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
