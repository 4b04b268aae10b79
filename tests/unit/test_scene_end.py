"""A scene's end as one unit (story/scene_end.py) and the recall index caught up with the graph
(story/recall_sync.py), on the embedded stores: an end the former could not finish stays pending and is
finished when the scene is ended again or at start-up; what is formed is written once; the index gets
what the graph holds and loses what it no longer holds."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from schemas.recall import RecallKind
from story import cypher
from story.formation import ExtractiveFormer, FormedScene
from story.recall import Recollection
from story.scene_end import end_pending, ends_of, form_scene, formed_id
from story.service import StoryService
from tests.unit.test_memory_formation import _cast, _play_forge
from tests.unit.test_story_campaign import new_campaign

pytestmark = pytest.mark.servers


class _Broken:
    name = "broken"

    def form(self, *args: Any, **kwargs: Any) -> FormedScene:
        raise RuntimeError("the model is down")


def _ended_with_a_broken_former(story: StoryService) -> tuple[str, str, dict[str, str]]:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    ids = _cast(story, campaign.id)
    scene = _play_forge(story, campaign.id, ids)
    story.memory_former = _Broken()
    report = story.end_scene(scene.id)
    assert report.events_committed == 1 and not report.already_completed
    story.memory_former = ExtractiveFormer()
    return campaign.id, scene.id, ids


def _indexed_ids(story: StoryService, campaign_id: str) -> set[str]:
    index = story.recall_index
    assert index is not None
    return set(index.stored_texts(campaign_id))


def _graph_ids(story: StoryService, campaign_id: str) -> set[str]:
    return {r.id for r in Recollection(story._core, story.recall_index).records_of(campaign_id)}


def test_an_end_the_former_could_not_finish_is_finished_when_the_scene_is_ended_again(story: StoryService) -> None:
    campaign_id, scene_id, _ = _ended_with_a_broken_former(story)
    assert story.get_scene(scene_id).status.value == "completed"
    assert end_pending(story, scene_id)
    assert story.memories(campaign_id) == [] and story.summaries(campaign_id) == []

    with capture_logs() as logs:
        again = story.end_scene(scene_id)
    assert again.already_completed and again.events_committed == 0
    assert not end_pending(story, scene_id)
    assert len(story.summaries(campaign_id)) == 1
    formed = len(story.memories(campaign_id))
    (event,) = [e for e in logs if e["event"] == "memories_formed"]
    assert event["memories"] == formed > 4 and event["summary"] == 1

    story.end_scene(scene_id)  # finished: nothing more
    assert len(story.memories(campaign_id)) == formed and len(story.summaries(campaign_id)) == 1


def test_what_an_end_forms_is_written_once_and_a_retracted_memory_stays_withdrawn(story: StoryService) -> None:
    campaign_id, scene_id, _ = _ended_with_a_broken_former(story)
    story.end_scene(scene_id)
    memories = {m.id: m for m in story.memories(campaign_id)}
    withdrawn = next(iter(memories.values()))
    story.retract_memory(campaign_id, withdrawn.id, reason="it was a dream")

    again = form_scene(story, story.get_scene(scene_id), ExtractiveFormer())
    assert (again.summary_added, again.memories_added, again.already_there) == (False, 0, len(memories))
    assert {m.id for m in story.memories(campaign_id)} == set(memories) - {withdrawn.id}
    # an id says what was formed at which end: the same draft gets the same id in any formation of that end
    (end,) = ends_of(story.story.node("Scene", scene_id))
    assert end.turn_id == story.get_scene(scene_id).end_turn_id and end.seq is not None
    for m in memories.values():
        assert m.id == formed_id("mem", end.key, m.observer_entity_id, m.kind.value, m.text)


def test_catch_up_finishes_pending_ends_and_reconciles_every_campaign(recalling_story: StoryService) -> None:
    story = recalling_story
    index = story.recall_index
    assert index is not None
    campaign_id, scene_id, ids = _ended_with_a_broken_former(story)
    other, _, _ = _ended_with_a_broken_former(story)
    story.end_scene(_other_scene(story, other))  # the other campaign's end finished: it only reconciles
    held = _graph_ids(story, other)
    assert _indexed_ids(story, other) == held

    # the index behind the graph: a turn lost, a record of nothing, a retraction never applied, a stale text
    turn = story.history(campaign_id)[0]  # before the scene: only the reconciliation brings it back
    index.delete([turn.id])
    orphan = next(r for r in Recollection(story._core, index).records_of(other) if r.kind is RecallKind.TURN)
    index.write([orphan.model_copy(update={"id": "turn_gone", "campaign_id": campaign_id})])
    told = story.history(campaign_id)[1]
    record = next(r for r in Recollection(story._core, index).records_of(campaign_id) if r.id == told.id)
    index.write([record.model_copy(update={"text": "a take nobody selected"})])

    with capture_logs() as logs:
        reconciled = story.catch_up()
    assert not end_pending(story, scene_id)
    assert story.memories(campaign_id, observer_entity_id=ids["aria"])
    memory = story.memories(campaign_id)[0]
    story.graph.run(*cypher.retract_memory(memory.id, "2026-01-01T00:00:00+00:00", "retracted behind the index"))
    assert memory.id in _indexed_ids(story, campaign_id)
    again = story.reconcile_recall(campaign_id)

    by_campaign = {r.campaign_id: r for r in reconciled}
    mine = by_campaign[campaign_id]
    assert (mine.rewritten, mine.removed) == (1, 1)
    assert mine.added == 1  # the lost turn (the end's own records were indexed when it was finished)
    assert (by_campaign[other].added, by_campaign[other].removed, by_campaign[other].rewritten) == (0, 0, 0)
    assert (again.added, again.removed, again.rewritten) == (0, 1, 0)
    assert _indexed_ids(story, campaign_id) == _graph_ids(story, campaign_id)
    assert "turn_gone" not in _indexed_ids(story, campaign_id) and memory.id not in _indexed_ids(story, campaign_id)
    assert index.stored_texts(campaign_id)[told.id] == record.text
    events = [e for e in logs if e["event"] == "recall_reconciled"]
    assert {e["campaign_id"] for e in events} == {campaign_id, other}
    (caught,) = [e for e in logs if e["event"] == "story_caught_up"]
    assert caught["scene_ends"] == 1 and caught["campaigns"] == 2


def _other_scene(story: StoryService, campaign_id: str) -> str:
    (scene,) = [s for s in story.scenes(campaign_id) if s.title == "The forge"]
    return scene.id


def test_an_index_that_is_down_is_reported_not_raised(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign_id, _, _ = _ended_with_a_broken_former(story)
    index = story.recall_index
    assert index is not None

    def down(campaign: str) -> dict[str, str]:
        raise OSError("the index folder is gone")

    index.stored_texts = down  # type: ignore[method-assign]
    with capture_logs() as logs:
        result = story.reconcile_recall(campaign_id)
    assert result.failed == "the index folder is gone" and result.added == 0
    assert any(e["event"] == "recall_index_failed" and e["what"] == "reconcile" for e in logs)


def test_reindex_finishes_an_end_a_crash_left_pending() -> None:
    from typer.testing import CliRunner

    from lorekeeper.cli import app
    from schemas.settings import get_settings
    from stores.factory import open_blob_store, open_graph_store

    graph, blobs = open_graph_store(get_settings()), open_blob_store(get_settings())  # the test's data folder
    try:
        story = StoryService(graph, blobs)
        story.prepare()
        campaign_id, scene_id, _ = _ended_with_a_broken_former(story)
        assert end_pending(story, scene_id) and story.memories(campaign_id) == []
    finally:
        graph.close()
        blobs.close()

    rebuilt = CliRunner().invoke(app, ["reindex"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "finished 1 scene ends a crash had cut short" in rebuilt.stdout

    graph, blobs = open_graph_store(get_settings()), open_blob_store(get_settings())
    try:
        story = StoryService(graph, blobs)
        assert not end_pending(story, scene_id)
        assert story.memories(campaign_id) and len(story.summaries(campaign_id)) == 1
    finally:
        graph.close()
        blobs.close()
