"""A turn narrated from a seat (the table's, over the API) draws on what that seat may see, and still fills
its memories section: the records hidden from it do not take the places of those it may see.

The stores, the memory index and the embedding model are real; the echo engine narrates.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from narrator.engines import EchoEngine
from narrator.turn import TurnFlow, TurnOutcome
from schemas.serving import ServeSettings, TurnRequest
from schemas.story import Memory
from schemas.visibility import Visibility
from story.service import StoryService
from story.viewer import TABLE, Viewer
from tests.unit.test_narrator_recall import memories_section
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the story

SETTINGS = ServeSettings(recent_turns=0, recall_hits=1, knowledge_hits=0)
ASKED = "Who seized the salt caravan at the old ford?"


def _play(flow: TurnFlow, campaign_id: str, viewer: Viewer | None) -> TurnOutcome:
    async def run() -> dict[str, Any]:
        return [e async for e in flow.play(campaign_id, TurnRequest(text=ASKED), viewer=viewer)][-1]

    return TurnOutcome.model_validate(asyncio.run(run()))


def test_a_seats_memories_section_is_filled_past_the_records_hidden_from_it(recalling_story: StoryService) -> None:
    """The NPC's memories (the GM's) are the best matches; the table's seat gets the public memory instead of
    an empty section (before: the recall asked for as many hits as it shows, all of them hidden)."""
    story = recalling_story
    story.memory_former = None  # only the records this test writes
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We reach the ford.", narration="The river runs high.")
    scene = story.start_scene(campaign.id, title="Cast")
    npc = gm_entity(story, scene.id, "creature", "Mordecai")
    story.end_scene(scene.id)
    head = story.get_campaign(campaign.id).head_turn_id
    for text in (
        "Mordecai's bandits seized the salt caravan at the old ford.",
        "Mordecai hid the salt caravan's wagons beyond the old ford.",
        "Mordecai paid the bandits who seized the salt caravan.",
    ):  # an NPC's memories: the GM's
        story.add_memory(Memory(campaign_id=campaign.id, observer_entity_id=npc, text=text, anchor_turn_id=head))
    rumour = "Everyone at the ford says the salt caravan never arrived."
    story.add_memory(
        Memory(
            campaign_id=campaign.id,
            observer_entity_id=npc,
            text=rumour,
            anchor_turn_id=head,
            visibility=Visibility(audience="public"),
        )
    )
    best = story.recall(campaign.id, ASKED, limit=3)
    assert all(h.text.startswith("Mordecai") for h in best[:2]), [h.text for h in best]  # the hidden ones first
    flow = TurnFlow(story, EchoEngine(), settings=SETTINGS)

    seen = memories_section(story.provenance(_play(flow, campaign.id, TABLE).turn_id))
    assert len(seen) == 1 and rumour in seen[0], seen
