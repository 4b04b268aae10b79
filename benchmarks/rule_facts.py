"""Rule facts benchmark: do rulebook entries typeset as PDFs come back as the right typed facts?

Usage::

    .venv/bin/python benchmarks/rule_facts.py [--scale 1.0] [--layouts …] [--reps 3] [--synthetic 400]
                                              [--seed 7] [--keep DIR] [--out benchmarks/results]

Books: the SRD 5.1 chapters with typed fields (Spells, Monsters, Magic Items, Conditions) as
:func:`rulebook_books.srd_tree` builds them from the JSON of ``../shared/corpus/rulebooks/dnd-srd-5.1``,
typeset in this run by **every** engine and house style of :data:`rulebook_books.LAYOUTS` (WeasyPrint
two columns, LibreOffice from python-docx, ReportLab Times, PyMuPDF Story two columns) into a
temporary folder (``--keep DIR`` keeps them; nothing is committed). ``--scale`` keeps that share of
each section's entries (evenly spread).

Each PDF goes the project's way: :func:`jobs.extract.extract_document` (no OCR), then
:func:`rulebook.sections.entry_sections` (one section per heading, its blocks' text and bold terms),
then :func:`rulebook.facts.extract_facts` with the ``dnd5e`` table. Sections are matched to the source
entries by their heading (:func:`schemas.rulefacts.entry_key`).

Truth is built from the JSON's structured fields, not from the text the books print: casting time from
``casting_time`` ("1minute"), range from ``range`` and ``range_unit`` (or the special in ``range_text``),
components from the verbal/somatic/material flags, duration from ``duration`` and ``concentration``,
AC, hit points, speeds, senses, saves, skills, ability scores and CR from their numeric columns, damage,
damage type and save ability of spells from ``damage_roll``, ``damage_types`` and
``saving_throw_ability`` (what the JSON says the prose holds), item type, rarity and attunement of
magic items, and the effects of conditions (their bullets). Only what the book prints is truth: a save
of +0 the stat block leaves out is not asked for.

Scores (:func:`score_facts`), per field over the entries of the book: a fact is right when
:func:`schemas.rulefacts.same_value` holds against the truth of its entry and field (units and dice
normalised; conditions' effects compared as sets of their letters and digits). Precision = right
facts / facts extracted on scored fields (facts on sections that match no entry count as wrong);
recall = right facts / truth values. Reported per field, per kind, over all printed fields, over the
numbers (number, dice and distance fields) and over issue 14's four (AC, hit points, CR, range), with
kind accuracy (the entry read as the right kind). Goal: ≥ 0.95 on every layout, ≥ 0.98 on numbers.
The spells' prose fields (damage, damage type, save ability: sentence patterns) are scored apart
("prose"): the JSON columns they are held against are incomplete, so their precision is a lower bound.

Generalisation: the same scorer over :mod:`rule_facts_synthetic`'s generated stat blocks, spells and
items with known values, in varied label spellings, cases, value forms and layouts (one field a line,
one field a block, every field on one line, the description running on, the 2024 layout), reported
per variant.

Cost, on the same pages in the same run (best of ``--reps``, interleaved): extract + chunk (the
ingest path without facts) against extract + chunk + sections + facts; facts per page and the
throughput ratio (issue 14's goal: ≥ 0.9×). Writes ``rule_facts.json`` and ``rule_facts.png``.

Ingest, end to end (``--ingest-reps``, default 3; 0 skips it): the books of ``--ingest-layouts`` typeset
at ``--ingest-scale`` go through :func:`jobs.pipeline.run_ingest` (local Ray, the embedded stores, the
default embedding model) into a fresh data folder per run, with ``LOREKEEPER_RULE_FACTS`` off and on,
alternating which goes first; the best of each is kept. Reported: pages per second both ways and their
ratio (the goal's ≥ 0.9×; also the ratio of the medians: the machine may be shared), facts per page
and per kind as the ingest reports them, and from the graph afterwards: facts stored, the share
SUPPORTED_BY a chunk, and the share whose page lies in that chunk's page range.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rulebook_books import LAYOUTS, Node, srd_tree  # noqa: E402

from benchmarks.common import round_floats, srd_records  # noqa: E402
from rulebook import builtin_table, entry_sections, extract_facts  # noqa: E402
from rulebook.tables import FamilyTable  # noqa: E402
from schemas.rulefacts import (  # noqa: E402
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
    same_value,
)

CHAPTERS = ("Spells", "Monsters", "Magic Items", "Conditions")
CORE_NUMBERS = ("armor_class", "hit_points", "challenge_rating", "range")
# Read from a spell's prose by sentence patterns, scored against JSON columns that are incomplete
# (Acid Splash's "1d6 acid damage" has an empty damage_roll): reported apart from the printed fields.
PROSE_FIELDS = ("damage", "damage_type", "save_ability")
_ABILITIES = ("strength", "dexterity", "constitution", "intelligence", "wisdom", "charisma")


# -- truth from the JSON ------------------------------------------------------------------------------


@dataclass(slots=True)
class TruthEntry:
    """One source entry: its name, kind and the typed value of every field the book prints."""

    name: str
    kind: str
    fields: dict[str, RuleValue] = field(default_factory=dict)


_CAST = re.compile(r"(\d+)?([a-z-]+)")
_CAST_UNITS = {"action": "action", "bonus-action": "bonus_action", "reaction": "reaction"}
_CAST_UNITS |= {"minute": "minute", "minutes": "minute", "hour": "hour", "hours": "hour"}
_DURATION_SPECIAL = {
    "instantaneous": "instantaneous",
    "until dispelled": "until_dispelled",
    "until dispelled or triggered": "until_dispelled_or_triggered",
    "special": "special",
}
_DURATION_UNIT = re.compile(r"(\d+) (round|minute|hour|day)s?")


def _dice(text: str) -> DiceValue | None:
    m = re.fullmatch(r"(\d+)d(\d+)(?:([+-])(\d+))?", text.replace(" ", ""))
    if not m:
        return None
    modifier = int(m.group(4) or 0) * (-1 if m.group(3) == "-" else 1)
    return DiceValue(terms=[DiceTerm(count=int(m.group(1)), sides=int(m.group(2)))], modifier=modifier)


def _split_display(text: str) -> list[str]:
    """A display string's items: split at commas and semicolons (outside parentheses), "and"/"or" dropped."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch in ",;" and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for item in items:
        item = re.sub(r"^\s*(?:and|or)\s+", "", item.strip()).strip(" .")
        if item and item not in ("—", "-"):
            out.append(item)
    return out


def spell_truth(s: dict[str, Any]) -> TruthEntry:
    fields: dict[str, RuleValue] = {
        "level": NumberValue(value=s["level"]),
        "school": TextValue(text=s["school"]),
        "ritual": FlagValue(value=bool(s["ritual"])),
    }
    m = _CAST.fullmatch(s["casting_time"])
    if m and m.group(2) in _CAST_UNITS:
        unit: Any = _CAST_UNITS[m.group(2)]
        fields["casting_time"] = DurationValue(amount=float(m.group(1) or 1), unit=unit)
    text = (s["range_text"] or "Self").strip().lower()
    if text in ("self", "touch", "sight", "special", "unlimited"):
        special: Any = text
        fields["range"] = DistanceValue(special=special)
    elif s["range_unit"] in ("feet", "miles"):
        fields["range"] = DistanceValue(amount=float(s["range"]), unit="ft" if s["range_unit"] == "feet" else "mi")
    parts = [c for c, on in (("V", s["verbal"]), ("S", s["somatic"]), ("M", s["material"])) if on]
    fields["components"] = ListValue(items=parts)
    if s["material"] and s["material_specified"]:
        fields["material"] = TextValue(text=s["material_specified"].rstrip("."))
    duration = s["duration"].strip().lower()
    conc = bool(s["concentration"])
    if duration in _DURATION_SPECIAL:
        kind: Any = _DURATION_SPECIAL[duration]
        fields["duration"] = DurationValue(special=kind, concentration=conc, up_to=conc)
    elif dm := _DURATION_UNIT.fullmatch(duration):
        dunit: Any = dm.group(2)
        fields["duration"] = DurationValue(amount=float(dm.group(1)), unit=dunit, concentration=conc, up_to=conc)
    if s["damage_roll"] and (dice := _dice(s["damage_roll"])):
        fields["damage"] = dice
    if s["damage_types"]:
        fields["damage_type"] = ListValue(items=list(s["damage_types"]))
    if s["saving_throw_ability"]:
        fields["save_ability"] = TextValue(text=s["saving_throw_ability"])
    return TruthEntry(s["name"], "spell", fields)


def creature_truth(c: dict[str, Any]) -> TruthEntry:
    f: dict[str, RuleValue] = {
        "size": TextValue(text=c["size"]),
        "creature_type": TextValue(text=c["type"]),
        "alignment": TextValue(text=c["alignment"]),
        "armor_class": NumberValue(value=c["armor_class"]),
        "hit_points": NumberValue(value=c["hit_points"]),
        "speed": DistanceValue(amount=float(int(c["walk"] or 0))),
        "challenge_rating": NumberValue(value=float(c["challenge_rating"])),
        "passive_perception": NumberValue(value=c["passive_perception"]),
    }
    if c["armor_detail"]:
        f["armor_detail"] = TextValue(text=c["armor_detail"])
    if c["hit_dice"] and (dice := _dice(c["hit_dice"])):
        f["hit_dice"] = dice
    for mode in ("burrow", "climb", "fly", "swim"):
        if c.get(mode):
            f[f"speed_{mode}"] = DistanceValue(amount=float(int(c[mode])))
    for ability in _ABILITIES:
        f[ability] = NumberValue(value=c[f"ability_score_{ability}"])
        if c.get(f"saving_throw_{ability}"):
            f[f"saving_throw_{ability}"] = NumberValue(value=c[f"saving_throw_{ability}"])
    for key, value in c.items():
        if key.startswith("skill_bonus_") and value:
            f[f"skill_{key[len('skill_bonus_') :]}"] = NumberValue(value=value)
    for sense in ("blindsight", "darkvision", "tremorsense", "truesight"):
        if c.get(f"{sense}_range"):
            f[sense] = DistanceValue(amount=float(int(c[f"{sense}_range"])))
    for name in ("damage_vulnerabilities", "damage_resistances", "damage_immunities", "condition_immunities"):
        if c[f"{name}_display"]:
            f[name] = ListValue(items=_split_display(c[f"{name}_display"]))
    f["languages"] = ListValue(items=_split_display(c["languages_desc"] or ""))
    return TruthEntry(c["name"], "creature", f)


def item_truth(m: dict[str, Any]) -> TruthEntry:
    return TruthEntry(
        m["name"],
        "magic_item",
        {
            "item_type": TextValue(text=m["category"].replace("-", " ")),
            "rarity": TextValue(text=m["rarity"].replace("-", " ")),
            "attunement": FlagValue(value=bool(m["requires_attunement"])),
        },
    )


def condition_truth(c: dict[str, Any]) -> TruthEntry:
    desc = c["desc"].replace("\r\n", "\n").replace("\\n", "\n")
    bullets = [line.strip()[1:].strip() for line in desc.split("\n") if line.strip().startswith("*")]
    entry = TruthEntry(c["describes"].capitalize(), "condition")
    if bullets:
        entry.fields["effects"] = ListValue(items=bullets)
    elif "|" not in desc:  # a table (exhaustion's levels) is not a list of effects
        entry.fields["effects"] = ListValue(items=[p.strip() for p in desc.split("\n\n") if p.strip()])
    return entry


def srd_truth() -> dict[str, TruthEntry]:
    """Every SRD entry of the four chapters by :func:`entry_key` of its name (magic items deduplicated
    by description as :func:`rulebook_books.srd_tree` does)."""
    out: dict[str, TruthEntry] = {}
    for s in srd_records("Spell.json"):
        out[entry_key(s["name"])] = spell_truth(s)
    for c in srd_records("Creature.json"):
        out.setdefault(entry_key(c["name"]), creature_truth(c))
    seen: set[str] = set()
    for m in sorted(srd_records("MagicItem.json"), key=lambda m: m["name"]):
        if m["desc"] in seen:
            continue
        seen.add(m["desc"])
        out.setdefault(entry_key(m["name"]), item_truth(m))
    for c in srd_records("ConditionDescription.json"):
        out.setdefault(entry_key(c["describes"]), condition_truth(c))
    return out


def book_truth(tree: Node, truth: dict[str, TruthEntry]) -> dict[str, TruthEntry]:
    """The truth of the entries a typeset tree holds."""
    out: dict[str, TruthEntry] = {}
    for node, _, _ in tree.walk():
        if node.kind == "entry" and (hit := truth.get(entry_key(node.title))):
            out[entry_key(node.title)] = hit
    return out


# -- scoring --------------------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).casefold() if ch.isalnum())


def agrees(field_name: str, extracted: RuleValue, truth: RuleValue) -> bool:
    """Whether an extracted value is the truth: :func:`same_value`, and for long prose lists
    (conditions' effects) the same items once reduced to their letters and digits."""
    if field_name == "effects" and isinstance(extracted, ListValue) and isinstance(truth, ListValue):
        return {_squash(i) for i in extracted.items} == {_squash(i) for i in truth.items}
    return same_value(extracted, truth)


def _value_class(value: RuleValue) -> str:
    return "number" if isinstance(value, NumberValue | DiceValue | DistanceValue) else "other"


@dataclass(slots=True)
class _Tally:
    truth: int = 0
    extracted: int = 0
    right: int = 0

    def add(self, other: _Tally) -> None:
        self.truth += other.truth
        self.extracted += other.extracted
        self.right += other.right

    def to_dict(self) -> dict[str, Any]:
        p = self.right / self.extracted if self.extracted else None
        r = self.right / self.truth if self.truth else None
        f = 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
        return {
            "truth": self.truth,
            "extracted": self.extracted,
            "right": self.right,
            "precision": p,
            "recall": r,
            "f1": f,
        }


def score_facts(
    truth: dict[str, TruthEntry], facts_by_entry: dict[str, list[SourceFact]], *, examples: int = 6
) -> dict[str, Any]:
    """Precision and recall per field, per kind and overall, of facts against the truth entries.

    Args:
        truth: the entries of the book by key.
        facts_by_entry: the extracted facts by the key of the section they came from (a key that is
            no truth entry makes its facts on scored fields wrong).
        examples: how many misses to keep per field.
    """
    scored = {name for entry in truth.values() for name in entry.fields}
    field_class: dict[str, str] = {}
    for entry in truth.values():
        for name, value in entry.fields.items():
            field_class.setdefault(name, _value_class(value))
    per_field: dict[str, _Tally] = defaultdict(_Tally)
    per_kind: dict[str, _Tally] = defaultdict(_Tally)
    misses: dict[str, list[dict[str, Any]]] = defaultdict(list)
    kinds_right = kinds_total = 0
    for key, entry in truth.items():
        facts = facts_by_entry.get(key, [])
        got = {f.predicate: f for f in facts}
        kinds_total += 1
        kinds_right += (facts[0].subject.kind if facts else "entry") == entry.kind  # "entry": no kind, no facts
        for name, value in entry.fields.items():
            tally = per_field[name]
            tally.truth += 1
            per_kind[entry.kind].truth += 1
            fact = got.get(name)
            if fact is not None and agrees(name, fact.value, value):
                tally.right += 1
                per_kind[entry.kind].right += 1
            elif len(misses[name]) < examples:
                misses[name].append(
                    {
                        "entry": entry.name,
                        "truth": value.canonical(),
                        "got": fact.value.canonical() if fact else None,
                        "raw": fact.raw[:90] if fact else None,
                        "section_found": key in facts_by_entry,
                    }
                )
        for fact in facts:
            if fact.predicate in scored:
                per_field[fact.predicate].extracted += 1
                per_kind[entry.kind].extracted += 1
    stray: Counter[str] = Counter()
    for key, facts in facts_by_entry.items():
        if key in truth:
            continue
        for fact in facts:
            if fact.predicate in scored:
                per_field[fact.predicate].extracted += 1
                per_kind[fact.subject.kind].extracted += 1
                stray[fact.predicate] += 1
    overall, numbers, core, prose = _Tally(), _Tally(), _Tally(), _Tally()
    for name, tally in per_field.items():
        if name in PROSE_FIELDS:
            prose.add(tally)
            continue
        overall.add(tally)
        if field_class.get(name) == "number":
            numbers.add(tally)
        if name in CORE_NUMBERS:
            core.add(tally)
    return {
        "entries": len(truth),
        "entries_with_facts": sum(1 for k in truth if facts_by_entry.get(k)),
        "kind_accuracy": kinds_right / kinds_total if kinds_total else None,
        "overall": overall.to_dict(),
        "numbers": numbers.to_dict(),
        "core_numbers": core.to_dict(),
        "prose": prose.to_dict(),
        "per_kind": {k: t.to_dict() for k, t in sorted(per_kind.items())},
        "per_field": {k: per_field[k].to_dict() | {"class": field_class.get(k, "other")} for k in sorted(per_field)},
        "stray_facts": dict(stray.most_common()),
        "examples_missed": {k: v for k, v in sorted(misses.items())},
    }


def facts_by_key(
    sections: Iterable[EntrySection], table: FamilyTable | Sequence[FamilyTable]
) -> dict[str, list[SourceFact]]:
    """Facts of every section, by their subject's key (the entry's name without a section number: the
    first section of a key wins)."""
    out: dict[str, list[SourceFact]] = {}
    for section in sections:
        facts = extract_facts(section, table)
        key = facts[0].subject.key if facts else entry_key(section.heading)
        if facts and key not in out:
            out[key] = facts
    return out


# -- the books -----------------------------------------------------------------------------------------


def _extract_and_chunk(data: bytes, name: str, counter: Any) -> tuple[Any, list[Any]]:
    from rulebook_structure import chunking

    from jobs.chunk import chunk_document
    from jobs.extract import extract_document

    doc = extract_document(data, name, ocr=False)
    return doc, chunk_document(doc, chunking(), counter)


def run_layout(
    layout: str,
    folder: Path,
    scale: float,
    truth: dict[str, TruthEntry],
    table: FamilyTable,
    reps: int,
    counter: Any,
    embedder: Any = None,
) -> dict[str, Any]:
    import pymupdf

    spec = LAYOUTS[layout]
    tree = srd_tree(CHAPTERS, scale=scale)
    path = folder / f"facts-{layout}.pdf"
    t0 = time.perf_counter()
    spec.render(tree, path)
    typeset_s = time.perf_counter() - t0
    data = path.read_bytes()
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        pages = pdf.page_count
    doc, chunks = _extract_and_chunk(data, path.name, counter)
    sections = entry_sections(doc.blocks)
    by_key = facts_by_key(sections, table)
    expected = book_truth(tree, truth)
    scores = score_facts(expected, by_key)
    n_facts = sum(len(v) for v in by_key.values())
    # cost: best of reps, interleaved, on the same bytes
    base = full = float("inf")
    for _ in range(reps):
        a = time.perf_counter()
        _extract_and_chunk(data, path.name, counter)
        b = time.perf_counter()
        doc2, _ = _extract_and_chunk(data, path.name, counter)
        for section in entry_sections(doc2.blocks):
            extract_facts(section, table)
        c = time.perf_counter()
        base, full = min(base, b - a), min(full, c - b)
    facts_only = float("inf")
    for _ in range(reps):
        a = time.perf_counter()
        for section in entry_sections(doc.blocks):
            extract_facts(section, table)
        facts_only = min(facts_only, time.perf_counter() - a)
    cost: dict[str, Any] = {
        "extract_chunk_s": base,
        "extract_chunk_facts_s": full,
        "facts_s": facts_only,
        "extract_chunk_s_per_page": base / pages,
        "facts_s_per_page": facts_only / pages,
        "throughput_with_facts_vs_without": base / full,
    }
    if embedder is not None:
        # the ingest path's dominant stage, timed once on this book's chunks: the ratio an ingest
        # would see if facts ran beside extract + chunk + embed (without Ray's parallel stages)
        a = time.perf_counter()
        embedder.embed_documents([c.text for c in chunks])
        embed_s = time.perf_counter() - a
        cost |= {
            "embed_s": embed_s,
            "embed_s_per_page": embed_s / pages,
            "ingest_estimate_with_facts_vs_without": (base + embed_s) / (base + embed_s + facts_only),
        }
    return {
        "layout": layout,
        "engine": spec.engine,
        "pages": pages,
        "typeset_s": typeset_s,
        "sections": len(sections),
        "chunks": len(chunks),
        "facts": n_facts,
        "facts_per_page": n_facts / pages,
        **scores,
        "cost": cost,
    }


# -- ingest, end to end --------------------------------------------------------------------------------


def _ingest_once(paths: list[Path], data: Path, facts: bool) -> dict[str, Any]:
    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions
    from schemas.settings import load_settings

    settings = load_settings(data_dir=data, rule_facts=facts)
    report = run_ingest([str(p) for p in paths], IngestOptions(library="srd"), settings=settings)
    failed = [f.source_ref for f in report.files if f.status != "completed"]
    if failed:
        raise RuntimeError(f"ingest failed for {failed}: {[f.error for f in report.files if f.error]}")
    by_kind: Counter[str] = Counter()
    for f in report.files:
        by_kind.update(f.facts_by_kind)
    run: dict[str, Any] = {
        "seconds": report.seconds,
        "pages": report.pages,
        "chunks": report.chunks,
        "facts": report.facts,
        "facts_by_kind": dict(by_kind.most_common()),
        "pages_per_s": report.pages / report.seconds,
    }
    if facts:
        run["graph"] = _graph_check(settings)
    return run


def _graph_check(settings: Any) -> dict[str, Any]:
    """What the graph holds after an ingest with facts: every fact, its chunk link, its page in range."""
    from stores.factory import open_graph_store

    graph = open_graph_store(settings)
    try:
        stored = graph.run("MATCH (:Item)-[:STATES]->(f:SourceFact) RETURN count(f) AS n")[0]["n"]
        rows = graph.run(
            "MATCH (:Item)-[:STATES]->(f:SourceFact)-[:SUPPORTED_BY]->(c:Chunk) "
            "RETURN count(f) AS linked, "
            "sum(CASE WHEN f.page >= c.page_start AND f.page <= c.page_end THEN 1 ELSE 0 END) AS in_range"
        )[0]
    finally:
        graph.close()
    return {
        "facts_stored": stored,
        "supported_by_chunk": rows["linked"] / max(stored, 1),
        "page_in_chunk_range": (rows["in_range"] or 0) / max(rows["linked"], 1),
    }


def run_ingest_cost(layouts: Sequence[str], scale: float, reps: int, folder: Path) -> dict[str, Any]:
    """The real ingest of the same books with facts off and on, alternating, best of ``reps`` each."""
    import shutil

    from jobs.pipeline import start_ray

    tree = srd_tree(CHAPTERS, scale=scale)
    paths = []
    for layout in layouts:
        path = folder / f"ingest-{layout}.pdf"
        LAYOUTS[layout].render(tree, path)
        paths.append(path)
    started = start_ray()  # one Ray for every run: its start-up is no part of either side
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    try:
        for rep in range(reps):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                data = folder / f"ingest-data-{mode}-{rep}"
                run = _ingest_once(paths, data, facts=mode == "on")
                print(
                    f"ingest facts {mode}: {run['pages']} pages, {run['chunks']} chunks, {run['facts']} facts "
                    f"in {run['seconds']:.1f} s ({run['pages_per_s']:.2f} pages/s)"
                )
                runs[mode].append(run)
                shutil.rmtree(data, ignore_errors=True)
    finally:
        if started:
            import ray

            ray.shutdown()
    best = {mode: max(r, key=lambda run: run["pages_per_s"]) for mode, r in runs.items()}
    on, off = best["on"], best["off"]
    median = {mode: statistics.median(run["pages_per_s"] for run in r) for mode, r in runs.items()}
    return {
        "layouts": list(layouts),
        "scale": scale,
        "reps": reps,
        "pages": on["pages"],
        "chunks": on["chunks"],
        "facts": on["facts"],
        "facts_per_page": on["facts"] / max(on["pages"], 1),
        "facts_by_kind": on["facts_by_kind"],
        "pages_per_s_without_facts": off["pages_per_s"],
        "pages_per_s_with_facts": on["pages_per_s"],
        "throughput_with_facts_vs_without": on["pages_per_s"] / off["pages_per_s"],
        "throughput_median_with_facts_vs_without": median["on"] / median["off"],
        "graph": on["graph"],
        "runs": runs,
    }


def print_ingest(ingest: dict[str, Any]) -> None:
    graph = ingest["graph"]
    print(
        f"\ningest end to end ({', '.join(ingest['layouts'])} at scale {ingest['scale']}, best of {ingest['reps']}): "
        f"{ingest['pages']} pages, {ingest['chunks']} chunks; without facts "
        f"{ingest['pages_per_s_without_facts']:.2f} pages/s, with {ingest['pages_per_s_with_facts']:.2f} "
        f"({ingest['throughput_with_facts_vs_without']:.3f}x, goal 0.9x; medians "
        f"{ingest['throughput_median_with_facts_vs_without']:.3f}x); {ingest['facts']} facts, "
        f"{ingest['facts_per_page']:.1f} per page {ingest['facts_by_kind']}; in the graph "
        f"{graph['facts_stored']}, SUPPORTED_BY a chunk {graph['supported_by_chunk']:.3f}, page in the "
        f"chunk's range {graph['page_in_chunk_range']:.3f}"
    )


# -- output ---------------------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "    -" if value is None else f"{value:5.3f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'layout':22s} {'pages':>5s} {'entries':>7s} {'facts':>6s} {'kind':>5s} {'P':>5s} {'R':>5s} "
        f"{'numP':>5s} {'numR':>5s} {'coreP':>5s} {'coreR':>5s} {'thru':>5s} {'ingst':>5s}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        cost = r.get("cost", {})
        print(
            f"{r['layout'][:22]:22s} {r.get('pages', 0):5d} {r['entries']:7d} {r.get('facts', 0):6d} "
            f"{_fmt(r['kind_accuracy'])} {_fmt(r['overall']['precision'])} {_fmt(r['overall']['recall'])} "
            f"{_fmt(r['numbers']['precision'])} {_fmt(r['numbers']['recall'])} "
            f"{_fmt(r['core_numbers']['precision'])} {_fmt(r['core_numbers']['recall'])} "
            f"{_fmt(cost.get('throughput_with_facts_vs_without'))} "
            f"{_fmt(cost.get('ingest_estimate_with_facts_vs_without'))}"
        )


def print_fields(rows: list[dict[str, Any]]) -> None:
    fields = sorted({f for r in rows for f in r["per_field"]})
    print(f"\n{'field (P/R)':26s} " + " ".join(f"{r['layout'][:17]:>17s}" for r in rows))
    for name in fields:
        cells = []
        for r in rows:
            t = r["per_field"].get(name)
            cells.append(f"{_fmt(t['precision'])}/{_fmt(t['recall'])} n{t['truth']:<4d}" if t else f"{'':>17s}")
        print(f"{name:26s} " + " ".join(f"{c:>17s}" for c in cells))


def plot(rows: list[dict[str, Any]], path: Path, ingest: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = sorted({f for r in rows for f in r["per_field"]})
    fig, axes = plt.subplots(
        1,
        3 if ingest else 2,
        figsize=(20 if ingest else 16, max(6, 0.22 * len(fields) + 1.5)),
        gridspec_kw={"width_ratios": [1.1, 1, 0.45] if ingest else [1.1, 1]},
    )
    ax1, ax2 = axes[0], axes[1]
    if ingest:
        ax3 = axes[2]
        speeds = [ingest["pages_per_s_without_facts"], ingest["pages_per_s_with_facts"]]
        ax3.bar(["without facts", "with facts"], speeds, color=["#999999", "#4477aa"])
        for x, v in enumerate(speeds):
            ax3.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
        ax3.set_ylabel("pages / s (run_ingest, best of runs)", fontsize=8)
        ax3.set_title(
            f"ingest {ingest['throughput_with_facts_vs_without']:.2f}x (goal 0.9x)\n"
            f"{ingest['pages']} pages, {ingest['facts_per_page']:.1f} facts/page",
            fontsize=9,
        )
    metrics = [
        ("overall", "precision", "P all"),
        ("overall", "recall", "R all"),
        ("numbers", "precision", "P numbers"),
        ("numbers", "recall", "R numbers"),
        ("core_numbers", "recall", "R AC/HP/CR/range"),
    ]
    width = 0.8 / (len(metrics) + 1)
    for m, (group, key, label) in enumerate(metrics):
        values = [r[group][key] or 0 for r in rows]
        ax1.bar([i + m * width for i in range(len(rows))], values, width, label=label)
    ax1.bar(
        [i + len(metrics) * width for i in range(len(rows))],
        [r["kind_accuracy"] or 0 for r in rows],
        width,
        label="kind acc.",
    )
    ax1.axhline(0.95, color="gray", lw=0.6, ls="--")
    ax1.axhline(0.98, color="gray", lw=0.6, ls=":")
    ax1.set_ylim(0.5, 1.02)
    ax1.set_xticks([i + 0.4 for i in range(len(rows))])
    ax1.set_xticklabels([r["layout"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax1.set_title("Field extraction against the SRD JSON (goal 0.95, numbers 0.98)", fontsize=9)
    ax1.legend(fontsize=7, loc="lower left")
    grid = [[(r["per_field"].get(f) or {}).get("recall") for r in rows] for f in fields]
    import numpy as np

    data = np.array([[v if v is not None else np.nan for v in row] for row in grid], dtype=float)
    image = ax2.imshow(data, aspect="auto", cmap="RdYlGn", vmin=0.8, vmax=1.0)
    ax2.set_yticks(range(len(fields)))
    ax2.set_yticklabels(fields, fontsize=6)
    ax2.set_xticks(range(len(rows)))
    ax2.set_xticklabels([r["layout"] for r in rows], rotation=20, ha="right", fontsize=7)
    ax2.set_title("recall per field (colour floor 0.8)", fontsize=9)
    fig.colorbar(image, ax=ax2, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of each section's entries typeset")
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS))
    parser.add_argument("--reps", type=int, default=3, help="timing repetitions (best kept)")
    parser.add_argument("--synthetic", type=int, default=400, help="generated entries (0: none)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="write the PDFs here instead of a temporary folder")
    parser.add_argument("--no-embed", action="store_true", help="skip timing the embedding of the chunks")
    parser.add_argument("--ingest-reps", type=int, default=3, help="real ingests each way (0: none)")
    parser.add_argument("--ingest-layouts", nargs="*", default=["story-compact", "reportlab-times"])
    parser.add_argument("--ingest-scale", type=float, default=0.25, help="share of entries in the ingested books")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from jobs.tokens import TokenCounter

    table = builtin_table("dnd5e")
    truth = srd_truth()
    counter = TokenCounter()
    embedder = None
    if not args.no_embed:
        from models.embedding import build_embedder

        embedder = build_embedder()
        embedder.embed_documents(["warm up the model"])
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for layout in args.layouts:
            row = run_layout(layout, folder, args.scale, truth, table, args.reps, counter, embedder)
            print(
                f"{layout}: {row['pages']} pages, {row['entries']} entries, {row['facts']} facts "
                f"(typeset {row['typeset_s']:.1f} s)"
            )
            rows.append(row)
        ingest: dict[str, Any] = {}
        if args.ingest_reps:
            ingest = run_ingest_cost(args.ingest_layouts, args.ingest_scale, args.ingest_reps, folder)
    synthetic: dict[str, Any] = {}
    if args.synthetic:
        import rule_facts_synthetic

        synthetic = rule_facts_synthetic.run(args.synthetic, args.seed, table)
    print()
    print_table(rows + ([synthetic["all"] | {"layout": "synthetic (all)"}] if synthetic else []))
    print_fields(rows)
    if synthetic:
        print("\nsynthetic, per variant:")
        print_table([v | {"layout": k} for k, v in synthetic["variants"].items()])
    for row in rows:
        bad = {k: v for k, v in row["examples_missed"].items() if v}
        print(f"\n== {row['layout']}: misses (first per field)")
        for name, misses in list(bad.items())[:20]:
            print(f"  {name}: {misses[0]}")
        if row["stray_facts"]:
            print(f"  facts on sections that are no entry: {row['stray_facts']}")
    if ingest:
        print_ingest(ingest)
    result = {
        "benchmark": "rule_facts",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "settings": {
            "scale": args.scale,
            "layouts": args.layouts,
            "chapters": list(CHAPTERS),
            "table": "dnd5e",
            "reps": args.reps,
            "synthetic": args.synthetic,
            "seed": args.seed,
            "ingest_reps": args.ingest_reps,
            "ingest_layouts": args.ingest_layouts,
            "ingest_scale": args.ingest_scale,
        },
        "layouts": rows,
        "synthetic": synthetic,
        "ingest": ingest,
        "notes": [
            "Truth from the SRD 5.1 JSON's structured fields (not the printed text); only fields the book prints.",
            "A fact is right when same_value holds against its entry's truth; facts on sections that match no "
            "entry count as wrong; numbers = fields with number, dice or distance values; core = AC, HP, CR, range.",
            "Spells' damage, damage_type and save_ability come from the prose (sentence patterns) against the "
            "JSON's damage_roll, damage_types and saving_throw_ability, which are themselves incomplete.",
            "cost: best of reps, interleaved; throughput_with_facts_vs_without = extract+chunk seconds / "
            "extract+chunk+sections+facts seconds on the same bytes; ingest_estimate_with_facts_vs_without adds "
            "the embedding of the book's chunks (all-MiniLM-L6-v2 on this CPU, timed once) to both sides.",
            "ingest: run_ingest on local Ray and the embedded stores, a fresh data folder per run, rule facts "
            "off and on alternating, best of ingest_reps each; pages/s from the report (Ray started once "
            "before, the embedding model loaded in each run on both sides); facts per kind as the ingest "
            "reports them; graph: facts stored, share SUPPORTED_BY a chunk, share whose page is in that "
            "chunk's page range.",
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rule_facts.json").write_text(json.dumps(round_floats(result), indent=1, ensure_ascii=False))
    plot(
        rows + ([synthetic["all"] | {"layout": "synthetic"}] if synthetic else []),
        args.out / "rule_facts.png",
        ingest or None,
    )
    print(f"\nwrote {args.out / 'rule_facts.json'} and rule_facts.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
