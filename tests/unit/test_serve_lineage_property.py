"""Branch-true reads over the HTTP API (issue 25 part 4): random sequences of turns, undos, redos, forks, branch
switches, scene starts and ends, proposals, mid-scene commits, retcons and checkpoints played by the GM's key
through the real app in this process, each read checked against a replay of the events in the model of
:mod:`tests.unit.lineage_support` (0 mismatches).

The walk and the model are the service-level test's (tests/unit/test_story_lineage_property.py); here every
move and every read is an operation called over a door: ``play_turn`` (narrated by the echo engine),
``undo``, ``redo``, ``create_branch``, ``switch_branch``, ``start_scene``, ``propose_change``,
``commit_scene``, ``end_scene``, ``create_checkpoint``, ``retcon_fact``; reads ``get_state_as_of`` at every
branch's tip, the head and sampled turns, ``list_turns`` of every branch and of the head, ``list_branches``
(each branch's tip) and ``get_campaign`` (the active branch). Fewer seeds and steps than the service-level
test (a turn over the API is narrated, extracted and checkpointed): three seeds over REST, one over MCP.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.errors import InvalidRequest
from tests.unit.lineage_support import Decision, Model, play
from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services, extraction

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

WALKS = [("rest", 3), ("rest", 29), ("rest", 83), ("mcp", 11)]
STEPS = 30


@dataclass
class ApiTable:
    """The campaign played by its GM's key through one door of the API."""

    doors: Doors
    door: str
    key: str
    campaign_id: str

    def _call(self, name: str, body: dict[str, Any] | None = None, **ids: str) -> Any:
        from serve.operations import OPERATIONS

        if "campaign_id" in OPERATIONS[name].ids:  # a scene's or a fact's operation finds its campaign itself
            ids = {"campaign_id": self.campaign_id, **ids}
        code, answer = self.doors.call(self.door, name, self.key, ids, body or {})
        if code == "invalid_request":  # the story's rule refused it: as the service raises it
            raise InvalidRequest("api", str(answer.get("message") if isinstance(answer, dict) else answer))
        assert code is None, (name, ids, body, answer)
        return answer

    def _view(self, **at: str) -> dict[str, Any]:
        return self._call("get_state_as_of", at)  # type: ignore[no-any-return]

    def state(self, **at: str) -> dict[str, Any]:
        view = self._view(**at)
        return {
            "entities": {e["id"] for e in view["entities"]},
            "facts": {f["id"]: f["status"] for f in view["facts"]},
            "scene": view["active_scene_id"],
            "turn": view["turn_id"],
            "branch": view["branch_id"],
        }

    def history(self, branch_id: str | None = None) -> list[str]:
        body: dict[str, Any] = {"last": 1000} | ({"branch_id": branch_id} if branch_id else {})
        return [t["id"] for t in self._call("list_turns", body)]

    def active_scene(self, branch_id: str) -> str | None:
        active = self._view(branch_id=branch_id)["active_scene_id"]
        # list_scenes read there agrees: the active one alone says active
        listed = [s["id"] for s in self._call("list_scenes", {"branch_id": branch_id}) if s["status"] == "active"]
        assert listed == ([active] if active else []), (branch_id, listed, active)
        return active  # type: ignore[no-any-return]

    def tips(self) -> dict[str, str | None]:
        return {b["id"]: b["tip_turn_id"] or b["fork_turn_id"] for b in self._call("list_branches")}

    def active_branch(self) -> str:
        return self._call("get_campaign")["active_branch_id"]  # type: ignore[no-any-return]

    def fact_at_head(self, predicate: str) -> str:
        return next(f["id"] for f in self._view()["facts"] if f["predicate"] == predicate)

    def add_turn(self) -> tuple[str, str | None]:
        turn_id = self._call("play_turn", {"text": "go"})["turn_id"]
        (turn,) = self._call("list_turns", {"turn_id": turn_id, "last": 1})
        assert turn["id"] == turn_id
        return turn_id, turn["scene_id"]

    def undo(self) -> None:
        self._call("undo")

    def redo(self) -> None:
        self._call("redo")

    def create_branch(self, from_turn: str) -> str:
        return self._call("create_branch", {"from_turn_id": from_turn})["id"]  # type: ignore[no-any-return]

    def switch_branch(self, branch_id: str) -> None:
        self._call("switch_branch", branch_id=branch_id)

    def start_scene(self) -> str:
        return self._call("start_scene", {"title": "scene"})["id"]  # type: ignore[no-any-return]

    def propose(self, scene: str, kind: str, content: dict[str, Any], turn: str | None) -> str:
        body = {"type": kind, "content": {"type": kind, **content}, "authority": "gm", "confidence": 1.0}
        return self._call("propose_change", body | ({"turn_id": turn} if turn else {}), scene_id=scene)["id"]  # type: ignore[no-any-return]

    def commit(self, scene: str, proposal_ids: list[str]) -> list[Decision]:
        return _decisions(self._call("commit_scene", {"proposal_ids": proposal_ids}, scene_id=scene))

    def end_scene(self, scene: str) -> list[Decision]:
        return _decisions(self._call("end_scene", {}, scene_id=scene))

    def create_checkpoint(self, turn: str) -> None:
        self._call("create_checkpoint", {"name": "cp", "turn_id": turn})

    def retcon(self, fact: str) -> None:
        self._call("retcon_fact", {"campaign_id": self.campaign_id, "reason": "never was"}, fact_id=fact)


def _decisions(report: dict[str, Any]) -> list[Decision]:
    return [Decision(d["proposal_id"], d["status"], d.get("rationale") or "") for d in report["decisions"]]


@pytest.fixture(scope="module")
def app() -> Iterator[tuple[Any, Doors]]:
    from serve.app import create_app

    with api_services(answers=[extraction()] * 2000, with_recall=False) as services:
        services.story.snapshots.interval = 2  # snapshots along every line, as the service-level walk has them
        with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client)


@pytest.mark.parametrize(("door", "seed"), WALKS, ids=[f"{door}-{seed}" for door, seed in WALKS])
def test_every_api_read_answers_for_its_position(app: tuple[Any, Doors], door: str, seed: int) -> None:
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile

    services, doors = app
    story = services.story
    campaign = story.create_campaign(story.create_world(f"World {seed}").id, "Random play", StoryProfile(genre="x"))
    key = services.keys.create(f"gm {seed}", campaigns=[campaign.id], role=KeyRole.GM)[0]
    model = Model(campaign.active_branch_id)
    table = ApiTable(doors, door, key, campaign.id)
    done = play(table, model, random.Random(seed), STEPS)
    assert len(model.lines) > 1 and model.events, done  # the walk forked and committed
