"""Typed state events: the only way the world's canonical state changes.

A :data:`StateEvent` is a discriminated union on ``kind``. Values are **absolute**: an event says
what the state *is* after it, never "add 2". The one exception is explicit:
``set_entity_attribute`` with ``op="increment"`` and a numeric ``amount``. A delta hidden in an
absolute value (``"+2"``, ``"hp+3"``, ``"+= 2"``) is rejected with a message that says to use
``op="increment"``. State as of a turn = nearest snapshot on its ancestor path + events after it,
so events must be replayable without context.

Each event carries an ``event_id``, optional ``turn_id``/``scene_id`` anchoring, and the ids it
touches in its own fields; :attr:`BaseStateEvent.touches` lists them by family (entities, facts,
relationships, threads) without being serialized.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, TypeAdapter, model_validator
from pydantic_core import PydanticCustomError

from schemas.common import (
    AttributeValue,
    Authority,
    CanonLevel,
    Confidence,
    EntityKind,
    EntityStatus,
    Id,
    LorekeeperModel,
    new_id,
)
from schemas.text import Label, Name, Note, Text
from schemas.visibility import Visibility

__all__ = [
    "STATE_EVENT_KINDS",
    "AttributeOp",
    "BaseStateEvent",
    "CurrentLocationSet",
    "EntityAttributeSet",
    "EntityCreated",
    "EntityStatusSet",
    "EventKind",
    "EventRecorded",
    "FactAdded",
    "FactInvalidated",
    "FactInvalidation",
    "PossessionSet",
    "RelationshipAdded",
    "RelationshipEnded",
    "SceneEnded",
    "SceneSet",
    "StateEvent",
    "StateEventList",
    "ThreadAbandoned",
    "ThreadAdvanced",
    "ThreadOpened",
    "ThreadResolved",
    "TouchedIds",
    "parse_state_event",
    "parse_state_events",
]


class EventKind(StrEnum):
    """The known kinds of state event (the ``kind`` discriminator)."""

    ENTITY_CREATED = "entity_created"
    SET_ENTITY_STATUS = "set_entity_status"
    SET_ENTITY_ATTRIBUTE = "set_entity_attribute"
    FACT_ADDED = "fact_added"
    FACT_INVALIDATED = "fact_invalidated"
    RELATIONSHIP_ADDED = "relationship_added"
    RELATIONSHIP_ENDED = "relationship_ended"
    THREAD_OPENED = "thread_opened"
    THREAD_RESOLVED = "thread_resolved"
    THREAD_ADVANCED = "thread_advanced"
    THREAD_ABANDONED = "thread_abandoned"
    CURRENT_LOCATION_SET = "current_location_set"
    POSSESSION_SET = "possession_set"
    SCENE_SET = "scene_set"
    SCENE_ENDED = "scene_ended"
    EVENT_RECORDED = "event_recorded"


STATE_EVENT_KINDS: tuple[str, ...] = tuple(kind.value for kind in EventKind)


class AttributeOp(StrEnum):
    """How ``set_entity_attribute`` changes the attribute."""

    SET = "set"  # assign the absolute ``value``
    INCREMENT = "increment"  # add the numeric ``amount`` (negative to decrease)


class FactInvalidation(StrEnum):
    """What happens to a fact that stops being true. Nothing canonical is deleted."""

    SUPERSEDED = "superseded"  # replaced by a newer fact (status -> superseded)
    DISPUTED = "disputed"  # contradicted, unresolved (status -> disputed)
    RETCONNED = "retconned"  # never was true (canon_level -> retconned, status -> superseded)


@dataclass(frozen=True, slots=True)
class TouchedIds:
    """The graph ids an event touches, by family. Used to index and invalidate caches."""

    entity_ids: tuple[str, ...] = ()
    fact_ids: tuple[str, ...] = ()
    relationship_ids: tuple[str, ...] = ()
    thread_ids: tuple[str, ...] = ()


def _ids(*values: str | None) -> tuple[str, ...]:
    # keep order, drop None and duplicates
    return tuple(dict.fromkeys(v for v in values if v is not None))


class BaseStateEvent(LorekeeperModel):
    """Fields every state event carries. Not itself an event: use a concrete kind."""

    event_id: Id = Field(
        default_factory=lambda: new_id("evt"),
        description="Unique id of this event; generated when omitted.",
    )
    turn_id: Id | None = Field(
        default=None,
        description="Turn whose narration produced or justifies the event (lineage anchor).",
    )
    scene_id: Id | None = Field(default=None, description="Scene in which the event happened, when known.")

    @property
    def touches(self) -> TouchedIds:
        """The entity, fact, relationship and thread ids this event touches."""
        return TouchedIds()

    @property
    def entity_ids(self) -> tuple[str, ...]:
        """Shortcut for ``touches.entity_ids``."""
        return self.touches.entity_ids

    @property
    def fact_ids(self) -> tuple[str, ...]:
        """Shortcut for ``touches.fact_ids``."""
        return self.touches.fact_ids


class EntityCreated(BaseStateEvent):
    """A new entity enters the world with its initial, absolute state."""

    kind: Literal["entity_created"] = "entity_created"
    entity_id: Id = Field(description="Id of the new entity.")
    entity_kind: EntityKind = Field(description="Genre-neutral kind of the entity.")
    name: Name
    aliases: list[Name] = Field(default_factory=list, description="Other names it is known by.")
    description: Text | None = None
    status: EntityStatus = EntityStatus.ACTIVE
    attributes: dict[Label, AttributeValue] = Field(
        default_factory=dict,
        description="Initial attributes, absolute values only (e.g. {'hp': 12}).",
    )
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.entity_id))


class EntityStatusSet(BaseStateEvent):
    """An entity's status becomes ``status``."""

    kind: Literal["set_entity_status"] = "set_entity_status"
    entity_id: Id
    status: EntityStatus = Field(description="The entity's status after the event (absolute).")
    reason: Note | None = Field(default=None, description="Why, in a sentence, for provenance.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.entity_id))


class EntityAttributeSet(BaseStateEvent):
    """An entity attribute is assigned (``op="set"``) or explicitly incremented."""

    kind: Literal["set_entity_attribute"] = "set_entity_attribute"
    entity_id: Id
    attribute: Name = Field(description="Attribute key, e.g. 'hp', 'mood', 'rank'.")
    op: AttributeOp = Field(
        default=AttributeOp.SET,
        description="'set' assigns the absolute `value`; 'increment' adds the numeric `amount`.",
    )
    value: AttributeValue = Field(
        default=None,
        description="The absolute value after the event (op='set' only); null clears it.",
    )
    amount: int | float | None = Field(
        default=None,
        description="Signed, non-zero amount to add (op='increment' only).",
    )

    @model_validator(mode="after")
    def _check_op(self) -> Self:
        if self.op is AttributeOp.INCREMENT:
            if "value" in self.model_fields_set and self.value is not None:
                raise ValueError(
                    "op='increment' takes a numeric `amount`, not a `value`; "
                    "remove `value`, or use op='set' to assign an absolute value"
                )
            if self.amount is None or isinstance(self.amount, bool):
                raise ValueError("op='increment' needs a numeric `amount`, e.g. amount=2 or -1")
            if self.amount == 0:
                raise ValueError("op='increment' with amount=0 changes nothing; drop the event")
        else:
            if self.amount is not None:
                raise ValueError("`amount` is only for op='increment'; with op='set' send the absolute `value`")
            if "value" not in self.model_fields_set:
                raise ValueError("op='set' needs a `value` (the absolute value after the event; null clears it)")
        return self

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.entity_id))


class FactAdded(BaseStateEvent):
    """A fact becomes part of the world: subject --predicate--> object entity or value."""

    kind: Literal["fact_added"] = "fact_added"
    fact_id: Id = Field(default_factory=lambda: new_id("fact"), description="Id of the new fact.")
    subject_entity_id: Id = Field(description="Entity the fact is about.")
    predicate: Name = Field(description="Relation or property name, e.g. 'allied_with', 'age'.")
    object_entity_id: Id | None = Field(default=None, description="Entity on the other end; exclusive with `value`.")
    value: AttributeValue = Field(
        default=None, description="Absolute literal value; exclusive with `object_entity_id`."
    )
    authority: Authority = Field(description="Who vouches for the fact.")
    canon_level: CanonLevel = Field(default=CanonLevel.CANON, description="Canon level the fact enters with.")
    confidence: Confidence = Field(default=1.0, description="Confidence in the fact, 0..1.")
    replaces: Id | None = Field(default=None, description="Id of the fact this one supersedes, if any.")
    depends_on: list[Id] = Field(
        default_factory=list, description="Facts this one follows from (listed when one of them is retconned)."
    )
    visibility: Visibility | None = Field(default=None, description="Who at the table may see the fact; unset: public.")

    @model_validator(mode="after")
    def _check_object(self) -> Self:
        has_object = self.object_entity_id is not None
        has_value = self.value is not None
        if has_object == has_value:
            raise ValueError("a fact needs exactly one of `object_entity_id` (an entity) or `value` (a literal)")
        if self.replaces is not None and self.replaces == self.fact_id:
            raise ValueError("a fact cannot replace itself: `replaces` equals `fact_id`")
        return self

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(
            entity_ids=_ids(self.subject_entity_id, self.object_entity_id),
            fact_ids=_ids(self.fact_id, self.replaces),
        )


class FactInvalidated(BaseStateEvent):
    """A fact stops being current: superseded, disputed or retconned (never deleted)."""

    kind: Literal["fact_invalidated"] = "fact_invalidated"
    fact_id: Id = Field(description="The fact that stops being current.")
    invalidation: FactInvalidation = FactInvalidation.SUPERSEDED
    reason: Note = Field(description="Why the fact no longer holds, for provenance.")
    superseded_by: Id | None = Field(default=None, description="The fact that replaces it, when superseded.")

    @model_validator(mode="after")
    def _check_superseded_by(self) -> Self:
        if self.superseded_by is not None and self.superseded_by == self.fact_id:
            raise ValueError("a fact cannot be superseded by itself")
        return self

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(fact_ids=_ids(self.fact_id, self.superseded_by))


class RelationshipAdded(BaseStateEvent):
    """A relationship between two entities begins."""

    kind: Literal["relationship_added"] = "relationship_added"
    relationship_id: Id = Field(default_factory=lambda: new_id("rel"))
    source_entity_id: Id
    target_entity_id: Id
    relationship_kind: Name = Field(description="e.g. 'ally_of', 'member_of', 'owes_debt_to'.")
    description: Text | None = None
    visibility: Visibility | None = Field(
        default=None, description="Who at the table may see the relationship; unset: public."
    )

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(
            entity_ids=_ids(self.source_entity_id, self.target_entity_id),
            relationship_ids=_ids(self.relationship_id),
        )


class RelationshipEnded(BaseStateEvent):
    """A relationship ends (it stays in history with its end turn)."""

    kind: Literal["relationship_ended"] = "relationship_ended"
    relationship_id: Id
    reason: Note | None = None

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(relationship_ids=_ids(self.relationship_id))


class ThreadOpened(BaseStateEvent):
    """A story thread (quest, mystery, open question) opens."""

    kind: Literal["thread_opened"] = "thread_opened"
    thread_id: Id = Field(default_factory=lambda: new_id("thread"))
    title: Name
    description: Text | None = None
    involved_entity_ids: list[Id] = Field(default_factory=list, description="Entities the thread is about.")
    visibility: Visibility | None = Field(default=None, description="Who at the table may see it; unset: public.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(*self.involved_entity_ids), thread_ids=_ids(self.thread_id))


class ThreadResolved(BaseStateEvent):
    """A story thread is resolved."""

    kind: Literal["thread_resolved"] = "thread_resolved"
    thread_id: Id
    resolution: Text = Field(description="How the thread was resolved.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(thread_ids=_ids(self.thread_id))


class ThreadAdvanced(BaseStateEvent):
    """A story thread moves on (a clue found, a step taken); it stays open."""

    kind: Literal["thread_advanced"] = "thread_advanced"
    thread_id: Id
    progress: Text = Field(description="What moved the thread on.")
    involved_entity_ids: list[Id] = Field(default_factory=list, description="Entities this step draws in.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(*self.involved_entity_ids), thread_ids=_ids(self.thread_id))


class ThreadAbandoned(BaseStateEvent):
    """A story thread is dropped unresolved (the quest given up, the question left open for good)."""

    kind: Literal["thread_abandoned"] = "thread_abandoned"
    thread_id: Id
    reason: Text = Field(description="Why the thread was abandoned.")

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(thread_ids=_ids(self.thread_id))


class CurrentLocationSet(BaseStateEvent):
    """An entity is now at a location (absolute: where it is, not where it moved from)."""

    kind: Literal["current_location_set"] = "current_location_set"
    entity_id: Id = Field(description="The entity that is somewhere.")
    location_entity_id: Id = Field(description="The location entity it is at.")

    @model_validator(mode="after")
    def _check_distinct(self) -> Self:
        if self.entity_id == self.location_entity_id:
            raise ValueError("an entity cannot be located inside itself")
        return self

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.entity_id, self.location_entity_id))


class PossessionSet(BaseStateEvent):
    """Who holds an item now; ``holder_entity_id=None`` means nobody does."""

    kind: Literal["possession_set"] = "possession_set"
    item_entity_id: Id = Field(description="The possessed item (or vehicle, creature...).")
    holder_entity_id: Id | None = Field(
        description="The entity that now holds it; null when it is unheld (dropped, lost)."
    )
    location_entity_id: Id | None = Field(default=None, description="Where an unheld item lies, when known.")

    @model_validator(mode="after")
    def _check_distinct(self) -> Self:
        if self.holder_entity_id == self.item_entity_id:
            raise ValueError("an item cannot hold itself")
        if self.location_entity_id == self.item_entity_id:
            raise ValueError("an item cannot lie inside itself")
        return self

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.item_entity_id, self.holder_entity_id, self.location_entity_id))


class SceneSet(BaseStateEvent):
    """The active scene becomes ``active_scene_id``, at a location with entities present."""

    kind: Literal["scene_set"] = "scene_set"
    active_scene_id: Id = Field(description="The scene that is now active.")
    location_entity_id: Id | None = Field(default=None, description="Where the scene takes place.")
    present_entity_ids: list[Id] = Field(
        default_factory=list, description="Entities present when the scene starts (absolute)."
    )

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(self.location_entity_id, *self.present_entity_ids))


class SceneEnded(BaseStateEvent):
    """The active scene ends on the branch this is committed on (a branch that shares it keeps it open)."""

    kind: Literal["scene_ended"] = "scene_ended"
    ended_scene_id: Id = Field(description="The scene that ends; it must be the active one.")


class EventRecorded(BaseStateEvent):
    """Something happened in the world (a battle, a collapse, a coronation): narrative canon."""

    kind: Literal["event_recorded"] = "event_recorded"
    happening_id: Id = Field(default_factory=lambda: new_id("hap"), description="Id of the happening.")
    title: Name
    description: Text | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list)
    location_entity_id: Id | None = None

    @property
    def touches(self) -> TouchedIds:
        return TouchedIds(entity_ids=_ids(*self.participant_entity_ids, self.location_entity_id))


_EVENT_CLASSES: tuple[type[BaseStateEvent], ...] = (
    EntityCreated,
    EntityStatusSet,
    EntityAttributeSet,
    FactAdded,
    FactInvalidated,
    RelationshipAdded,
    RelationshipEnded,
    ThreadOpened,
    ThreadResolved,
    ThreadAdvanced,
    ThreadAbandoned,
    CurrentLocationSet,
    PossessionSet,
    SceneSet,
    SceneEnded,
    EventRecorded,
)
# the enum, the classes and the union must agree; fail at import rather than at a gate
assert {cls.model_fields["kind"].default for cls in _EVENT_CLASSES} == set(STATE_EVENT_KINDS)


def _check_kind(data: Any) -> Any:
    """Reject a missing or unknown ``kind`` with a message that lists the known kinds."""
    if isinstance(data, BaseStateEvent) or not isinstance(data, dict):
        return data
    known = ", ".join(STATE_EVENT_KINDS)
    kind = data.get("kind")
    if kind is None:
        raise PydanticCustomError(
            "missing_event_kind",
            "state event has no 'kind'; known kinds: {known}",
            {"known": known},
        )
    if kind not in STATE_EVENT_KINDS:
        raise PydanticCustomError(
            "unknown_event_kind",
            "unknown state event kind '{kind}'; known kinds: {known}",
            {"kind": str(kind), "known": known},
        )
    return data


StateEvent = Annotated[
    Annotated[
        EntityCreated
        | EntityStatusSet
        | EntityAttributeSet
        | FactAdded
        | FactInvalidated
        | RelationshipAdded
        | RelationshipEnded
        | ThreadOpened
        | ThreadResolved
        | ThreadAdvanced
        | ThreadAbandoned
        | CurrentLocationSet
        | PossessionSet
        | SceneSet
        | SceneEnded
        | EventRecorded,
        Field(discriminator="kind"),
    ],
    BeforeValidator(_check_kind),
]
"""Any state event, discriminated on ``kind``."""

StateEventList = list[StateEvent]

_STATE_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(StateEvent)
_STATE_EVENT_LIST_ADAPTER: TypeAdapter[Any] = TypeAdapter(StateEventList)


def parse_state_event(data: Any) -> StateEvent:
    """Validate one state event from a dict, a JSON string/bytes, or an event instance.

    Raises:
        pydantic.ValidationError: for an unknown kind (the message lists the known ones), a
            hidden increment, or any other malformed field.
    """
    if isinstance(data, str | bytes | bytearray):
        return _STATE_EVENT_ADAPTER.validate_json(data)
    return _STATE_EVENT_ADAPTER.validate_python(data)


def parse_state_events(data: Any) -> StateEventList:
    """Validate a list of state events (dicts, JSON array text, or instances)."""
    if isinstance(data, str | bytes | bytearray):
        return _STATE_EVENT_LIST_ADAPTER.validate_json(data)
    return _STATE_EVENT_LIST_ADAPTER.validate_python(data)
