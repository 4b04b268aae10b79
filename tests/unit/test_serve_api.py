"""The HTTP API on the embedded stores, with the echo engine bound where production binds vLLM.

A whole table session is played over HTTP; then the rules every route follows: tenancy, JSON errors
with the right status, size limits, capacity, the loopback-only open mode.
"""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from schemas.errors import ConfigError
from schemas.serving import ServeSettings
from tests.unit.serve_support import api_services, extraction, new_character, sse_events

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

API = "/api/v1"


@pytest.fixture
def services() -> Iterator[Any]:
    answers = [extraction(new_character("Mira the Smith")), extraction(), extraction()]
    with api_services(answers=answers) as services:
        yield services


@pytest.fixture
def client(services: Any) -> Iterator[TestClient]:
    from serve.app import create_app

    with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client


def _campaign(client: TestClient, headers: dict[str, str] | None = None, name: str = "The Ember Road") -> str:
    world = client.post(f"{API}/worlds", json={"name": "Ashfall", "axioms": ["Magic has a price."]}, headers=headers)
    assert world.status_code == 201, world.text
    body = {"world_id": world.json()["id"], "name": name, "profile": {"genre": "fantasy", "tone": "wry"}}
    campaign = client.post(f"{API}/campaigns", json=body, headers=headers)
    assert campaign.status_code == 201, campaign.text
    return str(campaign.json()["id"])


def test_a_whole_table_session_over_http(client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = _campaign(client)

    # a turn, answered as JSON: narrated, kept, and its extracted proposal staged on a scene
    first = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I greet the smith."})
    assert first.status_code == 201, first.text
    outcome = first.json()
    assert "I greet the smith." in outcome["narration"]
    assert len(outcome["proposal_ids"]) == 1 and outcome["dropped"] == []
    assert outcome["generation"]["model"] == "echo-narrator"
    turn1 = outcome["turn_id"]

    # a streamed turn: server-sent events, the narration piece by piece, then the outcome
    streamed = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I ask about the road.", "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.text)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "turn" and kinds[-1] == "done" and kinds.count("delta") >= 3
    pieces = "".join(data["text"] for kind, data in events if kind == "delta")
    assert pieces.strip() == events[-1][1]["narration"]
    turn2 = events[0][1]["turn_id"]

    history = client.get(f"{API}/campaigns/{cid}/turns").json()
    assert [t["id"] for t in history] == [turn1, turn2]

    # a retry adds a take, selecting the first one again keeps both
    retry = client.post(f"{API}/campaigns/{cid}/turns/{turn2}/takes", json={})
    assert retry.status_code == 201, retry.text
    takes = client.get(f"{API}/campaigns/{cid}/turns/{turn2}/takes").json()
    assert len(takes) == 2
    selected = client.put(f"{API}/campaigns/{cid}/turns/{turn2}/takes/{takes[0]['id']}/select")
    assert selected.status_code == 200 and selected.json()["id"] == takes[0]["id"]

    # the scene holds the proposal; nothing is canon until the scene ends
    scenes = client.get(f"{API}/campaigns/{cid}/scenes").json()
    assert len(scenes) == 1 and scenes[0]["status"] == "active"
    scene = scenes[0]["id"]
    pending = client.get(f"{API}/scenes/{scene}/proposals", params={"status": "pending"}).json()
    assert [p["id"] for p in pending] == outcome["proposal_ids"]
    assert client.get(f"{API}/campaigns/{cid}/state").json()["entities"] == []

    ended = client.post(f"{API}/scenes/{scene}/end", json={"summary": "Met Mira at the forge."})
    assert ended.status_code == 200, ended.text
    report = ended.json()
    assert [d["status"] for d in report["decisions"]] == ["accepted"]
    assert report["decisions"][0]["authority"] == "system"
    state = client.get(f"{API}/campaigns/{cid}/state").json()
    assert [e["name"] for e in state["entities"]] == ["Mira the Smith"]
    # ending again changes nothing
    assert client.post(f"{API}/scenes/{scene}/end").json()["already_completed"] is True

    # undo moves the head; a new turn there forks a branch and keeps the old future
    undone = client.post(f"{API}/campaigns/{cid}/undo").json()
    assert undone["head_turn_id"] == turn1
    fork = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I leave the forge instead."})
    assert fork.status_code == 201
    branches = client.get(f"{API}/campaigns/{cid}/branches").json()
    assert len(branches) == 2
    original = next(b for b in branches if b["id"] != client.get(f"{API}/campaigns/{cid}").json()["active_branch_id"])
    switched = client.post(f"{API}/campaigns/{cid}/branches/{original['id']}/switch")
    assert switched.status_code == 200 and switched.json()["active_branch_id"] == original["id"]

    # checkpoints and what was true when
    checkpoint = client.post(f"{API}/campaigns/{cid}/checkpoints", json={"name": "at the forge", "turn_id": turn1})
    assert checkpoint.status_code == 201, checkpoint.text
    restored = client.post(f"{API}/campaigns/{cid}/checkpoints/{checkpoint.json()['id']}/restore")
    assert restored.status_code == 200 and restored.json()["head_turn_id"] == turn1
    # Mira became canon at the end of the scene, after turn 2: not yet true at turn 1
    assert client.get(f"{API}/campaigns/{cid}/state", params={"turn_id": turn1}).json()["entities"] == []
    at_turn2 = client.get(f"{API}/campaigns/{cid}/state", params={"turn_id": turn2}).json()
    assert [e["name"] for e in at_turn2["entities"]] == ["Mira the Smith"]

    # provenance: the prompt the narrator saw, the rules and axioms first
    provenance = client.get(f"{API}/campaigns/{cid}/turns/{turn1}/provenance")
    assert provenance.status_code == 200, provenance.text
    assert provenance.json()["turn_id"] == turn1

    # export, refuse a second copy into the same store, import into another
    exported = client.get(f"{API}/campaigns/{cid}/export")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    assert "manifest.json" in zipfile.ZipFile(io.BytesIO(exported.content)).namelist()
    again = client.post(f"{API}/campaigns/import", content=exported.content)
    assert again.status_code == 409 and again.json()["error"] == "conflict"

    from schemas.settings import get_settings
    from serve.app import create_app

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(tmp_path / "elsewhere"))
    get_settings.cache_clear()
    with api_services() as other, TestClient(create_app(other, mcp=False), base_url="http://127.0.0.1") as there:
        imported = there.post(f"{API}/campaigns/import", content=exported.content)
        assert imported.status_code == 201, imported.text
        assert imported.json()["id"] == cid
        at_turn2 = there.get(f"{API}/campaigns/{cid}/state", params={"turn_id": turn2}).json()
        assert [e["name"] for e in at_turn2["entities"]] == ["Mira the Smith"]


def test_gate_decisions_and_requests_are_counted(client: TestClient) -> None:
    cid = _campaign(client)
    client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I greet the smith."})
    scene = client.get(f"{API}/campaigns/{cid}/scenes").json()[0]["id"]
    client.post(f"{API}/scenes/{scene}/end")
    metrics = client.get("/metrics").text
    assert 'lorekeeper_gate_decisions_total{authority="system",decision="accepted"}' in metrics
    assert 'lorekeeper_http_requests_total{route="/api/v1/campaigns/{campaign_id}/turns",status="201"}' in metrics
    assert "lorekeeper_narrator_time_to_first_token_seconds_bucket" in metrics


def test_a_malformed_extraction_is_dropped_with_its_reason(tmp_path: Path) -> None:
    from serve.app import create_app

    bad = '{"proposals": [{"content": {"type": "entity", "kind": "dragon-ish", "name": "X"}, "confidence": 0.9}]}'
    with (
        api_services(answers=["the model rambled instead of JSON", bad]) as services,
        TestClient(create_app(services, mcp=False), base_url="http://127.0.0.1") as client,
    ):
        cid = _campaign(client)
        prose = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I wait."}).json()
        assert prose["proposal_ids"] == [] and "not JSON" in prose["dropped"][0]
        typed = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I wait more."}).json()
        assert typed["proposal_ids"] == [] and typed["dropped"][0].startswith("proposal 0: content.entity.kind")
        assert services.story.extraction_notes(typed["turn_id"]) == typed["dropped"]
        # the state is untouched, and the turns are kept
        assert client.get(f"{API}/campaigns/{cid}/state").json()["entities"] == []
        assert len(client.get(f"{API}/campaigns/{cid}/turns").json()) == 2


def test_errors_are_json_with_the_right_status_and_no_trace(client: TestClient, services: Any) -> None:
    cid = _campaign(client)
    missing = client.get(f"{API}/campaigns/camp_nope")
    assert missing.status_code == 404 and missing.json() == {
        "error": "not_found",
        "message": "story: no campaign 'camp_nope'",
    }
    malformed = client.post(f"{API}/campaigns/{cid}/turns", json={"text": 12, "surprise": True})
    assert malformed.status_code == 422 and malformed.json()["error"] == "validation_failed"
    assert {p["where"] for p in malformed.json()["problems"]} == {"body.text", "body.surprise"}
    not_json = client.post(f"{API}/worlds", content=b"{not json", headers={"content-type": "application/json"})
    assert not_json.status_code == 422
    assert client.get("/api/v1/nowhere").json()["error"] == "no_such_route"  # not an unknown id
    assert client.delete(f"{API}/campaigns/{cid}").status_code == 405
    unknown_scene = client.post(f"{API}/scenes/scene_nope/end")
    assert unknown_scene.status_code == 404
    bad_proposal = client.post(f"{API}/campaigns/{cid}/scenes", json={"title": "x" * 10_000})  # names are bounded
    assert bad_proposal.status_code == 422

    def explode(*_: Any, **__: Any) -> None:
        raise RuntimeError("disk full at /srv/secret/path")

    services.story.get_world = explode
    failed = client.get(f"{API}/worlds/world_x")
    assert failed.status_code == 500
    assert failed.json()["error"] == "internal" and "secret" not in failed.text and "Traceback" not in failed.text


def test_bodies_over_the_limit_are_refused(tmp_path: Path) -> None:
    from serve.app import create_app

    serve = ServeSettings(api_host="127.0.0.1", max_request_bytes=4096, max_upload_bytes=8192)
    with api_services(serve) as services, TestClient(create_app(services, mcp=False), base_url="http://127.0.0.1") as c:
        cid = _campaign(c)
        big = c.post(f"{API}/campaigns/{cid}/turns", json={"text": "a" * 5000})
        assert big.status_code == 413 and big.json()["error"] == "request_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"text": "'
            yield b"b" * 5000
            yield b'"}'

        streamed = c.post(
            f"{API}/campaigns/{cid}/turns", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        # imports may be larger than other bodies, up to their own limit
        assert c.post(f"{API}/campaigns/import", content=b"x" * 6000).status_code == 400  # read, and not a zip
        assert c.post(f"{API}/campaigns/import", content=b"x" * 9000).status_code == 413


def test_over_capacity_turns_get_429_with_retry_after() -> None:
    from serve.app import create_app

    serve = ServeSettings(api_host="127.0.0.1", max_concurrent_turns=1)
    with api_services(serve, delay_s=0.05) as services:
        app = create_app(services, mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as c:
            first, second = _campaign(c, name="Table one"), _campaign(c, name="Table two")

        async def play_both() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as ac:
                body = {"text": "I tell a long story to everyone in the tavern tonight."}
                return list(
                    await asyncio.gather(
                        ac.post(f"{API}/campaigns/{first}/turns", json=body),
                        ac.post(f"{API}/campaigns/{second}/turns", json=body),
                    )
                )

        responses = asyncio.run(play_both())
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [201, 429]
        refused = next(r for r in responses if r.status_code == 429)
        assert refused.headers["Retry-After"] == "2" and refused.json()["error"] == "over_capacity"
        assert services.capacity.active == 0  # the slot is released


def test_campaign_keys_reach_their_campaigns_only(services: Any) -> None:
    from serve.app import create_app

    admin_key, _ = services.keys.create("gm", admin=True)
    admin = {"Authorization": f"Bearer {admin_key}"}
    with TestClient(create_app(services), base_url="http://127.0.0.1") as client:
        assert client.get(f"{API}/campaigns").status_code == 401  # the first key ends the open mode
        a, b = _campaign(client, admin, "Table A"), _campaign(client, admin, "Table B")
        key_a, info_a = services.keys.create("table a", campaigns=[a])
        as_a = {"Authorization": f"Bearer {key_a}"}
        turn_b = client.post(f"{API}/campaigns/{b}/turns", json={"text": "B plays."}, headers=admin).json()["turn_id"]
        scene_b = client.get(f"{API}/campaigns/{b}/scenes", headers=admin).json()[0]["id"]

        assert client.post(f"{API}/campaigns/{a}/turns", json={"text": "A plays."}, headers=as_a).status_code == 201
        assert [c["id"] for c in client.get(f"{API}/campaigns", headers=as_a).json()] == [a]
        for method, path in [
            ("GET", f"/campaigns/{b}"),
            ("GET", f"/campaigns/{b}/state"),
            ("POST", f"/campaigns/{b}/undo"),
            ("GET", f"/campaigns/{b}/export"),
            ("GET", f"/campaigns/{b}/turns"),
        ]:
            response = client.request(method, f"{API}{path}", headers=as_a)
            assert response.status_code == 403, (method, path, response.text)
        # reaching B's records through A's path, or directly, finds nothing
        sideways = client.get(f"{API}/campaigns/{a}/turns/{turn_b}/provenance", headers=as_a)
        nowhere = client.get(f"{API}/campaigns/{a}/turns/turn_nope/provenance", headers=as_a)
        assert sideways.status_code == nowhere.status_code == 404
        assert sideways.json()["message"] == nowhere.json()["message"].replace("turn_nope", turn_b)
        foreign = client.post(f"{API}/scenes/{scene_b}/end", headers=as_a)
        missing = client.post(f"{API}/scenes/scene_nope/end", headers=as_a)
        assert foreign.status_code == missing.status_code == 404  # existence is not revealed either
        assert foreign.json()["message"] == missing.json()["message"].replace("scene_nope", scene_b)
        proposal = {"type": "event", "content": {"type": "event", "title": "Sneaky"}, "authority": "player"}
        assert client.post(f"{API}/scenes/{scene_b}/proposals", json=proposal, headers=as_a).status_code == 404
        no_reranker = client.post(f"{API}/search", json={"query": "anything", "rerank": True}, headers=as_a)
        assert no_reranker.status_code == 400 and "re-ranking" in no_reranker.json()["message"]
        search_b = {"query": "anything", "filters": {"campaign": [b]}}
        assert client.post(f"{API}/search", json=search_b, headers=as_a).status_code == 403
        # campaign keys do not administer
        assert client.post(f"{API}/worlds", json={"name": "Mine"}, headers=as_a).status_code == 403
        # bad, missing and revoked keys
        bad = client.get(f"{API}/campaigns/{a}", headers={"Authorization": "Bearer lk_nope_nope"})
        assert bad.status_code == 401 and bad.headers["WWW-Authenticate"] == "Bearer"
        services.keys.revoke(info_a.id)
        assert client.get(f"{API}/campaigns/{a}", headers=as_a).status_code == 401
        assert client.get(f"{API}/campaigns/{b}", headers=admin).status_code == 200


def test_the_api_runs_open_only_on_loopback_without_keys(services: Any) -> None:
    from serve.services import check_binding

    assert check_binding(ServeSettings(api_host="127.0.0.1"), services.keys) is True
    with pytest.raises(ConfigError, match="not loopback"):
        check_binding(ServeSettings(api_host="0.0.0.0"), services.keys)
    services.keys.create("ops", admin=True)
    assert check_binding(ServeSettings(api_host="0.0.0.0"), services.keys) is False


def test_the_openai_compatible_passthrough(client: TestClient) -> None:
    body = {"model": "any", "messages": [{"role": "user", "content": "Describe the harbour."}]}
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["object"] == "chat.completion" and "Describe the harbour." in doc["choices"][0]["message"]["content"]
    streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
    lines = [line for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and '"chat.completion.chunk"' in lines[1]
    assert client.post("/v1/chat/completions", json={"messages": []}).status_code == 422
    assert client.get("/v1/models").json()["data"][0]["id"] == "echo-narrator"


def test_health_and_openapi(client: TestClient) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["checks"]["graph"]["status"] == "ok"
    paths = client.get("/openapi.json").json()["paths"]
    for route in (
        "/api/v1/campaigns/{campaign_id}/turns",
        "/api/v1/scenes/{scene_id}/end",
        "/api/v1/facts/{fact_id}/retcon",
        "/api/v1/search",
        "/v1/chat/completions",
    ):
        assert route in paths


def test_the_ingest_routes_join_as_a_plugin_for_admins_only(services: Any) -> None:
    import functools

    from jobs.api import mount
    from serve.app import create_app

    admin_key, _ = services.keys.create("librarian", admin=True)
    player_key, _ = services.keys.create("player", campaigns=["camp_x"])
    plugin = functools.partial(mount, start_runner=False)
    with TestClient(create_app(services, plugins=[plugin], mcp=False), base_url="http://127.0.0.1") as client:
        admin = {"Authorization": f"Bearer {admin_key}"}
        created = client.post(f"{API}/library/libraries", json={"name": "Fate SRD", "type": "rulebook"}, headers=admin)
        assert created.status_code == 201, created.text
        assert [lib["name"] for lib in client.get(f"{API}/library/libraries", headers=admin).json()] == ["Fate SRD"]
        player = {"Authorization": f"Bearer {player_key}"}
        # reading the library is an operation for any key (as over MCP); ingest and its jobs stay the admin's
        assert client.get(f"{API}/library/libraries", headers=player).status_code == 200
        ingest = client.post(f"{API}/library/libraries", json={"name": "Mine", "type": "lore"}, headers=player)
        assert ingest.status_code == 403
        assert client.get(f"{API}/library/jobs", headers=player).status_code == 403
        assert client.get(f"{API}/library/jobs").status_code == 401
        assert client.get(f"{API}/library/jobs/job_nope", headers=admin).status_code == 404


def test_a_turn_slot_comes_back_once_whatever_happens_to_the_stream() -> None:
    import gc
    import weakref

    from serve.services import Capacity

    capacity = Capacity(1)
    slot = capacity.acquire()
    assert slot is not None and capacity.acquire() is None

    async def stream() -> Any:
        try:
            yield b"event: turn\n\n"
        finally:
            slot.release()

    never_started = stream()
    weakref.finalize(never_started, slot.release)  # what the route does for a client gone early
    del never_started
    gc.collect()
    assert capacity.active == 0
    slot.release()  # a second release changes nothing
    assert capacity.active == 0 and capacity.acquire() is not None


def test_a_key_claims_no_more_authority_than_its_role(services: Any) -> None:
    from schemas.serving import KeyRole
    from serve.app import create_app

    admin_key, _ = services.keys.create("owner", admin=True)
    admin = {"Authorization": f"Bearer {admin_key}"}
    with TestClient(create_app(services, mcp=False), base_url="http://127.0.0.1") as client:
        cid = _campaign(client, admin)
        player_key, _ = services.keys.create("player", campaigns=[cid])
        gm_key, _ = services.keys.create("gm", campaigns=[cid], role=KeyRole.GM)
        player, gm = {"Authorization": f"Bearer {player_key}"}, {"Authorization": f"Bearer {gm_key}"}
        turn = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I enter."}, headers=player).json()["turn_id"]
        scene = client.get(f"{API}/campaigns/{cid}/scenes", headers=player).json()[0]["id"]
        content = {"type": "entity", "content": {"type": "entity", "kind": "location", "name": "The Keep"}}
        evidence = {"turn_ids": [turn]}

        as_gm = client.post(
            f"{API}/scenes/{scene}/proposals", json={**content, "authority": "gm", "evidence": evidence}, headers=player
        )
        assert as_gm.status_code == 403 and "player" in as_gm.json()["message"]
        as_player = client.post(
            f"{API}/scenes/{scene}/proposals",
            json={**content, "authority": "player", "evidence": evidence},
            headers=player,
        )
        assert as_player.status_code == 201
        by_gm = client.post(f"{API}/scenes/{scene}/proposals", json={**content, "authority": "gm"}, headers=gm)
        assert by_gm.status_code == 201
        as_source = client.post(f"{API}/scenes/{scene}/proposals", json={**content, "authority": "source"}, headers=gm)
        assert as_source.status_code == 403
        client.post(f"{API}/scenes/{scene}/end", headers=gm)  # the keep is canon now
        keep = client.get(f"{API}/campaigns/{cid}/state", headers=gm).json()["entities"][0]["id"]
        second = client.post(f"{API}/campaigns/{cid}/scenes", json={}, headers=gm).json()["id"]
        fact = {"type": "fact", "subject_entity_id": keep, "predicate": "is", "value": "old"}
        proposed = client.post(
            f"{API}/scenes/{second}/proposals", json={"type": "fact", "content": fact, "authority": "gm"}, headers=gm
        )
        assert proposed.status_code == 201, proposed.text
        client.post(f"{API}/scenes/{second}/end", headers=gm)
        fact_id = client.get(f"{API}/campaigns/{cid}/state", headers=gm).json()["facts"][0]["id"]
        retcon = {"campaign_id": cid, "reason": "it was always new", "value": "new"}
        assert client.post(f"{API}/facts/{fact_id}/retcon", json=retcon, headers=player).status_code == 403
        done = client.post(f"{API}/facts/{fact_id}/retcon", json=retcon, headers=gm)
        assert done.status_code == 200 and done.json()["replaced_by"]
