"""Rulings: a GM's attribute ruling against the book is a house rule like a fact ruling (listed, and the rule in
force afterwards); predicates are compared as the rulebook check compares them, so a contradiction of campaign
canon under another predicate name is caught; the words players use for a field ("spell level") are that field."""

from __future__ import annotations

import pytest

from schemas.story import ProposalStatus
from story.predicates import predicate_field
from story.service import StoryService
from tests.unit.test_gate_provenance import write_book
from tests.unit.test_source_check import claim, decided, rulebook, table
from tests.unit.test_story_campaign import play

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)


def test_the_words_players_use_for_a_field_are_that_field() -> None:
    # before: "spell level" was read as a field of its own, spell_level, and passed unchecked
    assert predicate_field("spell level", "spell") == predicate_field("Spell's level", "spell") == "level"
    assert predicate_field("level", "spell") == "level"
    assert predicate_field("creature hit points", "creature") == "hit_points"


def test_a_gm_attribute_ruling_against_the_book_is_a_listed_house_rule(story: StoryService) -> None:
    rulebook(story, "Basic Rules")
    campaign_id, scene_id, _, _ = table(story)
    made = story.propose(
        scene_id,
        type="entity",
        content={"kind": "creature", "name": "Goblin", "aliases": ["Gob"], "attributes": {"HP": 12}},
        authority="gm",
        confidence=1.0,
    )
    decision = decided(story, scene_id)[made.id]
    assert decision.status is ProposalStatus.ACCEPTED, decision.rationale
    # before: accepted "departing from the rulebook", and no house rule listed
    assert decision.house_rule and "kept as a house rule" in decision.rationale
    rules = story.house_rules(campaign_id)
    assert [(r.entry, r.field, r.book_value, r.ruled_value) for r in rules] == [("Goblin", "hit_points", "7", 12)]
    # the rule in force: a player's claim of the book's 7 is now held against the ruling
    gob = next(e.id for e in story.state(campaign_id).entities if e.aliases == ["Gob"])
    (later,) = play(story, campaign_id, "Another goblin")
    scene_id = story.start_scene(campaign_id, title="More goblins").id
    book = claim(story, scene_id, gob, later, "hp", 7)
    refused = decided(story, scene_id)[book]
    assert refused.status is ProposalStatus.REJECTED and f"contradicts fact {rules[0].fact_id}" in refused.rationale


def test_a_contradiction_under_another_predicate_name_is_caught(story: StoryService) -> None:
    campaign_id, scene_id, goblin, turn_id = table(story)  # no rulebook: campaign canon alone
    first = claim(story, scene_id, goblin, turn_id, "hit_points", 9, authority="gm")
    decided(story, scene_id)
    fact_id = next(f.id for f in story.state(campaign_id).facts if f.predicate == "hit_points")
    scene_id = story.start_scene(campaign_id, title="Again").id
    other = claim(story, scene_id, goblin, turn_id, "HP", 30)  # a player's, under another name
    decision = decided(story, scene_id)[other]
    # before: "HP" and "hit_points" were two predicates, and 30 became canon beside 9
    assert decision.status is ProposalStatus.REJECTED, decision.rationale
    assert f"contradicts fact {fact_id}" in decision.rationale
    current = [f for f in story.state(campaign_id).facts if f.status.value == "active"]
    assert [(f.predicate, f.value) for f in current if f.subject_entity_id == goblin] == [("hit_points", 9)]
    assert decided is not None and first


def test_a_gm_fact_against_campaign_canon_of_source_authority_is_a_house_rule(story: StoryService) -> None:
    campaign_id, scene_id, goblin, turn_id = table(story)
    _, (chunk, _) = write_book(story.graph, "Goblin Lore")
    story.propose(
        scene_id,
        type="fact",
        content={"subject_entity_id": goblin, "predicate": "lair", "value": "the old mill"},
        authority="source",
        confidence=1.0,
        evidence={"chunk_ids": [chunk]},
    )
    decided(story, scene_id)
    book_fact = next(f.id for f in story.state(campaign_id).facts if f.predicate == "lair")
    scene_id = story.start_scene(campaign_id, title="The GM rules").id
    ruling = claim(story, scene_id, goblin, turn_id, "lair", "the sunken chapel", authority="gm")
    decision = decided(story, scene_id)[ruling]
    # before: rejected, "it contradicts fact … of source authority, which outranks gm"
    assert decision.status is ProposalStatus.ACCEPTED, decision.rationale
    assert decision.house_rule and "kept as a house rule" in decision.rationale
    (rule,) = story.house_rules(campaign_id)
    assert (rule.entry, rule.field, rule.book_value, rule.ruled_value) == (
        "Goblin",
        "lair",
        "the old mill",
        "the sunken chapel",
    )
    assert book_fact in rule.source_fact_ids
    facts = {f.id: f for f in story.state(campaign_id).facts}
    assert facts[book_fact].status.value == "superseded" and facts[rule.fact_id].replaces == book_fact
