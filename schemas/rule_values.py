"""Typed values of rulebook fields (number, dice, distance, duration, list, text, flag) and the text
normalisation they share. Reading text into them is :mod:`schemas.rule_scanning`; the public names are
re-exported by :mod:`schemas.rulefacts`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from schemas.common import LorekeeperModel, ScalarValue
from schemas.errors import LorekeeperError


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


def norm_item(text: str) -> str:
    text = clean_text(text).casefold()
    text = re.sub(r"^(?:and|or)\s+", "", text.strip())
    text = re.sub(r"[^\w+/() -]+", " ", text)
    return " ".join(text.split())


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
        number = fmt_number(self.value)
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


DISTANCE_FEET = {"ft": 1.0, "mi": 5280.0, "m": 3.28084, "km": 3280.84, "yd": 3.0}
DISTANCE_SPECIALS = ("self", "touch", "sight", "unlimited", "special")


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
        return None if self.amount is None else self.amount * DISTANCE_FEET[self.unit]

    def canonical(self) -> str:
        return self.special if self.special else f"{fmt_number(self.amount or 0)} {self.unit}"

    def as_attribute(self) -> ScalarValue:
        return self.canonical()


TIME_SECONDS = {
    "round": 6.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
    "month": 2592000.0,
    "year": 31536000.0,
}
ACTION_UNITS = ("action", "bonus_action", "reaction")
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
        if self.unit is None or self.amount is None or self.unit in ACTION_UNITS:
            return None
        return self.amount * TIME_SECONDS[self.unit]

    def canonical(self) -> str:
        if self.special:
            core = self.special.replace("_", " ")
        else:
            unit = (self.unit or "").replace("_", " ")
            amount = self.amount or 0
            core = f"{fmt_number(amount)} {unit}{'s' if amount != 1 else ''}"
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


def fmt_number(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"
