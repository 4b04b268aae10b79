"""The blocks of an extracted PDF: headings, captions, tables, code, paragraphs and list items."""

from __future__ import annotations

import re

from jobs.document import Block, BlockKind
from jobs.extract.blocks import classify_paragraph, split_list_items
from jobs.extract.pdf_items import _Item, _Page
from jobs.extract.typography import clean_text, join_lines

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
            for n, (kind, text) in enumerate(_paragraph_text(it)):
                text = clean_text(text)
                terms = [t for t in it.bold_terms if t in text] if it.bold_terms else []
                if n == 0 and kind is BlockKind.PARAGRAPH and _continues_item(blocks, text):
                    # MuPDF closed the block inside a wrapped list item: the lines belong to it.
                    blocks[-1].text += " " + text
                    blocks[-1].bold_terms.extend(t for t in terms if t not in blocks[-1].bold_terms)
                    continue
                if kind is BlockKind.PARAGRAPH:
                    kind = classify_paragraph(text)
                blocks.append(Block(kind, text, number, 0, terms))
    return blocks


def _continues_item(blocks: list[Block], text: str) -> bool:
    """Whether ``text`` (a block's first lines) runs on from the list item just before it.

    The item's last sentence is open (no closing punctuation) and the text opens in lower case.
    """
    if not blocks or blocks[-1].kind is not BlockKind.LIST_ITEM or not text[:1].islower():
        return False
    return not blocks[-1].text.rstrip().endswith((".", "!", "?", ":", ";", ")", "]", '"', "”"))
