"""The parser's readers beside labelled fields: a kind's unlabelled lines ("3rd-level evocation"), rows
of scores under a header, prose sentences, remaining paragraphs, and generic "Label: value" fields.

Part of the parser (:mod:`rulebook.facts`).
"""

from __future__ import annotations

import re
from typing import Any

from rulebook.entry_text import Lines, label_key, line_spans, slug
from rulebook.field_values import Fact, scan_typed
from rulebook.tables import FamilyTable, FieldSpec, KindSpec, group_field
from schemas.rulefacts import (
    FlagValue,
    ListValue,
    NumberValue,
    RuleValue,
    TextValue,
    ValueType,
    parse_dice,
    parse_distance,
    parse_duration,
    parse_list,
    parse_number,
    scan_value,
)

_CONF_LINES = 0.95
_CONF_ROWS = 0.93
_CONF_PARAGRAPHS = 0.85


def _read_group(spec: FieldSpec, raw: str) -> Any:
    raw = raw.strip()
    if spec.type is ValueType.FLAG:
        return FlagValue(value=bool(raw))
    if spec.type is ValueType.LIST:
        return parse_list(raw)
    if spec.type is ValueType.TEXT:
        return TextValue(text=raw.casefold() if raw.isupper() else raw) if raw else None
    found = scan_typed(spec.type, spec, raw)
    if found is None:
        return None
    value, used = found
    return value if not raw[used:].strip(" .,;") else None


def read_lines(kind: KindSpec, text: str, lines: Lines, taken: list[tuple[int, int]]) -> list[Fact]:
    facts: list[Fact] = []
    got: set[str] = set()
    spans: dict[int, list[tuple[int, int]]] = {}
    for line in kind.lines:
        size = line.window or kind.line_window
        if size not in spans:
            spans[size] = line_spans(text, lines, size)
        for a, b in spans[size]:
            if overlaps(a, b, taken):
                continue
            raw = text[a:b]
            stripped = raw.strip()
            m = line.regex.search(stripped)
            if not m:
                continue
            offset = a + raw.index(stripped)
            named: dict[str, tuple[str, int, int]] = {}
            for group, value in m.groupdict().items():
                if value is not None and value.strip():
                    named.setdefault(group_field(group), (value, offset + m.start(group), offset + m.end(group)))
            for name, constant in line.set.items():
                named.setdefault(name, (constant, a, b))
            for name, (raw_value, s, e) in named.items():
                if name in got:
                    continue
                spec = kind.field(name)
                value = _read_group(spec, raw_value) if (s, e) != (a, b) else _read_constant(spec, raw_value)
                if value is not None:
                    facts.append(Fact(name, value, s, e, _CONF_LINES))
                    got.add(name)
            taken.append((a, b))
            break
    return facts


def _read_constant(spec: FieldSpec, raw: str) -> Any:
    if spec.type is ValueType.FLAG:
        found = scan_value(ValueType.FLAG, raw)
        return found[0] if found else None
    return _read_group(spec, raw)


_SEPARATOR_ROW = re.compile(r"\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?")
_SCORE_WITH_MOD = re.compile(r"(?<![\w+-])(\d{1,2})[ \t]*\([ \t]*[+-]?[ \t]*\d+[ \t]*\)")
_BARE_SCORE = re.compile(r"(?<![\w+-])(\d{1,2})(?![\w])")


def read_rows(rows: list[tuple[re.Pattern[str], list[str]]], text: str, taken: list[tuple[int, int]]) -> list[Fact]:
    facts: list[Fact] = []
    for regex, fields in rows:
        m = regex.search(text)
        if not m:
            continue
        window_end = min(len(text), m.end() + 60 * len(fields))
        window = _SEPARATOR_ROW.sub(lambda s: " " * len(s.group(0)), text[m.end() : window_end])
        scores = list(_SCORE_WITH_MOD.finditer(window))[: len(fields)]
        confidence = _CONF_ROWS
        if len(scores) < len(fields):
            scores = list(_BARE_SCORE.finditer(window))[: len(fields)]
            confidence = 0.8
        if len(scores) < len(fields):
            continue
        # only a row read in one run is in order: a row split by other text (a table broken over
        # columns) may come back with its cells shuffled, and a wrong score is worse than none
        gaps = [window[a.end() : b.start()] for a, b in zip(scores, scores[1:], strict=False)]
        if any(gap.strip(" \t\n|") for gap in gaps) or window[: scores[0].start()].strip(" \t\n|"):
            continue
        for name, score in zip(fields, scores, strict=True):
            start = m.end() + score.start()
            facts.append(Fact(name, NumberValue(value=float(score.group(1))), start, m.end() + score.end(), confidence))
        taken.append((m.start(), m.end() + scores[-1].end()))
    return facts


def overlaps(a: int, b: int, spans: list[tuple[int, int]]) -> bool:
    return any(a < y and x < b for x, y in spans)


def read_sentences(kind: KindSpec, text: str, taken: list[tuple[int, int]], have: set[str]) -> list[Fact]:
    facts: list[Fact] = []
    flat = text.replace("\n", " ")  # a sentence wraps across lines and blocks; offsets stay the same
    for sentence in kind.sentences:
        collected: dict[str, list[Fact]] = {}
        for m in sentence.regex.finditer(flat):
            if overlaps(m.start(), m.end(), taken):
                continue
            for group, raw in m.groupdict().items():
                name = group_field(group)
                if raw is None or name in have or (name in collected and not sentence.all):
                    continue
                spec = kind.field(name)
                value = _read_group(spec, raw)
                if value is None and spec.words:
                    value = _read_group(spec, str(spec.words.get(raw.casefold(), "")))
                if value is None and spec.type is ValueType.NUMBER:
                    value = parse_number(raw)
                if value is not None:
                    collected.setdefault(name, []).append(
                        Fact(name, value, m.start(group), m.end(group), sentence.confidence)
                    )
            if not sentence.all and collected:
                break
        for name, found in collected.items():
            if sentence.all and isinstance(found[0].value, ListValue) and len(found) > 1:
                items: list[str] = []
                for f in found:
                    items += [i for i in f.value.items if i.casefold() not in {x.casefold() for x in items}]
                facts.append(Fact(name, ListValue(items=items), found[0].start, found[-1].end, found[0].confidence))
            else:
                facts.append(found[0])
            have.add(name)
    return facts


def _paragraph_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for m in re.finditer(r"[^\n]+(?:\n(?!\n)[^\n]+)*", text):
        spans.append((m.start(), m.end()))
    return spans


def read_paragraphs(name: str, text: str, taken: list[tuple[int, int]]) -> list[Fact]:
    items: list[tuple[int, int]] = [(a, b) for a, b in _paragraph_spans(text) if not overlaps(a, b, taken)]
    texts = [" ".join(text[a:b].split()) for a, b in items]
    pairs = [(span, t) for span, t in zip(items, texts, strict=True) if t]
    if not pairs:
        return []
    return [Fact(name, ListValue(items=[t for _, t in pairs]), pairs[0][0][0], pairs[-1][0][1], _CONF_PARAGRAPHS)]


_LABEL = r"(?P<label>[A-Z][\w'()/&-]*(?:[ \t][\w'()/&-]+){0,5}?)"
_GENERIC_COLON = re.compile(rf"^{_LABEL}[ \t]*:[ \t]+(?P<value>\S.*)$", re.M)
_GENERIC_RUN_IN = re.compile(rf"^{_LABEL}\.[ \t]+(?P<value>\S.*)$", re.M)


def _infer(raw: str) -> RuleValue:
    """A generic field's value: the first type it reads as whole, else text."""
    for parse in (parse_dice, parse_distance, parse_duration, parse_number):
        value = parse(raw)
        if value is not None:
            typed: RuleValue = value
            return typed
    return TextValue(text=raw.strip())


def read_generic(
    table: FamilyTable, text: str, taken: list[tuple[int, int]], have: set[str], bold: set[str]
) -> list[Fact]:
    ignore = {label_key(x) for x in table.ignore_labels}
    facts: list[Fact] = []
    found: list[tuple[int, int, str, str, int, bool]] = []
    for m in _GENERIC_COLON.finditer(text):
        found.append((m.start(), m.end(), m.group("label"), m.group("value"), m.start("value"), True))
    for m in _GENERIC_RUN_IN.finditer(text):
        if label_key(m.group("label")) in bold:
            found.append((m.start(), m.end(), m.group("label"), m.group("value"), m.start("value"), False))
    for start, end, label, raw, value_start, colon in sorted(found):
        key = label_key(label)
        predicate = slug(label)
        if not predicate or key in ignore or predicate in have or overlaps(start, end, taken):
            continue
        if colon and key not in bold and len(label.split()) > 3:
            continue  # a long unbolded "Words words words:" is a sentence, not a label
        confidence = table.generic_confidence + (0.05 if key in bold else 0.0)
        facts.append(Fact(predicate, _infer(raw), value_start, end, confidence, label))
        have.add(predicate)
        taken.append((start, end))
    return facts
