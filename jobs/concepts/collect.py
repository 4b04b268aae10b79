"""Document-level steps on the extractors' results: relate co-mentioned concepts, sum a
document's mentions per concept, and spread the bold terms of its blocks over its chunks.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import combinations

from jobs.concepts.names import _dedupe_aliases
from jobs.concepts.results import ChunkConcepts, ConceptMention, ConceptRelation, DocumentConcept, _mention_order
from jobs.document import Block, TextChunk


def relate_concepts(
    mentions: Sequence[ChunkConcepts],
    *,
    max_concepts_per_chunk: int = 12,
    min_chunk_count: int = 1,
) -> list[ConceptRelation]:
    """Relate concepts that chunks mention together.

    Only each chunk's ``max_concepts_per_chunk`` most salient concepts take part, which bounds the
    pairs a chunk adds (12 → 66) and keeps incidental mentions from linking everything to everything.

    Args:
        mentions: the per-chunk results of ``extract`` (one entry per chunk).
        max_concepts_per_chunk: concepts per chunk that take part.
        min_chunk_count: keep pairs that co-occur in at least this many chunks.

    Returns:
        Edges, strongest first: by chunk count, then weight, then names.
    """
    chunks_of: Counter[str] = Counter()
    together: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for chunk in mentions:
        top = sorted(chunk.concepts, key=_mention_order)[:max_concepts_per_chunk]
        keys = sorted({m.normalized_name for m in top})
        chunks_of.update(keys)
        for pair in combinations(keys, 2):  # keys are sorted, so each pair is (smaller, larger)
            together[pair].append(chunk.sequence)
    relations = [
        ConceptRelation(
            source=a,
            target=b,
            chunk_count=len(seqs),
            weight=round(len(seqs) / math.sqrt(chunks_of[a] * chunks_of[b]), 4),
            chunk_sequences=tuple(sorted(seqs)),
        )
        for (a, b), seqs in together.items()
        if len(seqs) >= min_chunk_count
    ]
    relations.sort(key=lambda r: (-r.chunk_count, -r.weight, r.source, r.target))
    return relations


def collect_concepts(mentions: Sequence[ChunkConcepts]) -> list[DocumentConcept]:
    """Sum the per-chunk mentions into one record per concept.

    Returns:
        Concepts, the ones the document is most about first: by total salience, then chunks that
        mention them, then name.
    """
    by_key: dict[str, list[tuple[int, ConceptMention]]] = defaultdict(list)
    for chunk in mentions:
        for mention in chunk.concepts:
            by_key[mention.normalized_name].append((chunk.sequence, mention))
    out: list[DocumentConcept] = []
    for key, found in by_key.items():
        first = found[0][1]  # extractors harmonise name/kind/aliases per document already
        aliases = sorted({a for _, m in found for a in m.aliases})
        out.append(
            DocumentConcept(
                name=first.name,
                normalized_name=key,
                kind=first.kind,
                aliases=tuple(_dedupe_aliases(aliases, key)),
                chunk_count=len({seq for seq, _ in found}),
                mention_count=sum(m.count for _, m in found),
                max_score=max(m.score for _, m in found),
                total_score=round(sum(m.score for _, m in found), 4),
                chunk_sequences=tuple(sorted({seq for seq, _ in found})),
            )
        )
    out.sort(key=lambda c: (-c.total_score, -c.chunk_count, c.normalized_name))
    return out


def assign_bold_terms(chunks: Sequence[TextChunk], blocks: Sequence[Block]) -> list[list[str]]:
    """Spread the bold terms of a document's blocks over its chunks.

    A term goes to every chunk whose text contains it; on paged documents only blocks whose page lies
    in the chunk's page range are considered, which keeps the work near linear on long books.

    Returns:
        One list per chunk (same order), each sorted and without duplicates.
    """
    by_page: defaultdict[int | None, set[str]] = defaultdict(set)
    for block in blocks:
        for term in block.bold_terms:
            if term.strip():
                by_page[block.page].add(term.strip())
    every = set().union(*by_page.values()) if by_page else set()
    out: list[list[str]] = []
    for chunk in chunks:
        if chunk.page_start is not None and chunk.page_end is not None:
            pool: set[str] = set(by_page.get(None, ()))
            for page in range(chunk.page_start, chunk.page_end + 1):
                pool |= by_page.get(page, set())
        else:
            pool = every
        out.append(sorted(t for t in pool if t in chunk.text))
    return out
