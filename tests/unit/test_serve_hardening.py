"""What an outside test of the API found, each pinned: healing after a graph crash, tenancy and
key edge cases, error bodies that show no server path, and the errors the OpenAPI declares."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.errors import Unavailable
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

API = "/api/v1"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def services() -> Iterator[Any]:
    with api_services() as services:
        yield services


@pytest.fixture
def client(services: Any) -> Iterator[TestClient]:
    from jobs.api import mount
    from serve.app import create_app

    plugin = functools.partial(mount, start_runner=False)
    app = create_app(services, plugins=[plugin], mcp=False)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client


def _campaign(client: TestClient, headers: dict[str, str] | None = None, name: str = "The Ember Road") -> str:
    world = client.post(f"{API}/worlds", json={"name": "Ashfall"}, headers=headers)
    assert world.status_code == 201, world.text
    body = {"world_id": world.json()["id"], "name": name, "profile": {"genre": "fantasy"}}
    campaign = client.post(f"{API}/campaigns", json=body, headers=headers)
    assert campaign.status_code == 201, campaign.text
    return str(campaign.json()["id"])


def _eventually(call: Any, *, within_s: float = 10.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        response = call()
        if response.status_code < 500 or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


# -- 2. after a graph crash, every client heals; a turn without knowledge says so ---------------------


def test_the_api_heals_within_seconds_after_the_graph_is_killed(client: TestClient, services: Any) -> None:
    cid = _campaign(client)
    assert client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I light a lantern."}).status_code == 201
    assert client.post(f"{API}/search", json={"query": "lantern"}).status_code == 200
    services.story.graph.server.kill()  # kill -9 of the embedded FalkorDB under the running API
    started = time.monotonic()
    health = _eventually(lambda: client.get("/health"))
    assert health.status_code == 200, health.text
    turn = _eventually(lambda: client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I look around."}))
    assert turn.status_code == 201, turn.text
    assert turn.json()["retrieval_error"] is None, turn.json()
    search = _eventually(lambda: client.post(f"{API}/search", json={"query": "lantern"}))
    assert search.status_code == 200, search.text
    assert client.get(f"{API}/library/libraries").status_code == 200  # the ingest routes' own graph client
    assert time.monotonic() - started < 15


class _BrokenSearch:
    def search(self, query: str, **_: Any) -> list[Any]:
        raise Unavailable("full-text index", "no answer from the server", url="file:///srv/secret/data/text")


def test_a_turn_whose_retrieval_failed_says_so(client: TestClient, services: Any) -> None:
    cid = _campaign(client)
    services.flow.searcher = _BrokenSearch()
    turn = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "What do the books say of lanterns?"})
    assert turn.status_code == 201, turn.text
    error = turn.json()["retrieval_error"]
    assert error and "knowledge search failed" in error and "/srv/secret" not in error
    provenance = client.get(f"{API}/campaigns/{cid}/turns/{turn.json()['turn_id']}/provenance").json()
    assert [r["error"] for r in provenance["retrievals"] if r["source"] != "recall"] == [error]
    # the campaign's recall ran beside it (a new campaign: nothing to recall) and says so
    assert [(r["error"], r["recalled"]) for r in provenance["retrievals"] if r["source"] == "recall"] == [(None, [])]


# -- 5. revoking every key does not re-open the API ------------------------------------------------------


def test_revoking_every_key_keeps_the_api_closed(client: TestClient, services: Any) -> None:
    assert client.get("/health").json()["open"] is True
    assert client.get(f"{API}/campaigns").status_code == 200  # open: a laptop with no key yet
    key, info = services.keys.create("gm", admin=True)
    assert client.get("/health").json()["open"] is False
    assert client.get(f"{API}/campaigns").status_code == 401
    services.keys.revoke(info.id)
    assert client.get(f"{API}/campaigns").status_code == 401
    assert client.get(f"{API}/campaigns", headers={"Authorization": f"Bearer {key}"}).status_code == 401
    assert client.get("/health").json()["open"] is False
    from serve.auth import ApiKeys
    from serve.services import check_binding

    # a restart on loopback stays closed too: keys have existed
    assert check_binding(services.serve, ApiKeys(services.story.graph)) is False


# -- 6. selecting another campaign's take reveals nothing ------------------------------------------------


def test_selecting_another_campaigns_take_answers_like_a_missing_one(client: TestClient) -> None:
    mine, theirs = _campaign(client, name="Mine"), _campaign(client, name="Theirs")
    my_turn = client.post(f"{API}/campaigns/{mine}/turns", json={"text": "I wait."}).json()
    their_turn = client.post(f"{API}/campaigns/{theirs}/turns", json={"text": "They plot."}).json()
    foreign = client.put(f"{API}/campaigns/{mine}/turns/{my_turn['turn_id']}/takes/{their_turn['take_id']}/select")
    missing = client.put(f"{API}/campaigns/{mine}/turns/{my_turn['turn_id']}/takes/take_nope/select")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["message"] == missing.json()["message"].replace("take_nope", their_turn["take_id"])
    assert their_turn["turn_id"] not in foreign.text


# -- 8. a client error never shows the server's data path ------------------------------------------------


def test_client_errors_never_show_the_data_path(client: TestClient, services: Any) -> None:
    data_dir = str(services.settings.data_dir.resolve())
    cid = _campaign(client)
    probes = [
        client.post(f"{API}/worlds", json={"name": "Nul\u0000World"}),
        client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I say \u0000 nothing."}),
        client.post(f"{API}/search", json={"query": "lantern\u0000"}),
        client.get(f"{API}/campaigns/camp%00x"),
    ]
    for response in probes:
        assert response.status_code < 500, response.text
        assert data_dir not in response.text and "file://" not in response.text, response.text


# -- 9. blank names are a clear 400, not a 500 that drops the connection ------------------------------


@pytest.mark.parametrize("name", [" ", "\u00a0", "\t\n"])
def test_a_blank_library_name_is_a_clear_refusal(client: TestClient, name: str) -> None:
    # a blank name breaks the body's schema (schemas.text.Name): 422 naming the field, as every body's rule is
    response = client.post(f"{API}/library/libraries", json={"name": name, "type": "rulebook"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "validation_failed" and body["problems"][0]["where"] == "body.name"
    assert "empty or only whitespace" in body["message"]
    assert response.headers.get("connection") != "close"


# -- 10. the OpenAPI declares the error statuses; 405 says what is allowed ------------------------------


def test_the_openapi_declares_each_routes_errors_with_the_error_body(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"error", "message"} <= set(spec["components"]["schemas"]["ErrorBody"]["properties"])
    paths = spec["paths"]
    turn = paths["/api/v1/campaigns/{campaign_id}/turns"]["post"]["responses"]
    for status in ("400", "401", "403", "404", "413", "429", "503"):
        assert status in turn, status
        assert turn[status]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    imported = paths["/api/v1/campaigns/import"]["post"]["responses"]
    assert "409" in imported and "413" in imported
    health = paths["/health"]["get"]["responses"]
    assert "503" in health and "401" not in health  # /health needs no key
    listing = paths["/api/v1/campaigns"]["get"]["responses"]
    assert "404" not in listing and "413" not in listing  # no id in the path, no body


def test_a_405_carries_allow(client: TestClient) -> None:
    response = client.delete(f"{API}/search")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST" and response.json()["error"] == "method_not_allowed"


# -- 7. every way to start the API refuses a public address without keys ---------------------------------


@pytest.mark.slow
def test_the_ray_path_refuses_a_public_address_without_keys(tmp_path: Path) -> None:
    env = {**os.environ, "LOREKEEPER_DATA_DIR": str(tmp_path / "data"), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorekeeper.cli", "serve", "--host", "0.0.0.0", "--port", "8979"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"`lorekeeper serve --host 0.0.0.0` started without keys:\n{output[-2000:]}") from None
    assert proc.returncode == 2, output
    assert "not loopback" in " ".join(output.split())


# -- 11. the REST export can carry the knowledge it cites ----------------------------------------------


def test_the_rest_export_can_include_the_knowledge_it_cites(client: TestClient, services: Any) -> None:
    import io
    import json
    import zipfile

    from schemas.common import sha256_hex
    from schemas.knowledge import Chunk, FileType, Item, Library, LibraryType
    from schemas.story import RetrievalHit, RetrievalRecord
    from stores.blob.layout import chunk_key

    library = services.catalog.save_library(Library(name="Lantern Lore", type=LibraryType.RULEBOOK))
    text = "A hooded lantern sheds bright light in a 30-foot cone."
    item = Item(
        uid="item_lanterns",
        library_uid=library.uid,
        title="Lanterns",
        file_type=FileType.MARKDOWN,
        size_bytes=len(text),
        content_hash=sha256_hex(text),
        source_ref="lanterns.md",
    )
    services.catalog.save_item(item)
    chunk = Chunk(uid="chunk_lantern", item_uid=item.uid, sequence=0, text_key=chunk_key(item.uid, 0), token_count=12)
    services.story.blobs.put(chunk.text_key, text.encode())
    services.catalog.save_chunks([chunk])
    cid = _campaign(client)
    turn = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "How far does my lantern shine?"}).json()
    services.story.record_retrieval(
        RetrievalRecord(
            turn_id=turn["turn_id"],
            query="lantern",
            hits=[RetrievalHit(chunk_id=chunk.uid, rank=1, item_uid=item.uid)],
        )
    )

    def labels(response: Any) -> set[str]:
        with zipfile.ZipFile(io.BytesIO(response.content)) as bundle:
            return {json.loads(line)["label"] for line in bundle.read("graph/nodes.jsonl").splitlines() if line}

    plain = client.get(f"{API}/campaigns/{cid}/export")
    whole = client.get(f"{API}/campaigns/{cid}/export", params={"include_knowledge": "true"})
    assert plain.status_code == whole.status_code == 200
    assert "Chunk" not in labels(plain)
    assert {"Chunk", "Item", "Library"} <= labels(whole)
