"""Retcons of every kind that read true everywhere: the fold (the state view, as of any turn), the stored node,
the export and the recall index agree after a retcon of a fact or a happening; dependents are listed first and
refused, retconned with it or kept; outcomes in recall name entities by name and carry their canon ids."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from schemas.errors import InvalidRequest, NotFound
from schemas.retcons import DependentsPolicy, HappeningRetelling, RecordKind
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)


def _world(story: StoryService) -> tuple[str, dict[str, str], dict[str, str]]:
    """A campaign whose first scene made a fact (Harrowgate's ruler), a happening and a relationship."""
    campaign = new_campaign(story)
    play(story, campaign.id, "We ride to Harrowgate")
    scene = story.start_scene(campaign.id, title="Arrival")
    ids = {
        "vesna": gm_entity(story, scene.id, "character", "Lady Vesna"),
        "bram": gm_entity(story, scene.id, "character", "Lord Bram"),
        "town": gm_entity(story, scene.id, "location", "Harrowgate"),
    }
    story.end_scene(scene.id)
    scene = story.start_scene(campaign.id, title="The court")
    gm = {"authority": "gm", "confidence": 1.0}
    story.propose(
        scene.id,
        type="fact",
        content={"subject_entity_id": ids["town"], "predicate": "ruler", "object_entity_id": ids["vesna"]},
        **gm,
    )
    story.propose(
        scene.id,
        type="event",
        content={
            "title": "The bridge burns",
            "participant_entity_ids": [ids["vesna"]],
            "location_entity_id": ids["town"],
        },
        **gm,
    )
    story.propose(
        scene.id,
        type="relationship",
        content={"source_entity_id": ids["vesna"], "target_entity_id": ids["bram"], "kind": "rival_of"},
        **gm,
    )
    play(story, campaign.id, "The court gathers")
    story.end_scene(scene.id)
    state = story.state(campaign.id)
    made = {
        "fact": next(f.id for f in state.facts if f.predicate == "ruler"),
        "happening": next(h.id for h in state.happenings if h.title == "The bridge burns"),
        "relationship": next(r.id for r in state.relationships if r.kind == "rival_of"),
    }
    return campaign.id, ids, made


def _exported(story: StoryService, campaign_id: str) -> dict[str, dict]:
    buf = io.BytesIO()
    story.export_campaign(campaign_id, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        rows = [json.loads(line) for line in zf.read("graph/nodes.jsonl").decode().splitlines() if line]
    return {r["props"]["uid"]: r["props"] for r in rows if "uid" in r["props"]}


def _node(story: StoryService, label: str, uid: str) -> dict:
    return story.graph.run(f"MATCH (n:{label} {{uid: $u}}) RETURN n", {"u": uid})[0]["n"]


def _recalled(story: StoryService, campaign_id: str, query: str) -> dict[str, tuple[str, str | None]]:
    return {h.id: (h.text, h.ref) for h in story.recall(campaign_id, query, limit=20)}


def test_a_fact_retcon_reads_true_in_the_node_the_export_and_recall(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign_id, _, made = _world(story)
    fact_id = made["fact"]
    before = _recalled(story, campaign_id, "who rules Harrowgate")
    # the outcome names entities by their names and carries the fact's id (before: "ent_… ruler ent_…", no ref)
    outcome = next(rid for rid, (text, ref) in before.items() if ref == fact_id)
    assert before[outcome][0] == "Harrowgate ruler Lady Vesna"
    play(story, campaign_id, "A season passes")

    new_id = story.retcon(
        campaign_id, fact_id, reason="Bram always ruled", object_entity_id=_entity(story, campaign_id, "Lord Bram")
    )
    assert new_id is not None
    node = _node(story, "Fact", fact_id)
    # the stored node says it (before: canon_level 'canon', no status)
    assert node["canon_level"] == "retconned" and node["status"] == "superseded"
    assert node["superseded_by"] == new_id and node["retcon_reason"] == "Bram always ruled"
    exported = _exported(story, campaign_id)
    assert exported[fact_id]["canon_level"] == "retconned" and exported[fact_id]["status"] == "superseded"
    assert exported[new_id]["canon_level"] == "canon" and exported[new_id]["retcon_of"] == fact_id
    # recall: the old outcome is out, the replacing fact is in, in words, with its id
    after = _recalled(story, campaign_id, "who rules Harrowgate")
    assert outcome not in after and all(ref != fact_id for _, ref in after.values())
    assert after[new_id] == ("Harrowgate ruler Lord Bram", new_id)
    # the state agrees: as of now, and as of the turn before the retcon (the fold is the truth per branch)
    facts = {f.id: f for f in story.state(campaign_id).facts}
    assert facts[fact_id].canon_level.value == "retconned" and facts[new_id].replaces == fact_id


def _entity(story: StoryService, campaign_id: str, name: str) -> str:
    return next(e.id for e in story.state(campaign_id).entities if e.name == name)


def test_a_happening_is_in_the_state_and_its_retcon_retells_it_everywhere(recalling_story: StoryService) -> None:
    story = recalling_story
    campaign_id, ids, made = _world(story)
    hap = made["happening"]
    state = story.state(campaign_id)
    (happening,) = [h for h in state.happenings if h.id == hap]  # before: the state view had no happenings
    assert happening.status.value == "active" and happening.location_entity_id == ids["town"]
    before_turn = state.turn_id
    assert any(text.startswith("The bridge burns") for text, _ in _recalled(story, campaign_id, "bridge").values())
    play(story, campaign_id, "Later")

    answer = story.retcon_record(
        campaign_id, hap, reason="It never burned", retelling=HappeningRetelling(title="The bridge holds")
    )
    assert answer.record is RecordKind.HAPPENING and answer.replaced_by is not None
    new = answer.replaced_by
    views = {h.id: h for h in story.state(campaign_id).happenings}
    assert views[hap].canon_level.value == "retconned" and views[hap].status.value == "superseded"
    assert views[hap].superseded_by == new and views[new].replaces == hap and views[new].title == "The bridge holds"
    assert views[new].participant_entity_ids == [ids["vesna"]]  # what the retelling left out is kept
    # as of the turn before the retcon, the happening stands
    then = {h.id: h for h in story.state(campaign_id, turn_id=before_turn).happenings}
    assert then[hap].canon_level.value == "canon" and new not in then
    assert _node(story, "Happening", hap)["canon_level"] == "retconned"
    exported = _exported(story, campaign_id)
    assert exported[hap]["status"] == "superseded" and exported[new]["replaces"] == hap
    recalled = _recalled(story, campaign_id, "the bridge")
    assert recalled[new][0] == "The bridge holds"
    assert not any(text.startswith("The bridge burns") for text, _ in recalled.values())
    with pytest.raises(InvalidRequest, match="already retconned"):
        story.retcon_record(campaign_id, hap, reason="again")


def test_dependents_are_listed_first_and_refused_retconned_or_kept(story: StoryService) -> None:
    campaign_id, ids, made = _world(story)
    deps = story.record_dependents(campaign_id, ids["vesna"])
    assert deps.record is RecordKind.ENTITY and deps.text == "Lady Vesna (character)"
    listed = {(d.kind.value, d.id) for d in deps.dependents}
    assert listed == {("fact", made["fact"]), ("relationship", made["relationship"]), ("happening", made["happening"])}
    assert next(d for d in deps.dependents if d.id == made["fact"]).text == "Harrowgate ruler Lady Vesna"
    version = story.state(campaign_id).event_count, len(story.checkpoints(campaign_id))
    with pytest.raises(InvalidRequest, match="current canon rests on entity"):
        story.retcon_record(campaign_id, ids["vesna"], reason="She never existed")
    assert (story.state(campaign_id).event_count, len(story.checkpoints(campaign_id))) == version  # nothing
    with pytest.raises(NotFound):
        story.record_dependents(campaign_id, "ent_nobody")

    answer = story.retcon_record(
        campaign_id, ids["vesna"], reason="She never existed", dependents=DependentsPolicy.RETCON
    )
    assert sorted(answer.retconned_with) == sorted(made.values())
    state = story.state(campaign_id)
    assert next(e for e in state.entities if e.id == ids["vesna"]).canon_level.value == "retconned"
    assert next(r for r in state.relationships if r.id == made["relationship"]).canon_level.value == "retconned"
    assert next(f for f in state.facts if f.id == made["fact"]).status.value == "superseded"
    assert _node(story, "Relationship", made["relationship"])["canon_level"] == "retconned"
    # a retconned entity is no more: canon cannot name it
    scene = story.start_scene(campaign_id, title="After")
    story.propose(
        scene.id,
        type="fact",
        content={"subject_entity_id": ids["vesna"], "predicate": "mood", "value": "calm"},
        authority="gm",
        confidence=1.0,
    )
    report = story.end_scene(scene.id)
    assert report.decisions[0].status.value == "rejected" and "retconned" in report.decisions[0].rationale
    # keep: the relationship of Bram's stays as it is
    kept = story.retcon_record(campaign_id, ids["bram"], reason="no Bram", dependents=DependentsPolicy.KEEP)
    assert kept.retconned_with == []
