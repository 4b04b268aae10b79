"""Hybrid search over the ingested knowledge (vector + full text + graph, fused), scoped by the caller's key."""

from __future__ import annotations

import time

from fastapi import APIRouter
from pydantic import BaseModel

from schemas.errors import NotFound
from schemas.search import SearchHit, SearchRequest
from serve.deps import API, PrincipalDep, ServicesDep


class SearchResponse(BaseModel):
    query: str
    hits: list[SearchHit]
    took_ms: float


def router() -> APIRouter:
    r = APIRouter(prefix=API, tags=["search"])

    @r.post("/search", response_model=SearchResponse)
    async def search(s: ServicesDep, caller: PrincipalDep, body: SearchRequest) -> SearchResponse:
        for campaign_id in body.filters.campaign or []:
            caller.require_campaign(campaign_id)
        if s.search is None:
            raise NotFound("search", "search is not configured on this server")
        started = time.perf_counter()
        hits = await s.run(s.search.search, body.query, filters=body.filters, limit=body.limit, rerank=body.rerank)
        return SearchResponse(query=body.query, hits=hits, took_ms=round((time.perf_counter() - started) * 1000, 2))

    return r
