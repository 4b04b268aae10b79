"""Extract text, structure and images from PDFs with PyMuPDF, fast enough for bulk ingestion.

Per page, MuPDF builds one text page (the expensive step, which plain ``page.get_text()`` pays
too), and everything is read from it with the two cheapest outputs MuPDF has:

* ``extractBLOCKS`` gives each block's box and text: reading order, tables and page furniture are
  worked out from the boxes;
* ``extractXHTML`` gives, per block and in the same order, the text with ``<b>``/``<tt>`` marks:
  bold terms, bold headings and code come from there.

Font sizes are read straight from MuPDF's structures only for the few blocks that could be
headings (at most three lines) and for the two longest blocks of each page (the body size), which
is far cheaper than ``get_text("dict")`` for the whole page (that alone costs ~30 % of the time).

Reading order is a recursive XY cut over the block boxes that tries columns first: a page is cut at
vertical gutters, else at horizontal gaps, and consecutive multi-column bands are merged before they
are cut into columns, so two columns whose paragraph gaps happen to line up still read column by
column, while a full-width heading between two column sets stays between them.

Headings come from the outline (TOC) where its titles match a block on the page they point to, and
otherwise from font sizes relative to the body size (larger sizes rank higher) and from short,
wholly bold blocks at body size (the lowest level). Running headers, footers and page numbers
(margin text repeated on many pages) are dropped before headings are ranked.

Tables are looked for only where the block boxes show table rows (blocks whose lines sit side by
side, or rows of several short blocks). ``TableMode.ACCURATE`` (the default) builds the cells from
the rules drawn in that region (:mod:`jobs.extract.ruling`: lines, hairline boxes, cell boxes) and
fills them with the words of the same text page, and otherwise builds the Markdown from the block
geometry when the rows have a consistent number of cells; ``TableMode.FAST`` uses the geometry
alone.

Pages without a text layer are OCR'd through tesseract when its data is installed (see
:mod:`jobs.extract.ocr`), else counted in ``ocr_pages_skipped`` with a warning.
"""

from __future__ import annotations

import html
import logging
import os
import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pymupdf
from pymupdf import mupdf

from jobs.document import Block, BlockKind, ExtractedDocument, ExtractedImage
from jobs.errors import CorruptDocument, EmptyDocument, EncryptedDocument
from jobs.extract.formats import classify_paragraph, markdown_table, split_list_items
from jobs.extract.ocr import OcrConfig, resolve_ocr
from jobs.extract.ruling import edges_in, ruled_tables
from jobs.extract.typography import HtmlLine, Line, Style, clean_text, join_lines, line_style, page_lines, read_line

__all__ = ["ImageSink", "PdfInfo", "TableMode", "extract_pdf", "open_pdf", "pdf_info"]

_log = logging.getLogger(__name__)

ImageSink = Callable[[str, bytes, str], str]
"""Saves an image: ``sink(name, data, mime) -> blob_key``."""

# Ligatures expanded ("ﬁ" -> "fi": search matches), clipped to the page, hyphenated line ends joined.
_TEXT_FLAGS = pymupdf.TEXT_MEDIABOX_CLIP | pymupdf.TEXT_USE_CID_FOR_UNKNOWN_UNICODE | pymupdf.TEXT_DEHYPHENATE
# A page with fewer visible characters than this, and an image on it, is treated as a scan.
_MIN_TEXT_CHARS = 16
_HEADING_SIZE_RATIO = 1.15  # a line this much larger than the body size can be a heading
_MAX_HEADING_CHARS = 200
_MAX_HEADING_LINES = 3
_MAX_BOLD_HEADING_WORDS = 14
_MAX_LEVELS = 6
_MARGIN_Y = 0.085  # share of the page height at the top and bottom where running heads live
_MARGIN_X = 0.06
_COLUMN_GAP = 3.0  # points of white space that make a gutter
_PAGE_NUMBER = re.compile(
    r"^\s*(?:page\s*)?(?:\d+|(?=[ivxlc])c{0,3}(?:x[cl]|l?x{0,3})(?:i[xv]|v?i{0,3}))(?:\s*(?:of|/)\s*\d+)?\s*$",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_BOLD = re.compile(r"<b>(.*?)</b>")
_TAG = re.compile(r"<[^>]+>")
_TERM_STRIP = " \t:.,;–—-(["
# Characters of formulas (operators, arrows, set symbols, delimiters drawn as text).
# Signs, brackets and ≤/≥ are left out: "+4", "(+2)" and "≤ 3" are common in game tables.
_MATH = frozenset("=×÷·∑∏∫√∞∂∇∈∉∋⊂⊃⊆⊇∪∩∅∀∃¬∧∨⇒⇔→←↔↦≠≈≡∼⊕⊗|{}⟨⟩˙̸")
_GLYPH_START = re.compile(r"^\s*[•◦▪▫●○■□➢►▶✓✔·∙‣⁃]")
_HEADING_NUMBER = re.compile(r"^(?:(?:chapter|part|section|appendix)\s+)?[\dIVXLC]+(?:\.\d+)*[.:)]?\s+", re.I)
# Every path in a content stream starts with a "m" (moveto) or "re" (rectangle) operator, and
# form XObjects ("Do") can hold paths of their own: a page whose streams have neither draws no rules.
_PATH_START = re.compile(rb"(?<![^\s()<>\[\]{}/%])(?:m|re|Do)(?![^\s()<>\[\]{}/%])")


class TableMode(StrEnum):
    """How PDF tables are found and turned into Markdown."""

    ACCURATE = "accurate"  # cells from the rules drawn in table-like regions, else block geometry
    FAST = "fast"  # Markdown from the block layout alone: several times cheaper, no cell ruling
    OFF = "off"  # tables stay as text blocks


@dataclass(frozen=True, slots=True)
class PdfInfo:
    """What a PDF is, without reading its text.

    Attributes:
        page_count: pages in the document.
        encrypted: whether the file is encrypted (even if it opens without a password).
        needs_password: whether a password is needed to read it.
        form_fields: number of AcroForm fields (0 when it is no form).
        toc_entries: number of outline (bookmark) entries.
        title: the title in the metadata, if any.
    """

    page_count: int
    encrypted: bool
    needs_password: bool
    form_fields: int
    toc_entries: int
    title: str | None


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


def _is_path(source: object) -> bool:
    return isinstance(source, str | os.PathLike)


def open_pdf(source: bytes | str | os.PathLike[str], filename: str, *, password: str | None = None) -> Any:
    """Open a PDF for reading, authenticating it when it is encrypted.

    Returns:
        The open ``pymupdf.Document`` (the caller closes it).

    Raises:
        EmptyDocument: the file is empty or the PDF has no pages.
        CorruptDocument: the bytes are not a readable PDF (or its page tree is lost).
        EncryptedDocument: it needs a password and none, or a wrong one, was given.
    """
    if not _is_path(source) and len(source) == 0:  # type: ignore[arg-type]
        raise EmptyDocument(filename, "the file is empty (0 bytes)")
    if _is_path(source) and Path(source).stat().st_size == 0:  # type: ignore[arg-type]
        raise EmptyDocument(filename, "the file is empty (0 bytes)")
    try:
        doc = pymupdf.open(source, filetype="pdf") if _is_path(source) else pymupdf.open(stream=source, filetype="pdf")
    except Exception as exc:  # MuPDF raises FileDataError, RuntimeError, ValueError…
        raise CorruptDocument(filename, str(exc) or type(exc).__name__) from exc
    if not doc.is_pdf:
        # MuPDF opens whatever it can read, told "pdf" or not: images, HTML, XPS, EPUB, CBZ…
        # (extract_document routes the types it recognises; this catches the rest).
        what = (doc.metadata or {}).get("format") or "another format"
        doc.close()
        raise CorruptDocument(filename, f"it is not a PDF; MuPDF reads it as {what}")
    if doc.needs_pass:
        if password is None:
            doc.close()
            raise EncryptedDocument(filename, password_given=False)
        if not doc.authenticate(password):
            doc.close()
            raise EncryptedDocument(filename, password_given=True)
    if doc.page_count == 0:
        repaired = doc.is_repaired
        doc.close()
        if repaired:
            raise CorruptDocument(filename, "MuPDF repaired the file but found no pages: its page tree is lost")
        raise EmptyDocument(filename, "the PDF has no pages")
    return doc


def pdf_info(source: bytes | str | os.PathLike[str], filename: str, *, password: str | None = None) -> PdfInfo:
    """Describe a PDF: pages, encryption, form fields, outline.

    An encrypted PDF is described without a password as far as its unencrypted parts allow
    (its page count); everything else needs the password.

    Raises:
        EmptyDocument, CorruptDocument: as :func:`open_pdf`.
    """
    try:
        doc = open_pdf(source, filename, password=password)
    except EncryptedDocument:
        doc = pymupdf.open(source, filetype="pdf") if _is_path(source) else pymupdf.open(stream=source, filetype="pdf")
        with doc:
            return PdfInfo(doc.page_count, True, True, 0, 0, None)
    with doc:
        fields = doc.is_form_pdf or 0
        metadata = doc.metadata or {}
        return PdfInfo(
            page_count=doc.page_count,
            encrypted=bool(metadata.get("encryption")) or bool(doc.is_encrypted),
            needs_password=False,
            form_fields=int(fields),
            toc_entries=len(doc.get_toc(simple=True)),
            title=_clean_title(metadata.get("title")),
        )


_FILE_NAME_TITLE = re.compile(r"\.(?:exe|docx?|pdf|indd|qxd|tex|dvi|ps|rtf|odt|pages)$|^[A-Z]?-?\d[\d-]*$", re.I)


def _clean_title(title: str | None) -> str | None:
    """The metadata title, unless it is a file name or a form number left by the producing tool."""
    if not title:
        return None
    title = title.replace("\x00", "").strip()
    return title if title and not _FILE_NAME_TITLE.search(title) else None


# ---------------------------------------------------------------------------------------------
# reading order
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------


def _line_pitch(items: list[_Item]) -> float:
    """Typical distance between text lines on the page, from its multi-line paragraphs."""
    pitches = [(it.y1 - it.y0) / it.lines for it in items if it.lines >= 3 and len(it.text) > 40 * it.lines / 2]
    return statistics.median(pitches) if pitches else 12.0


def _cellish(cells: list[str]) -> bool:
    """Whether text fragments read like table cells rather than pieces of a formula."""
    math = 0
    chars = 0
    for cell in cells:
        if not any(ch.isalnum() for ch in cell):
            return False
        for ch in cell:
            if not ch.isspace():
                chars += 1
                if ch in _MATH or "\ue000" <= ch <= "\uf8ff":
                    math += 1
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
    for it in rows:
        for region in regions:
            last = region[-1]
            overlaps = it.x0 < max(r.x1 for r in region) and it.x1 > min(r.x0 for r in region)
            if overlaps and it.y0 - last.y1 < 2.5 * pitch:
                region.append(it)
                break
        else:
            regions.append([it])
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


def _may_draw(page: Any) -> bool:
    """Whether the page's content streams can draw a path (a cheap scan before the drawings pass).

    Reading the streams costs a few hundredths of the time ``get_cdrawings`` takes to interpret
    the page; a false "yes" (a "m" in a string, say) only costs that pass.
    """
    try:
        return _PATH_START.search(page.read_contents()) is not None
    except Exception:  # a stream MuPDF cannot decode: let the drawings pass decide
        return True


def _table_item(bbox: Any, markdown: str, index: int, page: int) -> _Item:
    return _Item(
        bbox[0], bbox[1], bbox[2], bbox[3], markdown, markdown.count("\n") + 1, index, page, kind=BlockKind.TABLE
    )


def _replace_tables(
    page: Any, textpage: Any, items: list[_Item], mode: TableMode, rotation_matrix: Any, height: float
) -> list[_Item]:
    """Replace the blocks of each table found on the page by one TABLE item (Markdown)."""
    regions = _table_regions(items, height)
    if not regions:
        return items
    number = items[0].page
    drawings: list[dict[str, Any]] | None = None
    words: list[Any] | None = None
    for region in regions:
        tables: list[tuple[Any, str]] = []
        if mode is TableMode.ACCURATE:
            # Rules and words are read in page space, where the text runs as written (a page
            # turned by /Rotate is read as drawn, like its text); boxes go back to display space.
            if drawings is None:
                drawings = page.get_cdrawings() if _may_draw(page) else []
            if drawings:
                if words is None:
                    words = textpage.extractWORDS()
                clip = _region_rect(region)
                if rotation_matrix is not None:
                    clip = tuple(pymupdf.Rect(clip) * ~rotation_matrix)
                try:
                    found = ruled_tables(edges_in(drawings, clip), words)
                    tables = [(bbox, markdown_table(rows)) for bbox, rows in found]
                except Exception as exc:  # a table failure must not lose the page's text
                    _log.warning("ruled tables failed on page %d: %s", number, exc)
                if rotation_matrix is not None:
                    tables = [(tuple(pymupdf.Rect(bbox) * rotation_matrix), md) for bbox, md in tables]
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
            if inside:
                items = [it for it in items if it not in inside]
                items.append(_table_item(bbox, markdown, inside[0].index, number))
    return items


# ---------------------------------------------------------------------------------------------
# one page
# ---------------------------------------------------------------------------------------------


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


def _needs_ocr(page: Any, items: list[_Item]) -> bool:
    chars = 0
    for it in items:
        chars += len(it.text) - it.text.count(" ") - it.text.count("\n")
        if chars >= _MIN_TEXT_CHARS:
            return False
    # Text-less and image-less pages are simply blank.
    return bool(page.get_images(full=False))


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
        if rotation_matrix is not None:
            rect = pymupdf.Rect(x0, y0, x1, y1) * rotation_matrix
            x0, y0, x1, y1 = rect.x0, rect.y0, rect.x1, rect.y1
        item = _Item(x0, y0, x1, y1, text, count, index, number)
        if raw:
            _style_item(item, raw)
        items.append(item)
    return items


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
    info = [line for line in map(read_line, raw, texts) if line is not None]
    if info:
        _apply_styles(it, info)


def _bold_terms(it: _Item, spans: list[str]) -> None:
    terms: list[str] = []
    for raw in spans:
        term = " ".join(raw.split()).strip(_TERM_STRIP).rstrip(")]")
        if term and len(term) <= 80 and term.count(" ") < 8 and not term.isdigit():
            terms.append(clean_text(term))
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


@dataclass(slots=True)
class _Options:
    ocr: OcrConfig | None
    ocr_reason: str
    tables: TableMode
    image_sink: ImageSink | None
    min_image_side: int


@dataclass(slots=True)
class _Tally:
    ocr_pages: int = 0
    ocr_skipped: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    images: list[ExtractedImage] = field(default_factory=list)
    seen_images: set[Any] = field(default_factory=set)


def _read_page(page: Any, options: _Options, tally: _Tally) -> _Page:
    number = page.number + 1
    rotation_matrix = page.rotation_matrix if page.rotation else None
    rect = page.rect
    width, height = rect.width, rect.height
    textpage = page.get_textpage(flags=_TEXT_FLAGS)
    items = _page_items(textpage, number, rotation_matrix, page_lines(textpage.extractHTML()))
    ocr = False
    if _needs_ocr(page, items):
        if options.ocr is None:
            tally.ocr_skipped.append(number)
        else:
            try:
                textpage = page.get_textpage_ocr(
                    flags=_TEXT_FLAGS,
                    language=options.ocr.language,
                    dpi=options.ocr.dpi,
                    full=True,
                    tessdata=options.ocr.tessdata,
                )
            except Exception as exc:
                tally.warnings.append(f"page {number}: OCR failed ({exc})")
            else:
                tally.ocr_pages += 1
                ocr = True
                # The OCR text page is already in display (derotated) space.
                items = _page_items(textpage, number, None)
                for it in items:
                    it.ocr = True
    if items and not ocr and not all(it.styled for it in items):
        # Blocks the HTML lines could not be matched to: bold and sizes the older, coarser way.
        missing = [it for it in items if not it.styled]
        _apply_xhtml(missing, textpage.extractXHTML().split("\n")[1:])
        sizes = _read_sizes(textpage, {it.index for it in missing if _may_be_heading(it)})
        for it in missing:
            it.size = sizes.get(it.index, 0.0)
    if items and options.tables is not TableMode.OFF:
        items = _replace_tables(page, textpage, items, options.tables, rotation_matrix, height)
    if options.image_sink is not None:
        _save_images(page, number, options, tally)
    ordered = _reading_order(items)
    split = not ocr and rotation_matrix is None  # line positions are in unrotated page space
    return _Page(number, width, height, _split_styles(ordered) if split else ordered)


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
            if nxt.first == info[a].first and not nxt.runin:
                break
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


_MIME = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "jpx": "image/jp2",
    "jp2": "image/jp2",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "bmp": "image/bmp",
    "gif": "image/gif",
    "jxr": "image/vnd.ms-photo",
    "pnm": "image/x-portable-anymap",
}


def _save_images(page: Any, number: int, options: _Options, tally: _Tally) -> None:
    """Hand the page's images to the sink, each image once per document, skipping tiny ones."""
    doc = page.parent
    for entry in page.get_images(full=False):
        xref, width, height = entry[0], entry[2], entry[3]
        if xref in tally.seen_images:
            continue
        tally.seen_images.add(xref)
        if min(width, height) < options.min_image_side:
            continue
        try:
            image = doc.extract_image(xref)
        except Exception as exc:
            tally.warnings.append(f"page {number}: image {xref} could not be read ({exc})")
            continue
        if not image or not image.get("image"):
            continue
        data = image["image"]
        # The same picture is often embedded under several object numbers.
        digest = hash(data)
        if digest in tally.seen_images:
            continue
        tally.seen_images.add(digest)
        ext = image.get("ext", "png")
        name = f"page{number:04d}-img{xref}.{ext}"
        mime = _MIME.get(ext, "application/octet-stream")
        key = options.image_sink(name, data, mime)  # type: ignore[misc]
        tally.images.append(
            ExtractedImage(number, name, key, image.get("width", width), image.get("height", height), mime)
        )


# ---------------------------------------------------------------------------------------------
# the whole document
# ---------------------------------------------------------------------------------------------


def _furniture_key(text: str) -> str:
    return " ".join(_DIGITS.sub("#", text.lower()).split())


def _slot(it: _Item, page: _Page) -> tuple[Any, ...]:
    """Where and how a margin line is set: band, position (2 pt), style."""
    top = it.y1 <= page.height * _MARGIN_Y
    return (top, round((it.y0 if top else page.height - it.y1) / 2), it.style)


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
        if key in furniture or _PAGE_NUMBER.match(it.text):
            drop.add(id(it))
            if key in furniture and it.style is not None and it.lines == 1:
                slots[_slot(it, page)] += 1
    for page, it, _ in marked:
        if id(it) not in drop and it.lines == 1 and it.style is not None and slots[_slot(it, page)] >= 3:
            drop.add(id(it))
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


def _body_style(pages: list[_Page]) -> Style | None:
    """The style most of the text is set in."""
    weights: Counter[Style] = Counter()
    for page in pages[:: max(1, len(pages) // 200)]:  # a sample of pages is plenty
        for it in page.items:
            if it.kind is not None:
                continue
            if it.style is not None:
                weights[it.style] += len(it.text)
            elif it.info:
                for line in it.info:
                    if line.first is not None:
                        weights[line.first] += len(line.text)
    return weights.most_common(1)[0][0] if weights else None


def _body_size(pages: list[_Page]) -> float:
    weights: Counter[float] = Counter()
    for page in pages:
        for it in page.items:
            if it.size and not it.ocr and it.kind is None:
                weights[round(it.size * 2) / 2] += len(it.text)
    return weights.most_common(1)[0][0] if weights else 0.0


def _norm_title(text: str) -> str:
    text = _HEADING_NUMBER.sub("", " ".join(text.split()))
    return "".join(ch for ch in text.lower() if ch.isalnum())


_SIZE_STEP = 1.04  # a line this much larger than the body size is set apart by size
_CAPTION_LABEL = re.compile(
    r"^(?:table|figure|fig\.|tab\.|illustration|plate|map)\s*(?:[\dIVX]+(?:[.\-–]\d+)*)?\s*[:.—–]\s", re.I
)
_NUMBERED = re.compile(r"^(?:(?:chapter|part|section|appendix|book)\s+)?([\dIVXLC]+(?:\.\d+)*)[.:)]?\s+\S", re.I)


def _looks(it: _Item, body: Style | None, body_size: float) -> str | None:
    """'size', 'bold' or 'style' when a block may be a heading by its looks, else None.

    A heading is short, stands alone (a block of its own, set wholly in one style), does not end
    like a sentence or a clause, is no list item, and is set apart from the body: larger, or bold
    where the body is not. A bold label that opens a paragraph and runs on is not set wholly in
    one style, so it is no heading.
    """
    if it.kind is not None or it.ocr or it.mono or it.lines > _MAX_HEADING_LINES:
        return None
    text = it.text
    if len(text) > _MAX_HEADING_CHARS or not any(ch.isalpha() for ch in text):
        return None
    stripped = " ".join(text.split())
    if stripped[-1] in ".,;:" or _GLYPH_START.match(stripped):
        return None
    style = it.style
    if style is None or body is None:
        if it.styled:
            return None  # several styles: a run-in label, or a paragraph with emphasis
        # no line styles (the HTML did not match): the coarse rule from size and weight
        if body_size and it.size >= body_size * _HEADING_SIZE_RATIO:
            return "size"
        at_body_size = not body_size or not it.size or it.size >= body_size * 0.95
        if it.bold and it.lines <= 2 and at_body_size and len(stripped.split()) <= _MAX_BOLD_HEADING_WORDS:
            return "bold"
        return None
    if style[1] >= body[1] * _SIZE_STEP:
        return "size"
    if style[1] >= body[1] * 0.93 and style[2] and not body[2]:
        return "bold" if len(stripped.split()) <= _MAX_BOLD_HEADING_WORDS else None
    return None


def _level_key(it: _Item) -> tuple[Any, ...]:
    """What ranks a heading: its style and whether it is set in capitals."""
    letters = [ch for ch in it.text if ch.isalpha()]
    caps = len(letters) > 1 and all(ch.isupper() for ch in letters)
    if it.style is not None:
        return (*it.style, caps)
    return ("", round(it.size * 2) / 2, it.bold, False, caps)


def _captions(pages: list[_Page], looks: dict[int, str]) -> set[int]:
    """Items that caption a table: a label ("Table 3:", "Figure 2.") or a line just above a table.

    A heading that happens to stand above a table keeps its role when its style also heads
    text elsewhere: a style mostly seen right above tables is a caption style.
    """
    above: set[int] = set()
    by_key: dict[tuple[Any, ...], list[int]] = {}
    captions: set[int] = set()
    for page in pages:
        items = page.items
        for n, it in enumerate(items):
            if it.kind is not None or it.lines > _MAX_HEADING_LINES or len(it.text) > _MAX_HEADING_CHARS:
                continue
            text = it.text.lstrip()
            if text[:1] in "TtFfIiPpMm" and _CAPTION_LABEL.match(text):
                captions.add(id(it))
                continue
            nxt = items[n + 1] if n + 1 < len(items) else None
            if nxt is not None and nxt.kind is BlockKind.TABLE and 0 <= nxt.y0 - it.y1 < 3 * max(it.size, 8.0):
                above.add(id(it))
            if id(it) in looks:
                by_key.setdefault(_level_key(it), []).append(id(it))
    for ids in by_key.values():
        near = [i for i in ids if i in above]
        if near and len(near) * 2 >= len(ids):
            captions.update(near)
    for page in pages:
        for it in page.items:
            if id(it) in above and id(it) not in looks:
                captions.add(id(it))
    return captions


def _nested(ranked: list[tuple[Any, ...]], sequence: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Reorder styles of one size so that a style comes before the styles nested under it.

    Looks tell styles of different sizes apart, not those of one size (bold and bold italic,
    two families): there the document's own order decides. A style is the child of another
    when, at most of its occurrences, the nearest heading before it in another style of that
    size is that other style (it appears between that style's occurrences, always after one),
    and not the other way round. Styles without such a relation keep their rank.
    """
    by_size: dict[Any, list[tuple[Any, ...]]] = {}
    for key in ranked:
        by_size.setdefault(key[1], []).append(key)
    if all(len(group) == 1 for group in by_size.values()):
        return ranked
    parents: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for group in by_size.values():
        if len(group) < 2:
            continue
        members = set(group)
        before: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {key: Counter() for key in group}
        last: tuple[Any, ...] | None = None
        for key in sequence:
            if key not in members:
                if key[1] > group[0][1]:
                    last = None  # a larger heading opens a new section: nothing before it counts
                continue
            if last is not None and last != key:
                before[key][last] += 1
            last = key
        totals = Counter(key for key in sequence if key in members)
        for key in group:
            if not before[key]:
                continue
            parent, n = before[key].most_common(1)[0]
            if 2 * n > totals[key] and not 2 * before[parent][key] > totals[parent]:
                parents[key] = parent
    out: list[tuple[Any, ...]] = []
    placed: set[tuple[Any, ...]] = set()

    def place(key: tuple[Any, ...], seen: frozenset[tuple[Any, ...]]) -> None:
        if key in placed or key in seen:
            return
        parent = parents.get(key)
        if parent is not None:
            place(parent, seen | {key})
        placed.add(key)
        out.append(key)

    for key in ranked:
        place(key, frozenset())
    return out


def _parents(ranked: list[tuple[Any, ...]], sequence: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The style each heading style is nested under: the one most often nearest before it.

    For each occurrence of a style, the nearest heading before it in a style ranked above it is
    where it sits; the style found there most often is its parent. Two styles under the same
    parent are siblings and share a level, however their looks rank them.
    """
    rank = {key: n for n, key in enumerate(ranked)}
    last: dict[tuple[Any, ...], int] = {}
    seen: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {}
    for position, key in enumerate(sequence):
        r = rank.get(key)
        if r is None:
            continue
        best: tuple[Any, ...] | None = None
        best_position = -1
        for above in ranked[:r]:
            at = last.get(above, -1)
            if at > best_position:
                best, best_position = above, at
        if best is not None:
            seen.setdefault(key, Counter())[best] += 1
        last[key] = position
    return {key: c.most_common(1)[0][0] for key, c in seen.items()}


def _assign_levels(pages: list[_Page], toc: list[list[Any]]) -> dict[int, int]:
    """Heading level per item id: the outline, then numbering, then typographic style.

    Candidates are the blocks :func:`_looks` accepts. Their styles (family, size, weight,
    italics, capitals) are ranked: larger first, bold before regular, capitals before mixed
    case, and of two otherwise equal styles the rarer first; styles of one size are then put in
    their nesting order (:func:`_nested`). Styles the outline's entries are set in take the
    outline's level; the others sit one level below the style they are nested under
    (:func:`_parents`), else below the style ranked just above them.
    Headings numbered "2.3.1" take their depth from the numbering when nothing else places
    them. Table captions are never headings (they become CAPTION blocks, kept with the table).
    """
    body = _body_style(pages)
    body_size = body[1] if body else _body_size(pages)
    looks: dict[int, str] = {}
    items: dict[int, _Item] = {}
    for page in pages:
        for it in page.items:
            kind = _looks(it, body, body_size)
            if kind:
                looks[id(it)] = kind
                items[id(it)] = it

    levels: dict[int, int] = {}
    # 1. The outline, where an entry's title matches a short block of the page it points to.
    toc_by_page: dict[int, dict[str, int]] = {}
    for level, title, page_no, *_ in toc:
        key = _norm_title(str(title))
        if key and page_no >= 1:
            toc_by_page.setdefault(page_no, {}).setdefault(key, level)
    anchors: dict[tuple[Any, ...], Counter[int]] = {}
    if toc_by_page:
        for page in pages:
            wanted = toc_by_page.get(page.number)
            if not wanted:
                continue
            for it in page.items:
                if it.kind is not None or it.lines > _MAX_HEADING_LINES or len(it.text) > _MAX_HEADING_CHARS:
                    continue
                level = wanted.get(_norm_title(it.text))
                if level is not None:
                    levels[id(it)] = min(level, _MAX_LEVELS)
                    if it.style is not None or it.size:
                        anchors.setdefault(_level_key(it), Counter())[level] += 1

    captions = _captions(pages, looks)
    for page in pages:
        for it in page.items:
            if id(it) in captions and id(it) not in levels:
                it.kind = BlockKind.CAPTION
                looks.pop(id(it), None)

    # 2. Typographic style, ranked, anchored to the outline's levels.
    counts: Counter[tuple[Any, ...]] = Counter(_level_key(items[i]) for i in looks)
    ranked = sorted(counts, key=lambda k: (-k[1], not k[2], k[3], not k[4], counts[k], str(k[0])))
    sequence = [_level_key(it) for page in pages for it in page.items if id(it) in looks or id(it) in levels]
    ranked = _nested(ranked, sequence)
    anchored = {key: c.most_common(1)[0][0] for key, c in anchors.items()}
    parents = _parents(ranked, sequence)
    style_level: dict[tuple[Any, ...], int] = {}
    current = 0
    for style_key in ranked:
        if style_key in anchored:
            current = anchored[style_key]
        elif style_key in parents:
            current = min(style_level[parents[style_key]] + 1, _MAX_LEVELS)
        else:
            current = min(current + 1, _MAX_LEVELS)
        style_level[style_key] = current
    for item_id in looks:
        if item_id in levels:
            continue
        it = items[item_id]
        level = style_level[_level_key(it)]
        numbered = _NUMBERED.match(" ".join(it.text.split()))
        if numbered and "." in numbered.group(1) and not anchored:
            # "2.3.1 Cover" sits at depth 3 whatever its size says
            level = min(numbered.group(1).count(".") + 1, _MAX_LEVELS)
        levels[item_id] = level
    return levels


# A word hyphenated at a line end: "de-" + "fines" (soft hyphens too).
_LINE_HYPHEN = re.compile(r"(?<=[^\W\d_])[-\u00ad\u2010][ \t]*\n(?=[^\W\d_A-Z])")


def _join_hyphens(text: str) -> str:
    """Join words hyphenated at a line end; the regular expression runs only where one may be."""
    if "-\n" in text or "- \n" in text or "\u00ad" in text or "\u2010" in text:
        return _LINE_HYPHEN.sub("", text)
    return text


def _paragraph_text(it: _Item) -> list[tuple[BlockKind, str]]:
    """A block's paragraph and list items; a line opening with a run-in label starts a new line."""
    info = it.info
    if not info or not any(line.runin for line in info[1:]):
        text = it.text
        return split_list_items(_join_hyphens(text) if "\n" in text[:-1] else text)
    groups: list[list[str]] = [[]]
    for n, line in enumerate(info):
        if n and line.runin:
            groups.append([])
        groups[-1].append(line.text)
    out: list[tuple[BlockKind, str]] = []
    for group in groups:
        for kind, text in split_list_items(_join_hyphens("\n".join(group))):
            if kind is BlockKind.PARAGRAPH and out and out[-1][0] is BlockKind.PARAGRAPH:
                out[-1] = (kind, out[-1][1] + "\n" + text)
            else:
                out.append((kind, text))
    return out


def _to_blocks(pages: list[_Page], levels: dict[int, int]) -> list[Block]:
    blocks: list[Block] = []
    for page in pages:
        for it in page.items:
            number = page.number
            if it.kind is BlockKind.TABLE:
                blocks.append(Block(BlockKind.TABLE, clean_text(it.text), number))
                continue
            if it.kind is BlockKind.CAPTION:
                blocks.append(Block(BlockKind.CAPTION, clean_text(join_lines(it.text.split("\n"))), number))
                continue
            level = levels.get(id(it))
            if level is not None:
                blocks.append(Block(BlockKind.HEADING, clean_text(join_lines(it.text.split("\n"))), number, level))
                continue
            if it.mono:
                blocks.append(Block(BlockKind.CODE, clean_text(it.text.rstrip("\n")), number))
                continue
            for kind, text in _paragraph_text(it):
                text = clean_text(text)
                if kind is BlockKind.PARAGRAPH:
                    kind = classify_paragraph(text)
                terms = [t for t in it.bold_terms if t in text] if it.bold_terms else []
                blocks.append(Block(kind, text, number, 0, terms))
    return blocks


def extract_pdf(
    source: bytes | str | os.PathLike[str],
    filename: str,
    *,
    password: str | None = None,
    image_sink: ImageSink | None = None,
    ocr: bool | OcrConfig | None = None,
    tables: TableMode = TableMode.ACCURATE,
    min_image_side: int = 64,
) -> ExtractedDocument:
    """Extract a PDF's text in reading order, with headings, tables, bold terms and images.

    Args:
        source: the PDF's bytes or a path to it.
        filename: the file's name, for messages.
        password: opens an encrypted PDF.
        image_sink: saves images (``sink(name, data, mime) -> blob_key``); None skips images.
        ocr: None to OCR text-less pages when tesseract is installed, False never, True to
            require it, or an :class:`OcrConfig`.
        tables: how tables are found (see :class:`TableMode`).
        min_image_side: images narrower or lower than this many pixels are not saved.

    Returns:
        The document, one block per paragraph / heading / list item / table, each with its page.

    Raises:
        EmptyDocument: the file is empty, has no pages, or no text could be read (the error's
            ``ocr_pages_skipped`` says how many pages wait for OCR).
        CorruptDocument: the bytes are not a readable PDF.
        EncryptedDocument: a password is needed and none, or a wrong one, was given.
        MissingDependency: ``ocr=True`` and tesseract is not installed.
    """
    ocr_config, ocr_reason = resolve_ocr(ocr, filename)
    options = _Options(ocr_config, ocr_reason, TableMode(tables), image_sink, min_image_side)
    tally = _Tally()
    doc = open_pdf(source, filename, password=password)
    with doc:
        page_count = doc.page_count
        try:
            toc = doc.get_toc(simple=True)
        except Exception:  # a damaged outline must not stop the text
            toc = []
        title = _clean_title((doc.metadata or {}).get("title"))
        pages: list[_Page] = []
        for page in doc:
            try:
                pages.append(_read_page(page, options, tally))
            except Exception as exc:  # one damaged page must not lose the rest of the book
                _log.warning("%s: page %d could not be read: %s", filename, page.number + 1, exc)
                tally.warnings.append(f"page {page.number + 1} could not be read ({exc})")

    furniture = _drop_furniture(pages)
    levels = _assign_levels(pages, toc)
    blocks = _to_blocks(pages, levels)
    skipped = len(tally.ocr_skipped)
    if skipped:
        shown = ", ".join(map(str, tally.ocr_skipped[:10])) + (", …" if skipped > 10 else "")
        tally.warnings.append(f"{skipped} page(s) have no text layer and were not read ({shown}): {options.ocr_reason}")
    if not blocks:
        if skipped:
            raise EmptyDocument(
                filename,
                f"its {skipped} page(s) are scans without a text layer and {options.ocr_reason}",
                ocr_pages_skipped=skipped,
            )
        raise EmptyDocument(filename, f"none of its {page_count} page(s) holds text")
    if title is None:
        title = next((b.text for b in blocks if b.kind is BlockKind.HEADING), None)
    return ExtractedDocument(
        blocks=blocks,
        page_count=page_count,
        title=title,
        ocr_pages=tally.ocr_pages,
        ocr_pages_skipped=skipped,
        images=tally.images,
        warnings=tally.warnings,
        furniture_dropped=furniture,
    )
