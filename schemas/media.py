"""Generated and uploaded media for the story: jobs that make them and the records they produce.

Images extracted from books are :class:`schemas.knowledge.ImageAsset`; this module holds media
made for play (scene illustrations, portraits, ambient audio, voiced lines, transcripts). A media
record is attached to a campaign, an entity, a scene or a range of turns (:class:`MediaTarget`),
carries a :class:`~schemas.visibility.Visibility` like the story's other records, and names its bytes
by a content-addressed blob. A :class:`MediaJob` asks a media engine for one record; its lifecycle is
``pending`` (queued) → ``processing`` (running) → ``completed`` (done, with its record) or ``failed``.
"""

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, StringConstraints, model_validator

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
from schemas.text import Name, Note
from schemas.visibility import PUBLIC, Visibility

__all__ = [
    "MediaAsset",
    "MediaAttachment",
    "MediaJob",
    "MediaKind",
    "MediaOrigin",
    "MediaTarget",
    "MediaTask",
]


class MediaKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    TEXT = "text"  # a transcript (speech to text)


class MediaTask(StrEnum):
    """What a media job asks an engine for."""

    IMAGE = "image"  # an image from a prompt
    AUDIO = "audio"  # a sound (ambience, music) from a prompt
    TTS = "tts"  # speech from text
    STT = "stt"  # text from speech (an audio record of the campaign)


#: The kind of record each task yields.
TASK_KIND = {
    MediaTask.IMAGE: MediaKind.IMAGE,
    MediaTask.AUDIO: MediaKind.AUDIO,
    MediaTask.TTS: MediaKind.AUDIO,
    MediaTask.STT: MediaKind.TEXT,
}


class MediaTarget(StrEnum):
    """What a media record illustrates."""

    CAMPAIGN = "campaign"  # the campaign as a whole (a title card, a theme)
    ENTITY = "entity"  # an entity of its story (a portrait, a voice)
    SCENE = "scene"  # a scene
    TURNS = "turns"  # a range of turns on one line: from start_turn_id down to end_turn_id


MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")]


class MediaAttachment(LorekeeperModel):
    """Where a media record (or the record a job will make) belongs, and who may see it."""

    target: MediaTarget = MediaTarget.CAMPAIGN
    entity_id: Id | None = Field(default=None, description="target 'entity': the entity it shows.")
    scene_id: Id | None = Field(default=None, description="target 'scene': the scene it illustrates.")
    start_turn_id: Id | None = Field(default=None, description="target 'turns': the first turn of the range.")
    end_turn_id: Id | None = Field(
        default=None, description="target 'turns': the last turn (a descendant of the first, or it); unset: the first."
    )
    visibility: Visibility = Field(default=PUBLIC, description="Who at the table may see it (the GM sees all).")

    @model_validator(mode="after")
    def _check_target(self) -> Self:
        needed = {
            MediaTarget.CAMPAIGN: (),
            MediaTarget.ENTITY: ("entity_id",),
            MediaTarget.SCENE: ("scene_id",),
            MediaTarget.TURNS: ("start_turn_id",),
        }[self.target]
        for name in ("entity_id", "scene_id", "start_turn_id", "end_turn_id"):
            given = getattr(self, name) is not None
            wanted = name in needed or (name == "end_turn_id" and self.target is MediaTarget.TURNS)
            if name in needed and not given:
                raise ValueError(f"a media record for target {self.target.value!r} needs {name}")
            if given and not wanted:
                raise ValueError(f"{name} belongs to another target than {self.target.value!r}")
        return self


class MediaOrigin(StrEnum):
    GENERATED = "generated"  # made by a model through a MediaJob
    UPLOADED = "uploaded"  # provided by a user


class MediaJob(MediaAttachment):
    """A request to a media engine for one media record of a campaign (its attachment: the record's)."""

    id: Id = Field(default_factory=lambda: new_id("mjob"))
    campaign_id: Id
    task: MediaTask = MediaTask.IMAGE
    prompt: Text = Field(description="What to make: an image's or a sound's description, the text to speak (tts).")
    source_media_id: Id | None = Field(default=None, description="stt: the audio record of the campaign to transcribe.")
    title: Name | None = None
    model: str | None = Field(default=None, description="Model name; null uses the engine's default.")
    engine: Name | None = Field(default=None, description="The engine that ran it (null while none has).")
    note: Note | None = Field(default=None, description="Why a job waits (no engine bound, or none for its task).")
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
        if (self.task is MediaTask.STT) != (self.source_media_id is not None):
            raise ValueError("an stt job names the audio to transcribe (source_media_id), and only an stt job does")
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


class MediaAsset(MediaAttachment):
    """A stored media file used in play: its bytes a blob, its place in the story an attachment."""

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
    title: Name | None = None
    metadata: dict[MetaKey, Note] = Field(
        default_factory=dict, max_length=50, description="Free key/value notes (a generator's settings, a transcript)."
    )
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
        if self.kind in (MediaKind.AUDIO, MediaKind.VIDEO) and self.duration_seconds is None:
            raise ValueError(f"a {self.kind.value} asset needs duration_seconds")
        if self.origin is MediaOrigin.GENERATED and self.job_id is None:
            raise ValueError("a generated asset needs job_id (the MediaJob that made it)")
        return self
