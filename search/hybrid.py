"""Hybrid retrieval: vector, BM25 and graph legs, fused by weighted reciprocal rank fusion, with the
coverage leg (:mod:`search.coverage`: the candidates re-read for how much of the query each states) fused
in, then re-ranked by a cross-encoder when one is configured.

Only chunks of *visible* items that pass the filters are returned (see :mod:`search.scope`): every
leg is restricted to the same items, so an item appears in search only once all its chunks are in
every store, and a superseded version disappears as soon as its replacement is ready, while its
chunks stay in the graph for the citations that point at them.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from models.embedding import Embedder
from models.fusion import Fused, rrf
from models.rerank import Reranker
from schemas.errors import ConfigError, NotFound
from schemas.search import LegWeights, SearchFilters, SearchHit, SearchRequest
from search import events
from search.coverage import candidate_text, coverage_ranking, read_ahead
from search.graph import GraphLeg, GraphLegConfig, GraphLegResult
from search.metrics import RERANK_DURATION, SEARCH_DURATION
from search.scope import ItemScope, Scope, ScopedItem
from stores.catalog import Catalog
from stores.graph.base import GraphStore
from stores.text.base import TextDocument, TextHit, TextIndex
from stores.vector.base import VectorHit, VectorIndex

log = structlog.get_logger(__name__)

LEGS: tuple[str, ...] = ("vector", "text", "graph")

T = TypeVar("T")


class HybridConfig(BaseModel):
    """Weights and depths of the fused search."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vector_weight: float = Field(default=1.0, ge=0, description="RRF weight of the vector leg (0 = off).")
    text_weight: float = Field(
        default=1.0,
        ge=0,
        description="RRF weight of the BM25 leg (0 = off). Fitted jointly on both question sets (docs/search.md): "
        "rules questions alone pull it to 3, which costs the paraphrased player questions 5 points of recall.",
    )
    graph_weight: float = Field(
        default=0.5,
        ge=0,
        description="RRF weight of the graph leg (0 = off). It finds the entry a query names (its heading, a "
        "concept); 0.25-0.5 in the joint fit.",
    )
    rrf_k: int = Field(
        default=5,
        gt=0,
        description="RRF constant: larger flattens the rank curve. Small: a leg's first hit (often the named "
        "entry) should count much more than its fifth (5-10 in the joint fit).",
    )
    coverage_weight: float = Field(
        default=1.0,
        ge=0,
        description="RRF weight of the coverage leg (0 = off): every candidate the other legs found, ranked by "
        "the share of the query's constraints (words, values with units, numbers beside their words, word pairs) "
        "it states (search/coverage.py). It finds the entry a question describes instead of naming; fitted on "
        "both question sets, two-fold (docs/search.md).",
    )
    coverage_pair_weight: float = Field(
        default=0.5, ge=0, le=1, description="Weight of a two-word constraint ('very rare') relative to a word's."
    )
    candidates: int = Field(default=50, gt=0, le=1000, description="Hits fetched from each leg before fusing.")
    collection: str = Field(default="chunks", description="Vector collection of chunk embeddings.")
    graph: GraphLegConfig = Field(default_factory=GraphLegConfig, description="Reach and scoring of the graph leg.")
    rerank_candidates: int = Field(
        default=10, gt=0, le=200, description="Best fused hits the re-ranker reads (at least the limit asked)."
    )
    parallel: bool = Field(
        default=True,
        description="Run the BM25 and graph legs on threads while the query is embedded (torch, tantivy and the "
        "graph socket release the GIL). On 2 cores: p95 13 % better with the machine otherwise idle, 8 % worse "
        "when other processes kept it busy (benchmarks/search_latency.py, docs/search.md).",
    )

    def weights(self, override: LegWeights | None = None) -> dict[str, float]:
        if override is not None:
            return {"vector": override.vector, "text": override.text, "graph": override.graph}
        return {"vector": self.vector_weight, "text": self.text_weight, "graph": self.graph_weight}

    def coverage(self, override: LegWeights | None = None) -> float:
        """The coverage leg's weight: a request's weights name it (0 unless set), else the preset's."""
        return override.coverage if override is not None else self.coverage_weight


HYBRID_RRF = HybridConfig()
"""The default preset: vector 1, text 1, graph 0.5, coverage 1, k = 5, fitted jointly on the rules questions
(benchmarks/rules_questions.py) and the paraphrased player questions (benchmarks/search_quality.py), so
that neither kind of question pays for the other (docs/search.md); re-ranking the best 10 when a
reranker is set."""

RULES_QUESTIONS = HybridConfig(vector_weight=1, text_weight=3, graph_weight=1, rrf_k=3, coverage_weight=0)
"""Fitted on the rules questions alone: vector 1, text 3, graph 1, k = 3 (best there, 0.977 / 0.890; the
player questions drop to 0.898 / 0.787 with it)."""

PLAYER_QUESTIONS = HybridConfig(vector_weight=1, text_weight=1, graph_weight=0.1, rrf_k=20, coverage_weight=0)
"""The previous default, tuned on the paraphrased player questions of benchmarks/search_quality.py: vector 1,
text 1, graph 0.1, k = 20."""

EQUAL_WEIGHTS = HybridConfig(vector_weight=1, text_weight=1, graph_weight=1, rrf_k=60, coverage_weight=0)
"""Textbook RRF: every leg weighted 1, k = 60, no coverage leg."""

NO_COVERAGE = HybridConfig(coverage_weight=0)
"""The default preset without the coverage leg (what it was before that leg)."""

VECTOR_ONLY = HybridConfig(text_weight=0, graph_weight=0, coverage_weight=0)
TEXT_ONLY = HybridConfig(vector_weight=0, graph_weight=0, coverage_weight=0)
GRAPH_ONLY = HybridConfig(vector_weight=0, text_weight=0, coverage_weight=0)


@dataclass(slots=True)
class _Citation:
    item_uid: str = ""
    title: str = ""
    text: str = ""
    page_start: int | None = None
    page_end: int | None = None
    heading_path: tuple[str, ...] = ()
    highlights: tuple[str, ...] = ()
    concepts: tuple[str, ...] = ()


def _timed(search_type: str, fn: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - started
    SEARCH_DURATION.labels(search_type=search_type).observe(elapsed)
    return result, elapsed


class HybridSearcher:
    """Vector + full text + graph over the chunk stores, fused, filtered, optionally re-ranked."""

    def __init__(
        self,
        *,
        text: TextIndex,
        vectors: VectorIndex,
        graph: GraphStore,
        embedder: Embedder,
        config: HybridConfig = HYBRID_RRF,
        reranker: Reranker | None = None,
    ) -> None:
        self.text = text
        self.vectors = vectors
        self.graph = graph
        self.scope = ItemScope(graph)
        self.graph_leg = GraphLeg(graph, config.graph)
        self.embedder = embedder
        self.config = config
        self.reranker = reranker
        self._pool: ThreadPoolExecutor | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self) -> None:
        """Load the models and the concept vocabulary now (a serving replica's constructor), not on the
        first query."""
        self.embedder.embed_query("warm up")
        self.graph_leg.vocabulary.fresh()
        if self.reranker is not None:
            self.reranker.score("warm up", ["warm up"])

    def close(self) -> None:
        """Stop the leg threads (the stores belong to whoever opened them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-leg")
        # the leg logs in the caller's context (the MCP call id it was bound to)
        return self._pool.submit(contextvars.copy_context().run, fn)

    def library_uid(self, name_or_uid: str) -> str:
        """The uid of the library with this uid or name (for filters typed by people).

        Raises:
            NotFound: no library has that uid or name.
        """
        catalog = Catalog(self.graph)
        try:
            return catalog.get_library(name_or_uid).uid
        except NotFound:
            library = catalog.find_library(name_or_uid)
        if library is None:
            raise NotFound("graph", f"no library named or with uid {name_or_uid!r}")
        return library.uid

    # -- search --------------------------------------------------------------------------------

    def search_request(self, request: SearchRequest) -> list[SearchHit]:
        """:meth:`search` with the fields of an API request."""
        return self.search(
            request.query, filters=request.filters, limit=request.limit, rerank=request.rerank, weights=request.weights
        )

    def search(
        self,
        query: str,
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
        rerank: bool | None = None,
        weights: LegWeights | None = None,
    ) -> list[SearchHit]:
        """The best ``limit`` chunks for ``query``, best first, with citations and per-leg scores and ranks.

        Args:
            query: what to look for, in plain words.
            filters: keyword filters, applied on every leg.
            limit: how many hits to return.
            rerank: None re-ranks when a reranker is configured, True requires one, False never re-ranks.
            weights: RRF weight per leg for this query; 0 skips a leg (the coverage leg is off unless
                they set it).

        Raises:
            ConfigError: ``rerank=True`` and no reranker is configured.
        """
        if rerank and self.reranker is None:
            raise ConfigError("LOREKEEPER_RERANKER_MODEL", "re-ranking was asked for and no reranker is configured")
        started = time.perf_counter()
        leg_weights = self.config.weights(weights)
        use_rerank = self.reranker is not None and rerank is not False
        depth = max(self.config.candidates, limit * 3)

        coverage_weight = self.config.coverage(weights)
        fetched: dict[str, TextDocument] = {}  # stored chunks the leg threads read ahead for the coverage leg
        scope, hits_by_leg, citations = self._run_legs(
            query, filters, leg_weights, depth, fetched if coverage_weight > 0 else None
        )
        allowed = scope.items
        fused = rrf(hits_by_leg, leg_weights, k=self.config.rrf_k)
        if coverage_weight > 0 and fused:
            hits_by_leg["coverage"] = self._coverage_leg(query, fused, citations, allowed, fetched)
            leg_weights = {**leg_weights, "coverage": coverage_weight}
            fused = rrf(hits_by_leg, leg_weights, k=self.config.rrf_k)
        keep = max(limit, self.config.rerank_candidates) if use_rerank else limit
        top = fused[:keep]
        self._complete_citations(top, citations, allowed)

        model: str | None = None
        rerank_scores: dict[str, float] = {}
        if use_rerank and top:
            assert self.reranker is not None
            model = self.reranker.name
            top, rerank_scores = self._rerank(query, top, citations)
        top = top[:limit]
        self._highlight(query, top, citations, {doc_id for doc_id, _ in hits_by_leg.get("text", ())})
        hits = [self._hit(doc, citations[doc.id], rerank_scores, model, rank) for rank, doc in enumerate(top, 1)]
        elapsed = time.perf_counter() - started
        SEARCH_DURATION.labels(search_type="hybrid").observe(elapsed)
        events.search_completed({leg: len(h) for leg, h in hits_by_leg.items()}, len(fused), len(hits), model, elapsed)
        return hits

    def search_many(
        self,
        queries: Sequence[str],
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
        rerank: bool | None = None,
    ) -> list[list[SearchHit]]:
        return [self.search(q, filters=filters, limit=limit, rerank=rerank) for q in queries]

    # -- legs ----------------------------------------------------------------------------------

    def _run_legs(
        self,
        query: str,
        filters: SearchFilters | None,
        weights: dict[str, float],
        depth: int,
        fetched: dict[str, TextDocument] | None = None,
    ) -> tuple[Scope, dict[str, list[tuple[str, float]]], dict[str, _Citation]]:
        """The item scope and each leg's hits in the scope, with what they carry for citations.

        With ``parallel``, the scope is read on the graph leg's thread, before that leg (the only one that
        needs it first), while the BM25 leg runs on the other thread and the query is embedded here: the
        other legs are cut to the scope afterwards, so the scope query is off the critical path. With
        ``fetched`` (the coverage leg is on), each thread then reads its leg's hits for the coverage leg
        (:meth:`_read_ahead`) while the others still run, and the stored chunks it fetched go there.
        """
        citations: dict[str, _Citation] = {}
        ahead = fetched is not None and self.config.parallel
        graph_fetched: dict[str, TextDocument] = {}

        def scoped_graph() -> tuple[Scope, GraphLegResult | None]:
            scope = self.scope.allowed(filters)
            found = self._graph_leg(query, scope, depth) if weights["graph"] > 0 and scope.items else None
            if ahead and found is not None:
                self._read_ahead([hit.chunk_id for hit in found.hits], graph_fetched)
            return scope, found

        def text_leg() -> tuple[list[TextHit], float]:
            found = self._text_leg(query, filters, depth)
            if ahead:
                read_ahead(candidate_text(hit.data.get("heading_path") or (), hit.text) for hit in found[0])
            return found

        results: dict[str, Any] = {}
        vector: tuple[list[VectorHit], float] = ([], 0.0)
        if self.config.parallel:
            text_future = self._submit(text_leg) if weights["text"] > 0 else None
            scope_future = self._submit(scoped_graph)
            if weights["vector"] > 0:
                vector = self._vector_leg(query, filters, depth)
                if ahead and fetched is not None:
                    self._read_ahead([hit.id for hit in vector[0]], fetched)
            scope, results["graph"] = scope_future.result()
            if text_future is not None:
                results["text"] = text_future.result()
            if fetched is not None:
                fetched.update(graph_fetched)
        else:
            scope, results["graph"] = scoped_graph()
            if scope.items:
                if weights["text"] > 0:
                    results["text"] = self._text_leg(query, filters, depth)
                if weights["vector"] > 0:
                    vector = self._vector_leg(query, filters, depth)
        if not scope.items:
            return scope, {leg: [] for leg in LEGS if weights[leg] > 0}, citations
        if results["graph"] is None:
            del results["graph"]
        return (
            scope,
            self._in_scope(results, vector if weights["vector"] > 0 else None, scope.items, citations),
            citations,
        )

    def _in_scope(
        self,
        results: dict[str, Any],
        vector: tuple[list[VectorHit], float] | None,
        allowed: dict[str, ScopedItem],
        citations: dict[str, _Citation],
    ) -> dict[str, list[tuple[str, float]]]:
        """Each leg's hits of the allowed items, in its order, and what each hit carries for its citation."""
        legs: dict[str, list[tuple[str, float]]] = {}
        if "text" in results:
            text_hits: list[TextHit]
            text_hits, text_seconds = results["text"]
            legs["text"] = []
            for hit in text_hits:
                item_uid = str(hit.fields.get("item", ""))
                if item_uid not in allowed:
                    continue
                legs["text"].append((hit.id, hit.score))
                citations[hit.id] = _Citation(
                    item_uid=item_uid,
                    title=hit.title,
                    text=hit.text,
                    page_start=hit.data.get("page_start"),
                    page_end=hit.data.get("page_end"),
                    heading_path=tuple(hit.data.get("heading_path") or ()),
                    highlights=tuple(hit.highlights),
                )
            events.leg_results("text", [score for _, score in legs["text"]], text_seconds)
        if vector is not None:
            vector_hits, vector_seconds = vector
            legs["vector"] = []
            for vhit in vector_hits:
                payload = vhit.payload
                item_uid = str(payload.get("item", ""))
                if item_uid not in allowed:
                    continue
                legs["vector"].append((vhit.id, vhit.score))
                if vhit.id not in citations:
                    citations[vhit.id] = _Citation(
                        item_uid=item_uid,
                        title=str(payload.get("title", "")),
                        page_start=payload.get("page_start"),
                        page_end=payload.get("page_end"),
                        heading_path=tuple(payload.get("heading_path") or ()),
                    )
            events.leg_results("vector", [score for _, score in legs["vector"]], vector_seconds)
        if "graph" in results:
            graph_result: GraphLegResult = results["graph"]
            legs["graph"] = []
            for ghit in graph_result.hits:
                legs["graph"].append((ghit.chunk_id, ghit.score))
                citation = citations.setdefault(ghit.chunk_id, _Citation(item_uid=ghit.item_uid))
                citation.concepts = tuple(dict.fromkeys(ghit.concepts))
        return legs

    def _coverage_leg(
        self,
        query: str,
        fused: list[Fused],
        citations: dict[str, _Citation],
        allowed: dict[str, ScopedItem],
        fetched: dict[str, TextDocument],
    ) -> list[tuple[str, float]]:
        """Every candidate the legs found, ranked by how much of the query its heading path and text state
        (:mod:`search.coverage`); the text index holds the text of those the text leg did not return."""
        started = time.perf_counter()
        self._complete_citations(fused, citations, allowed, fetched)
        texts = {d.id: candidate_text(citations[d.id].heading_path, citations[d.id].text) for d in fused}
        ranked = coverage_ranking(query, [d.id for d in fused], texts, pair_weight=self.config.coverage_pair_weight)
        elapsed = time.perf_counter() - started
        SEARCH_DURATION.labels(search_type="coverage").observe(elapsed)
        log.debug("search_coverage_ranked", candidates=len(ranked), duration_ms=round(elapsed * 1000, 2))
        return ranked

    def _text_leg(self, query: str, filters: SearchFilters | None, depth: int) -> tuple[list[TextHit], float]:
        events.fulltext_query(query, index=self.text.name, filters=filters, limit=depth)
        # On an embedded index the highlights come later, for the hits returned (_highlight): a snippet costs
        # ~27 µs there, 50 of them 1.4 ms; a server makes them within this request.
        highlight = not self.text.deferred_highlights
        return _timed("text", lambda: self.text.search(query, filters=filters, limit=depth, highlight=highlight))

    def _vector_leg(self, query: str, filters: SearchFilters | None, depth: int) -> tuple[list[VectorHit], float]:
        def run() -> list[VectorHit]:
            vector = self.embedder.embed_query(query)
            events.vector_query(
                query, dimensions=len(vector), filters=filters, limit=depth, collection=self.config.collection
            )
            try:
                return self.vectors.search(self.config.collection, vector.tolist(), filters=filters, limit=depth)
            except NotFound:  # nothing ingested yet: the collection does not exist
                return []

        return _timed("vector", run)

    def _graph_leg(self, query: str, scope: Scope, depth: int) -> GraphLegResult:
        result, elapsed = _timed(
            "graph",
            lambda: self.graph_leg.search(query, items=scope.items.keys(), restricted=scope.restricted, limit=depth),
        )
        events.graph_traverse(
            [(c.uid, c.name) for c in result.named],
            [(c.uid, c.name, c.via) for c in result.neighbours],
            len(result.hits),
            elapsed,
        )
        return result

    # -- citations, re-ranking, hits -------------------------------------------------------------

    def _read_ahead(self, ids: list[str], fetched: dict[str, TextDocument]) -> None:
        """Fetch these hits' stored chunks into ``fetched`` and read them for the coverage leg, on this
        leg's thread while the other legs run (the coverage leg then finds them read)."""
        try:
            stored_docs = self.text.get_many(ids)
        except NotFound:  # no text index yet: nothing to read ahead
            return
        for stored in stored_docs:
            fetched[stored.id] = stored
        read_ahead(candidate_text(stored.data.get("heading_path") or (), stored.text) for stored in stored_docs)

    def _complete_citations(
        self,
        docs: Sequence[Fused],
        citations: dict[str, _Citation],
        allowed: dict[str, ScopedItem],
        fetched: Mapping[str, TextDocument] | None = None,
    ) -> None:
        """Fill text and citation fields that the leg which found a chunk did not carry (the text
        index stores every chunk's text and citation data; ``fetched`` holds some already)."""
        missing = []
        stored_docs: list[TextDocument] = []
        for doc in docs:
            citation = citations[doc.id]
            citation.title = citation.title or allowed.get(citation.item_uid, _NO_ITEM).title
            if citation.text:
                continue
            if fetched is not None and doc.id in fetched:
                stored_docs.append(fetched[doc.id])
            else:
                missing.append(doc.id)
        # one request for them all: one get per chunk took ~0.15-0.7 ms each, ~100 per coverage leg; with no
        # text index yet (NotFound) the citations stay as the legs gave them
        with contextlib.suppress(NotFound):
            stored_docs += self.text.get_many(missing) if missing else []
        for stored in stored_docs:
            citation = citations[stored.id]
            citation.text = stored.text
            citation.title = citation.title or stored.title
            if not citation.heading_path:
                citation.heading_path = tuple(stored.data.get("heading_path") or ())
            if citation.page_start is None:
                citation.page_start, citation.page_end = stored.data.get("page_start"), stored.data.get("page_end")

    def _highlight(self, query: str, docs: Sequence[Fused], citations: dict[str, _Citation], found: set[str]) -> None:
        """The BM25 snippets of the returned hits that the text leg found, in one request."""
        ids = [doc.id for doc in docs if doc.id in found]
        if not ids or not self.text.deferred_highlights:  # a server gave them with the leg's hits
            return
        try:
            snippets = self.text.highlights(query, ids)
        except NotFound:  # the index went away since the leg ran: the hits go out without snippets
            return
        for doc_id, fragments in snippets.items():
            citations[doc_id].highlights = tuple(fragments)

    def _rerank(
        self, query: str, docs: list[Fused], citations: dict[str, _Citation]
    ) -> tuple[list[Fused], dict[str, float]]:
        assert self.reranker is not None
        model = self.reranker.name
        started = time.perf_counter()
        scores = self.reranker.score(query, [citations[d.id].text for d in docs])
        elapsed = time.perf_counter() - started
        RERANK_DURATION.labels(model=model).observe(elapsed)
        by_id = {d.id: float(s) for d, s in zip(docs, scores, strict=True)}
        # Stable: equal re-ranker scores keep the fused order.
        ordered = sorted(docs, key=lambda d: -by_id[d.id])
        events.rerank(model, len(docs), len(ordered), elapsed)
        return ordered, by_id

    @staticmethod
    def _hit(
        doc: Fused, citation: _Citation, rerank_scores: dict[str, float], model: str | None, rank: int
    ) -> SearchHit:
        scores, ranks = dict(doc.scores), dict(doc.ranks)
        score = round(doc.score, 6)
        if model is not None:
            scores["rerank"] = rerank_scores[doc.id]
            ranks["rerank"] = rank
            score = rerank_scores[doc.id]
        return SearchHit(
            chunk_id=doc.id,
            item_uid=citation.item_uid,
            title=citation.title,
            text=citation.text,
            page_start=citation.page_start,
            page_end=citation.page_end,
            heading_path=list(citation.heading_path),
            score=score,
            scores=scores,
            ranks=ranks,
            highlights=list(citation.highlights),
            fused_score=round(doc.score, 6),
            reranker=model,
            concepts=list(citation.concepts),
        )


_NO_ITEM = ScopedItem("", "", {})
