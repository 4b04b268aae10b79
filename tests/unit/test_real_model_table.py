"""A table played over the API's doors with the real default model in every seat (issue 26's "done when").

The API app on this test's embedded stores, with the ``local`` engine (SmolLM2-135M-Instruct, loaded
once for the module: :func:`narrator.local_engine.load_model` keeps it per process) as narrator and
extractor: a turn streamed over REST, the OpenAI-compatible route streamed and not, then a scene end
that makes canon of a state change the model extracted from the narration. Turns carry a seed, so the
narration (sampled) and the extraction (greedy) are the same on each run on one machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.serve_support import sse_events

pytestmark = [pytest.mark.servers, pytest.mark.local_model, pytest.mark.timeout(900)]

API = "/api/v1"
SEED = 7
# a turn that states something concrete (a found item, a named place), so there is a change to extract
FIND = "I search the cellar of the Copper Lantern inn and find a rusty iron key under a barrel."


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import get_settings
    from serve.app import create_app
    from serve.services import check_binding, open_services

    serve = ServeSettings(api_host="127.0.0.1", narrator_engine=EngineKind.LOCAL, narrator_max_tokens=96)
    with open_services(get_settings(), serve, with_search=False) as services:
        services.open = check_binding(serve, services.keys)  # loopback, no keys: the open mode
        with TestClient(create_app(services, mcp=False), base_url="http://127.0.0.1") as client:
            yield client


@pytest.fixture(scope="module")
def campaign(client: TestClient) -> str:
    world = client.post(f"{API}/worlds", json={"name": "The Borderlands"})
    assert world.status_code == 201, world.text
    body = {"world_id": world.json()["id"], "name": "The Copper Lantern", "profile": {"genre": "fantasy"}}
    made = client.post(f"{API}/campaigns", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_turn_streams_the_models_narration_over_rest(client: TestClient, campaign: str) -> None:
    answer = client.post(f"{API}/campaigns/{campaign}/turns", json={"text": FIND, "stream": True, "seed": SEED})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    events = sse_events(answer.text)
    pieces = [data["text"] for kind, data in events if kind == "delta"]
    done = events[-1][1]
    assert events[-1][0] == "done" and len(pieces) >= 5  # streamed as the model wrote it
    assert "".join(pieces).strip() == done["narration"] and "The world answers" not in done["narration"]
    assert "SmolLM2" in done["generation"]["model"] and done["generation"]["seed"] == SEED
    # the extractor (the same model, constrained to the proposal schema) staged what the narration implies
    assert done["proposal_ids"], f"the model extracted nothing from: {done['narration']!r} (dropped {done['dropped']})"


def test_the_openai_route_answers_with_the_model(client: TestClient) -> None:
    body = {"messages": [{"role": "user", "content": "Name a tavern."}], "max_tokens": 24, "seed": SEED}
    whole = client.post("/v1/chat/completions", json=body)
    assert whole.status_code == 200, whole.text
    doc = whole.json()
    text = doc["choices"][0]["message"]["content"]
    assert "SmolLM2" in doc["model"] and text.strip() and "The world answers" not in text
    again = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert again == text  # the seed makes it reproducible

    streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    lines = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert len([d for d in deltas if d]) >= 3 and "".join(deltas) == text  # the same text, piece by piece
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_scene_end_makes_canon_of_what_the_model_extracted(client: TestClient, campaign: str) -> None:
    scene = next(s for s in client.get(f"{API}/campaigns/{campaign}/scenes").json() if s["status"] == "active")
    proposals: list[dict[str, Any]] = client.get(f"{API}/scenes/{scene['id']}/proposals").json()
    extracted = [p for p in proposals if p["proposed_by"] == "extractor" and p["turn_id"]]
    assert extracted, proposals
    turn = client.get(f"{API}/campaigns/{campaign}/turns/{extracted[0]['turn_id']}/provenance").json()
    calls = {call["seat"]: call for call in turn["prompt"]["calls"]}
    assert "SmolLM2" in calls["extractor"]["model"]  # the model, not a deterministic stand-in, proposed it

    report = client.post(f"{API}/scenes/{scene['id']}/end", json={})
    assert report.status_code == 200, report.text
    decided = {d["proposal_id"]: d for d in report.json()["decisions"]}
    accepted = [p for p in extracted if decided.get(p["id"], {}).get("status") == "accepted"]
    assert accepted and report.json()["events_committed"] >= 1, report.text
    assert all(decided[p["id"]]["event_ids"] for p in accepted)
