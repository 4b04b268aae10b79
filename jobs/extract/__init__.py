"""The extract stage: turn one file's bytes into an :class:`~jobs.document.ExtractedDocument`.

:func:`extract_document` picks the reader from the file name, unless the file's first bytes show it
is something else (:mod:`jobs.extract.sniff`): PDFs through PyMuPDF (:mod:`jobs.extract.pdf`),
Markdown natively, HTML / text / DOCX / EPUB through ``unstructured`` (:mod:`jobs.extract.formats`;
HTML nested deeper than its parser reads, flat: :mod:`jobs.extract.flat_html`), images through OCR
(:mod:`jobs.extract.ocr`). Text formats are decoded once, here, in the encoding their bytes are in.
Every failure is an :class:`~jobs.errors.ExtractionError` that names the file.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Literal

from jobs.document import ExtractedDocument
from jobs.errors import CorruptDocument, EmptyDocument, FileTooLarge, UnsupportedFormat
from jobs.extract.flat_html import exceeds_parser_depth, extract_flat_html
from jobs.extract.formats import extract_markdown, extract_with_unstructured, read_source
from jobs.extract.ocr import OcrConfig, detect_ocr, extract_image
from jobs.extract.pdf import ImageSink, PdfInfo, TableMode, extract_pdf, pdf_info
from jobs.extract.sniff import Signature, decode_text, read_head, sniff
from schemas.knowledge import FileType

__all__ = [
    "ImageSink",
    "OcrConfig",
    "PdfInfo",
    "TableMode",
    "detect_ocr",
    "extract_document",
    "pdf_info",
]

# EPUB is read by unstructured but is not (yet) a schemas FileType.
_EXTRA_SUFFIXES = {".epub": "epub"}


# Each reader in words, for "the file is a PNG image, not a PDF".
_KIND_NAMES = {
    "pdf": "a PDF",
    "image": "an image",
    "markdown": "Markdown",
    "html": "HTML",
    "text": "plain text",
    "docx": "a DOCX document",
    "epub": "an EPUB book",
}
_TEXT_KINDS = {FileType.MARKDOWN, FileType.HTML, FileType.TEXT}
# Types a file is read as when its bytes show them, whatever its name says.
_ROUTABLE = {FileType.PDF, FileType.IMAGE, FileType.DOCX, FileType.EPUB}


def _kind(filename: str) -> str:
    suffix = PurePath(filename).suffix.lower()
    if suffix in _EXTRA_SUFFIXES:
        return _EXTRA_SUFFIXES[suffix]
    try:
        return FileType.from_filename(filename).value
    except ValueError as exc:
        raise UnsupportedFormat(filename, str(exc)) from None


def _reconcile(kind: str, head: bytes, filename: str) -> tuple[str, Signature | None, str | None]:
    """The reader a file needs: the one its name picks, unless its first bytes show another type.

    Returns:
        The kind to read it as, its signature (None when the bytes show none), and, when the name
        was wrong, what the file really is in words.

    Raises:
        UnsupportedFormat: the bytes are a type the pipeline does not read (an archive, a program).
        CorruptDocument: an HTML page under the name of a binary format (a saved web page).
    """
    signature = sniff(head)
    if signature is None or signature.kind == kind or (signature.kind == "zip" and kind in ("docx", "epub")):
        return kind, signature, None
    if signature.kind == "html":
        if kind in _TEXT_KINDS:
            return kind, None, None  # Markdown and plain text may well hold HTML
        raise CorruptDocument(
            filename, f"it is an HTML page, not {_KIND_NAMES[kind]} (a web page saved under its name?)"
        )
    mismatch = f"the file is {signature.what}, not {_KIND_NAMES[kind]}"
    if signature.kind in _ROUTABLE:
        return signature.kind, signature, mismatch
    raise UnsupportedFormat(filename, mismatch)


def extract_document(
    data: bytes | str | os.PathLike[str],
    filename: str,
    *,
    password: str | None = None,
    image_sink: ImageSink | None = None,
    ocr: bool | OcrConfig | None = None,
    tables: TableMode = TableMode.ACCURATE,
    markdown_engine: Literal["native", "unstructured"] = "native",
    max_bytes: int | None = None,
) -> ExtractedDocument:
    """Extract one file's text as blocks in reading order.

    Args:
        data: the file's bytes, or a path to it.
        filename: the file's name; its suffix picks the reader.
        password: opens an encrypted PDF.
        image_sink: saves images found in PDFs (``sink(name, data, mime) -> blob_key``).
        ocr: None to OCR scans when tesseract is installed, False never, True to require it, or
            an :class:`OcrConfig`.
        tables: how PDF tables are found (:class:`TableMode`).
        markdown_engine: ``"native"`` (markdown-it-py, fast, exact heading levels) or
            ``"unstructured"``.
        max_bytes: refuse files larger than this.

    Raises:
        UnsupportedFormat: the suffix, or the type the bytes show, is not one the pipeline reads.
        FileTooLarge: the file is larger than ``max_bytes``.
        CorruptDocument: a text file whose bytes are text in no encoding, an HTML page named as a
            binary format, or a reader's own complaint.
        EmptyDocument, EncryptedDocument, MissingDependency: from the readers.
    """
    kind = _kind(filename)
    is_path = isinstance(data, str | os.PathLike)
    size = os.path.getsize(data) if is_path else len(data)  # type: ignore[arg-type]
    if max_bytes is not None and size > max_bytes:
        raise FileTooLarge(filename, size, max_bytes)
    if size == 0:
        raise EmptyDocument(filename, "the file is empty (0 bytes)")
    kind, signature, mismatch = _reconcile(kind, read_head(data), filename)
    if kind == FileType.PDF:
        doc = extract_pdf(data, filename, password=password, image_sink=image_sink, ocr=ocr, tables=tables)
    elif kind == FileType.IMAGE:
        filetype = signature.filetype if signature else None
        doc = extract_image(
            read_source(data), filename, ocr=ocr, image_sink=image_sink, filetype=filetype, mismatch=mismatch
        )
    elif kind in _TEXT_KINDS:
        decoded = decode_text(read_source(data), filename)
        if kind == FileType.MARKDOWN and markdown_engine == "native":
            doc = extract_markdown(decoded.text, filename)
        elif kind == FileType.HTML and exceeds_parser_depth(decoded.text):
            doc = extract_flat_html(decoded.text, filename)
        else:
            doc = extract_with_unstructured(decoded.text, filename, kind)
        if decoded.warning:
            doc.warnings.insert(0, decoded.warning)
    else:
        doc = extract_with_unstructured(read_source(data), filename, kind)
    if mismatch:
        doc.warnings.insert(0, f"{mismatch}: read as what it is")
    return doc
