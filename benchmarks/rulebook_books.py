"""Typeset rulebook PDFs with known heading trees, for the structure benchmark and its tests.

Importable (``benchmarks/rulebook_structure.py`` and ``tests/unit/test_rulebook_books.py`` use it;
run as a script it writes the books into a folder and prints their ground truth).

A **source tree** (:class:`Node`: book › chapter › section › entry › sub-heading, each with its body
elements) is built from the corpus, never from the project's own extraction:

* :func:`srd_tree`: the SRD 5.1 JSON of ``../shared/corpus/rulebooks/dnd-srd-5.1`` — spells by level
  (school line, run-in fields "Casting Time: 1 action", "At Higher Levels."), monsters by type
  (stat-block fields "Armor Class 17 (natural armor)", an ability-score table), magic items by
  category, conditions (entries straight under their chapter) and rules by rule set (their Markdown
  sub-headings, run-in labels and tables with "Table: …" captions);
* :func:`fate_tree`: the Fate Condensed SRD Markdown (its ``#``/``##``/``###``/``####`` headings).

A **layout** typesets one tree with one engine in one house style (:data:`LAYOUTS`):

========================  ===========================================  ====================================
layout                    engine and style                             outline (PDF bookmarks)
========================  ===========================================  ====================================
``weasyprint-2col``       WeasyPrint, HTML + CSS paged media: two      chapters only (``bookmark-level``)
                          columns, DejaVu, entry headings 10 pt bold
                          sans over 9 pt serif body; ``@page`` running
                          heads (book title on even pages, chapter
                          name via ``string-set`` on odd pages), page
                          numbers at the outer foot
``libreoffice-docx``      python-docx → LibreOffice headless: one      every heading (LibreOffice's default)
                          column, Liberation Serif / Sans, Word heading
                          styles, "<book> · <chapter>" header per
                          chapter section, "Page N" footer
``reportlab-times``       ReportLab platypus, base-14 Times/Helvetica,  none
                          one column; entry headings 10.5 pt bold sans
                          over 10 pt Times (1.05×); header: book title
                          left, chapter right; page number centred
``story-compact``         PyMuPDF Story: A4, two columns, sans body,   chapters and sections
                          serif entry headings; chapters flow on
                          without page breaks; footer "<book> |
                          <chapter>" (the first chapter opened on the
                          page, else the running one) and the number
``pandoc-latex``          Markdown → pandoc → pdflatex (article):      every heading (hyperref)
                          Latin Modern, numbered headings ("1.2.3")
                          in LaTeX's bold, sub-headings as run-in
                          ``\paragraph``, fancyhdr heads naming the
                          current section with its number
``weasyprint-3col``       WeasyPrint, three columns on mirrored        none
                          pages, no bold anywhere: entries in small
                          capitals at the body size set apart by
                          colour, labels in colour; dictionary heads
                          ("first – last entry of the page"), the
                          chapter at the outer foot
``weasyprint-caps``       WeasyPrint, one column: entries in capitals  none
                          at the body size, neither bold nor
                          coloured; a drop cap opens each chapter;
                          the chapter in capitals as running head
``reportlab-numbered``    ReportLab, two columns of Helvetica, never   none
                          bold: headings numbered ("2.3.1 Bless"),
                          entries at the body size told only by
                          number and space; labels in italics
========================  ===========================================  ====================================

The last four are the layouts the structure rules were *not* tuned on (added to check that the
rules hold on other conventions). pandoc-latex needs ``pandoc`` and ``pdflatex`` (Debian:
``pandoc texlive-latex-recommended texlive-fonts-recommended lmodern``); a layout whose engine
is missing raises :class:`EngineMissing`, and the benchmark skips it with that note.

Each typeset book comes with its ground truth (:class:`TypesetBook`): every heading of the tree with
its level (book title 0, chapter 1, …), kind and the page the engine put it on — read from the engine
itself (WeasyPrint's anchors, LibreOffice's bookmarks, ReportLab's ``afterFlowable``, Story's element
positions), never guessed from the PDF text — and the page-furniture strings (running heads and
page-number formats) it printed.

Sizes: ``scale`` keeps that share of the entries of every section (evenly spread, at least one), and
``max_sections`` caps the sections per chapter; :func:`typeset` with ``tiny=True`` makes books of a
few pages for tests. Nothing here is committed: books are written into the folder the caller gives.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: benchmarks.common must import
    sys.path.insert(0, str(REPO))

from benchmarks.common import CORPUS, SRD_JSON, srd_records  # noqa: E402

SRD = SRD_JSON
FATE = CORPUS / "rulebooks" / "fate-srd"

# -- the source tree -----------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """A piece of inline text with its emphasis."""

    text: str
    bold: bool = False
    italic: bool = False


@dataclass(slots=True)
class Element:
    """One body element of a node.

    kind: ``p`` (paragraph), ``li`` (bullet item), ``subtitle`` (the italic line under an entry
    heading: "1st-level evocation", "Large dragon, lawful evil"), ``field`` (a run-in label line:
    ``label`` set in bold, then ``runs``), ``table`` (``header`` and ``rows`` of plain cells, with
    an optional ``caption`` "Table: …" set above it).
    """

    kind: str
    runs: list[Run] = field(default_factory=list)
    label: str = ""
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def plain(self) -> str:
        if self.kind == "table":
            cells = [self.caption, *self.header, *(c for row in self.rows for c in row)]
            return " ".join(c for c in cells if c)
        text = "".join(r.text for r in self.runs)
        return f"{self.label} {text}" if self.label else text


@dataclass(slots=True)
class Node:
    """A heading of the source tree and what it holds.

    kind: ``book``, ``chapter``, ``section``, ``entry`` (a spell, a creature, an item, a condition,
    a rule) or ``sub`` (a heading inside an entry). The level is the depth (book 0, chapter 1, …).
    """

    title: str
    kind: str
    body: list[Element] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    def walk(self, level: int = 0, chapter: str = "") -> Iterator[tuple[Node, int, str]]:
        """Pre-order (node, level, chapter title) over the tree."""
        if level == 1:
            chapter = self.title
        yield self, level, chapter
        for child in self.children:
            yield from child.walk(level + 1, chapter)


def _runs_from_inline(token: Any) -> list[Run]:
    runs: list[Run] = []
    bold = italic = 0
    for child in token.children or []:
        t = child.type
        if t == "strong_open":
            bold += 1
        elif t == "strong_close":
            bold -= 1
        elif t == "em_open":
            italic += 1
        elif t == "em_close":
            italic -= 1
        elif t in ("text", "code_inline"):
            runs.append(Run(child.content, bold > 0, italic > 0))
        elif t in ("softbreak", "hardbreak"):
            runs.append(Run(" ", bold > 0, italic > 0))
    merged: list[Run] = []
    for run in runs:
        if merged and (merged[-1].bold, merged[-1].italic) == (run.bold, run.italic):
            merged[-1].text += run.text
        else:
            merged.append(run)
    text = "".join(r.text for r in merged)
    if merged:
        merged[0].text = merged[0].text.lstrip()
        merged[-1].text = merged[-1].text.rstrip()
    return [r for r in merged if r.text] if text.strip() else []


@cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table")


def markdown_elements(text: str, table_name: str = "") -> list[tuple[int, str] | Element]:
    """Body elements of a Markdown text; its headings come back as ``(depth, title)`` markers.

    Raw HTML, images and links' targets are dropped; every table gets the caption
    ``"Table: <table_name>"`` (numbered when a text holds several).
    """
    # Some SRD texts carry escaped line breaks ("\\n") in place of real ones.
    tokens = _markdown().parse(text.replace("\r\n", "\n").replace("\\n", "\n"))
    out: list[tuple[int, str] | Element] = []
    in_list = 0
    tables = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        t = tok.type
        if t in ("bullet_list_open", "ordered_list_open"):
            in_list += 1
        elif t in ("bullet_list_close", "ordered_list_close"):
            in_list -= 1
        elif t == "heading_open":
            runs = _runs_from_inline(tokens[i + 1])
            title = "".join(r.text for r in runs).strip()
            if title:
                out.append((int(tok.tag[1]), title))
            i += 2
        elif t == "inline" and tokens[i - 1].type == "paragraph_open":
            runs = _runs_from_inline(tok)
            if runs:
                out.append(Element("li" if in_list else "p", runs))
        elif t == "table_open":
            header: list[str] = []
            rows: list[list[str]] = []
            row: list[str] = []
            in_head = False
            while tokens[i].type != "table_close":
                tt = tokens[i].type
                if tt == "thead_open":
                    in_head = True
                elif tt == "thead_close":
                    in_head = False
                elif tt == "tr_open":
                    row = []
                elif tt == "tr_close":
                    if in_head:
                        header = row
                    elif any(row):
                        rows.append(row)
                elif tt == "inline":
                    row.append("".join(r.text for r in _runs_from_inline(tokens[i])).strip())
                i += 1
            tables += 1
            if header or rows:
                out.append(Element("table", caption=f"Table: {table_name}", header=header, rows=rows))
        i += 1
    if tables > 1:
        n = 0
        for el in out:
            if isinstance(el, Element) and el.kind == "table":
                n += 1
                el.caption = f"{el.caption} ({n})"
    return out


def _attach(node: Node, items: list[tuple[int, str] | Element], kind: str, depth_cap: int) -> None:
    """Put Markdown elements under ``node``, its headings as child nodes nested by their depth."""
    depths = sorted({i[0] for i in items if isinstance(i, tuple)})
    rank = {d: min(n + 1, depth_cap) for n, d in enumerate(depths)}
    stack: list[tuple[int, Node]] = [(0, node)]
    for item in items:
        if isinstance(item, tuple):
            level = rank[item[0]]
            while stack[-1][0] >= level:
                stack.pop()
            child = Node(item[1], kind)
            stack[-1][1].children.append(child)
            stack.append((level, child))
        else:
            stack[-1][1].body.append(item)


def _keep(items: list[Any], scale: float) -> list[Any]:
    """An evenly spread ``scale`` share of ``items`` (at least one)."""
    if scale >= 1 or not items:
        return items
    n = max(1, round(len(items) * scale))
    step = len(items) / n
    return [items[int(k * step)] for k in range(n)]


_ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


def _paragraph(text: str) -> Element:
    """A plain body paragraph."""
    return Element("p", [Run(text)])


def _ordinal(n: int) -> str:
    return _ORDINAL.get(n, f"{n}th")


def _casting_time(value: str) -> str:
    m = re.fullmatch(r"(\d+)?([a-z-]+)", value)
    if not m:
        return value
    count, unit = m.group(1) or "1", m.group(2).replace("-", " ")
    return f"{count} {unit}{'s' if count != '1' and not unit.endswith('s') else ''}"


def _field(label: str, value: str) -> Element:
    return Element("field", [Run(" " + value)], label=label)


def _spell(s: dict[str, Any]) -> Node:
    school = s["school"]
    if s["level"] == 0:
        line = f"{school.capitalize()} cantrip"
    else:
        line = f"{_ordinal(s['level'])}-level {school}" + (" (ritual)" if s["ritual"] else "")
    parts = [c for c, on in (("V", s["verbal"]), ("S", s["somatic"]), ("M", s["material"])) if on]
    components = ", ".join(parts)
    if s["material"] and s["material_specified"]:
        components += f" ({s['material_specified'].rstrip('.')})"
    duration = s["duration"]
    if s["concentration"] and not duration.lower().startswith("concentration"):
        duration = f"Concentration, up to {duration}"
    node = Node(s["name"], "entry", [Element("subtitle", [Run(line, italic=True)])])
    node.body += [
        _field("Casting Time:", _casting_time(s["casting_time"])),
        _field("Range:", s["range_text"] or "Self"),
        _field("Components:", components or "None"),
        _field("Duration:", duration[:1].upper() + duration[1:]),
    ]
    _attach(node, markdown_elements(s["desc"], s["name"]), "sub", 4)
    if s["higher_level"]:
        node.body.append(Element("p", [Run("At Higher Levels.", bold=True, italic=True), Run(" " + s["higher_level"])]))
    return node


def _mod(score: int) -> str:
    m = (score - 10) // 2
    return f"{score} ({'+' if m >= 0 else '−'}{abs(m)})"


_ABILITIES = ["strength", "dexterity", "constitution", "intelligence", "wisdom", "charisma"]


def _creature(c: dict[str, Any]) -> Node:
    size = c["size"].capitalize()
    node = Node(c["name"], "entry", [Element("subtitle", [Run(f"{size} {c['type']}, {c['alignment']}", italic=True)])])
    ac = str(c["armor_class"]) + (f" ({c['armor_detail']})" if c["armor_detail"] else "")
    speeds = [f"{int(c['walk'] or 0)} ft."] + [
        f"{k} {int(c[k])} ft." for k in ("burrow", "climb", "fly", "swim") if c.get(k)
    ]
    node.body += [
        _field("Armor Class", ac),
        _field("Hit Points", f"{c['hit_points']} ({c['hit_dice']})" if c["hit_dice"] else str(c["hit_points"])),
        _field("Speed", ", ".join(speeds)),
        Element(
            "table",
            header=["STR", "DEX", "CON", "INT", "WIS", "CHA"],
            rows=[[_mod(c[f"ability_score_{a}"]) for a in _ABILITIES]],
        ),
    ]
    saves = [f"{a[:3].capitalize()} +{c[f'saving_throw_{a}']}" for a in _ABILITIES if c.get(f"saving_throw_{a}")]
    skills = [
        f"{k[len('skill_bonus_') :].replace('_', ' ').title()} +{v}"
        for k, v in sorted(c.items())
        if k.startswith("skill_bonus_") and v
    ]
    senses = [
        f"{k[: -len('_range')]} {int(c[k])} ft."
        for k in ("blindsight_range", "darkvision_range", "tremorsense_range", "truesight_range")
        if c.get(k)
    ] + [f"passive Perception {c['passive_perception']}"]
    cr = float(c["challenge_rating"])
    challenge = {0.125: "1/8", 0.25: "1/4", 0.5: "1/2"}.get(cr, str(int(cr)))
    optional = [
        ("Saving Throws", ", ".join(saves)),
        ("Skills", ", ".join(skills)),
        ("Damage Vulnerabilities", c["damage_vulnerabilities_display"]),
        ("Damage Resistances", c["damage_resistances_display"]),
        ("Damage Immunities", c["damage_immunities_display"]),
        ("Condition Immunities", c["condition_immunities_display"]),
        ("Senses", ", ".join(senses)),
        ("Languages", c["languages_desc"] or "—"),
        ("Challenge", challenge),
    ]
    node.body += [_field(label, value) for label, value in optional if value]
    return node


_ITEM_SECTIONS = {
    "armor": "Armor",
    "shield": "Armor",
    "potion": "Potions",
    "ring": "Rings",
    "rod": "Rods",
    "scroll": "Scrolls",
    "staff": "Staffs",
    "wand": "Wands",
    "weapon": "Weapons",
    "ammunition": "Weapons",
    "wondrous-item": "Wondrous Items",
}


def _magic_item(m: dict[str, Any]) -> Node:
    kind = m["category"].replace("-", " ")
    line = f"{kind[:1].upper()}{kind[1:]}, {m['rarity'].replace('-', ' ')}"
    if m["requires_attunement"]:
        line += " (requires attunement)"
    node = Node(m["name"], "entry", [Element("subtitle", [Run(line, italic=True)])])
    _attach(node, markdown_elements(m["desc"], m["name"]), "sub", 4)
    return node


def srd_tree(
    chapters: tuple[str, ...] = ("Spells", "Monsters", "Magic Items", "Conditions", "Rules"),
    *,
    scale: float = 1.0,
    max_sections: int | None = None,
    title: str = "System Reference Document 5.1",
) -> Node:
    """The SRD 5.1 as book › chapter › section › entry, from the corpus JSON.

    Args:
        chapters: which chapters, in this order (of Spells, Monsters, Magic Items, Conditions, Rules).
        scale: share of each section's entries kept (evenly spread, at least one).
        max_sections: at most this many sections per chapter (evenly spread).
        title: the book's title.
    """
    book = Node(
        title,
        "book",
        [
            _paragraph(
                "Typeset for the Lorekeeper structure benchmark from the "
                "System Reference Document 5.1 (CC-BY-4.0, Wizards of the Coast)."
            )
        ],
    )

    def sections(pairs: list[tuple[str, list[Node]]]) -> list[Node]:
        if max_sections is not None and len(pairs) > max_sections:
            pairs = _keep(pairs, max_sections / len(pairs))
        return [Node(name, "section", children=_keep(entries, scale)) for name, entries in pairs]

    for name in chapters:
        chapter = Node(name, "chapter")
        if name == "Spells":
            spells = sorted(srd_records("Spell.json"), key=lambda s: (s["level"], s["name"]))
            by_level: dict[int, list[Node]] = {}
            for s in spells:
                by_level.setdefault(s["level"], []).append(_spell(s))
            chapter.body.append(
                _paragraph(
                    "Spells are listed by level, then alphabetically. Each entry "
                    "gives the spell's school, casting time, range, components and "
                    "duration before its effect."
                )
            )
            chapter.children = sections(
                [
                    ("Cantrips" if lvl == 0 else f"{_ordinal(lvl)}-Level Spells", nodes)
                    for lvl, nodes in by_level.items()
                ]
            )
        elif name == "Monsters":
            creatures = sorted(srd_records("Creature.json"), key=lambda c: (c["type"], c["name"]))
            by_type: dict[str, list[Node]] = {}
            for c in creatures:
                by_type.setdefault(c["type"], []).append(_creature(c))
            chapter.body.append(
                _paragraph(
                    "Creatures are grouped by type. A stat block gives a creature's "
                    "armor class, hit points, speed and ability scores."
                )
            )
            plural = {"monstrosity": "Monstrosities", "undead": "Undead", "fey": "Fey"}
            chapter.children = sections([(plural.get(t, t.capitalize() + "s"), nodes) for t, nodes in by_type.items()])
        elif name == "Magic Items":
            items = sorted(srd_records("MagicItem.json"), key=lambda m: m["name"])
            seen: set[str] = set()
            by_cat: dict[str, list[Node]] = {}
            for m in items:
                if m["desc"] in seen:  # "Adamantine Armor (Breastplate)", "(Chain Mail)"…: one entry
                    continue
                seen.add(m["desc"])
                by_cat.setdefault(_ITEM_SECTIONS.get(m["category"], "Wondrous Items"), []).append(_magic_item(m))
            chapter.body.append(
                _paragraph(
                    "Magic items are grouped by kind. Each entry names its kind, "
                    "its rarity and whether it requires attunement."
                )
            )
            chapter.children = sections(sorted(by_cat.items()))
        elif name == "Conditions":
            chapter.body.append(
                _paragraph(
                    "Conditions alter a creature's capabilities in a variety of "
                    "ways and can arise as a result of a spell, a class feature, "
                    "a monster's attack, or other effect."
                )
            )
            conditions = sorted(srd_records("ConditionDescription.json"), key=lambda c: c["describes"])
            nodes = []
            for c in conditions:
                node = Node(c["describes"].capitalize(), "entry")
                _attach(node, markdown_elements(c["desc"], c["describes"].capitalize()), "sub", 3)
                nodes.append(node)
            chapter.children = _keep(nodes, max(scale, 0.2))  # entries straight under the chapter
        elif name == "Rules":
            rulesets = {r["pk"]: r for r in srd_records("RuleSet.json")}
            rules = sorted(srd_records("Rule.json"), key=lambda r: (r["ruleset"], r["index"]))
            by_set: dict[str, list[Node]] = {}
            for r in rules:
                node = Node(r["name"], "entry")
                _attach(node, markdown_elements(r["desc"], r["name"]), "sub", 2)
                by_set.setdefault(r["ruleset"], []).append(node)
            pairs = [(rulesets[pk]["name"], nodes) for pk, nodes in by_set.items() if pk in rulesets]
            chapter.body.append(_paragraph("The rules of play, grouped by topic."))
            chapter.children = sections(pairs)
        else:
            raise ValueError(f"unknown SRD chapter {name!r}")
        book.children.append(chapter)
    return book


def fate_tree(*, scale: float = 1.0, max_sections: int | None = None, title: str = "Fate Condensed") -> Node:
    """The Fate Condensed SRD as book › chapter (``#``) › section (``##``) › entry (``###``) › sub (``####``).

    Args:
        scale: share of the chapters kept (evenly spread, at least one); below 1, only chapters
            with sections are kept.
        max_sections: at most this many sections per chapter (the first ones).
        title: the book's title.
    """
    text = (FATE / "Fate-Condensed-SRD-CC-BY.md").read_text()
    items = markdown_elements(text, "")
    # The first "# Fate Condensed" is the book's own title.
    if items and isinstance(items[0], tuple):
        items = items[1:]
    book = Node(title, "book")
    kinds = {1: "chapter", 2: "section", 3: "entry", 4: "sub"}
    stack: list[tuple[int, Node]] = [(0, book)]
    last_heading = title
    for item in items:
        if isinstance(item, tuple):
            level = min(item[0], 4)
            while stack[-1][0] >= level:
                stack.pop()
            while stack[-1][0] < level - 1:  # a skipped level: hang it under the nearest
                level -= 1
            node = Node(item[1], kinds[level])
            stack[-1][1].children.append(node)
            stack.append((level, node))
            last_heading = item[1]
        else:
            if item.kind == "table":
                item.caption = f"Table: {last_heading}"
            stack[-1][1].body.append(item)
    if scale < 1:
        book.children = _keep([c for c in book.children if c.children], scale)
    if max_sections is not None:
        for chapter in book.children:
            chapter.children = chapter.children[:max_sections]
    return book


# -- ground truth ----------------------------------------------------------------------------------


@dataclass(slots=True)
class TruthHeading:
    """One heading of a typeset book: its text, level (book 0, chapter 1, …), kind and page (1-based)."""

    text: str
    level: int
    kind: str
    page: int
    chapter: str
    fingerprint: str = ""  # the start of its body, normalised (entries only): finds its chunk


@dataclass(slots=True)
class TypesetBook:
    """A generated PDF and its ground truth."""

    layout: str
    engine: str
    path: Path
    pages: int
    outline: str  # "chapters", "chapters+sections", "all", "none"
    headings: list[TruthHeading]
    furniture: list[str]  # running heads and other page furniture, as printed
    page_number_formats: list[str]  # e.g. ["{n}"] or ["Page {n}"]
    seconds: float  # time to typeset

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TypesetBook:
        """A book written by :meth:`to_json` (its PDF must still be at ``path``)."""
        fields = dict(data)
        fields["path"] = Path(fields["path"])
        fields["headings"] = [TruthHeading(**h) for h in fields["headings"]]
        return cls(**fields)

    def chapter_pages(self) -> dict[str, tuple[int, int]]:
        """Each chapter's first and last page (the last is the page before the next chapter's)."""
        starts = [(h.text, h.page) for h in self.headings if h.level == 1]
        out: dict[str, tuple[int, int]] = {}
        for n, (name, page) in enumerate(starts):
            end = starts[n + 1][1] - 1 if n + 1 < len(starts) else self.pages
            out[name] = (page, max(page, end))
        return out


def normalise(text: str) -> str:
    """Text for matching: NFKC, soft hyphens and line breaks gone, quotes and dashes unified, lower case."""
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = text.translate({0x2018: "'", 0x2019: "'", 0x201C: '"', 0x201D: '"', 0x2013: "-", 0x2014: "-", 0x2212: "-"})
    return " ".join(text.split()).strip(" .:").lower()


def squash(text: str) -> str:
    """Letters and digits only, lower case: survives line breaks, hyphenation and spacing."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).lower() if ch.isalnum())


def _fingerprints(tree: Node) -> dict[int, str]:
    """For each entry (by ``id``), the shortest start of its body's squashed text unique in the book."""
    bodies: dict[int, str] = {}
    for node, _, _ in tree.walk():
        if node.kind == "entry":
            parts = [el.plain() for el in node.body if el.kind != "subtitle"]
            if not parts and node.children:  # an entry whose text sits under its sub-headings
                parts = [el.plain() for el in node.children[0].body]
            bodies[id(node)] = squash(" ".join(parts))
    everything = squash(" ".join(el.plain() for node, _, _ in tree.walk() for el in node.body))
    out: dict[int, str] = {}
    for key, body in bodies.items():
        for n in (40, 80, 160, 320):
            probe = body[:n]
            if len(probe) >= 24 and everything.count(probe) == 1:
                out[key] = probe
                break
    return out


def _truth(tree: Node, pages: list[int]) -> list[TruthHeading]:
    """Truth headings of ``tree`` in pre-order, given each heading's page in the same order."""
    prints = _fingerprints(tree)
    nodes = list(tree.walk())
    if len(nodes) != len(pages):
        raise RuntimeError(f"{len(nodes)} headings in the tree but {len(pages)} pages found for them")
    return [
        TruthHeading(node.title, level, node.kind, page, chapter, prints.get(id(node), ""))
        for (node, level, chapter), page in zip(nodes, pages, strict=True)
    ]


# -- engines -----------------------------------------------------------------------------------------


class EngineMissing(RuntimeError):
    """A layout's typesetter is not installed: the benchmark skips that layout with this note."""


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _runs_html(runs: list[Run]) -> str:
    out = []
    for r in runs:
        t = _esc(r.text)
        if r.italic:
            t = f"<i>{t}</i>"
        if r.bold:
            t = f"<b>{t}</b>"
        out.append(t)
    return "".join(out)


def _element_html(el: Element) -> str:
    if el.kind == "table":
        head = "".join(f"<th>{_esc(c)}</th>" for c in el.header)
        body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in el.rows)
        caption = f'<p class="caption">{_esc(el.caption)}</p>' if el.caption else ""
        return f"{caption}<table>{'<tr>' + head + '</tr>' if head else ''}{body}</table>"
    if el.kind == "field":
        return f'<p class="field"><b>{_esc(el.label)}</b>{_runs_html(el.runs)}</p>'
    if el.kind == "li":
        return f'<p class="li">• {_runs_html(el.runs)}</p>'
    cls = ' class="subtitle"' if el.kind == "subtitle" else ""
    return f"<p{cls}>{_runs_html(el.runs)}</p>"


WEASY_CSS = """
@page { size: letter; margin: 0.75in 0.6in 0.7in 0.6in; }
@page :left {
  @top-left { content: string(booktitle); font: 8pt "DejaVu Sans"; color: #444; }
  @bottom-left { content: counter(page); font: 8pt "DejaVu Sans"; }
}
@page :right {
  @top-right { content: string(chapter); font: 8pt "DejaVu Sans"; color: #444; }
  @bottom-right { content: counter(page); font: 8pt "DejaVu Sans"; }
}
@page cover { @top-left { content: none; } @top-right { content: none; }
              @bottom-left { content: none; } @bottom-right { content: none; } }
body { font: 9pt/1.25 "DejaVu Serif"; }
.cover { page: cover; }
h1.book { font: bold 28pt "DejaVu Sans"; margin-top: 3in; string-set: booktitle content(); bookmark-level: none; }
h1.chapter { font: bold 20pt "DejaVu Sans"; break-before: right; string-set: chapter content();
             bookmark-level: 1; margin: 0 0 10pt 0; border-bottom: 1.5pt solid #822; }
h2 { font: bold 13pt "DejaVu Sans"; color: #822; bookmark-level: none; margin: 10pt 0 4pt 0;
     break-after: avoid; }
h3 { font: bold 10pt "DejaVu Sans"; bookmark-level: none; margin: 8pt 0 1pt 0; break-after: avoid; }
h4 { font: bold italic 9pt "DejaVu Serif"; bookmark-level: none; margin: 5pt 0 1pt 0; break-after: avoid; }
h5 { font: italic 9pt "DejaVu Serif"; bookmark-level: none; margin: 4pt 0 1pt 0; break-after: avoid; }
.cols { columns: 2; column-gap: 16pt; }
p { margin: 0 0 3pt 0; text-align: justify; hyphens: auto; }
p.subtitle { font-style: italic; }
p.field { margin: 0; text-align: left; }
p.caption { font: bold 8pt "DejaVu Sans"; margin-top: 4pt; }
table { border-collapse: collapse; margin: 2pt 0 5pt 0; font-size: 8pt; }
td, th { padding: 1pt 3pt; border-bottom: 0.5pt solid #999; text-align: left; }
"""


def _weasyprint_book(tree: Node, path: Path, css: str, *, columns: bool = True) -> tuple[list[int], int]:
    """``tree`` as HTML set by WeasyPrint in the house style ``css``, written to ``path``: each heading's
    page (in ``tree.walk`` order) and the page count.

    With ``columns`` each chapter's body is one ``div.cols`` (the stylesheet sets its columns); without,
    the chapter's first paragraph is ``p.intro`` (the drop cap of the capitals book).
    """
    import weasyprint

    parts: list[str] = []
    n = 0
    for node, level, _ in tree.walk():
        hid = f"h{n}"
        n += 1
        if level == 0:
            parts.append(f'<div class="cover"><h1 class="book" id="{hid}">{_esc(node.title)}</h1>')
            parts += [_element_html(el) for el in node.body]
            parts.append("</div>")
            continue
        if level == 1 and columns:
            if n > 2:
                parts.append("</div>")
            parts.append(f'<h1 class="chapter" id="{hid}">{_esc(node.title)}</h1><div class="cols">')
        elif level == 1:
            parts.append(f'<h1 class="chapter" id="{hid}">{_esc(node.title)}</h1>')
            body = [_element_html(el) for el in node.body]
            if body and body[0].startswith("<p>"):
                body[0] = '<p class="intro">' + body[0][3:]
            parts += body
            continue
        else:
            tag = f"h{min(level, 5)}"
            parts.append(f'<{tag} id="{hid}">{_esc(node.title)}</{tag}>')
        parts += [_element_html(el) for el in node.body]
    if columns:
        parts.append("</div>")
    doc = weasyprint.HTML(string=f"<html><body>{''.join(parts)}</body></html>").render(
        stylesheets=[weasyprint.CSS(string=css)]
    )
    pages: dict[str, int] = {}
    for number, page in enumerate(doc.pages, 1):
        for anchor in page.anchors:
            pages.setdefault(anchor, number)
    doc.write_pdf(path)
    return [pages[f"h{k}"] for k in range(n)], len(doc.pages)


def _weasyprint(tree: Node, path: Path) -> tuple[list[int], int]:
    return _weasyprint_book(tree, path, WEASY_CSS)


def _libreoffice(tree: Node, path: Path) -> tuple[list[int], int]:
    import docx
    from docx.enum.section import WD_SECTION
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    from docx.shared import Pt

    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        raise EngineMissing("LibreOffice is not installed (apt-get install libreoffice-writer)")
    d = docx.Document()
    styles = d.styles
    styles["Normal"].font.name = "Liberation Serif"
    styles["Normal"].font.size = Pt(10)
    for level, size in ((1, 18), (2, 14), (3, 11), (4, 10), (5, 10)):
        st = styles[f"Heading {level}"]
        st.font.name = "Liberation Sans"
        st.font.size = Pt(size)
        st.font.bold = level < 5
        st.font.italic = level >= 4
        st.font.color.rgb = None
    styles["Title"].font.name = "Liberation Sans"

    def add_runs(par: Any, runs: list[Run]) -> None:
        for r in runs:
            run = par.add_run(r.text)
            run.bold = r.bold or None
            run.italic = r.italic or None

    def page_field(par: Any) -> None:
        fld = OxmlElement("w:fldSimple")
        fld.set(qn("w:instr"), "PAGE")
        run = OxmlElement("w:r")
        text = OxmlElement("w:t")
        text.text = "1"
        run.append(text)
        fld.append(run)
        par._p.append(fld)

    def body(els: list[Element]) -> None:
        for el in els:
            if el.kind == "table":
                if el.caption:
                    d.add_paragraph(el.caption, style="Caption")
                ncols = max(len(el.header), *(len(r) for r in el.rows)) if el.rows else len(el.header)
                table = d.add_table(rows=0, cols=ncols)
                table.style = "Table Grid"
                for row in ([el.header] if el.header else []) + el.rows:
                    cells = table.add_row().cells
                    for k, value in enumerate(row[:ncols]):
                        cells[k].text = value
            elif el.kind == "field":
                par = d.add_paragraph()
                par.add_run(el.label).bold = True
                add_runs(par, el.runs)
            elif el.kind == "li":
                add_runs(d.add_paragraph(style="List Bullet"), el.runs)
            else:
                par = d.add_paragraph()
                add_runs(par, el.runs)
                if el.kind == "subtitle":
                    for run in par.runs:
                        run.italic = True

    for node, level, _ in tree.walk():
        if level == 0:
            d.add_paragraph(node.title, style="Title")
            body(node.body)
            d.sections[0].different_first_page_header_footer = True
            continue
        if level == 1:
            # each chapter its own section: its header names it
            section = d.add_section(WD_SECTION.NEW_PAGE)
            section.header.is_linked_to_previous = False
            section.footer.is_linked_to_previous = False
            section.different_first_page_header_footer = False
            section.header.paragraphs[0].text = f"{tree.title} · {node.title}"
            foot = section.footer.paragraphs[0]
            foot.text = "Page "
            page_field(foot)
        d.add_heading(node.title, level=min(level, 5))
        body(node.body)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / (path.stem + ".docx")
        d.save(str(source))
        profile = Path(tmp) / "profile"
        subprocess.run(
            [
                soffice,
                f"-env:UserInstallation=file://{profile}",
                "--headless",
                "--convert-to",
                "pdf",
                "--outdir",
                tmp,
                str(source),
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
        shutil.move(Path(tmp) / (path.stem + ".pdf"), path)
    import pymupdf

    with pymupdf.open(path) as pdf:
        toc = pdf.get_toc(simple=True)
        count = pdf.page_count
    # LibreOffice bookmarks every heading in order: they give the pages (the title page is page 1).
    pages = [1] + [page for _, _, page in toc]
    titles = [normalise(t) for _, t, _ in toc]
    expected = [normalise(node.title) for node, level, _ in tree.walk() if level > 0]
    if titles != expected:
        raise RuntimeError("LibreOffice's outline does not list the tree's headings in order")
    return pages, count


def _reportlab(tree: Node, path: Path) -> tuple[list[int], int]:
    from reportlab.lib.enums import TA_JUSTIFY
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.platypus import BaseDocTemplate, Frame, PageBreak, PageTemplate, Paragraph, Spacer, Table, TableStyle

    body_style = ParagraphStyle(
        "body", fontName="Times-Roman", fontSize=10, leading=12.5, alignment=TA_JUSTIFY, spaceAfter=4
    )
    field_style = ParagraphStyle("field", parent=body_style, alignment=0, spaceAfter=0)
    item_style = ParagraphStyle("li", parent=body_style, leftIndent=10, bulletIndent=2)
    caption_style = ParagraphStyle("caption", fontName="Helvetica-Bold", fontSize=8.5, leading=10, spaceBefore=4)
    heads = {
        0: ParagraphStyle("h0", fontName="Helvetica-Bold", fontSize=30, leading=36, spaceBefore=200),
        1: ParagraphStyle("h1", fontName="Helvetica-Bold", fontSize=18, leading=22, spaceAfter=10),
        2: ParagraphStyle("h2", fontName="Times-Bold", fontSize=13, leading=16, spaceBefore=10, spaceAfter=4),
        3: ParagraphStyle("h3", fontName="Helvetica-Bold", fontSize=10.5, leading=13, spaceBefore=7, spaceAfter=1),
        4: ParagraphStyle("h4", fontName="Times-BoldItalic", fontSize=10, leading=12.5, spaceBefore=5),
        5: ParagraphStyle("h5", fontName="Times-Italic", fontSize=10, leading=12.5, spaceBefore=4),
    }

    def markup(runs: list[Run]) -> str:
        out = []
        for r in runs:
            t = _esc(r.text)
            if r.italic:
                t = f"<i>{t}</i>"
            if r.bold:
                t = f"<b>{t}</b>"
            out.append(t)
        return "".join(out)

    found: list[int] = []

    class Doc(BaseDocTemplate):
        chapter = ""

        def afterFlowable(self, flowable: Any) -> None:  # noqa: N802 - ReportLab's hook name
            index = getattr(flowable, "truth_index", None)
            if index is not None:
                found.append(self.page)
                if getattr(flowable, "chapter", None):
                    self.chapter = flowable.chapter

    def furniture(canvas: Any, doc: Any) -> None:
        if doc.page == 1:
            return
        canvas.saveState()
        canvas.setFont("Helvetica", 8)
        canvas.drawString(54, 756, tree.title.upper())
        canvas.drawRightString(558, 756, doc.chapter)
        canvas.setLineWidth(0.4)
        canvas.line(54, 752, 558, 752)
        canvas.drawCentredString(306, 36, str(doc.page))
        canvas.restoreState()

    doc = Doc(str(path), pagesize=letter, title=tree.title)
    frame = Frame(54, 54, 504, 690, id="body")
    doc.addPageTemplates([PageTemplate(id="page", frames=[frame], onPageEnd=furniture)])
    story: list[Any] = []
    for index, (node, level, _) in enumerate(tree.walk()):
        if level == 1 and index > 0:
            story.append(PageBreak())
        head = Paragraph(_esc(node.title), heads[min(level, 5)])
        head.truth_index = index
        head.chapter = node.title if level == 1 else None
        story.append(head)
        for el in node.body:
            if el.kind == "table":
                if el.caption:
                    story.append(Paragraph(_esc(el.caption), caption_style))
                rows = ([el.header] if el.header else []) + el.rows
                width = max(len(r) for r in rows)
                rows = [[Paragraph(_esc(c), field_style) for c in r] + [""] * (width - len(r)) for r in rows]
                table = Table(rows, colWidths=[504 / width] * width, hAlign="LEFT")
                table.setStyle(
                    TableStyle([("LINEBELOW", (0, 0), (-1, -1), 0.3, "#999999"), ("VALIGN", (0, 0), (-1, -1), "TOP")])
                )
                story += [table, Spacer(1, 4)]
            elif el.kind == "field":
                story.append(Paragraph(f"<b>{_esc(el.label)}</b>{markup(el.runs)}", field_style))
            elif el.kind == "li":
                story.append(Paragraph(markup(el.runs), item_style, bulletText="•"))
            elif el.kind == "subtitle":
                story.append(Paragraph(f"<i>{markup(el.runs)}</i>", field_style))
            else:
                story.append(Paragraph(markup(el.runs), body_style))
    doc.build(story)
    return found, doc.page


STORY_CSS = """
body { font-family: sans-serif; font-size: 8.5pt; }
h1 { font-size: 16pt; font-weight: bold; margin-top: 14pt; }
h1.book { font-size: 26pt; }
h2 { font-size: 11.5pt; font-weight: bold; margin-top: 9pt; }
h3 { font-size: 9.5pt; font-weight: bold; font-family: serif; margin-top: 6pt; margin-bottom: 0; }
h4 { font-size: 8.5pt; font-weight: bold; font-style: italic; margin-bottom: 0; }
h5 { font-size: 8.5pt; font-style: italic; margin-bottom: 0; }
p { margin-top: 0; margin-bottom: 3pt; }
p.field { margin-bottom: 0; }
p.caption { font-weight: bold; font-size: 7.5pt; }
table { border-collapse: collapse; }
td, th { font-size: 7.5pt; border: 0.5px solid gray; padding: 1px; }
"""


def _story(tree: Node, path: Path) -> tuple[list[int], int]:
    import pymupdf

    parts: list[str] = []
    outline_nodes: list[tuple[int, str, str]] = []
    for n, (node, level, _) in enumerate(tree.walk()):
        tag = "h1" if level <= 1 else f"h{min(level, 5)}"
        cls = ' class="book"' if level == 0 else ""
        parts.append(f'<{tag} id="h{n}"{cls}>{_esc(node.title)}</{tag}>')
        parts += [_element_html(el) for el in node.body]
        if level in (1, 2):
            outline_nodes.append((level, node.title, f"h{n}"))
    body = "".join(parts)
    mediabox = pymupdf.paper_rect("a4")
    columns = [pymupdf.Rect(40, 50, 290, 790), pymupdf.Rect(305, 50, 555, 790)]
    positions: dict[str, int] = {}

    def record(pos: Any) -> None:
        if pos.id and pos.id.startswith("h") and pos.open_close & 1:
            positions.setdefault(pos.id, pos.page)

    story = pymupdf.Story(html=body, user_css=STORY_CSS)
    tmp = path.with_suffix(".raw.pdf")
    writer = pymupdf.DocumentWriter(str(tmp))
    pages = 0
    more = True
    while more:
        device = writer.begin_page(mediabox)
        pages += 1
        for rect in columns:
            more, _ = story.place(rect)
            story.element_positions(record, {"page": pages})
            story.draw(device)
            if not more:
                break
        writer.end_page()
    writer.close()
    total = len(list(tree.walk()))
    found = [positions[f"h{k}"] for k in range(total)]
    chapter_starts = [(found[k], node.title) for k, (node, level, _) in enumerate(tree.walk()) if level == 1]
    with pymupdf.open(tmp) as pdf:
        for page in pdf:
            number = page.number + 1
            # as CSS's string(chapter): the first chapter opened on the page, else the one running
            here = [title for start, title in chapter_starts if start == number]
            before = [title for start, title in chapter_starts if start < number]
            current = here[:1] or before[-1:]
            if not current:
                continue
            text = f"{tree.title} | {current[0]}"
            page.insert_text((40, 815), text, fontname="helv", fontsize=7)
            page.insert_text((545, 815), str(number), fontname="helv", fontsize=7)
        pdf.set_toc([[lvl, title, positions[hid]] for lvl, title, hid in outline_nodes])
        pdf.save(path, garbage=3, deflate=True)
    tmp.unlink()
    return found, pages


# -- WeasyPrint, three columns -------------------------------------------------------------------------

# Three columns on mirrored pages; no bold anywhere: entry headings in small caps at the body size,
# set apart by colour and space alone; emphasis (run-in labels, bold runs) by colour; section heads
# in italic; the chapter's name with the page number at the outer foot; a dictionary-style running
# head naming the first and last entry of the page; no outline at all.
WEASY_3COL_CSS = """
@page { size: letter; margin: 0.7in 0.45in 0.7in 0.45in; }
@page :left { margin-left: 0.4in; margin-right: 0.65in;
  @top-left { content: string(entry, first) " \u2013 " string(entry, last); font: 7.5pt "DejaVu Sans"; }
  @bottom-left { content: counter(page) "   " string(chapter); font: 7.5pt "DejaVu Sans"; } }
@page :right { margin-left: 0.65in; margin-right: 0.4in;
  @top-right { content: string(entry, first) " \u2013 " string(entry, last); font: 7.5pt "DejaVu Sans"; }
  @bottom-right { content: string(chapter) "   " counter(page); font: 7.5pt "DejaVu Sans"; } }
@page cover { @top-left { content: none; } @top-right { content: none; }
              @bottom-left { content: none; } @bottom-right { content: none; } }
html { bookmark-level: none; }
h1, h2, h3, h4, h5 { bookmark-level: none; font-weight: normal; }
body { font: 8.5pt/1.22 "DejaVu Serif"; }
b { font-weight: normal; color: #7a1f1f; }
.cover { page: cover; }
h1.book { font: 26pt "DejaVu Serif"; margin-top: 3in; }
h1.chapter { font: 17pt "DejaVu Serif"; color: #1f3a7a; break-before: page; string-set: chapter content();
             margin: 0 0 8pt 0; }
h2 { font: italic 11pt "DejaVu Serif"; color: #1f3a7a; margin: 9pt 0 3pt 0; break-after: avoid; }
h3 { font: 8.5pt "DejaVu Serif"; font-variant: small-caps; color: #7a1f1f; margin: 7pt 0 1pt 0;
     break-after: avoid; string-set: entry content(); }
h4, h5 { font: italic 8.5pt "DejaVu Serif"; color: #7a1f1f; margin: 5pt 0 1pt 0; break-after: avoid; }
.cols { columns: 3; column-gap: 11pt; }
p { margin: 0 0 2.5pt 0; text-align: justify; hyphens: auto; }
p.field { margin: 0; text-align: left; }
p.caption { font: italic 7.5pt "DejaVu Sans"; margin-top: 4pt; }
table { border-collapse: collapse; margin: 2pt 0 5pt 0; font-size: 7pt; }
td, th { padding: 0.5pt 2pt; border-bottom: 0.4pt solid #999; text-align: left; font-weight: normal; }
"""


def _weasyprint_3col(tree: Node, path: Path) -> tuple[list[int], int]:
    return _weasyprint_book(tree, path, WEASY_3COL_CSS)


# One column of serif (Charter where WeasyPrint finds it, else DejaVu); entry headings in capitals
# at the body size, neither bold nor coloured, set apart only by capitals and the space above;
# sections in bold italic; a drop cap opens each chapter; the chapter's name in capitals as the
# running head on every page; no outline.
WEASY_CAPS_CSS = """
@page { size: A4; margin: 0.9in 0.9in 0.8in 0.9in;
  @top-center { content: string(chapter); font: 7.5pt "Bitstream Charter"; letter-spacing: 1pt;
                text-transform: uppercase; }
  @bottom-center { content: "\u2014 " counter(page) " \u2014"; font: 8pt "Bitstream Charter"; } }
@page cover { @top-center { content: none; } @bottom-center { content: none; } }
html { bookmark-level: none; }
h1, h2, h3, h4, h5 { bookmark-level: none; }
body { font: 10pt/1.3 "Bitstream Charter"; }
.cover { page: cover; }
h1.book { font: bold 26pt "Bitstream Charter"; margin-top: 3in; }
h1.chapter { font: 20pt "Bitstream Charter"; break-before: page; string-set: chapter content(); margin: 0 0 14pt 0; }
h2 { font: bold italic 12pt "Bitstream Charter"; margin: 12pt 0 4pt 0; break-after: avoid; }
h3 { font: 10pt "Bitstream Charter"; text-transform: uppercase; margin: 10pt 0 2pt 0; break-after: avoid; }
h4, h5 { font: bold italic 10pt "Bitstream Charter"; margin: 6pt 0 1pt 0; break-after: avoid; }
p { margin: 0 0 4pt 0; text-align: justify; hyphens: auto; }
p.intro::first-letter { float: left; font-size: 34pt; line-height: 30pt; margin: 2pt 3pt 0 0; }
p.field { margin: 0; text-align: left; }
p.caption { font: italic 9pt "Bitstream Charter"; margin-top: 5pt; }
table { border-collapse: collapse; margin: 2pt 0 6pt 0; font-size: 8.5pt; }
td, th { padding: 1pt 4pt; border-bottom: 0.4pt solid #888; text-align: left; }
"""


def _weasyprint_caps(tree: Node, path: Path) -> tuple[list[int], int]:
    return _weasyprint_book(tree, path, WEASY_CAPS_CSS, columns=False)


def _dictionary_heads(tree: Node, headings: list[TruthHeading]) -> list[str]:
    """What the 3-column book prints in its margins: "first – last" entry of each page, and chapters.

    As CSS's ``string(entry, first)`` / ``string(entry, last)``: the first and last entry heading
    set on the page, else the entry running from an earlier page.
    """
    entries = [(h.page, h.text) for h in headings if h.level == 3]
    last_page = max((h.page for h in headings), default=1)
    out = [c.title for c in tree.children]
    running = ""
    for page in range(1, last_page + 1):
        here = [text for p, text in entries if p == page]
        first = here[0] if here else running
        if here:
            running = here[-1]
        if first or running:
            out.append(f"{first} \u2013 {running}")
    return list(dict.fromkeys(out))


# -- ReportLab, numbered and never bold ------------------------------------------------------------------


def _numbers(tree: Node) -> dict[int, str]:
    """Each heading's section number by its place in the tree ("2", "2.3", "2.3.1"), by ``id``."""
    out: dict[int, str] = {}

    def walk(node: Node, prefix: str) -> None:
        for k, child in enumerate(node.children, 1):
            number = f"{prefix}.{k}" if prefix else str(k)
            out[id(child)] = number
            walk(child, number)

    walk(tree, "")
    return out


def _reportlab_numbered(tree: Node, path: Path) -> tuple[list[int], int]:
    """Two columns of Helvetica; every heading numbered ("2.3.1 Bless") and none bold: chapters and
    sections by size, entries and their sub-headings at the body size set apart only by their
    number and the space above them; run-in labels in italic; no outline."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.platypus import BaseDocTemplate, Frame, PageTemplate, Paragraph, Spacer, Table, TableStyle

    body_style = ParagraphStyle("body", fontName="Helvetica", fontSize=8.5, leading=10.5, spaceAfter=3)
    field_style = ParagraphStyle("field", parent=body_style, spaceAfter=0)
    item_style = ParagraphStyle("li", parent=body_style, leftIndent=9, bulletIndent=1)
    caption_style = ParagraphStyle("caption", parent=body_style, fontName="Helvetica-Oblique", spaceBefore=3)
    heads = {
        0: ParagraphStyle("h0", fontName="Helvetica", fontSize=24, leading=30, spaceBefore=150, spaceAfter=12),
        1: ParagraphStyle("h1", fontName="Helvetica", fontSize=15, leading=19, spaceBefore=16, spaceAfter=8),
        2: ParagraphStyle("h2", fontName="Helvetica", fontSize=11, leading=14, spaceBefore=11, spaceAfter=4),
        3: ParagraphStyle("h3", fontName="Helvetica", fontSize=8.5, leading=10.5, spaceBefore=9, spaceAfter=2),
        4: ParagraphStyle("h4", fontName="Helvetica", fontSize=8.5, leading=10.5, spaceBefore=6, spaceAfter=1),
        5: ParagraphStyle("h5", fontName="Helvetica", fontSize=8.5, leading=10.5, spaceBefore=6, spaceAfter=1),
    }

    def markup(runs: list[Run]) -> str:
        # never bold: what the source sets bold is set in italics
        return "".join(f"<i>{_esc(r.text)}</i>" if r.bold or r.italic else _esc(r.text) for r in runs)

    found: list[int] = []

    class Doc(BaseDocTemplate):
        def afterFlowable(self, flowable: Any) -> None:  # noqa: N802 - ReportLab's hook name
            if getattr(flowable, "truth_index", None) is not None:
                found.append(self.page)

    def furniture(canvas: Any, doc: Any) -> None:
        if doc.page == 1:
            return
        canvas.saveState()
        canvas.setFont("Helvetica", 7)
        canvas.drawCentredString(297.6, 812, tree.title)
        canvas.drawCentredString(297.6, 28, f"\u2013 {doc.page} \u2013")
        canvas.restoreState()

    doc = Doc(str(path), pagesize=A4, title=tree.title)
    frames = [Frame(42, 50, 250, 745, id="left"), Frame(303, 50, 250, 745, id="right")]
    doc.addPageTemplates([PageTemplate(id="page", frames=frames, onPageEnd=furniture)])
    numbers = _numbers(tree)
    story: list[Any] = []
    for index, (node, level, _) in enumerate(tree.walk()):
        title = _esc(node.title) if level == 0 else f"{numbers[id(node)]}\u2002{_esc(node.title)}"
        head = Paragraph(title, heads[min(level, 5)])
        head.truth_index = index
        story.append(head)
        for el in node.body:
            if el.kind == "table":
                if el.caption:
                    story.append(Paragraph(_esc(el.caption), caption_style))
                rows = ([el.header] if el.header else []) + el.rows
                width = max(len(r) for r in rows)
                rows = [[Paragraph(_esc(c), field_style) for c in r] + [""] * (width - len(r)) for r in rows]
                table = Table(rows, colWidths=[250 / width] * width, hAlign="LEFT")
                table.setStyle(
                    TableStyle([("LINEBELOW", (0, 0), (-1, -1), 0.3, "#999999"), ("VALIGN", (0, 0), (-1, -1), "TOP")])
                )
                story += [table, Spacer(1, 3)]
            elif el.kind == "field":
                story.append(Paragraph(f"<i>{_esc(el.label)}</i>{markup(el.runs)}", field_style))
            elif el.kind == "li":
                story.append(Paragraph(markup(el.runs), item_style, bulletText="\u2013"))
            elif el.kind == "subtitle":
                story.append(Paragraph(f"<i>{markup(el.runs)}</i>", field_style))
            else:
                story.append(Paragraph(markup(el.runs), body_style))
    doc.build(story)
    return found, doc.page


# -- pandoc → LaTeX ------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#+!|$~^&%])")


def _md(text: str) -> str:
    """Text escaped for pandoc's Markdown (no emphasis, links, maths or raw TeX by accident)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _md_runs(runs: list[Run]) -> str:
    out = []
    for r in runs:
        text = _md(r.text)
        if not text:
            out.append(" " if r.text.strip() == "" and r.text else "")
            continue
        lead = " " if r.text[:1].isspace() else ""
        tail = " " if r.text[-1:].isspace() else ""
        if r.bold and r.italic:
            text = f"***{text}***"
        elif r.bold:
            text = f"**{text}**"
        elif r.italic:
            text = f"*{text}*"
        out.append(f"{lead}{text}{tail}")
    return "".join(out).strip()


def _md_body(els: list[Element]) -> list[str]:
    """Body elements as Markdown blocks; consecutive run-in fields stay one block (hard breaks)."""
    blocks: list[str] = []
    fields: list[str] = []
    for el in els:
        if el.kind == "field":
            fields.append(f"**{_md(el.label)}** {_md_runs(el.runs)}")
            continue
        if fields:
            blocks.append("\\\n".join(fields))
            fields = []
        if el.kind == "table":
            if el.caption:
                blocks.append(f"**{_md(el.caption)}**")
            width = max([len(el.header), *(len(r) for r in el.rows)])
            head = (el.header + [""] * width)[:width]
            lines = ["| " + " | ".join(_md(c) for c in head) + " |", "|" + "---|" * width]
            lines += ["| " + " | ".join(_md(c) for c in (row + [""] * width)[:width]) + " |" for row in el.rows]
            blocks.append("\n".join(lines))
        elif el.kind == "li":
            blocks.append(f"- {_md_runs(el.runs)}")
        elif el.kind == "subtitle":
            blocks.append(f"*{_md(''.join(r.text for r in el.runs))}*")
        else:
            blocks.append(_md_runs(el.runs))
    if fields:
        blocks.append("\\\n".join(fields))
    return [b for b in blocks if b.strip()]


# Computer Modern (Latin Modern), numbered sections, fancyhdr running heads that name the current
# section with its number (left: "1 Spells", right: "1.2 1st-Level Spells"), page number centred.
LATEX_HEADER = r"""
\usepackage{lmodern}
\usepackage{fancyhdr}
\pagestyle{fancy}
\fancyhf{}
\renewcommand{\sectionmark}[1]{\markboth{\thesection\ #1}{}}
\renewcommand{\subsectionmark}[1]{\markright{\thesubsection\ #1}}
\fancyhead[L]{\small\slshape\leftmark}
\fancyhead[R]{\small\slshape\rightmark}
\fancyfoot[C]{\thepage}
\renewcommand{\headrulewidth}{0.4pt}
\usepackage{longtable}
\setlength{\LTleft}{0pt}
\DeclareUnicodeCharacter{215B}{\ensuremath{\tfrac{1}{8}}}
\DeclareUnicodeCharacter{2010}{-}
\DeclareUnicodeCharacter{02BC}{'}
\DeclareUnicodeCharacter{2212}{\ensuremath{-}}
"""


def _pandoc_latex(tree: Node, path: Path) -> tuple[list[int], int]:
    """Markdown → pandoc → pdflatex: article class, numbered headings, sub-headings as LaTeX's run-in
    ``\paragraph`` (the text goes on after the title on its line), hyperref outline of every level."""
    pandoc = shutil.which("pandoc")
    if pandoc is None or shutil.which("pdflatex") is None:
        raise EngineMissing(
            "pandoc and pdflatex are not installed (apt-get install pandoc texlive-latex-recommended "
            "texlive-fonts-recommended lmodern)"
        )
    parts: list[str] = []
    for node, level, _ in tree.walk():
        if level == 0:
            parts += _md_body(node.body)
            continue
        hashes = "#" * min(level, 5)
        parts.append(f"{hashes} {_md(node.title)}")
        parts += _md_body(node.body)
    meta = f"---\ntitle: {json.dumps(tree.title)}\n---\n\n"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "book.md"
        source.write_text(meta + "\n\n".join(parts) + "\n")
        header = Path(tmp) / "header.tex"
        header.write_text(LATEX_HEADER)
        done = subprocess.run(
            [
                pandoc,
                str(source),
                "-f",
                "markdown-smart-implicit_figures-auto_identifiers",
                "-o",
                str(path),
                "--pdf-engine=pdflatex",
                "--number-sections",
                "-H",
                str(header),
                "-V",
                "documentclass=article",
                "-V",
                "papersize=a4",
                "-V",
                "fontsize=10pt",
                "-V",
                "geometry:margin=2.2cm",
                "-V",
                "hyperrefoptions=bookmarksdepth=5",
                "-V",
                "subparagraph=yes",  # LaTeX's own run-in \paragraph (pandoc makes it stand alone)
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp,
        )
        if done.returncode:
            raise RuntimeError(f"pandoc failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
    import pymupdf

    with pymupdf.open(path) as pdf:
        toc = pdf.get_toc(simple=True)
        count = pdf.page_count
    # hyperref bookmarks every heading in order: they give the pages (the title is on page 1).
    pages = [1] + [page for _, _, page in toc]
    titles = [squash(t) for _, t, _ in toc]
    expected = [squash(node.title) for node, level, _ in tree.walk() if level > 0]
    if titles != expected:
        raise RuntimeError("the LaTeX outline does not list the tree's headings in order")
    return pages, count


def _latex_furniture(tree: Node, _: list[TruthHeading]) -> list[str]:
    """The running heads fancyhdr prints: each chapter and section with its number."""
    out: list[str] = []
    for i, chapter in enumerate(tree.children, 1):
        out.append(f"{i} {chapter.title}")
        out += [f"{i}.{j} {section.title}" for j, section in enumerate(chapter.children, 1)]
    return out


@dataclass(frozen=True, slots=True)
class Layout:
    """One engine and house style, and the book it sets by default."""

    name: str
    engine: str
    outline: str
    render: Callable[[Node, Path], tuple[list[int], int]]
    tree: Callable[[float], Node]
    tiny: Callable[[], Node]
    furniture: Callable[[Node, list[TruthHeading]], list[str]]
    page_number_formats: tuple[str, ...]


def _chapters(tree: Node) -> list[str]:
    return [c.title for c in tree.children]


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in [
        Layout(
            "weasyprint-2col",
            "WeasyPrint",
            "chapters",
            _weasyprint,
            lambda s: srd_tree(("Spells", "Monsters", "Conditions"), scale=s),
            lambda: srd_tree(("Spells", "Conditions"), scale=0.01, max_sections=2),
            lambda t, _: [t.title, *_chapters(t)],
            ("{n}",),
        ),
        Layout(
            "libreoffice-docx",
            "LibreOffice (python-docx)",
            "all",
            _libreoffice,
            lambda s: srd_tree(("Magic Items", "Rules"), scale=s, title="SRD 5.1: Treasure and Rules"),
            lambda: srd_tree(("Magic Items", "Rules"), scale=0.01, max_sections=2, title="SRD 5.1: Treasure and Rules"),
            lambda t, _: [f"{t.title} · {c}" for c in _chapters(t)],
            ("Page {n}",),
        ),
        Layout(
            "reportlab-times",
            "ReportLab",
            "none",
            _reportlab,
            lambda s: fate_tree(scale=min(1.0, s * 4)),
            lambda: fate_tree(scale=0.2, max_sections=2),
            lambda t, _: [t.title.upper(), *_chapters(t)],
            ("{n}",),
        ),
        Layout(
            "story-compact",
            "PyMuPDF Story",
            "chapters+sections",
            _story,
            lambda s: srd_tree(("Rules", "Spells", "Monsters", "Magic Items"), scale=s / 2, title="SRD 5.1 Compendium"),
            lambda: srd_tree(("Rules", "Monsters", "Spells"), scale=0.01, max_sections=3, title="SRD 5.1 Compendium"),
            lambda t, _: [f"{t.title} | {c}" for c in _chapters(t)],
            ("{n}",),
        ),
        Layout(
            "pandoc-latex",
            "pandoc → pdflatex",
            "all",
            _pandoc_latex,
            lambda s: srd_tree(("Spells", "Conditions", "Rules"), scale=s / 2, title="SRD 5.1 in LaTeX"),
            lambda: srd_tree(("Spells", "Rules"), scale=0.01, max_sections=2, title="SRD 5.1 in LaTeX"),
            _latex_furniture,
            ("{n}",),
        ),
        Layout(
            "weasyprint-3col",
            "WeasyPrint",
            "none",
            _weasyprint_3col,
            lambda s: srd_tree(("Monsters", "Magic Items", "Conditions"), scale=s / 2, title="Bestiary and Treasury"),
            lambda: srd_tree(("Monsters", "Conditions"), scale=0.01, max_sections=2, title="Bestiary and Treasury"),
            _dictionary_heads,
            ("{n}",),
        ),
        Layout(
            "weasyprint-caps",
            "WeasyPrint",
            "none",
            _weasyprint_caps,
            lambda s: srd_tree(("Spells", "Magic Items"), scale=s / 3, title="Spells and Treasure"),
            lambda: srd_tree(("Spells", "Magic Items"), scale=0.01, max_sections=2, title="Spells and Treasure"),
            lambda t, _: [c.title.upper() for c in t.children],
            ("\u2014 {n} \u2014",),
        ),
        Layout(
            "reportlab-numbered",
            "ReportLab",
            "none",
            _reportlab_numbered,
            lambda s: srd_tree(("Rules", "Spells", "Conditions"), scale=s / 2, title="Numbered Rules Digest"),
            lambda: srd_tree(("Rules", "Spells"), scale=0.01, max_sections=2, title="Numbered Rules Digest"),
            lambda t, _: [t.title],
            ("\u2013 {n} \u2013",),
        ),
    ]
}


def typeset(layout: str, folder: Path, *, scale: float = 1.0, tiny: bool = False) -> TypesetBook:
    """Typeset one layout's book into ``folder`` and return it with its ground truth.

    Args:
        layout: a key of :data:`LAYOUTS`.
        folder: where the PDF goes (``<layout>.pdf``).
        scale: share of each section's entries to keep (1.0: the whole source).
        tiny: a book of a few pages (two sections of one entry or so per chapter), for tests.
    """
    spec = LAYOUTS[layout]
    tree = spec.tiny() if tiny else spec.tree(scale)
    path = Path(folder) / f"{layout}.pdf"
    start = time.perf_counter()
    pages, count = spec.render(tree, path)
    seconds = time.perf_counter() - start
    headings = _truth(tree, pages)
    return TypesetBook(
        layout=layout,
        engine=spec.engine,
        path=path,
        pages=count,
        outline=spec.outline,
        headings=headings,
        furniture=spec.furniture(tree, headings),
        page_number_formats=list(spec.page_number_formats),
        seconds=round(seconds, 2),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the PDFs and truth JSON")
    parser.add_argument("--scale", type=float, default=1.0, help="share of entries kept per section")
    parser.add_argument("--tiny", action="store_true", help="books of a few pages")
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.layouts:
        book = typeset(name, args.out, scale=args.scale, tiny=args.tiny)
        (args.out / f"{name}.truth.json").write_text(json.dumps(book.to_json(), indent=1))
        print(f"{name:20s} {book.pages:4d} pages  {len(book.headings):5d} headings  {book.seconds:7.1f} s  {book.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
