"""Entry sections from an extracted document's blocks: each heading opens one, its blocks fill it.

Extraction (``jobs.extract``) gives blocks in reading order; a heading block opens a section at its
level. :func:`entry_sections` folds any such sequence into :class:`~schemas.rulefacts.EntrySection`
values for :func:`rulebook.facts.extract_facts`: heading path from the levels (as chunks carry it),
the blocks' texts joined by blank lines, their bold terms, and the page the section starts on. The
blocks are read through :class:`BlockLike` (a protocol), so this layer needs nothing of ``jobs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from schemas.rulefacts import EntrySection

__all__ = ["BlockLike", "entry_sections"]


class BlockLike(Protocol):
    """What a block must offer: ``jobs.document.Block`` has it (its kind is a StrEnum: "heading" …)."""

    @property
    def kind(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def page(self) -> int | None: ...

    @property
    def level(self) -> int: ...

    @property
    def bold_terms(self) -> list[str]: ...


def entry_sections(blocks: Iterable[BlockLike], *, keep_empty: bool = False) -> list[EntrySection]:
    """The sections of a document, one per heading, in reading order.

    Args:
        blocks: the document's blocks in reading order.
        keep_empty: also return sections with no text under their heading (a chapter heading
            straight followed by a section heading); they state no facts, so by default they are left out.

    Text before the first heading has no heading path and is left out.
    """
    out: list[EntrySection] = []
    path: list[tuple[int, str]] = []
    texts: list[str] = []
    bold: list[str] = []
    page: int | None = None

    def close() -> None:
        if path and (texts or keep_empty):
            out.append(
                EntrySection(
                    heading_path=[title for _, title in path],
                    text="\n\n".join(texts),
                    bold_terms=list(dict.fromkeys(bold)),
                    page=page,
                )
            )

    for block in blocks:
        if str(block.kind) == "heading":
            close()
            title = " ".join(block.text.split())
            level = max(1, block.level)
            path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title or "(untitled)")]
            texts, bold, page = [], [], block.page
        elif path:
            if block.text.strip():
                texts.append(block.text)
                bold.extend(block.bold_terms)
            if page is None:
                page = block.page
    close()
    return out
