"""Ruled tables: cells from the lines and boxes a PDF draws, text from the page's own words.

A ruled table is drawn as horizontal and vertical rules (lines, thin filled rectangles, or the
edges of cell boxes). The rules inside a table region are snapped into row and column lines; the
cells are the bands between them, and every word of the page goes to the cell its centre lies in.
Because the words come from the text page the rest of the extraction already built, a table
costs a few hundred microseconds and reads exactly like the surrounding text (spaces, ligatures,
dehyphenation), where a separate table finder would interpret the page again and rebuild its
characters.

Bands that no vertical rule crosses separate tables stacked in one region, and gaps that no
horizontal rule crosses tables side by side (one in each column of a page). A grid without at
least two row lines and two column lines (tables ruled only by horizontal lines, say) is no
ruled table; the caller falls back to the block geometry.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Edge", "Grid", "edges_in", "fill_grids", "ruled_grids", "ruled_tables", "widen_to_rules"]

Edge = tuple[float, float, float, float]
"""A rule as a thin box ``(x0, y0, x1, y1)``: wider than tall is horizontal, else vertical."""

Grid = tuple[list[float], list[float]]
"""A ruled table's column lines and row lines: ``(xs, ys)``, each in increasing order."""

_THIN = 2.0  # a filled box at most this thick is a rule, not a cell
_SNAP = 3.0  # rules this close are one line
_MIN_RULE = 3.0  # shorter strokes are tick marks, not rules
_MIN_BAND = 1.5  # bands thinner than this lie between double rules
_MIN_CROSSINGS = 0.5  # share of the grid points where a row and a column line must cross


def edges_in(drawings: Iterable[dict[str, Any]], clip: Sequence[float]) -> list[Edge]:
    """The rules of ``drawings`` (``page.get_cdrawings()``) inside ``clip``, clipped to it."""
    cx0, cy0, cx1, cy1 = clip[0], clip[1], clip[2], clip[3]
    edges: list[Edge] = []

    def add(x0: float, y0: float, x1: float, y1: float) -> None:
        x0, y0, x1, y1 = max(x0, cx0), max(y0, cy0), min(x1, cx1), min(y1, cy1)
        if x0 <= x1 and y0 <= y1 and max(x1 - x0, y1 - y0) >= _MIN_RULE:
            edges.append((x0, y0, x1, y1))

    for path in drawings:
        px0, py0, px1, py1 = path["rect"]
        if px1 < cx0 or px0 > cx1 or py1 < cy0 or py0 > cy1:
            continue
        for item in path["items"]:
            kind = item[0]
            if kind == "l":
                (ax, ay), (bx, by) = item[1], item[2]
                if abs(ay - by) <= 1.0 or abs(ax - bx) <= 1.0:
                    add(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))
                continue
            if kind == "re":
                x0, y0, x1, y1 = item[1]
            elif kind == "qu":
                xs = [p[0] for p in item[1]]
                ys = [p[1] for p in item[1]]
                x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
            else:  # curves are not rules
                continue
            if y1 - y0 <= _THIN or x1 - x0 <= _THIN:
                add(x0, y0, x1, y1)
            else:  # a cell box or a shaded band: its four sides
                add(x0, y0, x1, y0)
                add(x0, y1, x1, y1)
                add(x0, y0, x0, y1)
                add(x1, y0, x1, y1)
    return edges


def widen_to_rules(drawings: Iterable[dict[str, Any]], clip: Sequence[float]) -> tuple[float, float, float, float]:
    """``clip`` grown to the ends of the rules that cross it: along x to the ends of the horizontal
    ones, along y to the ends of the vertical ones.

    The clip comes from the text blocks of a table region, and a table's rules often reach past
    its text: a wide last column whose numbers stand far left of its right rule, rows above the
    first block that reads as a row. Cut at the clip, such a grid lacks that column or those rows,
    and their words would be lost with the blocks the table replaces.
    """
    cx0, cy0, cx1, cy1 = clip[0], clip[1], clip[2], clip[3]
    x0, y0, x1, y1 = cx0, cy0, cx1, cy1
    for path in drawings:
        px0, py0, px1, py1 = path["rect"]
        if px1 < cx0 or px0 > cx1 or py1 < cy0 or py0 > cy1:
            continue
        if py1 - py0 <= _THIN and px1 - px0 >= _MIN_RULE:  # a horizontal rule
            x0, x1 = min(x0, px0), max(x1, px1)
        elif px1 - px0 <= _THIN and py1 - py0 >= _MIN_RULE:  # a vertical rule
            y0, y1 = min(y0, py0), max(y1, py1)
    return (x0 - 1.0, y0 - 1.0, x1 + 1.0, y1 + 1.0) if (x0, y0, x1, y1) != (cx0, cy0, cx1, cy1) else (x0, y0, x1, y1)


def _lines(segments: list[tuple[float, float, float]]) -> list[tuple[float, list[tuple[float, float]]]]:
    """Snap ``(position, start, end)`` segments into lines: a position and its merged spans."""
    segments.sort()
    lines: list[tuple[float, list[tuple[float, float]]]] = []
    group: list[tuple[float, float, float]] = []

    def close() -> None:
        position = sum(s[0] for s in group) / len(group)
        spans: list[tuple[float, float]] = []
        for _, a, b in sorted(group, key=lambda s: s[1]):
            if spans and a <= spans[-1][1] + _SNAP:
                spans[-1] = (spans[-1][0], max(spans[-1][1], b))
            else:
                spans.append((a, b))
        lines.append((position, spans))

    for segment in segments:
        if group and segment[0] - group[0][0] > _SNAP:
            close()
            group = []
        group.append(segment)
    if group:
        close()
    return lines


def _covers(spans: list[tuple[float, float]], at: float) -> bool:
    # a loop, not any() over a generator: this runs for every pair of row and column lines
    for a, b in spans:  # noqa: SIM110 - see above
        if a - _SNAP <= at <= b + _SNAP:
            return True
    return False


def _cross(row: tuple[float, list[tuple[float, float]]], column: tuple[float, list[tuple[float, float]]]) -> bool:
    """Whether a row line and a column line intersect."""
    return _covers(row[1], column[0]) and _covers(column[1], row[0])


def _crosses_two(line: _Line, others: list[_Line], *, row: bool) -> bool:
    """Whether a row line (``row``) or a column line crosses at least two of ``others``; stops at two."""
    found = 0
    for other in others:
        if _cross(line, other) if row else _cross(other, line):
            found += 1
            if found == 2:
                return True
    return False


def ruled_tables(edges: Sequence[Edge], words: Sequence[tuple[Any, ...]]) -> list[tuple[Edge, list[list[str]]]]:
    """Tables ruled by ``edges``, filled with ``words``.

    Args:
        edges: rules as thin boxes, in the same space as the words.
        words: ``(x0, y0, x1, y1, text, block, line, word)`` tuples in text-page order
            (``TextPage.extractWORDS()``).

    Returns:
        ``(bbox, rows)`` per table, top to bottom; each has two or more rows and columns with text.
    """
    return fill_grids(ruled_grids(edges), words)


def ruled_grids(edges: Sequence[Edge]) -> list[Grid]:
    """The grids ``edges`` rule, top to bottom, before any text is put in them.

    Most regions that look like tables hold no grid (rules under headings, a frame, booktabs'
    horizontal rules): the caller reads the page's words only for the grids found here.
    """
    horizontal = [((e[1] + e[3]) / 2, e[0], e[2]) for e in edges if e[2] - e[0] >= e[3] - e[1]]
    vertical = [((e[0] + e[2]) / 2, e[1], e[3]) for e in edges if e[2] - e[0] < e[3] - e[1]]
    if len(horizontal) < 2 or len(vertical) < 2:
        return []
    rows = _lines(horizontal)
    columns = _lines(vertical)
    # A row line must cross two column lines and a column line two row lines: a rule under a
    # heading or a frame around the page is not part of a grid.
    rows = [row for row in rows if _crosses_two(row, columns, row=True)]
    columns = [column for column in columns if _crosses_two(column, rows, row=False)]
    if len(rows) < 2 or len(columns) < 2:
        return []
    sides = _split_at_gaps(columns, rows)
    if len(sides) == 1:
        return _stacked(rows, columns)
    # Tables side by side (one in each column of the page, their rows a few points apart): each is
    # a grid of its own, of the rows that cross its column lines. Snapped together, the rows of
    # one and the columns of the other would make one grid over both, and a table of garbage.
    grids: list[Grid] = []
    for side in sides:
        side_rows = [row for row in rows if _crosses_two(row, side, row=True)]
        side_columns = [column for column in side if _crosses_two(column, side_rows, row=False)]
        if len(side_rows) >= 2 and len(side_columns) >= 2:
            grids.extend(_stacked(side_rows, side_columns))
    return sorted(grids, key=lambda grid: (grid[1][0], grid[0][0]))


_Line = tuple[float, list[tuple[float, float]]]


def _split_at_gaps(lines: list[_Line], across: list[_Line]) -> list[list[_Line]]:
    """``lines`` (in order) in groups, split where none of the lines ``across`` them crosses the
    gap between two neighbours: column lines by the row lines (tables side by side), row lines
    by the column lines (tables stacked)."""
    groups = [[lines[0]]]
    for before, after in zip(lines, lines[1:], strict=False):
        middle = (before[0] + after[0]) / 2
        if any(_covers(spans, middle) for _, spans in across):
            groups[-1].append(after)
        else:
            groups.append([after])
    return groups


def _stacked(rows: list[_Line], columns: list[_Line]) -> list[Grid]:
    """The grids of row and column lines that cross, top to bottom."""
    groups = _split_at_gaps(rows, columns)  # tables stacked in one region
    grids: list[Grid] = []
    for group in groups:
        ys = [y for y, _ in group]
        if len(ys) < 2:
            continue
        grid = [column for column in columns if _spans_band(column[1], ys)]
        if len(grid) < 2:
            continue
        # Rules of a table cross at most of the grid's points; arrows and fraction bars of a
        # diagram or a formula line up far less.
        crossings = sum(1 for row in group for column in grid if _cross(row, column))
        if crossings < _MIN_CROSSINGS * len(group) * len(grid):
            continue
        grids.append(([x for x, _ in grid], ys))
    return grids


def fill_grids(grids: Sequence[Grid], words: Sequence[tuple[Any, ...]]) -> list[tuple[Edge, list[list[str]]]]:
    """``(bbox, rows)`` of each grid that two rows and two columns of ``words`` fill (see :func:`ruled_tables`)."""
    tables = []
    for xs, ys in grids:
        table = _fill(xs, ys, words)
        if table is not None:
            tables.append(((xs[0], ys[0], xs[-1], ys[-1]), table))
    return tables


def _spans_band(spans: list[tuple[float, float]], ys: list[float]) -> bool:
    """Whether a column line runs through any row of the table whose row lines are ``ys``."""
    return any(_covers(spans, (a + b) / 2) for a, b in zip(ys, ys[1:], strict=False))


def _fill(xs: list[float], ys: list[float], words: Sequence[tuple[Any, ...]]) -> list[list[str]] | None:
    """Words into the grid of ``xs`` × ``ys``; None unless two rows and two columns hold text."""
    cells: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
    x_first, x_last, y_first, y_last = xs[0], xs[-1], ys[0], ys[-1]
    for word in words:
        cx = (word[0] + word[2]) / 2
        cy = (word[1] + word[3]) / 2
        if not (x_first < cx < x_last and y_first < cy < y_last):
            continue
        cells.setdefault((bisect_right(ys, cy) - 1, bisect_right(xs, cx) - 1), []).append(word)
    if not cells:
        return None
    used_rows = sorted({r for r, _ in cells if ys[r + 1] - ys[r] >= _MIN_BAND})
    used_columns = sorted({c for _, c in cells if xs[c + 1] - xs[c] >= _MIN_BAND})
    if len(used_rows) < 2 or len(used_columns) < 2:
        return None
    table: list[list[str]] = []
    for r in used_rows:
        row = [cells.get((r, c), []) for c in used_columns]
        table.extend([_cell_text(cell) for cell in line] for line in _text_rows(row))
    return table


def _text_lines(words: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """Words grouped into text lines by their vertical centres, top to bottom."""
    lines: list[list[tuple[Any, ...]]] = []
    limit = float("-inf")
    for word in sorted(words, key=lambda w: w[1] + w[3]):
        centre = (word[1] + word[3]) / 2
        if lines and centre <= limit:
            lines[-1].append(word)
        else:  # a line ends a little more than half a word height below its first word's centre
            lines.append([word])
            limit = centre + 0.3 * (word[3] - word[1])
    return lines


def _text_rows(row: list[list[tuple[Any, ...]]]) -> list[list[list[tuple[Any, ...]]]]:
    """One ruled row, or several when its cells hold the same number of text lines side by side.

    Tables ruled every few rows (zebra bands, a rule every five lines) put several data rows
    between two rules: when two or more cells hold k > 1 lines each and the whole band reads as
    k lines, every line becomes a row. A wrapped cell beside single-line cells stays one row.
    """
    lines = [_text_lines(cell) if cell else [] for cell in row]
    counts = {len(cell_lines) for cell_lines in lines if len(cell_lines) > 1}
    multi = sum(1 for cell_lines in lines if len(cell_lines) > 1)
    if multi < 2 or len(counts) != 1:
        return [row]
    band = _text_lines([word for cell in row for word in cell])
    if len(band) != counts.pop():
        return [row]
    line_of = {id(word): n for n, line in enumerate(band) for word in line}
    rows: list[list[list[tuple[Any, ...]]]] = [[[] for _ in row] for _ in band]
    for c, cell in enumerate(row):
        for word in cell:
            rows[line_of[id(word)]][c].append(word)
    return rows


def _cell_text(words: Iterable[tuple[Any, ...]]) -> str:
    """A cell's words, line by line in text-page order, joined by single spaces."""
    return " ".join(str(w[4]) for w in words)
