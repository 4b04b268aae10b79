"""The shared knowledge: hybrid search over the ingested books, what is ingested, a book's rule facts, and health.

Any valid key reads the knowledge (a table's agent searches the rules); a search filtered to
campaigns needs keys of those campaigns.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import NotSupported
from schemas.knowledge import Collection, Item, Library, LibraryType
from schemas.rulefacts import StoredSourceFact
from schemas.search import SearchFilters, SearchHit, SearchRequest
from schemas.serving import Health, SearchAnswer
from serve.auth import Forbidden
from serve.operations.base import Access, Call, On, Rest, Role, operation

ANY = Access(Role.ANY)


class CategorySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000)
    library_type: LibraryType
    limit: int = Field(default=8, ge=1, le=100)
    rerank: bool | None = None


class ConceptsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    library_uid: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class EntryQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entry: str = Field(min_length=1, max_length=200, description="An entry's name or key ('Goblin').")
    item_uid: str | None = Field(default=None, description="Only this item's facts (else every ready item's).")


async def _search(call: Call[Any], request: SearchRequest) -> SearchAnswer:
    for campaign_id in request.filters.campaign or []:
        if not call.caller.plays(campaign_id):
            raise Forbidden(f"this key may not use campaign {campaign_id!r}")
    if call.ctx.search is None:
        raise NotSupported("search", "search is not configured on this server")
    started = time.perf_counter()
    hits: list[SearchHit] = await call.run(
        call.ctx.search.search, request.query, filters=request.filters, limit=request.limit, rerank=request.rerank
    )
    took = round((time.perf_counter() - started) * 1000, 2)
    return SearchAnswer(query=request.query, hits=hits, took_ms=took)


@operation(family="knowledge", access=ANY, rest=Rest("POST", "/search"), body=SearchRequest, output=SearchAnswer)
async def search_knowledge(call: Call[SearchRequest]) -> SearchAnswer:
    """Search the ingested rulebooks and lore; each hit cites its book, pages, heading path and chunk id."""
    return await _search(call, call.body)


@operation(
    family="knowledge", access=ANY, rest=Rest("POST", "/search/by-category"), body=CategorySearch, output=SearchAnswer
)
async def search_by_category(call: Call[CategorySearch]) -> SearchAnswer:
    """Search only the libraries of one type (rulebook, lore, setting, adventure, reference …)."""
    b = call.body
    filters = SearchFilters(library_type=[b.library_type.value])
    return await _search(call, SearchRequest(query=b.query, filters=filters, limit=b.limit, rerank=b.rerank))


@operation(family="library", access=ANY, rest=Rest("GET", "/library/libraries"), output=list[Library])
async def list_libraries(call: Call[Any]) -> list[Library]:
    """The libraries: their ids, names and types."""
    return await call.run(call.ctx.catalog.list_libraries)  # type: ignore[no-any-return]


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


@operation(family="library", access=ANY, rest=Rest("GET", "/library/items/{item_uid}"), ids=("item_uid",), output=Item)
async def get_item(call: Call[Any]) -> Item:
    """One ingested item (a book or file): title, type, size, classification, status."""
    return await call.run(call.ctx.catalog.get_item, call.id("item_uid"))  # type: ignore[no-any-return]


@operation(
    family="library", access=ANY, rest=Rest("GET", "/library/concepts"), body=ConceptsQuery, output=list[dict[str, Any]]
)
async def get_concepts(call: Call[ConceptsQuery]) -> list[dict[str, Any]]:
    """Concepts extracted from the knowledge (most mentioned first), optionally of one library."""
    b = call.body
    return await call.run(call.ctx.catalog.list_concepts, library_uid=b.library_uid, limit=b.limit)  # type: ignore[no-any-return]


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


@operation(family="ops", access=Access(Role.ANY, On.NOTHING), rest=Rest("GET", "/health"), output=Health)
async def get_health(call: Call[Any]) -> Health:
    """Whether the server and its stores answer (the unauthenticated probe is ``GET /health``)."""
    checks = await call.ctx.health()
    healthy = all(v == "ok" for v in checks.values())
    return Health(status="ok" if healthy else "degraded", checks=checks, search=call.ctx.search is not None)
