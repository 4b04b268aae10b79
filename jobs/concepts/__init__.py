"""The CONCEPTS stage's logic: which concepts each chunk mentions, and which concepts go together.

The ingestion job runs read → extract → chunk → embed → **concepts** → write. This module is the plain
Python behind the concepts step (the Ray stage wrapper lives elsewhere). Two extractors share one
protocol, :class:`ConceptExtractor`:

- :class:`RuleConceptExtractor` — deterministic and model-free, fast enough for thousands of chunks a
  second on one core. It reads headings (the chunk's heading path and heading-like lines), glossary
  lines (``Term: definition``), terms set in bold, definitional sentences (``X is a …``, ``called X``,
  ``Game Master (GM)``) and capitalised multi-word names (``Fate Point``, ``Armor Class``), drops
  junk with stop-lists, then finds every lowercase mention of the document's vocabulary.
- :class:`LLMConceptExtractor` — asks any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server)
  for structured output; any chunk whose answer is missing, malformed or failed falls back to the
  rules, with the reason recorded on the chunk and in the extractor's :class:`LLMExtractionStats`.

:func:`build_concept_extractor` picks one from an optional :class:`LLMExtractorConfig`.

Call ``extract`` once per document (the chunks of one item): names, kinds and aliases are made
consistent across the chunks of one call, and the vocabulary found in one chunk is looked for in all.

Normalisation. A concept's ``normalized_name`` is ``schemas.knowledge.normalize_name`` of its display
name, and the display name is the singular of what the text says: the *last* word of a name loses a
simple English plural (``Aspects`` → ``aspect``, ``Fate Points`` → ``fate point``, ``Abilities`` →
``ability``, ``Boxes`` → ``box``, ``NPCs`` → ``npc``) while words that only look plural keep their
``s`` (``Stress``, ``Status``, ``Bonus``, ``Athletics``, ``Dice``, ``Basis``). The plural forms seen
in the text are kept as aliases, so search, which normalises a query with ``normalize_name`` only,
still finds ``"aspects"`` through the alias.

Results are plain dataclasses (cheap, picklable for Ray).

The package: :mod:`~jobs.concepts.results` (what extraction returns, the protocol),
:mod:`~jobs.concepts.names` (vocabulary and normalisation), :mod:`~jobs.concepts.collect` (relations,
document concepts, bold terms per chunk), :mod:`~jobs.concepts.rules` (the rule extractor) and
:mod:`~jobs.concepts.llm` (the LLM extractor, its configuration and the factory).
"""

from __future__ import annotations

from jobs.concepts.collect import assign_bold_terms, collect_concepts, relate_concepts
from jobs.concepts.llm import (
    ANSWER_SCHEMA_NAME,
    RESPONSE_FORMAT,
    AnswerChunk,
    AnswerConcept,
    ConceptAnswer,
    LLMConceptExtractor,
    LLMExtractionStats,
    LLMExtractorConfig,
    build_concept_extractor,
)
from jobs.concepts.names import concept_display_name
from jobs.concepts.results import (
    ChunkConcepts,
    ConceptExtractor,
    ConceptMention,
    ConceptRelation,
    DocumentConcept,
    ExtractorName,
    RelationKind,
)
from jobs.concepts.rules import RuleConceptExtractor

__all__ = [
    "ANSWER_SCHEMA_NAME",
    "RESPONSE_FORMAT",
    "AnswerChunk",
    "AnswerConcept",
    "ChunkConcepts",
    "ConceptAnswer",
    "ConceptExtractor",
    "ConceptMention",
    "ConceptRelation",
    "DocumentConcept",
    "ExtractorName",
    "LLMConceptExtractor",
    "LLMExtractionStats",
    "LLMExtractorConfig",
    "RelationKind",
    "RuleConceptExtractor",
    "assign_bold_terms",
    "build_concept_extractor",
    "collect_concepts",
    "concept_display_name",
    "relate_concepts",
]
