"""Reading order of a PDF page: a recursive XY cut over the block boxes that tries columns first."""

from __future__ import annotations

import re

from jobs.extract.pdf_items import _Item

_COLUMN_GAP = 3.0  # points of white space that make a gutter
# A folio ("24", "– 24 –", "Page 24", "xii"), often centred on the gutter at the foot of the page.
_FOLIO = re.compile(r"[\W_]*(?:page\s*)?(?:\d+|[ivxlc]+)[\W_]*", re.IGNORECASE)


def _split(items: list[_Item], vertical: bool) -> list[list[_Item]]:
    """Cut ``items`` at white-space gaps: gutters between columns (vertical) or gaps between bands."""
    if vertical:
        ordered = sorted(items, key=lambda it: it.x0)
        groups = [[ordered[0]]]
        end = ordered[0].x1
        for it in ordered[1:]:
            if it.x0 > end + _COLUMN_GAP:
                groups.append([it])
            else:
                groups[-1].append(it)
            end = max(end, it.x1)
        return groups
    ordered = sorted(items, key=lambda it: it.y0)
    groups = [[ordered[0]]]
    end = ordered[0].y1
    for it in ordered[1:]:
        # touching or barely overlapping boxes (leading, descenders) still make separate bands
        if it.y0 >= end - 1.0:
            groups.append([it])
        else:
            groups[-1].append(it)
        end = max(end, it.y1)
    return groups


def _order(items: list[_Item], out: list[_Item]) -> None:
    """Append ``items`` to ``out`` in reading order (recursive XY cut, columns first)."""
    if len(items) <= 1:
        out.extend(items)
        return
    columns = _split(items, vertical=True)
    if len(columns) > 1:
        for column in columns:
            _order(column, out)
        return
    bands = _split(items, vertical=False)
    if len(bands) == 1:
        out.extend(sorted(items, key=lambda it: (it.y0, it.x0)))
        return
    multi = [len(band) > 1 and len(_split(band, vertical=True)) > 1 for band in bands]
    i = 0
    while i < len(bands):
        merged = bands[i]
        j = i + 1
        if multi[i]:
            # Columns whose paragraph gaps line up look like several bands; read them as one
            # column set as long as the merged bands still have a common gutter.
            while j < len(bands) and multi[j]:
                candidate = merged + bands[j]
                if len(_split(candidate, vertical=True)) == 1:
                    break
                merged = candidate
                j += 1
            # An unbalanced column set: one column runs on alone to the end (a chapter starting in
            # the left column while the right one holds the last lines of the entry before). The rest
            # is that column's continuation as long as no later band uses two columns or crosses
            # the gutter; a full-width heading or a new column set below keeps its own place.
            end = len(bands)
            while end > j and len(bands[end - 1]) == 1 and _FOLIO.fullmatch(bands[end - 1][0].text.strip()):
                end -= 1
            tail = [it for band in bands[j:end] for it in band]
            if tail and not any(multi[j:end]) and len(_split(merged + tail, vertical=True)) > 1:
                merged = merged + tail
                j = end
        _order(merged, out)
        i = j


def _reading_order(items: list[_Item]) -> list[_Item]:
    # Vertical marginal text (a line running up the page edge) would become a column of its own;
    # it is read after the page body instead.
    body = [it for it in items if not (it.lines == 1 and it.y1 - it.y0 > 5 * (it.x1 - it.x0) > 0)]
    margin = [it for it in items if it not in body] if len(body) != len(items) else []
    out: list[_Item] = []
    _order(body, out)
    out.extend(margin)
    return out
