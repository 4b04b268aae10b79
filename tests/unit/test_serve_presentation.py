"""Turn presentations, media records and media jobs over both doors (REST and MCP), as a GM and a player would: the
GM lays out a turn and regenerates it (the turn, its takes and the state hash unchanged) and the blocks read back
the same through either door; a GM-only media record never reaches a player key (not listed, its record and bytes
answer like missing ones, its block left out of the turn's presentation); media jobs wait on the ``none`` engine,
saying so, and run on the development engine into a record; oversized uploads, unknown ids and malformed blocks
are clear 4xx answers that write nothing."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services
from tests.unit.store_dump import stores_dump
from tests.unit.test_serve_review import _campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="30"><rect width="40" height="30"/></svg>'


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services() as services:
        app = create_app(services)
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


def _dump(services: Any) -> dict[str, list[str]]:
    story = services.story
    return stores_dump(story.graph, story.recall_index, getattr(story.blobs, "root", None))


def _upload(doors: Doors, door: str, key: str, cid: dict[str, str], **fields: Any) -> tuple[Any, Any]:
    body = {"data_base64": base64.b64encode(SVG).decode(), "mime": "image/svg+xml", **fields}
    return doors.call(door, "upload_media", key, cid, body)


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_turns_presentation_is_laid_out_and_regenerated_without_touching_the_turn(
    table: tuple[Any, Doors], door: str
) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player = c["gm"], c["player"]
    turn = story.add_turn(c["id"], "I knock", narration='The door opens. "Welcome," says Ayla.')
    ids = {"campaign_id": c["id"], "turn_id": turn.id}
    before_turn, before_hash = story.get_turn(turn.id).model_dump(mode="json"), story.state(c["id"]).state_hash

    assert doors.call(door, "get_presentation", player, ids, {})[0] == "not_found"  # none stored yet
    code, regenerated = doors.call(door, "regenerate_presentation", gm, ids, {})
    assert code is None, regenerated
    assert [(b["type"], b["text"]) for b in regenerated["blocks"]] == [
        ("action", "I knock"),
        ("narration", "The door opens."),
        ("dialogue", "Welcome,"),
        ("narration", "says Ayla."),
    ]
    ayla = story.state(c["id"]).entities[0].id
    assert regenerated["blocks"][2]["speaker"] == {"kind": "entity", "entity_id": ayla, "name": None}

    laid_out = [
        {"type": "narration", "text": "The door swings wide."},
        {"type": "dialogue", "speaker": {"kind": "entity", "entity_id": ayla}, "text": "Welcome!"},
        {"type": "action", "text": "Ayla bows."},
    ]
    code, mine = doors.call(door, "set_presentation", gm, ids, {"blocks": laid_out, "take_id": turn.selected_take_id})
    assert code is None and mine["version"] == 2 and mine["origin"] == "set", mine
    code, read = doors.call(door, "get_presentation", player, ids, {})
    assert code is None and read == mine  # the blocks round-trip as stored
    code, first = doors.call(door, "get_presentation", player, ids, {"version": 1})
    assert code is None and first == regenerated
    code, versions = doors.call(door, "list_presentation_versions", player, ids, {})
    assert code is None and [(v["version"], v["origin"]) for v in versions] == [(1, "regenerated"), (2, "set")]

    # a player may not lay it out; the turn, its takes and the state are what they were
    assert doors.call(door, "set_presentation", player, ids, {"blocks": laid_out})[0] == "forbidden"
    assert doors.call(door, "regenerate_presentation", player, ids, {})[0] == "forbidden"
    assert story.get_turn(turn.id).model_dump(mode="json") == before_turn
    assert story.state(c["id"]).state_hash == before_hash

    # malformed blocks, unknown ids and a missing version: 4xx, and nothing written
    before = _dump(services)
    for bad in (
        [{"type": "image", "alt_text": "two refs", "media_asset_id": "media_x", "blob_key": "media/" + "0" * 64}],
        [{"type": "hologram", "text": "?"}],
        [],
        [{"type": "narration", "text": ""}],
    ):
        assert doors.call(door, "set_presentation", gm, ids, {"blocks": bad})[0] == "validation_failed", bad
    missing_media = [{"type": "image", "alt_text": "x", "media_asset_id": "media_missing"}]
    assert doors.call(door, "set_presentation", gm, ids, {"blocks": missing_media})[0] == "invalid_request"
    unknown = {"campaign_id": c["id"], "turn_id": "turn_missing"}
    assert doors.call(door, "get_presentation", gm, unknown, {})[0] == "not_found"
    assert doors.call(door, "regenerate_presentation", gm, unknown, {})[0] == "not_found"
    assert doors.call(door, "get_presentation", gm, ids, {"version": 9})[0] == "not_found"
    assert doors.call(door, "regenerate_presentation", gm, ids, {"renderer": "nope"})[0] == "invalid_request"
    assert _dump(services) == before


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_gm_only_media_never_reaches_a_player_key(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    turn = story.add_turn(c["id"], "I look around", narration="A hall of mirrors.")
    ids = {**cid, "turn_id": turn.id}
    ayla = story.state(c["id"]).entities[0].id

    code, public = _upload(doors, door, gm, cid, title="The hall", target="turns", start_turn_id=turn.id)
    assert code is None and (public["width"], public["height"], public["kind"]) == (40, 30, "image"), public
    code, secret = _upload(doors, door, gm, cid, title="The villain", visibility={"audience": "gm"})
    assert code is None, secret
    code, portrait = _upload(doors, door, gm, cid, target="entity", entity_id=ayla)
    assert code is None, portrait
    assert _upload(doors, door, player, cid)[0] == "forbidden"

    code, listed = doors.call(door, "list_media", player, cid, {})
    assert code is None and [m["id"] for m in listed] == [public["id"], portrait["id"]]
    code, listed = doors.call(door, "list_media", gm, cid, {})
    assert code is None and [m["id"] for m in listed] == [public["id"], secret["id"], portrait["id"]]
    code, by_turn = doors.call(door, "list_media", player, cid, {"turn_id": turn.id})
    assert code is None and [m["id"] for m in by_turn] == [public["id"]]
    for name in ("get_media", "get_media_content"):
        assert doors.call(door, name, player, {**cid, "media_id": secret["id"]}, {})[0] == "not_found"
        assert doors.call(door, name, player, {**cid, "media_id": "media_missing"}, {})[0] == "not_found"
    code, content = doors.call(door, "get_media_content", gm, {**cid, "media_id": secret["id"]}, {})
    assert code is None and base64.b64decode(content["data_base64"]) == SVG
    code, content = doors.call(door, "get_media_content", player, {**cid, "media_id": public["id"]}, {})
    assert code is None and content["content_hash"] == public["content_hash"]

    # a presentation showing both: the player reads it without the GM's image
    blocks = [
        {"type": "narration", "text": "A hall of mirrors."},
        {"type": "image", "media_asset_id": public["id"], "alt_text": "The hall"},
        {"type": "image", "media_asset_id": secret["id"], "alt_text": "The villain behind the glass"},
    ]
    assert doors.call(door, "set_presentation", gm, ids, {"blocks": blocks})[0] is None
    code, seen = doors.call(door, "get_presentation", player, ids, {})
    assert code is None and [b.get("media_asset_id") for b in seen["blocks"]] == [None, public["id"]], seen
    assert "villain" not in str(seen)
    code, seen = doors.call(door, "get_presentation", gm, ids, {})
    assert code is None and len(seen["blocks"]) == 3

    # an oversized upload is 413 and writes nothing
    before = _dump(services)
    limit, story.media.max_bytes = story.media.max_bytes, len(SVG) - 1
    try:
        assert _upload(doors, door, gm, cid)[0] == "request_too_large"
    finally:
        story.media.max_bytes = limit
    assert _upload(doors, door, gm, cid, target="entity", entity_id="ent_missing")[0] == "invalid_request"
    assert _upload(doors, door, gm, cid, target="entity")[0] == "validation_failed"
    assert (
        doors.call(door, "upload_media", gm, cid, {"data_base64": "%%%", "mime": "image/png"})[0] == "validation_failed"
    )
    assert _dump(services) == before


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_media_jobs_wait_on_none_and_run_on_the_development_engine(table: tuple[Any, Doors], door: str) -> None:
    from story.media_engines import media_engine

    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    assert story.media.engine.name == "none"
    code, queued = doors.call(door, "submit_media_job", gm, cid, {"task": "image", "prompt": "A bell tower at dawn"})
    assert code is None and queued["status"] == "pending" and "no media engine is bound" in queued["note"], queued
    code, tts = doors.call(door, "submit_media_job", gm, cid, {"task": "tts", "prompt": "Ring the bell, ring it now."})
    assert code is None and tts["status"] == "pending"
    assert doors.call(door, "submit_media_job", player, cid, {"task": "image", "prompt": "x"})[0] == "forbidden"
    assert doors.call(door, "list_media_jobs", player, cid, {})[0] == "forbidden"
    code, still = doors.call(door, "run_media_jobs", gm, cid, {})
    assert code is None and [j["status"] for j in still] == ["pending", "pending"]

    story.media.engine = media_engine("development")
    try:
        code, ran = doors.call(door, "run_media_jobs", gm, cid, {})
        assert code is None and [j["status"] for j in ran] == ["completed", "completed"], ran
        code, job = doors.call(door, "get_media_job", gm, {**cid, "job_id": queued["id"]}, {})
        assert code is None and job["engine"] == "development" and job["asset_id"], job
        code, content = doors.call(door, "get_media_content", player, {**cid, "media_id": job["asset_id"]}, {})
        assert code is None and content["mime"] == "image/svg+xml"
        assert b"A bell tower at dawn" in base64.b64decode(content["data_base64"])
        code, voice = doors.call(door, "get_media", player, {**cid, "media_id": ran[1]["asset_id"]}, {})
        assert code is None and voice["mime"] == "audio/wav" and voice["metadata"]["content"] == "silence"
        code, now = doors.call(door, "submit_media_job", gm, cid, {"task": "image", "prompt": "A second bell"})
        assert code is None and now["status"] == "completed"  # a bound engine runs it at once
    finally:
        story.media.engine = media_engine("none")
    code, done = doors.call(door, "list_media_jobs", gm, cid, {"status": "completed"})
    assert code is None and len(done) == 3
    assert doors.call(door, "get_media_job", gm, {**cid, "job_id": "mjob_missing"}, {})[0] == "not_found"
    bad = {"task": "stt", "prompt": "transcribe"}  # no audio named
    assert doors.call(door, "submit_media_job", gm, cid, bad)[0] == "validation_failed"


def test_the_media_engine_is_a_setting() -> None:
    from schemas.errors import ConfigError
    from schemas.serving import ServeSettings

    with api_services(ServeSettings(api_host="127.0.0.1", media_engine="development")) as services:
        assert services.story.media.engine.name == "development"
    painter = ServeSettings(api_host="127.0.0.1", media_engine="painter")
    with pytest.raises(ConfigError, match="LOREKEEPER_MEDIA_ENGINE: no media engine 'painter'"), api_services(painter):
        pass
