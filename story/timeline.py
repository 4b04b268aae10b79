"""Turns and takes, the head (undo, redo), history, and the world as of any turn.

A turn is appended at the head; below the tip of the line it forks a new branch first. Its
narration is a take: a retry adds one and selects it, nothing is replaced. Undo and redo only move
the head. The world as of a turn is the fold of the canon events on its lineage, from the nearest
snapshot (:mod:`story.snapshots`); its typed view is cached, since turns without canon changes, the
common case in play, fold to the same view.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from schemas.story import (
    Campaign,
    InputMode,
    Memory,
    Speaker,
    SpeakerKind,
    Summary,
    Take,
    Turn,
    TurnStatus,
    WorldStateCheckpointKind,
    WorldStateView,
)
from stores.catalog import from_props
from story import cypher
from story.campaigns import write_branch
from story.checkpoints import Checkpoints, queue_checkpoint, queue_checkpoints
from story.context import TurnContext
from story.core import StoryCore, lineage_at, tip_turn_id
from story.errors import StoryInvalid, StoryNotFound
from story.graph import CampaignContext, Writes, anchored_on, node_props, snapshots_visible, turns_in_order
from story.lineage import Lineage, lineage_of
from story.live import LiveView, read_live
from story.memory import held
from story.references import check_speaker
from story.snapshots import StateAt
from story.state import WorldState
from story.versions import Versions

_VIEW_CACHE_SIZE = 64  # typed views of recent folds kept per service (a view of a large world costs ~30 ms)


class Timeline:
    """Turns, takes, the head, history and state."""

    def __init__(self, core: StoryCore, versions: Versions | None = None) -> None:
        self.core = core
        self.story = core.story
        self.versions = versions or Versions(core, Checkpoints(core))
        self.checkpoints = self.versions.checkpoints
        self._views: OrderedDict[tuple[Any, ...], WorldStateView] = OrderedDict()
        self._views_lock = threading.Lock()

    # -- turns and takes --------------------------------------------------------------------------

    def add_turn(
        self,
        campaign_id: str,
        text: str = "",
        *,
        input_mode: InputMode = InputMode.ACTION,
        speaker: Speaker | None = None,
        narration: str | None = None,
        ref: str | None = None,
        story_time: str | None = None,
    ) -> Turn:
        """Append a turn at the head. Below the tip of the line, this forks a new branch first.

        With ``narration``, the turn is recorded with its first take; without it, the turn is
        pending until :meth:`add_take` records the narration. The turn belongs to the scene active
        at the head when it is recorded, if any (a scene active on another branch is not this one's).

        Raises:
            InvalidReference: the speaker names an entity that is not a character or creature there.
        """

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Turn, dict[str, Any]]:
            if speaker is not None and speaker.entity_id is not None:  # a being of the campaign, there at the head
                check_speaker(self.core.snapshots.state_at(ctx.id, ctx.lineage()).state, speaker)
            scene_id = self.story.scene_at(ctx.lineage())
            branch_id, fork = write_branch(ctx, writes)
            parent = ctx.head
            turn = Turn(
                scene_id=scene_id,
                ref=ref,
                story_time=story_time,
                campaign_id=ctx.id,
                branch_id=branch_id,
                parent_turn_id=parent.id if parent else None,
                depth=ctx.head_depth + 1,
                input_mode=input_mode,
                speaker=speaker or Speaker(kind=SpeakerKind.PLAYER),
                text=text,
            )
            take = None
            if narration is not None:
                take = Take(turn_id=turn.id, index=0, narration=narration, selected=True)
                turn = turn.validated_copy(narration=narration, selected_take_id=take.id, status=TurnStatus.ACCEPTED)
            writes.add(*cypher.create_turn(node_props(turn, parent_uid=turn.parent_turn_id)))
            if parent is not None:
                writes.add(*cypher.link_nodes("Turn", "CHILD_OF", "Turn", [(turn.id, parent.id)]))
            if take is not None:
                writes.add(*cypher.create_nodes("Take", [node_props(take, campaign_id=ctx.id, turn_uid=turn.id)]))
                writes.add(*cypher.link_nodes("Take", "TAKE_OF", "Turn", [(take.id, turn.id)]))
            writes.add(*cypher.set_branch_tip(branch_id, turn.id, turn.depth))
            self._queue_boundaries(ctx, writes, turn, told=take is not None)
            return turn, {"head_turn_id": turn.id, "active_branch_id": branch_id, **fork}

        return self.core.mutate(campaign_id, "turn", build)

    def _queue_boundaries(self, ctx: CampaignContext, writes: Writes, turn: Turn, *, told: bool) -> None:
        """The automatic checkpoints of a turn as it is recorded (before and after its input, and after its
        narration when it comes with one), and the pruning of its branch's oldest: the story moved on."""
        kinds = [(WorldStateCheckpointKind.BEFORE_USER_INPUT, turn.depth - 1)]
        kinds.append((WorldStateCheckpointKind.AFTER_USER_INPUT, turn.depth))
        if told:
            kinds.append((WorldStateCheckpointKind.AFTER_CHARACTER_ROUND, turn.depth))
        self.checkpoints.queue_prune(ctx, writes, turn.branch_id, adding=len(kinds))
        queue_checkpoints(ctx, writes, turn_id=turn.id, branch_id=turn.branch_id, at=kinds)

    def get_turn(self, turn_id: str) -> Turn:
        return self.story.turn(turn_id)

    def add_take(self, turn_id: str, narration: str, *, generation: Any = None, select: bool = True) -> Take:
        """Record a narration of a turn as a new take (a retry adds one); nothing is replaced.

        A retry (any take after the first) archives the take it replaces as a turn version and marks the
        proposals still pending from it superseded (:mod:`story.versions`; the GM's stay): they were
        extracted from a narration that is no longer the one told. A revert brings a version back. The
        turn's ``after_character_round`` checkpoint is taken with the take.
        """
        turn = self.story.turn(turn_id)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Take, dict[str, Any]]:
            count = self.core.graph.run(*cypher.count_takes(turn_id))[0]["n"]
            take = Take(turn_id=turn_id, index=int(count), narration=narration, selected=select, generation=generation)
            writes.add(*cypher.create_nodes("Take", [node_props(take, campaign_id=ctx.id, turn_uid=turn_id)]))
            writes.add(*cypher.link_nodes("Take", "TAKE_OF", "Turn", [(take.id, turn_id)]))
            if count and select:
                # a regeneration: the replaced narration is archived, what it proposed no longer stands
                self.versions.queue_archive(ctx, writes, self.story.turn(turn_id), replaced_by=take.id)
            if select:
                writes.extend(cypher.select_take(turn_id, take.id, take.narration, TurnStatus.ACCEPTED.value))
            # told at the head (a retake's rewind may have forked there): the world of the head's branch
            at_head = ctx.head is not None and ctx.head.id == turn_id
            branch = ctx.campaign.active_branch_id if at_head else turn.branch_id
            kind = WorldStateCheckpointKind.AFTER_CHARACTER_ROUND
            queue_checkpoint(ctx, writes, turn_id=turn_id, branch_id=branch, depth=turn.depth, kind=kind)
            return take, {}

        return self.core.mutate(turn.campaign_id, "take", build)

    def select_take(self, turn_id: str, take_id: str) -> Take:
        """Make one take of a turn the selected one (the others stay). The take it replaces is archived as a turn
        version and what it proposed that is pending is superseded, as for a retake (:mod:`story.versions`)."""
        turn = self.story.turn(turn_id)
        # Another turn's take (perhaps another campaign's) answers exactly like a missing one: the
        # answer must not tell whether it exists, nor name the turn it belongs to.
        missing = StoryNotFound(f"no take {take_id!r} of turn {turn_id!r}")
        try:
            take = from_props(Take, self.story.node("Take", take_id), key="id")
        except StoryNotFound:
            raise missing from None
        if take.turn_id != turn_id:
            raise missing

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Take, dict[str, Any]]:
            current = self.story.turn(turn_id)
            if current.selected_take_id not in (None, take.id):  # the replaced take is archived, as a retake's is
                self.versions.queue_archive(ctx, writes, current, replaced_by=take.id)
            writes.extend(cypher.select_take(turn_id, take.id, take.narration, TurnStatus.ACCEPTED.value))
            return take.validated_copy(selected=True), {}

        return self.core.mutate(turn.campaign_id, "select_take", build)

    def takes(self, turn_id: str, *, include_archived: bool = False) -> list[Take]:
        """A turn's takes in the order they were made: the live ones (the one told and the alternatives still in
        play); with ``include_archived``, the ones the GM set aside too (each says ``archived`` and its
        disposition)."""
        takes = [from_props(Take, r, key="id") for r in self.story.nodes(cypher.takes_of(turn_id))]
        return takes if include_archived else [k for k in takes if not k.archived]

    # -- the head and history ---------------------------------------------------------------------

    def undo(self, campaign_id: str) -> Campaign:
        """Move the head back one turn. The undone turn stays, and redo brings it back."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            if ctx.head is None:
                raise StoryInvalid("nothing to undo: the head is before the first turn")
            parent = ctx.head.parent_turn_id
            writes.moves_head = True
            return ctx.campaign.validated_copy(head_turn_id=parent), {"head_turn_id": parent}

        return self.core.mutate(campaign_id, "undo", build)

    def redo(self, campaign_id: str) -> Campaign:
        """Move the head forward one turn along the active branch's line."""

        def build(ctx: CampaignContext, writes: Writes) -> tuple[Campaign, dict[str, Any]]:
            active = ctx.campaign.active_branch_id
            end = ctx.line_end(active)
            target = ctx.head_depth + 1
            if target > end:
                raise StoryInvalid("nothing to redo: the head is at the tip of the branch")
            line = lineage_of(ctx.lines, active, end)
            branch = line.branch_at(target, ctx.lines)
            turn = self.story.turn_at(branch, target) if branch else None
            if turn is None:
                raise StoryNotFound(f"no turn at depth {target} on branch {active!r}")
            writes.moves_head = True
            return ctx.campaign.validated_copy(head_turn_id=turn.id), {"head_turn_id": turn.id}

        return self.core.mutate(campaign_id, "redo", build)

    def history(
        self,
        campaign_id: str,
        *,
        turn_id: str | None = None,
        branch_id: str | None = None,
        last: int | None = None,
    ) -> list[Turn]:
        """The turns from the root to a position, oldest first; ``last`` keeps the newest.

        The position is the head; with ``branch_id``, that branch's tip (its whole line); with
        ``turn_id``, that turn (seen from ``branch_id`` when both are given).
        """
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, turn_id, branch_id)
        if lineage.depth < 0:
            return []
        return self.story.turns_on(lineage, min_depth=_first_depth(lineage, last))

    # -- state ------------------------------------------------------------------------------------

    def state(self, campaign_id: str, *, turn_id: str | None = None, branch_id: str | None = None) -> WorldStateView:
        """The world at a position: the head; a branch's tip (``branch_id``); a turn on its own branch
        (``turn_id``), or seen from ``branch_id``. The view names the position's branch and turn."""
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, turn_id, branch_id)
        built = self.core.snapshots.state_at(campaign_id, lineage)
        at: str | None = turn_id
        if turn_id is None:
            at = tip_turn_id(ctx, branch_id) if branch_id is not None else ctx.head.id if ctx.head else None
        return self._view(ctx, lineage, built, at)

    def _view(self, ctx: CampaignContext, lineage: Lineage, built: StateAt, at: str | None) -> WorldStateView:
        """The typed view of a fold, as of turn ``at``."""
        # The same snapshot, the same last event and the same number of events after it on the same
        # branch are the same fold: its typed view (the costly part on a large world) is reused, as
        # of this turn. Turns without canon changes, the common case in play, all hit.
        key = (ctx.id, lineage.branch_id, built.snapshot_id, built.state.last_seq, built.replayed)
        with self._views_lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
        if view is None:
            view = built.state.view(
                world_id=ctx.campaign.world_id, campaign_id=ctx.id, branch_id=lineage.branch_id, turn_id=at
            )
            if view.active_scene_id is not None and self.story.active_scene(built.state) is None:
                view = view.model_copy(update={"active_scene_id": None})  # a scene that ended before events said so
            with self._views_lock:
                self._views[key] = view
                while len(self._views) > _VIEW_CACHE_SIZE:
                    self._views.popitem(last=False)
        return view if view.turn_id == at else view.model_copy(update={"turn_id": at})

    def world_state(self, campaign_id: str, *, turn_id: str | None = None) -> WorldState:
        """The raw fold (for the gate, the narrator's context and tests)."""
        return self.core.fold(campaign_id, turn_id=turn_id)

    def happenings(
        self, campaign_id: str, *, about: str | None = None, before_turn: str | None = None
    ) -> list[dict[str, Any]]:
        """Canon happenings on the head's line, oldest first (older than ``before_turn`` if given)."""
        ctx = self.story.context(campaign_id)
        state = self.core.snapshots.state_at(campaign_id, ctx.lineage()).state
        cutoff = None
        if before_turn is not None:
            cutoff = self.story.turn(before_turn).depth
        out = []
        for hid, h in sorted(state.happenings.items(), key=lambda kv: kv[1]["seq"]):
            if about is not None and about not in h["participants"] and about != h["location_id"]:
                continue
            if cutoff is not None and h["turn_id"] and self.story.turn(h["turn_id"]).depth >= cutoff:
                continue
            out.append({"id": hid, **h})
        return out

    def live_world(self, campaign_id: str) -> LiveView:
        """The materialized world at the head, as the graph holds it (see :mod:`story.live`)."""
        return read_live(self.core.graph, campaign_id)

    # -- what a turn reads ------------------------------------------------------------------------

    def turn_context(self, campaign_id: str, *, turn: Turn, recent: int) -> TurnContext:
        """Everything a turn reads before the model runs (see :class:`~story.context.TurnContext`).

        The same values as ``get_campaign``, ``axioms``, ``state``, ``history`` (the ``recent`` turns
        before ``turn``), ``memories`` and ``summaries``, read in three round trips instead of about two
        dozen: the campaign with the turn's parent and the world's axioms, the records on the lineages,
        the events after the snapshot.
        """
        ctx, parent, axioms = self.story.turn_reads(campaign_id, turn.parent_turn_id)
        head = ctx.lineage()
        # recent=0 asks for no turn verbatim (history's last=0 would mean all of them)
        back = lineage_at(ctx, parent) if parent is not None and recent > 0 else None
        first = _first_depth(back, recent) if back is not None else 0
        past = self.story.past(campaign_id, head, back, min_depth=first).by_label
        built = self.core.snapshots.state_at(campaign_id, head, candidates=snapshots_visible(past["Snapshot"], head))
        return TurnContext(
            campaign=ctx.campaign,
            axioms=axioms,
            state=self._view(ctx, head, built, ctx.head.id if ctx.head else None),
            recent=turns_in_order(past["Turn"]) if back is not None else [],
            memories=[from_props(Memory, r, key="id") for r in held(anchored_on(past["Memory"], head))],
            summaries=[from_props(Summary, r, key="id") for r in anchored_on(past["Summary"], head)],
        )


def _first_depth(lineage: Lineage, last: int | None) -> int:
    """The depth of the oldest of the ``last`` turns up to the lineage's position (all: 0)."""
    return max(0, lineage.depth - last + 1) if last else 0
