"""Health: how each part the server stands on answers, and the whole.

One probe per part (``/health``, ``/mcp/health`` and the ``get_health`` operation answer the same
body): the graph, the blob store (and the source bucket when one is set), the full-text and vector
indexes, the embedding model and the narrator engine.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = ["DEPENDENCIES", "DependencyHealth", "Health", "HealthStatus"]

DEPENDENCIES = ("graph", "blob", "source_blob", "text", "vectors", "embedding", "narrator")
"""The parts a health answer names, in this order."""


class HealthStatus(StrEnum):
    """How one part answers."""

    OK = "ok"  # it answered its probe
    DOWN = "down"  # it failed its probe or did not answer in time: the server is degraded
    IDLE = "idle"  # a model not loaded yet: it loads on first use (not a failure)
    OFF = "off"  # not part of this server (no source bucket set, search not configured here)


class DependencyHealth(BaseModel):
    """One part's answer to its probe."""

    status: HealthStatus
    latency_ms: float | None = Field(default=None, description="How long the probe took (None: none ran).")
    detail: str | None = Field(
        default=None, description="Why it is down, or what answered (the model's name); never where a store lives."
    )


class Health(BaseModel):
    """Whether the server and every part it stands on answer."""

    status: str = Field(description="ok, or degraded when any part is down.")
    checks: dict[str, DependencyHealth] = Field(
        default_factory=dict, description="Each part: graph, blob, source_blob, text, vectors, embedding, narrator."
    )
    search: bool = Field(default=False, description="Whether knowledge search is configured here.")
    open: bool | None = Field(
        default=None, description="Whether the API serves callers without a key (the probes say; the operation not)."
    )
    took_ms: float = Field(default=0.0, description="How long the whole health check took.")
