"""The MCP server at /mcp, driven by the MCP SDK's own client over streamable HTTP (a real uvicorn server)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from schemas.knowledge import Library, LibraryType
from tests.unit.serve_support import api_services, extraction, new_character, running

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

SHIPPED_TOOLS = {
    "search_knowledge",
    "search_by_category",
    "list_libraries",
    "list_collections",
    "get_item",
    "get_concepts",
    "get_entry_facts",
    "get_health",
    "get_state_as_of",
    "get_provenance",
    "list_house_rules",
    "propose_change",
    "recall",
    "list_memories",
    "add_memory",
    "retract_memory",
    "list_summaries",
}
"""The tools before every operation had one: their names and arguments stay."""


@pytest.fixture
def server() -> Iterator[tuple[str, Any]]:
    from serve.app import create_app

    with api_services(answers=[extraction(new_character("Old Tam"))]) as services, running(create_app(services)) as url:
        yield url, services


@asynccontextmanager
async def session(url: str, key: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def _json(result: Any) -> Any:
    assert not result.isError, result.content
    if getattr(result, "structuredContent", None) and "result" in result.structuredContent:
        return result.structuredContent["result"]
    return json.loads(result.content[0].text)


def _campaign_with_a_scene(services: Any) -> tuple[str, str, str]:
    from schemas.story import StoryProfile

    world = services.story.create_world("Harbour Town")
    campaign = services.story.create_campaign(world.id, "Tides", StoryProfile(genre="fantasy"))
    turn = services.story.add_turn(campaign.id, "I walk the docks.", narration="Gulls wheel overhead.")
    scene = services.story.start_scene(campaign.id)
    return campaign.id, turn.id, scene.id


def test_tools_resources_and_knowledge_over_mcp(server: tuple[str, Any]) -> None:
    url, services = server
    library = services.catalog.save_library(Library(name="Fate SRD", type=LibraryType.RULEBOOK))

    async def scenario() -> None:
        async with session(url) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            from serve.operations import OPERATIONS

            assert tools == {op.name for op in OPERATIONS.values() if op.mcp} and tools >= SHIPPED_TOOLS
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert resources == {"lorekeeper://library-types", "lorekeeper://libraries"}
            types = json.loads((await client.read_resource("lorekeeper://library-types")).contents[0].text)
            assert set(types) == {t.value for t in LibraryType} and "max_tokens" in json.dumps(types["rulebook"])
            libraries = _json(await client.call_tool("list_libraries", {}))
            assert [lib["name"] for lib in libraries] == ["Fate SRD"]
            assert _json(await client.call_tool("list_collections", {"library_uid": library.uid})) == []
            assert _json(await client.call_tool("get_health", {}))["status"] == "ok"
            found = _json(await client.call_tool("search_knowledge", {"query": "how do aspects work", "limit": 3}))
            hits = found["hits"]  # the REST answer: query, hits, took_ms
            assert hits == []  # nothing ingested in this store: an empty answer, not an error
            by_type = await client.call_tool("search_by_category", {"query": "x", "library_type": "rulebook"})
            assert not by_type.isError
            wrong = await client.call_tool("search_by_category", {"query": "x", "library_type": "cookbook"})
            assert wrong.isError
            missing = await client.call_tool("get_item", {"item_uid": "item_nope"})
            assert missing.isError and "not_found" in missing.content[0].text

    anyio.run(scenario)
    from prometheus_client import REGISTRY

    assert (
        REGISTRY.get_sample_value("lorekeeper_mcp_tool_invocations_total", {"tool": "get_health", "status": "ok"}) >= 1
    )
    assert REGISTRY.get_sample_value(
        "lorekeeper_mcp_tool_invocations_total", {"tool": "get_item", "status": "not_found"}
    )


def test_play_tools_keep_to_the_key_s_campaigns(server: tuple[str, Any]) -> None:
    url, services = server
    mine, my_turn, my_scene = _campaign_with_a_scene(services)
    theirs, their_turn, their_scene = _campaign_with_a_scene(services)
    key, info = services.keys.create("table", campaigns=[mine])
    key_id = info.id

    async def scenario() -> None:
        async with session(url, key) as client:
            state = _json(await client.call_tool("get_state_as_of", {"campaign_id": mine, "turn_id": my_turn}))
            assert state["campaign_id"] == mine
            provenance = _json(await client.call_tool("get_provenance", {"campaign_id": mine, "turn_id": my_turn}))
            assert provenance["turn_id"] == my_turn
            assert _json(await client.call_tool("list_house_rules", {"campaign_id": mine})) == []
            denied = await client.call_tool("list_house_rules", {"campaign_id": theirs})
            assert denied.isError and "forbidden" in denied.content[0].text
            content = {"type": "event", "title": "The tide turns"}
            proposed = _json(
                await client.call_tool(
                    "propose_change",
                    {
                        "scene_id": my_scene,
                        "type": "event",
                        "content": content,
                        "authority": "player",
                        "evidence": {"turn_ids": [my_turn]},
                    },
                )
            )
            assert proposed["status"] == "pending" and proposed["proposed_by"] == f"player:{key_id}"

            claimed = await client.call_tool(
                "propose_change",
                {"scene_id": my_scene, "type": "event", "content": content, "authority": "gm"},
            )
            assert claimed.isError and "forbidden" in claimed.content[0].text  # a player key speaks as a player

            denied = await client.call_tool("get_state_as_of", {"campaign_id": theirs})
            assert denied.isError and "forbidden" in denied.content[0].text
            sideways = await client.call_tool("get_provenance", {"campaign_id": mine, "turn_id": their_turn})
            assert sideways.isError and "not_found" in sideways.content[0].text
            foreign = await client.call_tool(
                "propose_change", {"scene_id": their_scene, "type": "event", "content": content}
            )
            assert foreign.isError and "not_found" in foreign.content[0].text

    anyio.run(scenario)
    assert len(services.story.proposals(my_scene)) == 1 and services.story.proposals(their_scene) == []


def test_mcp_needs_a_key_once_keys_exist(server: tuple[str, Any]) -> None:
    import httpx

    url, services = server
    services.keys.create("ops", admin=True)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    refused = httpx.post(f"{url}/mcp", json=body, headers=headers)
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    wrong = httpx.post(f"{url}/mcp", json=body, headers={**headers, "Authorization": "Bearer lk_x_y"})
    assert wrong.status_code == 401
