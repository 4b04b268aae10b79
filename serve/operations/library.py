"""Browsing the library: the libraries with their counts, their collections, a library's items with their facts
and pins, an item with its chunk previews and concept links, the concept graph around a concept or an item, and
a rulebook entry's typed facts.

Any valid key reads the library (a table's agent looks things up); with ``LOREKEEPER_MCP_REQUIRE_KEY=false`` an
MCP caller without a key does too. The pins a library's items show are those of the campaigns the key holds
(an admin: every campaign's; a keyless caller: none): another table's books are not a key's business. Each
answer is a fixed number of graph queries (:class:`stores.browse.LibraryBrowser`), whatever the library holds.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from schemas.knowledge import Collection
from schemas.library import (
    CampaignPin,
    ConceptGraph,
    ConceptsQuery,
    ItemDetail,
    ItemListing,
    ItemQuery,
    ItemsQuery,
    LibraryItems,
    LibrarySummary,
)
from schemas.rulefacts import StoredSourceFact
from schemas.story import Campaign
from serve.operations.base import Access, Call, Rest, Role, operation
from stores.browse import LibraryBrowser
from story.library_pins import pin_for

log = structlog.get_logger(__name__)

ANY = Access(Role.ANY)


class EntryQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entry: str = Field(min_length=1, max_length=200, description="An entry's name or key ('Goblin').")
    item_uid: str | None = Field(default=None, description="Only this item's facts (else every ready item's).")


def _browser(call: Call[Any]) -> LibraryBrowser:
    return LibraryBrowser(call.ctx.catalog.graph, call.ctx.story.blobs)


@operation(family="library", access=ANY, rest=Rest("GET", "/library/libraries"), output=list[LibrarySummary])
async def list_libraries(call: Call[Any]) -> list[LibrarySummary]:
    """The libraries: their ids, names, types and descriptions, with how many items, chunks and concepts each holds."""
    return await call.run(_browser(call).libraries)  # type: ignore[no-any-return]


@operation(
    family="library",
    access=ANY,
    rest=Rest("GET", "/library/libraries/{library_uid}/collections"),
    ids=("library_uid",),
    output=list[Collection],
)
async def list_collections(call: Call[Any]) -> list[Collection]:
    """The collections of a library."""
    await call.run(call.ctx.catalog.get_library, call.id("library_uid"))  # an unknown library is not_found
    return await call.run(call.ctx.catalog.list_collections, call.id("library_uid"))  # type: ignore[no-any-return]


@operation(
    family="library",
    access=ANY,
    rest=Rest("GET", "/library/libraries/{library_uid}/items"),
    ids=("library_uid",),
    body=ItemsQuery,
    output=LibraryItems,
)
async def list_items(call: Call[ItemsQuery]) -> LibraryItems:
    """A library's items (paged, by title), each with its rulebook facts (how many, and a page of them) and the
    caller's campaigns that draw on it (its own pin, else its library's), with the pins of the whole library."""
    b, library_uid = call.body, call.id("library_uid")
    total, items = await call.run(
        _browser(call).items, library_uid, limit=b.limit, offset=b.offset, include_superseded=b.include_superseded
    )
    facts = await call.run(
        call.ctx.source_facts.pages, [i.uid for i in items], limit=b.fact_limit, offset=b.fact_offset
    )
    # pins of the caller's campaigns only: another table's books are its own business
    campaigns: list[Campaign] = await call.run(call.ctx.story.list_campaigns)
    mine = [c for c in campaigns if call.caller.plays(c.id)]

    def pins(item_uid: str | None) -> list[CampaignPin]:
        found = []
        for c in mine:
            pin = pin_for(c.library_pins, item=item_uid, library=library_uid)
            if pin is not None:
                via: Literal["library", "item"] = "item" if pin.item_id is not None else "library"
                found.append(CampaignPin(campaign_id=c.id, campaign_name=c.name, via=via, use=pin.use))
        return found

    listed = []
    for item in items:
        count, page = facts.get(item.uid, (0, []))
        listed.append(ItemListing(**item.model_dump(), fact_count=count, facts=page, pins=pins(item.uid)))
    return LibraryItems(library_uid=library_uid, item_count=total, items=listed, pins=pins(None))


@operation(
    family="library",
    access=ANY,
    rest=Rest("GET", "/library/items/{item_uid}"),
    ids=("item_uid",),
    body=ItemQuery,
    output=ItemDetail,
)
async def get_item(call: Call[ItemQuery]) -> ItemDetail:
    """One ingested item (a book or file): title, type, size, classification, status, with previews of its chunks
    (reading order, paged) and the concepts they mention (most mentioned first)."""
    b = call.body
    browse = _browser(call)
    return await call.run(  # type: ignore[no-any-return]
        browse.item,
        call.id("item_uid"),
        chunk_limit=b.chunk_limit,
        chunk_offset=b.chunk_offset,
        concept_limit=b.concept_limit,
    )


@operation(family="library", access=ANY, rest=Rest("GET", "/library/concepts"), body=ConceptsQuery, output=ConceptGraph)
async def get_concepts(call: Call[ConceptsQuery]) -> ConceptGraph:
    """Concepts extracted from the knowledge: the most mentioned (optionally of one library), or the concept graph
    around a start concept (uid or name) or item, to a depth of up to 3 steps, strongest links first."""
    b = call.body
    browse = _browser(call)
    if b.concept is None and b.item_uid is None:
        return await call.run(browse.concepts, library_uid=b.library_uid, limit=b.limit)  # type: ignore[no-any-return]
    started = time.perf_counter()
    found: ConceptGraph = await call.run(
        browse.traverse, concept=b.concept, item_uid=b.item_uid, depth=b.depth, min_weight=b.min_weight, limit=b.limit
    )
    log.debug(
        "mcp_graph_traverse",
        start_nodes=[found.start],
        start_kind=found.start_kind,
        relationships=found.relationships,
        depth=found.depth,
        nodes_visited=len(found.concepts),
        links=len(found.links),
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    return found


@operation(
    family="library",
    access=ANY,
    rest=Rest("GET", "/library/facts"),
    body=EntryQuery,
    output=list[StoredSourceFact],
)
async def get_entry_facts(call: Call[EntryQuery]) -> list[StoredSourceFact]:
    """A rulebook entry's typed facts ("Goblin": armor_class 15 …), each with its item, page and chunk id;
    from one item when given, else from every ready item."""
    b, facts = call.body, call.ctx.source_facts
    if b.item_uid is not None:
        await call.run(call.ctx.catalog.get_item, b.item_uid)  # an unknown item is not_found, not []
        return await call.run(facts.for_item, b.item_uid, entry=b.entry)  # type: ignore[no-any-return]
    return await call.run(facts.find, b.entry)  # type: ignore[no-any-return]
