"""The block classification shared by every extractor: list items, captions and stat blocks, Markdown
tables (also from HTML table cells), bold terms, and the document a reader's blocks make.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from jobs.document import Block, BlockKind, ExtractedDocument
from jobs.errors import EmptyDocument

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
