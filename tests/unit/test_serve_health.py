"""Health of every part, on /health, /mcp/health and the get_health operation (REST and MCP), on the embedded
stores; a part that is down is named with its reason, and a hung store does not hold the answer past its
timeout. MCP's own settings: a port of its own, and whether a caller needs a key."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from schemas.errors import ConfigError
from schemas.health import DEPENDENCIES
from schemas.serving import ServeSettings
from tests.unit.serve_support import api_services, running
from tests.unit.test_serve_mcp import _json, session

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    from serve.app import create_app

    serve = getattr(request, "param", None) or ServeSettings(api_host="127.0.0.1")
    with api_services(serve) as services, running(create_app(services)) as url:
        yield url, services


def _statuses(body: dict[str, Any]) -> dict[str, str]:
    return {name: check["status"] for name, check in body["checks"].items()}


def _mcp_health(url: str, key: str | None = None) -> dict[str, Any]:
    async def ask() -> dict[str, Any]:
        async with session(url, key) as client:
            return _json(await client.call_tool("get_health", {}))  # type: ignore[no-any-return]

    return anyio.run(ask)


def test_every_part_has_a_status_and_a_latency_on_every_door(server: tuple[str, Any]) -> None:
    url, _ = server
    with capture_logs() as logs:
        probe = httpx.get(f"{url}/health", timeout=10)
        beside_mcp = httpx.get(f"{url}/mcp/health", timeout=10)
        operation = httpx.get(f"{url}/api/v1/health", timeout=10)
        tool = _mcp_health(url)
    assert probe.status_code == beside_mcp.status_code == operation.status_code == 200
    body = probe.json()
    assert list(body["checks"]) == list(DEPENDENCIES)
    expected = {
        "graph": "ok",
        "blob": "ok",
        "source_blob": "off",  # no source bucket set
        "text": "ok",
        "vectors": "ok",
        "embedding": "idle",  # loads on first use: a probe never loads it
        "narrator": "ok",
    }
    for answer in (body, beside_mcp.json(), operation.json(), tool):
        assert answer["status"] == "ok" and _statuses(answer) == expected
    for name, check in body["checks"].items():
        if check["status"] == "off":
            assert check["latency_ms"] is None
        else:
            assert 0 <= check["latency_ms"] < 2000, (name, check)
    assert body["checks"]["narrator"]["detail"] == "echo-narrator" and body["open"] is True
    checks = [e for e in logs if e["event"] == "mcp_health_check"]
    assert len(checks) == 4
    assert all(e["overall"] == "ok" and {k: e[k] for k in DEPENDENCIES} == expected for e in checks)


def test_a_loaded_embedding_model_is_probed_by_embedding(server: tuple[str, Any]) -> None:
    url, services = server
    services.search.searcher.embedder.embed_query("load the model")
    check = httpx.get(f"{url}/health", timeout=30).json()["checks"]["embedding"]
    assert check["status"] == "ok" and check["detail"] and check["latency_ms"] > 0


def test_a_store_that_is_down_is_named_with_its_reason_and_the_server_is_degraded(server: tuple[str, Any]) -> None:
    import shutil

    url, services = server
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # opens the indexes
    shutil.rmtree(services.settings.text_location().path)  # the full-text index's folder is gone
    with capture_logs() as logs:
        probe = httpx.get(f"{url}/health", timeout=10)
        beside_mcp = httpx.get(f"{url}/mcp/health", timeout=10)
        tool = _mcp_health(url)
    assert probe.status_code == beside_mcp.status_code == 503
    for answer in (probe.json(), beside_mcp.json(), tool):
        assert answer["status"] == "degraded"
        assert answer["checks"]["text"]["status"] == "down"
        assert "disappeared" in answer["checks"]["text"]["detail"]
        assert {k: v for k, v in _statuses(answer).items() if v == "down"} == {"text": "down"}
    (logged, *_) = [e for e in logs if e["event"] == "mcp_health_check"]
    assert logged["overall"] == "degraded" and logged["text"] == "down" and logged["log_level"] == "warning"
    assert "disappeared" in logged["down"]["text"]


@pytest.mark.parametrize("server", [ServeSettings(api_host="127.0.0.1", health_timeout_s=0.5)], indirect=True)
def test_health_answers_within_its_timeout_while_the_graph_hangs(server: tuple[str, Any]) -> None:
    url, services = server
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    pid = services.story.graph.client.server.pid  # the embedded graph's server process
    os.kill(pid, signal.SIGSTOP)
    try:
        answers = []
        for _ in range(5):
            started = time.monotonic()
            answers.append((httpx.get(f"{url}/health", timeout=10), time.monotonic() - started))
        mcp_side = httpx.get(f"{url}/mcp/health", timeout=10)
        on_the_graph = [t for t in threading.enumerate() if t.name == "health-graph"]
    finally:
        os.kill(pid, signal.SIGCONT)
    for response, took in [*answers, (mcp_side, 0.0)]:
        assert response.status_code == 503 and took < 2.0, took
        body = response.json()
        assert body["checks"]["graph"] == {
            "status": "down",
            "latency_ms": body["checks"]["graph"]["latency_ms"],
            "detail": "no answer within 0.5 s",
        }
        assert body["status"] == "degraded"
        assert {k for k, v in _statuses(body).items() if v == "down"} == {"graph"}
    assert len(on_the_graph) == 1  # the hung probe is waited on again by each check, never started anew
    deadline = time.monotonic() + 30
    while (answer := httpx.get(f"{url}/health", timeout=10)).status_code != 200:
        assert time.monotonic() < deadline, answer.json()
        time.sleep(0.2)


@pytest.mark.parametrize("server", [ServeSettings(api_host="127.0.0.1", mcp_require_key=False)], indirect=True)
def test_without_a_required_key_a_keyless_mcp_caller_reads_the_knowledge_and_nothing_of_a_campaign(
    server: tuple[str, Any],
) -> None:
    url, services = server
    world = services.story.create_world("Harbour Town")
    from schemas.story import StoryProfile

    campaign = services.story.create_campaign(world.id, "Tides", StoryProfile(genre="fantasy"))
    key, _ = services.keys.create("gm", admin=True)  # keys exist: REST needs one

    async def scenario() -> None:
        async with session(url) as client:  # no key
            assert _json(await client.call_tool("get_health", {}))["status"] == "ok"
            assert isinstance(_json(await client.call_tool("list_libraries", {})), list)
            assert _json(await client.call_tool("list_campaigns", {})) == []
            denied = await client.call_tool("get_campaign", {"campaign_id": campaign.id})
            assert denied.isError and "forbidden" in denied.content[0].text
            admin_only = await client.call_tool("list_keys", {})
            assert admin_only.isError and "forbidden" in admin_only.content[0].text
            libraries = json.loads((await client.read_resource("lorekeeper://libraries")).contents[0].text)
            assert libraries == []
        async with session(url, key) as client:  # a key still counts for what it is
            assert _json(await client.call_tool("get_campaign", {"campaign_id": campaign.id}))["id"] == campaign.id

    anyio.run(scenario)
    assert httpx.get(f"{url}/api/v1/libraries", timeout=10).status_code in (401, 404)
    assert httpx.get(f"{url}/api/v1/library/libraries", timeout=10).status_code == 401  # REST is unchanged


def test_mcp_needs_a_key_by_default_once_keys_exist(server: tuple[str, Any]) -> None:
    url, services = server
    services.keys.create("gm", admin=True)
    refused = httpx.post(f"{url}/mcp", json={}, headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    assert refused.status_code == 401
    assert httpx.get(f"{url}/mcp/health", timeout=10).status_code == 200  # the probe needs none


def test_mcp_on_a_port_of_its_own() -> None:
    from serve.app import create_app
    from serve.mcp import create_mcp_app

    serve = ServeSettings(api_host="127.0.0.1", mcp_port=9931)
    with (
        api_services(serve) as services,
        running(create_app(services)) as api,
        running(create_mcp_app(services)) as mcp,
    ):
        assert httpx.post(f"{api}/mcp", json={}, timeout=10).status_code == 404  # not on the API's port
        assert httpx.get(f"{api}/health", timeout=10).status_code == 200
        assert httpx.get(f"{mcp}/mcp/health", timeout=10).json()["status"] == "ok"
        assert _mcp_health(mcp)["status"] == "ok"


def test_mcp_settings_are_read_from_the_environment_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_MCP_PORT", "8001")
    monkeypatch.setenv("LOREKEEPER_MCP_REQUIRE_KEY", "false")
    monkeypatch.setenv("LOREKEEPER_HEALTH_TIMEOUT_S", "1.5")
    read = ServeSettings()
    assert (read.mcp_port, read.mcp_require_key, read.health_timeout_s) == (8001, False, 1.5)
    with pytest.raises(ConfigError, match="LOREKEEPER_MCP_PORT"):
        ServeSettings(api_port=8001, mcp_port=8001)


def test_ray_serve_refuses_an_mcp_port_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lorekeeper.cli import app

    monkeypatch.setenv("LOREKEEPER_MCP_PORT", "8001")
    from schemas.serving import get_serve_settings

    get_serve_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve"])
    finally:
        get_serve_settings.cache_clear()
    assert result.exit_code == 2 and "LOREKEEPER_MCP_PORT" in result.output + str(result.stderr), result.output


def test_the_source_bucket_is_probed_when_one_is_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from schemas.settings import get_settings
    from serve.app import create_app

    monkeypatch.setenv("LOREKEEPER_SOURCE_BLOB_URL", f"file://{tmp_path / 'library-service'}")
    get_settings.cache_clear()
    with api_services() as services, running(create_app(services)) as url:
        check = httpx.get(f"{url}/health", timeout=10).json()["checks"]["source_blob"]
    assert check["status"] == "ok" and check["latency_ms"] >= 0
    # a source bucket whose server is not there: down with the store's reason, the server degraded
    monkeypatch.setenv("LOREKEEPER_SOURCE_BLOB_URL", "s3://library-service?endpoint=http://127.0.0.1:9")
    monkeypatch.setenv("LOREKEEPER_SOURCE_BLOB_ACCESS_KEY", "reader")
    monkeypatch.setenv("LOREKEEPER_SOURCE_BLOB_SECRET_KEY", "reader-secret")
    monkeypatch.setenv("LOREKEEPER_STORE_TIMEOUT_S", "1")
    get_settings.cache_clear()
    with api_services() as services, running(create_app(services)) as url:
        answer = httpx.get(f"{url}/health", timeout=10)
    body = answer.json()
    assert answer.status_code == 503 and body["status"] == "degraded"
    assert body["checks"]["source_blob"]["status"] == "down" and body["checks"]["source_blob"]["detail"]
    assert "127.0.0.1" not in body["checks"]["source_blob"]["detail"]  # never where a store lives
    assert {k for k, v in _statuses(body).items() if v == "down"} == {"source_blob"}


@pytest.mark.ray
def test_on_ray_serve_the_search_replica_and_a_narrator_replica_answer_their_probes(tmp_path: Any) -> None:
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig
    from tests.unit.serve_support import on_local_ray

    settings = load_settings(data_dir=tmp_path / "data")
    config = AppConfig(
        plugins=[],
        narrator=DeploymentConfig(num_cpus=0.5),
        search=DeploymentConfig(num_cpus=0.5),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25),
    )
    serve = ServeSettings(api_host="127.0.0.1", narrator_model="echo-on-ray")
    with on_local_ray(config, settings, serve) as url:
        probe = httpx.get(f"{url}/health", timeout=60)
        beside_mcp = httpx.get(f"{url}/mcp/health", timeout=60)
    assert probe.status_code == beside_mcp.status_code == 200, probe.text
    body = probe.json()
    assert _statuses(body) == _statuses(beside_mcp.json())
    assert _statuses(body) == {
        "graph": "ok",
        "blob": "ok",
        "source_blob": "off",
        "text": "ok",
        "vectors": "ok",
        "embedding": "ok",  # the Search replica loads its model when it starts, and embeds the probe's word
        "narrator": "ok",
    }
    assert body["checks"]["narrator"]["detail"] == "echo-on-ray" and body["checks"]["embedding"]["detail"]


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        (200, "ok", "narrator-model"),  # lists its models
        (501, "ok", "narrator-model"),  # answers, without a model listing (http.server's own 501): reachable
        (401, "down", "refused the key (401)"),
        (503, "down", "answered 503"),
        (None, "down", "does not answer"),  # nothing listening
    ],
)
def test_an_openai_compatible_narrator_is_probed_by_its_model_listing(
    answer: int | None, status: str, detail: str
) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from narrator.engines import OpenAIEngine
    from serve.health import HealthProbes, engine_probe
    from tests.unit.serve_support import free_port

    class Endpoint(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            body = json.dumps({"object": "list", "data": [{"id": "narrator-model", "object": "model"}]}).encode()
            if answer != 200:
                self.send_error(answer or 500)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Endpoint) if answer is not None else None
    if server is not None:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    engine = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "narrator-model", timeout_s=2)
    try:
        checks = anyio.run(lambda: HealthProbes(3.0).check({}, {"narrator": engine_probe(engine)}))
    finally:
        if server is not None:
            server.shutdown()
        anyio.run(engine.close)
    assert checks["narrator"].status.value == status and detail in (checks["narrator"].detail or "")


@pytest.mark.slow
def test_serve_direct_serves_mcp_on_its_own_port_and_sigterm_stops_both(tmp_path: Any) -> None:
    from tests.unit.serve_support import free_port
    from tests.unit.test_sigterm import _kill_group, _start, _stop_and_wait

    api_port, mcp_port = free_port(), free_port()
    env = {"LOREKEEPER_DATA_DIR": str(tmp_path / "data"), "LOREKEEPER_MCP_PORT": str(mcp_port)}
    server = _start(["serve", "--direct", "--port", str(api_port)], env, tmp_path)
    api, mcp = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{mcp_port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the MCP port did not answer"
            try:
                if httpx.get(f"{mcp}/mcp/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert httpx.get(f"{api}/health", timeout=10).status_code == 200
        assert httpx.post(f"{api}/mcp", json={}, timeout=10).status_code == 404  # not on the API's port
        assert _mcp_health(mcp)["checks"]["graph"]["status"] == "ok"
        code, output, _ = _stop_and_wait(server, timeout=60)
    finally:
        _kill_group(server)
    assert code == 0, output[-3000:]
    for url in (api, mcp):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2)
