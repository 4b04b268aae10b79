"""The pure parts of the story engine: lineage, the event fold, the semantic rules and the gate policy."""

from __future__ import annotations

import pytest

from schemas.common import Authority
from schemas.events import (
    CurrentLocationSet,
    EntityAttributeSet,
    EntityCreated,
    EntityStatusSet,
    FactAdded,
    FactInvalidated,
    PossessionSet,
    RelationshipAdded,
    RelationshipEnded,
    ThreadOpened,
    ThreadResolved,
)
from schemas.story import DiceRoll, ProposedChange, Resolution
from story.lineage import BranchLine, lineage_of
from story.policy import PERMISSIVE, STRICT, ContradictionPolicy, GatePolicy, authority_verdict, resolve_contradictions
from story.rules import Rule, check_events
from story.state import WorldState

pytestmark = pytest.mark.unit


def world(*events: object) -> WorldState:
    state = WorldState()
    checked = check_events(state, list(events))  # type: ignore[arg-type]
    assert not checked.issues, checked.issues
    return checked.state


def codes(state: WorldState, *events: object) -> list[str]:
    return [i.code for i in check_events(state, list(events)).issues]  # type: ignore[arg-type]


HERO = EntityCreated(entity_id="hero", entity_kind="character", name="Ayla")
GHOUL = EntityCreated(entity_id="ghoul", entity_kind="creature", name="Ghoul")
INN = EntityCreated(entity_id="inn", entity_kind="location", name="The Inn")
CRYPT = EntityCreated(entity_id="crypt", entity_kind="location", name="The Crypt")
SWORD = EntityCreated(entity_id="sword", entity_kind="item", name="Sword")


class TestLineage:
    lines = {
        "main": BranchLine("main", None, None, -1),
        "alt": BranchLine("alt", "main", "t3", 3, fork_seq=10),
        "alt2": BranchLine("alt2", "alt", "t5", 5, fork_seq=20),
    }

    def test_segments_run_from_the_position_to_the_root(self) -> None:
        lineage = lineage_of(self.lines, "alt2", 9)
        assert [(s.branch_id, s.max_depth) for s in lineage.segments] == [("alt2", 9), ("alt", 5), ("main", 3)]
        assert lineage.contains("main", 2) and lineage.contains("alt", 5) and not lineage.contains("main", 4)

    def test_a_position_before_the_fork_sees_only_the_shared_past(self) -> None:
        lineage = lineage_of(self.lines, "alt", 2)
        assert lineage.contains("main", 2) and not lineage.contains("main", 3)

    def test_canon_committed_on_the_parent_at_the_fork_after_forking_is_not_the_childs(self) -> None:
        lineage = lineage_of(self.lines, "alt", 7)
        assert lineage.contains("main", 3, seq=10)
        assert not lineage.contains("main", 3, seq=11)
        # below the fork depth too: a commit anchors a proposal at the turn it names, behind the head
        assert lineage.contains("main", 2, seq=10) and not lineage.contains("main", 2, seq=999)
        assert lineage.contains("main", 2)  # a record without a sequence number (a memory): by depth alone

    def test_branch_at_depth(self) -> None:
        lineage = lineage_of(self.lines, "alt2", 9)
        assert [lineage.branch_at(d, self.lines) for d in (0, 3, 4, 5, 6, 9, 10)] == [
            "main",
            "main",
            "alt",
            "alt",
            "alt2",
            "alt2",
            None,
        ]


class TestFold:
    def test_state_hash_ignores_how_many_events_it_took(self) -> None:
        a = world(HERO, EntityAttributeSet(entity_id="hero", attribute="hp", value=10))
        b = world(
            HERO,
            EntityAttributeSet(entity_id="hero", attribute="hp", value=3),
            EntityAttributeSet(entity_id="hero", attribute="hp", op="increment", amount=7),
        )
        assert a.state_hash == b.state_hash and a.event_count != b.event_count

    def test_json_round_trip(self) -> None:
        state = world(HERO, INN, CurrentLocationSet(entity_id="hero", location_entity_id="inn"))
        again = WorldState.from_json(state.to_json())
        assert again.to_json() == state.to_json() and again.state_hash == state.state_hash

    def test_a_copy_never_changes_the_original(self) -> None:
        base = world(HERO, INN)
        copy = base.copy()
        copy.apply(CurrentLocationSet(entity_id="hero", location_entity_id="inn").model_dump(mode="json"))
        copy.apply(EntityAttributeSet(entity_id="hero", attribute="hp", value=1).model_dump(mode="json"))
        assert base.entities["hero"]["location_id"] is None and base.entities["hero"]["attributes"] == {}
        assert copy.entities["hero"]["location_id"] == "inn"

    def test_replacing_a_fact_supersedes_it(self) -> None:
        old = FactAdded(fact_id="f1", subject_entity_id="hero", predicate="age", value=30, authority="gm")
        new = FactAdded(
            fact_id="f2", subject_entity_id="hero", predicate="age", value=31, authority="gm", replaces="f1"
        )
        state = world(HERO, old, new)
        assert state.facts["f1"]["status"] == "superseded" and state.facts["f1"]["superseded_by"] == "f2"


class TestRules:
    def test_referenced_entities_must_exist_at_that_point(self) -> None:
        assert codes(WorldState(), CurrentLocationSet(entity_id="hero", location_entity_id="inn")) == [
            Rule.UNKNOWN_ENTITY,
            Rule.UNKNOWN_ENTITY,
        ]
        # created earlier in the same batch is fine
        assert codes(WorldState(), HERO, INN, CurrentLocationSet(entity_id="hero", location_entity_id="inn")) == []

    def test_an_item_has_one_holder_at_a_time(self) -> None:
        state = world(HERO, GHOUL, SWORD)
        assert codes(
            state,
            PossessionSet(turn_id="t1", item_entity_id="sword", holder_entity_id="hero"),
            PossessionSet(turn_id="t1", item_entity_id="sword", holder_entity_id="ghoul"),
        ) == [Rule.ONE_HOLDER]
        # later turns may hand it over
        assert (
            codes(
                state,
                PossessionSet(turn_id="t1", item_entity_id="sword", holder_entity_id="hero"),
                PossessionSet(turn_id="t2", item_entity_id="sword", holder_entity_id="ghoul"),
            )
            == []
        )

    def test_a_character_is_in_one_place(self) -> None:
        state = world(HERO, INN, CRYPT)
        assert codes(
            state,
            CurrentLocationSet(turn_id="t1", entity_id="hero", location_entity_id="inn"),
            CurrentLocationSet(turn_id="t1", entity_id="hero", location_entity_id="crypt"),
        ) == [Rule.ONE_PLACE]
        # two moves at different turns are a journey, not a contradiction
        assert (
            codes(
                state,
                CurrentLocationSet(turn_id="t1", entity_id="hero", location_entity_id="inn"),
                CurrentLocationSet(turn_id="t2", entity_id="hero", location_entity_id="crypt"),
            )
            == []
        )

    def test_only_places_contain(self) -> None:
        state = world(HERO, SWORD)
        assert codes(state, CurrentLocationSet(entity_id="hero", location_entity_id="sword")) == [Rule.NOT_A_PLACE]

    def test_containment_cannot_cycle(self) -> None:
        bag = EntityCreated(entity_id="bag", entity_kind="item", name="Bag")
        state = world(SWORD, bag, PossessionSet(item_entity_id="bag", holder_entity_id="sword"))
        assert codes(state, PossessionSet(item_entity_id="sword", holder_entity_id="bag")) == [Rule.CONTAINMENT_CYCLE]

    def test_the_dead_do_not_act_unless_brought_back(self) -> None:
        state = world(HERO, INN, SWORD, EntityStatusSet(entity_id="hero", status="dead"))
        assert codes(state, CurrentLocationSet(entity_id="hero", location_entity_id="inn")) == [Rule.INERT_ACTOR]
        assert codes(state, PossessionSet(item_entity_id="sword", holder_entity_id="hero")) == [Rule.INERT_ACTOR]
        assert (
            codes(
                state,
                EntityStatusSet(entity_id="hero", status="active", reason="resurrected"),
                CurrentLocationSet(entity_id="hero", location_entity_id="inn"),
            )
            == []
        )

    def test_a_relationship_ends_only_if_it_exists(self) -> None:
        state = world(HERO, GHOUL)
        assert codes(state, RelationshipEnded(relationship_id="r1")) == [Rule.RELATIONSHIP_NOT_ACTIVE]
        assert codes(
            state,
            RelationshipAdded(
                relationship_id="r1", source_entity_id="hero", target_entity_id="ghoul", relationship_kind="enemy_of"
            ),
            RelationshipEnded(relationship_id="r1"),
            RelationshipEnded(relationship_id="r1"),
        ) == [Rule.RELATIONSHIP_NOT_ACTIVE]

    def test_threads_facts_and_increments(self) -> None:
        state = world(HERO, EntityAttributeSet(entity_id="hero", attribute="mood", value="calm"))
        assert codes(state, ThreadResolved(thread_id="q", resolution="done")) == [Rule.UNKNOWN_THREAD]
        assert codes(
            state,
            ThreadOpened(thread_id="q", title="The lost ring"),
            ThreadResolved(thread_id="q", resolution="found"),
            ThreadResolved(thread_id="q", resolution="again"),
        ) == [Rule.THREAD_NOT_OPEN]
        assert codes(state, FactInvalidated(fact_id="nope", reason="x")) == [Rule.UNKNOWN_FACT]
        assert codes(state, EntityAttributeSet(entity_id="hero", attribute="mood", op="increment", amount=1)) == [
            Rule.NOT_NUMERIC
        ]

    def test_an_issue_names_its_rule_and_event(self) -> None:
        event = CurrentLocationSet(entity_id="hero", location_entity_id="inn")
        issue = check_events(WorldState(), [event]).issues[0]
        assert issue.event_index == 0 and issue.event_id == event.event_id
        assert "current_location_set" in issue.message and event.event_id in issue.message


def _proposal(authority: str, **extra: object) -> ProposedChange:
    evidence = {"chunk_ids": ["chunk_1"]} if authority == "source" else {"turn_ids": ["turn_1"]}
    return ProposedChange.model_validate(
        {
            "scene_id": "scene_1",
            "type": "fact",
            "content": {"subject_entity_id": "hero", "predicate": "age", "value": 31},
            "authority": authority,
            "confidence": extra.pop("confidence", 1.0),
            "evidence": evidence,
            **extra,
        }
    )


ROLL_OK = Resolution(method="dice", outcome="success", roll=DiceRoll(expression="1d20", rolls=[17], total=17))
ROLL_PARTIAL = Resolution(method="dice", outcome="partial", roll=DiceRoll(expression="1d20", rolls=[9], total=9))
ROLL_FAIL = Resolution(method="dice", outcome="failure", roll=DiceRoll(expression="1d20", rolls=[2], total=2))


@pytest.mark.parametrize(
    ("proposal", "policy", "passes"),
    [
        (_proposal("source"), GatePolicy(), True),
        (_proposal("gm"), GatePolicy(), True),
        (_proposal("player"), GatePolicy(), False),  # no resolution record
        (_proposal("player", resolution=ROLL_OK), GatePolicy(), True),
        (_proposal("player", resolution=ROLL_PARTIAL), GatePolicy(), True),
        (_proposal("player", resolution=ROLL_PARTIAL), STRICT, False),
        (_proposal("player", resolution=ROLL_FAIL), GatePolicy(), False),
        (_proposal("system", confidence=0.9), GatePolicy(), True),
        (_proposal("system", confidence=0.6), GatePolicy(), False),
        (_proposal("system", confidence=0.6), PERMISSIVE, True),
        (_proposal("system", confidence=0.6, reviewed_by="gm-anna"), GatePolicy(), True),
        (_proposal("system", confidence=0.9), STRICT, False),
    ],
)
def test_authority_policy_table(proposal: ProposedChange, policy: GatePolicy, passes: bool) -> None:
    verdict = authority_verdict(proposal, policy)
    assert (verdict is None) is passes, verdict


class TestContradictions:
    canon = world(
        HERO, FactAdded(fact_id="f_src", subject_entity_id="hero", predicate="species", value="elf", authority="source")
    )

    def _fact(self, value: str, authority: str = "player") -> list[FactAdded]:
        return [FactAdded(subject_entity_id="hero", predicate="species", value=value, authority=authority)]

    def test_lower_authority_contradicting_canon_is_rejected(self) -> None:
        judged = resolve_contradictions(self._fact("orc"), self.canon, Authority.PLAYER, GatePolicy())
        assert not judged.accepted and "f_src" in judged.rationale and "source" in judged.rationale

    def test_a_gm_contradicting_source_canon_rules_a_house_rule(self) -> None:
        judged = resolve_contradictions(self._fact("orc", "gm"), self.canon, Authority.GM, GatePolicy())
        assert judged.accepted and "house rule" in judged.rationale and judged.events[-1].replaces == "f_src"  # type: ignore[attr-defined]

    def test_or_disputes_it_by_policy(self) -> None:
        policy = GatePolicy(contradiction=ContradictionPolicy.DISPUTE)
        judged = resolve_contradictions(self._fact("orc"), self.canon, Authority.PLAYER, policy)
        assert judged.accepted
        state = self.canon.copy()
        for event in judged.events:
            state.apply(event.model_dump(mode="json"))
        assert sorted(f["status"] for f in state.facts.values()) == ["disputed", "disputed"]

    def test_equal_or_higher_authority_supersedes(self) -> None:
        judged = resolve_contradictions(
            [FactAdded(subject_entity_id="hero", predicate="species", value="half-elf", authority="source")],
            self.canon,
            Authority.SOURCE,
            GatePolicy(),
        )
        assert judged.accepted and judged.events[-1].replaces == "f_src"  # type: ignore[attr-defined]

    def test_restating_canon_is_a_duplicate(self) -> None:
        judged = resolve_contradictions(
            [FactAdded(subject_entity_id="hero", predicate="species", value="elf", authority="source")],
            self.canon,
            Authority.SOURCE,
            GatePolicy(),
        )
        assert not judged.accepted and "already canon" in judged.rationale

    def test_multi_valued_predicates_do_not_contradict(self) -> None:
        state = world(
            HERO,
            GHOUL,
            INN,
            FactAdded(subject_entity_id="hero", predicate="knows", object_entity_id="ghoul", authority="source"),
        )
        judged = resolve_contradictions(
            [FactAdded(subject_entity_id="hero", predicate="knows", object_entity_id="inn", authority="system")],
            state,
            Authority.SYSTEM,
            GatePolicy(),
        )
        assert judged.accepted and len(judged.events) == 1


def test_the_typed_view_is_what_validation_would_build() -> None:
    state = world(
        HERO,
        INN,
        SWORD,
        CurrentLocationSet(entity_id="hero", location_entity_id="inn"),
        PossessionSet(item_entity_id="sword", holder_entity_id="hero"),
        FactAdded(fact_id="f1", subject_entity_id="hero", predicate="age", value=30, authority="gm"),
        ThreadOpened(thread_id="q", title="Quest"),
    )
    view = state.view(world_id="w", campaign_id="c", branch_id="b", turn_id=None)
    again = type(view).model_validate(view.model_dump())  # the constructed view passes validation
    assert again.model_dump() == view.model_dump() and again.holders == {"sword": "hero"}
