"""Reads and writes answer for one position of the story tree: a branch's tip, or a turn.

The state and the turns of a branch are that branch's, not the head's; a scene is active on the
branches that share its start until it is ended on one of them; a mid-scene commit anchors each
proposal at the turn it names (:mod:`story.lineage`, :mod:`story.scenes`).
"""

from __future__ import annotations

import pytest

from schemas.errors import InvalidRequest
from schemas.story import Campaign, Memory, ProposalStatus, Summary
from story.service import StoryService
from tests.fixtures.story import FANTASY

pytestmark = pytest.mark.servers


def new_campaign(story: StoryService) -> Campaign:
    world = story.create_world("Eldoria")
    return story.create_campaign(world.id, "The Sunken Crown", FANTASY)


def turn(story: StoryService, campaign_id: str, text: str) -> str:
    return story.add_turn(campaign_id, text, narration=f"(narration of: {text})").id


def gm_entity(story: StoryService, scene_id: str, name: str, *, turn_id: str | None = None) -> tuple[str, str]:
    """A GM's proposal of an item; returns the proposal's id and the entity's."""
    proposal = story.propose(
        scene_id,
        type="entity",
        content={"kind": "item", "name": name},
        authority="gm",
        confidence=1.0,
        turn_id=turn_id,
    )
    return proposal.id, f"ent_{proposal.id.split('_', 1)[1]}"


def names(story: StoryService, campaign_id: str, **at: str) -> set[str]:
    return {e.name for e in story.state(campaign_id, **at).entities}


# ---------------------------------------------------------------------------------------------------
# reads by branch


def test_the_state_of_a_branch_is_the_state_at_its_tip(story: StoryService) -> None:
    campaign = new_campaign(story)
    a, b, c, d = (turn(story, campaign.id, t) for t in ("a", "b", "c", "d"))
    scene = story.start_scene(campaign.id, title="The vault")
    gm_entity(story, scene.id, "The Crown")
    story.end_scene(scene.id)  # canon on main at d
    main = story.get_campaign(campaign.id).active_branch_id
    other = story.create_branch(campaign.id, b, name="other")
    x1 = turn(story, campaign.id, "x1")

    on_main = story.state(campaign.id, branch_id=main)
    assert on_main.turn_id == d and on_main.branch_id == main
    assert "The Crown" in {e.name for e in on_main.entities}
    on_other = story.state(campaign.id, branch_id=other.id)
    assert on_other.turn_id == x1 and on_other.branch_id == other.id
    assert "The Crown" not in {e.name for e in on_other.entities}
    assert story.state(campaign.id, turn_id=c).turn_id == c  # a turn is its own position
    assert "The Crown" not in names(story, campaign.id, turn_id=c)
    assert "The Crown" in names(story, campaign.id, turn_id=d)
    assert a  # the root is shared


def test_the_turns_of_a_branch_are_its_lineage(story: StoryService) -> None:
    campaign = new_campaign(story)
    a, b, c = (turn(story, campaign.id, t) for t in ("a", "b", "c"))
    main = story.get_campaign(campaign.id).active_branch_id
    other = story.create_branch(campaign.id, a)
    x = turn(story, campaign.id, "x")
    story.undo(campaign.id)  # the head of the active branch moves; a branch's turns run to its tip

    assert [t.id for t in story.history(campaign.id, branch_id=main)] == [a, b, c]
    assert [t.id for t in story.history(campaign.id, branch_id=other.id)] == [a, x]
    assert [t.id for t in story.history(campaign.id, branch_id=main, last=2)] == [b, c]
    assert [t.id for t in story.history(campaign.id)] == [a]  # the head's line, up to the head


def test_a_branch_with_no_turns_of_its_own_reads_at_its_fork(story: StoryService) -> None:
    campaign = new_campaign(story)
    a, _ = turn(story, campaign.id, "a"), turn(story, campaign.id, "b")
    other = story.create_branch(campaign.id, a)
    assert story.state(campaign.id, branch_id=other.id).turn_id == a
    assert [t.id for t in story.history(campaign.id, branch_id=other.id)] == [a]


def test_memories_and_summaries_of_a_branch_are_those_on_its_line(story: StoryService) -> None:
    campaign = new_campaign(story)
    a = turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="Arrival")
    story.propose(
        scene.id, type="entity", content={"kind": "character", "name": "Bren"}, authority="gm", confidence=1.0
    )
    story.end_scene(scene.id)
    bren = next(e.id for e in story.state(campaign.id).entities if e.name == "Bren")
    c = turn(story, campaign.id, "c")
    main = story.get_campaign(campaign.id).active_branch_id
    story.add_memory(Memory(campaign_id=campaign.id, observer_entity_id=bren, text="the gate", anchor_turn_id=c))
    story.add_summary(Summary(campaign_id=campaign.id, scope="session", anchor_turn_id=c, text="So far."))
    other = story.create_branch(campaign.id, a)
    assert story.memories(campaign.id) == [] and story.summaries(campaign.id) == []  # the head's line
    assert [m.text for m in story.memories(campaign.id, branch_id=main)] == ["the gate"]
    assert [s.text for s in story.summaries(campaign.id, branch_id=main)] == ["So far."]
    assert story.memories(campaign.id, branch_id=other.id) == []


# ---------------------------------------------------------------------------------------------------
# scenes per branch


def test_a_completed_scene_is_not_named_active(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    assert story.state(campaign.id).active_scene_id == scene.id
    story.end_scene(scene.id)
    assert story.state(campaign.id).active_scene_id is None
    assert story.active_scene(campaign.id) is None


def test_a_scene_active_on_one_branch_does_not_block_another(story: StoryService) -> None:
    campaign = new_campaign(story)
    a = turn(story, campaign.id, "a")
    turn(story, campaign.id, "b")
    main = story.get_campaign(campaign.id).active_branch_id
    on_main = story.start_scene(campaign.id, title="On main")
    other = story.create_branch(campaign.id, a)  # before the scene started: it is not on this line

    on_other = story.start_scene(campaign.id, title="On the other branch")
    assert on_other.branch_id == other.id
    assert story.state(campaign.id, branch_id=main).active_scene_id == on_main.id
    assert story.state(campaign.id).active_scene_id == on_other.id
    x = turn(story, campaign.id, "x")
    assert story.get_turn(x).scene_id == on_other.id
    active = story.active_scene(campaign.id, branch_id=main)
    assert active is not None and active.id == on_main.id


def test_ending_a_shared_scene_ends_it_only_on_the_branch_it_is_ended_from(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    main = story.get_campaign(campaign.id).active_branch_id
    scene = story.start_scene(campaign.id, title="The vault")
    b = turn(story, campaign.id, "b")
    c = turn(story, campaign.id, "c")
    p_main, crown = gm_entity(story, scene.id, "The Crown", turn_id=c)
    other = story.create_branch(campaign.id, b)  # a fork while the scene is active: both share it
    y = turn(story, campaign.id, "y")
    p_other, sword = gm_entity(story, scene.id, "The Sword", turn_id=y)

    report = story.end_scene(scene.id)  # from the other branch
    assert report.branch_id == other.id and not report.already_completed
    assert [d.proposal_id for d in report.decisions] == [p_other]  # the turn on main is not on this line
    assert story.state(campaign.id).active_scene_id is None
    assert story.state(campaign.id, branch_id=main).active_scene_id == scene.id
    assert story.get_proposal(p_main).status is ProposalStatus.PENDING
    story.start_scene(campaign.id, title="Next, on the other branch")

    story.switch_branch(campaign.id, main)
    with pytest.raises(InvalidRequest, match="still active"):
        story.start_scene(campaign.id, title="Not yet")
    x = turn(story, campaign.id, "x")
    assert story.get_turn(x).scene_id == scene.id
    again = story.end_scene(scene.id)  # now on main
    assert not again.already_completed and [d.proposal_id for d in again.decisions] == [p_main]
    assert story.state(campaign.id).active_scene_id is None
    assert crown in {e.id for e in story.state(campaign.id).entities}
    assert sword not in {e.id for e in story.state(campaign.id).entities}
    assert story.end_scene(scene.id).already_completed  # idempotent, per branch


def test_a_scene_not_on_the_branch_cannot_be_ended_or_proposed_to_from_it(story: StoryService) -> None:
    campaign = new_campaign(story)
    a = turn(story, campaign.id, "a")
    turn(story, campaign.id, "b")
    scene = story.start_scene(campaign.id, title="On main")
    story.create_branch(campaign.id, a)
    with pytest.raises(InvalidRequest, match="not on"):
        story.end_scene(scene.id)
    with pytest.raises(InvalidRequest, match="not on"):
        gm_entity(story, scene.id, "The Crown")


# ---------------------------------------------------------------------------------------------------
# commits anchored at the turn a proposal names


def test_a_mid_scene_commit_anchors_each_proposal_at_its_turn(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    b = turn(story, campaign.id, "b")
    c = turn(story, campaign.id, "c")
    turn(story, campaign.id, "d")
    proposal, crown = gm_entity(story, scene.id, "The Crown", turn_id=b)

    report = story.commit(scene.id, [proposal])
    assert report.events_committed == 1 and not report.forked
    assert crown in {e.id for e in story.state(campaign.id, turn_id=b).entities}
    story.undo(campaign.id)  # to c: the crown came at b, so it stays
    assert crown in {e.id for e in story.state(campaign.id).entities}
    story.create_branch(campaign.id, c)
    assert crown in {e.id for e in story.state(campaign.id).entities}


def test_a_commit_made_on_one_branch_is_not_seen_on_a_branch_forked_before_it(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    b = turn(story, campaign.id, "b")
    c = turn(story, campaign.id, "c")
    main = story.get_campaign(campaign.id).active_branch_id
    other = story.create_branch(campaign.id, c)  # forks at c, before the commit
    story.switch_branch(campaign.id, main)
    turn(story, campaign.id, "d")
    proposal, crown = gm_entity(story, scene.id, "The Crown", turn_id=b)
    story.commit(scene.id, [proposal])  # on main, anchored at b: turn b is the other branch's past too

    assert crown in {e.id for e in story.state(campaign.id).entities}
    assert crown not in {e.id for e in story.state(campaign.id, branch_id=other.id).entities}


def test_a_proposal_from_a_turn_off_the_line_waits(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    turn(story, campaign.id, "b")
    c = turn(story, campaign.id, "c")
    proposal, _ = gm_entity(story, scene.id, "The Crown", turn_id=c)
    story.undo(campaign.id)  # the head is at b: turn c is ahead of it
    with pytest.raises(InvalidRequest, match="not on the line"):
        story.commit(scene.id, [proposal])
    assert story.get_proposal(proposal).status is ProposalStatus.PENDING
    story.redo(campaign.id)
    assert story.commit(scene.id, [proposal]).events_committed == 1


def test_a_scene_is_not_ended_by_a_proposal(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    with pytest.raises(InvalidRequest, match=r"content\.events\[0\]"):
        story.propose(
            scene.id,
            type="state_change",
            content={"events": [{"kind": "scene_ended", "ended_scene_id": scene.id}]},
            authority="gm",
            confidence=1.0,
        )
    assert story.proposals(scene.id) == [] and story.state(campaign.id).active_scene_id == scene.id


def test_a_checkpoint_behind_the_tip_does_not_hide_older_canon_ahead_of_it(story: StoryService) -> None:
    """A snapshot of an older turn, taken after canon was anchored behind it, holds a sequence number above
    canon committed earlier further along the line: it serves only its own depth."""
    campaign = new_campaign(story)
    turn(story, campaign.id, "a")
    scene = story.start_scene(campaign.id, title="The vault")
    b = turn(story, campaign.id, "b")
    c = turn(story, campaign.id, "c")
    turn(story, campaign.id, "d")
    first, crown = gm_entity(story, scene.id, "The Crown")  # at the head, d
    story.commit(scene.id, [first])
    later, sword = gm_entity(story, scene.id, "The Sword", turn_id=b)  # committed after, anchored at b
    story.commit(scene.id, [later])
    story.create_checkpoint(campaign.id, "at c", turn_id=c)  # a snapshot at c holding the sword

    at_c = {e.id for e in story.state(campaign.id, turn_id=c).entities}
    assert sword in at_c and crown not in at_c
    at_tip = {e.id for e in story.state(campaign.id).entities}
    assert {crown, sword} <= at_tip
