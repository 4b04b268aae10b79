"""Weighted reciprocal rank fusion (Cormack et al., 2009), keeping every leg's score and rank.

A document's fused score is ``sum(weight[leg] / (k + rank[leg]))`` over the legs that found it, with
1-based ranks. Raw scores of different legs (cosine, BM25, concept weights) are not comparable, ranks
are; ``k`` flattens the curve so that being found by two legs beats being first in one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Fused:
    """One document after fusion: its fused score and, per leg, the raw score and rank."""

    id: str
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)


def rrf(legs: Mapping[str, Sequence[tuple[str, float]]], weights: Mapping[str, float], *, k: int = 60) -> list[Fused]:
    """Fuse ranked lists of ``(id, raw score)``, best first, into one list, best first.

    Args:
        legs: each leg's hits in rank order; a duplicate id within a leg keeps its first rank.
        weights: weight per leg; a leg missing here or weighted 0 is recorded but adds nothing.
        k: the RRF constant.

    Returns:
        Every document found by any leg, by fused score descending, ties by id.
    """
    fused: dict[str, Fused] = {}
    for leg, hits in legs.items():
        weight = float(weights.get(leg, 0.0))
        rank = 0
        for doc_id, raw in hits:
            doc = fused.get(doc_id)
            if doc is None:
                doc = fused[doc_id] = Fused(doc_id)
            if leg in doc.ranks:
                continue
            rank += 1
            doc.ranks[leg] = rank
            doc.scores[leg] = float(raw)
            doc.score += weight / (k + rank)
    return sorted(fused.values(), key=lambda d: (-d.score, d.id))
