"""Triggers over both doors (REST and MCP), as a GM and a player would: the GM declares a trigger (Ayla at the
tower: a note for the narrator); malformed conditions are 422, an unknown trigger 404 and a player forbidden, with
nothing written; the table forks; on one branch a scene's end takes Ayla to the tower and the trigger fires there
(its activation names the turn and the branch), the next turn's narration carries the note (echo engine); on the
other branch it never fires. The GM turns it off and deletes it; its activation stays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services
from tests.unit.store_dump import stores_dump
from tests.unit.test_serve_review import _campaign
from tests.unit.test_story_campaign import gm_entity, gm_events

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


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


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_trigger_fires_on_one_branch_and_not_on_another(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    ayla = story.state(c["id"]).entities[0].id
    cast = story.start_scene(c["id"], title="The map")
    tower = gm_entity(story, cast.id, "location", "The tower")
    story.end_scene(cast.id)
    at_tower = {"on": "entity_at", "entity_id": ayla, "location_entity_id": tower}
    spec = {"name": "Tower bell", "conditions": [at_tower], "action": {"kind": "note", "text": "The bell tolls."}}

    before = _dump(services)
    for bad in (
        {**spec, "conditions": []},
        {**spec, "conditions": [{"on": "moon_phase", "phase": "full"}]},
        {**spec, "conditions": [{"on": "entity_attribute", "entity_id": ayla, "attribute": "hp"}]},
        {**spec, "conditions": [{"on": "turn_count", "at_least": 0}]},
        {**spec, "action": {"kind": "proposal", "events": [{"kind": "bogus"}]}},
        {**spec, "action": {"kind": "shout", "text": "!"}},
    ):
        assert doors.call(door, "create_trigger", gm, cid, bad)[0] == "validation_failed", bad
    assert doors.call(door, "create_trigger", player, cid, spec)[0] == "forbidden"
    assert doors.call(door, "list_triggers", player, cid, {})[0] == "forbidden"
    assert doors.call(door, "list_activations", player, cid, {})[0] == "forbidden"
    unknown = {**cid, "trigger_id": "trig_0000"}
    assert doors.call(door, "update_trigger", gm, unknown, {"active": False})[0] == "not_found"
    assert doors.call(door, "delete_trigger", gm, unknown, {})[0] == "not_found"
    assert _dump(services) == before, "a refused trigger wrote something"

    code, trigger = doors.call(door, "create_trigger", gm, cid, spec)
    assert code is None and trigger["name"] == "Tower bell", trigger
    code, turn = doors.call(door, "play_turn", player, cid, {"text": "We stand at the crossroads"})
    assert code is None, turn
    home = story.get_campaign(c["id"]).active_branch_id
    other = story.create_branch(c["id"], turn["turn_id"], name="the coast road")
    story.switch_branch(c["id"], home)

    # on the home branch a scene takes Ayla to the tower; its end fires the trigger there
    scene = story.start_scene(c["id"], title="The climb")
    gm_events(story, scene.id, {"kind": "current_location_set", "entity_id": ayla, "location_entity_id": tower})
    code, climbed = doors.call(door, "play_turn", player, cid, {"text": "We climb the stair"})
    assert doors.call(door, "end_scene", gm, {"scene_id": scene.id}, {})[0] is None
    code, fired = doors.call(door, "list_activations", gm, cid, {})
    assert code is None and len(fired) == 1, fired
    assert (fired[0]["trigger_id"], fired[0]["turn_id"], fired[0]["branch_id"], fired[0]["fired_by"]) == (
        trigger["id"],
        climbed["turn_id"],
        home,
        "scene_end",
    )
    # the next turn's narrator reads the note (the echo engine answers the prompt's last line)
    code, after = doors.call(door, "play_turn", player, cid, {"text": "We listen"})
    assert code is None and "The bell tolls." in after["narration"], after
    code, later = doors.call(door, "play_turn", player, cid, {"text": "We rest"})
    assert "The bell tolls." not in later["narration"], later

    # on the other branch Ayla never reaches the tower: no firing there
    story.switch_branch(c["id"], other.id)
    for text in ("We take the coast road", "We camp on the dunes"):
        assert doors.call(door, "play_turn", player, cid, {"text": text})[0] is None
    code, there = doors.call(door, "list_activations", gm, cid, {"branch_id": other.id})
    assert code is None and there == [], there
    assert len(doors.call(door, "list_activations", gm, cid, {})[1]) == 1

    one = {**cid, "trigger_id": trigger["id"]}
    code, off = doors.call(door, "update_trigger", gm, one, {"active": False})
    assert code is None and off["active"] is False and off["conditions"] == trigger["conditions"], off
    assert doors.call(door, "delete_trigger", gm, one, {})[0] is None
    assert doors.call(door, "list_triggers", gm, cid, {})[1] == []
    assert len(doors.call(door, "list_activations", gm, cid, {"trigger_id": trigger["id"]})[1]) == 1
