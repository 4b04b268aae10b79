"""Recall returns exactly what the story holds at a position, and nothing of another campaign.

- What a scene's end made (its canon outcomes, its summary, the memories formed) sits where that end's
  canon was committed: a branch forked at the end turn before the end never recalls it, one forked
  after does, and the end's own branch does (directed cases).
- A randomized replay (fixed seed): campaigns played with turns, scenes, undo and redo, branches forked
  during scenes, switches, scene ends that form memories and summaries, memories written directly;
  after every step recalls from the head, as of earlier turns and as observers. A model of the story
  (turns with their parents, branches with the step they forked at, records with the step and the
  branch they were committed on) says what is visible, and every hit must be.
- The side channel: a campaign's recall answers the same after another campaign writes.

The stores are the embedded ones; the embedding model is a small bag-of-words hashing model, so the
replay runs in seconds (the recall code is the same whatever model embeds).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from schemas.errors import LorekeeperError
from schemas.recall import RecallHit, RecallKind
from schemas.settings import Settings
from schemas.story import InputMode, Memory, Speaker, SpeakerKind, Summary, SummaryScope
from stores.factory import open_memory_text_index, open_vector_index
from story.recall_index import RecallIndex
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the service


class WordHashEmbedder:
    """A deterministic bag-of-words embedding (each lowercase word hashed to one of 64 dimensions)."""

    name = "word-hash-64"
    dim = 64

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.sha1(word.encode()).hexdigest()[:8], 16) % self.dim] += 1.0
            norm = float(np.linalg.norm(out[row]))
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


@pytest.fixture
def service(embedded_graph: object, local_blob_store: object, tmp_path: Path) -> Iterator[StoryService]:
    settings = Settings(data_dir=tmp_path)
    index = RecallIndex(open_memory_text_index(settings), open_vector_index(settings), WordHashEmbedder())
    built = StoryService(embedded_graph, local_blob_store, snapshot_interval=8, recall=index)  # type: ignore[arg-type]
    built.prepare()
    yield built
    index.close()


def _table(story: StoryService, name: str = "The Salt Road") -> tuple[str, dict[str, str]]:
    """A campaign with a first turn and two characters made canon by a GM scene."""
    cid = new_campaign(story, name=name).id
    story.add_turn(cid, "We ride into Brinemark at dusk.", narration="The gate creaks open.")
    cast_scene = story.start_scene(cid, title="Dramatis personae")
    cast = {who: gm_entity(story, cast_scene.id, "character", who) for who in ("Ayla", "Hulda")}
    story.end_scene(cast_scene.id)
    return cid, cast


def _say(story: StoryService, cid: str, who: str, entity: str, text: str) -> str:
    speaker = Speaker(kind=SpeakerKind.ENTITY, entity_id=entity, name=who)
    turn = story.add_turn(cid, text, narration=f"{who} waits.", input_mode=InputMode.DIALOGUE, speaker=speaker)
    return turn.id


TOLD = "Bandits took the salt caravan at the old ford, and the reeve was paid to look away."


def _forge_scene(story: StoryService, cid: str, cast: dict[str, str]) -> tuple[str, str]:
    """A scene in which Hulda tells Ayla what became of the caravan; its id and the last turn's."""
    scene = story.start_scene(cid, title="The forge", participant_entity_ids=[cast["Ayla"], cast["Hulda"]])
    _say(story, cid, "Ayla", cast["Ayla"], "Hulda, what became of the salt caravan?")
    told = _say(story, cid, "Hulda", cast["Hulda"], TOLD)
    story.propose(
        scene.id,
        type="event",
        content={"title": "The caravan lost at the old ford", "description": "bandits took the salt"},
        authority="gm",
        confidence=1.0,
    )
    return scene.id, told


def _made_by_end(hits: Sequence[RecallHit], scene_id: str) -> list[RecallHit]:
    return [h for h in hits if h.kind is not RecallKind.TURN and h.scene_id == scene_id]


QUESTION = "bandits salt caravan old ford reeve"


def test_an_end_on_the_parent_after_a_fork_at_its_end_turn_is_not_recalled_on_the_child(
    service: StoryService,
) -> None:
    """Branch from the head while the scene is active, switch back, end the scene, switch to the branch:
    the branch's state has none of the end's canon, and recall none of its outcomes, summary or memories."""
    story = service
    cid, cast = _table(story)
    scene_id, told = _forge_scene(story, cid, cast)
    main = story.get_campaign(cid).active_branch_id
    fork = story.create_branch(cid, told, name="the other road")
    story.switch_branch(cid, main)
    story.end_scene(scene_id, summary="Hulda told Ayla that bandits took the salt caravan at the old ford.")
    on_main = _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id)
    assert {h.kind for h in on_main} == {RecallKind.FACT, RecallKind.SUMMARY, RecallKind.MEMORY}
    assert story.recall(cid, QUESTION, observer_entity_id=cast["Ayla"], kinds=[RecallKind.MEMORY])

    story.switch_branch(cid, fork.id)
    assert not any(h["title"].startswith("The caravan lost") for h in story.world_state(cid).happenings.values())
    assert _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id) == []
    assert story.recall(cid, QUESTION, observer_entity_id=cast["Ayla"], kinds=[RecallKind.MEMORY]) == []
    assert told in {h.id for h in story.recall(cid, QUESTION, limit=50)}  # the scene's turns are its past


def test_a_branch_forked_after_the_end_recalls_what_it_made(service: StoryService) -> None:
    story = service
    cid, cast = _table(story)
    scene_id, told = _forge_scene(story, cid, cast)
    story.end_scene(scene_id, summary="Hulda told Ayla that bandits took the salt caravan at the old ford.")
    story.create_branch(cid, told, name="after the forge")
    made = _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id)
    assert {h.kind for h in made} == {RecallKind.FACT, RecallKind.SUMMARY, RecallKind.MEMORY}


def test_an_end_on_the_child_at_the_fork_turn_is_recalled_there_and_not_on_the_parent(service: StoryService) -> None:
    story = service
    cid, cast = _table(story)
    scene_id, told = _forge_scene(story, cid, cast)
    main = story.get_campaign(cid).active_branch_id
    fork = story.create_branch(cid, told, name="the other road")  # the head stays at the fork turn
    story.end_scene(scene_id, summary="Hulda told Ayla that bandits took the salt caravan at the old ford.")
    made = _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id)
    assert {h.kind for h in made} == {RecallKind.FACT, RecallKind.SUMMARY, RecallKind.MEMORY}
    assert {h.branch_id for h in made} == {fork.id}
    story.switch_branch(cid, main)
    assert _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id) == []


def test_a_rebuild_places_the_records_as_the_writes_did(service: StoryService) -> None:
    """``lorekeeper reindex`` writes the same records (places and sequence numbers) as play did."""
    story = service
    cid, cast = _table(story)
    scene_id, told = _forge_scene(story, cid, cast)
    main = story.get_campaign(cid).active_branch_id
    fork = story.create_branch(cid, told)
    story.switch_branch(cid, main)
    story.end_scene(scene_id)
    index = story.recall_index
    assert index is not None

    def stored() -> dict[str, tuple[str, int, int | None]]:
        found = index.gather(cid, QUESTION, lineage=_everything(story, cid), limit=200)
        return {i: (r.branch_id, r.depth, r.seq) for i, r in found.records.items()}

    before = stored()
    assert any(seq is not None for _, _, seq in before.values())
    story.rebuild_recall(cid)
    assert stored() == before
    story.switch_branch(cid, fork.id)
    assert _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id) == []


def _everything(story: StoryService, cid: str) -> object:
    """A lineage that covers every branch of the campaign at every depth (for reading the index whole)."""
    from story.lineage import Lineage, Segment

    return Lineage(tuple(Segment(b.id, 10_000) for b in story.branches(cid, include_archived=True)))


def test_another_campaigns_writes_do_not_move_a_campaigns_scores(service: StoryService) -> None:
    """A made-up word: campaign A's answer (ids, order, scores, ranks) is the same after campaign B
    writes forty turns with it (the raw BM25 score moved with B's use of the word)."""
    story = service
    a = new_campaign(story, name="A").id
    for text in ("The zorblat hums in the cellar.", "We eat bread.", "A zorblat, a zorblat and a lamp."):
        story.add_turn(a, text, narration="Nothing stirs.")
    before = story.recall(a, "zorblat", limit=10)
    assert [("zorblat" in h.text.lower()) for h in before] == [True, True, False]

    b = new_campaign(story, name="B").id
    for n in range(40):
        story.add_turn(b, f"Zorblat number {n} hums louder than the last zorblat.", narration="It hums.")
    after = story.recall(a, "zorblat", limit=10)
    assert [h.model_dump() for h in after] == [h.model_dump() for h in before]
    assert all("text" not in h.scores for h in after) and "text" in after[0].ranks


# -- the randomized replay --------------------------------------------------------------------------


@dataclass
class Place:
    """Where a record was committed: a branch, a depth, and the step (None: visible wherever its turn is)."""

    branch: str
    depth: int
    step: int | None = None


@dataclass
class Model:
    """What the replay knows of one campaign: branches (parent, fork depth, the step they were forked at),
    records by id with their place, the ends of scenes by end turn, and the memories of each observer."""

    cid: str
    cast: dict[str, str]
    branches: dict[str, tuple[str | None, int, int]] = field(default_factory=dict)
    records: dict[str, Place] = field(default_factory=dict)
    ends: dict[str, list[Place]] = field(default_factory=dict)  # end turn -> ends there, in order
    observers: dict[str, str] = field(default_factory=dict)  # memory id -> observer
    memories: set[str] = field(default_factory=set)
    summaries: set[str] = field(default_factory=set)

    def visible(self, place: Place, branch: str, depth: int) -> bool:
        """Whether a record at ``place`` is in the story at position ``(branch, depth)``: its branch is on the
        position's line at or above the depth the line reaches there, and where the line left that branch
        (a fork) the record was committed before the line left."""
        left: int | None = None  # the step at which the line left the branch walked to (None: it did not)
        current: str | None = branch
        while current is not None:
            parent, fork_depth, forked = self.branches[current]
            if current == place.branch:
                return place.depth <= depth and (place.step is None or left is None or place.step < left)
            left = forked if left is None else min(left, forked)
            depth = min(depth, fork_depth)
            current = parent
        return False


WORDS = (
    "caravan",
    "salt",
    "ford",
    "bandits",
    "reeve",
    "lantern",
    "crypt",
    "harbour",
    "storm",
    "ledger",
    "dragon",
    "bell",
    "tower",
    "orchard",
    "wolf",
    "river",
    "mill",
    "candle",
    "sword",
    "ring",
    "cellar",
    "market",
    "smith",
    "bread",
    "ale",
    "oath",
    "crown",
    "ghost",
    "key",
    "map",
)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))).capitalize() + "."


def _sync_branches(story: StoryService, model: Model, step: int) -> None:
    for branch in story.branches(model.cid, include_archived=True):
        if branch.id not in model.branches:
            fork_depth = story.story.turn(branch.fork_turn_id).depth if branch.fork_turn_id else -1
            model.branches[branch.id] = (branch.parent_branch_id, fork_depth, step)


def _new_ids(story: StoryService, label: str, cid: str, known: set[str]) -> list[str]:
    rows = story.graph.run(f"MATCH (n:{label}) WHERE n.campaign_id = $c RETURN n.uid AS id", {"c": cid})
    fresh = sorted({r["id"] for r in rows} - known)
    known.update(fresh)
    return fresh


def _step(story: StoryService, model: Model, rng: random.Random, step: int) -> None:
    """One random move of the story, recorded in the model."""
    cid = model.cid
    ctx = story.story.context(cid)
    head = ctx.head
    scene = story.world_state(cid).scene  # the scene active at the head, if any (or the last one, ended)
    active = scene["scene_id"] if scene else None
    move = rng.choices(
        ["turn", "scene", "end", "undo", "redo", "branch", "switch", "memory", "summary"],
        weights=[6, 3, 4 if active else 0, 2, 1, 2, 2, 1, 1],
    )[0]
    try:
        if move == "turn":
            who = rng.choice(["Ayla", "Hulda", None])
            speaker = Speaker(kind=SpeakerKind.ENTITY, entity_id=model.cast[who], name=who) if who else None
            turn = story.add_turn(cid, _sentence(rng), narration=_sentence(rng), speaker=speaker)
            _sync_branches(story, model, step)
            model.records[turn.id] = Place(turn.branch_id, turn.depth)
        elif move == "scene":
            story.start_scene(cid, title=f"scene {step}", participant_entity_ids=list(model.cast.values()))
        elif move == "end" and active:
            story.propose(active, type="event", content={"title": _sentence(rng)}, authority="gm", confidence=1.0)
            outcomes = len(story.scene_record(active).canonical_outcomes)  # the node's list: its index
            report = story.end_scene(active, summary=_sentence(rng) if rng.random() < 0.3 else None)
            _sync_branches(story, model, step)
            if report.already_completed or head is None:
                return
            end = Place(report.branch_id, head.depth, step)
            model.ends.setdefault(head.id, []).append(end)
            made = len(story.scene_record(active).canonical_outcomes)  # the node's list: its index
            for i in range(outcomes, made):
                model.records[f"{active}#canon{i}"] = end
            for memory_id in _new_ids(story, "Memory", cid, model.memories):
                model.records[memory_id] = end
                model.observers[memory_id] = story.get_memory(cid, memory_id).observer_entity_id
            for summary_id in _new_ids(story, "Summary", cid, model.summaries):
                model.records[summary_id] = end
        elif move == "undo" and head is not None and head.depth > 0:  # the cast is there from the first turn
            story.undo(cid)
        elif move == "redo":
            story.redo(cid)
        elif move == "branch" and head is not None:
            story.create_branch(cid, head.id)
            _sync_branches(story, model, step)
        elif move == "switch":
            story.switch_branch(cid, rng.choice(sorted(model.branches)))
        elif move in ("memory", "summary") and head is not None:
            # written on its own at the head: at its turn's place, or at the last end there before it
            place = (model.ends.get(head.id) or [Place(head.branch_id, head.depth)])[-1]
            if move == "memory":
                observer = rng.choice(sorted(model.cast.values()))
                memory = story.add_memory(
                    Memory(campaign_id=cid, observer_entity_id=observer, text=_sentence(rng), anchor_turn_id=head.id)
                )
                model.memories.add(memory.id)
                model.observers[memory.id] = observer
                model.records[memory.id] = place
            else:
                summary = Summary(
                    campaign_id=cid, scope=SummaryScope.SESSION, anchor_turn_id=head.id, text=_sentence(rng)
                )
                model.summaries.add(story.add_summary(summary).id)
                model.records[summary.id] = place
    except LorekeeperError:
        pass  # a move the story refuses here (nothing to undo, a scene already active...) changes nothing


def _check(story: StoryService, models: Sequence[Model], rng: random.Random) -> tuple[int, list[str]]:
    """Recall in every campaign (from the head, as of a turn, as an observer); the hits that break the model."""
    recalls, broken = 0, []
    for model in models:
        ctx = story.story.context(model.cid)
        if ctx.head is None:
            continue
        positions: list[tuple[str | None, str, int]] = [(None, ctx.campaign.active_branch_id, ctx.head.depth)]
        turns = [i for i, p in model.records.items() if i.startswith("turn") and p.step is None]
        as_of = story.story.turn(rng.choice(turns))
        positions.append((as_of.id, as_of.branch_id, as_of.depth))
        for as_of_id, branch, depth in positions:
            observer = rng.choice([None, *sorted(model.cast.values())])
            kinds = rng.choice([None, [RecallKind.MEMORY], [RecallKind.SUMMARY, RecallKind.FACT]])
            query = " ".join(rng.sample(WORDS, 3))
            hits = story.recall(
                model.cid, query, as_of_turn_id=as_of_id, observer_entity_id=observer, kinds=kinds, limit=30
            )
            recalls += 1
            for hit in hits:
                place = model.records.get(hit.id)
                if place is None:
                    broken.append(f"{model.cid}: {hit.id} is no record of this campaign")
                elif not model.visible(place, branch, depth):
                    broken.append(f"{model.cid} at {branch}:{depth}: {hit.kind.value} {hit.id} at {place}")
                elif observer and hit.id in model.observers and model.observers[hit.id] != observer:
                    broken.append(f"{model.cid}: memory {hit.id} of another observer")
                elif kinds and hit.kind not in kinds:
                    broken.append(f"{model.cid}: {hit.kind.value} {hit.id} not of {kinds}")
    return recalls, broken


def test_a_random_replay_recalls_only_what_each_position_holds(service: StoryService) -> None:
    story = service
    # RECALL_REPLAY_SEED replays another story (branch ids are random too, so runs differ even on one seed)
    seed = int(os.environ.get("RECALL_REPLAY_SEED", "20261207"))
    rng = random.Random(seed)
    models = []
    for n in range(3):
        cid, cast = _table(story, name=f"Campaign {n}")
        model = Model(cid, cast)
        _sync_branches(story, model, 0)
        for turn in story.history(cid):
            model.records[turn.id] = Place(turn.branch_id, turn.depth)
        first = story.history(cid)[0]
        for scene in story.scenes(cid):  # the cast scene's outcomes: its end, before anything forked
            for i in range(len(scene.canonical_outcomes)):
                model.records[f"{scene.id}#canon{i}"] = Place(first.branch_id, first.depth, 0)
        _new_ids(story, "Memory", cid, model.memories)  # the cast scene formed none (no turns in it)
        _new_ids(story, "Summary", cid, model.summaries)
        models.append(model)
    recalls, broken = 0, []

    def played() -> tuple[int, int]:
        ends = sum(len(e) for m in models for e in m.ends.values())
        return ends, sum(1 for m in models for b in m.branches.values() if b[0] is not None)

    step = 0
    # 40 steps, and on until the story has enough scene ends and forks to test (another seed may need more)
    while step < 40 or (step < 120 and min(played()) < 6):
        step += 1
        for model in models:
            _step(story, model, rng, step)
            _sync_branches(story, model, step)  # a move may fork (a scene opened below the tip)
        if step % 3 == 0:
            done, wrong = _check(story, models, rng)
            recalls, broken = recalls + done, broken + wrong
    ends, forks = played()
    assert broken == [], f"seed {seed}:\n" + "\n".join(broken[:20])
    assert recalls >= 60 and ends >= 6 and forks >= 6, (seed, recalls, ends, forks)
