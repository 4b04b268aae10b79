"""Typed values of rulebook facts, their comparison, and the SourceFact contract.

A rulebook entry ("Goblin", "Fireball") states fields whose values have types: a number ("Armor
Class 15"), a dice expression ("2d6 + 3"), a distance ("150 feet"), a duration ("Concentration, up to
1 minute"), a list ("V, S, M") or text. The gate compares a proposal with a source fact value to value,
so both sides must be read into the same typed shape and compared after normalising units and dice:
"30 ft." equals "30 feet" and "thirty feet", "2d6+3" equals "2d6 + 3", "1 hour" equals "60 minutes".

Everything here is pure (pydantic and the standard library), so ingestion (``jobs``), the parser
(``rulebook``) and the gate (``story``) share one definition. Two ways to read text:

* ``parse_<type>(text)`` reads the *whole* text as that type and returns None when it is not one;
  :func:`parse_value` does the same by type name and raises :class:`RuleValueError` instead.
* :func:`scan_value` reads the longest value of a type at the *start* of a text and says where it
  ended: rulebook PDFs run a field's value into the next field or the description ("Duration:
  Instantaneous You hurl a bubble of acid"), so the parser needs to know where a value stops.

:func:`compare_values` says whether two values agree, differ, or cannot be compared (a free-text claim
that does not read as the fact's type): the gate must not call that a contradiction.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from schemas.common import Confidence, EntityKind, Id, LorekeeperModel, Name, ScalarValue, content_id
from schemas.errors import LorekeeperError

__all__ = [
    "Comparison",
    "DiceTerm",
    "DiceValue",
    "DistanceValue",
    "DurationValue",
    "EntrySection",
    "FactSubject",
    "FlagValue",
    "ListValue",
    "NumberValue",
    "RuleValue",
    "RuleValueError",
    "SourceFact",
    "StoredSourceFact",
    "TextValue",
    "ValueType",
    "clean_text",
    "compare_values",
    "entry_key",
    "parse_dice",
    "parse_distance",
    "parse_duration",
    "parse_flag",
    "parse_list",
    "parse_number",
    "parse_text",
    "parse_value",
    "same_value",
    "scan_value",
]


class ValueType(StrEnum):
    """The types a rulebook field's value can have (the ``type`` of a field in a family table)."""

    NUMBER = "number"
    DICE = "dice"
    DISTANCE = "distance"
    DURATION = "duration"
    LIST = "list"
    TEXT = "text"
    FLAG = "flag"


class Comparison(StrEnum):
    """How two values relate: the gate rejects on DIFFERENT only, never on UNCOMPARABLE."""

    SAME = "same"
    DIFFERENT = "different"
    UNCOMPARABLE = "uncomparable"


class RuleValueError(LorekeeperError, ValueError):
    """A text that does not read as the value type asked for (a client's input: 422)."""

    status_code = 422
    code = "rule_value_invalid"

    def __init__(self, value_type: str, text: str, reason: str = "") -> None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        message = f"{shown!r} is not a {value_type}" + (f": {reason}" if reason else "")
        super().__init__(message, value_type=value_type, text=text, reason=reason)
        self.value_type = value_type
        self.text = text
        self.reason = reason


# ============================================================================================
# text normalisation

_TRANSLATE = {
    0x2212: "-",  # minus sign: "9 (−1)"
    0x2013: "-",  # en dash
    0x2010: "-",
    0x2011: "-",
    0x2018: "'",
    0x2019: "'",
    0x201C: '"',
    0x201D: '"',
    0x2044: "/",  # fraction slash, which NFKC makes of "½"
    0x00A0: " ",
    0x00AD: None,  # soft hyphen
}


def clean_text(text: str) -> str:
    """Text as the grammars expect it: NFKC, one minus sign, plain quotes, no soft hyphens.

    Line breaks are kept (the parser reads lines); other runs of spaces become one space.
    """
    text = unicodedata.normalize("NFKC", text).translate(_TRANSLATE)
    return re.sub(r"[^\S\n]+", " ", text)


def entry_key(name: str) -> str:
    """An entry's name for matching: "Adult Black Dragon" and "adult  black dragon." meet.

    NFKC, case folded, quotes and dashes unified, punctuation other than inner apostrophes and
    hyphens dropped, white space collapsed.
    """
    text = clean_text(name).casefold().replace("—", "-")
    text = re.sub(r"[^\w'\- ]+", " ", text)
    return " ".join(text.replace(" - ", " ").split()).strip("'- ")


def _norm_item(text: str) -> str:
    text = clean_text(text).casefold()
    text = re.sub(r"^(?:and|or)\s+", "", text.strip())
    text = re.sub(r"[^\w+/() -]+", " ", text)
    return " ".join(text.split())


# ============================================================================================
# numbers, in digits or words

_SMALL = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_UNITS_WORDS = "|".join(k for k in _SMALL if _SMALL[k] < 10 and k != "zero")
_WORD_BASE = rf"(?:(?:{'|'.join(_TENS)})(?:[- ](?:{_UNITS_WORDS}))?|{'|'.join(sorted(_SMALL, key=len, reverse=True))})"
_WORD_NUMBER = rf"{_WORD_BASE}(?:\s+hundred(?:\s+(?:and\s+)?{_WORD_BASE}(?![\w-]))?|\s+thousand)?"
_DIGITS = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s?/\s?\d+)?"
# A number never takes the first digits of a dice expression ("1d6") or of a larger word.
_NUMBER = rf"(?:{_DIGITS}|{_WORD_NUMBER})(?![\w/]|\s?d\d)"


def _number_of(text: str) -> float | None:
    """The value of one matched number, digits ("1,000", "1/4", "+5") or words ("thirty-five")."""
    text = text.strip().casefold()
    if not text:
        return None
    if text[0].isdigit() or text[0] in "+-":
        body = text.replace(",", "").replace(" ", "")
        if "/" in body:
            top, _, bottom = body.partition("/")
            try:
                return float(top) / float(bottom) if float(bottom) else None
            except ValueError:
                return None
        try:
            return float(body)
        except ValueError:
            return None
    words = text.replace(" and ", " ").split()
    if "hundred" in words:  # "one hundred twenty"
        at = words.index("hundred")
        high = _words_below_hundred(" ".join(words[:at]))
        low = _words_below_hundred(" ".join(words[at + 1 :])) if words[at + 1 :] else 0.0
        return None if high is None or low is None else high * 100 + low
    if words[-1] == "thousand":
        high = _words_below_hundred(" ".join(words[:-1]))
        return None if high is None else high * 1000
    return _words_below_hundred(" ".join(words))


def _words_below_hundred(base: str) -> float | None:
    if base in _SMALL:
        return float(_SMALL[base])
    tens, _, unit = base.replace("-", " ").partition(" ")
    if tens in _TENS and (not unit or unit in _SMALL):
        return float(_TENS[tens] + _SMALL.get(unit, 0))
    return None


# ============================================================================================
# the values


class NumberValue(LorekeeperModel):
    """A number, with an optional unit (coins, weight, XP): "15", "1/4", "+7", "15 gp", "3 lb.".

    ``unit`` is canonical: gp, sp, cp, ep, pp (compared in gold pieces), lb, kg (compared in pounds),
    xp, or None for a bare number.
    """

    type: Literal["number"] = "number"
    value: float
    unit: str | None = None

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("a number value must be finite")
        return v

    def canonical(self) -> str:
        number = _fmt(self.value)
        return f"{number} {self.unit}" if self.unit else number

    def as_attribute(self) -> ScalarValue:
        return int(self.value) if self.value == int(self.value) else self.value


class DiceTerm(LorekeeperModel):
    """``count`` dice of ``sides`` sides (a negative count subtracts them)."""

    count: int
    sides: int = Field(ge=2)


class DiceValue(LorekeeperModel):
    """A dice expression "NdM+K", normalised: terms merged by size, largest first, one modifier."""

    type: Literal["dice"] = "dice"
    terms: list[DiceTerm] = Field(min_length=1)
    modifier: int = 0

    @property
    def average(self) -> float:
        """The expression's mean: 2d6+3 → 10.0."""
        return sum(t.count * (t.sides + 1) / 2 for t in self.terms) + self.modifier

    def canonical(self) -> str:
        out = ""
        for t in self.terms:
            sign = "-" if t.count < 0 else ("+" if out else "")
            out += f"{sign}{abs(t.count)}d{t.sides}"
        if self.modifier:
            out += f"{'+' if self.modifier > 0 else '-'}{abs(self.modifier)}"
        return out

    def as_attribute(self) -> ScalarValue:
        return self.canonical()


_DISTANCE_FEET = {"ft": 1.0, "mi": 5280.0, "m": 3.28084, "km": 3280.84, "yd": 3.0}
_DISTANCE_SPECIALS = ("self", "touch", "sight", "unlimited", "special")


class DistanceValue(LorekeeperModel):
    """A distance ("30 ft.", "1 mile", "9 m") or a special range ("Self", "Touch", "Sight").

    ``amount`` and ``unit`` are as printed (unit canonical: ft, mi, m, km, yd); :attr:`feet` is
    what comparisons use. Exactly one of ``amount`` or ``special`` is set.
    """

    type: Literal["distance"] = "distance"
    amount: float | None = None
    unit: Literal["ft", "mi", "m", "km", "yd"] = "ft"
    special: Literal["self", "touch", "sight", "unlimited", "special"] | None = None

    @field_validator("amount")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and (not math.isfinite(v) or v < 0):
            raise ValueError("a distance must be a finite number of at least 0")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.amount is None) == (self.special is None):
            raise ValueError("a distance has exactly one of `amount` or `special`")
        return self

    @property
    def feet(self) -> float | None:
        return None if self.amount is None else self.amount * _DISTANCE_FEET[self.unit]

    def canonical(self) -> str:
        return self.special if self.special else f"{_fmt(self.amount or 0)} {self.unit}"

    def as_attribute(self) -> ScalarValue:
        return self.canonical()


_TIME_SECONDS = {
    "round": 6.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
    "month": 2592000.0,
    "year": 31536000.0,
}
_ACTION_UNITS = ("action", "bonus_action", "reaction")
DurationUnit = Literal["action", "bonus_action", "reaction", "round", "minute", "hour", "day", "week", "month", "year"]
DurationSpecial = Literal["instantaneous", "until_dispelled", "until_dispelled_or_triggered", "special", "permanent"]


class DurationValue(LorekeeperModel):
    """A duration or a casting time: "1 action", "10 minutes", "Instantaneous", "Concentration, up to 1 hour".

    Exactly one of (``amount`` and ``unit``) or ``special`` is set. Time units compare by seconds (a
    round is six), actions by kind and count; ``concentration`` must agree; "up to" does not matter.
    """

    type: Literal["duration"] = "duration"
    amount: float | None = None
    unit: DurationUnit | None = None
    special: DurationSpecial | None = None
    concentration: bool = False
    up_to: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.amount is None) != (self.unit is None):
            raise ValueError("a duration's `amount` and `unit` come together")
        if (self.unit is None) == (self.special is None):
            raise ValueError("a duration has exactly one of (`amount`, `unit`) or `special`")
        return self

    @property
    def seconds(self) -> float | None:
        """Its length in seconds (None for actions and special durations)."""
        if self.unit is None or self.amount is None or self.unit in _ACTION_UNITS:
            return None
        return self.amount * _TIME_SECONDS[self.unit]

    def canonical(self) -> str:
        if self.special:
            core = self.special.replace("_", " ")
        else:
            unit = (self.unit or "").replace("_", " ")
            amount = self.amount or 0
            core = f"{_fmt(amount)} {unit}{'s' if amount != 1 else ''}"
        if self.concentration:
            return f"concentration, up to {core}"
        return f"up to {core}" if self.up_to else core

    def as_attribute(self) -> ScalarValue:
        return self.canonical()


class ListValue(LorekeeperModel):
    """A list of short strings: components ["V", "S", "M"], damage types, languages. Order does not matter."""

    type: Literal["list"] = "list"
    items: list[str]

    def canonical(self) -> str:
        return ", ".join(self.items)

    def as_attribute(self) -> list[ScalarValue]:
        return list(self.items)


class TextValue(LorekeeperModel):
    """Free text ("natural armor", "evocation"); compared case-, space- and quote-insensitively."""

    type: Literal["text"] = "text"
    text: str

    def canonical(self) -> str:
        return self.text

    def as_attribute(self) -> ScalarValue:
        return self.text


class FlagValue(LorekeeperModel):
    """Yes or no: "requires attunement", "(ritual)"."""

    type: Literal["flag"] = "flag"
    value: bool

    def canonical(self) -> str:
        return "yes" if self.value else "no"

    def as_attribute(self) -> ScalarValue:
        return self.value


RuleValue = Annotated[
    NumberValue | DiceValue | DistanceValue | DurationValue | ListValue | TextValue | FlagValue,
    Field(discriminator="type"),
]
"""A typed value of a rulebook field."""


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


# ============================================================================================
# scanning: the longest value of a type at the start of a text
#
# The scanners build their values with ``model_construct``: the grammar has already checked what
# validation would (finite, non-negative amounts, one of amount or special), and the parser builds
# thousands of values a book.

_NUMBER_UNITS = {
    "gp": "gp",
    "gold piece": "gp",
    "gold pieces": "gp",
    "sp": "sp",
    "silver piece": "sp",
    "silver pieces": "sp",
    "cp": "cp",
    "copper piece": "cp",
    "copper pieces": "cp",
    "ep": "ep",
    "pp": "pp",
    "lb": "lb",
    "lbs": "lb",
    "lb.": "lb",
    "lbs.": "lb",
    "pound": "lb",
    "pounds": "lb",
    "kg": "kg",
    "xp": "xp",
}
_UNIT_BASE = {"gp": ("money", 1.0), "sp": ("money", 0.1), "cp": ("money", 0.01), "ep": ("money", 0.5)}
_UNIT_BASE |= {"pp": ("money", 10.0), "lb": ("weight", 1.0), "kg": ("weight", 2.20462), "xp": ("xp", 1.0)}
_NUMBER_UNIT_RE = "|".join(re.escape(u) for u in sorted(_NUMBER_UNITS, key=len, reverse=True))
_NUMBER_RE = re.compile(rf"\s*(?P<n>{_NUMBER})(?:\s*(?P<u>{_NUMBER_UNIT_RE})(?![\w]))?", re.I)

_DICE_RE = re.compile(
    r"\s*(?P<expr>[+-]?\s*\d*d\d+(?:\s*[+-]\s*(?:\d*d\d+|\d+)(?![\w]))*)(?![\w])",
    re.I,
)
_DICE_PART = re.compile(r"([+-]?)(?:(\d*)d(\d+)|(\d+))", re.I)

_DIST_UNITS = {
    "feet": "ft",
    "foot": "ft",
    "ft": "ft",
    "ft.": "ft",
    "'": "ft",
    "miles": "mi",
    "mile": "mi",
    "mi": "mi",
    "mi.": "mi",
    "meters": "m",
    "meter": "m",
    "metres": "m",
    "metre": "m",
    "m": "m",
    "m.": "m",
    "kilometers": "km",
    "kilometer": "km",
    "km": "km",
    "yards": "yd",
    "yard": "yd",
    "yd": "yd",
    "yd.": "yd",
}
_DIST_UNIT_RE = "|".join(re.escape(u) for u in sorted(_DIST_UNITS, key=len, reverse=True))
_DISTANCE_RE = re.compile(
    rf"\s*(?:(?P<n>{_NUMBER}|an?)\s*-?\s*(?P<u>{_DIST_UNIT_RE})(?=[\s,;:)(]|$|\.\s|\.$)"
    rf"|(?P<s>{'|'.join(_DISTANCE_SPECIALS)})(?![\w]))",
    re.I,
)

_DUR_UNITS = {
    "action": "action",
    "actions": "action",
    "bonus action": "bonus_action",
    "bonus actions": "bonus_action",
    "bonus-action": "bonus_action",
    "reaction": "reaction",
    "reactions": "reaction",
    "round": "round",
    "rounds": "round",
    "rnd": "round",
    "rnds": "round",
    "minute": "minute",
    "minutes": "minute",
    "min": "minute",
    "min.": "minute",
    "mins": "minute",
    "hour": "hour",
    "hours": "hour",
    "hr": "hour",
    "hr.": "hour",
    "hrs": "hour",
    "h": "hour",
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
}
_DUR_SPECIALS = {
    "instantaneous": "instantaneous",
    "instant": "instantaneous",
    "until dispelled or triggered": "until_dispelled_or_triggered",
    "until dispelled": "until_dispelled",
    "special": "special",
    "permanent": "permanent",
}
_DUR_UNIT_RE = "|".join(re.escape(u) for u in sorted(_DUR_UNITS, key=len, reverse=True))
_DUR_SPECIAL_RE = "|".join(re.escape(u) for u in sorted(_DUR_SPECIALS, key=len, reverse=True))
_DURATION_RE = re.compile(
    rf"\s*(?P<conc>concentration\b,?\s*)?(?P<upto>up\s+to\s+)?"
    rf"(?:(?P<s>{_DUR_SPECIAL_RE})(?![\w])"
    rf"|(?:(?P<n>{_NUMBER}|an?)\s*-?\s*)?(?P<u>{_DUR_UNIT_RE})(?![\w-]))",
    re.I,
)

_FLAG_WORDS = {
    "yes": True,
    "true": True,
    "required": True,
    "requires": True,
    "y": True,
    "no": False,
    "false": False,
    "none": False,
    "n": False,
    "-": False,
    "—": False,
}


def _scan_number(text: str) -> tuple[NumberValue, int] | None:
    m = _NUMBER_RE.match(text)
    if not m:
        return None
    value = _number_of(m.group("n"))
    if value is None:
        return None
    unit = _NUMBER_UNITS[m.group("u").casefold()] if m.group("u") else None
    return NumberValue.model_construct(value=value, unit=unit), m.end()


def _dice_of(expr: str) -> DiceValue | None:
    counts: Counter[int] = Counter()
    modifier = 0
    for sign, count, size, constant in _DICE_PART.findall(expr.replace(" ", "").casefold()):
        factor = -1 if sign == "-" else 1
        if constant:
            modifier += factor * int(constant)
            continue
        sides = int(size)
        if sides < 2:
            return None
        counts[sides] += factor * (int(count) if count else 1)
    terms = [DiceTerm.model_construct(count=c, sides=s) for s, c in sorted(counts.items(), reverse=True) if c]
    if not terms:
        return None
    return DiceValue.model_construct(terms=terms, modifier=modifier)


def _scan_dice(text: str) -> tuple[DiceValue, int] | None:
    m = _DICE_RE.match(text)
    if not m:
        return None
    value = _dice_of(m.group("expr"))
    return (value, m.end()) if value else None


def _scan_distance(text: str) -> tuple[DistanceValue, int] | None:
    m = _DISTANCE_RE.match(text)
    if not m:
        return None
    if m.group("s"):
        special: Any = m.group("s").casefold()
        return DistanceValue.model_construct(special=special), m.end()
    raw = m.group("n")
    amount = 1.0 if raw.casefold() in ("a", "an") else _number_of(raw)
    if amount is None or amount < 0:
        return None
    unit: Any = _DIST_UNITS[m.group("u").casefold()]
    end = m.end()
    if m.group("u").casefold() in ("ft", "mi", "m", "yd") and text[end : end + 1] == ".":
        end += 1  # "30 ft." owns its full stop
    return DistanceValue.model_construct(amount=amount, unit=unit), end


def _scan_duration(text: str) -> tuple[DurationValue, int] | None:
    m = _DURATION_RE.match(text)
    if not m:
        return None
    conc = bool(m.group("conc"))
    upto = bool(m.group("upto"))
    if m.group("s"):
        special: Any = _DUR_SPECIALS[" ".join(m.group("s").casefold().split())]
        return DurationValue.model_construct(special=special, concentration=conc, up_to=upto), m.end()
    unit: Any = _DUR_UNITS[" ".join(m.group("u").casefold().split())]
    raw = m.group("n")
    if raw is None:
        if unit not in _ACTION_UNITS:
            return None  # "minutes" alone is no duration; "Action" (a casting time) is one
        amount: float | None = 1.0
    else:
        amount = 1.0 if raw.casefold() in ("a", "an") else _number_of(raw)
    if amount is None or amount <= 0:
        return None
    return DurationValue.model_construct(amount=amount, unit=unit, concentration=conc, up_to=upto), m.end()


def _split_top(text: str, seps: str = ",;") -> list[tuple[int, int]]:
    """Spans of ``text`` split at separators outside parentheses."""
    spans: list[tuple[int, int]] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch in seps and depth == 0:
            spans.append((start, i))
            start = i + 1
    spans.append((start, len(text)))
    return spans


def _list_items(text: str) -> list[str]:
    items: list[str] = []
    for a, b in _split_top(text):
        part = text[a:b].strip().rstrip(".").strip()
        part = re.sub(r"^(?:and|or)\s+", "", part, flags=re.I)
        # "bludgeoning, piercing, and slashing": the last item may carry "and"
        for sub in re.split(r"\s+(?:and|or)\s+(?![^()]*\))", part) if len(part.split()) <= 3 else [part]:
            sub = " ".join(sub.split())
            if sub and sub not in ("—", "-"):
                items.append(sub)
    return items


def _scan_list(text: str, vocabulary: tuple[str, ...] | None = None) -> tuple[ListValue, int] | None:
    """With a vocabulary, the items run while they are words of it ("V, S, M (bat fur)" → V, S, M)."""
    if vocabulary is None:
        body = text.rstrip()
        return ListValue.model_construct(items=_list_items(body)), len(body)
    allowed = {v.casefold(): v for v in vocabulary}
    item_re = re.compile(
        r"\s*(?P<item>" + "|".join(re.escape(v) for v in sorted(allowed, key=len, reverse=True)) + r")(?![\w])",
        re.I,
    )
    items: list[str] = []
    pos = 0
    while True:
        m = item_re.match(text, pos)
        if not m:
            break
        items.append(allowed[m.group("item").casefold()])
        pos = m.end()
        # a parenthetical belongs to the item only when more items follow it
        sep = re.match(r"\s*(?:\([^()]*\)\s*)?[,;]\s*(?:and\s+|or\s+)?", text[pos:])
        if not sep or not item_re.match(text, pos + sep.end()):
            break
        pos += sep.end()
    if not items:
        return None
    return ListValue.model_construct(items=items), pos


def _scan_text(text: str) -> tuple[TextValue, int] | None:
    body = " ".join(text.split())
    if not body:
        return None
    return TextValue.model_construct(text=body), len(text.rstrip())


def _scan_flag(text: str) -> tuple[FlagValue, int] | None:
    m = re.match(r"\s*(yes|true|required|requires|no|false|none|y|n|—|-)(?![\w])", text, re.I)
    if not m:
        return None
    return FlagValue.model_construct(value=_FLAG_WORDS[m.group(1).casefold()]), m.end()


def scan_value(
    value_type: ValueType | str, text: str, *, vocabulary: tuple[str, ...] | None = None
) -> tuple[RuleValue, int] | None:
    """The longest value of ``value_type`` at the start of ``text``, and the offset where it ends.

    Args:
        value_type: one of :class:`ValueType`.
        text: cleaned text (:func:`clean_text`); leading white space is skipped.
        vocabulary: for lists, the words an item may be (the list ends at the first other word).

    Returns:
        (value, end) or None when the text does not start with such a value. Lists and text
        without a vocabulary take the whole text.

    Raises:
        RuleValueError: for an unknown value type.
    """
    kind = _value_type(value_type, text)
    found: tuple[Any, int] | None
    if kind is ValueType.NUMBER:
        found = _scan_number(text)
    elif kind is ValueType.DICE:
        found = _scan_dice(text)
    elif kind is ValueType.DISTANCE:
        found = _scan_distance(text)
    elif kind is ValueType.DURATION:
        found = _scan_duration(text)
    elif kind is ValueType.LIST:
        found = _scan_list(text, vocabulary)
    elif kind is ValueType.FLAG:
        found = _scan_flag(text)
    else:
        found = _scan_text(text)
    return found


def _value_type(value_type: ValueType | str, text: str) -> ValueType:
    try:
        return ValueType(value_type)
    except ValueError:
        raise RuleValueError(str(value_type), text, f"unknown value type (one of {', '.join(ValueType)})") from None


_TRAILING = re.compile(r"[\s.,;:]*$")


def _parse_whole(value_type: ValueType, text: str) -> Any:
    cleaned = clean_text(text).strip()
    found = scan_value(value_type, cleaned)
    if found is None:
        return None
    value, end = found
    return value if _TRAILING.fullmatch(cleaned[end:]) else None


def parse_number(text: str) -> NumberValue | None:
    """A whole text as a number: "15", "+7", "1/4", "1,000", "thirty", "15 gp", "3 lb."; else None."""
    value: NumberValue | None = _parse_whole(ValueType.NUMBER, text)
    return value


def parse_dice(text: str) -> DiceValue | None:
    """A whole text as a dice expression: "2d6+3", "2d6 + 3", "d20", "1d8 + 1d6 - 1"; else None."""
    value: DiceValue | None = _parse_whole(ValueType.DICE, text)
    return value


def parse_distance(text: str) -> DistanceValue | None:
    """A whole text as a distance: "30 ft.", "30 feet", "thirty feet", "1 mile", "9 m", "Self"; else None."""
    value: DistanceValue | None = _parse_whole(ValueType.DISTANCE, text)
    return value


def parse_duration(text: str) -> DurationValue | None:
    """A whole text as a duration: "1 action", "10 minutes", "Instantaneous", "Concentration, up to 1 hour"."""
    value: DurationValue | None = _parse_whole(ValueType.DURATION, text)
    return value


def parse_list(text: str) -> ListValue | None:
    """A text as a list, split at commas and semicolons outside parentheses ("—" is the empty list)."""
    cleaned = clean_text(text).strip()
    if not cleaned:
        return None
    return ListValue(items=_list_items(cleaned))


def parse_text(text: str) -> TextValue | None:
    """A text as text (None when blank)."""
    value: TextValue | None = _parse_whole(ValueType.TEXT, text)
    return value


def parse_flag(text: str) -> FlagValue | None:
    """A whole text as yes or no: yes/true/required, no/false/none/—; else None."""
    value: FlagValue | None = _parse_whole(ValueType.FLAG, text)
    return value


def parse_value(value_type: ValueType | str, text: str) -> RuleValue:
    """A whole text read as ``value_type``.

    Raises:
        RuleValueError: when the text is not such a value (or the type is unknown).
    """
    kind = _value_type(value_type, text)
    value: Any = parse_list(text) if kind is ValueType.LIST else _parse_whole(kind, text)
    if value is None:
        raise RuleValueError(kind.value, text)
    result: RuleValue = value
    return result


# ============================================================================================
# comparison

_REL_TOLERANCE_ACROSS_UNITS = 0.03  # 9 m against 30 ft, 1.5 m against 5 ft: tabletop conversions


def _coerce(value: Any, like: Any) -> Any:
    """``value`` read as the type of ``like`` where it can be (text, bare numbers), else None."""
    if isinstance(value, TextValue):
        if isinstance(like, ListValue):
            return parse_list(value.text)
        kind = ValueType(like.type)
        read = _parse_whole(kind, value.text)
        if read is None and isinstance(like, DistanceValue):
            number = parse_number(value.text)  # "30" for a speed: feet are the default
            if number is not None and number.unit is None and number.value >= 0:
                return DistanceValue(amount=number.value)
        return read
    if isinstance(value, NumberValue) and isinstance(like, DistanceValue) and value.unit is None:
        return DistanceValue(amount=value.value) if value.value >= 0 else None
    if isinstance(value, ListValue) and isinstance(like, TextValue):
        return TextValue(text=", ".join(value.items))
    return None


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def compare_values(a: RuleValue, b: RuleValue) -> Comparison:
    """Whether two values agree once units and dice are normalised.

    Values of different types are first read as one another where that is safe (text as the other
    type, a bare number as feet); when neither reads as the other the answer is UNCOMPARABLE.
    """
    if a.type != b.type:
        if isinstance(a, TextValue):  # read the free text as the typed side, not the reverse
            a, b = b, a
        coerced = _coerce(b, a)
        if coerced is not None:
            b = coerced
        else:
            coerced = _coerce(a, b)
            if coerced is None:
                return Comparison.UNCOMPARABLE
            a = coerced
    same = _same_typed(a, b)
    if same is None:
        return Comparison.UNCOMPARABLE
    return Comparison.SAME if same else Comparison.DIFFERENT


def _same_typed(a: Any, b: Any) -> bool | None:
    if isinstance(a, NumberValue):
        if a.unit and b.unit and a.unit != b.unit:
            da, fa = _UNIT_BASE[a.unit]
            db, fb = _UNIT_BASE[b.unit]
            if da != db:
                return None
            return _close(a.value * fa, b.value * fb, 1e-6)
        return _close(a.value, b.value)
    if isinstance(a, DiceValue):
        return a.canonical() == b.canonical()
    if isinstance(a, DistanceValue):
        if a.special or b.special:
            return a.special == b.special
        feet_a, feet_b = a.feet, b.feet
        if feet_a is None or feet_b is None:
            return None
        rel = 1e-9 if a.unit == b.unit else _REL_TOLERANCE_ACROSS_UNITS
        return _close(feet_a, feet_b, rel)
    if isinstance(a, DurationValue):
        if a.concentration != b.concentration:
            return False
        if a.special or b.special:
            return a.special == b.special
        if a.unit in _ACTION_UNITS or b.unit in _ACTION_UNITS:
            return a.unit == b.unit and _close(a.amount or 0, b.amount or 0)
        sa, sb = a.seconds, b.seconds
        return sa is not None and sb is not None and _close(sa, sb)
    if isinstance(a, ListValue):
        return sorted({_norm_item(i) for i in a.items}) == sorted({_norm_item(i) for i in b.items})
    if isinstance(a, TextValue):
        return _norm_item(a.text).strip(" .") == _norm_item(b.text).strip(" .")
    if isinstance(a, FlagValue):
        return bool(a.value == b.value)
    return None


def same_value(a: RuleValue, b: RuleValue) -> bool:
    """True when two values agree ("30 ft." and "thirty feet"; "2d6+3" and "2d6 + 3")."""
    return compare_values(a, b) is Comparison.SAME


# ============================================================================================
# entries and facts


class EntrySection(LorekeeperModel):
    """One rulebook entry as extraction leaves it: where it sits and its text.

    ``heading_path`` runs from the book down to the entry's own heading (as a chunk's heading path
    does). ``text`` holds the body below the heading: paragraphs (blocks) separated by a blank
    line, lines inside a block by a line break. ``bold_terms`` are the run-in labels and terms set in
    bold, where the extractor saw them ("Casting Time", "Armor Class"): a label set in bold is
    trusted in the middle of a line. ``page`` and ``chunk_id`` are copied onto every fact.
    """

    heading_path: list[str] = Field(min_length=1)
    text: str
    bold_terms: list[str] = Field(default_factory=list)
    page: int | None = Field(default=None, ge=1)
    chunk_id: Id | None = None

    @property
    def heading(self) -> str:
        """The entry's own heading (the last of the path)."""
        return self.heading_path[-1]


class FactSubject(LorekeeperModel):
    """What a source fact is about: the entry, by name, normalised key and kind."""

    name: Name = Field(description="The entry's name as printed: 'Goblin', 'Fireball'.")
    key: str = Field(min_length=1, description="entry_key(name): what subjects are matched by.")
    kind: Name = Field(description="The entry kind from the family table: spell, creature, condition …")
    entity_kind: EntityKind = Field(description="The canon entity kind the entry becomes.")
    heading_path: list[str] = Field(default_factory=list, description="Book › chapter › … › entry.")


class SourceFact(LorekeeperModel):
    """A field of a rulebook entry read as a typed value: (subject, predicate, value) with its source.

    ``raw`` is the text it was read from ("Hit Points 7 (2d6)"); ``confidence`` is the parser's;
    ``offset`` is where ``raw`` starts in the section text (so a caller can map a fact to the chunk
    and page holding it); ``chunk_id`` and ``page`` are filled by the caller or from the section.
    """

    subject: FactSubject
    predicate: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=120)]
    value: RuleValue
    raw: str
    label: str | None = Field(default=None, description="The label as printed ('Armor Class'), if any.")
    confidence: Confidence
    family: Name = Field(description="The family table the fact was read with: dnd5e, fate, generic …")
    offset: int | None = Field(default=None, ge=0)
    chunk_id: Id | None = None
    page: int | None = Field(default=None, ge=1)


SourceFactStatus = Literal["active", "superseded"]


class StoredSourceFact(SourceFact):
    """A source fact as the library keeps it: canon from a source, tied to the item that states it.

    ``uid`` is derived from (item, subject key, predicate, offset or position), so extracting the same
    item again writes the same ids and a re-run replaces rather than duplicates. ``status`` follows the
    item: a re-ingested edition supersedes the old item and its facts with it, yet a campaign pinned to
    the old item still reads them.
    """

    uid: Id
    item_uid: Id
    library_uid: Id
    status: SourceFactStatus = "active"
    canon_level: Literal["canon"] = "canon"
    authority: Literal["source"] = "source"

    @staticmethod
    def uid_for(item_uid: str, subject_key: str, predicate: str, position: int | str) -> str:
        """The fact's id; ``position`` is its offset in the section text, or its index where it has none."""
        return content_id("srcfact", "\x1f".join((item_uid, subject_key, predicate, str(position))))

    @classmethod
    def of(
        cls, fact: SourceFact, *, item_uid: str, library_uid: str, index: int, status: SourceFactStatus = "active"
    ) -> StoredSourceFact:
        """``fact`` stored for an item; ``index`` is its position among the item's facts."""
        position: int | str = fact.offset if fact.offset is not None else f"#{index}"
        uid = cls.uid_for(item_uid, fact.subject.key, fact.predicate, position)
        return cls(
            **fact.model_dump(),
            uid=uid,
            item_uid=item_uid,
            library_uid=library_uid,
            status=status,
        )
