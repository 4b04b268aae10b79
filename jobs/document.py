"""What extraction produces and chunking consumes: a document as an ordered list of typed blocks.

These are plain dataclasses (cheap to build by the thousand, picklable for Ray). Extraction emits
blocks in reading order; a heading block opens a section at its level; chunking turns the blocks of
one document into chunks that keep their heading path and page range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class BlockKind(StrEnum):
    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST_ITEM = "list_item"
    TABLE = "table"  # text is Markdown
    STAT_BLOCK = "stat_block"  # a creature / NPC block: keep whole where it fits
    CODE = "code"
    CAPTION = "caption"


@dataclass(slots=True)
class Block:
    """One unit of text in reading order.

    Attributes:
        kind: what the text is.
        text: the text; tables as Markdown.
        page: 1-based page number for paged formats, else None.
        level: heading level (1 = top-level section) for headings, else 0.
        bold_terms: terms set in bold inside the block (defined terms, for concept extraction).
    """

    kind: BlockKind
    text: str
    page: int | None = None
    level: int = 0
    bold_terms: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ExtractedImage:
    """An image found in a document; its bytes go to the blob store, not through the pipeline."""

    page: int | None
    name: str
    blob_key: str
    width: int
    height: int
    mime: str


@dataclass(slots=True)
class ExtractedDocument:
    """The result of extracting one file.

    Attributes:
        blocks: text in reading order.
        page_count: pages in the source (1 for unpaged formats).
        ocr_pages: pages without a text layer that were OCRed.
        ocr_pages_skipped: pages without a text layer left unread because no OCR engine is installed.
        images: images saved to the blob store.
        title: the document's own title, if it has one.
        warnings: things a user should hear about (e.g. "tesseract not installed: 3 pages unread").
        furniture_dropped: lines of page furniture (running heads, page numbers) left out.
    """

    blocks: list[Block]
    page_count: int
    title: str | None = None
    ocr_pages: int = 0
    ocr_pages_skipped: int = 0
    images: list[ExtractedImage] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    furniture_dropped: int = 0


@dataclass(slots=True)
class StructureFigures:
    """What structure extraction found in one document, for the ingest summary.

    Attributes:
        headings_by_level: heading count per level (1 = top level).
        entries: headings that open a section of text with no heading under it (a spell, a
            creature, a rule: the leaves of the heading tree).
        furniture_dropped: lines of page furniture left out.
    """

    headings_by_level: dict[int, int]
    entries: int
    furniture_dropped: int

    @classmethod
    def of(cls, doc: ExtractedDocument) -> StructureFigures:
        """Count the headings, entries and dropped furniture of an extracted document."""
        by_level: dict[int, int] = {}
        entries = 0
        open_level: int | None = None  # the last heading, while no text or deeper heading followed
        has_text = False
        for block in doc.blocks:
            if block.kind is BlockKind.HEADING:
                if open_level is not None and has_text and block.level <= open_level:
                    entries += 1
                by_level[block.level] = by_level.get(block.level, 0) + 1
                open_level, has_text = block.level, False
            elif open_level is not None:
                has_text = True
        if open_level is not None and has_text:
            entries += 1
        return cls(dict(sorted(by_level.items())), entries, doc.furniture_dropped)

    def to_dict(self) -> dict[str, object]:
        return {
            "headings_by_level": {str(level): n for level, n in self.headings_by_level.items()},
            "entries": self.entries,
            "furniture_dropped": self.furniture_dropped,
        }


@dataclass(slots=True)
class TextChunk:
    """A chunk before it gets its ids: text, where it came from, and its size in tokens."""

    sequence: int
    text: str
    heading_path: list[str]
    page_start: int | None
    page_end: int | None
    token_count: int
    kinds: list[str] = field(default_factory=list)
