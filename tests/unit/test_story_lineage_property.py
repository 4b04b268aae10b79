"""Random play against a model of the story tree: every read answers for its position.

Seeded, bounded sequences of turns, undos, redos, forks, branch switches, scene starts and ends,
proposals, mid-scene commits, retcons and checkpoints (snapshots of older turns) run through the story
service. After each step, the state at every branch's tip, at the head and at sampled turns, the turns of
every branch and the active scene of every branch are checked against the model of
:mod:`tests.unit.lineage_support` (written independently of :mod:`story.lineage`). The same walk runs over
the HTTP API in tests/unit/test_serve_lineage_property.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from schemas.errors import NotFound
from story.service import StoryService
from tests.fixtures.story import FANTASY
from tests.unit.lineage_support import Decision, Model, play

pytestmark = pytest.mark.servers

SEEDS = [3, 11, 29, 47, 83]
STEPS = 45


@dataclass
class ServiceTable:
    """The campaign played through the story service (the GM's every move)."""

    story: StoryService
    campaign_id: str

    def state(self, **at: str) -> dict[str, Any]:
        view = self.story.state(self.campaign_id, **at)
        return {
            "entities": {e.id for e in view.entities},
            "facts": {f.id: f.status.value for f in view.facts},
            "scene": view.active_scene_id,
            "turn": view.turn_id,
            "branch": view.branch_id,
        }

    def history(self, branch_id: str | None = None) -> list[str]:
        return [t.id for t in self.story.history(self.campaign_id, branch_id=branch_id)]

    def active_scene(self, branch_id: str) -> str | None:
        active = self.story.active_scene(self.campaign_id, branch_id=branch_id)
        # the scenes read there agree: the active one alone says active (story.scene_status)
        listed = [s.id for s in self.story.scenes(self.campaign_id, branch_id=branch_id) if s.status.value == "active"]
        assert listed == ([active.id] if active else []), (branch_id, listed, active)
        return active.id if active else None

    def tips(self) -> dict[str, str | None]:
        return {b.id: b.tip_turn_id or b.fork_turn_id for b in self.story.branches(self.campaign_id)}

    def active_branch(self) -> str:
        return self.story.get_campaign(self.campaign_id).active_branch_id

    def fact_at_head(self, predicate: str) -> str:
        return next(f.id for f in self.story.state(self.campaign_id).facts if f.predicate == predicate)

    def add_turn(self) -> tuple[str, str | None]:
        turn = self.story.add_turn(self.campaign_id, "go", narration="on")
        return turn.id, turn.scene_id

    def undo(self) -> None:
        self.story.undo(self.campaign_id)

    def redo(self) -> None:
        self.story.redo(self.campaign_id)

    def create_branch(self, from_turn: str) -> str:
        return self.story.create_branch(self.campaign_id, from_turn).id

    def switch_branch(self, branch_id: str) -> None:
        self.story.switch_branch(self.campaign_id, branch_id)

    def start_scene(self) -> str:
        return self.story.start_scene(self.campaign_id, title="scene").id

    def propose(self, scene: str, kind: str, content: dict[str, Any], turn: str | None) -> str:
        return self.story.propose(scene, type=kind, content=content, authority="gm", confidence=1.0, turn_id=turn).id

    def commit(self, scene: str, proposal_ids: list[str]) -> list[Decision]:
        return _decisions(self.story.commit(scene, proposal_ids))

    def end_scene(self, scene: str) -> list[Decision]:
        return _decisions(self.story.end_scene(scene))

    def create_checkpoint(self, turn: str) -> None:
        self.story.create_checkpoint(self.campaign_id, "cp", turn_id=turn)

    def retcon(self, fact: str) -> None:
        self.story.retcon(self.campaign_id, fact, reason="never was")


def _decisions(report: Any) -> list[Decision]:
    return [Decision(d.proposal_id, d.status.value, d.rationale or "") for d in report.decisions]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_read_answers_for_its_position(embedded_graph: object, local_blob_store: object, seed: int) -> None:
    story = StoryService(embedded_graph, local_blob_store, snapshot_interval=2)  # type: ignore[arg-type]
    story.prepare()
    story.memory_former = None
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "Random play", FANTASY)
    model = Model(campaign.active_branch_id)
    play(ServiceTable(story, campaign.id), model, random.Random(seed), STEPS)
    assert len(model.lines) > 1 and model.events  # the walk forked and committed


def test_a_read_of_a_missing_branch_says_so(story: StoryService) -> None:
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "x", FANTASY)
    with pytest.raises(NotFound):
        story.state(campaign.id, branch_id="branch_nope")
    with pytest.raises(NotFound):
        story.history(campaign.id, branch_id="branch_nope")
