"""The Ray Serve application on local Ray: the four deployments start and answer over HTTP.

The same app as the in-process tests, now with the narrator, search and gate behind deployment
handles: a streamed turn crosses Ingress → Narrator, a scene end crosses Ingress → Gate, a search
crosses Ingress → Search; and a campaign's narration requests stay on one narrator replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.unit.seat_engines import SCRIPTED_SUMMARY, ScriptedSeats
from tests.unit.serve_support import on_local_ray, sse_events

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig

    settings = load_settings(data_dir=Path(tmp_path_factory.mktemp("served")))
    # every model seat configured, and bound to a test's engines the way production binds build_engine
    serve_settings = ServeSettings(
        narrator_model="echo-on-ray",
        extractor_engine=EngineKind.ECHO,
        engines={"second": {"kind": "echo", "model": "second-model"}},  # a campaign may name it (model roles)
    )
    config = AppConfig(
        plugins=[],
        narrator=DeploymentConfig(num_replicas=2, num_cpus=0.5),
        search=DeploymentConfig(num_cpus=0.5),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25),
    )
    with on_local_ray(config, settings, serve_settings, ScriptedSeats()) as url:
        yield url


def test_the_deployments_serve_a_table(app_url: str) -> None:
    with httpx.Client(base_url=app_url, timeout=120) as http:
        assert http.get("/health").json()["status"] == "ok"
        world = http.post("/api/v1/worlds", json={"name": "Served"}).json()
        body = {"world_id": world["id"], "name": "On Ray", "profile": {"genre": "mystery"}}
        campaign = http.post("/api/v1/campaigns", json=body).json()["id"]
        streamed = http.post(f"/api/v1/campaigns/{campaign}/turns", json={"text": "I knock twice.", "stream": True})
        events = sse_events(streamed.text)
        assert events[0][0] == "turn" and events[-1][0] == "done", streamed.text
        done = events[-1][1]
        assert "I knock twice." in done["narration"] and done["generation"]["model"] == "echo-on-ray"
        # the turn, its take and its prompt snapshot were written by the ingress, on the shared graph
        provenance = http.get(f"/api/v1/campaigns/{campaign}/turns/{done['turn_id']}/provenance")
        assert provenance.status_code == 200, provenance.text
        scene = http.post(f"/api/v1/campaigns/{campaign}/scenes", json={"title": "The door"}).json()["id"]
        proposal = {
            "type": "entity",
            "content": {"type": "entity", "kind": "character", "name": "The Doorkeeper"},
            "authority": "gm",
        }
        assert http.post(f"/api/v1/scenes/{scene}/proposals", json=proposal).status_code == 201
        report = http.post(f"/api/v1/scenes/{scene}/end").json()  # through the Gate deployment
        assert [d["status"] for d in report["decisions"]] == ["accepted"]
        state = http.get(f"/api/v1/campaigns/{campaign}/state").json()
        assert [e["name"] for e in state["entities"]] == ["The Doorkeeper"]
        search = http.post("/api/v1/search", json={"query": "doorkeeper"})  # through the Search deployment
        assert search.status_code == 200 and search.json()["hits"] == []
        metrics = http.get("/metrics").text  # the ingress's scrape has the turn, the gate and the search
        assert 'lorekeeper_search_duration_seconds_count{search_type="hybrid"}' in metrics
        assert 'lorekeeper_gate_decisions_total{authority="gm",decision="accepted"} 1.0' in metrics
        assert "lorekeeper_narrator_time_to_first_token_seconds_count" in metrics
        chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert chat.json()["model"] == "echo-on-ray"


def test_on_ray_the_model_extracts_judges_an_axiom_broken_and_summarises(app_url: str) -> None:
    """The extractor (in the ingress), the axiom judge and the memory former (in the Gate replica) all run
    on the bound engines: a creature the world's axiom forbids, extracted from the narration, is rejected
    at scene end."""
    with httpx.Client(base_url=app_url, timeout=120) as http:
        world = http.post("/api/v1/worlds", json={"name": "Skyless", "axioms": ["No dragon lives here."]}).json()
        body = {"world_id": world["id"], "name": "Ash", "profile": {"genre": "fantasy"}}
        campaign = http.post("/api/v1/campaigns", json=body).json()["id"]
        scene = http.post(f"/api/v1/campaigns/{campaign}/scenes", json={"title": "The tower"}).json()["id"]
        turn = http.post(f"/api/v1/campaigns/{campaign}/turns", json={"text": "A Dragon lands on the tower."})
        assert turn.status_code == 201, turn.text
        (proposal,) = turn.json()["proposal_ids"]  # the extractor's, in the ingress
        report = http.post(f"/api/v1/scenes/{scene}/end").json()  # the judge's and the former's, in the Gate
        (decision,) = report["decisions"]
        assert decision["proposal_id"] == proposal and decision["status"] == "rejected", decision
        assert "No dragon lives here." in decision["rationale"] and report["unchecked_axioms"] == []
        summaries = http.get(f"/api/v1/campaigns/{campaign}/summaries").json()
        assert [s["text"] for s in summaries] == [SCRIPTED_SUMMARY]


def test_on_ray_a_campaign_narrates_on_the_engine_its_model_roles_name(app_url: str) -> None:
    """The Narrator replicas build the named engine a campaign chose; other campaigns keep the deployment's."""
    with httpx.Client(base_url=app_url, timeout=120) as http:
        world = http.post("/api/v1/worlds", json={"name": "Roles"}).json()
        body = {"world_id": world["id"], "name": "Named", "profile": {"genre": "mystery"}}
        named = http.post("/api/v1/campaigns", json=body | {"model_roles": {"narrator": "second"}}).json()["id"]
        plain = http.post("/api/v1/campaigns", json=body).json()["id"]
        turn = http.post(f"/api/v1/campaigns/{named}/turns", json={"text": "I knock."}).json()
        assert turn["narration"].startswith("[second-model]") and turn["generation"]["model"] == "second-model"
        turn = http.post(f"/api/v1/campaigns/{plain}/turns", json={"text": "I knock."}).json()
        assert turn["narration"].startswith("[echo-on-ray]") and turn["generation"]["model"] == "echo-on-ray"


def test_a_campaign_stays_on_one_narrator_replica(app_url: str) -> None:
    from ray import serve

    from serve.routing import rendezvous_order

    # both replicas running first: on a loaded machine the second may still be starting when the test begins
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = serve.status().applications["lorekeeper"].deployments["Narrator"].replica_states
        if sum(n for state, n in states.items() if str(getattr(state, "value", state)) == "RUNNING") >= 2:
            break
        time.sleep(1)
    narrator = serve.get_deployment_handle("Narrator", app_name="lorekeeper")
    placements = {
        campaign: [narrator.options(multiplexed_model_id=campaign).placement.remote().result() for _ in range(6)]
        for campaign in [f"camp_{i}" for i in range(12)]
    }
    replicas = sorted({replica for seen in placements.values() for replica in seen})
    assert len(replicas) == 2  # campaigns spread over both replicas
    for campaign, seen in placements.items():
        # from its very first request, a campaign goes to its first replica in rendezvous order
        assert set(seen) == {rendezvous_order(campaign, replicas)[0]}, (campaign, seen)


def test_serve_config_file_builds_the_same_application() -> None:
    import yaml

    from serve.deployments import AppConfig

    config = yaml.safe_load(Path("cluster/serve-config.yaml").read_text())
    app = config["applications"][0]
    assert app["import_path"] == "serve.deployments:build_app"
    AppConfig.model_validate(app.get("args") or {})
    assert {d["name"] for d in app["deployments"]} == {"Ingress", "Narrator", "Search", "Gate"}
