"""Typed values of rulebook facts (schemas/rulefacts.py): each parser on good and bad text, scanning a
value out of run-on text, and the comparison the gate relies on (units and dice normalised, text that
does not read as the fact's type is uncomparable, never a contradiction)."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from schemas.canon import Fact
from schemas.common import Authority, EntityKind
from schemas.rulefacts import (
    Comparison,
    DiceTerm,
    DiceValue,
    DistanceValue,
    DurationValue,
    FactSubject,
    FlagValue,
    ListValue,
    NumberValue,
    RuleValueError,
    SourceFact,
    TextValue,
    ValueType,
    clean_text,
    compare_values,
    entry_key,
    parse_dice,
    parse_distance,
    parse_duration,
    parse_flag,
    parse_list,
    parse_number,
    parse_text,
    parse_value,
    same_value,
    scan_value,
)

pytestmark = pytest.mark.unit


# -- numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("15", 15, None),
        ("+7", 7, None),
        ("\u22121", -1, None),  # the minus sign stat blocks print
        ("1/4", 0.25, None),
        ("\u00bd", 0.5, None),
        ("1,000", 1000, None),
        ("2.5", 2.5, None),
        ("thirty", 30, None),
        ("twenty-five", 25, None),
        ("one hundred twenty", 120, None),
        ("15 gp", 15, "gp"),
        ("3 lb.", 3, "lb"),
        ("50 XP", 50, "xp"),
        ("12.", 12, None),  # a trailing full stop is punctuation, not part of the value
    ],
)
def test_numbers_read_in_digits_fractions_words_and_units(text: str, value: float, unit: str | None) -> None:
    parsed = parse_number(text)
    assert parsed is not None
    assert parsed.value == pytest.approx(value)
    assert parsed.unit == unit


@pytest.mark.parametrize("text", ["", "many", "1d6", "30 ft.", "7 (2d6)", "12 apples", "tenth"])
def test_text_that_is_no_number_is_refused(text: str) -> None:
    assert parse_number(text) is None


def test_a_number_is_finite() -> None:
    with pytest.raises(ValidationError):
        NumberValue(value=float("inf"))


# -- dice ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical", "average"),
    [
        ("2d6+3", "2d6+3", 10.0),
        ("2d6 + 3", "2d6+3", 10.0),
        ("d20", "1d20", 10.5),
        ("1D10 - 1", "1d10-1", 4.5),
        ("12d12+60", "12d12+60", 138.0),
        ("1d8 + 1d6", "1d8+1d6", 8.0),
        ("2d6 + 1d6 + 2 - 1", "3d6+1", 11.5),  # terms of one size merge, constants add up
    ],
)
def test_dice_expressions_are_normalised_with_their_average(text: str, canonical: str, average: float) -> None:
    parsed = parse_dice(text)
    assert parsed is not None
    assert parsed.canonical() == canonical
    assert parsed.average == pytest.approx(average)


@pytest.mark.parametrize("text", ["7", "7 (2d6)", "2d1", "2d6-2d6", "dice", "2d6 fire"])
def test_text_that_is_no_dice_expression_is_refused(text: str) -> None:
    assert parse_dice(text) is None


def test_a_dice_expression_is_kept_as_an_attribute_value_the_canon_accepts() -> None:
    value = parse_dice("2d6 + 3")
    assert value is not None
    fact = Fact(
        subject_entity_id="ent_goblin", predicate="damage", value=value.as_attribute(), authority=Authority.SOURCE
    )
    assert fact.value == "2d6+3"


# -- distances -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "feet"),
    [
        ("30 ft.", 30),
        ("30 feet", 30),
        ("30 ft", 30),
        ("thirty feet", 30),
        ("30-foot", 30),
        ("30'", 30),
        ("1 mile", 5280),
        ("a mile", 5280),
        ("500 miles", 2_640_000),
        ("9 m", 9 * 3.28084),
        ("one hundred twenty feet", 120),
    ],
)
def test_distances_read_in_any_unit_and_compare_in_feet(text: str, feet: float) -> None:
    parsed = parse_distance(text)
    assert parsed is not None and parsed.special is None
    assert parsed.feet == pytest.approx(feet)


@pytest.mark.parametrize("special", ["Self", "Touch", "Sight", "Unlimited", "Special"])
def test_special_ranges_are_distances_without_an_amount(special: str) -> None:
    parsed = parse_distance(special)
    assert parsed is not None
    assert parsed.special == special.lower()
    assert parsed.feet is None


@pytest.mark.parametrize("text", ["30", "far away", "30 parsecs", "self-evident", ""])
def test_text_that_is_no_distance_is_refused(text: str) -> None:
    assert parse_distance(text) is None


def test_a_distance_has_an_amount_or_a_special_never_both_or_neither() -> None:
    with pytest.raises(ValidationError):
        DistanceValue(amount=30, special="self")
    with pytest.raises(ValidationError):
        DistanceValue()
    with pytest.raises(ValidationError):
        DistanceValue(amount=-5)


# -- durations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 action", DurationValue(amount=1, unit="action")),
        ("Action", DurationValue(amount=1, unit="action")),
        ("1 bonus action", DurationValue(amount=1, unit="bonus_action")),
        ("1 reaction", DurationValue(amount=1, unit="reaction")),
        ("10 minutes", DurationValue(amount=10, unit="minute")),
        ("an hour", DurationValue(amount=1, unit="hour")),
        ("24 hours", DurationValue(amount=24, unit="hour")),
        ("1 round", DurationValue(amount=1, unit="round")),
        ("Instantaneous", DurationValue(special="instantaneous")),
        ("Until dispelled", DurationValue(special="until_dispelled")),
        ("until dispelled or triggered", DurationValue(special="until_dispelled_or_triggered")),
        (
            "Concentration, up to 1 minute",
            DurationValue(amount=1, unit="minute", concentration=True, up_to=True),
        ),
        ("concentration, up to one hour", DurationValue(amount=1, unit="hour", concentration=True, up_to=True)),
        ("up to 8 hours", DurationValue(amount=8, unit="hour", up_to=True)),
    ],
)
def test_durations_and_casting_times_read(text: str, expected: DurationValue) -> None:
    parsed = parse_duration(text)
    assert parsed == expected


@pytest.mark.parametrize("text", ["minutes", "forever and a day", "1 reaction, which you take when hit", "soon"])
def test_text_that_is_no_duration_is_refused(text: str) -> None:
    assert parse_duration(text) is None


def test_time_durations_compare_by_length_and_actions_by_kind() -> None:
    assert same_value(DurationValue(amount=1, unit="hour"), DurationValue(amount=60, unit="minute"))
    assert same_value(DurationValue(amount=1, unit="minute"), DurationValue(amount=10, unit="round"))
    assert not same_value(DurationValue(amount=1, unit="action"), DurationValue(amount=1, unit="bonus_action"))
    assert not same_value(DurationValue(amount=1, unit="action"), DurationValue(amount=1, unit="round"))
    concentrating = DurationValue(amount=1, unit="minute", concentration=True, up_to=True)
    assert not same_value(concentrating, DurationValue(amount=1, unit="minute"))
    assert same_value(DurationValue(amount=8, unit="hour", up_to=True), DurationValue(amount=8, unit="hour"))


# -- lists, text, flags ----------------------------------------------------------------------------


def test_lists_split_outside_parentheses_and_drop_and() -> None:
    assert parse_list("V, S, M (a pinch of salt, and a feather)") == ListValue(
        items=["V", "S", "M (a pinch of salt, and a feather)"]
    )
    assert parse_list("bludgeoning, piercing, and slashing from nonmagical attacks") == ListValue(
        items=["bludgeoning", "piercing", "slashing from nonmagical attacks"]
    )
    assert parse_list("fire; cold") == ListValue(items=["fire", "cold"])
    assert parse_list("radiant or necrotic") == ListValue(items=["radiant", "necrotic"])
    assert parse_list("\u2014") == ListValue(items=[])  # the dash a stat block prints for none
    assert parse_list("   ") is None


def test_lists_compare_as_sets_of_normalised_items() -> None:
    a = ListValue(items=["Common", "Draconic"])
    assert same_value(a, ListValue(items=["draconic", "common"]))
    assert not same_value(a, ListValue(items=["Common"]))
    assert same_value(a, TextValue(text="Draconic and Common"))


def test_text_and_flags() -> None:
    assert parse_text("  natural   armor ") == TextValue(text="natural armor")
    assert parse_text("   ") is None
    assert same_value(TextValue(text="Natural Armor."), TextValue(text="natural armor"))
    assert not same_value(TextValue(text="natural armor"), TextValue(text="plate armor"))
    assert parse_flag("yes") == FlagValue(value=True)
    assert parse_flag("\u2014") == FlagValue(value=False)
    assert parse_flag("perhaps") is None


# -- scanning and the typed parse -----------------------------------------------------------------


def test_scanning_reads_a_value_where_it_runs_into_the_description() -> None:
    text = clean_text("Concentration, up to 10 minutes You call forth a wall of blades.")
    found = scan_value(ValueType.DURATION, text)
    assert found is not None
    value, end = found
    assert value == DurationValue(amount=10, unit="minute", concentration=True, up_to=True)
    assert text[end:].startswith(" You call")


def test_scanning_a_list_with_a_vocabulary_stops_at_its_last_word() -> None:
    found = scan_value(ValueType.LIST, "V, S, M (a drop of ink) and then prose", vocabulary=("V", "S", "M"))
    assert found is not None
    value, end = found
    assert value == ListValue(items=["V", "S", "M"])
    assert "V, S, M (a drop of ink) and then prose"[end:].startswith(" (a drop")


def test_parse_value_raises_a_typed_error_naming_type_and_text() -> None:
    with pytest.raises(RuleValueError, match=r"'lots' is not a number") as caught:
        parse_value("number", "lots")
    assert caught.value.status_code == 422
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.text == "lots" and again.value_type == "number"
    with pytest.raises(RuleValueError, match="unknown value type"):
        parse_value("numbr", "3")
    assert parse_value(ValueType.DICE, "1d4 + 1") == DiceValue(terms=[DiceTerm(count=1, sides=4)], modifier=1)


# -- comparison across types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (DistanceValue(amount=30), TextValue(text="30 feet"), Comparison.SAME),
        (DistanceValue(amount=30), TextValue(text="thirty feet"), Comparison.SAME),
        (DistanceValue(amount=30), NumberValue(value=30), Comparison.SAME),  # a bare number: feet
        (DistanceValue(amount=30), TextValue(text="9 m"), Comparison.SAME),  # the tabletop conversion
        (DistanceValue(amount=150), TextValue(text="300 feet"), Comparison.DIFFERENT),
        (DistanceValue(amount=5), DistanceValue(amount=5.2), Comparison.DIFFERENT),  # same unit: exact
        (DistanceValue(special="self"), TextValue(text="Touch"), Comparison.DIFFERENT),
        (NumberValue(value=7), TextValue(text="7"), Comparison.SAME),
        (NumberValue(value=7), NumberValue(value=30), Comparison.DIFFERENT),
        (NumberValue(value=0.25), TextValue(text="1/4"), Comparison.SAME),
        (NumberValue(value=1, unit="gp"), NumberValue(value=10, unit="sp"), Comparison.SAME),
        (NumberValue(value=1, unit="gp"), NumberValue(value=1, unit="lb"), Comparison.UNCOMPARABLE),
        (DiceValue(terms=[DiceTerm(count=2, sides=6)], modifier=3), TextValue(text="2d6 + 3"), Comparison.SAME),
        (DiceValue(terms=[DiceTerm(count=2, sides=6)]), TextValue(text="2d8"), Comparison.DIFFERENT),
        (NumberValue(value=7), TextValue(text="quite a lot"), Comparison.UNCOMPARABLE),
        (DurationValue(amount=1, unit="minute"), NumberValue(value=1), Comparison.UNCOMPARABLE),
    ],
)
def test_compare_values(a: object, b: object, expected: Comparison) -> None:
    assert compare_values(a, b) is expected  # type: ignore[arg-type]
    assert compare_values(b, a) is expected  # type: ignore[arg-type]


# -- the fact contract ----------------------------------------------------------------------------


def test_entry_keys_meet_across_case_spaces_and_punctuation() -> None:
    assert entry_key("Adult  Black Dragon.") == entry_key("adult black dragon")
    assert entry_key("Tasha\u2019s Hideous Laughter") == "tasha's hideous laughter"


def test_a_source_fact_round_trips_through_json_with_its_typed_value() -> None:
    subject = FactSubject(name="Bog Lurker", key="bog lurker", kind="creature", entity_kind=EntityKind.CREATURE)
    fact = SourceFact(
        subject=subject,
        predicate="speed_swim",
        value=DistanceValue(amount=40),
        raw="swim 40 ft.",
        confidence=0.97,
        family="dnd5e",
        page=12,
    )
    again = SourceFact.model_validate_json(fact.model_dump_json())
    assert again == fact
    assert isinstance(again.value, DistanceValue)
    with pytest.raises(ValidationError):
        SourceFact(subject=subject, predicate="Speed Swim", value=TextValue(text="x"), raw="", confidence=1, family="x")
    with pytest.raises(ValidationError):
        SourceFact(subject=subject, predicate="speed", value=TextValue(text="x"), raw="", confidence=1.5, family="x")
