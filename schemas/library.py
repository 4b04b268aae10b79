"""What browsing the library answers: libraries with their counts, an item with its chunks and concepts, and
the concept graph around a concept or an item (the ``list_libraries``, ``get_item`` and ``get_concepts``
operations, over REST and MCP alike)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from schemas.knowledge import ChunkingDefaults, Classification, Item, Library
from schemas.rulefacts import StoredSourceFact
from schemas.text import RecordId

__all__ = [
    "ChunkPreview",
    "ConceptGraph",
    "ConceptLink",
    "ConceptNode",
    "ConceptsQuery",
    "CampaignPin",
    "ItemConcept",
    "ItemDetail",
    "ItemListing",
    "ItemQuery",
    "ItemsQuery",
    "LibraryItems",
    "LibrarySummary",
    "LibraryTypeInfo",
]

Relationship = Literal["RELATED_TO", "MENTIONS"]


class LibrarySummary(Library):
    """A library with what it holds: its current items (superseded versions left out), their active chunks,
    and the distinct concepts those chunks mention."""

    item_count: NonNegativeInt = 0
    chunk_count: NonNegativeInt = 0
    concept_count: NonNegativeInt = 0


class LibraryTypeInfo(BaseModel):
    """A library type and the chunking defaults a library of it gets (a library may override them)."""

    type: str
    chunking: ChunkingDefaults


class ItemQuery(BaseModel):
    """Which of an item's chunks and concepts ``get_item`` shows."""

    model_config = ConfigDict(extra="forbid")

    chunk_limit: int = Field(default=10, ge=0, le=100, description="Chunk previews shown, in reading order.")
    chunk_offset: int = Field(default=0, ge=0, description="Chunks skipped before the previews (paging).")
    concept_limit: int = Field(default=25, ge=0, le=500, description="Concepts shown, most mentioned first.")


class ChunkPreview(BaseModel):
    """The start of one chunk, where it sits in the book."""

    uid: str
    sequence: int
    heading_path: list[str] = Field(default_factory=list)
    page_start: int | None = None
    page_end: int | None = None
    token_count: int
    preview: str = Field(description="The chunk's text, cut at about 240 characters ('…' marks the cut).")


class ItemConcept(BaseModel):
    """A concept the item's chunks mention, with how many of them do (a link for ``get_concepts``)."""

    uid: str
    name: str
    kind: str | None = None
    mentions: int = Field(description="Active chunks of this item that mention the concept.")


class ItemDetail(Item):
    """An item with its chunk previews and the concepts it mentions."""

    chunk_count: NonNegativeInt = Field(default=0, description="Its active chunks.")
    concept_count: NonNegativeInt = Field(default=0, description="Distinct concepts its active chunks mention.")
    chunks: list[ChunkPreview] = Field(default_factory=list)
    concepts: list[ItemConcept] = Field(default_factory=list)


class ConceptsQuery(BaseModel):
    """The concepts (most mentioned first), or the concept graph around a start: a concept or an item."""

    model_config = ConfigDict(extra="forbid")

    library_uid: RecordId | None = Field(default=None, description="Without a start: only this library's concepts.")
    concept: str | None = Field(
        default=None, min_length=1, max_length=200, description="Start at this concept: its uid or its name."
    )
    item_uid: RecordId | None = Field(default=None, description="Start at this item: the concepts its chunks mention.")
    depth: int = Field(default=1, ge=1, le=3, description="How many steps from the start (with a start).")
    min_weight: int = Field(default=1, ge=1, description="RELATED_TO links of at least this many shared chunks.")
    limit: int = Field(default=100, ge=1, le=1000, description="At most this many concepts.")

    @model_validator(mode="after")
    def _one_start(self) -> ConceptsQuery:
        if self.concept is not None and self.item_uid is not None:
            raise ValueError("start at a concept or at an item, not both")
        return self


class ConceptNode(BaseModel):
    """A concept reached: how far from the start (0: the start), and how many active chunks mention it."""

    uid: str
    name: str
    normalized_name: str | None = None
    kind: str | None = None
    mentions: int | None = Field(default=None, description="Active chunks mentioning it (in the item, from an item).")
    depth: int | None = Field(default=None, description="Steps from the start; None without a start.")


class ConceptLink(BaseModel):
    """A relationship followed: RELATED_TO between concepts (weight: the chunks mentioning both), or an item's
    MENTIONS of a concept (weight: its chunks that do)."""

    source: str
    target: str
    relationship: Relationship
    weight: int | None = None


class ConceptGraph(BaseModel):
    """The answer of ``get_concepts``: the concepts, and the links followed to reach them from the start."""

    start: str | None = Field(default=None, description="The uid of the start (a concept or an item), if any.")
    start_kind: Literal["concept", "item"] | None = None
    depth: int = Field(default=0, description="The depth traversed (0 without a start).")
    relationships: list[Relationship] = Field(default_factory=list)
    concepts: list[ConceptNode] = Field(default_factory=list)
    links: list[ConceptLink] = Field(default_factory=list)


class ItemsQuery(BaseModel):
    """Which of a library's items ``list_items`` shows, and how many of each one's facts."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=50, ge=1, le=500, description="Items shown, by title.")
    offset: int = Field(default=0, ge=0, description="Items skipped before them (paging).")
    fact_limit: int = Field(default=10, ge=0, le=500, description="Facts shown per item, in extraction order.")
    fact_offset: int = Field(default=0, ge=0, description="Facts of each item skipped before them (paging).")
    include_superseded: bool = Field(default=False, description="Also the editions a newer one replaced.")


class CampaignPin(BaseModel):
    """A campaign of the caller's that draws on a library or an item, and as what."""

    campaign_id: str
    campaign_name: str
    via: Literal["library", "item"] = Field(description="Pinned as the whole library, or as this one item.")
    use: Classification | None = Field(
        default=None, description="canon, reference or inspiration; null: as classified."
    )


class ItemListing(Item):
    """An item of a library with its rulebook facts (how many, and a page of them) and the pins that reach it."""

    fact_count: NonNegativeInt = Field(default=0, description="The facts it states (none before its ingest ends).")
    facts: list[StoredSourceFact] = Field(default_factory=list)
    pins: list[CampaignPin] = Field(
        default_factory=list,
        description="The caller's campaigns that draw on it: its own pin, else its library's. A campaign with "
        "no pins at all draws on the whole library and is not listed.",
    )


class LibraryItems(BaseModel):
    """The answer of ``list_items``: a page of a library's items, and the caller's campaigns that pin the library."""

    library_uid: str
    item_count: NonNegativeInt = Field(description="Items of the library (the superseded ones only when asked).")
    items: list[ItemListing] = Field(default_factory=list)
    pins: list[CampaignPin] = Field(default_factory=list, description="Pins of the whole library.")
