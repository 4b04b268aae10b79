"""What a transcript's text may hold, and where a JSON document's parts are: the checks behind
:mod:`story.transcripts`' errors that name a line and a field.

A field must be storable as a turn: no NUL character (the graph's query text cannot carry one), no lone
surrogate (JSON's ``"\\ud800"`` decodes to one; it has no UTF-8 form), and no longer than its limit.
A pretty-printed document (a CRD3 episode, a LoCoMo conversation) is parsed whole by :func:`json.loads`;
:func:`locate` walks its top level again to learn on which line each key and each element of a top-level
list starts, so a turn's error names the line a user can open the file at.
"""

from __future__ import annotations

import dataclasses
import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")


def nul_problem(value: str) -> str | None:
    """What keeps ``value`` from being stored: a NUL character or a lone surrogate (None: nothing)."""
    if (at := value.find("\x00")) >= 0:
        return f"holds a NUL character (at character {at + 1})"
    if value.isascii():  # most text: no surrogate possible, and no encoding to try
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate (U+{ord(value[exc.start]):04X} at character {exc.start + 1})"
    return None


def check_text(value: str, limit: int) -> str | None:
    """What is wrong with a field's text: unstorable, or longer than ``limit`` characters (None: nothing)."""
    if problem := nul_problem(value):
        return problem
    if len(value.strip()) > limit:
        return f"is {len(value.strip()):,} characters long; at most {limit:,} are kept"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Located:
    """A JSON object parsed, with the line each top-level key and each element of a top-level list starts on."""

    document: dict[str, Any]
    lines: dict[tuple[str] | tuple[str, int], int]

    def line(self, key: str, index: int | None = None) -> int | None:
        return self.lines.get((key,) if index is None else (key, index))

    def place(self, where: str, key: str, index: int | None = None) -> str:
        """``where:LINE`` of a key or a list element (``where`` alone when its line is not known)."""
        line = self.line(key, index)
        return f"{where}:{line}" if line is not None else where


def locate(content: str) -> Located:
    """Parse a JSON object and note where its top-level keys and their lists' elements start.

    ``content`` must be a JSON object that :func:`json.loads` reads (this walks it again, decoding each
    key and element with the standard decoder; a later duplicate key wins, as in :func:`json.loads`).
    """
    decoder = json.JSONDecoder()
    document: dict[str, Any] = {}
    lines: dict[tuple[str] | tuple[str, int], int] = {}
    seen = [0, 1]  # the last offset asked for and its line: offsets are asked for in increasing order

    def line_at(i: int) -> int:
        seen[1] += content.count("\n", seen[0], i)
        seen[0] = i
        return seen[1]

    def skip(i: int) -> int:
        return _SPACE.match(content, i).end()  # type: ignore[union-attr]

    i = skip(0) + 1  # past "{"
    while (i := skip(i)) < len(content) and content[i] == '"':
        key, i = scanstring(content, i + 1)
        lines[(key,)] = line_at(i)
        i = skip(skip(i) + 1)  # past ":"
        if content.startswith("[", i):
            items: list[Any] = []
            i = skip(i + 1)
            while not content.startswith("]", i):
                lines[(key, len(items))] = line_at(i)
                item, i = decoder.raw_decode(content, i)
                items.append(item)
                i = skip(i)
                if content.startswith(",", i):
                    i = skip(i + 1)
            document[key], i = items, i + 1
        else:
            document[key], i = decoder.raw_decode(content, i)
        i = skip(i)
        if content.startswith(",", i):
            i += 1
    return Located(document, lines)
