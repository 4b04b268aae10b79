"""The deterministic parser: one rulebook entry in, its fields out as typed source facts.

:func:`extract_facts` is a pure function of an :class:`~schemas.rulefacts.EntrySection` and the
family tables (:mod:`rulebook.tables`): the same section and tables always give the same facts, in
the same order. It

1. prepares the text (:func:`section_text`: NFKC, one minus sign, Markdown bold read as bold terms,
   list bullets dropped); where a kind's unlabelled line runs straight into the first label on one
   line ("Huge beast, unaligned Armor Class 12 …", a stat block set as one paragraph without bold),
   the space before the label is read as a line break; an entry's name is its heading without a
   leading section number ("2.3.1 Acid Arrow" states facts about "Acid Arrow");
2. finds each kind's labels: at the start of a line in any case; inside a line only as printed (or in
   capitals) and only where the field before it on that line has ended right there ("Armor Class 17
   (natural armor) Hit Points 135 (18d10+36) Speed 10 ft." set as one line) or where the label is set
   in bold — so a capitalised word in the prose is not taken for a label;
3. decides the kind (:func:`detect_kind`): each kind scores the cues it finds — its labels, its
   unlabelled lines ("3rd-level evocation"), its header rows ("STR DEX CON …"), a chapter in the
   heading path, the entry's name — and the best kind at or above its ``min_score`` wins; an entry no
   kind claims gets only the generic fields;
4. reads each field's value as its type, where the value ends where its grammar ends (PDFs run a
   value into the description: "Duration: Instantaneous You hurl…"); parentheticals, trailing words
   and keyed lists become their own predicates; then the kind's lines, rows, prose sentences and
   remaining paragraphs; then the generic "Label: value" lines and bold "Label." paragraphs.

Confidence: 0.97 for a label at a line start whose value is read to its end (0.99 when the label is
set in bold), 0.93 for a label found inside a line, times 0.92 when the description runs on after the
value and 0.78 when other words do; 0.95 for an unlabelled line, 0.93 for a row of scores (0.8 without
their modifiers), the table's ``confidence`` for prose sentences and ``generic_confidence`` for generic
fields; everything times 0.95 when the kind only just reached its ``min_score``. A field's own
``confidence`` caps it. The gate should weigh a fact by it; the benchmark scores every fact.

The text (:mod:`rulebook.entry_text`), reading one field's value (:mod:`rulebook.field_values`) and the
readers beside labelled fields (:mod:`rulebook.unlabelled`) are their own modules; deciding the kind and
the labelled fields of it live here.

Out of reach by design: a label printed on its own line with its value on the next (a key/value table
read row by row) and ability scores printed one per line with their save ("Str 17 +3 +3", the 2024
layout) are not read; a row of scores that extraction shuffled is refused rather than misread.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rulebook.entry_text import Lines, entry_name, label_key, line_spans, prepare_text, section_text
from rulebook.field_values import Fact, Read, read_field
from rulebook.tables import FamilyTable, FieldSpec, KindSpec
from rulebook.unlabelled import read_generic, read_lines, read_paragraphs, read_rows, read_sentences
from schemas.common import EntityKind
from schemas.rulefacts import (
    EntrySection,
    FactSubject,
    SourceFact,
    ValueType,
    clean_text,
    entry_key,
)

__all__ = ["GENERIC_KIND", "KindMatch", "detect_kind", "entry_name", "extract_facts", "section_text"]

GENERIC_KIND = "entry"
"""The subject kind of an entry no kind of the tables claims (its generic fields only)."""

_CONF_LINE_START = 0.97
_CONF_INLINE = 0.93


# ============================================================================================
# a kind's line run into the first label


def _split_run_on(text: str, tables: list[FamilyTable]) -> str:
    """Break a line where a kind's unlabelled line runs straight into the first label.

    A layout that sets a stat block as one paragraph without bold prints "Huge beast, unaligned Armor
    Class 12 …" or "5th-level evocation Casting Time: 24 hours …" on one line: the kind line is then
    no line of its own and the first label, inside a line after no field, would not be trusted. When
    the text before a line's first label (as printed) reads whole as one of the kinds' lines, the space
    before the label becomes a line break: the same length, so offsets into the text still hold.
    """
    out: list[str] | None = None
    line_start = 0
    window = max((k.line_window for t in tables for k in t.kinds.values()), default=0)
    seen = 0
    while seen < window and line_start < len(text):
        line_end = text.find("\n", line_start)
        line_end = len(text) if line_end < 0 else line_end
        line = text[line_start:line_end]
        if line.strip():
            seen += 1
            first = None
            for table in tables:
                scan = _label_scan(table)
                m = scan.inline_re.search(line) if scan.inline_re is not None else None
                if m is not None and (first is None or m.start("label") < first):
                    first = m.start("label")
            if first is not None:
                prefix = line[:first].strip()
                if prefix and any(
                    regex.search(prefix)
                    for table in tables
                    for kind in table.kinds.values()
                    for regex, _ in _compiled(kind).lines
                ):
                    out = out if out is not None else list(text)
                    out[line_start + first - 1] = "\n"
        line_start = line_end + 1
    return "".join(out) if out is not None else text


# ============================================================================================
# labels of a kind


@dataclass(slots=True)
class _Compiled:
    """A kind's lookups and regexes, built once (the table models are frozen, so they can be cached)."""

    kind: KindSpec
    names: frozenset[str]
    by_label: dict[str, FieldSpec]
    chapters: re.Pattern[str] | None  # the kind's chapter patterns as one alternation
    lines: list[tuple[re.Pattern[str], float]]
    rows: list[tuple[re.Pattern[str], list[str]]]


@dataclass(slots=True)
class _LabelScan:
    """One table's labels, all kinds together: two regexes find every label of a section in one pass."""

    line_re: re.Pattern[str] | None
    inline_re: re.Pattern[str] | None


@dataclass(slots=True)
class _Hit:
    start: int
    value_start: int
    label: str
    key: str
    line_start: bool


_COMPILED: dict[int, tuple[KindSpec, _Compiled]] = {}
_SCANS: dict[int, tuple[FamilyTable, _LabelScan]] = {}
_SEP = r"(?P<sep>[ \t]*:[ \t]*|\.[ \t]+|[ \t]+)(?=\S)"
#: A label that is its whole line, its value on the next (a key/value table set as two lines, a label set
#: above its value): at a line's start only, so a label word that merely ends a wrapped line is not one.
_SEP_LINE = r"(?P<sep>[ \t]*:[ \t]*|\.[ \t]+|[ \t]+|[ \t]*:?[ \t]*\n[ \t]*)(?=\S)"


def _compiled(kind: KindSpec) -> _Compiled:
    hit = _COMPILED.get(id(kind))
    if hit is not None and hit[0] is kind:
        return hit[1]
    by_label: dict[str, FieldSpec] = {}
    for spec in kind.labelled:
        for label in spec.labels:
            by_label.setdefault(label_key(label), spec)
    rows = [
        (re.compile(r"(?<![\w])" + r"[\s|]*".join(re.escape(h) for h in row.header) + r"(?![\w])", re.I), row.fields)
        for row in kind.rows
    ]
    names = frozenset(entry_key(n) for n in kind.names)
    lines = [(line.regex, line.cue) for line in kind.lines]
    chapters = re.compile("|".join(f"(?:{p.pattern})" for p in kind.chapter_patterns), re.I) if kind.chapters else None
    compiled = _Compiled(kind, names, by_label, chapters, lines, rows)
    _COMPILED[id(kind)] = (kind, compiled)
    return compiled


def _label_scan(table: FamilyTable) -> _LabelScan:
    hit = _SCANS.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    keys: set[str] = set()
    exact: set[str] = set()
    for kind in table.kinds.values():
        for spec in kind.labelled:
            for label in spec.labels:
                keys.add(label_key(label))
                clean = clean_text(label).strip()
                exact |= {clean, clean.upper()}
    line_re = inline_re = None
    if keys:
        alternatives = "|".join(re.escape(k).replace(r"\ ", r"[ \t]+") for k in sorted(keys, key=len, reverse=True))
        line_re = re.compile(rf"^[ \t]*(?P<label>{alternatives}){_SEP_LINE}", re.I | re.M)
        variants = "|".join(re.escape(v).replace(r"\ ", r"[ \t]+") for v in sorted(exact, key=len, reverse=True))
        inline_re = re.compile(rf"(?<=[ \t])(?P<label>{variants}){_SEP}")
    scan = _LabelScan(line_re, inline_re)
    _SCANS[id(table)] = (table, scan)
    return scan


def _hits(table: FamilyTable, text: str, lines: Lines) -> list[_Hit]:
    """Every label of the table's kinds in ``text``, longest first where two start together."""
    scan = _label_scan(table)
    found: dict[int, _Hit] = {}
    for regex, at_line_start in ((scan.line_re, True), (scan.inline_re, False)):
        if regex is None:
            continue
        for m in regex.finditer(text):
            label = m.group("label")
            key = label_key(label)
            start = m.start("label")
            line_start = at_line_start or not text[lines.starts[lines.index(start)] : start].strip()
            old = found.get(start)
            if old is None or len(old.key) < len(key):
                found[start] = _Hit(start, m.end(), label, key, line_start)
    return sorted(found.values(), key=lambda h: h.start)


@dataclass(slots=True)
class _Candidate:
    start: int
    value_start: int
    spec: FieldSpec
    label: str
    line_start: bool
    end: int = 0  # where its value's extent ends (the next label on its line, or the line's end)
    read: Read | None = None  # its value, read once (relative confidences), when scoring its kind


# ============================================================================================
# labelled fields of one kind


def _candidates(compiled: _Compiled, hits: list[_Hit]) -> list[_Candidate]:
    """The kind's labels among the section's label hits."""
    out: list[_Candidate] = []
    for hit in hits:
        spec = compiled.by_label.get(hit.key)
        if spec is None:
            continue
        if out and hit.start < out[-1].value_start:
            continue  # a shorter label inside a longer one found first is no label
        out.append(_Candidate(hit.start, hit.value_start, spec, hit.label, hit.line_start))
    return out


def _is_free(spec: FieldSpec) -> bool:
    """A field whose value has no grammar of its own: it runs to the end of its extent."""
    return spec.keyed is None and (
        spec.type is ValueType.TEXT or (spec.type is ValueType.LIST and spec.vocabulary is None)
    )


def _accept(cands: list[_Candidate], text: str, lines: Lines, bold: set[str]) -> list[_Candidate]:
    accepted: list[_Candidate] = []
    for cand in cands:
        if cand.line_start:
            accepted.append(cand)
            continue
        line_start = lines.starts[lines.index(cand.start)]
        prev = accepted[-1] if accepted and accepted[-1].start >= line_start else None
        if label_key(cand.label) in bold:
            accepted.append(cand)
            continue
        if prev is None:
            continue
        if not _is_free(prev.spec):
            read = read_field(prev.spec, text, prev.value_start, cand.start)
            if read is not None and not text[read.end : cand.start].strip(" \t,;.:"):
                accepted.append(cand)
                continue
        # after free text (a free field, or words trailing a value: "1 reaction, which you take when …")
        # only a value of the label's own type confirms it ("… Common Challenge 1/4", "… attack Range 30 feet")
        if not _is_free(cand.spec):
            own = read_field(cand.spec, text, cand.value_start, lines.end_of(cand.start))
            if own is not None:
                accepted.append(cand)
    for n, cand in enumerate(accepted):
        nxt = accepted[n + 1].start if n + 1 < len(accepted) else len(text)
        cand.end = min(_extent_end(text, lines, cand.value_start), nxt)
    return accepted


_OPEN_ENDED = re.compile(r"(?:[,;(]|\b(?:and|or|of|the|a|an|to|from|by|with))\s*$")


def _extent_end(text: str, lines: Lines, start: int, most: int = 3) -> int:
    """Where a value starting at ``start`` ends: its line's end, or a later line's when the value is
    visibly unfinished there (an open parenthesis, a trailing comma, "and") — PDFs wrap a value or
    split it between blocks: "M (a stone, a twig, and a bit of green" / "plant)"."""
    index = lines.index(start)
    end = lines.ends[index]
    for _ in range(most):
        value = text[start:end]
        if value.count("(") <= value.count(")") and not _OPEN_ENDED.search(value):
            break
        index += 1
        while index < len(lines.starts) and not text[lines.starts[index] : lines.ends[index]].strip():
            index += 1
        if index >= len(lines.starts):
            break
        end = lines.ends[index]
    return end


@dataclass(slots=True)
class _KindRead:
    table: FamilyTable
    name: str
    kind: KindSpec
    score: float
    cues: list[str]
    accepted: list[_Candidate] = field(default_factory=list)


@dataclass(slots=True)
class _Context:
    """What every kind's scoring of one section shares, computed once."""

    text: str
    lines: Lines
    bold: set[str]
    above: list[str]  # entry keys of the headings above the entry
    heading: str  # entry key of the entry's heading
    prose: list[int]  # starts of paragraphs whose first line is prose-long
    hits: dict[int, list[_Hit]] = field(default_factory=dict)  # by id of table
    windows: dict[int, list[str]] = field(default_factory=dict)  # first n non-empty lines, stripped

    def window(self, n: int) -> list[str]:
        if n not in self.windows:
            self.windows[n] = [self.text[a:b].strip() for a, b in line_spans(self.text, self.lines, n)]
        return self.windows[n]

    def hits_of(self, table: FamilyTable) -> list[_Hit]:
        if id(table) not in self.hits:
            self.hits[id(table)] = _hits(table, self.text, self.lines)
        return self.hits[id(table)]


def _score_kind(table: FamilyTable, name: str, kind: KindSpec, ctx: _Context, beat: float) -> _KindRead | None:
    """The kind's score on this entry, or None when it cannot reach its ``min_score`` or beat ``beat``.

    The cheap cues (lines, rows, chapters, names) and an upper bound from the labels found come first,
    so that only kinds still in the running pay for reading their labels' values. A label below the
    entry's first prose paragraph (a paragraph whose first line is long, unless it opens with one of
    the kind's labels) counts half: an item's description may list the stats of an object ("Armor
    Class: 20", "Hit Points: 200") without being a stat block.
    """
    compiled = _compiled(kind)
    text, lines = ctx.text, ctx.lines
    score = 0.0
    cues: list[str] = []
    if compiled.lines:
        window = ctx.window(kind.line_window)
        for n, (regex, cue) in enumerate(compiled.lines):
            if any(regex.search(line) for line in window):
                score += cue
                cues.append(f"line:{n}")
    for n, (regex, _) in enumerate(compiled.rows):
        if regex.search(text):
            score += kind.rows[n].cue
            cues.append(f"row:{n}")
    if compiled.chapters is not None and any(compiled.chapters.fullmatch(h) for h in ctx.above):
        score += kind.chapter_cue
        cues.append("chapter")
    if ctx.heading in compiled.names:
        score += kind.names_cue
        cues.append("name")
    candidates = _candidates(compiled, ctx.hits_of(table))
    bound = score + sum({c.spec.name: c.spec.cue for c in candidates}.values())
    if bound < kind.min_score or bound <= 0 or bound <= beat:
        return None
    accepted = _accept(candidates, text, lines, ctx.bold)
    opening = {lines.starts[lines.index(c.start)] for c in accepted if c.line_start}
    head_end = next((p for p in ctx.prose if p not in opening), len(text))
    seen: set[str] = set()
    for cand in accepted:
        if cand.spec.name in seen:
            continue
        cand.read = read_field(cand.spec, text, cand.value_start, cand.end)
        if cand.read is None:
            continue  # "Range of the spell…": a label whose value does not read is no cue
        seen.add(cand.spec.name)
        score += cand.spec.cue if cand.start < head_end else cand.spec.cue / 2
        cues.append(f"label:{cand.spec.name}")
    return _KindRead(table, name, kind, score, cues, accepted)


_PROSE_WORDS = 15


def _prose_starts(text: str) -> list[int]:
    """Starts of the paragraphs whose first line is long enough to be prose (or a run of fields)."""
    starts = []
    for m in re.finditer(r"[^\n]+(?:\n(?!\n)[^\n]+)*", text):
        first = m.group(0).split("\n", 1)[0]
        if len(first.split()) >= _PROSE_WORDS:
            starts.append(m.start())
    return starts


@dataclass(frozen=True, slots=True)
class KindMatch:
    """The kind an entry was read as: family, kind name, the score and the cues that made it."""

    family: str
    kind: str
    entity_kind: EntityKind
    score: float
    min_score: float
    cues: tuple[str, ...]


def _tables(tables: FamilyTable | Sequence[FamilyTable]) -> list[FamilyTable]:
    out = [tables] if isinstance(tables, FamilyTable) else list(tables)
    if not out:
        raise ValueError("extract_facts needs at least one family table (rulebook.builtin_table('generic'))")
    return out


def _best_kind(
    section: EntrySection, tables: list[FamilyTable], text: str, lines: Lines, bold: set[str]
) -> _KindRead | None:
    best: _KindRead | None = None
    above = [entry_key(entry_name(h)) for h in section.heading_path[:-1]]
    ctx = _Context(text, lines, bold, above, entry_key(entry_name(section.heading)), _prose_starts(text))
    for table in tables:
        for name, kind in table.kinds.items():
            beat = best.score if best is not None else 0.0
            read = _score_kind(table, name, kind, ctx, beat)
            if read is not None and read.score >= kind.min_score and read.score > beat:
                best = read
    return best


def detect_kind(section: EntrySection, tables: FamilyTable | Sequence[FamilyTable]) -> KindMatch | None:
    """The kind of entry ``section`` is, by the tables' cues; None when no kind reaches its ``min_score``.

    Ties go to the table and kind listed first.
    """
    chosen = _tables(tables)
    text, bold = prepare_text(section)
    text = _split_run_on(text, chosen)
    best = _best_kind(section, chosen, text, Lines.of(text), bold)
    if best is None:
        return None
    return KindMatch(
        best.table.family, best.name, best.kind.entity_kind, best.score, best.kind.min_score, tuple(best.cues)
    )


# ============================================================================================
# the entry point


def extract_facts(section: EntrySection, tables: FamilyTable | Sequence[FamilyTable]) -> list[SourceFact]:
    """The typed facts one rulebook entry states.

    Args:
        section: the entry: its heading path (ending with its own heading), its body text, the terms
            set in bold, and the page and chunk its facts are copied with.
        tables: one family table or several (kinds of all are considered; ties go to the first).
            The family of an entry no kind claims is the first table's that reads generic fields.

    Returns:
        Facts in the order their text appears, at most one per predicate (the first found). Empty
        when the entry states no field the tables know and no generic field.
    """
    chosen = _tables(tables)
    text, bold = prepare_text(section)
    if not text.strip():
        return []
    text = _split_run_on(text, chosen)
    lines = Lines.of(text)
    best = _best_kind(section, chosen, text, lines, bold)
    facts: list[Fact] = []
    taken: list[tuple[int, int]] = []
    have: set[str] = set()
    if best is not None:
        facts = _kind_facts(best, text, lines, bold, taken, have)
        family_table = best.table
        subject_kind, entity_kind = best.name, best.kind.entity_kind
    else:
        generic = next((t for t in chosen if t.generic_fields), None)
        if generic is None:
            return []
        family_table = generic
        subject_kind, entity_kind = GENERIC_KIND, EntityKind.CONCEPT
    if family_table.generic_fields and not _reads_paragraphs(best):
        facts += read_generic(family_table, text, taken, have, bold)
    if not facts:
        return []
    name = entry_name(section.heading) or " ".join(clean_text(section.heading).split())
    subject = FactSubject(
        name=name,
        key=entry_key(name) or name.casefold(),
        kind=subject_kind,
        entity_kind=entity_kind,
        heading_path=[" ".join(clean_text(h).split()) for h in section.heading_path],
    )
    return [
        SourceFact(
            subject=subject,
            predicate=f.predicate,
            value=f.value,
            raw=text[f.start : f.end].strip() or text[f.start : f.end],
            label=f.label,
            confidence=max(0.0, min(1.0, f.confidence)),
            family=family_table.family,
            offset=f.start,
            chunk_id=section.chunk_id,
            page=section.page,
        )
        for f in sorted(facts, key=lambda f: (f.start, f.predicate))
    ]


def _kind_facts(
    best: _KindRead, text: str, lines: Lines, bold: set[str], taken: list[tuple[int, int]], have: set[str]
) -> list[Fact]:
    """The facts of the chosen kind: its labelled fields, then its lines, rows, sentences and paragraphs
    (``taken`` and ``have`` gather the spans read and the predicates found, for the generic fields after)."""
    kind = best.kind
    facts: list[Fact] = []
    factor = 0.95 if best.score < kind.min_score + 1.0 else 1.0
    for cand in best.accepted:
        if cand.spec.name in have:
            continue
        base = _CONF_LINE_START if cand.line_start else _CONF_INLINE
        if label_key(cand.label) in bold:
            base = min(0.99, base + 0.02)
        read = cand.read
        if read is None:
            continue
        have.add(cand.spec.name)
        cap = cand.spec.confidence if cand.spec.confidence is not None else 1.0
        for fact in read.facts:
            fact.label = cand.label
            fact.confidence = min(cap, base * fact.confidence)
            if fact.predicate == cand.spec.name:
                fact.start = cand.start  # its raw text is the whole field: "Hit Points 7 (2d6)"
                facts.append(fact)
            elif fact.predicate not in have:
                facts.append(fact)
                have.add(fact.predicate)
        taken.append((cand.start, read.end if not _is_free(cand.spec) else cand.end))
    for fact in read_lines(kind, text, lines, taken):
        if fact.predicate not in have:
            facts.append(fact)
            have.add(fact.predicate)
    for fact in read_rows(_compiled(kind).rows, text, taken):
        if fact.predicate not in have:
            facts.append(fact)
            have.add(fact.predicate)
    facts += read_sentences(kind, text, taken, have)
    if kind.paragraphs and kind.paragraphs not in have:
        facts += read_paragraphs(kind.paragraphs, text, taken)
        have.add(kind.paragraphs)
    for fact in facts:
        fact.confidence = round(fact.confidence * factor, 4)
    return facts


def _reads_paragraphs(best: _KindRead | None) -> bool:
    """Whether the chosen kind reads its remaining paragraphs as one field (then no generic fields)."""
    return best is not None and best.kind.paragraphs is not None
