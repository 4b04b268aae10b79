"""The graph leg of hybrid search: concepts named in the query → the chunks that mention them.

Ingestion writes ``(Chunk)-[:MENTIONS]->(Concept)-[:RELATED_TO {weight}]->(Concept)`` (see
:mod:`stores.catalog`); a concept's ``normalized_name`` is the singular, case-folded name. The leg:

1. cuts the query into word n-grams (1 to 4 words, not starting or ending with a stop word), each
   also with its last word made singular, and looks them up by ``normalized_name`` (an index) and,
   by a crude stem of every word, in a cached vocabulary of names and aliases (``creating an
   advantage`` finds ``Create an Advantage``); a match inside a longer match is dropped (``fate
   point`` wins over ``point``). The same n-grams (up to ``entry_max_words``) are looked up among the
   chunks' own headings: a query that names an entry (a spell, a creature, a rule) finds its chunks even
   when the entry is no concept, and a concept named inside a longer entry name is not looked up alone;
2. adds the strongest ``RELATED_TO`` neighbours of the matched concepts, weighted lower;
3. reads up to ``chunks_per_concept`` mentions of each (concepts that more than ``max_df_ratio`` of all
   chunks mention are skipped: they point nowhere, and reading them is what costs), and scores each
   active chunk of an allowed item that mentions any of them:
   ``sum(weight(concept) * idf(concept) * (1 + entry_bonus if the chunk's own heading is the concept's
   name, heading_bonus if it contains it, half of it if a section above it does))``, plus
   ``idf(heading) * (1 + entry_bonus)`` for the chunks of an entry named by its heading (ties in book
   order), with ``idf = ln(1 + chunks / chunks mentioning the concept)`` (both counts from the cached
   vocabulary), so a rare concept counts more than a common one and the section *about* a
   concept beats a passing mention.

The queries are plain Cypher in the subset that Neo4j and the embedded FalkorDB both run.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from schemas.knowledge import ChunkStatus
from search.events import graph_query
from search.query_names import (
    MAX_NGRAM,
    NamedSpan,
    heading_keys,
    outermost,
    query_names,
    stem_key,
    without_section_number,
)
from stores.graph.base import GraphStore


@lru_cache(maxsize=65536)
def _heading_key(heading: str) -> str:
    """The stem key of a chunk's own heading, without its section number. Cached: the chunks a query's
    concepts reach share a few headings, and keying every one anew (up to 100 per concept, ~60k a
    200-query run at 100,000 chunks) was ~30 % of the leg's time in this process."""
    return stem_key(without_section_number(heading))


def _sequence(value: object) -> float:
    return float(value) if isinstance(value, int | float) else math.inf


@dataclass(frozen=True, slots=True)
class EntryChunk:
    """A chunk under its own heading (the last of its heading path), as the vocabulary keeps it."""

    uid: str
    item_uid: str
    heading: str
    sequence: float


class ConceptVocabulary:
    """Every concept's name, aliases and mention count, read from the graph and reused for ``ttl_s``.

    It finds a concept by the stem of its name or of an alias (``creating an advantage`` finds
    ``Create an Advantage``), which an exact lookup of ``normalized_name`` cannot, and it knows how many
    chunks mention each concept (the idf of the graph leg) without counting them on every query: on
    100,000 chunks counting the mentions of six concepts cost ~10 ms, re-reading the whole vocabulary
    ~0.1 s. The first read happens in the caller's thread; later ones in a background thread while
    queries keep using the previous copy.
    """

    def __init__(self, graph: GraphStore, ttl_s: float, *, entries: bool = True) -> None:
        self.graph = graph
        self.ttl_s = ttl_s
        self._want_entries = entries  # read every active chunk's own heading (the entry lookup)
        self._loaded_at: float | None = None
        self._by_key: dict[str, list[tuple[str, str]]] = {}
        self._df: dict[str, int] = {}
        self._entries: dict[str, list[EntryChunk]] = {}
        self._chunks = 0
        self._lock = threading.Lock()
        self._refreshing = False

    def _read(self) -> None:
        by_key: dict[str, list[tuple[str, str]]] = {}
        for row in self.graph.run(_VOCABULARY):
            entry = (str(row["uid"]), str(row["name"]))
            for name in {str(row["normalized_name"]), *(str(a) for a in row.get("aliases") or ())}:
                key = stem_key(name)
                if key and entry not in by_key.setdefault(key, []):
                    by_key[key].append(entry)
        df = {str(r["uid"]): int(r["df"]) for r in self.graph.run(_MENTION_COUNTS)}
        entries: dict[str, list[EntryChunk]] = {}
        own_headings = self.graph.run(_OWN_HEADINGS, {"active": ChunkStatus.ACTIVE.value}) if self._want_entries else []
        for row in own_headings:
            if not row.get("heading"):
                continue
            chunk = EntryChunk(str(row["uid"]), str(row["item"]), str(row["heading"]), _sequence(row.get("sequence")))
            for key in heading_keys(chunk.heading):
                entries.setdefault(key, []).append(chunk)
        rows = self.graph.run(_CHUNK_COUNT)
        with self._lock:
            self._by_key, self._df, self._entries = by_key, df, entries
            self._chunks = int(rows[0]["n"]) if rows else 0
            self._loaded_at = time.monotonic()
            self._refreshing = False

    def _background_read(self) -> None:
        try:
            self._read()
        except Exception:  # noqa: BLE001 - a failed refresh keeps the previous copy; the next query retries
            with self._lock:
                self._refreshing = False

    def fresh(self) -> None:
        """Read the vocabulary now if never read; start a background refresh if it is stale."""
        if self._loaded_at is None:
            self._read()
            return
        with self._lock:
            stale = time.monotonic() - self._loaded_at > self.ttl_s and not self._refreshing
            if stale:
                self._refreshing = True
        if stale:
            threading.Thread(target=self._background_read, name="concept-vocabulary", daemon=True).start()

    def lookup(self, key: str) -> list[tuple[str, str]]:
        """``(uid, name)`` of the concepts whose name or an alias has this stem key."""
        self.fresh()
        return self._by_key.get(key, [])

    def entries(self, name: str) -> list[EntryChunk]:
        """The active chunks whose own heading is ``name`` (a name as :func:`query_names` gives it)."""
        self.fresh()
        return self._entries.get(name, [])

    def mentions(self, uid: str) -> int | None:
        """How many chunks mention the concept (None for a concept newer than the vocabulary)."""
        self.fresh()
        return self._df.get(uid)

    @property
    def chunks(self) -> int:
        """How many chunks the graph holds (the N of idf)."""
        self.fresh()
        return self._chunks


class GraphLegConfig(BaseModel):
    """How far the graph leg reaches and how it scores."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    neighbours: int = Field(default=3, ge=0, le=100, description="RELATED_TO neighbours added per query.")
    neighbour_weight: float = Field(
        default=0.3, ge=0, le=1, description="Weight of a neighbour's chunks relative to a named concept's."
    )
    chunks_per_concept: int = Field(
        default=100,
        gt=0,
        le=10_000,
        description="Mentions read per concept. Reading every mention of a concept that thousands of chunks "
        "mention cost ~5 µs each on the embedded graph; beyond this many, a concept's idf is low anyway.",
    )
    heading_bonus: float = Field(
        default=1.0, ge=0, description="Extra weight when the concept is named in the chunk's heading path."
    )
    entry_bonus: float = Field(
        default=2.0,
        ge=0,
        description="Extra weight when the chunk's own heading *is* the concept's name (an entry named by the "
        "query: 'Does Major Image need a material component?' finds the Major Image entry before the "
        "'Material (M)' rule that only contains a named word); replaces the heading bonus for that chunk.",
    )
    max_ngram: int = Field(default=MAX_NGRAM, ge=1, le=8, description="Longest concept name looked for, in words.")
    entry_max_words: int = Field(
        default=8,
        ge=0,
        le=16,
        description="Longest heading looked for as an entry named by the query, in words (0: no lookup). Entry "
        "names run longer than concept names ('Censer of Controlling Air Elementals').",
    )
    max_df_ratio: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="A concept mentioned by more than this share of all chunks ('spell', 'creature') is too "
        "common to point anywhere: the leg skips it (and never reaches it as a neighbour).",
    )
    common_min_chunks: int = Field(
        default=50, ge=1, description="A concept mentioned by fewer chunks than this is never too common."
    )
    vocabulary_ttl_s: float = Field(
        default=60.0,
        ge=0,
        description="How long the in-memory concept vocabulary (stems and aliases) is reused; exact names "
        "are always looked up in the graph, so a new concept is found by its name at once.",
    )


@dataclass(slots=True)
class MatchedConcept:
    uid: str
    name: str
    weight: float
    via: str | None = None  # the named concept a neighbour was reached from


@dataclass(slots=True)
class GraphHit:
    """A chunk the graph leg found, its score and the concepts that led to it."""

    chunk_id: str
    item_uid: str
    score: float
    concepts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class GraphLegResult:
    hits: list[GraphHit]
    named: list[MatchedConcept]
    neighbours: list[MatchedConcept]


# How a chunk's heading path names a concept: 3 its own heading is the concept's name (the concept's
# entry), 2 its own heading contains the name, 1 a heading above it does, 0 a passing mention.
_ENTRY = 3

_CONCEPTS_BY_NAME = (
    "MATCH (k:Concept) WHERE k.normalized_name IN $names "
    "RETURN k.uid AS uid, k.name AS name, k.normalized_name AS normalized_name"
)
_NEIGHBOURS = (
    "MATCH (k:Concept)-[r:RELATED_TO]-(n:Concept) WHERE k.uid IN $uids AND NOT n.uid IN $uids "
    "RETURN k.uid AS source, n.uid AS uid, n.name AS name, r.weight AS weight "
    "ORDER BY weight DESC, uid LIMIT $limit"
)
_VOCABULARY = (
    "MATCH (k:Concept) RETURN k.uid AS uid, k.name AS name, k.normalized_name AS normalized_name, k.aliases AS aliases"
)
_MENTION_COUNTS = "MATCH (k:Concept)<-[:MENTIONS]-(:Chunk) RETURN k.uid AS uid, count(*) AS df"
_CHUNK_COUNT = "MATCH (c:Chunk) RETURN count(c) AS n"
_OWN_HEADINGS = (
    "MATCH (c:Chunk) WHERE c.status = $active "
    "RETURN c.uid AS uid, c.item_uid AS item, last(c.heading_path) AS heading, c.sequence AS sequence"
)
_CHUNKS = (
    "UNWIND $concepts AS kid "
    "CALL { WITH kid "
    "MATCH (k:Concept {uid: kid})<-[:MENTIONS]-(c:Chunk) "
    # WITH first: a WHERE on the MATCH lets the planner start from the Chunk.item_uid index and scan
    # every chunk of the allowed items (10x slower on 1k chunks); from the concept it reads only mentions.
    "WITH k, c WHERE c.status = $active AND ($items IS NULL OR c.item_uid IN $items) "
    "WITH k, c LIMIT $per "
    # 2: the chunk's own section is about the concept; 1: a section above it is; 0: a passing mention
    "RETURN collect([c.uid, c.item_uid, CASE WHEN toLower(last(c.heading_path)) CONTAINS k.normalized_name "
    "THEN 2 WHEN any(h IN c.heading_path WHERE toLower(h) CONTAINS k.normalized_name) THEN 1 ELSE 0 END, "
    "last(c.heading_path), c.sequence]) "
    "AS found } "
    "RETURN kid AS concept, found"
)


class GraphLeg:
    """Finds chunks through the concepts a query names (see the module docstring)."""

    def __init__(self, graph: GraphStore, config: GraphLegConfig | None = None) -> None:
        self.graph = graph
        self.config = config or GraphLegConfig()
        self.vocabulary = ConceptVocabulary(
            graph, self.config.vocabulary_ttl_s, entries=self.config.entry_max_words > 0
        )

    def _bonus(self, tier: int) -> float:
        if tier == _ENTRY:
            return self.config.entry_bonus
        return self.config.heading_bonus * tier / 2

    def is_common(self, uid: str) -> bool:
        """Whether too many chunks mention the concept for it to point anywhere."""
        df = self.vocabulary.mentions(uid)
        return df is not None and df > self._common_limit()

    def _common_limit(self) -> float:
        """How many chunks a concept or heading may reach before it points nowhere in particular."""
        return max(self.config.max_df_ratio * self.vocabulary.chunks, self.config.common_min_chunks)

    def match_entries(self, query: str) -> list[tuple[NamedSpan, list[EntryChunk]]]:
        """The headings ``query`` names exactly (an entry: a spell, a creature, a rule), longest first,
        none inside a longer one, with the active chunks under each; a heading more chunks carry than a
        too-common concept has mentions points nowhere and is skipped."""
        if self.config.entry_max_words == 0:
            return []
        limit = self._common_limit()
        found: dict[NamedSpan, list[EntryChunk]] = {}
        for span in query_names(query, max_ngram=self.config.entry_max_words):
            chunks = self.vocabulary.entries(span.name)
            if chunks and len(chunks) <= limit:
                found[span] = chunks
        return [(span, found[span]) for span in outermost(list(found))]

    def match_concepts(self, query: str, *, covered: Sequence[NamedSpan] = ()) -> list[MatchedConcept]:
        """The concepts named in ``query``, longest match first; none inside a longer match, nor strictly
        inside a ``covered`` span (an entry's name: *Air Elemental* inside *Censer of Controlling Air
        Elementals*)."""
        spans = [
            s
            for s in query_names(query, max_ngram=self.config.max_ngram)
            if not any(c.start <= s.start and s.end <= c.end and c.end - c.start > s.end - s.start for c in covered)
        ]
        if not spans:
            return []
        rows = graph_query(self.graph, _CONCEPTS_BY_NAME, {"names": sorted({s.name for s in spans})}, name="concepts")
        by_name: dict[str, list[tuple[str, str]]] = {}
        for row in rows:
            by_name.setdefault(str(row["normalized_name"]), []).append((str(row["uid"]), str(row["name"])))
        for span in spans:
            for entry in self.vocabulary.lookup(stem_key(span.name)):
                if entry not in by_name.setdefault(span.name, []):
                    by_name[span.name].append(entry)
        kept = outermost([s for s in spans if by_name.get(s.name)])
        matched: dict[str, MatchedConcept] = {}
        for span in kept:
            for uid, name in by_name[span.name]:
                matched.setdefault(uid, MatchedConcept(uid, name, 1.0))
        return list(matched.values())

    def neighbours(self, named: Sequence[MatchedConcept]) -> list[MatchedConcept]:
        """The strongest RELATED_TO neighbours of ``named`` that are not too common, weighted relative
        to the strongest edge among them."""
        if not named or self.config.neighbours == 0 or self.config.neighbour_weight == 0:
            return []
        params = {"uids": [c.uid for c in named], "limit": self.config.neighbours * 8}
        rows = graph_query(self.graph, _NEIGHBOURS, params, name="neighbours")
        rows = [r for r in rows if not self.is_common(str(r["uid"]))]
        strongest = max((float(r["weight"] or 0) for r in rows), default=0.0) or 1.0
        out: dict[str, MatchedConcept] = {}
        for row in rows:
            uid = str(row["uid"])
            if uid in out:
                continue
            weight = self.config.neighbour_weight * float(row["weight"] or 0) / strongest
            out[uid] = MatchedConcept(uid, str(row["name"]), weight, via=str(row["source"]))
            if len(out) == self.config.neighbours:
                break
        return list(out.values())

    def search(self, query: str, *, items: Collection[str], restricted: bool = True, limit: int = 50) -> GraphLegResult:
        """The best ``limit`` chunks of ``items`` for the concepts ``query`` names, best first.

        Args:
            items: the items whose chunks may be returned.
            restricted: False when ``items`` holds every item of the graph (no filter, nothing hidden):
                the query then skips the per-row item check.
        """
        entries = self.match_entries(query)
        named = [c for c in self.match_concepts(query, covered=[s for s, _ in entries]) if not self.is_common(c.uid)]
        if not (named or entries) or not items:
            return GraphLegResult([], named, [])
        related = self.neighbours(named)
        concepts = {c.uid: c for c in [*named, *related]}
        rows = (
            graph_query(
                self.graph,
                _CHUNKS,
                {
                    "concepts": list(concepts),
                    "active": ChunkStatus.ACTIVE.value,
                    "items": sorted(items) if restricted else None,
                    "per": self.config.chunks_per_concept,
                },
                name="chunks",
            )
            if concepts
            else []
        )
        total = self.vocabulary.chunks
        hits: dict[str, GraphHit] = {}
        order: dict[str, int] = {}

        def add(chunk_id: str, item_uid: str, gain: float, name: str, position: int) -> None:
            hit = hits.get(chunk_id)
            if hit is None:
                hit = hits[chunk_id] = GraphHit(chunk_id, item_uid, 0.0)
            hit.score += gain
            hit.concepts.append(name)
            order[chunk_id] = min(order.get(chunk_id, position), position)

        # Entries the query names by their heading: scored like a concept's own entry, with the idf of the
        # heading, so an entry that is no concept (a one-word name the extractor left out, a name longer
        # than a concept's) is still found by its name.
        allowed = items if isinstance(items, AbstractSet | Mapping) else set(items)
        for _, chunks in entries:
            idf = math.log(1.0 + max(total, len(chunks)) / len(chunks))
            ranked_chunks = sorted(chunks, key=lambda c: (c.sequence, c.uid))
            for position, chunk in enumerate(ranked_chunks):
                if restricted and chunk.item_uid not in allowed:
                    continue
                add(chunk.uid, chunk.item_uid, idf * (1.0 + self.config.entry_bonus), chunk.heading, position)
        # Named concepts first, so each hit lists what the query named before the neighbours it reached.
        rows.sort(key=lambda r: (-concepts[str(r["concept"])].weight, str(r["concept"])))
        for row in rows:
            concept = concepts[str(row["concept"])]
            found = row["found"] or []
            df = max(self.vocabulary.mentions(concept.uid) or len(found), 1)
            idf = math.log(1.0 + max(total, df) / df)
            key = stem_key(concept.name)
            tiers = [
                _ENTRY if heading and _heading_key(str(heading)) == key else int(in_heading or 0)
                for _, _, in_heading, heading, _ in found
            ]
            # The concept's own entry first, then sections about it, then passing mentions; within a tier in
            # the book's order, so an entry's opening chunk (its statistics, its definition) leads.
            ranked_found = sorted(range(len(found)), key=lambda i: (-tiers[i], _sequence(found[i][4]), i))
            for position, i in enumerate(ranked_found):
                chunk_id, item_uid = found[i][0], found[i][1]
                add(
                    str(chunk_id),
                    str(item_uid),
                    concept.weight * idf * (1.0 + self._bonus(tiers[i])),
                    concept.name,
                    position,
                )
        # Ties (chunks that mention the same concepts the same way) go to the earlier section.
        ranked = sorted(hits.values(), key=lambda h: (-h.score, order[h.chunk_id], h.chunk_id))[:limit]
        return GraphLegResult(ranked, named, related)
