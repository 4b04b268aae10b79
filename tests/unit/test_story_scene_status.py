"""A scene's status as a person reads it is the status at a position (the head by default; a branch's tip, or a
turn), the same one :meth:`StoryService.active_scene` and the refusal of a second scene read: a scene ends per
branch, so an undo or a revert that moves the head back before a scene's end opens it again on the head's line,
and ``get_scene`` / ``scenes`` say so; a scene that has not begun on the line read says ``not_begun``.
"""

from __future__ import annotations

import pytest

from schemas.errors import InvalidRequest
from schemas.story import SceneStatus
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)


def _statuses(story: StoryService, campaign_id: str, **position: str) -> dict[str, SceneStatus]:
    return {s.id: s.status for s in story.scenes(campaign_id, **position)}


def _one_scene_ended(story: StoryService) -> tuple[str, str, list[str]]:
    """A campaign with a scene played over two turns and ended at the second, with one outcome."""
    campaign = new_campaign(story)
    play(story, campaign.id, "We reach the ford")
    scene = story.start_scene(campaign.id, title="The ford")
    gm_entity(story, scene.id, "character", "Ferryman Osk")
    turns = play(story, campaign.id, "We call the ferryman", "Osk poles across")
    story.end_scene(scene.id)
    return campaign.id, scene.id, turns


def test_an_undo_before_a_scenes_end_reads_it_active_at_the_head_and_completed_where_it_ended(
    story: StoryService,
) -> None:
    campaign_id, scene_id, (_, ended_at) = _one_scene_ended(story)
    assert story.get_scene(scene_id).status is SceneStatus.COMPLETED
    assert story.active_scene(campaign_id) is None

    story.undo(campaign_id)  # the head before the end turn: the end is ahead of it, the scene open again here
    active = story.active_scene(campaign_id)
    assert active is not None and active.id == scene_id
    seen = story.get_scene(scene_id)
    assert (seen.status, seen.ended_at, seen.end_turn_id, seen.canonical_outcomes) == (
        SceneStatus.ACTIVE,
        None,
        None,
        [],
    )
    assert _statuses(story, campaign_id) == {scene_id: SceneStatus.ACTIVE}
    with pytest.raises(InvalidRequest, match="still active"):
        story.start_scene(campaign_id, title="Another")  # the refusal agrees with the read
    # a read at a turn takes that position: as of the end turn the scene is completed there
    then = story.get_scene(scene_id, turn_id=ended_at)
    assert then.status is SceneStatus.COMPLETED and then.end_turn_id == ended_at
    assert then.canonical_outcomes == ["Ferryman Osk (character) enters the story"]
    assert _statuses(story, campaign_id, turn_id=ended_at) == {scene_id: SceneStatus.COMPLETED}

    story.redo(campaign_id)
    assert story.get_scene(scene_id).status is SceneStatus.COMPLETED
    assert story.active_scene(campaign_id) is None


def test_a_scene_ended_on_one_branch_reads_active_on_a_branch_forked_while_it_was_open(
    story: StoryService,
) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "We reach the ford")
    scene = story.start_scene(campaign.id, title="The ford")
    (told,) = play(story, campaign.id, "We call the ferryman")
    main = story.get_campaign(campaign.id).active_branch_id
    fork = story.create_branch(campaign.id, told, name="the other bank").id
    story.switch_branch(campaign.id, main)
    story.end_scene(scene.id)

    assert story.get_scene(scene.id).status is SceneStatus.COMPLETED
    assert story.get_scene(scene.id, branch_id=fork).status is SceneStatus.ACTIVE
    assert _statuses(story, campaign.id, branch_id=fork) == {scene.id: SceneStatus.ACTIVE}
    story.switch_branch(campaign.id, fork)
    assert story.get_scene(scene.id).status is SceneStatus.ACTIVE
    assert story.get_scene(scene.id, branch_id=main).status is SceneStatus.COMPLETED


def test_a_scene_not_begun_on_the_line_read_says_so_and_does_not_count_as_active(story: StoryService) -> None:
    campaign = new_campaign(story)
    first, _ = play(story, campaign.id, "We reach the ford", "We wait")
    main = story.get_campaign(campaign.id).active_branch_id
    other = story.create_branch(campaign.id, first, name="the road").id  # forked before the scene began
    story.switch_branch(campaign.id, main)
    scene = story.start_scene(campaign.id, title="The ford")
    play(story, campaign.id, "We call the ferryman")
    assert story.get_scene(scene.id).status is SceneStatus.ACTIVE

    seen = story.get_scene(scene.id, branch_id=other)
    assert (seen.status, seen.ended_at, seen.canonical_outcomes) == (SceneStatus.NOT_BEGUN, None, [])
    assert _statuses(story, campaign.id, branch_id=other) == {scene.id: SceneStatus.NOT_BEGUN}
    assert story.active_scene(campaign.id, branch_id=other) is None
    # an undo back before the turn it began at: not begun at the head either, and a new scene may open
    story.undo(campaign.id)
    story.undo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id == first
    assert story.get_scene(scene.id).status is SceneStatus.NOT_BEGUN
    assert story.active_scene(campaign.id) is None
    again = story.start_scene(campaign.id, title="The road")
    assert _statuses(story, campaign.id) == {scene.id: SceneStatus.NOT_BEGUN, again.id: SceneStatus.ACTIVE}
