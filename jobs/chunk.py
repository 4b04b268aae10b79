"""Cut an extracted document into chunks by its library type's strategy.

``heading_aware`` (rulebooks, lore, settings, …): a chunk never spans two top-level sections, starts
at every heading that is not deeper than the sections it holds (so each entry — a spell, a creature —
gets chunks of its own), at a deeper heading once it has some content (a quarter of the target), and
otherwise
packs whole paragraphs up to ``target_tokens``; consecutive chunks of one section share up to
``overlap_tokens`` of whole trailing sentences. A chunk that holds only a heading and less than a
quarter of the target (an entry's level and school line) takes the next paragraph up to ``max_tokens``
rather than standing alone. Tables and stat blocks stay whole up to
``max_tokens`` (beyond that a table is cut between rows, each part repeating the header row).
A paragraph larger than the target is cut between sentences, and a sentence larger than the target
between words.

``paragraph`` (transcripts, notes): the same packing, with headings treated as text.

``fixed``: windows of ``target_tokens`` over the words, stepping ``target - overlap`` tokens.

The top level is the highest heading level present; a lone heading of that level that opens the
document (a book title over its chapters) makes the next level the top. Chunk token counts are the
sum of their pieces' counts: the counter's counts are additive over whitespace, and pieces are
joined with blank lines, so ``token_count == counter.count(chunk.text)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jobs.document import Block, BlockKind, ExtractedDocument, TextChunk
from jobs.tokens import TokenCounter
from schemas.knowledge import ChunkingDefaults, ChunkingStrategy

__all__ = ["chunk_document", "split_sentences", "top_level"]

# A sentence ends at . ! ? … (optionally closed by a quote or bracket) before white space and a
# capital, a digit or an opening quote. Abbreviations ("e.g. the") rarely precede a capital.
# The match opens with the white space and looks back from there: a pattern that opens with a
# look-behind is tried at every character, one that opens with ``\s`` only at white space (half
# the time of the overlap's and the long paragraphs' sentence splits).
_SENTENCE_END = re.compile(r"\s(?:(?<=[.!?…]\s)|(?<=[.!?…][\"'”’)\]]\s))\s*(?=[\"'“‘(\[]?[A-Z0-9])")
_SEPARATOR = "\n\n"
# Share of the target a chunk must hold before a (non-top-level) heading starts a new one.
_HEADING_BREAK_SHARE = 0.25


def split_sentences(text: str) -> list[str]:
    """Split text at sentence ends and line breaks (stat blocks and code are line-oriented)."""
    out: list[str] = []
    for line in text.split("\n"):
        out += [s for s in _SENTENCE_END.split(line) if s.strip()]
    return out


def top_level(blocks: Sequence[Block]) -> int | None:
    """The heading level that delimits top-level sections, or None when there are no headings."""
    levels = [b.level for b in blocks if b.kind is BlockKind.HEADING]
    if not levels:
        return None
    present = sorted(set(levels))
    top = present[0]
    if len(present) > 1 and levels.count(top) == 1 and levels[0] == top:
        return present[1]
    return top


@dataclass(slots=True)
class _Unit:
    """A piece of text the packer places whole."""

    text: str
    tokens: int
    kind: BlockKind
    page: int | None
    path: tuple[str, ...]
    section: int  # index of its top-level section
    overlap: bool = False  # repeated from the previous chunk


class _Packer:
    def __init__(self, settings: ChunkingDefaults, counter: TokenCounter) -> None:
        self.settings = settings
        self.counter = counter
        self.chunks: list[TextChunk] = []
        self.current: list[_Unit] = []
        self.tokens = 0
        self.fresh = 0  # tokens of units that are not overlap or headings

    # -- chunk assembly ---------------------------------------------------------------------

    def add(self, unit: _Unit) -> None:
        self.current.append(unit)
        self.tokens += unit.tokens
        if not unit.overlap and unit.kind is not BlockKind.HEADING:
            self.fresh += unit.tokens

    def flush(self, *, overlap: bool) -> None:
        """Close the current chunk; with ``overlap``, start the next one with its last sentences."""
        units = self.current
        tail = self._overlap(units) if overlap and self.settings.overlap_tokens else []
        if self.fresh > 0:
            self._emit(units)
        self.current, self.tokens, self.fresh = [], 0, 0
        for unit in tail:
            self.add(unit)

    def _emit(self, units: list[_Unit]) -> None:
        body = units
        fresh = [u for u in body if not u.overlap] or body
        # Headings that only lead into the text (a chapter title over its first entry) do not
        # widen the path: the chunk is the entry's.
        content = [u for u in fresh if u.kind is not BlockKind.HEADING] or fresh
        common = list(_common_path({u.path for u in content}))
        pages = [u.page for u in body if u.page is not None]
        # members deduplicated before their values are read: an enum's .value is a slow lookup
        kinds = [kind.value for kind in dict.fromkeys([u.kind for u in body])]
        self.chunks.append(
            TextChunk(
                sequence=len(self.chunks),
                text=_SEPARATOR.join([u.text for u in body]),
                heading_path=common,
                page_start=min(pages) if pages else None,
                page_end=max(pages) if pages else None,
                token_count=sum([u.tokens for u in body]),
                kinds=kinds,
            )
        )

    def _overlap(self, units: list[_Unit]) -> list[_Unit]:
        """Whole trailing sentences of the chunk's last prose units, up to the overlap budget."""
        budget = self.settings.overlap_tokens
        taken: list[_Unit] = []
        for unit in reversed(units):
            if unit.kind not in (BlockKind.PARAGRAPH, BlockKind.LIST_ITEM, BlockKind.CAPTION) or unit.overlap:
                break
            sentences = split_sentences(unit.text)
            picked: list[str] = []
            before = used = sum(u.tokens for u in taken)
            # Counted from the end, only as far as the budget reaches: the rest is not repeated.
            for sentence in reversed(sentences):
                count = self.counter.count(sentence)
                if used + count > budget:
                    break
                picked.append(sentence)
                used += count
            if picked:
                # counts add up over whitespace: the joined sentences count what they counted apart
                text = " ".join(reversed(picked))
                taken.append(_Unit(text, used - before, unit.kind, unit.page, unit.path, unit.section, overlap=True))
            if len(picked) < len(sentences):
                break
        taken.reverse()
        return taken

    # -- placing units ------------------------------------------------------------------------

    def place(self, unit: _Unit, *, whole: bool = False) -> None:
        """Add a unit, flushing first when it would push the chunk past its size.

        ``whole`` units (tables, stat blocks) start a chunk of their own when they do not fit, and
        may make it larger than the target (they are never larger than ``max_tokens``).
        """
        target, maximum = self.settings.target_tokens, self.settings.max_tokens
        if self.fresh and self.tokens + unit.tokens > target and not self._stub_takes(unit):
            # A caption goes with the table it names into the next chunk.
            caption = None
            if whole and self.current and self.current[-1].kind is BlockKind.CAPTION and len(self.current) > 1:
                caption = self.current.pop()
                self.tokens -= caption.tokens
                self.fresh -= caption.tokens
            # No overlap before a table: repeating prose in front of it adds nothing.
            self.flush(overlap=not whole)
            if caption is not None:
                self.add(caption)
        if self.tokens + unit.tokens > maximum:
            # Overlap (or a heading) plus this unit would break the hard limit: drop the overlap.
            self.current = [u for u in self.current if not u.overlap]
            self.tokens = sum(u.tokens for u in self.current)
        self.add(unit)
        if whole and self.tokens >= target:
            self.flush(overlap=False)

    def _stub_takes(self, unit: _Unit) -> bool:
        """Whether the chunk so far is only a heading and a line or two (an entry's level and school, its
        kind and rarity) and ``unit`` still fits under ``max_tokens``: it joins the chunk past the target.
        Cut there, the entry's identity would be a chunk of a few tokens that no question finds, and the
        overlap would repeat it at the head of the next chunk."""
        return (
            self.fresh < self.settings.target_tokens * _HEADING_BREAK_SHARE
            and any(u.kind is BlockKind.HEADING for u in self.current)
            and self.tokens + unit.tokens <= self.settings.max_tokens
        )

    def heading(self, unit: _Unit) -> None:
        """Add a heading: it starts a new chunk once the current one holds some content.

        A heading at the depth of the chunk's own sections or above (the next spell after a
        spell) always starts one, so that every entry gets a chunk of its own; a deeper heading
        (a sub-heading inside the entry) does once the chunk holds a quarter of the target. So
        does a heading two or more levels below the chunk's text (a chapter's lead-in, then a
        section heading, then the first entry): the lead-in keeps its chunk, and the headings
        between go on with the entry, whose chunk it then is.
        """
        depth = max((len(u.path) for u in self.current if not u.overlap), default=0)
        text_depth = max(
            (len(u.path) for u in self.current if not u.overlap and u.kind is not BlockKind.HEADING), default=0
        )
        if self.fresh and text_depth and len(unit.path) >= text_depth + 2:
            between: list[_Unit] = []
            while self.current and self.current[-1].kind is BlockKind.HEADING:
                between.insert(0, self.current.pop())
            self.tokens -= sum(u.tokens for u in between)
            self.flush(overlap=False)
            for heading in between:
                self.add(heading)
            self.add(unit)
            return
        if self.fresh and len(unit.path) <= depth or self.fresh >= self.settings.target_tokens * _HEADING_BREAK_SHARE:
            self.flush(overlap=False)
        elif not self.fresh:
            # Only overlap so far: a new heading is no place to repeat the previous text.
            self.current = [u for u in self.current if not u.overlap]
            self.tokens = sum(u.tokens for u in self.current)
        elif self.tokens + unit.tokens > self.settings.target_tokens:
            self.flush(overlap=False)
        self.add(unit)


def _common_path(paths: set[tuple[str, ...]]) -> tuple[str, ...]:
    """The longest heading path that starts every path in ``paths``."""
    if len(paths) == 1:
        return next(iter(paths))
    shortest = min(paths, key=len)
    for n, part in enumerate(shortest):
        if any(p[n] != part for p in paths):
            return shortest[:n]
    return shortest


def _split_words(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """Cut text between words into pieces of at most ``limit`` tokens (a longer word stands alone)."""
    words = text.split()
    counts = counter.word_counts(words)
    pieces: list[str] = []
    start, used = 0, 0
    for i, count in enumerate(counts):
        if used + count > limit and i > start:
            pieces.append(" ".join(words[start:i]))
            start, used = i, 0
        used += count
    if start < len(words):
        pieces.append(" ".join(words[start:]))
    return pieces


def _split_text(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """Cut prose between sentences (then words) into pieces of at most ``limit`` tokens."""
    sentences = split_sentences(text)
    counts = counter.count_many(sentences)
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for sentence, count in zip(sentences, counts, strict=True):
        if count > limit:
            if current:
                pieces.append(" ".join(current))
                current, used = [], 0
            pieces.extend(_split_words(sentence, limit, counter))
            continue
        if used + count > limit and current:
            pieces.append(" ".join(current))
            current, used = [], 0
        current.append(sentence)
        used += count
    if current:
        pieces.append(" ".join(current))
    return pieces


def _split_table(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """Cut a Markdown table between rows; every part repeats the header row and separator."""
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) < 3 or not lines[1].lstrip().startswith("|") or "---" not in lines[1]:
        return _split_lines(text, limit, counter)
    header = lines[0] + "\n" + lines[1]
    header_tokens = counter.count(header)
    rows = lines[2:]
    counts = counter.count_many(rows)
    room = max(limit - header_tokens, 1)
    parts: list[str] = []
    current: list[str] = []
    used = 0
    for row, count in zip(rows, counts, strict=True):
        if current and used + count > room:
            parts.append(header + "\n" + "\n".join(current))
            current, used = [], 0
        current.append(row)
        used += count
    if current:
        parts.append(header + "\n" + "\n".join(current))
    # A single row larger than the limit is cut like prose (its cells lose the grid, not the text).
    out: list[str] = []
    for part in parts:
        if counter.count(part) > limit:
            out.extend(_split_words(part, limit, counter))
        else:
            out.append(part)
    return out


def _split_lines(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """Cut line-oriented text (stat blocks, code) between lines, then like prose."""
    lines = [line for line in text.split("\n") if line.strip()]
    counts = counter.count_many(lines)
    parts: list[str] = []
    current: list[str] = []
    used = 0
    for line, count in zip(lines, counts, strict=True):
        if count > limit:
            if current:
                parts.append("\n".join(current))
                current, used = [], 0
            parts.extend(_split_text(line, limit, counter))
            continue
        if current and used + count > limit:
            parts.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += count
    if current:
        parts.append("\n".join(current))
    return parts


def _units(doc: ExtractedDocument, counter: TokenCounter) -> list[_Unit]:
    blocks = [b for b in doc.blocks if b.text.strip()]
    top = top_level(blocks)
    counts = counter.count_many([b.text for b in blocks])
    units: list[_Unit] = []
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    section = 0
    heading = BlockKind.HEADING
    for block, count in zip(blocks, counts, strict=True):
        if block.kind is heading:
            if top is not None and block.level <= top and units:
                section += 1
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.text))
            path = tuple(text for _, text in stack)
        units.append(_Unit(block.text, count, block.kind, block.page, path, section))
    return units


def _pack(units: list[_Unit], settings: ChunkingDefaults, counter: TokenCounter, *, headings: bool) -> list[TextChunk]:
    packer = _Packer(settings, counter)
    target, maximum = settings.target_tokens, settings.max_tokens
    # Pieces of a cut paragraph leave room for a heading in front of them.
    piece_limit = max(target - 32, target // 2)
    section = 0
    for unit in units:
        if unit.section != section:
            section = unit.section
            if settings.respect_top_level_sections:
                packer.flush(overlap=False)
        if unit.kind is BlockKind.HEADING and headings:
            packer.heading(unit)
            continue
        whole = (unit.kind is BlockKind.TABLE and settings.keep_tables_whole) or (
            unit.kind is BlockKind.STAT_BLOCK and settings.keep_stat_blocks_whole
        )
        if whole and unit.tokens <= maximum:
            packer.place(unit, whole=True)
            continue
        if unit.tokens <= target:
            packer.place(unit)
            continue
        if unit.kind is BlockKind.TABLE:
            pieces = _split_table(unit.text, piece_limit, counter)
        elif unit.kind in (BlockKind.STAT_BLOCK, BlockKind.CODE):
            pieces = _split_lines(unit.text, piece_limit, counter)
        else:
            pieces = _split_text(unit.text, piece_limit, counter)
        for piece, count in zip(pieces, counter.count_many(pieces), strict=True):
            packer.place(_Unit(piece, count, unit.kind, unit.page, unit.path, unit.section))
    packer.flush(overlap=False)
    return packer.chunks


def _fixed(units: list[_Unit], settings: ChunkingDefaults, counter: TokenCounter) -> list[TextChunk]:
    """Token windows over the words, within top-level sections when the settings ask for it."""
    target, overlap = settings.target_tokens, settings.overlap_tokens
    groups: list[list[_Unit]] = []
    for unit in units:
        if not groups or (settings.respect_top_level_sections and unit.section != groups[-1][-1].section):
            groups.append([])
        groups[-1].append(unit)
    chunks: list[TextChunk] = []
    for group in groups:
        words: list[str] = []
        owner: list[int] = []
        for n, unit in enumerate(group):
            split = unit.text.split()
            words.extend(split)
            owner.extend([n] * len(split))
        counts = counter.word_counts(words)
        start = 0
        while start < len(words):
            end, used = start, 0
            while end < len(words) and (used + counts[end] <= target or end == start):
                used += counts[end]
                end += 1
            covered = group[owner[start] : owner[end - 1] + 1]
            common = list(_common_path({u.path for u in covered}))
            pages = [u.page for u in covered if u.page is not None]
            chunks.append(
                TextChunk(
                    sequence=len(chunks),
                    text=" ".join(words[start:end]),
                    heading_path=common,
                    page_start=min(pages) if pages else None,
                    page_end=max(pages) if pages else None,
                    token_count=used,
                    kinds=list(dict.fromkeys(u.kind.value for u in covered)),
                )
            )
            if end >= len(words):
                break
            # Step back whole words worth up to ``overlap`` tokens, but always move forward.
            back, back_tokens = end, 0
            while back > start + 1 and back_tokens + counts[back - 1] <= overlap:
                back -= 1
                back_tokens += counts[back]
            start = back
    return chunks


def chunk_document(doc: ExtractedDocument, settings: ChunkingDefaults, counter: TokenCounter) -> list[TextChunk]:
    """Cut ``doc`` into chunks as ``settings`` say (strategy, sizes, overlap, what stays whole).

    Args:
        doc: the extracted document.
        settings: the library's effective chunking (its type's defaults plus its override).
        counter: counts tokens as the embedding model does.

    Returns:
        Chunks numbered 0..n-1 in document order, none empty, each with its heading path (top
        level first), page range and token count. The same input always gives the same chunks.
    """
    units = _units(doc, counter)
    if not units:
        return []
    if settings.strategy is ChunkingStrategy.FIXED:
        return _fixed(units, settings, counter)
    return _pack(units, settings, counter, headings=settings.strategy is ChunkingStrategy.HEADING_AWARE)
