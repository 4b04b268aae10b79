"""Page furniture of a PDF: running heads, footers and page numbers, found and dropped.

Furniture is known by repetition — the same margin text (digits aside) over a run of nearby pages
or on many pages, and page numbers wherever they stand in a band — and by place: a band line that
is the outermost text of its page, set apart from the text, in a slot (band, position, style)
that furniture fills on many pages, whatever it says (dictionary heads naming the page's first
and last entry, LaTeX's section marks, the head of a chapter one page long).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from jobs.extract.pdf_items import _MARGIN_Y, _Item, _Page

_MARGIN_X = 0.06
_PAGE_NUMBER = re.compile(
    r"^\s*(?:page\s*)?(?:\d+|(?=[ivxlc])c{0,3}(?:x[cl]|l?x{0,3})(?:i[xv]|v?i{0,3}))(?:\s*(?:of|/)\s*\d+)?\s*$",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")


def _furniture_key(text: str) -> str:
    return " ".join(_DIGITS.sub("#", text.lower()).split())


def _slot(it: _Item, page: _Page) -> tuple[Any, ...]:
    """Where and how a margin line is set: band, position (2 pt), style."""
    top = it.y1 <= page.height * _MARGIN_Y
    return (top, round((it.y0 if top else page.height - it.y1) / 2), it.style)


def _outer_slots(pages: list[_Page], marked: list[tuple[_Page, _Item, str]], drop: set[int], many: int) -> set[int]:
    """Lines of the top or bottom band that stand apart from the text, in a place used on many pages.

    A running head need not repeat its text: a dictionary head names the first and last entry
    of its page, a LaTeX head the section running there. What repeats is its place and look:
    it is the outermost text of the page (nothing lies above a head or below a foot), a gap
    of at least its own line's height keeps it off the text, and the same slot (band, position,
    style of its first line) is filled so on many pages. A heading or a last line of a paragraph
    at the top of a page is set against the text, not apart from it.
    """
    found: dict[tuple[Any, ...], list[_Item]] = {}
    for page, it, _ in marked:
        # furniture found already counts for its slot, so that a head the repetition rule missed
        # (a chapter one page long) is still known by the place the others hold
        if it.lines > 2 or (it.style is None and not it.info):
            continue
        top = it.y1 <= page.height * _MARGIN_Y
        if not top and it.y0 < page.height * (1 - _MARGIN_Y):
            continue  # a side strip
        gap = (it.y1 - it.y0) / it.lines if it.lines > 1 and it.y1 - it.y0 > 14 else it.y1 - it.y0
        others = [o for o in page.items if o is not it and id(o) not in drop]
        if top:
            apart = all(o.y0 >= it.y1 + gap for o in others if o.y1 > page.height * _MARGIN_Y)
            outer = all(o.y0 >= it.y0 - 1 for o in others)
        else:
            apart = all(o.y1 <= it.y0 - gap for o in others if o.y0 < page.height * (1 - _MARGIN_Y))
            outer = all(o.y1 <= it.y1 + 1 for o in others)
        if not (apart and outer):
            continue
        style = it.style if it.style is not None else it.info[0].first  # type: ignore[index]
        key = (top, round((it.y0 if top else page.height - it.y1) / 2), style)
        found.setdefault(key, []).append(it)
    out: set[int] = set()
    for items in found.values():
        if len({it.page for it in items}) >= many:
            out.update(id(it) for it in items if id(it) not in drop)
    return out


def _runs_into_text(page: _Page, it: _Item) -> bool:
    """Whether a band line is the first line of the text below it (top band) or the last of the
    text above it (bottom band), which touches it.

    A running head or foot is set off from the text by a gap; a line the text runs on from or
    into (a stat block's "STR DEX CON …" row at the head or the foot of a column) is text, however
    often its words come back in the band.
    """
    top, bottom = page.height * _MARGIN_Y, page.height * (1 - _MARGIN_Y)
    touch = 0.3 * min(it.y1 - it.y0, 12.0)
    if it.y1 <= top:
        return any(
            o is not it and o.y1 > top and o.x0 < it.x1 and o.x1 > it.x0 and -1.0 <= o.y0 - it.y1 < touch
            for o in page.items
        )
    if it.y0 >= bottom:
        return any(
            o is not it and o.y0 < bottom and o.x0 < it.x1 and o.x1 > it.x0 and -1.0 <= it.y0 - o.y1 < touch
            for o in page.items
        )
    return False


def _drop_furniture(pages: list[_Page]) -> int:
    """Remove running heads, footers and page numbers; returns how many lines were dropped.

    Margin text (the top and bottom bands, and the outer side strips) is page furniture when the
    same text (digits aside) comes back on a run of nearby pages: within two pages, so that a
    head printed on odd pages only, or one per chapter, counts; or on many pages anywhere. A
    page number is furniture wherever it stands in a band. Once furniture has shown where it is
    set (band, position and style), a short line set the same way on any other page is
    furniture too: the head of a chapter one page long, or a head that joins the left and right
    heads on one baseline.
    """
    occurrences: dict[str, list[int]] = {}
    marked: list[tuple[_Page, _Item, str]] = []
    for page in pages:
        top, bottom = page.height * _MARGIN_Y, page.height * (1 - _MARGIN_Y)
        left, right = page.width * _MARGIN_X, page.width * (1 - _MARGIN_X)
        for it in page.items:
            if it.kind is not None:
                continue
            if it.y1 <= top or it.y0 >= bottom or it.x1 <= left or it.x0 >= right:
                key = _furniture_key(it.text)
                marked.append((page, it, key))
                seen = occurrences.setdefault(key, [])
                if not seen or seen[-1] != page.number:
                    seen.append(page.number)
    many = max(3, int(0.3 * len(pages)))
    furniture: set[str] = set()
    for key, numbers in occurrences.items():
        if len(numbers) >= many:
            furniture.add(key)
            continue
        # a run: three occurrences, each within two pages of the next
        run = 1
        for a, b in zip(numbers, numbers[1:], strict=False):
            run = run + 1 if b - a <= 2 else 1
            if run >= 3:
                furniture.add(key)
                break
    drop: set[int] = set()
    slots: Counter[tuple[Any, ...]] = Counter()
    for page, it, key in marked:
        if (key in furniture and not _runs_into_text(page, it)) or _PAGE_NUMBER.match(it.text):
            drop.add(id(it))
            if key in furniture and it.style is not None and it.lines == 1:
                slots[_slot(it, page)] += 1
    for page, it, _ in marked:
        slot = id(it) not in drop and it.lines == 1 and it.style is not None and slots[_slot(it, page)] >= 3
        if slot and not _runs_into_text(page, it):
            drop.add(id(it))
    drop |= _outer_slots(pages, marked, drop, many)
    # A bare page number set a little above the bottom band (or below the top one) is still one
    # when nothing of the page lies beyond it.
    for page in pages:
        for it in page.items:
            if id(it) in drop or it.kind is not None or it.lines != 1 or not _PAGE_NUMBER.match(it.text):
                continue
            last = it.y0 >= page.height * 0.8 and all(o.y0 < it.y0 for o in page.items if o is not it)
            first = it.y1 <= page.height * 0.15 and all(o.y1 > it.y1 for o in page.items if o is not it)
            if last or first:
                drop.add(id(it))
    if drop:
        for page in pages:
            page.items = [it for it in page.items if id(it) not in drop]
    return len(drop)
