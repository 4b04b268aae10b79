"""Story threads over both doors (REST and MCP), as a GM and a player would: the GM opens a thread, advances and
resolves it; the player lists it as of each turn but may not change it, and never sees a GM-only thread; an
unknown thread is 404 and a malformed body 422, with nothing written; after an undo and a write the fork shows
the thread as it was there while the first branch keeps it resolved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services
from tests.unit.store_dump import stores_dump
from tests.unit.test_serve_review import _campaign

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
def test_a_thread_is_opened_advanced_and_resolved_by_the_gm(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    ayla = story.state(c["id"]).entities[0].id
    t_open = story.add_turn(c["id"], "A letter arrives", narration="Sealed in black wax.").id
    code, thread = doors.call(door, "open_thread", gm, cid, {"title": "The black seal", "involved_entity_ids": [ayla]})
    assert code is None and thread["status"] == "open" and thread["opened_turn_id"] == t_open, thread
    secret = {"title": "The GM's plot", "visibility": {"audience": "gm"}}
    assert doors.call(door, "open_thread", gm, cid, secret)[0] is None
    one = {**cid, "thread_id": thread["id"]}

    # a player may not change threads; an unknown one is 404 and a malformed body 422, and none writes anything
    before = _dump(services)
    assert doors.call(door, "advance_thread", player, one, {"progress": "Mine."})[0] == "forbidden"
    assert doors.call(door, "open_thread", player, cid, {"title": "Mine"})[0] == "forbidden"
    unknown = {**cid, "thread_id": "thread_0000"}
    assert doors.call(door, "resolve_thread", gm, unknown, {"resolution": "?"})[0] == "not_found"
    for name, bad in (
        ("advance_thread", {}),
        ("advance_thread", {"progress": "x", "status": "resolved"}),
        ("resolve_thread", {"reason": "wrong field"}),
        ("open_thread", {"title": ""}),
    ):
        ids = cid if name == "open_thread" else one
        assert doors.call(door, name, gm, ids, bad)[0] == "validation_failed", (name, bad)
    assert _dump(services) == before, "a refused thread change wrote something"

    t_adv = story.add_turn(c["id"], "We read the letter", narration="It names the abbey.").id
    code, advanced = doors.call(door, "advance_thread", gm, one, {"progress": "The letter names the abbey"})
    assert code is None and advanced["status"] == "advanced", advanced
    assert [(a["turn_id"], a["progress"]) for a in advanced["advances"]] == [(t_adv, "The letter names the abbey")]
    t_res = story.add_turn(c["id"], "We ride to the abbey", narration="The abbot confesses.").id
    code, resolved = doors.call(door, "resolve_thread", gm, one, {"resolution": "The abbot sent it"})
    assert code is None and (resolved["status"], resolved["resolved_turn_id"]) == ("resolved", t_res), resolved

    # the player reads them as of each turn, without the GM's thread
    for turn_id, status in ((t_open, "open"), (t_adv, "advanced"), (t_res, "resolved")):
        code, seen = doors.call(door, "list_threads", player, cid, {"turn_id": turn_id})
        assert code is None and [(t["title"], t["status"]) for t in seen] == [("The black seal", status)], seen
    code, listed = doors.call(door, "list_threads", gm, cid, {"status": "open"})
    assert code is None and [t["title"] for t in listed] == ["The GM's plot"], listed
    assert doors.call(door, "resolve_thread", gm, one, {"resolution": "again"})[0] == "invalid_request"

    # undo to the advance and abandon there: a fork; each branch shows the thread as it was on it
    first = story.get_campaign(c["id"]).active_branch_id
    story.undo(c["id"])
    code, abandoned = doors.call(door, "abandon_thread", gm, one, {"reason": "The abbey burned"})
    assert code is None and abandoned["status"] == "abandoned", abandoned
    fork = story.get_campaign(c["id"]).active_branch_id
    assert fork != first
    for branch_id, status in ((first, "resolved"), (fork, "abandoned")):
        code, seen = doors.call(door, "list_threads", player, cid, {"branch_id": branch_id})
        assert code is None and [t["status"] for t in seen] == [status], (branch_id, seen)
