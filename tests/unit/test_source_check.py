"""The gate holds proposals against the rulebook: source facts of the books a campaign draws on, and house rules.

The books are real library records on the embedded graph (items and chunks written as ingestion writes
them), their facts read from a goblin stat block by the project's parser and saved through
:class:`stores.source_facts.SourceFactStore`; the gate runs through the story service as at a table.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rulebook import builtin_table, extract_facts
from schemas.campaign import LibraryPin
from schemas.knowledge import Classification
from schemas.rulefacts import Comparison, DistanceValue, EntrySection, ListValue, NumberValue
from schemas.story import Axiom, DiceRoll, ProposalStatus, Resolution, ResolutionMethod, ResolutionOutcome
from stores.source_facts import SourceFactStore
from story.axioms import AxiomRulings, ProposalText
from story.policy import ContradictionPolicy, GatePolicy
from story.service import StoryService
from story.source_check import compare_claim, predicate_field
from tests.unit.test_gate_provenance import write_book
from tests.unit.test_story_bundle import _stores
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers

ROLL = Resolution(
    method=ResolutionMethod.DICE,
    outcome=ResolutionOutcome.SUCCESS,
    roll=DiceRoll(expression="1d20+2", rolls=[15], total=17, target=12),
)

GOBLIN = """Small humanoid (goblinoid), neutral evil

Armor Class {ac} (leather armor, shield)
Hit Points {hp} (2d6)
Speed 30 ft.

STR DEX CON INT WIS CHA
8 (-1) 14 (+2) 10 (+0) 10 (+0) 8 (-1) 8 (-1)

Senses darkvision 60 ft., passive Perception 9
Languages Common, Goblin
Challenge 1/4 (50 XP)"""


def rulebook(
    story: StoryService, title: str, *, hp: int = 7, ac: int = 15, library: str = "lib_srd"
) -> tuple[str, str]:
    """A rulebook item holding a goblin stat block on page 12, its facts saved; (item uid, chunk uid)."""
    item, (chunk, _) = write_book(story.graph, title, library=library)
    section = EntrySection(
        heading_path=[title, "Monsters", "Goblin"],
        text=GOBLIN.format(hp=hp, ac=ac),
        bold_terms=["Armor Class", "Hit Points", "Speed"],
        page=12,
        chunk_id=chunk,
    )
    facts = extract_facts(section, builtin_table("dnd5e"))
    assert {f.predicate for f in facts} >= {"hit_points", "armor_class", "speed"}
    SourceFactStore(story.graph).save(item.uid, library, facts)
    return item.uid, chunk


def table(story: StoryService, pins: Sequence[LibraryPin] = ()) -> tuple[str, str, str, str]:
    """A campaign with a goblin entity made canon by the GM; (campaign, open scene, goblin, turn)."""
    campaign = new_campaign(story)
    if pins:
        story.set_library_pins(campaign.id, pins)
    (turn_id,) = play(story, campaign.id, "A goblin leaps from the bushes")
    scene = story.start_scene(campaign.id, title="Ambush")
    goblin = gm_entity(story, scene.id, "creature", "Goblin")
    story.end_scene(scene.id)
    return campaign.id, story.start_scene(campaign.id, title="The fight").id, goblin, turn_id


def claim(story: StoryService, scene_id: str, goblin: str, turn_id: str, predicate: str, value: Any, **kw: Any) -> str:
    authority = kw.pop("authority", "player")
    extra: dict[str, Any] = {"resolution": ROLL, "evidence": {"turn_ids": [turn_id]}} if authority == "player" else {}
    proposal = story.propose(
        scene_id,
        type="fact",
        content={"subject_entity_id": goblin, "predicate": predicate, "value": value},
        authority=authority,
        confidence=1.0,
        **extra,
        **kw,
    )
    return proposal.id


def decided(story: StoryService, scene_id: str) -> dict[str, Any]:
    report = story.end_scene(scene_id)
    return {d.proposal_id: d for d in report.decisions}


def test_predicates_read_as_fields_of_the_family_tables() -> None:
    for said in ("hp", "HP", "Hit Points", "hit_points", "hit-points"):
        assert predicate_field(said) == "hit_points", said
    assert predicate_field("AC") == "armor_class"
    assert predicate_field("Challenge Rating") == predicate_field("CR") == "challenge_rating"
    assert predicate_field("Casting Time") == "casting_time"
    assert predicate_field("favourite colour") == "favourite_colour"  # no table knows it: itself, normalised
    assert predicate_field("Strength", "creature") == "strength"  # a field's name beats the armor's label


def test_a_list_said_in_words_agrees_in_any_order_and_a_changed_one_does_not() -> None:
    book = ListValue(items=["Common", "Goblin"])
    assert compare_claim("Goblin and Common", book) is Comparison.SAME
    assert compare_claim(["goblin", "common"], book) is Comparison.SAME
    assert compare_claim("Common", book) is Comparison.DIFFERENT  # one dropped
    assert compare_claim("Common, Goblin and Orc", book) is Comparison.DIFFERENT  # one added
    effects = ListValue(items=["It can't see, and fails sight checks.", "Attacks against it have advantage."])
    assert compare_claim("attacks against it have advantage; it can't see, and fails sight checks", effects) is (
        Comparison.SAME
    )
    assert compare_claim(30, DistanceValue(amount=30)) is Comparison.SAME  # a bare number is feet
    assert compare_claim("9 m", DistanceValue(amount=30)) is Comparison.SAME
    assert compare_claim("30 m", DistanceValue(amount=30)) is Comparison.DIFFERENT
    assert compare_claim("lots", NumberValue(value=7)) is Comparison.UNCOMPARABLE
    # the field's label said with the value is read past, before or after it
    assert compare_claim("seven hit points", NumberValue(value=7), "hit_points") is Comparison.SAME
    assert compare_claim("30 HP", NumberValue(value=7), "hit_points") is Comparison.DIFFERENT
    assert compare_claim("Armor Class: 16", NumberValue(value=15), "armor_class") is Comparison.DIFFERENT
    assert compare_claim("30 hit points", NumberValue(value=7)) is Comparison.UNCOMPARABLE  # no field: not read


def test_a_false_claim_is_rejected_citing_the_rule_and_a_true_one_is_supported_by_it(story: StoryService) -> None:
    item, chunk = rulebook(story, "Basic Rules")
    campaign_id, scene_id, goblin, turn_id = table(story)
    false = claim(story, scene_id, goblin, turn_id, "hit points", 30)
    true = claim(story, scene_id, goblin, turn_id, "hp", "seven")
    speed = claim(story, scene_id, goblin, turn_id, "speed", "thirty feet")
    loose = claim(story, scene_id, goblin, turn_id, "armor class", "quite high")
    decisions = decided(story, scene_id)

    rejected = decisions[false]
    assert rejected.status is ProposalStatus.REJECTED
    assert "contradicts the rulebook: Goblin — Hit Points 7 (2d6) (item" in rejected.rationale
    assert f"item {item}, p. 12, chunk {chunk}" in rejected.rationale
    (cited,) = rejected.source_fact_ids
    assert SourceFactStore(story.graph).for_item(item, entry="Goblin")[0].item_uid == item

    for pid in (true, speed):
        assert decisions[pid].status is ProposalStatus.ACCEPTED, decisions[pid].rationale
        assert "agrees with the rulebook: Goblin" in decisions[pid].rationale
    assert cited in decisions[true].source_fact_ids
    fact = next(f for f in story.state(campaign_id).facts if f.value == "seven")
    linked = story.graph.run(
        "MATCH (:Fact {uid: $f})-[:SUPPORTED_BY]->(s:SourceFact) RETURN s.uid AS uid", {"f": fact.id}
    )
    assert [r["uid"] for r in linked] == [cited]
    assert decisions[loose].status is ProposalStatus.ACCEPTED  # free text is no contradiction …
    assert "not checked against the rulebook" in decisions[loose].rationale  # … and it says so


def test_an_entity_is_matched_by_its_source_entry_and_its_attributes_are_claims(story: StoryService) -> None:
    rulebook(story, "Basic Rules")
    campaign_id, scene_id, _, turn_id = table(story)
    grik = story.propose(
        scene_id,
        type="entity",
        content={"kind": "creature", "name": "Grik", "attributes": {"source_entry": "Goblin", "AC": 18}},
        authority="player",
        confidence=1.0,
        resolution=ROLL,
        evidence={"turn_ids": [turn_id]},
    )
    snik = story.propose(
        scene_id,
        type="entity",
        content={"kind": "creature", "name": "Snik", "attributes": {"source_entry": "goblin", "armor_class": 15}},
        authority="player",
        confidence=1.0,
        resolution=ROLL,
        evidence={"turn_ids": [turn_id]},
    )
    decisions = decided(story, scene_id)
    assert decisions[grik.id].status is ProposalStatus.REJECTED
    assert "AC = 18 contradicts the rulebook: Goblin — Armor Class 15" in decisions[grik.id].rationale
    assert decisions[snik.id].status is ProposalStatus.ACCEPTED, decisions[snik.id].rationale


def test_an_individual_changes_in_play_and_a_gms_individual_is_no_house_rule(story: StoryService) -> None:
    """A wounded goblin has fewer hit points than its stat block, and a GM's tougher goblin chief is that one
    goblin: neither is refused by the book, and neither changes the rule for every goblin."""
    rulebook(story, "Basic Rules")
    campaign_id, scene_id, goblin, turn_id = table(story)
    grik = gm_entity(story, scene_id, "creature", "Grik", source_entry="Goblin", hit_points=30)
    story.end_scene(scene_id)
    assert story.house_rules(campaign_id) == []
    scene_id = story.start_scene(campaign_id, title="The wound").id
    wound = story.propose(
        scene_id,
        type="state_change",
        content={"events": [{"kind": "set_entity_attribute", "entity_id": grik, "attribute": "hp", "value": 3}]},
        authority="player",
        confidence=1.0,
        resolution=ROLL,
        evidence={"turn_ids": [turn_id]},
    )
    tougher = claim(story, scene_id, goblin, turn_id, "hit_points", 30)  # the entry itself: still the book's 7
    decisions = decided(story, scene_id)
    assert decisions[wound.id].status is ProposalStatus.ACCEPTED, decisions[wound.id].rationale
    assert "changes the entity in play" in decisions[wound.id].rationale
    assert decisions[tougher].status is ProposalStatus.REJECTED
    assert "contradicts the rulebook: Goblin — Hit Points 7" in decisions[tougher].rationale


def test_a_gm_ruling_becomes_a_house_rule_on_its_branch_only(story: StoryService) -> None:
    rulebook(story, "Basic Rules")
    campaign_id, scene_id, goblin, before = table(story)
    (turn_id,) = play(story, campaign_id, "The GM looks at the goblin and frowns")
    ruling = claim(story, scene_id, goblin, turn_id, "hit_points", 12, authority="gm", proposed_by="key_gm")
    decision = decided(story, scene_id)[ruling]
    assert decision.status is ProposalStatus.ACCEPTED and decision.house_rule
    assert "overrides the rulebook for this campaign, kept as a house rule" in decision.rationale

    (rule,) = story.house_rules(campaign_id)
    assert (rule.entry, rule.field, rule.book_value, rule.ruled_value) == ("Goblin", "hit_points", "7", 12)
    assert rule.ruled_by == "key_gm" and rule.turn_id == turn_id and rule.book_page == 12
    overridden = story.graph.run(
        "MATCH (:Fact {uid: $f})-[:OVERRIDES]->(s:SourceFact) RETURN s.uid AS uid", {"f": rule.fact_id}
    )
    assert [r["uid"] for r in overridden] == rule.source_fact_ids

    # later on this line, the house rule is the rule: the book's 7 is refused, the ruling's 12 agrees
    (later,) = play(story, campaign_id, "Another goblin")
    scene_id = story.start_scene(campaign_id, title="More goblins").id
    book = claim(story, scene_id, goblin, later, "hp", 7)
    ruled = claim(story, scene_id, goblin, later, "HP", 12)
    decisions = decided(story, scene_id)
    assert decisions[book].status is ProposalStatus.REJECTED
    # "hp" is the ruling's field: campaign canon's contradiction check refuses it first, citing the ruling
    assert f"contradicts fact {rule.fact_id} (hp = 12) of gm authority" in decisions[book].rationale
    # and the ruling's 12 said again under another name is the ruling itself, already canon
    assert decisions[ruled].status is ProposalStatus.REJECTED
    assert decisions[ruled].rationale == f"already canon as fact {rule.fact_id}"

    # a branch forked before the ruling still plays by the book
    branch = story.create_branch(campaign_id, before, name="by the book")
    story.switch_branch(campaign_id, branch.id)
    assert story.house_rules(campaign_id) == []
    (there,) = play(story, campaign_id, "The goblin again, elsewhere")
    fight = story.active_scene(campaign_id)  # "The fight" began at the fork turn: ended on main, open here
    assert fight is not None and fight.title == "The fight"
    scene_id = fight.id
    book = claim(story, scene_id, goblin, there, "hp", 7)
    assert decided(story, scene_id)[book].status is ProposalStatus.ACCEPTED

    # and so does another campaign
    other_id, other_scene, other_goblin, other_turn = table(story)
    assert story.house_rules(other_id) == []
    twelve = claim(story, other_scene, other_goblin, other_turn, "hp", 12)
    assert decided(story, other_scene)[twelve].status is ProposalStatus.REJECTED


def test_the_dispute_policy_accepts_a_contradiction_disputed(story: StoryService) -> None:
    rulebook(story, "Basic Rules")
    story.policy = GatePolicy(source_contradiction=ContradictionPolicy.DISPUTE)
    campaign_id, scene_id, goblin, turn_id = table(story)
    false = claim(story, scene_id, goblin, turn_id, "hit points", 30)
    decision = decided(story, scene_id)[false]
    assert decision.status is ProposalStatus.ACCEPTED and "disputed: hit points = 30" in decision.rationale
    (fact,) = [f for f in story.state(campaign_id).facts if f.value == 30]
    assert fact.status.value == "disputed"
    disputes = story.graph.run(
        "MATCH (:Fact {uid: $f})-[:DISPUTES]->(s:SourceFact) RETURN s.uid AS uid", {"f": fact.id}
    )
    assert [r["uid"] for r in disputes] == decision.source_fact_ids


def test_the_pinned_edition_decides(story: StoryService) -> None:
    first, _ = rulebook(story, "Monster Book First Edition", hp=7, library="lib_first")
    second, _ = rulebook(story, "Monster Book Second Edition", hp=9, library="lib_second")
    outcomes = {}
    for pinned in (first, second):
        _, scene_id, goblin, turn_id = table(story, [LibraryPin(item_id=pinned)])
        seven, nine = (claim(story, scene_id, goblin, turn_id, "hp", v) for v in (7, 9))
        decisions = decided(story, scene_id)
        outcomes[pinned] = (decisions[seven].status, decisions[nine].status)
    assert outcomes[first] == (ProposalStatus.ACCEPTED, ProposalStatus.REJECTED)
    assert outcomes[second] == (ProposalStatus.REJECTED, ProposalStatus.ACCEPTED)

    # a book pinned as inspiration is no law: nothing is held against it
    _, scene_id, goblin, turn_id = table(story, [LibraryPin(item_id=first, use=Classification.INSPIRATION)])
    wild = claim(story, scene_id, goblin, turn_id, "hp", 99)
    decision = decided(story, scene_id)[wild]
    assert decision.status is ProposalStatus.ACCEPTED and not decision.source_fact_ids


class KeywordJudge:
    """A judge that finds an axiom broken when a proposal holds the word it forbids (test double of a model)."""

    name = "keywords"

    def __init__(self, forbidden: dict[str, str]) -> None:
        self.forbidden = forbidden  # word → the axiom text it breaks

    def judge(self, axioms: Sequence[Axiom], proposals: Sequence[ProposalText]) -> AxiomRulings:
        texts = {a.text for a in axioms}
        out = AxiomRulings(judge=self.name)
        for p in proposals:
            broken = [f"{a!r}: it says {w!r}" for w, a in self.forbidden.items() if w in p.text.lower() and a in texts]
            if broken:
                out.violations[p.proposal_id] = broken
        return out


def test_axioms_are_judged_or_listed_as_unchecked(story: StoryService) -> None:
    campaign_id, scene_id, goblin, turn_id = table(story)
    silent = claim(story, scene_id, goblin, turn_id, "casts", "a silent spell")
    report = story.end_scene(scene_id)
    assert report.unchecked_axioms == ["Magic needs a spoken word."]  # no judge: the gate says so
    assert report.decisions[0].status is ProposalStatus.ACCEPTED

    story.axiom_judge = KeywordJudge({"silent": "Magic needs a spoken word."})
    (later,) = play(story, campaign_id, "The shaman gestures")
    scene_id = story.start_scene(campaign_id, title="Magic").id
    silent = claim(story, scene_id, goblin, later, "casts", "another silent spell")
    spoken = claim(story, scene_id, goblin, later, "casts", "a shouted curse")
    gm = claim(story, scene_id, goblin, later, "knows", "a silent ward", authority="gm")
    report = story.end_scene(scene_id)
    decisions = {d.proposal_id: d for d in report.decisions}
    assert report.unchecked_axioms == []
    assert decisions[silent].status is ProposalStatus.REJECTED
    assert "breaks the world's axioms: 'Magic needs a spoken word.'" in decisions[silent].rationale
    assert decisions[spoken].status is ProposalStatus.ACCEPTED
    assert decisions[gm].status is ProposalStatus.ACCEPTED and "against the world's axioms" in decisions[gm].rationale


@pytest.fixture
def other_story(tmp_path: Path) -> Iterator[StoryService]:
    with _stores(tmp_path / "other") as service:
        yield service


def test_a_bundle_carries_house_rules_and_what_canon_was_held_against(
    story: StoryService, other_story: StoryService
) -> None:
    rulebook(story, "Basic Rules")
    campaign_id, scene_id, goblin, turn_id = table(story)
    claim(story, scene_id, goblin, turn_id, "hit_points", 12, authority="gm")
    claim(story, scene_id, goblin, turn_id, "speed", "30 feet")
    story.end_scene(scene_id)
    buffer = io.BytesIO()
    story.export_campaign(campaign_id, buffer)  # the library's source facts stay behind …

    other_story.import_campaign(buffer.getvalue())  # … and the bundle imports where they are not
    assert other_story.house_rules(campaign_id) == story.house_rules(campaign_id) != []
    (speed,) = [f for f in other_story.state(campaign_id).facts if f.predicate == "speed"]
    ids = other_story.graph.run("MATCH (f:Fact {uid: $f}) RETURN f.source_fact_ids AS ids", {"f": speed.id})
    assert len(ids[0]["ids"]) == 1
