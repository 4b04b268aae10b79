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
from dataclasses import dataclass
from functools import partial

import numpy as np
import structlog

from models.embedding import Embedder, EmbeddingConfig, SentenceTransformerEmbedder
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters
from schemas.settings import Settings
from stores.factory import open_memory_text_index, open_vector_index
from stores.text.base import TextIndex
from stores.vector.base import VectorHit, VectorIndex, VectorPoint, VectorSpace
from story.lineage import Lineage, lineage_cover, lineage_keys
from story.recall_config import RecallConfig
from story.recall_cues import (
    feedback_terms,
    inferential,
    named_speakers,
    without_names,
)
from story.recall_documents import (
    index_head,
    indexed_text,
    text_document,
    vector_payload,
    window_holds,
    windows,
)
from story.recall_ranking import Candidates, bm25_order, decode_hits, names_among, rank, stored_record, text_led
from story.recall_vectors import nearest
from story.recall_writer import RecallWriter

__all__ = [
    "MEMORY_COLLECTION",
    "Candidates",
    "RecallConfig",
    "RecallIndex",
    "lineage_cover",
    "lineage_keys",
    "open_recall_index",
]

log = structlog.get_logger(__name__)

MEMORY_COLLECTION = "memory"
# a test of legs (name -> ids and scores, in rank order) and the records they found
LegsCheck = Callable[[Mapping[str, list[tuple[str, float]]], Mapping[str, RecallRecord]], bool]


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
        # a turn's record is written behind the turn, many turns to a commit (story.recall_writer)
        self._writer = RecallWriter(self.write_now)

    def ensure(self) -> None:
        """Create the collection and the text index if missing (idempotent)."""
        if not self._ready:
            self.text.ensure()
            self.vectors.ensure_collection(self.collection, VectorSpace(name="dense", dim=self.embedder.dim))
            self._ready = True

    def __getstate__(self) -> dict[str, object]:
        # a thread pool does not travel (the next search makes one), nor the writer's thread
        return {**self.__dict__, "_pool": None, "_writer": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._writer = RecallWriter(self.write_now)

    def _legs(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recall-leg")
        return self._pool

    def close(self) -> None:
        """Write the submitted records, then close both indexes (the recall index owns them when built
        by :func:`open_recall_index`)."""
        self._writer.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self.text.close()
        self.vectors.close()

    # -- writes ---------------------------------------------------------------------------------------

    def head(self, record: RecallRecord) -> str:
        """What the record is prefixed with where it is indexed as one text (:func:`.index_head`)."""
        return index_head(self.config, record)

    def indexed_text(self, record: RecallRecord, context: str | None = None) -> str:
        """The text a record is embedded as (:func:`~story.recall_documents.indexed_text`)."""
        return indexed_text(self.config, record, context)

    def windows(self, records: Sequence[RecallRecord]) -> dict[str, str]:
        """The context of each turn record from its neighbours in ``records`` (:func:`.recall_documents.windows`)."""
        return windows(self.config, records)

    def submit(self, records: Sequence[RecallRecord]) -> None:
        """Write records behind the caller, with those submitted meanwhile (:mod:`story.recall_writer`):
        a turn's record. :meth:`flush` waits for them; every other write and read here flushes first."""
        self._writer.submit(records)

    def flush(self) -> None:
        """Return once every record :meth:`submit` took before the call is written (or failed, logged)."""
        self._writer.flush()

    def write(self, records: Sequence[RecallRecord], vectors: np.ndarray | None = None) -> int:
        """Write the submitted records (:meth:`flush`), then ``records`` (:meth:`write_now`)."""
        self.flush()
        return self.write_now(records, vectors)

    def write_now(self, records: Sequence[RecallRecord], vectors: np.ndarray | None = None) -> int:
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
            self.flush()
            self.ensure()
            indexed = self._indexed_neighbours(records)
            self._write_text(records, indexed, self.windows([*records, *indexed]))

    def _write_text(
        self, records: Sequence[RecallRecord], indexed: Sequence[RecallRecord], windows: Mapping[str, str]
    ) -> None:
        rewritten = [r for r in indexed if window_holds(self.config, r, records)]
        self.text.upsert([text_document(self.config, r, windows.get(r.id)) for r in [*records, *rewritten]])
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
                VectorPoint(id=r.id, vector=np.asarray(v).tolist(), payload=vector_payload(r))
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
                record = stored_record(point.payload["record"])
                if record.id not in written and (record.campaign_id, record.branch_id, record.scene_id) in scenes:
                    out.append(record)
        return out

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the vector collection holds (the repair check after a crash)."""
        if not ids:
            return set()
        self.flush()
        self.ensure()
        return {p.id for p in self.vectors.get(self.collection, list(ids))}

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self.flush()
            self.ensure()
            self.text.delete(list(ids))
            self.vectors.delete(self.collection, list(ids))
            self.text.refresh()

    def delete_campaign(self, campaign_id: str) -> None:
        """Remove every record of a campaign (before a rebuild, or when the campaign is deleted)."""
        self.flush()
        self.ensure()
        filters = SearchFilters(campaign=[campaign_id])
        self.text.delete_by_filter(filters)
        self.vectors.delete_by_filter(self.collection, filters)
        self.text.refresh()

    def count(self, campaign_id: str) -> int:
        self.flush()
        self.ensure()
        return self.vectors.count(self.collection, SearchFilters(campaign=[campaign_id]))

    def stored_texts(self, campaign_id: str) -> dict[str, str]:
        """Every record of a campaign the index holds, by id, with the text it holds (what a
        reconciliation with the graph compares: :mod:`story.recall_sync`)."""
        self.flush()
        self.ensure()
        points = self.vectors.scroll(self.collection, filters=SearchFilters(campaign=[campaign_id]))
        return {point.id: stored_record(point.payload["record"]).text for point in points}

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
        wait_for_turns: bool = True,
    ) -> list[RecallHit]:
        """Hybrid recall (vector + BM25, fused by RRF, then re-scored) of the records on ``lineage``, best first.

        ``wait_for_turns``: recall the turns submitted so far (:meth:`flush`); False for a caller that has
        the latest turns already (the turn flow's prompt holds them verbatim) and recalls without waiting.
        """
        if wait_for_turns:
            self.flush()
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
                also_search = partial(names_among, frozenset(named), cfg.candidates)
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
                decode_hits(found.records, ((h.id, h.data) for h in hits))
                found.legs["text_without_names"] = bm25_order(hits)
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
                    points = nearest(self.vectors, self.collection, [vector], filters, searched)[0]
                decode_hits(found.records, ((p.id, p.payload) for p in points))
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
        thread already (:func:`text_led`, :meth:`_text_round`). The records found are added to
        ``found.records``.
        """
        cfg = config or self.config
        fused_text = (
            not text_led(cfg, len(found.legs.get("text", ())), depth)
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
                hits = nearest(self.vectors, self.collection, [blended], filters, depth)[0]
                legs["feedback_vector"] = [(h.id, h.score) for h in hits]
                decode_hits(found.records, ((h.id, h.payload) for h in hits))
        if fused_text:
            # the background is what the legs bring to fusion, whatever depth they were searched to
            pool = {i for hits in found.legs.values() for i, _ in hits[: cfg.candidates]}
            background = [found.records[i].text for i in pool]
            words = feedback_terms(found.query, [found.records[i].text for i in ids], background, cfg.feedback_terms)
            if words:
                text_hits = self.text.search(
                    f"{found.query} {' '.join(words)}", filters=filters, limit=depth, highlight=False
                )
                legs["feedback_text"] = bm25_order(text_hits)
                decode_hits(found.records, ((h.id, h.data) for h in text_hits))
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
                    found = nearest(self.vectors, self.collection, list(batch), filters, depth)
                    hits, also_hits = found[0], dict(zip(also_embed, found[1:], strict=True))
                else:
                    hits = nearest(self.vectors, self.collection, [query_vector], filters, depth)[0]
            else:
                if query_vector is None:
                    query_vector = self.embedder.embed_query(query)
                hits = nearest(self.vectors, self.collection, [query_vector], filters, depth)[0]
            legs["vector"] = [(h.id, h.score) for h in hits]
            decode_hits(records, ((h.id, h.payload) for h in hits))
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
        """The BM25 leg (``text``) and, where it leads the feedback (:func:`text_led`), its own feedback
        round (``feedback_text``): the query plus the distinctive words of the leg's best ``feedback_depth``
        records on the lineage (of the kinds asked for) against the leg's candidates, searched again."""
        cfg = self.config
        found = _TextRound(legs={}, records={})
        hits = self.text.search(query, filters=filters, limit=depth, highlight=False)
        found.legs["text"] = bm25_order(hits)
        decode_hits(found.records, ((h.id, h.data) for h in hits))
        if not (text_led(cfg, len(hits), depth) and cfg.feedback_text_weight > 0 and not inferential(query)):
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
            found.legs["feedback_text"] = bm25_order(again)
            decode_hits(found.records, ((h.id, h.data) for h in again))
        return found

    def rank(self, found: Candidates, *, limit: int = 10, config: RecallConfig | None = None) -> list[RecallHit]:
        """Fuse and re-score what :meth:`gather` found (under ``config``, this index's by default), best first:
        :func:`story.recall_ranking.rank`."""
        return rank(found, config or self.config, limit=limit)


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
