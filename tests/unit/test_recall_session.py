"""Issue 13's "done when", over HTTP: a whole table session in which a memory forms at a scene's end and
is recalled by meaning thirty turns later, only on its branch, and the narrator's prompt snapshot
names the recalled turns.

The API runs in this process on the embedded stores with the real embedding model and the echo
engine in the narrator's place; every step is a request a client would send.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.unit.recall_support import API, campaign, characters, ok, recall, turn
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

TOLD = "The salt caravan never reached Greywater. Bandits took it at the old ford, and the reeve was paid to look away."
QUESTION = "What did the blacksmith tell us about the missing caravan?"
LATER = [
    f"{what} ({n})"
    for n in range(3)
    for what in (
        "I haggle with the fishmonger over the price of eels",
        "We cross the moor in a cold drizzle",
        "I patch the hole in my boot with tallow and leather",
        "Bren teaches the stable boy a card game",
        "We shelter in a shepherd's hut and cook barley soup",
        "I sharpen my dagger on a river stone",
        "An owl hoots as we set up camp under the pines",
        "I trade a copper ring for a jar of honey",
        "We watch a travelling troupe juggle torches in the square",
        "I write a letter home by candlelight",
    )
]


@pytest.fixture
def client() -> Iterator[TestClient]:
    from serve.app import create_app

    with (
        api_services() as services,
        TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
    ):
        yield client


def _recalled_turns(client: TestClient, campaign_id: str, turn_id: str) -> list[str]:
    """The turns a narrated turn's recall record names (those whose records made it into its prompt)."""
    provenance = ok(client.get(f"{API}/campaigns/{campaign_id}/turns/{turn_id}/provenance"))
    records = [r for r in provenance["retrievals"] if r["source"] == "recall"]
    assert len(records) == 1 and records[0]["error"] is None, provenance["retrievals"]
    return [h["turn_id"] for h in records[0]["recalled"] if h["used_in_prompt"]]


def _memories_section(client: TestClient, campaign_id: str, turn_id: str) -> str:
    prompt = ok(client.get(f"{API}/campaigns/{campaign_id}/turns/{turn_id}/provenance"))["prompt_text"]
    # the section is shown only when something was recalled, and ends at the next blank line
    parts = str(prompt).split("# Memories and summaries", 1)
    return parts[1].split("\n\n", 1)[0] if len(parts) == 2 else ""


def test_a_memory_formed_at_scene_end_is_recalled_thirty_turns_later_on_its_branch_only(client: TestClient) -> None:
    cid = campaign(client)
    arrival = turn(client, cid, "We ride into Brinemark at dusk.")
    cast = characters(client, cid, "Ayla", "Hulda")
    ayla, hulda = cast["Ayla"], cast["Hulda"]
    before = turn(client, cid, "Ayla ties the horses outside the forge.")

    # the scene: Ayla asks, Hulda the blacksmith tells her what became of the caravan
    scene = ok(
        client.post(
            f"{API}/campaigns/{cid}/scenes",
            json={"title": "The forge", "participant_entity_ids": [ayla, hulda]},
        ),
        201,
    )
    asked = turn(
        client,
        cid,
        "Hulda, have you heard anything about the salt caravan?",
        input_mode="dialogue",
        speaker={"kind": "player", "entity_id": ayla, "name": "Ayla"},
    )
    told = turn(
        client,
        cid,
        TOLD,
        input_mode="dialogue",
        speaker={"kind": "entity", "entity_id": hulda, "name": "Hulda"},
    )
    ok(client.post(f"{API}/scenes/{scene['id']}/end", json={}))

    # the scene's end formed Ayla's memories (story.formation): one holds what Hulda told her
    memories = ok(client.get(f"{API}/campaigns/{cid}/memories", params={"observer_entity_id": ayla}))
    claims = [m for m in memories if m["kind"] == "claim" and "old ford" in m["text"]]
    assert len(claims) == 1, memories
    memory = claims[0]
    assert memory["anchor_turn_id"] == told  # the scene's end turn: recalled only on this line

    # thirty turns of other business later
    for text in LATER:
        turn(client, cid, text)
    head = ok(client.get(f"{API}/campaigns/{cid}"))["head_turn_id"]
    assert len(ok(client.get(f"{API}/campaigns/{cid}/turns", params={"last": 1000}))) == 2 + 2 + len(LATER)

    # recall by meaning finds it: as Ayla remembers it, and as the table's record
    as_ayla = recall(client, cid, QUESTION, observer_entity_id=ayla, limit=5)
    assert {h["turn_id"] for h in as_ayla} <= {asked, told}  # the scene's records, thirty turns back
    mine = recall(client, cid, QUESTION, observer_entity_id=ayla, kinds=["memory"], limit=5)
    assert memory["id"] in {h["id"] for h in mine}
    table = {h["id"] for h in recall(client, cid, QUESTION, limit=8)}
    assert {memory["id"], told} <= table

    # the narrator recalls it for a question thirty turns on, and the turn's prompt snapshot names it
    musing = turn(client, cid, "I think back on what Hulda said about the caravan and the reeve.")
    assert told in _recalled_turns(client, cid, musing)
    assert "old ford" in _memories_section(client, cid, musing)

    # a branch forked before the scene never saw it: not recalled there, not in its narrator's prompt
    body = {"from_turn_id": before, "name": "the other road"}
    fork = ok(client.post(f"{API}/campaigns/{cid}/branches", json=body), 201)
    ok(client.post(f"{API}/campaigns/{cid}/branches/{fork['id']}/switch"))
    elsewhere = turn(client, cid, "I ask around the market about the salt caravan and the reeve.")
    hits = recall(client, cid, QUESTION, limit=20)
    assert memory["id"] not in {h["id"] for h in hits} and told not in {h["turn_id"] for h in hits}
    line = {t["id"] for t in ok(client.get(f"{API}/campaigns/{cid}/turns", params={"last": 1000}))}
    assert line >= {arrival, before, elsewhere} and {h["turn_id"] for h in hits} <= line  # the fork's own line
    assert told not in _recalled_turns(client, cid, elsewhere)
    assert "old ford" not in _memories_section(client, cid, elsewhere)
    # the scene was opened at the fork turn, so it is open on the fork too (scenes end per branch): Ayla
    # witnessed the fork's own turn there, and nothing of the first line's scene
    assert {h["id"] for h in recall(client, cid, QUESTION, observer_entity_id=ayla)} <= {elsewhere}
    assert ok(client.get(f"{API}/campaigns/{cid}/memories", params={"observer_entity_id": ayla})) == []

    # as of a turn of the first line it is still there, from the fork's head too
    again = recall(client, cid, QUESTION, observer_entity_id=ayla, as_of_turn_id=head, kinds=["memory"], limit=5)
    assert memory["id"] in {h["id"] for h in again}
