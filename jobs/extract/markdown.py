"""Extract Markdown natively: headings with their ``#`` levels, paragraphs, list items, tables, code.

Markdown is parsed natively, with markdown-it.rs (``markdown-it-pyrs``, Rust) when it is installed and
markdown-it-py (installed with ``rich``) otherwise; both give the same headings, tables and text.
Heading levels come straight from ``#`` marks, and the Rust parser with the block walk runs ~15-30x
faster than ``unstructured.partition_md`` + ``chunk_by_title`` (markdown-it-py ~6x), keeping every
heading (``unstructured`` stays available: ``markdown_engine="unstructured"``).
Real rulebook Markdown is often a half-converted HTML export, so before parsing, headings written
as ``#>Title</h1>`` are repaired and HTML ``<table>`` elements become pipe tables.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from typing import Any, Literal, cast

from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.errors import MissingDependency
from jobs.extract.blocks import _TAG, _clean_term, build_document, classify_paragraph, html_table_rows, markdown_table

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
