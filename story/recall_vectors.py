"""The vector searches of a recall: the filter they send, and the check of what comes back.

A recall's filters name its campaign and the lineage keys of its position (:func:`story.lineage.lineage_cover`).
The vector searches send the lineage without the campaign: a lineage key names a branch, and branch ids are
graph ids (``branch_<uuid4>``; a bundle import refuses ids the graph holds already), so the keys alone select
records of the campaign. The campaign condition cost more than the search it rode on: on 100,000 memory records
it added 0.3-0.9 µs per point on the lineage to an exact search (reordered, nested or sent as a one-value any-of,
the same), and the search of an early position (8,001 points, searched exactly) took 11.0 ms of CPU with it and
3.8 ms without it, with the same 100 hits (``benchmarks/recall_scale.py``, same run, load ~11). The campaign is
still checked, on every hit here: a hit of another campaign (a clash of branch ids, which graph ids rule out) is
dropped and logged, so none leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import structlog

from schemas.search import SearchFilters
from stores.vector.base import VectorHit, VectorIndex

log = structlog.get_logger(__name__)


def sent_filters(filters: SearchFilters) -> SearchFilters:
    """What a recall's vector search sends for ``filters``: without the campaign where a lineage is set."""
    if filters.lineage is None or filters.campaign is None:
        return filters
    return filters.model_copy(update={"campaign": None})


def nearest(
    vectors: VectorIndex, collection: str, queries: Sequence[np.ndarray], filters: SearchFilters, limit: int
) -> list[list[VectorHit]]:
    """The ``limit`` nearest records to each of ``queries`` under ``filters``, best first, each list only of
    the campaigns ``filters`` names: one query searched alone, several in one batch (one filter estimate,
    one planned pass: :meth:`~stores.vector.base.VectorIndex.search_batch`)."""
    sent = sent_filters(filters)
    if len(queries) == 1:
        found = [vectors.search(collection, queries[0].tolist(), filters=sent, limit=limit)]
    else:
        found = vectors.search_batch(collection, [q.tolist() for q in queries], filters=sent, limit=limit)
    if sent is filters or filters.campaign is None:
        return found
    return [_on_campaigns(hits, frozenset(filters.campaign), collection) for hits in found]


def _on_campaigns(hits: list[VectorHit], campaigns: frozenset[str], collection: str) -> list[VectorHit]:
    kept = [h for h in hits if h.payload.get("campaign") in campaigns]
    if len(kept) < len(hits):
        log.warning(
            "recall_vector_hits_off_campaign",
            collection=collection,
            dropped=len(hits) - len(kept),
            campaigns=sorted(campaigns),
        )
    return kept
