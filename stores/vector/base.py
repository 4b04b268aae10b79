"""The vector index protocol: a derived, rebuildable dense-vector index with payload filters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from schemas.search import SearchFilters

# Point ids in Qdrant must be UUIDs or integers; graph ids are strings. The mapping is deterministic,
# so re-ingest upserts the same point, and the graph id travels in the payload under this key.
ID_FIELD = "_id"
_NAMESPACE = uuid.UUID("5b0c2a4e-8d0f-4b7e-9a53-6f4e2c9d1a10")


def point_uuid(graph_id: str) -> str:
    """The Qdrant point id of a graph id (uuid5, stable across processes and runs)."""
    return str(uuid.uuid5(_NAMESPACE, graph_id))


class Distance(StrEnum):
    COSINE = "cosine"
    DOT = "dot"
    EUCLID = "euclid"


class VectorSpace(BaseModel):
    """A collection's named dense vector: its name, size and distance come from the embedding model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="dense", pattern=r"^[A-Za-z0-9_\-]+$", description="Named vector in Qdrant.")
    dim: int = Field(gt=0, le=65536)
    distance: Distance = Distance.COSINE


class VectorPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="Graph id of the record (chunk, memory, …).")
    vector: list[float]
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword filter fields (schemas.search.FILTER_FIELDS) and small stored values, "
        "including the embedding model name.",
    )


class VectorHit(BaseModel):
    id: str
    score: float = Field(description="Similarity; higher is better for every distance.")
    payload: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class VectorIndex(Protocol):
    """Collections with one named dense vector, payload indexes on the filter fields, filtered search."""

    name: str

    def ensure_collection(self, collection: str, space: VectorSpace) -> None:
        """Create the collection and its payload indexes if missing. ``Conflict`` if it exists with
        another vector name, size or distance (a different embedding model needs a new collection)."""
        ...

    def collections(self) -> list[str]: ...

    def drop_collection(self, collection: str) -> None:
        """Delete the collection; missing is fine (the index is derived and rebuildable)."""
        ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> int:
        """Insert or replace points by id (idempotent). ``InvalidRequest`` on a wrong vector size."""
        ...

    def get(self, collection: str, ids: Sequence[str]) -> list[VectorPoint]:
        """The points that exist among ``ids``, with vectors, in the order asked."""
        ...

    def search(
        self, collection: str, vector: Sequence[float], *, filters: SearchFilters | None = None, limit: int = 10
    ) -> list[VectorHit]:
        """Nearest points, best first, restricted by ``filters``."""
        ...

    def search_batch(
        self,
        collection: str,
        vectors: Sequence[Sequence[float]],
        *,
        filters: SearchFilters | None = None,
        limit: int = 10,
    ) -> list[list[VectorHit]]:
        """What :meth:`search` answers for each of ``vectors`` (same ids, payloads and scores, the
        scores to float32 precision), in the order asked, under one filter and limit, as one request:
        the engine plans the searches together. No vectors, no request: ``[]``."""
        ...

    def delete(self, collection: str, ids: Sequence[str]) -> None: ...

    def delete_by_filter(self, collection: str, filters: SearchFilters) -> None: ...

    def scroll(
        self, collection: str, *, filters: SearchFilters | None = None, batch_size: int = 256
    ) -> Iterator[VectorPoint]:
        """Every point (with vectors) matching ``filters``, in pages of ``batch_size``."""
        ...

    def count(self, collection: str, filters: SearchFilters | None = None) -> int: ...

    def optimize(self, collection: str) -> bool:
        """Build search indexes after a bulk load. Returns whether there was work to do; engines that
        index as they write (server, local mode) return False."""
        ...

    def health(self) -> None: ...

    def close(self) -> None: ...
