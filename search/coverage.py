"""The coverage leg: how much of what a query asks for each candidate chunk states.

A question that describes an entry instead of naming it ("the 3rd-level evocation spell that deals fire
damage in a 20-foot sphere", "the large celestial with truesight out to 120 feet") names attributes, and
the entry it means is the one that has *all* of them. BM25 adds up matching words, so an entry holding
"fire" five times outranks the one holding every constraint once; a dense model blurs the numbers. This
leg re-reads the candidates the other legs found (their union, a few dozen chunks) and ranks them by the
share of the query's constraints each one states, weighted by how rare the constraint is among the
candidates (a constraint every candidate meets tells them apart no more than one none meets).

A constraint is one of:

* a word of the query (stemmed, function words dropped);
* a typed value, read the same way on both sides so that the printed form does not matter: a number and
  its unit (``60 feet``, ``60-foot`` and ``60 ft.`` are all ``60 ft``; ``1 hour``; ``10 minutes``), a
  level (``3rd-level`` and ``Level 3``), dice (``1d3``);
* a bare number with the words next to it in the query (``45 hit points``, ``challenge rating 13``,
  ``DC 15``): a chunk meets it when the number stands within a few words of one of those words
  (``Hit Points 45 (10d8)``), not anywhere (every stat block holds a 13 somewhere);
* two adjacent words (``very rare``, ``saving throw``), or a typed value and the word beside it
  (``3rd-level evocation``, ``Level 3 Evocation``), at a lower weight: ``rare`` alone is met by a very
  rare item too, and a 3rd-level spell of another school that can be cast at 3rd level holds both;
* a word after a negation (``needs no attunement``): met by a chunk that does *not* hold the word.

The result is one more ranked list for reciprocal rank fusion (:class:`search.hybrid.HybridSearcher`); it
never adds a chunk the other legs did not find. Nothing here knows a game: the units are units of
measure, and the typed values are read by pattern, so any rulebook's stat lines and any player's
paraphrase meet on them.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from itertools import compress

from models.stemming import stem
from search.query_names import STOP_WORDS

# Units of measure and how they are printed, to one key each: "feet", "foot" and "ft" are the same unit.
UNITS: dict[str, str] = {
    **dict.fromkeys(("ft", "foot", "feet"), "ft"),
    **dict.fromkeys(("inch", "inches", "in"), "inch"),
    **dict.fromkeys(("yard", "yards", "yd"), "yard"),
    **dict.fromkeys(("mile", "miles", "mi"), "mile"),
    **dict.fromkeys(("m", "meter", "meters", "metre", "metres"), "m"),
    **dict.fromkeys(("km", "kilometer", "kilometers", "kilometre", "kilometres"), "km"),
    **dict.fromkeys(("lb", "lbs", "pound", "pounds"), "lb"),
    **dict.fromkeys(("kg", "kilogram", "kilograms"), "kg"),
    **dict.fromkeys(("round", "rounds"), "round"),
    **dict.fromkeys(("turn", "turns"), "turn"),
    **dict.fromkeys(("second", "seconds", "sec"), "second"),
    **dict.fromkeys(("minute", "minutes", "min"), "minute"),
    **dict.fromkeys(("hour", "hours", "hr"), "hour"),
    **dict.fromkeys(("day", "days"), "day"),
    **dict.fromkeys(("week", "weeks"), "week"),
    **dict.fromkeys(("month", "months"), "month"),
    **dict.fromkeys(("year", "years"), "year"),
}

# Words of the question itself ("what was that … I'm looking for"), never a constraint on the answer.
QUESTION_WORDS = frozenset(
    {
        "name",
        "what",
        "which",
        "who",
        "looking",
        "i'm",
        "im",
        "that",
        "was",
        "is",
        "it",
        "has",
        "the",
        "out",
        "one",
        "kind",
        "called",
        "find",
        "remember",
        "look",
    }
)

# A negation makes the next word a constraint the answer must *not* state.
NEGATIONS = frozenset({"no", "not", "without", "never", "non"})

# Stop words that change the word after them ("very rare" is not "rare"): kept as the first word of a pair.
MODIFIERS = frozenset({"very", "more", "less", "most", "least"})

NUMBER_WINDOW = 3
"""How many words from a bare number a chunk may hold one of the query's words next to it."""

QUERY_CONTEXT = 2
"""How many words on each side of a bare number in the query say what it counts."""

# Words first (most tokens are), then dice or a number with its fraction or ordinal suffix: the branches
# start on different characters, so the order changes nothing but the time (~20 % less).
_TOKEN_RE = re.compile(r"[^\W\d_][\w'’]*|\d+(?:d\d+|(?:[/.]\d+)?(?:st|nd|rd|th)?)")
_ORDINAL_RE = re.compile(r"(\d+)(?:st|nd|rd|th)")
_DICE_RE = re.compile(r"\d+d\d+")
# What a token needs its neighbour for (a number, "level"); a text without any is read word by word.
_SPECIAL_RE = re.compile(r"\d|\blevel\b")
_TEXT_OF = operator.attrgetter("text")


class Kind(StrEnum):
    """What a token or constraint is."""

    WORD = "word"  # a stemmed word
    VALUE = "value"  # a typed value: number + unit, level, dice
    NUMBER = "number"  # a bare number
    STOP = "stop"  # a function word: no constraint, but it separates pairs
    PAIR = "pair"  # two adjacent words
    ABSENT = "absent"  # a word after a negation


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str


@dataclass(frozen=True, slots=True)
class Constraint:
    """One thing the query asks of its answer; ``near`` holds the words a bare number must stand beside."""

    kind: Kind
    text: str
    near: frozenset[str] = frozenset()


def tokens(text: str, *, query: bool = False) -> list[Token]:
    """``text`` as words, typed values, bare numbers and function words, in order.

    Args:
        query: also treat the question's own words (:data:`QUESTION_WORDS`) as function words.
    """
    folded = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    raw = _TOKEN_RE.findall(folded)
    plain = _query_word if query else _text_word
    if not _SPECIAL_RE.search(folded):  # no number, no "level": every token is a plain word
        return list(map(plain, raw))
    out: list[Token] = []
    append = out.append
    n = len(raw)
    i = 0
    while i < n:
        word = raw[i]
        if not (word[0].isdigit() or word == "level"):
            # most tokens: a word or a function word, the same token every time (cached)
            append(plain(word))
            i += 1
            continue
        after = raw[i + 1] if i + 1 < n else ""
        if word[0].isdigit():
            ordinal = _ORDINAL_RE.fullmatch(word)
            if _DICE_RE.fullmatch(word):
                append(Token(Kind.VALUE, word))
            elif ordinal and after == "level":  # "3rd-level", "3rd level"
                append(Token(Kind.VALUE, f"level {ordinal.group(1)}"))
                i += 1
            elif ordinal:
                append(Token(Kind.NUMBER, ordinal.group(1)))
            elif after in UNITS:  # "60 feet", "60-foot", "60 ft."
                append(Token(Kind.VALUE, f"{word} {UNITS[after]}"))
                i += 1
            else:
                append(Token(Kind.NUMBER, word))
        elif after.isdigit():  # "Level 3 Evocation"
            append(Token(Kind.VALUE, f"level {after}"))
            i += 1
        else:
            append(plain(word))
        i += 1
    return out


@lru_cache(maxsize=65536)
def _text_word(word: str) -> Token:
    """A word of a chunk's text that is no number: a function word or a stemmed word. Cached: a chunk's
    words are mostly a book's common vocabulary, and the coverage leg reads ~100 new chunks a query
    (building every token anew took ~60 % of the leg)."""
    if word in STOP_WORDS or word in NEGATIONS:
        return Token(Kind.STOP, word)
    return Token(Kind.WORD, _stem(word))


def _query_word(word: str) -> Token:
    """A word of the query that is no number: as :func:`_text_word`, the question's own words also stop."""
    return Token(Kind.STOP, word) if word in QUESTION_WORDS else _text_word(word)


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # A book's vocabulary is small and every query re-reads dozens of chunks: stem each word once.
    return stem(word)


def query_constraints(query: str) -> list[Constraint]:
    """What ``query`` asks of its answer, each constraint once, in query order."""
    toks = tokens(query, query=True)
    found: list[Constraint] = []
    for i, tok in enumerate(toks):
        before = toks[i - 1] if i else None
        negated = before is not None and before.kind is Kind.STOP and before.text in NEGATIONS
        if tok.kind in (Kind.WORD, Kind.VALUE):
            found.append(Constraint(Kind.ABSENT if negated else tok.kind, tok.text))
        elif tok.kind is Kind.NUMBER:
            near = frozenset(
                t.text for t in toks[max(0, i - QUERY_CONTEXT) : i + QUERY_CONTEXT + 1] if t.kind is Kind.WORD
            )
            found.append(Constraint(Kind.NUMBER, tok.text, near))
        pairs = before is not None and (
            before.kind in (Kind.WORD, Kind.VALUE) or (before.kind is Kind.STOP and before.text in MODIFIERS)
        )
        if tok.kind is Kind.WORD and pairs and not negated:
            assert before is not None
            found.append(Constraint(Kind.PAIR, f"{before.text} {tok.text}"))
        elif tok.kind is Kind.VALUE and before is not None and before.kind is Kind.WORD:
            found.append(Constraint(Kind.PAIR, f"{before.text} {tok.text}"))
    return list(dict.fromkeys(found))


_STOPS = STOP_WORDS | NEGATIONS
_SPECIAL = ""  # a raw token that needs its neighbour (a number, "level"): never a token's text


@dataclass(frozen=True, slots=True)
class _Words:
    """What each raw word of a chunk's text reads as, kept in plain dicts that ``map`` reads at C speed
    (the words of a book are few)."""

    text: dict[str, str]  # raw word → its token's text (the stem, or the function word); _SPECIAL if special
    is_word: dict[str, bool]  # raw word → whether its token is a stemmed word (no function word, not special)


_WORDS = _Words({}, {})
_WORD_CACHE_LIMIT = 200_000
"""Words kept before the dicts start anew (a bound on a long-lived process). They are replaced, never
cleared, so a search that reads on another thread keeps a consistent pair."""


def _word_texts(raw: list[str]) -> tuple[list[str], _Words]:
    """The token text of each raw word (``_SPECIAL`` where a number or "level" needs its neighbour), and
    the dicts it was read from."""
    words = _WORDS
    try:
        return list(map(words.text.__getitem__, raw)), words
    except KeyError:
        if len(words.text) > _WORD_CACHE_LIMIT:
            words = _new_words()
        text, is_word = words.text, words.is_word
        # is_word first: a reader on another thread that finds a word in ``text`` finds it in ``is_word``
        for word in set(raw).difference(text):
            if word[0].isdigit() or word == "level":
                is_word[word] = False
                text[word] = _SPECIAL
            else:
                token = _text_word(word)
                is_word[word] = token.kind is Kind.WORD
                text[word] = token.text
        return list(map(text.__getitem__, raw)), words


def _new_words() -> _Words:
    global _WORDS  # noqa: PLW0603 - the one shared cache, replaced whole
    _WORDS = _Words({}, {})
    return _WORDS


class StatedText:
    """A chunk's text read the way queries are, to check constraints against.

    The same reading as :func:`tokens` (a test holds them equal), without a :class:`Token` per word: the
    coverage leg reads ~140 new chunks a query, and building every token cost ~150 µs a chunk. Words map
    to their text through a dict at C speed; only numbers and "level" are read one by one.
    """

    __slots__ = ("_joined", "_pairs", "numbers", "terms", "texts", "words")

    def __init__(self, text: str) -> None:
        # NFKC and the apostrophe fold change nothing in ASCII, and casefold is lower there
        folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
        raw = _TOKEN_RE.findall(folded)
        self._pairs: set[str] | None = None
        self._joined: str | None = None
        self.numbers: dict[str, list[int]] = {}
        self.words: list[bool] | None = None  # which tokens are stemmed words (only read beside numbers)
        texts, vocab = _word_texts(raw)
        if _SPECIAL in texts and not text.isascii() and not _SPECIAL_RE.search(folded):
            # a digit that NFKC left and \d does not match, and no other: tokens() reads it as a word
            self._from_tokens(tokens(text))
            return
        if _SPECIAL not in texts:  # no number, no "level": every token is a plain word
            self.texts = texts
            self.terms = set(map(vocab.text.__getitem__, set(raw).difference(_STOPS)))
            return
        self._read_special(raw, texts, vocab.is_word)

    def _from_tokens(self, toks: list[Token]) -> None:
        self.texts = [t.text for t in toks]
        self.words = [t.kind is Kind.WORD for t in toks]
        self.terms = {t.text for t in toks if t.kind is Kind.WORD or t.kind is Kind.VALUE}
        for i, tok in enumerate(toks):
            if tok.kind is Kind.NUMBER:
                self.numbers.setdefault(tok.text, []).append(i)

    def _read_special(self, raw: list[str], plain: list[str], is_word: dict[str, bool]) -> None:
        """:func:`tokens`' reading of numbers and "level", the words between them copied in slices."""
        texts: list[str] = []
        words: list[bool] = []
        values: list[str] = []
        n = len(raw)
        pos = 0
        while True:
            try:
                i = plain.index(_SPECIAL, pos)
            except ValueError:
                break
            texts += plain[pos:i]
            words += map(is_word.__getitem__, raw[pos:i])
            word = raw[i]
            after = raw[i + 1] if i + 1 < n else ""
            pos = i + 1
            kind = Kind.NUMBER
            if word == "level":
                if after.isdigit():  # "Level 3 Evocation"
                    word, kind, pos = f"level {after}", Kind.VALUE, i + 2
                else:
                    token = _text_word(word)
                    word, kind = token.text, token.kind
            elif _DICE_RE.fullmatch(word):
                kind = Kind.VALUE
            elif ordinal := _ORDINAL_RE.fullmatch(word):
                if after == "level":  # "3rd-level", "3rd level"
                    word, kind, pos = f"level {ordinal.group(1)}", Kind.VALUE, i + 2
                else:
                    word = ordinal.group(1)
            elif after in UNITS:  # "60 feet", "60-foot", "60 ft."
                word, kind, pos = f"{word} {UNITS[after]}", Kind.VALUE, i + 2
            if kind is Kind.NUMBER:
                self.numbers.setdefault(word, []).append(len(texts))
            elif kind is not Kind.STOP:
                values.append(word)
            texts.append(word)
            words.append(kind is Kind.WORD)
        texts += plain[pos:]
        words += map(is_word.__getitem__, raw[pos:])
        self.texts, self.words = texts, words
        self.terms = set(compress(texts, words))
        self.terms.update(values)

    @property
    def pairs(self) -> set[str]:
        """Every two adjacent tokens' texts, joined by a space."""
        if self._pairs is None:
            self._pairs = set(map(" ".join, zip(self.texts, self.texts[1:], strict=False)))
        return self._pairs

    def meets(self, constraint: Constraint) -> bool:
        """Whether the text states what ``constraint`` asks."""
        kind = constraint.kind
        if kind is Kind.PAIR:
            if self._pairs is None:
                if self._joined is None:
                    self._joined = " ".join(self.texts)
                if constraint.text not in self._joined:  # a pair's text is in the joined text if it is anywhere
                    return False
            return constraint.text in self.pairs
        if kind is Kind.ABSENT:
            return constraint.text not in self.terms
        if kind is not Kind.NUMBER:
            return constraint.text in self.terms
        positions = self.numbers.get(constraint.text)
        if not positions:
            return False
        if not constraint.near:
            return True
        assert self.words is not None  # numbers are only read with the word flags
        texts, words, near = self.texts, self.words, constraint.near
        for i in positions:
            for j in range(max(0, i - NUMBER_WINDOW), min(len(texts), i + NUMBER_WINDOW + 1)):
                if words[j] and texts[j] in near:
                    return True
        return False


def coverage_scores(query: str, texts: Mapping[str, str], *, pair_weight: float = 0.5) -> dict[str, float]:
    """Each candidate's share (0 to 1) of the query's constraints that its text meets.

    A constraint weighs ``ln(1 + n / (1 + met))`` over the ``n`` candidates, ``met`` of which meet it, and a
    pair of words ``pair_weight`` times that.

    Args:
        query: the player's words.
        texts: candidate id → the text to check (its heading path and body).
        pair_weight: weight of a two-word constraint relative to a single word's.

    Returns:
        A score per candidate id; all 0 when the query asks nothing checkable.
    """
    constraints = query_constraints(query)
    if not constraints or not texts:
        return dict.fromkeys(texts, 0.0)
    met = {doc_id: [stated.meets(c) for c in constraints] for doc_id, stated in _read(texts).items()}
    n = len(met)
    weights = []
    for j, constraint in enumerate(constraints):
        count = sum(flags[j] for flags in met.values())
        weight = math.log(1.0 + n / (1.0 + count))
        weights.append(weight * (pair_weight if constraint.kind is Kind.PAIR else 1.0))
    total = sum(weights) or 1.0
    return {
        doc_id: sum(w for w, hit in zip(weights, flags, strict=True) if hit) / total for doc_id, flags in met.items()
    }


def _read(texts: Mapping[str, str]) -> dict[str, StatedText]:
    return {doc_id: _stated(text) for doc_id, text in texts.items()}


@lru_cache(maxsize=8192)
def _stated(text: str) -> StatedText:
    # The same chunks come back for related questions (an entry's, a chapter's): read each once, within
    # a bound (a few MB at 8,192 chunks).
    return StatedText(text)


def candidate_text(heading_path: Sequence[str], text: str) -> str:
    """What the coverage leg reads of a candidate chunk: its heading path and its text, a line each."""
    return "\n".join([*heading_path, text])


def read_ahead(texts: Iterable[str]) -> None:
    """Read these candidates now into the bounded cache that :func:`coverage_scores` reads from: a search
    reads a leg's hits on that leg's thread while the other legs still run."""
    for text in texts:
        _stated(text)


def coverage_ranking(
    query: str, candidates: list[str], texts: Mapping[str, str], *, pair_weight: float = 0.5
) -> list[tuple[str, float]]:
    """``candidates`` (in fused order) re-ranked by :func:`coverage_scores`, ties kept in fused order:
    the coverage leg's ranked list for reciprocal rank fusion."""
    scores = coverage_scores(query, {c: texts.get(c, "") for c in candidates}, pair_weight=pair_weight)
    position = {doc_id: i for i, doc_id in enumerate(candidates)}
    ordered = sorted(candidates, key=lambda d: (-round(scores[d], 9), position[d]))
    return [(doc_id, scores[doc_id]) for doc_id in ordered]
