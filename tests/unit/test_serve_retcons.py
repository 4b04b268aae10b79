"""Retcons of every kind over both doors (REST and MCP), as a GM and a player would: the GM reads what rests on an
entity (list_dependents) and is refused a retcon that would leave it standing; the GM retells a happening
(retcon_record) after which the state (get_state), the export (export_campaign) and recall all show the new
version and not the old; a player may do neither; an unknown record is not_found with nothing written."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services
from tests.unit.store_dump import stores_dump
from tests.unit.test_story_campaign import gm_entity

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services() as services:
        app = create_app(services)
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


def _campaign(services: Any) -> dict[str, Any]:
    """A campaign whose scene made a happening at the inn with Ayla, and its GM and player keys."""
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile

    story = services.story
    world = story.create_world("Ashfall", axioms=["The dead stay dead."])
    campaign = story.create_campaign(world.id, "The Storm", StoryProfile(genre="fantasy"))
    story.add_turn(campaign.id, "We shelter at the inn.", narration="Rain hammers the shutters.")
    scene = story.start_scene(campaign.id, title="The inn")
    ayla = gm_entity(story, scene.id, "character", "Ayla")
    inn = gm_entity(story, scene.id, "location", "The Drowned Inn")
    fire = {"title": "The stable burns", "participant_entity_ids": [ayla], "location_entity_id": inn}
    story.propose(scene.id, type="event", content=fire, authority="gm", confidence=1.0)
    story.add_turn(campaign.id, "Smoke!", narration="Flames lick the stable roof.")
    story.end_scene(scene.id)
    hap = next(h.id for h in story.state(campaign.id).happenings if h.title == "The stable burns")
    return {
        "id": campaign.id,
        "ayla": ayla,
        "happening": hap,
        "gm": services.keys.create("gm", campaigns=[campaign.id], role=KeyRole.GM)[0],
        "player": services.keys.create("player", campaigns=[campaign.id], character_entity_id=ayla)[0],
    }


def _dump(services: Any) -> dict[str, list[str]]:
    story = services.story
    return stores_dump(story.graph, story.recall_index, getattr(story.blobs, "root", None))


def _texts(doors: Doors, door: str, key: str, cid: dict[str, str], query: str) -> list[str]:
    code, answer = doors.call(door, "recall", key, cid, {"query": query, "limit": 20})
    assert code is None, answer
    return [h["text"] for h in answer["hits"]]


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_gm_retells_a_happening_and_every_read_shows_the_new_version(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    at_ayla = {**cid, "record_id": c["ayla"]}
    at_hap = {**cid, "record_id": c["happening"]}
    assert "The stable burns" in _texts(doors, door, gm, cid, "the stable fire")

    # dependents first: what rests on Ayla; a retcon that would leave it standing is refused, nothing written
    code, deps = doors.call(door, "list_dependents", gm, at_ayla, {})
    assert code is None and deps["record"] == "entity", deps
    assert [(d["kind"], d["id"]) for d in deps["dependents"]] == [("happening", c["happening"])]
    before = _dump(services)
    code, refused = doors.call(door, "retcon_record", gm, at_ayla, {"reason": "She never was."})
    assert code == "invalid_request" and "rests on entity" in json.dumps(refused), refused
    assert doors.call(door, "list_dependents", player, at_ayla, {})[0] == "forbidden"
    assert doors.call(door, "retcon_record", player, at_hap, {"reason": "Mine."})[0] == "forbidden"
    nobody = {**cid, "record_id": "hap_0000"}
    assert doors.call(door, "retcon_record", gm, nobody, {"reason": "?"})[0] == "not_found"
    assert _dump(services) == before, "a refused retcon wrote something"

    # the GM retells the happening
    retelling = {"title": "The stable holds", "description": "The rain puts the fire out."}
    code, answer = doors.call(door, "retcon_record", gm, at_hap, {"reason": "It never burned.", "retelling": retelling})
    assert code is None and answer["record"] == "happening" and answer["replaced_by"], answer
    new = answer["replaced_by"]

    code, state = doors.call(door, "get_state_as_of", player, cid, {})
    assert code is None
    happenings = {h["id"]: h for h in state["happenings"]}
    assert happenings[c["happening"]]["canon_level"] == "retconned"
    assert happenings[c["happening"]]["superseded_by"] == new
    assert happenings[new]["title"] == "The stable holds" and happenings[new]["replaces"] == c["happening"]

    code, bundle = doors.call(door, "export_campaign", gm, cid, {})
    assert code is None
    decode = base64.b64decode if door == "rest" else base64.urlsafe_b64decode  # MCP: pydantic's url-safe base64
    with zipfile.ZipFile(io.BytesIO(decode(bundle["data"]))) as zf:
        nodes = [json.loads(line)["props"] for line in zf.read("graph/nodes.jsonl").decode().splitlines() if line]
    exported = {n.get("uid"): n for n in nodes}
    assert exported[c["happening"]]["canon_level"] == "retconned" and exported[new]["replaces"] == c["happening"]

    texts = _texts(doors, door, gm, cid, "the stable fire")
    assert "The stable holds: The rain puts the fire out." in texts
    assert not any(t.startswith("The stable burns") for t in texts), texts
    # the scene's summary formed at its end ("What became true: …") tells the new version too, for the GM and the
    # player alike; the old text is kept on the summary node
    for key in (gm, player):
        texts = _texts(doors, door, key, cid, "the stable fire")
        assert not any("The stable burns" in t for t in texts), texts
        summary = [t for t in texts if t.startswith("The inn:") and "What became true: " in t]
        assert summary and "The stable holds: The rain puts the fire out." in summary[0], texts
