"""Prometheus metrics of the serving layer: ``/metrics`` of the process, and Ray's export from a replica
(:mod:`stores.metric_export`)."""

from __future__ import annotations

from stores.metric_export import Counter, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

HTTP_REQUESTS = Counter("lorekeeper_http_requests_total", "HTTP requests by route and status.", ["route", "status"])
HTTP_DURATION = Histogram(
    "lorekeeper_http_request_duration_seconds", "HTTP request time by route.", ["route"], buckets=_LATENCY_BUCKETS
)
GATE_DECISIONS = Counter(
    "lorekeeper_gate_decisions_total",
    "Proposals the gate decided, by decision and authority.",
    ["decision", "authority"],
)
TURNS_REFUSED = Counter("lorekeeper_turns_refused_total", "Turns refused with 429 (over capacity).")
MCP_CALLS = Counter("lorekeeper_mcp_tool_invocations_total", "MCP tool calls by tool and outcome.", ["tool", "status"])
MCP_DURATION = Histogram(
    "lorekeeper_mcp_tool_duration_seconds",
    "MCP tool call time.",
    ["tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
HOP_DURATION = Histogram(
    "lorekeeper_serve_hop_seconds",
    "Calls from the ingress to another Ray Serve deployment, by deployment and method (the hop and the work).",
    ["deployment", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
