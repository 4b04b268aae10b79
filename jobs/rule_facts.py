"""Rule facts at ingest: an extracted rulebook's entries read into typed source facts, each placed on
the chunk and page that hold it.

The extract stage calls :func:`read_facts` after chunking: :func:`rulebook.entry_sections` folds the
document's blocks into entry sections, :func:`rulebook.extract_facts` reads each with the family tables
the settings choose (:func:`rule_tables`), and every fact gets the chunk its text landed in (so the
gate can cite it and a reader can open it) and the page of the block it was printed on (an entry that
runs over a page break states its later fields on the later page). Locating is by text: the chunker
and the section folder both walk the same blocks, but the chunker packs, splits and overlaps them, so
a fact is looked for in the chunks of its own entry first, then in those of the sections above it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from jobs.document import Block, BlockKind, ExtractedDocument, TextChunk
from jobs.rows import chunk_uid
from rulebook import (
    FamilyTable,
    builtin_tables,
    detect_kind,
    entry_sections,
    extract_facts,
    load_tables,
    section_text,
)
from schemas.knowledge import FileType
from schemas.rulefacts import EntrySection, SourceFact, clean_text
from schemas.settings import Settings

__all__ = ["FACT_FILE_TYPES", "RULE_FACTS_READ", "FactsRead", "read_facts", "rule_tables"]

#: The item property set once an item's facts were read (even none): an unchanged re-ingest of an
#: item without it reads them (an item ingested before rule facts, or with them off).
RULE_FACTS_READ = "rule_facts_read"

#: The formats whose headings extraction reads reliably enough to fold into entries.
FACT_FILE_TYPES = frozenset({FileType.PDF, FileType.MARKDOWN, FileType.HTML})

# Entries sampled to tell which family a book is (detect_kind on each: a few percent of reading it).
_SAMPLE = 48

# How much of a fact's text is looked for: enough to tell fields apart, short enough to stay inside
# one block when the value wraps to the next.
_PROBE_CHARS = 48


@dataclass
class FactsRead:
    """What one document states: its facts in reading order and how many there are per entry kind."""

    facts: list[SourceFact] = field(default_factory=list)
    entries: int = 0

    @property
    def by_kind(self) -> dict[str, int]:
        """Facts per entry kind (spell, creature, entry …), most first."""
        return dict(Counter(f.subject.kind for f in self.facts).most_common())


def rule_tables(settings: Settings) -> list[FamilyTable]:
    """The family tables ``settings.rule_families`` names (every shipped one when it names none).

    Raises:
        TableError: a family that is not shipped, or a TOML file that cannot be read or checked.
    """
    return _tables(tuple(settings.rule_families))


@cache
def _tables(families: tuple[str, ...]) -> list[FamilyTable]:
    return load_tables(families) if families else list(builtin_tables().values())


def _squash(text: str) -> str:
    """Text as compared when locating a fact: cleaned, no Markdown emphasis, one space, case folded.

    ASCII text skips :func:`clean_text`: its normal form and character map change only other
    characters, and the split below folds the spaces it would (locating squashes every block,
    chunk and fact, a large share of reading a book's facts).
    """
    if not text.isascii():
        text = clean_text(text)
    return " ".join(text.replace("*", " ").replace("_", " ").split()).casefold()


def _path(titles: Sequence[str]) -> tuple[str, ...]:
    return tuple(" ".join(t.split()) for t in titles)


def _probe(raw: str) -> str:
    first = raw.strip().split("\n", 1)[0]
    return _squash(first)[:_PROBE_CHARS]


class _Chunks:
    """The document's chunks by heading path, with their squashed text read once."""

    def __init__(self, item_uid: str, chunks: Sequence[TextChunk]) -> None:
        self.item_uid = item_uid
        self.by_path: dict[tuple[str, ...], list[TextChunk]] = defaultdict(list)
        for chunk in chunks:
            self.by_path[_path(chunk.heading_path)].append(chunk)
        self._text: dict[int, str] = {}

    def text(self, chunk: TextChunk) -> str:
        if chunk.sequence not in self._text:
            self._text[chunk.sequence] = _squash(chunk.text)
        return self._text[chunk.sequence]

    def locate(self, path: tuple[str, ...], probes: Sequence[str]) -> TextChunk | None:
        """The first chunk holding a probe (the first probe tried everywhere before the next): the
        entry's own chunks, then those of the sections above it.

        When no chunk holds any (extraction and chunking saw the text differently), the entry's first
        chunk, else None.
        """
        for probe in probes:
            if not probe:
                continue
            for depth in range(len(path), 0, -1):
                for chunk in self.by_path.get(path[:depth], ()):
                    if probe in self.text(chunk):
                        return chunk
        own = self.by_path.get(path)
        return own[0] if own else None


def _page(blocks: Sequence[tuple[int | None, str]], probe: str, default: int | None) -> int | None:
    """The page of the first block (page, squashed text) holding ``probe``, else ``default``."""
    for page, text in blocks:
        if page is not None and probe and probe in text:
            return page
    return default


def _sections(blocks: Sequence[Block]) -> list[tuple[EntrySection, list[Block]]]:
    """Each entry section with the blocks under its heading (for the page a fact is printed on).

    With ``keep_empty`` :func:`entry_sections` gives exactly one section per heading, in order, so the
    blocks between one heading and the next are that section's.
    """
    sections = entry_sections(blocks, keep_empty=True)
    runs: list[list[Block]] = []
    for block in blocks:
        if str(block.kind) == BlockKind.HEADING.value:
            runs.append([])
        elif runs:
            runs[-1].append(block)
    if len(runs) != len(sections):  # a BlockLike change would break the pairing: fall back to no blocks
        return [(s, []) for s in sections if s.text.strip()]
    return [(s, run) for s, run in zip(sections, runs, strict=True) if s.text.strip()]


def _by_document(tables: Sequence[FamilyTable], sections: Sequence[EntrySection]) -> list[FamilyTable]:
    """The tables in the order this document calls for: its own family first, then the generic table.

    With every shipped table in play, the first table that reads generic fields names the family of
    an entry no kind claims, and the first table wins a tie between kinds. A sample of the entries
    (at most ``_SAMPLE``, spread over the book) votes for the family whose kinds they are; the winner
    goes first, the tables without kinds next (a book no family claims gets ``generic`` facts), the
    rest after. Nothing is dropped, so a kind of another family is still read where it is printed.
    """
    if len(tables) < 2:
        return list(tables)
    step = max(1, len(sections) // _SAMPLE)
    votes = Counter(m.family for s in sections[::step][:_SAMPLE] if (m := detect_kind(s, tables)) is not None)
    own = [t for t in tables if votes and t.family == votes.most_common(1)[0][0]]
    plain = [t for t in tables if not t.kinds and t not in own]
    return own + plain + [t for t in tables if t not in own and t not in plain]


def read_facts(
    doc: ExtractedDocument,
    chunks: Sequence[TextChunk],
    item_uid: str,
    tables: Sequence[FamilyTable],
    *,
    order_by_document: bool = False,
) -> FactsRead:
    """The source facts a document states, each with the chunk id and page that hold it.

    ``order_by_document``: the tables were not named by the user (every shipped one): put the
    document's own family first (:func:`_by_document`). A document without headings has no entries
    and states nothing.
    """
    if not any(b.kind is BlockKind.HEADING for b in doc.blocks):
        return FactsRead()
    located = _Chunks(item_uid, chunks)
    uids: dict[int, str] = {}  # chunk ids by sequence: a book's facts share a few hundred chunks
    out = FactsRead()
    sections = _sections(doc.blocks)
    if order_by_document:
        tables = _by_document(tables, [s for s, _ in sections])
    for section, blocks in sections:
        facts = extract_facts(section, tables)
        if not facts:
            continue
        out.entries += 1
        path = _path(section.heading_path)
        text = section_text(section)
        squashed = [(b.page, _squash(b.text)) for b in blocks]
        for fact in facts:
            probe = _probe(fact.raw)
            # the text from the fact on tells a short value ("9") from the same digits elsewhere
            start = fact.offset if fact.offset is not None else None
            context = _squash(text[start : start + 4 * _PROBE_CHARS])[:_PROBE_CHARS] if start is not None else ""
            chunk = located.locate(path, (context, probe))
            page = _page(squashed, probe, section.page)
            if page is None and chunk is not None:
                page = chunk.page_start
            uid = None
            if chunk is not None:
                uid = uids.get(chunk.sequence)
                if uid is None:
                    uid = uids[chunk.sequence] = chunk_uid(item_uid, chunk.sequence)
            out.facts.append(fact.model_copy(update={"chunk_id": uid, "page": page}))
    return out
