"""The Ray Serve application catches the story up when it starts: a scene end left pending on the data folder
is finished and the recall index (in the Search deployment, reached through blocking handle calls that Ray
refuses on the ingress's event loop) gets every record of the graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.serve_support import on_local_ray

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_the_app_finishes_a_pending_end_and_fills_the_index_at_start(tmp_path: Path) -> None:
    from schemas.serving import ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig
    from stores.factory import open_blob_store, open_graph_store
    from story.scene_end import end_pending
    from story.service import StoryService
    from tests.unit.test_scene_end import _ended_with_a_broken_former

    settings = load_settings(data_dir=tmp_path / "data")
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    try:  # played and ended with no recall index at all, and the former failed: nothing indexed, end pending
        story = StoryService(graph, blobs)
        story.prepare()
        campaign_id, scene_id, ids = _ended_with_a_broken_former(story)
        assert end_pending(story, scene_id) and story.memories(campaign_id) == []
    finally:
        graph.close()
        blobs.close()

    config = AppConfig(
        plugins=[],
        mcp=False,
        narrator=DeploymentConfig(num_cpus=0.25),
        search=DeploymentConfig(num_cpus=0.5),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25),
    )
    with on_local_ray(config, settings, ServeSettings(narrator_model="echo-on-ray")) as url:
        _finished_and_indexed(url, campaign_id, ids["aria"])


def _finished_and_indexed(url: str, campaign_id: str, aria: str) -> None:
    with httpx.Client(base_url=url, timeout=120) as http:
        memories = _ok(http.get(f"/api/v1/campaigns/{campaign_id}/memories"))
        assert any(m["observer_entity_id"] == aria for m in memories)
        body = {"query": "the missing caravan", "observer_entity_id": aria, "kinds": ["memory"]}
        hits = _ok(http.post(f"/api/v1/campaigns/{campaign_id}/recall", json=body))["hits"]
        assert hits and {h["id"] for h in hits} <= {m["id"] for m in memories}
        turns = _ok(http.post(f"/api/v1/campaigns/{campaign_id}/recall", json={"query": "Oakhollow coal smoke"}))
        assert any("Oakhollow" in h["text"] for h in turns["hits"])  # a turn never indexed before
