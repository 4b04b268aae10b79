"""Search contracts shared by the API, the search service and the index families: filters, requests, hits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Keyword fields every index stores and filters on. Adding one means adding it here only.
FILTER_FIELDS: tuple[str, ...] = (
    "library",
    "library_type",
    "collection",
    "item",
    "classification",
    "campaign",
    "status",
    # campaign recall (the memory index, story.recall): what a record is, where it sits in the story
    # tree (lineage keys, see story.recall.lineage_keys) and who witnessed it
    "kind",
    "lineage",
    "observer",
)


class SearchFilters(BaseModel):
    """Exact-match filters on keyword fields; a list means "any of". Fields left unset do not filter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    library: list[str] | None = Field(default=None, description="Library uids.")
    library_type: list[str] | None = Field(default=None, description="Library types (rulebook, lore, …).")
    collection: list[str] | None = Field(default=None, description="Collection uids.")
    item: list[str] | None = Field(default=None, description="Item uids.")
    classification: list[str] | None = Field(default=None, description="canon, reference or inspiration.")
    campaign: list[str] | None = Field(default=None, description="Campaign ids (campaign-scoped records).")
    status: list[str] | None = Field(default=None, description="Record status, e.g. active (not superseded).")
    kind: list[str] | None = Field(default=None, description="Memory records: turn, summary, fact or memory.")
    lineage: list[str] | None = Field(
        default=None, description="Memory records: lineage keys of the story positions to recall from."
    )
    observer: list[str] | None = Field(default=None, description="Memory records: entity ids who witnessed them.")

    @field_validator(*FILTER_FIELDS, mode="before")
    @classmethod
    def _listify(cls, value: object) -> object:
        if isinstance(value, str):
            return [value]
        return value

    @field_validator(*FILTER_FIELDS)
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not v for v in value)):
            raise ValueError("a filter needs at least one non-empty value; leave it unset to not filter")
        return value

    def conditions(self) -> dict[str, list[str]]:
        """The set filters as ``{field: [allowed values]}``."""
        return {name: values for name in FILTER_FIELDS if (values := getattr(self, name)) is not None}

    def matches(self, fields: dict[str, object]) -> bool:
        """Whether a record's keyword ``fields`` pass these filters (a list field matches if any value does)."""
        for name, allowed in self.conditions().items():
            value = fields.get(name)
            values = value if isinstance(value, list) else [value]
            if not any(v in allowed for v in values):
                return False
        return True


class LegWeights(BaseModel):
    """Weights of the retrieval legs in reciprocal rank fusion (0 turns a leg off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vector: float = Field(default=1.0, ge=0, le=100)
    text: float = Field(default=1.0, ge=0, le=100)
    graph: float = Field(default=1.0, ge=0, le=100)
    coverage: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="Weight of the coverage leg (the candidates ranked by how much of the query each states); "
        "0 here, so weights given with a request fuse exactly the legs they name.",
    )


class SearchRequest(BaseModel):
    """A search over the ingested knowledge."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000, description="What to look for, in plain words.")
    filters: SearchFilters = Field(default_factory=SearchFilters)
    limit: int = Field(default=10, ge=1, le=100)
    rerank: bool | None = Field(
        default=None,
        description="Re-rank with the configured cross-encoder; None = whenever one is configured, "
        "True = required (an error when none is configured), False = never.",
    )
    weights: LegWeights | None = Field(default=None, description="RRF weight per leg; unset = the service's.")


class SearchHit(BaseModel):
    """One retrieved chunk with its citation and the score of each retrieval leg."""

    chunk_id: str
    item_uid: str
    title: str = Field(description="Title of the item (book) the chunk comes from.")
    text: str
    page_start: int | None = None
    page_end: int | None = None
    heading_path: list[str] = Field(default_factory=list)
    score: float = Field(
        description="Final score, higher is better: the fused RRF score, or the re-ranker's when re-ranked."
    )
    scores: dict[str, float] = Field(
        default_factory=dict, description="Raw score per leg (vector, text, graph) and rerank when re-ranked."
    )
    ranks: dict[str, int] = Field(default_factory=dict, description="1-based rank per leg (and rerank).")
    highlights: list[str] = Field(default_factory=list)
    fused_score: float | None = Field(
        default=None, description="RRF score before re-ranking (equal to score when not re-ranked)."
    )
    reranker: str | None = Field(default=None, description="Model that re-ranked this hit; None if not re-ranked.")
    concepts: list[str] = Field(
        default_factory=list, description="Concepts of the query that led the graph leg to this chunk."
    )
