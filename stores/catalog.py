"""The library catalog in the graph: libraries, collections, items, chunks, concepts, images, ingest jobs.

Ingestion writes it, search and the API read it. The queries are plain parameterised Cypher in the
subset both Neo4j and the embedded FalkorDB run unchanged. Properties are primitives or lists of
primitives (what both engines store); nested values are stored as JSON strings under ``<name>_json``.

Graph shape::

    (Library)-[:HAS_COLLECTION]->(Collection)-[:CONTAINS]->(Item)
    (Library)-[:HAS_ITEM]->(Item)-[:HAS_CHUNK]->(Chunk)-[:MENTIONS]->(Concept)-[:RELATED_TO {weight}]->(Concept)
    (Item)-[:HAS_IMAGE]->(ImageAsset)      (Item)-[:SUPERSEDES]->(Item)      (IngestJob)-[:INGESTS]->(Item)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from schemas.common import JobStatus, utc_now
from schemas.errors import NotFound
from schemas.knowledge import (
    Chunk,
    ChunkStatus,
    Collection,
    Concept,
    ImageAsset,
    IngestJob,
    Item,
    ItemStatus,
    Library,
)
from schemas.text import STORED
from stores.graph.base import GraphStore

M = TypeVar("M", bound=BaseModel)

_JSON_SUFFIX = "_json"


def to_props(model: BaseModel, *, key: str = "uid") -> dict[str, Any]:
    """A model as graph properties: nested values become JSON strings, ``None`` is dropped."""
    props: dict[str, Any] = {}
    for name, value in model.model_dump(mode="json").items():
        if value is None:
            continue
        if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict | list) for v in value)):
            props[name + _JSON_SUFFIX] = json.dumps(value, sort_keys=True)
        else:
            props[name] = value
    if key != "uid":
        props["uid"] = props[key]
    return props


def from_props(cls: type[M], props: dict[str, Any], *, key: str = "uid") -> M:
    """Rebuild a model from graph properties written by :func:`to_props` (extra properties are ignored).

    Free text is read as stored (:data:`schemas.text.STORED`): a bound added after a record was written
    does not make it unreadable.
    """
    data: dict[str, Any] = {}
    for name, value in props.items():
        if name.startswith("_"):
            continue
        if name.endswith(_JSON_SUFFIX):
            data[name.removesuffix(_JSON_SUFFIX)] = json.loads(value)
        else:
            data[name] = value
    if key != "uid":
        data.pop("uid", None)
    known = cls.model_fields
    return cls.model_validate({k: v for k, v in data.items() if k in known}, context=STORED)


def _now() -> str:
    return utc_now().isoformat()


class Catalog:
    """Reads and writes the knowledge side of the graph through the :class:`GraphStore` protocol."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    # -- libraries and collections ------------------------------------------------------------

    def save_library(self, library: Library) -> Library:
        self.graph.run(
            "MERGE (l:Library {uid: $uid}) SET l += $props", {"uid": library.uid, "props": to_props(library)}
        )
        return library

    def get_library(self, uid: str) -> Library:
        rows = self.graph.run("MATCH (l:Library {uid: $uid}) RETURN l", {"uid": uid})
        if not rows:
            raise NotFound("graph", f"no library {uid!r}")
        return from_props(Library, rows[0]["l"])

    def find_library(self, name: str) -> Library | None:
        rows = self.graph.run("MATCH (l:Library {name: $name}) RETURN l ORDER BY l.created_at LIMIT 1", {"name": name})
        return from_props(Library, rows[0]["l"]) if rows else None

    def list_libraries(self) -> list[Library]:
        rows = self.graph.run("MATCH (l:Library) RETURN l ORDER BY l.name")
        return [from_props(Library, r["l"]) for r in rows]

    def save_collection(self, collection: Collection) -> Collection:
        self.graph.run(
            "MATCH (l:Library {uid: $library}) "
            "MERGE (c:Collection {uid: $uid}) SET c += $props "
            "MERGE (l)-[:HAS_COLLECTION]->(c)",
            {"library": collection.library_uid, "uid": collection.uid, "props": to_props(collection)},
        )
        return collection

    def find_collection(self, library_uid: str, name: str) -> Collection | None:
        rows = self.graph.run(
            "MATCH (c:Collection {library_uid: $library, name: $name}) RETURN c LIMIT 1",
            {"library": library_uid, "name": name},
        )
        return from_props(Collection, rows[0]["c"]) if rows else None

    def list_collections(self, library_uid: str) -> list[Collection]:
        rows = self.graph.run(
            "MATCH (c:Collection {library_uid: $library}) RETURN c ORDER BY c.name", {"library": library_uid}
        )
        return [from_props(Collection, r["c"]) for r in rows]

    # -- items --------------------------------------------------------------------------------

    def save_item(self, item: Item, **extra: Any) -> Item:
        """Create or update an item and link it to its library and collection."""
        props = to_props(item) | {k: v for k, v in extra.items() if v is not None}
        self.graph.run(
            "MATCH (l:Library {uid: $library}) MERGE (i:Item {uid: $uid}) SET i += $props MERGE (l)-[:HAS_ITEM]->(i)",
            {"library": item.library_uid, "uid": item.uid, "props": props},
        )
        if item.collection_uid:
            self.graph.run(
                "MATCH (c:Collection {uid: $collection}), (i:Item {uid: $uid}) MERGE (c)-[:CONTAINS]->(i)",
                {"collection": item.collection_uid, "uid": item.uid},
            )
        return item

    def get_item(self, uid: str) -> Item:
        return from_props(Item, self.item_props(uid))

    def item_props(self, uid: str) -> dict[str, Any]:
        """Every stored property of an item, including ingestion details not in the model."""
        rows = self.graph.run("MATCH (i:Item {uid: $uid}) RETURN i", {"uid": uid})
        if not rows:
            raise NotFound("graph", f"no item {uid!r}")
        return rows[0]["i"]

    def items_for_source(self, library_uid: str, source_ref: str) -> list[Item]:
        """Every version of the item ingested from ``source_ref`` into a library, newest first."""
        rows = self.graph.run(
            "MATCH (i:Item {library_uid: $library, source_ref: $ref}) RETURN i ORDER BY i.version DESC",
            {"library": library_uid, "ref": source_ref},
        )
        return [from_props(Item, r["i"]) for r in rows]

    def set_item_status(self, uid: str, status: ItemStatus, **extra: Any) -> None:
        props = {"status": status.value, "updated_at": _now(), **{k: v for k, v in extra.items() if v is not None}}
        rows = self.graph.run(
            "MATCH (i:Item {uid: $uid}) SET i += $props RETURN i.uid AS uid", {"uid": uid, "props": props}
        )
        if not rows:
            raise NotFound("graph", f"no item {uid!r}")

    def supersede(self, old_uid: str, new_uid: str) -> int:
        """Mark ``old_uid``, its chunks and its source facts superseded by ``new_uid`` (nothing is deleted).

        Returns:
            How many chunks were marked.
        """
        count = self.count_chunks(old_uid)
        # One transaction, write-only: the embedded engine applies a transaction's writes together.
        with self.graph.transaction() as tx:
            tx.run(
                "MATCH (o:Item {uid: $old}), (n:Item {uid: $new}) "
                "SET o.status = $status, o.superseded_by_uid = $new, o.updated_at = $now "
                "MERGE (n)-[:SUPERSEDES]->(o)",
                {"old": old_uid, "new": new_uid, "status": ItemStatus.SUPERSEDED.value, "now": _now()},
            )
            tx.run(
                "MATCH (:Item {uid: $old})-[:HAS_CHUNK]->(c:Chunk) SET c.status = $status",
                {"old": old_uid, "status": ChunkStatus.SUPERSEDED.value},
            )
            # its rulebook source facts follow the item (stores.source_facts reads them by status)
            tx.run(
                "MATCH (:Item {uid: $old})-[:STATES]->(f:SourceFact) SET f.status = $status",
                {"old": old_uid, "status": ItemStatus.SUPERSEDED.value},
            )
        return count

    def visible_items(self, uids: Iterable[str]) -> set[str]:
        """The subset of ``uids`` that search may return: ready and enabled."""
        wanted = sorted(set(uids))
        if not wanted:
            return set()
        rows = self.graph.run(
            "MATCH (i:Item) WHERE i.uid IN $uids AND i.status = $ready AND i.enabled = true RETURN i.uid AS uid",
            {"uids": wanted, "ready": ItemStatus.READY.value},
        )
        return {r["uid"] for r in rows}

    def items_by_uid(self, uids: Iterable[str]) -> dict[str, Item]:
        rows = self.graph.run("MATCH (i:Item) WHERE i.uid IN $uids RETURN i", {"uids": sorted(set(uids))})
        return {r["i"]["uid"]: from_props(Item, r["i"]) for r in rows}

    # -- chunks, images and concepts ----------------------------------------------------------

    def save_chunks(self, chunks: Sequence[Chunk]) -> None:
        """Create or update chunks (one UNWIND per call) and link them to their items."""
        if not chunks:
            return
        self.graph.run(
            "UNWIND $rows AS row "
            "MATCH (i:Item {uid: row.item_uid}) "
            "MERGE (c:Chunk {uid: row.uid}) SET c += row "
            "MERGE (i)-[:HAS_CHUNK]->(c)",
            {"rows": [to_props(c) for c in chunks]},
        )

    def get_chunks(self, uids: Sequence[str]) -> dict[str, Chunk]:
        rows = self.graph.run("MATCH (c:Chunk) WHERE c.uid IN $uids RETURN c", {"uids": list(uids)})
        return {r["c"]["uid"]: from_props(Chunk, r["c"]) for r in rows}

    def count_chunks(self, item_uid: str) -> int:
        rows = self.graph.run(
            "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk) RETURN count(c) AS n", {"uid": item_uid}
        )
        return int(rows[0]["n"]) if rows else 0

    def active_chunks(
        self, *, batch_size: int = 1000, on_unreadable: Callable[[str, Exception], None] | None = None
    ) -> Iterable[tuple[Item, list[Chunk]]]:
        """Every ready item with its active chunks in sequence order (for ``reindex``).

        Args:
            on_unreadable: called with an item's uid and the error when the item or one of its chunks
                cannot be read from the graph; the item is then skipped. Unset: the error is raised.
        """
        for item_row in self.graph.run("MATCH (i:Item {status: $ready}) RETURN i ORDER BY i.uid", {"ready": "ready"}):
            try:
                item = from_props(Item, item_row["i"])
                rows = self.graph.run(
                    "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(c:Chunk {status: $active}) RETURN c ORDER BY c.sequence",
                    {"uid": item.uid, "active": ChunkStatus.ACTIVE.value},
                )
                chunks = [from_props(Chunk, r["c"]) for r in rows]
            except (ValueError, KeyError, TypeError) as exc:  # a ValidationError, a JSON property that is not JSON
                if on_unreadable is None:
                    raise
                on_unreadable(str(item_row["i"].get("uid", "?")), exc)
                continue
            for start in range(0, max(len(chunks), 1), batch_size):
                yield item, chunks[start : start + batch_size]

    def save_images(self, images: Sequence[ImageAsset]) -> None:
        if not images:
            return
        self.graph.run(
            "UNWIND $rows AS row MATCH (i:Item {uid: row.item_uid}) "
            "MERGE (a:ImageAsset {uid: row.uid}) SET a += row MERGE (i)-[:HAS_IMAGE]->(a)",
            {"rows": [to_props(a) for a in images]},
        )

    def save_mentions(self, concepts: Sequence[Concept], mentions: Sequence[tuple[str, str]]) -> None:
        """Create concepts and ``(chunk uid, concept uid)`` MENTIONS edges (idempotent)."""
        if concepts:
            self.graph.run(
                "UNWIND $rows AS row MERGE (k:Concept {uid: row.uid}) "
                "ON CREATE SET k += row "
                "ON MATCH SET k.aliases = row.aliases",
                {"rows": [to_props(c) for c in concepts]},
            )
        if mentions:
            self.graph.run(
                "UNWIND $rows AS row MATCH (c:Chunk {uid: row.chunk}), (k:Concept {uid: row.concept}) "
                "MERGE (c)-[:MENTIONS]->(k)",
                {"rows": [{"chunk": c, "concept": k} for c, k in mentions]},
            )

    def refresh_related(self, item_uid: str) -> int:
        """Recompute RELATED_TO weights of the concepts an item mentions.

        The weight of a pair is the number of active chunks that mention both, so it is derived from
        MENTIONS edges and stays right however often an item is re-ingested.

        Returns:
            How many concept pairs were written.
        """
        rows = self.graph.run(
            "MATCH (:Item {uid: $uid})-[:HAS_CHUNK]->(:Chunk)-[:MENTIONS]->(a:Concept) "
            "WITH DISTINCT a "
            "MATCH (a)<-[:MENTIONS]-(c:Chunk {status: $active})-[:MENTIONS]->(b:Concept) "
            "WHERE a.uid < b.uid "
            "WITH a, b, count(DISTINCT c) AS weight "
            "MERGE (a)-[r:RELATED_TO]->(b) SET r.weight = weight "
            "RETURN count(r) AS n",
            {"uid": item_uid, "active": ChunkStatus.ACTIVE.value},
        )
        return int(rows[0]["n"]) if rows else 0

    def list_concepts(self, *, library_uid: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Concepts with how many active chunks mention them, most mentioned first."""
        where = "WHERE c.status = $active" + (" AND c.item_uid IN $items" if library_uid else "")
        params: dict[str, Any] = {"active": ChunkStatus.ACTIVE.value, "limit": limit}
        if library_uid:
            params["items"] = [
                r["uid"]
                for r in self.graph.run("MATCH (i:Item {library_uid: $lib}) RETURN i.uid AS uid", {"lib": library_uid})
            ]
        rows = self.graph.run(
            f"MATCH (c:Chunk)-[:MENTIONS]->(k:Concept) {where} "
            "RETURN k.uid AS uid, k.name AS name, k.normalized_name AS normalized_name, k.kind AS kind, "
            "count(c) AS mentions ORDER BY mentions DESC, name LIMIT $limit",
            params,
        )
        return rows

    def concepts_by_name(self, normalized_names: Sequence[str]) -> list[Concept]:
        rows = self.graph.run(
            "MATCH (k:Concept) WHERE k.normalized_name IN $names RETURN k", {"names": list(normalized_names)}
        )
        return [from_props(Concept, r["k"]) for r in rows]

    # -- ingest jobs --------------------------------------------------------------------------

    def save_job(self, job: IngestJob) -> IngestJob:
        props = to_props(job, key="id")
        self.graph.run("MERGE (j:IngestJob {uid: $uid}) SET j = $props", {"uid": job.id, "props": props})
        if job.item_uid:
            self.graph.run(
                "MATCH (j:IngestJob {uid: $uid}), (i:Item {uid: $item}) MERGE (j)-[:INGESTS]->(i)",
                {"uid": job.id, "item": job.item_uid},
            )
        return job

    def get_job(self, job_id: str) -> IngestJob:
        rows = self.graph.run("MATCH (j:IngestJob {uid: $uid}) RETURN j", {"uid": job_id})
        if not rows:
            raise NotFound("graph", f"no ingest job {job_id!r}")
        return from_props(IngestJob, rows[0]["j"], key="id")

    def list_jobs(
        self,
        *,
        status: JobStatus | None = None,
        source: str | None = None,
        source_ref: str | None = None,
        limit: int = 100,
    ) -> list[IngestJob]:
        """Jobs, newest first, optionally of one status, one calling system and one of its file ids."""
        filters = {"status": status.value if status else None, "source": source, "source_ref": source_ref}
        clauses = [f"j.{name} = ${name}" for name, value in filters.items() if value is not None]
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        rows = self.graph.run(
            f"MATCH (j:IngestJob) {where}RETURN j ORDER BY j.created_at DESC LIMIT $limit", {**filters, "limit": limit}
        )
        return [from_props(IngestJob, r["j"], key="id") for r in rows]
