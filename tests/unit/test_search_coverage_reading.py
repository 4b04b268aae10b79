"""The coverage leg's fast reading of a chunk (:class:`search.coverage.StatedText`) states exactly what the
plain reading does: every chunk read token by token with :func:`search.coverage.tokens`, as the leg did
before it mapped words through a dict, on thousands of generated texts and queries that mix numbers,
units, ordinals, levels, dice, negations, modifiers, pairs, stop words, apostrophes and Unicode digits.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata

import pytest

from models.stemming import stem
from search import coverage
from search.coverage import Constraint, Kind, StatedText, coverage_scores, query_constraints, tokens

pytestmark = pytest.mark.unit

# The token pattern as it was, alternatives in the other order.
_PLAIN_TOKEN_RE = re.compile(r"\d+d\d+|\d+(?:[/.]\d+)?(?:st|nd|rd|th)?|[^\W\d_][\w'’]*")


class PlainReading:
    """The reading the leg had: one :class:`Token` per word, its sets built from them."""

    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        texts = [t.text for t in self.tokens]
        self.texts = texts
        self.pairs = set(map(" ".join, zip(texts, texts[1:], strict=False)))
        self.terms = {t.text for t in self.tokens if t.kind is Kind.WORD or t.kind is Kind.VALUE}
        self.numbers: dict[str, list[int]] = {}
        for i, tok in enumerate(self.tokens):
            if tok.kind is Kind.NUMBER:
                self.numbers.setdefault(tok.text, []).append(i)

    def meets(self, constraint: Constraint) -> bool:
        if constraint.kind is Kind.PAIR:
            return constraint.text in self.pairs
        if constraint.kind is Kind.ABSENT:
            return constraint.text not in self.terms
        if constraint.kind is not Kind.NUMBER:
            return constraint.text in self.terms
        for i in self.numbers.get(constraint.text, ()):
            if not constraint.near:
                return True
            window = self.tokens[max(0, i - coverage.NUMBER_WINDOW) : i + coverage.NUMBER_WINDOW + 1]
            if any(t.kind is Kind.WORD and t.text in constraint.near for t in window):
                return True
        return False


def plain_scores(query: str, texts: dict[str, str], pair_weight: float = 0.5) -> dict[str, float]:
    constraints = query_constraints(query)
    if not constraints or not texts:
        return dict.fromkeys(texts, 0.0)
    met = {doc_id: [PlainReading(text).meets(c) for c in constraints] for doc_id, text in texts.items()}
    weights = []
    for j, constraint in enumerate(constraints):
        count = sum(flags[j] for flags in met.values())
        weight = math.log(1.0 + len(met) / (1.0 + count))
        weights.append(weight * (pair_weight if constraint.kind is Kind.PAIR else 1.0))
    total = sum(weights) or 1.0
    return {d: sum(w for w, hit in zip(weights, flags, strict=True) if hit) / total for d, flags in met.items()}


WORDS = [
    "fire",
    "damage",
    "sphere",
    "spell",
    "spells",
    "evocation",
    "level",
    "levels",
    "level's",
    "_level",
    "wizard",
    "creature",
    "creatures",
    "very",
    "rare",
    "attunement",
    "needs",
    "no",
    "not",
    "without",
    "never",
    "non",
    "the",
    "a",
    "of",
    "in",
    "to",
    "and",
    "or",
    "is",
    "has",
    "that",
    "what",
    "which",
    "one",
    "out",
    "hit",
    "points",
    "feet",
    "foot",
    "ft",
    "ft.",
    "hours",
    "hour",
    "minute",
    "minutes",
    "round",
    "rounds",
    "mile",
    "miles",
    "lb",
    "pounds",
    "casting",
    "creating",
    "created",
    "running",
    "dragon",
    "dragons",
    "saving",
    "throw",
    "throws",
    "’s",
    "d",
    "dc",
    "cr",
    "save",
    "it’s",
    "don't",
    "Élan",
    "ÉLAN",
    "naïve",
    "café",
    "straße",
]
NUMBERS = [
    "1",
    "2",
    "3",
    "10",
    "15",
    "20",
    "45",
    "60",
    "120",
    "1/2",
    "3.5",
    "1st",
    "2nd",
    "3rd",
    "4th",
    "9th",
    "1d3",
    "2d6",
    "10d8",
    "12d",
    "3rd-level",
    "60-foot",
    "²",
    "³",
    "①",
    "½",
    "٣",
    "3²",
    "፩",
    "፪feet",
]
# ፩ (Ethiopic one) is a digit to str.isdigit() but not to \d, and NFKC keeps it: a text whose only digit it is
# reads it as a word.


def generated_text(rng: random.Random, length: int) -> str:
    parts = []
    for _ in range(length):
        roll = rng.random()
        parts.append(rng.choice(NUMBERS) if roll < 0.2 else rng.choice(WORDS))
        if rng.random() < 0.1:
            parts.append(rng.choice([",", ".", "(", ")", "-", "—", ":", "\n"]))
    joiners = [" ", " ", " ", "-", ""]
    return "".join(p + rng.choice(joiners) for p in parts)


def test_the_token_pattern_finds_the_same_tokens_in_either_order() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        text = unicodedata.normalize("NFKC", generated_text(rng, rng.randint(0, 40))).casefold()
        assert coverage._TOKEN_RE.findall(text) == _PLAIN_TOKEN_RE.findall(text)


def test_the_fast_reading_states_what_the_plain_reading_states() -> None:
    rng = random.Random(5)
    queries = [generated_text(rng, rng.randint(1, 12)) for _ in range(300)]
    constraints = list(dict.fromkeys(c for q in queries for c in query_constraints(q)))
    assert {c.kind for c in constraints} == set(Kind) - {Kind.STOP}  # every kind of constraint is exercised
    assert any(c.near for c in constraints)
    for n in range(2000):
        text = generated_text(rng, rng.randint(0, 60 if n % 2 else 6))
        fast, plain = StatedText(text), PlainReading(text)
        assert (fast.texts, fast.terms, fast.numbers, fast.pairs) == (
            plain.texts,
            plain.terms,
            plain.numbers,
            plain.pairs,
        ), text
        assert [fast.meets(c) for c in constraints] == [plain.meets(c) for c in constraints], text


def test_a_pair_is_checked_before_and_after_the_pairs_are_built() -> None:
    # meets() looks a pair up in the joined text first and builds the pair set only when it is there
    stated = StatedText("Fire damage level 3rd, very rare 60 feet")
    fire, damage, level, rare = (stem(w) for w in ("fire", "damage", "level", "rare"))
    assert not stated.meets(Constraint(Kind.PAIR, f"{damage} level 3"))  # "level" and "3" are two tokens here
    assert f"{damage} {level} 3" in " ".join(stated.texts)  # though the joined text holds it
    assert stated.meets(Constraint(Kind.PAIR, f"{fire} {damage}"))
    assert stated.meets(Constraint(Kind.PAIR, f"very {rare}"))
    assert not stated.meets(Constraint(Kind.PAIR, f"{damage} level 3"))
    assert stated.meets(Constraint(Kind.PAIR, f"{rare} 60 ft"))


def test_coverage_scores_are_the_plain_readings_scores() -> None:
    rng = random.Random(9)
    for _ in range(60):
        query = generated_text(rng, rng.randint(2, 14))
        texts = {f"c{i}": generated_text(rng, rng.randint(0, 80)) for i in range(rng.randint(0, 40))}
        assert coverage_scores(query, texts) == plain_scores(query, texts)
        assert coverage_scores(query, texts, pair_weight=1.0) == plain_scores(query, texts, pair_weight=1.0)


def test_the_word_cache_is_bounded_and_refills(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coverage, "_WORD_CACHE_LIMIT", 5)
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa 3 feet"
    first = StatedText(text)
    again = StatedText(text + " lambda mu nu")
    assert len(coverage._WORDS.text) <= 5 + 13
    assert again.terms >= first.terms
    assert again.terms == PlainReading(text + " lambda mu nu").terms


def test_threads_reading_at_once_read_alike_while_the_word_cache_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    # the leg threads read candidates at the same time; a full cache is replaced under them, never cleared
    import sys
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(coverage, "_WORD_CACHE_LIMIT", 20)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        rng = random.Random(13)
        texts = [generated_text(rng, rng.randint(5, 60)) + f" word{i} {i}th" for i in range(400)]
        expected = [(p.texts, p.terms, p.numbers) for p in map(PlainReading, texts)]

        def read(offset: int) -> list[tuple[list[str], set[str], dict[str, list[int]]]]:
            order = texts[offset:] + texts[:offset]
            got = [(s.texts, s.terms, s.numbers) for s in map(StatedText, order)]
            return got[len(texts) - offset :] + got[: len(texts) - offset]

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(read, [0, 100, 200, 300]))
    finally:
        sys.setswitchinterval(interval)
    assert all(result == expected for result in results)
