"""The graph leg's query analysis: which names a question could be naming, and their stems."""

from __future__ import annotations

import pytest

from models.fusion import rrf
from models.stemming import singular
from search.query_names import heading_keys, query_names, stem_key, without_section_number

pytestmark = pytest.mark.unit


def test_query_names_are_ngrams_without_stop_word_edges() -> None:
    names = {s.name for s in query_names("How do I invoke an Aspect with Fate Points?")}
    assert {"invoke", "aspect", "fate point", "fate points", "invoke an aspect", "aspect with fate"} <= names
    assert not any(n.split()[0] in {"how", "do", "i", "an", "with"} for n in names)
    assert not any(n.split()[-1] in {"an", "with"} for n in names)
    assert query_names("what is the") == []


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("aspects", "aspect"),
        ("abilities", "ability"),
        ("boxes", "box"),
        ("stress", "stress"),
        ("status", "status"),
        ("npcs", "npc"),
        ("dice", "dice"),
    ],
)
def test_singular(word: str, expected: str) -> None:
    assert singular(word) == expected


def test_stem_keys_meet_across_inflections() -> None:
    assert stem_key("creating an advantage") == stem_key("Create an Advantage")
    assert stem_key("Invoking Aspects") == stem_key("invoke aspect")
    assert stem_key("languages") == stem_key("Language")
    assert stem_key("running") == stem_key("run")
    assert stem_key("fate point") != stem_key("fate")


@pytest.mark.parametrize(
    ("heading", "name"),
    [
        ("2.6.1 Animate Objects", "Animate Objects"),
        ("12. Combat", "Combat"),
        ("A.3 Poisons", "Poisons"),
        ("A Bag of Tricks", "A Bag of Tricks"),
        ("10-foot Pole", "10-foot Pole"),
        ("Fireball", "Fireball"),
    ],
)
def test_a_numbered_books_heading_is_named_without_its_section_number(heading: str, name: str) -> None:
    assert without_section_number(heading) == name
    # The entry lookup keys of a numbered heading are its name's: "Animate Objects" finds "2.6.1 Animate Objects".
    assert heading_keys(heading) == heading_keys(name)


def test_rrf_weights_ranks_and_keeps_every_leg() -> None:
    fused = rrf({"a": [("x", 9.0), ("y", 5.0)], "b": [("y", 0.7), ("z", 0.2)]}, {"a": 1.0, "b": 2.0}, k=10)
    assert [d.id for d in fused] == ["y", "z", "x"]
    y = fused[0]
    assert y.ranks == {"a": 2, "b": 1} and y.scores == {"a": 5.0, "b": 0.7}
    assert y.score == pytest.approx(1 / 12 + 2 / 11)
    # a leg weighted 0 is recorded and adds nothing; a duplicate keeps its first rank
    fused = rrf({"a": [("x", 1.0), ("x", 0.5), ("y", 0.4)]}, {"a": 0.0})
    assert {d.id: d.ranks["a"] for d in fused} == {"x": 1, "y": 2} and all(d.score == 0 for d in fused)
