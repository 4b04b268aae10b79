"""A retake that rewinds, its turn versions and a revert, over both doors (REST and MCP) as the GM plays them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services, extraction
from tests.unit.test_story_retake import _table

pytestmark = pytest.mark.servers


@pytest.fixture
def table() -> Iterator[tuple[Any, Doors, str]]:
    from schemas.serving import KeyRole
    from serve.app import create_app

    with (
        api_services(answers=[extraction()] * 20) as services,
        TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
    ):
        yield services, Doors(client), KeyRole.GM.value


def _ok(answer: tuple[Any, Any]) -> Any:
    error, body = answer
    assert error is None, body
    return body


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_gm_retakes_a_turn_from_the_rewound_world_and_reverts_it(door: str, table: tuple[Any, Doors, str]) -> None:
    services, doors, gm = table
    story = services.story
    cid, turn_id, _ = _table(story)
    key = services.keys.create("gm", campaigns=[cid], role=gm)[0]
    ids = {"campaign_id": cid, "turn_id": turn_id}

    outcome = _ok(doors.call(door, "retake_turn", key, ids, {}))
    assert outcome["turn_id"] == turn_id
    prompt = _ok(doors.call(door, "get_provenance", key, ids, {}))["prompt_text"]
    assert "Old Mill" in prompt and "Dragon" not in prompt  # the world as it stood when the turn was recorded
    names = {e["name"] for e in _ok(doors.call(door, "get_state_as_of", key, {"campaign_id": cid}, {}))["entities"]}
    assert "Dragon" not in names and "Old Mill" in names

    (version,) = _ok(doors.call(door, "list_turn_versions", key, ids, {}))
    assert version["narration"] == "A shadow passes over the mill." and version["checkpoint_id"]
    automatic = _ok(doors.call(door, "list_checkpoints", key, {"campaign_id": cid}, {"kind": "automatic"}))
    assert automatic and all(c["automatic"] for c in automatic)
    assert {"before_user_input", "after_user_input", "after_character_round", "before_restore"} <= {
        c["kind"] for c in automatic
    }
    assert _ok(doors.call(door, "list_checkpoints", key, {"campaign_id": cid}, {"kind": "named"})) == []

    reverted = _ok(doors.call(door, "revert_turn_version", key, {**ids, "version_id": version["id"]}, {}))
    assert reverted["reverted_at"]
    names = {e["name"] for e in _ok(doors.call(door, "get_state_as_of", key, {"campaign_id": cid}, {}))["entities"]}
    assert "Dragon" in names  # the world that went with the version
    takes = _ok(doors.call(door, "list_takes", key, ids, {}))
    assert next(t for t in takes if t["selected"])["id"] == version["take_id"]
    # reverting the version that is selected already is refused, and changes nothing
    error, _ = doors.call(door, "revert_turn_version", key, {**ids, "version_id": version["id"]}, {})
    assert error is not None


def test_the_served_story_keeps_the_number_of_checkpoints_the_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.settings import get_settings

    monkeypatch.setenv("LOREKEEPER_CHECKPOINTS_KEPT", "5")
    get_settings.cache_clear()
    try:
        with api_services() as services:
            assert services.story.versions.checkpoints.keep == 5
    finally:
        get_settings.cache_clear()
