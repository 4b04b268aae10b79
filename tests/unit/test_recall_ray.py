"""Campaign recall on the Ray Serve application (local Ray, embedded stores): the memory index lives in the
Search deployment, and Ingress (turns, memories, recall) and Gate (a scene's end) reach it there, so no
second process opens the embedded stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.serve_support import on_local_ray

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from schemas.serving import ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig

    settings = load_settings(data_dir=Path(tmp_path_factory.mktemp("served")))
    serve_settings = ServeSettings(narrator_model="echo-on-ray", recent_turns=1)
    config = AppConfig(
        plugins=[],
        mcp=False,
        narrator=DeploymentConfig(num_cpus=0.25),
        search=DeploymentConfig(num_cpus=0.5),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25),
    )
    with on_local_ray(config, settings, serve_settings) as url:
        yield url


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_recall_crosses_the_deployments(app_url: str) -> None:
    with httpx.Client(base_url=app_url, timeout=120) as http:
        world = _ok(http.post("/api/v1/worlds", json={"name": "Served"}), 201)
        body = {"world_id": world["id"], "name": "On Ray", "profile": {"genre": "mystery"}}
        cid = _ok(http.post("/api/v1/campaigns", json=body), 201)["id"]

        def turn(text: str) -> str:
            outcome = _ok(http.post(f"/api/v1/campaigns/{cid}/turns", json={"text": text}), 201)
            assert outcome["recall_error"] is None, outcome
            return str(outcome["turn_id"])

        turn("We arrive at the lighthouse.")
        scene = _ok(http.post(f"/api/v1/campaigns/{cid}/scenes", json={"title": "Cast"}), 201)["id"]
        proposal = {"type": "entity", "content": {"kind": "character", "name": "Ayla"}, "authority": "gm"}
        ayla = "ent_" + _ok(http.post(f"/api/v1/scenes/{scene}/proposals", json=proposal), 201)["id"].split("_", 1)[1]
        _ok(http.post(f"/api/v1/scenes/{scene}/end"))  # through the Gate deployment, which indexes its outcome

        told = turn("The keeper confesses that he doused the lamp the night the ship was wrecked.")
        turn("I eat a bowl of fish stew.")
        turn("I count the gulls on the rocks.")
        hits = _ok(http.post(f"/api/v1/campaigns/{cid}/recall", json={"query": "who caused the shipwreck?"}))["hits"]
        assert hits[0]["id"] == told  # written by the ingress, searched in the Search deployment
        facts = _ok(http.post(f"/api/v1/campaigns/{cid}/recall", json={"query": "Ayla", "kinds": ["fact"]}))["hits"]
        assert facts and "Ayla" in facts[0]["text"]  # the scene's canon outcome, written by the Gate deployment

        memory = {"observer_entity_id": ayla, "text": "Ayla saw the keeper weep at the lamp."}
        added = _ok(http.post(f"/api/v1/campaigns/{cid}/memories", json=memory), 201)
        as_ayla = _ok(
            http.post(
                f"/api/v1/campaigns/{cid}/recall", json={"query": "the keeper crying", "observer_entity_id": ayla}
            )
        )["hits"]
        assert [h["id"] for h in as_ayla] == [added["id"]]
        _ok(http.post(f"/api/v1/campaigns/{cid}/memories/{added['id']}/retract", json={"reason": "a dream"}))
        gone = _ok(
            http.post(
                f"/api/v1/campaigns/{cid}/recall", json={"query": "the keeper crying", "observer_entity_id": ayla}
            )
        )["hits"]
        assert gone == []

        asked = turn("Why did the ship run aground on the rocks?")
        provenance = _ok(http.get(f"/api/v1/campaigns/{cid}/turns/{asked}/provenance"))
        recalled = [r for r in provenance["retrievals"] if r["source"] == "recall"]
        assert recalled and told in [h["turn_id"] for h in recalled[0]["recalled"]]
