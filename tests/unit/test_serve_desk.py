"""The GM's desk over both doors (REST and MCP), as a GM and a player would use it.

A GM note holding a marker word is recalled for the GM and never for a player key, and never reaches a narrated
turn's prompt (the narrator narrates from the table's seat) until the GM shares it with the table; the player may
not touch notes at all. What happened between two turns is read by both, each as their seat may see it; sessions
are started, ended, summarized and listed with the summaries each reader may see; a prune is GM-only and
recorded.
"""

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

MARKER = "wyvernquill"


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services() as services:
        app = create_app(services)
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


def _recalled(doors: Doors, door: str, key: str, campaign_id: str, query: str) -> str:
    code, answer = doors.call(door, "recall", key, {"campaign_id": campaign_id}, {"query": query, "limit": 20})
    assert code is None, answer
    return " ".join(h["text"] for h in answer["hits"])


def _prompt(doors: Doors, gm: str, campaign_id: str, turn_id: str) -> str:
    ids = {"campaign_id": campaign_id, "turn_id": turn_id}
    code, provenance = doors.call("rest", "get_provenance", gm, ids, {})
    assert code is None and provenance["prompt_text"], provenance
    return str(provenance["prompt_text"])


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_gm_note_is_recalled_by_the_gm_never_by_a_player_nor_the_narrator(
    table: tuple[Any, Doors], door: str
) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    scene = story.start_scene(c["id"], title="The bell tower")
    story.add_turn(c["id"], "We climb the bell tower.", narration="Pigeons scatter from the rafters.")
    text = f"The {MARKER} bellringer is secretly the duke's spy."
    code, note = doors.call(door, "add_scene_note", gm, {"scene_id": scene.id}, {"text": text, "kind": "idea"})
    assert code is None and note["visibility"] == {"audience": "gm", "character_ids": []}, note

    # the player may not write, list, change or remove notes; a refused call writes nothing
    before = stores_dump(story.graph, story.recall_index, getattr(story.blobs, "root", None))
    assert doors.call(door, "add_scene_note", player, {"scene_id": scene.id}, {"text": "mine"})[0] == "forbidden"
    assert doors.call(door, "list_scene_notes", player, cid, {})[0] == "forbidden"
    one = {**cid, "note_id": note["id"]}
    assert doors.call(door, "update_scene_note", player, one, {"text": "x"})[0] == "forbidden"
    assert doors.call(door, "delete_scene_note", player, one, {})[0] == "forbidden"
    assert doors.call(door, "add_scene_note", gm, {"scene_id": scene.id}, {"text": ""})[0] == "validation_failed"
    assert doors.call(door, "update_scene_note", gm, one, {"done": True})[0] == "invalid_request"  # not a TODO
    assert stores_dump(story.graph, story.recall_index, getattr(story.blobs, "root", None)) == before

    query = f"{MARKER} bellringer duke spy"
    assert MARKER in _recalled(doors, door, gm, c["id"], query), "the GM does not recall their note"
    assert MARKER not in _recalled(doors, door, player, c["id"], query), "a player recalled a GM-only note"
    code, listed = doors.call(door, "list_scene_notes", gm, cid, {"scene_id": scene.id})
    assert code is None and [n["id"] for n in listed] == [note["id"]]

    # a turn whose input calls the note up: the narrator is never told it (its prompt is the table's)
    code, turn = doors.call(door, "play_turn", player, cid, {"text": f"Who is the {MARKER} bellringer spying for?"})
    assert code is None, turn
    prompt = _prompt(doors, gm, c["id"], turn["turn_id"])
    assert "duke's spy" not in prompt, "a GM-only note reached the narrator's prompt"

    # shared with the table, the player recalls it and the next turn's prompt may hold it
    assert doors.call(door, "update_scene_note", gm, one, {"visibility": {"audience": "public"}})[0] is None
    assert MARKER in _recalled(doors, door, player, c["id"], query)
    code, turn = doors.call(door, "play_turn", player, cid, {"text": f"Again: the {MARKER} bellringer and the duke?"})
    assert code is None and "duke's spy" in _prompt(doors, gm, c["id"], turn["turn_id"])

    code, removed = doors.call(door, "delete_scene_note", gm, one, {})
    assert code is None and removed["id"] == note["id"]
    assert "duke's spy" not in _recalled(doors, door, gm, c["id"], query)


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_what_happened_sessions_and_a_prune_over_the_doors(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    ayla = story.state(c["id"]).entities[0].id
    left = story.add_turn(c["id"], "We part ways at the crossroads.", narration="Dust on the wind.").id
    code, session = doors.call(door, "start_session", gm, cid, {"name": "The long ride"})
    assert code is None and session["to_turn_id"] is None, session
    assert doors.call(door, "start_session", player, cid, {})[0] == "forbidden"
    story.add_turn(c["id"], "Ayla rides to the abbey.", narration="The abbot greets her with a silver key.")
    scene = story.start_scene(c["id"], title="Abbey")
    for predicate, value, extra in (("ally", "the abbot", {}), ("plan", "steal the key", {"audience": "gm"})):
        content: dict[str, Any] = {"subject_entity_id": ayla, "predicate": predicate, "value": value}
        if extra:
            content["visibility"] = extra
        made = story.propose(scene.id, type="fact", content=content, authority="gm", confidence=1.0)
        story.commit(scene.id, [made.id])
    story.end_scene(scene.id)

    for key, sees_plan in ((gm, True), (player, False)):
        code, between = doors.call(door, "happenings_between", key, cid, {"from_turn_id": left})
        assert code is None and between["turns"] == 1, between
        text = str(between)
        assert "the abbot" in text and ("steal the key" in text) is sees_plan, (key == gm, between)
        assert [s["scene_id"] for s in between["scenes_ended"]] == [scene.id]

    span = {**cid, "span_id": session["id"]}
    code, ended = doors.call(door, "end_session", gm, span, {})
    assert code is None and ended["to_turn_id"] == story.get_campaign(c["id"]).head_turn_id, ended
    code, summary = doors.call(door, "summarize_span", gm, span, {"visibility": {"audience": "gm"}})
    assert code is None and summary["scope"] == "session" and "silver key" in summary["text"], summary
    for key, sees in ((gm, True), (player, False)):
        code, spans = doors.call(door, "list_spans", key, cid, {})
        mine = [s for s in spans if s["id"] == session["id"]]
        assert code is None and len(mine) == 1 and (mine[0]["summary"] is not None) is sees, spans

    assert doors.call(door, "prune_disposable", player, cid, {})[0] == "forbidden"
    code, record = doors.call(door, "prune_disposable", gm, cid, {"keep_turns": 0})
    assert code is None and record["takes"] == [] and record["branches"] == [], record
    code, prunes = doors.call(door, "list_prunes", gm, cid, {})
    assert code is None and [p["id"] for p in prunes] == [record["id"]]


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_list_takes_shows_the_live_takes_and_the_archived_ones_on_request(table: tuple[Any, Doors], door: str) -> None:
    """A GM listing a turn's takes sees the alternatives still in play; archived ones (with their disposition)
    only when asking for them, over both doors."""
    services, doors = table
    story = services.story
    c = _campaign(services)
    gm, player = c["gm"], c["player"]
    turn = story.add_turn(c["id"], "I call for the ferry.")
    first, second, third = (story.add_take(turn.id, n) for n in ("No one comes.", "A boat.", "Fog rolls in."))
    story.select_take(turn.id, second.id)
    set_aside = {"archived": True, "disposition": "disposable"}
    for take, changes in ((third, set_aside), (first, {"disposition": "retained"})):
        ids = {"campaign_id": c["id"], "turn_id": turn.id, "take_id": take.id}
        assert doors.call(door, "set_take_disposition", gm, ids, changes)[0] is None

    ids = {"campaign_id": c["id"], "turn_id": turn.id}
    for key in (gm, player):
        code, live = doors.call(door, "list_takes", key, ids, {})
        assert code is None and [t["id"] for t in live] == [first.id, second.id], live
        assert [t["selected"] for t in live] == [False, True] and not any(t["archived"] for t in live)
    code, every = doors.call(door, "list_takes", gm, ids, {"include_archived": True})
    assert code is None and [t["id"] for t in every] == [first.id, second.id, third.id], every
    shown = {t["id"]: (t["archived"], t["disposition"]) for t in every}
    assert shown == {first.id: (False, "retained"), second.id: (False, None), third.id: (True, "disposable")}
    assert doors.call(door, "list_takes", gm, ids, {"include_archived": "sometimes"})[0] == "validation_failed"
