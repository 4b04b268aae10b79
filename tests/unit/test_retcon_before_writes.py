"""A retcon is checked whole before the checkpoint it takes first is written: a refused retcon writes nothing.

The retcon took its world-state checkpoint (before_ooc_mutation), then found the fact missing, the authority
too low or the reason one a fact cannot hold, and answered an error with the checkpoint already in the graph.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas.common import Authority
from schemas.errors import LorekeeperError
from story.service import StoryService
from tests.unit.store_dump import stores_dump
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the story


def _fact(story: StoryService) -> tuple[str, str]:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We reach the forge.", narration="Sparks fly from the anvil.")
    scene = story.start_scene(campaign.id, title="Cast")
    ayla = gm_entity(story, scene.id, "character", "Ayla")
    fact = {"subject_entity_id": ayla, "predicate": "trusts", "value": "the reeve"}
    story.propose(scene.id, type="fact", content=fact, authority="gm", confidence=1.0)
    story.end_scene(scene.id)
    (row,) = story.graph.run("MATCH (f:Fact) WHERE f.campaign_id = $c RETURN f.uid AS uid", {"c": campaign.id})
    return campaign.id, str(row["uid"])


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"reason": "x" * 2001}, ValidationError),
        ({"reason": "she never did", "value": "a\x00b"}, ValidationError),
        ({"reason": "she never did", "fact_id": "fact_missing"}, LorekeeperError),
        ({"reason": "she never did", "authority": Authority.PLAYER}, LorekeeperError),
    ],
    ids=["reason over its bound", "a NUL in the new value", "no such fact", "authority too low"],
)
def test_a_refused_retcon_writes_nothing(story: StoryService, change: dict[str, Any], refused: type) -> None:
    cid, fact_id = _fact(story)
    arguments = {"fact_id": fact_id, **change}
    before = stores_dump(story.graph, None, story.blobs.root)  # type: ignore[attr-defined]
    with pytest.raises(refused):
        story.retcon(cid, arguments.pop("fact_id"), **arguments)
    assert stores_dump(story.graph, None, story.blobs.root) == before  # type: ignore[attr-defined]
    assert story.retcon(cid, fact_id, reason="she never did") is None  # the same fact retcons fine after
