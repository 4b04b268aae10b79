"""Turn presentations, media records and media jobs in the story engine: a regeneration renders the selected take
into typed blocks without touching the turn, its takes, canon or the state hash, and keeps every version; media
records are attached to a campaign, an entity, a scene or a range of turns on a line, with their bytes
content-addressed; media jobs go pending → processing → completed (or failed) on a bound engine, and wait, saying
why, on the ``none`` engine."""

from __future__ import annotations

import hashlib
import io
import struct
import wave
import zlib
from pathlib import Path
from typing import Any

import pytest

from schemas.common import JobStatus
from schemas.errors import InvalidRequest, NotFound
from schemas.media import MediaAttachment, MediaJob, MediaTarget
from schemas.presentation import DialogueBlock, ImageBlock, NarrationBlock, TurnPresentation
from story.errors import InvalidReference, StoryInvalid
from story.media import MediaTooLarge
from story.media_engines import (
    MEDIA_ENGINES,
    DevelopmentMediaEngine,
    MediaEngineFailed,
    Rendered,
    media_engine,
)
from story.service import StoryService
from tests.fixtures.story import FANTASY
from tests.unit.store_dump import stores_dump

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)

NARRATION = (
    'Rain hammers the gate. Ayla steps forward. "Open, in the queen\'s name!"\n\n'
    '"Who asks?" growls Borin from the tower.\n\n'
    "*The portcullis groans upward.*"
)


def png(width: int, height: int) -> bytes:
    """A real (tiny, blank) PNG of the given size."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + b"\0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _table(story: StoryService) -> dict[str, Any]:
    """A campaign with Ayla and Borin in canon, and a played turn narrated with speech."""
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "The Gate", FANTASY)
    cast = story.start_scene(campaign.id, title="Cast")
    ids = []
    for name in ("Ayla", "Borin"):
        p = story.propose(
            cast.id, type="entity", authority="gm", confidence=1.0, content={"kind": "character", "name": name}
        )
        ids.append(p.id)
    story.commit(cast.id, ids)
    story.end_scene(cast.id)
    entities = {e.name: e.id for e in story.state(campaign.id).entities}
    turn = story.add_turn(campaign.id, "I hail the gatehouse", narration=NARRATION)
    return {"campaign": campaign.id, "turn": turn.id, "ayla": entities["Ayla"], "borin": entities["Borin"]}


def _dump(story: StoryService) -> dict[str, list[str]]:
    return stores_dump(story.graph, None, getattr(story.blobs, "root", None))


def test_regenerating_renders_the_selected_take_and_touches_nothing_of_the_turn(story: StoryService) -> None:
    t = _table(story)
    before_turn = story.get_turn(t["turn"]).model_dump()
    before_takes = [k.model_dump() for k in story.takes(t["turn"])]
    before_state = story.state(t["campaign"])
    before = _dump(story)

    shown = story.presentations.regenerate(t["turn"])

    assert (shown.version, shown.origin.value, shown.renderer) == (1, "regenerated", "split")
    assert shown.take_id == story.get_turn(t["turn"]).selected_take_id
    laid_out = [(b.type, getattr(b, "text", None)) for b in shown.blocks]
    assert laid_out == [
        ("action", "I hail the gatehouse"),
        ("narration", "Rain hammers the gate. Ayla steps forward."),
        ("dialogue", "Open, in the queen's name!"),
        ("dialogue", "Who asks?"),
        ("narration", "growls Borin from the tower."),
        ("action", "The portcullis groans upward."),
    ]
    speakers = [b.speaker.entity_id for b in shown.blocks if isinstance(b, DialogueBlock) and b.speaker]
    assert speakers == [t["ayla"], t["borin"]]
    # deterministic: a second rendering gives the same blocks, as version 2
    again = story.presentations.regenerate(t["turn"])
    assert again.version == 2 and again.blocks == shown.blocks

    # the turn, its takes, canon and the state hash are what they were; only presentation records were added
    assert story.get_turn(t["turn"]).model_dump() == before_turn
    assert [k.model_dump() for k in story.takes(t["turn"])] == before_takes
    after_state = story.state(t["campaign"])
    assert after_state.state_hash == before_state.state_hash and after_state == before_state
    after = _dump(story)
    added = sorted(set(after["graph"]) - set(before["graph"]))
    assert set(before["graph"]) <= set(after["graph"]), "a regeneration changed a record"
    assert len(added) == 2 and all('["Presentation"]' in line for line in added), added
    new_blobs = set(after["blobs"]) - set(before["blobs"])
    assert len(new_blobs) == 2 and all("presentations/" in k for k in new_blobs), new_blobs


def test_versions_are_kept_and_a_retake_is_rendered_from_its_new_take(story: StoryService) -> None:
    t = _table(story)
    first_take = story.get_turn(t["turn"]).selected_take_id
    mine = story.set_presentation(TurnPresentation(turn_id=t["turn"], blocks=[NarrationBlock(text="My layout.")]))
    assert (mine.version, mine.origin.value) == (1, "set")
    story.add_take(t["turn"], 'Lightning splits the sky. "Hold!" cries Ayla.')
    new = story.presentations.regenerate(t["turn"])
    assert new.version == 2 and new.take_id != first_take
    assert [(b.type, getattr(b, "text", "")) for b in new.blocks][1:] == [
        ("narration", "Lightning splits the sky."),
        ("dialogue", "Hold!"),
        ("narration", "cries Ayla."),
    ]
    assert new.blocks[2].speaker.entity_id == t["ayla"]  # type: ignore[union-attr]
    versions = story.presentations.versions(t["turn"])
    assert [(v.version, v.origin.value, v.blocks) for v in versions] == [(1, "set", 1), (2, "regenerated", 4)]
    assert story.presentations.get(t["turn"], 1).blocks == mine.blocks  # the previous one stays readable
    assert story.presentation(t["turn"]) == new
    with pytest.raises(NotFound, match="version 3"):
        story.presentations.get(t["turn"], 3)


def test_malformed_presentations_are_refused_by_name_and_write_nothing(story: StoryService) -> None:
    t = _table(story)
    other = _table(story)
    foreign = story.media.upload(other["campaign"], png(4, 4), mime="image/png", attachment=MediaAttachment())
    before = _dump(story)
    bad: list[tuple[TurnPresentation, str]] = [
        (TurnPresentation(turn_id=t["turn"], take_id="take_missing", blocks=[NarrationBlock(text="x")]), "take_id"),
        (
            TurnPresentation(turn_id=t["turn"], blocks=[ImageBlock(media_asset_id=foreign.id, alt_text="theirs")]),
            "blocks.0.media_asset_id",
        ),
        (
            TurnPresentation(turn_id=t["turn"], blocks=[ImageBlock(blob_key="media/" + "0" * 64, alt_text="none")]),
            "blocks.0.blob_key",
        ),
        (
            TurnPresentation(
                turn_id=t["turn"],
                blocks=[DialogueBlock(speaker={"kind": "entity", "entity_id": other["ayla"]}, text="Hi")],
            ),
            "blocks.0.speaker.entity_id",
        ),
    ]
    for presentation, field in bad:
        with pytest.raises(InvalidReference, match=field.replace(".", r"\.")):
            story.set_presentation(presentation)
    with pytest.raises(NotFound):
        story.set_presentation(TurnPresentation(turn_id="turn_missing", blocks=[NarrationBlock(text="x")]))
    with pytest.raises(InvalidRequest, match="renderer"):
        story.presentations.regenerate(t["turn"], renderer="nope")
    with pytest.raises(ValueError, match="exactly one"):
        ImageBlock(alt_text="both", media_asset_id="media_1", blob_key="media/" + "0" * 64)
    assert _dump(story) == before


def test_media_records_attach_to_campaign_entity_scene_and_turn_ranges(story: StoryService) -> None:
    t = _table(story)
    cid = t["campaign"]
    portrait = story.media.upload(
        cid,
        png(3, 2),
        mime="image/png",
        attachment=MediaAttachment(target="entity", entity_id=t["ayla"]),
        title="Ayla",
    )
    assert (portrait.width, portrait.height, portrait.size_bytes) == (3, 2, len(png(3, 2)))
    assert portrait.blob_key == f"media/{hashlib.sha256(png(3, 2)).hexdigest()}"
    assert story.media.content(cid, portrait.id)[1] == png(3, 2)

    t2 = story.add_turn(cid, "We ride on", narration="The road bends.").id
    t3 = story.add_turn(cid, "We camp", narration="Night falls.").id
    music = _wav(1.5)
    theme = story.media.upload(
        cid, music, mime="audio/wav", attachment=MediaAttachment(target="turns", start_turn_id=t2, end_turn_id=t3)
    )
    assert theme.duration_seconds == 1.5
    # the range covers t2..t3 on its line; after an undo and a fork at t2, the fork's turn is not in it
    story.undo(cid)
    fork_turn = story.add_turn(cid, "We turn back", narration="Home.").id
    covered = {turn: [m.id for m in story.media.records(cid, turn_id=turn)] for turn in (t["turn"], t2, t3, fork_turn)}
    assert covered == {t["turn"]: [], t2: [theme.id], t3: [theme.id], fork_turn: []}
    assert [m.id for m in story.media.records(cid, entity_id=t["ayla"])] == [portrait.id]
    assert [m.id for m in story.media.records(cid, target=MediaTarget.TURNS)] == [theme.id]

    # a range whose end is not below its start, an unknown entity, oversized or mislabelled bytes: refused
    with pytest.raises(InvalidReference, match="end_turn_id"):
        story.media.upload(
            cid,
            music,
            mime="audio/wav",
            attachment=MediaAttachment(target="turns", start_turn_id=t3, end_turn_id=fork_turn),
        )
    with pytest.raises(InvalidReference, match="entity_id"):
        story.media.upload(cid, music, mime="audio/wav", attachment=MediaAttachment(target="entity", entity_id="ent_x"))
    with pytest.raises(StoryInvalid, match="not a image/png"):
        story.media.upload(cid, b"GIF89a....", mime="image/png", attachment=MediaAttachment())
    with pytest.raises(MediaTooLarge) as too_large:
        story.media.upload(cid, b"\0" * (story.media.max_bytes + 1), mime="audio/wav", attachment=MediaAttachment())
    assert too_large.value.status_code == 413
    with pytest.raises(ValueError, match="needs entity_id"):
        MediaAttachment(target="entity")

    # the scene door of before still works, and a media record is never canon
    scene = story.start_scene(cid, title="Camp")
    hash_before = story.state(cid).state_hash
    placed = story.media.upload(
        cid, png(2, 2), mime="image/png", attachment=MediaAttachment(target="scene", scene_id=scene.id)
    )
    assert [m.id for m in story.scene_media(scene.id)] == [placed.id]
    assert story.state(cid).state_hash == hash_before


def _wav(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * int(seconds * 8000))
    return out.getvalue()


def test_media_jobs_wait_on_none_and_run_on_the_development_engine(story: StoryService) -> None:
    t = _table(story)
    cid = t["campaign"]
    assert story.media.engine.name == "none"
    image = story.media.submit(
        MediaJob(
            campaign_id=cid,
            task="image",
            prompt="The rain-lashed gate at dusk",
            target="turns",
            start_turn_id=t["turn"],
        )
    )
    speech = story.media.submit(MediaJob(campaign_id=cid, task="tts", prompt="Open, in the queen's name! " * 5))
    assert [j.status for j in (image, speech)] == [JobStatus.PENDING, JobStatus.PENDING]
    assert "no media engine is bound" in (image.note or "")
    assert story.media.run_pending(cid)[0].status is JobStatus.PENDING  # still nothing to run them

    story.media.engine = media_engine("development")
    done = {j.id: j for j in story.media.run_pending(cid)}
    assert {j.status for j in done.values()} == {JobStatus.COMPLETED}
    card_job, voice_job = done[image.id], done[speech.id]
    card, svg = story.media.content(cid, card_job.asset_id or "")
    assert (card.kind.value, card.mime, card.job_id, card.origin.value) == (
        "image",
        "image/svg+xml",
        image.id,
        "generated",
    )
    assert b"The rain-lashed gate at dusk" in svg and card.start_turn_id == t["turn"]
    voice, wav_bytes = story.media.content(cid, voice_job.asset_id or "")
    with wave.open(io.BytesIO(wav_bytes)) as w:
        seconds = w.getnframes() / w.getframerate()
    assert seconds == voice.duration_seconds == 10.0  # 25 words at 2.5 words a second
    assert voice.metadata["content"] == "silence" and voice.metadata["text"].startswith("Open, in the queen's name!")
    assert story.media.run(cid, image.id) == card_job  # running a done job again makes nothing more
    assert len(story.media.records(cid)) == 2

    # the development engine does not transcribe: an stt job waits, saying so
    stt = story.media.submit(MediaJob(campaign_id=cid, task="stt", prompt="transcribe", source_media_id=voice.id))
    assert stt.status is JobStatus.PENDING and "does not do stt" in (stt.note or "")
    with pytest.raises(InvalidReference, match="source_media_id"):
        story.media.submit(MediaJob(campaign_id=cid, task="stt", prompt="transcribe", source_media_id=card.id))

    # a regeneration lays the turn's image out after its narration
    shown = story.presentations.regenerate(t["turn"])
    assert isinstance(shown.blocks[-1], ImageBlock) and shown.blocks[-1].media_asset_id == card.id


class _Broken:
    name = "broken"
    tasks = DevelopmentMediaEngine.tasks

    def render(self, job: MediaJob, source: bytes | None) -> Rendered:
        raise MediaEngineFailed("the model server refused the prompt")


def test_a_failing_engine_fails_the_job_with_why_and_makes_no_record(story: StoryService) -> None:
    t = _table(story)
    MEDIA_ENGINES["broken"] = _Broken
    try:
        story.media.engine = media_engine("broken")
        job = story.media.submit(MediaJob(campaign_id=t["campaign"], task="image", prompt="A gate"))
    finally:
        del MEDIA_ENGINES["broken"]
    assert job.status is JobStatus.FAILED and job.error == "the model server refused the prompt"
    assert story.media.job(t["campaign"], job.id) == job and story.media.records(t["campaign"]) == []
    with pytest.raises(Exception, match="LOREKEEPER_MEDIA_ENGINE"):
        media_engine("broken")


def test_presentations_media_and_jobs_travel_in_the_bundle(story: StoryService, tmp_path: Path) -> None:
    from tests.unit.test_story_bundle import _stores

    t = _table(story)
    cid = t["campaign"]
    story.media.engine = media_engine("development")
    job = story.media.submit(
        MediaJob(campaign_id=cid, task="image", prompt="A gate", start_turn_id=t["turn"], target="turns")
    )
    story.media.submit(MediaJob(campaign_id=cid, task="image", prompt="Later"))  # done as well
    story.media.engine = media_engine("none")
    waiting = story.media.submit(MediaJob(campaign_id=cid, task="tts", prompt="Hello"))
    story.set_presentation(TurnPresentation(turn_id=t["turn"], blocks=[NarrationBlock(text="First.")]))
    story.presentations.regenerate(t["turn"])
    bundle = tmp_path / "c.zip"
    story.export_campaign(cid, bundle)
    assert {"Presentation", "MediaJob", "MediaAsset"} <= _labels_in(bundle)

    with _stores(tmp_path / "other") as other:
        other.import_campaign(bundle)
        assert other.presentations.versions(t["turn"]) == story.presentations.versions(t["turn"])
        assert other.presentations.get(t["turn"], 1) == story.presentations.get(t["turn"], 1)
        assert other.media.jobs(cid) == story.media.jobs(cid)
        assert other.media.job(cid, waiting.id).status is JobStatus.PENDING
        made = job.asset_id or ""
        assert other.media.content(cid, made) == story.media.content(cid, made)


def _labels_in(bundle: Path) -> set[str]:
    import json
    import zipfile

    with zipfile.ZipFile(bundle) as z:
        lines = z.read("graph/nodes.jsonl").decode().splitlines()
    return {json.loads(line)["label"] for line in lines if line.strip()}


def test_two_writers_racing_never_share_a_version(story: StoryService) -> None:
    """Two story services on the same stores (as two processes are: each its own lock) store presentations of one
    turn at once: every store gets its own version, 1 to N with no gap."""
    from concurrent.futures import ThreadPoolExecutor

    t = _table(story)
    other = StoryService(story.graph, story.blobs)

    def store(args: tuple[StoryService, int]) -> int:
        service, i = args
        shown = TurnPresentation(turn_id=t["turn"], blocks=[NarrationBlock(text=f"Layout {i}.")])
        return service.set_presentation(shown).version or 0

    jobs = [(story if i % 2 else other, i) for i in range(24)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = sorted(pool.map(store, jobs))
    assert versions == list(range(1, 25))
    stored = story.presentations.versions(t["turn"])
    assert [v.version for v in stored] == versions
    texts = {story.presentations.get(t["turn"], v).blocks[0].text for v in versions}  # type: ignore[union-attr]
    assert texts == {f"Layout {i}." for i in range(24)}


class _Slow(DevelopmentMediaEngine):
    def render(self, job: MediaJob, source: bytes | None) -> Rendered:
        import time

        time.sleep(0.2)  # long enough for every runner to try its claim meanwhile
        return super().render(job, source)


def test_runners_racing_for_one_job_make_one_record(story: StoryService) -> None:
    """Runners in two story services (as in two processes) run the same queued jobs at once: each job is claimed
    by one of them and makes exactly one media record."""
    from concurrent.futures import ThreadPoolExecutor

    t = _table(story)
    cid = t["campaign"]
    jobs = [story.media.submit(MediaJob(campaign_id=cid, task="image", prompt=f"Gate {i}")) for i in range(3)]
    other = StoryService(story.graph, story.blobs)
    for service in (story, other):
        service.media.engine = _Slow()
    runs = [(service, job.id) for job in jobs for service in (story, other, story, other)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda run: run[0].media.run(cid, run[1]), runs))
    done = story.media.jobs(cid)
    assert [j.status for j in done] == [JobStatus.COMPLETED] * 3 and all(j.retry_count == 0 for j in done)
    records = story.media.records(cid)
    assert sorted(r.job_id or "" for r in records) == sorted(j.id for j in jobs)
    assert {j.asset_id for j in done} == {r.id for r in records}


def test_an_archived_campaign_takes_no_media_and_no_presentation(story: StoryService) -> None:
    t = _table(story)
    cid = t["campaign"]
    story.archive_campaign(cid)
    before = _dump(story)
    with pytest.raises(StoryInvalid, match="archived"):
        story.media.upload(cid, png(2, 2), mime="image/png", attachment=MediaAttachment())
    with pytest.raises(StoryInvalid, match="archived"):
        story.media.submit(MediaJob(campaign_id=cid, task="image", prompt="A gate"))
    with pytest.raises(StoryInvalid, match="archived"):
        story.presentations.regenerate(t["turn"])
    with pytest.raises(StoryInvalid, match="archived"):
        story.set_presentation(TurnPresentation(turn_id=t["turn"], blocks=[NarrationBlock(text="x")]))
    assert _dump(story) == before
    story.archive_campaign(cid, archived=False)
    assert story.presentations.regenerate(t["turn"]).version == 1
