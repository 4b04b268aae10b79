"""Prometheus metrics of the stores, recorded where the store calls are made (exported through Ray
from a worker or replica: :mod:`stores.metric_export`)."""

from __future__ import annotations

from stores.metric_export import Counter, Histogram

S3_OPERATIONS = Counter("lorekeeper_s3_operations_total", "Object-store operations.", ["operation", "status"])
GRAPH_QUERY_DURATION = Histogram(
    "lorekeeper_graph_query_duration_seconds",
    "Graph query latency by kind of query.",
    ["query_type"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
