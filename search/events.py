"""The named log events of a search, one function each, with the fields the ingest contract names.

The contract calls them ``mcp_search_…`` and ``mcp_graph_…`` (its searches came through MCP); here
they are logged for every search, whichever door (REST, MCP, the narrator) asked for it, and a
search that came through an MCP tool carries the tool call's ``mcp_call_id``. All at debug level;
durations in milliseconds. The table of every event is docs/ingest-events.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog

from schemas.search import SearchFilters
from search.metrics import SEARCH_RESULTS
from stores.graph.base import GraphStore, Record

log = structlog.get_logger("search.events")

_PARAM_PREVIEW = 10


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _filters(filters: SearchFilters | None) -> dict[str, Any]:
    """The library filters of a search, as logged (only those set)."""
    if filters is None:
        return {}
    return filters.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def _scores(scores: Sequence[float]) -> dict[str, float | None]:
    return {
        "top_score": round(max(scores), 6) if scores else None,
        "lowest_score": round(min(scores), 6) if scores else None,
    }


def vector_query(query: str, *, dimensions: int, filters: SearchFilters | None, limit: int, collection: str) -> None:
    """``mcp_search_vector_query``: what the vector leg asks the index for."""
    log.debug(
        "mcp_search_vector_query",
        query=query,
        dimensions=dimensions,
        filters=_filters(filters),
        limit=limit,
        collection=collection,
    )


def leg_results(leg: str, scores: Sequence[float], seconds: float) -> None:
    """``mcp_search_vector_results`` / ``mcp_search_fulltext_results``: a leg's hits after the scope
    filter, their best and lowest scores, and the leg's time; counted in
    ``lorekeeper_search_results_total{search_type}``."""
    event = {"vector": "mcp_search_vector_results", "text": "mcp_search_fulltext_results"}[leg]
    log.debug(event, candidates=len(scores), duration_ms=_ms(seconds), **_scores(scores))
    if scores:
        SEARCH_RESULTS.labels(search_type=leg).inc(len(scores))


def fulltext_query(query: str, *, index: str, filters: SearchFilters | None, limit: int) -> None:
    """``mcp_search_fulltext_query``: the terms the BM25 leg searches and the index it asks."""
    log.debug(
        "mcp_search_fulltext_query",
        query=query,
        terms=query.split(),
        index=index,
        filters=_filters(filters),
        limit=limit,
    )


def rerank(model: str, candidates_in: int, candidates_out: int, seconds: float) -> None:
    """``mcp_search_rerank``: the cross-encoder's candidates in and out, and its time."""
    log.debug(
        "mcp_search_rerank",
        model=model,
        candidates_in=candidates_in,
        candidates_out=candidates_out,
        duration_ms=_ms(seconds),
    )


def graph_traverse(
    start: Sequence[tuple[str, str]],
    reached: Sequence[tuple[str, str, str | None]],
    chunks: int,
    seconds: float,
) -> None:
    """``mcp_graph_traverse``: the concepts the query named (start nodes), the RELATED_TO neighbours
    reached from them (depth 1) and the MENTIONS followed to chunks; counted as graph results."""
    log.debug(
        "mcp_graph_traverse",
        start_nodes=[uid for uid, _ in start],
        start_names=[name for _, name in start],
        relationships=["RELATED_TO", "MENTIONS"],
        depth=1 if reached else 0,
        nodes_visited=len(start) + len(reached) + chunks,
        neighbours=[{"uid": uid, "name": name, "via": via} for uid, name, via in reached],
        chunks=chunks,
        duration_ms=_ms(seconds),
    )
    if chunks:
        SEARCH_RESULTS.labels(search_type="graph").inc(chunks)


def search_completed(legs: dict[str, int], fused: int, returned: int, reranker: str | None, seconds: float) -> None:
    """``search_completed`` (info): one whole hybrid search; its hits counted as ``hybrid`` results."""
    log.info("search_completed", legs=legs, fused=fused, returned=returned, reranker=reranker, duration_ms=_ms(seconds))
    if returned:
        SEARCH_RESULTS.labels(search_type="hybrid").inc(returned)


def _param(value: Any) -> Any:
    """A query parameter as logged: a long list shows its length and first values."""
    if isinstance(value, list | tuple | set | frozenset) and len(value) > _PARAM_PREVIEW:
        items = list(value)
        return {"count": len(items), "first": items[:_PARAM_PREVIEW]}
    return value


def graph_query(graph: GraphStore, cypher: str, params: dict[str, Any], *, name: str) -> list[Record]:
    """Run one of the graph leg's parameterised queries, logged as ``mcp_graph_query`` with its time."""
    started = time.perf_counter()
    rows = graph.run(cypher, params)
    log.debug(
        "mcp_graph_query",
        name=name,
        query=cypher,
        params={key: _param(value) for key, value in params.items()},
        rows=len(rows),
        time_ms=_ms(time.perf_counter() - started),
    )
    return rows
