"""A retcon makes what recall returns about a scene read the new outcome: the scene summary formed at its end ("What
became true: …") and the memories of those present ("Afterwards: …") are amended in the retcon's transaction, the
text they had kept in their history (``text_history_json``); nothing is deleted. A retcon with nothing in its
place takes the outcome out of their words; a second retcon of the retelling amends them again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas.recall import RecallKind
from schemas.retcons import HappeningRetelling
from story import cypher
from story.formation import FormedScene
from story.scene_end import end_pending
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)

BURNS = "Lady Vesna burns the bridge: Flames take the old span"
HOLDS = "Lady Vesna saves the bridge: The rain puts the fire out"


class _Broken:
    name = "broken"

    def form(self, *args: Any, **kwargs: Any) -> FormedScene:
        raise RuntimeError("the model is down")


def _court(story: StoryService, *, pending: bool = False) -> tuple[str, dict[str, str], str, dict[str, str]]:
    """A scene with Lady Vesna and Lord Bram present that made a fact (Harrowgate's ruler) and a happening;
    ``pending``: its end's formation failed (a model down), left to finish later."""
    campaign = new_campaign(story)
    play(story, campaign.id, "We ride to Harrowgate")
    arrival = story.start_scene(campaign.id, title="Arrival")
    ids = {
        "vesna": gm_entity(story, arrival.id, "character", "Lady Vesna"),
        "bram": gm_entity(story, arrival.id, "character", "Lord Bram"),
        "town": gm_entity(story, arrival.id, "location", "Harrowgate"),
    }
    story.end_scene(arrival.id)
    scene = story.start_scene(campaign.id, title="The court", participant_entity_ids=[ids["vesna"], ids["bram"]])
    gm = {"authority": "gm", "confidence": 1.0}
    ruler = {"subject_entity_id": ids["town"], "predicate": "ruler", "object_entity_id": ids["vesna"]}
    story.propose(scene.id, type="fact", content=ruler, **gm)
    fire = {
        "title": "Lady Vesna burns the bridge",
        "description": "Flames take the old span",
        "participant_entity_ids": [ids["vesna"]],
    }
    story.propose(scene.id, type="event", content=fire, **gm)
    play(story, campaign.id, "The court gathers in the great hall", "Lady Vesna takes the throne")
    former, story.memory_former = story.memory_former, _Broken() if pending else story.memory_former
    story.end_scene(scene.id)
    story.memory_former = former
    state = story.state(campaign.id)
    made = {
        "fact": next(f.id for f in state.facts if f.predicate == "ruler"),
        "happening": next(h.id for h in state.happenings if h.title == "Lady Vesna burns the bridge"),
    }
    return campaign.id, ids, scene.id, made


def _summary(story: StoryService, scene_id: str) -> dict:
    rows = [r for r in story.graph.run("MATCH (n:Summary) RETURN n") if r["n"].get("scene_id") == scene_id]
    assert len(rows) == 1, rows
    return rows[0]["n"]


def _recalled(story: StoryService, campaign_id: str, query: str, kind: RecallKind) -> list[str]:
    return [h.text for h in story.recall(campaign_id, query, kinds=[kind], limit=20)]


def _memory_of(story: StoryService, campaign_id: str, entity_id: str) -> str:
    (memory,) = [m for m in story.memories(campaign_id, observer_entity_id=entity_id) if "The court" in m.text]
    return memory.text


def test_a_retold_happening_is_what_the_scene_summary_and_memories_recall(recalling_story: StoryService) -> None:
    story = recalling_story
    cid, ids, scene_id, made = _court(story)
    before = _summary(story, scene_id)
    assert BURNS in before["text"] and "What became true:" in before["text"]
    assert any(BURNS in t for t in _recalled(story, cid, "the bridge", RecallKind.SUMMARY))
    assert BURNS in _memory_of(story, cid, ids["vesna"])
    play(story, cid, "A season passes")
    summaries = len(story.graph.run(*cypher.anchored_of_campaign("Summary", cid)))

    retelling = HappeningRetelling(title="Lady Vesna saves the bridge", description="The rain puts the fire out")
    story.retcon_record(cid, made["happening"], reason="It never burned", retelling=retelling)

    after = _summary(story, scene_id)
    assert HOLDS in after["text"] and BURNS not in after["text"], after["text"]
    assert after["uid"] == before["uid"] and after["text"] == before["text"].replace(BURNS, HOLDS)
    (kept,) = json.loads(after["text_history_json"])  # the old text is kept, with the retcon that amended it
    assert kept["text"] == before["text"] and kept["record_ids"] == [made["happening"]]
    assert len(story.graph.run(*cypher.anchored_of_campaign("Summary", cid))) == summaries  # none deleted
    texts = _recalled(story, cid, "the bridge", RecallKind.SUMMARY)
    assert any(HOLDS in t for t in texts) and not any(BURNS in t for t in texts), texts
    vesna = _memory_of(story, cid, ids["vesna"])
    assert HOLDS in vesna and BURNS not in vesna
    memories = _recalled(story, cid, "the bridge", RecallKind.MEMORY)
    assert any(HOLDS in t for t in memories) and not any(BURNS in t for t in memories), memories
    # a rebuild from the graph reads the same
    story.rebuild_recall(cid)
    texts = _recalled(story, cid, "the bridge", RecallKind.SUMMARY)
    assert any(HOLDS in t for t in texts) and not any(BURNS in t for t in texts), texts

    # retold again: the retelling is what the words now say, and it is replaced in turn
    new = next(h.id for h in story.state(cid).happenings if h.title == "Lady Vesna saves the bridge")
    story.retcon_record(
        cid, new, reason="Washed away", retelling=HappeningRetelling(title="Lady Vesna floods the bridge")
    )
    text = _summary(story, scene_id)["text"]
    assert "Lady Vesna floods the bridge: The rain puts the fire out" in text and HOLDS not in text, text
    assert len(json.loads(_summary(story, scene_id)["text_history_json"])) == 2


def test_a_fact_retconned_with_and_without_a_replacement_leaves_the_summarys_words(
    recalling_story: StoryService,
) -> None:
    story = recalling_story
    cid, ids, scene_id, made = _court(story)
    assert "Harrowgate ruler Lady Vesna" in _summary(story, scene_id)["text"]
    new_id = story.retcon(cid, made["fact"], reason="Bram always ruled", object_entity_id=ids["bram"])
    text = _summary(story, scene_id)["text"]
    assert "Harrowgate ruler Lord Bram" in text and "Harrowgate ruler Lady Vesna" not in text, text
    texts = _recalled(story, cid, "who rules Harrowgate", RecallKind.SUMMARY)
    assert any("Harrowgate ruler Lord Bram" in t for t in texts), texts
    assert not any("ruler Lady Vesna" in t for t in texts), texts

    assert new_id is not None
    story.retcon_record(cid, new_id, reason="Nobody rules Harrowgate")  # nothing in its place
    text = _summary(story, scene_id)["text"]
    assert "ruler" not in text and "What became true: " + BURNS + "." in text, text
    texts = _recalled(story, cid, "who rules Harrowgate", RecallKind.SUMMARY)
    assert not any("Harrowgate ruler" in t for t in texts), texts


def test_an_end_formed_after_a_retcon_tells_the_new_version(recalling_story: StoryService) -> None:
    """The end's formation failed and is finished after a retcon of what it made: it forms the new words."""
    story = recalling_story
    cid, ids, scene_id, made = _court(story, pending=True)
    assert end_pending(story, scene_id)
    assert not [r for r in story.graph.run("MATCH (n:Summary) RETURN n") if r["n"].get("scene_id") == scene_id]
    retelling = HappeningRetelling(title="Lady Vesna saves the bridge", description="The rain puts the fire out")
    story.retcon_record(cid, made["happening"], reason="It never burned", retelling=retelling)
    story.retcon(cid, made["fact"], reason="Bram always ruled", object_entity_id=ids["bram"])

    story.finish_scene_end(scene_id)
    assert not end_pending(story, scene_id)
    text = _summary(story, scene_id)["text"]
    assert HOLDS in text and "Harrowgate ruler Lord Bram" in text, text
    assert BURNS not in text and "ruler Lady Vesna" not in text, text
    vesna = _memory_of(story, cid, ids["vesna"])
    assert HOLDS in vesna and BURNS not in vesna, vesna
    texts = _recalled(story, cid, "the bridge", RecallKind.SUMMARY)
    assert any(HOLDS in t for t in texts) and not any(BURNS in t for t in texts), texts
