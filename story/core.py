"""What every chapter of the story shares: the stores, the write protocol, and where a turn sits on the tree.

Every change to a campaign's story (turns, takes, head moves, branches, checkpoints, commits,
retcons) goes through :meth:`StoryCore.mutate`: one transaction guarded by the campaign's version
(:mod:`story.graph`). Concurrent writers in one process queue on a per-campaign lock, writers in
other processes retry on ``Conflict``. A mutation that moves the head or adds canon brings the live
world (:mod:`story.live`) along in the same transaction.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from schemas.errors import Conflict
from schemas.story import Turn
from stores.blob.base import BlobStore
from stores.graph.base import GraphStore
from story.errors import CampaignIncomplete, StoryConflict, StoryInvalid, StoryNotFound, validation_message
from story.graph import CampaignContext, StoryGraph, Writes
from story.lineage import Lineage, lineage_of
from story.live import queue_sync, read_live
from story.policy import GatePolicy
from story.snapshots import Snapshots
from story.state import WorldState

T = TypeVar("T")

#: What a mutation's ``build`` returns as the campaign properties when there is nothing to write.
SKIP: Any = object()

Build = Callable[[CampaignContext, Writes], tuple[T, dict[str, Any]]]


class StoryCore:
    """The stores, the gate's policy, the write protocol and lineage lookups, shared by the chapters.

    Args:
        graph: the graph store (system of record).
        blobs: the blob store (snapshots, prompts, retrieval records, presentation).
        policy: how the gate judges proposals.
        snapshot_interval: events between state snapshots along a line of the story.
        max_retries: how often a write retries after losing a race to another process.
    """

    def __init__(
        self, graph: GraphStore, blobs: BlobStore, *, policy: GatePolicy, snapshot_interval: int, max_retries: int
    ) -> None:
        self.graph = graph
        self.blobs = blobs
        self.policy = policy
        self.story = StoryGraph(graph)
        self.snapshots = Snapshots(self.story, blobs, interval=snapshot_interval)
        self.max_retries = max_retries
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()

    # -- the write protocol -----------------------------------------------------------------------

    def lock(self, campaign_id: str) -> threading.Lock:
        """The lock the campaign's writers (and an export) hold in this process."""
        with self._locks_guard:
            return self._locks[campaign_id]

    def mutate(
        self,
        campaign_id: str,
        kind: str,
        build: Build[T],
        *,
        allow_archived: bool = False,
        importing: bool = False,
    ) -> T:
        """Read the campaign, let ``build`` decide the writes, commit them with the next version.

        ``build`` returns its result and the campaign properties to set; it is called again on a
        fresh read when another process committed first. Returning :data:`SKIP` as the properties
        writes nothing (an idempotent no-op). A campaign whose transcript import is unfinished takes
        only the import's own writes (``importing``).

        Raises:
            CampaignIncomplete: the campaign is an unfinished transcript import (and this is not it).
        """
        with self.lock(campaign_id):
            for attempt in range(self.max_retries):
                ctx = self.story.context(campaign_id)
                if ctx.archived and not allow_archived:
                    raise StoryInvalid(f"campaign {campaign_id!r} is archived; unarchive it to change it")
                if ctx.campaign.transcript_import is not None and not importing:
                    raise CampaignIncomplete(campaign_id, ctx.campaign.transcript_import)
                writes = Writes()
                try:
                    result, props = build(ctx, writes)
                except ValidationError as exc:
                    raise StoryInvalid(validation_message(exc)) from None
                if props is SKIP:
                    return result
                if writes.after_state is not None or writes.moves_head:
                    self._queue_live(ctx, writes, props)
                try:
                    self.story.commit(ctx, writes, kind=kind, **props)
                except Conflict:
                    if self.story.context(campaign_id).version == ctx.version:
                        raise  # not a lost race: a real uniqueness violation in the writes
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
                    continue
                return result
        raise StoryConflict(f"campaign {campaign_id!r} is too busy: {self.max_retries} writes raced this one")

    def _queue_live(self, ctx: CampaignContext, writes: Writes, props: dict[str, Any]) -> None:
        """Bring the live world to the state at the head this mutation leaves (same transaction)."""
        target = writes.after_state
        if target is None:
            branch = props.get("active_branch_id", ctx.campaign.active_branch_id)
            head: str | None = props.get("head_turn_id", ctx.campaign.head_turn_id)
            depth = self.story.turn(head).depth if head else -1
            target = self.snapshots.state_at(ctx.id, lineage_of(ctx.lines, branch, depth)).state
        queue_sync(writes, ctx.id, read_live(self.graph, ctx.id), target)

    # -- where a turn sits ------------------------------------------------------------------------

    def lineage_for(self, ctx: CampaignContext, turn_id: str | None, branch_id: str | None = None) -> Lineage:
        """Lineage of a position: the head; a branch's tip; a turn on its own branch; a turn seen from a branch."""
        if turn_id is None:
            return ctx.lineage() if branch_id is None else tip_lineage(ctx, branch_id)
        return lineage_at(ctx, self.story.turn(turn_id), branch_id)

    def fold(self, campaign_id: str, *, turn_id: str | None = None) -> WorldState:
        """The raw world state at the head, or as of a turn on its branch."""
        ctx = self.story.context(campaign_id)
        return self.snapshots.state_at(campaign_id, self.lineage_for(ctx, turn_id)).state


def tip_lineage(ctx: CampaignContext, branch_id: str) -> Lineage:
    """Lineage of a branch's tip: its deepest own turn, or its fork turn while it has none.

    Raises:
        StoryNotFound: the campaign has no such branch.
    """
    if branch_id not in ctx.lines:
        raise StoryNotFound(f"no branch {branch_id!r} in campaign {ctx.id!r}")
    return lineage_of(ctx.lines, branch_id, ctx.line_end(branch_id))


def tip_turn_id(ctx: CampaignContext, branch_id: str) -> str | None:
    """The turn at a branch's tip (None for a root branch without turns)."""
    branch = ctx.branches[branch_id]
    return branch.tip_turn_id or branch.fork_turn_id


def lineage_at(ctx: CampaignContext, turn: Turn, branch_id: str | None = None) -> Lineage:
    """Lineage of a turn (read already) on its own branch, or seen from ``branch_id``.

    A turn is its own position whatever the head: the turn that is the head is seen from its own
    branch too (the head itself, which may sit on a branch forked at that turn, is ``ctx.lineage()``).
    """
    if turn.campaign_id != ctx.id:
        raise StoryNotFound(f"no turn {turn.id!r} in campaign {ctx.id!r}")
    if branch_id is None:
        branch_id = turn.branch_id
    if branch_id not in ctx.lines:
        raise StoryNotFound(f"no branch {branch_id!r} in campaign {ctx.id!r}")
    lineage = lineage_of(ctx.lines, branch_id, turn.depth)
    if not lineage.contains(turn.branch_id, turn.depth):
        raise StoryInvalid(f"turn {turn.id!r} is not on the line of branch {branch_id!r}")
    return lineage
