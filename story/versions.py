"""Turn versions: a retake rewinds the world and archives the take it replaces; a revert brings one back.

A retake (a regeneration) of a turn first *rewinds*: the head goes back to the turn's
``after_user_input`` checkpoint (:mod:`story.checkpoints`), the world as it stood when the turn was
recorded, so the new take's prompt shows no canon committed at or after the turn; the world as the
rewind found it is kept as a ``before_restore`` checkpoint. When the new take is recorded, the one it
replaces is archived as a :class:`~schemas.story.TurnVersion` (its narration, the checkpoint of the world
that went with it) and what it proposed that is still pending is marked ``superseded``: never judged,
never canon. The GM's own proposals on the turn stay pending.

A revert selects an archived version's take again, archives the one it replaces the same way, puts the
version's superseded proposals back to pending and, while its checkpoint was not pruned, restores the
world that went with it. Each of these is one transaction.
"""

from __future__ import annotations

from typing import Any

from schemas.common import utc_now
from schemas.story import Campaign, Checkpoint, Take, Turn, TurnStatus, TurnVersion, WorldStateCheckpointKind
from stores.catalog import from_props
from story import cypher
from story.checkpoints import Checkpoints, queue_checkpoint
from story.core import StoryCore
from story.cypher import Statement
from story.errors import StoryInvalid, StoryNotFound
from story.graph import CampaignContext, Writes, node_props
from story.lineage import lineage_of

#: Events that frame scenes rather than change the world: a rewind keeps those committed before the first canon.
_SCENE_MARKS = frozenset({"scene_set", "scene_ended"})

#: The Turn property naming the checkpoint of the world its last rewind found (the next version's world).
REWOUND_FROM = "rewound_from"


# -- queries ------------------------------------------------------------------------------------------


def _versions_of(turn_id: str) -> Statement:
    return "MATCH (n:TurnVersion) WHERE n.turn_id = $t RETURN n ORDER BY n.created_at", {"t": turn_id}


def _pending_of_turn(turn_id: str) -> Statement:
    """The turn's pending proposals that a replaced take made: every authority but the GM's."""
    return (
        "MATCH (p:ProposedChange {turn_id: $t, status: 'pending'}) WHERE p.authority <> 'gm' RETURN p.uid AS uid",
        {"t": turn_id},
    )


def _supersede(ids: list[str], why: str, at: str) -> Statement:
    return (
        "MATCH (p:ProposedChange) WHERE p.uid IN $ids AND p.status = 'pending' "
        "SET p.status = 'superseded', p.rationale = $why, p.decided_at = $now",
        {"ids": ids, "why": why, "now": at},
    )


def _reinstate(ids: list[str]) -> Statement:
    return (
        "MATCH (p:ProposedChange) WHERE p.uid IN $ids AND p.status = 'superseded' "
        "SET p.status = 'pending', p.rationale = null, p.decided_at = null",
        {"ids": ids},
    )


def _mark_turn(turn_id: str, checkpoint_id: str) -> Statement:
    return f"MATCH (t:Turn {{uid: $t}}) SET t.{REWOUND_FROM} = $k", {"t": turn_id, "k": checkpoint_id}


def _set_version(version_id: str, props: dict[str, Any]) -> Statement:
    return "MATCH (v:TurnVersion {uid: $v}) SET v += $p", {"v": version_id, "p": props}


class Versions:
    """Rewinds for retakes, the archive of replaced takes, and reverts."""

    def __init__(self, core: StoryCore, checkpoints: Checkpoints) -> None:
        self.core = core
        self.story = core.story
        self.checkpoints = checkpoints

    # -- a retake ---------------------------------------------------------------------------------

    def rewind(self, campaign_id: str, turn_id: str) -> Campaign:
        """Before a retake: bring the world back to where it stood when the turn was recorded.

        The head goes to the turn on the world of its ``after_user_input`` checkpoint (one forked from it
        when canon was committed on the line since); the world the rewind found is checkpointed
        (``before_restore``) for the version the retake will archive.

        Raises:
            StoryNotFound: no such turn in the campaign.
        """
        turn = self._turn(campaign_id, turn_id)
        boundary = self._boundary(turn)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            target = self._before_canon(ctx, boundary)
            if ctx.head is not None:
                found = queue_checkpoint(
                    ctx,
                    writes,
                    turn_id=ctx.head.id,
                    branch_id=ctx.campaign.active_branch_id,
                    depth=ctx.head_depth,
                    kind=WorldStateCheckpointKind.BEFORE_RESTORE,
                )
                writes.add(*_mark_turn(turn.id, found.id))
            props = self.checkpoints.queue_restore(ctx, writes, target)
            return ctx.campaign.validated_copy(**props), props

        return self.core.mutate(campaign_id, "rewind", build)

    def _before_canon(self, ctx: CampaignContext, boundary: Checkpoint) -> Checkpoint:
        """The boundary moved on past the scene marks committed after it up to the first canon: a scene the
        turn's proposals were staged on (opened after its narration) stays open; no canon since comes back."""
        if boundary.seq is None or boundary.branch_id not in ctx.lines:
            return boundary
        position = lineage_of(ctx.lines, boundary.branch_id, boundary.depth if boundary.depth is not None else -1)
        later = self.story.events_on(ctx.id, position, after_seq=boundary.seq)
        canon = [seq for seq, event in later if event["kind"] not in _SCENE_MARKS]
        return boundary.validated_copy(seq=(min(canon) - 1) if canon else ctx.event_seq)

    def _boundary(self, turn: Turn) -> Checkpoint:
        """The turn's ``after_user_input`` checkpoint (a turn recorded before they were taken: its position)."""
        kind = WorldStateCheckpointKind.AFTER_USER_INPUT
        taken = [c for c in self.checkpoints.list(turn.campaign_id, turn_id=turn.id) if c.kind is kind]
        if taken:
            return taken[-1]
        return Checkpoint(
            campaign_id=turn.campaign_id, branch_id=turn.branch_id, turn_id=turn.id, name=kind.value, depth=turn.depth
        )

    def queue_archive(
        self, ctx: CampaignContext, writes: Writes, turn: Turn, *, replaced_by: str | None, world: str | None = None
    ) -> None:
        """Queue the archive of the turn's selected take as a version, its pending proposals superseded.

        ``world``: the checkpoint of the world that went with it (default: see :meth:`_world_of`).
        """
        if turn.selected_take_id is None:
            return
        replaced = from_props(Take, self.story.node("Take", turn.selected_take_id), key="id")
        ids = [str(r["uid"]) for r in self.core.graph.run(*_pending_of_turn(turn.id))]
        if ids:
            why = f"superseded: take {replaced.index} of the turn was replaced"
            writes.add(*_supersede(ids, why, utc_now().isoformat()))
        version = TurnVersion(
            campaign_id=ctx.id,
            turn_id=turn.id,
            take_id=replaced.id,
            narration=replaced.narration,
            replaced_by=replaced_by,
            proposal_ids=ids,
            checkpoint_id=world or self._world_of(turn, replaced),
        )
        writes.add(*cypher.create_nodes("TurnVersion", [node_props(version)]))
        writes.add(*cypher.link_nodes("TurnVersion", "VERSION_OF", "Turn", [(version.id, turn.id)]))

    def _world_of(self, turn: Turn, replaced: Take) -> str | None:
        """The checkpoint of the world that went with a replaced take: what the rewind before its replacement
        found, else the world its narration was told in (``after_character_round``)."""
        mark = self.story.node("Turn", turn.id).get(REWOUND_FROM)
        at_turn = self.checkpoints.list(turn.campaign_id, turn_id=turn.id)
        if mark is not None:
            try:
                found = self.checkpoints.get(turn.campaign_id, str(mark))
                if found.created_at >= replaced.created_at:
                    return found.id
            except StoryNotFound:
                pass  # pruned
        told = [c for c in at_turn if c.kind is WorldStateCheckpointKind.AFTER_CHARACTER_ROUND]
        return told[-1].id if told else None

    # -- reading and reverting --------------------------------------------------------------------

    def list(self, campaign_id: str, turn_id: str) -> list[TurnVersion]:
        """The archived versions of a turn, oldest first."""
        self._turn(campaign_id, turn_id)
        return [from_props(TurnVersion, r, key="id") for r in self.story.nodes(_versions_of(turn_id))]

    def revert(self, campaign_id: str, turn_id: str, version_id: str) -> TurnVersion:
        """Bring an archived version back: its take selected, its proposals pending again and, while its
        checkpoint was not pruned, the world that went with it. The take it replaces is archived in turn.

        Raises:
            StoryNotFound: no such version of the turn.
            StoryInvalid: the version's take is the one selected already.
        """
        turn = self._turn(campaign_id, turn_id)
        version = next((v for v in self.list(campaign_id, turn_id) if v.id == version_id), None)
        if version is None:
            raise StoryNotFound(f"no version {version_id!r} of turn {turn_id!r}")
        if version.take_id == turn.selected_take_id:
            raise StoryInvalid(f"version {version_id!r} is the take selected already")
        take = from_props(Take, self.story.node("Take", version.take_id), key="id")
        world = self._checkpoint_or_none(campaign_id, version.checkpoint_id)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[TurnVersion, dict[str, Any]]:
            props: dict[str, Any] = {}
            found = None
            if ctx.head is not None:
                found = queue_checkpoint(
                    ctx,
                    writes,
                    turn_id=ctx.head.id,
                    branch_id=ctx.campaign.active_branch_id,
                    depth=ctx.head_depth,
                    kind=WorldStateCheckpointKind.BEFORE_RESTORE,
                )
            current = self.story.turn(turn.id)
            self.queue_archive(ctx, writes, current, replaced_by=take.id, world=found.id if found else None)
            writes.extend(cypher.select_take(turn.id, take.id, take.narration, TurnStatus.ACCEPTED.value))
            if version.proposal_ids:
                writes.add(*_reinstate(version.proposal_ids))
            now = utc_now()
            writes.add(*_set_version(version.id, {"reverted_at": now.isoformat()}))
            if world is not None:
                props = self.checkpoints.queue_restore(ctx, writes, world)
            return version.validated_copy(reverted_at=now), props

        return self.core.mutate(campaign_id, "revert", build)

    def _checkpoint_or_none(self, campaign_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        if checkpoint_id is None:
            return None
        try:
            return self.checkpoints.get(campaign_id, checkpoint_id)
        except StoryNotFound:
            return None  # pruned: the take comes back, the world stays as it is

    def _turn(self, campaign_id: str, turn_id: str) -> Turn:
        turn = self.story.turn(turn_id)
        if turn.campaign_id != campaign_id:
            raise StoryNotFound(f"no turn {turn_id!r} in campaign {campaign_id!r}")
        return turn
