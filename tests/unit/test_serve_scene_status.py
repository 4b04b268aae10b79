"""A scene's status over both doors (REST and MCP), as a GM and a player read it: after an undo back before a
scene's end, get_scene and list_scenes say it is active on the head's line, as the refusal of a second scene does;
read as of its end turn (turn_id) or from a branch, they say what stands there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services
from tests.unit.test_serve_review import _campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services() as services:
        app = create_app(services)
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


def _ok(doors: Doors, door: str, op: str, key: str, ids: dict[str, str], body: dict[str, Any] | None = None) -> Any:
    code, answer = doors.call(door, op, key, ids, body or {})
    assert code is None, (door, op, answer)
    return answer


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_an_undone_end_reads_active_for_the_gm_and_a_player_and_a_second_scene_is_refused(
    table: tuple[Any, Doors], door: str
) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    story.add_turn(c["id"], "We reach the ford.", narration="The river runs high.")
    scene = _ok(doors, door, "start_scene", gm, cid, {"title": "The ford"})
    at = {"scene_id": scene["id"]}
    story.add_turn(c["id"], "We call the ferryman.", narration="A lantern answers.")
    end_turn = story.add_turn(c["id"], "Osk poles across.", narration="The raft bumps the bank.").id
    _ok(doors, door, "end_scene", gm, at)
    for key in (gm, player):
        assert _ok(doors, door, "get_scene", key, at)["status"] == "completed"

    _ok(doors, door, "undo", gm, cid)  # the head before the end turn: the scene is open again on its line
    for key in (gm, player):
        seen = _ok(doors, door, "get_scene", key, at)
        assert (seen["status"], seen.get("ended_at"), seen.get("end_turn_id")) == ("active", None, None), seen
        listed = {s["id"]: s["status"] for s in _ok(doors, door, "list_scenes", key, cid)}
        assert listed[scene["id"]] == "active" and list(listed.values()).count("active") == 1, listed
        # as of the end turn it stands completed, with that end
        then = _ok(doors, door, "get_scene", key, at, {"turn_id": end_turn})
        assert (then["status"], then["end_turn_id"]) == ("completed", end_turn), then
        listed = {s["id"]: s["status"] for s in _ok(doors, door, "list_scenes", key, cid, {"turn_id": end_turn})}
        assert listed[scene["id"]] == "completed", listed
    code, refused = doors.call(door, "start_scene", gm, cid, {"title": "Another"})
    assert code == "invalid_request" and "still active" in str(refused), refused

    # a branch forked at the head while the scene is open: ended on the parent, it stays active on the branch
    head = story.get_campaign(c["id"]).head_turn_id
    main = story.get_campaign(c["id"]).active_branch_id
    fork = _ok(doors, door, "create_branch", gm, cid, {"from_turn_id": head, "name": "the far bank"})
    _ok(doors, door, "switch_branch", gm, {**cid, "branch_id": main})
    _ok(doors, door, "end_scene", gm, at)
    for key in (gm, player):
        assert _ok(doors, door, "get_scene", key, at)["status"] == "completed"
        assert _ok(doors, door, "get_scene", key, at, {"branch_id": fork["id"]})["status"] == "active"
    # a turn of another campaign, or a branch of none, answers like a missing one
    other = _campaign(services)
    elsewhere = story.add_turn(other["id"], "Elsewhere.", narration="Far away.").id
    assert doors.call(door, "get_scene", player, at, {"turn_id": elsewhere})[0] == "not_found"
    assert doors.call(door, "list_scenes", player, cid, {"branch_id": "branch_0000"})[0] == "not_found"
