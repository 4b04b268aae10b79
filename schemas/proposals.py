"""Proposals and the canonization gate: dice and resolutions, proposed changes, validation issues and
the gate's report.

Turns only *propose* changes (:class:`ProposedChange`); the canonization gate turns accepted ones
into typed state events (:mod:`schemas.events`) and canon (:mod:`schemas.canon`). Re-exported by
:mod:`schemas.story`.
"""

import re
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, NonNegativeInt, model_validator

from schemas.canon import Evidence, check_object_xor_value
from schemas.common import (
    AttributeValue,
    Authority,
    Confidence,
    EntityKind,
    Id,
    LorekeeperModel,
    UtcDatetime,
    utc_now,
)
from schemas.events import StateEventList
from schemas.story_ids import default_id
from schemas.text import Label, LongText, Name, Note, Text
from schemas.visibility import Visibility

__all__ = [
    "ChangeType",
    "DiceRoll",
    "EventIssue",
    "GateReport",
    "IssueSeverity",
    "ProposalContent",
    "ProposalDecision",
    "ProposalStatus",
    "ProposedChange",
    "ProposedEntity",
    "ProposedEvent",
    "ProposedFact",
    "ProposedRelationship",
    "ProposedStateChange",
    "ProposalReview",
    "Resolution",
    "ResolutionMethod",
    "ResolutionOutcome",
    "ReviewAction",
]


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
                f"total {self.total} does not match {self.expression!r} with rolls {self.rolls} (expected {expected})"
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
    note: Note | None = None
    resolved_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_roll(self) -> Self:
        if self.method is ResolutionMethod.DICE and self.roll is None:
            raise ValueError("a resolution by dice needs the roll")
        if self.method is not ResolutionMethod.DICE and self.roll is not None:
            raise ValueError(f"method {self.method.value!r} has no roll; use method 'dice'")
        return self


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
    visibility: Visibility | None = Field(
        default=None,
        description="Who at the table may see the fact (a secret: 'gm' or characters); unset: public.",
    )

    @model_validator(mode="after")
    def _check_object(self) -> Self:
        check_object_xor_value(self.object_entity_id, self.value)
        return self


class ProposedEntity(LorekeeperModel):
    """Content of an 'entity' proposal: a new entity (or a new description of one)."""

    type: Literal["entity"] = "entity"
    entity_id: Id | None = Field(default=None, description="Existing entity to describe; null proposes a new one.")
    kind: EntityKind
    name: Name
    aliases: list[Name] = Field(default_factory=list)
    description: Text | None = None
    attributes: dict[Label, AttributeValue] = Field(default_factory=dict)
    visibility: Visibility | None = Field(
        default=None, description="Who at the table may see a new entity (a hidden NPC: 'gm'); unset: public."
    )

    @model_validator(mode="after")
    def _visibility_of_new(self) -> Self:
        if self.entity_id is not None and self.visibility is not None:
            raise ValueError("visibility is set when an entity enters the story (entity_id null), not to describe one")
        return self


class ProposedRelationship(LorekeeperModel):
    """Content of a 'relationship' proposal."""

    type: Literal["relationship"] = "relationship"
    source_entity_id: Id
    target_entity_id: Id
    kind: Name
    description: Text | None = None
    visibility: Visibility | None = Field(
        default=None, description="Who at the table may see the relationship (a secret tie: 'gm'); unset: public."
    )


class ProposedStateChange(LorekeeperModel):
    """Content of a 'state_change' proposal: typed state events, absolute values."""

    type: Literal["state_change"] = "state_change"
    events: StateEventList = Field(min_length=1)


class ProposedEvent(LorekeeperModel):
    """Content of an 'event' proposal: something that happened in the world."""

    type: Literal["event"] = "event"
    title: Name
    description: Text | None = None
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
    SUPERSEDED = "superseded"  # proposed by a take that a retake replaced: never judged, never canon


class ReviewAction(StrEnum):
    """What a GM's review does to a pending proposal."""

    ACCEPT = "accept"  # canon as proposed, on the GM's authority, at the next commit or the scene's end
    REJECT = "reject"  # never canon
    EDIT = "edit"  # canon with the GM's content in place of the proposed one


class ProposalReview(LorekeeperModel):
    """A GM's review of a pending proposal: accepted, rejected or edited (new typed content), with why, by whom
    and when. The gate applies the latest review of a proposal when it judges it."""

    id: Id = default_id("rev")
    proposal_id: Id
    action: ReviewAction
    content: ProposalContent | None = Field(default=None, description="The GM's content (action 'edit' only).")
    rationale: Note = Field(description="Why the GM accepted, rejected or edited it.")
    reviewer: Name = Field(description="Who reviewed it: the caller's key.")
    reviewed_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_content(self) -> Self:
        if (self.action is ReviewAction.EDIT) != (self.content is not None):
            raise ValueError("an edit carries the new content; accept and reject carry none")
        return self


class ProposedChange(LorekeeperModel):
    """A change a turn (or a person) proposes; the gate decides at scene end.

    ``content`` is keyed by ``type``; when the content omits its own ``type`` it is taken from
    the outer one, and the two must agree.
    """

    id: Id = default_id("prop")
    scene_id: Id
    turn_id: Id | None = Field(default=None, description="Turn that proposed it, if any.")
    type: ChangeType
    content: ProposalContent
    evidence: Evidence = Field(default_factory=Evidence)
    authority: Authority
    confidence: Confidence = Field(description="Proposer's confidence, 0..1.")
    proposed_by: Name | None = Field(default=None, description="Who proposed it: a user id, 'narrator', 'extractor'...")
    resolution: Resolution | None = Field(
        default=None, description="For player proposals: how they were resolved (dice, ruling)."
    )
    reviewed_by: Name | None = Field(
        default=None, description="Who reviewed and approved it (lets a low-confidence system proposal through)."
    )
    review: ProposalReview | None = Field(
        default=None, description="The GM's latest review (accept, reject or edit), applied by the gate."
    )
    status: ProposalStatus = ProposalStatus.PENDING
    rationale: LongText | None = Field(
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
            raise ValueError(f"a {self.authority.value}-authority proposal needs evidence (turn_ids or chunk_ids)")
        if self.resolution is not None and self.authority is not Authority.PLAYER:
            raise ValueError("a resolution is recorded only for player proposals")
        if self.status is ProposalStatus.ACCEPTED and self.authority is Authority.PLAYER and self.resolution is None:
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
# what the gate reports


class ProposalDecision(LorekeeperModel):
    """The gate's decision on one proposal."""

    proposal_id: Id
    status: ProposalStatus
    rationale: str
    authority: Authority | None = Field(default=None, description="Authority of the proposal decided.")
    event_ids: list[Id] = Field(default_factory=list, description="Events committed for it (accepted only).")
    source_fact_ids: list[Id] = Field(
        default_factory=list,
        description="Rulebook source facts the gate held it against (agreed with, contradicted or overridden).",
    )
    house_rule: bool = Field(
        default=False, description="A GM ruling that overrides the rulebook: kept as a house rule of the campaign."
    )


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
    awaiting_review: list[Id] = Field(
        default_factory=list,
        description="Proposals left pending for the GM's review (a system proposal below the confidence "
        "threshold): they stay in the queue, after the scene's end too, until reviewed and committed.",
    )
    unchecked_axioms: list[Text] = Field(
        default_factory=list,
        description="The world's axioms the gate could not check the proposals against (no axiom judge "
        "configured, or it failed).",
    )

    @property
    def accepted(self) -> list[ProposalDecision]:
        return [d for d in self.decisions if d.status is ProposalStatus.ACCEPTED]

    @property
    def rejected(self) -> list[ProposalDecision]:
        return [d for d in self.decisions if d.status is ProposalStatus.REJECTED]
