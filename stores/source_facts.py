"""Rulebook source facts in the graph: what an ingested item states, typed, with the chunk it stands in.

Ingestion saves an item's facts (:meth:`SourceFactStore.save`) before the item turns ready; every read
here sees only facts of items that finished (ready, or superseded by a newer edition), so facts become
visible with the item and never before. The gate, the API, the MCP tool and the CLI all read through
this one class, so ``serve`` needs nothing of ``jobs`` to show an entry's facts.

Graph shape::

    (Item)-[:STATES]->(SourceFact)-[:SUPPORTED_BY]->(Chunk)

A fact's properties are flat (``subject_key``, ``predicate``, ``value_json`` …) so that a lookup by
subject and predicate is one filtered match, on Neo4j and the embedded FalkorDB alike. Its ``status``
follows the item's: :meth:`stores.catalog.Catalog.supersede` marks the old item's facts superseded in
the same transaction that supersedes the item.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from schemas.errors import InvalidRequest, NotFound
from schemas.knowledge import ItemStatus
from schemas.rulefacts import FactSubject, SourceFact, StoredSourceFact, entry_key
from stores.graph.base import GraphStore

__all__ = ["ACTIVE", "SUPERSEDED", "SourceFactStore"]

ACTIVE = "active"
SUPERSEDED = "superseded"

# An item whose ingest finished: its facts may be read (a superseded one only when pinned).
_FINISHED = [ItemStatus.READY.value, ItemStatus.SUPERSEDED.value]

_RETURN = "RETURN f ORDER BY f.item_uid, f.seq"


def _to_props(fact: StoredSourceFact, seq: int) -> dict[str, Any]:
    props: dict[str, Any] = {
        "uid": fact.uid,
        "item_uid": fact.item_uid,
        "library_uid": fact.library_uid,
        "seq": seq,
        "subject_key": fact.subject.key,
        "subject_name": fact.subject.name,
        "subject_kind": fact.subject.kind,
        "entity_kind": fact.subject.entity_kind.value,
        "heading_path": list(fact.subject.heading_path),
        "predicate": fact.predicate,
        "value_type": fact.value.type,
        "value_json": json.dumps(fact.value.model_dump(mode="json"), sort_keys=True),
        "value_text": fact.value.canonical(),
        "raw": fact.raw,
        "label": fact.label,
        "confidence": fact.confidence,
        "family": fact.family,
        "offset": fact.offset,
        "chunk_id": fact.chunk_id,
        "page": fact.page,
        "status": fact.status,
        "canon_level": fact.canon_level,
        "authority": fact.authority,
    }
    return {k: v for k, v in props.items() if v is not None}


def _from_props(props: dict[str, Any]) -> StoredSourceFact:
    subject = FactSubject(
        name=props["subject_name"],
        key=props["subject_key"],
        kind=props["subject_kind"],
        entity_kind=props["entity_kind"],
        heading_path=list(props.get("heading_path") or []),
    )
    return StoredSourceFact.model_validate(
        {
            "subject": subject,
            "predicate": props["predicate"],
            "value": json.loads(props["value_json"]),
            "raw": props["raw"],
            "label": props.get("label"),
            "confidence": props["confidence"],
            "family": props["family"],
            "offset": props.get("offset"),
            "chunk_id": props.get("chunk_id"),
            "page": props.get("page"),
            "uid": props["uid"],
            "item_uid": props["item_uid"],
            "library_uid": props["library_uid"],
            "status": props.get("status", ACTIVE),
        }
    )


def _keys(names: Iterable[str]) -> list[str]:
    """Entry names or keys as subject keys (a key is its own key)."""
    return sorted({k for k in (entry_key(n) for n in names) if k})


def _entry(entry: str) -> str:
    """One entry name as its key; a name with nothing to match by is the caller's mistake."""
    key = entry_key(entry)
    if not key:
        raise InvalidRequest("graph", f"entry {entry!r} has no letters or digits to match an entry by")
    return key


class SourceFactStore:
    """Reads and writes the source facts of library items through the :class:`GraphStore` protocol."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    def save(self, item_uid: str, library_uid: str, facts: Sequence[SourceFact]) -> int:
        """Replace an item's facts with ``facts`` (idempotent: a re-run writes the same ids).

        The old facts are removed and the new ones written in one transaction, so a worker killed
        half-way leaves either the old set or the new one, never both. A fact's ``chunk_id`` becomes a
        SUPPORTED_BY edge when that chunk exists.

        Returns:
            How many facts were written.

        Raises:
            NotFound: no item ``item_uid`` (facts are never written without the item that states them).
        """
        if not self.graph.run("MATCH (i:Item {uid: $item}) RETURN i.uid AS uid", {"item": item_uid}):
            raise NotFound("graph", f"no item {item_uid!r} to state source facts")
        rows = [_to_props(f, seq) for seq, f in enumerate(self.stored(item_uid, library_uid, facts))]
        with self.graph.transaction() as tx:
            tx.run("MATCH (:Item {uid: $item})-[:STATES]->(f:SourceFact) DETACH DELETE f", {"item": item_uid})
            if rows:
                # each fact finds its chunk by the Chunk uid index as it is created: linear in the facts
                tx.run(
                    "MATCH (i:Item {uid: $item}) UNWIND $rows AS row "
                    "CREATE (f:SourceFact) SET f = row CREATE (i)-[:STATES]->(f) "
                    "WITH f, row WHERE row.chunk_id IS NOT NULL "
                    "MATCH (c:Chunk {uid: row.chunk_id}) CREATE (f)-[:SUPPORTED_BY]->(c)",
                    {"item": item_uid, "rows": rows},
                )
        return len(rows)

    def link_chunks(self, item_uid: str) -> int:
        """Link the item's facts to their chunks (SUPPORTED_BY), for chunks written after the facts.

        Ingestion reads facts before the chunks reach the graph and calls this once they all have;
        it is idempotent.

        Returns:
            How many facts are linked.
        """
        rows = self.graph.run(
            "MATCH (:Item {uid: $item})-[:STATES]->(f:SourceFact) WHERE f.chunk_id IS NOT NULL "
            "MATCH (c:Chunk {uid: f.chunk_id}) MERGE (f)-[:SUPPORTED_BY]->(c) RETURN count(f) AS n",
            {"item": item_uid},
        )
        return int(rows[0]["n"]) if rows else 0

    @staticmethod
    def stored(item_uid: str, library_uid: str, facts: Sequence[SourceFact]) -> list[StoredSourceFact]:
        """``facts`` as an item's stored facts, with ids unique within the item.

        Two entries of one book may share a name (a "Variant" box in two chapters) and so a subject,
        predicate and offset; the later ones take an occurrence suffix, in order, so ids stay stable.
        """
        out: list[StoredSourceFact] = []
        seen: dict[str, int] = {}
        for index, fact in enumerate(facts):
            stored = StoredSourceFact.of(fact, item_uid=item_uid, library_uid=library_uid, index=index)
            n = seen.get(stored.uid, 0)
            seen[stored.uid] = n + 1
            if n:
                position = f"{fact.offset if fact.offset is not None else '#' + str(index)}~{n}"
                uid = StoredSourceFact.uid_for(item_uid, fact.subject.key, fact.predicate, position)
                stored = stored.model_copy(update={"uid": uid})
            out.append(stored)
        return out

    def for_item(self, item_uid: str, *, entry: str | None = None) -> list[StoredSourceFact]:
        """An item's facts in extraction order, once its ingest finished (ready or superseded).

        ``entry`` (a name or key) narrows them to one entry. An item still being ingested states
        nothing yet: its facts become visible with it.
        """
        where = " AND f.subject_key = $key" if entry is not None else ""
        rows = self.graph.run(
            f"MATCH (i:Item {{uid: $item}})-[:STATES]->(f:SourceFact) WHERE i.status IN $finished{where} {_RETURN}",
            {"item": item_uid, "finished": _FINISHED, "key": _entry(entry) if entry is not None else None},
        )
        return [_from_props(r["f"]) for r in rows]

    def lookup(
        self,
        subject_keys: Iterable[str],
        *,
        predicates: Iterable[str] | None = None,
        item_uids: Iterable[str] | None = None,
        library_uids: Iterable[str] | None = None,
    ) -> list[StoredSourceFact]:
        """The facts about ``subject_keys`` (names or keys) that a reader may use, in one graph read.

        * neither ``item_uids`` nor ``library_uids``: the active facts of every visible (ready and
          enabled) item;
        * ``item_uids``: those items' facts whatever their status, once their ingest finished (a
          campaign pins an edition and keeps seeing its facts after a newer one lands);
        * ``library_uids``: the active facts of those libraries' visible items.

        Both narrowings together give the union (a campaign may pin items and libraries).
        """
        keys = _keys(subject_keys)
        if not keys:
            return []
        items = sorted(set(item_uids)) if item_uids is not None else None
        libraries = sorted(set(library_uids)) if library_uids is not None else None
        params: dict[str, Any] = {
            "keys": keys,
            "ready": ItemStatus.READY.value,
            "finished": _FINISHED,
            "active": ACTIVE,
            "items": items or [],
            "libraries": libraries or [],
        }
        visible = "(i.status = $ready AND f.status = $active)"
        if items is None and libraries is None:
            scope = visible
        else:
            parts = []
            if items is not None:
                parts.append("(i.uid IN $items AND i.status IN $finished)")
            if libraries is not None:
                parts.append(f"(i.library_uid IN $libraries AND {visible})")
            scope = "(" + " OR ".join(parts) + ")"
        where = f"f.subject_key IN $keys AND i.enabled = true AND {scope}"
        if predicates is not None:
            params["predicates"] = sorted(set(predicates))
            where += " AND f.predicate IN $predicates"
        rows = self.graph.run(f"MATCH (i:Item)-[:STATES]->(f:SourceFact) WHERE {where} {_RETURN}", params)
        return [_from_props(r["f"]) for r in rows]

    def find(self, entry: str, *, limit: int = 500) -> list[StoredSourceFact]:
        """An entry's active facts across the library's visible items (for the CLI and the MCP tool)."""
        if limit < 1:
            raise InvalidRequest("graph", f"limit must be at least 1, got {limit}")
        rows = self.graph.run(
            "MATCH (i:Item)-[:STATES]->(f:SourceFact) "
            "WHERE f.subject_key = $key AND f.status = $active AND i.status = $ready AND i.enabled = true "
            f"{_RETURN} LIMIT $limit",
            {"key": _entry(entry), "active": ACTIVE, "ready": ItemStatus.READY.value, "limit": limit},
        )
        return [_from_props(r["f"]) for r in rows]

    def pages(
        self, item_uids: Sequence[str], *, limit: int = 10, offset: int = 0
    ) -> dict[str, tuple[int, list[StoredSourceFact]]]:
        """For each item whose ingest finished, how many facts it states and a page of them in extraction order
        (one query for every item; an item still being ingested, or stating nothing, is left out).
        """
        if not item_uids:
            return {}
        rows = self.graph.run(
            "MATCH (i:Item)-[:STATES]->(f:SourceFact) WHERE i.uid IN $items AND i.status IN $finished "
            "WITH i, f ORDER BY f.seq WITH i, collect(f) AS facts "
            "RETURN i.uid AS uid, size(facts) AS n, facts[$offset..$end] AS page",
            {"items": sorted(set(item_uids)), "finished": _FINISHED, "offset": offset, "end": offset + limit},
        )
        return {r["uid"]: (int(r["n"]), [_from_props(f) for f in r["page"]]) for r in rows}

    def count(self, item_uid: str) -> int:
        """How many facts an item states."""
        rows = self.graph.run(
            "MATCH (:Item {uid: $item})-[:STATES]->(f:SourceFact) RETURN count(f) AS n", {"item": item_uid}
        )
        return int(rows[0]["n"]) if rows else 0
