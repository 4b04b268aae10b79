"""Rule conflicts benchmark: does the gate accept restatements of a rulebook and refuse changes to it?

Usage::

    .venv/bin/python benchmarks/rule_conflicts.py [--scale 0.3] [--layouts weasyprint-2col …]
                                                  [--edition-creatures 40] [--seed 7] [--work DIR]
                                                  [--out benchmarks/results]

The book: the SRD 5.1 chapters with typed fields (Spells, Monsters, Magic Items, Conditions) as
:func:`rulebook_books.srd_tree` builds them from the JSON of ``../shared/corpus/rulebooks/dnd-srd-5.1``
(``--scale``: the share of each section's entries), written as **Markdown** and ingested in this run the
project's way (:func:`jobs.pipeline.run_ingest`: extract, chunk, embed, facts read at ingest, embedded
stores in a temporary data folder); and the same book typeset as a PDF by each ``--layouts`` engine of
:data:`rulebook_books.LAYOUTS` and ingested alike. Nothing is typed in by hand: the gate sees only what
ingestion read, and each printing is judged by a campaign pinned to it.

The conflict set, built from the JSON's structured columns (:func:`rule_facts.srd_truth`), per entry of
the book and per field it prints (creatures: AC, hit points, hit dice, speeds, CR, ability scores,
passive Perception, languages, immunities; spells: level, school, casting time, range, components,
duration, ritual; magic items: type, rarity, attunement; conditions: effects):

* a **restatement** of the field's true value in other words or units: "thirty feet" or "9 m" for
  "30 ft.", "2d6 + 3" for "2d6+3", "seven" for 7, "10 rounds" for "1 minute", a list reordered, a word
  in other case, "required" for yes; for numbers, distances and durations a quarter said with the
  field's name ("7 hit points", "Armor Class 15");
* a **change**: another number, distance or unit, die, duration, list (one item dropped or added),
  another value of the field (another school, rarity) or the flag flipped.

Each is a player's fact proposal (resolved by a successful roll) on an entity named after the entry, in
a campaign of restatements or one of changes, judged at one scene end by the real gate
(:meth:`story.service.StoryService.end_scene`). A restatement rejected is a **false reject**; a change
accepted is a **false accept** (issue 14's goals: ≤ 5 % and ≤ 2 %), per field and over all. Each is
also traced to its cause: no source fact for the field (extraction missed it), the claim did not read
as the field's type (UNCOMPARABLE, accepted as unchecked), or the comparison.

Plain baselines, same proposals, same run: the gate without source facts (every claim accepted: what
the gate did before issue 14), and the same source facts compared as normalised strings instead of
typed values (case, spaces and trailing dots folded).

Edition change: ``--edition-creatures`` creatures typeset as a bestiary, ingested; then a second
edition with changed hit points and armor class for every second creature, re-ingested from the same
path (it supersedes the first). A campaign pinned to the first edition's item and one pinned to the
bestiary's library (whose visible item is now the newer edition) each judge both editions' values: the
pinned edition must decide.

Writes ``rule_conflicts.json`` and ``rule_conflicts.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rule_facts import CHAPTERS, TruthEntry, srd_truth  # noqa: E402
from rulebook_books import Element, Node, srd_tree  # noqa: E402

from benchmarks.common import round_floats  # noqa: E402
from schemas.rulefacts import (  # noqa: E402
    DiceTerm,
    DiceValue,
    DistanceValue,
    DurationValue,
    FlagValue,
    ListValue,
    NumberValue,
    RuleValue,
    TextValue,
    entry_key,
)

FIELDS: dict[str, tuple[str, ...]] = {
    "creature": (  # fmt: skip
        "armor_class",
        "hit_points",
        "hit_dice",
        "speed",
        "speed_fly",
        "speed_swim",
        "challenge_rating",
        "strength",
        "dexterity",
        "constitution",
        "passive_perception",
        "darkvision",
        "languages",
        "damage_immunities",
        "condition_immunities",
    ),
    "spell": ("level", "school", "casting_time", "range", "components", "duration", "ritual"),
    "magic_item": ("item_type", "rarity", "attunement"),
    "condition": ("effects",),
}
#: Fields whose values a player may say with the field's name ("7 hit points", "Armor Class 15").
LABELLED = frozenset(
    {
        "armor_class",
        "hit_points",
        "hit_dice",
        "speed",
        "challenge_rating",
        "passive_perception",
        "level",
        "range",
        "casting_time",
        "duration",
    }
)
ENTITY_KIND = {"creature": "creature", "spell": "concept", "magic_item": "item", "condition": "concept"}
GOAL_FALSE_ACCEPT = 0.02
GOAL_FALSE_REJECT = 0.05
_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_TENS = {20: "twenty", 30: "thirty", 40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety"}
_DICE_SIDES = (4, 6, 8, 10, 12, 20)
_ROLL = {"method": "dice", "outcome": "success", "roll": {"expression": "1d20+2", "rolls": [15], "total": 17}}


# -- the book as Markdown --------------------------------------------------------------------------------


def _runs(el: Element) -> str:
    out = ""
    for run in el.runs:
        text = run.text
        if run.bold and text.strip():
            text = f"**{text.strip()}** " if text.endswith(" ") else f"**{text.strip()}**"
        elif run.italic and text.strip():
            text = f"*{text.strip()}*"
        out += text
    return out.strip()


def _element(el: Element) -> str:
    if el.kind == "subtitle":
        return f"*{_runs(el)}*"
    if el.kind == "field":
        return f"**{el.label}** {_runs(el)}"
    if el.kind == "li":
        return f"- {_runs(el)}"
    if el.kind == "table":
        lines = [f"**{el.caption}**", ""] if el.caption else []
        header = el.header or [""] * max(len(r) for r in el.rows)
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in el.rows]
        return "\n".join(lines)
    return _runs(el)


def tree_markdown(tree: Node) -> str:
    """A source tree as Markdown: ``#`` for the book, one more ``#`` per level, fields as bold run-in labels."""
    parts: list[str] = []
    for node, level, _ in tree.walk():
        parts.append("#" * min(level + 1, 6) + " " + node.title)
        body = list(node.body)
        fields = [el for el in body if el.kind == "field"]
        for el in body:
            if el.kind == "field":
                last = el is fields[-1]
                parts.append(_element(el) + ("" if last else "  "))  # a hard break keeps a stat block's lines
            else:
                parts.append(_element(el))
    out = []
    for part in parts:  # consecutive field lines form one block, as a stat block prints them
        if out and part.startswith("**") and out[-1].endswith("  "):
            out[-1] += "\n" + part
        else:
            out.append(part)
    return "\n\n".join(out) + "\n"


# -- restatements and changes ----------------------------------------------------------------------------


def _number_words(n: int) -> str | None:
    if 0 <= n < len(_WORDS):
        return _WORDS[n]
    if n < 100 and n - n % 10 in _TENS:
        return _TENS[n - n % 10] + (f"-{_WORDS[n % 10]}" if n % 10 else "")
    return None


def _fraction(x: float) -> str:
    return {0.125: "1/8", 0.25: "1/4", 0.5: "1/2"}.get(x, str(int(x)) if x == int(x) else f"{x:g}")


def _duration_text(d: DurationValue, amount: float | None = None, unit: str | None = None) -> str:
    amount = d.amount if amount is None else amount
    unit = (d.unit if unit is None else unit) or ""
    words = unit.replace("_", " ")
    core = f"{_fraction(amount or 0)} {words}{'s' if amount != 1 else ''}"
    return f"concentration, up to {core}" if d.concentration else core


def labelled(said: Any, field_name: str, rng: random.Random) -> Any:
    """Now and then, the value said with its field's name ("7 hit points", "Armor Class 15")."""
    if field_name not in LABELLED or rng.random() >= 0.25:
        return said
    label = field_name.replace("_", " ")
    return f"{label.title()} {said}" if rng.random() < 0.5 else f"{said} {label}"


def restate(value: RuleValue, rng: random.Random, field_name: str) -> Any:
    """The value in other words or units (what a player says when they have it right)."""
    return labelled(_restate(value, rng, field_name), field_name, rng)


def _restate(value: RuleValue, rng: random.Random, field_name: str) -> Any:
    if isinstance(value, NumberValue):
        n = value.value
        if field_name == "challenge_rating":
            return _fraction(n)
        words = _number_words(int(n)) if n == int(n) else None
        return words if words and rng.random() < 0.5 else int(n) if n == int(n) else n
    if isinstance(value, DistanceValue):
        if value.special:
            return value.special.upper() if rng.random() < 0.5 else value.special.capitalize()
        feet = value.feet or 0
        metres = round(feet * 0.3048)
        choice = rng.random()
        if choice < 0.34 and metres and abs(metres / 0.3048 - feet) / feet <= 0.025:
            return f"{metres} m"
        words = _number_words(int(feet)) if feet == int(feet) else None
        if choice < 0.67 and words:
            return f"{words} feet"
        return f"{int(feet)} feet" if value.unit == "ft" else f"{_fraction(value.amount or 0)} {value.unit}"
    if isinstance(value, DiceValue):
        text = " + ".join(f"{t.count}d{t.sides}" for t in value.terms)
        if value.modifier:
            text += f" {'+' if value.modifier > 0 else '-'} {abs(value.modifier)}"
        return text
    if isinstance(value, DurationValue):
        if value.special:
            return value.special.replace("_", " ").upper() if not value.concentration else value.canonical()
        if value.unit == "minute" and value.amount == 1 and rng.random() < 0.5:
            return _duration_text(value, 10, "round")
        if value.unit == "hour" and rng.random() < 0.5:
            return _duration_text(value, (value.amount or 0) * 60, "minute")
        words = _number_words(int(value.amount or 0))
        if words and rng.random() < 0.5:
            return _duration_text(value).replace(_fraction(value.amount or 0), words, 1)
        return _duration_text(value)
    if isinstance(value, ListValue):
        items = list(reversed(value.items))
        if field_name == "effects":  # sentences hold commas: a player lists them with semicolons
            return "; ".join(items)
        if any(re.search(r"\b(?:and|or)\b", i) for i in items):  # "and" inside an item: commas only
            return ", ".join(items)
        return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] if items else "none"
    if isinstance(value, TextValue):
        return value.text.upper() if rng.random() < 0.5 else value.text.title()
    if isinstance(value, FlagValue):
        return rng.choice(["yes", "required"]) if value.value else "no"
    raise TypeError(type(value).__name__)


def change(value: RuleValue, rng: random.Random, field_name: str, pool: list[RuleValue]) -> Any:
    """A different value of the same field (what a player says when they have it wrong)."""
    return labelled(_change(value, rng, field_name, pool), field_name, rng)


def _change(value: RuleValue, rng: random.Random, field_name: str, pool: list[RuleValue]) -> Any:
    if isinstance(value, NumberValue):
        n = value.value
        if field_name == "challenge_rating":
            ladder = [0, 0.125, 0.25, 0.5, *range(1, 31)]
            i = ladder.index(n) if n in ladder else 4
            return _fraction(ladder[i + 1] if i + 1 < len(ladder) else ladder[i - 1])
        delta = rng.choice([-3, -2, -1, 1, 2, 3, 5, 10])
        out = n + delta if n + delta >= 0 else n + abs(delta)
        return int(out) if out == int(out) else out
    if isinstance(value, DistanceValue):
        if value.special:
            return "30 feet" if value.special != "self" else "touch"
        feet = int(value.feet or 0)
        if rng.random() < 0.3 and value.unit == "ft" and feet:
            return f"{feet} m"  # the unit changed: 30 m is not 30 ft
        return f"{feet + rng.choice([-10, 10, 20, 30]) if feet > 10 else feet + 5} feet"
    if isinstance(value, DiceValue):
        t = value.terms[0]
        how = rng.random()
        if how < 0.4:
            terms = [DiceTerm(count=t.count + 1, sides=t.sides), *value.terms[1:]]
            return DiceValue(terms=terms, modifier=value.modifier).canonical()
        if how < 0.8:
            sides = _DICE_SIDES[(_DICE_SIDES.index(t.sides) + 1) % len(_DICE_SIDES)] if t.sides in _DICE_SIDES else 6
            return DiceValue(
                terms=[DiceTerm(count=t.count, sides=sides), *value.terms[1:]], modifier=value.modifier
            ).canonical()
        return DiceValue(terms=value.terms, modifier=value.modifier + rng.choice([-2, 1, 2, 5])).canonical()
    if isinstance(value, DurationValue):
        if value.special:
            return "1 minute" if value.special != "special" else "instantaneous"
        if rng.random() < 0.5:
            return _duration_text(value, (value.amount or 1) * 2)
        unit = {
            "round": "minute",
            "minute": "hour",
            "hour": "day",
            "day": "week",
            "action": "bonus_action",
            "bonus_action": "action",
            "reaction": "action",
        }.get(value.unit or "", "hour")
        return _duration_text(value, unit=unit)
    if isinstance(value, ListValue):
        items = list(value.items)
        extra = next((i for v in pool if isinstance(v, ListValue) for i in v.items if i not in items), "fire")
        if len(items) > 1 and rng.random() < 0.5:
            items.pop(rng.randrange(len(items)))
        else:
            items.append(extra)
        return ("; " if field_name == "effects" else ", ").join(items)
    if isinstance(value, TextValue):
        others = sorted({v.text for v in pool if isinstance(v, TextValue) and v.text.lower() != value.text.lower()})
        return rng.choice(others) if others else value.text + " variant"
    if isinstance(value, FlagValue):
        return "no" if value.value else "yes"
    raise TypeError(type(value).__name__)


@dataclass(slots=True)
class Claim:
    entry: str
    kind: str
    field: str
    said: Any
    truth: RuleValue
    correct: bool


def conflict_set(truth: dict[str, TruthEntry], keys: Iterable[str], seed: int) -> list[Claim]:
    """A restatement and a change of every field of every entry (fields the entry prints)."""
    rng = random.Random(seed)
    pools: dict[tuple[str, str], list[RuleValue]] = defaultdict(list)
    for entry in truth.values():
        for name, value in entry.fields.items():
            pools[entry.kind, name].append(value)
    out: list[Claim] = []
    for key in keys:
        entry = truth[key]
        for name in FIELDS.get(entry.kind, ()):
            value = entry.fields.get(name)
            if value is None or (isinstance(value, ListValue) and not value.items):
                continue
            out.append(Claim(entry.name, entry.kind, name, restate(value, rng, name), value, True))
            out.append(
                Claim(entry.name, entry.kind, name, change(value, rng, name, pools[entry.kind, name]), value, False)
            )
    return out


# -- ingest and the gate ----------------------------------------------------------------------------------


def ingest(path: Path, library: str, settings: Any) -> tuple[str, dict[str, Any]]:
    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions
    from schemas.knowledge import LibraryType

    started = time.perf_counter()
    report = run_ingest(
        [str(path)], IngestOptions(library=library, library_type=LibraryType.RULEBOOK), settings=settings
    )
    (done,) = report.files
    if done.status != "completed":
        raise RuntimeError(f"the ingest of {path.name} did not complete: {done}")
    return str(done.item_uid), {
        "library_uid": report.library_uid,
        "seconds": round(time.perf_counter() - started, 1),
        "pages": done.pages,
        "chunks": done.chunks,
        "facts": getattr(done, "facts", None),
        "facts_by_kind": getattr(done, "facts_by_kind", None),
    }


def open_story(settings: Any) -> Any:
    from stores.factory import open_blob_store, open_graph_store
    from story.service import StoryService

    story = StoryService(open_graph_store(settings), open_blob_store(settings))
    story.prepare()
    story.memory_former = None  # the benchmark judges claims; it forms no memories
    return story


def judge(story: Any, claims: list[Claim], *, name: str, pins: list[Any] | None = None) -> tuple[list[Any], float]:
    """Every claim as a player's fact proposal in one campaign, judged at one scene end; decisions in order."""
    from schemas.story import StoryProfile

    world = story.create_world(f"{name} world")
    campaign = story.create_campaign(world.id, name, StoryProfile(genre="fantasy"), library_pins=pins or [])
    turn = story.add_turn(campaign.id, "The table argues about the rules.", narration="The GM opens the book.")
    scene = story.start_scene(campaign.id, title="Bestiary")
    entities: dict[tuple[str, str], str] = {}
    for c in claims:
        if (c.entry, c.kind) not in entities:
            p = story.propose(
                scene.id,
                type="entity",
                content={"kind": ENTITY_KIND[c.kind], "name": c.entry},
                authority="gm",
                confidence=1.0,
            )
            entities[c.entry, c.kind] = "ent_" + p.id.split("_", 1)[1]
    story.end_scene(scene.id)
    scene = story.start_scene(campaign.id, title="Claims")
    ids = []
    for c in claims:
        content = {"subject_entity_id": entities[c.entry, c.kind], "predicate": c.field, "value": c.said}
        p = story.propose(
            scene.id,
            type="fact",
            content=content,
            authority="player",
            confidence=1.0,
            resolution=_ROLL,
            evidence={"turn_ids": [turn.id]},
        )
        ids.append(p.id)
    started = time.perf_counter()
    report = story.end_scene(scene.id)
    seconds = time.perf_counter() - started
    by_id = {d.proposal_id: d for d in report.decisions}
    return [by_id[i] for i in ids], seconds


def _cause(decision: Any) -> str:
    if not decision.source_fact_ids:
        return "no_fact"
    if decision.status.value == "rejected":
        return "compared_different"
    if "not checked" in decision.rationale:
        return "uncomparable"
    return "compared_same"


def _plain(text: Any) -> str:
    return re.sub(r"[\s.]+", " ", str(text).casefold()).strip()


def string_baseline(claim: Claim, facts: list[Any]) -> bool:
    """Whether a string comparison would accept the claim: equal to the fact's value as printed or normalised."""
    if not facts:
        return True
    printed = {_plain(f.value.canonical()) for f in facts} | {_plain(f.raw) for f in facts}
    printed |= {_plain(re.sub(rf"^{re.escape(f.label or '')}\s*", "", f.raw, flags=re.I)) for f in facts if f.label}
    return _plain(claim.said) in printed


def score(claims: list[Claim], decisions: list[Any], baseline: list[bool]) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(claims):
        groups[f"{c.kind}.{c.field}"].append(i)
    groups["all"] = list(range(len(claims)))
    for name, idx in sorted(groups.items()):
        right = [i for i in idx if claims[i].correct]
        wrong = [i for i in idx if not claims[i].correct]
        fr = [i for i in right if decisions[i].status.value == "rejected"]
        fa = [i for i in wrong if decisions[i].status.value == "accepted"]
        per[name] = {
            "restatements": len(right),
            "changes": len(wrong),
            "false_reject": len(fr) / len(right) if right else None,
            "false_accept": len(fa) / len(wrong) if wrong else None,
            "false_accept_causes": dict(Counter(_cause(decisions[i]) for i in fa)),
            "restatements_uncomparable": sum(_cause(decisions[i]) == "uncomparable" for i in right),
            "covered": sum(bool(decisions[i].source_fact_ids) for i in idx) / len(idx),
            "baseline_no_facts": {"false_reject": 0.0 if right else None, "false_accept": 1.0 if wrong else None},
            "baseline_string": {
                "false_reject": sum(not baseline[i] for i in right) / len(right) if right else None,
                "false_accept": sum(baseline[i] for i in wrong) / len(wrong) if wrong else None,
            },
        }
    return per


def examples(claims: list[Claim], decisions: list[Any], limit: int = 3) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c, d in zip(claims, decisions, strict=True):
        wrong = (c.correct and d.status.value == "rejected") or (not c.correct and d.status.value == "accepted")
        key = f"{c.kind}.{c.field}"
        if wrong and len(out[key]) < limit:
            out[key].append(
                {
                    "entry": c.entry,
                    "said": c.said,
                    "truth": c.truth.canonical(),
                    "correct": c.correct,
                    "status": d.status.value,
                    "rationale": d.rationale[:300],
                }
            )
    return dict(out)


# -- editions ---------------------------------------------------------------------------------------------


def edition_check(settings: Any, story: Any, folder: Path, truth: dict[str, TruthEntry], n: int) -> dict[str, Any]:
    """Two editions of a bestiary, the second re-ingested over the first: does the pinned edition decide?"""
    from schemas.campaign import LibraryPin

    tree = srd_tree(("Monsters",), scale=1.0)
    creatures = [node for node, _, _ in tree.walk() if node.kind == "entry"]
    step = max(1, len(creatures) // n)
    kept = [c for c in creatures[::step] if entry_key(c.title) in truth][:n]
    tree.children[0].children = [Node("Selected", "section", children=kept)]
    first_md = tree_markdown(tree)
    changed: dict[str, tuple[int, int]] = {}
    second_md = first_md
    for k, node in enumerate(kept):
        if k % 2:
            continue
        hp = int(truth[entry_key(node.title)].fields["hit_points"].value)  # type: ignore[attr-defined]
        changed[node.title] = (hp, hp + 5)
    blocks = second_md.split("\n#### ")
    for i, block in enumerate(blocks):
        title = block.split("\n", 1)[0]
        if title in changed:
            old, new = changed[title]
            blocks[i] = re.sub(rf"\*\*Hit Points\*\* {old} ", f"**Hit Points** {new} ", block, count=1)
    second_md = "\n#### ".join(blocks)
    books = folder / "bestiary"
    books.mkdir(exist_ok=True)
    path = books / "bestiary.md"
    path.write_text(first_md)
    first_item, first_ingest = ingest(books, "bestiary", settings)
    path.write_text(second_md)
    second_item, second_ingest = ingest(books, "bestiary", settings)
    claims = [
        Claim(title, "creature", "hit_points", value, NumberValue(value=old), value == old)
        for title, (old, new) in changed.items()
        for value in (old, new)
    ]
    out: dict[str, Any] = {
        "creatures": len(kept),
        "changed": len(changed),
        "items": [first_item, second_item],
        "ingest": [first_ingest, second_ingest],
    }
    for label, pins, wants_new in (
        ("pinned_first_edition", [LibraryPin(item_id=first_item)], False),
        ("pinned_library", [LibraryPin(library_id=second_ingest["library_uid"])], True),
    ):
        decisions, _ = judge(story, claims, name=f"edition {label}", pins=pins)
        right = 0
        for c, d in zip(claims, decisions, strict=True):
            old, new = changed[c.entry]
            expect = "accepted" if c.said == (new if wants_new else old) else "rejected"
            right += d.status.value == expect
        out[label] = {"claims": len(claims), "as_pinned_edition_says": right / len(claims)}
    return out


# -- report -----------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def print_table(per: dict[str, Any]) -> None:
    print(f"{'field':34} {'n':>4} {'FR':>7} {'FA':>7} {'cover':>6} | {'str FR':>7} {'str FA':>7} | FA causes")
    for name, row in per.items():
        print(
            f"{name:34} {row['restatements'] + row['changes']:4d} {_pct(row['false_reject'])} "
            f"{_pct(row['false_accept'])} {_pct(row['covered'])[:-1]:>6} | "
            f"{_pct(row['baseline_string']['false_reject'])} {_pct(row['baseline_string']['false_accept'])} | "
            f"{row['false_accept_causes']}"
        )


def plot(books: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = books[0]
    names = [*first["per_field"], "all"]

    def row(book: dict[str, Any], name: str) -> dict[str, Any]:
        return book["overall"] if name == "all" else book["per_field"].get(name, {})

    fig, axes = plt.subplots(1, 2, figsize=(14, max(5, 0.32 * len(names))), sharey=True)
    height = 0.8 / (len(books) + 1)
    for ax, key, goal, title in (
        (axes[0], "false_accept", GOAL_FALSE_ACCEPT, "false accepts (changes accepted)"),
        (axes[1], "false_reject", GOAL_FALSE_REJECT, "false rejects (restatements rejected)"),
    ):
        for k, book in enumerate(books):
            values = [100 * (row(book, n).get(key) or 0) for n in names]
            ax.barh([i + k * height for i in range(len(names))], values, height=height, label=f"gate, {book['format']}")
        plain = [100 * ((row(first, n).get("baseline_string") or {}).get(key) or 0) for n in names]
        offset = len(books) * height
        ax.barh([i + offset for i in range(len(names))], plain, height=height, alpha=0.5, label="string comparison")
        ax.axvline(100 * goal, color="red", linestyle="--", label=f"goal {100 * goal:g} %")
        ax.set_title(title)
        ax.set_xlabel("%")
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_yticks([i + 0.4 for i in range(len(names))], names, fontsize=8)
    fig.suptitle("Rule conflicts: SRD 5.1 ingested (Markdown and PDF) — gate outcomes per field")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_book(story: Any, settings: Any, work: Path, fmt: str, tree: Node, claims: list[Claim]) -> dict[str, Any]:
    """One printing of the book (Markdown, or a PDF layout), ingested; the conflict set judged against it."""
    from rulebook_books import LAYOUTS

    from schemas.campaign import LibraryPin
    from stores.source_facts import SourceFactStore
    from story.source_check import predicate_field

    books = work / f"books-{fmt}"
    books.mkdir()
    started = time.perf_counter()
    if fmt == "markdown":
        (books / "srd.md").write_text(tree_markdown(tree))
    else:
        LAYOUTS[fmt].render(tree, books / "srd.pdf")
    typeset_s = time.perf_counter() - started
    item, ingested = ingest(books, f"srd-{fmt}", settings)
    print(f"{fmt}: ingested {item} {ingested}")
    facts_by_key: dict[str, list[Any]] = defaultdict(list)
    for f in SourceFactStore(story.graph).for_item(item):
        facts_by_key[f.subject.key].append(f)
    pins = [LibraryPin(item_id=item)]  # this printing only: the others are in the same library store
    right = [c for c in claims if c.correct]
    wrong = [c for c in claims if not c.correct]
    decided_right, seconds_right = judge(story, right, name=f"restatements {fmt}", pins=pins)
    decided_wrong, seconds_wrong = judge(story, wrong, name=f"changes {fmt}", pins=pins)

    def facts_of(c: Claim) -> list[Any]:
        return [
            f
            for f in facts_by_key.get(entry_key(c.entry), [])
            if f.predicate == predicate_field(c.field, f.subject.kind)
        ]

    ordered = right + wrong
    decisions = decided_right + decided_wrong
    per = score(ordered, decisions, [string_baseline(c, facts_of(c)) for c in ordered])
    entries = {entry_key(c.entry) for c in claims}
    return {
        "format": fmt,
        "book": {
            "entries": len(entries),
            "entries_with_facts": sum(1 for k in entries if facts_by_key.get(k)),
            "item": item,
            "typeset_s": typeset_s,
            "ingest": ingested,
        },
        "claims": {"restatements": len(right), "changes": len(wrong)},
        "gate_seconds": {
            "restatements": seconds_right,
            "changes": seconds_wrong,
            "per_claim_ms": 1000 * (seconds_right + seconds_wrong) / len(claims),
        },
        "overall": per["all"],
        "per_field": {k: v for k, v in per.items() if k != "all"},
        "examples_wrong": examples(ordered, decisions),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.3, help="share of each section's entries in the book")
    parser.add_argument(
        "--layouts",
        nargs="*",
        default=["weasyprint-2col", "story-compact"],
        help="PDF layouts of rulebook_books to judge against too",
    )
    parser.add_argument("--edition-creatures", type=int, default=40, help="creatures of the edition check (0: none)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", type=Path, help="data folder to keep (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from schemas.settings import load_settings

    truth = srd_truth()
    tree = srd_tree(CHAPTERS, scale=args.scale)
    keys = [entry_key(n.title) for n, _, _ in tree.walk() if n.kind == "entry" and entry_key(n.title) in truth]
    claims = conflict_set(truth, keys, args.seed)
    print(f"book: {len(keys)} entries; conflict set: {len(claims)} claims")
    books: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        if work.exists() and args.work:
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        settings = load_settings(data_dir=work / "data")
        story = open_story(settings)
        try:
            for fmt in ["markdown", *args.layouts]:
                books.append(run_book(story, settings, work, fmt, tree, claims))
                print()
                print_table({"all": books[-1]["overall"], **books[-1]["per_field"]})
            editions = {}
            if args.edition_creatures:
                editions = edition_check(settings, story, work, truth, args.edition_creatures)
        finally:
            story.graph.close()
            story.blobs.close()
    if editions:
        print(f"\neditions: {json.dumps({k: v for k, v in editions.items() if k not in ('ingest', 'items')})}")
    for book in books:
        o = book["overall"]
        print(f"{book['format']}: false reject {_pct(o['false_reject'])}, false accept {_pct(o['false_accept'])}")
    result = {
        "benchmark": "rule_conflicts",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "settings": {
            "scale": args.scale,
            "chapters": list(CHAPTERS),
            "seed": args.seed,
            "formats": ["markdown", *args.layouts],
            "edition_creatures": args.edition_creatures,
        },
        "goals": {"false_accept": GOAL_FALSE_ACCEPT, "false_reject": GOAL_FALSE_REJECT},
        "books": books,
        "editions": editions,
        "notes": [
            "Claims are player fact proposals (successful roll) on entities named after the entries; restatements "
            "and changes are judged in two campaigns so a change never meets its own restatement as canon; each "
            "campaign pins the one printing it is judged against.",
            "false_accept_causes: no_fact = the ingest read no fact for the field (the gate has nothing to hold "
            "it against); uncomparable = the claim did not read as the field's type; compared_same = the typed "
            "comparison called a change equal.",
            "baseline_no_facts is the gate before issue 14 (every claim accepted); baseline_string compares the "
            "same source facts as case- and space-folded strings (value as normalised, or as printed).",
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rule_conflicts.json").write_text(
        json.dumps(round_floats(result), indent=1, ensure_ascii=False, default=str)
    )
    plot(books, args.out / "rule_conflicts.png")
    print(f"\nwrote {args.out / 'rule_conflicts.json'} and rule_conflicts.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
