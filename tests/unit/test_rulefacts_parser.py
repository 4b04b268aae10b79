"""The entry → facts parser (rulebook/facts.py): kind detection, each field on small stat blocks, spells
and items typed for these tests, the PDF layouts it must survive (fields run together on one line, a
value running into the description, a value wrapped to the next block), and its determinism."""

from __future__ import annotations

import pytest

from rulebook import GENERIC_KIND, builtin_table, builtin_tables, detect_kind, entry_sections, extract_facts
from rulebook.facts import section_text
from schemas.common import EntityKind
from schemas.rulefacts import (
    DiceTerm,
    DiceValue,
    DistanceValue,
    DurationValue,
    EntrySection,
    FlagValue,
    ListValue,
    NumberValue,
    RuleValue,
    SourceFact,
    TextValue,
    same_value,
)

pytestmark = pytest.mark.unit

DND = builtin_table("dnd5e")

BOG_LURKER = """Medium monstrosity, neutral evil

Armor Class 13 (natural armor)
Hit Points 27 (5d8 + 5)
Speed 20 ft., swim 40 ft.

STR DEX CON INT WIS CHA
14 (+2) 12 (+1) 13 (+1) 6 (-2) 11 (+0) 5 (-3)

Saving Throws Dex +3, Con +3
Skills Stealth +5, Sleight of Hand +3
Damage Resistances cold; bludgeoning from nonmagical attacks
Condition Immunities poisoned
Senses darkvision 60 ft., passive Perception 10
Languages understands Common but can't speak
Challenge 1/2 (100 XP)

**Mire Grip.** The lurker has advantage on attack rolls against a creature that is restrained."""

EMBER_LANCE = """3rd-level evocation

Casting Time: 1 action
Range: 120 feet
Components: V, S, M (a shard of obsidian)
Duration: Instantaneous

A lance of cinders streaks from your hand. Each creature in a 5-foot-wide line must make a Dexterity saving
throw. A creature takes 6d6 fire damage on a failed save, or half as much damage on a successful one.

At Higher Levels. The damage increases by 1d6 for each slot level above 3rd."""


def _facts(text: str, path: list[str], **kw: object) -> dict[str, SourceFact]:
    section = EntrySection(heading_path=path, text=text, **kw)  # type: ignore[arg-type]
    return {f.predicate: f for f in extract_facts(section, DND)}


# -- kinds -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "kind"),
    [
        (["Bestiary", "Bog Lurker"], BOG_LURKER, "creature"),
        (["Book", "Ember Lance"], EMBER_LANCE, "spell"),  # no chapter needed: its type line and labels
        (["Conditions", "Dazed"], "A dazed creature can take only one action.", "condition"),
        (
            ["Rules", "Poisoned"],
            "A poisoned creature has disadvantage on attack rolls.",
            None,
        ),  # name alone: too little
        (["Magic Items", "Lantern of Tides"], "Wondrous item, rare (requires attunement)\n\nIt glows.", "magic_item"),
        (["Equipment", "Longsword"], "Cost: 15 gp\nWeight: 3 lb.\nDamage: 1d8 slashing", "equipment"),
        (["Combat", "Cover"], "A target with half cover has a +2 bonus to Armor Class and Dexterity saves.", None),
    ],
)
def test_the_kind_comes_from_the_tables_cues(path: list[str], text: str, kind: str | None) -> None:
    match = detect_kind(EntrySection(heading_path=path, text=text), DND)
    assert (match.kind if match else None) == kind


def test_an_item_listing_an_objects_stats_stays_an_item() -> None:
    text = (
        "Wondrous item, legendary\n\n"
        "This brass diving bell looks ordinary until its hatch opens and its jointed legs unfold beneath it.\n\n"
        "Armor Class: 18\n\nHit Points: 150\n\nSpeed: 20 ft., swim 30 ft."
    )
    facts = _facts(text, ["Magic Items", "Diving Bell of Haldor"])
    assert facts["rarity"].subject.kind == "magic_item"
    assert facts["armor_class"].value == NumberValue(value=18)  # still read, as a generic field


# -- a stat block, field by field -------------------------------------------------------------------


def test_every_field_of_a_stat_block() -> None:
    f = _facts(BOG_LURKER, ["Monsters", "Bog Lurker"])
    expected: dict[str, RuleValue] = {
        "size": TextValue(text="medium"),
        "creature_type": TextValue(text="monstrosity"),
        "alignment": TextValue(text="neutral evil"),
        "armor_class": NumberValue(value=13),
        "armor_detail": TextValue(text="natural armor"),
        "hit_points": NumberValue(value=27),
        "hit_dice": DiceValue(terms=[DiceTerm(count=5, sides=8)], modifier=5),
        "speed": DistanceValue(amount=20),
        "speed_swim": DistanceValue(amount=40),
        "strength": NumberValue(value=14),
        "charisma": NumberValue(value=5),
        "saving_throw_dexterity": NumberValue(value=3),
        "saving_throw_constitution": NumberValue(value=3),
        "skill_stealth": NumberValue(value=5),
        "skill_sleight_of_hand": NumberValue(value=3),
        "damage_resistances": ListValue(items=["cold", "bludgeoning from nonmagical attacks"]),
        "condition_immunities": ListValue(items=["poisoned"]),
        "darkvision": DistanceValue(amount=60),
        "passive_perception": NumberValue(value=10),
        "languages": ListValue(items=["understands Common but can't speak"]),
        "challenge_rating": NumberValue(value=0.5),
        "xp": NumberValue(value=100, unit="xp"),
    }
    for predicate, value in expected.items():
        assert predicate in f, predicate
        assert same_value(f[predicate].value, value), (predicate, f[predicate].value)
    lurker = f["armor_class"]
    assert lurker.subject.name == "Bog Lurker" and lurker.subject.key == "bog lurker"
    assert lurker.subject.entity_kind is EntityKind.CREATURE
    assert lurker.raw == "Armor Class 13" and lurker.label == "Armor Class" and lurker.family == "dnd5e"
    assert lurker.confidence >= 0.95
    assert f["mire_grip"].value == TextValue(
        text="The lurker has advantage on attack rolls against a creature that is restrained."
    )  # a generic "Label." field, read with less confidence
    assert f["mire_grip"].confidence < 0.7


def test_fields_run_together_on_one_line_are_split_where_each_value_ends() -> None:
    text = "Large beast, unaligned\n\nArmor Class 12 Hit Points 19 (3d10 + 3) Speed 40 ft., climb 20 ft. Challenge 1"
    f = _facts(text, ["Beasts", "Ridge Ram"])
    assert f["armor_class"].value == NumberValue(value=12)
    assert f["hit_points"].value == NumberValue(value=19)
    assert f["speed_climb"].value == DistanceValue(amount=20)
    assert f["challenge_rating"].value == NumberValue(value=1)
    assert f["hit_points"].confidence < f["armor_class"].confidence  # found inside a line


def test_a_label_set_above_its_value_reads_the_next_line() -> None:
    """A key/value table typeset as two lines a field (the label alone on its line, the value below)."""
    text = "Large beast, unaligned\n\nArmor Class\n12\nHit Points\n19 (3d10 + 3)\nSpeed:\n40 ft., climb 20 ft."
    f = _facts(text, ["Beasts", "Ridge Ram"])
    assert f["armor_class"].value == NumberValue(value=12)
    assert f["hit_points"].value == NumberValue(value=19)
    assert f["speed_climb"].value == DistanceValue(amount=20)


def test_the_2024_ability_block_one_ability_a_line() -> None:
    text = (
        "Gargantuan giant, lawful evil\n\nAC 21 (leather armor, shield) Initiative +1 (14)\nHP 76 (8d20-8)\n"
        "Speed 20 ft.\n\nStr 1 -5\nDex 24 +7 +10\nCon 7 -2\nInt 14 +2\nWis 9 -1\nCha 6 -2\n\n"
        "Languages Infernal\nCR 5 (XP 1800; PB +3)"
    )
    f = _facts(text, ["Monsters", "Murzirtesh"])
    assert [f[a].value for a in ("strength", "dexterity", "charisma")] == [NumberValue(value=v) for v in (1, 24, 6)]
    assert f["armor_class"].value == NumberValue(value=21) and f["hit_points"].value == NumberValue(value=76)


def test_a_label_word_ending_a_wrapped_prose_line_is_no_label() -> None:
    text = BOG_LURKER + " Mud halves its\nSpeed for a round, and it loses\nHit Points as it dries."
    f = _facts(text, ["Monsters", "Bog Lurker"])
    assert f["speed"].value == DistanceValue(amount=20)
    assert f["hit_points"].value == NumberValue(value=27)


def test_a_capitalised_word_in_prose_is_no_label() -> None:
    text = BOG_LURKER + " Its Speed doubles in mud. Hit Points lost to the mire return at dawn."
    f = _facts(text, ["Monsters", "Bog Lurker"])
    assert f["speed"].value == DistanceValue(amount=20)
    assert f["hit_points"].value == NumberValue(value=27)


def test_a_shuffled_ability_row_is_refused_rather_than_misread() -> None:
    text = BOG_LURKER.replace(
        "14 (+2) 12 (+1) 13 (+1) 6 (-2) 11 (+0) 5 (-3)", "11 (+0) 5 (-3)\n\nSkills Stealth +5\n\n14 (+2) 12 (+1)"
    )
    f = _facts(text, ["Monsters", "Bog Lurker"])
    assert "strength" not in f and "charisma" not in f


def test_a_markdown_ability_table_is_read() -> None:
    text = (
        "| STR | DEX | CON | INT | WIS | CHA |\n|---|---|---|---|---|---|\n"
        "| 8 (-1) | 14 (+2) | 10 (+0) | 3 (-4) | 9 (-1) | 4 (-3) |"
    )
    f = _facts("Small beast, unaligned\n\nArmor Class 11\nHit Points 3 (1d6)\n\n" + text, ["Beasts", "Marsh Rat"])
    assert [f[a].value for a in ("strength", "intelligence", "charisma")] == [
        NumberValue(value=8),
        NumberValue(value=3),
        NumberValue(value=4),
    ]


# -- a spell, field by field ------------------------------------------------------------------------


def test_every_field_of_a_spell() -> None:
    f = _facts(EMBER_LANCE, ["Spells", "3rd-Level Spells", "Ember Lance"])
    assert f["level"].value == NumberValue(value=3)
    assert f["school"].value == TextValue(text="evocation")
    assert f["ritual"].value == FlagValue(value=False)
    assert f["casting_time"].value == DurationValue(amount=1, unit="action")
    assert f["range"].value == DistanceValue(amount=120)
    assert f["components"].value == ListValue(items=["V", "S", "M"])
    assert f["material"].value == TextValue(text="a shard of obsidian")
    assert f["duration"].value == DurationValue(special="instantaneous")
    assert f["damage"].value == DiceValue(terms=[DiceTerm(count=6, sides=6)])
    assert f["damage_type"].value == ListValue(items=["fire"])
    assert same_value(f["save_ability"].value, TextValue(text="dexterity"))
    assert f["damage"].confidence < f["range"].confidence  # read from prose
    assert f["higher_levels"].value.canonical().startswith("The damage increases by 1d6")
    assert f["damage"].subject.entity_kind is EntityKind.CONCEPT


def test_cantrips_rituals_and_special_ranges() -> None:
    f = _facts(
        "Divination cantrip\n\nCasting Time: 1 bonus action\nRange: Self (10-foot radius)\nComponents: S\n"
        "Duration: Concentration, up to 1 minute",
        ["Spells", "Whisper Sense"],
    )
    assert f["level"].value == NumberValue(value=0)
    assert f["casting_time"].value == DurationValue(amount=1, unit="bonus_action")
    assert f["range"].value == DistanceValue(special="self")
    assert f["area"].value == TextValue(text="10-foot radius")
    assert f["duration"].value == DurationValue(amount=1, unit="minute", concentration=True, up_to=True)
    ritual = _facts("2nd-level divination (ritual)\n\nCasting Time: 10 minutes", ["Spells", "Far Listening"])
    assert ritual["ritual"].value == FlagValue(value=True)


def test_a_value_running_into_the_description_ends_where_its_grammar_ends() -> None:
    text = (
        "1st-level abjuration\n\nCasting Time: 1 reaction, which you take when you fall\nRange: 60 feet\n"
        "Components: V\nDuration: Concentration, up to 1 minute A ring of wind slows the fall of up to five creatures."
    )
    f = _facts(text, ["Spells", "Gust Cushion"], bold_terms=["Casting Time", "Range", "Components", "Duration"])
    assert f["casting_time"].value == DurationValue(amount=1, unit="reaction")
    assert f["duration"].value == DurationValue(amount=1, unit="minute", concentration=True, up_to=True)
    assert f["duration"].confidence < f["range"].confidence  # the description ran on after it


def test_a_value_wrapped_into_the_next_block_is_joined() -> None:
    text = (
        "1st-level conjuration\n\nComponents: V, S, M (a feather, a bead of amber, and a\n\n"
        "thread of silk)\n\nDuration: 1 hour"
    )
    f = _facts(text, ["Spells", "Featherfall Net"])
    assert f["material"].value == TextValue(text="a feather, a bead of amber, and a thread of silk")
    assert f["duration"].value == DurationValue(amount=1, unit="hour")


def test_labels_in_capitals_and_without_a_colon_one_line() -> None:
    text = "5th-level necromancy\n\nCASTING TIME 1 action RANGE 30 feet COMPONENTS V, S DURATION 8 hours"
    f = _facts(text, ["Grimoire", "Grave Chill"])
    assert f["range"].value == DistanceValue(amount=30)
    assert f["components"].value == ListValue(items=["V", "S"])
    assert f["duration"].value == DurationValue(amount=8, unit="hour")


# -- items, conditions, equipment, generic ---------------------------------------------------------


def test_magic_item_line_and_charges() -> None:
    text = (
        "Wand, very rare (requires attunement by a wizard)\n\nThis wand has 5 charges. While holding it, you can "
        "expend 1 charge to cast its spell (save DC 16)."
    )
    f = _facts(text, ["Treasure", "Wand of Glass Needles"])
    assert f["item_type"].value == TextValue(text="Wand")
    assert f["rarity"].value == TextValue(text="very rare")
    assert f["attunement"].value == FlagValue(value=True)
    assert f["attunement_by"].value == TextValue(text="a wizard")
    assert f["charges"].value == NumberValue(value=5)
    assert f["save_dc"].value == NumberValue(value=16)
    assert f["item_type"].subject.entity_kind is EntityKind.ITEM


def test_condition_effects_are_its_paragraphs_without_bullets() -> None:
    text = "\u2022 A dazed creature can take only one action.\n\n\uf0b7\n\nIt can't take reactions."
    f = _facts(text, ["Appendix: Conditions", "Dazed"])
    assert f["effects"].value == ListValue(
        items=["A dazed creature can take only one action.", "It can't take reactions."]
    )


def test_equipment_damage_with_its_type_and_cost_in_coins() -> None:
    f = _facts(
        "Cost: 15 gp\nWeight: 3 lb.\nDamage: 1d8 slashing\nProperties: versatile (1d10)", ["Weapons", "Longsword"]
    )
    assert f["damage"].value == DiceValue(terms=[DiceTerm(count=1, sides=8)])
    assert f["damage_type"].value == ListValue(items=["slashing"])
    assert same_value(f["cost"].value, NumberValue(value=150, unit="sp"))
    assert f["weight"].value == NumberValue(value=3, unit="lb")
    assert f["properties"].value == ListValue(items=["versatile (1d10)"])


def test_an_entry_no_kind_claims_gets_its_generic_fields_typed_where_they_read() -> None:
    text = (
        "Prerequisite: Strength 13\nRange: 30 feet\nDuration: 1 hour\n\n"
        "**Heavy Hitter.** You add your bonus twice.\n\nTable: Feats"
    )
    facts = {f.predicate: f for f in extract_facts(EntrySection(heading_path=["Feats", "Brute"], text=text), DND)}
    assert facts["range"].value == DistanceValue(amount=30)
    assert facts["duration"].value == DurationValue(amount=1, unit="hour")
    assert facts["prerequisite"].value == TextValue(text="Strength 13")
    assert facts["heavy_hitter"].value == TextValue(text="You add your bonus twice.")
    assert "table" not in facts  # a caption is no field
    assert {f.subject.kind for f in facts.values()} == {GENERIC_KIND}


def test_prose_alone_states_no_facts() -> None:
    section = EntrySection(heading_path=["Adventuring", "Travel"], text="The party walks for days under grey skies.")
    assert extract_facts(section, DND) == []
    assert extract_facts(EntrySection(heading_path=["Empty"], text="   "), DND) == []


def test_a_fate_character_with_ladder_ratings() -> None:
    text = (
        "High Concept: Smuggler Queen of the Salt Coast\nTrouble: Owes the Harbour Guild\n"
        "Skills: Great (+4) Deceive, Good (+3) Drive, Notice +2, +1 Fight\nRefresh: 2"
    )
    tables = builtin_tables()
    facts = {
        f.predicate: f
        for f in extract_facts(
            EntrySection(heading_path=["NPCs", "Mara Vell"], text=text), [tables["dnd5e"], tables["fate"]]
        )
    }
    assert facts["skill_deceive"].value == NumberValue(value=4)
    assert facts["skill_drive"].value == NumberValue(value=3)
    assert facts["skill_notice"].value == NumberValue(value=2)
    assert facts["skill_fight"].value == NumberValue(value=1)
    assert facts["refresh"].family == "fate" and facts["refresh"].subject.entity_kind is EntityKind.CHARACTER


# -- the contract: pure, ordered, located -----------------------------------------------------------


def test_the_same_section_gives_the_same_facts_in_text_order_with_offsets() -> None:
    section = EntrySection(heading_path=["Monsters", "Bog Lurker"], text=BOG_LURKER, page=41, chunk_id="chk_7")
    first = extract_facts(section, DND)
    assert first == extract_facts(section, DND)
    offsets = [f.offset or 0 for f in first]
    assert offsets == sorted(offsets)
    text = section_text(section)
    for fact in first:
        assert fact.offset is not None
        assert text[fact.offset :].startswith(fact.raw[:10])
        assert (fact.page, fact.chunk_id) == (41, "chk_7")


def test_no_tables_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one family table"):
        extract_facts(EntrySection(heading_path=["X"], text="Range: 5 feet"), [])


def test_sections_from_extracted_blocks() -> None:
    from jobs.document import Block, BlockKind

    blocks = [
        Block(BlockKind.PARAGRAPH, "Before any heading.", page=1),
        Block(BlockKind.HEADING, "Monsters", page=2, level=1),
        Block(BlockKind.HEADING, "Bog Lurker", page=2, level=2),
        Block(BlockKind.PARAGRAPH, "Armor Class 13\nHit Points 27 (5d8 + 5)", page=2, bold_terms=["Armor Class"]),
        Block(BlockKind.PARAGRAPH, "Speed 20 ft.", page=3, bold_terms=["Speed"]),
        Block(BlockKind.HEADING, "Spells", page=4, level=1),
        Block(BlockKind.HEADING, "Ember Lance", page=4, level=2),
        Block(BlockKind.PARAGRAPH, "3rd-level evocation", page=4),
    ]
    sections = entry_sections(blocks)
    assert [s.heading_path for s in sections] == [["Monsters", "Bog Lurker"], ["Spells", "Ember Lance"]]
    lurker = sections[0]
    assert lurker.text == "Armor Class 13\nHit Points 27 (5d8 + 5)\n\nSpeed 20 ft."
    assert lurker.bold_terms == ["Armor Class", "Speed"] and lurker.page == 2
    assert len(entry_sections(blocks, keep_empty=True)) == 4
