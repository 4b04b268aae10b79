"""HTML nested deeper than libxml2 parses: find it, and read it flat.

``unstructured`` parses HTML with lxml, and libxml2 stops at element depth 256 without raising: the
tree ends where the depth ran out, so a page of 50,000 nested ``<div>`` (or of unclosed ``<font>``
tags, which nest as deep) lost everything from there on and failed as "holds no text", or silently
lost its second half. Reading it with ``XML_PARSE_HUGE`` only moves the limit to 2,048, and
``unstructured``'s own walk of the tree is recursive, so such a page is read here instead: tag by
tag with the standard library's tokenizer, keeping no tree, so neither depth nor Python's recursion
limit matters, and linear in the page's size. It keeps headings, paragraphs, list items and
preformatted text; tables become one paragraph per row.
"""

from __future__ import annotations

from html.parser import HTMLParser

from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.extract.formats import build_document, classify_paragraph

__all__ = ["LIBXML2_MAX_DEPTH", "FlatHtml", "exceeds_parser_depth", "extract_flat_html"]

LIBXML2_MAX_DEPTH = 256
"""Element depth at which libxml2 (lxml) stops parsing unless told ``XML_PARSE_HUGE``."""


def exceeds_parser_depth(text: str) -> bool:
    """Whether lxml's HTML parser, as ``unstructured`` configures it, gives up on this page's depth."""
    if text.count("<") < LIBXML2_MAX_DEPTH - 8:  # too few tags to nest that deep (the parser adds a few)
        return False
    try:
        from lxml import etree
    except ImportError:
        return False  # lxml comes with unstructured, whose absence the HTML reader reports
    parser = etree.HTMLParser(remove_comments=True, remove_pis=True)
    try:
        try:
            etree.fromstring(text, parser)
        except ValueError:  # a str with an XML encoding declaration: bytes, as unstructured then does
            etree.fromstring(text.encode("utf-8"), parser)
    except (etree.LxmlError, ValueError):
        return False  # a page lxml cannot read at all is unstructured's to report
    return any(error.type_name == "ERR_RESOURCE_LIMIT" and "depth" in error.message for error in parser.error_log)


# Tags that end the text before them: a new paragraph starts after each.
_BREAKS = frozenset(
    {
        *("address", "article", "aside", "blockquote", "dd", "div", "dl", "dt", "fieldset", "figcaption"),
        *("figure", "footer", "form", "header", "hr", "main", "nav", "ol", "p", "section", "table", "tbody"),
        *("thead", "tfoot", "tr", "ul"),
    }
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Not "head": its end tag is optional, and a page without one would lose all its text.
_SKIPPED = frozenset({"script", "style", "template", "title", "noscript"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
# How far down the open-tag stack an end tag is matched: a stray end tag costs O(1), not O(depth).
_END_TAG_REACH = 16


class FlatHtml(HTMLParser):
    """Blocks of an HTML page read tag by tag, without a tree (see the module's doc).

    Attributes:
        blocks: the page's text in reading order.
        max_depth: the deepest nesting of open elements seen (end tags that close nothing near the
            top of the stack are ignored, as a browser would).
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.max_depth = 0
        self._open: list[str] = []
        self._parts: list[str] = []
        self._kind = BlockKind.PARAGRAPH
        self._level = 0
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self._open.append(tag)
            self.max_depth = max(self.max_depth, len(self._open))
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag in _HEADINGS:
            self._flush(BlockKind.HEADING, _HEADINGS[tag])
        elif tag == "li":
            self._flush(BlockKind.LIST_ITEM)
        elif tag == "pre":
            self._flush(BlockKind.CODE)
        elif tag in _BREAKS or (tag == "br" and self._kind is BlockKind.PARAGRAPH):
            self._flush(BlockKind.PARAGRAPH)
        elif tag in ("br", "td", "th"):
            # A line break inside a heading, list item or code, or a cell in a row: white space.
            self._parts.append("\n" if tag == "br" else " ")

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, max(len(self._open) - _END_TAG_REACH, 0) - 1, -1):
            if self._open[i] == tag:
                del self._open[i:]
                break
        if tag in _SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _HEADINGS or tag in ("li", "pre") or tag in _BREAKS:
            self._flush(BlockKind.PARAGRAPH)

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._parts.append(data)

    def close(self) -> None:
        super().close()
        self._flush(BlockKind.PARAGRAPH)

    def _flush(self, next_kind: BlockKind, next_level: int = 0) -> None:
        """End the current block (if it holds text) and start one of ``next_kind``."""
        raw = "".join(self._parts)
        text = raw.strip("\n") if self._kind is BlockKind.CODE else " ".join(raw.split())
        if text.strip():
            kind = classify_paragraph(text) if self._kind is BlockKind.PARAGRAPH else self._kind
            self.blocks.append(Block(kind, text, None, self._level))
        self._parts = []
        self._kind = next_kind
        self._level = next_level


def extract_flat_html(text: str, filename: str) -> ExtractedDocument:
    """Read an HTML page flat (see the module's doc), with a warning that says why and at what depth.

    Raises:
        EmptyDocument: the page holds no text.
    """
    reader = FlatHtml()
    reader.feed(text)
    reader.close()
    doc = build_document(reader.blocks, filename)
    doc.warnings.append(
        f"the HTML is nested {reader.max_depth:,} elements deep, past its parser's limit of {LIBXML2_MAX_DEPTH}: "
        f"read flat, kept {len(doc.blocks):,} blocks (headings, paragraphs, list items, preformatted text; "
        "tables as plain rows; no nesting, links or inline styles)"
    )
    return doc
