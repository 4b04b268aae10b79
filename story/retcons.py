"""Retcons of every kind: facts, happenings, entities and relationships, with what rests on them listed first.

A retcon supersedes; canon is never deleted. It is the GM's ruling, written directly (not proposed), in one
transaction guarded by the campaign's version (:meth:`story.core.StoryCore.mutate`), after a world-state
checkpoint (``before_ooc_mutation``) that restoring brings back the world before it:

- a fact: ``fact_invalidated`` (retconned), with a new value or object a ``fact_added`` that replaces it;
- a happening: ``record_retconned``, with a retelling an ``event_recorded`` it points at (the new version);
- an entity or a relationship: ``record_retconned``.

What rests on the record (:meth:`Retcons.dependents`: facts about an entity or naming it, facts that follow
from a fact, relationships of an entity, happenings citing it) is refused, retconned with it or kept
(:class:`~schemas.retcons.DependentsPolicy`). The retconned nodes are marked in the same transaction
(:func:`story.outcomes.mark_retconned`: ``canon_level`` retconned, ``status`` superseded for a fact or a
happening, who and where): the stored node and the export say so. The fold remains the truth per branch.
The recall index follows the graph afterwards (the story service reconciles it: :mod:`story.recall_sync`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from schemas.common import Authority, FactStatus
from schemas.events import BaseStateEvent, EventRecorded, FactAdded, FactInvalidated, FactInvalidation
from schemas.retcons import (
    Dependent,
    Dependents,
    DependentsPolicy,
    HappeningRetelling,
    RecordKind,
    RecordRetconAnswer,
    RecordRetconned,
)
from schemas.story import WorldStateCheckpointKind
from story.campaigns import write_branch
from story.checkpoints import Checkpoints
from story.errors import StoryInvalid, StoryNotFound
from story.graph import CampaignContext, Writes
from story.outcomes import mark_retconned, record_words
from story.state import WorldState
from story.summary_amends import queue_amendments, retold_records

if TYPE_CHECKING:
    from story.scenes import Scenes

log = structlog.get_logger(__name__)

RETCONNED = "retconned"
_LABELS = {
    RecordKind.FACT: "Fact",
    RecordKind.HAPPENING: "Happening",
    RecordKind.ENTITY: "Entity",
    RecordKind.RELATIONSHIP: "Relationship",
}


def _current(record: dict[str, Any]) -> bool:
    return record.get("canon_level") != RETCONNED and record.get("status") != FactStatus.SUPERSEDED.value


def record_kind(state: WorldState, record_id: str) -> RecordKind | None:
    """Which kind of canon record ``record_id`` is on this line (None: none)."""
    for kind, table in (
        (RecordKind.FACT, state.facts),
        (RecordKind.HAPPENING, state.happenings),
        (RecordKind.ENTITY, state.entities),
        (RecordKind.RELATIONSHIP, state.relationships),
    ):
        if record_id in table:
            return kind
    return None


def dependents_in(state: WorldState, kind: RecordKind, record_id: str) -> list[Dependent]:
    """The current canon that rests on a record, in a stable order (facts, relationships, happenings)."""
    out: list[Dependent] = []

    def add(dep_kind: RecordKind, dep_id: str, why: str) -> None:
        if all(d.id != dep_id for d in out):
            out.append(Dependent(kind=dep_kind, id=dep_id, why=why, text=record_words(state, dep_kind, dep_id)))

    current_facts = sorted((fid, f) for fid, f in state.facts.items() if _current(f))
    if kind is RecordKind.FACT:
        frontier = [record_id]
        while frontier:  # facts that follow from it, transitively
            at = frontier.pop()
            for fid, fact in current_facts:
                if at in fact["depends_on"] and fid != record_id and all(d.id != fid for d in out):
                    add(RecordKind.FACT, fid, f"follows from fact {at!r}")
                    frontier.append(fid)
    elif kind is RecordKind.ENTITY:
        for fid, fact in current_facts:
            if fact["subject"] == record_id:
                add(RecordKind.FACT, fid, "a fact about it")
            elif fact["object"] == record_id:
                add(RecordKind.FACT, fid, "a fact naming it")
        for rid, rel in sorted(state.relationships.items()):
            if _current(rel) and rel["status"] == "active" and record_id in (rel["source"], rel["target"]):
                add(RecordKind.RELATIONSHIP, rid, "a relationship of it")
        for hid, hap in sorted(state.happenings.items(), key=lambda kv: kv[1]["seq"]):
            if _current(hap) and (record_id in hap["participants"] or hap["location_id"] == record_id):
                add(RecordKind.HAPPENING, hid, "a happening citing it")
    return out


class Retcons:
    """Dependents and retcons of every kind; ``scenes`` commits their events as :meth:`Scenes.retcon` does."""

    def __init__(self, scenes: Scenes) -> None:
        self.scenes = scenes
        self.core = scenes.core
        self.story = scenes.story

    def _found(self, state: WorldState, campaign_id: str, record_id: str) -> RecordKind:
        kind = record_kind(state, record_id)
        if kind is None:
            raise StoryNotFound(f"no canon record {record_id!r} on this branch of campaign {campaign_id!r}")
        return kind

    def dependents(self, campaign_id: str, record_id: str) -> Dependents:
        """What current canon on the head's line rests on a record (read before a retcon of it).

        Raises:
            StoryNotFound: no fact, happening, entity or relationship ``record_id`` on the head's line.
        """
        state = self.core.fold(campaign_id)
        kind = self._found(state, campaign_id, record_id)
        return Dependents(
            campaign_id=campaign_id,
            record=kind,
            record_id=record_id,
            text=record_words(state, kind, record_id),
            dependents=dependents_in(state, kind, record_id),
        )

    def retcon(
        self,
        campaign_id: str,
        record_id: str,
        *,
        reason: str,
        dependents: DependentsPolicy = DependentsPolicy.REFUSE,
        retelling: HappeningRetelling | None = None,
        value: Any = None,
        object_entity_id: str | None = None,
    ) -> RecordRetconAnswer:
        """Retcon a canon record of any kind on the head's branch (the GM's ruling; see the module's doc).

        Raises:
            StoryNotFound: no such record on the head's line.
            StoryInvalid: it is retconned already; current canon rests on it and ``dependents`` is refuse; a
                retelling for what is not a happening, or a value for what is not a fact.
        """
        ctx = self.story.context(campaign_id)
        # checked whole before the checkpoint it takes first: a refused retcon writes nothing
        head = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
        self._plan(ctx, head, record_id, reason, dependents, retelling, value, object_entity_id)
        if ctx.head is not None:
            Checkpoints(self.core).create(
                campaign_id, f"before retcon of {record_id}", kind=WorldStateCheckpointKind.BEFORE_OOC_MUTATION
            )

        def build(ctx: CampaignContext, writes: Writes) -> tuple[RecordRetconAnswer, dict[str, Any]]:
            state = self.core.snapshots.state_at(ctx.id, ctx.lineage()).state
            plan = self._plan(ctx, state, record_id, reason, dependents, retelling, value, object_entity_id)
            branch_id, fork = write_branch(ctx, writes)
            retold = retold_records(self.story, ctx.id, state, plan.events)  # the words of the world before it
            props = self.scenes._commit_events(
                ctx,
                writes,
                plan.events,
                authority=Authority.GM,
                branch_id=branch_id,
                scene_id=None,
                what="the retcon",
                state=state,
            )
            mark_writes(ctx, writes, plan.events, branch_id=branch_id, reason=reason)
            queue_amendments(self.story, ctx, writes, retold, events=plan.events, branch_id=branch_id)
            answer = RecordRetconAnswer(
                record=plan.kind,
                record_id=record_id,
                replaced_by=plan.replaced_by,
                retconned_with=plan.with_it,
                version=ctx.version + 1,
            )
            return answer, {**fork, **props}

        answer: RecordRetconAnswer = self.core.mutate(campaign_id, "retcon", build)
        log.info(
            "record_retconned",
            campaign_id=campaign_id,
            record=answer.record.value,
            record_id=record_id,
            replaced_by=answer.replaced_by,
            retconned_with=answer.retconned_with,
        )
        return answer

    def _plan(
        self,
        ctx: CampaignContext,
        state: WorldState,
        record_id: str,
        reason: str,
        policy: DependentsPolicy,
        retelling: HappeningRetelling | None,
        value: Any,
        object_entity_id: str | None,
    ) -> _Plan:
        kind = self._found(state, ctx.id, record_id)
        table = {
            RecordKind.FACT: state.facts,
            RecordKind.HAPPENING: state.happenings,
            RecordKind.ENTITY: state.entities,
            RecordKind.RELATIONSHIP: state.relationships,
        }[kind]
        if table[record_id].get("canon_level") == RETCONNED:
            raise StoryInvalid(f"{kind.value} {record_id!r} is already retconned on this branch")
        if retelling is not None and kind is not RecordKind.HAPPENING:
            raise StoryInvalid(f"a retelling replaces a happening; {record_id!r} is a {kind.value}")
        if (value is not None or object_entity_id is not None) and kind is not RecordKind.FACT:
            raise StoryInvalid(f"a new value or object replaces a fact; {record_id!r} is a {kind.value}")
        deps = dependents_in(state, kind, record_id)
        if deps and policy is DependentsPolicy.REFUSE:
            listed = "; ".join(f"{d.kind.value} {d.id} ({d.why}: {d.text})" for d in deps)
            raise StoryInvalid(
                f"current canon rests on {kind.value} {record_id!r}: {listed}. Retcon it with dependents 'retcon' "
                "(they are retconned with it) or 'keep' (they stay)"
            )
        turn = ctx.head.id if ctx.head else None
        plan = _Plan(kind)
        plan.record(state, kind, record_id, turn, reason, retelling=retelling, value=value, obj=object_entity_id)
        if policy is DependentsPolicy.RETCON:
            for d in deps:
                plan.record(state, d.kind, d.id, turn, f"rests on {kind.value} {record_id}, retconned: {reason}")
                plan.with_it.append(d.id)
        return plan


class _Plan:
    """The events of one retcon, and what it answers."""

    def __init__(self, kind: RecordKind) -> None:
        self.kind = kind
        self.events: list[BaseStateEvent] = []
        self.replaced_by: str | None = None
        self.with_it: list[str] = []

    def record(
        self,
        state: WorldState,
        kind: RecordKind,
        record_id: str,
        turn: str | None,
        reason: str,
        *,
        retelling: HappeningRetelling | None = None,
        value: Any = None,
        obj: str | None = None,
    ) -> None:
        """Queue the retcon of one record (the first one queued may carry its replacement)."""
        new: str | None = None
        if kind is RecordKind.FACT:
            old = state.facts[record_id]
            if value is not None or obj is not None:
                added = FactAdded(
                    turn_id=turn,
                    subject_entity_id=old["subject"],
                    predicate=old["predicate"],
                    value=value,
                    object_entity_id=obj,
                    authority=Authority.GM,
                    visibility=old.get("visibility"),
                    replaces=record_id,
                )
                new = added.fact_id
                self.events.append(added)
            self.events.append(
                FactInvalidated(
                    turn_id=turn,
                    fact_id=record_id,
                    invalidation=FactInvalidation.RETCONNED,
                    reason=reason,
                    superseded_by=new,
                )
            )
        else:
            if retelling is not None:
                old = state.happenings[record_id]
                fields = retelling.model_dump(exclude_unset=True)
                retold = EventRecorded(
                    turn_id=turn,
                    title=fields.get("title") or old["title"],
                    description=fields.get("description", old["description"]),
                    participant_entity_ids=fields.get("participant_entity_ids") or old["participants"],
                    location_entity_id=fields.get("location_entity_id", old["location_id"]),
                )
                new = retold.happening_id
                self.events.append(retold)
            self.events.append(
                RecordRetconned(turn_id=turn, record=kind, record_id=record_id, reason=reason, superseded_by=new)
            )
        if self.replaced_by is None:
            self.replaced_by = new


def mark_writes(
    ctx: CampaignContext, writes: Writes, events: list[BaseStateEvent], *, branch_id: str, reason: str
) -> None:
    """Queue the marks of a retcon's events on their nodes (:func:`story.outcomes.mark_retconned`): the record
    retconned, and what replaces it names it (``retcon_of``)."""
    for offset, event in enumerate(events):
        seq = ctx.event_seq + 1 + offset
        where = {"retconned_by": event.event_id, "retconned_on": branch_id, "retconned_seq": seq}
        if isinstance(event, FactInvalidated) and event.invalidation is FactInvalidation.RETCONNED:
            props = {"canon_level": RETCONNED, "status": FactStatus.SUPERSEDED.value, "retcon_reason": reason}
            if event.superseded_by:
                props["superseded_by"] = event.superseded_by
                writes.add(*mark_retconned("Fact", ctx.id, event.superseded_by, {"retcon_of": event.fact_id}))
            writes.add(*mark_retconned("Fact", ctx.id, event.fact_id, {**props, **where}))
        elif isinstance(event, RecordRetconned):
            props = {"canon_level": RETCONNED, "retcon_reason": event.reason}
            if event.record is RecordKind.HAPPENING:
                props["status"] = FactStatus.SUPERSEDED.value
            if event.superseded_by:
                props["superseded_by"] = event.superseded_by
                retold = {"retcon_of": event.record_id, "replaces": event.record_id}
                writes.add(*mark_retconned("Happening", ctx.id, event.superseded_by, retold))
            writes.add(*mark_retconned(_LABELS[event.record], ctx.id, event.record_id, {**props, **where}))
