"""Extract the formats that are not PDFs: Markdown natively, HTML, text, DOCX and EPUB via ``unstructured``.

Markdown is parsed natively, with markdown-it.rs (``markdown-it-pyrs``, Rust) when it is installed and
markdown-it-py (installed with ``rich``) otherwise; both give the same headings, tables and text.
Heading levels come straight from ``#`` marks, and the Rust parser with the block walk runs ~15-30x
faster than ``unstructured.partition_md`` + ``chunk_by_title`` (markdown-it-py ~6x), keeping every
heading (``unstructured`` stays available: ``markdown_engine="unstructured"``).
Real rulebook Markdown is often a half-converted HTML export, so before parsing, headings written
as ``#>Title</h1>`` are repaired and HTML ``<table>`` elements become pipe tables.

``unstructured`` is an optional extra, imported on first use. Offline it would try two downloads:
a telemetry ping at import (opted out with ``DO_NOT_TRACK``/``SCARF_NO_ANALYTICS``, set here before
the import) and the spaCy model ``en_core_web_sm`` on the first paragraph it classifies. When that
model is not installed, its tokenizer hook is given a blank English pipeline with a rule-based
sentencizer: sentence counts stay right; part-of-speech tags are missing, which only moves some
short paragraphs from ``NarrativeText`` to ``Text`` (both become paragraphs here) and makes plain-text
partitioning guess more titles, so a guessed title that ends like a sentence stays a paragraph.
``languages=["eng"]`` skips per-document language detection (slow, and not deterministic).

This module also holds the block classification shared by every extractor (list items, captions,
stat blocks, Markdown tables).
"""

from __future__ import annotations

import functools
import html
import io
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.errors import CorruptDocument, EmptyDocument, MissingDependency, UnsupportedFormat
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

# ---------------------------------------------------------------------------------------------
# block classification shared by the extractors
# ---------------------------------------------------------------------------------------------

# Glyph bullets start an item anywhere; dashes, numbers and letters only once a list has begun,
# because a wrapped line may start with "12. " or "- " in running text.
_GLYPHS = "•◦▪▫●○■□➢►▶✓✔·∙‣⁃"
_GLYPH_BULLET = re.compile(rf"^[{_GLYPHS}]\s*")
_ANY_GLYPH = re.compile(rf"[{_GLYPHS}]")
_OTHER_BULLET_START = re.compile(r"\s*(?:[-–—*+]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_OTHER_BULLET = re.compile(r"^(?:[-–—*+]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s+")
_CAPTION = re.compile(r"^(?:figure|fig\.|table|illustration|map|plate)\s+[\dIVX]+[.:]", re.IGNORECASE)
_ABILITY = re.compile(r"\b(?:STR|DEX|CON|INT|WIS|CHA)\b")
_FATE_FIELDS = re.compile(r"(?:^|\s)(?:Aspects|Skills|Stunts|Stress|Consequences|Refresh):", re.MULTILINE)


def split_list_items(text: str) -> list[tuple[BlockKind, str]]:
    """Split one text block (lines separated by newlines) into a leading paragraph and list items.

    Returns:
        ``(kind, text)`` pairs, kind PARAGRAPH or LIST_ITEM, whitespace collapsed, bullets removed.
    """
    if not _ANY_GLYPH.search(text) and not _OTHER_BULLET_START.match(text):
        # The common case, kept cheap: a paragraph without bullets.
        joined = " ".join(text.split())
        return [(BlockKind.PARAGRAPH, joined)] if joined else []
    groups: list[tuple[BlockKind, list[str]]] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        match = _GLYPH_BULLET.match(line)
        if match is None and groups and groups[-1][0] is BlockKind.LIST_ITEM:
            match = _OTHER_BULLET.match(line)
        if match is None and not groups:
            match = _OTHER_BULLET.match(line) if len(line) > 3 else None
        if match is not None:
            groups.append((BlockKind.LIST_ITEM, [line[match.end() :]]))
        elif groups:
            groups[-1][1].append(line)
        else:
            groups.append((BlockKind.PARAGRAPH, [line]))
    out = []
    for kind, parts in groups:
        text = " ".join(" ".join(parts).split())
        if text:
            out.append((kind, text))
    return out


def classify_paragraph(text: str) -> BlockKind:
    """PARAGRAPH, or CAPTION / STAT_BLOCK when the text reads like one."""
    # Cheap substring tests first: this runs on every paragraph of every book.
    if len(text) <= 300 and text[:1] in "FfTtIiMmPp" and _CAPTION.match(text):
        return BlockKind.CAPTION
    if "Armor Class" in text and "Hit Points" in text:
        return BlockKind.STAT_BLOCK
    if ("STR" in text or "DEX" in text) and len(set(_ABILITY.findall(text))) >= 4:
        return BlockKind.STAT_BLOCK
    if "Aspects:" in text and len(set(_FATE_FIELDS.findall(text))) >= 3:
        return BlockKind.STAT_BLOCK
    return BlockKind.PARAGRAPH


def markdown_table(rows: Sequence[Sequence[str | None]]) -> str:
    """Render rows of cell text as a Markdown pipe table; the first row is the header."""
    width = max(len(r) for r in rows)

    def cell(text: str | None) -> str:
        return " ".join((text or "").replace("\ufffc", "").split()).replace("|", "\\|")

    lines = []
    for n, row in enumerate(rows):
        padded = [cell(c) for c in row] + [""] * (width - len(row))
        lines.append("| " + " | ".join(padded) + " |")
        if n == 0:
            lines.append("|" + "---|" * width)
    return "\n".join(lines)


_TAG = re.compile(r"<[^>]+>")
_TR = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.IGNORECASE | re.DOTALL)
_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", re.IGNORECASE | re.DOTALL)


def html_table_rows(table_html: str) -> list[list[str | None]]:
    """Cell texts of an HTML table, row by row (tags dropped, entities decoded)."""
    rows: list[list[str | None]] = []
    for row in _TR.findall(table_html):
        cells = [" ".join(html.unescape(_TAG.sub(" ", c)).split()) for c in _CELL.findall(row)]
        if any(cells):
            rows.append(list(cells))
    return rows


def _clean_term(term: str) -> str | None:
    term = " ".join(term.split()).strip(" \t:.,;–—-([").rstrip(")]")
    if term and len(term) <= 80 and term.count(" ") < 8 and any(ch.isalpha() for ch in term):
        return term
    return None


def build_document(blocks: list[Block], filename: str, page_count: int = 1) -> ExtractedDocument:
    """The document of these blocks, titled by its first level-1 heading.

    Raises:
        EmptyDocument: there are no blocks.
    """
    if not blocks:
        raise EmptyDocument(filename, "the file holds no text")
    title = next((b.text for b in blocks if b.kind is BlockKind.HEADING and b.level == 1), None)
    return ExtractedDocument(blocks=blocks, page_count=page_count, title=title)


# ---------------------------------------------------------------------------------------------
# Markdown, natively
# ---------------------------------------------------------------------------------------------

# "#>Title</h1>", "  ##><a>Title</a><br /></h2>": headings of a broken HTML-to-Markdown export.
_BROKEN_HEADING = re.compile(r"^[ \t]*(#{1,6})>[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_HTML_TABLE = re.compile(r"<table\b[^>]*>.*?</table>", re.IGNORECASE | re.DOTALL)
_HTML_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1>", re.IGNORECASE | re.DOTALL)
_BOLD_OPEN = re.compile(r"^<(?:b|strong)(?:\s[^>]*)?>$", re.IGNORECASE)
_BOLD_CLOSE = re.compile(r"^</(?:b|strong)\s*>$", re.IGNORECASE)
_LINE_BREAK = re.compile(r"^<br\s*/?>$", re.IGNORECASE)


def repair_markdown(text: str) -> str:
    """Repair half-converted Markdown: ``#>Title</h1>`` headings and HTML tables (to pipe tables)."""

    def heading(match: re.Match[str]) -> str:
        inner = " ".join(_TAG.sub(" ", match.group(2)).split())
        # Blank lines around it: an HTML block just above would otherwise swallow the heading.
        return f"\n{match.group(1)} {inner}\n" if inner else ""

    def table(match: re.Match[str]) -> str:
        rows = html_table_rows(match.group(0))
        return f"\n\n{markdown_table(rows)}\n\n" if rows else "\n\n"

    text = _BROKEN_HEADING.sub(heading, text)
    return _HTML_TABLE.sub(table, text)


@functools.lru_cache(maxsize=1)
def _markdown_parser() -> Any:
    from markdown_it import MarkdownIt

    # Indented code blocks are off: exports indent ordinary paragraphs and headings by four
    # spaces, and rulebooks fence real code when they have any.
    return MarkdownIt("commonmark", {"html": True}).enable("table").disable("code")


def _render_inline(token: Any) -> tuple[str, list[str]]:
    """Text and bold terms of an inline token."""
    parts: list[str] = []
    terms: list[str] = []
    bold_start: int | None = None
    for child in token.children or ():
        kind = child.type
        if kind in ("text", "text_special", "code_inline"):
            parts.append(child.content)
        elif kind == "softbreak":
            parts.append(" ")
        elif kind == "hardbreak":
            parts.append("\n")
        elif kind == "strong_open":
            bold_start = len(parts)
        elif kind == "strong_close" and bold_start is not None:
            term = _clean_term("".join(parts[bold_start:]))
            if term:
                terms.append(term)
            bold_start = None
        elif kind == "html_inline":
            tag = child.content.strip()
            if _BOLD_OPEN.match(tag):
                bold_start = len(parts)
            elif _BOLD_CLOSE.match(tag) and bold_start is not None:
                term = _clean_term("".join(parts[bold_start:]))
                if term:
                    terms.append(term)
                bold_start = None
            elif _LINE_BREAK.match(tag):
                parts.append(" ")
    # U+FFFC marks where an export dropped an inline object (an icon): it is not text.
    return "".join(parts).replace("\ufffc", ""), list(dict.fromkeys(terms))


def _html_block_blocks(content: str) -> list[Block]:
    """Headings and text of a raw HTML block inside Markdown."""
    blocks: list[Block] = []
    pos = 0
    for match in _HTML_HEADING.finditer(content):
        before = " ".join(html.unescape(_TAG.sub(" ", content[pos : match.start()])).split())
        if before:
            blocks.append(Block(BlockKind.PARAGRAPH, before))
        title = " ".join(html.unescape(_TAG.sub(" ", match.group(2))).split())
        if title:
            blocks.append(Block(BlockKind.HEADING, title, None, int(match.group(1))))
        pos = match.end()
    rest = " ".join(html.unescape(_TAG.sub(" ", content[pos:])).split())
    if rest and not rest.startswith("<?xml"):
        blocks.append(Block(classify_paragraph(rest), rest))
    return blocks


def _blocks_python(text: str) -> list[Block]:
    """Blocks from markdown-it-py's token stream."""
    tokens = _markdown_parser().parse(text)
    blocks: list[Block] = []
    in_item = 0
    i = 0
    n = len(tokens)
    while i < n:
        token = tokens[i]
        kind = token.type
        if kind == "heading_open":
            content, _ = _render_inline(tokens[i + 1])
            content = " ".join(content.split())
            if content:
                blocks.append(Block(BlockKind.HEADING, content, None, int(token.tag[1])))
            i += 3
            continue
        if kind == "list_item_open":
            in_item += 1
        elif kind == "list_item_close":
            in_item -= 1
        elif kind == "paragraph_open":
            content, terms = _render_inline(tokens[i + 1])
            content = " ".join(content.split())
            if content:
                block_kind = BlockKind.LIST_ITEM if in_item else classify_paragraph(content)
                blocks.append(Block(block_kind, content, None, 0, terms))
            i += 3
            continue
        elif kind in ("fence", "code_block"):
            if token.content.strip():
                blocks.append(Block(BlockKind.CODE, token.content.rstrip("\n")))
        elif kind == "html_block":
            blocks.extend(_html_block_blocks(token.content))
        elif kind == "table_open":
            rows: list[list[str | None]] = []
            j = i + 1
            while tokens[j].type != "table_close":
                if tokens[j].type == "tr_open":
                    rows.append([])
                elif tokens[j].type == "inline" and rows:
                    rows[-1].append(_render_inline(tokens[j])[0])
                j += 1
            rows = [r for r in rows if any(c and c.strip() for c in r)]
            if rows:
                blocks.append(Block(BlockKind.TABLE, markdown_table(rows)))
            i = j + 1
            continue
        i += 1
    return blocks


# markdown-it.rs rules: CommonMark without indented code (see _markdown_parser), with tables.
_RUST_RULES = [
    "blockquote", "fence", "heading", "hr", "lheading", "list", "paragraph", "reference",
    "autolink", "backticks", "emphasis", "entity", "escape", "image", "link", "newline",
    "html_block", "html_inline", "table",
]  # fmt: skip
_INLINE_NODES = frozenset(
    {"text", "text_special", "code_inline", "softbreak", "hardbreak", "strong", "em", "link", "image",
     "html_inline", "autolink", "strikethrough"}
)  # fmt: skip


@functools.lru_cache(maxsize=1)
def _rust_parser() -> Any:
    """markdown-it.rs (markdown-it-pyrs), ~10x faster than markdown-it-py; None when not installed."""
    try:
        from markdown_it_pyrs import MarkdownIt
    except ImportError:
        return None
    return MarkdownIt("zero").enable_many(cast(Any, _RUST_RULES))


def _rust_inline(nodes: Iterable[Any]) -> tuple[str, list[str]]:
    """Text and bold terms of inline nodes of the markdown-it.rs tree."""
    parts: list[str] = []
    terms: list[str] = []
    bold_start: list[int | None] = [None]  # html <b>…</b> opens and closes across siblings

    def visit(node: Any) -> None:
        name = node.name
        if name in ("text", "text_special", "code_inline"):
            parts.append(node.meta.get("content", ""))
        elif name == "softbreak":
            parts.append(" ")
        elif name == "hardbreak":
            parts.append("\n")
        elif name == "image":
            return
        elif name == "html_inline":
            tag = node.meta.get("content", "").strip()
            if _BOLD_OPEN.match(tag):
                bold_start[0] = len(parts)
            elif _BOLD_CLOSE.match(tag) and bold_start[0] is not None:
                term = _clean_term("".join(parts[bold_start[0] :]))
                if term:
                    terms.append(term)
                bold_start[0] = None
            elif _LINE_BREAK.match(tag):
                parts.append(" ")
        elif name == "strong":
            start = len(parts)
            for child in node.children:
                visit(child)
            term = _clean_term("".join(parts[start:]))
            if term:
                terms.append(term)
        else:
            for child in node.children:
                visit(child)

    for node in nodes:
        visit(node)
    return "".join(parts).replace("\ufffc", ""), list(dict.fromkeys(terms))


def _blocks_rust(root: Any) -> list[Block]:
    """Blocks from markdown-it.rs's tree (the same blocks as :func:`_blocks_python`)."""
    blocks: list[Block] = []

    def inline_block(nodes: list[Any], in_item: bool) -> None:
        content, terms = _rust_inline(nodes)
        content = " ".join(content.split())
        if content:
            kind = BlockKind.LIST_ITEM if in_item else classify_paragraph(content)
            blocks.append(Block(kind, content, None, 0, terms))

    def walk(node: Any, in_item: bool) -> None:
        pending: list[Any] = []  # a tight list item's text comes as inline children
        for child in node.children:
            name = child.name
            if name in _INLINE_NODES:
                pending.append(child)
                continue
            if pending:
                inline_block(pending, in_item)
                pending = []
            if name == "heading":
                content = " ".join(_rust_inline(child.children)[0].split())
                if content:
                    blocks.append(Block(BlockKind.HEADING, content, None, int(child.meta["level"])))
            elif name == "paragraph":
                inline_block(child.children, in_item)
            elif name == "list_item":
                walk(child, True)
            elif name in ("fence", "code_block"):
                content = child.meta.get("content", "")
                if content.strip():
                    blocks.append(Block(BlockKind.CODE, content.rstrip("\n")))
            elif name == "html_block":
                blocks.extend(_html_block_blocks(child.meta.get("content", "")))
            elif name == "table":
                rows = [
                    [_rust_inline(cell.children)[0] for cell in row.children]
                    for section in child.children
                    for row in section.children
                ]
                rows = [r for r in rows if any(c and c.strip() for c in r)]
                if rows:
                    blocks.append(Block(BlockKind.TABLE, markdown_table(rows)))
            elif name != "hr":
                walk(child, in_item)
        if pending:
            inline_block(pending, in_item)

    walk(root, False)
    return blocks


def extract_markdown(
    text: str, filename: str, *, parser: Literal["auto", "rust", "python"] = "auto"
) -> ExtractedDocument:
    """Extract Markdown: headings with their ``#`` levels, paragraphs, list items, tables, code.

    Args:
        text: the Markdown.
        filename: the file's name, for messages.
        parser: ``"rust"`` (markdown-it-pyrs), ``"python"`` (markdown-it-py) or ``"auto"`` (the
            first when installed). Both give the same blocks.

    Raises:
        EmptyDocument: the text holds nothing but markup.
    """
    repaired = repair_markdown(text)
    rust = _rust_parser() if parser != "python" else None
    if parser == "rust" and rust is None:
        raise MissingDependency(filename, "markdown-it-pyrs", "pip install markdown-it-pyrs")
    blocks = _blocks_rust(rust.tree(repaired)) if rust is not None else _blocks_python(repaired)
    return build_document(blocks, filename)


# ---------------------------------------------------------------------------------------------
# unstructured
# ---------------------------------------------------------------------------------------------

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
