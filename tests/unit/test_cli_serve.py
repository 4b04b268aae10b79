"""``lorekeeper keys`` and the start-up checks of ``lorekeeper serve``."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from lorekeeper.cli import app

runner = CliRunner()


def _flat(output: str) -> str:
    """The output with the console's line wrapping undone."""
    return " ".join(output.split())


def test_keys_create_list_revoke() -> None:
    created = runner.invoke(app, ["keys", "create", "table seven", "-c", "camp_7", "-c", "camp_8"])
    assert created.exit_code == 0, created.output
    key = created.output.strip().splitlines()[-1]
    assert re.fullmatch(r"lk_[0-9a-f]{12}_[\w-]{20,}", key)
    key_id = key.split("_")[1]
    listed = runner.invoke(app, ["keys", "list", "--json"])
    assert listed.exit_code == 0 and key not in listed.output  # never the secret
    [info] = [json.loads(line) for line in listed.output.splitlines()]
    assert info["id"] == key_id and info["campaigns"] == ["camp_7", "camp_8"] and info["revoked"] is False
    assert runner.invoke(app, ["keys", "revoke", key_id]).exit_code == 0
    assert json.loads(runner.invoke(app, ["keys", "list", "--json"]).output)["revoked"] is True
    unknown = runner.invoke(app, ["keys", "revoke", "nope"])
    assert unknown.exit_code == 2 and "no API key 'nope'" in _flat(unknown.output)
    bard = runner.invoke(app, ["keys", "create", "the bard", "-c", "camp_7", "--character", "ent_bard"])
    assert bard.exit_code == 0, bard.output
    listed = [json.loads(line) for line in runner.invoke(app, ["keys", "list", "--json"]).output.splitlines()]
    assert [k["character_entity_id"] for k in listed if k["name"] == "the bard"] == ["ent_bard"]


def test_a_key_needs_a_scope() -> None:
    result = runner.invoke(app, ["keys", "create", "nobody"])
    assert result.exit_code == 2 and "--admin or at least one --campaign" in _flat(result.output)


def test_serve_refuses_a_public_address_without_keys() -> None:
    result = runner.invoke(app, ["serve", "--direct", "--host", "0.0.0.0", "--port", "8977"])
    assert result.exit_code == 2
    assert "LOREKEEPER_API_KEYS_FILE" in _flat(result.output) and "not loopback" in _flat(result.output)


def test_a_gm_key() -> None:
    created = runner.invoke(app, ["keys", "create", "the gm", "-c", "camp_1", "--role", "gm"])
    assert created.exit_code == 0, created.output
    [info] = [json.loads(line) for line in runner.invoke(app, ["keys", "list", "--json"]).output.splitlines()]
    assert info["role"] == "gm" and info["campaigns"] == ["camp_1"]
    assert runner.invoke(app, ["keys", "create", "x", "-c", "camp_1", "--role", "dm"]).exit_code == 2
