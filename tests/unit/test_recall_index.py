"""The memory index: lineage keys are exact, recall follows the story tree, writes are idempotent, and
a failed index write neither fails the story nor stays missing after the scene ends."""

from __future__ import annotations

import random
from typing import Any

import pytest

from schemas.errors import Unavailable
from schemas.recall import RecallKind
from story.lineage import BranchLine, Lineage, Segment, lineage_of
from story.recall_index import RecallIndex, lineage_cover, lineage_keys
from story.service import StoryService
from tests.unit.test_story_campaign import new_campaign


def _visible(keys: list[str], cover: list[str]) -> bool:
    return bool(set(keys) & set(cover))


@pytest.mark.unit
def test_lineage_keys_match_exactly_the_depths_a_segment_covers() -> None:
    rng = random.Random(5)
    cases = [(0, 0), (1, 0), (0, 1), (7, 7), (8, 7), (2**16, 2**16 - 1), (2**23, 2**24 - 2)]
    cases += [(rng.randrange(0, 70_000), rng.randrange(0, 70_000)) for _ in range(3000)]
    for depth, max_depth in cases:
        cover = lineage_cover(Lineage((Segment("b", max_depth),)))
        assert _visible(lineage_keys("b", depth), cover) == (depth <= max_depth), (depth, max_depth)
        assert len(cover) == bin(max_depth + 1).count("1")
    # another branch never matches, whatever the depths
    assert not _visible(lineage_keys("other", 3), lineage_cover(Lineage((Segment("b", 10),))))


@pytest.mark.unit
def test_lineage_keys_agree_with_lineage_contains_on_a_random_tree() -> None:
    rng = random.Random(11)
    lines = {"root": BranchLine("root", None, None, -1)}
    tips = {"root": 40}
    for n in range(12):
        parent = rng.choice(sorted(lines))
        fork = rng.randrange(lines[parent].fork_depth + 1, tips[parent] + 1)
        name = f"b{n}"
        lines[name] = BranchLine(name, parent, f"t-{parent}-{fork}", fork)
        tips[name] = fork + rng.randrange(1, 30)
    for branch, tip in tips.items():
        for _ in range(5):
            lineage = lineage_of(lines, branch, rng.randrange(lines[branch].fork_depth + 1, tip + 1))
            cover = lineage_cover(lineage)
            for other, other_tip in tips.items():
                for depth in range(lines[other].fork_depth + 1, other_tip + 1):
                    assert _visible(lineage_keys(other, depth), cover) == lineage.contains(other, depth)


@pytest.mark.unit
def test_depth_outside_the_key_range_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        lineage_keys("b", 2**24)


def _texts(hits: list[Any]) -> list[str]:
    return [h.text for h in hits]


@pytest.mark.servers
def test_recall_finds_by_meaning_and_only_on_the_lineage(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign = new_campaign(story)
    story.add_turn(
        campaign.id, "We ask the blacksmith about the caravan", narration="The caravan vanished by the red cliffs."
    )
    rope = story.add_turn(campaign.id, "We buy rope", narration="You buy fifty feet of hempen rope.")
    story.add_turn(campaign.id, "We rest at the inn", narration="The innkeeper serves a thick stew.")
    hits = story.recall(campaign.id, "where did the wagons disappear?", limit=3)
    assert "red cliffs" in hits[0].text and hits[0].kind is RecallKind.TURN
    assert set(hits[0].scores) <= {"vector", "text"} and hits[0].scores

    story.undo(campaign.id)
    story.undo(campaign.id)  # the head is back at the blacksmith; a new turn forks a branch
    story.add_turn(campaign.id, "We follow the tracks", narration="Tracks lead to a goblin cave.")
    on_branch = story.recall(campaign.id, "rope", limit=10)
    assert rope.id not in [h.turn_id for h in on_branch]
    assert "We follow the tracks" in " ".join(_texts(on_branch))
    # as of the rope turn, on its own line, the rope is remembered and the fork's future is not
    then = story.recall(campaign.id, "rope", as_of_turn_id=rope.id, limit=10)
    assert then[0].turn_id == rope.id
    assert all("goblin" not in h.text for h in then)


@pytest.mark.servers
def test_index_writes_are_idempotent_and_rebuild_restores_the_same_records(recalling_story: StoryService) -> None:
    story = recalling_story
    index = story.recall_index
    assert isinstance(index, RecallIndex)
    campaign = new_campaign(story)
    turn = story.add_turn(campaign.id, "I light the lantern", narration="Shadows retreat.")
    story.add_take(turn.id, "The lantern flickers, then holds.")  # a retry re-indexes the same record
    assert index.count(campaign.id) == 1
    assert "flickers" in story.recall(campaign.id, "lantern", limit=1)[0].text
    before = {h.id for h in story.recall(campaign.id, "lantern", limit=10)}
    assert story.rebuild_recall(campaign.id) == 1
    assert story.rebuild_recall(campaign.id) == 1
    assert index.count(campaign.id) == 1
    assert {h.id for h in story.recall(campaign.id, "lantern", limit=10)} == before


@pytest.mark.servers
def test_observer_sees_only_what_they_witnessed(recalling_story: StoryService) -> None:
    from tests.unit.test_story_campaign import gm_entity

    story = recalling_story
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We arrive", narration="The town gates open.")
    setup = story.start_scene(campaign.id, title="Cast")
    ayla = gm_entity(story, setup.id, "character", "Ayla")
    bren = gm_entity(story, setup.id, "character", "Bren")
    story.end_scene(setup.id)
    scene = story.start_scene(campaign.id, title="The forge", participant_entity_ids=[ayla])
    story.add_turn(campaign.id, "Ayla asks the smith", narration="The smith whispers that the duke hoards dragon gold.")
    story.end_scene(scene.id)
    assert "dragon gold" in story.recall(campaign.id, "duke's treasure", observer_entity_id=ayla, limit=1)[0].text
    assert all(
        "dragon gold" not in h.text for h in story.recall(campaign.id, "duke's treasure", observer_entity_id=bren)
    )


class _DownText:
    """A text index that is down for writes: what the story must survive."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.down = True

    def upsert(self, docs: Any) -> int:
        if self.down:
            raise Unavailable("text", "index down")
        return int(self.inner.upsert(docs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.servers
def test_a_failed_index_write_keeps_the_turn_and_the_scene_end_repairs_it(
    embedded_graph: Any, local_blob_store: Any, recall_index: RecallIndex
) -> None:
    flaky = _DownText(recall_index.text)
    index = RecallIndex(flaky, recall_index.vectors, recall_index.embedder)  # type: ignore[arg-type]
    story = StoryService(embedded_graph, local_blob_store, recall=index)
    story.prepare()
    campaign = new_campaign(story)
    scene = story.start_scene(campaign.id, title="Night watch")
    turn = story.add_turn(campaign.id, "I keep watch", narration="An owl cries twice over the ruined chapel.")
    assert story.get_turn(turn.id).narration  # recorded although the index refused it
    assert index.present([turn.id]) == set()
    flaky.down = False
    story.end_scene(scene.id)
    assert index.present([turn.id]) == {turn.id}
    assert story.recall(campaign.id, "bird calls at the church", limit=1)[0].turn_id == turn.id
