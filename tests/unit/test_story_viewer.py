"""The one secrets rule (story.viewer), on records built in memory: what a seat at the table sees of a state, a
proposal, recalled hits and a scene's outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.canon import Entity, Fact, Relationship, StoryThread, WorldStateView
from schemas.common import Authority, EntityKind
from schemas.narration import Memory, Summary, SummaryScope
from schemas.proposals import ProposalDecision, ProposalReview, ProposalStatus, ProposedChange, ReviewAction
from schemas.recall import RecallHit, RecallKind
from schemas.visibility import Visibility
from story.viewer import TABLE, Viewer, told_to_table

pytestmark = pytest.mark.unit

GM = Visibility(audience="gm")
ADA_ONLY = Visibility(audience="characters", character_ids=["ent_ada"])
ADA = Viewer(character_id="ent_ada")


def _state() -> WorldStateView:
    def entity(eid: str, visibility: Visibility | None = None) -> Entity:
        return Entity(id=eid, world_id="world_1", kind=EntityKind.CHARACTER, name=eid, visibility=visibility)

    def fact(fid: str, subject: str, visibility: Visibility | None = None, obj: str | None = None) -> Fact:
        value = None if obj else fid
        return Fact(
            id=fid,
            subject_entity_id=subject,
            predicate="note",
            object_entity_id=obj,
            value=value,
            authority=Authority.GM,
            visibility=visibility,
        )

    def tie(rid: str, source: str, target: str, visibility: Visibility | None = None) -> Relationship:
        return Relationship(
            id=rid, source_entity_id=source, target_entity_id=target, kind="knows", visibility=visibility
        )

    def thread(tid: str, involved: list[str], visibility: Visibility | None = None) -> StoryThread:
        return StoryThread(id=tid, campaign_id="camp_1", title=tid, involved_entity_ids=involved, visibility=visibility)

    return WorldStateView(
        campaign_id="camp_1",
        branch_id="branch_1",
        turn_id=None,
        entities=[entity("ent_ada"), entity("ent_brand"), entity("ent_lurk", GM)],
        facts=[
            fact("fact_public", "ent_ada"),
            fact("fact_gm", "ent_brand", GM),
            fact("fact_ada", "ent_brand", ADA_ONLY),
            fact("fact_of_lurk", "ent_lurk"),
            fact("fact_at_lurk", "ent_ada", obj="ent_lurk"),
        ],
        relationships=[
            tie("rel_public", "ent_ada", "ent_brand"),
            tie("rel_gm", "ent_ada", "ent_brand", GM),
            tie("rel_ada", "ent_brand", "ent_ada", ADA_ONLY),
            tie("rel_lurk", "ent_lurk", "ent_ada"),
        ],
        threads=[
            thread("thread_public", ["ent_ada", "ent_lurk"]),
            thread("thread_gm", ["ent_ada"], GM),
            thread("thread_ada", ["ent_ada"], ADA_ONLY),
        ],
        locations={"ent_ada": "ent_lurk", "ent_brand": "ent_ada"},
        holders={"ent_lurk": "ent_ada"},
        state_hash="0" * 64,
    )


def test_a_seat_sees_the_state_its_audience_allows_and_nothing_of_a_hidden_entity() -> None:
    state = _state()
    assert Viewer(gm=True).state(state) is state
    for viewer, facts, ties, threads in (
        (ADA, {"fact_public", "fact_ada"}, {"rel_public", "rel_ada"}, {"thread_public", "thread_ada"}),
        (TABLE, {"fact_public"}, {"rel_public"}, {"thread_public"}),
        (Viewer(character_id="ent_brand"), {"fact_public"}, {"rel_public"}, {"thread_public"}),
    ):
        seen = viewer.state(state)
        assert {e.id for e in seen.entities} == {"ent_ada", "ent_brand"}
        assert {f.id for f in seen.facts} == facts, viewer
        assert {r.id for r in seen.relationships} == ties, viewer
        assert {t.id for t in seen.threads} == threads, viewer
        public = next(t for t in seen.threads if t.id == "thread_public")
        assert public.involved_entity_ids == ["ent_ada"]  # its hidden party left out
        assert seen.locations == {"ent_brand": "ent_ada"} and seen.holders == {}


def _proposal(content: dict[str, Any], review: ProposalReview | None = None) -> ProposedChange:
    return ProposedChange(
        id="prop_1",
        scene_id="scene_1",
        type=content["type"],
        content=content,
        authority=Authority.GM,
        confidence=1.0,
        review=review,
    )


def test_a_proposal_is_a_secret_by_its_content_its_events_its_review_or_a_hidden_name() -> None:
    gm = GM.model_dump(mode="json")
    event = {"type": "event", "title": "A noise"}
    thread = {"kind": "thread_opened", "title": "The plot", "visibility": gm}
    secret_thread = {"type": "state_change", "events": [thread]}
    tie = {"type": "relationship", "source_entity_id": "ent_ada", "target_entity_id": "ent_brand", "kind": "knows"}
    edit = ProposalReview(
        proposal_id="prop_1",
        action=ReviewAction.EDIT,
        content={**tie, "visibility": gm},
        rationale="the GM keeps it",
        reviewer="gm:key",
    )
    assert TABLE.sees_proposal(_proposal(event)) and TABLE.sees_proposal(_proposal(tie))
    assert not TABLE.sees_proposal(_proposal(secret_thread))
    assert not TABLE.sees_proposal(_proposal({**tie, "visibility": gm}))
    assert not TABLE.sees_proposal(_proposal(tie, review=edit))
    assert not TABLE.sees_proposal(_proposal(tie), hidden={"ent_brand"})
    assert Viewer(gm=True).sees_proposal(_proposal(secret_thread), hidden={"ent_ada"})
    decisions = [ProposalDecision(proposal_id="prop_1", status=ProposalStatus.ACCEPTED, rationale="ok")]
    told, decided = told_to_table([_proposal({**tie, "visibility": gm})], decisions, {})
    assert told == [] and decided == []
    told, decided = told_to_table([_proposal(tie)], decisions, {"ent_brand": {"visibility": gm}})
    assert told == [] and decided == []  # it names a hidden entity
    told, decided = told_to_table([_proposal(tie)], decisions, {"ent_brand": {}})
    assert [p.id for p in told] == ["prop_1"] and decided == decisions


def test_recalled_hits_are_looked_up_and_fail_closed() -> None:
    def hit(hid: str, kind: RecallKind) -> RecallHit:
        return RecallHit(id=hid, kind=kind, turn_id="turn_1", text=hid, branch_id="branch_1", depth=0, score=1.0)

    memories = [
        Memory(id="mem_ada", campaign_id="camp_1", observer_entity_id="ent_ada", text="mine", anchor_turn_id="turn_1"),
        Memory(id="mem_npc", campaign_id="camp_1", observer_entity_id="ent_npc", text="npc", anchor_turn_id="turn_1"),
    ]
    summaries = [
        Summary(id="sum_gm", campaign_id="camp_1", scope=SummaryScope.SESSION, anchor_turn_id="turn_1", text="x")
    ]
    summaries[0] = summaries[0].model_copy(update={"visibility": GM})
    hits = [
        hit("turn_1", RecallKind.TURN),
        hit("mem_ada", RecallKind.MEMORY),
        hit("mem_npc", RecallKind.MEMORY),
        hit("mem_gone", RecallKind.MEMORY),  # not on the line: left out
        hit("fact_public", RecallKind.FACT),
        hit("fact_gm", RecallKind.FACT),
        hit("scene_1#canon0", RecallKind.FACT),  # a scene's outcome in words: no record to look up
        hit("sum_gm", RecallKind.SUMMARY),
    ]
    seen = ADA.hits(hits, memories=memories, state=_state(), summaries=summaries)
    assert [h.id for h in seen] == ["turn_1", "mem_ada", "fact_public"]
    assert ADA.hits(hits, memories=[], state=None, summaries=[]) == [hits[0]]
    assert Viewer(gm=True).hits(hits, memories=[], state=None, summaries=[]) == hits


def test_a_text_naming_records_is_seen_only_when_every_record_it_names_is() -> None:
    state = _state()
    said = "it contradicts fact fact_gm (note = 'fact_gm') of gm authority, which outranks player"
    assert not ADA.names_only_seen(said, state) and Viewer(gm=True).names_only_seen(said, state)
    assert ADA.names_only_seen("already canon as fact fact_ada", state)
    assert not TABLE.names_only_seen("already canon as fact fact_ada", state)
    assert not ADA.names_only_seen("ent_lurk is at ent_ada", state)  # a hidden entity
    assert not ADA.names_only_seen("fact_elsewhere", state)  # not in the state: fails closed
    assert ADA.names_only_seen("accepted", state) and ADA.names_only_seen(None, state)


def test_a_happening_naming_a_hidden_entity_is_the_gms() -> None:
    from schemas.canon import Happening

    state = _state().model_copy(
        update={
            "happenings": [
                Happening(id="hap_public", title="A storm", participant_entity_ids=["ent_ada"]),
                Happening(id="hap_lurk", title="The lurker strikes", participant_entity_ids=["ent_lurk"]),
                Happening(id="hap_at_lurk", title="A meeting", location_entity_id="ent_lurk"),
            ]
        }
    )
    # before: the state view had no happenings; with them, one naming a hidden entity would reach players
    assert [h.id for h in ADA.state(state).happenings] == ["hap_public"]
    assert [h.id for h in TABLE.state(state).happenings] == ["hap_public"]
    assert len(Viewer(gm=True).state(state).happenings) == 3
