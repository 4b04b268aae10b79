"""The parser on two print layouts of the structure benchmark it first missed (benchmarks/rule_facts.py):
numbered entry headings ("2.3.1 Acid Arrow", pandoc/LaTeX) and stat blocks set as one paragraph without
bold, where the kind's unlabelled line runs straight into the first label (ReportLab numbered)."""

from __future__ import annotations

import pytest

from rulebook import builtin_table, builtin_tables, detect_kind, extract_facts
from rulebook.facts import entry_name, section_text
from schemas.rulefacts import DistanceValue, EntrySection, NumberValue

pytestmark = pytest.mark.unit

DND = builtin_table("dnd5e")


def _facts(heading_path: list[str], text: str) -> dict[str, object]:
    return {f.predicate: f.value for f in extract_facts(EntrySection(heading_path=heading_path, text=text), DND)}


@pytest.mark.parametrize(
    ("heading", "name"),
    [
        ("2.3.1 Acid Arrow", "Acid Arrow"),
        ("12. Goblin", "Goblin"),
        ("1 Spells", "Spells"),
        ("10-foot Pole", "10-foot Pole"),  # a number that is part of the name stays
        ("1st-Level Spells", "1st-Level Spells"),
        ("+1 Longsword", "+1 Longsword"),
        ("Goblin", "Goblin"),
    ],
)
def test_a_section_number_is_not_part_of_the_entry_name(heading: str, name: str) -> None:
    assert entry_name(heading) == name


def test_numbered_headings_give_the_entry_its_own_name() -> None:
    section = EntrySection(
        heading_path=["1 Spells", "1.3 2nd-Level Spells", "1.3.1 Acid Arrow"],
        text="2nd-level evocation\n\nCasting Time: 1 action\nRange: 90 feet\nComponents: V, S, M\n"
        "Duration: Instantaneous",
    )
    facts = extract_facts(section, DND)
    assert facts and {(f.subject.name, f.subject.key) for f in facts} == {("Acid Arrow", "acid arrow")}


def test_a_stat_block_set_as_one_paragraph_without_bold_is_read_whole() -> None:
    text = (
        "Huge beast, unaligned Armor Class 12 (natural armor) Hit Points 76 (8d12+24) Speed 40 ft.\n\n"
        "Senses passive Perception 10 Languages — Challenge 4 (1,100 XP)"
    )
    facts = _facts(["2 Monsters", "2.2 Beasts", "2.2.2 Elephant"], text)
    assert facts["size"].canonical().casefold() == "huge"  # type: ignore[attr-defined]
    assert facts["alignment"].canonical() == "unaligned"  # type: ignore[attr-defined]
    assert facts["armor_class"] == NumberValue(value=12)
    assert facts["hit_points"] == NumberValue(value=76)
    assert facts["challenge_rating"] == NumberValue(value=4)


def test_a_spell_set_as_one_paragraph_reads_its_school_line_and_fields() -> None:
    text = (
        "5th-level evocation Casting Time: 1 action Range: 60 feet Components: V, S Duration: Instantaneous "
        "A line of strong wind 60 feet long blasts from you."
    )
    facts = _facts(["Spells", "Gust Line"], text)
    assert facts["level"] == NumberValue(value=5)
    assert facts["range"] == DistanceValue(amount=60)
    assert "casting_time" in facts and "duration" in facts


def test_the_run_on_break_keeps_offsets_and_prose_stays_prose() -> None:
    text = "Huge beast, unaligned Armor Class 12 Hit Points 76 (8d12+24) Speed 40 ft."
    section = EntrySection(heading_path=["Elephant"], text=text)
    facts = extract_facts(section, DND)
    assert {"size", "armor_class", "hit_points", "speed"} <= {f.predicate for f in facts}
    for fact in facts:
        assert fact.offset is not None and section_text(section)[fact.offset :].startswith(fact.raw)
    prose = EntrySection(
        heading_path=["Lore", "The Old Road"],
        text="Huge beasts roam the plains, and travellers say the Armor Class of their hide is legendary.",
    )
    assert detect_kind(prose, list(builtin_tables().values())) is None
