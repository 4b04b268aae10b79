"""The narrator deployment that serves GPUs, on local Ray with vLLM's CPU build and no GPU.

The replica builds its engine from settings exactly as in production (``LOREKEEPER_NARRATOR_ENGINE=vllm``);
only the resources differ: ``num_gpus=0``. Requests go through the same handle wrapper the ingress
uses (:class:`serve.deployments.RemoteEngine`), with a campaign id as the multiplexed model id.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_cpu.lane import LANE_ENV, MAX_MODEL_LEN, SMALL_WINDOW, TIMINGS, proposals_schema, read_proposals

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.slow, pytest.mark.timeout(1800)]

MESSAGES = [
    {"role": "system", "content": "You narrate a tabletop game."},
    {"role": "user", "content": "I light a torch and step into the crypt."},
]


@pytest.fixture(scope="module")
def narrator(smollm2: Path) -> Iterator[Any]:
    """The Narrator application on local Ray (2 CPUs, no GPU); yields its handle."""
    import ray
    from ray import serve

    from schemas.serving import ServeSettings
    from serve.deployments import DeploymentConfig, build_narrator

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    # The serving settings are bound into the replica, as build_app binds them in production.
    settings = ServeSettings(
        narrator_engine="vllm", narrator_model=str(smollm2), narrator_max_model_len=MAX_MODEL_LEN, **SMALL_WINDOW
    )
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": dict(LANE_ENV)})
    try:
        # The production builder; only the resources are the CPU lane's.
        config = DeploymentConfig(num_replicas=1, num_cpus=1, num_gpus=0, max_ongoing_requests=8)
        app = build_narrator(config, settings)
        handle = serve.run(app, name="narrator", route_prefix=None)
        TIMINGS["ray.init + serve.run (Narrator)"] = time.perf_counter() - started
        yield handle
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def engine(narrator: Any, smollm2: Path) -> Any:
    from serve.deployments import RemoteEngine

    assert narrator.model_name.remote().result(timeout_s=600) == str(smollm2)  # a replica starts slowly on busy cores
    return RemoteEngine(narrator, str(smollm2), campaign_id="campaign-a")


def test_the_replica_streams_a_narration(engine: Any, loop: asyncio.AbstractEventLoop) -> None:
    async def narrate() -> list[str]:
        return [piece async for piece in engine.stream(MESSAGES, max_tokens=32, temperature=0.8, seed=3)]

    started = time.perf_counter()
    # the replica starts vLLM on the first request: minutes for the 30-layer model on shared cores
    pieces = loop.run_until_complete(asyncio.wait_for(narrate(), timeout=1500))
    TIMINGS["first narration through Serve (engine start incl.)"] = time.perf_counter() - started
    assert pieces and all(isinstance(piece, str) and piece for piece in pieces)

    started = time.perf_counter()
    again = loop.run_until_complete(asyncio.wait_for(narrate(), timeout=120))
    TIMINGS["narration through Serve, warm (32 tokens)"] = time.perf_counter() - started
    # Same seed, same replica, same text (the replica regroups pieces by time, so compare the text).
    assert "".join(again) == "".join(pieces)


def test_the_replica_answers_structured_output(engine: Any, loop: asyncio.AbstractEventLoop) -> None:
    # What the turn flow asks the replica for: the proposals schema narrowed to the answer's budget (the whole
    # schema bounds neither its lists nor its texts: asked for it, the model was cut at 512 tokens), here with
    # at least one proposal, so the grammar leads the model through a whole one.
    budget = MAX_MODEL_LEN - 400
    schema = proposals_schema(budget, min_items=1)
    started = time.perf_counter()
    text = loop.run_until_complete(asyncio.wait_for(engine.structured(MESSAGES, schema=schema, max_tokens=budget), 300))
    TIMINGS["structured output through Serve (proposals)"] = time.perf_counter() - started
    read_proposals(text, schema)
    assert json.loads(text)["proposals"]
