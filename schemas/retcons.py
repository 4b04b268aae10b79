"""Retcons of every kind: the event a GM's retcon of a happening, an entity or a relationship writes, what canon
rests on a record (its dependents), and the bodies of the retcon and dependents operations.

A fact's retcon is a ``fact_invalidated`` event (:mod:`schemas.events`); the other kinds are retconned with
:class:`RecordRetconned`. It is not one of the proposable kinds (:data:`schemas.events.StateEvent`): nothing a
narrator or player proposes can retcon canon, only the GM's ruling, which is written directly.
"""

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.common import AttributeValue, Id, LorekeeperModel
from schemas.events import BaseStateEvent, TouchedIds
from schemas.text import Name, Note, Text

__all__ = [
    "Dependent",
    "Dependents",
    "DependentsPolicy",
    "HappeningRetelling",
    "RecordKind",
    "RecordRetconAnswer",
    "RecordRetconRequest",
    "RecordRetconned",
]


class RecordKind(StrEnum):
    """The kinds of canon record a retcon acts on (the state table that holds its id)."""

    FACT = "fact"
    HAPPENING = "happening"
    ENTITY = "entity"
    RELATIONSHIP = "relationship"


class DependentsPolicy(StrEnum):
    """What a retcon does with the current canon that rests on the record (its :class:`Dependents`)."""

    REFUSE = "refuse"  # refuse the retcon while anything current rests on the record (the default)
    RETCON = "retcon"  # retcon the dependent facts and relationships with it, in the same transaction
    KEEP = "keep"  # retcon the record alone; what rests on it stays as it is


class RecordRetconned(BaseStateEvent):
    """A happening, an entity or a relationship never was, on the branch this is committed on (never deleted)."""

    kind: Literal["record_retconned"] = "record_retconned"
    record: RecordKind = Field(description="happening, entity or relationship (a fact: fact_invalidated).")
    record_id: Id = Field(description="The record that never was.")
    reason: Note = Field(description="Why, for provenance.")
    superseded_by: Id | None = Field(default=None, description="The happening that retells it, when retold.")

    @property
    def touches(self) -> TouchedIds:
        if self.record is RecordKind.ENTITY:
            return TouchedIds(entity_ids=(self.record_id,))
        if self.record is RecordKind.RELATIONSHIP:
            return TouchedIds(relationship_ids=(self.record_id,))
        return TouchedIds()


class Dependent(LorekeeperModel):
    """One current record of canon that rests on another."""

    kind: RecordKind
    id: Id
    why: str = Field(description="How it rests on the record ('its subject', 'depends on fact …').")
    text: str = Field(description="The record in words, entities named by their names.")


class Dependents(LorekeeperModel):
    """What current canon on the head's line rests on a record: what a retcon of it would leave standing."""

    campaign_id: Id
    record: RecordKind
    record_id: Id
    text: str = Field(description="The record in words.")
    dependents: list[Dependent] = Field(default_factory=list)


class HappeningRetelling(BaseModel):
    """What really happened, in place of a retconned happening (the fields left out keep the old one's)."""

    model_config = ConfigDict(extra="forbid")

    title: Name | None = None
    description: Text | None = None
    participant_entity_ids: list[Id] | None = None
    location_entity_id: Id | None = None


class RecordRetconRequest(BaseModel):
    """A GM's retcon of a canon record of any kind, found by its id on the campaign's head line."""

    model_config = ConfigDict(extra="forbid")

    reason: Note = Field(description="Why it never was (kept as provenance).")
    dependents: DependentsPolicy = Field(
        default=DependentsPolicy.REFUSE, description="What to do with the current canon that rests on it."
    )
    retelling: HappeningRetelling | None = Field(
        default=None, description="A happening only: what happened instead (a new happening that replaces it)."
    )
    value: AttributeValue = Field(default=None, description="A fact only: its new value (a fact that replaces it).")
    object_entity_id: Id | None = Field(default=None, description="A fact only: its new object entity.")


class RecordRetconAnswer(BaseModel):
    """What a retcon did: the record retconned, what replaces it, and the dependents retconned with it."""

    record: RecordKind
    record_id: Id
    status: str = "retconned"
    replaced_by: Id | None = None
    retconned_with: list[Id] = Field(default_factory=list, description="Dependents retconned with it.")
    version: int | None = None
