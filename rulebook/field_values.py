"""Reading one field's value where its label was found: typed, with its parenthetical, trailing words and
keyed items as their own predicates, and a confidence relative to the label's (1.0: read whole).

Part of the parser (:mod:`rulebook.facts`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rulebook.entry_text import label_key, slug
from rulebook.tables import FieldSpec, KeyedSpec
from schemas.rulefacts import DistanceValue, NumberValue, TextValue, ValueType, parse_list, scan_value

RUN_ON = 0.92  # factor: the value was read, then the description runs on after it
_PARTIAL = 0.78  # factor: the value was read, then other words that are not a new sentence
_PAREN_FACTOR = 0.98  # a parenthetical read as its own field
_REST_FACTOR = 0.95  # trailing words read as their own field


@dataclass(slots=True)
class Fact:
    predicate: str
    value: Any
    start: int
    end: int
    confidence: float
    label: str | None = None


@dataclass(slots=True)
class Read:
    facts: list[Fact]
    end: int
    complete: bool


# ============================================================================================
# reading one field's value

_PAREN = re.compile(r"[ \t]*\(((?:[^()]|\([^()]*\))*)\)")  # one level of nesting: "(a gem (consumed))"
_TOKEN_START = re.compile(r"(?<=[\s(])(?=[^\s(])")
_NEW_SENTENCE = re.compile(r"^[ \t]*[A-Z]")


def scan_typed(spec_type: ValueType, spec: FieldSpec, text: str) -> tuple[Any, int] | None:
    """A value of ``spec_type`` at the start of ``text``, with the field's fallbacks (bare unit, words)."""
    vocabulary = tuple(spec.vocabulary) if spec.vocabulary is not None and spec_type is ValueType.LIST else None
    found = scan_value(spec_type, text, vocabulary=vocabulary)
    if found is None and spec_type is ValueType.DISTANCE and spec.unit:
        number = scan_value(ValueType.NUMBER, text)
        if (
            number is not None
            and isinstance(number[0], NumberValue)
            and number[0].unit is None
            and number[0].value >= 0
        ):
            unit: Any = spec.unit
            found = (DistanceValue(amount=number[0].value, unit=unit), number[1])
    if found is None and spec.words and spec_type is ValueType.NUMBER:
        m = re.match(r"\s*([A-Za-z][\w'-]*)", text)
        if m and m.group(1).casefold() in spec.words:
            end = m.end()
            paren = re.match(r"\s*\(\s*[+-]?\d+\s*\)", text[end:])
            found = (NumberValue(value=spec.words[m.group(1).casefold()]), end + (paren.end() if paren else 0))
    return found


def _read_sub(sub_type: ValueType, text: str) -> Any:
    """A parenthetical or trailing words read as a sub-field's type (the whole text, or None)."""
    text = text.strip(" \t,;.")
    if not text:
        return None
    if sub_type is ValueType.LIST:
        return parse_list(text)
    if sub_type is ValueType.TEXT:
        return TextValue(text=" ".join(text.split()))
    found = scan_value(sub_type, text)
    if found is None:
        return None
    value, end = found
    rest = text[end:].strip(" \t,;.")
    # "50 XP" reads whole; "XP 50; PB +2" does not: a sub-field is all or nothing
    return value if not rest else None


def _read_plain(spec: FieldSpec, text: str, start: int, end: int) -> Read | None:
    found = scan_typed(spec.type, spec, text[start:end])
    if found is None:
        return None
    value, used = found
    pos = start + used
    facts = [Fact(spec.name, value, start, pos, 1.0)]
    if spec.paren is not None:
        m = _PAREN.match(text, pos, end)
        if m:
            sub = _read_sub(spec.paren.type, m.group(1))
            if sub is not None:
                facts.append(Fact(spec.paren.field, sub, m.start(1), m.end(1), _PAREN_FACTOR))
            pos = m.end()
    if spec.rest is not None:
        rest = text[pos:end]
        sub = _read_sub(spec.rest.type, rest)
        if sub is not None:
            facts.append(Fact(spec.rest.field, sub, pos + len(rest) - len(rest.lstrip()), end, _REST_FACTOR))
            pos = end
    remainder = text[pos:end]
    complete = not remainder.strip(" \t.,;:")
    if not complete:
        penalty = RUN_ON if _NEW_SENTENCE.match(remainder) else _PARTIAL
        for fact in facts:
            fact.confidence *= penalty
    return Read(facts, pos, complete)


def _split_items(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    depth = 0
    a = start
    for i in range(start, end):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch in ",;" and depth == 0:
            spans.append((a, i))
            a = i + 1
    spans.append((a, end))
    return spans


def _item_key(keyed: KeyedSpec, before: str) -> str:
    key = label_key(re.sub(r"\([^)]*\)", " ", before)) if before.strip() else ""
    return keyed.aliases.get(key, key)


def _read_keyed(spec: FieldSpec, text: str, start: int, end: int) -> Read | None:
    keyed = spec.keyed
    assert keyed is not None
    facts: list[Fact] = []
    pos = start
    complete = True
    for a, b in _split_items(text, start, end):
        item = text[a:b]
        if not item.strip():
            continue
        hit = None
        for m in _TOKEN_START.finditer(" " + item):
            p = m.start() - 1 if m.start() else 0
            kind = spec.type
            if keyed.types:  # the key decides the type ("passive Perception 13" is a number)
                kind = keyed.types.get(_item_key(keyed, item[:p]), spec.type)
            found = scan_typed(kind, spec, item[p:])
            if found is not None:
                hit = (p, _item_key(keyed, item[:p]), found)
                break
            if len(item[:p].split()) > 4:
                break  # a key is a few words: this item is prose
        if hit is None:
            if not facts:
                return None
            complete = False
            break
        p, key, (value, used) = hit
        value_end = a + p + used
        rest = text[value_end:b]
        rest_plain = re.sub(r"\([^)]*\)", " ", rest).strip(" \t.")
        if not key and keyed.bare is None and rest_plain and len(rest_plain.split()) <= 4:
            key = keyed.aliases.get(label_key(rest_plain), label_key(rest_plain))  # "+3 Fight", "Good (+3) Fight"
            rest_plain = ""
        predicate = keyed.name.format(key=slug(key)) if key else keyed.bare
        if predicate and slug(predicate) == predicate:
            facts.append(Fact(predicate, value, a + p, value_end, 1.0))
        paren = _PAREN.match(text, value_end, b)
        pos = paren.end() if paren else value_end
        if rest_plain:
            complete = False
            break
        pos = max(pos, b if not rest.strip(" \t.()") else pos)
    if not facts:
        return None
    if not complete:
        for fact in facts:
            fact.confidence *= RUN_ON
    return Read(facts, pos, complete)


def read_field(spec: FieldSpec, text: str, start: int, end: int) -> Read | None:
    """A field's value(s) in ``text[start:end]``, with confidences relative to the label's (1.0: read whole)."""
    if spec.keyed is not None:
        return _read_keyed(spec, text, start, end)
    return _read_plain(spec, text, start, end)
