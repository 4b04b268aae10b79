"""One campaign scenario, run on every graph backend: the embedded store, the Neo4j driver against
FalkorDB's Bolt endpoint, and a real Neo4j under ``-m integration`` (``LOREKEEPER_GRAPH_URL``)."""

from __future__ import annotations

import io

import pytest

from schemas.story import DiceRoll, Memory, ProposalStatus, Resolution
from story.service import StoryService
from tests.fixtures.story import FANTASY

pytestmark = pytest.mark.contract


def test_a_campaign_from_first_turn_to_retcon(story_on: StoryService) -> None:
    story = story_on
    world = story.create_world("Eldoria", axioms=["The dead stay dead unless a god intervenes."])
    campaign = story.create_campaign(world.id, "The Sunken Crown", FANTASY)
    t1 = story.add_turn(campaign.id, "I arrive at the harbour", narration="Gulls wheel overhead.").id

    scene = story.start_scene(campaign.id, title="The harbour")
    mira = story.propose(
        scene.id,
        type="entity",
        content={"kind": "character", "name": "Mira", "attributes": {"hp": 9}},
        authority="gm",
        confidence=1.0,
    )
    dock = story.propose(
        scene.id, type="entity", content={"kind": "location", "name": "Dock Seven"}, authority="gm", confidence=1.0
    )
    mira_id, dock_id = (f"ent_{p.id.split('_', 1)[1]}" for p in (mira, dock))
    story.propose(
        scene.id,
        type="state_change",
        authority="system",
        confidence=0.9,
        evidence={"turn_ids": [t1]},
        content={"events": [{"kind": "current_location_set", "entity_id": mira_id, "location_entity_id": dock_id}]},
    )
    report = story.end_scene(scene.id)
    assert [d.status for d in report.decisions] == [ProposalStatus.ACCEPTED] * 3
    assert story.end_scene(scene.id).already_completed

    t2 = story.add_turn(campaign.id, "I ask Mira about the crown", narration="She laughs.").id
    scene = story.start_scene(
        campaign.id, title="Questions", location_entity_id=dock_id, participant_entity_ids=[mira_id]
    )
    roll = Resolution(method="dice", outcome="success", roll=DiceRoll(expression="2d6", rolls=[5, 6], total=11))
    story.propose(
        scene.id,
        type="fact",
        authority="player",
        confidence=0.7,
        resolution=roll,
        evidence={"turn_ids": [t2]},
        content={"subject_entity_id": mira_id, "predicate": "knows_location_of", "value": "the crown"},
    )
    story.propose(
        scene.id,
        type="fact",
        authority="player",
        confidence=0.7,
        evidence={"turn_ids": [t2]},
        content={"subject_entity_id": mira_id, "predicate": "owes_money", "value": True},
    )
    report = story.end_scene(scene.id)
    assert [d.status for d in report.decisions] == [ProposalStatus.ACCEPTED, ProposalStatus.REJECTED]
    story.add_memory(
        Memory(
            campaign_id=campaign.id,
            observer_entity_id=mira_id,
            text="The stranger asked about the crown.",
            anchor_turn_id=t2,
        )
    )

    # time travel: undo, fork, and the state as of each turn
    story.undo(campaign.id)
    story.add_turn(campaign.id, "I buy a fish instead", narration="It is a fine fish.")
    assert [t.text for t in story.history(campaign.id)] == ["I arrive at the harbour", "I buy a fish instead"]
    assert story.memories(campaign.id) == []
    assert story.state(campaign.id, turn_id=t2).locations[mira_id] == dock_id
    assert not any(f.predicate == "knows_location_of" for f in story.state(campaign.id).facts)
    main = next(b for b in story.branches(campaign.id) if b.name == "main")
    story.switch_branch(campaign.id, main.id)
    facts = {f.predicate: f for f in story.state(campaign.id).facts}
    assert facts["knows_location_of"].authority.value == "player"
    assert [m.text for m in story.memories(campaign.id)] == ["The stranger asked about the crown."]

    # a retcon on this branch
    new_fact = story.retcon(
        campaign.id, facts["knows_location_of"].id, reason="She only pretended", value="nothing at all"
    )
    after = {f.id: f for f in story.state(campaign.id).facts}
    assert after[facts["knows_location_of"].id].canon_level.value == "retconned"
    assert after[new_fact].replaces == facts["knows_location_of"].id  # type: ignore[index]

    # what a turn reads before the model runs, in one call: what the separate reads return
    context = story.turn_context(campaign.id, turn=story.get_turn(t2), recent=4)
    assert context.campaign == story.get_campaign(campaign.id)
    assert context.axioms == [a.text for a in story.axioms(world.id)]
    assert context.state == story.state(campaign.id)
    assert context.recent == story.history(campaign.id, turn_id=t1, last=4)
    assert context.memories == story.memories(campaign.id) and context.summaries == story.summaries(campaign.id)

    # the bundle round-trips the tree and the canon
    buffer = io.BytesIO()
    summary = story.export_campaign(campaign.id, buffer)
    assert summary.nodes > 20 and summary.edges > 20
