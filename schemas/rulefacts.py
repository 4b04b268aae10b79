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

The values themselves live in :mod:`schemas.rule_values` and the readers in :mod:`schemas.rule_scanning`;
this module is the one to import from (it re-exports both) and holds comparison and the fact contract.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field

from schemas.common import Confidence, EntityKind, Id, LorekeeperModel, Name, content_id
from schemas.rule_scanning import (
    UNIT_BASE,
    parse_dice,
    parse_distance,
    parse_duration,
    parse_flag,
    parse_list,
    parse_number,
    parse_text,
    parse_value,
    parse_whole,
    scan_value,
)
from schemas.rule_values import (
    ACTION_UNITS,
    Comparison,
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
    entry_key,
    norm_item,
)

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


# ============================================================================================
# comparison

_REL_TOLERANCE_ACROSS_UNITS = 0.03  # 9 m against 30 ft, 1.5 m against 5 ft: tabletop conversions


def _coerce(value: Any, like: Any) -> Any:
    """``value`` read as the type of ``like`` where it can be (text, bare numbers), else None."""
    if isinstance(value, TextValue):
        if isinstance(like, ListValue):
            return parse_list(value.text)
        kind = ValueType(like.type)
        read = parse_whole(kind, value.text)
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
            da, fa = UNIT_BASE[a.unit]
            db, fb = UNIT_BASE[b.unit]
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
        if a.unit in ACTION_UNITS or b.unit in ACTION_UNITS:
            return a.unit == b.unit and _close(a.amount or 0, b.amount or 0)
        sa, sb = a.seconds, b.seconds
        return sa is not None and sb is not None and _close(sa, sb)
    if isinstance(a, ListValue):
        return sorted({norm_item(i) for i in a.items}) == sorted({norm_item(i) for i in b.items})
    if isinstance(a, TextValue):
        return norm_item(a.text).strip(" .") == norm_item(b.text).strip(" .")
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
