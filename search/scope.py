"""Which items a search may return: visible ones (ready and enabled) that pass the request's filters.

Every leg is restricted to the same set, read from the graph (the system of record) once per search:
an item appears in search only once all its chunks are in every store, and a superseded or disabled
one disappears at once, whatever the derived indexes still hold. The filters are checked on the same
keyword fields that ingestion writes on every index record (``jobs.stages.index_records``: library,
library_type, item, classification, collection), with the same rule (:meth:`SearchFilters.matches`),
so the graph leg honours a filter exactly as the text and vector indexes do. Chunks of the library
carry no ``campaign`` or ``status`` field, so those filters match no library chunk on any leg.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.knowledge import ItemStatus
from schemas.search import SearchFilters
from stores.graph.base import GraphStore

_ITEMS = (
    "MATCH (l:Library)-[:HAS_ITEM]->(i:Item) "
    "RETURN i.uid AS uid, i.title AS title, i.status AS status, i.enabled AS enabled, l.uid AS library, "
    "l.type AS library_type, i.classification AS classification, i.collection_uid AS collection"
)


@dataclass(frozen=True, slots=True)
class ScopedItem:
    uid: str
    title: str
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class Scope:
    """The items a search may return, and whether that is fewer than every item in the graph."""

    items: dict[str, ScopedItem]
    restricted: bool


class ItemScope:
    """Reads the visible items and their filter fields from the graph."""

    def __init__(self, graph: GraphStore) -> None:
        self.graph = graph

    def visible(self) -> dict[str, ScopedItem]:
        """Every visible item by uid."""
        return self._read()[0]

    def _read(self) -> tuple[dict[str, ScopedItem], int]:
        out: dict[str, ScopedItem] = {}
        rows = self.graph.run(_ITEMS)
        for row in rows:
            if row.get("status") != ItemStatus.READY.value or row.get("enabled") is not True:
                continue
            fields = {"item": str(row["uid"])}
            for name in ("library", "library_type", "classification", "collection"):
                if row.get(name) is not None:
                    fields[name] = str(row[name])
            out[str(row["uid"])] = ScopedItem(str(row["uid"]), str(row.get("title") or ""), fields)
        return out, len(rows)

    def allowed(self, filters: SearchFilters | None) -> Scope:
        """The visible items that pass ``filters`` (all visible items when there are none)."""
        items, total = self._read()
        if filters is not None and filters.conditions():
            items = {uid: item for uid, item in items.items() if filters.matches(dict(item.fields))}
        return Scope(items, restricted=len(items) < total)
