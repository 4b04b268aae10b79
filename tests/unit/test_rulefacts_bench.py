"""The rule facts benchmark's truth and scoring on small cases (benchmarks/rule_facts.py) and its
synthetic generator (benchmarks/rule_facts_synthetic.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rulebook import builtin_table
from schemas.common import EntityKind
from schemas.rulefacts import (
    DiceTerm,
    DiceValue,
    DistanceValue,
    DurationValue,
    FactSubject,
    ListValue,
    NumberValue,
    RuleValue,
    SourceFact,
    TextValue,
)

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
rf = pytest.importorskip("rule_facts")
synthetic = pytest.importorskip("rule_facts_synthetic")


def _fact(name: str, kind: str, predicate: str, value: RuleValue) -> SourceFact:
    subject = FactSubject(name=name, key=name.lower(), kind=kind, entity_kind=EntityKind.CONCEPT)
    return SourceFact(subject=subject, predicate=predicate, value=value, raw="", confidence=0.9, family="dnd5e")


def test_spell_truth_comes_from_the_json_columns() -> None:
    spell = {
        "name": "Ember Lance",
        "level": 3,
        "school": "evocation",
        "ritual": False,
        "casting_time": "1minute",
        "range": 1.0,
        "range_unit": "miles",
        "range_text": "1 mile",
        "verbal": True,
        "somatic": False,
        "material": True,
        "material_specified": "A shard of obsidian.",
        "duration": "10 minutes",
        "concentration": True,
        "damage_roll": "6d6",
        "damage_types": ["fire"],
        "saving_throw_ability": "dexterity",
    }
    truth = rf.spell_truth(spell).fields
    assert truth["casting_time"] == DurationValue(amount=1, unit="minute")
    assert truth["range"] == DistanceValue(amount=1, unit="mi")
    assert truth["components"] == ListValue(items=["V", "M"])
    assert truth["material"] == TextValue(text="A shard of obsidian")
    assert truth["duration"] == DurationValue(amount=10, unit="minute", concentration=True, up_to=True)
    assert truth["damage"] == DiceValue(terms=[DiceTerm(count=6, sides=6)])
    touch = rf.spell_truth(spell | {"range_text": "Touch", "range_unit": None, "casting_time": "bonus-action"}).fields
    assert touch["range"] == DistanceValue(special="touch")
    assert touch["casting_time"] == DurationValue(amount=1, unit="bonus_action")


def test_a_display_list_splits_like_a_reader_would() -> None:
    assert rf._split_display("poison; bludgeoning, piercing, and slashing") == [
        "poison",
        "bludgeoning",
        "piercing",
        "slashing",
    ]
    assert rf._split_display("") == []


def _truth() -> dict[str, object]:
    return {
        "ember lance": rf.TruthEntry(
            "Ember Lance",
            "spell",
            {
                "range": DistanceValue(amount=120),
                "level": NumberValue(value=3),
                "damage": DiceValue(terms=[DiceTerm(count=6, sides=6)]),
            },
        ),
        "bog lurker": rf.TruthEntry(
            "Bog Lurker", "creature", {"armor_class": NumberValue(value=13), "languages": ListValue(items=["Common"])}
        ),
    }


def test_scoring_counts_right_wrong_missing_and_stray_facts() -> None:
    facts = {
        "ember lance": [
            _fact("Ember Lance", "spell", "range", TextValue(text="120 feet")),  # right (units normalised)
            _fact("Ember Lance", "spell", "level", NumberValue(value=4)),  # wrong
            _fact("Ember Lance", "spell", "damage", DiceValue(terms=[DiceTerm(count=6, sides=6)])),  # prose: apart
        ],
        "bog lurker": [_fact("Bog Lurker", "spell", "armor_class", NumberValue(value=13))],  # right value, wrong kind
        "cantrips": [_fact("Cantrips", "spell", "range", DistanceValue(amount=60))],  # no entry: wrong
    }
    scores = rf.score_facts(_truth(), facts)
    per = scores["per_field"]
    assert (per["range"]["truth"], per["range"]["extracted"], per["range"]["right"]) == (1, 2, 1)
    assert (per["level"]["truth"], per["level"]["extracted"], per["level"]["right"]) == (1, 1, 0)
    assert (per["languages"]["truth"], per["languages"]["extracted"], per["languages"]["right"]) == (1, 0, 0)
    overall = scores["overall"]  # range, level, armor_class, languages; damage is prose
    assert (overall["truth"], overall["extracted"], overall["right"]) == (4, 4, 2)
    assert overall["precision"] == pytest.approx(0.5) and overall["recall"] == pytest.approx(0.5)
    assert scores["prose"]["right"] == 1 and scores["prose"]["truth"] == 1
    assert scores["numbers"]["truth"] == 3  # range, level, armor_class
    assert scores["core_numbers"]["truth"] == 2 and scores["core_numbers"]["right"] == 2
    assert scores["kind_accuracy"] == pytest.approx(0.5)
    assert scores["stray_facts"] == {"range": 1}
    assert scores["examples_missed"]["level"][0]["got"] == "4"


def test_an_entry_with_no_facts_is_right_only_when_it_is_no_kind() -> None:
    truth = {"cover": rf.TruthEntry("Cover", "entry", {})}
    assert rf.score_facts(truth, {})["kind_accuracy"] == 1.0
    wrong = {"cover": [_fact("Cover", "creature", "armor_class", NumberValue(value=2))]}
    assert rf.score_facts(truth, wrong)["kind_accuracy"] == 0.0


def test_condition_effects_compare_by_their_letters_and_digits() -> None:
    truth = ListValue(items=["A dazed creature can\u2019t react.", "It has disadvantage."])
    assert rf.agrees("effects", ListValue(items=["It has disadvantage", "A dazed creature can't react."]), truth)
    assert not rf.agrees("effects", ListValue(items=["A dazed creature can't react."]), truth)


def test_the_generator_is_seeded_and_its_truth_is_what_it_printed() -> None:
    first = synthetic.generate(40, seed=3)
    again = synthetic.generate(40, seed=3)
    assert [g.section.text for g in first] == [g.section.text for g in again]
    assert {g.variant for g in first} == set(synthetic.VARIANTS)
    result = synthetic.run(60, 3, builtin_table("dnd5e"))
    assert result["entries"] == 60
    assert set(result["variants"]) == set(synthetic.VARIANTS)
    assert result["variants"]["srd-lines"]["overall"]["recall"] > 0.9
    assert result["all"]["entries"] == 60
