"""A crude English stemmer for telling whether two texts share a word, with no model and no data
files: knowledge search matches concept names with it (:mod:`search.graph`, :mod:`search.coverage`)
and recall checks whether its BM25 leg matched a question's words (:mod:`story.recall_cues`).
Its outputs are only ever compared with each other, never shown."""

from __future__ import annotations

__all__ = ["singular", "stem"]


def singular(word: str) -> str:
    """A simple English singular of one lowercase word (``aspects`` → ``aspect``, ``abilities`` →
    ``ability``, ``boxes`` → ``box``); words that only look plural (``stress``, ``status``) are kept."""
    if len(word) <= 3 or word.endswith(("ss", "us", "is", "'s", "’s")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("xes", "zes", "ches", "shes", "sses")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


def stem(word: str) -> str:
    """A crude English stem, the same for a word's common forms (``create``, ``creating``, ``created``
    → ``creat``; ``aspects`` → ``aspect``). Only ever compared with other outputs of this function."""
    word = singular(word.replace("’", "'").removesuffix("'s"))
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsz":  # running → run
                word = word[:-1]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word
