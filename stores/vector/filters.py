"""What both Qdrant backends send and receive: filter conditions, stored payloads, request checks.

qdrant-client (``qdrant_client.models``) and qdrant-edge-py (``qdrant_edge``) model filters with
different classes but the same constructor keywords (``Filter(must=…)``, ``FieldCondition(key=…,
match=…)``, ``MatchValue(value=…)``, ``MatchAny(any=…)``), so one builder serves both: each backend
passes the module whose classes it needs. The checks here run before a request leaves the process,
so both backends refuse the same malformed requests with the same :class:`InvalidRequest`, whatever
their engines would have said.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from schemas.errors import InvalidRequest
from schemas.search import SearchFilters
from stores.vector.base import ID_FIELD, Distance, VectorHit, VectorPoint, VectorSpace

# Collection names become folder names for qdrant-edge; one rule for both backends keeps a name that
# works on a laptop working on the server, and keeps path separators and dots out of folder names.
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$")


def check_collection_name(store: str, collection: str, *, url: str | None = None) -> None:
    """Refuse a collection name that is not 1-128 letters, digits, ``_`` or ``-`` (first: letter/digit).

    Raises:
        InvalidRequest: naming the collection.
    """
    if not isinstance(collection, str) or not _COLLECTION_NAME.match(collection):
        raise InvalidRequest(
            store,
            f"invalid collection name {collection!r}: use 1-128 letters, digits, '_' or '-', "
            "starting with a letter or digit",
            url=url,
        )


def build_filter(models: ModuleType, filters: SearchFilters | None) -> Any | None:
    """The Qdrant filter of ``filters`` built from ``models`` (``qdrant_client.models`` or ``qdrant_edge``).

    Every set field becomes one ``must`` condition; a single value matches exactly (``MatchValue``),
    several match any of them (``MatchAny``). A stored list value matches when any element does,
    which is Qdrant's own rule for arrays and the rule of :meth:`SearchFilters.matches`.

    Returns:
        ``None`` when no field is set, so callers send no filter at all.
    """
    if filters is None:
        return None
    must = []
    for field, values in filters.conditions().items():
        match = models.MatchValue(value=values[0]) if len(values) == 1 else models.MatchAny(any=list(values))
        must.append(models.FieldCondition(key=field, match=match))
    return models.Filter(must=must) if must else None


def build_delete_filter(
    models: ModuleType, store: str, collection: str, filters: SearchFilters, *, url: str | None = None
) -> Any:
    """The filter of a ``delete_by_filter``, refusing one that sets no field.

    Raises:
        InvalidRequest: ``filters`` sets no field: it would select, and delete, every point
            (``drop_collection`` is the way to do that).
    """
    built = build_filter(models, filters)
    if built is None:
        raise InvalidRequest(
            store,
            f"collection {collection!r}: refusing to delete by a filter that sets no field "
            "(it would delete every point; drop the collection instead)",
            url=url,
        )
    return built


def check_vector(
    store: str,
    collection: str,
    space: VectorSpace,
    vector: Sequence[float],
    *,
    what: str,
    url: str | None = None,
) -> list[float]:
    """``vector`` as a list of floats, checked against the collection's size and for NaN / infinity.

    Raises:
        InvalidRequest: wrong size or a non-finite component, naming ``what`` (a point id or "query").
    """
    # one conversion, in C: an array's own, else float() of each element (an upsert's lists hold floats)
    if isinstance(vector, np.ndarray) and vector.ndim == 1 and vector.dtype.kind == "f":
        values: list[float] = vector.tolist()
    else:
        values = list(map(float, vector))
    if len(values) != space.dim:
        raise InvalidRequest(
            store,
            f"collection {collection!r}: {what} has a vector of size {len(values)}, "
            f"expected {space.dim} ({space.name!r}, {space.distance.value})",
            url=url,
        )
    # a NaN or an infinity makes the sum non-finite; a finite sum proves every component finite, and only a
    # sum that overflowed (or a real NaN / infinity) needs the check per component
    if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
        raise InvalidRequest(store, f"collection {collection!r}: {what} has a NaN or infinite component", url=url)
    return values


def stored_payload(store: str, collection: str, point: VectorPoint, *, url: str | None = None) -> dict[str, Any]:
    """The payload Qdrant stores for ``point``: its own payload plus the graph id under ``ID_FIELD``.

    Raises:
        InvalidRequest: the payload uses the reserved ``ID_FIELD`` key for another value.
    """
    if ID_FIELD in point.payload and point.payload[ID_FIELD] != point.id:
        raise InvalidRequest(
            store,
            f"collection {collection!r}: payload key {ID_FIELD!r} is reserved for the graph id",
            url=url,
        )
    return {**point.payload, ID_FIELD: point.id}


def split_payload(payload: dict[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """``(graph id, payload without ID_FIELD)`` of a stored payload; the id is ``None`` if absent."""
    payload = dict(payload or {})
    graph_id = payload.pop(ID_FIELD, None)
    return (str(graph_id) if graph_id is not None else None), payload


def similarity(space: VectorSpace, score: float) -> float:
    """The protocol's score (higher is better) from Qdrant's, which is a *distance* for Euclid."""
    return -float(score) if space.distance is Distance.EUCLID else float(score)


def scored_hits(space: VectorSpace, points: Sequence[Any]) -> list[VectorHit]:
    """The protocol's hits from either engine's scored points (``id``, ``score``, ``payload``), in order."""
    hits = []
    for point in points:
        graph_id, payload = split_payload(point.payload)
        hits.append(VectorHit(id=graph_id or str(point.id), score=similarity(space, point.score), payload=payload))
    return hits


def check_limit(store: str, collection: str, limit: int, *, url: str | None = None) -> None:
    """Refuse a search limit below 1 (Qdrant would too, with a less helpful message)."""
    if limit < 1:
        raise InvalidRequest(store, f"collection {collection!r}: limit must be at least 1, got {limit}", url=url)


__all__ = [
    "build_delete_filter",
    "build_filter",
    "check_collection_name",
    "check_limit",
    "check_vector",
    "scored_hits",
    "similarity",
    "split_payload",
    "stored_payload",
]
