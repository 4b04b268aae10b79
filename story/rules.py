"""Deterministic semantic rules for typed state events, checked before anything commits.

The schema (pydantic) already refused malformed events; these rules check an event against the
world as it stands at that point on this branch, one event after another, so an event may rely
on one earlier in the same batch (create an entity, then move it). Each violation is an
:class:`~schemas.story.EventIssue` whose ``code`` names the rule and whose message names the event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from schemas.common import EntityKind, FactStatus
from schemas.events import BaseStateEvent
from schemas.story import EventIssue, RelationshipStatus, ThreadStatus
from story.state import INERT_STATUSES, WorldState


class Rule(StrEnum):
    """The rules, by the code an issue carries."""

    UNKNOWN_ENTITY = "unknown_entity"  # a referenced entity does not exist here, at this point
    DUPLICATE_ID = "duplicate_id"  # a created thing's id is taken
    INERT_ACTOR = "inert_actor"  # a dead or destroyed entity acts without being brought back
    NOT_A_PLACE = "not_a_place"  # something is located in an entity that is not a place
    ONE_PLACE = "one_place"  # one entity put in two places at the same turn
    ONE_HOLDER = "one_holder"  # one item given to two holders at the same turn
    CONTAINMENT_CYCLE = "containment_cycle"  # a holds b holds a; a is in b is in a
    RELATIONSHIP_NOT_ACTIVE = "relationship_not_active"  # ending a relationship that does not exist
    UNKNOWN_FACT = "unknown_fact"  # invalidating / replacing / depending on a fact that does not exist
    FACT_NOT_CURRENT = "fact_not_current"  # invalidating or replacing a fact already superseded
    UNKNOWN_THREAD = "unknown_thread"
    THREAD_NOT_OPEN = "thread_not_open"
    NOT_NUMERIC = "not_numeric"  # incrementing an attribute that holds no number
    SCENE_NOT_ACTIVE = "scene_not_active"  # ending a scene that is not the active one here
    UNKNOWN_RECORD = "unknown_record"  # retconning a happening or relationship that does not exist here
    RECORD_NOT_CURRENT = "record_not_current"  # retconning a record already retconned


RETCONNED = "retconned"
"""The canon level of a record that never was (schemas.common.CanonLevel.RETCONNED)."""

#: Kinds of entity something can be *in*.
PLACE_KINDS = frozenset({EntityKind.LOCATION.value, EntityKind.STRUCTURE.value, EntityKind.VEHICLE.value})


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of checking a batch: the issues, and the state with the good events applied."""

    issues: list[EventIssue]
    state: WorldState
    accepted: list[int]  # indexes of the events that passed and were applied


def check_events(
    state: WorldState,
    events: Sequence[BaseStateEvent],
    *,
    first_seq: int = 0,
    authority: str | None = None,
    in_place: bool = False,
) -> Checked:
    """Check ``events`` in order against ``state``, applying each one that passes.

    Args:
        state: the world before the events (not modified unless ``in_place``).
        events: schema-valid events, in the order they would commit.
        first_seq: the commit sequence number the first event would get.
        authority: the default authority of facts the events add.
        in_place: fold into ``state`` itself rather than a copy (the caller owns it).
    """
    work = state if in_place else state.copy()
    issues: list[EventIssue] = []
    accepted: list[int] = []
    placed: dict[tuple[str | None, str], str] = {}  # (turn, entity) -> place set at that turn
    held: dict[tuple[str | None, str], str | None] = {}  # (turn, item) -> holder set at that turn
    for index, event in enumerate(events):
        data = event.model_dump(mode="json")
        problems = list(_problems(work, data, placed, held))
        if problems:
            for rule, message in problems:
                issues.append(
                    EventIssue(
                        event_index=index,
                        event_id=event.event_id,
                        code=rule.value,
                        message=f"event {index} ({data['kind']} {event.event_id}): {message}",
                    )
                )
            continue
        work.apply(data, seq=first_seq + len(accepted), authority=authority)
        accepted.append(index)
    return Checked(issues=issues, state=work, accepted=accepted)


class _Problems:
    """The problems found with one event, and the two checks most rules share."""

    def __init__(self, state: WorldState) -> None:
        self.state = state
        self.ents = state.entities
        self.out: list[tuple[Rule, str]] = []

    def add(self, rule: Rule, message: str) -> None:
        self.out.append((rule, message))

    def need(self, entity_id: str | None, role: str) -> bool:
        """Whether the entity exists (or none is named); a problem when it does not."""
        if entity_id is None:
            return True
        if entity_id not in self.ents:
            self.add(Rule.UNKNOWN_ENTITY, f"{role} {entity_id!r} does not exist on this branch at this point")
            return False
        if self.ents[entity_id].get("canon_level") == RETCONNED:
            self.add(Rule.UNKNOWN_ENTITY, f"{role} {entity_id!r} was retconned on this branch: it never was")
            return False
        return True

    def alive(self, entity_id: str | None, role: str) -> None:
        """A problem when the entity is dead or destroyed and so cannot act."""
        if entity_id is not None and entity_id in self.ents and self.ents[entity_id]["status"] in INERT_STATUSES:
            status = self.ents[entity_id]["status"]
            self.add(
                Rule.INERT_ACTOR,
                f"{role} {entity_id!r} is {status} and cannot act; "
                "bring it back first (set_entity_status) if the story allows",
            )


def _problems(
    state: WorldState,
    e: dict[str, Any],
    placed: dict[tuple[str | None, str], str],
    held: dict[tuple[str | None, str], str | None],
) -> list[tuple[Rule, str]]:
    problems = _Problems(state)
    kind = e["kind"]
    if kind in ("entity_created", "set_entity_status", "set_entity_attribute"):
        _entity_problems(problems, e)
    elif kind in ("fact_added", "fact_invalidated"):
        _fact_problems(problems, e)
    elif kind in ("current_location_set", "possession_set"):
        _placement_problems(problems, e, placed, held)
    else:
        _story_problems(problems, e)
    return problems.out


def _entity_problems(p: _Problems, e: dict[str, Any]) -> None:
    kind, ents = e["kind"], p.ents
    if kind == "entity_created":
        if e["entity_id"] in ents:
            p.add(Rule.DUPLICATE_ID, f"entity {e['entity_id']!r} already exists")
    elif p.need(e["entity_id"], "entity") and kind == "set_entity_attribute" and e.get("op") == "increment":
        current = ents[e["entity_id"]]["attributes"].get(e["attribute"])
        if current is not None and (isinstance(current, bool) or not isinstance(current, int | float)):
            p.add(Rule.NOT_NUMERIC, f"attribute {e['attribute']!r} holds {current!r}, which cannot be incremented")


def _fact_problems(p: _Problems, e: dict[str, Any]) -> None:
    facts = p.state.facts
    if e["kind"] == "fact_added":
        if e["fact_id"] in facts:
            p.add(Rule.DUPLICATE_ID, f"fact {e['fact_id']!r} already exists")
        p.need(e["subject_entity_id"], "subject")
        p.need(e.get("object_entity_id"), "object")
        if (old := e.get("replaces")) is not None:
            if old not in facts:
                p.add(Rule.UNKNOWN_FACT, f"it replaces fact {old!r}, which does not exist here")
            elif facts[old]["status"] == FactStatus.SUPERSEDED.value:
                p.add(Rule.FACT_NOT_CURRENT, f"it replaces fact {old!r}, which is already superseded")
        for dep in e.get("depends_on") or []:
            if dep not in facts:
                p.add(Rule.UNKNOWN_FACT, f"it depends on fact {dep!r}, which does not exist here")
        return
    fact = facts.get(e["fact_id"])
    if fact is None:
        p.add(Rule.UNKNOWN_FACT, f"fact {e['fact_id']!r} does not exist here")
    elif e.get("invalidation") == "retconned":
        if fact["canon_level"] == "retconned":  # retconning a superseded fact is fine: it never was true
            p.add(Rule.FACT_NOT_CURRENT, f"fact {e['fact_id']!r} is already retconned")
    elif fact["status"] == FactStatus.SUPERSEDED.value:
        p.add(Rule.FACT_NOT_CURRENT, f"fact {e['fact_id']!r} is already superseded")


def _placement_problems(
    p: _Problems,
    e: dict[str, Any],
    placed: dict[tuple[str | None, str], str],
    held: dict[tuple[str | None, str], str | None],
) -> None:
    """Where an entity is and who holds an item: one place and one holder per turn, no cycles."""
    state, ents, turn = p.state, p.ents, e.get("turn_id")
    if e["kind"] == "current_location_set":
        who, where = e["entity_id"], e["location_entity_id"]
        if p.need(who, "entity") & p.need(where, "location"):
            p.alive(who, "entity")
            if ents[where]["kind"] not in PLACE_KINDS:
                p.add(Rule.NOT_A_PLACE, f"{where!r} is a {ents[where]['kind']}, not a location, structure or vehicle")
            elif _contains(state, inner=where, outer=who):
                p.add(Rule.CONTAINMENT_CYCLE, f"{where!r} is itself inside {who!r}")
            earlier = placed.get((turn, who))
            if earlier is not None and earlier != where:
                p.add(Rule.ONE_PLACE, f"{who!r} is already put at {earlier!r} at this turn; one place at a time")
            placed[(turn, who)] = where
        return
    item, holder = e["item_entity_id"], e.get("holder_entity_id")
    if p.need(item, "item") & p.need(holder, "holder") & p.need(e.get("location_entity_id"), "location"):
        p.alive(holder, "holder")
        if holder is not None and _holds(state, holder=item, item=holder):
            p.add(Rule.CONTAINMENT_CYCLE, f"{holder!r} is itself held by {item!r}")
        key = (turn, item)
        if key in held and held[key] != holder:
            p.add(Rule.ONE_HOLDER, f"{item!r} is already given to {held[key]!r} at this turn; one holder at a time")
        held[key] = holder


def _story_problems(p: _Problems, e: dict[str, Any]) -> None:
    """Relationships, threads, the scene and happenings."""
    kind, state = e["kind"], p.state
    if kind == "relationship_added":
        if e["relationship_id"] in state.relationships:
            p.add(Rule.DUPLICATE_ID, f"relationship {e['relationship_id']!r} already exists")
        if p.need(e["source_entity_id"], "source"):
            p.alive(e["source_entity_id"], "source")
        p.need(e["target_entity_id"], "target")
    elif kind == "relationship_ended":
        rel = state.relationships.get(e["relationship_id"])
        if rel is None or rel["status"] != RelationshipStatus.ACTIVE.value or rel.get("canon_level") == RETCONNED:
            why = "does not exist here" if rel is None else "has already ended"
            why = "was retconned" if rel is not None and rel.get("canon_level") == RETCONNED else why
            p.add(Rule.RELATIONSHIP_NOT_ACTIVE, f"relationship {e['relationship_id']!r} {why}")
    elif kind == "thread_opened":
        if e["thread_id"] in state.threads:
            p.add(Rule.DUPLICATE_ID, f"thread {e['thread_id']!r} already exists")
        for ent in e.get("involved_entity_ids") or []:
            p.need(ent, "involved entity")
    elif kind in ("thread_resolved", "thread_advanced", "thread_abandoned"):
        thread = state.threads.get(e["thread_id"])
        if thread is None:
            p.add(Rule.UNKNOWN_THREAD, f"thread {e['thread_id']!r} does not exist here")
        elif not ThreadStatus(thread["status"]).live:
            p.add(Rule.THREAD_NOT_OPEN, f"thread {e['thread_id']!r} is already {thread['status']}")
        for ent in e.get("involved_entity_ids") or []:
            p.need(ent, "involved entity")
    elif kind == "scene_set":
        where = e.get("location_entity_id")
        if where is not None and p.need(where, "location") and p.ents[where]["kind"] not in PLACE_KINDS:
            p.add(Rule.NOT_A_PLACE, f"{where!r} is a {p.ents[where]['kind']}, not a location, structure or vehicle")
        for ent in e.get("present_entity_ids") or []:
            if p.need(ent, "present entity"):
                p.alive(ent, "present entity")
    elif kind == "scene_ended":
        active = (state.scene or {}).get("scene_id")
        if active != e["ended_scene_id"]:
            why = "no scene is active" if active is None else f"the active scene is {active!r}"
            p.add(Rule.SCENE_NOT_ACTIVE, f"scene {e['ended_scene_id']!r} is not active here: {why}")
    elif kind == "event_recorded":
        for ent in e.get("participant_entity_ids") or []:
            p.need(ent, "participant")
        p.need(e.get("location_entity_id"), "location")
    elif kind == "record_retconned":
        _retcon_problems(p, e)


def _retcon_problems(p: _Problems, e: dict[str, Any]) -> None:
    """A happening, entity or relationship retconned (schemas.retcons.RecordRetconned): it exists here, is not
    retconned already, and what retells a happening is a happening recorded before it in the batch."""
    table = {"happening": p.state.happenings, "entity": p.ents, "relationship": p.state.relationships}[e["record"]]
    record = table.get(e["record_id"])
    if record is None:
        rule = Rule.UNKNOWN_ENTITY if e["record"] == "entity" else Rule.UNKNOWN_RECORD
        p.add(rule, f"{e['record']} {e['record_id']!r} does not exist on this branch at this point")
    elif record.get("canon_level") == RETCONNED:
        p.add(Rule.RECORD_NOT_CURRENT, f"{e['record']} {e['record_id']!r} is already retconned")
    new = e.get("superseded_by")
    if new is not None and (e["record"] != "happening" or new not in p.state.happenings or new == e["record_id"]):
        p.add(Rule.UNKNOWN_RECORD, f"{new!r} is not a happening recorded here that retells {e['record_id']!r}")


def _contains(state: WorldState, *, inner: str, outer: str) -> bool:
    """Whether ``inner`` is (transitively) located in ``outer``."""
    seen: set[str] = set()
    current: str | None = inner
    while current is not None and current not in seen:
        if current == outer:
            return True
        seen.add(current)
        current = (state.entities.get(current) or {}).get("location_id")
    return False


def _holds(state: WorldState, *, holder: str, item: str) -> bool:
    """Whether ``holder`` (transitively) holds ``item``."""
    seen: set[str] = set()
    current: str | None = item
    while current is not None and current not in seen:
        if current == holder:
            return True
        seen.add(current)
        current = (state.entities.get(current) or {}).get("holder_id")
    return False
