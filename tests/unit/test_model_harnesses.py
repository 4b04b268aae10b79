"""The judge and summary harnesses: generated cases are deterministic and labelled both ways, and the scores
are computed through the real judge and former paths (the echo engine: no model, nothing to judge)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_judge_cases_are_seeded_and_hold_one_breaking_and_one_keeping_proposal() -> None:
    from benchmarks.axiom_judge import TEMPLATES, baseline, make_cases, run_judge, score
    from narrator.engines import EchoEngine

    cases = make_cases(len(TEMPLATES) * 2, seed=3)
    assert [c.axiom for c in cases] == [c.axiom for c in make_cases(len(TEMPLATES) * 2, seed=3)]
    assert len({c.axiom for c in cases}) > len(TEMPLATES)  # filled from the corpus, not one phrasing
    for case in cases:
        assert sorted(breaks for _, _, breaks in case.proposals) == [False, True]
    perfect = score([({pid: b for pid, _, b in c.proposals}, c) for c in cases])
    assert perfect["accuracy"] == perfect["precision"] == perfect["recall"] == 1.0
    assert 0.0 < score([(baseline(c), c) for c in cases])["accuracy"] < 1.0
    echo = run_judge(EchoEngine(), cases[:2], max_tokens=64)  # no verdicts list: every case unchecked
    assert echo["unchecked_cases"] == 2 and echo["recall"] == 0.0


def test_formation_scenes_name_their_facts_and_the_extractive_baseline_keeps_them() -> None:
    from benchmarks.scene_formation import make_scenes, run_former
    from narrator.engines import EchoEngine
    from narrator.formation import LLMFormer
    from story.formation import ExtractiveFormer

    benches = make_scenes(2, seed=3)
    assert [b.facts for b in benches] == [b.facts for b in make_scenes(2, seed=3)]
    base = run_former(ExtractiveFormer(), benches)
    assert base["summary_fact_coverage"] > 0.8 and base["characters_remembering"] == 1.0
    former = LLMFormer(EchoEngine(), max_tokens=64, timeout_s=30, owns_engine=False)
    try:
        echo = run_former(former, benches)
    finally:
        former.close()
    assert echo["fell_back"] == 2  # the echo engine writes no formation: the extractive one stands in
