"""World-state checkpoints: automatic ones at every turn's boundaries, named ones, pruning and restores.

A checkpoint is a pointer, not a copy of the world: a position in the tree (branch, depth, the turn it
is about) and the campaign's commit sequence number when it was taken (``seq``). Its world is the fold
of the canon events on the position's lineage committed up to ``seq`` (:func:`capped`), which the
snapshots and events already rebuild; only a named checkpoint also takes a snapshot, to make a
restore of an old position cheap. So the three automatic checkpoints of a turn cost three small nodes
written in the transactions that record the turn and its narration:

- ``before_user_input``: the position before the turn (its parent's depth), as the turn was recorded;
- ``after_user_input``: the turn itself, as it was recorded (input changes no canon: the same world);
- ``after_character_round``: the turn with its narration told (what it proposed is pending, not canon).

A restore brings the head back to a checkpoint's world. Where canon was committed on that line after the
checkpoint was taken (a scene's end or a mid-scene commit anchored at or before its position), moving
the head alone would show it: the restore then forks a branch at the position whose ``fork_seq`` is the
checkpoint's ``seq``, so its lineage sees exactly the events up to it (:mod:`story.lineage`). The head
move, the fork and the live world's three phases (create or overwrite in dependency order, re-home
placements, delete extras leaf to root: :mod:`story.live`) are one graph transaction, so a process killed
at any moment leaves the old head with the old world or the new head with the new one.

Pruning keeps every named checkpoint and the newest ``keep`` automatic ones of each branch; it runs as
each turn is recorded (the story moves on), in the same transaction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from schemas.story import (
    Branch,
    Campaign,
    Checkpoint,
    SnapshotKind,
    Turn,
    WorldStateCheckpointKind,
)
from stores.catalog import from_props
from story import cypher
from story.campaigns import queue_branch
from story.core import StoryCore
from story.cypher import Statement
from story.errors import StoryInvalid, StoryNotFound
from story.graph import CampaignContext, Writes, node_props
from story.lineage import Lineage, lineage_of
from story.state import WorldState

#: Default number of automatic checkpoints kept per branch.
DEFAULT_KEPT = 20

#: The snapshot kind a named checkpoint's snapshot takes.
_SNAPSHOT_KIND = {
    WorldStateCheckpointKind.BEFORE_USER_INPUT: SnapshotKind.BEFORE_USER_INPUT,
    WorldStateCheckpointKind.AFTER_USER_INPUT: SnapshotKind.AFTER_USER_INPUT,
    WorldStateCheckpointKind.AFTER_CHARACTER_ROUND: SnapshotKind.AFTER_CHARACTER_ROUND,
}


# -- queries ------------------------------------------------------------------------------------------


def _of_campaign(campaign_id: str) -> Statement:
    return "MATCH (n:Checkpoint) WHERE n.campaign_id = $c RETURN n ORDER BY n.created_at", {"c": campaign_id}


def _automatic_on(campaign_id: str, branch_id: str) -> Statement:
    return (
        "MATCH (n:Checkpoint) WHERE n.campaign_id = $c AND n.branch_id = $b AND n.automatic = true "
        "RETURN n.uid AS uid, n.seq AS seq, n.created_at AS at",
        {"c": campaign_id, "b": branch_id},
    )


def _of_turn(campaign_id: str, turn_id: str) -> Statement:
    return (
        "MATCH (n:Checkpoint) WHERE n.campaign_id = $c AND n.turn_id = $t RETURN n ORDER BY n.created_at",
        {"c": campaign_id, "t": turn_id},
    )


def _delete(ids: list[str]) -> Statement:
    return "MATCH (k:Checkpoint) WHERE k.uid IN $ids DETACH DELETE k", {"ids": ids}


# -- positions ----------------------------------------------------------------------------------------


def capped(lineage: Lineage, seq: int | None) -> Lineage:
    """The lineage as it stood when the campaign's commit sequence number was ``seq``: every segment sees only
    the events committed up to it (None: the lineage itself)."""
    if seq is None:
        return lineage
    segments = tuple(
        replace(s, seq_cutoff=seq if s.seq_cutoff is None else min(s.seq_cutoff, seq)) for s in lineage.segments
    )
    return Lineage(segments)


def queue_checkpoint(
    ctx: CampaignContext,
    writes: Writes,
    *,
    turn_id: str,
    branch_id: str,
    depth: int,
    kind: WorldStateCheckpointKind,
) -> Checkpoint:
    """Queue an automatic checkpoint (a pointer: no snapshot) of position ``(branch_id, depth)``, about ``turn_id``,
    at the campaign's commit sequence number as ``ctx`` read it."""
    (checkpoint,) = queue_checkpoints(ctx, writes, turn_id=turn_id, branch_id=branch_id, at=[(kind, depth)])
    return checkpoint


def queue_checkpoints(
    ctx: CampaignContext,
    writes: Writes,
    *,
    turn_id: str,
    branch_id: str,
    at: list[tuple[WorldStateCheckpointKind, int]],
) -> list[Checkpoint]:
    """Queue automatic checkpoints of one turn, one ``(kind, depth)`` each, in two statements."""
    checkpoints = [
        Checkpoint(
            campaign_id=ctx.id,
            branch_id=branch_id,
            turn_id=turn_id,
            name=kind.value,
            kind=kind,
            automatic=True,
            depth=depth,
            seq=ctx.event_seq,
        )
        for kind, depth in at
    ]
    writes.add(*cypher.create_nodes("Checkpoint", [node_props(c) for c in checkpoints]))
    writes.add(*cypher.link_nodes("Checkpoint", "AT_TURN", "Turn", [(c.id, turn_id) for c in checkpoints]))
    return checkpoints


class Checkpoints:
    """Takes, lists, prunes and restores a campaign's world-state checkpoints.

    Args:
        core: the stores and the write protocol.
        keep: automatic checkpoints kept per branch (from the settings, read at the entry point).
    """

    def __init__(self, core: StoryCore, *, keep: int = DEFAULT_KEPT) -> None:
        if keep < 1:
            raise ValueError(f"checkpoints kept per branch must be >= 1, got {keep}")
        self.core = core
        self.story = core.story
        self.keep = keep

    # -- taking and pruning -----------------------------------------------------------------------

    def queue_prune(self, ctx: CampaignContext, writes: Writes, branch_id: str, *, adding: int = 0) -> int:
        """Queue the deletion of a branch's automatic checkpoints beyond the newest ``keep`` (``adding`` more
        are being queued beside). Returns how many."""
        rows = self.core.graph.run(*_automatic_on(ctx.id, branch_id))
        rows.sort(key=lambda r: (int(r["seq"] or 0), str(r["at"]), str(r["uid"])))
        excess = len(rows) + adding - self.keep
        if excess <= 0:
            return 0
        writes.add(*_delete([str(r["uid"]) for r in rows[:excess]]))
        return excess

    def create(
        self,
        campaign_id: str,
        name: str,
        *,
        turn_id: str | None = None,
        kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL,
        description: str | None = None,
    ) -> Checkpoint:
        """A named checkpoint of a turn (the head by default), with a snapshot of the world there. Never pruned."""
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, turn_id)
        target = turn_id or (ctx.head.id if ctx.head else None)
        if target is None:
            raise StoryInvalid("there is no turn to checkpoint yet")
        built = self.core.snapshots.state_at(campaign_id, lineage)
        snapshot_id = self.core.snapshots.maybe_take(
            campaign_id,
            lineage,
            built.state,
            turn_id=target,
            replayed=0,
            kind=_SNAPSHOT_KIND.get(kind, SnapshotKind.INTERVAL),
            force=True,
            inner=lineage.depth < ctx.line_end(lineage.branch_id),
        )

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Checkpoint, dict[str, Any]]:
            checkpoint = Checkpoint(
                campaign_id=ctx.id,
                branch_id=lineage.branch_id,
                turn_id=target,
                name=name,
                kind=kind,
                snapshot_id=snapshot_id,
                description=description,
                depth=lineage.depth,
                seq=ctx.event_seq,
            )
            writes.add(*cypher.create_nodes("Checkpoint", [node_props(checkpoint)]))
            writes.add(*cypher.link_nodes("Checkpoint", "AT_TURN", "Turn", [(checkpoint.id, target)]))
            return checkpoint, {}

        return self.core.mutate(campaign_id, "checkpoint", build)

    # -- reading ----------------------------------------------------------------------------------

    def list(self, campaign_id: str, *, automatic: bool | None = None, turn_id: str | None = None) -> list[Checkpoint]:
        """The checkpoints of a campaign (or of one turn), oldest first; ``automatic`` filters by kind."""
        self.story.context(campaign_id)  # an unknown campaign is a 404, not an empty list
        rows = self.story.nodes(_of_turn(campaign_id, turn_id) if turn_id else _of_campaign(campaign_id))
        out = [_checkpoint(r) for r in rows]
        return [c for c in out if automatic is None or c.automatic is automatic]

    def get(self, campaign_id: str, checkpoint_id: str) -> Checkpoint:
        """A checkpoint of the campaign (another campaign's answers as a missing one)."""
        try:
            checkpoint = _checkpoint(self.story.node("Checkpoint", checkpoint_id))
        except StoryNotFound:
            checkpoint = None
        if checkpoint is None or checkpoint.campaign_id != campaign_id:
            raise StoryNotFound(f"no checkpoint {checkpoint_id!r} in campaign {campaign_id!r}")
        return checkpoint

    def lineage_of(self, ctx: CampaignContext, checkpoint: Checkpoint) -> Lineage:
        """The lineage whose fold is the checkpoint's world (its position, capped at its ``seq``)."""
        depth = _depth(self.story.turn(checkpoint.turn_id), checkpoint)
        return capped(lineage_of(ctx.lines, checkpoint.branch_id, depth), checkpoint.seq)

    def state_of(self, campaign_id: str, checkpoint_id: str) -> WorldState:
        """The world a checkpoint points at, rebuilt from the snapshots and events."""
        ctx = self.story.context(campaign_id)
        checkpoint = self.get(campaign_id, checkpoint_id)
        return self.core.snapshots.state_at(campaign_id, self.lineage_of(ctx, checkpoint)).state

    # -- restoring --------------------------------------------------------------------------------

    def restore(self, campaign_id: str, checkpoint_id: str) -> Campaign:
        """Bring the head back to a checkpoint's world, in one transaction (see the module's doc)."""
        checkpoint = self.get(campaign_id, checkpoint_id)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            props = self.queue_restore(ctx, writes, checkpoint)
            return ctx.campaign.validated_copy(**props), props

        return self.core.mutate(campaign_id, "restore", build)

    def queue_restore(self, ctx: CampaignContext, writes: Writes, checkpoint: Checkpoint) -> dict[str, Any]:
        """Queue a restore of ``checkpoint`` into a mutation's writes; returns the campaign properties to set.

        Raises:
            StoryNotFound: the checkpoint's branch or turn is gone.
        """
        if checkpoint.branch_id not in ctx.lines:
            raise StoryNotFound(f"no branch {checkpoint.branch_id!r} in campaign {ctx.id!r}")
        turn = self.story.turn(checkpoint.turn_id)
        depth = _depth(turn, checkpoint)
        head_id = turn.id if depth == turn.depth else turn.parent_turn_id
        position = lineage_of(ctx.lines, checkpoint.branch_id, depth)
        target = capped(position, checkpoint.seq)
        writes.after_state = self.core.snapshots.state_at(ctx.id, target).state
        writes.moves_head = True
        previous = ctx.campaign.active_branch_id
        if head_id is not None and self._committed_since(ctx.id, position, checkpoint.seq):
            # canon committed on the line after the checkpoint: a branch forked there that sees none of it
            parent = ctx.branches[checkpoint.branch_id]
            branch = Branch(
                campaign_id=ctx.id,
                name=f"{parent.name}.restored-{checkpoint.kind.value}",
                parent_branch_id=checkpoint.branch_id,
                fork_turn_id=head_id,
            )
            queue_branch(ctx, writes, branch, fork_depth=depth, previous=previous, fork_seq=checkpoint.seq)
            return {"active_branch_id": branch.id, "head_turn_id": head_id}
        if previous != checkpoint.branch_id:
            writes.add(*cypher.retain_branch(previous))
            writes.add(*cypher.activate_branch(checkpoint.branch_id))
        return {"active_branch_id": checkpoint.branch_id, "head_turn_id": head_id}

    def _committed_since(self, campaign_id: str, position: Lineage, seq: int | None) -> bool:
        """Whether an event visible from ``position`` was committed after ``seq``."""
        if seq is None:
            return False
        return bool(self.story.events_on(campaign_id, position, after_seq=seq))


def _depth(turn: Turn, checkpoint: Checkpoint) -> int:
    """The checkpoint's position depth (one written before positions were kept: its turn's)."""
    return turn.depth if checkpoint.depth is None else checkpoint.depth


def _checkpoint(row: dict[str, Any]) -> Checkpoint:
    return from_props(Checkpoint, row, key="id")
