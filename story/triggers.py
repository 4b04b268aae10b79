"""Triggers and their activations: conditions on the state that fire a proposal or a narrator note, per branch.

A trigger (:class:`schemas.triggers.Trigger`) is the GM's: a node ``Trigger`` of the campaign holding its JSON.
When a turn is recorded, and when a scene ends, :meth:`Triggers.evaluate` reads the campaign's active triggers
(one query) against the state fold at that turn (:mod:`story.snapshots`: the snapshot and the few events after
it, what the turn computes anyway; no scan of history). A trigger whose conditions all hold fires unless it
already fired on this line: an activation whose turn is on the turn's lineage (a fork, or an undo past the
firing, does not carry it); a repeatable one fires at most once per turn and cause.

What a firing makes: a note (kept on the activation; :meth:`Triggers.notes_for` gives the narrator of the next
turn its text) or a proposal of typed state events to the scene active on the line, with the authority the
trigger declares, judged by the gate at the scene's end like any other (with no active scene the activation
says so and proposes nothing).

Crash safety: an activation's id is derived from the trigger, the turn and the cause, and its proposal's id
from the activation's. The activation is written first, pending while its proposal is to be made; every
evaluation first finishes the pending ones of the campaign (:meth:`Triggers.finish_pending`: a proposal made
before a crash is found by its id, not made twice), and an activation on the line stops the trigger firing
again. Evaluation runs after the turn's (or the scene end's) own transaction; a crash between the two leaves
the trigger to fire at the next turn or scene end where it still holds (that turn is then recorded).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import TypeAdapter

from schemas.campaign import Turn
from schemas.common import content_id
from schemas.errors import NotFound, StoreError
from schemas.triggers import (
    Activation,
    Compare,
    Condition,
    FiredBy,
    NoteAction,
    ProposalAction,
    Trigger,
    TriggerCreate,
    TriggerUpdate,
)
from story.errors import StoryNotFound
from story.state import WorldState

if TYPE_CHECKING:
    from story.scenes import Scenes

log = structlog.get_logger(__name__)

_CONDITION: TypeAdapter[Any] = TypeAdapter(Condition)


def holds(condition: Any, state: WorldState, turn: Turn) -> bool:
    """Whether one condition holds in ``state`` at ``turn``."""
    on = condition.on
    if on == "turn_count":
        return bool(turn.depth + 1 >= condition.at_least)
    if on == "story_time":
        return turn.story_time is not None and turn.story_time >= condition.at_least
    if on == "thread_status":
        thread = state.threads.get(condition.thread_id)
        return thread is not None and thread["status"] == condition.status.value
    entity = state.entities.get(condition.entity_id)
    if entity is None:
        return False
    if on == "entity_status":
        return bool(entity["status"] == condition.status.value)
    if on == "entity_at":
        return bool(entity["location_id"] == condition.location_entity_id)
    value, want = entity["attributes"].get(condition.attribute), condition.value
    if condition.compare is Compare.EQ:
        return bool(value == want)
    if not isinstance(value, int | float) or not isinstance(want, int | float):
        return False
    return value >= want if condition.compare is Compare.GTE else value <= want


#: Conditions read from the turn alone (not from the state).
_OF_TURN = frozenset({"turn_count", "story_time"})
_NO_STATE = WorldState()


def _trigger_of(row: dict[str, Any]) -> Trigger:
    return Trigger.model_validate_json(row["doc"])


class Triggers:
    """The GM's triggers of a campaign, their evaluation at a turn or a scene end, and their activations."""

    def __init__(self, scenes: Scenes) -> None:
        self.scenes = scenes
        self.core = scenes.core
        self.story = scenes.story
        self.graph = scenes.core.graph
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    # -- the GM's records ---------------------------------------------------------------------------

    def create(self, campaign_id: str, spec: TriggerCreate) -> Trigger:
        """Declare a trigger. Raises StoryNotFound: no such campaign."""
        self.story.context(campaign_id)  # the campaign exists
        trigger = Trigger(campaign_id=campaign_id, **spec.model_dump())
        self.graph.run(
            "CREATE (t:Trigger {uid: $u, campaign_id: $c, doc: $d})",
            {"u": trigger.id, "c": campaign_id, "d": trigger.model_dump_json()},
        )
        log.info("trigger_created", campaign_id=campaign_id, trigger_id=trigger.id, name=trigger.name)
        return trigger

    def get(self, campaign_id: str, trigger_id: str) -> Trigger:
        rows = self.graph.run(
            "MATCH (t:Trigger {uid: $u}) WHERE t.campaign_id = $c RETURN t.doc AS doc",
            {"u": trigger_id, "c": campaign_id},
        )
        if not rows:
            raise StoryNotFound(f"no trigger {trigger_id!r} in campaign {campaign_id!r}")
        return _trigger_of(rows[0])

    def of(self, campaign_id: str) -> list[Trigger]:
        self.story.context(campaign_id)
        rows = self.graph.run("MATCH (t:Trigger) WHERE t.campaign_id = $c RETURN t.doc AS doc", {"c": campaign_id})
        return sorted((_trigger_of(r) for r in rows), key=lambda t: (t.created_at, t.id))

    def update(self, campaign_id: str, trigger_id: str, change: TriggerUpdate) -> Trigger:
        """Change a trigger's fields (its activations stay). Raises StoryNotFound: no such trigger."""
        trigger = self.get(campaign_id, trigger_id)
        fields = {k: v for k, v in change.model_dump(exclude_unset=True).items() if v is not None}
        trigger = Trigger.model_validate({**trigger.model_dump(), **fields})
        self.graph.run("MATCH (t:Trigger {uid: $u}) SET t.doc = $d", {"u": trigger_id, "d": trigger.model_dump_json()})
        log.info("trigger_updated", campaign_id=campaign_id, trigger_id=trigger_id, fields=sorted(fields))
        return trigger

    def delete(self, campaign_id: str, trigger_id: str) -> Trigger:
        """Remove a trigger (its activations stay, as the record of what it did)."""
        trigger = self.get(campaign_id, trigger_id)
        self.graph.run("MATCH (t:Trigger {uid: $u}) DELETE t", {"u": trigger_id})
        log.info("trigger_deleted", campaign_id=campaign_id, trigger_id=trigger_id)
        return trigger

    def activations(
        self, campaign_id: str, *, trigger_id: str | None = None, branch_id: str | None = None
    ) -> list[Activation]:
        """The firings, oldest first, optionally of one trigger or on one branch."""
        self.story.context(campaign_id)
        rows = self.graph.run(
            "MATCH (a:TriggerActivation) WHERE a.campaign_id = $c RETURN a.doc AS doc", {"c": campaign_id}
        )
        found = [Activation.model_validate_json(r["doc"]) for r in rows]
        found = [
            a
            for a in found
            if (trigger_id is None or a.trigger_id == trigger_id) and (branch_id is None or a.branch_id == branch_id)
        ]
        return sorted(found, key=lambda a: (a.fired_at, a.id))

    # -- evaluation ---------------------------------------------------------------------------------

    def evaluate(self, turn: Turn, fired_by: FiredBy) -> list[Activation]:
        """Fire the campaign's active triggers whose conditions hold at ``turn`` (see the module's doc)."""
        campaign_id = turn.campaign_id
        rows = self.graph.run("MATCH (t:Trigger) WHERE t.campaign_id = $c RETURN t.doc AS doc", {"c": campaign_id})
        triggers = [t for t in (_trigger_of(r) for r in rows) if t.active]
        with self._locks[campaign_id]:
            self.finish_pending(campaign_id)
            if not triggers:
                return []
            # the turn's own conditions first: a trigger waiting on them needs no fold of the state
            near = [t for t in triggers if all(holds(c, _NO_STATE, turn) for c in t.conditions if c.on in _OF_TURN)]
            if not near:
                return []
            ctx = self.story.context(campaign_id)
            lineage = self.core.lineage_for(ctx, turn.id, None)
            state = self.core.snapshots.state_at(campaign_id, lineage).state
            due = [t for t in near if all(holds(c, state, turn) for c in t.conditions)]
            if not due:
                return []
            fired_here = self._fired_on(campaign_id, [t.id for t in due], lineage)
            made = []
            for trigger in due:
                key = f"{trigger.id}|{turn.id}|{fired_by.value}"
                if (trigger.id, key) in fired_here or (
                    not trigger.repeatable and trigger.id in {t for t, _ in fired_here}
                ):
                    continue
                made.append(self._fire(trigger, turn, fired_by, content_id("act", key)))
                fired_here.add((trigger.id, key))
            return made

    def _fired_on(self, campaign_id: str, trigger_ids: list[str], lineage: Any) -> set[tuple[str, str]]:
        """(trigger, key) of the activations of these triggers whose turn is on ``lineage``."""
        rows = self.graph.run(
            "MATCH (a:TriggerActivation) WHERE a.campaign_id = $c AND a.trigger_id IN $t "
            "RETURN a.trigger_id AS t, a.key AS k, a.turn_branch_id AS b, a.depth AS d",
            {"c": campaign_id, "t": trigger_ids},
        )
        return {(r["t"], r["k"]) for r in rows if lineage.contains(r["b"], int(r["d"]))}

    def _fire(self, trigger: Trigger, turn: Turn, fired_by: FiredBy, activation_id: str) -> Activation:
        """Record the firing, then make what it makes: the activation is written first, pending while its
        proposal is to be made (the proposal's id is fixed on it), so a crash at any moment leaves either no
        firing (the trigger fires at the next evaluation) or one that is finished later (:meth:`finish_pending`)."""
        action = trigger.action
        activation = Activation(
            id=activation_id,
            trigger_id=trigger.id,
            campaign_id=turn.campaign_id,
            branch_id=self.story.context(turn.campaign_id).campaign.active_branch_id,
            turn_id=turn.id,
            fired_by=fired_by,
            note=action.text if isinstance(action, NoteAction) else None,
            proposal_id=content_id("prop", activation_id) if isinstance(action, ProposalAction) else None,
        )
        self.graph.run(
            "CREATE (a:TriggerActivation {uid: $u, campaign_id: $c, trigger_id: $t, key: $k, turn_branch_id: $b, "
            "depth: $d, turn_id: $turn, doc: $doc, action: $action, pending: $pending})",
            {
                "u": activation.id,
                "c": turn.campaign_id,
                "t": trigger.id,
                "k": f"{trigger.id}|{turn.id}|{fired_by.value}",
                "b": turn.branch_id,
                "d": turn.depth,
                "turn": turn.id,
                "doc": activation.model_dump_json(),
                "action": action.model_dump_json(),
                "pending": isinstance(action, ProposalAction),
            },
        )
        log.info(
            "trigger_fired",
            campaign_id=turn.campaign_id,
            trigger_id=trigger.id,
            activation_id=activation.id,
            turn_id=turn.id,
            branch_id=activation.branch_id,
            fired_by=fired_by.value,
            action=action.kind,
        )
        if isinstance(action, ProposalAction):
            activation = self._complete(activation, action)
        return activation

    def finish_pending(self, campaign_id: str) -> int:
        """Make the proposals of firings a crash cut short (the same ids: found, not made twice). Returns how many."""
        rows = self.graph.run(
            "MATCH (a:TriggerActivation) WHERE a.campaign_id = $c AND a.pending = true "
            "RETURN a.doc AS doc, a.action AS action",
            {"c": campaign_id},
        )
        for row in rows:
            activation = Activation.model_validate_json(row["doc"])
            self._complete(activation, ProposalAction.model_validate_json(row["action"]))
        return len(rows)

    def _complete(self, activation: Activation, action: ProposalAction) -> Activation:
        try:
            made, skipped = self._propose(activation, action)
        except StoreError as exc:  # the scene refuses it (a malformed event for this world): the GM is told
            made, skipped = None, f"the proposal was refused: {exc}"
            log.warning(
                "trigger_failed", campaign_id=activation.campaign_id, trigger_id=activation.trigger_id, error=str(exc)
            )
        done = activation.model_copy(update={"proposal_id": made, "skipped": skipped})
        self.graph.run(
            "MATCH (a:TriggerActivation {uid: $u}) SET a.doc = $doc, a.pending = false",
            {"u": activation.id, "doc": done.model_dump_json()},
        )
        return done

    def _propose(self, activation: Activation, action: ProposalAction) -> tuple[str | None, str | None]:
        """The proposal a firing makes, with the id its activation fixed (found rather than made twice)."""
        proposal_id = activation.proposal_id or content_id("prop", activation.id)
        try:
            return self.scenes.get_proposal(proposal_id).id, None
        except NotFound:
            pass
        scene = self.scenes.active_scene(activation.campaign_id, turn_id=activation.turn_id)
        if scene is None:
            return None, "no scene is active on this line: nothing to propose to"
        events = [json.loads(e.model_dump_json()) for e in action.events]
        proposal = self.scenes.propose(
            scene.id,
            id=proposal_id,
            type="state_change",
            content={"events": events},
            authority=action.authority,
            confidence=action.confidence,
            turn_id=activation.turn_id,
            proposed_by=f"trigger:{activation.trigger_id}",
        )
        return proposal.id, None

    def notes_for(self, turn: Turn) -> list[str]:
        """The notes the narrator of ``turn`` reads: those fired when it was recorded, and at a scene end at its
        parent (the turn before it on the line)."""
        rows = self.graph.run(
            "MATCH (a:TriggerActivation) WHERE a.campaign_id = $c AND a.turn_id IN $t RETURN a.doc AS doc",
            {"c": turn.campaign_id, "t": [turn.id, *([turn.parent_turn_id] if turn.parent_turn_id else [])]},
        )
        found = sorted((Activation.model_validate_json(r["doc"]) for r in rows), key=lambda a: (a.fired_at, a.id))
        return [
            a.note
            for a in found
            if a.note
            and (
                (a.turn_id == turn.id and a.fired_by is FiredBy.TURN)
                or (a.turn_id == turn.parent_turn_id and a.fired_by is FiredBy.SCENE_END)
            )
        ]
