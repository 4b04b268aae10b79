"""A relationship's and a thread's visibility, from their proposals to the state and through a bundle."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.visibility import Visibility
from story.viewer import TABLE

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server): the story and a second pair of stores

GM = Visibility(audience="gm")


def test_a_relationships_and_a_threads_visibility_travel_in_a_bundle(story: Any, tmp_path: Any) -> None:
    """Folded into the state from their events (the state hash of a public world unchanged), and kept by an
    export and an import into other stores."""
    from tests.unit.test_story_bundle import _export, _stores
    from tests.unit.test_story_campaign import gm_entity, new_campaign, play

    campaign = new_campaign(story)
    play(story, campaign.id, "We meet at the inn.")
    scene = story.start_scene(campaign.id, title="The inn").id
    ada, brand = gm_entity(story, scene, "character", "Ada"), gm_entity(story, scene, "character", "Brand")
    story.commit(scene, [p.id for p in story.proposals(scene)])
    public_hash = story.state(campaign.id).state_hash
    gm = GM.model_dump(mode="json")
    tie = {"type": "relationship", "source_entity_id": ada, "target_entity_id": brand, "kind": "owes", "visibility": gm}
    plot = {"kind": "thread_opened", "title": "The debt", "involved_entity_ids": [ada], "visibility": gm}
    made = [
        story.propose(scene, type="relationship", content=tie, authority="gm", confidence=1.0).id,
        story.propose(scene, type="state_change", content={"events": [plot]}, authority="gm", confidence=1.0).id,
    ]
    story.commit(scene, made)
    state = story.state(campaign.id)
    assert state.state_hash != public_hash
    assert [r.visibility for r in state.relationships] == [GM] and [t.visibility for t in state.threads] == [GM]
    assert TABLE.state(state).relationships == [] and TABLE.state(state).threads == []
    with _stores(tmp_path / "other") as other:
        other.import_campaign(_export(story, campaign.id))
        again = other.state(campaign.id)
        assert again.state_hash == state.state_hash
        assert [r.visibility for r in again.relationships] == [GM] and [t.visibility for t in again.threads] == [GM]
