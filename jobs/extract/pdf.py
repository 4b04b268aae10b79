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
    kind: BlockKind | None = None  # set for tables
    ocr: bool = False


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
                drawings = page.get_cdrawings()
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


def _page_items(textpage: Any, number: int, rotation_matrix: Any) -> list[_Item]:
    items = []
    for x0, y0, x1, y1, text, index, kind in textpage.extractBLOCKS():
        if kind != 0 or not text or text.isspace():
            continue
        if rotation_matrix is not None:
            rect = pymupdf.Rect(x0, y0, x1, y1) * rotation_matrix
            x0, y0, x1, y1 = rect.x0, rect.y0, rect.x1, rect.y1
        items.append(_Item(x0, y0, x1, y1, text, text.count("\n") or 1, index, number))
    return items


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
    items = _page_items(textpage, number, rotation_matrix)
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
    if items and not ocr:
        _apply_xhtml(items, textpage.extractXHTML().split("\n")[1:])
        # Font sizes cost ~5 us a block to read: only for blocks that could be headings, and
        # for the longest block of the page (the body size). A heading set larger than the body
        # has taller lines than the body's line pitch; a bold one at body size needs no size.
        pitch = _line_pitch(items) * 1.1 if len(items) > 3 else 0.0
        wanted = {it.index for it in items if _may_be_heading(it) and (it.y1 - it.y0) >= pitch * it.lines}
        wanted.add(max(items, key=lambda it: len(it.text)).index)
        sizes = _read_sizes(textpage, wanted)
        for it in items:
            it.size = sizes.get(it.index, 0.0)
    if items and options.tables is not TableMode.OFF:
        items = _replace_tables(page, textpage, items, options.tables, rotation_matrix, height)
    if options.image_sink is not None:
        _save_images(page, number, options, tally)
    return _Page(number, width, height, _reading_order(items))


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


def _drop_furniture(pages: list[_Page]) -> None:
    """Remove running heads, footers and page numbers: margin text repeated across pages."""
    keys: Counter[str] = Counter()
    marked: list[tuple[_Page, _Item, str]] = []
    for page in pages:
        top, bottom = page.height * _MARGIN_Y, page.height * (1 - _MARGIN_Y)
        left, right = page.width * _MARGIN_X, page.width * (1 - _MARGIN_X)
        seen = set()
        for it in page.items:
            if it.kind is not None:
                continue
            if it.y1 <= top or it.y0 >= bottom or it.x1 <= left or it.x0 >= right:
                key = _furniture_key(it.text)
                marked.append((page, it, key))
                if key not in seen:
                    seen.add(key)
                    keys[key] += 1
    if not marked:
        return
    threshold = max(3, int(0.3 * len(pages)))
    drop = {id(it) for _, it, key in marked if keys[key] >= threshold or _PAGE_NUMBER.match(it.text)}
    if drop:
        for page in pages:
            page.items = [it for it in page.items if id(it) not in drop]


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


def _heading_candidate(it: _Item, body: float) -> str | None:
    """'size' or 'bold' when the block may be a heading by its looks, else None."""
    if it.kind is not None or it.ocr or it.mono or it.lines > _MAX_HEADING_LINES:
        return None
    text = it.text
    if len(text) > _MAX_HEADING_CHARS or not any(ch.isalpha() for ch in text):
        return None
    if body and it.size >= body * _HEADING_SIZE_RATIO:
        return "size"
    # An unread size (0) means the block's lines are no taller than the body's.
    if it.bold and it.lines <= 2 and (not body or not it.size or it.size >= body * 0.95):
        stripped = " ".join(text.split())
        if len(stripped.split()) <= _MAX_BOLD_HEADING_WORDS and stripped[-1] not in ".,;:":
            return "bold"
    return None


def _assign_levels(pages: list[_Page], toc: list[list[Any]]) -> dict[int, int]:
    """Heading level per item id, from the outline where it matches and from font sizes."""
    body = _body_size(pages)
    looks: dict[int, tuple[str, float]] = {}
    for page in pages:
        for it in page.items:
            kind = _heading_candidate(it, body)
            if kind:
                looks[id(it)] = (kind, round(it.size * 2) / 2)

    levels: dict[int, int] = {}
    # 1. The outline, where an entry's title matches a short block of the page it points to.
    toc_by_page: dict[int, dict[str, int]] = {}
    for level, title, page_no, *_ in toc:
        key = _norm_title(str(title))
        if key and page_no >= 1:
            toc_by_page.setdefault(page_no, {}).setdefault(key, level)
    size_to_toc: dict[float, Counter[int]] = {}
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
                    if it.size:
                        size_to_toc.setdefault(round(it.size * 2) / 2, Counter())[level] += 1

    # 2. Font sizes: larger ranks higher; the outline's levels anchor the sizes it matched.
    sizes = sorted({size for kind, size in looks.values() if kind == "size"}, reverse=True)
    size_level: dict[float, int] = {}
    if size_to_toc:
        anchored = {size: counts.most_common(1)[0][0] for size, counts in size_to_toc.items()}
        for size in sizes:
            if size in anchored:
                size_level[size] = anchored[size]
                continue
            larger = [lvl for s, lvl in anchored.items() if s > size]
            size_level[size] = min(max(larger) + 1, _MAX_LEVELS) if larger else 1
        deepest = max([*anchored.values(), *size_level.values()], default=0)
    else:
        for rank, size in enumerate(sizes):
            size_level[size] = min(rank + 1, _MAX_LEVELS - 1)
        deepest = max(size_level.values(), default=0)
    bold_level = min(deepest + 1, _MAX_LEVELS)
    for item_id, (kind, size) in looks.items():
        if item_id in levels:
            continue
        levels[item_id] = size_level[size] if kind == "size" else bold_level
    return levels


def _to_blocks(pages: list[_Page], levels: dict[int, int]) -> list[Block]:
    blocks: list[Block] = []
    for page in pages:
        for it in page.items:
            number = page.number
            if it.kind is BlockKind.TABLE:
                blocks.append(Block(BlockKind.TABLE, it.text, number))
                continue
            level = levels.get(id(it))
            if level is not None:
                blocks.append(Block(BlockKind.HEADING, " ".join(it.text.split()), number, level))
                continue
            if it.mono:
                blocks.append(Block(BlockKind.CODE, it.text.rstrip("\n"), number))
                continue
            for kind, text in split_list_items(it.text):
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

    _drop_furniture(pages)
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
    )
