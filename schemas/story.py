"""The story side: worlds, campaigns, the turn tree, scenes, proposals and canon.

Story history is a tree: turns link to their parent; branches name lines through it; a turn has
alternate takes with one selected; checkpoints are named pointers to turns. Turns only *propose*
changes (:class:`ProposedChange`); the canonization gate turns accepted
ones into typed state events (:mod:`schemas.events`) and canon (:class:`Fact`, :class:`Entity`,
:class:`Relationship`, :class:`StoryThread`). Nothing canonical is deleted: a retcon supersedes.
"""

import re
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from schemas.common import (
    AttributeValue,
    Authority,
    BlobKey,
    CanonLevel,
    Confidence,
    EntityKind,
    EntityStatus,
    FactStatus,
    Id,
    LorekeeperModel,
    Name,
    Sha256Hex,
    Text,
    UtcDatetime,
    new_id,
    utc_now,
)
from schemas.events import StateEventList

__all__ = [
    "Axiom",
    "Branch",
    "BranchDisposition",
    "Campaign",
    "ChangeType",
    "Checkpoint",
    "DialogueBlock",
    "DiceRoll",
    "DiceRollBlock",
    "Entity",
    "EventIssue",
    "Evidence",
    "Fact",
    "GateReport",
    "GenerationMetadata",
    "ImageBlock",
    "InputMode",
    "IssueSeverity",
    "Memory",
    "ModelRole",
    "NarrationBlock",
    "PointOfView",
    "PresentationBlock",
    "PromptSection",
    "PromptSectionKind",
    "PromptSnapshot",
    "ProposalDecision",
    "ProvenancePassage",
    "ProposalContent",
    "ProposalStatus",
    "ProposedChange",
    "ProposedEntity",
    "ProposedEvent",
    "ProposedFact",
    "ProposedRelationship",
    "ProposedStateChange",
    "Relationship",
    "RelationshipStatus",
    "Resolution",
    "ResolutionMethod",
    "ResolutionOutcome",
    "RetrievalHit",
    "RetrievalLeg",
    "RetrievalRecord",
    "Scene",
    "SceneStatus",
    "SnapshotKind",
    "Speaker",
    "SpeakerKind",
    "StoryProfile",
    "StoryThread",
    "SubjectiveKind",
    "Summary",
    "SummaryScope",
    "SystemNoteBlock",
    "Take",
    "Tense",
    "ThreadStatus",
    "Turn",
    "TurnPresentation",
    "TurnProvenance",
    "TurnStatus",
    "World",
    "WorldStateCheckpointKind",
    "WorldStateView",
]


def _default_id(prefix: str) -> Any:
    return Field(default_factory=lambda: new_id(prefix), description=f"Id ('{prefix}_…').")


# ============================================================================================
# world, campaign, branches


class World(LorekeeperModel):
    """A universe: its axioms and entities are shared by the campaigns set in it."""

    id: Id = _default_id("world")
    name: Name
    description: str | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)


class PointOfView(StrEnum):
    FIRST_PERSON = "first_person"
    SECOND_PERSON = "second_person"
    THIRD_LIMITED = "third_limited"
    THIRD_OMNISCIENT = "third_omniscient"


class Tense(StrEnum):
    PAST = "past"
    PRESENT = "present"


class StoryProfile(LorekeeperModel):
    """How the narrator tells this campaign's story."""

    genre: Name = Field(description="e.g. 'fantasy', 'science fiction', 'horror'.")
    subgenre: str | None = Field(default=None, description="e.g. 'sword and sorcery'.")
    tone: str | None = Field(default=None, description="e.g. 'grim', 'whimsical'.")
    style: str | None = Field(default=None, description="Prose style notes, e.g. 'terse, vivid'.")
    point_of_view: PointOfView = PointOfView.SECOND_PERSON
    tense: Tense = Tense.PRESENT


class ModelRole(StrEnum):
    """Jobs a model does for a campaign; each role maps to a model name."""

    NARRATOR = "narrator"
    EXTRACTOR = "extractor"  # structured proposals from narration
    SUMMARIZER = "summarizer"
    EMBEDDER = "embedder"
    RERANKER = "reranker"
    IMAGE = "image"


class Campaign(LorekeeperModel):
    """One story played in a world, with its own turn tree."""

    id: Id = _default_id("camp")
    world_id: Id
    name: Name
    profile: StoryProfile
    narrator_rules: list[Text] = Field(
        default_factory=list,
        description="Standing instructions to the narrator, first in every prompt, in order.",
    )
    model_roles: dict[ModelRole, Name] = Field(
        default_factory=dict,
        description="Model name per role; a missing role uses the deployment's default.",
    )
    active_branch_id: Id = Field(description="Branch the players are on.")
    head_turn_id: Id | None = Field(
        default=None,
        description="Current turn; may sit behind the branch tip after undo. Null before turn 1.",
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime | None = None


class BranchDisposition(StrEnum):
    """What to do with a branch's turns."""

    ACTIVE = "active"  # the branch being played
    RETAINED = "retained"  # kept: can be switched back to
    DISPOSABLE = "disposable"  # may be garbage-collected (e.g. abandoned redo tail)


class Branch(LorekeeperModel):
    """A named line through the turn tree. The root branch has no parent and no fork turn."""

    id: Id = _default_id("branch")
    campaign_id: Id
    name: Name = "main"
    disposition: BranchDisposition = BranchDisposition.ACTIVE
    parent_branch_id: Id | None = Field(default=None, description="Branch this one forked from.")
    fork_turn_id: Id | None = Field(
        default=None, description="Last shared turn: the new branch's first turn is its child."
    )
    tip_turn_id: Id | None = Field(
        default=None, description="Newest retained turn on the branch (redo goes up to here)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_fork(self) -> Self:
        if (self.parent_branch_id is None) != (self.fork_turn_id is None):
            raise ValueError(
                "give both parent_branch_id and fork_turn_id for a forked branch, "
                "or neither for a root branch"
            )
        if self.parent_branch_id == self.id:
            raise ValueError("a branch cannot be its own parent")
        return self


# ============================================================================================
# turns and takes


class InputMode(StrEnum):
    """How the player's input is meant."""

    ACTION = "action"  # what my character does
    DIALOGUE = "dialogue"  # what my character says
    DIRECTION = "direction"  # out-of-character steering of the story
    CONTINUE = "continue"  # no input: narrate on


class SpeakerKind(StrEnum):
    PLAYER = "player"
    GM = "gm"
    NARRATOR = "narrator"
    ENTITY = "entity"  # an in-world character or creature


class Speaker(LorekeeperModel):
    """Who is speaking or acting."""

    kind: SpeakerKind
    entity_id: Id | None = Field(
        default=None,
        description="The speaking entity: required for kind 'entity', optional for 'player' "
        "(their character), not allowed for 'gm' and 'narrator'.",
    )
    name: str | None = Field(default=None, description="Display name, e.g. a player's handle.")

    @model_validator(mode="after")
    def _check_entity(self) -> Self:
        if self.kind is SpeakerKind.ENTITY and self.entity_id is None:
            raise ValueError("a speaker of kind 'entity' needs entity_id (which entity speaks)")
        if self.kind in (SpeakerKind.GM, SpeakerKind.NARRATOR) and self.entity_id is not None:
            raise ValueError(
                f"a speaker of kind {self.kind.value!r} has no entity_id; "
                "use kind 'entity' for an in-world speaker"
            )
        return self


class GenerationMetadata(LorekeeperModel):
    """How a narration was generated."""

    model: Name = Field(description="Model name that generated the text.")
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    cached_prompt_tokens: NonNegativeInt = Field(
        default=0, description="Prompt tokens served from the prefix cache."
    )
    latency_ms: NonNegativeFloat = Field(default=0.0, description="Wall time of the generation.")
    time_to_first_token_ms: NonNegativeFloat | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    seed: int | None = None
    finish_reason: str | None = Field(default=None, description="e.g. 'stop', 'length'.")
    prompt_snapshot_id: Id | None = Field(
        default=None, description="The PromptSnapshot this generation used."
    )

    @model_validator(mode="after")
    def _check_counts(self) -> Self:
        if self.cached_prompt_tokens > self.prompt_tokens:
            raise ValueError("cached_prompt_tokens cannot exceed prompt_tokens")
        if self.time_to_first_token_ms is not None and self.time_to_first_token_ms > self.latency_ms:
            raise ValueError("time_to_first_token_ms cannot exceed latency_ms")
        return self


class TurnStatus(StrEnum):
    PENDING = "pending"  # recorded, narration being generated
    ACCEPTED = "accepted"
    FAILED = "failed"
    SUPERSEDED = "superseded"  # replaced (e.g. regenerated after an OOC correction)


class Turn(LorekeeperModel):
    """One exchange: the player's input and the narration. Turns form a tree by parent links."""

    id: Id = _default_id("turn")
    campaign_id: Id
    branch_id: Id = Field(description="Branch the turn was written on.")
    parent_turn_id: Id | None = Field(default=None, description="Previous turn; null for the first.")
    depth: NonNegativeInt = Field(
        default=0, description="Distance from the root turn (0 for the first turn)."
    )
    input_mode: InputMode = InputMode.ACTION
    speaker: Speaker = Field(default_factory=lambda: Speaker(kind=SpeakerKind.PLAYER))
    text: str = Field(default="", description="The player's input; empty only for 'continue'.")
    narration: str | None = Field(default=None, description="Narration of the selected take.")
    selected_take_id: Id | None = None
    generation: GenerationMetadata | None = None
    status: TurnStatus = TurnStatus.PENDING
    error: str | None = Field(default=None, description="Why generation failed (status 'failed').")
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_turn(self) -> Self:
        if self.parent_turn_id == self.id:
            raise ValueError("a turn cannot be its own parent")
        if self.parent_turn_id is None and self.depth != 0:
            raise ValueError(f"a turn without a parent has depth 0, got {self.depth}")
        if self.parent_turn_id is not None and self.depth == 0:
            raise ValueError("a turn with a parent has depth >= 1")
        if self.input_mode is not InputMode.CONTINUE and not self.text.strip():
            raise ValueError(
                f"input mode {self.input_mode.value!r} needs text; use input_mode 'continue' "
                "to narrate on without input"
            )
        if self.status is TurnStatus.ACCEPTED and not (self.narration and self.narration.strip()):
            raise ValueError("an accepted turn needs its narration")
        if self.status is TurnStatus.FAILED and not self.error:
            raise ValueError("a failed turn needs an error message")
        return self


class Take(LorekeeperModel):
    """An alternate narration of a turn; exactly one take of a turn is selected."""

    id: Id = _default_id("take")
    turn_id: Id
    index: NonNegativeInt = Field(default=0, description="Order of generation, from 0.")
    narration: Text
    selected: bool = False
    generation: GenerationMetadata | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)


# ============================================================================================
# checkpoints and snapshots


class WorldStateCheckpointKind(StrEnum):
    """When a world-state checkpoint was taken."""

    BEFORE_USER_INPUT = "before_user_input"
    AFTER_USER_INPUT = "after_user_input"
    AFTER_CHARACTER_ROUND = "after_character_round"
    BEFORE_OOC_MUTATION = "before_ooc_mutation"  # before an out-of-character edit of canon
    MANUAL = "manual"  # named by a user


class SnapshotKind(StrEnum):
    """When an automatic graph-state snapshot was taken (subset of checkpoint kinds)."""

    BEFORE_USER_INPUT = "before_user_input"
    AFTER_USER_INPUT = "after_user_input"
    AFTER_CHARACTER_ROUND = "after_character_round"
    INTERVAL = "interval"  # every K events along a line of the story, to bound replay


class Checkpoint(LorekeeperModel):
    """A named pointer to a turn, restorable."""

    id: Id = _default_id("cp")
    campaign_id: Id
    branch_id: Id
    turn_id: Id
    name: Name
    kind: WorldStateCheckpointKind = WorldStateCheckpointKind.MANUAL
    snapshot_id: Id | None = Field(
        default=None, description="The (:Snapshot) node of the state taken with the checkpoint, if any."
    )
    description: str | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)


# ============================================================================================
# scenes


class SceneStatus(StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"


class Scene(LorekeeperModel):
    """A unit of play; proposals made in it are canonized when it ends."""

    id: Id = _default_id("scene")
    campaign_id: Id
    branch_id: Id
    order: NonNegativeInt = Field(description="Position of the scene in the campaign, from 0.")
    status: SceneStatus = SceneStatus.ACTIVE
    title: str | None = None
    location_entity_id: Id | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list)
    summary: str | None = None
    canonical_outcomes: list[Text] = Field(
        default_factory=list, description="What became canon when the scene ended, in words."
    )
    start_turn_id: Id | None = None
    end_turn_id: Id | None = None
    started_at: UtcDatetime = Field(default_factory=utc_now)
    ended_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _check_status(self) -> Self:
        if self.status is SceneStatus.COMPLETED and self.ended_at is None:
            raise ValueError("a completed scene needs ended_at")
        if self.status is SceneStatus.ACTIVE and self.ended_at is not None:
            raise ValueError("an active scene has no ended_at; set status 'completed'")
        if self.ended_at is not None and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        return self


# ============================================================================================
# dice and resolutions

_SIMPLE_DICE_RE = re.compile(r"\s*(\d*)\s*[dD]\s*(\d+)\s*(?:([+-])\s*(\d+))?\s*")


class DiceRoll(LorekeeperModel):
    """A roll of dice. Simple ``NdM±K`` expressions are checked against the rolls and total."""

    expression: Name = Field(description="Dice expression, e.g. '1d20+3', '4d6kh3', '5d10>=8'.")
    rolls: list[int] = Field(min_length=1, description="Each die's face, in roll order.")
    total: int = Field(description="Result after the expression's modifiers/keeps.")
    target: int | None = Field(default=None, description="Number to meet (DC, TN), if any.")

    @model_validator(mode="after")
    def _check_simple(self) -> Self:
        match = _SIMPLE_DICE_RE.fullmatch(self.expression)
        if match is None:
            return self  # keep/explode/pool expressions: the engine's word is final
        count_text, faces_text, sign, modifier_text = match.groups()
        count = int(count_text) if count_text else 1
        faces = int(faces_text)
        if len(self.rolls) != count:
            raise ValueError(f"{self.expression!r} rolls {count} dice, got {len(self.rolls)} rolls")
        if any(not 1 <= r <= faces for r in self.rolls):
            raise ValueError(f"every roll of {self.expression!r} is between 1 and {faces}")
        modifier = int(modifier_text or 0) * (-1 if sign == "-" else 1)
        expected = sum(self.rolls) + modifier
        if self.total != expected:
            raise ValueError(
                f"total {self.total} does not match {self.expression!r} with rolls "
                f"{self.rolls} (expected {expected})"
            )
        return self


class ResolutionMethod(StrEnum):
    DICE = "dice"
    GM_RULING = "gm_ruling"
    AUTOMATIC = "automatic"  # the rules say it simply happens


class ResolutionOutcome(StrEnum):
    SUCCESS = "success"
    PARTIAL = "partial"
    FAILURE = "failure"


class Resolution(LorekeeperModel):
    """How a player's proposal was resolved (the price of player authority)."""

    method: ResolutionMethod
    outcome: ResolutionOutcome
    roll: DiceRoll | None = Field(default=None, description="The roll, for method 'dice'.")
    note: str | None = None
    resolved_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_roll(self) -> Self:
        if self.method is ResolutionMethod.DICE and self.roll is None:
            raise ValueError("a resolution by dice needs the roll")
        if self.method is not ResolutionMethod.DICE and self.roll is not None:
            raise ValueError(f"method {self.method.value!r} has no roll; use method 'dice'")
        return self


# ============================================================================================
# canon: entities, facts, axioms, relationships, threads


class Entity(LorekeeperModel):
    """A thing in the world (genre-neutral kinds)."""

    id: Id = _default_id("ent")
    world_id: Id
    campaign_id: Id | None = Field(
        default=None, description="Campaign that introduced it; null for world-level entities."
    )
    kind: EntityKind
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    description: str | None = None
    status: EntityStatus = EntityStatus.ACTIVE
    attributes: dict[str, AttributeValue] = Field(
        default_factory=dict, description="Absolute attribute values, e.g. {'hp': 12}."
    )
    created_turn_id: Id | None = Field(default=None, description="Turn it entered the story.")
    created_at: UtcDatetime = Field(default_factory=utc_now)


class Evidence(LorekeeperModel):
    """What justifies a claim: turns and/or knowledge chunks (become SUPPORTED_BY edges)."""

    turn_ids: list[Id] = Field(default_factory=list)
    chunk_ids: list[Id] = Field(default_factory=list)
    quote: str | None = Field(default=None, description="Short excerpt that supports the claim.")

    @property
    def is_empty(self) -> bool:
        return not (self.turn_ids or self.chunk_ids)


def _check_object_xor_value(object_entity_id: str | None, value: Any) -> None:
    if (object_entity_id is None) == (value is None):
        raise ValueError("a fact needs exactly one of `object_entity_id` (an entity) or `value` (a literal)")


class Fact(LorekeeperModel):
    """A canonical statement: subject --predicate--> object entity or literal value."""

    id: Id = _default_id("fact")
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

    @model_validator(mode="after")
    def _check_fact(self) -> Self:
        _check_object_xor_value(self.object_entity_id, self.value)
        if self.replaces == self.id:
            raise ValueError("a fact cannot replace itself")
        if self.canon_level is CanonLevel.RETCONNED and self.status is FactStatus.ACTIVE:
            raise ValueError("a retconned fact cannot be active; set status 'superseded'")
        return self


class Axiom(LorekeeperModel):
    """A rule of the world that always holds (e.g. 'magic requires a spoken word')."""

    id: Id = _default_id("axiom")
    world_id: Id
    text: Text
    category: str | None = Field(default=None, description="e.g. 'magic', 'physics', 'society'.")
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

    id: Id = _default_id("rel")
    source_entity_id: Id
    target_entity_id: Id
    kind: Name = Field(description="e.g. 'ally_of', 'member_of', 'sibling_of'.")
    description: str | None = None
    status: RelationshipStatus = RelationshipStatus.ACTIVE
    since_turn_id: Id | None = None
    until_turn_id: Id | None = None

    @model_validator(mode="after")
    def _check_span(self) -> Self:
        if self.status is RelationshipStatus.ENDED and self.until_turn_id is None:
            raise ValueError("an ended relationship needs until_turn_id")
        if self.status is RelationshipStatus.ACTIVE and self.until_turn_id is not None:
            raise ValueError("an active relationship has no until_turn_id; set status 'ended'")
        return self


class ThreadStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class StoryThread(LorekeeperModel):
    """A plot thread: a quest, a mystery, an unanswered question."""

    id: Id = _default_id("thread")
    campaign_id: Id
    title: Name
    description: str | None = None
    status: ThreadStatus = ThreadStatus.OPEN
    involved_entity_ids: list[Id] = Field(default_factory=list)
    opened_turn_id: Id | None = None
    resolved_turn_id: Id | None = None
    resolution: str | None = None

    @model_validator(mode="after")
    def _check_status(self) -> Self:
        if self.status is ThreadStatus.RESOLVED and self.resolved_turn_id is None:
            raise ValueError("a resolved thread needs resolved_turn_id")
        if self.status is ThreadStatus.OPEN and self.resolved_turn_id is not None:
            raise ValueError("an open thread has no resolved_turn_id; set status 'resolved'")
        return self


class WorldStateView(LorekeeperModel):
    """The world as of one position in the story tree: what was true then, on that branch."""

    campaign_id: Id
    branch_id: Id
    turn_id: Id | None = Field(description="The turn the state is as of (null before the first turn).")
    entities: list[Entity] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list, description="Every fact, current or not (see status).")
    relationships: list[Relationship] = Field(default_factory=list)
    threads: list[StoryThread] = Field(default_factory=list)
    locations: dict[str, Id] = Field(default_factory=dict, description="Entity id -> the location it is at.")
    holders: dict[str, Id] = Field(default_factory=dict, description="Item id -> the entity holding it.")
    active_scene_id: Id | None = None
    event_count: NonNegativeInt = Field(default=0, description="Events folded into this state.")
    state_hash: Sha256Hex = Field(description="sha256 of the state (equal worlds, equal hashes).")


# ============================================================================================
# proposals


class ChangeType(StrEnum):
    FACT = "fact"
    ENTITY = "entity"
    RELATIONSHIP = "relationship"
    STATE_CHANGE = "state_change"
    EVENT = "event"


class ProposedFact(LorekeeperModel):
    """Content of a 'fact' proposal."""

    type: Literal["fact"] = "fact"
    subject_entity_id: Id
    predicate: Name
    object_entity_id: Id | None = None
    value: AttributeValue = None
    replaces: Id | None = Field(default=None, description="Fact this would supersede.")
    depends_on: list[Id] = Field(default_factory=list, description="Facts this one follows from.")

    @model_validator(mode="after")
    def _check_object(self) -> Self:
        _check_object_xor_value(self.object_entity_id, self.value)
        return self


class ProposedEntity(LorekeeperModel):
    """Content of an 'entity' proposal: a new entity (or a new description of one)."""

    type: Literal["entity"] = "entity"
    entity_id: Id | None = Field(
        default=None, description="Existing entity to describe; null proposes a new one."
    )
    kind: EntityKind
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    description: str | None = None
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)


class ProposedRelationship(LorekeeperModel):
    """Content of a 'relationship' proposal."""

    type: Literal["relationship"] = "relationship"
    source_entity_id: Id
    target_entity_id: Id
    kind: Name
    description: str | None = None


class ProposedStateChange(LorekeeperModel):
    """Content of a 'state_change' proposal: typed state events, absolute values."""

    type: Literal["state_change"] = "state_change"
    events: StateEventList = Field(min_length=1)


class ProposedEvent(LorekeeperModel):
    """Content of an 'event' proposal: something that happened in the world."""

    type: Literal["event"] = "event"
    title: Name
    description: str | None = None
    participant_entity_ids: list[Id] = Field(default_factory=list)
    location_entity_id: Id | None = None


ProposalContent = Annotated[
    ProposedFact | ProposedEntity | ProposedRelationship | ProposedStateChange | ProposedEvent,
    Field(discriminator="type"),
]
"""Typed content of a proposed change, keyed by ``type``."""


class ProposalStatus(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ProposedChange(LorekeeperModel):
    """A change a turn (or a person) proposes; the gate decides at scene end.

    ``content`` is keyed by ``type``; when the content omits its own ``type`` it is taken from
    the outer one, and the two must agree.
    """

    id: Id = _default_id("prop")
    scene_id: Id
    turn_id: Id | None = Field(default=None, description="Turn that proposed it, if any.")
    type: ChangeType
    content: ProposalContent
    evidence: Evidence = Field(default_factory=Evidence)
    authority: Authority
    confidence: Confidence = Field(description="Proposer's confidence, 0..1.")
    proposed_by: str | None = Field(
        default=None, description="Who proposed it: a user id, 'narrator', 'extractor'..."
    )
    resolution: Resolution | None = Field(
        default=None, description="For player proposals: how they were resolved (dice, ruling)."
    )
    reviewed_by: str | None = Field(
        default=None, description="Who reviewed and approved it (lets a low-confidence system proposal through)."
    )
    status: ProposalStatus = ProposalStatus.PENDING
    rationale: str | None = Field(
        default=None, description="Why it was accepted or rejected (required when rejected)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)
    decided_at: UtcDatetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _tag_content(cls, data: Any) -> Any:
        if isinstance(data, dict):
            content = data.get("content")
            if isinstance(content, dict) and "type" not in content and "type" in data:
                data = {**data, "content": {**content, "type": data["type"]}}
        return data

    @model_validator(mode="after")
    def _check_proposal(self) -> Self:
        if self.content.type != self.type.value:
            raise ValueError(f"type is {self.type.value!r} but content is of type {self.content.type!r}")
        if self.authority is Authority.SOURCE and not self.evidence.chunk_ids:
            raise ValueError("a source-authority proposal needs evidence.chunk_ids")
        if self.authority in (Authority.PLAYER, Authority.SYSTEM) and self.evidence.is_empty:
            raise ValueError(
                f"a {self.authority.value}-authority proposal needs evidence (turn_ids or chunk_ids)"
            )
        if self.resolution is not None and self.authority is not Authority.PLAYER:
            raise ValueError("a resolution is recorded only for player proposals")
        if (
            self.status is ProposalStatus.ACCEPTED
            and self.authority is Authority.PLAYER
            and self.resolution is None
        ):
            raise ValueError("an accepted player proposal needs its resolution (e.g. a dice roll)")
        if self.status is ProposalStatus.REJECTED and not self.rationale:
            raise ValueError("a rejected proposal needs a rationale")
        if self.status is ProposalStatus.PENDING and self.decided_at is not None:
            raise ValueError("a pending proposal has no decided_at")
        return self


class IssueSeverity(StrEnum):
    ERROR = "error"  # the event cannot be applied
    WARNING = "warning"  # applied, but worth a look


class EventIssue(LorekeeperModel):
    """A problem the validator found with one event (or the whole proposal)."""

    event_index: NonNegativeInt | None = Field(
        default=None, description="Index into the checked list of events; null for the whole batch."
    )
    event_id: Id | None = None
    severity: IssueSeverity = IssueSeverity.ERROR
    code: Name = Field(description="Stable machine code, e.g. 'unknown_entity', 'contradicts_canon'.")
    message: Text = Field(description="What is wrong and how to fix it.")


# ============================================================================================
# memories, summaries, snapshots of what the narrator saw


class SubjectiveKind(StrEnum):
    """Kinds of observer-scoped (subjective) records."""

    MEMORY = "memory"  # what the observer remembers happening
    CLAIM = "claim"  # what the observer believes or was told (may be false)
    EMOTION = "emotion"  # how the observer feels about something


class Memory(LorekeeperModel):
    """What one entity remembers, believes or feels. Retrieved only on the anchor's lineage."""

    id: Id = _default_id("mem")
    campaign_id: Id
    observer_entity_id: Id = Field(description="Whose memory this is (observer-scoped).")
    kind: SubjectiveKind = SubjectiveKind.MEMORY
    text: Text
    subject_entity_ids: list[Id] = Field(default_factory=list, description="Who/what it is about.")
    anchor_turn_id: Id = Field(
        description="Turn that produced it; retrieved only when this turn is an ancestor of the head."
    )
    salience: Confidence = Field(default=0.5, description="How much it matters to the observer.")
    created_at: UtcDatetime = Field(default_factory=utc_now)


class SummaryScope(StrEnum):
    SCENE = "scene"
    SESSION = "session"
    ARC = "arc"  # several scenes
    CAMPAIGN = "campaign"


class Summary(LorekeeperModel):
    """A summary of the story up to its anchor turn."""

    id: Id = _default_id("sum")
    campaign_id: Id
    scope: SummaryScope
    scene_id: Id | None = Field(default=None, description="The scene, for scope 'scene'.")
    anchor_turn_id: Id = Field(description="Last turn the summary covers.")
    from_turn_id: Id | None = Field(default=None, description="First turn it covers, if bounded.")
    text: Text
    token_count: NonNegativeInt = 0
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_scope(self) -> Self:
        if self.scope is SummaryScope.SCENE and self.scene_id is None:
            raise ValueError("a scene summary needs scene_id")
        return self


class PromptSectionKind(StrEnum):
    """Prompt sections in their required order (stable order keeps the prefix cache warm)."""

    NARRATOR_RULES = "narrator_rules"
    WORLD_AXIOMS = "world_axioms"
    SCENE_STATE = "scene_state"
    RETRIEVED_KNOWLEDGE = "retrieved_knowledge"
    MEMORIES = "memories"
    RECENT_TURNS = "recent_turns"
    PLAYER_INPUT = "player_input"


_SECTION_RANK = {kind: rank for rank, kind in enumerate(PromptSectionKind)}


class PromptSection(LorekeeperModel):
    kind: PromptSectionKind
    token_count: NonNegativeInt
    content_hash: Sha256Hex = Field(description="sha256 of the section's text.")


class PromptSnapshot(LorekeeperModel):
    """What exactly was sent to the narrator for a turn; the full text is in the object store."""

    id: Id = _default_id("psnap")
    turn_id: Id
    model: Name
    sections: list[PromptSection] = Field(
        min_length=1, description="Sections in prompt order (the PromptSectionKind order)."
    )
    content_hash: Sha256Hex = Field(description="sha256 of the whole assembled prompt.")
    blob_key: BlobKey | None = Field(default=None, description="Object-store key of the prompt.")
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @property
    def total_tokens(self) -> int:
        return sum(s.token_count for s in self.sections)

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        ranks = [_SECTION_RANK[s.kind] for s in self.sections]
        if ranks != sorted(ranks):
            order = " -> ".join(k.value for k in PromptSectionKind)
            got = " -> ".join(s.kind.value for s in self.sections)
            raise ValueError(f"prompt sections must follow the order {order}; got {got}")
        return self


class RetrievalLeg(StrEnum):
    VECTOR = "vector"
    FULL_TEXT = "full_text"
    GRAPH = "graph"


class RetrievalHit(LorekeeperModel):
    chunk_id: Id
    rank: PositiveInt = Field(description="1-based rank after fusion (and rerank).")
    item_uid: Id | None = None
    leg_scores: dict[RetrievalLeg, float] = Field(
        default_factory=dict, description="Raw score from each leg that found the chunk."
    )
    fused_score: float | None = None
    rerank_score: float | None = None
    used_in_prompt: bool = Field(default=True, description="Whether it made it into the prompt.")


class RetrievalRecord(LorekeeperModel):
    """What retrieval returned for a turn (provenance of the narrator's knowledge)."""

    id: Id = _default_id("ret")
    turn_id: Id
    query: Text
    filters: dict[str, list[str]] = Field(
        default_factory=dict, description="Filters applied, e.g. {'library_type': ['rulebook']}."
    )
    hits: list[RetrievalHit] = Field(default_factory=list)
    error: Text | None = Field(
        default=None, description="Why retrieval failed; the turn was then narrated without knowledge."
    )
    latency_ms: NonNegativeFloat | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_ranks(self) -> Self:
        ranks = [h.rank for h in self.hits]
        if ranks != sorted(set(ranks)):
            raise ValueError(f"hit ranks must be unique and ascending, got {ranks}")
        return self


# ============================================================================================
# presentation


class NarrationBlock(LorekeeperModel):
    type: Literal["narration"] = "narration"
    text: Text


class DialogueBlock(LorekeeperModel):
    type: Literal["dialogue"] = "dialogue"
    speaker: Speaker
    text: Text


class DiceRollBlock(LorekeeperModel):
    type: Literal["dice_roll"] = "dice_roll"
    roll: DiceRoll
    label: str | None = Field(default=None, description="What was rolled for, e.g. 'Stealth'.")
    roller: Speaker | None = None


class SystemNoteBlock(LorekeeperModel):
    type: Literal["system_note"] = "system_note"
    text: Text
    level: Literal["info", "warning"] = "info"


class ImageBlock(LorekeeperModel):
    type: Literal["image"] = "image"
    media_asset_id: Id = Field(description="The MediaAsset (or ImageAsset uid) to show.")
    alt_text: Text
    caption: str | None = None


PresentationBlock = Annotated[
    NarrationBlock | DialogueBlock | DiceRollBlock | SystemNoteBlock | ImageBlock,
    Field(discriminator="type"),
]
"""One block of a turn as a client shows it, keyed by ``type``."""


class TurnPresentation(LorekeeperModel):
    """A turn laid out for a client: narration, dialogue, rolls, notes and images in order."""

    turn_id: Id
    take_id: Id | None = None
    blocks: list[PresentationBlock] = Field(min_length=1)


# ============================================================================================
# what the gate reports, and why the narrator knew what it knew


class ProposalDecision(LorekeeperModel):
    """The gate's decision on one proposal."""

    proposal_id: Id
    status: ProposalStatus
    rationale: str
    authority: Authority | None = Field(default=None, description="Authority of the proposal decided.")
    event_ids: list[Id] = Field(default_factory=list, description="Events committed for it (accepted only).")


class GateReport(LorekeeperModel):
    """What a scene-end (or mid-scene) commit did."""

    scene_id: Id
    campaign_id: Id
    branch_id: Id = Field(description="Branch the canon was written on.")
    forked: bool = Field(default=False, description="Whether the commit forked a branch (head behind the tip).")
    decisions: list[ProposalDecision] = Field(default_factory=list)
    skipped: list[Id] = Field(default_factory=list, description="Proposals already decided before this call.")
    events_committed: NonNegativeInt = 0
    version: NonNegativeInt | None = Field(default=None, description="Campaign version written (null: none).")
    already_completed: bool = Field(default=False, description="The scene had already ended: nothing changed.")

    @property
    def accepted(self) -> list[ProposalDecision]:
        return [d for d in self.decisions if d.status is ProposalStatus.ACCEPTED]

    @property
    def rejected(self) -> list[ProposalDecision]:
        return [d for d in self.decisions if d.status is ProposalStatus.REJECTED]


class ProvenancePassage(LorekeeperModel):
    """An ingested passage that informed a turn."""

    chunk_id: Id
    rank: PositiveInt
    score: float | None = None
    item_uid: Id | None = None
    title: str | None = None
    page_start: PositiveInt | None = None
    page_end: PositiveInt | None = None
    heading_path: list[str] = Field(default_factory=list)


class TurnProvenance(LorekeeperModel):
    """Why the narrator knew what it knew at a turn, and what the turn made canon."""

    turn_id: Id
    prompt: PromptSnapshot | None = None
    prompt_text: str | None = Field(default=None, description="The exact prompt sent to the model.")
    retrievals: list[RetrievalRecord] = Field(default_factory=list)
    passages: list[ProvenancePassage] = Field(default_factory=list)
    canon_event_ids: list[Id] = Field(default_factory=list, description="Committed events anchored at the turn.")
