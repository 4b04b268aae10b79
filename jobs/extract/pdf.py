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

The reader's parts live beside this module: :mod:`~jobs.extract.pdf_items` (the blocks of a page on
their way to becoming :class:`~jobs.document.Block` objects, and the layout limits several steps share),
:mod:`~jobs.extract.pdf_styles` (a page's blocks and their styles), :mod:`~jobs.extract.pdf_tables`,
:mod:`~jobs.extract.pdf_order` (reading order), :mod:`~jobs.extract.pdf_furniture`,
:mod:`~jobs.extract.pdf_headings` (heading levels and captions) and :mod:`~jobs.extract.pdf_blocks`
(the blocks of the result). This module opens the file, reads it page by page and puts it together.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymupdf
from pymupdf import mupdf

from jobs.document import BlockKind, ExtractedDocument, ExtractedImage
from jobs.errors import CorruptDocument, EmptyDocument, EncryptedDocument
from jobs.extract.ocr import OcrConfig, resolve_ocr
from jobs.extract.pdf_blocks import _to_blocks
from jobs.extract.pdf_furniture import _drop_furniture
from jobs.extract.pdf_headings import _assign_levels
from jobs.extract.pdf_items import _Item, _Page, _PageWords
from jobs.extract.pdf_label_rows import _label_rows
from jobs.extract.pdf_order import _reading_order
from jobs.extract.pdf_styles import (
    _apply_xhtml,
    _join_drop_caps,
    _may_be_heading,
    _page_items,
    _read_sizes,
    _split_styles,
)
from jobs.extract.pdf_tables import TableMode, _replace_tables
from jobs.extract.pdf_tables import _may_draw_grid as _may_draw_grid  # re-exported: tests import it here
from jobs.extract.typography import page_lines

__all__ = ["ImageSink", "PdfInfo", "TableMode", "extract_pdf", "open_pdf", "pdf_info"]

_log = logging.getLogger(__name__)

ImageSink = Callable[[str, bytes, str], str]
"""Saves an image: ``sink(name, data, mime) -> blob_key``."""

# Ligatures expanded ("ﬁ" -> "fi": search matches), clipped to the page, hyphenated line ends joined.
_TEXT_FLAGS = pymupdf.TEXT_MEDIABOX_CLIP | pymupdf.TEXT_USE_CID_FOR_UNKNOWN_UNICODE | pymupdf.TEXT_DEHYPHENATE
# A page with fewer visible characters than this, and an image on it, is treated as a scan.
_MIN_TEXT_CHARS = 16


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


def _read_outline(doc: Any) -> list[list[Any]]:
    """``doc.get_toc(simple=True)``: ``[level, title, page]`` per entry, page -1 where it points
    nowhere in the file.

    Read from the outline MuPDF loaded when it opened the file: ``get_toc`` loads it (and the
    metadata) again and walks it through a wrapper object for every field it reads, ~7 ms for
    an outline of 600 entries, 2 % of that book's whole extraction.
    """
    toc: list[list[Any]] = []

    def walk(node: Any, level: int) -> None:  # node: MuPDF's fz_outline
        while node is not None:
            uri = node.uri
            if uri and not mupdf.fz_is_external_link(uri):
                page = node.page.page
                page = doc.resolve_link(uri)[0] + 1 if page == -1 else page + 1
            else:
                page = -1
            toc.append([level, node.title or " ", page])
            if node.down is not None:
                walk(node.down, level + 1)
            node = node.next

    first = doc.outline
    if first:
        walk(first.this.m_internal, 1)
    return toc


def _needs_ocr(page: Any, items: list[_Item]) -> bool:
    chars = 0
    for it in items:
        chars += len(it.text) - it.text.count(" ") - it.text.count("\n")
        if chars >= _MIN_TEXT_CHARS:
            return False
    # Text-less and image-less pages are simply blank.
    return bool(page.get_images(full=False))


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
    if items and not ocr:
        items = _join_drop_caps(items)
    words = _PageWords(textpage)  # read at most once, for tables and label rows alike
    if items and options.tables is not TableMode.OFF:
        items = _replace_tables(page, words, items, options.tables, rotation_matrix, height)
    if items and not ocr and rotation_matrix is None:
        items = _label_rows(words, items)  # words are in page space: turned pages keep MuPDF's blocks
    if options.image_sink is not None:
        _save_images(page, number, options, tally)
    ordered = _reading_order(items)
    split = not ocr and rotation_matrix is None  # line positions are in unrotated page space
    return _Page(number, width, height, _split_styles(ordered) if split else ordered)


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
            toc = _read_outline(doc)
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
