"""A retraction is checked whole before it is written, and a memory stored against today's bounds stays readable.

The reported bug: a retraction whose reason was over 2,000 characters answered 400, but the graph already held
it, so the memory was no longer listed yet still recalled and put in prompts, every later retraction answered
the same 400 (the record could not be read back), and a rebuild of the recall index died on it. The stores are
real: the embedded graph, a local blob folder, and the recall index (tantivy and qdrant-edge).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.story import Memory
from schemas.text import NOTE_MAX
from story.errors import StoryConflict, StoryInvalid
from story.service import StoryService
from tests.unit.store_dump import stores_dump
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the story


def _memory(story: StoryService) -> tuple[str, Memory]:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We reach the forge.", narration="Sparks fly from the anvil.")
    scene = story.start_scene(campaign.id, title="Cast")
    ayla = gm_entity(story, scene.id, "character", "Ayla")
    story.end_scene(scene.id)
    told = story.add_turn(campaign.id, "Hulda whispers of the caravan.", narration="The smith glances at the door.")
    memory = story.add_memory(
        Memory(campaign_id=campaign.id, observer_entity_id=ayla, text="Ayla trusts the reeve.", anchor_turn_id=told.id)
    )
    return campaign.id, memory


@pytest.mark.parametrize(
    "reason",
    ["x" * (NOTE_MAX + 1), "the reeve \x00 lied", "the reeve \ud800 lied", "   "],
    ids=["over the bound", "NUL", "lone surrogate", "blank"],
)
def test_a_retraction_that_cannot_be_held_writes_nothing(recalling_story: StoryService, reason: str) -> None:
    story = recalling_story
    cid, memory = _memory(story)
    before = stores_dump(story.graph, story.recall_index)

    with pytest.raises(StoryInvalid) as refused:
        story.retract_memory(cid, memory.id, reason=reason)
    assert "reason" in str(refused.value) or "say why" in str(refused.value)

    assert stores_dump(story.graph, story.recall_index) == before
    assert [m.id for m in story.memories(cid)] == [memory.id]  # still held and listed
    retracted = story.retract_memory(cid, memory.id, reason="the reeve betrayed her")  # a good reason still works
    assert retracted.retraction_reason == "the reeve betrayed her"
    assert story.memories(cid) == []


def test_a_retraction_at_the_bound_is_kept_whole(story: StoryService) -> None:
    cid, memory = _memory(story)
    reason = "é" * NOTE_MAX
    assert story.retract_memory(cid, memory.id, reason=f"  {reason} ").retraction_reason == reason


def test_a_memory_stored_over_the_bounds_stays_readable(recalling_story: StoryService) -> None:
    """What an older version wrote (a reason of 2,500 characters) is read, listed as retracted, refused a second
    retraction with a conflict, and left out by a rebuild of the recall index, which does not die on it."""
    story = recalling_story
    cid, memory = _memory(story)
    story.graph.run(
        "MATCH (n:Memory {uid: $m}) SET n.retracted_at = $at, n.retraction_reason = $why",
        {"m": memory.id, "at": "2026-01-01T00:00:00+00:00", "why": "y" * 2500},
    )
    assert len(story.get_memory(cid, memory.id).retraction_reason or "") == 2500
    assert story.memories(cid) == []
    with pytest.raises(StoryConflict):
        story.retract_memory(cid, memory.id, reason="again")
    story.rebuild_recall(cid)
    assert memory.id not in {hit.id for hit in story.recall(cid, "does Ayla trust the reeve?", limit=50)}


def test_a_bundle_holding_such_a_memory_imports_and_rebuilds(recalling_story: StoryService, tmp_path: Path) -> None:
    """The same memory in an exported bundle: a store that imports it reads it and rebuilds its recall."""
    story = recalling_story
    cid, memory = _memory(story)
    story.graph.run(
        "MATCH (n:Memory {uid: $m}) SET n.retracted_at = $at, n.retraction_reason = $why",
        {"m": memory.id, "at": "2026-01-01T00:00:00+00:00", "why": "y" * 2500},
    )
    bundle = tmp_path / "campaign.zip"
    story.export_campaign(cid, bundle)
    story.graph.run("MATCH (n) DETACH DELETE n")  # another store: nothing of the campaign in it
    story.recall_index.delete_campaign(cid)  # type: ignore[union-attr]

    imported = story.import_campaign(bundle)
    assert len(story.get_memory(imported.id, memory.id).retraction_reason or "") == 2500
    assert story.rebuild_recall(imported.id) > 0
    assert memory.id not in {hit.id for hit in story.recall(imported.id, "does Ayla trust the reeve?", limit=50)}
