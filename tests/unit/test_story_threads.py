"""Story threads with a lifecycle (open, advanced, resolved, abandoned), branch-true: written by the GM directly
(story.threads) or proposed through the gate, the status as of any turn on any branch comes from the fold."""

from __future__ import annotations

import pytest

from schemas.canon import ThreadStatus
from schemas.errors import InvalidRequest, NotFound
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, gm_events, new_campaign, play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)


def test_a_threads_lifecycle_is_read_as_of_any_turn_and_branch(story: StoryService) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "We reach the harbour")
    scene = story.start_scene(campaign.id, title="Harbour")
    mira = gm_entity(story, scene.id, "character", "Mira")
    story.end_scene(scene.id)
    (t_open,) = play(story, campaign.id, "A stranger asks for help")
    thread = story.threads.open(campaign.id, "The missing ship", involved_entity_ids=[mira])
    assert thread.status is ThreadStatus.OPEN and thread.opened_turn_id == t_open
    (t_adv,) = play(story, campaign.id, "We find the logbook")
    advanced = story.threads.advance(campaign.id, thread.id, "The logbook names the reef")
    assert advanced.status is ThreadStatus.ADVANCED
    assert [(a.turn_id, a.progress) for a in advanced.advances] == [(t_adv, "The logbook names the reef")]
    (t_res,) = play(story, campaign.id, "We sail to the reef")
    resolved = story.threads.resolve(campaign.id, thread.id, "The wreck lies on the reef")
    assert (resolved.status, resolved.resolved_turn_id, resolved.resolution) == (
        ThreadStatus.RESOLVED,
        t_res,
        "The wreck lies on the reef",
    )
    # as of earlier turns, the thread is as it was there
    assert story.threads.at(campaign.id, turn_id=t_open)[0].status is ThreadStatus.OPEN
    assert story.threads.at(campaign.id, turn_id=t_adv)[0].status is ThreadStatus.ADVANCED
    # a closed thread cannot move again; an unknown one is not found; nothing is written by either
    before = story.state(campaign.id).state_hash
    with pytest.raises(InvalidRequest, match="already resolved"):
        story.threads.abandon(campaign.id, thread.id, "bored")
    with pytest.raises(NotFound):
        story.threads.advance(campaign.id, "thread_nope", "anything")
    assert story.state(campaign.id).state_hash == before

    # undo back to the advance and write there: the fork has the thread advanced, and abandons it
    story.undo(campaign.id)
    abandoned = story.threads.abandon(campaign.id, thread.id, "The crew mutinies")
    assert abandoned.status is ThreadStatus.ABANDONED
    fork = story.get_campaign(campaign.id).active_branch_id
    assert fork != campaign.active_branch_id
    # the original branch still has it resolved; the fork abandoned
    assert story.threads.at(campaign.id, branch_id=campaign.active_branch_id)[0].status is ThreadStatus.RESOLVED
    assert story.threads.at(campaign.id, branch_id=fork)[0].status is ThreadStatus.ABANDONED
    assert story.threads.at(campaign.id, status=ThreadStatus.OPEN) == []


def test_thread_events_are_proposed_and_judged_by_the_gate(story: StoryService) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "The bell tolls")
    scene = story.start_scene(campaign.id, title="Bell")
    gm_events(story, scene.id, {"kind": "thread_opened", "thread_id": "thread_bell", "title": "Who rang the bell"})
    gm_events(story, scene.id, {"kind": "thread_advanced", "thread_id": "thread_bell", "progress": "A rope, cut"})
    story.end_scene(scene.id)
    (thread,) = story.threads.at(campaign.id)
    assert thread.status is ThreadStatus.ADVANCED and thread.advances[0].progress == "A rope, cut"
    scene = story.start_scene(campaign.id, title="Bell again")
    gm_events(story, scene.id, {"kind": "thread_abandoned", "thread_id": "thread_bell", "reason": "Nobody cares"})
    gm_events(story, scene.id, {"kind": "thread_advanced", "thread_id": "thread_bell", "progress": "too late"})
    report = story.end_scene(scene.id)
    (thread,) = story.threads.at(campaign.id)
    assert thread.status is ThreadStatus.ABANDONED and thread.resolution == "Nobody cares"
    rejected = [d for d in report.decisions if d.status.value == "rejected"]
    assert len(rejected) == 1 and "already abandoned" in (rejected[0].rationale or "")


def test_a_players_view_of_an_advanced_thread_names_no_hidden_entity(story: StoryService) -> None:
    from story.viewer import TABLE

    campaign = new_campaign(story)
    play(story, campaign.id, "Fog rolls in")
    scene = story.start_scene(campaign.id, title="Fog")
    mira = gm_entity(story, scene.id, "character", "Mira")
    story.propose(
        scene.id,
        type="entity",
        content={"kind": "character", "name": "The spy", "visibility": {"audience": "gm"}},
        authority="gm",
        confidence=1.0,
    )
    story.end_scene(scene.id)
    spy_id = next(e.id for e in story.state(campaign.id).entities if e.name == "The spy")
    thread = story.threads.open(campaign.id, "Who lit the beacon", involved_entity_ids=[mira])
    story.threads.advance(campaign.id, thread.id, "Boot prints", involved_entity_ids=[spy_id])
    (seen,) = TABLE.state(story.state(campaign.id)).threads
    assert seen.involved_entity_ids == [mira] and seen.advances[0].involved_entity_ids == []
    (whole,) = story.state(campaign.id).threads
    assert whole.involved_entity_ids == [mira, spy_id] and whole.advances[0].involved_entity_ids == [spy_id]
