"""Triggers: conditions on the world state that fire a proposal or a narrator note, and their activations.

A trigger's conditions (all must hold) are read against the state fold of the branch a turn or a scene end is
recorded on: an entity's status or attribute, an entity at a place, a thread's status, the number of turns on
the line, the story time of the turn. When they hold, the trigger fires once on that line (or at every turn
where they hold, if repeatable): an :class:`Activation` records the trigger, the turn and the branch, and what
it made — a proposal (typed state events with the authority the trigger declares, judged by the gate at the
scene's end like any other) or a note for the narrator (GM-visible text that enters the next turn's prompt).
Triggers are the GM's alone: a player never sees one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.canon import ThreadStatus
from schemas.common import AttributeValue, EntityStatus, Id, utc_now
from schemas.events import StateEvent
from schemas.story_ids import default_id
from schemas.text import Name, Text

__all__ = [
    "Activation",
    "Condition",
    "FiredBy",
    "NoteAction",
    "ProposalAction",
    "Trigger",
    "TriggerAction",
    "TriggerCreate",
    "TriggerUpdate",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EntityStatusIs(_Strict):
    """An entity is in a status (dead, missing, ...)."""

    on: Literal["entity_status"] = "entity_status"
    entity_id: Id
    status: EntityStatus


class Compare(StrEnum):
    EQ = "eq"
    GTE = "gte"
    LTE = "lte"


class EntityAttributeIs(_Strict):
    """An entity's attribute equals a value, or (numbers) is at least / at most it."""

    on: Literal["entity_attribute"] = "entity_attribute"
    entity_id: Id
    attribute: Name
    compare: Compare = Compare.EQ
    value: AttributeValue


class EntityAt(_Strict):
    """An entity is at a place (its current location)."""

    on: Literal["entity_at"] = "entity_at"
    entity_id: Id
    location_entity_id: Id


class ThreadStatusIs(_Strict):
    """A story thread is in a status."""

    on: Literal["thread_status"] = "thread_status"
    thread_id: Id
    status: ThreadStatus


class TurnCount(_Strict):
    """At least this many turns on the line (the first turn is 1)."""

    on: Literal["turn_count"] = "turn_count"
    at_least: int = Field(ge=1)


class StoryTimeReached(_Strict):
    """The turn's story time is at or past this one (compared as text: write sortable times, '1372-03-14')."""

    on: Literal["story_time"] = "story_time"
    at_least: Name


Condition = Annotated[
    EntityStatusIs | EntityAttributeIs | EntityAt | ThreadStatusIs | TurnCount | StoryTimeReached,
    Field(discriminator="on"),
]
"""One condition on the state, discriminated on ``on``."""


class NoteAction(_Strict):
    """Text the narrator reads in the next turn's prompt (GM-visible)."""

    kind: Literal["note"] = "note"
    text: Text


class ProposalAction(_Strict):
    """Typed state events proposed to the active scene on the branch, judged by the gate like any other."""

    kind: Literal["proposal"] = "proposal"
    authority: Literal["gm", "system"] = "system"
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    events: list[StateEvent] = Field(min_length=1)


TriggerAction = Annotated[NoteAction | ProposalAction, Field(discriminator="kind")]


class TriggerCreate(_Strict):
    """``POST /api/v1/campaigns/{id}/triggers``: a trigger the GM declares."""

    name: Name
    conditions: list[Condition] = Field(min_length=1, description="All must hold for it to fire.")
    action: TriggerAction
    repeatable: bool = Field(default=False, description="Fire at every turn where it holds, not once per line.")
    active: bool = True


class TriggerUpdate(_Strict):
    """``PATCH …/triggers/{trigger_id}``: the fields to change."""

    name: Name | None = None
    conditions: list[Condition] | None = Field(default=None, min_length=1)
    action: TriggerAction | None = None
    repeatable: bool | None = None
    active: bool | None = None


class Trigger(TriggerCreate):
    id: Id = default_id("trig")
    campaign_id: Id
    created_at: datetime = Field(default_factory=utc_now)


class FiredBy(StrEnum):
    TURN = "turn"
    SCENE_END = "scene_end"


class Activation(_Strict):
    """One firing of a trigger: at which turn, on which branch, by what, and what it made."""

    id: Id
    trigger_id: Id
    campaign_id: Id
    branch_id: Id
    turn_id: Id
    fired_by: FiredBy
    fired_at: datetime = Field(default_factory=utc_now)
    note: Text | None = None
    proposal_id: Id | None = None
    skipped: Text | None = Field(default=None, description="Why a proposal was not made (no active scene).")
