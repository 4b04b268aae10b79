"""Campaign affinity for narrator requests: rendezvous hashing of the campaign id over the replicas.

A table's prompts share a long prefix (rules, axioms, scene state), so its turns should reach the
replica whose prefix cache already holds it. Ray Serve's multiplexing learns which replica "holds"
an id only after that replica reports it, so the first requests of a new campaign race and can land
on two replicas, which then both hold it. Rendezvous (highest-random-weight) hashing needs no
learning: every router ranks the replicas by ``hash(campaign, replica)`` and agrees on the order, so
a campaign always goes to its first replica; when that one is saturated the base router falls
through to the next in the same order; and when replicas come or go, only the campaigns of the
replicas that changed move. Requests without a campaign id spread by the power of two choices.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


def rendezvous_order(key: str, replica_ids: list[str]) -> list[str]:
    """``replica_ids`` from most to least preferred for ``key`` (the same order in every process)."""

    def weight(replica_id: str) -> int:
        return int.from_bytes(hashlib.blake2b(f"{key}\x00{replica_id}".encode(), digest_size=8).digest(), "big")

    return sorted(replica_ids, key=weight, reverse=True)


class CampaignAffinityRouter(RequestRouter):
    """Routes by the request's multiplexed id (the campaign) with rendezvous hashing."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        key = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        if len(candidate_replicas) <= 1:
            return [candidate_replicas]
        if not key:
            return [random.sample(candidate_replicas, 2)]
        by_id: dict[str, Any] = {r.replica_id.unique_id: r for r in candidate_replicas}
        return [[by_id[replica_id]] for replica_id in rendezvous_order(key, list(by_id))]
