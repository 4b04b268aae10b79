"""The gate's policy: who may make what canon, and what happens when a proposal contradicts canon.

Pure decisions over a proposal and the world state; :mod:`story.gate` applies them in order and
writes the accepted ones. Presets sit beside the config (``STRICT``, ``PERMISSIVE``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.common import AttributeValue, Authority, FactStatus
from schemas.events import (
    BaseStateEvent,
    EntityAttributeSet,
    EntityCreated,
    EventRecorded,
    FactAdded,
    FactInvalidated,
    FactInvalidation,
    RelationshipAdded,
)
from schemas.story import (
    ProposedChange,
    ProposedEntity,
    ProposedEvent,
    ProposedFact,
    ProposedRelationship,
    ProposedStateChange,
    ResolutionOutcome,
)
from story.predicates import same_field
from story.state import WorldState

#: Higher outranks lower: a rulebook (source) outranks the GM, who outranks players and the system.
AUTHORITY_RANK: dict[str, int] = {
    Authority.SOURCE.value: 3,
    Authority.GM.value: 2,
    Authority.PLAYER.value: 1,
    Authority.SYSTEM.value: 0,
}


class ContradictionPolicy(StrEnum):
    """What a proposal that contradicts canon of higher authority does."""

    REJECT = "reject"  # the proposal is rejected; canon stands
    DISPUTE = "dispute"  # the proposal enters, and both it and the canon fact are marked disputed


class GatePolicy(BaseModel):
    """How the canonization gate judges proposals."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_confidence_threshold: float = Field(
        default=0.8, ge=0.0, le=1.0, description="System proposals at or above this confidence pass without review."
    )
    accept_partial_success: bool = Field(
        default=True, description="Whether a player's proposal resolved with a partial success is accepted."
    )
    contradiction: ContradictionPolicy = Field(
        default=ContradictionPolicy.REJECT,
        description="What happens to a proposal that contradicts a canon fact of higher authority.",
    )
    source_contradiction: ContradictionPolicy = Field(
        default=ContradictionPolicy.REJECT,
        description="What happens to a player's or the system's proposal that contradicts a rulebook source "
        "fact the campaign draws on (story.source_check): rejected, or accepted with the new fact marked "
        "disputed. A GM's contradicting proposal is always accepted, as a house rule of the campaign.",
    )
    single_valued_predicates: frozenset[str] = Field(
        default=frozenset(
            {"located_in", "born_in", "ruled_by", "leader_of", "married_to", "species", "age", "capital", "owner"}
        ),
        description="Predicates with one current object per subject. Facts with a literal value are "
        "always single-valued; facts pointing at an entity are multi-valued unless listed here.",
    )


STRICT = GatePolicy(system_confidence_threshold=0.95, accept_partial_success=False)
"""System proposals need near certainty; a partial success is not enough for a player."""

PERMISSIVE = GatePolicy(system_confidence_threshold=0.5, contradiction=ContradictionPolicy.DISPUTE)
"""Let more through and mark contradictions disputed instead of rejecting them."""


@dataclass(slots=True)
class Judgement:
    """The gate's word on one proposal before validation: accepted events, or why not."""

    accepted: bool
    rationale: str
    events: list[BaseStateEvent] = field(default_factory=list)
    overrides: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    """A GM's facts that override campaign canon of source authority: event id -> (fact id, the facts overridden),
    kept as house rules (:func:`story.source_check.canon_rulings`)."""


def authority_verdict(proposal: ProposedChange, policy: GatePolicy) -> str | None:
    """Why the proposal's authority does not let it through, or None when it does."""
    match proposal.authority:
        case Authority.SOURCE | Authority.GM:
            return None
        case Authority.PLAYER:
            if proposal.resolution is None:
                return "a player's proposal needs a resolution record (a dice roll or a GM ruling)"
            outcome = proposal.resolution.outcome
            if outcome is ResolutionOutcome.FAILURE:
                return "the resolution failed"
            if outcome is ResolutionOutcome.PARTIAL and not policy.accept_partial_success:
                return "a partial success is not enough under this policy"
            return None
        case Authority.SYSTEM:
            if proposal.reviewed_by:
                return None
            if proposal.confidence >= policy.system_confidence_threshold:
                return None
            return (
                f"system confidence {proposal.confidence:.2f} is below the threshold "
                f"{policy.system_confidence_threshold:.2f} and nobody reviewed it"
            )
    return f"unknown authority {proposal.authority!r}"  # pragma: no cover - the enum is closed


def awaits_review(proposal: ProposedChange, policy: GatePolicy) -> str | None:
    """Why ``proposal`` waits for the GM's review, or None: a system proposal below the confidence threshold
    that nobody approved stays pending (the gate leaves it in the queue) instead of being rejected."""
    if proposal.authority is not Authority.SYSTEM or proposal.reviewed_by:
        return None
    if proposal.confidence >= policy.system_confidence_threshold:
        return None
    return (
        f"awaiting the GM's review: system confidence {proposal.confidence:.2f} is below the threshold "
        f"{policy.system_confidence_threshold:.2f}"
    )


def proposal_events(proposal: ProposedChange, *, turn_id: str | None, scene_id: str) -> list[BaseStateEvent]:
    """The typed state events that accepting ``proposal`` would commit (before contradiction checks)."""
    turn = proposal.turn_id or turn_id
    content = proposal.content
    authority = proposal.authority
    if isinstance(content, ProposedFact):
        return [
            FactAdded(
                turn_id=turn,
                scene_id=scene_id,
                subject_entity_id=content.subject_entity_id,
                predicate=content.predicate,
                object_entity_id=content.object_entity_id,
                value=content.value,
                authority=authority,
                confidence=proposal.confidence,
                replaces=content.replaces,
                depends_on=content.depends_on,
                visibility=content.visibility,
            )
        ]
    if isinstance(content, ProposedEntity):
        if content.entity_id is None:
            return [
                EntityCreated(
                    turn_id=turn,
                    scene_id=scene_id,
                    entity_id=_entity_id(proposal),
                    entity_kind=content.kind,
                    name=content.name,
                    aliases=content.aliases,
                    description=content.description,
                    attributes=content.attributes,
                    visibility=content.visibility,
                )
            ]
        updates: dict[str, AttributeValue] = dict(content.attributes)
        if content.description is not None:
            updates["description"] = content.description
        return [
            EntityAttributeSet(
                turn_id=turn, scene_id=scene_id, entity_id=content.entity_id, attribute=name, value=value
            )
            for name, value in sorted(updates.items())
        ]
    if isinstance(content, ProposedRelationship):
        return [
            RelationshipAdded(
                turn_id=turn,
                scene_id=scene_id,
                source_entity_id=content.source_entity_id,
                target_entity_id=content.target_entity_id,
                relationship_kind=content.kind,
                description=content.description,
                visibility=content.visibility,
            )
        ]
    if isinstance(content, ProposedStateChange):
        out: list[BaseStateEvent] = []
        for event in content.events:
            data = event.model_dump()
            data["turn_id"] = data.get("turn_id") or turn
            data["scene_id"] = data.get("scene_id") or scene_id
            if isinstance(event, FactAdded):
                data["authority"] = authority
            out.append(type(event).model_validate(data))
        return out
    if isinstance(content, ProposedEvent):
        return [
            EventRecorded(
                turn_id=turn,
                scene_id=scene_id,
                happening_id=f"hap_{proposal.id.split('_', 1)[-1]}",
                title=content.title,
                description=content.description,
                participant_entity_ids=content.participant_entity_ids,
                location_entity_id=content.location_entity_id,
            )
        ]
    raise TypeError(f"unknown proposal content {type(content).__name__}")  # pragma: no cover


def _entity_id(proposal: ProposedChange) -> str:
    """A new entity's id is derived from the proposal's, so judging it twice creates one entity."""
    return f"ent_{proposal.id.split('_', 1)[-1]}"


def resolve_contradictions(
    events: list[BaseStateEvent], state: WorldState, authority: Authority, policy: GatePolicy
) -> Judgement:
    """Check the facts ``events`` add against current canon and settle each contradiction.

    A fact contradicts a current fact with the same subject and single-valued predicate and a
    different object or value. Against canon of equal or lower authority, the new fact supersedes
    the old (``replaces``); against higher authority the policy rejects the proposal or marks both
    facts disputed. Restating a current fact is rejected as a duplicate. An explicit ``replaces`` of
    a fact of higher authority is refused: that takes a retcon by someone who outranks it.
    """
    rank = AUTHORITY_RANK[authority.value]
    out: list[BaseStateEvent] = []
    notes: list[str] = []
    overrides: dict[str, tuple[str, list[str]]] = {}
    for event in events:
        if not isinstance(event, FactAdded):
            out.append(event)
            continue
        if event.replaces is not None:
            old = state.facts.get(event.replaces)
            if old is not None and AUTHORITY_RANK[old["authority"]] > rank:
                return Judgement(
                    False,
                    f"it would replace fact {event.replaces} of {old['authority']} authority, which outranks "
                    f"{authority.value}; a retcon by that authority is needed",
                )
            out.append(event)
            continue
        single = event.value is not None or event.predicate in policy.single_valued_predicates
        current = _current(state, event)
        same = [fid for fid, f in current if f["object"] == event.object_entity_id and f["value"] == event.value]
        if same:
            return Judgement(False, f"already canon as fact {same[0]}")
        if not single:
            out.append(event)
            continue
        higher = [(fid, f) for fid, f in current if AUTHORITY_RANK[f["authority"]] > rank]
        if higher and authority is Authority.GM and all(f["authority"] == Authority.SOURCE.value for _, f in higher):
            # the GM's word is final at the table: a ruling against the campaign's source canon, a house rule
            overridden = [fid for fid, f in current if f["status"] != FactStatus.SUPERSEDED.value]
            event = event.validated_copy(replaces=overridden[0])
            out.extend(_superseded(event, overridden[1:]))
            overrides[event.event_id] = (event.fact_id, overridden)
            notes.append(
                f"a GM ruling overrides fact {', '.join(overridden)} of source authority, kept as a house rule"
            )
            out.append(event)
            continue
        if higher:
            fid, f = higher[0]
            if policy.contradiction is ContradictionPolicy.REJECT:
                return Judgement(
                    False,
                    f"it contradicts fact {fid} ({event.predicate} = {f['object'] or f['value']!r}) "
                    f"of {f['authority']} authority, which outranks {authority.value}",
                )
            out += [event, *_disputed(event, fid)]
            notes.append(f"disputes fact {fid}")
            continue
        lower = [fid for fid, f in current if f["status"] != FactStatus.SUPERSEDED.value]
        if lower:
            event = event.validated_copy(replaces=lower[0])
            out.extend(_superseded(event, lower[1:]))
            notes.append(f"supersedes fact {', '.join(lower)}")
        out.append(event)
    return Judgement(True, "; ".join(notes), out, overrides)


def _current(state: WorldState, event: FactAdded) -> list[tuple[str, dict[str, Any]]]:
    """The current facts of the event's subject and field, predicates compared as the rulebook check compares
    them ("hp" contradicts "hit_points")."""
    return [
        (fid, f)
        for fid, f in state.facts.items()
        if f["subject"] == event.subject_entity_id
        and f["status"] != FactStatus.SUPERSEDED.value
        and same_field(f["predicate"], event.predicate)
    ]


def _disputed(event: FactAdded, fid: str) -> list[FactInvalidated]:
    """Both facts marked disputed: the new one contradicts ``fid`` of higher authority."""
    return [
        FactInvalidated(
            turn_id=event.turn_id,
            scene_id=event.scene_id,
            fact_id=other,
            invalidation=FactInvalidation.DISPUTED,
            reason=f"{event.fact_id} contradicts {fid} of higher authority",
        )
        for other in (fid, event.fact_id)
    ]


def _superseded(event: FactAdded, fact_ids: list[str]) -> list[FactInvalidated]:
    """The other current facts a new fact supersedes (the first it ``replaces``)."""
    return [
        FactInvalidated(
            turn_id=event.turn_id,
            scene_id=event.scene_id,
            fact_id=fid,
            reason=f"superseded by {event.fact_id}",
            superseded_by=event.fact_id,
        )
        for fid in fact_ids
    ]
