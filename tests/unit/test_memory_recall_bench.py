"""The evidence-recall benchmark's question parsing, scoring and synthetic conversations
(benchmarks/memory_recall.py, benchmarks/memory_synthetic.py)."""

from __future__ import annotations

from collections import Counter
from datetime import date

import numpy as np
import pytest

from benchmarks import memory_recall as mr
from benchmarks import memory_synthetic as ms
from story.recall_cues import time_range

pytestmark = pytest.mark.unit


# -- question parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["D1:3"], ["D1:3"]),
        (["D15:26", "D2:5"], ["D15:26", "D2:5"]),
        (["D8:6; D9:17"], ["D8:6", "D9:17"]),  # two ids in one string (26.json)
        (["D:11:26"], ["D11:26"]),  # a stray colon (43.json)
        (["D"], []),  # names no turn (42.json)
        (["D1:3", "D1:3", "D01:03"], ["D1:3"]),  # duplicates, also written with leading zeros
        ([None, 7, "D2:1"], ["D2:1"]),
    ],
)
def test_evidence_ids_are_parsed_from_what_the_files_hold(raw: list[object], expected: list[str]) -> None:
    assert mr.parse_evidence(raw) == expected


def test_only_questions_with_evidence_are_asked_and_a_bad_category_is_refused() -> None:
    qa = [
        {"question": "When did Caroline go?", "answer": "7 May", "evidence": ["D1:3"], "category": 2},
        {"question": "No evidence here?", "answer": "x", "evidence": [], "category": 4},
        {"question": "Unanswerable?", "adversarial_answer": "y", "evidence": ["D"], "category": 5},
    ]
    questions = mr.parse_questions("26", qa)
    assert [(q.id, q.category, q.evidence) for q in questions] == [("26:0", 2, ["D1:3"]), ("26:2", 5, [])]
    with pytest.raises(ValueError, match="category 9"):
        mr.parse_questions("26", [{"question": "?", "evidence": ["D1:1"], "category": 9}])


# -- scoring --------------------------------------------------------------------------------------


def test_recall_at_k_counts_the_share_of_evidence_in_the_top_k() -> None:
    ranked = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
    assert mr.recall_at(ranked, ["a"], 5) == 1.0
    assert mr.recall_at(ranked, ["a", "f"], 5) == 0.5
    assert mr.recall_at(ranked, ["a", "f"], 10) == 1.0
    assert mr.recall_at(ranked, ["k"], 10) == 0.0  # 11th
    assert mr.recall_at(ranked, ["a", "zz"], 10) == 0.5  # an id that names no turn cannot be found
    assert mr.recall_at(ranked, [], 10) == 0.0
    assert mr.recall_at([None, "a"], ["a"], 2) == 1.0  # a hit without a ref takes a place


def test_scores_average_over_questions_overall_and_per_category() -> None:
    questions = [
        mr.Question("c:0", "c", "q0", 1, ["a", "b"]),  # multi-hop: half in the top 5, all in the top 10
        mr.Question("c:1", "c", "q1", 1, ["z"]),  # multi-hop: never found
        mr.Question("c:2", "c", "q2", 4, ["c"]),  # single-hop: first
    ]
    top = ["a", "c", "x", "x", "x", "x", "b", "x", "x", "x"]
    result = mr.score(questions, [top, top, ["c"]])
    assert result["questions"] == 3
    assert result["recall_at_5"] == pytest.approx((0.5 + 0 + 1) / 3, abs=1e-3)
    assert result["recall_at_10"] == pytest.approx((1 + 0 + 1) / 3, abs=1e-3)
    assert result["any_at_10"] == pytest.approx(2 / 3, abs=1e-3)
    multi = result["by_category"]["multi-hop"]
    assert (multi["questions"], multi["recall_at_5"], multi["recall_at_10"], multi["any_at_10"]) == (2, 0.25, 0.5, 0.5)
    assert result["by_category"]["single-hop"]["recall_at_10"] == 1.0
    assert result["by_category"]["temporal"] == {
        "questions": 0,
        "recall_at_5": None,
        "recall_at_10": None,
        "any_at_10": None,
    }
    with pytest.raises(ValueError, match="3 questions but 2"):
        mr.score(questions, [top, top])


def test_rrf_of_the_baselines_prefers_what_both_lists_found() -> None:
    assert mr.rrf_ids([[1, 2, 3], [3, 4, 1]])[:2] == [1, 3]
    assert mr.rrf_ids([[], [5]]) == [5]


def test_the_baseline_document_is_time_speaker_text() -> None:
    turn = mr.Turn("D1:1", "1", "1:56 pm on 8 May, 2023", "Caroline", "Hey Mel!")
    assert mr.baseline_text(turn) == "(1:56 pm on 8 May, 2023) Caroline: Hey Mel!"
    assert mr.baseline_text(mr.Turn("x", "1", None, "Ava", "Hi")) == "Ava: Hi"


@pytest.mark.skipif(not mr.CORPUS.is_dir(), reason="the LoCoMo development half of ../shared/corpus is not here")
def test_the_corpus_holds_997_questions_with_evidence() -> None:
    questions = [q for name in mr.CONVERSATIONS for q in mr.load_locomo(mr.CORPUS / f"{name}.json").questions]
    assert len(questions) == 997  # the README's count
    assert Counter(q.category for q in questions) == {4: 418, 5: 237, 2: 156, 1: 142, 3: 44}


# -- synthetic conversations ----------------------------------------------------------------------


def test_a_synthetic_conversation_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    one, again, other = ms.generate(5), ms.generate(5), ms.generate(6)
    assert one.lines == again.lines and one.questions == again.questions
    assert one.lines != other.lines


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_synthetic_evidence_names_the_planted_turns(seed: int) -> None:
    conv = ms.generate(seed, index=1)
    by_ref = {line["ref"]: (i, line) for i, line in enumerate(conv.lines)}
    assert len(by_ref) == len(conv.lines)  # refs are unique
    a, b = conv.speakers
    # speakers alternate within a session, so a planted answer follows its question
    for prev, line in zip(conv.lines, conv.lines[1:], strict=False):
        if prev["session"] == line["session"]:
            assert prev["speaker"] != line["speaker"]
    families = Counter(q.family for q in conv.questions)
    assert set(families) == {"trip", "exchange", "collection", "preference", "dated"}
    for q in conv.questions:
        assert q.evidence and all(ref in by_ref for ref in q.evidence)
        owner = a if a in q.query else b
        if q.family == "collection":  # multi-hop: two turns in two sessions, both the owner's
            assert q.category == 1 and len(q.evidence) == 2
            sessions = {by_ref[r][1]["session"] for r in q.evidence}
            assert len(sessions) == 2
            assert {by_ref[r][1]["speaker"] for r in q.evidence} == {owner}
        elif q.family == "exchange":  # the answer, after the friend's question
            i, line = by_ref[q.evidence[0]]
            assert line["speaker"] == owner and conv.lines[i - 1]["text"].endswith("?")
        elif q.family == "dated":  # the day the query names is the session's, written differently
            line = by_ref[q.evidence[0]][1]
            asked = time_range(q.query)
            told = time_range(line["time"])
            assert asked is not None and told is not None and asked.start == told.start
            assert asked.text not in line["time"]
        elif q.category == 5:  # adversarial: asked about the other speaker
            assert by_ref[q.evidence[0]][1]["speaker"] != owner


def test_synthetic_session_times_are_dates_in_order() -> None:
    conv = ms.generate(9)
    days: list[date] = []
    for line in conv.lines:
        found = time_range(line["time"])
        assert found is not None, line["time"]
        if not days or days[-1] != found.start:
            days.append(found.start)
    assert days == sorted(days) and len(days) == len({line["session"] for line in conv.lines})


# -- where the misses are (benchmarks/memory_ceiling.py) ------------------------------------------------


def _ranked(conversation: str, category: int, evidence: list[str], refs: list[str], pools: dict) -> object:
    from benchmarks import memory_ceiling as mc

    question = mr.Question(f"{conversation}:0", conversation, "?", category, evidence)
    features = np.zeros((len(refs), len(mc.FEATURES)))
    labels = np.array([int(r in evidence) for r in refs])
    return mc.Ranked(conversation, question, list(refs), features, labels, pools)


def test_the_ceiling_counts_evidence_in_the_top_10_and_in_each_pool() -> None:
    from benchmarks import memory_ceiling as mc

    refs = [f"D1:{n}" for n in range(1, 13)]  # evidence D1:2 is 2nd, D1:12 is 12th
    row = _ranked("26", 1, ["D1:2", "D1:12"], refs, {"any@10": {"D1:2"}, "any@100": {"D1:2", "D1:12"}})
    other = _ranked("26", 4, ["D1:1"], refs, {"any@10": {"D1:1"}, "any@100": {"D1:1"}})
    by = mc.recall_by_category([row, other], mc.default_order)
    assert by["multi-hop"] == {"questions": 1, "recall_at_10": 0.5}
    assert by["all"]["recall_at_10"] == 0.75
    pools = mc.pool_coverage([row, other])
    assert pools["multi-hop"] == {"any@10": 0.5, "any@100": 1.0}
    assert pools["all"]["any@100"] == 1.0


def test_the_learned_ranking_is_held_out_and_puts_what_a_feature_marks_first() -> None:
    from benchmarks import memory_ceiling as mc

    rows = []
    for conversation in ("26", "30", "41"):
        for n in range(6):
            refs = [f"D{n}:{k}" for k in range(1, 21)]
            row = _ranked(conversation, 4, [refs[15]], refs, {})  # the evidence is 16th by the default
            row.features[15, 0] = 3.0  # one feature tells it apart
            row.features[:, 1] = np.linspace(0, 1, 20)
            rows.append(row)
    fitted = mc.learned(rows, [])
    assert fitted["locomo_leave_one_out"]["all"] == {"questions": 18, "recall_at_10": 1.0}
    assert mc.recall_by_category(rows, mc.default_order)["all"]["recall_at_10"] == 0.0
    assert fitted["coefficients_fitted_on_locomo"][mc.FEATURES[0]] > 0
