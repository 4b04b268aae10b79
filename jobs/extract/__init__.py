"""The extract stage: turn one file's bytes into an :class:`~jobs.document.ExtractedDocument`.

:func:`extract_document` picks the reader from the file name: PDFs through PyMuPDF
(:mod:`jobs.extract.pdf`), Markdown natively, HTML / text / DOCX / EPUB through ``unstructured``
(:mod:`jobs.extract.formats`), images through OCR (:mod:`jobs.extract.ocr`). Every failure is an
:class:`~jobs.errors.ExtractionError` that names the file.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Literal

from jobs.document import ExtractedDocument
from jobs.errors import EmptyDocument, FileTooLarge, UnsupportedFormat
from jobs.extract.formats import extract_markdown, extract_with_unstructured, read_source
from jobs.extract.ocr import OcrConfig, detect_ocr, extract_image
from jobs.extract.pdf import ImageSink, PdfInfo, TableMode, extract_pdf, pdf_info
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


def _kind(filename: str) -> str:
    suffix = PurePath(filename).suffix.lower()
    if suffix in _EXTRA_SUFFIXES:
        return _EXTRA_SUFFIXES[suffix]
    try:
        return FileType.from_filename(filename).value
    except ValueError as exc:
        raise UnsupportedFormat(filename, str(exc)) from None


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
        UnsupportedFormat: the suffix is not one the pipeline reads.
        FileTooLarge: the file is larger than ``max_bytes``.
        EmptyDocument, CorruptDocument, EncryptedDocument, MissingDependency: from the readers.
    """
    kind = _kind(filename)
    is_path = isinstance(data, str | os.PathLike)
    size = os.path.getsize(data) if is_path else len(data)  # type: ignore[arg-type]
    if max_bytes is not None and size > max_bytes:
        raise FileTooLarge(filename, size, max_bytes)
    if size == 0:
        raise EmptyDocument(filename, "the file is empty (0 bytes)")
    if kind == FileType.PDF:
        return extract_pdf(data, filename, password=password, image_sink=image_sink, ocr=ocr, tables=tables)
    raw = read_source(data)
    if kind == FileType.IMAGE:
        return extract_image(raw, filename, ocr=ocr, image_sink=image_sink)
    if kind == FileType.MARKDOWN and markdown_engine == "native":
        text = raw.decode("utf-8-sig", errors="replace")
        return extract_markdown(text, filename)
    return extract_with_unstructured(raw, filename, kind)
