"""What the API takes and answers for turn presentations, media records and media jobs (both doors).

Media bytes travel as base64 in JSON (``data_base64``), so an upload and a download are the same over REST and
MCP; an upload is bounded by the story's media limit (413 past it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveInt,
    WithJsonSchema,
    model_validator,
)

from schemas.common import Id, JobStatus, MimeType, Sha256Hex
from schemas.media import MediaAttachment, MediaTarget, MediaTask, MetaKey
from schemas.presentation import PresentationBlock
from schemas.text import Name, Note, Text

__all__ = [
    "MediaContent",
    "MediaJobRequest",
    "MediaJobsQuery",
    "MediaQuery",
    "MediaUpload",
    "PresentationBlocks",
    "PresentationQuery",
    "RegenerateRequest",
]


def _base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("send the bytes as a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None


Base64Data = Annotated[
    bytes,
    BeforeValidator(_base64),
    WithJsonSchema({"type": "string", "contentEncoding": "base64", "description": "Bytes, base64-encoded."}),
]
"""Bytes sent as strict base64 (a character outside the alphabet, or bad padding, is refused, not skipped)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PresentationQuery(_Body):
    """``GET …/turns/{turn_id}/presentation``: the latest version, or one."""

    version: PositiveInt | None = Field(default=None, description="A stored version (1 is the first); unset: latest.")


class PresentationBlocks(_Body):
    """``PUT …/turns/{turn_id}/presentation``: blocks the GM lays out, stored as the next version."""

    blocks: list[PresentationBlock] = Field(min_length=1, max_length=500)
    take_id: Id | None = Field(default=None, description="The take the blocks show (a take of the turn).")


class RegenerateRequest(_Body):
    """``POST …/turns/{turn_id}/presentation/regenerate``: render the selected take again."""

    renderer: Name | None = Field(default=None, description="A renderer by name; unset: the deployment's ('split').")


class MediaUpload(MediaAttachment):
    """``POST /campaigns/{id}/media``: bytes (base64) and where they belong. An image's size and a WAV's length
    are read from the bytes when the format is one the story reads (PNG, GIF, JPEG, SVG, WAV)."""

    data_base64: Base64Data = Field(description="The file's bytes, base64-encoded.")
    mime: MimeType = Field(description="image/*, audio/*, video/* or text/*: the record's kind is its major type.")
    title: Name | None = None
    alt_text: Text | None = Field(default=None, description="What it shows, for screen readers.")
    width: PositiveInt | None = Field(default=None, description="Pixels, where the bytes do not say.")
    height: PositiveInt | None = None
    duration_seconds: NonNegativeFloat | None = Field(default=None, description="Audio and video, where unread.")
    metadata: dict[MetaKey, Note] = Field(default_factory=dict, max_length=50)


class MediaQuery(_Body):
    """``GET /campaigns/{id}/media``: the campaign's media, optionally narrowed."""

    target: MediaTarget | None = None
    entity_id: Id | None = None
    scene_id: Id | None = None
    turn_id: Id | None = Field(default=None, description="Only turn ranges that reach this turn on its line.")


class MediaContent(_Body):
    """A media record's bytes (base64) with what a client needs to show them."""

    media_id: Id
    mime: MimeType
    size_bytes: int
    content_hash: Sha256Hex
    data_base64: str


class MediaJobRequest(MediaAttachment):
    """``POST /campaigns/{id}/media-jobs``: what to make and where the record it makes belongs."""

    task: MediaTask
    prompt: Text = Field(description="An image's or a sound's description, or the text to speak (tts).")
    source_media_id: Id | None = Field(default=None, description="stt: the campaign's audio record to transcribe.")
    title: Name | None = None
    model: Name | None = None

    @model_validator(mode="after")
    def _source_for_stt(self) -> Self:
        if (self.task is MediaTask.STT) != (self.source_media_id is not None):
            raise ValueError("an stt job names the audio to transcribe (source_media_id), and only an stt job does")
        return self


class MediaJobsQuery(_Body):
    status: JobStatus | None = Field(default=None, description="Only jobs in this status (pending: queued).")
