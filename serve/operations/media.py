"""Media records and media jobs: the GM uploads media and asks a media engine for it; the table reads what it may.

A media record belongs to the campaign, an entity, a scene or a range of turns (:mod:`story.media`); its bytes
travel as base64 over both doors. A player's answers are cut by the secrets rule (``serve.operations.secrets``):
a record the player may not see is left out of a listing and answers like a missing one when asked for by id,
bytes included. Media jobs are the GM's: a job runs at once when the bound engine does its task, else it waits
queued (``pending``), saying why, until ``run_media_jobs`` runs it on an engine that does.
"""

from __future__ import annotations

import base64

from schemas.media import MediaAsset, MediaAttachment, MediaJob
from schemas.media_requests import MediaContent, MediaJobRequest, MediaJobsQuery, MediaQuery, MediaUpload
from serve.operations.base import Access, Call, Empty, On, Rest, Role, operation
from serve.operations.secrets import redact

_F = "media"
_IDS = ("campaign_id",)
_ONE = ("campaign_id", "media_id")
_JOB = ("campaign_id", "job_id")
_READ = Access(Role.PLAYER, On.CAMPAIGN)
_GM = Access(Role.GM, On.CAMPAIGN)
_ATTACHMENT = set(MediaAttachment.model_fields)


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/media", 201),
    ids=_IDS,
    body=MediaUpload,
    output=MediaAsset,
)
async def upload_media(call: Call[MediaUpload]) -> MediaAsset:
    """Upload a media file (base64) attached to the campaign, an entity, a scene or a range of turns, with who may
    see it (the GM's); its bytes are stored content-addressed."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.media.upload,
        call.id("campaign_id"),
        b.data_base64,
        mime=b.mime,
        attachment=MediaAttachment.model_validate(b.model_dump(include=_ATTACHMENT)),
        title=b.title,
        alt_text=b.alt_text,
        width=b.width,
        height=b.height,
        duration_seconds=b.duration_seconds,
        metadata=b.metadata,
    )


@operation(
    family=_F,
    access=Access(Role.PLAYER, On.CAMPAIGN, turns=("turn_id",)),
    rest=Rest("GET", "/campaigns/{campaign_id}/media"),
    ids=_IDS,
    body=MediaQuery,
    output=list[MediaAsset],
)
async def list_media(call: Call[MediaQuery]) -> list[MediaAsset]:
    """The campaign's media records, oldest first, optionally of one target, entity or scene, or reaching a turn;
    a player sees those they may."""
    b = call.body
    return await call.run(  # type: ignore[no-any-return]
        call.ctx.story.media.records,
        call.id("campaign_id"),
        target=b.target,
        entity_id=b.entity_id,
        scene_id=b.scene_id,
        turn_id=b.turn_id,
    )


@operation(
    family=_F,
    access=_READ,
    rest=Rest("GET", "/campaigns/{campaign_id}/media/{media_id}"),
    ids=_ONE,
    output=MediaAsset,
)
async def get_media(call: Call[Empty]) -> MediaAsset:
    """A media record: its kind, MIME type, size, hash, attachment and visibility."""
    return await call.run(call.ctx.story.media.get, call.id("campaign_id"), call.id("media_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_READ,
    rest=Rest("GET", "/campaigns/{campaign_id}/media/{media_id}/content"),
    ids=_ONE,
    output=MediaContent,
)
async def get_media_content(call: Call[Empty]) -> MediaContent:
    """A media record's bytes (base64), with its MIME type and hash."""
    asset, data = await call.run(call.ctx.story.media.content, call.id("campaign_id"), call.id("media_id"))
    await redact(call, asset)  # a record the caller may not see answers like a missing one, bytes included
    return MediaContent(
        media_id=asset.id,
        mime=asset.mime,
        size_bytes=asset.size_bytes,
        content_hash=asset.content_hash,
        data_base64=base64.b64encode(data).decode(),
    )


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/media-jobs", 201),
    ids=_IDS,
    body=MediaJobRequest,
    output=MediaJob,
)
async def submit_media_job(call: Call[MediaJobRequest]) -> MediaJob:
    """Ask for an image, a sound, speech (tts) or a transcript (stt) (the GM's): it runs at once on a bound engine
    that does the task, else it waits queued and says why; done, it names the media record it made."""
    job = MediaJob.model_validate({**call.body.model_dump(), "campaign_id": call.id("campaign_id")})
    return await call.run(call.ctx.story.media.submit, job)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("GET", "/campaigns/{campaign_id}/media-jobs"),
    ids=_IDS,
    body=MediaJobsQuery,
    output=list[MediaJob],
)
async def list_media_jobs(call: Call[MediaJobsQuery]) -> list[MediaJob]:
    """The campaign's media jobs, oldest first, optionally of one status (the GM's)."""
    return await call.run(call.ctx.story.media.jobs, call.id("campaign_id"), status=call.body.status)  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("GET", "/campaigns/{campaign_id}/media-jobs/{job_id}"),
    ids=_JOB,
    output=MediaJob,
)
async def get_media_job(call: Call[Empty]) -> MediaJob:
    """A media job: its status (pending, processing, completed, failed), why it waits or failed, its record."""
    return await call.run(call.ctx.story.media.job, call.id("campaign_id"), call.id("job_id"))  # type: ignore[no-any-return]


@operation(
    family=_F,
    access=_GM,
    rest=Rest("POST", "/campaigns/{campaign_id}/media-jobs/run"),
    ids=_IDS,
    output=list[MediaJob],
)
async def run_media_jobs(call: Call[Empty]) -> list[MediaJob]:
    """Run the campaign's queued media jobs on the bound engine (the GM's); answers each as it ended or still
    waits."""
    return await call.run(call.ctx.story.media.run_pending, call.id("campaign_id"))  # type: ignore[no-any-return]
