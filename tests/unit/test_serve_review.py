"""Review before canon over both doors (REST and MCP), as a GM and a player would: a turn's extractor proposes an
event at 0.45 and one at 0.92; the GM's queue says what the gate would do with each (a dry run that leaves the
graph, the recall index and the blobs byte-identical); the GM edits the low one into canon and rejects the high
one; the player may read the queue but not the verdicts or reviews, and may not review; an unknown proposal is 404 and a
malformed edit 422, with nothing written; provenance shows each review with who and when."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import API, Doors
from tests.unit.serve_support import api_services, extraction
from tests.unit.store_dump import stores_dump

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

STRANGER = {"content": {"type": "event", "title": "A stranger arrives"}, "confidence": 0.45, "quote": "stranger"}
ROOF = {"content": {"type": "event", "title": "The roof caves in"}, "confidence": 0.92, "quote": "roof"}
EDITED = {"type": "event", "title": "Bren the courier arrives", "description": "Soaked, with a sealed letter."}


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services(answers=[extraction(STRANGER, ROOF)] * 2 + [extraction()] * 20) as services:
        app = create_app(services)
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


def _campaign(services: Any) -> dict[str, Any]:
    """A campaign with its GM key and a player key playing Ayla."""
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile

    story = services.story
    world = story.create_world("Ashfall", axioms=["The dead stay dead."])
    campaign = story.create_campaign(world.id, "The Storm", StoryProfile(genre="fantasy"))
    cast = story.start_scene(campaign.id, title="Cast")
    story.commit(
        cast.id,
        [
            story.propose(
                cast.id, type="entity", authority="gm", confidence=1.0, content={"kind": "character", "name": "Ayla"}
            ).id
        ],
    )
    story.end_scene(cast.id)
    ayla = story.state(campaign.id).entities[0].id
    return {
        "id": campaign.id,
        "gm": services.keys.create("gm", campaigns=[campaign.id], role=KeyRole.GM)[0],
        "player": services.keys.create("player", campaigns=[campaign.id], character_entity_id=ayla)[0],
    }


def _dump(services: Any) -> dict[str, list[str]]:
    story = services.story
    return stores_dump(story.graph, story.recall_index, getattr(story.blobs, "root", None))


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_gm_reviews_the_extractors_proposals_before_canon(table: tuple[Any, Doors], door: str) -> None:
    services, doors = table
    c = _campaign(services)
    gm, player, cid = c["gm"], c["player"], {"campaign_id": c["id"]}
    code, turn = doors.call(door, "play_turn", player, cid, {"text": "A stranger bursts in; the roof groans."})
    assert code is None and len(turn["proposal_ids"]) == 2, turn
    low, high = turn["proposal_ids"]
    scene = {"scene_id": services.story.get_proposal(low).scene_id}

    # the queue: what the gate would do with each, and why; reading it writes nothing
    before = _dump(services)
    code, queue = doors.call(door, "list_proposals", gm, scene, {"status": "pending"})
    assert _dump(services) == before, "the dry run wrote something"
    assert code is None and [p["id"] for p in queue] == [low, high], queue
    verdict = {p["id"]: p["verdict"] for p in queue}
    assert verdict[low]["awaiting_review"] and verdict[low]["decision"]["status"] == "pending"
    assert "below the threshold 0.80" in verdict[low]["decision"]["rationale"]
    assert verdict[low]["if_accepted"]["status"] == "accepted"
    assert verdict[high]["decision"]["status"] == "accepted" and not verdict[high]["awaiting_review"]
    assert verdict[high]["unchecked_axioms"] == ["The dead stay dead."]  # no axiom judge bound here
    code, seen = doors.call(door, "list_proposals", player, scene, {"status": "pending"})
    assert code is None and [p["id"] for p in seen] == [low, high] and all(p["verdict"] is None for p in seen)

    # who may review, and what is refused with nothing written
    before = _dump(services)
    at_low = {**scene, "proposal_id": low}
    assert doors.call(door, "review_proposal", player, at_low, {"action": "accept", "rationale": "Mine."})[0] == (
        "forbidden"
    )
    unknown = {**scene, "proposal_id": "prop_0000"}
    assert doors.call(door, "review_proposal", gm, unknown, {"action": "accept", "rationale": "?"})[0] == "not_found"
    for bad in (
        {"action": "edit", "content": {"type": "event"}, "rationale": "No title."},  # the content is typed
        {"action": "edit", "rationale": "Nothing to edit with."},
        {"action": "accept", "content": EDITED, "rationale": "Accept takes no content."},
        {"action": "approve", "rationale": "Not an action."},
        {"action": "reject"},  # a rationale is required
    ):
        assert doors.call(door, "review_proposal", gm, at_low, bad)[0] == "validation_failed", bad
    assert _dump(services) == before, "a refused review wrote something"

    # the GM edits the low one (accepting it with its own words) and rejects the high one
    code, reviewed = doors.call(
        door, "review_proposal", gm, at_low, {"action": "edit", "content": EDITED, "rationale": "He is Bren."}
    )
    assert code is None and reviewed["review"]["action"] == "edit" and reviewed["review"]["reviewer"].startswith("gm:")
    assert reviewed["content"]["title"] == "A stranger arrives"  # the proposal keeps what was proposed
    at_high = {**scene, "proposal_id": high}
    rejected = {"action": "reject", "rationale": "The inn must stand."}
    assert doors.call(door, "review_proposal", gm, at_high, rejected)[0] is None
    code, queue = doors.call(door, "list_proposals", gm, scene, {"status": "pending"})
    verdict = {p["id"]: p["verdict"]["decision"] for p in queue}
    assert verdict[low]["status"] == "accepted" and verdict[low]["authority"] == "gm"
    assert verdict[high]["status"] == "rejected" and "The inn must stand." in verdict[high]["rationale"]
    code, seen = doors.call(door, "list_proposals", player, scene, {"status": "pending"})
    assert all(p["review"] is None for p in seen)  # the GM's words are the GM's

    # the scene's end applies the reviews: the edit is canon, the rejected one never
    code, report = doors.call(door, "end_scene", gm, scene, {})
    assert code is None, report
    decided = {d["proposal_id"]: d for d in report["decisions"]}
    assert decided[low]["status"] == "accepted" and decided[low]["authority"] == "gm"
    assert decided[high]["status"] == "rejected" and report["awaiting_review"] == []
    rows = services.story.graph.run(
        "MATCH (h:Happening {campaign_id: $c})-[:ESTABLISHED_BY]->(e:StateEvent)-[:FROM_REVIEW]->(r:ProposalReview) "
        "RETURN h.title AS title, h.proposal_uid AS proposal, h.review_uid AS review, r.proposal_uid AS reviewed",
        {"c": c["id"]},
    )
    assert [(r["title"], r["proposal"], r["reviewed"]) for r in rows] == [("Bren the courier arrives", low, low)]
    titles = services.story.graph.run("MATCH (h:Happening {campaign_id: $c}) RETURN h.title AS t", {"c": c["id"]})
    assert [r["t"] for r in titles] == ["Bren the courier arrives"]

    # provenance: each review with who and when, for the GM; a player's view has none (the GM's notes)
    ids = {**cid, "turn_id": turn["turn_id"]}
    code, provenance = doors.call(door, "get_provenance", gm, ids, {})
    assert code is None
    shown = [(r["proposal_id"], r["action"], r["rationale"]) for r in provenance["reviews"]]
    assert shown == [(low, "edit", "He is Bren."), (high, "reject", "The inn must stand.")]
    assert rows[0]["review"] == provenance["reviews"][0]["id"]
    assert all(r["reviewer"].startswith("gm:") and r["reviewed_at"] for r in provenance["reviews"])
    assert doors.call(door, "get_provenance", player, ids, {})[1]["reviews"] == []


def test_the_rest_door_answers_403_404_and_422(table: tuple[Any, Doors]) -> None:
    services, doors = table
    c = _campaign(services)
    story = services.story
    scene = story.start_scene(c["id"], title="At the door")
    turn = story.add_turn(c["id"], "A knock.", narration="Someone knocks.")
    proposal = story.propose(
        scene.id,
        type="event",
        content={"type": "event", "title": "A knock"},
        authority="system",
        confidence=0.45,
        turn_id=turn.id,
        evidence={"turn_ids": [turn.id]},
    )
    url = f"{API}/scenes/{scene.id}/proposals/{proposal.id}/review"
    client = doors.client
    as_player = {"Authorization": f"Bearer {c['player']}"}
    as_gm = {"Authorization": f"Bearer {c['gm']}"}
    accept = {"action": "accept", "rationale": "Yes."}
    assert client.post(url, json=accept, headers=as_player).status_code == 403
    assert client.post(url.replace(proposal.id, "prop_nope"), json=accept, headers=as_gm).status_code == 404
    bad = client.post(url, json={"action": "edit", "content": {"type": "fact"}, "rationale": "x"}, headers=as_gm)
    assert bad.status_code == 422 and "content" in bad.text
    assert story.get_proposal(proposal.id).review is None
    assert client.post(url, json=accept, headers=as_gm).status_code == 200
