"""A table's turns over the REST API with vLLM narrating and extracting, in one process.

The API, the turn flow and the embedded stores are the production ones; the engine is the one
``LOREKEEPER_NARRATOR_ENGINE=vllm`` builds, on the embedded default model (real weights). What is checked
is the flow around the model's words: the narration streams and is kept, the extraction is guided into
the proposals schema and its proposals are staged or dropped with a reason, never a failed turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from schemas.serving import EngineKind, ServeSettings
from tests.vllm_cpu.lane import TIMINGS

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.slow, pytest.mark.timeout(1800)]

API = "/api/v1"


def _events(body: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines.get("event", "message"), json.loads(lines["data"])))
    return events


def test_turns_over_http_with_vllm(smollm2: Path) -> None:
    from fastapi.testclient import TestClient

    from narrator.engines import VLLMEngine, build_engine
    from schemas.settings import get_settings
    from serve.app import create_app
    from serve.services import SingleEngine, check_binding, open_services

    serve_settings = ServeSettings(
        api_host="127.0.0.1",
        narrator_engine=EngineKind.VLLM,
        narrator_model=str(smollm2),
        # The extractor asks for up to 1024 tokens after its prompt: the window must hold both.
        narrator_max_model_len=4096,
        narrator_max_tokens=48,
        context_tokens=512,
    )
    engine = build_engine(serve_settings)
    assert isinstance(engine, VLLMEngine)
    try:
        with open_services(
            get_settings(), serve_settings, narrator=SingleEngine(engine), with_search=False, with_recall=False
        ) as services:
            services.open = check_binding(serve_settings, services.keys)
            app = create_app(services, plugins=[], mcp=False)
            with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
                world = client.post(f"{API}/worlds", json={"name": "Ashfall", "axioms": ["Magic has a price."]})
                assert world.status_code == 201, world.text
                body = {"world_id": world.json()["id"], "name": "The Ember Road", "profile": {"genre": "fantasy"}}
                campaign = client.post(f"{API}/campaigns", json=body)
                assert campaign.status_code == 201, campaign.text
                cid = campaign.json()["id"]

                started = time.perf_counter()
                first = client.post(f"{API}/campaigns/{cid}/turns", json={"text": "I greet the smith."})
                TIMINGS["first turn over HTTP (engine start incl.)"] = time.perf_counter() - started
                assert first.status_code == 201, first.text
                outcome = first.json()
                assert outcome["narration"] and outcome["generation"]["model"] == str(smollm2)
                assert len(outcome["narration"].split()) >= 3, outcome["narration"]  # words of a real model
                # Whatever the extractor wrote was parsed: staged, or dropped with a reason.
                assert all(isinstance(reason, str) and reason for reason in outcome["dropped"])

                started = time.perf_counter()
                streamed = client.post(
                    f"{API}/campaigns/{cid}/turns", json={"text": "I ask about the road.", "stream": True}
                )
                TIMINGS["streamed turn over HTTP, warm"] = time.perf_counter() - started
                assert streamed.status_code == 200, streamed.text
                events = _events(streamed.text)
                kinds = [kind for kind, _ in events]
                assert kinds[0] == "turn" and kinds[-1] == "done" and "delta" in kinds
                pieces = "".join(str(data["text"]) for kind, data in events if kind == "delta")
                assert pieces.strip() == events[-1][1]["narration"]

                history = client.get(f"{API}/campaigns/{cid}/turns").json()
                assert len(history) == 2
    finally:
        asyncio.run(engine.close())
