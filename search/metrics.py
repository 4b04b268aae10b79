"""Prometheus metrics of search, in the default registry (served at ``/metrics`` by the API).

``search_type`` is one of :data:`SEARCH_TYPES`: each leg is timed on its own and ``hybrid`` times a
whole search (legs, fusion, citations and re-ranking). Re-ranking is also timed on its own, by model.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, Histogram

SEARCH_TYPES: tuple[str, ...] = ("vector", "text", "graph", "hybrid")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5)


def _histogram(name: str, documentation: str, labels: list[str], **kwargs: Any) -> Histogram:
    """A histogram in the default registry, or the one already there.

    A module may be imported twice under different names (tests that reload it, Ray workers that
    unpickle a searcher); registering the same name twice raises, so the second import reuses it.
    """
    try:
        return Histogram(name, documentation, labels, **kwargs)
    except ValueError:
        existing = REGISTRY._names_to_collectors.get(name)  # noqa: SLF001 - no public lookup exists
        if isinstance(existing, Histogram):
            return existing
        raise


SEARCH_DURATION = _histogram(
    "lorekeeper_search_duration_seconds",
    "Search latency: each leg (vector, text, graph) and whole hybrid searches.",
    ["search_type"],
    buckets=_LATENCY_BUCKETS,
)
RERANK_DURATION = _histogram(
    "lorekeeper_rerank_duration_seconds",
    "Cross-encoder re-ranking latency per query, by model.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
