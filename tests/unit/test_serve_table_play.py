"""A whole table played through one door: once over MCP alone, as an agent GM would, once over REST alone.

From an admin key only: a world, a campaign, a GM key, a player key, turns, a scene with proposals,
a mid-scene commit, the scene's end, undo, a fork, a branch switch, a checkpoint and its restore, a
retcon, recall and the export. Both tables end in the same state (one digest over what the table
holds, ids replaced by what they name).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services, extraction

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services


class Table:
    """One door, one key at a time: every call must succeed."""

    def __init__(self, doors: Doors, door: str) -> None:
        self.doors, self.door = doors, door

    def __call__(self, key: str, op: str, ids: dict[str, str] | None = None, /, **body: Any) -> Any:
        code, answer = self.doors.call(self.door, op, key, ids or {}, body)
        assert code is None, (self.door, op, answer)
        return answer


def _play(table: Table, admin: str) -> dict[str, Any]:
    """The table, from an admin key to an export; returns what the table holds at the end."""
    world = table(admin, "create_world", name="Ashfall", axioms=["Magic has a price."])
    campaign = table(
        admin, "create_campaign", world_id=world["id"], name="The Ember Road", profile={"genre": "fantasy"}
    )
    cid = {"campaign_id": campaign["id"]}
    gm = table(admin, "create_key", name="the GM", role="gm", campaigns=[campaign["id"]])["key"]
    table(gm, "add_axiom", {"world_id": world["id"]}, text="The dead do not walk.")
    scene = table(gm, "start_scene", cid, title="At the forge")
    player = table(gm, "create_player_key", cid, name="Ada's player")["key"]

    first = table(player, "play_turn", cid, text="I greet the smith.")
    mira = table(
        gm,
        "propose_change",
        {"scene_id": scene["id"]},
        type="entity",
        authority="gm",
        content={"type": "entity", "kind": "character", "name": "Mira"},
    )
    table(gm, "commit_scene", {"scene_id": scene["id"]}, proposal_ids=[mira["id"]])
    mira_id = next(e["id"] for e in table(player, "get_state_as_of", cid)["entities"] if e["name"] == "Mira")
    table(
        player,
        "propose_change",
        {"scene_id": scene["id"]},
        type="fact",
        evidence={"turn_ids": [first["turn_id"]]},
        resolution={"method": "automatic", "outcome": "success"},
        content={"type": "fact", "subject_entity_id": mira_id, "predicate": "trade", "value": "smith"},
    )
    second = table(player, "play_turn", cid, text="I ask about the road.")
    fact = table(
        gm,
        "propose_change",
        {"scene_id": scene["id"]},
        type="fact",
        authority="gm",
        content={"type": "fact", "subject_entity_id": mira_id, "predicate": "mood", "value": "wary"},
    )
    table(gm, "end_scene", {"scene_id": scene["id"]}, summary="Met Mira at the forge.")
    assert fact["status"] == "pending"

    table(gm, "create_checkpoint", cid, name="after the forge")
    table(gm, "undo", cid)
    table(player, "play_turn", cid, text="I leave the forge instead.")  # below the tip: a fork
    branches = table(player, "list_branches", cid)
    assert len(branches) == 2
    main = next(b for b in branches if b["id"] != table(player, "get_campaign", cid)["active_branch_id"])
    table(gm, "switch_branch", {**cid, "branch_id": main["id"]})
    checkpoint = next(c for c in table(player, "list_checkpoints", cid) if c["name"] == "after the forge")
    table(gm, "restore_checkpoint", {**cid, "checkpoint_id": checkpoint["id"]})
    mood = next(f for f in table(player, "get_state_as_of", cid)["facts"] if f["predicate"] == "mood")
    table(gm, "retcon_fact", {"fact_id": mood["id"]}, campaign_id=campaign["id"], reason="she was glad", value="glad")
    recalled = table(player, "recall", cid, query="the smith at the forge", limit=5)
    assert recalled["hits"], "recall finds the table's past"
    bundle = table(gm, "export_campaign", cid)  # a bundle holds the secrets: the GM's
    assert bundle["data"]
    return {
        "state": table(player, "get_state_as_of", cid),
        "turns": table(player, "list_turns", cid),
        "scenes": table(player, "list_scenes", cid),
        "branches": table(player, "list_branches", cid),
        "second": second["turn_id"],
    }


def _digest(held: dict[str, Any]) -> str:
    """One hash over what the table holds, each id replaced by what it names (ids differ from store to store)."""
    names = {e["id"]: e["name"] for e in held["state"]["entities"]}
    turns = [t["text"] for t in held["turns"]]
    doc = {
        "entities": sorted((e["name"], e.get("kind")) for e in held["state"]["entities"]),
        "facts": sorted(
            (names.get(f["subject_entity_id"], "?"), f["predicate"], str(f.get("value")), f["status"])
            for f in held["state"]["facts"]
        ),
        "turns": turns,
        "scenes": sorted((s.get("title") or "", s["status"]) for s in held["scenes"]),
        "branches": len(held["branches"]),
        "head_is_second": held["turns"][-1]["id"] == held["second"],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@pytest.fixture
def two_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from schemas.settings import get_settings
    from serve.app import create_app

    def door(name: str) -> Any:
        monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(tmp_path / name))
        get_settings.cache_clear()
        return api_services(answers=[extraction()] * 20)

    with (
        door("mcp") as over_mcp,
        door("rest") as over_rest,
        TestClient(create_app(over_mcp), base_url="http://127.0.0.1") as mcp_client,
        TestClient(create_app(over_rest), base_url="http://127.0.0.1") as rest_client,
    ):
        yield (over_mcp, Doors(mcp_client)), (over_rest, Doors(rest_client))
    get_settings.cache_clear()


def test_a_whole_table_over_mcp_alone_and_over_rest_alone(two_stores: Any) -> None:
    (mcp_services, mcp_doors), (rest_services, rest_doors) = two_stores
    held = {}
    for door, services, doors in (("mcp", mcp_services, mcp_doors), ("rest", rest_services, rest_doors)):
        admin = services.keys.create("the operator", admin=True)[0]  # the one step outside the API
        held[door] = _play(Table(doors, door), admin)
    assert [e["name"] for e in held["mcp"]["state"]["entities"]] == ["Mira"]
    facts = held["mcp"]["state"]["facts"]
    moods = {f["predicate"]: f["value"] for f in facts if f["status"] == "active"}
    assert moods == {"trade": "smith", "mood": "glad"}  # the player's fact through the gate, the GM's retconned
    assert {f["value"]: f["status"] for f in facts if f["predicate"] == "mood"} == {
        "wary": "superseded",
        "glad": "active",
    }
    assert _digest(held["mcp"]) == _digest(held["rest"])
