"""The memory tools over MCP (the SDK's own client, streamable HTTP, a real uvicorn server): recall by
meaning, list, add and retract memories, read summaries, with the REST API's campaign scopes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from schemas.story import StoryProfile, Summary, SummaryScope
from tests.unit.serve_support import api_services, running
from tests.unit.test_serve_mcp import _json, session

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

MEMORY_TOOLS = {"recall", "list_memories", "add_memory", "retract_memory", "list_summaries"}


@pytest.fixture
def server() -> Iterator[tuple[str, Any]]:
    from serve.app import create_app

    with api_services() as services, running(create_app(services)) as url:
        yield url, services


def _table(services: Any) -> tuple[str, str, str, str]:
    """A campaign with a character, a turn where she is told of the caravan, and a turn after it."""
    story = services.story
    world = story.create_world("Brinemark")
    campaign = story.create_campaign(world.id, "The Salt Road", StoryProfile(genre="fantasy"))
    story.add_turn(campaign.id, "We reach the forge.", narration="Sparks fly from the anvil.")
    scene = story.start_scene(campaign.id, title="Cast")
    proposal = story.propose(
        scene.id, type="entity", content={"kind": "character", "name": "Ayla"}, authority="gm", confidence=1.0
    )
    story.end_scene(scene.id)
    ayla = "ent_" + proposal.id.split("_", 1)[1]
    told = story.add_turn(
        campaign.id,
        "Hulda whispers that bandits seized the salt caravan at the old ford.",
        narration="The smith glances at the door before she speaks.",
    )
    story.add_turn(campaign.id, "I buy a loaf of rye bread.", narration="The baker wraps it in cloth.")
    return campaign.id, ayla, told.id, scene.id


def _error(result: Any) -> str:
    assert result.isError, result.content
    return str(result.content[0].text)


def test_memory_tools_over_mcp(server: tuple[str, Any]) -> None:
    url, services = server
    cid, ayla, told, scene_id = _table(services)

    async def scenario() -> None:
        async with session(url) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools >= MEMORY_TOOLS

            found = _json(await client.call_tool("recall", {"campaign_id": cid, "query": "what became of the wagons?"}))
            assert found["campaign_id"] == cid and found["hits"][0]["turn_id"] == told

            added = _json(
                await client.call_tool(
                    "add_memory",
                    {"campaign_id": cid, "observer_entity_id": ayla, "text": "Hulda fears the reeve.", "kind": "claim"},
                )
            )
            assert added["kind"] == "claim" and added["observer_entity_id"] == ayla
            listed = _json(await client.call_tool("list_memories", {"campaign_id": cid, "observer_entity_id": ayla}))
            assert [m["id"] for m in listed] == [added["id"]]
            as_ayla = _json(
                await client.call_tool(
                    "recall", {"campaign_id": cid, "query": "who is afraid of the reeve?", "observer_entity_id": ayla}
                )
            )
            assert [h["id"] for h in as_ayla["hits"]] == [added["id"]]
            early = _json(
                await client.call_tool("list_memories", {"campaign_id": cid, "turn_id": told})
            )  # anchored at the head, after `told`
            assert early == []

            retracted = _json(
                await client.call_tool(
                    "retract_memory", {"campaign_id": cid, "memory_id": added["id"], "reason": "a misheard word"}
                )
            )
            assert retracted["retraction_reason"] == "a misheard word" and retracted["retracted_at"]
            assert _json(await client.call_tool("list_memories", {"campaign_id": cid})) == []
            again = _json(
                await client.call_tool(
                    "recall", {"campaign_id": cid, "query": "who is afraid of the reeve?", "observer_entity_id": ayla}
                )
            )
            assert again["hits"] == []

            summary = services.story.add_summary(
                Summary(campaign_id=cid, scope=SummaryScope.SCENE, scene_id=scene_id, anchor_turn_id=told, text="Told.")
            )
            summaries = _json(await client.call_tool("list_summaries", {"campaign_id": cid}))
            assert summary.id in [s["id"] for s in summaries]

            assert "not_found" in _error(await client.call_tool("list_memories", {"campaign_id": "camp_nope"}))
            assert "not_found" in _error(
                await client.call_tool("retract_memory", {"campaign_id": cid, "memory_id": "mem_nope", "reason": "x"})
            )

        # a player key of another campaign reaches nothing here; one of this campaign may not retract
        other_key, _ = services.keys.create("elsewhere", campaigns=["camp_other"])
        async with session(url, other_key) as client:
            assert "forbidden" in _error(await client.call_tool("recall", {"campaign_id": cid, "query": "the caravan"}))
        player_key, _ = services.keys.create("table", campaigns=[cid], character_entity_id=ayla)  # plays Ayla
        async with session(url, player_key) as client:
            memory = _json(
                await client.call_tool(
                    "add_memory", {"campaign_id": cid, "observer_entity_id": ayla, "text": "The bread was stale."}
                )
            )
            refused = _error(
                await client.call_tool("retract_memory", {"campaign_id": cid, "memory_id": memory["id"], "reason": "x"})
            )
            assert "forbidden" in refused

    anyio.run(scenario)
