"""Serving settings: what they refuse at start-up, with the variable to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.serving import EngineKind, ServeSettings


def test_a_vllm_window_must_hold_the_prompt_budget_and_the_answer() -> None:
    with pytest.raises(ConfigError, match="LOREKEEPER_NARRATOR_MAX_MODEL_LEN: 4096 tokens cannot hold"):
        ServeSettings(narrator_engine=EngineKind.VLLM, narrator_max_model_len=4096, context_tokens=6144)
    fits = ServeSettings(narrator_engine=EngineKind.VLLM, narrator_max_model_len=8192, context_tokens=6144)
    assert fits.narrator_max_model_len == 8192
    # other engines manage their own windows
    ServeSettings(narrator_engine=EngineKind.ECHO, narrator_max_model_len=1024)


def test_an_openai_engine_needs_its_endpoint() -> None:
    with pytest.raises(ConfigError, match="LOREKEEPER_NARRATOR_BASE_URL"):
        ServeSettings(narrator_engine=EngineKind.OPENAI)
    with pytest.raises(ConfigError, match="LOREKEEPER_EXTRACTOR_BASE_URL"):
        ServeSettings(extractor_engine=EngineKind.OPENAI)


def test_the_endpoint_key_comes_from_a_file_and_stays_secret(tmp_path: Path) -> None:
    key_file = tmp_path / "narrator-key"
    key_file.write_text("sk-very-secret\n")
    settings = ServeSettings(
        narrator_engine=EngineKind.OPENAI, narrator_base_url="http://llm:8000/v1", narrator_api_key_file=key_file
    )
    assert settings.narrator_api_key is not None
    assert settings.narrator_api_key.get_secret_value() == "sk-very-secret"
    assert "sk-very-secret" not in repr(settings) and "sk-very-secret" not in str(settings.model_dump())
    with pytest.raises(ConfigError, match="cannot read"):
        ServeSettings(narrator_api_key_file=tmp_path / "missing")
    with pytest.raises(ConfigError, match="both"):
        ServeSettings(narrator_api_key="x", narrator_api_key_file=key_file)


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_API_HOST", "0.0.0.0")
    monkeypatch.setenv("LOREKEEPER_MAX_CONCURRENT_TURNS", "7")
    settings = ServeSettings()
    assert settings.api_host == "0.0.0.0" and not settings.loopback and settings.max_concurrent_turns == 7
