"""What concept extraction returns and the protocol every extractor follows.

Mentions per chunk (:class:`ConceptMention`, :class:`ChunkConcepts`), a document's concepts
(:class:`DocumentConcept`) and RELATED_TO edges (:class:`ConceptRelation`) are plain dataclasses
(cheap, picklable for Ray); :class:`ConceptExtractor` is the protocol of the rule and LLM extractors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from jobs.document import TextChunk
from schemas.common import content_id
from schemas.knowledge import Concept, ConceptKind


class ExtractorName(StrEnum):
    """Which extractor produced a chunk's concepts."""

    RULES = "rules"
    LLM = "llm"
    RULES_FALLBACK = "rules_fallback"  # the LLM was asked and failed; the rules answered instead


class RelationKind(StrEnum):
    """Edge types between concepts."""

    RELATED_TO = "RELATED_TO"


@dataclass(slots=True, frozen=True)
class ConceptMention:
    """A concept that one chunk mentions.

    Attributes:
        name: display name, singular, as the document writes it (``"Fate Point"``).
        normalized_name: ``normalize_name(name)``; the concept's key across chunks and documents.
        kind: what the concept names (mechanic, term, location…); a cheap guess for the rules.
        aliases: other names for it seen in the document (plurals, abbreviations), sorted.
        score: salience in this chunk, 0..1 (how central the concept is to the chunk).
        count: times the chunk's text names it (0 when only a heading or the model names it).
        evidence: what found it, sorted (``"heading"``, ``"bold"``, ``"glossary"``, ``"definition"``,
            ``"capitalized"``, ``"mention"``, ``"llm"`` …).
    """

    name: str
    normalized_name: str
    kind: ConceptKind
    aliases: tuple[str, ...] = ()
    score: float = 0.0
    count: int = 0
    evidence: tuple[str, ...] = ()


@dataclass(slots=True)
class ChunkConcepts:
    """The concepts one chunk mentions, most salient first (ties by normalized name).

    Attributes:
        sequence: the chunk's ``TextChunk.sequence``.
        concepts: its mentions, in a deterministic order.
        extractor: which extractor answered for this chunk.
        fallback_reason: why the LLM's answer was not used (``"http_500: …"``), else None.
    """

    sequence: int
    concepts: list[ConceptMention] = field(default_factory=list)
    extractor: ExtractorName = ExtractorName.RULES
    fallback_reason: str | None = None


@dataclass(slots=True, frozen=True)
class ConceptRelation:
    """An undirected RELATED_TO edge between two co-mentioned concepts, stored once.

    ``source < target`` (by normalized name) so a pair has one canonical form.

    Attributes:
        source: normalized name of the first concept.
        target: normalized name of the second concept.
        chunk_count: chunks in which both appear.
        weight: ``chunk_count / sqrt(chunks(source) * chunks(target))`` — the Ochiai (cosine)
            coefficient, in (0, 1]: 1 when the two always appear together, small when a pair
            co-occurs only because both concepts are everywhere.
        chunk_sequences: the chunks in which both appear, ascending (provenance).
        kind: the edge type.
    """

    source: str
    target: str
    chunk_count: int
    weight: float
    chunk_sequences: tuple[int, ...] = ()
    kind: RelationKind = RelationKind.RELATED_TO


@dataclass(slots=True, frozen=True)
class DocumentConcept:
    """One concept of a document, summed over the chunks that mention it.

    Attributes:
        name: display name.
        normalized_name: its key.
        kind: its kind.
        aliases: other names, sorted.
        chunk_count: chunks that mention it.
        mention_count: times the text names it, over all chunks.
        max_score: its highest salience in any chunk.
        total_score: its salience summed over chunks (how much of the document is about it).
        chunk_sequences: the chunks that mention it, ascending.
    """

    name: str
    normalized_name: str
    kind: ConceptKind
    aliases: tuple[str, ...]
    chunk_count: int
    mention_count: int
    max_score: float
    total_score: float
    chunk_sequences: tuple[int, ...]

    def to_concept(self, *, library_uid: str | None = None) -> Concept:
        """The graph record for this concept; its uid is derived from kind + normalized name."""
        return Concept(
            uid=content_id("concept", f"{self.kind.value}:{self.normalized_name}"),
            name=self.name,
            normalized_name=self.normalized_name,
            kind=self.kind,
            aliases=list(self.aliases),
            library_uid=library_uid,
        )


# ---------------------------------------------------------------------------------------------------
# Protocol and shared steps
# ---------------------------------------------------------------------------------------------------


@runtime_checkable
class ConceptExtractor(Protocol):
    """Finds the concepts chunks mention and relates the co-mentioned ones."""

    def extract(
        self,
        chunks: Sequence[TextChunk],
        *,
        bold_terms_by_chunk: Sequence[Sequence[str]] | None = None,
    ) -> list[ChunkConcepts]:
        """Return one :class:`ChunkConcepts` per chunk, in the order of ``chunks``.

        Args:
            chunks: the chunks of one document.
            bold_terms_by_chunk: terms set in bold in each chunk (same length as ``chunks``), if the
                extractor of the document knew them (see :func:`assign_bold_terms`).

        Raises:
            ValueError: if ``bold_terms_by_chunk`` is not one entry per chunk.
        """
        ...

    def relate(self, mentions: Sequence[ChunkConcepts]) -> list[ConceptRelation]:
        """Return RELATED_TO edges between concepts mentioned in the same chunks."""
        ...


def _mention_order(m: ConceptMention) -> tuple[float, str]:
    return (-m.score, m.normalized_name)


def _check_bold(chunks: Sequence[TextChunk], bold: Sequence[Sequence[str]] | None) -> None:
    if bold is not None and len(bold) != len(chunks):
        raise ValueError(f"bold_terms_by_chunk has {len(bold)} entries for {len(chunks)} chunks; give one per chunk")
