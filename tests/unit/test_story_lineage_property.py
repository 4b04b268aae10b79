"""Random play against a model of the story tree: every read answers for its position.

Seeded, bounded sequences of turns, undos, redos, forks, branch switches, scene starts and ends,
proposals, mid-scene commits, retcons and checkpoints (snapshots of older turns) run through the story
service. After each step, the state
at every branch's tip, at the head and at sampled turns, the turns of every branch and the active
scene of every branch are checked against a model written here, independently of
:mod:`story.lineage`: a line holds its turns as a list and the *set* of events it inherited at its
fork (what was visible at the position it forked from); an event is seen at a position when it was
inherited or committed on that line, and anchored at or before the position's depth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from schemas.errors import InvalidRequest, NotFound
from story.service import StoryService
from tests.fixtures.story import FANTASY

pytestmark = pytest.mark.servers

SEEDS = [3, 11, 29, 47, 83]
STEPS = 45


@dataclass
class Event:
    seq: int
    depth: int  # the anchor's depth (-1: before the first turn)
    kind: str  # entity, fact, retcon, scene_set, scene_ended
    ref: str  # the entity, fact, retconned fact or scene


@dataclass
class Line:
    path: list[str]  # turn ids from the root to the tip
    inherited: frozenset[int]  # seqs of the events visible where it forked
    own: list[int] = field(default_factory=list)  # seqs of the events committed on it


@dataclass
class Proposal:
    id: str
    scene: str
    turn: str | None
    kind: str  # entity or fact
    ref: str  # the entity it creates, or the fact's predicate (each fact proposal has its own)
    subject: str | None = None  # a fact's subject


class Model:
    """The story as the tests understand it (no segments, no sequence cutoffs, no snapshots)."""

    def __init__(self, main: str) -> None:
        self.lines: dict[str, Line] = {main: Line([], frozenset())}
        self.active = main
        self.head = -1  # depth of the head on the active line
        self.events: dict[int, Event] = {}
        self.seq = 0
        self.turn_line: dict[str, str] = {}  # turn -> the line it was written on
        self.depth: dict[str, int] = {}
        self.proposals: dict[str, Proposal] = {}
        self.entities: list[str] = []

    # -- reads --------------------------------------------------------------------------------------

    def visible(self, line: str, depth: int) -> list[Event]:
        chosen = self.lines[line]
        seqs = sorted(chosen.inherited | set(chosen.own))
        return [self.events[s] for s in seqs if self.events[s].depth <= depth]

    def fold(self, line: str, depth: int) -> dict[str, Any]:
        entities: dict[str, None] = {}  # in the order they came (ids are random: choices go by order)
        facts: dict[str, str] = {}
        scene: str | None = None
        for e in self.visible(line, depth):
            if e.kind == "entity":
                entities[e.ref] = None
            elif e.kind == "fact":
                facts[e.ref] = "active"
            elif e.kind == "retcon" and e.ref in facts:
                facts[e.ref] = "superseded"
            elif e.kind == "scene_set":
                scene = e.ref
            elif e.kind == "scene_ended" and scene == e.ref:
                scene = None
        return {"entities": list(entities), "facts": facts, "scene": scene}

    def tip(self, line: str) -> int:
        return len(self.lines[line].path) - 1

    def on_head_path(self, turn: str) -> bool:
        return turn in self.lines[self.active].path[: self.head + 1]

    def needs_fork(self) -> bool:
        return self.head < self.tip(self.active)

    # -- writes -------------------------------------------------------------------------------------

    def fork(self, new: str) -> None:
        """A write behind the line's end: a new line continues the head's position (before the first turn,
        a new root: it inherits nothing)."""
        old = self.lines[self.active]
        seen = frozenset(e.seq for e in self.visible(self.active, self.head)) if self.head >= 0 else frozenset()
        self.lines[new] = Line(old.path[: self.head + 1], seen)
        self.active = new

    def commit(self, kind: str, ref: str, depth: int) -> None:
        self.seq += 1
        self.events[self.seq] = Event(self.seq, depth, kind, ref)
        self.lines[self.active].own.append(self.seq)


def view_of(story: StoryService, campaign_id: str, **at: str) -> dict[str, Any]:
    view = story.state(campaign_id, **at)
    return {
        "entities": {e.id for e in view.entities},
        "facts": {f.id: f.status.value for f in view.facts},
        "scene": view.active_scene_id,
        "turn": view.turn_id,
        "branch": view.branch_id,
    }


def check(story: StoryService, campaign_id: str, model: Model, rng: random.Random, mismatches: list[str]) -> None:
    def same(what: str, got: Any, want: Any) -> None:
        if got != want:
            mismatches.append(f"{what}: got {got!r}, want {want!r}")

    def expect(line: str, depth: int, got: dict[str, Any], what: str) -> None:
        want = model.fold(line, depth)
        same(f"{what} entities", got["entities"], set(want["entities"]))
        for key in ("facts", "scene"):
            same(f"{what} {key}", got[key], want[key])

    for line_id, line in model.lines.items():
        tip = model.tip(line_id)
        got = view_of(story, campaign_id, branch_id=line_id)
        expect(line_id, tip, got, f"tip of {line_id}")
        same(f"tip label of {line_id}", (got["turn"], got["branch"]), (line.path[tip] if tip >= 0 else None, line_id))
        same(f"turns of {line_id}", [t.id for t in story.history(campaign_id, branch_id=line_id)], line.path)
        active = story.active_scene(campaign_id, branch_id=line_id)
        same(f"active scene of {line_id}", active.id if active else None, model.fold(line_id, tip)["scene"])
    expect(model.active, model.head, view_of(story, campaign_id), "head")
    same("history", [t.id for t in story.history(campaign_id)], model.lines[model.active].path[: model.head + 1])
    for turn in rng.sample(list(model.turn_line), min(3, len(model.turn_line))):
        got = view_of(story, campaign_id, turn_id=turn)
        expect(model.turn_line[turn], model.depth[turn], got, f"turn {turn}")
        same(f"label of turn {turn}", got["turn"], turn)


class Player:
    """Plays random steps on the service and the model side by side."""

    def __init__(self, story: StoryService, campaign_id: str, model: Model, rng: random.Random) -> None:
        self.story, self.campaign_id, self.model, self.rng = story, campaign_id, model, rng
        self.names = 0

    def _forked(self, will_fork: bool) -> None:
        """Follow the service's fork (its new branch's id) in the model."""
        active = self.story.get_campaign(self.campaign_id).active_branch_id
        assert (active != self.model.active) == will_fork, "the service forked where the model did not, or not"
        if will_fork:
            self.model.fork(active)

    def turn(self) -> None:
        m = self.model
        scene = m.fold(m.active, m.head)["scene"]
        fork = m.needs_fork()
        turn = self.story.add_turn(self.campaign_id, "go", narration="on")
        self._forked(fork)
        assert turn.scene_id == scene, "a turn belongs to the scene active at the head"
        m.lines[m.active].path.append(turn.id)
        m.head += 1
        m.turn_line[turn.id], m.depth[turn.id] = m.active, m.head

    def undo(self) -> None:
        if self.model.head < 0:
            with pytest.raises(InvalidRequest):
                self.story.undo(self.campaign_id)
            return
        self.story.undo(self.campaign_id)
        self.model.head -= 1

    def redo(self) -> None:
        if self.model.head >= self.model.tip(self.model.active):
            with pytest.raises(InvalidRequest):
                self.story.redo(self.campaign_id)
            return
        self.story.redo(self.campaign_id)
        self.model.head += 1

    def branch(self) -> None:
        m = self.model
        if not m.turn_line:
            return self.turn()
        turn = self.rng.choice(list(m.turn_line))
        made = self.story.create_branch(self.campaign_id, turn)
        line, depth = m.turn_line[turn], m.depth[turn]
        seen = frozenset(e.seq for e in m.visible(line, depth))
        m.lines[made.id] = Line(m.lines[line].path[: depth + 1], seen)
        m.active, m.head = made.id, depth
        return None

    def switch(self) -> None:
        target = self.rng.choice(list(self.model.lines))
        self.story.switch_branch(self.campaign_id, target)
        self.model.active, self.model.head = target, self.model.tip(target)

    def start(self) -> None:
        m = self.model
        if m.fold(m.active, m.head)["scene"] is not None:
            with pytest.raises(InvalidRequest, match="still active"):
                self.story.start_scene(self.campaign_id)
            return
        fork = m.needs_fork()
        scene = self.story.start_scene(self.campaign_id, title="scene")
        self._forked(fork)
        m.commit("scene_set", scene.id, m.head)

    def propose(self) -> None:
        m = self.model
        scene = m.fold(m.active, m.head)["scene"]
        if scene is None:
            return self.start()
        path = m.lines[m.active].path[: m.head + 1]
        turn = self.rng.choice([None, *path[-3:]])
        visible = m.fold(m.active, m.head)["entities"]
        self.names += 1
        if visible and self.rng.random() < 0.5:
            made = self.story.propose(
                scene,
                type="fact",
                content={"subject_entity_id": self.rng.choice(visible), "predicate": f"p{self.names}", "value": "v"},
                authority="gm",
                confidence=1.0,
                turn_id=turn,
            )
            subject = made.content.subject_entity_id  # type: ignore[union-attr]
            m.proposals[made.id] = Proposal(made.id, scene, turn, "fact", f"p{self.names}", subject)
        else:
            made = self.story.propose(
                scene,
                type="entity",
                content={"kind": "item", "name": f"thing {self.names}"},
                authority="gm",
                confidence=1.0,
                turn_id=turn,
            )
            m.proposals[made.id] = Proposal(made.id, scene, turn, "entity", f"ent_{made.id.split('_', 1)[1]}")
        return None

    def commit(self) -> None:
        m = self.model
        scene = m.fold(m.active, m.head)["scene"]
        pending = [p for p in m.proposals.values() if p.scene == scene]
        if scene is None or not pending:
            return self.propose()
        chosen = self.rng.choice(pending)
        if chosen.turn is not None and not m.on_head_path(chosen.turn):
            with pytest.raises(InvalidRequest, match="not on the line"):
                self.story.commit(scene, [chosen.id])
            return None
        subjects = {e.ref for e in m.visible(m.active, m.head) if e.kind == "entity"}
        accepted = chosen.kind == "entity" or chosen.subject in subjects
        fork = m.needs_fork() and accepted  # nothing to write, no fork
        report = self.story.commit(scene, [chosen.id])
        self._forked(fork)
        self._record(report, [chosen])
        return None

    def end(self) -> None:
        m = self.model
        scene = m.fold(m.active, m.head)["scene"]
        if scene is None:
            return self.start()
        judged = [p for p in m.proposals.values() if p.scene == scene and (p.turn is None or m.on_head_path(p.turn))]
        fork = m.needs_fork()
        report = self.story.end_scene(scene)
        self._forked(fork)
        assert sorted(d.proposal_id for d in report.decisions) == sorted(p.id for p in judged)
        self._record(report, judged, at_end=True)
        m.commit("scene_ended", scene, m.head)
        return None

    def _record(self, report: Any, judged: list[Proposal], *, at_end: bool = False) -> None:
        """What the gate decided: every proposal here is a GM's, so it is accepted unless it is a fact about
        an entity not in the story at the head; a mid-scene commit anchors its canon at its turn (never
        before the entity it is about), a scene's end at the head."""
        m = self.model
        by_id = {d.proposal_id: d for d in report.decisions}
        at_head = {e.ref: e.depth for e in m.visible(m.active, m.head) if e.kind == "entity"}
        for p in sorted(judged, key=lambda p: report.decisions.index(by_id[p.id])):
            del m.proposals[p.id]
            if p.kind == "fact" and p.subject not in at_head:
                assert by_id[p.id].status.value == "rejected", by_id[p.id].rationale
                continue
            assert by_id[p.id].status.value == "accepted", by_id[p.id].rationale
            depth = m.depth[p.turn] if p.turn is not None and not at_end else m.head
            if p.kind == "fact" and p.turn is not None and not at_end:
                depth = max(depth, at_head[p.subject or ""])
            ref = p.ref
            if p.kind == "fact":  # the fact's id, by its predicate (each proposal has its own)
                ref = next(f.id for f in self.story.state(self.campaign_id).facts if f.predicate == p.ref)
            m.commit(p.kind, ref, depth)
            if p.kind == "entity":
                at_head[ref] = depth

    def checkpoint(self) -> None:
        """A checkpoint of a turn on the head's line (often behind the tip): a snapshot, no change to the story."""
        m = self.model
        path = m.lines[m.active].path[: m.head + 1]
        if not path:
            return self.turn()
        self.story.create_checkpoint(self.campaign_id, "cp", turn_id=self.rng.choice(path))
        return None

    def retcon(self) -> None:
        m = self.model
        facts = [f for f, status in m.fold(m.active, m.head)["facts"].items() if status == "active"]
        if not facts:
            return self.propose()
        fact = self.rng.choice(facts)
        fork = m.needs_fork()
        self.story.retcon(self.campaign_id, fact, reason="never was")
        self._forked(fork)
        m.commit("retcon", fact, m.head)
        return None


@pytest.mark.parametrize("seed", SEEDS)
def test_every_read_answers_for_its_position(embedded_graph: object, local_blob_store: object, seed: int) -> None:
    story = StoryService(embedded_graph, local_blob_store, snapshot_interval=2)  # type: ignore[arg-type]
    story.prepare()
    story.memory_former = None
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "Random play", FANTASY)
    rng = random.Random(seed)
    model = Model(campaign.active_branch_id)
    player = Player(story, campaign.id, model, rng)
    steps = {
        player.turn: 5,
        player.undo: 2,
        player.redo: 2,
        player.branch: 2,
        player.switch: 1,
        player.start: 2,
        player.propose: 3,
        player.commit: 2,
        player.end: 2,
        player.retcon: 1,
        player.checkpoint: 2,
    }
    mismatches: list[str] = []
    done: list[str] = []
    for _ in range(STEPS):
        step = rng.choices(list(steps), weights=list(steps.values()))[0]
        step()
        done.append(step.__name__)
        check(story, campaign.id, model, rng, mismatches)
        assert not mismatches, f"after {done}: {mismatches[:5]}"
    assert len(model.lines) > 1 and model.events  # the walk forked and committed


def test_a_read_of_a_missing_branch_says_so(story: StoryService) -> None:
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "x", FANTASY)
    with pytest.raises(NotFound):
        story.state(campaign.id, branch_id="branch_nope")
    with pytest.raises(NotFound):
        story.history(campaign.id, branch_id="branch_nope")
