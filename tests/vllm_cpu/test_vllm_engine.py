"""The narrator's vLLM engine, for real, on vLLM's CPU build with the embedded default model.

SmolLM2-135M-Instruct (real weights, its own tokenizer and chat template): start-up, streaming,
guided decoding against our schemas, the prefix cache, and the errors at the edge.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from narrator.engines import VLLMEngine, build_engine, guidable_schema
from schemas.serving import EngineKind, ExtractionBatch, ServeSettings
from tests.vllm_cpu.lane import MAX_MODEL_LEN, SMALL_WINDOW, TIMINGS, proposals_schema, read_proposals

# the engine starts in minutes on shared cores
pytestmark = [pytest.mark.vllm_cpu, pytest.mark.slow, pytest.mark.timeout(1800)]

SCENE = [
    # Long enough to fill whole KV blocks: only full blocks go into the prefix cache.
    {"role": "system", "content": "You narrate a tabletop game. Keep to the rules and the scene. " * 24},
    {"role": "user", "content": "I push the tavern door open and look for the goblin."},
]

SMALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mood": {"enum": ["calm", "tense", "grim"]},
        "lit": {"type": "boolean"},
        "exits": {"type": "integer", "minimum": 0, "maximum": 9},
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "items": {"type": "array", "items": {"enum": ["rope", "torch", "key"]}, "maxItems": 3},
    },
    "required": ["mood", "lit", "exits", "name", "items"],
    "additionalProperties": False,
}


def run(loop: asyncio.AbstractEventLoop, coroutine: Any) -> Any:
    return loop.run_until_complete(coroutine)


async def _collect(engine: VLLMEngine, messages: list[dict[str, str]], **kwargs: Any) -> list[str]:
    return [piece async for piece in engine.stream(messages, **kwargs)]


@pytest.fixture(scope="module")
def engine(smollm2: Path, loop: asyncio.AbstractEventLoop) -> Iterator[VLLMEngine]:
    """The engine, started (its first request starts it) and timed."""
    engine = VLLMEngine(str(smollm2), max_model_len=MAX_MODEL_LEN, engine_kwargs={"max_num_seqs": 8})
    try:
        started = time.perf_counter()
        run(loop, _collect(engine, SCENE, max_tokens=1, temperature=0.0))
        TIMINGS["engine start (VLLMEngine, in-process)"] = time.perf_counter() - started
        yield engine
    finally:
        # An engine left open keeps its ZeroMQ sockets and the interpreter never exits.
        run(loop, engine.close())


def test_build_engine_picks_vllm_from_settings(smollm2: Path) -> None:
    settings = ServeSettings(
        narrator_engine=EngineKind.VLLM,
        narrator_model=str(smollm2),
        narrator_max_model_len=MAX_MODEL_LEN,
        **SMALL_WINDOW,
    )
    engine = build_engine(settings)
    assert isinstance(engine, VLLMEngine) and engine.model == str(smollm2)
    args = engine._engine_args()
    assert args["enable_prefix_caching"] is True and args["max_model_len"] == MAX_MODEL_LEN
    assert args["structured_outputs_config"].backend == "guidance"
    assert args["structured_outputs_config"].disable_any_whitespace is True


def test_stream_pieces_make_the_whole_narration(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    started = time.perf_counter()
    pieces = run(loop, _collect(engine, SCENE, max_tokens=64, temperature=0.8, seed=7))
    elapsed = time.perf_counter() - started
    assert pieces and all(isinstance(piece, str) and piece for piece in pieces)
    assert len(pieces) <= 64

    async def whole() -> Any:
        params = SamplingParams(max_tokens=64, temperature=0.8, seed=7, output_kind=RequestOutputKind.FINAL_ONLY)
        final = None
        async for output in engine._engine.generate(engine._prompt(SCENE), params, request_id=uuid.uuid4().hex):
            final = output
        return final

    final = run(loop, whole())
    assert "".join(pieces) == final.outputs[0].text  # same seed, same tokens: the pieces are the whole
    TIMINGS["decode, 1 stream (per token)"] = elapsed / max(1, len(final.outputs[0].token_ids))


def test_the_real_model_narrates_in_words(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    text = "".join(run(loop, _collect(engine, SCENE, max_tokens=48, temperature=0.0)))
    words = [w for w in text.split() if w.strip(".,!?;:'\"").isalpha()]
    assert len(words) >= 5, text  # English from a real model, not the noise of random weights
    assert "<|im_end|>" not in text and "<|im_start|>" not in text  # the end-of-turn token stops it, unseen


def test_streams_run_side_by_side(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    tables = [[SCENE[0], {"role": "user", "content": f"Table {i}: I draw my sword."}] for i in range(8)]

    async def all_tables() -> list[list[str]]:
        return await asyncio.gather(
            *(_collect(engine, m, max_tokens=32, temperature=0.8, seed=i) for i, m in enumerate(tables))
        )

    started = time.perf_counter()
    results = run(loop, all_tables())
    elapsed = time.perf_counter() - started
    assert len(results) == 8 and all(results)
    TIMINGS["decode, 8 streams at once (wall per token)"] = elapsed / 32


def test_prefix_cache_is_on_and_hits(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    from vllm import SamplingParams

    cache = engine._engine.vllm_config.cache_config
    assert cache.enable_prefix_caching is True

    async def cached_tokens(messages: list[dict[str, str]]) -> tuple[int, int]:
        last = None
        params = SamplingParams(max_tokens=1, temperature=0.0)
        async for output in engine._engine.generate(engine._prompt(messages), params, request_id=uuid.uuid4().hex):
            last = output
        assert last is not None
        return last.num_cached_tokens or 0, len(last.prompt_token_ids or [])

    # The same rules with another player's input: the shared head of the prompt comes from the cache.
    run(loop, cached_tokens(SCENE))
    other = [SCENE[0], {"role": "user", "content": "I sit down by the fire instead."}]
    cached, prompt = run(loop, cached_tokens(other))
    assert prompt > cache.block_size, "the prompt must fill a KV block for the test to mean anything"
    assert cached >= cache.block_size and cached < prompt


@pytest.mark.parametrize("player", ["I open the door.", "Who is the innkeeper?", "I cast a light spell."])
def test_structured_output_follows_a_schema(engine: VLLMEngine, loop: asyncio.AbstractEventLoop, player: str) -> None:
    import jsonschema

    messages = [SCENE[0], {"role": "user", "content": player}]
    text = run(loop, engine.structured(messages, schema=SMALL_SCHEMA, max_tokens=128))
    jsonschema.validate(json.loads(text), SMALL_SCHEMA)


def test_structured_output_follows_the_proposals_schema(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    # What the extractor asks at the lane's budget: the schema narrowed to close within it (the whole one,
    # unbounded, was cut at 256 tokens).
    budget = int(SMALL_WINDOW["extractor_max_tokens"])
    schema = proposals_schema(budget)
    started = time.perf_counter()
    text = run(loop, engine.structured(SCENE, schema=schema, max_tokens=budget))
    TIMINGS["structured output, proposals schema"] = time.perf_counter() - started
    read_proposals(text, schema)


def test_structured_output_writes_a_whole_proposal(engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
    # Exactly one proposal of the whole schema: the grammar must lead the model through a discriminated,
    # patterned, length-bounded proposal and close it within the token budget. Whether the parse keeps it
    # is the model's (a fact with both an entity and a value is dropped with a reason, never a failure).
    schema = proposals_schema(None, min_items=1, max_items=1)
    text = run(loop, engine.structured(SCENE, schema=schema, max_tokens=MAX_MODEL_LEN - 400))
    good, dropped = read_proposals(text, schema)
    assert len(good) + len(dropped) == 1 and json.loads(text)["proposals"][0]["content"]["type"]


def test_guidable_reads_one_of_as_any_of() -> None:
    schema = ExtractionBatch.model_json_schema()
    assert "oneOf" in json.dumps(schema)
    rewritten = json.dumps(guidable_schema(schema))
    assert "oneOf" not in rewritten and rewritten.count("anyOf") == json.dumps(schema).count("anyOf") + json.dumps(
        schema
    ).count("oneOf")


def test_a_refused_request_is_our_error_and_the_engine_goes_on(
    engine: VLLMEngine, loop: asyncio.AbstractEventLoop
) -> None:
    from schemas.errors import InvalidRequest

    # A prompt longer than the window (vLLM shortens max_tokens to fit, but refuses such a prompt).
    too_long = [SCENE[0], {"role": "user", "content": "I shout. " * MAX_MODEL_LEN}]
    with pytest.raises(InvalidRequest, match="refused"):
        run(loop, engine.structured(too_long, schema=SMALL_SCHEMA, max_tokens=16))
    with pytest.raises(InvalidRequest, match="refused"):
        run(loop, _collect(engine, too_long, max_tokens=16, temperature=0.8))
    assert run(loop, _collect(engine, SCENE, max_tokens=4, temperature=0.8))
