"""The PDF reader's working records: a page's text blocks (:class:`_Item`) and pages (:class:`_Page`),
and the layout limits that several of its steps share (heading size, page margins, bullets)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jobs.document import BlockKind
from jobs.extract.typography import Line, Style

_MAX_HEADING_CHARS = 200
_MAX_HEADING_LINES = 3
_MARGIN_Y = 0.085  # share of the page height at the top and bottom where running heads live
_GLYPH_START = re.compile(r"^\s*[•◦▪▫●○■□➢►▶✓✔·∙‣⁃]")


@dataclass(slots=True)
class _Item:
    """A text block of one page on its way to becoming a :class:`Block`."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str  # MuPDF's block text, lines separated by "\n"
    lines: int
    index: int  # position among the text page's blocks
    page: int
    size: float = 0.0  # font size, only read for heading candidates and body samples
    bold: bool = False  # the whole block is bold
    mono: bool = False  # the whole block is monospaced
    bold_terms: list[str] | None = None  # None rather than [] saves a list per block
    kind: BlockKind | None = None  # set for tables and captions
    ocr: bool = False
    styled: bool = False  # styles were read from the HTML (else only size and weight, coarsely)
    info: list[Line] | None = None  # the lines with their styles, when they are not all in one style
    style: Style | None = None  # the one style every line is set in, if there is one


@dataclass(slots=True)
class _Page:
    number: int
    width: float
    height: float
    items: list[_Item]


class _PageWords:
    """A text page's words (``extractWORDS``), read once for the page's tables and label rows."""

    __slots__ = ("_textpage", "_words")

    def __init__(self, textpage: Any) -> None:
        self._textpage = textpage
        self._words: list[Any] | None = None

    def __call__(self) -> list[Any]:
        if self._words is None:
            self._words = self._textpage.extractWORDS()
        return self._words
