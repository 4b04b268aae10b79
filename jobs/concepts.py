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
"""

from __future__ import annotations

import html
import json
import logging
import math
import random
import re
import threading
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
    field_validator,
)

from jobs.document import Block, TextChunk
from schemas.common import content_id
from schemas.knowledge import Concept, ConceptKind, normalize_name

if TYPE_CHECKING:
    from openai import OpenAI

__all__ = [
    "ChunkConcepts",
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

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------


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


def _mention_order(m: ConceptMention) -> tuple[float, str]:
    return (-m.score, m.normalized_name)


def _check_bold(chunks: Sequence[TextChunk], bold: Sequence[Sequence[str]] | None) -> None:
    if bold is not None and len(bold) != len(chunks):
        raise ValueError(f"bold_terms_by_chunk has {len(bold)} entries for {len(chunks)} chunks; give one per chunk")


# ---------------------------------------------------------------------------------------------------
# Names: cleaning, singular forms, kinds
# ---------------------------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _phrases(text: str) -> frozenset[str]:
    return frozenset(" ".join(p.split()) for p in text.split(",") if p.strip())


# Words that cannot start a concept name (pronouns, determiners, conjunctions, adverbs…). Sentence
# starts and "If you …" constructions fall out here.
_STOP_START = _words("""
    a an the this that these those some any each every all both either neither no not nor none
    i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
    one's oneself yourself yourselves themselves himself herself itself ourselves
    and or but so yet for if when whenever while once unless until since because although though
    as at by in on to of off out up down over under into onto from with without within about above
    below after before between during through throughout against among around per via than then
    what who whom whose which where why how whatever whoever however
    is are was were be been being am do does did done doing have has had having can could will would
    shall should may might must let lets let's
    also just only even still again here there now never always often sometimes usually ever
    very really quite rather too much many more most less least few several such same other another
    own else instead otherwise therefore thus hence meanwhile finally first second third next last
    lastly maybe perhaps yes okay ok please thank thanks note notes see eg e.g ie i.e etc vs
    one two three four five six seven eight nine ten hundred thousand
    """)
_STOP_END = _words("""
    a an the and or but nor of to in on at by for from with into onto as than then that which who
    what when where why how if while whom whose
    is are was were be been being am do does did have has had can could will would should may might
    must etc vs
    """)
# Inside a name these mark a phrase or clause, not a name ("Success at a Cost", "Aspects Are True").
_INNER_REJECT = _words("""
    and or but nor if when whenever while because although though unless until since than
    to from for in on at by into onto about over under without between through during against
    is are was were be been being am do does did have has had can could will would shall should
    may might must not no that
    what who whom whose which where why how
    i me my we us our you your he him his she her it its they them their
    """)
# Imperatives that open instructions ("Make the Character", "Run scenes"), not names.
_VERB_START = _words("""
    make get take use give go come see find keep put try tell ask show play read write modify start
    begin pick choose decide add remove hate love owe need want know think look happen happens sell
    stop wander run gotta learn describe explain remember consider imagine
    """)
# Connectors allowed inside a capitalised name: "Deck of Fate", "Create an Advantage".
_CONNECTORS = _words("of the a an de du la le von van der")
# Pronouns anywhere in a phrase make it a sentence, not a name ("Define Your Setting").
_PRONOUNS = _words("i me my mine we us our ours you your yours they them their theirs")
# Leading words dropped before judging (articles and possessives in front of a real name).
_LEADING_DROP = _words("the a an your our their his her its my")
# Structural words: "Chapter 3", "Part II", "Table 4", "page XX" are never concepts.
_CHAPTER_WORDS = _words(
    "chapter chapters part section sections page pages table tables figure fig appendix appendices "
    "book volume vol contents index sidebar"
)
# Headings and labels that are front/back matter, not concepts.
_BOILERPLATE = _phrases(
    """
    introduction, credits, credit, contents, index, glossary, appendix, foreword, preface, license,
    licence, legal, acknowledgments, acknowledgements, about, overview, summary, example, examples,
    sidebar, note, notes, copyright, conclusion, afterword, epilogue, prologue, dedication,
    bibliography, references, errata, the end, what's next, quick start, quickstart, how to play,
    table of contents, open game license, system reference document, creative commons
    """
)
# Everyday words that are never concepts on their own (but fine inside a name: "Big Bad").
_COMMON_WORDS = _words("""
    thing things stuff way ways time times people person folks everyone everybody someone somebody
    anyone anybody something anything everything nothing nobody example examples choice choices
    option idea ideas lot lots kind kinds sort sorts type types part parts case cases fact facts
    point-of-view reason reasons answer answers question questions word words name names number numbers
    good bad great better best worse worst new old big small little large high low long short easy hard
    different important possible true false sure able certain whole full real simple special basic
    general common usual normal right left wrong free main major minor final
    use uses used using make makes made making get gets got take takes took give gives gave go goes went
    come comes came say says said know knows knew think thinks thought look looks looked want wants
    need needs try tries tried tell tells told ask asks call calls called keep keeps put puts set sets
    mean means meant find finds found let see seen show shows shown work works read write play plays
    day days year years week weeks hour hours minute minutes moment moments today tomorrow yesterday
    man men woman women child children friend friends group groups side sides end ends start begin
    yes no okay ok hey oh well sir madam mr mrs ms dr
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    english internet web online website email news
    """)
# Last words that make a name a rule / mechanic; checked on the singular, lowercase last word.
_MECHANIC_WORDS = _words("""
    roll check test throw save point bonus penalty modifier action attack defense defence defend damage
    initiative advantage disadvantage stress consequence track box rating level score difficulty dc class
    skill stunt invoke invocation compel refresh ladder shift boost overcome challenge contest conflict
    round turn milestone hit opposition success failure tie spell slot proficiency ability feat
    condition aspect die dice rule mechanic move maneuver manoeuvre reaction approach
    """)
_LOCATION_WORDS = _words("""
    city town village hamlet castle keep fortress citadel tower temple shrine forest wood woods mountain
    mountains hill hills river lake sea ocean bay island isle isles valley vale plain plains desert
    swamp marsh kingdom empire realm province duchy county land lands road street district quarter
    cave caves cavern dungeon ruin ruins palace manor inn tavern harbor harbour port gate pass peak
    coast shore world plane continent
    """)
_ORGANIZATION_WORDS = _words("""
    guild church company council brotherhood sisterhood society clan cult academy league alliance
    legion army navy consortium syndicate cabal circle covenant college university house dynasty
    tribe faction party productions press publishing inc llc ltd corporation
    """)
_CREATURE_WORDS = _words("""
    dragon goblin orc troll ogre giant wolf zombie skeleton vampire ghoul ghost wraith demon devil
    elemental golem beast spider rat bat serpent snake wyrm drake hound kobold gnoll lich undead
    monster creature
    """)
_ITEM_WORDS = _words("""
    sword blade axe bow dagger spear staff wand rod ring amulet necklace cloak boots gauntlet gauntlets
    helm shield armor armour potion scroll tome gem crown orb relic artifact artefact
    """)
_EVENT_WORDS = _words("war battle siege festival rebellion revolution uprising cataclysm coronation")
_HONORIFICS = _words(
    "lord lady king queen prince princess sir dame captain duke duchess baron baroness count countess "
    "emperor empress saint father mother brother sister master mistress doctor professor general"
)
# Nouns after "X is a …" that say what X is.
_DEFINITION_KINDS: dict[str, ConceptKind] = {
    **{w: ConceptKind.MECHANIC for w in _words("roll action rule mechanic bonus penalty modifier check test")},
    **{w: ConceptKind.MECHANIC for w in _words("measure number value score rating track way")},
    **{w: ConceptKind.LOCATION for w in _words("place city town region land kingdom realm country village")},
    **{w: ConceptKind.CHARACTER for w in _words("person man woman wizard king queen hero villain god goddess")},
    **{w: ConceptKind.CREATURE for w in _words("creature monster beast race species animal")},
    **{w: ConceptKind.ORGANIZATION for w in _words("group faction guild order organization organisation")},
    **{w: ConceptKind.ITEM for w in _words("weapon item artifact artefact tool object device")},
    **{w: ConceptKind.EVENT for w in _words("event battle war festival")},
}
_MECHANIC_TERMS = frozenset({"turn order", "high concept", "free invoke", "taken out", "zone"})

# Plurals that simple suffix rules get wrong, and words that only look plural.
_IRREGULAR_SINGULAR = {
    "children": "child",
    "people": "people",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "wolves": "wolf",
    "elves": "elf",
    "dwarves": "dwarf",
    "halves": "half",
    "knives": "knife",
    "lives": "life",
    "thieves": "thief",
    "leaves": "leaf",
    "selves": "self",
    "staves": "staff",
    "heroes": "hero",
    "echoes": "echo",
    "potatoes": "potato",
    "tomatoes": "tomato",
    "vetoes": "veto",
    "criteria": "criterion",
    "phenomena": "phenomenon",
    "dice": "dice",
    "indices": "index",
    "matrices": "matrix",
}
_INVARIANT = _words("""
    series species news lens gas bias atlas chaos ethos kudos pathos status bonus always perhaps various
    across less unless yes this thus was has does its his hers ours yours theirs christmas dice
    mathematics physics athletics tactics ethics politics economics logistics aesthetics acoustics
    """)
_US_PLURALS = _words("bonus status virus campus census chorus nexus apparatus syllabus bus focus")
_GERUND_EXCEPTIONS = _words(
    "evening morning string spring sling sting swing thing nothing something anything everything "
    "ceiling wedding clothing king ring wing"
)

_POSSESSIVE_ENDINGS = ("'s", "’s", "s'", "s’")
_ROMAN_RE = re.compile(r"[IVXL]+")
_ROMAN_VALID_RE = re.compile(r"(?=[IVXL])L?X{0,3}(?:IX|IV|V?I{0,3})")
_ACRONYM_RE = re.compile(r"[A-Z]{2,4}s?")
_HAS_LETTER_RE = re.compile(r"[^\W\d_]")
_STRIP_CHARS = " \t\n\r.,;:!?\"'“”‘’()[]{}<>*_`#|/\\~=+-–—•·…"
_MARKUP_CHARS = (("*", " "), ("_", " "), ("`", " "), ("™", ""), ("®", ""), ("©", ""), ("\u00ad", ""))


def _strip_markup(text: str) -> str:
    """Emphasis markers and trademark signs out (chained replaces: far faster than str.translate)."""
    for char, replacement in _MARKUP_CHARS:
        if char in text:
            text = text.replace(char, replacement)
    return text


_SPACE_RE = re.compile(r"[ \t]+")


@lru_cache(maxsize=65536)
def _singular_word(word: str) -> str:
    """The singular of one word for simple English plurals, keeping the word's case."""
    if _ACRONYM_RE.fullmatch(word) and word.endswith("s"):
        return word[:-1]  # NPCs -> NPC, PCs -> PC
    if len(word) <= 3:
        return word
    lower = word.lower()
    if lower in _IRREGULAR_SINGULAR:
        single = _IRREGULAR_SINGULAR[lower]
        return single.capitalize() if word[0].isupper() else single
    if lower in _INVARIANT or lower.endswith(("ss", "us", "is", "ics", "ous", "'s", "’s")):
        return word
    if not lower.endswith("s"):
        return word
    if lower.endswith("ies"):
        return word[:-3] + ("Y" if word[-3].isupper() else "y") if len(lower) > 4 else word[:-1]
    if lower.endswith("uses") and lower[:-2] in _US_PLURALS:
        return word[:-2]  # bonuses -> bonus
    if lower.endswith(("sses", "xes", "zzes", "shes")):
        return word[:-2]
    if lower.endswith("ches"):
        # matches -> match, beaches -> beach, approaches -> approach; headaches / caches -> ache / cache
        keep_e = lower.endswith("aches") and not lower.endswith(("eaches", "oaches"))
        return word[:-1] if keep_e else word[:-2]
    return word[:-1]


def _plural_word(word: str) -> str:
    """A plural of a lowercase word, for finding plural mentions of a singular concept."""
    if word in _INVARIANT or word.endswith(("ss", "us", "is", "ics", "ous")):
        return word + "es" if word.endswith(("ss", "us")) else word
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("x", "z", "ch", "sh")):
        return word + "es"
    return word + "s"


def concept_display_name(surface: str) -> str:
    """The display name for a surface form: whitespace collapsed, last word made singular.

    ``"Fate  Points"`` → ``"Fate Point"``; ``"Stress"`` → ``"Stress"``. Its
    ``normalize_name`` is the concept's key.
    """
    words = surface.split()
    if not words:
        return ""
    last = words[-1]
    if "-" in last:  # "non-player characters": only the last part of a hyphenated word is plural
        head, _, tail = last.rpartition("-")
        words[-1] = f"{head}-{_singular_word(tail)}"
    else:
        words[-1] = _singular_word(last)
    return " ".join(words)


def _is_roman(word: str) -> bool:
    return bool(_ROMAN_RE.fullmatch(word) and _ROMAN_VALID_RE.fullmatch(word))


@lru_cache(maxsize=65536)  # the same headings and names recur in chunk after chunk
def _clean_candidate(raw: str, *, max_words: int = 5, strict_first: bool = False) -> str | None:
    """Turn a raw candidate (a heading, a bold term, a run of capitals) into a name, or None if junk.

    Args:
        raw: the text as found.
        max_words: longest name accepted.
        strict_first: also refuse a first word that is an everyday word (for sentence subjects,
            where "Good news is…" must not make "good news" a concept).

    Returns:
        The cleaned surface form (original case, plural kept), or None.
    """
    if "?" in raw or "!" in raw:
        return None  # questions and exclamations are sentences ("Who Are You?")
    # "Repercussion (leave them)": the parenthesis qualifies the name, it is not part of it
    text = _strip_markup(raw.split("(", 1)[0]).strip(_STRIP_CHARS)
    if not text or len(text) > 80:
        return None
    words = text.split()
    while words and words[0].lower() in _LEADING_DROP:
        words.pop(0)
    if words and words[-1].lower().endswith(("'s", "’s")):
        words[-1] = words[-1][:-2]
    words = [w.strip(_STRIP_CHARS) for w in words]
    words = [w for w in words if w]
    if not words or len(words) > max_words:
        return None
    lowers = [w.lower() for w in words]
    first, last = lowers[0], lowers[-1]
    if first in _STOP_START or last in _STOP_END or first in _CHAPTER_WORDS or first in _BOILERPLATE:
        return None
    if first in _VERB_START or (strict_first and first in _COMMON_WORDS):
        return None
    content = [w for w in words if w.lower() not in _CONNECTORS]
    if len(content) >= 3 and content[0][:1].isupper() and all(w[:1].islower() for w in content[1:]):
        return None  # "Determine the costs of failure": sentence case over three words is a phrase
    if any(w.endswith(_POSSESSIVE_ENDINGS) for w in lowers[:-1]):
        return None  # "the GM's character", "the PCs' lives": a phrase about a name, not a name
    if any(w in _PRONOUNS for w in lowers) or any(w in _INNER_REJECT for w in lowers[1:-1]):
        return None
    if any(not _HAS_LETTER_RE.search(w) for w in words):
        return None  # "[3]", "+2", "page 12"
    if all(_is_roman(w) for w in words):
        return None
    # all caps: acronyms of up to four letters pass ("GM", "NPCs"); shouting does not
    shouting = len(words) > 1 or not _ACRONYM_RE.fullmatch(words[0])
    if shouting and all(w.isupper() for w in words if _HAS_LETTER_RE.search(w)):
        return None
    if first.endswith("ing") and len(first) > 4 and first not in _GERUND_EXCEPTIONS:
        return None  # "Getting Started", "Invoking Aspects": section titles about doing something
    joined = " ".join(lowers)
    if joined in _BOILERPLATE or all(w in _COMMON_WORDS or w in _STOP_START for w in lowers):
        return None
    if len(words) == 1:
        single = _singular_word(lowers[0])
        if len(words[0]) < 2 or single in _COMMON_WORDS or single in _BOILERPLATE:
            return None
        if len(words[0]) < 3 and not words[0].isupper():
            return None
    return " ".join(words)


def _guess_kind(name: str, votes: Counter[ConceptKind]) -> ConceptKind:
    """A cheap kind from the name's words, else from how the text defined it, else TERM."""
    words = name.lower().split()
    last = words[-1]
    key = " ".join(words)
    if last in _MECHANIC_WORDS or key in _MECHANIC_TERMS:
        return ConceptKind.MECHANIC
    if words[0] in _HONORIFICS and len(words) > 1:
        return ConceptKind.CHARACTER
    if last in _LOCATION_WORDS and len(words) > 1:
        return ConceptKind.LOCATION
    if last in _ORGANIZATION_WORDS or (words[0] == "order" and len(words) > 2):
        return ConceptKind.ORGANIZATION
    if last in _CREATURE_WORDS:
        return ConceptKind.CREATURE
    if last in _ITEM_WORDS and len(words) > 1:
        return ConceptKind.ITEM
    if last in _EVENT_WORDS and len(words) > 1:
        return ConceptKind.EVENT
    if votes:
        return min(votes.items(), key=lambda kv: (-kv[1], kv[0].value))[0]
    return ConceptKind.TERM


def _dedupe_aliases(aliases: Iterable[str], key: str) -> list[str]:
    """Aliases with one surface per normalized form, none equal to the key, sorted."""
    chosen: dict[str, str] = {}
    for alias in sorted(aliases, key=lambda a: (not a[:1].isupper(), a)):
        norm = normalize_name(alias)
        if norm and norm != key and norm not in chosen:
            chosen[norm] = alias
    return sorted(chosen.values())


def _pick_name(surfaces: Counter[str]) -> str:
    """Most frequent surface; ties prefer a capitalised one, then alphabetical."""
    return min(surfaces.items(), key=lambda kv: (-kv[1], not kv[0][:1].isupper(), kv[0]))[0]


# ---------------------------------------------------------------------------------------------------
# Rule extractor
# ---------------------------------------------------------------------------------------------------

# Salience weights of the cues; a chunk's score is 1 - exp(-(sum of cue weights + log1p(mentions)) / 3).
_W_HEADING = 3.0  # the chunk's own section heading
_W_PARENT_HEADING = 0.75  # an enclosing section's heading
_W_HEADING_LINE = 2.0
_W_BOLD = 2.5
_W_GLOSSARY = 2.5
_W_DEFINITION = 2.0
_W_CALLED = 2.0
_W_ACRONYM = 2.0
_W_CAPITALIZED = 1.0
_SCORE_SCALE = 3.0

_TAG_RE = re.compile(r"<[^<>\n]{0,300}>")
_LINK_RE = re.compile(r"\[([^\[\]\n]{0,200})\]\([^()\s]{0,500}\)")
_PAGE_LINE_RE = re.compile(
    r"^[ \t]*(?:(?:page|p\.)[ \t]*\d{1,4}|[-–—]?[ \t]*\d{1,4}[ \t]*[-–—]?|\d{1,4}[ \t]*[|•·][^\n]{0,60}"
    r"|[^\n]{0,60}[|•·][ \t]*\d{1,4})[ \t]*$",
    re.M | re.I,
)
_MD_HEADING_RE = re.compile(r"^[ \t]*#{1,6}[ \t]*>?[ \t]*([^\n]{1,120}?)[ \t#]*$", re.M)
_TITLE_LINE_RE = re.compile(
    r"^[ \t]*([A-Z][\w'’-]*(?:[ \t]+(?:[A-Z][\w'’-]*|of|the|and|a|an|or|with|vs\.?|&)){0,5})[ \t]*$",
    re.M,
)
# "Term: definition" / "Term — definition" at a line start, the term in Title Case
_GLOSSARY_RE = re.compile(
    r"^[ \t]*(?:[-•][ \t]+)?([A-Z][\w'’-]*(?:[ \t]+(?:[A-Z][\w'’-]*|of|the|an?|and|or)){0,3})"
    r"[ \t]*(?:\([^()\n]{0,40}\))?[ \t]*(?::|[ \t]?[—–][ \t]?|[ \t]-[ \t])[ \t]*\S",
    re.M,
)
# "<Subject> is a <noun>": the regex finds the verb and article; the subject is read backwards to the
# sentence start in Python (a regex that starts at every sentence is several times slower)
_DEFINITION_RE = re.compile(r"[ \t](?:is|are)[ \t]+(?:an?|the)[ \t]+([a-z]+)(?:[ \t]+([a-z]+))?")
_SENTENCE_BREAK_RE = re.compile(r"[.!?:;\n]")
_CALLED_RE = re.compile(
    r"\b(?:called|known as|referred to as|termed|dubbed)[ \t]+(?:(?:an?|the)[ \t]+)?"
    r"(?:[“\"']([^”\"'\n]{2,40})[”\"']"
    r"|([A-Z][\w'’-]*(?:[ \t]+[A-Z][\w'’-]*){0,3})"
    r"|([a-z][\w'’-]*(?:[ \t]+[a-z][\w'’-]*)?)"
    r"(?=[ \t]*(?:[.,;:!?)\n]|$)|[ \t]+(?:and|or|which|that|when|because|for|in|to|if|from)\b))"
)
# "(GM)": the long form is looked for in the words before it (a lookbehind regex would be slow)
_ABBREVIATION_RE = re.compile(r"\(([A-Z]{2,5})s?\)")
_CLAUSE_BREAK_RE = re.compile(r"[.!?;:,\n—–()\[\]]")
_CAP_RUN_RE = re.compile(
    r"\b[A-Z][a-z][\w'’-]*(?:(?:[ \t]+(?:of|the|of[ \t]+the|de|du|la|le|von|van|der))?[ \t]+[A-Z][a-z][\w'’-]*)+"
)
# a capitalised word after a lowercase letter (or , ;) and not followed by another capital; the word
# before is checked to be lowercase in Python ("Fate Condensed" must not yield "Condensed")
_CAP_WORD_RE = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}[\w'’-]*\b(?![ \t]+(?:of[ \t]+)?[A-Z])")
_CALLED_CUES = ("called", "known as", "referred to as", "termed", "dubbed")
# lowercase words ending in s: a capitalised name ending in s ("Fred Hicks") is only made singular
# when the document also writes that word in lowercase ("fate points")
_LOWER_PLURAL_RE = re.compile(r"\b[a-z][a-z'’-]*s\b")
_TOKEN_RE = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_HEADING_SPLIT_RE = re.compile(r"[ \t]*(?:,|;|:|&|\(|\)|\band\b|\bor\b|/|[ \t][—–-][ \t])[ \t]*", re.I)
_HEADING_NUMBER_RE = re.compile(
    r"^[ \t]*(?:(?i:chapter|part|section|appendix|book|vol(?:ume)?)\.?[ \t]+\w+[ \t]*[:.\-–—]?[ \t]*"
    r"|\d+(?:\.\d+)*[.:)\-–—]?[ \t]+|[IVXL]+[.:)][ \t]+)"
)


@dataclass(slots=True)
class _Hit:
    """What one chunk's cues say about one concept key."""

    weights: dict[str, float] = field(default_factory=dict)  # cue -> strongest weight
    count: int = 0

    def add(self, cue: str, weight: float) -> None:
        if weight > self.weights.get(cue, -1.0):
            self.weights[cue] = weight


@dataclass(slots=True)
class _Entry:
    """What the whole document says about one concept key."""

    surfaces: Counter[str] = field(default_factory=Counter)
    cues: set[str] = field(default_factory=set)
    kind_votes: Counter[ConceptKind] = field(default_factory=Counter)
    aliases: set[str] = field(default_factory=set)
    lowercase_ok: bool = False  # look for it in lowercase text too (not for capitalised-only words)


class RuleConceptExtractor:
    """Deterministic, model-free concept extraction for rulebooks and setting books.

    Args:
        max_concepts_per_chunk: most concepts kept per chunk (by salience).
        min_capitalized_count: a single capitalised word in mid-sentence ("roll Athletics") becomes
            a concept when the document capitalises it at least this often.
        glossary: known terms (say, the library's existing concepts) to look for in every chunk.
        relation_concepts_per_chunk: concepts per chunk that take part in relations.
        min_relation_chunks: a relation needs this many chunks in common.
    """

    def __init__(
        self,
        *,
        max_concepts_per_chunk: int = 20,
        min_capitalized_count: int = 3,
        glossary: Iterable[str] = (),
        relation_concepts_per_chunk: int = 12,
        min_relation_chunks: int = 1,
    ) -> None:
        if max_concepts_per_chunk < 1:
            raise ValueError(f"max_concepts_per_chunk must be at least 1, got {max_concepts_per_chunk}")
        self.max_concepts_per_chunk = max_concepts_per_chunk
        self.min_capitalized_count = min_capitalized_count
        self.glossary = tuple(sorted({g.strip() for g in glossary if g.strip()}))
        self.relation_concepts_per_chunk = relation_concepts_per_chunk
        self.min_relation_chunks = min_relation_chunks

    # -- protocol ------------------------------------------------------------------------------------

    def extract(
        self,
        chunks: Sequence[TextChunk],
        *,
        bold_terms_by_chunk: Sequence[Sequence[str]] | None = None,
    ) -> list[ChunkConcepts]:
        """Return the concepts each chunk mentions (see :meth:`ConceptExtractor.extract`).

        Raises:
            ValueError: if ``bold_terms_by_chunk`` is not one entry per chunk.
        """
        _check_bold(chunks, bold_terms_by_chunk)
        if not chunks:
            return []
        entries: dict[str, _Entry] = defaultdict(_Entry)
        texts = self._prepare_texts(chunks)
        plural_words: set[str] = set()
        for text in texts:
            plural_words.update(_LOWER_PLURAL_RE.findall(text))
        hits_by_chunk: list[dict[str, _Hit]] = []
        caps_by_chunk: list[Counter[str]] = []
        cap_totals: Counter[str] = Counter()
        for i, (chunk, text) in enumerate(zip(chunks, texts, strict=True)):
            bold = bold_terms_by_chunk[i] if bold_terms_by_chunk is not None else ()
            hits, caps = self._scan(chunk, text, bold, entries, plural_words)
            hits_by_chunk.append(hits)
            caps_by_chunk.append(caps)
            cap_totals.update(caps)
        for term in self.glossary:
            self._note(entries, term, "glossary", lowercase_ok=True)
        accepted_caps = self._accept_capitalized(cap_totals, entries, plural_words)
        redirect = self._redirects(entries)
        index, first_tokens = self._mention_index(entries, redirect)
        for text, hits, caps in zip(texts, hits_by_chunk, caps_by_chunk, strict=True):
            self._count_mentions(text, index, first_tokens, hits, entries)
            for surface, n in caps.items():
                key = accepted_caps.get(surface)
                if key is not None:
                    hit = hits.setdefault(key, _Hit())
                    hit.add("capitalized", _W_CAPITALIZED)
                    if not entries[key].lowercase_ok:
                        hit.count += n
        # names last: the mention pass adds the plural forms it met as aliases
        names = self._finalise_names(entries, redirect)
        return [
            ChunkConcepts(chunk.sequence, self._mentions(hits, redirect, names))
            for chunk, hits in zip(chunks, hits_by_chunk, strict=True)
        ]

    def relate(self, mentions: Sequence[ChunkConcepts]) -> list[ConceptRelation]:
        """RELATED_TO edges between co-mentioned concepts (see :func:`relate_concepts`)."""
        return relate_concepts(
            mentions,
            max_concepts_per_chunk=self.relation_concepts_per_chunk,
            min_chunk_count=self.min_relation_chunks,
        )

    # -- text preparation -------------------------------------------------------------------------

    def _prepare_texts(self, chunks: Sequence[TextChunk]) -> list[str]:
        """Strip markup, page numbers and lines repeated on many chunks (running heads and feet)."""
        texts = []
        for chunk in chunks:
            text = _strip_markup(chunk.text)  # before NFKC, which would turn "™" into "TM"
            if not unicodedata.is_normalized("NFKC", text):
                text = unicodedata.normalize("NFKC", text)  # PDF ligatures ("ﬁ") and odd spaces
            if "&" in text:
                text = html.unescape(text)  # "&amp;", "&trade;" from HTML-ish sources
            if "<" in text:
                text = _TAG_RE.sub(" ", text)
            if "](" in text:
                text = _LINK_RE.sub(r"\1", text)
            text = _PAGE_LINE_RE.sub("", text)
            texts.append(text)
        if len(texts) < 5:
            return texts
        # A short line on a fifth of the chunks (at least 3) is a running head or foot, not content.
        seen: Counter[str] = Counter()
        for text in texts:
            seen.update({_norm_line(line) for line in text.splitlines() if 0 < len(line) <= 80})
        floor = max(3, math.ceil(len(texts) * 0.2))
        repeated = {line for line, n in seen.items() if n >= floor and line}
        if not repeated:
            return texts
        return ["\n".join(line for line in text.splitlines() if _norm_line(line) not in repeated) for text in texts]

    # -- per-chunk scan ---------------------------------------------------------------------------

    def _scan(
        self,
        chunk: TextChunk,
        text: str,
        bold: Sequence[str],
        entries: dict[str, _Entry],
        plural_words: set[str],
    ) -> tuple[dict[str, _Hit], Counter[str]]:
        """One chunk's cues (headings, bold, glossary, definitions, names) and its capitalised words."""
        hits: dict[str, _Hit] = {}

        def note(surface: str | None, cue: str, weight: float, kind: ConceptKind | None = None) -> str | None:
            if surface is None:
                return None
            keep = cue == "capitalized" and _keeps_plural(surface, plural_words)
            key = self._note(entries, surface, cue, lowercase_ok=True, kind=kind, keep_plural=keep)
            if key is not None:
                hits.setdefault(key, _Hit()).add(cue, weight)
            return key

        path = chunk.heading_path
        for depth, heading in enumerate(path):
            weight = _W_HEADING if depth == len(path) - 1 else _W_PARENT_HEADING
            for part in _heading_parts(heading, structural=True):
                note(part, "heading", weight)
        for match in _MD_HEADING_RE.finditer(text):
            for part in _heading_parts(match.group(1), structural=True):
                note(part, "heading", _W_HEADING_LINE)
        for match in _TITLE_LINE_RE.finditer(text):
            for part in _heading_parts(match.group(1), structural=False):
                note(part, "heading", _W_HEADING_LINE)
        for term in bold:
            note(_clean_candidate(term), "bold", _W_BOLD)
        for match in _GLOSSARY_RE.finditer(text):
            note(_clean_candidate(match.group(1), max_words=4, strict_first=True), "glossary", _W_GLOSSARY)
        for match in _DEFINITION_RE.finditer(text):
            subject = _definition_subject(text, match.start())
            if subject is not None:
                # "X is a <noun>" / "X is a <adjective> <noun>": the noun may say what kind X is
                kind = _DEFINITION_KINDS.get(match.group(1)) or _DEFINITION_KINDS.get(match.group(2) or "")
                note(_clean_candidate(subject, max_words=3, strict_first=True), "definition", _W_DEFINITION, kind)
        if any(cue in text for cue in _CALLED_CUES):
            for match in _CALLED_RE.finditer(text):
                raw = match.group(1) or match.group(2) or match.group(3)
                note(_clean_candidate(raw, max_words=4), "definition", _W_CALLED)
        if "(" in text:
            for match in _ABBREVIATION_RE.finditer(text):
                before = text[max(0, match.start() - 80) : match.start()]
                self._note_abbreviation(before, match.group(1), entries, hits)
        for match in _CAP_RUN_RE.finditer(text):
            words = match.group(0).split()
            if _at_sentence_start(text, match.start()) and words[0].lower() in _COMMON_WORDS:
                words.pop(0)  # an everyday word capitalised only by its position ("Keep Fate Points…")
            while words and (words[0].lower() in _STOP_START or words[0].lower() in _CONNECTORS):
                words.pop(0)
            if len(words) >= 2:
                note(_clean_candidate(" ".join(words)), "capitalized", _W_CAPITALIZED)
        caps: Counter[str] = Counter()
        for match in _CAP_WORD_RE.finditer(text):
            preceding = text[max(0, match.start() - 40) : match.start()].split()
            if preceding and preceding[-1][:1].islower():
                caps[match.group(0)] += 1
        return hits, caps

    @staticmethod
    def _note(
        entries: dict[str, _Entry],
        surface: str,
        cue: str,
        *,
        lowercase_ok: bool,
        kind: ConceptKind | None = None,
        keep_plural: bool = False,
    ) -> str | None:
        display = " ".join(surface.split()) if keep_plural else concept_display_name(surface)
        key = normalize_name(display)
        if not key:
            return None
        entry = entries[key]
        entry.surfaces[display] += 1
        entry.cues.add(cue)
        entry.lowercase_ok |= lowercase_ok
        if surface != display:
            entry.aliases.add(surface)
        if kind is not None:
            entry.kind_votes[kind] += 1
        return key

    def _note_abbreviation(self, phrase: str, acronym: str, entries: dict[str, _Entry], hits: dict[str, _Hit]) -> None:
        """``Game Master (GM)``: the long form is a concept and the acronym its alias.

        Args:
            phrase: the text just before the parenthesis.
            acronym: the letters inside it.
        """
        words = _CLAUSE_BREAK_RE.split(phrase)[-1].split()  # the long form stays inside its clause
        for size in range(min(len(words), 6), 1, -1):
            tail = words[-size:]
            letters = "".join(p[0] for w in tail if w.lower() not in _CONNECTORS for p in w.split("-") if p)
            if letters.lower() == acronym.lower():
                surface = _clean_candidate(" ".join(tail), max_words=6)
                if surface is None:
                    return
                key = self._note(entries, surface, "acronym", lowercase_ok=True)
                if key is not None:
                    entries[key].aliases.add(acronym)
                    hits.setdefault(key, _Hit()).add("acronym", _W_ACRONYM)
                return

    # -- document-level passes --------------------------------------------------------------------

    def _accept_capitalized(
        self, totals: Counter[str], entries: dict[str, _Entry], plural_words: set[str]
    ) -> dict[str, str]:
        """Capitalised single words seen often enough become concepts; returns surface -> key."""
        accepted: dict[str, str] = {}
        for surface, n in sorted(totals.items()):
            if n < self.min_capitalized_count:
                continue
            cleaned = _clean_candidate(surface, max_words=1)
            if cleaned is None:
                continue
            keep = _keeps_plural(cleaned, plural_words)
            key = self._note(entries, cleaned, "capitalized", lowercase_ok=False, keep_plural=keep)
            if key is not None:
                entries[key].surfaces[cleaned if keep else concept_display_name(cleaned)] += n - 1
                accepted[surface] = key
        return accepted

    @staticmethod
    def _redirects(entries: dict[str, _Entry]) -> dict[str, str]:
        """Keys that are another concept under a second name.

        An acronym of another concept ("npc" → "non-player character"), and a capitalised name kept
        plural that is also known in the singular ("big bads" → "big bad").
        """
        redirect: dict[str, str] = {}
        for key in sorted(entries):
            for alias in sorted(entries[key].aliases):
                if _ACRONYM_RE.fullmatch(alias):
                    short = normalize_name(concept_display_name(alias))
                    if short != key and short in entries and short not in redirect:
                        redirect[short] = key
        for key in sorted(entries):
            single = normalize_name(concept_display_name(key))
            if single != key and single in entries and key not in redirect:
                redirect[key] = redirect.get(single, single)
        for short in list(redirect):
            target, hops = redirect[short], 0
            while target in redirect and hops < 8:  # follow chains ("npcs" → "npc" → long form)
                target, hops = redirect[target], hops + 1
            redirect[short] = target
        for short, long in redirect.items():
            entries[long].aliases.update(entries[short].surfaces)
            entries[long].cues |= entries[short].cues
        return redirect

    @staticmethod
    def _mention_index(entries: dict[str, _Entry], redirect: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
        """Lowercase forms (singular, plural, aliases) → key, and first token → longest form."""
        index: dict[str, str] = {}
        for key in sorted(entries):
            entry = entries[key]
            if not entry.lowercase_ok:
                continue
            target = redirect.get(key, key)
            words = key.split()
            forms = {key, " ".join([*words[:-1], _plural_word(words[-1])])}
            forms.update(normalize_name(a) for a in entry.aliases)
            forms.update(normalize_name(s) for s in entry.surfaces)
            for form in sorted(forms):
                tokens = _TOKEN_RE.findall(form)
                if not tokens:
                    continue
                joined = " ".join(tokens)
                # a form that is itself some concept's key stays with that concept
                if joined not in index or joined == target:
                    index[joined] = target
        first_tokens: dict[str, int] = {}
        for form in index:
            tokens = form.split(" ")
            if len(tokens) > 1:
                first_tokens[tokens[0]] = max(first_tokens.get(tokens[0], 0), len(tokens))
        return index, first_tokens

    @staticmethod
    def _finalise_names(
        entries: dict[str, _Entry], redirect: dict[str, str]
    ) -> dict[str, tuple[str, ConceptKind, tuple[str, ...]]]:
        """Per key: display name, kind and aliases, the same for every chunk of the document."""
        names: dict[str, tuple[str, ConceptKind, tuple[str, ...]]] = {}
        for key, entry in entries.items():
            if key in redirect:
                continue
            name = _pick_name(entry.surfaces)
            kind = _guess_kind(name, entry.kind_votes)
            if kind is ConceptKind.TERM and entry.cues == {"capitalized"}:
                kind = ConceptKind.OTHER  # a proper name nobody defined: a person, a book, a product
            names[key] = (name, kind, tuple(_dedupe_aliases(entry.aliases, key)))
        return names

    @staticmethod
    def _count_mentions(
        text: str,
        index: dict[str, str],
        first_tokens: dict[str, int],
        hits: dict[str, _Hit],
        entries: dict[str, _Entry],
    ) -> None:
        """Count the document's vocabulary in one chunk: greedy longest match over word tokens."""
        tokens = _TOKEN_RE.findall(text.casefold())
        n_tokens = len(tokens)
        i = 0
        while i < n_tokens:
            token = tokens[i]
            step = 1
            key = None
            longest = first_tokens.get(token)
            if longest is not None:  # some multi-word form starts here: try the longest first
                for n in range(min(longest, n_tokens - i), 1, -1):
                    form = " ".join(tokens[i : i + n])
                    key = index.get(form)
                    if key is not None:
                        step = n
                        break
            if key is None:
                form = token
                key = index.get(token)
            if key is not None:
                hit = hits.get(key)
                if hit is None:
                    hit = hits[key] = _Hit()
                hit.count += 1
                hit.weights.setdefault("mention", 0.0)
                if form != key:
                    entries[key].aliases.add(form)  # plural and other forms seen: aliases
            i += step

    def _mentions(
        self,
        hits: dict[str, _Hit],
        redirect: dict[str, str],
        names: dict[str, tuple[str, ConceptKind, tuple[str, ...]]],
    ) -> list[ConceptMention]:
        merged: dict[str, _Hit] = {}
        for key, hit in hits.items():
            target = redirect.get(key, key)
            if target not in names:
                continue
            into = merged.setdefault(target, _Hit())
            into.count += hit.count
            for cue, weight in hit.weights.items():
                into.add(cue, weight)
        mentions = []
        for key, hit in merged.items():
            raw = sum(hit.weights.values()) + math.log1p(hit.count)
            name, kind, aliases = names[key]
            mentions.append(
                ConceptMention(
                    name=name,
                    normalized_name=key,
                    kind=kind,
                    aliases=aliases,
                    score=round(1.0 - math.exp(-raw / _SCORE_SCALE), 4),
                    count=hit.count,
                    evidence=tuple(sorted(hit.weights)),
                )
            )
        mentions.sort(key=_mention_order)
        return mentions[: self.max_concepts_per_chunk]


def _definition_subject(text: str, verb_at: int) -> str | None:
    """The subject of "<Subject> is a …" when it opens its sentence and has at most three words."""
    window = text[max(0, verb_at - 60) : verb_at]
    pieces = _SENTENCE_BREAK_RE.split(window)
    if len(pieces) == 1 and verb_at > 60:
        return None  # no sentence start within reach: a long subject, not a term
    words = pieces[-1].split()
    if not words or not words[0][:1].isupper():  # the sentence starts here, with a capital
        return None
    if words[0] in ("A", "An", "The"):
        words.pop(0)
    if not 1 <= len(words) <= 3:
        return None
    return " ".join(words)


def _keeps_plural(surface: str, plural_words: set[str]) -> bool:
    """Whether a capitalised name keeps a final "s" (a surname) rather than being made singular."""
    last = surface.rsplit(None, 1)[-1]
    return not _ACRONYM_RE.fullmatch(last) and last.lower() not in plural_words


def _norm_line(line: str) -> str:
    return re.sub(r"\d+", "#", _SPACE_RE.sub(" ", line.strip().lower()))


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[max(0, start - 12) : start].rstrip(" \t\"'“‘([-•>")
    return not before or before[-1] in ".!?:;\n"


@lru_cache(maxsize=16384)  # every chunk of a section repeats its heading path
def _heading_parts(heading: str, *, structural: bool) -> tuple[str, ...]:
    """Candidate names in a heading: numbering stripped, split at "and", commas and colons.

    ``"Stress and Consequences"`` → ``["Stress", "Consequences"]``. Headings from the heading path
    (``structural``) that are in all caps are title-cased: they are layout, not shouting.
    """
    text = html.unescape(heading) if "&" in heading else heading
    text = _TAG_RE.sub("", text) if "<" in text else text
    text = _HEADING_NUMBER_RE.sub("", _strip_markup(text)).strip()
    if not text or "?" in text or "!" in text:
        return ()
    if structural and text.isupper() and len(text) > 4:
        text = text.title()
    parts = []
    for piece in _HEADING_SPLIT_RE.split(text):
        cleaned = _clean_candidate(piece, max_words=4)
        if cleaned is not None:
            parts.append(cleaned)
    return tuple(parts)


# ---------------------------------------------------------------------------------------------------
# LLM extractor
# ---------------------------------------------------------------------------------------------------


class LLMExtractorConfig(BaseModel):
    """Where and how to ask an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp) for concepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(
        description="API root including /v1, e.g. http://localhost:8000/v1 (vLLM), "
        "http://localhost:11434/v1 (Ollama), http://localhost:8080/v1 (llama.cpp server)."
    )
    model: str = Field(min_length=1, description="Model name the server knows.")
    api_key: SecretStr | None = Field(default=None, description="Bearer token; None for open servers.")
    timeout_s: PositiveFloat = Field(default=60.0, description="Timeout of one request, in seconds.")
    max_concurrency: PositiveInt = Field(default=4, description="Requests in flight at once.")
    max_retries: NonNegativeInt = Field(
        default=2, description="Retries of a request after a timeout, connection error, 408/409/429 or 5xx."
    )
    retry_backoff_s: NonNegativeFloat = Field(
        default=0.5, description="First retry delay; doubles each retry (with a little jitter)."
    )
    chunks_per_request: PositiveInt = Field(default=4, description="Chunks sent in one request.")
    max_concepts_per_chunk: PositiveInt = Field(default=20, description="Concepts kept per chunk.")
    max_chunk_chars: PositiveInt = Field(
        default=6000, description="Chunk text beyond this many characters is not sent."
    )
    max_output_tokens: PositiveInt = Field(default=4096, description="max_tokens of one answer.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_consecutive_failures: PositiveInt = Field(
        default=5,
        description="After this many failed requests in a row, the rest of the call falls back to rules "
        "without asking (the endpoint is down); the next call tries again.",
    )

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(?:/\S*)?", value):
            raise ValueError(f"base_url must be an http(s) URL such as http://localhost:8000/v1, got {value!r}")
        return value.rstrip("/")


class AnswerConcept(BaseModel):
    """One concept in the model's answer."""

    name: str = Field(description="Canonical name, singular, as the text writes it.")
    kind: ConceptKind = Field(description="What the concept names.")
    aliases: list[str] = Field(description="Other names the text uses: plurals, abbreviations.")
    salience: float = Field(description="How central the concept is to the chunk, 0 to 1.")

    @field_validator("kind", mode="before")
    @classmethod
    def _lenient_kind(cls, value: Any) -> Any:
        # a model that invents a kind ("spell") still gave a usable concept
        if isinstance(value, str):
            lowered = value.strip().lower()
            return lowered if lowered in ConceptKind._value2member_map_ else ConceptKind.OTHER.value
        return value

    @field_validator("salience")
    @classmethod
    def _clamp(cls, value: float) -> float:
        if math.isnan(value):
            raise ValueError("salience is NaN")
        return min(1.0, max(0.0, value))


class AnswerChunk(BaseModel):
    id: int = Field(description="The id of the chunk as given in the request.")
    concepts: list[AnswerConcept]


class ConceptAnswer(BaseModel):
    """The structured answer the model must give: concepts per chunk id."""

    chunks: list[AnswerChunk]


def _strict_schema(schema: Any, root: dict[str, Any] | None = None) -> Any:
    """The schema in the form OpenAI's strict mode accepts (vLLM and llama.cpp take it as well).

    Every object is closed (``additionalProperties: false``) with all its properties required, and a
    ``$ref`` with sibling keys (pydantic puts a field's description next to it) is inlined, because
    strict mode rejects such siblings.
    """
    root = schema if root is None else root
    if isinstance(schema, list):
        return [_strict_schema(v, root) for v in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and len(schema) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    out = {k: _strict_schema(v, root) for k, v in schema.items()}
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    return out


ANSWER_SCHEMA_NAME = "chunk_concepts"

RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": ANSWER_SCHEMA_NAME,
        "strict": True,
        "schema": _strict_schema(ConceptAnswer.model_json_schema()),
    },
}
"""The ``response_format`` sent with every request (vLLM and OpenAI constrain decoding to it)."""

_SYSTEM_PROMPT = """\
You index tabletop roleplaying game books. For each chunk you are given, list the concepts it \
mentions that a reader might look up: rules terms and mechanics (e.g. an action, a roll, a resource), \
named characters, locations, organizations, creatures, items and events. Skip generic words \
(thing, player, example), chapter titles and page furniture.
For every concept give: name (canonical, singular, as the text writes it), kind (one of: {kinds}), \
aliases (other names the text uses for it: plurals, abbreviations; may be empty), salience (0 to 1: how \
central it is to that chunk). At most {limit} concepts per chunk, the most salient first.
Answer with JSON only: {{"chunks": [{{"id": <chunk id>, "concepts": [...]}}]}}, one entry per chunk id."""


@dataclass(slots=True)
class LLMExtractionStats:
    """What the LLM extractor did, summed over its calls.

    Attributes:
        requests: HTTP requests sent (retries included).
        retries: of those, retries.
        failed_requests: requests whose chunks all fell back (after retries).
        llm_chunks: chunks answered by the model.
        fallback_chunks: chunks answered by the rules instead.
        fallback_reasons: fallback chunks per reason category (``"http_500"``, ``"malformed_json"``…).
        warnings: the first messages explaining fallbacks, for the job's report.
    """

    requests: int = 0
    retries: int = 0
    failed_requests: int = 0
    llm_chunks: int = 0
    fallback_chunks: int = 0
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)


_MAX_WARNINGS = 200


@dataclass(slots=True)
class _RequestResult:
    answers: dict[int, list[AnswerConcept]]  # request-local chunk id -> concepts
    failures: dict[int, str]  # request-local chunk id -> reason


class LLMConceptExtractor:
    """Concept extraction by an LLM behind an OpenAI-compatible API, falling back to the rules.

    Chunks are sent ``chunks_per_request`` at a time, ``max_concurrency`` requests at once, with the
    JSON schema of :class:`ConceptAnswer` as ``response_format``. A chunk whose answer is missing,
    malformed or failed after retries gets the rule extractor's answer and a ``fallback_reason``;
    nothing here raises for a bad endpoint. The client opens lazily in the process that uses it, so
    the extractor pickles to Ray workers without a live connection.

    Args:
        config: the endpoint and limits.
        rules: the extractor used for fallbacks (and for relations); a default one if None.
    """

    def __init__(self, config: LLMExtractorConfig, *, rules: RuleConceptExtractor | None = None) -> None:
        self.config = config
        self.rules = rules or RuleConceptExtractor(max_concepts_per_chunk=config.max_concepts_per_chunk)
        self.stats = LLMExtractionStats()
        self._client: OpenAI | None = None
        self._lock = threading.Lock()
        self._failures_in_a_row = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "rules": self.rules, "stats": self.stats}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], rules=state["rules"])  # type: ignore[misc]
        self.stats = state["stats"]

    # -- protocol ------------------------------------------------------------------------------------

    def extract(
        self,
        chunks: Sequence[TextChunk],
        *,
        bold_terms_by_chunk: Sequence[Sequence[str]] | None = None,
    ) -> list[ChunkConcepts]:
        """Return the concepts each chunk mentions, by the model where it answered, else by rules.

        Raises:
            ValueError: if ``bold_terms_by_chunk`` is not one entry per chunk.
        """
        _check_bold(chunks, bold_terms_by_chunk)
        if not chunks:
            return []
        with self._lock:
            self._failures_in_a_row = 0  # each call gives a failing endpoint a fresh chance
        size = self.config.chunks_per_request
        batches = [list(range(start, min(start + size, len(chunks)))) for start in range(0, len(chunks), size)]
        with ThreadPoolExecutor(max_workers=self.config.max_concurrency, thread_name_prefix="concepts") as pool:
            futures = [pool.submit(self._ask, chunks, batch, bold_terms_by_chunk) for batch in batches]
            results = [f.result() for f in futures]  # in submission order: deterministic output

        answers: dict[int, list[AnswerConcept]] = {}
        reasons: dict[int, str] = {}
        for batch, result in zip(batches, results, strict=True):
            for local, position in enumerate(batch, start=1):
                if local in result.answers:
                    answers[position] = result.answers[local]
                else:
                    reasons[position] = result.failures.get(local, "missing_chunk: no answer for this chunk")
        fallback: list[ChunkConcepts] = []
        if reasons:
            # the rules see the whole document so their vocabulary and names match a rules-only run
            fallback = self.rules.extract(chunks, bold_terms_by_chunk=bold_terms_by_chunk)
        out: list[ChunkConcepts] = []
        for position, chunk in enumerate(chunks):
            if position in answers:
                out.append(ChunkConcepts(chunk.sequence, self._mentions(chunk, answers[position]), ExtractorName.LLM))
            else:
                reason = reasons[position]
                out.append(replace(fallback[position], extractor=ExtractorName.RULES_FALLBACK, fallback_reason=reason))
                self._record_fallback(chunk.sequence, reason)
        with self._lock:
            self.stats.llm_chunks += len(answers)
        return _harmonise(out)

    def relate(self, mentions: Sequence[ChunkConcepts]) -> list[ConceptRelation]:
        """RELATED_TO edges between co-mentioned concepts (see :func:`relate_concepts`)."""
        return self.rules.relate(mentions)

    # -- requests ----------------------------------------------------------------------------------

    def _openai(self) -> OpenAI:
        """The OpenAI SDK client, created on first use in this process.

        Raises:
            ImportError: if the ``openai`` package is not installed.
        """
        with self._lock:
            if self._client is None:
                try:
                    from openai import OpenAI
                except ImportError as exc:  # pragma: no cover - depends on the environment
                    raise ImportError("the LLM concept extractor needs the 'openai' package") from exc
                key = self.config.api_key.get_secret_value() if self.config.api_key else "EMPTY"
                # retries are ours (they must also cover our own failure accounting), so the SDK's are off
                self._client = OpenAI(
                    base_url=self.config.base_url, api_key=key, timeout=self.config.timeout_s, max_retries=0
                )
            return self._client

    def request_messages(
        self, chunks: Sequence[TextChunk], bold: Sequence[Sequence[str]] | None
    ) -> list[dict[str, str]]:
        """The chat messages for one request; chunk ids are 1..len(chunks) within the request."""
        payload = []
        for local, chunk in enumerate(chunks, start=1):
            item: dict[str, Any] = {
                "id": local,
                "headings": list(chunk.heading_path),
                "text": chunk.text[: self.config.max_chunk_chars],
            }
            if bold is not None and bold[local - 1]:
                item["bold_terms"] = list(bold[local - 1])
            payload.append(item)
        system = _SYSTEM_PROMPT.format(
            kinds=", ".join(k.value for k in ConceptKind), limit=self.config.max_concepts_per_chunk
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps({"chunks": payload}, ensure_ascii=False)},
        ]

    def _ask(
        self,
        chunks: Sequence[TextChunk],
        batch: list[int],
        bold: Sequence[Sequence[str]] | None,
    ) -> _RequestResult:
        """Send one request (with retries) and parse it; never raises."""
        ids = list(range(1, len(batch) + 1))
        try:
            content = self._complete(
                self.request_messages(
                    [chunks[p] for p in batch], [bold[p] for p in batch] if bold is not None else None
                )
            )
        except _RequestFailed as failed:
            return _RequestResult({}, dict.fromkeys(ids, failed.reason))
        except Exception as exc:  # never let one request take the job down
            log.exception("concept extraction request failed unexpectedly")
            return _RequestResult({}, dict.fromkeys(ids, f"error: {type(exc).__name__}: {exc}"[:300]))
        return _parse_answer(content, ids)

    def _complete(self, messages: list[dict[str, str]]) -> str:
        """One chat completion with bounded retries; returns the answer text.

        Raises:
            _RequestFailed: with the reason, when every attempt failed or the answer is unusable.
        """
        import openai

        client = self._openai()
        # plain dicts: the same request works against vLLM, Ollama and llama.cpp, typed SDK params or not
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "response_format": RESPONSE_FORMAT,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_output_tokens,
            "timeout": self.config.timeout_s,
        }
        attempts = self.config.max_retries + 1
        reason = "error: no attempt made"
        for attempt in range(attempts):
            with self._lock:
                if self._failures_in_a_row >= self.config.max_consecutive_failures:
                    raise _RequestFailed(
                        f"circuit_open: {self._failures_in_a_row} requests in a row failed; last: {reason}"
                    )
                self.stats.requests += 1
                self.stats.retries += attempt > 0
            retry_after: float | None = None
            try:
                response = client.chat.completions.create(**request)
            except openai.APITimeoutError:
                reason, retryable = f"timeout: no answer within {self.config.timeout_s}s", True
            except openai.APIConnectionError as exc:
                reason, retryable = f"connection: {exc}", True
            except openai.APIStatusError as exc:
                code = exc.status_code
                reason = f"http_{code}: {_short(str(exc.message))}"
                retryable = code in (408, 409, 429) or code >= 500
                retry_after = _retry_after(exc.response.headers.get("retry-after"))
            except openai.OpenAIError as exc:
                reason, retryable = f"error: {type(exc).__name__}: {_short(str(exc))}", False
            else:
                with self._lock:
                    self._failures_in_a_row = 0
                return _answer_text(response)
            if not retryable or attempt == attempts - 1:
                break
            delay = self.config.retry_backoff_s * (2**attempt) * (1.0 + 0.25 * random.random())
            time.sleep(max(delay, min(retry_after or 0.0, 30.0)))
        with self._lock:
            self._failures_in_a_row += 1
            self.stats.failed_requests += 1
        raise _RequestFailed(reason)

    # -- answers -----------------------------------------------------------------------------------

    def _mentions(self, chunk: TextChunk, concepts: list[AnswerConcept]) -> list[ConceptMention]:
        """The model's concepts for one chunk, cleaned and keyed like the rules' ones."""
        lowered = chunk.text.casefold()
        by_key: dict[str, ConceptMention] = {}
        for concept in concepts:
            surface = _clean_candidate(concept.name, max_words=6)
            if surface is None:
                continue
            name = concept_display_name(surface)
            key = normalize_name(name)
            if not key:
                continue
            # aliases are names too: short, one line (a rambling model must not break Concept.aliases)
            aliases = {" ".join(a.split()) for a in concept.aliases if a.strip() and len(a) <= 80}
            if surface != name:
                aliases.add(surface)
            count = sum(lowered.count(form) for form in {key, *(normalize_name(a) for a in aliases)} if form)
            mention = ConceptMention(
                name=name,
                normalized_name=key,
                kind=concept.kind,
                aliases=tuple(_dedupe_aliases(aliases, key)),
                score=round(concept.salience, 4),
                count=count,
                evidence=("llm",),
            )
            previous = by_key.get(key)
            if previous is None or mention.score > previous.score:
                by_key[key] = mention
        ordered = sorted(by_key.values(), key=_mention_order)
        return ordered[: self.config.max_concepts_per_chunk]

    def _record_fallback(self, sequence: int, reason: str) -> None:
        category = reason.split(":", 1)[0]
        with self._lock:
            self.stats.fallback_chunks += 1
            self.stats.fallback_reasons[category] += 1
            if len(self.stats.warnings) < _MAX_WARNINGS:
                self.stats.warnings.append(f"chunk {sequence}: rules used instead of the LLM ({reason})")
        log.warning("concepts: chunk %s fell back to rules: %s", sequence, reason)


class _RequestFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _answer_text(response: Any) -> str:
    """The text of a completion, or :class:`_RequestFailed` when there is none to parse."""
    if not getattr(response, "choices", None):
        raise _RequestFailed("empty_answer: the response has no choices")
    choice = response.choices[0]
    if choice.finish_reason == "length":
        raise _RequestFailed("truncated: the answer hit max_tokens")
    content = choice.message.content if choice.message is not None else None
    if not content or not content.strip():
        raise _RequestFailed("empty_answer: the answer has no content")
    return content


def _parse_answer(content: str, ids: list[int]) -> _RequestResult:
    """Validate an answer; keep the chunk entries that are valid when others are not."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        return _RequestResult({}, dict.fromkeys(ids, f"malformed_json: {exc.msg} at char {exc.pos}"))
    try:
        answer = ConceptAnswer.model_validate(data)
    except ValidationError as exc:
        entries = data.get("chunks") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return _RequestResult({}, dict.fromkeys(ids, f"invalid_answer: {_validation_summary(exc)}"))
        answers: dict[int, list[AnswerConcept]] = {}
        failures: dict[int, str] = {}
        for entry in entries:
            try:
                parsed = AnswerChunk.model_validate(entry)
            except ValidationError as entry_exc:
                local = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(local, int) and local in ids:
                    failures[local] = f"invalid_answer: {_validation_summary(entry_exc)}"
                continue
            if parsed.id in ids:
                answers[parsed.id] = parsed.concepts
        return _RequestResult(answers, {k: v for k, v in failures.items() if k not in answers})
    answers = {c.id: c.concepts for c in answer.chunks if c.id in ids}
    return _RequestResult(answers, {})


def _validation_summary(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return _short(f"{exc.error_count()} error(s), first at {where or 'top'}: {first['msg']}")


def _harmonise(chunks: list[ChunkConcepts]) -> list[ChunkConcepts]:
    """One name, kind and alias set per key across a document's chunks (LLM and rules mixed)."""
    llm_names: dict[str, Counter[str]] = defaultdict(Counter)
    rule_names: dict[str, Counter[str]] = defaultdict(Counter)
    kinds: dict[str, Counter[tuple[bool, ConceptKind]]] = defaultdict(Counter)
    aliases: dict[str, set[str]] = defaultdict(set)
    for chunk in chunks:
        from_llm = chunk.extractor is ExtractorName.LLM
        for m in chunk.concepts:
            (llm_names if from_llm else rule_names)[m.normalized_name][m.name] += 1
            kinds[m.normalized_name][(from_llm, m.kind)] += 1
            aliases[m.normalized_name].update(m.aliases)
    final: dict[str, tuple[str, ConceptKind, tuple[str, ...]]] = {}
    for key in kinds:
        # the model's names and kinds outrank the rules' guesses; then the most votes; then enum order
        name = _pick_name(llm_names[key] or rule_names[key])
        (_, kind), _ = min(kinds[key].items(), key=lambda kv: (not kv[0][0], -kv[1], kv[0][1].value))
        final[key] = (name, kind, tuple(_dedupe_aliases(aliases[key], key)))
    out = []
    for chunk in chunks:
        mentions = [
            replace(
                m,
                name=final[m.normalized_name][0],
                kind=final[m.normalized_name][1],
                aliases=final[m.normalized_name][2],
            )
            for m in chunk.concepts
        ]
        out.append(replace(chunk, concepts=mentions))
    return out


# ---------------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------------


def build_concept_extractor(config: LLMExtractorConfig | None) -> ConceptExtractor:
    """The LLM extractor when an endpoint is configured, the rule extractor otherwise."""
    if config is None:
        return RuleConceptExtractor()
    return LLMConceptExtractor(config)
