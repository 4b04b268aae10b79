"""The full-text index protocol: a derived, rebuildable BM25 index over chunks and other records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.search import FILTER_FIELDS, SearchFilters


class TextDocument(BaseModel):
    """One record of the full-text index.

    ``title``, ``heading`` and ``text`` are analysed for BM25; ``fields`` are exact-match keyword
    fields (only the names in :data:`schemas.search.FILTER_FIELDS`); ``data`` is stored, not indexed,
    and comes back with hits (page numbers, sequence, …: JSON-compatible values only).
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="Graph id of the record; the index key.")
    text: str
    title: str = ""
    heading: str = Field(default="", description="Heading path joined with ' > '.")
    fields: dict[str, str | list[str]] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        unknown = sorted(set(value) - set(FILTER_FIELDS))
        if unknown:
            raise ValueError(f"unknown keyword fields {unknown}; known: {list(FILTER_FIELDS)}")
        return value


class TextHit(BaseModel):
    """One BM25 match, best first."""

    id: str
    score: float
    title: str = ""
    heading: str = ""
    text: str = ""
    highlights: list[str] = Field(default_factory=list, description="Snippets with matches in <em> tags.")
    fields: dict[str, str | list[str]] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class TextIndex(Protocol):
    """Upsert by id (idempotent), delete, BM25 search with keyword filters and highlights."""

    name: str
    deferred_highlights: bool
    """True when snippets cost the caller's process (embedded): ask :meth:`highlights` for the hits
    shown; False when the server makes them within the search request."""

    def ensure(self) -> None:
        """Create the index and its mapping if missing (idempotent)."""
        ...

    def upsert(self, docs: Sequence[TextDocument]) -> int:
        """Insert or replace documents by id, in bulk. Returns how many were written."""
        ...

    def get(self, doc_id: str) -> TextDocument:
        """The stored document (``NotFound`` if absent)."""
        ...

    def get_many(self, ids: Sequence[str]) -> list[TextDocument]:
        """The stored documents among ``ids`` in one request, in the order asked (each once); missing
        ids are skipped."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete by id; missing ids are ignored. Returns how many existed."""
        ...

    def delete_by_filter(self, filters: SearchFilters) -> int:
        """Delete every document matching ``filters``. Returns how many."""
        ...

    def search(
        self, query: str, *, filters: SearchFilters | None = None, limit: int = 10, highlight: bool = True
    ) -> list[TextHit]:
        """BM25 over title, heading and text; filters are exact matches on keyword fields."""
        ...

    def highlights(self, query: str, ids: Sequence[str]) -> dict[str, list[str]]:
        """The snippets :meth:`search` with ``highlight=True`` gives these documents for ``query``, in one
        request: a caller that shows a few of many hits highlights only those. Ids of missing documents,
        or of documents ``query`` does not match, may be absent."""
        ...

    def count(self, filters: SearchFilters | None = None) -> int: ...

    def refresh(self) -> None:
        """Make every acknowledged write visible to search."""
        ...

    def health(self) -> None:
        """Return if the index answers; raise ``Unavailable`` within the configured timeout if not."""
        ...

    def close(self) -> None: ...
