"""Tables of a PDF page: regions whose blocks look like table rows, turned into Markdown.

``TableMode.ACCURATE`` builds the cells from the rules drawn in a region (:mod:`jobs.extract.ruling`),
else from the block geometry, which ``TableMode.FAST`` uses alone.
"""

from __future__ import annotations

import logging
import re
import statistics
from collections import Counter
from enum import StrEnum
from typing import Any

import pymupdf

from jobs.document import BlockKind
from jobs.extract.blocks import markdown_table
from jobs.extract.pdf_items import _MARGIN_Y, _Item, _PageWords
from jobs.extract.pdf_order import _split
from jobs.extract.pdf_styles import _lines_of
from jobs.extract.ruling import edges_in, fill_grids, ruled_grids, widen_to_rules

_log = logging.getLogger("jobs.extract.pdf")  # the PDF reader logs under one name

# Characters of formulas (operators, arrows, set symbols, delimiters drawn as text).
# Signs, brackets and ≤/≥ are left out: "+4", "(+2)" and "≤ 3" are common in game tables.
_MATH = frozenset("=×÷·∑∏∫√∞∂∇∈∉∋⊂⊃⊆⊇∪∩∅∀∃¬∧∨⇒⇔→←↔↦≠≈≡∼⊕⊗|{}⟨⟩˙̸")
# The content-stream operators that decide whether a page can draw a vertical rule (see
# :func:`_may_draw_grid`), as tokens after white space (not inside a name, "/Im1 Do", a number or
# another word). Starting with the white space makes the scan several times faster than a
# look-behind; an operator after a delimiter instead is caught by the checks around the scan.
_WHITE = rb"\x00\t\n\f\r "
_STREAM_TOKEN = re.compile(
    rb"[" + _WHITE + rb"](BT|ET|m|l|re|c|v|y|cm|Do|sh|BI|scn|SCN|d0|d1)(?=[" + _WHITE + rb"()<>\[\]{}/%]|\Z)"
)
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)")
# An operator glued to what comes before it: "0 100l" is read as "0 100 l" by MuPDF, "[]re" too.
_GLUED = re.compile(rb"[\d.\])>}][A-Za-z]")


class TableMode(StrEnum):
    """How PDF tables are found and turned into Markdown."""

    ACCURATE = "accurate"  # cells from the rules drawn in table-like regions, else block geometry
    FAST = "fast"  # Markdown from the block layout alone: several times cheaper, no cell ruling
    OFF = "off"  # tables stay as text blocks


def _line_pitch(items: list[_Item]) -> float:
    """Typical distance between text lines on the page, from its multi-line paragraphs."""
    pitches = [(it.y1 - it.y0) / it.lines for it in items if it.lines >= 3 and len(it.text) > 40 * it.lines / 2]
    return statistics.median(pitches) if pitches else 12.0


# The same characters, and the private use area (symbol fonts), found in one pass of C.
_MATH_CHAR = re.compile("[" + "".join(map(re.escape, sorted(_MATH))) + "\ue000-\uf8ff]")


def _cellish(cells: list[str]) -> bool:
    """Whether text fragments read like table cells rather than pieces of a formula."""
    for cell in cells:
        if not cell[:1].isalnum() and not any(ch.isalnum() for ch in cell):
            return False
    # No formula character is white space: the characters counted are those str.split keeps.
    math = sum(len(_MATH_CHAR.findall(cell)) for cell in cells)
    chars = sum(len("".join(cell.split())) for cell in cells)
    return math <= 0.15 * chars


def _row_like(it: _Item, pitch: float) -> bool:
    """A block whose lines sit side by side: MuPDF's rendering of a table row (cells as lines)."""
    # n stacked lines are about n pitches tall; side by side they are one line tall, and a
    # single line's box can be taller than the pitch (tight leading), so the cut is n - 0.6.
    if it.lines < 2 or it.y1 - it.y0 >= (it.lines - 0.6) * pitch:
        return False
    cells = [c for c in it.text.split("\n") if c.strip()]
    return all(len(c) <= 60 for c in cells) and _cellish(cells)


def _aligned(region: list[_Item]) -> bool:
    """Whether the cells of a region start at shared x positions, as table columns do."""
    starts = Counter(round(it.x0 / 3) for it in region)
    return sum(1 for n in starts.values() if n >= 2) >= 2


def _table_regions(items: list[_Item], height: float) -> list[list[_Item]]:
    """Groups of blocks that look like the rows of one table.

    Evidence is either blocks whose lines sit side by side (MuPDF's rendering of a ruled row),
    or bands of three or more short blocks whose starts line up with the next band's.
    Margin text (running heads, footers) is never a table.
    """
    top, bottom = height * _MARGIN_Y, height * (1 - _MARGIN_Y)
    body = items
    pitch = _line_pitch(body)
    rows = [it for it in body if _row_like(it, pitch)]
    strong = set(map(id, rows))
    short = [it for it in body if it.lines <= 2 and len(it.text) <= 40 and id(it) not in strong]
    if len(short) >= 3:
        for band in _split(short, vertical=False):
            if len(band) >= 3:
                rows.extend(band)
    if len(rows) < 2 and not (rows and rows[0].lines >= 12):
        return []
    rows.sort(key=lambda it: (it.y0, it.x0))
    regions: list[list[_Item]] = []
    spans: list[list[float]] = []  # each region's [left, right], kept as it grows
    for it in rows:
        for region, span in zip(regions, spans, strict=True):
            last = region[-1]
            overlaps = it.x0 < span[1] and it.x1 > span[0]
            if overlaps and it.y0 - last.y1 < 2.5 * pitch:
                region.append(it)
                span[0], span[1] = min(span[0], it.x0), max(span[1], it.x1)
                break
        else:
            regions.append([it])
            spans.append([it.x0, it.x1])
    kept = []
    for region in regions:
        if all(it.y1 <= top or it.y0 >= bottom for it in region):
            continue  # running heads and footers (a "VerDate … Frm … Fmt" line looks like a row)
        n_strong = sum(1 for it in region if id(it) in strong)
        if n_strong >= 2:
            kept.append(region)
        elif len(region) == 1 and n_strong == 1:
            # one block holding a whole table: many side-by-side lines over several rows
            it = region[0]
            if it.lines >= 12 and it.y1 - it.y0 >= 3 * pitch:
                kept.append(region)
        elif len(region) >= 6 and _aligned(region) and _cellish([it.text for it in region]):
            kept.append(region)
    return kept


def _geometry_table(region: list[_Item]) -> str | None:
    """Markdown for a table from block geometry: one row per row-like block or band of blocks.

    Returns None unless most rows have the same number of cells (two or more): formulas and
    other side-by-side fragments are not tables.
    """
    rows: list[list[str]] = []
    for band in _split(region, vertical=False):
        if len(band) == 1:
            rows.append([c.strip() for c in band[0].text.split("\n") if c.strip()])
        else:
            rows.append([" ".join(it.text.split()) for it in sorted(band, key=lambda it: it.x0)])
    if len(rows) < 2:
        return None
    width, count = Counter(len(r) for r in rows).most_common(1)[0]
    if width < 2 or count < max(2, 0.7 * len(rows)):
        return None
    return markdown_table(rows)


def _region_rect(region: list[_Item]) -> tuple[float, float, float, float]:
    """The region's box (display space), padded, reaching up for a header row."""
    rows = sorted(region, key=lambda it: it.y0)
    # Reach up by two rows: a header row whose cells MuPDF merged into one line is not row-like.
    reach = 2 * max(rows[0].y1 - rows[0].y0, 10.0)
    return (
        min(it.x0 for it in region) - 8,
        rows[0].y0 - reach - 8,
        max(it.x1 for it in region) + 8,
        max(it.y1 for it in region) + 8,
    )


def _may_draw_grid(page: Any) -> bool:
    """Whether the page can draw a vertical rule, without which no ruled table has a grid.

    A cheap scan of the content streams before the drawings pass (``get_cdrawings`` interprets the
    whole page again, text and all, for about a millisecond): "no" only when every path the page
    draws is a straight line along the x axis (a rule under a heading, a booktabs rule, a running
    head's line) in axis-aligned coordinates. Anything it cannot read for sure means "yes":
    rectangles, curves, forms and images (``Do``), shadings and patterns, a rotated or sheared
    ``cm``, operands that are not plain numbers, strings or comments outside text objects, a
    page turned by /Rotate, annotations and widgets (the drawings pass draws them too), path
    operators with numbers before them inside a text object (MuPDF runs them there too) and
    Type 3 fonts (whose glyphs may be drawn as paths). A false "yes" only costs the drawings pass.
    """
    if page.rotation or page.first_annot is not None or page.first_widget is not None:
        return True
    try:
        stream = page.read_contents()
    except Exception:  # a stream MuPDF cannot decode: let the drawings pass decide
        return True
    if b"/Pattern" in stream or b"\x0b" in stream:  # bytes.split (operands) splits at \x0b too
        return True
    stream = b"\n" + stream  # a token at the very start follows white space too
    in_text = False
    outside_from = 0  # where the current stretch outside text objects began
    last_y: float | None = None  # the current point's y
    for token in _STREAM_TOKEN.finditer(stream):
        op, at = token.group(1), token.start(1)
        if op == b"BT" or op == b"ET":
            if (op == b"BT") == in_text:
                return True  # unbalanced: the text objects are not where they seem
            if op == b"BT" and _odd_outside(stream[outside_from:at]):
                return True
            in_text = op == b"BT"
            outside_from = token.end()
            continue
        if op in (b"Do", b"sh", b"BI", b"scn", b"SCN", b"d0", b"d1"):
            return True
        if op == b"cm":  # inside a text object too: MuPDF applies it there
            matrix = _operands(stream, at, 6)
            if matrix is None or matrix[1] or matrix[2]:
                return True  # not axis-aligned: a line along x may run along y
            continue
        if in_text:
            # inside text, "(v)" or "(re)" are strings; path operators come after their numbers
            if _operands(stream, at, 1) is not None:
                return True
            continue
        if op not in (b"m", b"l"):
            return True  # a rectangle or a curve
        point = _operands(stream, at, 2)
        if point is None:
            return True
        y = point[1]
        if op == b"l" and y != last_y:
            return True  # a line that is not along the x axis (or starts nowhere)
        last_y = y
    if in_text or _odd_outside(stream[outside_from:]):
        return True
    # MuPDF runs the glyph procedures of a Type 3 font it cannot cache (coloured glyphs) through
    # the device: their paths are drawings the page's own streams do not show.
    return any(font[2] == "Type3" for font in page.get_fonts())


def _operands(stream: bytes, at: int, count: int) -> list[float] | None:
    """The ``count`` numbers right before the operator at ``at``, or None when they are not numbers.

    Split from a short window before the operator: a regular expression anchored at its end would
    try every start in the window, and the scan asks this for every path operator of the page.
    """
    words = stream[max(0, at - 32 * count) : at].rsplit(None, count)[-count:]
    if len(words) != count or not all(map(_NUMBER.fullmatch, words)):
        return None
    return list(map(float, words))


def _odd_outside(part: bytes) -> bool:
    """Whether a stretch of a content stream outside text objects holds what the token scan cannot
    read for sure: a string or a comment (either may hide "BT" or "ET"), or an operator glued to
    what comes before it."""
    return b"(" in part or b"%" in part or _GLUED.search(part) is not None


def _table_item(bbox: Any, markdown: str, index: int, page: int) -> _Item:
    return _Item(
        bbox[0], bbox[1], bbox[2], bbox[3], markdown, markdown.count("\n") + 1, index, page, kind=BlockKind.TABLE
    )


def _replace_tables(
    page: Any, page_words: _PageWords, items: list[_Item], mode: TableMode, rotation_matrix: Any, height: float
) -> list[_Item]:
    """Replace the blocks of each table found on the page by one TABLE item (Markdown)."""
    regions = _table_regions(items, height)
    if not regions:
        return items
    number = items[0].page
    drawings: list[dict[str, Any]] | None = None
    for region in regions:
        tables: list[tuple[Any, str]] = []
        if mode is TableMode.ACCURATE:
            # Rules and words are read in page space, where the text runs as written (a page
            # turned by /Rotate is read as drawn, like its text); boxes go back to display space.
            if drawings is None:
                drawings = page.get_cdrawings() if _may_draw_grid(page) else []
            if drawings:
                clip = _region_rect(region)
                if rotation_matrix is not None:
                    clip = tuple(pymupdf.Rect(clip) * ~rotation_matrix)
                try:
                    grids = ruled_grids(edges_in(drawings, widen_to_rules(drawings, clip)))
                    # the words only where rules make a grid: most regions hold none
                    found = fill_grids(grids, page_words()) if grids else []
                    tables = [(bbox, markdown_table(rows)) for bbox, rows in found]
                except Exception as exc:  # a table failure must not lose the page's text
                    _log.warning("ruled tables failed on page %d: %s", number, exc)
                if rotation_matrix is not None:
                    tables = [(tuple(pymupdf.Rect(bbox) * rotation_matrix), md) for bbox, md in tables]
        ruled = bool(tables)  # cells from the rules and the words, not the blocks
        if not tables:
            markdown = _geometry_table(region)
            if markdown is not None:
                box = (
                    min(it.x0 for it in region),
                    min(it.y0 for it in region),
                    max(it.x1 for it in region),
                    max(it.y1 for it in region),
                )
                tables = [(box, markdown)]
        for bbox, markdown in tables:
            x0, y0, x1, y1 = bbox[0] - 2, bbox[1] - 2, bbox[2] + 2, bbox[3] + 2
            inside = [
                it
                for it in items
                if x0 <= (it.x0 + it.x1) / 2 <= x1 and y0 <= (it.y0 + it.y1) / 2 <= y1 and it.kind is None
            ]
            if not inside:
                continue
            rests = _kept_outside(inside, bbox, page_words, rotated=rotation_matrix is not None) if ruled else []
            if rests is None:
                continue
            taken = {id(it) for it in inside}
            items = [it for it in items if id(it) not in taken]
            items.append(_table_item(bbox, markdown, inside[0].index, number))
            items.extend(rests)
    return items


# How far a block taken whole into a ruled table may reach past its outer rules (the glyph boxes
# of a tight first or last row stand out a little).
_OVERHANG = 3.0


def _within(it: _Item, bbox: Any) -> bool:
    return (
        it.x0 >= bbox[0] - _OVERHANG
        and it.y0 >= bbox[1] - _OVERHANG
        and it.x1 <= bbox[2] + _OVERHANG
        and it.y1 <= bbox[3] + _OVERHANG
    )


def _kept_outside(inside: list[_Item], bbox: Any, page_words: _PageWords, *, rotated: bool) -> list[_Item] | None:
    """The lines that the blocks ``inside`` a ruled table ``bbox`` hold outside it, as blocks of their own.

    A block that reaches past the grid (MuPDF merged the last row with the paragraph below it) keeps
    its lines outside; None when a block cannot say which lines those are (or the page is turned), and
    then the table is not used, as its cells would lose them.
    """
    kept: list[_Item] = []
    for it in inside:
        if _within(it, bbox):
            continue
        rest = None if rotated else _outside(it, bbox, page_words())
        if rest is None:
            return None
        kept.extend(rest)
    return kept


def _outside(it: _Item, bbox: Any, words: list[Any]) -> list[_Item] | None:
    """The lines of block ``it`` that stand outside the table ``bbox`` (no word centre inside), as
    a block of their own (an empty list when there are none); None when its words and its lines
    disagree (lines joined or cut since MuPDF made them) or a line stands partly inside.
    """
    lines = it.text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    own = [w for w in words if w[5] == it.index]
    if not own or len(lines) != it.lines or 1 + max(w[6] for w in own) != it.lines:
        return None
    inside: dict[int, list[bool]] = {}
    for w in own:
        cx, cy = (w[0] + w[2]) / 2, (w[1] + w[3]) / 2
        inside.setdefault(w[6], []).append(bbox[0] <= cx <= bbox[2] and bbox[1] <= cy <= bbox[3])
    if any(any(flags) and not all(flags) for flags in inside.values()):
        return None
    # lines without words (blank) have nothing to keep
    keep = [n for n in range(it.lines) if n in inside and not any(inside[n])]
    if not keep:
        return []
    kept = [w for w in own if w[6] in keep]
    part = _lines_of(it, keep)
    part.x0, part.y0 = min(w[0] for w in kept), min(w[1] for w in kept)
    part.x1, part.y1 = max(w[2] for w in kept), max(w[3] for w in kept)
    return [part]
