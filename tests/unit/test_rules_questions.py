"""The rules-question benchmark's generator and relevance judge (benchmarks/rules_questions.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from benchmarks import rules_questions as rq

pytestmark = pytest.mark.unit

needs_srd = pytest.mark.skipif(not rq.SRD_JSON.is_dir(), reason="the SRD 5.1 JSON of ../shared/corpus is not here")


def _spell(**overrides: object) -> dict:
    fields = {
        "name": "Fireball",
        "level": 3,
        "school": "evocation",
        "casting_time": "action",
        "range_text": "150 feet",
        "verbal": True,
        "somatic": True,
        "material": True,
        "material_specified": "A tiny ball of bat guano and sulfur.",
        "duration": "instantaneous",
        "concentration": False,
        "ritual": False,
        "classes": ["srd_sorcerer", "srd_wizard"],
        "damage_types": ["fire"],
        "damage_roll": "8d6",
        "shape_type": "sphere",
        "shape_size": 20.0,
        "saving_throw_ability": "dexterity",
        "desc": "A bright streak flashes ... Each creature in a 20-foot-radius sphere ... takes 8d6 fire damage.",
        "higher_level": "",
    }
    return fields | overrides


# -- the judge ------------------------------------------------------------------------------------


def test_normalize_folds_case_space_dashes_ligatures_and_emphasis() -> None:
    assert rq.normalize("**Range:**  150\u00a0feet") == "range 150 feet"
    assert rq.normalize("the \ufb01re\u2014and the \ufb02ame") == "the fire-and the flame"
    assert rq.normalize("Concentration, up to\n1 minute") == rq.normalize("concentration up to 1 minute")
    assert rq.normalize("18d10+36") == rq.normalize("18d10 + 36")
    assert rq.normalize("can\u2019t") == "can't"
    assert rq.normalize("hyphen-\nation") == "hyphenation"
    assert rq.normalize("soft\u00adhyphen") == "softhyphen"
    # Markdown run-in labels read as the extracted PDF text does.
    assert rq.holds("Simple Pit. A simple pit trap is a hole", "**_Simple Pit_**. A simple pit trap is a")
    assert rq.holds("Darkvision 60 ft., passive Perception 10", "darkvision 60 ft.")


def test_holds_matches_on_word_boundaries_only() -> None:
    assert rq.holds("**Armor Class** 17 (natural armor)", "Armor Class 17")
    assert not rq.holds("**Armor Class** 170", "Armor Class 17")
    assert rq.holds("Range: Self", "Range: Self")
    assert not rq.holds("Range: Self (10-foot radius)...", "Range: Touch")
    assert not rq.holds("anything", "")


def test_relevance_needs_the_answer_and_the_entry_heading() -> None:
    q = rq.Question("spell-001", "spell", "Fireball", "range of fireball?", ["Range: 150 feet"], "range")
    text = "**Range:** 150 feet\nA bright streak"
    assert rq.is_relevant(q, ["Spells", "3rd-Level Spells", "Fireball"], text)
    # The same answer under another entry's heading does not count...
    assert not rq.is_relevant(q, ["Spells", "3rd-Level Spells", "Lightning Bolt"], text)
    # ...unless the entry's heading is a line of the hit's text (a chunk holding several entries).
    assert rq.is_relevant(q, ["Spells", "3rd-Level Spells", "Fear"], "### Fireball\n" + text)
    # The right heading without the answer does not count either.
    assert not rq.is_relevant(q, ["Spells", "Fireball"], "**Range:** 120 feet")
    # Heading comparison ignores case, Markdown markers and punctuation; a mention inside prose is not a heading.
    assert rq.heading_matches("Elf, Drow", ["Monsters", "elf drow"], "")
    assert not rq.heading_matches("Fireball", ["Spells"], "as with the fireball spell, it explodes")
    # An extractor may run the heading into the next line; it still opens a line, as set.
    assert rq.heading_matches("Plane Shift", ["Spells"], "expelled.\n\nPlane Shift 7th-level conjuration")
    assert rq.heading_matches("Plane Shift", [], "PLANE SHIFT 7th-level conjuration")
    assert not rq.heading_matches("Plane Shift", [], "plane shift takes you there")
    assert not rq.heading_matches("Fly", [], "Flying creatures fall")


def test_a_numbered_books_headings_match_without_their_section_numbers() -> None:
    q = rq.Question("spell-001", "spell", "Animate Objects", "range?", ["Range: 120 feet"], "range")
    text = "2.6.1 Animate Objects\n\n5th-level transmutation Casting Time: 1 action Range: 120 feet"
    assert rq.is_relevant(q, ["Numbered Rules Digest", "2 Spells", "2.6.1 Animate Objects"], text)
    assert rq.is_relevant(q, ["2 Spells", "2.6 5th-Level Spells"], text)  # the heading opens a line of the text
    assert rq.norm_heading("12. Combat") == "combat" and rq.norm_heading("A Bag of Tricks") == "a bag of tricks"
    assert not rq.is_relevant(q, ["2 Spells", "2.6.2 Animate Dead"], "Range: 120 feet")


def test_description_answers_may_sit_in_the_heading_path() -> None:
    q = rq.Question("spell-099", "spell", "Fireball", "the 3rd-level ...", ["Fireball"], "describe", True)
    assert rq.is_relevant(q, ["Spells", "Fireball"], "A bright streak flashes")
    assert not rq.is_relevant(q, ["Spells", "Lightning Bolt"], "A stroke of lightning")


def test_first_relevant_and_the_metrics() -> None:
    q = rq.Question("x", "spell", "Fireball", "?", ["8d6"], "damage")
    miss = (["Spells", "Lightning Bolt"], "8d6 lightning damage")
    hit = (["Spells", "Fireball"], "8d6 fire damage")
    assert rq.first_relevant(q, [miss, hit]) == 2
    assert rq.first_relevant(q, [miss] * 10 + [hit]) is None  # only the top 10 count
    scored = rq.score([q, q, q], [1, 4, None])
    assert scored["recall_at_5"] == round(2 / 3, 4)
    assert scored["mrr_at_10"] == round((1 + 1 / 4) / 3, 4)
    assert scored["by_kind"]["spell"]["questions"] == 3
    assert scored["named"]["questions"] == 3 and scored["describe"]["questions"] == 0
    assert rq.summarize([6, 11])["mrr_at_10"] == round(1 / 6 / 2, 4)


def test_rrf_fuses_by_reciprocal_rank() -> None:
    assert rq.rrf([[1, 2, 3], [3, 1, 4]], k=60)[:2] == [1, 3]
    assert set(rq.rrf([[1], [2]])) == {1, 2}


# -- rendering and passages -----------------------------------------------------------------------


def test_spell_entry_renders_the_stat_lines_the_answers_quote() -> None:
    entry = rq.spell_entry(_spell())
    assert entry.section == "3rd-Level Spells"
    questions = rq.spell_questions(entry, random.Random(0))
    fields = {f for f, _, _ in questions}
    assert {"components", "range", "duration", "level_school", "damage"} <= fields
    for _, _, answers in questions:
        assert any(rq.holds(entry.body, a) for a in answers), answers


def test_casting_time_and_level_lines() -> None:
    assert rq.casting_time("bonus-action") == "1 bonus action"
    assert rq.casting_time("10minutes") == "10 minutes"
    assert rq.spell_level_line(0, "evocation") == "Evocation cantrip"
    assert rq.spell_level_line(2, "illusion", ritual=True) == "2nd-level illusion (ritual)"
    assert [rq.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
    ]
    assert rq.challenge("0.125") == "1/8" and rq.challenge("10.000") == "10"


def test_split_at_headings_keeps_paths_and_heading_lines() -> None:
    md = "# Spells\n\n## Cantrips\n\n### Light\n\nYou touch one object.\n\n#### At Higher Levels\n\nMore.\n"
    passages = rq.split_at_headings(md, "spells")
    assert [p.heading_path for p in passages] == [
        ["Spells", "Cantrips", "Light"],
        ["Spells", "Cantrips", "Light", "At Higher Levels"],
    ]
    assert passages[0].text == "Light\nYou touch one object."


def test_describe_fits_only_its_entry() -> None:
    fireball = rq.spell_entry(_spell())
    bolt = rq.spell_entry(
        _spell(name="Lightning Bolt", damage_types=["lightning"], shape_type="line", shape_size=100.0)
    )
    burst = rq.spell_entry(_spell(name="Fire Burst", shape_size=10.0, range_text="60 feet"))
    query = rq.describe(fireball, [fireball, bolt, burst], random.Random(3))
    assert query is not None
    assert "Fireball" not in query and "3rd-level evocation spell" in query
    # It must rule out both rivals: Lightning Bolt by the damage, Fire Burst by the area or the range.
    assert "fire" in query or "150 feet" in query or "20-foot sphere" in query
    assert "20-foot sphere" in query or "150 feet" in query or "fire" not in query
    twin = rq.spell_entry(_spell(name="Fireball Twin"))
    assert rq.describe(fireball, [fireball, twin], random.Random(3)) is None  # nothing tells them apart


def test_condition_descriptions_skip_effects_another_condition_shares() -> None:
    prone = rq.Entry("condition", "Prone", "Conditions", "x", "* The creature has disadvantage on attack rolls.\n")
    poisoned = rq.Entry(
        "condition",
        "Poisoned",
        "Conditions",
        "x",
        "* A poisoned creature has disadvantage on attack rolls and ability checks.\n",
    )
    assert rq.condition_descriptions(prone, [prone, poisoned]) == []
    [(clause, answers)] = rq.condition_descriptions(poisoned, [prone, poisoned])
    assert clause == "a creature has disadvantage on attack rolls and ability checks" and answers == ["Poisoned"]


# -- the generator on the SRD ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def srd() -> tuple[list[rq.Entry], list[rq.Question]]:
    entries = rq.load_entries()
    return entries, rq.generate_questions(entries)


@needs_srd
def test_generator_meets_the_issue_counts(srd: tuple[list[rq.Entry], list[rq.Question]]) -> None:
    _, questions = srd
    assert len(questions) >= 300
    kinds = Counter(q.kind for q in questions)
    assert set(kinds) == set(rq.KINDS) and min(kinds.values()) >= 30
    share = sum(q.describes for q in questions) / len(questions)
    assert 0.15 <= share <= 0.25
    assert len({q.id for q in questions}) == len(questions)
    assert len({q.query for q in questions}) > 0.95 * len(questions)
    fields = Counter((q.kind, q.field) for q in questions)
    for kind, field in [
        ("spell", "components"),
        ("spell", "range"),
        ("spell", "duration"),
        ("spell", "level_school"),
        ("spell", "damage"),
        ("creature", "armor_class"),
        ("creature", "hit_points"),
        ("creature", "speed"),
        ("creature", "languages"),
        ("creature", "challenge"),
        ("magic_item", "charges"),
        ("magic_item", "save_dc"),
        ("magic_item", "attunement"),
        ("condition", "effects"),
        ("rule", "opening"),
    ]:
        assert fields[(kind, field)] >= 2, (kind, field)


@needs_srd
def test_generator_is_deterministic_and_seeded(srd: tuple[list[rq.Entry], list[rq.Question]]) -> None:
    entries, questions = srd
    assert rq.generate_questions(entries) == questions
    other = rq.generate_questions(entries, seed=rq.SEED + 1)
    assert [q.query for q in other] != [q.query for q in questions]


@needs_srd
def test_every_question_is_answered_by_its_own_clean_passage(srd: tuple[list[rq.Entry], list[rq.Question]]) -> None:
    """The judge and the generator agree: each question has a relevant passage in the clean source, and a
    description never names its entry."""
    entries, questions = srd
    by_heading: dict[str, list[rq.Passage]] = {}
    for p in rq.clean_passages(entries):
        for heading in p.heading_path:
            by_heading.setdefault(rq.norm_heading(heading), []).append(p)
    for q in questions:
        candidates = by_heading.get(rq.norm_heading(q.entry), [])
        assert any(rq.is_relevant(q, p.heading_path, p.text) for p in candidates), q
        if q.describes:
            assert q.entry.lower() not in q.query.lower(), q


def test_a_sampled_book_is_asked_only_about_its_entries() -> None:
    fireball = rq.Question("a", "spell", "Fireball", "?", ["8d6"], "damage")
    drow = rq.Question("b", "creature", "Elf, Drow", "?", ["Armor Class 15"], "armor_class")
    truth = [{"text": "Fireball", "chapter": "Spells"}, {"text": "Elf, Drow", "chapter": "Fate Core"}]
    book = rq.Layout("pdf", [], rq.truth_headings(truth))
    assert book.asks(fireball) and not book.asks(drow)  # a heading of another book's chapter is not the entry
    assert rq.Layout("markdown", []).asks(drow)


def test_a_description_fits_neither_a_variant_nor_a_rival_it_only_seems_to_rule_out() -> None:
    import random

    def item(name: str, rarity: str, desc: str, attune: bool = False) -> rq.Entry:
        m = {"name": name, "category": "weapon", "rarity": rarity, "requires_attunement": attune, "desc": desc}
        return rq.magic_item_entry(m)

    javelin = item("Javelin of Lightning", "uncommon", "It must make a DC 13 Dexterity saving throw.")
    battleaxe = item("Battleaxe (+1)", "uncommon", "You have a bonus to attack and damage rolls.")
    for seed in range(20):
        said = rq.describe(javelin, [javelin, battleaxe], random.Random(seed))
        assert said is not None and "DC 13 Dexterity" in said  # "needs no attunement" fits the battleaxe too

    def spell(name: str, duration: str, concentration: bool, **more: object) -> rq.Entry:
        s = {
            "name": name,
            "level": 1,
            "school": "enchantment",
            "casting_time": "action",
            "range_text": "90 feet",
            "duration": duration,
            "concentration": concentration,
            "classes": [],
            "desc": "",
            **more,
        }
        return rq.Entry("spell", name, "Spells", "1st-Level Spells", "", s)

    sleep, bless = spell("Sleep", "1 minute", False), spell("Bless", "1 minute", True, range_text="30 feet")
    for seed in range(20):
        said = rq.describe(sleep, [sleep, bless], random.Random(seed))
        # "lasts 1 minute" is said of Bless too (it lasts 1 minute with concentration)
        assert said is not None and "90 feet" in said
    glyph = spell(
        "Glyph of Warding",
        "1 minute",
        False,
        saving_throw_ability="intelligence",
        desc="Each creature in the area must make a Dexterity saving throw.",
    )
    assert ("save", "intelligence") not in rq.spell_facts(glyph.fields)  # the text never calls for it
