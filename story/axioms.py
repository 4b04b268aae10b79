"""The world's axioms at the gate: a judge reads the proposals against them, or the gate says it could not.

An axiom is free text ("magic requires a spoken word", "the dead do not return"); nothing deterministic
can tell whether "Brenna casts a silent ward" breaks the first. An :class:`AxiomJudge` can: the story
service holds one (``StoryService.axiom_judge``), ``narrator.axioms.LLMAxiomJudge`` asks a model with
structured output, and :mod:`serve.services` binds it when an extractor engine is configured. Without
one, or when it fails, every axiom is listed as unchecked on the gate's report
(:attr:`schemas.story.GateReport.unchecked_axioms`): a table must know that "accepted" did not mean
"consistent with the world's law".

A proposal the judge finds breaking an axiom is rejected, with the axiom and the judge's reason in its
rationale; a GM's is accepted with the same note (the GM's word is final at the table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.story import (
    Axiom,
    ProposedChange,
    ProposedEntity,
    ProposedEvent,
    ProposedFact,
    ProposedRelationship,
    ProposedStateChange,
)
from story.state import WorldState


@dataclass(frozen=True, slots=True)
class ProposalText:
    """A proposal as a judge reads it: its id, who proposes it, and what it says in words."""

    proposal_id: str
    authority: str
    text: str


@dataclass(slots=True)
class AxiomRulings:
    """What a judge found: per proposal, the axioms it breaks with why; and the axioms left unchecked."""

    violations: dict[str, list[str]] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    judge: str = "none"


class AxiomJudge(Protocol):
    """Reads proposals against a world's axioms."""

    name: str

    def judge(self, axioms: Sequence[Axiom], proposals: Sequence[ProposalText]) -> AxiomRulings:
        """Which proposals break which axioms.

        Returns:
            ``violations`` by proposal id, each an axiom's text with the reason ("'…': because …");
            ``unchecked`` the texts of the axioms the judge could not rule on (it failed, or said
            it could not tell).
        """
        ...


def _name(state: WorldState, entity_id: str | None, created: Mapping[str, str]) -> str:
    if entity_id is None:
        return "?"
    entity = state.entities.get(entity_id)
    return str(entity["name"]) if entity is not None else created.get(entity_id, entity_id)


def describe(proposals: Sequence[ProposedChange], state: WorldState) -> list[ProposalText]:
    """The proposals in words, entities by name (the batch's new entities too)."""
    created = {
        f"ent_{p.id.split('_', 1)[-1]}": p.content.name
        for p in proposals
        if isinstance(p.content, ProposedEntity) and p.content.entity_id is None
    }
    out = []
    for p in proposals:
        c = p.content
        text: str
        if isinstance(c, ProposedFact):
            what: Any = _name(state, c.object_entity_id, created) if c.object_entity_id else c.value
            text = f"{_name(state, c.subject_entity_id, created)} {c.predicate.replace('_', ' ')}: {what}"
        elif isinstance(c, ProposedEntity):
            attrs = ", ".join(f"{k} = {v}" for k, v in sorted(c.attributes.items()))
            head = f"{c.name} ({c.kind.value})" if c.entity_id is None else f"{_name(state, c.entity_id, created)}"
            text = " — ".join(x for x in (head, c.description or "", attrs) if x)
        elif isinstance(c, ProposedRelationship):
            text = (
                f"{_name(state, c.source_entity_id, created)} {c.kind.replace('_', ' ')} "
                f"{_name(state, c.target_entity_id, created)}" + (f": {c.description}" if c.description else "")
            )
        elif isinstance(c, ProposedEvent):
            text = c.title + (f": {c.description}" if c.description else "")
        elif isinstance(c, ProposedStateChange):
            text = "; ".join(e.kind for e in c.events)
        else:  # pragma: no cover - the union is closed
            text = str(c)
        out.append(ProposalText(p.id, p.authority.value, text))
    return out


def rule_on_axioms(
    judge: AxiomJudge | None,
    axioms: Sequence[Axiom],
    proposals: Sequence[ProposedChange],
    state: WorldState,
) -> AxiomRulings:
    """The judge's rulings on the proposals (every axiom unchecked when there is no judge)."""
    if not axioms or not proposals:
        return AxiomRulings()
    if judge is None:
        return AxiomRulings(unchecked=[a.text for a in axioms])
    return judge.judge(axioms, describe(proposals, state))
