"""A small table of a label row over one value row, put back in row order.

Stat blocks set their ability scores as a two-row table: "STR DEX CON INT WIS CHA" over
"8 (-1) 14 (+2) …". When the table has no rules (so no table is found) and a value cell is too
narrow for its text, the cell wraps ("3" over "(−4)"), and MuPDF cuts the value row into several
blocks, some merged with the paragraph below: read block by block, the cells come out of order
and the row's ends land after the next paragraph. Here the value row is rebuilt from the page's
words: each word below the label row goes to the column whose label it stands under, lines
below the first are taken while every word stays inside one column and the line is set in the
row's type (a prose line runs across the columns, a wrapped cell does not), and the cells are
read column by column. Rows already read whole (one line, one block) are left as they are.
"""

from __future__ import annotations

from bisect import bisect_left

from jobs.extract.pdf_items import _Item, _PageWords
from jobs.extract.pdf_styles import _lines_of
from jobs.extract.pdf_tables import _line_pitch, _row_like

_MAX_LABEL_CHARS = 12  # a label cell: "STR", "Level", "AC"; longer ones are a table's headers
_MIN_COLUMNS = 3
_SLACK = 2.0  # points a word may reach into the next column's share (centred cells, kerning)

Word = tuple[float, float, float, float, str, int, int, int]


class _Words:
    """A page's words (``extractWORDS``), looked up by block and by top edge.

    A page holds thousands of words and a label row a dozen: scanning the whole list for every
    row and step was most of this module's time.
    """

    def __init__(self, words: list[Word]) -> None:
        self.words = words  # extractWORDS gives tuples
        self._blocks: dict[int, list[Word]] = {}
        for w in words:
            self._blocks.setdefault(w[5], []).append(w)
        self._by_top: list[int] | None = None
        self._tops: list[float] = []

    def of_block(self, block: int) -> list[Word]:
        """The words of one block, in text-page order."""
        return self._blocks.get(block, [])

    def with_top(self, low: float, high: float) -> list[Word]:
        """The words whose top edge is in ``[low, high)``, in text-page order."""
        words = self.words
        if self._by_top is None:
            self._by_top = sorted(range(len(words)), key=lambda n: words[n][1])
            self._tops = [words[n][1] for n in self._by_top]
        a, b = bisect_left(self._tops, low), bisect_left(self._tops, high)
        return [words[n] for n in sorted(self._by_top[a:b])]


def _label_row(it: _Item) -> list[str] | None:
    """The cells of a block that is one row of short labels set side by side, else None."""
    if it.kind is not None or it.lines < _MIN_COLUMNS:
        return None
    cells = it.text.split("\n")
    if cells and not cells[-1]:
        cells.pop()
    if len(cells) != it.lines or any(not c.strip() or len(c.strip()) > _MAX_LABEL_CHARS for c in cells):
        return None
    return cells


def _columns(words: _Words, it: _Item) -> list[tuple[float, float]] | None:
    """Each label's share of the row, (left, right), split at the midpoints between labels."""
    cells: dict[int, list[Word]] = {}
    for w in words.of_block(it.index):
        cells.setdefault(w[6], []).append(w)
    if len(cells) != it.lines:
        return None
    boxes = sorted((min(w[0] for w in ws), max(w[2] for w in ws), min(w[1] for w in ws)) for ws in cells.values())
    tops = [b[2] for b in boxes]
    height = it.y1 - it.y0
    if max(tops) - min(tops) > 0.5 * height:
        return None  # not side by side: a stacked list of short lines
    if any(b[0] < a[1] for a, b in zip(boxes, boxes[1:], strict=False)):
        return None
    centres = [(b[0] + b[1]) / 2 for b in boxes]
    cuts = [(a + b) / 2 for a, b in zip(centres, centres[1:], strict=False)]
    pitch = min(b - a for a, b in zip(centres, centres[1:], strict=False))
    lefts = [centres[0] - pitch / 2, *cuts]
    rights = [*cuts, centres[-1] + pitch / 2]
    return list(zip(lefts, rights, strict=True))


def _column_of(w: Word, columns: list[tuple[float, float]]) -> int | None:
    """The column a word stands in, or None when it runs into a neighbour's (prose does)."""
    centre = (w[0] + w[2]) / 2
    for n, (left, right) in enumerate(columns):
        if left <= centre < right:
            return n if w[0] >= left - _SLACK and w[2] <= right + _SLACK else None
    return None


def _visual_lines(words: list[Word]) -> list[list[Word]]:
    """Words grouped into lines by their vertical middle, top to bottom."""
    lines: list[list[Word]] = []
    for w in sorted(words, key=lambda w: ((w[1] + w[3]) / 2, w[0])):
        middle = (w[1] + w[3]) / 2
        if lines:
            last = lines[-1][0]
            if abs((last[1] + last[3]) / 2 - middle) < 0.3 * (last[3] - last[1]):
                lines[-1].append(w)
                continue
        lines.append([w])
    return lines


def _value_row(words: _Words, top: float, height: float, columns: list[tuple[float, float]]) -> list[list[Word]] | None:
    """The words of the value row starting at ``top`` under labels ``height`` tall, column by column, or None."""
    left, right = columns[0][0], columns[-1][1]
    below = [w for w in words.with_top(top - 1.0, top + 4 * height) if left <= (w[0] + w[2]) / 2 < right]
    lines = _visual_lines(below)
    if not lines or min(w[1] for w in lines[0]) > top + 0.6 * height:
        return None
    cells: list[list[Word]] = [[] for _ in columns]
    row_height = lines[0][0][3] - lines[0][0][1]
    for n, line in enumerate(lines):
        spots = [_column_of(w, columns) for w in line]
        if any(s is None for s in spots):
            if n == 0:
                return None
            break
        if n:
            h = line[0][3] - line[0][1]
            top = min(w[1] for w in line)
            if abs(h - row_height) > 0.05 * row_height or top > max(w[3] for w in lines[n - 1]) + 0.3 * row_height:
                break
        for w, s in zip(line, spots, strict=True):
            cells[s].append(w)  # type: ignore[index]
    if sum(1 for c in cells if c) < 2:
        return None
    return cells


def _next_column_row(
    items: list[_Item], words: _Words, it: _Item, columns: list[tuple[float, float]]
) -> list[list[Word]] | None:
    """The value row of a label row that ends its column, at the head of the next column.

    A column break can fall between the two rows; the values then stand under the labels'
    places moved by the distance between the two columns' left edges.
    """
    height = it.y1 - it.y0
    beside = [x for x in items if x is not it and x.x0 < it.x1 and x.x1 > it.x0]
    if any(it.y1 - 1.0 <= x.y0 < it.y1 + 2 * height for x in beside):
        return None  # text goes on below it in its own column
    right = [x for x in items if x.x0 >= it.x1]
    own = [x for x in beside if x.y1 <= it.y0 + 1.0] + [it]
    if not right:
        return None
    next_left = min(x.x0 for x in right)
    head = [x for x in right if x.x0 < next_left + 2 * height]
    shift = next_left - min(x.x0 for x in own)
    moved = [(a + shift, b + shift) for a, b in columns]
    return _value_row(words, min(x.y0 for x in head), height, moved)


def _without(it: _Item, taken: set[int]) -> _Item | None:
    """``it`` less its lines numbered in ``taken``; None when nothing is left."""
    keep = [n for n in range(it.lines) if n not in taken]
    return _lines_of(it, keep) if keep else None


def _rebuild(items: list[_Item], words: _Words, it: _Item, touched: set[int]) -> list[_Item] | None:
    """The page's items with the value row under label row ``it`` read as one line, or None to keep them."""
    columns = _columns(words, it)
    if columns is None:
        return None
    cells = _value_row(words, it.y1, it.y1 - it.y0, columns)
    if cells is None:
        cells = _next_column_row(items, words, it, columns)
    if cells is None:
        return None
    row = [w for c in cells for w in c]
    blocks = {w[5] for w in row}
    spans = {(w[5], w[6]) for w in row}
    by_index = {x.index: x for x in items if x.kind is None}
    if any(b not in by_index or b in touched for b in blocks):
        return None  # a block cut for an earlier row no longer matches its words' line numbers
    if len(spans) == 1:
        (block,) = blocks
        if len(words.of_block(block)) == len(row):
            return None  # already one line of one block, read whole
    # Only whole MuPDF lines move: a line holding row words and others is left alone.
    line_words: dict[tuple[int, int], int] = {}
    for b in blocks:
        for w in words.of_block(b):
            line_words[(b, w[6])] = line_words.get((b, w[6]), 0) + 1
    row_count: dict[tuple[int, int], int] = {}
    for w in row:
        row_count[(w[5], w[6])] = row_count.get((w[5], w[6]), 0) + 1
    if any(line_words[k] != n for k, n in row_count.items()):
        return None
    for b in blocks:
        if by_index[b].lines != 1 + max(w[6] for w in words.of_block(b)):
            return None  # the block's text and its words disagree on its lines (or it was cut before)
    touched.update(blocks)
    text = " ".join(" ".join(w[4] for w in sorted(c, key=lambda w: (w[1], w[0]))) for c in cells if c)
    first = by_index[min(blocks)]
    value = _Item(
        min(w[0] for w in row),
        min(w[1] for w in row),
        max(w[2] for w in row),
        max(w[3] for w in row),
        text + "\n",
        1,
        first.index,
        first.page,
    )
    value.styled, value.style = first.styled, first.style
    out: list[_Item] = []
    for x in items:
        if x.kind is None and x.index in blocks:
            if x is first:
                out.append(value)
            rest = _without(x, {n for b, n in spans if b == x.index})
            if rest is not None:
                left = [w for w in words.of_block(x.index) if (w[5], w[6]) not in spans]
                rest.x0, rest.y0 = min(w[0] for w in left), min(w[1] for w in left)
                rest.x1, rest.y1 = max(w[2] for w in left), max(w[3] for w in left)
                out.append(rest)
        else:
            out.append(x)
    return out


def _read_whole(items: list[_Item], it: _Item) -> bool:
    """Whether the block under label row ``it`` is one line standing alone: its row, read whole.

    Checked on the blocks before the page's words are read, which most pages with such a row
    (every stat block whose scores fit their cells) never need.
    """
    height = it.y1 - it.y0
    below = [x for x in items if x is not it and x.x0 < it.x1 and x.x1 > it.x0 and it.y1 - 1.0 <= x.y0 < it.y1 + height]
    return len(below) == 1 and below[0].lines == 1 and below[0].kind is None


def _label_rows(page_words: _PageWords, items: list[_Item]) -> list[_Item]:
    """Read each value row under a label row of short side-by-side cells in row order (module doc)."""
    labels = [it for it in items if _label_row(it) is not None]
    if not labels:
        return items
    pitch = _line_pitch(items)
    # side by side (a stacked list is no row), and not already followed by its row read whole
    labels = [it for it in labels if _row_like(it, pitch) and not _read_whole(items, it)]
    if not labels:
        return items
    words = _Words(page_words())
    touched: set[int] = set()
    for it in labels:
        if it.index in touched:
            continue
        rebuilt = _rebuild(items, words, it, touched)
        if rebuilt is not None:
            items = rebuilt
    return items
