"""Canon: entities, facts, axioms, relationships and threads, and the world state they fold into.

Nothing canonical is deleted: a retcon supersedes. Re-exported by :mod:`schemas.story`.
"""

from enum import StrEnum
from typing import Any, Self

from pydantic import Field, NonNegativeInt, model_validator

from schemas.common import (
    AttributeValue,
    Authority,
    CanonLevel,
    Confidence,
    EntityKind,
    EntityStatus,
    FactStatus,
    Id,
    LorekeeperModel,
    Sha256Hex,
    UtcDatetime,
    utc_now,
)
from schemas.story_ids import default_id
from schemas.text import Label, Name, Note, Text
from schemas.visibility import Visibility

__all__ = [
    "Axiom",
    "Entity",
    "Evidence",
    "Fact",
    "Happening",
    "Relationship",
    "RelationshipStatus",
    "StoryThread",
    "ThreadStatus",
    "WorldStateView",
]


# ============================================================================================
# canon: entities, facts, axioms, relationships, threads


class Entity(LorekeeperModel):
    """A thing in the world (genre-neutral kinds)."""

    id: Id = default_id("ent")
    world_id: Id
    campaign_id: Id | None = Field(
        default=None, description="Campaign that introduced it; null for world-level entities."
    )
    kind: EntityKind
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    description: Text | None = None
    status: EntityStatus = EntityStatus.ACTIVE
    attributes: dict[Label, AttributeValue] = Field(
        default_factory=dict, description="Absolute attribute values, e.g. {'hp': 12}."
    )
    created_turn_id: Id | None = Field(default=None, description="Turn it entered the story.")
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")
    canon_level: CanonLevel = Field(
        default=CanonLevel.CANON, description="'retconned': it never was, on this branch (it stays in the record)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)


class Evidence(LorekeeperModel):
    """What justifies a claim: turns and/or knowledge chunks (become SUPPORTED_BY edges)."""

    turn_ids: list[Id] = Field(default_factory=list)
    chunk_ids: list[Id] = Field(default_factory=list)
    quote: Note | None = Field(default=None, description="Short excerpt that supports the claim.")

    @property
    def is_empty(self) -> bool:
        return not (self.turn_ids or self.chunk_ids)


def check_object_xor_value(object_entity_id: str | None, value: Any) -> None:
    if (object_entity_id is None) == (value is None):
        raise ValueError("a fact needs exactly one of `object_entity_id` (an entity) or `value` (a literal)")


class Fact(LorekeeperModel):
    """A canonical statement: subject --predicate--> object entity or literal value."""

    id: Id = default_id("fact")
    campaign_id: Id | None = Field(default=None, description="Null for world-level facts.")
    subject_entity_id: Id
    predicate: Name
    object_entity_id: Id | None = None
    value: AttributeValue = None
    authority: Authority
    status: FactStatus = FactStatus.ACTIVE
    canon_level: CanonLevel = CanonLevel.CANON
    confidence: Confidence = 1.0
    replaces: Id | None = Field(default=None, description="Id of the fact this one supersedes.")
    evidence: Evidence = Field(default_factory=Evidence)
    created_turn_id: Id | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")

    @model_validator(mode="after")
    def _check_fact(self) -> Self:
        check_object_xor_value(self.object_entity_id, self.value)
        if self.replaces == self.id:
            raise ValueError("a fact cannot replace itself")
        if self.canon_level is CanonLevel.RETCONNED and self.status is FactStatus.ACTIVE:
            raise ValueError("a retconned fact cannot be active; set status 'superseded'")
        return self


class Axiom(LorekeeperModel):
    """A rule of the world that always holds (e.g. 'magic requires a spoken word')."""

    id: Id = default_id("axiom")
    world_id: Id
    text: Text
    category: Name | None = Field(default=None, description="e.g. 'magic', 'physics', 'society'.")
    authority: Authority = Authority.GM
    evidence: Evidence = Field(default_factory=Evidence)
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_authority(self) -> Self:
        if self.authority is Authority.PLAYER:
            raise ValueError(
                "an axiom cannot have player authority: axioms are world rules set by a source, "
                "the GM or the system. Propose a player's claim as a fact (ProposedChange "
                "type 'fact') so it goes through resolution"
            )
        return self


class RelationshipStatus(StrEnum):
    ACTIVE = "active"
    ENDED = "ended"


class Relationship(LorekeeperModel):
    """A directed relationship between two entities over a span of turns."""

    id: Id = default_id("rel")
    source_entity_id: Id
    target_entity_id: Id
    kind: Name = Field(description="e.g. 'ally_of', 'member_of', 'sibling_of'.")
    description: Text | None = None
    status: RelationshipStatus = RelationshipStatus.ACTIVE
    since_turn_id: Id | None = None
    until_turn_id: Id | None = None
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")
    canon_level: CanonLevel = Field(
        default=CanonLevel.CANON, description="'retconned': it never was, on this branch (it stays in the record)."
    )

    @model_validator(mode="after")
    def _check_span(self) -> Self:
        if self.status is RelationshipStatus.ENDED and self.until_turn_id is None:
            raise ValueError("an ended relationship needs until_turn_id")
        if self.status is RelationshipStatus.ACTIVE and self.until_turn_id is not None:
            raise ValueError("an active relationship has no until_turn_id; set status 'ended'")
        return self


class ThreadStatus(StrEnum):
    """A thread's lifecycle: open, advanced (moved on, still open), then resolved or abandoned (closed)."""

    OPEN = "open"
    ADVANCED = "advanced"
    RESOLVED = "resolved"
    ABANDONED = "abandoned"

    @property
    def live(self) -> bool:
        """Open or advanced: it may still be advanced, resolved or abandoned."""
        return self in (ThreadStatus.OPEN, ThreadStatus.ADVANCED)


class ThreadAdvance(LorekeeperModel):
    """One step a thread moved: what happened, at which turn, and the entities it drew in."""

    turn_id: Id | None = None
    progress: Text
    involved_entity_ids: list[Id] = Field(default_factory=list)


class StoryThread(LorekeeperModel):
    """A plot thread: a quest, a mystery, an unanswered question."""

    id: Id = default_id("thread")
    campaign_id: Id
    title: Name
    description: Text | None = None
    status: ThreadStatus = ThreadStatus.OPEN
    involved_entity_ids: list[Id] = Field(default_factory=list)
    opened_turn_id: Id | None = None
    resolved_turn_id: Id | None = Field(default=None, description="The turn it was resolved or abandoned at.")
    resolution: Text | None = Field(default=None, description="How it was resolved, or why it was abandoned.")
    advances: list[ThreadAdvance] = Field(default_factory=list, description="How it moved on, oldest first.")
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")

    @model_validator(mode="after")
    def _check_status(self) -> Self:
        if not self.status.live and self.resolved_turn_id is None:
            raise ValueError(f"a {self.status.value} thread needs resolved_turn_id")
        if self.status.live and self.resolved_turn_id is not None:
            raise ValueError("an open thread has no resolved_turn_id; set status 'resolved' or 'abandoned'")
        return self


class Happening(LorekeeperModel):
    """Something that happened in the world (a battle, a coronation): narrative canon, as of a position."""

    id: Id = default_id("hap")
    title: Name
    description: Text | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list)
    location_entity_id: Id | None = None
    turn_id: Id | None = Field(default=None, description="The turn it is anchored at.")
    status: FactStatus = Field(default=FactStatus.ACTIVE, description="'superseded' once retconned.")
    canon_level: CanonLevel = Field(default=CanonLevel.CANON, description="'retconned': it never happened.")
    replaces: Id | None = Field(default=None, description="The happening this one is the retold version of.")
    superseded_by: Id | None = Field(default=None, description="The happening that retells it, when retconned.")


class WorldStateView(LorekeeperModel):
    """The world as of one position in the story tree: what was true then, on that branch."""

    campaign_id: Id
    branch_id: Id
    turn_id: Id | None = Field(description="The turn the state is as of (null before the first turn).")
    entities: list[Entity] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list, description="Every fact, current or not (see status).")
    relationships: list[Relationship] = Field(default_factory=list)
    threads: list[StoryThread] = Field(default_factory=list)
    happenings: list[Happening] = Field(
        default_factory=list, description="What happened on this line up to the position, oldest first (see status)."
    )
    locations: dict[str, Id] = Field(default_factory=dict, description="Entity id -> the location it is at.")
    holders: dict[str, Id] = Field(default_factory=dict, description="Item id -> the entity holding it.")
    active_scene_id: Id | None = None
    event_count: NonNegativeInt = Field(default=0, description="Events folded into this state.")
    state_hash: Sha256Hex = Field(description="sha256 of the state (equal worlds, equal hashes).")
