"""Media of a campaign: records attached to the campaign, an entity, a scene or a range of turns, their bytes
in the blob store (content-addressed, ``media/<sha256>``), and the jobs that ask a media engine for them.

Media illustrates; it never becomes canon: nothing here writes the story's tree, its state or its hash.
Every record keeps its :class:`~schemas.visibility.Visibility`; what a player is shown of them is the
secrets rule's (``serve.operations.secrets``), applied where answers leave.

A :class:`~schemas.media.MediaJob` is ``pending`` (queued) until an engine that does its task runs it, then
``processing``, then ``completed`` with the record it made, or ``failed`` with why. With the ``none`` engine
bound (the default) jobs stay queued, each saying so in its ``note``; :meth:`Media.run_pending` runs them
once an engine is bound. A job is claimed by one compare-and-set (``pending`` → ``processing``), so two
runners never both run it; its record and its completion are written by one statement that only the runner
holding the job can run. A job left ``processing`` by a runner that died is claimed again once its lease
(:attr:`Media.lease_s`) is out, so a kill at any moment ends with the job done once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import structlog

from schemas.common import JobStatus, utc_now
from schemas.media import TASK_KIND, MediaAsset, MediaAttachment, MediaJob, MediaKind, MediaOrigin, MediaTarget
from stores.catalog import from_props
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryInvalid, StoryNotFound
from story.graph import node_props
from story.media_bytes import describe
from story.media_engines import MediaEngine, MediaEngineFailed, NoMediaEngine, Rendered

__all__ = ["MAX_MEDIA_BYTES", "MEDIA", "Media", "MediaTooLarge"]

log = structlog.get_logger(__name__)

MEDIA = "media"
"""The blob prefix of media bytes (content-addressed: ``media/<sha256>``)."""

DEFAULT_LEASE_S = 900.0
"""How long a job may stay processing before another runner takes it for abandoned."""

MAX_MEDIA_BYTES = 8 << 20
"""The largest media file the story takes (an upload's decoded bytes, or what an engine made)."""


class MediaTooLarge(StoryInvalid):
    """A media file over the limit (413)."""

    status_code = 413
    code = "request_too_large"


# -- queries --------------------------------------------------------------------------------------


def _create(label: str, props: dict[str, Any]) -> Statement:
    return f"CREATE (n:{label}) SET n = $props", {"props": props}


def _of_campaign(label: str, campaign_id: str) -> Statement:
    return f"MATCH (n:{label}) WHERE n.campaign_id = $c RETURN n ORDER BY n.created_at, n.uid", {"c": campaign_id}


def _link_scene(scene_id: str, asset_id: str) -> Statement:
    return "MATCH (s:Scene {uid: $s}), (m:MediaAsset {uid: $m}) MERGE (s)-[:HAS_MEDIA]->(m)", {
        "s": scene_id,
        "m": asset_id,
    }


def _claim(job_id: str, engine: str, at: str, stale_before: str) -> Statement:
    """Move a job to processing if it is queued, or processing since before ``stale_before`` (its runner died):
    one compare-and-set, so one runner wins."""
    return (
        "MATCH (j:MediaJob {uid: $u}) WHERE j.status = 'pending' OR (j.status = 'processing' AND j.started_at < $s) "
        "SET j.retry_count = coalesce(j.retry_count, 0) + (CASE WHEN j.status = 'processing' THEN 1 ELSE 0 END), "
        "j.status = 'processing', j.started_at = $at, j.engine = $e, j.note = null RETURN j AS n",
        {"u": job_id, "e": engine, "at": at, "s": stale_before},
    )


def _finish(job_id: str, claimed_at: str, props: dict[str, Any], asset: dict[str, Any] | None) -> Statement:
    """End a job this runner still holds (claimed at ``claimed_at``), creating its record (on its scene, if any) in
    the same statement; a job claimed again since (this runner was taken for dead) is left to whoever holds it."""
    scene = asset.get("scene_id") if asset is not None else None
    create = ""
    if asset is not None:
        create = "MATCH (s:Scene {uid: $scene}) " if scene else ""
        create += "CREATE (m:MediaAsset) SET m = $asset " + ("CREATE (s)-[:HAS_MEDIA]->(m) " if scene else "")
    return (
        "MATCH (j:MediaJob {uid: $u}) WHERE j.status = 'processing' AND j.started_at = $c "
        f"{create}SET j += $props RETURN j.uid AS uid",
        {"u": job_id, "c": claimed_at, "props": props, "asset": asset, "scene": scene},
    )


def _set_job(job_id: str, props: dict[str, Any]) -> Statement:
    return "MATCH (j:MediaJob {uid: $u}) SET j += $props", {"u": job_id, "props": props}


# -- the chapter ----------------------------------------------------------------------------------


class Media:
    """Media records and media jobs of the campaigns (engine: :attr:`engine`, default ``none``)."""

    def __init__(
        self,
        core: StoryCore,
        engine: MediaEngine | None = None,
        *,
        max_bytes: int = MAX_MEDIA_BYTES,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self.core = core
        self.graph = core.graph
        self.blobs = core.blobs
        self.story = core.story
        self.engine: MediaEngine = engine or NoMediaEngine()
        """What runs media jobs (:mod:`story.media_engines`)."""
        self.max_bytes = max_bytes
        self.lease_s = lease_s
        """A job processing for longer is taken for abandoned (its runner died) and may be run again."""

    # -- records ----------------------------------------------------------------------------------

    def upload(
        self,
        campaign_id: str,
        data: bytes,
        *,
        mime: str,
        attachment: MediaAttachment,
        title: str | None = None,
        alt_text: str | None = None,
        width: int | None = None,
        height: int | None = None,
        duration_seconds: float | None = None,
        metadata: dict[str, str] | None = None,
    ) -> MediaAsset:
        """Store uploaded bytes (content-addressed) and their record, attached where ``attachment`` says.

        Raises:
            MediaTooLarge: more than :attr:`max_bytes`.
            StoryInvalid: empty bytes, a MIME type no media kind has, bytes that are not what it names, a size
                or length missing where the kind needs one.
            InvalidReference: the attachment names a record the campaign does not have.
        """
        self._check_size(len(data))
        if not data:
            raise StoryInvalid("the upload is empty")
        kind = _kind_of(mime)
        self.check_attachment(campaign_id, attachment)
        read = describe(data, mime)
        asset = MediaAsset.model_validate(
            {
                **attachment.model_dump(),
                "kind": kind,
                "origin": MediaOrigin.UPLOADED,
                "blob_key": f"{MEDIA}/{hashlib.sha256(data).hexdigest()}",
                "mime": mime,
                "size_bytes": len(data),
                "content_hash": hashlib.sha256(data).hexdigest(),
                "width": read.width or width,
                "height": read.height or height,
                "duration_seconds": read.duration_seconds if read.duration_seconds is not None else duration_seconds,
                "campaign_id": campaign_id,
                "title": title,
                "alt_text": alt_text,
                "metadata": metadata or {},
            }
        )
        self.blobs.put_content_addressed(data, prefix=MEDIA, content_type=mime)
        self._write(asset)
        log.info("media_uploaded", campaign_id=campaign_id, media_id=asset.id, kind=kind.value, size=len(data))
        return asset

    def attach(self, campaign_id: str, asset: MediaAsset) -> MediaAsset:
        """Record media whose bytes are in the blob store already (the asset names them), where it says."""
        self.check_attachment(campaign_id, asset)
        asset = asset.validated_copy(campaign_id=campaign_id)
        self._write(asset)
        return asset

    def attach_to_scene(self, scene_id: str, asset: MediaAsset) -> MediaAsset:
        """Record media on a scene (the asset's attachment becomes the scene)."""
        scene = self.story.node("Scene", scene_id)
        placed = asset.validated_copy(
            target=MediaTarget.SCENE, scene_id=scene_id, entity_id=None, start_turn_id=None, end_turn_id=None
        )
        return self.attach(scene["campaign_id"], placed)

    def get(self, campaign_id: str, media_id: str) -> MediaAsset:
        """A media record of the campaign.

        Raises:
            StoryNotFound: no such record in this campaign.
        """
        try:
            props = self.story.node("MediaAsset", media_id)
        except StoryNotFound:
            props = {}
        if props.get("campaign_id") != campaign_id:
            raise StoryNotFound(f"no media {media_id!r} in campaign {campaign_id!r}")
        return from_props(MediaAsset, props, key="id")

    def content(self, campaign_id: str, media_id: str) -> tuple[MediaAsset, bytes]:
        """A media record and its bytes."""
        asset = self.get(campaign_id, media_id)
        return asset, self.blobs.get(asset.blob_key)

    def records(
        self,
        campaign_id: str,
        *,
        target: MediaTarget | None = None,
        entity_id: str | None = None,
        scene_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[MediaAsset]:
        """The campaign's media, oldest first, optionally of one target kind, entity or scene, or covering a turn
        (a turn range whose first turn is on the turn's line and which reaches down to it)."""
        self.story.context(campaign_id)  # a missing campaign is 404, not an empty list
        assets = [
            from_props(MediaAsset, r, key="id") for r in self.story.nodes(_of_campaign("MediaAsset", campaign_id))
        ]
        if target is not None:
            assets = [a for a in assets if a.target is target]
        if entity_id is not None:
            assets = [a for a in assets if a.entity_id == entity_id]
        if scene_id is not None:
            assets = [a for a in assets if a.scene_id == scene_id]
        if turn_id is not None:
            self._turn(campaign_id, turn_id, "turn_id")
            assets = [a for a in assets if a.target is MediaTarget.TURNS and self.covers(a, turn_id)]
        return assets

    def covers(self, asset: MediaAttachment, turn_id: str) -> bool:
        """Whether a turn range reaches ``turn_id``: its first turn on the turn's line, the turn on its last's."""
        if asset.start_turn_id is None:
            return False
        end = asset.end_turn_id or asset.start_turn_id
        return self._on_line(asset.start_turn_id, turn_id) and self._on_line(turn_id, end)

    def scene_media(self, scene_id: str) -> list[MediaAsset]:
        scene = self.story.node("Scene", scene_id)
        return self.records(scene["campaign_id"], scene_id=scene_id)

    # -- jobs -------------------------------------------------------------------------------------

    def submit(self, job: MediaJob) -> MediaJob:
        """Queue a job and, when the bound engine does its task, run it now (the answer: the job as it ended).

        Raises:
            InvalidReference: the attachment or the audio to transcribe is not the campaign's.
        """
        self.check_attachment(job.campaign_id, job)
        if job.source_media_id is not None:
            source = self._source(job.campaign_id, job.source_media_id)
            if source.kind is not MediaKind.AUDIO:
                raise InvalidReference("source_media_id", f"media {source.id!r} is {source.kind.value}, not audio")
        job = job.validated_copy(
            status=JobStatus.PENDING, started_at=None, completed_at=None, asset_id=None, error=None, engine=None
        )
        job = job.validated_copy(note=self._waits(job))
        self.graph.run(*_create("MediaJob", node_props(job)))
        log.info(
            "media_job_queued", campaign_id=job.campaign_id, job_id=job.id, task=job.task.value, engine=self.engine.name
        )
        return job if job.note else self.run(job.campaign_id, job.id)

    def job(self, campaign_id: str, job_id: str) -> MediaJob:
        try:
            props = self.story.node("MediaJob", job_id)
        except StoryNotFound:
            props = {}
        if props.get("campaign_id") != campaign_id:
            raise StoryNotFound(f"no media job {job_id!r} in campaign {campaign_id!r}")
        return from_props(MediaJob, props, key="id")

    def jobs(self, campaign_id: str, *, status: JobStatus | None = None) -> list[MediaJob]:
        self.story.context(campaign_id)
        jobs = [from_props(MediaJob, r, key="id") for r in self.story.nodes(_of_campaign("MediaJob", campaign_id))]
        return [j for j in jobs if status is None or j.status is status]

    def run(self, campaign_id: str, job_id: str) -> MediaJob:
        """Run one queued job (or one abandoned mid-run) on the bound engine: claimed, rendered, its record written,
        or failed with why. A job running elsewhere, done, or of a task the engine does not do is answered as it is.
        A runner killed at any moment leaves the job queued or processing (run again once its lease is out), or
        completed with its one record: never a record without its completed job, nor two."""
        job = self.job(campaign_id, job_id)
        waits = self._waits(job)
        if waits or not (job.status is JobStatus.PENDING or self._abandoned(job)):
            if waits and waits != job.note and job.status is JobStatus.PENDING:
                self.graph.run(*_set_job(job.id, {"note": waits}))
                job = job.validated_copy(note=waits)
            return job
        now = utc_now()
        stale = (now - timedelta(seconds=self.lease_s)).isoformat()
        rows = self.graph.run(*_claim(job.id, self.engine.name, now.isoformat(), stale))
        if not rows:
            return self.job(campaign_id, job_id)  # another runner claimed it first
        job = from_props(MediaJob, rows[0]["n"], key="id")
        log.info(
            "media_job_started", campaign_id=campaign_id, job_id=job.id, engine=self.engine.name, retry=job.retry_count
        )
        try:
            source = self.content(campaign_id, job.source_media_id)[1] if job.source_media_id else None
            made = self.engine.render(job, source)
            asset = self._made(job, made)
        except (MediaEngineFailed, StoryInvalid) as exc:
            return self._fail(job, str(exc))
        except Exception as exc:  # an engine's own failure: recorded on the job, never a half-made record
            log.error("media_job_crashed", job_id=job.id, engine=self.engine.name, error=repr(exc), exc_info=exc)
            return self._fail(job, f"the {self.engine.name} engine failed: {type(exc).__name__}")
        self.blobs.put_content_addressed(made.data, prefix=MEDIA, content_type=made.mime)
        return self._complete(job, asset)

    def _complete(self, job: MediaJob, asset: MediaAsset) -> MediaJob:
        """The record and the job's completion in one statement, if this runner still holds the job."""
        done = job.validated_copy(status=JobStatus.COMPLETED, asset_id=asset.id, completed_at=utc_now())
        claimed = _claimed_at(job)
        if not self.graph.run(*_finish(job.id, claimed, _job_props(done), node_props(asset))):
            log.warning("media_job_taken_over", campaign_id=job.campaign_id, job_id=job.id)
            return self.job(job.campaign_id, job.id)
        log.info(
            "media_job_completed", campaign_id=job.campaign_id, job_id=job.id, media_id=asset.id, size=asset.size_bytes
        )
        return done

    def run_pending(self, campaign_id: str) -> list[MediaJob]:
        """Run every queued job of the campaign the bound engine can do, and every one abandoned mid-run (processing
        past the lease); answer each as it ended or still waits."""
        jobs = self.jobs(campaign_id)
        return [self.run(campaign_id, j.id) for j in jobs if j.status is JobStatus.PENDING or self._abandoned(j)]

    def _abandoned(self, job: MediaJob) -> bool:
        started = job.started_at
        return (
            job.status is JobStatus.PROCESSING
            and started is not None
            and utc_now() - started >= timedelta(seconds=self.lease_s)
        )

    # -- what they share --------------------------------------------------------------------------

    def check_attachment(self, campaign_id: str, attachment: MediaAttachment) -> None:
        """The entity, scene or turns an attachment names are the campaign's (the end turn below the start), and
        the campaign takes writes.

        Raises:
            InvalidReference: naming the field, when one is missing or another campaign's.
            StoryInvalid: the campaign is archived.
        """
        self.writable(campaign_id)
        if attachment.entity_id is not None:
            self.require(campaign_id, "Entity", attachment.entity_id, "entity_id", "entity")
        if attachment.scene_id is not None:
            self.require(campaign_id, "Scene", attachment.scene_id, "scene_id", "scene")
        if attachment.start_turn_id is not None:
            self._turn(campaign_id, attachment.start_turn_id, "start_turn_id")
        if attachment.end_turn_id is not None:
            self._turn(campaign_id, attachment.end_turn_id, "end_turn_id")
            if not self._on_line(attachment.start_turn_id or "", attachment.end_turn_id):
                raise InvalidReference(
                    "end_turn_id", "the range's last turn must be the first or one after it on its line"
                )

    def writable(self, campaign_id: str) -> None:
        """Refuse a write to an archived campaign (as its story refuses one), or to a missing one (404)."""
        if self.story.context(campaign_id).archived:
            raise StoryInvalid(f"campaign {campaign_id!r} is archived; unarchive it to change it")

    def require(self, campaign_id: str, label: str, uid: str, field: str, noun: str) -> dict[str, Any]:
        """The campaign's record ``uid`` of ``label``, else :class:`InvalidReference` naming ``field``."""
        try:
            props = self.story.node(label, uid)
        except StoryNotFound:
            props = {}
        if props.get("campaign_id") != campaign_id:
            raise InvalidReference(field, f"campaign {campaign_id!r} has no {noun} {uid!r}")
        return props

    def _turn(self, campaign_id: str, turn_id: str, field: str) -> None:
        self.require(campaign_id, "Turn", turn_id, field, "turn")

    def _on_line(self, ancestor_id: str, turn_id: str) -> bool:
        """Whether ``ancestor_id`` is ``turn_id`` or a turn before it on its line."""
        turn = self.story.turn(turn_id)
        ancestor = self.story.turn(ancestor_id)
        ctx = self.story.context(turn.campaign_id)
        return self.core.lineage_for(ctx, turn.id).contains(ancestor.branch_id, ancestor.depth)

    def _source(self, campaign_id: str, media_id: str) -> MediaAsset:
        try:
            return self.get(campaign_id, media_id)
        except StoryNotFound:
            raise InvalidReference("source_media_id", f"campaign {campaign_id!r} has no media {media_id!r}") from None

    def _waits(self, job: MediaJob) -> str | None:
        """Why a queued job waits, or None when the bound engine can run it."""
        if job.task in self.engine.tasks:
            return None
        if isinstance(self.engine, NoMediaEngine):
            return "queued: no media engine is bound (LOREKEEPER_MEDIA_ENGINE=none); it runs once one is"
        name, task = self.engine.name, job.task.value
        return f"queued: the {name} media engine does not do {task}; it runs once one that does is bound"

    def _made(self, job: MediaJob, made: Rendered) -> MediaAsset:
        self._check_size(len(made.data))
        digest = hashlib.sha256(made.data).hexdigest()
        return MediaAsset.model_validate(
            {
                **job.model_dump(include=set(MediaAttachment.model_fields)),
                "kind": TASK_KIND[job.task],
                "origin": MediaOrigin.GENERATED,
                "blob_key": f"{MEDIA}/{digest}",
                "mime": made.mime,
                "size_bytes": len(made.data),
                "content_hash": digest,
                "width": made.width,
                "height": made.height,
                "duration_seconds": made.duration_seconds,
                "job_id": job.id,
                "campaign_id": job.campaign_id,
                "title": job.title,
                "alt_text": made.alt_text,
                "metadata": {k: v[:2000] for k, v in made.metadata.items()},
            }
        )

    def _fail(self, job: MediaJob, why: str) -> MediaJob:
        failed = job.validated_copy(status=JobStatus.FAILED, error=why[:2000] or "failed", completed_at=utc_now())
        if not self.graph.run(*_finish(job.id, _claimed_at(job), _job_props(failed), None)):
            return self.job(job.campaign_id, job.id)  # claimed again since: the runner holding it decides
        log.warning("media_job_failed", campaign_id=job.campaign_id, job_id=job.id, engine=self.engine.name, error=why)
        return failed

    def _write(self, asset: MediaAsset) -> None:
        with self.graph.transaction() as tx:
            tx.run(*_create("MediaAsset", node_props(asset)))
            if asset.scene_id is not None:
                tx.run(*_link_scene(asset.scene_id, asset.id))

    def _check_size(self, size: int) -> None:
        if size > self.max_bytes:
            raise MediaTooLarge(f"the media file is {size:,} bytes; at most {self.max_bytes:,} are allowed")


def _kind_of(mime: str) -> MediaKind:
    major = mime.split("/", 1)[0]
    try:
        return MediaKind(major)
    except ValueError:
        kinds = ", ".join(f"{k.value}/*" for k in MediaKind)
        raise StoryInvalid(f"mime {mime!r} is no media kind ({kinds})") from None


def _claimed_at(job: MediaJob) -> str:
    """The claim's timestamp exactly as the claim wrote it (the finish compares it)."""
    assert job.started_at is not None, "a job being finished was claimed"
    return job.started_at.isoformat()


def _job_props(job: MediaJob) -> dict[str, Any]:
    """The lifecycle fields a job's update writes (a cleared field is written as null: removed)."""
    fields: Sequence[str] = ("status", "error", "asset_id", "started_at", "completed_at", "engine", "note")
    dumped = job.model_dump(mode="json", include=set(fields))
    return {k: dumped.get(k) for k in fields}
