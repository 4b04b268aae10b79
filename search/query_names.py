"""The names a query may hold: its word n-grams, cut at stop words, each with its plural made singular
and a crude stem (:func:`query_names`), and the keys a chunk's heading is found by (:func:`heading_keys`).
The graph leg (:mod:`search.graph`) looks these up among concepts and entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from models.stemming import singular, stem
from schemas.knowledge import normalize_name

_WORD_RE = re.compile(r"[\w][\w'’\-]*")

# Words that never start or end a concept name in a question (they may sit inside one:
# "attack of opportunity"). Deliberately small: concept names are looked up exactly, so a
# word left in costs one more index lookup, not a false match.
STOP_WORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "get",
        "gets",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "about",
        "after",
        "before",
        "between",
        "during",
        "over",
        "under",
        "again",
        "any",
        "all",
        "each",
        "every",
        "some",
        "much",
        "many",
        "more",
        "most",
        "other",
        "such",
        "only",
        "own",
        "same",
        "too",
        "very",
        "just",
        "also",
        "use",
        "used",
        "using",
        "work",
        "works",
        "happen",
        "happens",
        "tell",
        "explain",
    }
)

MAX_NGRAM = 4


def stem_key(name: str) -> str:
    """The key under which a (normalized) name and its inflected forms meet."""
    return " ".join(stem(w) for w in _WORD_RE.findall(normalize_name(name)))


@dataclass(frozen=True, slots=True)
class NamedSpan:
    """A normalized name looked up for the query and the word span ``[start, end)`` it covers."""

    name: str
    start: int
    end: int


def query_names(query: str, *, max_ngram: int = MAX_NGRAM) -> list[NamedSpan]:
    """The normalized names a concept named in ``query`` could have, with the words each covers."""
    words = _WORD_RE.findall(normalize_name(query))
    spans: list[NamedSpan] = []
    seen: set[tuple[str, int, int]] = set()
    for start in range(len(words)):
        if words[start] in STOP_WORDS:
            continue
        for end in range(start + 1, min(len(words), start + max_ngram) + 1):
            if words[end - 1] in STOP_WORDS:
                continue
            phrase = words[start:end]
            for name in _name_forms(phrase):
                if (name, start, end) not in seen:
                    seen.add((name, start, end))
                    spans.append(NamedSpan(name, start, end))
    return spans


# A section number before a heading's name: "2.6.1 Animate Objects", "12. Combat", "A.3 Poisons". A letter
# alone needs a number after it, so a name that opens with a one-letter word keeps it.
_SECTION_NUMBER_RE = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z](?:\.\d+)+\.?)\s+(?=\S)")


def without_section_number(heading: str) -> str:
    """The heading's name without the section number a numbered book prints before it (a player names
    *Animate Objects*, never *2.6.1 Animate Objects*)."""
    return _SECTION_NUMBER_RE.sub("", heading, count=1)


def heading_keys(heading: str) -> set[str]:
    """The names under which a query names this heading: its words as :func:`query_names` cuts them, and
    with the last word singular (``Demiplanes`` is named by ``demiplane`` too), without a section number."""
    words = _WORD_RE.findall(normalize_name(without_section_number(heading)))
    return _name_forms(words) if words else set()


def _name_forms(words: list[str]) -> set[str]:
    """The names a run of words stands for: as written, and with its last word singular."""
    return {" ".join(words), " ".join([*words[:-1], singular(words[-1])])}


def outermost(spans: list[NamedSpan]) -> list[NamedSpan]:
    """Longest spans first; a span inside an already kept one is dropped."""
    kept: list[NamedSpan] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.start)):
        if not any(k.start <= span.start and span.end <= k.end for k in kept):
            kept.append(span)
    return kept
