"""Recall, memories and summaries over the REST API, on the embedded stores with the real embedding model.

Recall finds a narrated turn by meaning and only on the line it is asked about (an undone turn is
not recalled from the new line, but is from its own); a character recalls only what they witnessed;
a retracted memory stays in the graph but is no longer listed or recalled; unknown records answer
404, and recall on a server without a memory index answers 501.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.story import Summary, SummaryScope
from tests.unit.recall_support import API, campaign, characters, ok, recall, turn
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

CARAVAN = "Hulda the smith whispers that bandits seized the salt caravan at the old ford."
FILLER = (
    "I buy a loaf of rye bread and a wedge of cheese.",
    "I climb the bell tower and watch the sunset over the harbour.",
    "I practise sword drills in the courtyard until my arms ache.",
)


@pytest.fixture
def services() -> Iterator[Any]:
    with api_services() as services:
        yield services


@pytest.fixture
def client(services: Any) -> Iterator[TestClient]:
    from serve.app import create_app

    with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client


def test_recall_finds_a_turn_by_meaning_on_its_line_only(client: TestClient) -> None:
    cid = campaign(client)
    told = turn(client, cid, CARAVAN)
    for text in FILLER:
        turn(client, cid, text)

    hits = recall(client, cid, "what happened to the merchants' wagons?")
    assert hits[0]["id"] == told and hits[0]["turn_id"] == told and hits[0]["kind"] == "turn"
    assert "salt caravan" in hits[0]["text"] and "The world answers" in hits[0]["text"]  # input and narration
    assert set(hits[0]["scores"]) <= {"vector", "text"} and hits[0]["score"] > 0
    assert len(recall(client, cid, "what happened to the merchants' wagons?", limit=2)) == 2
    assert recall(client, cid, "the caravan", kinds=["memory"]) == []

    # an undone turn is not recalled from the line that replaced it, but still is from its own
    hidden = turn(client, cid, "I bury the golden idol under the old oak by the mill.")
    assert recall(client, cid, "where is the idol hidden?", limit=1)[0]["id"] == hidden
    ok(client.post(f"{API}/campaigns/{cid}/undo"))
    replaced = turn(client, cid, "I walk down to the docks instead.")
    assert hidden not in {h["id"] for h in recall(client, cid, "where is the idol hidden?")}
    assert replaced in {h["id"] for h in recall(client, cid, "where is the idol hidden?")}
    as_of = recall(client, cid, "where is the idol hidden?", as_of_turn_id=hidden)
    assert as_of[0]["id"] == hidden

    # as of an earlier turn: nothing after it
    early = recall(client, cid, "sword drills in the courtyard", as_of_turn_id=told)
    assert [h["id"] for h in early] == [told]


def test_memories_are_listed_added_observed_and_retracted(client: TestClient, services: Any) -> None:
    cid = campaign(client)
    before = turn(client, cid, "We reach the village at dusk.")
    people = characters(client, cid, "Ayla", "Bren")
    ayla, bren = people["Ayla"], people["Bren"]
    told = turn(client, cid, CARAVAN)

    mine = ok(
        client.post(
            f"{API}/campaigns/{cid}/memories",
            json={"observer_entity_id": ayla, "text": "Hulda said the caravan was taken at the ford.", "salience": 0.9},
        ),
        201,
    )
    assert mine["anchor_turn_id"] == told and mine["campaign_id"] == cid  # the head by default
    theirs = ok(
        client.post(
            f"{API}/campaigns/{cid}/memories",
            json={
                "observer_entity_id": bren,
                "kind": "emotion",
                "text": "Bren distrusts the smith and her whispering.",
                "anchor_turn_id": told,
                "subject_entity_ids": [ayla],
            },
        ),
        201,
    )

    listed = ok(client.get(f"{API}/campaigns/{cid}/memories"))
    assert {m["id"] for m in listed} == {mine["id"], theirs["id"]}
    only_ayla = ok(client.get(f"{API}/campaigns/{cid}/memories", params={"observer_entity_id": ayla}))
    assert [m["id"] for m in only_ayla] == [mine["id"]]
    assert ok(client.get(f"{API}/campaigns/{cid}/memories", params={"turn_id": before})) == []  # before the anchor

    # a character recalls only what they witnessed or were told
    as_ayla = recall(client, cid, "what happened to the caravan?", observer_entity_id=ayla)
    assert {h["id"] for h in as_ayla} == {mine["id"]}
    assert recall(client, cid, "what happened to the caravan?", kinds=["memory"])[0]["id"] == mine["id"]

    # a memory is retracted, not deleted: marked with when and why, no longer listed or recalled
    retracted = ok(
        client.post(f"{API}/campaigns/{cid}/memories/{mine['id']}/retract", json={"reason": "Hulda lied to her."})
    )
    assert retracted["id"] == mine["id"] and retracted["retraction_reason"] == "Hulda lied to her."
    assert retracted["retracted_at"] is not None
    assert [m["id"] for m in ok(client.get(f"{API}/campaigns/{cid}/memories"))] == [theirs["id"]]
    assert recall(client, cid, "what happened to the caravan?", observer_entity_id=ayla) == []
    assert mine["id"] not in {h["id"] for h in recall(client, cid, "what happened to the caravan?")}
    assert services.story.get_memory(cid, mine["id"]).retraction_reason == "Hulda lied to her."  # still in the graph
    again = client.post(f"{API}/campaigns/{cid}/memories/{mine['id']}/retract", json={"reason": "twice"})
    assert again.status_code == 409, again.text
    # a rebuild of the index from the graph leaves it out too
    services.story.rebuild_recall(cid)
    assert recall(client, cid, "what happened to the caravan?", observer_entity_id=ayla) == []

    # a player key may add memories but not retract them
    key, _ = services.keys.create("table", campaigns=[cid])
    player = {"Authorization": f"Bearer {key}"}
    refused = client.post(
        f"{API}/campaigns/{cid}/memories/{theirs['id']}/retract", json={"reason": "no"}, headers=player
    )
    assert refused.status_code == 403, refused.text
    # a memory is known to its observer: Bren's player reads it, a player key of no character does not
    assert ok(client.get(f"{API}/campaigns/{cid}/memories", headers=player)) == []
    brens, _ = services.keys.create("Bren's player", campaigns=[cid], character_entity_id=bren)
    as_bren = ok(client.get(f"{API}/campaigns/{cid}/memories", headers={"Authorization": f"Bearer {brens}"}))
    assert [m["id"] for m in as_bren] == [theirs["id"]]


def test_summaries_are_read_along_the_line(client: TestClient, services: Any) -> None:
    cid = campaign(client)
    first = turn(client, cid, "We leave the city by the south gate.")
    second = turn(client, cid, "We camp by the river.")
    scene = services.story.start_scene(cid, title="The road")
    summary = services.story.add_summary(
        Summary(campaign_id=cid, scope=SummaryScope.SCENE, scene_id=scene.id, anchor_turn_id=second, text="We left.")
    )
    assert [s["id"] for s in ok(client.get(f"{API}/campaigns/{cid}/summaries"))] == [summary.id]
    assert ok(client.get(f"{API}/campaigns/{cid}/summaries", params={"turn_id": first})) == []
    assert recall(client, cid, "leaving", kinds=["summary"])[0]["id"] == summary.id


def test_unknown_records_answer_404_and_bad_input_400(client: TestClient) -> None:
    cid = campaign(client)
    other = campaign(client, name="Another Table")
    foreign = turn(client, other, "Elsewhere, a bell rings.")
    missing = {
        "recall": client.post(f"{API}/campaigns/camp_nope/recall", json={"query": "anything"}),
        "memories": client.get(f"{API}/campaigns/camp_nope/memories"),
        "summaries": client.get(f"{API}/campaigns/camp_nope/summaries"),
        "add": client.post(f"{API}/campaigns/camp_nope/memories", json={"observer_entity_id": "ent_x", "text": "x"}),
        "retract": client.post(f"{API}/campaigns/{cid}/memories/mem_nope/retract", json={"reason": "gone"}),
        "as_of": client.post(f"{API}/campaigns/{cid}/recall", json={"query": "bell", "as_of_turn_id": foreign}),
        "turn_id": client.get(f"{API}/campaigns/{cid}/memories", params={"turn_id": foreign}),
    }
    for what, response in missing.items():
        assert response.status_code == 404, (what, response.text)
        assert response.json()["error"] == "not_found", what
    assert "mem_nope" in missing["retract"].json()["message"]
    assert "camp_nope" in missing["memories"].json()["message"]

    # no turn yet to anchor a memory to; a blank query; an unknown observer at the head
    no_turn = client.post(f"{API}/campaigns/{cid}/memories", json={"observer_entity_id": "ent_x", "text": "x"})
    assert no_turn.status_code == 400 and "no turn" in no_turn.json()["message"]
    assert client.post(f"{API}/campaigns/{cid}/recall", json={"query": ""}).status_code == 422
    turn(client, cid, "I wait.")
    ghost = client.post(f"{API}/campaigns/{cid}/memories", json={"observer_entity_id": "ent_ghost", "text": "boo"})
    # a reference of the wrong kind or to nothing is the request's fault: 400 naming the field (issue 25, part 5)
    assert ghost.status_code == 400 and "ent_ghost" in ghost.json()["message"], ghost.text


def test_recall_without_a_memory_index_answers_501(services: Any) -> None:
    from serve.app import create_app
    from story.service import StoryService

    bare = dataclasses.replace(services, story=StoryService(services.story.graph, services.story.blobs))
    with TestClient(create_app(bare), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        cid = campaign(client)
        response = client.post(f"{API}/campaigns/{cid}/recall", json={"query": "anything"})
        assert response.status_code == 501, response.text
        assert response.json()["error"] == "not_supported" and "memory index" in response.json()["message"]
        assert client.post(f"{API}/campaigns/camp_nope/recall", json={"query": "x"}).status_code == 404
        assert ok(client.get(f"{API}/campaigns/{cid}/memories")) == []  # listings need no index


def test_the_openapi_declares_the_memory_routes(client: TestClient) -> None:
    paths = ok(client.get("/openapi.json"))["paths"]
    recall_post = paths["/api/v1/campaigns/{campaign_id}/recall"]["post"]["responses"]
    assert {"404", "501"} <= set(recall_post) and "409" not in recall_post
    retract = paths["/api/v1/campaigns/{campaign_id}/memories/{memory_id}/retract"]["post"]["responses"]
    assert {"403", "404", "409"} <= set(retract)
    assert "get" in paths["/api/v1/campaigns/{campaign_id}/summaries"]
    assert {"get", "post"} <= set(paths["/api/v1/campaigns/{campaign_id}/memories"])
