"""The shared knowledge: hybrid search over the ingested books, and health (browsing the library:
:mod:`serve.operations.library`).

Any valid key reads the knowledge (a table's agent searches the rules); a search filtered to
campaigns needs keys of those campaigns.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import NotSupported
from schemas.health import Health
from schemas.knowledge import LibraryType
from schemas.search import SearchFilters, SearchHit, SearchRequest
from schemas.serving import SearchAnswer
from serve.auth import Forbidden
from serve.operations.base import Access, Call, On, Rest, Role, operation

ANY = Access(Role.ANY)


class CategorySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000)
    library_type: LibraryType
    limit: int = Field(default=8, ge=1, le=100)
    rerank: bool | None = None


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


@operation(family="ops", access=Access(Role.ANY, On.NOTHING), rest=Rest("GET", "/health"), output=Health)
async def get_health(call: Call[Any]) -> Health:
    """Whether the server and every part it stands on answer: the graph, the blob store (and the source bucket),
    the full-text and vector indexes, the embedding model and the narrator, each with its status and latency
    (the unauthenticated probes are ``GET /health`` and ``GET /mcp/health``)."""
    return await call.ctx.health()
