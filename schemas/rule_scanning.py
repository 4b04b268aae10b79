"""Reading text into rulebook values: the longest value of a type at the start of a text
(:func:`scan_value`) and a whole text as one type (``parse_<type>``, :func:`parse_value`), numbers in
digits or words. Re-exported by :mod:`schemas.rulefacts`.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from schemas.rule_values import (
    ACTION_UNITS,
    DISTANCE_SPECIALS,
    DiceTerm,
    DiceValue,
    DistanceValue,
    DurationValue,
    FlagValue,
    ListValue,
    NumberValue,
    RuleValue,
    RuleValueError,
    TextValue,
    ValueType,
    clean_text,
)

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
NUMBER_PATTERN = rf"(?:{_DIGITS}|{_WORD_NUMBER})(?![\w/]|\s?d\d)"


def number_of(text: str) -> float | None:
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
UNIT_BASE = {"gp": ("money", 1.0), "sp": ("money", 0.1), "cp": ("money", 0.01), "ep": ("money", 0.5)}
UNIT_BASE |= {"pp": ("money", 10.0), "lb": ("weight", 1.0), "kg": ("weight", 2.20462), "xp": ("xp", 1.0)}
_NUMBER_UNIT_RE = "|".join(re.escape(u) for u in sorted(_NUMBER_UNITS, key=len, reverse=True))
_NUMBER_RE = re.compile(rf"\s*(?P<n>{NUMBER_PATTERN})(?:\s*(?P<u>{_NUMBER_UNIT_RE})(?![\w]))?", re.I)

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
    rf"\s*(?:(?P<n>{NUMBER_PATTERN}|an?)\s*-?\s*(?P<u>{_DIST_UNIT_RE})(?=[\s,;:)(]|$|\.\s|\.$)"
    rf"|(?P<s>{'|'.join(DISTANCE_SPECIALS)})(?![\w]))",
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
    rf"|(?:(?P<n>{NUMBER_PATTERN}|an?)\s*-?\s*)?(?P<u>{_DUR_UNIT_RE})(?![\w-]))",
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
    value = number_of(m.group("n"))
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
    amount = 1.0 if raw.casefold() in ("a", "an") else number_of(raw)
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
        if unit not in ACTION_UNITS:
            return None  # "minutes" alone is no duration; "Action" (a casting time) is one
        amount: float | None = 1.0
    else:
        amount = 1.0 if raw.casefold() in ("a", "an") else number_of(raw)
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


def parse_whole(value_type: ValueType, text: str) -> Any:
    cleaned = clean_text(text).strip()
    found = scan_value(value_type, cleaned)
    if found is None:
        return None
    value, end = found
    return value if _TRAILING.fullmatch(cleaned[end:]) else None


def parse_number(text: str) -> NumberValue | None:
    """A whole text as a number: "15", "+7", "1/4", "1,000", "thirty", "15 gp", "3 lb."; else None."""
    value: NumberValue | None = parse_whole(ValueType.NUMBER, text)
    return value


def parse_dice(text: str) -> DiceValue | None:
    """A whole text as a dice expression: "2d6+3", "2d6 + 3", "d20", "1d8 + 1d6 - 1"; else None."""
    value: DiceValue | None = parse_whole(ValueType.DICE, text)
    return value


def parse_distance(text: str) -> DistanceValue | None:
    """A whole text as a distance: "30 ft.", "30 feet", "thirty feet", "1 mile", "9 m", "Self"; else None."""
    value: DistanceValue | None = parse_whole(ValueType.DISTANCE, text)
    return value


def parse_duration(text: str) -> DurationValue | None:
    """A whole text as a duration: "1 action", "10 minutes", "Instantaneous", "Concentration, up to 1 hour"."""
    value: DurationValue | None = parse_whole(ValueType.DURATION, text)
    return value


def parse_list(text: str) -> ListValue | None:
    """A text as a list, split at commas and semicolons outside parentheses ("—" is the empty list)."""
    cleaned = clean_text(text).strip()
    if not cleaned:
        return None
    return ListValue(items=_list_items(cleaned))


def parse_text(text: str) -> TextValue | None:
    """A text as text (None when blank)."""
    value: TextValue | None = parse_whole(ValueType.TEXT, text)
    return value


def parse_flag(text: str) -> FlagValue | None:
    """A whole text as yes or no: yes/true/required, no/false/none/—; else None."""
    value: FlagValue | None = parse_whole(ValueType.FLAG, text)
    return value


def parse_value(value_type: ValueType | str, text: str) -> RuleValue:
    """A whole text read as ``value_type``.

    Raises:
        RuleValueError: when the text is not such a value (or the type is unknown).
    """
    kind = _value_type(value_type, text)
    value: Any = parse_list(text) if kind is ValueType.LIST else parse_whole(kind, text)
    if value is None:
        raise RuleValueError(kind.value, text)
    result: RuleValue = value
    return result
