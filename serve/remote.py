"""The ingress's handles to the other deployments, behind the service protocols it composes.

Every call is timed into ``lorekeeper_serve_hop_seconds`` (deployment, method) of the ingress's own
``/metrics``: the hop and the work behind it, which is where a turn on Ray Serve spends what a direct
turn does not (``benchmarks/serving_overhead.py`` reads it per turn).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import numpy as np
from ray.serve.handle import DeploymentHandle

from narrator.engines import Message, NarratorEngine
from schemas.health import HealthStatus
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.search import SearchFilters, SearchHit
from schemas.story import GateReport
from search.metrics import SEARCH_DURATION
from serve.health import BlockingProbe, Outcome
from serve.metrics import HOP_DURATION
from story.lineage import Lineage
from story.recall_index import RecallIndex


def _hop(deployment: str, method: str, started: float) -> None:
    """Time one call from ``started`` into this process's ``/metrics`` (kept out of Ray's export: the
    replica called records its own work, and every turn makes several of these)."""
    HOP_DURATION.labels(deployment=deployment, method=method).observe(time.perf_counter() - started, export=False)


def _call(deployment: str, method: str, handle: DeploymentHandle, *args: Any) -> Any:
    """A blocking call of ``method`` on the deployment behind ``handle`` (from a worker thread), timed."""
    started = time.perf_counter()
    try:
        return getattr(handle, method).remote(*args).result()
    finally:
        _hop(deployment, method, started)


class RemoteSearch:
    """:class:`~narrator.turn.SearchBackend` over the Search deployment (called from worker threads)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def search(
        self, query: str, *, filters: SearchFilters | None = None, limit: int = 10, rerank: bool | None = None
    ) -> list[SearchHit]:
        started = time.perf_counter()
        hits: list[SearchHit] = _call("Search", "search", self.handle, query, filters, limit, rerank)
        # The Search replicas time each leg and each whole search in their own registries, which the
        # ingress's /metrics does not serve: the ingress times the whole search (the hop included) for its
        # own /metrics, kept out of Ray's export where the replica's own timing is.
        SEARCH_DURATION.labels(search_type="hybrid").observe(time.perf_counter() - started, export=False)
        return hits

    def probes(self) -> dict[str, BlockingProbe]:
        """The health probes of the Search replica's indexes and model, each asked of the replica."""

        def remote(part: str) -> BlockingProbe:
            def probe() -> Outcome:
                status, detail = self.handle.probe.remote(part).result()
                return HealthStatus(status), detail

            return probe

        return {part: remote(part) for part in ("text", "vectors", "embedding")}


class RemoteRecallIndex(RecallIndex):
    """The memory index of the Search deployment, behind :class:`~story.recall_index.RecallIndex`'s methods
    (called from worker threads, like :class:`RemoteSearch`): the records are embedded there, by the
    model the Search replica holds, and no other process opens the memory stores."""

    def __init__(self, handle: DeploymentHandle) -> None:  # the stores are the Search replica's
        self.handle = handle

    def ensure(self) -> None:
        return None

    def close(self) -> None:
        return None

    def write(self, records: Sequence[RecallRecord], vectors: np.ndarray | None = None) -> int:
        return int(_call("Search", "recall_write", self.handle, list(records), vectors))

    def submit(self, records: Sequence[RecallRecord]) -> None:
        self.write(records)  # written by the Search replica before the call returns: nothing to flush

    def flush(self) -> None:
        return None

    def present(self, ids: Sequence[str]) -> set[str]:
        return set(_call("Search", "recall_present", self.handle, list(ids)))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            _call("Search", "recall_delete", self.handle, list(ids))

    def delete_campaign(self, campaign_id: str) -> None:
        _call("Search", "recall_delete_campaign", self.handle, campaign_id)

    def count(self, campaign_id: str) -> int:
        return int(_call("Search", "recall_count", self.handle, campaign_id))

    def stored_texts(self, campaign_id: str) -> dict[str, str]:
        return dict(_call("Search", "recall_stored_texts", self.handle, campaign_id))

    def search(
        self,
        campaign_id: str,
        query: str,
        *,
        lineage: Lineage,
        observer: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
        query_vector: np.ndarray | None = None,
        wait_for_turns: bool = True,
    ) -> list[RecallHit]:
        kind_list = list(kinds) if kinds is not None else None
        hits = _call("Search", "recall_search", self.handle, campaign_id, query, lineage, observer, kind_list, limit)
        return hits  # type: ignore[no-any-return]


class RemoteGate:
    """:class:`~serve.services.GateBackend` over the Gate deployment."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def commit(self, scene_id: str, proposal_ids: Sequence[str]) -> GateReport:
        return _call("Gate", "commit", self.handle, scene_id, list(proposal_ids))  # type: ignore[no-any-return]

    def end_scene(self, scene_id: str, *, summary: str | None = None) -> GateReport:
        return _call("Gate", "end_scene", self.handle, scene_id, summary)  # type: ignore[no-any-return]


class RemoteEngine:
    """A :class:`~narrator.engines.NarratorEngine` whose requests go to the Narrator deployment."""

    def __init__(self, handle: DeploymentHandle, model: str, campaign_id: str = "", engine: str | None = None) -> None:
        self.model = model
        self.engine = engine  # a named engine of the replicas (a campaign's model role); None: theirs
        self.handle = handle.options(multiplexed_model_id=campaign_id) if campaign_id else handle
        self._streaming = self.handle.options(stream=True)

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        started, first = time.perf_counter(), True
        pieces = self._streaming.stream.remote(messages, max_tokens, temperature, seed, self.engine)
        try:
            async for piece in pieces:  # type: ignore[union-attr]
                if first:
                    _hop("Narrator", "stream_first_piece", started)
                    first = False
                yield piece
        finally:
            _hop("Narrator", "stream", started)

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        started = time.perf_counter()
        try:
            return await self.handle.structured.remote(messages, schema, max_tokens, self.engine)  # type: ignore[no-any-return]
        finally:
            _hop("Narrator", "structured", started)

    async def health(self) -> str:
        """A Narrator replica's engine health (the replica answering is the probe)."""
        return await self.handle.health.remote()  # type: ignore[no-any-return]

    async def close(self) -> None:
        return None


class RemoteNarrator:
    """:class:`~serve.services.NarratorRouter` over the Narrator deployment, keyed by campaign."""

    def __init__(self, handle: DeploymentHandle, model: str) -> None:
        self.handle = handle
        self.model = model
        self._default = RemoteEngine(handle, model)

    def for_campaign(self, campaign_id: str) -> NarratorEngine:
        return RemoteEngine(self.handle, self.model, campaign_id)

    def named(self, campaign_id: str, engine: str, model: str) -> NarratorEngine:
        """A named engine of the Narrator replicas, for a campaign that chose it (routed like its turns)."""
        return RemoteEngine(self.handle, model, campaign_id, engine)

    @property
    def default(self) -> NarratorEngine:
        return self._default
