"""Extract the formats that are not PDFs: Markdown natively, HTML, text, DOCX and EPUB via ``unstructured``.

``unstructured`` is an optional extra, imported on first use. Offline it would try two downloads:
a telemetry ping at import (opted out with ``DO_NOT_TRACK``/``SCARF_NO_ANALYTICS``, set here before
the import) and the spaCy model ``en_core_web_sm`` on the first paragraph it classifies. When that
model is not installed, its tokenizer hook is given a blank English pipeline with a rule-based
sentencizer: sentence counts stay right; part-of-speech tags are missing, which only moves some
short paragraphs from ``NarrativeText`` to ``Text`` (both become paragraphs here) and makes plain-text
partitioning guess more titles, so a guessed title that ends like a sentence stays a paragraph.
``languages=["eng"]`` skips per-document language detection (slow, and not deterministic).

The native Markdown reader is :mod:`jobs.extract.markdown`, and the block classification shared by
every extractor (list items, captions, stat blocks, Markdown tables) is :mod:`jobs.extract.blocks`;
their names are re-exported here.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.errors import CorruptDocument, EmptyDocument, MissingDependency, UnsupportedFormat
from jobs.extract.blocks import (
    _clean_term,
    build_document,
    classify_paragraph,
    html_table_rows,
    markdown_table,
    split_list_items,
)
from jobs.extract.markdown import extract_markdown, repair_markdown
from jobs.extract.sniff import decode_text

__all__ = [
    "UNSTRUCTURED_INSTALL_HINT",
    "build_document",
    "classify_paragraph",
    "extract_markdown",
    "extract_with_unstructured",
    "markdown_table",
    "prepare_unstructured",
    "repair_markdown",
    "split_list_items",
]

_log = logging.getLogger(__name__)

UNSTRUCTURED_INSTALL_HINT = 'install the "formats" extra: pip install "lorekeeper[formats]"'

_OFFLINE_NLP_READY = False


def prepare_unstructured(filename: str) -> None:
    """Import ``unstructured`` so that it works offline; idempotent.

    Raises:
        MissingDependency: ``unstructured`` (the ``formats`` extra) is not installed.
    """
    global _OFFLINE_NLP_READY
    # Before the first import: unstructured pings a telemetry endpoint when it is imported.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("SCARF_NO_ANALYTICS", "1")
    os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
    try:
        import unstructured  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(filename, "unstructured", UNSTRUCTURED_INSTALL_HINT) from exc
    if _OFFLINE_NLP_READY:
        return
    import spacy
    from unstructured.nlp import tokenize

    if not spacy.util.is_package("en_core_web_sm"):
        # Without this, the first classification downloads en_core_web_sm and fails offline.
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        tokenize._get_nlp = cast(Any, lambda: nlp)
        _log.info("unstructured runs with a blank spaCy pipeline (en_core_web_sm is not installed)")
    _OFFLINE_NLP_READY = True


_PARAGRAPH_CATEGORIES = {"NarrativeText", "UncategorizedText", "Text", "Address", "EmailAddress", "Formula"}
_SKIPPED_CATEGORIES = {"Header", "Footer", "PageBreak", "PageNumber", "Image"}
_SENTENCE_END = (".", "!", "?", "…", ":", ";", ",")


def _element_terms(element: Any) -> list[str]:
    metadata = element.metadata
    contents = getattr(metadata, "emphasized_text_contents", None) or []
    tags = getattr(metadata, "emphasized_text_tags", None) or []
    terms = [_clean_term(text) for text, tag in zip(contents, tags, strict=False) if tag in ("b", "strong")]
    return list(dict.fromkeys(t for t in terms if t))


def elements_to_blocks(elements: Iterable[Any]) -> list[Block]:
    """Map ``unstructured`` elements to blocks (Title -> heading with its depth, Table -> Markdown, …)."""
    blocks: list[Block] = []
    for element in elements:
        category = element.category
        text = (element.text or "").strip()
        if category in _SKIPPED_CATEGORIES or not text:
            continue
        page = getattr(element.metadata, "page_number", None)
        if category == "Title":
            depth = getattr(element.metadata, "category_depth", None)
            if depth is None and text.endswith(_SENTENCE_END):
                # A title guessed from plain text that reads like a sentence (see module doc).
                blocks.append(Block(classify_paragraph(text), " ".join(text.split()), page))
                continue
            blocks.append(Block(BlockKind.HEADING, " ".join(text.split()), page, (depth or 0) + 1))
        elif category == "Table":
            table_html = getattr(element.metadata, "text_as_html", None)
            rows = html_table_rows(table_html) if table_html else []
            blocks.append(Block(BlockKind.TABLE, markdown_table(rows) if rows else text, page))
        elif category == "ListItem":
            blocks.append(Block(BlockKind.LIST_ITEM, " ".join(text.split()), page, 0, _element_terms(element)))
        elif category == "CodeSnippet":
            blocks.append(Block(BlockKind.CODE, text, page))
        elif category == "FigureCaption":
            blocks.append(Block(BlockKind.CAPTION, " ".join(text.split()), page))
        else:
            if category not in _PARAGRAPH_CATEGORIES:
                _log.debug("unstructured element %s read as a paragraph", category)
            text = " ".join(text.split())
            blocks.append(Block(classify_paragraph(text), text, page, 0, _element_terms(element)))
    return blocks


def partition(data: bytes | str, filename: str, kind: str) -> list[Any]:
    """Run the ``unstructured`` partitioner for ``kind`` (html, text, markdown, docx, epub).

    Args:
        data: the file's bytes; for the text formats (html, text, markdown) its decoded text, or its
            bytes to be decoded by :func:`~jobs.extract.sniff.decode_text`.
        filename: the file's name, for messages.
        kind: the format.

    Raises:
        MissingDependency: ``unstructured`` or a piece the format needs (pandoc for EPUB) is missing.
        CorruptDocument: the partitioner cannot read the bytes.
    """
    prepare_unstructured(filename)
    common: dict[str, Any] = {"languages": ["eng"]}

    def text() -> str:
        return data if isinstance(data, str) else decode_text(data, filename).text

    try:
        if kind == "html":
            from unstructured.partition.html import partition_html

            return partition_html(text=text(), **common)
        if kind == "text":
            from unstructured.partition.text import partition_text

            return partition_text(text=text(), **common)
        if kind == "markdown":
            from unstructured.partition.md import partition_md

            return partition_md(text=repair_markdown(text()), **common)
        if isinstance(data, str):
            raise UnsupportedFormat(filename, f"{kind} is read from the file's bytes, not from text")
        if kind == "docx":
            from unstructured.partition.docx import partition_docx

            return partition_docx(file=io.BytesIO(data), **common)
        if kind == "epub":
            try:
                import pypandoc  # noqa: F401
            except ImportError as exc:
                raise MissingDependency(filename, "pandoc (pypandoc)", UNSTRUCTURED_INSTALL_HINT) from exc
            from unstructured.partition.epub import partition_epub

            return partition_epub(file=io.BytesIO(data), **common)
    except ImportError as exc:
        raise MissingDependency(filename, exc.name or "an unstructured dependency", UNSTRUCTURED_INSTALL_HINT) from exc
    except (MissingDependency, UnsupportedFormat, CorruptDocument):
        raise
    except Exception as exc:
        raise CorruptDocument(filename, f"{type(exc).__name__}: {exc}") from exc
    raise UnsupportedFormat(filename, f"no partitioner for {kind!r}")


def extract_with_unstructured(data: bytes | str, filename: str, kind: str) -> ExtractedDocument:
    """Extract HTML, text, Markdown, DOCX or EPUB through ``unstructured``.

    Args:
        data: as :func:`partition` (decoded text or bytes for the text formats, bytes for the others).
        filename: the file's name, for messages.
        kind: the format.

    Raises:
        EmptyDocument: nothing but markup or white space.
        MissingDependency, CorruptDocument: as :func:`partition`.
    """
    if not data.strip():
        raise EmptyDocument(filename, "the file is empty")
    blocks = elements_to_blocks(partition(data, filename, kind))
    pages = [b.page for b in blocks if b.page is not None]
    return build_document(blocks, filename, max(pages) if pages else 1)


def read_source(source: bytes | str | os.PathLike[str]) -> bytes:
    """The bytes of ``source`` (bytes as they are, a path read)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    return Path(source).read_bytes()
