"""Prometheus metrics of the narrator (scraped with the rest at ``/metrics``)."""

from __future__ import annotations

from stores.metric_export import Counter, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

NARRATOR_TTFT = Histogram(
    "lorekeeper_narrator_time_to_first_token_seconds",
    "Time to the narration's first piece.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
NARRATOR_OUTPUT_TOKENS = Counter("lorekeeper_narrator_output_tokens_total", "Narration pieces streamed.", ["model"])
NARRATOR_REQUESTS = Counter("lorekeeper_narrator_requests_total", "Narrations by outcome.", ["model", "status"])
