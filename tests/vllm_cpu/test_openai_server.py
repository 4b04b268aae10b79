"""The ``openai`` engine against a real, independent OpenAI-compatible server: vLLM's own, on the default model.

``python -m vllm.entrypoints.openai.api_server`` serves the converted SmolLM2 folder in its own process
group (the server is vLLM's, not ours); Lorekeeper's :class:`~narrator.engines.OpenAIEngine` talks to
it over HTTP exactly as it would to any endpoint: health, streamed narration, structured output against
the proposals schema, and a refused request as our error with the server still serving after.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm_cpu.lane import LANE_ENV, MAX_MODEL_LEN, TIMINGS, proposals_schema, read_proposals

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.slow, pytest.mark.timeout(1800)]

SERVED = "smollm2"
SCENE = [
    {"role": "system", "content": "You narrate a tabletop fantasy game in the second person, briefly."},
    {"role": "user", "content": "I push the tavern door open and look for the goblin."},
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(model: Path, port: int, *, max_num_seqs: int = 8) -> list[str]:
    """vLLM's OpenAI-compatible server on ``model``: prefix caching on, guidance for structured output."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", SERVED,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(max_num_seqs),
        "--enable-prefix-caching", "--enable-prompt-tokens-details",
        "--structured-outputs-config", json.dumps({"backend": "guidance", "disable_any_whitespace": True}),
    ]  # fmt: skip


def wait_until_up(process: subprocess.Popen[bytes], base: str, log: Path, timeout_s: float = 1500) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM's server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"vLLM's server did not come up in {timeout_s} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (its engine core is a child), SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's base URL (``http://127.0.0.1:PORT``), up and answering."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_command(smollm2, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **LANE_ENV},
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, base, log)
        TIMINGS["vLLM OpenAI server start"] = time.perf_counter() - started
        yield base
    finally:
        stop(process)


@pytest.fixture()
def engine(server: str) -> Any:
    """Makes the engine Lorekeeper builds for ``LOREKEEPER_NARRATOR_ENGINE=openai`` (one per event loop)."""
    from narrator.engines import OpenAIEngine

    return lambda: OpenAIEngine(f"{server}/v1", SERVED, timeout_s=300)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def _collect(make: Any, messages: list[dict[str, str]], **kwargs: Any) -> list[str]:
    engine = make()
    try:
        return [piece async for piece in engine.stream(messages, **kwargs)]
    finally:
        await engine.close()


def test_health_and_model_listing(engine: Any, server: str) -> None:
    async def health() -> str:
        made = engine()
        try:
            return str(await made.health())
        finally:
            await made.close()

    assert run(health()) == "ok"
    listed = httpx.get(f"{server}/v1/models", timeout=30).json()
    assert [m["id"] for m in listed["data"]] == [SERVED]


def test_the_openai_engine_streams_a_real_narration(engine: Any, server: str) -> None:
    started = time.perf_counter()
    pieces = run(_collect(engine, SCENE, max_tokens=48, temperature=0.0, seed=1))
    TIMINGS["narration over vLLM's server (48 tokens)"] = time.perf_counter() - started
    text = "".join(pieces)
    assert len(pieces) > 1, "streamed piece by piece"
    assert len([w for w in text.split() if w.strip(".,!?;:'\"").isalpha()]) >= 5, text
    # the same request unstreamed gives the same words (greedy): the pieces are the whole
    whole = httpx.post(
        f"{server}/v1/chat/completions",
        json={"model": SERVED, "messages": SCENE, "max_tokens": 48, "temperature": 0.0, "seed": 1},
        timeout=300,
    ).json()
    assert text == whole["choices"][0]["message"]["content"]


def test_the_openai_engine_gets_a_proposals_document(engine: Any) -> None:
    # The whole schema, unions and free-form maps included (oneOf and propertyNames, which vLLM's server
    # refuses as such: the engine sends the portable schema), with one or two proposals.
    schema = proposals_schema(None, min_items=1, max_items=2)

    async def ask() -> str:
        made = engine()
        try:
            return str(await made.structured(SCENE, schema=schema, max_tokens=MAX_MODEL_LEN - 200))
        finally:
            await made.close()

    started = time.perf_counter()
    text = run(ask())
    TIMINGS["structured output over vLLM's server"] = time.perf_counter() - started
    read_proposals(text, schema)
    assert 1 <= len(json.loads(text)["proposals"]) <= 2


def test_a_refused_request_is_our_error_and_the_server_goes_on(engine: Any) -> None:
    from schemas.errors import InvalidRequest

    too_long = [SCENE[0], {"role": "user", "content": "I shout. " * MAX_MODEL_LEN}]
    with pytest.raises(InvalidRequest, match="refused"):
        run(_collect(engine, too_long, max_tokens=16, temperature=0.8))
    assert run(_collect(engine, SCENE, max_tokens=4, temperature=0.8))
