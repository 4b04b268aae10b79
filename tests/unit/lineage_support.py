"""Random play against a model of the story tree, for any table that plays it: the story service
(tests/unit/test_story_lineage_property.py) or the HTTP API (tests/unit/test_serve_lineage_property.py).

:class:`Model` is written here, independently of :mod:`story.lineage`: a line holds its turns as a list and
the *set* of events it inherited at its fork (what was visible at the position it forked from); an event is
seen at a position when it was inherited or committed on that line, and anchored at or before the
position's depth. :class:`Player` plays random steps (turns, undos, redos, forks, branch switches, scene
starts and ends, proposals, mid-scene commits, retcons and checkpoints) on a :class:`Table` and on the model
side by side; :func:`check` compares every read of the table with the model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from schemas.errors import InvalidRequest

WEIGHTS = {
    "turn": 5,
    "undo": 2,
    "redo": 2,
    "branch": 2,
    "switch": 1,
    "start": 2,
    "propose": 3,
    "commit": 2,
    "end": 2,
    "retcon": 1,
    "checkpoint": 2,
}
"""How often each step is drawn."""


@dataclass(frozen=True)
class Decision:
    """The gate's decision on one proposal, as a table reports it."""

    proposal_id: str
    status: str  # accepted, rejected …
    rationale: str = ""


class Table(Protocol):
    """One campaign played by its GM, through the story service or through the API.

    Reads answer for a position: ``state`` at a branch's tip (``branch_id``), a turn (``turn_id``) or the head
    (neither) as ``{"entities": set of ids, "facts": {id: status}, "scene": active scene id or None, "turn",
    "branch"}``; ``history`` the turn ids of a branch's line or of the head's. A refusal of the story's rules
    raises :class:`~schemas.errors.InvalidRequest` with its message.
    """

    def state(self, **at: str) -> dict[str, Any]: ...
    def history(self, branch_id: str | None = None) -> list[str]: ...
    def active_scene(self, branch_id: str) -> str | None: ...
    def tips(self) -> dict[str, str | None]: ...  # each branch's last turn: its own tip, else its fork's turn
    def active_branch(self) -> str: ...
    def fact_at_head(self, predicate: str) -> str: ...
    def add_turn(self) -> tuple[str, str | None]: ...  # the turn's id, and its scene's
    def undo(self) -> None: ...
    def redo(self) -> None: ...
    def create_branch(self, from_turn: str) -> str: ...
    def switch_branch(self, branch_id: str) -> None: ...
    def start_scene(self) -> str: ...
    def propose(self, scene: str, kind: str, content: dict[str, Any], turn: str | None) -> str: ...
    def commit(self, scene: str, proposal_ids: list[str]) -> list[Decision]: ...
    def end_scene(self, scene: str) -> list[Decision]: ...
    def create_checkpoint(self, turn: str) -> None: ...
    def retcon(self, fact: str) -> None: ...


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


def check(table: Table, model: Model, rng: random.Random, mismatches: list[str]) -> None:
    """Every read the table answers, at every branch's tip, the head and sampled turns, against the model."""

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
        got = table.state(branch_id=line_id)
        expect(line_id, tip, got, f"tip of {line_id}")
        same(f"tip label of {line_id}", (got["turn"], got["branch"]), (line.path[tip] if tip >= 0 else None, line_id))
        same(f"turns of {line_id}", table.history(branch_id=line_id), line.path)
        same(f"active scene of {line_id}", table.active_scene(line_id), model.fold(line_id, tip)["scene"])
    same("tips", table.tips(), {b: (line.path[-1] if line.path else None) for b, line in model.lines.items()})
    expect(model.active, model.head, table.state(), "head")
    same("history", table.history(), model.lines[model.active].path[: model.head + 1])
    for turn in rng.sample(list(model.turn_line), min(3, len(model.turn_line))):
        got = table.state(turn_id=turn)
        expect(model.turn_line[turn], model.depth[turn], got, f"turn {turn}")
        same(f"label of turn {turn}", got["turn"], turn)


class Player:
    """Plays random steps on a table (the service, or the API) and the model side by side."""

    def __init__(self, table: Table, model: Model, rng: random.Random) -> None:
        self.story, self.model, self.rng = table, model, rng
        self.names = 0

    def _forked(self, will_fork: bool) -> None:
        """Follow the service's fork (its new branch's id) in the model."""
        active = self.story.active_branch()
        assert (active != self.model.active) == will_fork, "the service forked where the model did not, or not"
        if will_fork:
            self.model.fork(active)

    def turn(self) -> None:
        m = self.model
        scene = m.fold(m.active, m.head)["scene"]
        fork = m.needs_fork()
        turn, in_scene = self.story.add_turn()
        self._forked(fork)
        assert in_scene == scene, "a turn belongs to the scene active at the head"
        m.lines[m.active].path.append(turn)
        m.head += 1
        m.turn_line[turn], m.depth[turn] = m.active, m.head

    def undo(self) -> None:
        if self.model.head < 0:
            with pytest.raises(InvalidRequest):
                self.story.undo()
            return
        self.story.undo()
        self.model.head -= 1

    def redo(self) -> None:
        if self.model.head >= self.model.tip(self.model.active):
            with pytest.raises(InvalidRequest):
                self.story.redo()
            return
        self.story.redo()
        self.model.head += 1

    def branch(self) -> None:
        m = self.model
        if not m.turn_line:
            return self.turn()
        turn = self.rng.choice(list(m.turn_line))
        made = self.story.create_branch(turn)
        line, depth = m.turn_line[turn], m.depth[turn]
        seen = frozenset(e.seq for e in m.visible(line, depth))
        m.lines[made] = Line(m.lines[line].path[: depth + 1], seen)
        m.active, m.head = made, depth
        return None

    def switch(self) -> None:
        target = self.rng.choice(list(self.model.lines))
        self.story.switch_branch(target)
        self.model.active, self.model.head = target, self.model.tip(target)

    def start(self) -> None:
        m = self.model
        if m.fold(m.active, m.head)["scene"] is not None:
            with pytest.raises(InvalidRequest, match="still active"):
                self.story.start_scene()
            return
        fork = m.needs_fork()
        scene = self.story.start_scene()
        self._forked(fork)
        m.commit("scene_set", scene, m.head)

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
            subject = self.rng.choice(visible)
            content = {"subject_entity_id": subject, "predicate": f"p{self.names}", "value": "v"}
            made = self.story.propose(scene, "fact", content, turn)
            m.proposals[made] = Proposal(made, scene, turn, "fact", f"p{self.names}", subject)
        else:
            made = self.story.propose(scene, "entity", {"kind": "item", "name": f"thing {self.names}"}, turn)
            m.proposals[made] = Proposal(made, scene, turn, "entity", f"ent_{made.split('_', 1)[1]}")
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
        assert sorted(d.proposal_id for d in report) == sorted(p.id for p in judged)
        self._record(report, judged, at_end=True)
        m.commit("scene_ended", scene, m.head)
        return None

    def _record(self, report: list[Decision], judged: list[Proposal], *, at_end: bool = False) -> None:
        """What the gate decided: every proposal here is a GM's, so it is accepted unless it is a fact about
        an entity not in the story at the head; a mid-scene commit anchors its canon at its turn (never
        before the entity it is about), a scene's end at the head."""
        m = self.model
        by_id = {d.proposal_id: d for d in report}
        at_head = {e.ref: e.depth for e in m.visible(m.active, m.head) if e.kind == "entity"}
        for p in sorted(judged, key=lambda p: report.index(by_id[p.id])):
            del m.proposals[p.id]
            if p.kind == "fact" and p.subject not in at_head:
                assert by_id[p.id].status == "rejected", by_id[p.id].rationale
                continue
            assert by_id[p.id].status == "accepted", by_id[p.id].rationale
            depth = m.depth[p.turn] if p.turn is not None and not at_end else m.head
            if p.kind == "fact" and p.turn is not None and not at_end:
                depth = max(depth, at_head[p.subject or ""])
            ref = p.ref
            if p.kind == "fact":  # the fact's id, by its predicate (each proposal has its own)
                ref = self.story.fact_at_head(p.ref)
            m.commit(p.kind, ref, depth)
            if p.kind == "entity":
                at_head[ref] = depth

    def checkpoint(self) -> None:
        """A checkpoint of a turn on the head's line (often behind the tip): a snapshot, no change to the story."""
        m = self.model
        path = m.lines[m.active].path[: m.head + 1]
        if not path:
            return self.turn()
        self.story.create_checkpoint(self.rng.choice(path))
        return None

    def retcon(self) -> None:
        m = self.model
        facts = [f for f, status in m.fold(m.active, m.head)["facts"].items() if status == "active"]
        if not facts:
            return self.propose()
        fact = self.rng.choice(facts)
        fork = m.needs_fork()
        self.story.retcon(fact)
        self._forked(fork)
        m.commit("retcon", fact, m.head)
        return None


def play(table: Table, model: Model, rng: random.Random, steps: int) -> list[str]:
    """Play ``steps`` random steps, checking every read after each; returns the steps played.

    Raises:
        AssertionError: naming the steps played and the first mismatches.
    """
    player = Player(table, model, rng)
    mismatches: list[str] = []
    done: list[str] = []
    for _ in range(steps):
        name = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        getattr(player, name)()
        done.append(name)
        check(table, model, rng, mismatches)
        assert not mismatches, f"after {done}: {mismatches[:5]}"
    return done
