"""Generated and uploaded media for the story: jobs that make them and the assets they produce.

Images extracted from books are :class:`schemas.knowledge.ImageAsset`; this module holds media
made for play (scene illustrations, portraits, ambient audio).
"""

from enum import StrEnum
from typing import Self

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from schemas.common import (
    BlobKey,
    Id,
    JobStatus,
    LorekeeperModel,
    MimeType,
    Sha256Hex,
    Text,
    UtcDatetime,
    check_job_timeline,
    new_id,
    utc_now,
)

__all__ = ["MediaAsset", "MediaJob", "MediaKind", "MediaOrigin"]


class MediaKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"


class MediaOrigin(StrEnum):
    GENERATED = "generated"  # made by a model through a MediaJob
    UPLOADED = "uploaded"  # provided by a user


class MediaJob(LorekeeperModel):
    """A request to generate one media asset for a campaign."""

    id: Id = Field(default_factory=lambda: new_id("mjob"))
    campaign_id: Id
    turn_id: Id | None = Field(default=None, description="Turn the media illustrates, if any.")
    scene_id: Id | None = None
    kind: MediaKind = MediaKind.IMAGE
    prompt: Text = Field(description="What to generate, as sent to the model.")
    model: str | None = Field(default=None, description="Model name; null uses the default.")
    status: JobStatus = JobStatus.PENDING
    error: str | None = Field(default=None, description="Why the job failed (status 'failed').")
    retry_count: NonNegativeInt = 0
    asset_id: Id | None = Field(default=None, description="The MediaAsset made, once completed.")
    created_at: UtcDatetime = Field(default_factory=utc_now)
    started_at: UtcDatetime | None = None
    completed_at: UtcDatetime | None = Field(default=None, description="When the job ended, successfully or not.")

    @model_validator(mode="after")
    def _check_state(self) -> Self:
        check_job_timeline(self.created_at, self.started_at, self.completed_at)
        match self.status:
            case JobStatus.COMPLETED:
                if self.completed_at is None or self.asset_id is None:
                    raise ValueError("a completed media job needs completed_at and asset_id")
            case JobStatus.FAILED:
                if not self.error:
                    raise ValueError("a failed media job needs an error message")
            case JobStatus.PROCESSING:
                if self.started_at is None or self.completed_at is not None:
                    raise ValueError("a processing media job has started_at and no completed_at")
            case JobStatus.PENDING:
                if self.completed_at is not None or self.asset_id is not None:
                    raise ValueError("a pending media job has no completed_at and no asset_id")
        return self


class MediaAsset(LorekeeperModel):
    """A stored media file used in play."""

    id: Id = Field(default_factory=lambda: new_id("media"))
    kind: MediaKind
    origin: MediaOrigin = MediaOrigin.GENERATED
    blob_key: BlobKey
    mime: MimeType = Field(description="MIME type; its major type must match `kind`.")
    size_bytes: NonNegativeInt
    content_hash: Sha256Hex
    width: PositiveInt | None = Field(default=None, description="Pixels; images and video.")
    height: PositiveInt | None = Field(default=None, description="Pixels; images and video.")
    duration_seconds: NonNegativeFloat | None = Field(default=None, description="Audio and video.")
    job_id: Id | None = Field(default=None, description="The MediaJob that generated it.")
    campaign_id: Id | None = None
    turn_id: Id | None = None
    alt_text: str | None = Field(default=None, description="Description for screen readers.")
    created_at: UtcDatetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _check_kind(self) -> Self:
        major = self.mime.split("/", 1)[0]
        if major != self.kind.value:
            raise ValueError(f"a {self.kind.value} asset needs a {self.kind.value}/* MIME type, got {self.mime!r}")
        if self.kind is MediaKind.IMAGE and (self.width is None or self.height is None):
            raise ValueError("an image asset needs width and height")
        if self.kind is MediaKind.AUDIO and (self.width is not None or self.height is not None):
            raise ValueError("an audio asset has no width or height")
        if self.kind is not MediaKind.IMAGE and self.duration_seconds is None:
            raise ValueError(f"a {self.kind.value} asset needs duration_seconds")
        if self.origin is MediaOrigin.GENERATED and self.job_id is None:
            raise ValueError("a generated asset needs job_id (the MediaJob that made it)")
        return self
