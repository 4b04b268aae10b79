"""The LLM axiom judge reads a model's structured verdicts, and never claims a check the model did not make.

The engine is the echo engine with scripted structured answers (what a model bound like vLLM answers);
the judge's own event loop and thread run as in production.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from narrator.axioms import LLMAxiomJudge, axiom_messages, parse_verdicts
from narrator.engines import EchoEngine
from schemas.story import Axiom
from story.axioms import ProposalText

SPOKEN = Axiom(world_id="world_x", text="Magic needs a spoken word.")
DEAD = Axiom(world_id="world_x", text="The dead do not return.")
PROPOSALS = [
    ProposalText("prop_a", "player", "Brenna casts a silent ward"),
    ProposalText("prop_b", "player", "Old Tam rises from his grave"),
    ProposalText("prop_c", "gm", "It rains"),
]


def answer(*verdicts: tuple[str, str, str, str]) -> str:
    return json.dumps(
        {"verdicts": [dict(zip(("proposal_id", "axiom_id", "verdict", "reason"), v, strict=True)) for v in verdicts]}
    )


@pytest.fixture
def judge_with() -> Iterator[object]:
    judges: list[LLMAxiomJudge] = []

    def make(*answers: str) -> LLMAxiomJudge:
        judge = LLMAxiomJudge(EchoEngine("echo-judge", structured_outputs=list(answers)), timeout_s=10)
        judges.append(judge)
        return judge

    yield make
    for judge in judges:
        judge.close()


def test_the_prompt_names_every_axiom_and_proposal_by_id() -> None:
    system, user = axiom_messages([SPOKEN, DEAD], PROPOSALS)
    assert SPOKEN.id in system["content"] and "The dead do not return." in system["content"]
    assert "prop_b (player): Old Tam rises from his grave" in user["content"]


def test_breaking_verdicts_become_violations_with_the_reason(judge_with) -> None:  # type: ignore[no-untyped-def]
    judge = judge_with(
        answer(
            ("prop_a", SPOKEN.id, "breaks", "a silent spell"),
            ("prop_b", DEAD.id, "breaks", "Tam is dead"),
            ("prop_c", SPOKEN.id, "consistent", ""),
        )
    )
    rulings = judge.judge([SPOKEN, DEAD], PROPOSALS)
    assert rulings.violations == {
        "prop_a": ["'Magic needs a spoken word.': a silent spell"],
        "prop_b": ["'The dead do not return.': Tam is dead"],
    }
    assert rulings.unchecked == [] and rulings.judge == "llm"


def test_the_schema_bounds_a_reason_and_a_longer_one_is_cut_not_dropped() -> None:
    from narrator.axioms import REASON_CHARS, axiom_schema

    reason = axiom_schema()["$defs"]["AxiomVerdict"]["properties"]["reason"]
    assert reason["maxLength"] == REASON_CHARS == 160  # constrained decoding keeps a small model's reason short
    rulings, notes = parse_verdicts(answer(("prop_a", SPOKEN.id, "breaks", "x" * 900)), [SPOKEN], {"prop_a"})
    assert notes == [] and rulings is not None
    assert rulings.violations["prop_a"] == [f"{SPOKEN.text!r}: {'x' * REASON_CHARS}"]


def test_unknown_ids_are_dropped_and_unclear_axioms_are_unchecked() -> None:
    rulings, notes = parse_verdicts(
        "Sure! " + answer(("prop_x", SPOKEN.id, "breaks", "?"), ("prop_a", DEAD.id, "unclear", "")) + " Hope it helps",
        [SPOKEN, DEAD],
        {"prop_a", "prop_b"},
    )
    assert rulings is not None and rulings.violations == {}
    assert rulings.unchecked == ["The dead do not return."]
    assert any("unknown proposal or axiom" in n for n in notes) and any("repaired" in n for n in notes)


def test_a_failed_model_leaves_every_axiom_unchecked(judge_with) -> None:  # type: ignore[no-untyped-def]
    rulings = judge_with("I cannot do that.").judge([SPOKEN, DEAD], PROPOSALS)
    assert rulings.violations == {}
    assert rulings.unchecked == [SPOKEN.text, DEAD.text] and rulings.judge == "llm (failed)"


@pytest.mark.servers
def test_open_services_gives_the_gate_an_axiom_judge_when_an_extractor_is_configured() -> None:
    from schemas.serving import EngineKind, ServeSettings
    from tests.unit.serve_support import api_services

    with api_services(ServeSettings(api_host="127.0.0.1")) as services:
        # routed by the campaign's model roles (serve.seats): no deployment judge behind them
        assert services.story.axiom_judge.default is None  # type: ignore[union-attr]
    with api_services(ServeSettings(api_host="127.0.0.1", extractor_engine=EngineKind.ECHO)) as services:
        judge = services.story.axiom_judge.default  # type: ignore[union-attr]
        assert isinstance(judge, LLMAxiomJudge) and judge.engine is not services.flow.extractor
