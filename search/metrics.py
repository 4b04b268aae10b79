"""Prometheus metrics of search: this process's registry (``/metrics`` of the API) and, in a Search
replica, Ray's export (:mod:`stores.metric_export`).

``search_type`` is one of :data:`SEARCH_TYPES`: each leg is timed on its own and ``hybrid`` times a
whole search (legs, fusion, citations and re-ranking); ``coverage`` is the coverage leg's re-reading.
Each leg's and the whole search's hits are counted under the same label. Re-ranking is also timed on
its own, by model.
"""

from __future__ import annotations

from stores.metric_export import Counter, Histogram

SEARCH_TYPES: tuple[str, ...] = ("vector", "text", "graph", "coverage", "hybrid")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5)

SEARCH_DURATION = Histogram(
    "lorekeeper_search_duration_seconds",
    "Search latency: each leg (vector, text, graph, coverage) and whole hybrid searches.",
    ["search_type"],
    buckets=_LATENCY_BUCKETS,
)
SEARCH_RESULTS = Counter(
    "lorekeeper_search_results_total",
    "Hits returned: by each leg (before fusion, after the scope filter) and by whole hybrid searches.",
    ["search_type"],
)
RERANK_DURATION = Histogram(
    "lorekeeper_rerank_duration_seconds",
    "Cross-encoder re-ranking latency per query, by model.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
