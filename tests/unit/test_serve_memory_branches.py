"""Memories and summaries are read for the position named, through both doors: ``branch_id`` reads that
branch's line (its tip, or with ``turn_id`` that turn seen from the branch), as the state and the turns do.

Before, ``list_memories`` and ``list_summaries`` took no ``branch_id`` (the request was refused as invalid) and
only the head's line, or a turn's, could be read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


@pytest.fixture
def doors() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with (
        api_services() as services,
        TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
    ):
        yield services, Doors(client)


def _texts(answer: Any) -> set[str]:
    return {record["text"] for record in answer}


def test_memories_and_summaries_are_read_for_the_branch_named(doors: tuple[Any, Doors]) -> None:
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile, Summary, SummaryScope

    services, d = doors
    story = services.story
    world = story.create_world("Ashfall")
    campaign = story.create_campaign(world.id, "Forks", StoryProfile(genre="fantasy"))
    other = story.create_campaign(world.id, "Elsewhere", StoryProfile(genre="fantasy"))
    cid = campaign.id
    gm = services.keys.create("gm", campaigns=[cid], role=KeyRole.GM)[0]
    player = services.keys.create("player", campaigns=[cid])[0]
    t1 = story.add_turn(cid, "I enter the hall.").id
    scene = story.start_scene(cid, title="The hall")
    made = story.propose(
        scene.id, type="entity", content={"kind": "character", "name": "Ada"}, authority="gm", confidence=1.0
    )
    story.commit(scene.id, [made.id])  # at t1: on both lines
    hero = next(e.id for e in story.state(cid).entities if e.name == "Ada")
    t2 = story.add_turn(cid, "I climb the stair.").id
    main = story.get_campaign(cid).active_branch_id

    def remember(text: str) -> None:
        body = {"observer_entity_id": hero, "text": text, "visibility": {"audience": "public"}}
        code, answer = d.call("rest", "add_memory", gm, {"campaign_id": cid}, body)
        assert code is None, answer
        head = story.get_campaign(cid).head_turn_id
        story.add_summary(Summary(campaign_id=cid, scope=SummaryScope.SESSION, anchor_turn_id=head, text=text))

    remember("On the stair.")  # at t2, on main
    code, branch = d.call("mcp", "create_branch", gm, {"campaign_id": cid}, {"from_turn_id": t1, "name": "cellar"})
    assert code is None, branch
    t3 = story.add_turn(cid, "I go down to the cellar.").id  # the head is on the new branch
    remember("In the cellar.")
    code, _ = d.call("rest", "switch_branch", gm, {"campaign_id": cid, "branch_id": main}, {})
    assert code is None

    for door in ("rest", "mcp"):
        for name in ("list_memories", "list_summaries"):

            def read(body: dict[str, Any], key: str = player, door: str = door, name: str = name) -> Any:
                code, answer = d.call(door, name, key, {"campaign_id": cid}, body)
                assert code is None, (door, name, body, answer)
                return _texts(answer)

            assert read({}) == {"On the stair."}, (door, name)  # the head's line (main, switched back)
            assert read({"branch_id": branch["id"]}) == {"In the cellar."}, (door, name)
            assert read({"branch_id": main}) == {"On the stair."}, (door, name)
            assert read({"branch_id": branch["id"], "turn_id": t3}) == {"In the cellar."}, (door, name)
            assert read({"branch_id": branch["id"], "turn_id": t1}) == set(), (door, name)  # before either
            assert read({"turn_id": t2}) == {"On the stair."}, (door, name)
            # a branch of another campaign, or of none, answers like a missing one
            foreign = story.get_campaign(other.id).active_branch_id
            for missing in (foreign, "br_nope"):
                code, answer = d.call(door, name, player, {"campaign_id": cid}, {"branch_id": missing})
                assert code == "not_found", (door, name, missing, answer)
