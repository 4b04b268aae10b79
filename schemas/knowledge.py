"""The knowledge side: libraries of books, their items, chunks, concepts, images and ingest jobs.

Knowledge records use ``uid`` (as the REST paths do: ``/library/items/{uid}``); an ingest job has
an ``id``. A library's type carries chunking defaults (:data:`CHUNKING_DEFAULTS`), which a
library may override field by field (:attr:`Library.chunking_override`).
"""

import re
import unicodedata
from enum import StrEnum
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, Self

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    model_validator,
)

from schemas.common import (
    BlobKey,
    Id,
    JobStatus,
    LorekeeperModel,
    MimeType,
    Name,
    Sha256Hex,
    UtcDatetime,
    check_job_timeline,
    new_id,
    utc_now,
)
from schemas.text import Text

__all__ = [
    "CHUNKING_DEFAULTS",
    "Chunk",
    "ChunkStatus",
    "ChunkingDefaults",
    "ChunkingOverride",
    "ChunkingStrategy",
    "Classification",
    "Collection",
    "Concept",
    "ConceptKind",
    "FileType",
    "ImageAsset",
    "IngestJob",
    "IngestProgress",
    "IngestSource",
    "IngestStage",
    "Item",
    "ItemStatus",
    "Library",
    "LibraryType",
    "chunking_defaults",
    "normalize_name",
]


class LibraryType(StrEnum):
    """What kind of material a library holds; picks its chunking defaults."""

    RULEBOOK = "rulebook"
    LORE = "lore"
    SETTING = "setting"
    ADVENTURE = "adventure"
    REFERENCE = "reference"
    BESTIARY = "bestiary"
    TRANSCRIPT = "transcript"  # actual-play transcripts
    NOTES = "notes"  # GM or player notes


class ChunkingStrategy(StrEnum):
    """How text is cut into chunks."""

    HEADING_AWARE = "heading_aware"  # split at headings, then by size inside a section
    PARAGRAPH = "paragraph"  # pack whole paragraphs up to the target size
    FIXED = "fixed"  # fixed token windows with overlap


class ChunkingDefaults(LorekeeperModel):
    """Chunking parameters for one library type (or a library's effective settings)."""

    model_config = ConfigDict(frozen=True)

    strategy: ChunkingStrategy
    target_tokens: PositiveInt = Field(description="Size a chunk aims for, in tokens.")
    max_tokens: PositiveInt = Field(description="Hard upper bound on a chunk's tokens.")
    overlap_tokens: NonNegativeInt = Field(
        description="Tokens repeated between consecutive chunks of the same section."
    )
    respect_top_level_sections: bool = Field(description="Never let a chunk span two top-level sections (chapters).")
    keep_tables_whole: bool = Field(description="Keep a table in one chunk even past the target (up to max_tokens).")
    keep_stat_blocks_whole: bool = Field(
        description="Keep a creature/NPC stat block in one chunk even past the target."
    )

    @model_validator(mode="after")
    def _check_sizes(self) -> Self:
        if self.target_tokens > self.max_tokens:
            raise ValueError(f"target_tokens ({self.target_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError(
                f"overlap_tokens ({self.overlap_tokens}) must be smaller than target_tokens ({self.target_tokens})"
            )
        return self


class ChunkingOverride(LorekeeperModel):
    """A library's changes to its type's chunking defaults; unset fields keep the default."""

    strategy: ChunkingStrategy | None = None
    target_tokens: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    overlap_tokens: NonNegativeInt | None = None
    respect_top_level_sections: bool | None = None
    keep_tables_whole: bool | None = None
    keep_stat_blocks_whole: bool | None = None

    def apply_to(self, defaults: ChunkingDefaults) -> ChunkingDefaults:
        """Return ``defaults`` with this override's set fields replaced, validated again."""
        return ChunkingDefaults.model_validate(defaults.model_dump() | self.model_dump(exclude_none=True))


def _defaults(
    strategy: ChunkingStrategy,
    target: int,
    maximum: int,
    overlap: int,
    *,
    sections: bool,
    tables: bool,
    stat_blocks: bool,
) -> ChunkingDefaults:
    return ChunkingDefaults(
        strategy=strategy,
        target_tokens=target,
        max_tokens=maximum,
        overlap_tokens=overlap,
        respect_top_level_sections=sections,
        keep_tables_whole=tables,
        keep_stat_blocks_whole=stat_blocks,
    )


_HEADINGS = ChunkingStrategy.HEADING_AWARE
_PARAGRAPH = ChunkingStrategy.PARAGRAPH

CHUNKING_DEFAULTS: MappingProxyType[LibraryType, ChunkingDefaults] = MappingProxyType(
    {
        # rules are looked up by section; tables and stat blocks are useless when cut
        LibraryType.RULEBOOK: _defaults(_HEADINGS, 512, 1024, 64, sections=True, tables=True, stat_blocks=True),
        # prose: larger chunks, more overlap so a passage keeps its context
        LibraryType.LORE: _defaults(_HEADINGS, 640, 1200, 96, sections=True, tables=True, stat_blocks=False),
        LibraryType.SETTING: _defaults(_HEADINGS, 640, 1200, 96, sections=True, tables=True, stat_blocks=True),
        LibraryType.ADVENTURE: _defaults(_HEADINGS, 512, 1024, 64, sections=True, tables=True, stat_blocks=True),
        # look-up material: small precise chunks
        LibraryType.REFERENCE: _defaults(_HEADINGS, 384, 768, 32, sections=True, tables=True, stat_blocks=True),
        # one creature per chunk; overlap would bleed one stat block into the next
        LibraryType.BESTIARY: _defaults(_HEADINGS, 384, 1024, 0, sections=True, tables=True, stat_blocks=True),
        # transcripts have no headings; overlap keeps who-said-what across a cut
        LibraryType.TRANSCRIPT: _defaults(_PARAGRAPH, 512, 1024, 128, sections=False, tables=False, stat_blocks=False),
        LibraryType.NOTES: _defaults(_PARAGRAPH, 384, 768, 64, sections=False, tables=True, stat_blocks=False),
    }
)
"""Chunking defaults per library type (read-only)."""

assert set(CHUNKING_DEFAULTS) == set(LibraryType), "every LibraryType needs chunking defaults"


def chunking_defaults(library_type: LibraryType | str) -> ChunkingDefaults:
    """Return the chunking defaults of a library type.

    Raises:
        ValueError: if ``library_type`` is not a known type (the message lists them).
    """
    try:
        return CHUNKING_DEFAULTS[LibraryType(library_type)]
    except ValueError:
        known = ", ".join(t.value for t in LibraryType)
        raise ValueError(f"unknown library type {library_type!r}; known types: {known}") from None


class Classification(StrEnum):
    """How far an item's content binds the story."""

    CANON = "canon"  # true in this world: may back source-authority facts
    REFERENCE = "reference"  # rules and look-ups: cited, not world truth
    INSPIRATION = "inspiration"  # ideas only: never cited as canon


class FileType(StrEnum):
    """Formats the ingest pipeline reads."""

    PDF = "pdf"
    MARKDOWN = "markdown"
    HTML = "html"
    TEXT = "text"
    IMAGE = "image"
    DOCX = "docx"
    EPUB = "epub"

    @classmethod
    def from_filename(cls, filename: str) -> "FileType":
        """Guess the file type from a file name's suffix.

        Raises:
            ValueError: if the suffix is not one the pipeline reads (the message lists them).
        """
        suffix = PurePath(filename).suffix.lower()
        try:
            return _FILE_SUFFIXES[suffix]
        except KeyError:
            known = ", ".join(sorted(_FILE_SUFFIXES))
            raise ValueError(
                f"cannot ingest {filename!r}: unsupported suffix {suffix or '(none)'!r}; supported: {known}"
            ) from None


_FILE_SUFFIXES: dict[str, FileType] = {
    ".pdf": FileType.PDF,
    ".md": FileType.MARKDOWN,
    ".markdown": FileType.MARKDOWN,
    ".html": FileType.HTML,
    ".htm": FileType.HTML,
    ".txt": FileType.TEXT,
    ".text": FileType.TEXT,
    ".png": FileType.IMAGE,
    ".jpg": FileType.IMAGE,
    ".jpeg": FileType.IMAGE,
    ".webp": FileType.IMAGE,
    ".tif": FileType.IMAGE,
    ".tiff": FileType.IMAGE,
    ".docx": FileType.DOCX,
    ".epub": FileType.EPUB,
}


class Library(LorekeeperModel):
    """A named shelf of material of one type (e.g. 'Core rules', 'Setting: Eberron')."""

    uid: Id = Field(default_factory=lambda: new_id("lib"))
    name: Name
    type: LibraryType = Field(description="Kind of material; picks the chunking defaults.")
    description: Text | None = None
    chunking_override: ChunkingOverride | None = Field(
        default=None, description="Changes to the type's chunking defaults; unset keeps them."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_chunking(self) -> Self:
        # fail when the library is defined, not when the first book is chunked
        try:
            self.effective_chunking()
        except ValidationError as exc:
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise ValueError(f"chunking_override does not fit the {self.type.value!r} defaults: {problems}") from None
        return self

    def effective_chunking(self) -> ChunkingDefaults:
        """The chunking this library uses: its type's defaults with its override applied."""
        defaults = chunking_defaults(self.type)
        if self.chunking_override is None:
            return defaults
        return self.chunking_override.apply_to(defaults)


class Collection(LorekeeperModel):
    """A group of items inside a library (a product line, a box set, a campaign's handouts)."""

    uid: Id = Field(default_factory=lambda: new_id("coll"))
    library_uid: Id
    name: Name
    description: Text | None = None
    created_at: UtcDatetime = Field(default_factory=utc_now)


class ItemStatus(StrEnum):
    """Lifecycle of an ingested item."""

    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"
    SUPERSEDED = "superseded"  # a newer version of the same work replaced it


class Item(LorekeeperModel):
    """One ingested file (a book, a handout, a transcript) and its provenance."""

    uid: Id = Field(description="Item id; content-derived (content_id('item', bytes)) so re-ingest is idempotent.")
    library_uid: Id
    collection_uid: Id | None = None
    title: Name
    file_type: FileType
    size_bytes: NonNegativeInt = Field(description="Size of the raw file in bytes.")
    content_hash: Sha256Hex = Field(description="sha256 of the raw file bytes.")
    classification: Classification = Classification.CANON
    enabled: bool = Field(default=True, description="Disabled items are excluded from search.")
    source_ref: str = Field(
        min_length=1,
        description="The caller's id for the file, else where it came from: a path, URL, upload name or S3 key.",
    )
    source: str | None = Field(default=None, description="The calling system that sent the file, when it said.")
    raw_key: BlobKey | None = Field(default=None, description="Object-store key of the raw file, once stored.")
    page_count: PositiveInt | None = None
    warnings: list[str] = Field(
        default_factory=list, description="What the reader could not keep as the file had it, and why."
    )
    status: ItemStatus = ItemStatus.PENDING
    version: PositiveInt = Field(default=1, description="Version of the work, 1 for the first.")
    supersedes_uid: Id | None = Field(default=None, description="Item this version replaces (its previous version).")
    superseded_by_uid: Id | None = Field(
        default=None, description="Item that replaced this one; set with status 'superseded'."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _check_versions(self) -> Self:
        if self.uid in (self.supersedes_uid, self.superseded_by_uid):
            raise ValueError("an item cannot supersede itself")
        if self.supersedes_uid is not None and self.version < 2:
            raise ValueError(f"an item that supersedes another must have version >= 2 (got version={self.version})")
        is_superseded = self.status is ItemStatus.SUPERSEDED
        if is_superseded and self.superseded_by_uid is None:
            raise ValueError("status 'superseded' needs superseded_by_uid (the newer item)")
        if not is_superseded and self.superseded_by_uid is not None:
            raise ValueError(f"superseded_by_uid is set but status is {self.status.value!r}; set status='superseded'")
        if self.updated_at is not None and self.updated_at < self.created_at:
            raise ValueError("updated_at is before created_at")
        return self


class ChunkStatus(StrEnum):
    """Whether a chunk is current or replaced by a re-chunk / newer item version."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"


class Chunk(LorekeeperModel):
    """A retrievable span of an item; its text lives in the object store."""

    uid: Id
    item_uid: Id
    sequence: NonNegativeInt = Field(description="Position of the chunk in its item, from 0.")
    text_key: BlobKey = Field(description="Object-store key of the chunk's text.")
    heading_path: list[Name] = Field(
        default_factory=list,
        description="Headings from the top level down to the chunk, e.g. ['Combat', 'Cover'].",
    )
    page_start: PositiveInt | None = Field(
        default=None, description="First page (1-based) the chunk comes from; paged formats only."
    )
    page_end: PositiveInt | None = Field(default=None, description="Last page (1-based, inclusive).")
    token_count: PositiveInt
    content_hash: Sha256Hex | None = Field(default=None, description="sha256 of the chunk text.")
    status: ChunkStatus = ChunkStatus.ACTIVE

    @model_validator(mode="after")
    def _check_pages(self) -> Self:
        if (self.page_start is None) != (self.page_end is None):
            raise ValueError("give both page_start and page_end, or neither")
        if self.page_start is not None and self.page_end is not None and self.page_start > self.page_end:
            raise ValueError(f"page_start ({self.page_start}) is after page_end ({self.page_end})")
        return self


_WHITESPACE_RE = re.compile(r"\s+")


def normalize_name(name: str) -> str:
    """Normalize a name for matching: NFKC, case-folded, whitespace collapsed, edges trimmed.

    ``"  The  Dragon's Hoard. "`` -> ``"the dragon's hoard"``.
    """
    text = unicodedata.normalize("NFKC", name).casefold()
    text = _WHITESPACE_RE.sub(" ", text)
    return text.strip(" \t\n.,;:!?\"'()[]{}")


class ConceptKind(StrEnum):
    """What a concept extracted from the knowledge names."""

    TERM = "term"
    MECHANIC = "mechanic"
    CHARACTER = "character"
    LOCATION = "location"
    ORGANIZATION = "organization"
    CREATURE = "creature"
    ITEM = "item"
    EVENT = "event"
    OTHER = "other"


class Concept(LorekeeperModel):
    """A named concept found in the knowledge (a spell, a faction, a rule term)."""

    uid: Id = Field(description="Concept id; content-derived from kind + normalized name so it is shared.")
    name: Name
    normalized_name: str = Field(default="", description="normalize_name(name) when omitted; used for matching.")
    kind: ConceptKind = ConceptKind.TERM
    aliases: list[Name] = Field(default_factory=list)
    description: str | None = None
    library_uid: Id | None = Field(default=None, description="Library the concept was found in; null when shared.")

    @model_validator(mode="after")
    def _fill_normalized(self) -> Self:
        if not self.normalized_name:
            # object.__setattr__: a plain assignment would re-run this validator
            object.__setattr__(self, "normalized_name", normalize_name(self.name))
        elif normalize_name(self.normalized_name) != self.normalized_name:
            raise ValueError(
                f"normalized_name {self.normalized_name!r} is not normalized; "
                f"expected {normalize_name(self.normalized_name)!r} (or omit it)"
            )
        if not self.normalized_name:
            raise ValueError(f"name {self.name!r} has nothing left after normalization")
        return self


class ImageAsset(LorekeeperModel):
    """An image extracted from an item (a map, an illustration, a handout)."""

    uid: Id
    item_uid: Id
    page: PositiveInt | None = Field(default=None, description="1-based page, when paged.")
    blob_key: BlobKey
    width: PositiveInt = Field(description="Width in pixels.")
    height: PositiveInt = Field(description="Height in pixels.")
    mime: MimeType = Field(description="Image MIME type, e.g. 'image/png'.")
    content_hash: Sha256Hex | None = None
    caption: str | None = None

    @model_validator(mode="after")
    def _check_mime(self) -> Self:
        if not self.mime.startswith("image/"):
            raise ValueError(f"an image asset needs an image/* MIME type, got {self.mime!r}")
        return self


class IngestStage(StrEnum):
    """Pipeline stage an ingest job is in."""

    FETCHING = "fetching"
    EXTRACTING = "extracting"
    CHUNKING = "chunking"
    EMBEDDING = "embedding"
    CONCEPTS = "concepts"
    WRITING = "writing"


class IngestSource(StrEnum):
    """How the file reaches the pipeline (a job's ``origin``)."""

    PATH = "path"  # a path readable by the workers
    S3 = "s3"  # an existing object in the product's bucket
    UPLOAD = "upload"  # uploaded through the API, stored under s3_key
    URL = "url"  # fetched from an http(s) URL
    SOURCE_BUCKET = "source_bucket"  # an object in the source bucket, copied into the product's layout


_ORIGINS = frozenset(o.value for o in IngestSource)


class IngestProgress(LorekeeperModel):
    """How far an ingest job is."""

    fraction: float = Field(default=0.0, ge=0.0, le=1.0, description="Overall progress, 0..1.")
    stage: IngestStage | None = Field(default=None, description="Current stage; null before start.")
    message: str | None = Field(default=None, description="Human-readable detail, e.g. 'page 40/312'.")


class IngestJob(LorekeeperModel):
    """One file's trip through the ingest pipeline."""

    id: Id = Field(default_factory=lambda: new_id("ingest"))
    item_uid: Id | None = Field(default=None, description="The item being ingested; known once the file is fetched.")
    library_uid: Id | None = None
    collection_uid: Id | None = None
    status: JobStatus = JobStatus.PENDING
    progress: IngestProgress = Field(default_factory=IngestProgress)
    error: str | None = Field(default=None, description="Why the job failed (status 'failed').")
    retry_count: NonNegativeInt = 0
    chunks_created: NonNegativeInt = 0
    concepts_extracted: NonNegativeInt = 0
    facts_extracted: NonNegativeInt = Field(default=0, description="Rulebook source facts read from the item.")
    facts_by_kind: dict[str, NonNegativeInt] = Field(
        default_factory=dict, description="Those facts per entry kind (spell, creature, condition …)."
    )
    embedding_model: str | None = Field(
        default=None, description="Embedding model used, so vectors can be rebuilt consistently."
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What the reader could not keep as the file had it, and why (an HTML page nested past its "
        "parser's depth read flat, pages left unread without OCR, a file read in another encoding).",
    )
    origin: IngestSource = Field(description="How the file reaches the pipeline: path, s3, upload, source_bucket.")
    source: str | None = Field(default=None, max_length=2000, description="The calling system (the contract's).")
    source_ref: str = Field(
        min_length=1, description="The caller's id for the file, else its path, URL, S3 URL or upload name."
    )
    s3_key: str | None = Field(
        default=None,
        min_length=1,
        description="Object key of the raw file: in the source bucket (source_bucket), "
        "else in the product's bucket (s3, upload).",
    )
    source_bucket: str | None = Field(default=None, description="The bucket s3_key is in, for origin source_bucket.")
    raw_key: BlobKey | None = Field(
        default=None, description="Where the copy sits in the product's bucket (items/{item}/original/…), once made."
    )
    title: str | None = Field(default=None, max_length=200, description="The title the caller gave.")
    file_type: str | None = Field(default=None, max_length=200, description="The type the caller declared (MIME).")
    file_size: NonNegativeInt | None = Field(default=None, description="The size the caller declared, in bytes.")
    classification: Classification = Field(
        default=Classification.CANON, description="How far the item binds the story (canon, reference, inspiration)."
    )
    created_at: UtcDatetime = Field(default_factory=utc_now)
    started_at: UtcDatetime | None = None
    completed_at: UtcDatetime | None = Field(default=None, description="When the job ended, successfully or not.")

    @model_validator(mode="before")
    @classmethod
    def _origin_of_older_records(cls, data: Any) -> Any:
        # Jobs written before `origin` was split from `source` named their origin `source`.
        if isinstance(data, dict) and "origin" not in data and str(data.get("source")) in _ORIGINS:
            data = {**data, "origin": str(data["source"]), "source": None}
        return data

    @model_validator(mode="after")
    def _check_state(self) -> Self:
        check_job_timeline(self.created_at, self.started_at, self.completed_at)
        keyed = (IngestSource.S3, IngestSource.UPLOAD, IngestSource.SOURCE_BUCKET)
        if self.origin in keyed and self.s3_key is None:
            raise ValueError(f"origin {self.origin.value!r} needs s3_key (where the file is)")
        match self.status:
            case JobStatus.COMPLETED:
                if self.completed_at is None:
                    raise ValueError("a completed job needs completed_at")
                if self.item_uid is None:
                    raise ValueError("a completed job needs item_uid (the item it produced)")
                if self.progress.fraction != 1.0:
                    raise ValueError(f"a completed job has progress 1.0, got {self.progress.fraction}")
                if self.error is not None:
                    raise ValueError("a completed job has no error; use status 'failed'")
            case JobStatus.FAILED:
                if not self.error:
                    raise ValueError("a failed job needs an error message")
            case JobStatus.PROCESSING:
                if self.started_at is None:
                    raise ValueError("a processing job needs started_at")
                if self.completed_at is not None:
                    raise ValueError("a processing job has no completed_at yet")
            case JobStatus.PENDING:
                if self.completed_at is not None:
                    raise ValueError("a pending job has no completed_at; reset it on retry")
        return self
