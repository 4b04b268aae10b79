"""Browsing the library in the graph: libraries with their counts, an item's chunks and concepts, and the
concept graph around a concept or an item (what the ``list_libraries``, ``get_item`` and ``get_concepts``
operations read).

Each answer is a fixed number of queries, whatever the library holds: the counts of every library in
one query, an item's page of chunks and its concepts in four, a traversal in one query per step. The
queries are in the Cypher subset Neo4j and the embedded FalkorDB both run (see
:mod:`stores.catalog` for the graph's shape).
"""

from __future__ import annotations

from typing import Any

from schemas.errors import NotFound
from schemas.knowledge import ChunkStatus, Item, ItemStatus, normalize_name
from schemas.library import (
    ChunkPreview,
    ConceptGraph,
    ConceptLink,
    ConceptNode,
    ItemConcept,
    ItemDetail,
    LibrarySummary,
)
from schemas.text import STORED
from stores.blob.base import BlobStore
from stores.catalog import Catalog, from_props
from stores.graph.base import GraphStore

PREVIEW_CHARS = 240

_LIBRARY_COUNTS = (
    "MATCH (l:Library) "
    "OPTIONAL MATCH (l)-[:HAS_ITEM]->(i:Item) WHERE i.status <> $superseded "
    "WITH l, count(DISTINCT i) AS items "
    "OPTIONAL MATCH (l)-[:HAS_ITEM]->(:Item)-[:HAS_CHUNK]->(c:Chunk {status: $active}) "
    "WITH l, items, count(DISTINCT c) AS chunks "
    "OPTIONAL MATCH (l)-[:HAS_ITEM]->(:Item)-[:HAS_CHUNK]->(:Chunk {status: $active})-[:MENTIONS]->(k:Concept) "
    "RETURN l, items, chunks, count(DISTINCT k) AS concepts ORDER BY l.name"
)
_ITEM_CHUNKS = (
    "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk {status: $active}) "
    "RETURN c ORDER BY c.sequence SKIP $offset LIMIT $limit"
)
_ITEM_COUNTS = (
    "MATCH (i:Item {uid: $uid}) "
    "OPTIONAL MATCH (i)-[:HAS_CHUNK]->(c:Chunk {status: $active}) "
    "WITH i, count(DISTINCT c) AS chunks "
    "OPTIONAL MATCH (i)-[:HAS_CHUNK]->(:Chunk {status: $active})-[:MENTIONS]->(k:Concept) "
    "RETURN chunks, count(DISTINCT k) AS concepts"
)
_ITEM_CONCEPTS = (
    "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk {status: $active})-[:MENTIONS]->(k:Concept) "
    "RETURN k.uid AS uid, k.name AS name, k.normalized_name AS normalized_name, k.kind AS kind, "
    "count(DISTINCT c) AS mentions ORDER BY mentions DESC, name LIMIT $limit"
)
_LIBRARY_ITEMS = (
    "MATCH (:Library {uid: $uid})-[:HAS_ITEM]->(i:Item) WHERE $all OR i.status <> $superseded "
    "WITH i ORDER BY i.title, i.uid WITH collect(i) AS items "
    "RETURN size(items) AS total, items[$offset..$end] AS page"
)
_CONCEPT_START = (
    "MATCH (k:Concept) WHERE k.uid = $start OR k.normalized_name = $normalized OR k.name = $start "
    "RETURN k.uid AS uid, k.name AS name, k.normalized_name AS normalized_name, k.kind AS kind "
    "ORDER BY k.uid LIMIT 1"
)
_RELATED = (
    "MATCH (a:Concept)-[r:RELATED_TO]-(b:Concept) "
    "WHERE a.uid IN $frontier AND NOT b.uid IN $seen AND r.weight >= $min_weight "
    "RETURN a.uid AS source, b.uid AS uid, b.name AS name, b.normalized_name AS normalized_name, b.kind AS kind, "
    "r.weight AS weight ORDER BY weight DESC, uid LIMIT $limit"
)


class LibraryBrowser:
    """Read-only views of the library for browsing (the catalog writes it)."""

    def __init__(self, graph: GraphStore, blobs: BlobStore) -> None:
        self.graph = graph
        self.blobs = blobs
        self.catalog = Catalog(graph)

    def libraries(self) -> list[LibrarySummary]:
        """Every library with its item, chunk and concept counts, by name (one query)."""
        rows = self.graph.run(
            _LIBRARY_COUNTS, {"superseded": ItemStatus.SUPERSEDED.value, "active": ChunkStatus.ACTIVE.value}
        )
        counts = ("item_count", "items"), ("chunk_count", "chunks"), ("concept_count", "concepts")
        return [from_props(LibrarySummary, r["l"] | {field: int(r[n]) for field, n in counts}) for r in rows]

    def items(
        self, library_uid: str, *, limit: int = 50, offset: int = 0, include_superseded: bool = False
    ) -> tuple[int, list[Item]]:
        """A page of a library's items by title, and how many it holds (two queries, whatever it holds).

        Raises:
            NotFound: no such library.
        """
        self.catalog.get_library(library_uid)
        params = {
            "uid": library_uid,
            "all": include_superseded,
            "superseded": ItemStatus.SUPERSEDED.value,
            "offset": offset,
            "end": offset + limit,
        }
        rows = self.graph.run(_LIBRARY_ITEMS, params)
        if not rows:
            return 0, []
        return int(rows[0]["total"]), [from_props(Item, props) for props in rows[0]["page"]]

    def item(self, uid: str, *, chunk_limit: int = 10, chunk_offset: int = 0, concept_limit: int = 25) -> ItemDetail:
        """An item with a page of chunk previews (reading order) and the concepts its chunks mention.

        Raises:
            NotFound: no such item.
        """
        props = self.catalog.item_props(uid)
        active = ChunkStatus.ACTIVE.value
        counts = self.graph.run(_ITEM_COUNTS, {"uid": uid, "active": active})
        chunk_rows = self.graph.run(
            _ITEM_CHUNKS, {"uid": uid, "active": active, "offset": chunk_offset, "limit": chunk_limit}
        ) if chunk_limit else []  # fmt: skip
        concept_rows = (
            self.graph.run(_ITEM_CONCEPTS, {"uid": uid, "active": active, "limit": concept_limit})
            if concept_limit
            else []
        )
        known = set(ItemDetail.model_fields) - {"chunk_count", "concept_count", "chunks", "concepts"}
        data: dict[str, Any] = {k: v for k, v in from_props(ItemDetail, props).model_dump().items() if k in known}
        data |= {
            "chunk_count": int(counts[0]["chunks"]) if counts else 0,
            "concept_count": int(counts[0]["concepts"]) if counts else 0,
            "chunks": [self._preview(r["c"]) for r in chunk_rows],
            "concepts": [ItemConcept(**{k: r[k] for k in ("uid", "name", "kind", "mentions")}) for r in concept_rows],
        }
        return ItemDetail.model_validate(data, context=STORED)

    def _preview(self, props: dict[str, Any]) -> ChunkPreview:
        try:
            text = self.blobs.get(props["text_key"]).decode("utf-8", errors="replace")
        except NotFound:
            text = ""  # the blob is missing: the chunk is listed, with no preview
        text = " ".join(text.split())
        cut = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rsplit(" ", 1)[0] + " …"
        return ChunkPreview(
            uid=props["uid"],
            sequence=props.get("sequence", 0),
            heading_path=list(props.get("heading_path") or []),
            page_start=props.get("page_start"),
            page_end=props.get("page_end"),
            token_count=props.get("token_count", 0),
            preview=cut,
        )

    def concepts(self, *, library_uid: str | None = None, limit: int = 100) -> ConceptGraph:
        """The most mentioned concepts (optionally of one library), without a start."""
        rows = self.catalog.list_concepts(library_uid=library_uid, limit=limit)
        return ConceptGraph(concepts=[ConceptNode(**_node(r)) for r in rows])

    def traverse(
        self,
        *,
        concept: str | None = None,
        item_uid: str | None = None,
        depth: int = 1,
        min_weight: int = 1,
        limit: int = 100,
    ) -> ConceptGraph:
        """The concepts within ``depth`` steps of a start, breadth first, strongest links first.

        From a concept (its uid or name) the steps follow RELATED_TO; from an item, the first step is the
        concepts its active chunks MENTION, then RELATED_TO. One query per step.

        Raises:
            NotFound: no such concept or item.
        """
        nodes: dict[str, ConceptNode] = {}
        links: list[ConceptLink] = []
        relationships: list[Any] = ["RELATED_TO"]
        if item_uid is not None:
            self.catalog.item_props(item_uid)  # an unknown item is not_found
            start, start_kind = item_uid, "item"
            relationships = ["MENTIONS", "RELATED_TO"] if depth > 1 else ["MENTIONS"]
            rows = self.graph.run(_ITEM_CONCEPTS, {"uid": item_uid, "active": ChunkStatus.ACTIVE.value, "limit": limit})
            for r in rows:
                nodes[r["uid"]] = ConceptNode(**_node(r), depth=1)
                links.append(
                    ConceptLink(source=item_uid, target=r["uid"], relationship="MENTIONS", weight=r["mentions"])
                )
            frontier, first_step = list(nodes), 2
        else:
            assert concept is not None, "give a concept or an item"
            found = self.graph.run(_CONCEPT_START, {"start": concept, "normalized": normalize_name(concept)})
            if not found:
                raise NotFound("graph", f"no concept {concept!r}")
            start, start_kind = found[0]["uid"], "concept"
            nodes[start] = ConceptNode(**_node(found[0]), depth=0)
            frontier, first_step = [start], 1
        for step in range(first_step, depth + 1):
            if not frontier or len(nodes) >= limit:
                break
            rows = self.graph.run(
                _RELATED,
                {"frontier": frontier, "seen": list(nodes), "min_weight": min_weight, "limit": limit - len(nodes)},
            )
            frontier = []
            for r in rows:
                links.append(
                    ConceptLink(source=r["source"], target=r["uid"], relationship="RELATED_TO", weight=r["weight"])
                )
                if r["uid"] not in nodes and len(nodes) < limit:
                    nodes[r["uid"]] = ConceptNode(**_node(r), depth=step)
                    frontier.append(r["uid"])
        return ConceptGraph(
            start=start,
            start_kind=start_kind,  # type: ignore[arg-type]
            depth=depth,
            relationships=relationships,
            concepts=list(nodes.values()),
            links=[link for link in links if link.target in nodes],
        )


def _node(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in ("uid", "name", "normalized_name", "kind", "mentions") if row.get(k) is not None}
