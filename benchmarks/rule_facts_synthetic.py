"""Generated entries with known values, printed in many ways: does the fact parser generalise?

The SRD books of :mod:`rule_facts` print every entry one way. Here a seeded generator makes stat
blocks, spells and magic items with random values (and rules sections that state no fields), keeps
their values as truth, and prints each as text the way an extractor hands it over, in one of several
**variants** (:data:`VARIANTS`):

* ``srd-lines``: the SRD 5.1 layout, one field a line in one block, labels in bold;
* ``blocks-colon``: every field its own block, "Label: value", nothing in bold;
* ``one-line``: the header fields run together on one line ("Armor Class 15 Hit Points 7 (2d6) Speed
  30 ft."), as a caption or a table cell comes out;
* ``run-on``: the last field of a block runs into the description on the same line;
* ``caps-labels`` / ``lower-labels``: labels in capitals, or in sentence case ("Hit points");
* ``value-forms``: values spelled otherwise: "thirty feet", "9 m", "ft" without a full stop, "2d6 + 3",
  "an hour", "one minute", "Concentration, up to one hour";
* ``2024``: the 2024 layout: "AC 15 Initiative +2 (12)", "HP 7 (2d6)", "CR 1/4 (XP 50; PB +2)", spells
  "Level 3 Evocation (Wizard)", "Casting Time: Action" — partly outside what the table was written for;
* ``noisy``: chapter names no table knows, a running head inside the entry, prose that names labels
  ("Its Speed doubles", "the Range of its breath");
* ``label-above``: each label on its own line and its value on the next (a two-column key/value table
  read row by row) — a layout the table was not written for;
* ``semicolons``: all fields on one line separated by semicolons ("Armor Class 15; Hit Points 7 (2d6);
  Speed 30 ft.; …").

Truth is the generated value itself, never the printed text read back. The scorer is
:func:`rule_facts.score_facts`, per variant and over all.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rule_facts import TruthEntry, score_facts

from rulebook import extract_facts
from rulebook.tables import FamilyTable
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
    entry_key,
)

VARIANTS = (
    "srd-lines",
    "blocks-colon",
    "one-line",
    "run-on",
    "caps-labels",
    "lower-labels",
    "value-forms",
    "2024",
    "noisy",
    "label-above",
    "semicolons",
)

_SYLLABLES = ["gra", "vor", "thu", "mel", "kan", "zir", "oth", "bel", "dra", "quo", "sil", "mur", "tesh", "ax", "ul"]
_NOUNS = ["Drake", "Stalker", "Hound", "Wight", "Warden", "Shade", "Golem", "Serpent", "Knight", "Hag", "Mauler"]
_SCHOOLS = [
    "abjuration",
    "conjuration",
    "divination",
    "enchantment",
    "evocation",
    "illusion",
    "necromancy",
    "transmutation",
]
_TYPES = ["aberration", "beast", "celestial", "construct", "dragon", "elemental", "fey", "fiend", "giant", "undead"]
_SIZES = ["Tiny", "Small", "Medium", "Large", "Huge", "Gargantuan"]
_ALIGN = ["lawful evil", "chaotic good", "neutral", "unaligned", "any alignment", "neutral evil"]
_DAMAGE = ["acid", "cold", "fire", "force", "lightning", "necrotic", "poison", "psychic", "radiant", "thunder"]
_LANGS = ["Common", "Draconic", "Elvish", "Giant", "Infernal", "Abyssal", "Sylvan", "Deep Speech"]
_CONDITIONS = ["charmed", "frightened", "poisoned", "prone", "stunned", "exhaustion"]
_SKILLS = ["Perception", "Stealth", "Athletics", "Arcana", "Insight", "Sleight of Hand"]
_ABIL = ["strength", "dexterity", "constitution", "intelligence", "wisdom", "charisma"]
_CR = [(0.125, "1/8", 25), (0.25, "1/4", 50), (0.5, "1/2", 100), (1, "1", 200), (2, "2", 450), (5, "5", 1800)]
_CR += [(8, "8", 3900), (12, "12", 8400), (17, "17", 18000), (21, "21", 33000)]
_ITEM_TYPES = ["Wondrous item", "Ring", "Wand", "Staff", "Rod", "Potion", "Armor (plate)", "Weapon (longsword)"]
_RARITY = ["common", "uncommon", "rare", "very rare", "legendary"]
_WORDS = {5: "five", 10: "ten", 15: "fifteen", 20: "twenty", 30: "thirty", 40: "forty", 60: "sixty"}
_WORDS |= {90: "ninety", 120: "one hundred twenty", 1: "one", 8: "eight", 24: "twenty-four"}
_CHAPTERS = {
    "creature": ["Monsters", "Bestiary", "Appendix MM-A: Miscellaneous Creatures"],
    "spell": ["Spells", "Spell Descriptions", "Chapter 11: Spells"],
    "magic_item": ["Magic Items", "Treasure", "Wondrous Items"],
    "entry": ["Combat", "Adventuring", "Using Ability Scores"],
}
_ODD_CHAPTERS = ["Chapter 9: Foes of the Deep", "Part III", "Grimoire of the Ash Court", "Appendix B", "Vault"]


@dataclass(slots=True)
class Generated:
    """One generated entry: its variant, the section as an extractor would give it, and its truth."""

    variant: str
    section: EntrySection
    truth: TruthEntry


def _name(rng: random.Random, used: set[str], noun: bool = True) -> str:
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        name = f"{word} {rng.choice(_NOUNS)}" if noun and rng.random() < 0.6 else word
        if entry_key(name) not in used:
            used.add(entry_key(name))
            return name


def _label(variant: str, label: str) -> str:
    if variant == "caps-labels":
        return label.upper()
    if variant == "lower-labels":
        return label[:1] + label[1:].lower()
    return label


def _feet(variant: str, rng: random.Random, n: int) -> str:
    if variant == "value-forms":
        form = rng.choice(["words", "metric", "ft", "foot-mark"])
        if form == "words" and n in _WORDS:
            return f"{_WORDS[n]} feet"
        if form == "metric" and n % 5 == 0:
            return f"{n * 3 / 10:g} m"  # 30 ft → 9 m, the tabletop conversion
        if form == "foot-mark":
            return f"{n}'"
        return f"{n} ft"
    return f"{n} ft."


def _join(variant: str, header: list[str], rest: list[str], description: str) -> str:
    """The fields and description as one section text, laid out as the variant does."""
    if variant == "blocks-colon":
        return "\n\n".join([*header, *rest, description])
    if variant == "semicolons":
        return "\n\n".join(["; ".join([*header, *rest]), description]).strip()
    if variant == "one-line":
        return "\n\n".join([" ".join(header), "\n".join(rest), description])
    if variant == "run-on":
        return "\n\n".join(["\n".join(header), "\n".join(rest) + " " + description])
    return "\n\n".join(["\n".join(header), "\n".join(rest), description])


def _sep(variant: str) -> str:
    return {"blocks-colon": ": ", "label-above": "\n"}.get(variant, " ")


def creature(rng: random.Random, variant: str, used: set[str]) -> Generated:
    name = _name(rng, used)
    f: dict[str, RuleValue] = {}
    size, ctype, align = rng.choice(_SIZES), rng.choice(_TYPES), rng.choice(_ALIGN)
    f |= {"size": TextValue(text=size), "creature_type": TextValue(text=ctype), "alignment": TextValue(text=align)}
    ac = rng.randint(8, 22)
    detail = rng.choice([None, "natural armor", "chain mail", "leather armor, shield"])
    f["armor_class"] = NumberValue(value=ac)
    count, sides, mod = rng.randint(1, 24), rng.choice([4, 6, 8, 10, 12, 20]), rng.randint(-1, 5)
    hp = max(1, int(count * (sides + 1) / 2) + count * mod)
    f["hit_points"] = NumberValue(value=hp)
    f["hit_dice"] = DiceValue(terms=[DiceTerm(count=count, sides=sides)], modifier=count * mod)
    walk = rng.choice([10, 20, 25, 30, 30, 40, 50])
    f["speed"] = DistanceValue(amount=walk)
    modes = [m for m in ("fly", "swim", "climb", "burrow") if rng.random() < 0.25]
    speeds = {m: rng.choice([20, 30, 40, 60, 80]) for m in modes}
    for mode, feet in speeds.items():
        f[f"speed_{mode}"] = DistanceValue(amount=feet)
    scores = {a: rng.randint(1, 30) for a in _ABIL}
    for ability, score in scores.items():
        f[ability] = NumberValue(value=score)
    saves = {a: rng.randint(1, 14) for a in rng.sample(_ABIL, rng.randint(0, 3))}
    for ability, bonus in saves.items():
        f[f"saving_throw_{ability}"] = NumberValue(value=bonus)
    skills = {s: rng.randint(1, 12) for s in rng.sample(_SKILLS, rng.randint(0, 3))}
    for skill, bonus in skills.items():
        f[f"skill_{skill.lower().replace(' ', '_')}"] = NumberValue(value=bonus)
    resist = rng.sample(_DAMAGE, rng.randint(0, 2))
    immune = rng.sample(_CONDITIONS, rng.randint(0, 2))
    if resist:
        f["damage_resistances"] = ListValue(items=resist)
    if immune:
        f["condition_immunities"] = ListValue(items=immune)
    dark = rng.choice([None, 60, 120])
    passive = rng.randint(8, 25)
    if dark:
        f["darkvision"] = DistanceValue(amount=dark)
    f["passive_perception"] = NumberValue(value=passive)
    langs = rng.sample(_LANGS, rng.randint(0, 3))
    f["languages"] = ListValue(items=langs)
    cr, cr_text, xp = rng.choice(_CR)
    f["challenge_rating"] = NumberValue(value=cr)

    v = variant
    lab = _label
    ac_text = f"{ac}" + (f" ({detail})" if detail else "")
    hp_dice = f"{count}d{sides}" + (f" {'+' if mod >= 0 else '-'} {abs(count * mod)}" if mod else "")
    if v != "value-forms":
        hp_dice = hp_dice.replace(" ", "")
    speed_text = ", ".join([_feet(v, rng, walk)] + [f"{m} {_feet(v, rng, s)}" for m, s in speeds.items()])
    sense_items = ([f"darkvision {_feet(v, rng, dark)}"] if dark else []) + [f"passive Perception {passive}"]
    mod_of = {a: (s - 10) // 2 for a, s in scores.items()}
    row = " ".join(f"{s} ({'+' if mod_of[a] >= 0 else '-'}{abs(mod_of[a])})" for a, s in scores.items())
    if v == "2024":
        header = [
            f"AC {ac_text} Initiative +{rng.randint(0, 5)} ({rng.randint(10, 15)})",
            f"HP {hp} ({hp_dice})",
            f"Speed {speed_text}",
        ]
        abilities = "\n".join(
            f"{a[:3].capitalize()} {s} {'+' if mod_of[a] >= 0 else '-'}{abs(mod_of[a])}" for a, s in scores.items()
        )
        pb = 2 + max(0, int(cr) - 1) // 4
        tail = f"CR {cr_text} (XP {xp}; PB +{pb})"
    else:
        sep = _sep(v)
        header = [
            f"{lab(v, 'Armor Class')}{sep}{ac_text}",
            f"{lab(v, 'Hit Points')}{sep}{hp} ({hp_dice})",
            f"{lab(v, 'Speed')}{sep}{speed_text}",
        ]
        abilities = "STR DEX CON INT WIS CHA\n" + row
        tail = f"{lab(v, 'Challenge')}{_sep(v)}{cr_text} ({xp:,} XP)"
    sep = _sep(v)
    rest = []
    if saves:
        rest.append(
            f"{lab(v, 'Saving Throws')}{sep}" + ", ".join(f"{a[:3].capitalize()} +{b}" for a, b in saves.items())
        )
    if skills:
        rest.append(f"{lab(v, 'Skills')}{sep}" + ", ".join(f"{s} +{b}" for s, b in skills.items()))
    if resist:
        rest.append(f"{lab(v, 'Damage Resistances')}{sep}{', '.join(resist)}")
    if immune:
        rest.append(f"{lab(v, 'Condition Immunities')}{sep}{', '.join(immune)}")
    rest.append(f"{lab(v, 'Senses')}{sep}{', '.join(sense_items)}")
    rest.append(f"{lab(v, 'Languages')}{sep}{', '.join(langs) if langs else '—'}")
    rest.append(tail)
    description = (
        f"Pack Tactics. The {name.lower()} has advantage on an attack roll against a creature if an ally is "
        "within 5 feet of it."
    )
    if v == "noisy":
        description += (
            " Its Speed doubles while it is bloodied. Bite. Melee Weapon Attack: +5 to hit, reach 5 ft., one "
            f"target. Hit: {rng.randint(2, 20)} ({rng.randint(1, 4)}d8 + 2) piercing damage."
        )
    subtitle = f"{size} {ctype}, {align}"
    blocks = [subtitle, _join(v, header, [], ""), abilities, _join(v, [], rest, description)]
    text = "\n\n".join(b.strip() for b in blocks if b.strip())
    if v == "noisy":
        text = text.replace(abilities, "Monster Compendium 42\n\n" + abilities)
    bold = [] if v in ("blocks-colon", "one-line", "lower-labels") else _bold_of(text)
    return Generated(v, _section(rng, "creature", v, name, text, bold), TruthEntry(name, "creature", f))


def _bold_of(text: str) -> list[str]:
    labels = ["Armor Class", "Hit Points", "Speed", "Saving Throws", "Skills", "Damage Resistances"]
    labels += ["Condition Immunities", "Senses", "Languages", "Challenge", "Casting Time", "Range"]
    labels += ["Components", "Duration", "At Higher Levels", "AC", "HP", "CR"]
    return [lab for lab in labels if lab in text or lab.upper() in text]


def _section(rng: random.Random, kind: str, variant: str, name: str, text: str, bold: list[str]) -> EntrySection:
    chapter = rng.choice(_ODD_CHAPTERS) if variant == "noisy" else rng.choice(_CHAPTERS[kind])
    path = ["Generated Book", chapter]
    if kind == "creature" and rng.random() < 0.5:
        path.append(rng.choice(["Dragons", "Beasts", "Fiends", "Undead"]))
    return EntrySection(heading_path=[*path, name], text=text, bold_terms=bold, page=rng.randint(1, 300))


_CASTING = [
    ("1 action", "Action", DurationValue(amount=1, unit="action")),
    ("1 bonus action", "Bonus Action", DurationValue(amount=1, unit="bonus_action")),
    (
        "1 reaction, which you take when you are hit by an attack",
        "Reaction, which you take when you are hit by an attack",
        DurationValue(amount=1, unit="reaction"),
    ),
    ("1 minute", "1 minute", DurationValue(amount=1, unit="minute")),
    ("10 minutes", "10 minutes", DurationValue(amount=10, unit="minute")),
    ("1 hour", "1 hour", DurationValue(amount=1, unit="hour")),
]


def _range(rng: random.Random, variant: str) -> tuple[str, DistanceValue]:
    roll = rng.random()
    if roll < 0.15:
        return "Self", DistanceValue(special="self")
    if roll < 0.3:
        return "Touch", DistanceValue(special="touch")
    if roll < 0.35:
        return "1 mile", DistanceValue(amount=1, unit="mi")
    if roll < 0.42:
        return "Self (15-foot cone)", DistanceValue(special="self")
    n = rng.choice([5, 10, 30, 60, 90, 120, 150, 300])
    if variant == "value-forms":
        return _feet(variant, rng, n).replace(" ft", " feet").replace("feet feet", "feet"), DistanceValue(amount=n)
    return f"{n} feet", DistanceValue(amount=n)


def _duration(rng: random.Random, variant: str) -> tuple[str, DurationValue]:
    roll = rng.random()
    if roll < 0.25:
        return "Instantaneous", DurationValue(special="instantaneous")
    if roll < 0.32:
        return "Until dispelled", DurationValue(special="until_dispelled")
    n, unit = rng.choice([(1, "round"), (1, "minute"), (10, "minute"), (1, "hour"), (8, "hour"), (24, "hour")])
    unit_value: Any = unit
    conc = rng.random() < 0.4
    amount = f"{n} {unit}{'s' if n > 1 else ''}"
    if variant == "value-forms":
        amount = ("an hour" if unit == "hour" else f"one {unit}") if n == 1 else f"{_WORDS.get(n, n)} {unit}s"
    text = f"Concentration, up to {amount}" if conc else amount
    if not conc and variant == "value-forms" and n == 1:
        text = text[:1].upper() + text[1:]
    return text, DurationValue(amount=n, unit=unit_value, concentration=conc, up_to=conc)


def spell(rng: random.Random, variant: str, used: set[str]) -> Generated:
    name = _name(rng, used, noun=False) + rng.choice(["'s Ward", " Bolt", " Sphere", " Lance", "", " Veil"])
    used.add(entry_key(name))
    level = rng.randint(0, 9)
    school = rng.choice(_SCHOOLS)
    ritual = level > 0 and rng.random() < 0.15
    f: dict[str, RuleValue] = {
        "level": NumberValue(value=level),
        "school": TextValue(text=school),
    }
    if variant != "2024":
        f["ritual"] = FlagValue(value=ritual)
    cast_text, cast_2024, cast = rng.choice(_CASTING)
    range_text, range_value = _range(rng, variant)
    parts = [c for c in ("V", "S", "M") if rng.random() < 0.7] or ["V"]
    material = rng.choice(["a pinch of sulfur", "a tiny bell and a silver wire", "a diamond worth 300 gp"])
    comp_text = ", ".join(parts) + (f" ({material})" if "M" in parts else "")
    dur_text, dur = _duration(rng, variant)
    f |= {"casting_time": cast, "range": range_value, "components": ListValue(items=parts), "duration": dur}
    if "M" in parts:
        f["material"] = TextValue(text=material)
    dmg_count, dmg_sides, dmg_type = rng.randint(1, 12), rng.choice([4, 6, 8, 10, 12]), rng.choice(_DAMAGE)
    save = rng.choice(_ABIL)
    f["damage"] = DiceValue(terms=[DiceTerm(count=dmg_count, sides=dmg_sides)])
    f["damage_type"] = ListValue(items=[dmg_type])
    f["save_ability"] = TextValue(text=save)
    description = (
        f"A burst of energy erupts at a point you choose within range. Each creature in a 20-foot-radius sphere "
        f"must make a {save.capitalize()} saving throw. A target takes {dmg_count}d{dmg_sides} {dmg_type} damage "
        "on a failed save, or half as much damage on a successful one."
    )
    if variant == "noisy":
        description = "The Range of the spell cannot be extended. " + description
    v = variant
    if v == "2024":
        school_name = school.capitalize()
        subtitle = f"Level {level} {school_name} (Wizard)" if level else f"{school_name} Cantrip (Wizard)"
        cast_text = cast_2024
    elif level == 0:
        subtitle = f"{school.capitalize()} cantrip"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(level, "th")
        subtitle = f"{level}{suffix}-level {school}" + (" (ritual)" if ritual else "")
    colon = ":" if v not in ("one-line",) or rng.random() < 0.5 else ""
    sep = f"{colon}\n" if v == "label-above" else f"{colon} "
    header = [
        f"{_label(v, 'Casting Time')}{sep}{cast_text}",
        f"{_label(v, 'Range')}{sep}{range_text}",
        f"{_label(v, 'Components')}{sep}{comp_text}",
        f"{_label(v, 'Duration')}{sep}{dur_text}",
    ]
    text = "\n\n".join([subtitle, _join(v, header, [], description).strip()])
    if v == "one-line":
        text = "\n\n".join([subtitle, " ".join(header), description])
    bold = [] if v in ("blocks-colon", "one-line", "lower-labels") else _bold_of(text)
    return Generated(v, _section(rng, "spell", v, name, text, bold), TruthEntry(name, "spell", f))


def magic_item(rng: random.Random, variant: str, used: set[str]) -> Generated:
    name = rng.choice(["Ring", "Wand", "Cloak", "Amulet", "Staff", "Boots"]) + " of " + _name(rng, used, noun=False)
    used.add(entry_key(name))
    item_type = rng.choice(_ITEM_TYPES)
    base, _, sub = item_type.partition(" (")
    rarity = rng.choice(_RARITY)
    attune = rng.random() < 0.5
    by = rng.choice(["", " by a wizard", " by a cleric or paladin"]) if attune else ""
    charges = rng.choice([None, 3, 7, 10])
    f: dict[str, RuleValue] = {
        "item_type": TextValue(text=base),
        "rarity": TextValue(text=rarity),
        "attunement": FlagValue(value=attune),
    }
    if charges:
        f["charges"] = NumberValue(value=charges)
    line = f"{item_type}, {rarity}" + (f" (requires attunement{by})" if attune else "")
    if variant == "caps-labels":
        line = line[:1].upper() + line[1:]
    body = "You gain a +1 bonus to AC and saving throws while you wear this item."
    if charges:
        body = f"This item has {charges} charges. It regains 1d6 + 1 expended charges daily at dawn. " + body
    text = f"{line}\n\n{body}"
    return Generated(variant, _section(rng, "magic_item", variant, name, text, []), TruthEntry(name, "magic_item", f))


def rule(rng: random.Random, variant: str, used: set[str]) -> Generated:
    """A rules section that states no typed field (its facts on scored fields are wrong)."""
    name = rng.choice(["Cover", "Resting", "Falling", "Suffocating", "Vision and Light", "Climbing"])
    name = f"{name} {len(used)}"
    used.add(entry_key(name))
    text = (
        "Walls, trees, creatures, and other obstacles can provide cover during combat. A target with half cover "
        "has a +2 bonus to Armor Class and Dexterity saving throws. Hit points lost this way return after a long "
        "rest.\n\nSpeed matters: a creature that moves at half its speed can climb."
    )
    return Generated(variant, _section(rng, "entry", variant, name, text, []), TruthEntry(name, "entry", {}))


_MAKERS: list[tuple[float, Callable[[random.Random, str, set[str]], Generated]]] = [
    (0.4, creature),
    (0.35, spell),
    (0.15, magic_item),
    (0.1, rule),
]


def generate(n: int, seed: int) -> list[Generated]:
    """``n`` entries, the variants in turn, the kinds drawn by weight; the same seed gives the same entries."""
    rng = random.Random(seed)
    used: set[str] = set()
    out = []
    for k in range(n):
        variant = VARIANTS[k % len(VARIANTS)]
        roll, acc = rng.random(), 0.0
        for weight, make in _MAKERS:
            acc += weight
            if roll <= acc:
                out.append(make(rng, variant, used))
                break
        else:
            out.append(_MAKERS[-1][1](rng, variant, used))
    return out


def run(n: int, seed: int, table: FamilyTable) -> dict[str, Any]:
    """Generate, extract and score: over all entries and per variant."""
    items = generate(n, seed)
    facts: dict[str, list[SourceFact]] = {}
    truth: dict[str, TruthEntry] = {}
    by_variant: dict[str, tuple[dict[str, TruthEntry], dict[str, list[SourceFact]]]] = {}
    for item in items:
        key = entry_key(item.truth.name)
        got = extract_facts(item.section, table)
        truth[key] = item.truth
        facts[key] = got
        t, f = by_variant.setdefault(item.variant, ({}, {}))
        t[key] = item.truth
        f[key] = got
    return {
        "entries": len(items),
        "seed": seed,
        "all": score_facts(truth, facts),
        "variants": {name: score_facts(t, f) for name, (t, f) in by_variant.items()},
    }
