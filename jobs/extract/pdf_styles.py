"""One PDF page's text blocks and their styles: sizes, bold, monospace and bold terms, read from
MuPDF's HTML lines (or, where they do not match, its XHTML and its block structures), and headings
cut off the blocks MuPDF merged them into.

Two repairs of MuPDF's blocks hold across typesetters: a bold section number set a quad from its
title on one baseline is one line with it (not two table cells), and a drop cap (a lone letter
twice the size of the lower-case paragraph beside it) goes back to the start of its paragraph.
Only the ends of a long block, and its lines holding bold or another colour, are read span by
span: the middle of a paragraph holds neither a heading nor a label.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pymupdf
from pymupdf import mupdf

from jobs.extract.pdf_items import _GLYPH_START, _MAX_HEADING_CHARS, _MAX_HEADING_LINES, _Item
from jobs.extract.typography import HtmlLine, Line, Style, clean_text, line_style, read_line

_BOLD = re.compile(r"<b>(.*?)</b>")
_TAG = re.compile(r"<[^>]+>")
_TERM_STRIP = " \t:.,;–—-(["


def _read_sizes(textpage: Any, wanted: set[int]) -> dict[int, float]:
    """Font size of the first character of the blocks whose indexes are in ``wanted``.

    Walks MuPDF's block list directly: reading a handful of blocks this way costs microseconds,
    where building the whole page as a dict costs a third of the page's extraction time.
    """
    sizes: dict[int, float] = {}
    block = textpage.this.m_internal.first_block
    index = 0
    remaining = len(wanted)
    wrap = mupdf.FzStextBlock
    while block is not None and remaining:
        if index in wanted:
            remaining -= 1
            # begin() yields the block's first line; its m_internal is MuPDF's own struct.
            line = wrap(block).begin().m_internal
            ch = line.first_char if line is not None else None
            sizes[index] = ch.size if ch is not None else 0.0
        block = block.next
        index += 1
    return sizes


def _apply_xhtml(items: list[_Item], xhtml_lines: list[str]) -> None:
    """Bold terms, wholly-bold and monospaced blocks from MuPDF's XHTML (one line per block)."""
    for it in items:
        if it.index >= len(xhtml_lines):
            continue
        line = xhtml_lines[it.index]
        if "<tt>" in line and line.startswith("<p><tt>") and line.endswith("</tt></p>"):
            it.mono = True
        if "<b>" not in line:
            continue
        line = line.replace("</b><b>", "")
        terms: list[str] = []
        bold_chars = 0
        for raw in _BOLD.findall(line):
            term = " ".join(html.unescape(_TAG.sub("", raw)).split())
            bold_chars += len(term) - term.count(" ")
            term = term.strip(_TERM_STRIP).rstrip(")]")
            if term and len(term) <= 80 and term.count(" ") < 8 and not term.isdigit():
                terms.append(term)
        text = it.text
        text_chars = len(text) - text.count(" ") - text.count("\n")
        it.bold = text_chars > 0 and bold_chars >= 0.9 * text_chars
        if terms:
            it.bold_terms = list(dict.fromkeys(terms))


def _may_be_heading(it: _Item) -> bool:
    """Cheap test on text and shape alone: could this block be a heading?"""
    text = it.text
    if it.lines > _MAX_HEADING_LINES or len(text) > _MAX_HEADING_CHARS:
        return False
    end = text.rstrip()[-1:]
    # Headings do not end like sentences or clauses, and bullets start list items.
    return end not in ".,;" and not _GLYPH_START.match(text) and any(ch.isalpha() for ch in text[:40])


def _page_items(textpage: Any, number: int, rotation_matrix: Any, lines: list[HtmlLine] | None = None) -> list[_Item]:
    """The page's text blocks; with ``lines`` (:func:`page_lines`), each gets its lines' styles.

    The HTML has one ``<p>`` per line of the text page, block after block, so a block of n lines
    takes the next n; when the first of them does not stand in the block's box (the two outputs
    disagree), the page's blocks keep MuPDF's text without styles.
    """
    items = []
    cursor = 0
    n_lines = len(lines) if lines else 0
    for x0, y0, x1, y1, text, index, kind in textpage.extractBLOCKS():
        if kind != 0:
            continue
        count = text.count("\n") or 1
        raw: list[HtmlLine] | None = None
        if cursor < n_lines:
            raw = lines[cursor : cursor + count]  # type: ignore[index]
            cursor += count
            top = float(raw[0][0])
            if len(raw) != count or not y0 - 3 <= top <= y1 + 3:
                raw = None
                n_lines = 0  # out of step: the rest of the page goes without styles
        if not text or text.isspace():
            continue
        if raw and count > 1 and "\n" in text[:12]:
            text, raw = _join_numbers(text, raw)
            count = len(raw)
        if rotation_matrix is not None:
            rect = pymupdf.Rect(x0, y0, x1, y1) * rotation_matrix
            x0, y0, x1, y1 = rect.x0, rect.y0, rect.x1, rect.y1
        item = _Item(x0, y0, x1, y1, text, count, index, number)
        if raw:
            _style_item(item, raw)
        items.append(item)
    return items


# A bare section number: "3", "3.2", "3.2.1.", "A.1"; MuPDF cuts it off its title at the wide space
# (a quad) typesetters put between them.
_BARE_NUMBER = re.compile(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.?$")


def _join_numbers(text: str, raw: list[HtmlLine]) -> tuple[str, list[HtmlLine]]:
    """Join a bare section number to the title beside it on the same baseline ("1.2" + "Cantrips").

    LaTeX and other typesetters set a heading's number a quad away from its title, and MuPDF
    makes two lines of it, side by side: read as such they look like a table row (a number
    cell and a text cell) and the heading is lost in a table. A bold number followed on its
    baseline by bold text is one line with it (headings are set bold in LaTeX's and Word's
    standard styles); a plain one is left alone, as it may be a table's first column ("1",
    "Weasel").
    """
    lines = text.split("\n")
    if not _BARE_NUMBER.match(lines[0].strip()):
        return text, raw
    out_lines: list[str] = []
    out_raw: list[HtmlLine] = []
    n = 0
    while n < len(raw):
        line = lines[n]
        if (
            n + 1 < len(raw)
            and _BARE_NUMBER.match(line.strip())
            and raw[n][3].startswith("<b>")
            and raw[n + 1][3].startswith("<b>")
            and abs(float(raw[n + 1][0]) - float(raw[n][0])) < 1.5
            and lines[n + 1].strip()
        ):
            out_lines.append(f"{line.strip()} {lines[n + 1].strip()}")
            a, b = raw[n], raw[n + 1]
            out_raw.append((a[0], a[1], max(a[2], b[2], key=float), f"{a[3]}<span> </span>{b[3]}"))
            n += 2
            continue
        out_lines.append(line)
        out_raw.append(raw[n])
        n += 1
    return "\n".join(out_lines) + "\n", out_raw


def _join_drop_caps(items: list[_Item]) -> list[_Item]:
    """Put a drop cap back at the start of its paragraph ("S" + "pells are listed…").

    A drop cap is a single capital set several lines tall beside the paragraph it opens; MuPDF
    reads it as a block (or a line) of its own, which would make a one-letter heading and
    leave the paragraph's first word cut. It is a lone letter at least twice the size of the
    block that starts beside it, level with its top, with a word going on in lower case.
    """
    out = []
    for it in items:
        letter = it.text.strip()
        if len(letter) != 1 or not letter.isalpha() or not it.size:
            out.append(it)
            continue
        beside = [
            o
            for o in items
            if o is not it
            and o.x0 >= it.x0
            and it.y0 - 2 <= o.y0 <= it.y0 + 0.5 * (it.y1 - it.y0)
            and o.text[:1].islower()
            and o.size
            and it.size >= 2 * o.size
        ]
        if not beside:
            out.append(it)
            continue
        target = min(beside, key=lambda o: (o.x0 - it.x1) ** 2 + (o.y0 - it.y0) ** 2)
        target.text = letter + target.text
        target.x0 = min(target.x0, it.x0)
        if target.info:
            target.info[0].text = letter + target.info[0].text
    return out


def _style_item(it: _Item, raw: list[HtmlLine]) -> None:
    """Styles of a block from its HTML lines: a look-up per line when it is set in one style."""
    style: Style | None = None
    mono = False
    for line in raw:
        one = line_style(line[3])
        if one is None:
            break
        if style is None:
            style, mono = one
        elif one[0] != style:
            break
    else:
        if style is not None:
            it.styled = True
            it.style = style
            it.size = style[1]
            it.bold = style[2]
            it.mono = mono
            if style[2]:
                _bold_terms(it, it.text.split("\n"))
            return
    texts = it.text.split("\n")
    read = _read_edges(raw, texts) if len(raw) > 2 * _EDGE_LINES else list(map(read_line, raw, texts))
    if any(line is not None and line.text is not text for line, text in zip(read, texts, strict=False)):
        # small capitals read back in their case (see :func:`read_line`)
        it.text = "\n".join(line.text if line is not None else text for line, text in zip(read, texts, strict=False))
        it.text = it.text.rstrip("\n") + "\n"
    info = [line for line in read if line is not None]
    if info:
        _apply_styles(it, info)


# The lines at each end of a long block whose styles are read in full: a heading merged into the
# block sits there (:func:`_split_styles` cuts at most three lines off either end, and looks at
# the line before a trailing run).
_EDGE_LINES = 4
_FIRST_COLOUR = re.compile(r"color:#([0-9a-fA-F]{6})")


def _read_edges(raw: list[HtmlLine], texts: list[str]) -> list[Line | None]:
    """A long block's lines: the first and last four read in full, and of those between only
    the lines that hold bold (bold terms, run-in labels) or open in another colour (a label
    in colour); the others are plain running text, kept with their text and no style.

    Reading every span of every line is the largest Python cost of a page; the middle of a
    paragraph can hold neither a heading nor, without bold or colour, a label.
    """
    colour = _FIRST_COLOUR.search(raw[0][3])
    base = colour.group(1) if colour else ""
    out: list[Line | None] = []
    last = len(raw) - _EDGE_LINES
    for n, (line, text) in enumerate(zip(raw, texts, strict=False)):
        inner = line[3]
        if n < _EDGE_LINES or n >= last or "<b>" in inner:
            out.append(read_line(line, text))
            continue
        found = _FIRST_COLOUR.search(inner)
        if found is not None and found.group(1) != base:
            out.append(read_line(line, text))
        elif not text or text.isspace():
            out.append(None)
        else:
            out.append(Line(float(line[0]), float(line[1]), float(line[2]), text, uniform=False))
    return out


# A book repeats its bold spans ("Casting Time:", "Range:", entry names): each is read once.
_TERMS: dict[str, str | None] = {}


def _term(raw: str) -> str | None:
    """The bold term a bold span holds, or None when it is no term (a number, a long phrase)."""
    found = _TERMS.get(raw, False)
    if found is False:
        term = " ".join(raw.split()).strip(_TERM_STRIP).rstrip(")]")
        found = clean_text(term) if term and len(term) <= 80 and term.count(" ") < 8 and not term.isdigit() else None
        if len(_TERMS) >= 8192:
            _TERMS.clear()
        _TERMS[raw] = found
    return found  # type: ignore[return-value]


def _bold_terms(it: _Item, spans: list[str]) -> None:
    terms = [term for term in map(_term, spans) if term is not None]
    if terms:
        it.bold_terms = list(dict.fromkeys(terms))


def _apply_styles(it: _Item, info: list[Line]) -> None:
    """Size, weight, monospace, bold terms and the uniform style of a block, from its lines."""
    it.styled = True
    it.info = info
    first = info[0].first
    it.size = first[1] if first else 0.0
    style = first if all(line.uniform and line.first == first for line in info) else None
    it.style = style
    it.bold = bool(style and style[2])
    it.mono = all(line.mono for line in info)
    if style is not None:
        it.info = None  # one style: the lines are not needed
    spans = [span for line in info if line.bold for span in line.bold]
    if spans:
        _bold_terms(it, spans)


def _runs(info: list[Line]) -> list[tuple[int, int]]:
    """Spans ``[a, b)`` of consecutive lines set wholly in one style."""
    runs = []
    a = 0
    while a < len(info):
        style = info[a].first if info[a].uniform else None
        b = a + 1
        if style is not None:
            while b < len(info) and info[b].uniform and info[b].first == style:
                b += 1
        runs.append((a, b))
        a = b
    return runs


def _part(it: _Item, info: list[Line]) -> _Item:
    y0 = min(line.top for line in info) - 1.0
    y1 = max(line.top + line.height for line in info)
    part = _Item(
        it.x0,
        max(it.y0, y0),
        it.x1,
        min(it.y1, y1) if y1 > y0 else it.y1,
        "\n".join(line.text for line in info) + "\n",
        len(info),
        it.index,
        it.page,
    )
    _apply_styles(part, info)
    return part


def _lines_of(it: _Item, keep: list[int]) -> _Item:
    """The lines of block ``it`` numbered in ``keep``, as a block with their styles (its box is the
    caller's to set)."""
    if it.info is not None and len(it.info) == it.lines:
        return _part(it, [it.info[n] for n in keep])
    lines = it.text.split("\n")
    part = _Item(it.x0, it.y0, it.x1, it.y1, "\n".join(lines[n] for n in keep) + "\n", len(keep), it.index, it.page)
    part.size, part.bold, part.mono, part.styled, part.style = it.size, it.bold, it.mono, it.styled, it.style
    part.bold_terms = [t for t in it.bold_terms if t in part.text] if it.bold_terms else None
    return part


def _split_styles(items: list[_Item]) -> list[_Item]:
    """Cut a heading off the block MuPDF merged it into ("Acid Splash" over its first body line).

    A block splits after a leading run of at most three lines set wholly in one style when the
    next line opens in another style (or opens with a run-in label), and before a trailing run
    of at most three such lines set bold or larger than the line before. Run-in labels ("Range:
    60 feet") are lines of two styles, so they never split off.
    """
    out: list[_Item] = []
    for it in items:
        info = it.info
        if it.kind is not None or info is None or len(info) < 2 or it.style is not None:
            out.append(it)
            continue
        runs = _runs(info)
        if len(runs) < 2:
            out.append(it)
            continue
        cuts = []
        start = 0
        for a, b in runs[:-1]:
            nxt = info[b]
            uniform = info[a].uniform
            if not uniform or b - a > _MAX_HEADING_LINES:
                break
            if (nxt.first is None or nxt.first == info[a].first) and not nxt.runin:
                break  # the same style goes on (or a line not read span by span: plain text)
            cuts.append(b)
            start = b
        a, b = runs[-1]
        if b - a <= _MAX_HEADING_LINES and a > start and info[a].uniform:
            style, before = info[a].first, info[a - 1].last
            if style and before and style != before and (style[1] > before[1] or (style[2] and not before[2])):
                cuts.append(a)
        if not cuts:
            out.append(it)
            continue
        edges = [0, *cuts, len(info)]
        for x, y in zip(edges, edges[1:], strict=False):
            if y > x:
                out.append(_part(it, info[x:y]))
    return out
