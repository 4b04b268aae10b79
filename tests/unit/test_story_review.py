"""Review before canon on the embedded stores: what waits for the GM, the GM's accept, reject and edit, what the
gate makes of each, the dry run of the queue (which writes nothing), reviews after a scene's end, and the
provenance a review leaves on canon and on the turn."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.errors import InvalidRequest, NotFound
from schemas.story import ProposalStatus, ReviewAction
from story.service import StoryService
from tests.unit.store_dump import stores_dump
from tests.unit.test_story_bundle import _stores
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers


def _table(story: StoryService) -> tuple[str, str, str, dict[str, str]]:
    """A campaign with a cast (Ayla, the Inn) and an open scene after a turn the extractor reads."""
    campaign = new_campaign(story)
    play(story, campaign.id, "We arrive")
    cast = story.start_scene(campaign.id, title="Cast")
    ids = {"ayla": gm_entity(story, cast.id, "character", "Ayla"), "inn": gm_entity(story, cast.id, "location", "Inn")}
    story.end_scene(cast.id)
    (turn_id,) = play(story, campaign.id, "A stranger bursts in, soaked")
    scene = story.start_scene(campaign.id, title="The storm")
    return campaign.id, scene.id, turn_id, ids


def _extracted(story: StoryService, scene_id: str, turn_id: str, confidence: float, **content: object) -> str:
    """A proposal as the extractor makes it: system authority, at the turn it read, citing it."""
    body = {"type": "event", **content}
    proposal = story.propose(
        scene_id,
        type=body["type"],
        content=body,
        authority="system",
        confidence=confidence,
        turn_id=turn_id,
        evidence={"turn_ids": [turn_id]},
        proposed_by="extractor",
    )
    return proposal.id


def _dump(story: StoryService) -> dict[str, list[str]]:
    return stores_dump(story.graph, None, story.blobs.root)  # type: ignore[attr-defined]


def test_the_issue_story_edit_the_low_one_into_canon_and_reject_the_high_one(story: StoryService) -> None:
    campaign_id, scene_id, turn_id, ids = _table(story)
    wanted = _extracted(story, scene_id, turn_id, 0.45, title="A stranger arrives")
    unwanted = _extracted(story, scene_id, turn_id, 0.92, title="The roof caves in")

    edited = {"type": "event", "title": "Bren the courier arrives", "participant_entity_ids": [ids["ayla"]]}
    reviewed = story.review(wanted, "gm:anna", action=ReviewAction.EDIT, rationale="He is Bren.", content=edited)
    assert reviewed.review is not None and reviewed.review.reviewer == "gm:anna" and reviewed.reviewed_by == "gm:anna"
    story.review(unwanted, "gm:anna", action=ReviewAction.REJECT, rationale="The inn must stand.")

    report = story.end_scene(scene_id)
    decided = {d.proposal_id: d for d in report.decisions}
    assert decided[wanted].status is ProposalStatus.ACCEPTED and decided[wanted].authority.value == "gm"
    assert "edited on review by gm:anna" in decided[wanted].rationale
    assert decided[unwanted].status is ProposalStatus.REJECTED
    assert decided[unwanted].rationale == "rejected on review by gm:anna: The inn must stand."
    assert report.awaiting_review == []

    titles = {r["title"] for r in story.graph.run("MATCH (h:Happening) RETURN h.title AS title")}
    assert titles == {"Bren the courier arrives"}  # the edit is canon; neither the original nor the rejected one
    (review,) = story.reviews.reviews_of(wanted)
    rows = story.graph.run(
        "MATCH (h:Happening)-[:ESTABLISHED_BY]->(e:StateEvent)-[:FROM_PROPOSAL]->(p:ProposedChange) "
        "MATCH (e)-[:FROM_REVIEW]->(r:ProposalReview)-[:REVIEWS]->(p) "
        "RETURN h.authority AS authority, h.proposal_uid AS proposal, h.review_uid AS review, h.reviewed_by AS by, "
        "e.review_uid AS event_review, p.uid AS p, r.uid AS r"
    )
    assert rows == [
        {
            "authority": "gm",
            "proposal": wanted,
            "review": review.id,
            "by": "gm:anna",
            "event_review": review.id,
            "p": wanted,
            "r": review.id,
        }
    ]
    proposal = story.get_proposal(wanted)  # the proposal keeps what was proposed; its review, the edit
    assert proposal.content.title == "A stranger arrives" and proposal.review is not None  # type: ignore[union-attr]
    assert proposal.review.content is not None and proposal.review.content.title == edited["title"]  # type: ignore[union-attr]
    shown = story.provenance(turn_id).reviews
    assert [(r.proposal_id, r.action, r.rationale) for r in shown] == [
        (wanted, ReviewAction.EDIT, "He is Bren."),
        (unwanted, ReviewAction.REJECT, "The inn must stand."),
    ]
    assert all(r.reviewer == "gm:anna" and r.reviewed_at is not None for r in shown)


def test_a_low_confidence_proposal_waits_for_review_past_the_end_then_a_commit_makes_it_canon(
    story: StoryService,
) -> None:
    campaign_id, scene_id, turn_id, _ = _table(story)
    low = _extracted(story, scene_id, turn_id, 0.45, title="A stranger arrives")
    report = story.end_scene(scene_id)
    (decision,) = report.decisions
    assert decision.status is ProposalStatus.PENDING and "awaiting the GM's review" in decision.rationale
    assert report.awaiting_review == [low]
    assert story.get_proposal(low).status is ProposalStatus.PENDING  # not dropped: still in the queue
    assert story.graph.run("MATCH (h:Happening) RETURN count(h) AS n") == [{"n": 0}]

    with pytest.raises(InvalidRequest, match="reviewed since"):  # unreviewed, a commit after the end changes nothing
        story.commit(scene_id, [low])
    story.review(low, "gm:anna", action=ReviewAction.ACCEPT, rationale="Yes, he came.")
    late = story.commit(scene_id, [low])
    assert [d.status for d in late.decisions] == [ProposalStatus.ACCEPTED]
    assert story.get_proposal(low).status is ProposalStatus.ACCEPTED
    assert [r["t"] for r in story.graph.run("MATCH (h:Happening) RETURN h.title AS t")] == ["A stranger arrives"]
    assert story.active_scene(campaign_id) is None  # the scene stays ended


def test_the_queue_dry_run_says_what_the_gate_would_do_and_writes_nothing(story: StoryService) -> None:
    campaign_id, scene_id, turn_id, ids = _table(story)
    story.commit(
        scene_id,
        [
            story.propose(
                scene_id,
                type="fact",
                authority="gm",
                confidence=1.0,
                content={"subject_entity_id": ids["ayla"], "predicate": "age", "value": 30},
            ).id
        ],
    )
    low = _extracted(story, scene_id, turn_id, 0.45, title="A stranger arrives")
    high = _extracted(story, scene_id, turn_id, 0.92, title="Thunder")
    against = story.propose(  # a system fact against the GM's canon
        scene_id,
        type="fact",
        authority="system",
        confidence=0.95,
        turn_id=turn_id,
        evidence={"turn_ids": [turn_id]},
        content={"subject_entity_id": ids["ayla"], "predicate": "age", "value": 31},
    ).id
    rejected = _extracted(story, scene_id, turn_id, 0.99, title="Lightning")
    story.review(rejected, "gm:anna", action=ReviewAction.REJECT, rationale="Too much.")

    before = _dump(story)
    queue = story.reviews.queue(scene_id, ProposalStatus.PENDING)
    assert _dump(story) == before  # the dry run wrote nothing
    verdict = {p.id: p.verdict for p in queue}
    assert set(verdict) == {low, high, against, rejected}
    assert verdict[low] is not None and verdict[low].awaiting_review
    assert verdict[low].decision.status is ProposalStatus.PENDING and "0.45" in verdict[low].decision.rationale
    assert verdict[low].if_accepted is not None and verdict[low].if_accepted.status is ProposalStatus.ACCEPTED
    assert verdict[high] is not None and verdict[high].decision.status is ProposalStatus.ACCEPTED
    assert verdict[against] is not None and verdict[against].decision.status is ProposalStatus.REJECTED
    assert (
        "contradicts fact" in verdict[against].decision.rationale
        and "gm authority" in verdict[against].decision.rationale
    )
    assert verdict[rejected] is not None and "rejected on review by gm:anna" in verdict[rejected].decision.rationale
    assert all(v is not None and v.decision.event_ids == [] for v in verdict.values())

    report = story.end_scene(scene_id)  # the gate decides what the dry run said
    assert {d.proposal_id: d.status for d in report.decisions} == {p: v.decision.status for p, v in verdict.items()}  # type: ignore[union-attr]


def test_a_review_is_refused_whole_when_it_cannot_stand(story: StoryService) -> None:
    campaign_id, scene_id, turn_id, ids = _table(story)
    low = _extracted(story, scene_id, turn_id, 0.45, title="A stranger arrives")
    before = _dump(story)
    with pytest.raises(NotFound):
        story.review("prop_nope", "gm:anna", action=ReviewAction.ACCEPT, rationale="?")
    with pytest.raises(InvalidRequest, match="malformed review"):  # an edit with no content
        story.review(low, "gm:anna", action=ReviewAction.EDIT, rationale="Hm.")
    with pytest.raises(InvalidRequest, match="malformed review"):  # describes an entity and sets who sees it
        content = {"type": "entity", "entity_id": ids["ayla"], "kind": "character", "name": "Ayla", "visibility": "gm"}
        story.review(low, "gm:anna", action=ReviewAction.EDIT, rationale="Hm.", content=content)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="end_scene"):  # a scene ends by end_scene, not by an edit
        change = {"type": "state_change", "events": [{"kind": "scene_ended", "ended_scene_id": scene_id}]}
        story.review(low, "gm:anna", action=ReviewAction.EDIT, rationale="End it.", content=change)  # type: ignore[arg-type]
    assert _dump(story) == before
    story.end_scene(scene_id)
    high = story.proposals(scene_id, ProposalStatus.PENDING)
    assert [p.id for p in high] == [low]
    story.review(low, "gm:anna", action=ReviewAction.REJECT, rationale="No.")
    story.commit(scene_id, [low])
    before = _dump(story)
    with pytest.raises(InvalidRequest, match="already rejected"):  # decided: its review is history
        story.review(low, "gm:anna", action=ReviewAction.ACCEPT, rationale="Changed my mind.")
    assert _dump(story) == before


@pytest.fixture
def other_story(tmp_path: Path) -> Iterator[StoryService]:
    with _stores(tmp_path / "other") as service:
        yield service


def test_a_campaign_bundle_carries_the_reviews(story: StoryService, other_story: StoryService) -> None:
    campaign_id, scene_id, turn_id, _ = _table(story)
    low = _extracted(story, scene_id, turn_id, 0.45, title="A stranger arrives")
    edited = {"type": "event", "title": "Bren arrives"}
    story.review(low, "gm:anna", action=ReviewAction.EDIT, rationale="He is Bren.", content=edited)  # type: ignore[arg-type]
    waiting = _extracted(story, scene_id, turn_id, 0.3, title="A dog barks")
    story.review(waiting, "gm:anna", action=ReviewAction.REJECT, rationale="No dog.")
    story.end_scene(scene_id)
    buffer = io.BytesIO()
    story.export_campaign(campaign_id, buffer)
    other_story.import_campaign(buffer.getvalue())
    assert other_story.reviews.reviews_of(low) == story.reviews.reviews_of(low)
    assert other_story.provenance(turn_id).reviews == story.provenance(turn_id).reviews
    assert other_story.get_proposal(low).review == story.get_proposal(low).review
    query = "MATCH (h:Happening)-[:ESTABLISHED_BY]->(:StateEvent)-[:FROM_REVIEW]->(r:ProposalReview) RETURN r.uid AS r"
    assert other_story.graph.run(query) == story.graph.run(query) != []


def test_a_review_racing_the_gate_is_judged_with_it_or_not_at_all(story: StoryService) -> None:
    """Another process's GM rejects a proposal while this one's scene end is about to commit: the end's commit
    loses the race to the review (the campaign's version moved), reads again and rejects it; canon never holds
    what the GM rejected, nor is a review left on a proposal the gate decided without it."""
    campaign_id, scene_id, turn_id, _ = _table(story)
    high = _extracted(story, scene_id, turn_id, 0.92, title="The roof caves in")
    elsewhere = StoryService(story.graph, story.blobs)  # another process: no lock shared with this one
    commit, raced = story.story.commit, []

    def racing_commit(ctx, writes, *, kind, **props):  # type: ignore[no-untyped-def]
        if kind == "gate" and not raced:
            raced.append(elsewhere.review(high, "gm:bo", action=ReviewAction.REJECT, rationale="No."))
        return commit(ctx, writes, kind=kind, **props)

    story.story.commit = racing_commit  # type: ignore[method-assign]
    report = story.end_scene(scene_id)
    assert raced and [(d.proposal_id, d.status) for d in report.decisions] == [(high, ProposalStatus.REJECTED)]
    assert story.graph.run("MATCH (h:Happening) RETURN count(h) AS n") == [{"n": 0}]


def test_the_dry_run_asks_the_axiom_judge_when_one_is_bound(story: StoryService) -> None:
    import json

    from narrator.axioms import LLMAxiomJudge
    from narrator.engines import EchoEngine

    campaign_id, scene_id, turn_id, _ = _table(story)
    axiom = story.add_axiom(story.get_campaign(campaign_id).world_id, "The dead do not return.")
    risen = _extracted(story, scene_id, turn_id, 0.92, title="Old Tam rises from his grave")
    verdict = {"proposal_id": risen, "axiom_id": axiom.id, "verdict": "breaks", "reason": "Tam is dead"}
    answer = json.dumps({"verdicts": [verdict]})
    judge = LLMAxiomJudge(EchoEngine("echo-judge", structured_outputs=[answer, answer]), timeout_s=10)
    try:
        story.axiom_judge = judge
        before = _dump(story)
        (queued,) = story.reviews.queue(scene_id, ProposalStatus.PENDING)
        assert _dump(story) == before
        assert queued.verdict is not None and queued.verdict.unchecked_axioms == []
        decision = queued.verdict.decision
        assert decision.status is ProposalStatus.REJECTED
        assert decision.rationale == "it breaks the world's axioms: 'The dead do not return.': Tam is dead"
        (ended,) = story.end_scene(scene_id).decisions
        assert (ended.status, ended.rationale) == (decision.status, decision.rationale)
    finally:
        judge.close()


def test_the_dry_run_holds_proposals_to_the_rulebook_and_a_reviewed_ruling_is_the_reviewers_house_rule(
    story: StoryService,
) -> None:
    from tests.unit.test_source_check import rulebook
    from tests.unit.test_source_check import table as goblin_table

    rulebook(story, "Basic Rules")
    campaign_id, scene_id, goblin, turn_id = goblin_table(story)

    def claimed(hp: int, confidence: float) -> str:
        return story.propose(
            scene_id,
            type="fact",
            content={"subject_entity_id": goblin, "predicate": "hit points", "value": hp},
            authority="system",
            confidence=confidence,
            turn_id=turn_id,
            evidence={"turn_ids": [turn_id]},
            proposed_by="extractor",
        ).id

    sure, unsure = claimed(30, 0.92), claimed(12, 0.45)
    before = _dump(story)
    verdict = {p.id: p.verdict for p in story.reviews.queue(scene_id)}
    assert _dump(story) == before
    assert verdict[sure] is not None and verdict[sure].decision.status is ProposalStatus.REJECTED
    assert "contradicts the rulebook: Goblin — Hit Points 7" in verdict[sure].decision.rationale
    waiting = verdict[unsure]
    assert waiting is not None and waiting.awaiting_review and waiting.if_accepted is not None
    assert waiting.if_accepted.status is ProposalStatus.ACCEPTED and waiting.if_accepted.house_rule  # the GM's word

    story.review(unsure, "gm:anna", action=ReviewAction.ACCEPT, rationale="Our goblins are tougher.")
    decided = {d.proposal_id: d for d in story.end_scene(scene_id).decisions}
    assert decided[unsure].status is ProposalStatus.ACCEPTED and decided[unsure].house_rule
    (rule,) = story.house_rules(campaign_id)
    assert (rule.field, rule.book_value, rule.ruled_value) == ("hit_points", "7", 12)
    assert rule.ruled_by == "gm:anna"  # who ruled is the GM who accepted it, not the extractor that proposed it
