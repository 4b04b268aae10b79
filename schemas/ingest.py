"""The ingest API's bodies: the JSON request of ``POST /library/ingest`` and the job document it answers.

The request follows the library-service contract (``s3_key``, ``title``, ``library_uid``,
``collection_uid``, ``file_type``, ``file_size``, ``source``, ``source_ref``); the job document
(:class:`IngestJobView`) is the stored :class:`schemas.knowledge.IngestJob` as a client reads it:
``job_id`` for the id, ``progress`` as the stage's name and the detailed progress beside it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, NonNegativeInt

from schemas.common import JobStatus, LorekeeperModel, UtcDatetime
from schemas.knowledge import Classification, FileType, IngestJob, IngestProgress, IngestSource
from schemas.text import Name, Note, RecordId, TextRule

__all__ = ["MIME_TYPES", "IngestJobView", "IngestRequest", "declared_file_type", "name_for", "progress_stage"]

Path_ = Annotated[str, TextRule(4096)]
"""A path as a client sends it: at most 4,096 characters, no NUL."""

ObjectKey = Annotated[str, TextRule(1024)]
"""An object key as a client sends it (S3 allows 1,024 bytes; the store checks the rest)."""

MIME_TYPES: dict[str, FileType] = {
    "application/pdf": FileType.PDF,
    "text/markdown": FileType.MARKDOWN,
    "text/x-markdown": FileType.MARKDOWN,
    "text/html": FileType.HTML,
    "application/xhtml+xml": FileType.HTML,
    "text/plain": FileType.TEXT,
    "image/png": FileType.IMAGE,
    "image/jpeg": FileType.IMAGE,
    "image/webp": FileType.IMAGE,
    "image/tiff": FileType.IMAGE,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": FileType.DOCX,
    "application/epub+zip": FileType.EPUB,
}
"""The MIME types a caller may declare, and the format each is read as."""

_SUFFIXES: dict[FileType, str] = {
    FileType.PDF: ".pdf",
    FileType.MARKDOWN: ".md",
    FileType.HTML: ".html",
    FileType.TEXT: ".txt",
    FileType.DOCX: ".docx",
    FileType.EPUB: ".epub",
}


def declared_file_type(value: str | None) -> FileType | None:
    """The format a declared ``file_type`` names (a MIME type such as ``application/pdf``, or one of
    ours such as ``pdf``), or None when it names none the pipeline reads (``application/octet-stream``):
    then the file's name decides."""
    if not value:
        return None
    kind = value.split(";", 1)[0].strip().lower()
    if kind in MIME_TYPES:
        return MIME_TYPES[kind]
    try:
        return FileType(kind)
    except ValueError:
        return None


def name_for(key: str, declared: FileType | None) -> str:
    """The file name a job reads an object as: the key's last segment, with the declared type's suffix
    added when the name has no suffix the pipeline reads (``uploads/7f3a`` declared PDF → ``7f3a.pdf``).

    Raises:
        ValueError: the name's suffix names another format than the declared one.
    """
    name = key.rsplit("/", 1)[-1] or "file"
    try:
        by_name = FileType.from_filename(name)
    except ValueError:
        suffix = _SUFFIXES.get(declared) if declared is not None else None
        return name + suffix if suffix else name
    if declared is not None and declared is not by_name:
        raise ValueError(f"file_type says {declared.value} but {name!r} is named as {by_name.value}")
    return name


class IngestRequest(LorekeeperModel):
    """``POST /api/v1/library/ingest``: one object of the source bucket, a path, or (a multipart form's)
    uploaded file to ingest; the route checks that exactly one is given."""

    s3_key: ObjectKey | None = Field(
        default=None,
        description="Object key in the source bucket (LOREKEEPER_SOURCE_BLOB_URL); in the product's bucket when "
        "no source bucket is set.",
    )
    path: Path_ | None = Field(default=None, description="Instead of s3_key: a file under an allowed ingest root.")
    title: Name | None = Field(default=None, description="The item's title; else the document's, else the name.")
    library_uid: RecordId
    collection_uid: RecordId | None = None
    file_type: Annotated[str, TextRule(200)] | None = Field(
        default=None, description="A MIME type (application/pdf) or one of ours (pdf); the key's suffix must agree."
    )
    file_size: NonNegativeInt | None = Field(default=None, description="Bytes; a job whose object differs fails.")
    source: Note | None = Field(default=None, description="The calling system.")
    source_ref: Note | None = Field(
        default=None, description="The caller's id for the file; a new version under the same ref supersedes."
    )
    classification: Classification = Classification.CANON


def progress_stage(job: IngestJob) -> str:
    """The job's stage as one name: queued, fetching, extracting, chunking, embedding, writing, concepts,
    completed or failed."""
    if job.status is JobStatus.PENDING:
        return "queued"
    if job.status in (JobStatus.COMPLETED, JobStatus.FAILED):
        return job.status.value
    return job.progress.stage.value if job.progress.stage is not None else "fetching"


class IngestJobView(LorekeeperModel):
    """The job document the ingest routes answer (the contract's shape, plus what Lorekeeper adds)."""

    job_id: str
    item_uid: str | None
    library_uid: str | None
    collection_uid: str | None
    status: JobStatus
    progress: str = Field(description="The stage: queued, fetching, extracting, …, embedding, completed, failed.")
    progress_detail: IngestProgress = Field(description="Fraction done, stage and a message.")
    chunks_created: int
    concepts_extracted: int
    facts_extracted: int
    facts_by_kind: dict[str, int]
    embedding_model: str | None
    error: str | None
    warnings: list[str]
    retry_count: int
    title: str | None
    file_type: str | None
    file_size: int | None
    source: str | None
    source_ref: str
    s3_key: str | None
    source_bucket: str | None
    raw_key: str | None
    origin: IngestSource
    classification: Classification
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    completed_at: UtcDatetime | None

    @classmethod
    def of(cls, job: IngestJob) -> IngestJobView:
        data: dict[str, Any] = job.model_dump()
        data["job_id"] = data.pop("id")
        data["progress_detail"] = data.pop("progress")
        data["progress"] = progress_stage(job)
        return cls.model_validate(data)
