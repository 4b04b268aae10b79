"""The LLM axiom judge: at the gate, a model reads the scene's proposals against the world's free-text axioms.

It is a :class:`~story.axioms.AxiomJudge`: the story service asks it when a scene ends or commits
(:meth:`story.scenes.Scenes.commit`). The model answers with structured output against
:class:`AxiomAnswer` (guided decoding on vLLM, ``response_format`` elsewhere): one verdict per
proposal and axiom it has something to say about, ``breaks``, ``consistent`` or ``unclear``. Verdicts
naming a proposal or axiom that was not asked about are dropped; an axiom the model called
``unclear`` for some proposal is reported unchecked, as is every axiom when the model fails (down,
timed out, not JSON): the gate never blocks on a broken model, and it never claims a check it did not
make (the event ``axiom_check_failed`` says why).

Like :class:`narrator.formation.LLMFormer`, it runs its engine on an event loop of its own in a thread
of its own (the gate is blocking and runs in a worker thread), with an engine of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from narrator.engine_loop import EngineLoop
from narrator.engines import Message, NarratorEngine
from narrator.extraction import read_json_answer
from narrator.schema_budget import fit_schema, with_choices
from schemas.story import Axiom
from story.axioms import AxiomRulings, ProposalText

log = structlog.get_logger(__name__)


AXIOM_INSTRUCTIONS = (
    "You check proposed changes to a tabletop role-playing game's world against the world's axioms: rules "
    "that always hold there. For each proposal that breaks an axiom, or that you cannot judge, give a "
    "verdict naming the proposal id and the axiom id: 'breaks' when the proposal, if it became true, would "
    "contradict the axiom; 'unclear' when you cannot tell; 'consistent' is the default and may be left out. "
    "Judge only what the axiom states, not taste or likelihood. Give a one-sentence reason. Answer with JSON only."
)


REASON_CHARS = 160
"""The longest reason a verdict carries. The schema says so, so constrained decoding keeps a small model's
reason to a sentence: with 500, SmolLM2 filled every reason and no verdict list closed within 128 tokens."""


class AxiomVerdict(BaseModel):
    """One proposal held against one axiom, as the model states it."""

    model_config = ConfigDict(extra="ignore")

    proposal_id: str = Field(min_length=1, max_length=200)
    axiom_id: str = Field(min_length=1, max_length=200)
    verdict: Literal["breaks", "consistent", "unclear"]
    reason: str = Field(default="", max_length=REASON_CHARS)

    @field_validator("reason", mode="before")
    @classmethod
    def _clip(cls, value: object) -> object:
        """A longer reason from a model the schema did not bind is cut, not the verdict dropped."""
        return value[:REASON_CHARS] if isinstance(value, str) else value


class AxiomAnswer(BaseModel):
    """What the model writes for one batch of proposals."""

    verdicts: list[AxiomVerdict] = Field(default_factory=list, max_length=400)


@functools.cache
def _full_schema() -> dict[str, Any]:
    return AxiomAnswer.model_json_schema()


def axiom_schema(
    axioms: Sequence[Axiom] = (), proposals: Sequence[ProposalText] = (), max_tokens: int | None = None
) -> dict[str, Any]:
    """The JSON schema the model writes against: :class:`AxiomAnswer`, its ids held to the axioms and
    proposals asked about when given, and narrowed to close within ``max_tokens`` when given
    (:mod:`narrator.schema_budget`)."""
    schema = with_choices(
        _full_schema(), {"axiom_id": [a.id for a in axioms], "proposal_id": [p.proposal_id for p in proposals]}
    )
    return schema if max_tokens is None else fit_schema(schema, max_tokens)


def axiom_messages(axioms: Sequence[Axiom], proposals: Sequence[ProposalText]) -> list[Message]:
    """The judge's chat: the instructions and the axioms, then the proposals."""
    listed = "\n".join(f"- {a.id}: {a.text}" for a in axioms)
    asked = "\n".join(f"- {p.proposal_id} ({p.authority}): {p.text}" for p in proposals)
    return [
        {"role": "system", "content": f"{AXIOM_INSTRUCTIONS}\n\nAxioms:\n{listed}"},
        {"role": "user", "content": f"Proposals:\n{asked}"},
    ]


def parse_verdicts(raw: str, axioms: Sequence[Axiom], proposal_ids: set[str]) -> tuple[AxiomRulings | None, list[str]]:
    """The rulings in a model's answer (None when it holds none to read), with notes on what was dropped."""
    doc, notes = read_json_answer(raw, "the judge's")
    if doc is None and notes:
        return None, notes
    items = doc.get("verdicts") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return None, [*notes, "no 'verdicts' list"]
    by_id = {a.id: a for a in axioms}
    rulings = AxiomRulings(judge="llm")
    unclear: dict[str, None] = {}
    for index, item in enumerate(items[:400]):
        try:
            verdict = AxiomVerdict.model_validate(item)
        except ValidationError as exc:
            notes.append(f"verdict {index}: {exc.errors(include_url=False)[0]['msg']}")
            continue
        axiom = by_id.get(verdict.axiom_id)
        if axiom is None or verdict.proposal_id not in proposal_ids:
            notes.append(f"verdict {index}: unknown proposal or axiom")
            continue
        if verdict.verdict == "breaks":
            why = f": {verdict.reason.strip()}" if verdict.reason.strip() else ""
            rulings.violations.setdefault(verdict.proposal_id, []).append(f"{axiom.text!r}{why}")
        elif verdict.verdict == "unclear":
            unclear[axiom.text] = None
    rulings.unchecked = list(unclear)
    return rulings, notes


class LLMAxiomJudge:
    """Judges proposals against axioms with a model; every axiom unchecked when the model fails.

    Args:
        engine: the engine to ask (the judge's own: it runs on the judge's event loop).
        max_tokens: the longest answer.
        timeout_s: how long a scene's end waits for the model.
        owns_engine: whether :meth:`close` closes the engine too.
    """

    name = "llm"

    def __init__(
        self, engine: NarratorEngine, *, max_tokens: int = 1024, timeout_s: float = 60.0, owns_engine: bool = True
    ) -> None:
        self.engine = engine
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.owns_engine = owns_engine
        self._loop = EngineLoop(engine, name="axiom-judge", owns_engine=owns_engine)

    def close(self) -> None:
        """Close the engine (when the judge owns it) and stop the judge's loop."""
        self._loop.close()

    def judge(self, axioms: Sequence[Axiom], proposals: Sequence[ProposalText]) -> AxiomRulings:
        if not axioms or not proposals:
            return AxiomRulings(judge=self.name)
        messages = axiom_messages(axioms, proposals)
        try:
            raw = self._loop.run(
                self.engine.structured(
                    messages, schema=axiom_schema(axioms, proposals, self.max_tokens), max_tokens=self.max_tokens
                ),
                self.timeout_s,
            )
        except Exception as exc:  # any engine failure: the axioms go unchecked, and the report says so
            return self._failed(axioms, f"{type(exc).__name__}: {exc}")
        rulings, notes = parse_verdicts(raw, axioms, {p.proposal_id for p in proposals})
        if rulings is None:
            return self._failed(axioms, "; ".join(notes))
        if notes:
            log.info("axiom_check_notes", model=self.engine.model, notes=notes[:20])
        return rulings

    def _failed(self, axioms: Sequence[Axiom], reason: str) -> AxiomRulings:
        log.warning("axiom_check_failed", model=self.engine.model, reason=reason[:500])
        return AxiomRulings(unchecked=[a.text for a in axioms], judge=f"{self.name} (failed)")
