"""Triggers fire per branch (story.triggers): a trigger fires on the branch that reaches its condition and not on
another; its activation records the turn and the branch; it fires once per line unless repeatable; a re-run of the
evaluation never fires twice; a proposal it makes goes through the gate; a note reaches the next turn's narrator."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.triggers import FiredBy, TriggerCreate
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, gm_events, new_campaign, play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)


def _table(story: StoryService) -> tuple[str, str, str, str]:
    """A campaign with Mira at the docks and a tower she has not reached."""
    campaign = new_campaign(story)
    play(story, campaign.id, "We land")
    scene = story.start_scene(campaign.id, title="Landing")
    mira = gm_entity(story, scene.id, "character", "Mira")
    docks = gm_entity(story, scene.id, "location", "The docks")
    tower = gm_entity(story, scene.id, "location", "The tower")
    gm_events(story, scene.id, {"kind": "current_location_set", "entity_id": mira, "location_entity_id": docks})
    story.end_scene(scene.id)
    return campaign.id, mira, docks, tower


def test_a_trigger_fires_on_the_branch_that_reaches_its_condition_and_not_on_another(story: StoryService) -> None:
    campaign_id, mira, _, tower = _table(story)
    at_tower = {"on": "entity_at", "entity_id": mira, "location_entity_id": tower}
    note = story.triggers.create(
        campaign_id,
        TriggerCreate.model_validate(
            {"name": "Tower bell", "conditions": [at_tower], "action": {"kind": "note", "text": "The bell tolls."}}
        ),
    )
    (fork_turn,) = play(story, campaign_id, "We stand at the crossroads")
    home = story.get_campaign(campaign_id).active_branch_id
    other = story.create_branch(campaign_id, fork_turn, name="the other road")
    story.switch_branch(campaign_id, home)

    # on the home branch Mira walks to the tower; the scene's end makes the condition true
    scene = story.start_scene(campaign_id, title="The climb")
    gm_events(story, scene.id, {"kind": "current_location_set", "entity_id": mira, "location_entity_id": tower})
    (climbed,) = play(story, campaign_id, "We climb")
    assert story.triggers.activations(campaign_id) == []  # the move is not canon until the scene ends
    story.end_scene(scene.id)
    (fired,) = story.triggers.activations(campaign_id)
    assert (fired.trigger_id, fired.turn_id, fired.branch_id, fired.fired_by) == (
        note.id,
        climbed,
        home,
        FiredBy.SCENE_END,
    )
    assert fired.note == "The bell tolls."
    # once per line: more turns on the same branch do not fire it again; a re-run of the evaluation neither
    (after,) = play(story, campaign_id, "We ring the bell ourselves")
    assert story.triggers.notes_for(story.get_turn(after)) == ["The bell tolls."]  # the next turn's narrator
    assert story.triggers.evaluate(story.get_turn(climbed), FiredBy.SCENE_END) == []
    assert len(story.triggers.activations(campaign_id)) == 1

    # on the other branch Mira stays at the docks: nothing fires there, however many turns
    story.switch_branch(campaign_id, other.id)
    play(story, campaign_id, "We take the coast road", "We camp on the dunes")
    assert story.triggers.activations(campaign_id, branch_id=other.id) == []
    assert len(story.triggers.activations(campaign_id)) == 1


def test_a_proposal_trigger_goes_through_the_gate_and_a_repeatable_one_fires_each_turn(story: StoryService) -> None:
    campaign_id, mira, _, _ = _table(story)
    spec = {
        "name": "Nightfall",
        "conditions": [{"on": "turn_count", "at_least": 3}],
        "action": {
            "kind": "proposal",
            "authority": "gm",
            "events": [{"kind": "set_entity_status", "entity_id": mira, "status": "missing"}],
        },
    }
    story.triggers.create(campaign_id, TriggerCreate.model_validate(spec))
    tick = {"name": "Tick", "conditions": [{"on": "turn_count", "at_least": 2}], "repeatable": True}
    story.triggers.create(campaign_id, TriggerCreate.model_validate({**tick, "action": {"kind": "note", "text": "t"}}))
    scene = story.start_scene(campaign_id, title="Dusk")
    t2, t3, t4 = play(story, campaign_id, "two", "three", "four")
    fired = story.triggers.activations(campaign_id)
    assert sorted((a.turn_id, a.note is not None) for a in fired) == sorted(
        [(t2, True), (t3, True), (t4, True), (t3, False)]
    )
    (proposed,) = [a for a in fired if a.proposal_id]
    assert story.get_proposal(proposed.proposal_id).proposed_by.startswith("trigger:")
    story.end_scene(scene.id)
    assert next(e for e in story.state(campaign_id).entities if e.id == mira).status.value == "missing"


def test_threads_triggers_and_activations_travel_in_a_bundle(story: StoryService, tmp_path: Path) -> None:
    from tests.unit.test_story_bundle import _export, _stores

    campaign_id, mira, _, tower = _table(story)
    story.threads.open(campaign_id, "The tower's secret", involved_entity_ids=[tower])
    at_tower = {"on": "entity_at", "entity_id": mira, "location_entity_id": tower}
    spec = {"name": "Bell", "conditions": [at_tower], "action": {"kind": "note", "text": "The bell tolls."}}
    trigger = story.triggers.create(campaign_id, TriggerCreate.model_validate(spec))
    scene = story.start_scene(campaign_id, title="Climb")
    gm_events(story, scene.id, {"kind": "current_location_set", "entity_id": mira, "location_entity_id": tower})
    play(story, campaign_id, "We climb")
    story.end_scene(scene.id)
    (fired,) = story.triggers.activations(campaign_id)
    bundle = _export(story, campaign_id)
    with _stores(tmp_path / "other") as other:
        other.import_campaign(bundle)
        assert other.threads.at(campaign_id) == story.threads.at(campaign_id)
        assert other.triggers.of(campaign_id) == [trigger]
        assert other.triggers.activations(campaign_id) == [fired]
        # the imported line remembers the firing: another turn there does not fire it again
        play(other, campaign_id, "We ring it again")
        assert other.triggers.activations(campaign_id) == [fired]


def test_a_fork_after_a_firing_keeps_it_and_a_fork_before_fires_it_there(story: StoryService) -> None:
    campaign_id, _, _, _ = _table(story)
    third = [{"on": "turn_count", "at_least": 3}]
    spec = {"name": "Third", "conditions": third, "action": {"kind": "note", "text": "3"}}
    trigger = story.triggers.create(campaign_id, TriggerCreate.model_validate(spec))
    t2, t3 = play(story, campaign_id, "two", "three")
    (first,) = story.triggers.activations(campaign_id)
    assert first.turn_id == t3
    # a branch forked at the firing turn: its line holds the firing, more turns there fire nothing
    later = story.create_branch(campaign_id, t3, name="later")
    story.switch_branch(campaign_id, later.id)
    play(story, campaign_id, "four on the fork")
    assert story.triggers.activations(campaign_id, trigger_id=trigger.id) == [first]
    # a branch forked before it: reaching the third turn there fires it there, once
    earlier = story.create_branch(campaign_id, t2, name="earlier")
    story.switch_branch(campaign_id, earlier.id)
    (t3b, _) = play(story, campaign_id, "three again", "four again")
    fired = story.triggers.activations(campaign_id, branch_id=earlier.id)
    assert [(a.turn_id, a.branch_id) for a in fired] == [(t3b, earlier.id)]
