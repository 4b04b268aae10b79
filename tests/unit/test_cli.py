"""The command line: help lists the commands, config never prints secrets, schema export writes files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorekeeper.cli import app

pytestmark = pytest.mark.unit
runner = CliRunner()


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("config", "stores", "schema", "version"):
        assert command in result.output


def test_config_json_hides_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_GRAPH_URL", "bolt://db:7687")
    monkeypatch.setenv("LOREKEEPER_GRAPH_USERNAME", "lore")
    monkeypatch.setenv("LOREKEEPER_GRAPH_PASSWORD", "very-secret-value")
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    assert "very-secret-value" not in result.output
    assert json.loads(result.output)["stores"]["graph"]["backend"] == "neo4j"


def test_bad_setting_exits_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_VECTOR_URL", "ftp://nowhere")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 2
    assert "LOREKEEPER_VECTOR_URL" in result.output


def test_schema_export(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "export", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    files = sorted((tmp_path / "out").glob("*.json"))
    assert len(files) > 20
    for file in files:
        assert json.loads(file.read_text())
