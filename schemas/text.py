"""Free text: one rule for every free-text field of the API and the story records.

Every free-text field (a name, a memory, a reason, a narration, a note) is one of the types below. Each
refuses, with a message naming the problem:

* text over its bound (names 300 characters, notes and reasons 2,000, texts 20,000, narration and
  summaries 100,000): the body limit alone let a 1 MB memory through, and every listing, prompt and
  recall then carried it;
* a NUL character or a lone UTF-16 surrogate (``"\\ud800"`` is valid JSON but not Unicode text): the
  stores cannot hold either (the graph's driver fails on the write), so they are refused at the door;
* blank text, except where a type says it may be blank (:data:`TextOrEmpty`).

Requests are validated strictly. Records read back from a store are not re-judged by bounds added
after they were written: a store's reader validates with :data:`STORED` as the validation context
(``Model.model_validate(data, context=STORED)``), under which these checks pass the stored text as it
is, so a record written before a bound (or by an older version) stays readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

__all__ = [
    "LONG_TEXT_MAX",
    "NAME_MAX",
    "NOTE_MAX",
    "STORED",
    "TEXT_MAX",
    "Label",
    "LongText",
    "Name",
    "Note",
    "RecordId",
    "Text",
    "TextOrEmpty",
    "TextRule",
    "check_text",
]

NAME_MAX = 300
"""Names, titles, labels, genres: one line."""
ID_MAX = 200
"""A record's id as a caller names it (in a path or a tool's arguments): ours are far shorter."""
NOTE_MAX = 2_000
"""Reasons, notes, quotes, short descriptions: a paragraph."""
TEXT_MAX = 20_000
"""A player's input, a memory, an axiom, a narrator rule, a description: a few pages."""
LONG_TEXT_MAX = 100_000
"""What a model writes or a GM pastes at length: a narration, a summary."""

STORED: dict[str, Any] = {"stored": True}
"""The validation context of a record read back from a store: its text is taken as stored."""

# NUL and the surrogate code points (U+D800-U+DFFF), which only a lone surrogate puts in a Python str
_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


def _describe(char: str) -> str:
    return "a NUL character" if char == "\x00" else f"a lone UTF-16 surrogate (U+{ord(char):04X})"


def check_text(value: str, *, max_length: int, blank: bool = False) -> str:
    """Return ``value`` if it is acceptable free text of at most ``max_length`` characters.

    Raises:
        ValueError: blank (unless ``blank``), too long, or holding a NUL or a lone surrogate; the
            message says which and where.
    """
    if len(value) > max_length:
        raise ValueError(f"is {len(value):,} characters long; at most {max_length:,} are allowed")
    if not blank and not value.strip():
        raise ValueError("must not be empty or only whitespace")
    found = _FORBIDDEN.search(value)
    if found is not None:
        raise ValueError(
            f"holds {_describe(found.group())} at character {found.start()}; send Unicode text without NUL "
            "characters (a UTF-16 surrogate must come in a pair)"
        )
    return value


@dataclass(frozen=True)
class TextRule:
    """The metadata that makes a ``str`` free text: ``Annotated[str, TextRule(300, strip=True)]``."""

    max_length: int
    blank: bool = False
    strip: bool = False

    def check(self, value: str, info: ValidationInfo) -> str:
        if info.context and info.context.get("stored"):
            return value  # a stored record is read as it was written
        if self.strip:
            value = value.strip()
        return check_text(value, max_length=self.max_length, blank=self.blank)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.with_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler.resolve_ref_schema(handler(schema))
        json_schema["maxLength"] = self.max_length
        if not self.blank:
            json_schema["minLength"] = 1
        return json_schema


Name = Annotated[str, TextRule(NAME_MAX, strip=True)]
"""A short human-readable name or label: surrounding whitespace stripped, not blank, one line's length."""

Note = Annotated[str, TextRule(NOTE_MAX)]
"""A reason, a note, a quote or a short description: not blank, at most 2,000 characters."""

Text = Annotated[str, TextRule(TEXT_MAX)]
"""Free text that is not blank, at most 20,000 characters. Kept verbatim (no stripping): narration is
whitespace-sensitive."""

Label = Annotated[str, TextRule(NAME_MAX)]
"""A key or label kept verbatim (an attribute's name): not blank, one line's length."""

TextOrEmpty = Annotated[str, TextRule(TEXT_MAX, blank=True)]
"""Like :data:`Text`, but may be empty (a turn without input)."""

LongText = Annotated[str, TextRule(LONG_TEXT_MAX)]
"""Long free text that is not blank (a narration, a summary), at most 100,000 characters."""

RecordId = Annotated[str, TextRule(ID_MAX)]
"""An id a caller names (``campaign_id`` in a path, a tool's ``scene_id``): no id of ours holds a NUL, a lone
surrogate or more than 200 characters, so such a value is refused as malformed (422 naming it) before it
reaches a store, whose driver would otherwise answer with its own message."""
