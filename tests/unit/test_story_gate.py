"""The scene-end canonization gate on the embedded stores: policy, validation, contradictions,
provenance in the graph, retcons, idempotency and concurrency."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from schemas.errors import Conflict, InvalidRequest, NotFound
from schemas.story import DiceRoll, ProposalStatus, Resolution
from story.graph import Writes
from story.policy import ContradictionPolicy, GatePolicy
from story.service import StoryService
from tests.unit.test_gate_provenance import write_book
from tests.unit.test_story_campaign import gm_entity, new_campaign, play

pytestmark = pytest.mark.servers

ROLL = Resolution(method="dice", outcome="success", roll=DiceRoll(expression="1d20+2", rolls=[15], total=17, target=12))


def _setup(story: StoryService) -> tuple[str, str, dict[str, str], str]:
    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "We meet")
    scene = story.start_scene(campaign.id, title="Meeting")
    ids = {
        "ayla": gm_entity(story, scene.id, "character", "Ayla"),
        "orc": gm_entity(story, scene.id, "character", "Grusk"),
        "inn": gm_entity(story, scene.id, "location", "Inn"),
    }
    story.end_scene(scene.id)
    scene = story.start_scene(campaign.id, title="Haggling")
    return campaign.id, scene.id, ids, turn_id


def test_the_gate_judges_each_proposal_by_its_authority(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    _, (chunk, _) = write_book(story.graph, "Rangers")  # a source cites a passage that exists
    fact = {"subject_entity_id": ids["ayla"], "predicate": "title"}
    made = {
        "source": story.propose(
            scene_id,
            type="fact",
            content={**fact, "value": "Ranger"},
            authority="source",
            confidence=1.0,
            evidence={"chunk_ids": [chunk]},
        ),
        "gm": story.propose(
            scene_id,
            type="fact",
            content={"subject_entity_id": ids["orc"], "predicate": "title", "value": "Chief"},
            authority="gm",
            confidence=0.4,
        ),
        "player_no_roll": story.propose(
            scene_id,
            type="relationship",
            authority="player",
            confidence=0.9,
            content={"source_entity_id": ids["ayla"], "target_entity_id": ids["orc"], "kind": "intimidates"},
            evidence={"turn_ids": [turn_id]},
        ),
        "player_roll": story.propose(
            scene_id,
            type="relationship",
            authority="player",
            confidence=0.9,
            content={"source_entity_id": ids["ayla"], "target_entity_id": ids["orc"], "kind": "befriends"},
            evidence={"turn_ids": [turn_id]},
            resolution=ROLL,
        ),
        "system_low": story.propose(
            scene_id,
            type="event",
            authority="system",
            confidence=0.3,
            content={"title": "A storm starts"},
            evidence={"turn_ids": [turn_id]},
        ),
        "system_high": story.propose(
            scene_id,
            type="event",
            authority="system",
            confidence=0.95,
            content={"title": "The fire crackles"},
            evidence={"turn_ids": [turn_id]},
        ),
        "system_reviewed": story.propose(
            scene_id,
            type="event",
            authority="system",
            confidence=0.3,
            content={"title": "A cat appears"},
            evidence={"turn_ids": [turn_id]},
        ),
    }
    story.review(made["system_reviewed"].id, "gm-anna")
    play(story, campaign_id, "We haggle")  # a summary is kept on the scene's turns
    report = story.end_scene(scene_id, summary="They haggle.")
    status = {name: next(d for d in report.decisions if d.proposal_id == p.id).status for name, p in made.items()}
    assert status == {
        "source": ProposalStatus.ACCEPTED,
        "gm": ProposalStatus.ACCEPTED,
        "player_no_roll": ProposalStatus.REJECTED,
        "player_roll": ProposalStatus.ACCEPTED,
        "system_low": ProposalStatus.PENDING,  # waits for the GM's review, after the end too
        "system_high": ProposalStatus.ACCEPTED,
        "system_reviewed": ProposalStatus.ACCEPTED,
    }
    assert report.awaiting_review == [made["system_low"].id]
    assert [p.id for p in story.proposals(scene_id, ProposalStatus.PENDING)] == [made["system_low"].id]
    rejected = story.proposals(scene_id, ProposalStatus.REJECTED)
    assert {p.id for p in rejected} == {made["player_no_roll"].id}
    for proposal in rejected:
        assert proposal.rationale and proposal.decided_at is not None  # rejected ones keep their rationale
    scene = story.get_scene(scene_id)
    assert scene.status.value == "completed" and scene.summary == "They haggle."
    # the outcomes are the accepted proposals in words, and only those
    assert sorted(scene.canonical_outcomes) == sorted(
        [
            "Ayla title Ranger",  # entities by their names, not their ids
            "Grusk title Chief",
            "Ayla befriends Grusk",
            "The fire crackles",
            "A cat appears",
        ]
    )


def test_canon_carries_provenance_in_the_graph(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    proposal = story.propose(
        scene_id,
        type="relationship",
        authority="player",
        confidence=0.8,
        resolution=ROLL,
        content={"source_entity_id": ids["ayla"], "target_entity_id": ids["orc"], "kind": "ally_of"},
        evidence={"turn_ids": [turn_id]},
    )
    story.end_scene(scene_id)
    rows = story.graph.run(
        "MATCH (r:Relationship)-[:ESTABLISHED_BY]->(e:StateEvent)-[:FROM_PROPOSAL]->(p:ProposedChange {uid: $p}) "
        "RETURN r.authority AS authority, r.confidence AS confidence, r.canon_level AS level, e.uid AS event",
        {"p": proposal.id},
    )
    assert [{k: v for k, v in r.items() if k != "event"} for r in rows] == [
        {"authority": "player", "confidence": 0.8, "level": "canon"}
    ]
    committed = story.graph.run(
        "MATCH (e:StateEvent {uid: $e})-[:COMMITTED_IN]->(c:Commit) RETURN count(c) AS n", {"e": rows[0]["event"]}
    )
    assert committed == [{"n": 1}]  # the event it names is a committed state event
    supports = story.graph.run(
        "MATCH (r:Relationship)-[:SUPPORTED_BY]->(x) RETURN labels(x)[0] AS label, x.uid AS uid ORDER BY label"
    )
    assert [s["label"] for s in supports] == ["Resolution", "Scene", "Turn"]
    assert {s["uid"] for s in supports} >= {scene_id, turn_id}


def test_validation_happens_before_anything_commits(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    before = story.state(campaign_id)
    bad = story.propose(
        scene_id,
        type="state_change",
        authority="gm",
        confidence=1.0,
        content={
            "events": [
                {"kind": "current_location_set", "entity_id": ids["ayla"], "location_entity_id": ids["inn"]},
                {"kind": "relationship_ended", "relationship_id": "rel_never"},
            ]
        },
    )
    good = story.propose(
        scene_id,
        type="state_change",
        authority="gm",
        confidence=1.0,
        content={
            "events": [
                {"kind": "set_entity_status", "entity_id": ids["orc"], "status": "dead"},
            ]
        },
    )
    dead_walks = story.propose(
        scene_id,
        type="state_change",
        authority="gm",
        confidence=1.0,
        content={
            "events": [
                {"kind": "current_location_set", "entity_id": ids["orc"], "location_entity_id": ids["inn"]},
            ]
        },
    )
    report = story.end_scene(scene_id)
    by_id = {d.proposal_id: d for d in report.decisions}
    assert by_id[bad.id].status is ProposalStatus.REJECTED and "relationship_not_active" in by_id[bad.id].rationale
    assert by_id[good.id].status is ProposalStatus.ACCEPTED
    assert by_id[dead_walks.id].status is ProposalStatus.REJECTED and "inert_actor" in by_id[dead_walks.id].rationale
    after = story.state(campaign_id)
    assert ids["ayla"] not in after.locations  # the bad proposal's first, valid event did not slip in
    assert after.event_count == before.event_count + 2  # the good proposal's event, and the scene's end


def test_malformed_proposals_are_refused_at_the_door(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    with pytest.raises(InvalidRequest, match="malformed proposal"):
        story.propose(
            scene_id,
            type="fact",
            content={"subject_entity_id": ids["ayla"], "predicate": "hp", "value": "+2"},
            authority="gm",
            confidence=1.0,
        )
    with pytest.raises(InvalidRequest, match="malformed proposal"):
        story.propose(
            scene_id, type="state_change", content={"events": [{"kind": "teleport"}]}, authority="gm", confidence=1.0
        )
    with pytest.raises(NotFound, match="turn_missing"):
        story.propose(
            scene_id,
            type="event",
            content={"title": "x"},
            authority="system",
            confidence=1.0,
            evidence={"turn_ids": ["turn_missing"]},
        )
    with pytest.raises(NotFound):
        story.propose("scene_missing", type="event", content={"title": "x"}, authority="gm", confidence=1.0)
    assert story.proposals(scene_id) == []


def test_contradicting_higher_authority_is_rejected_or_disputed(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    _, (chunk, _) = write_book(story.graph, "Bestiary")
    story.propose(
        scene_id,
        type="fact",
        content={"subject_entity_id": ids["orc"], "predicate": "species", "value": "orc"},
        authority="source",
        confidence=1.0,
        evidence={"chunk_ids": [chunk]},
    )
    story.end_scene(scene_id)
    scene = story.start_scene(campaign_id)
    claim = story.propose(
        scene.id,
        type="fact",
        content={"subject_entity_id": ids["orc"], "predicate": "species", "value": "elf"},
        authority="gm",
        confidence=1.0,
    )
    (decision,) = story.end_scene(scene.id).decisions
    # the GM's word is final: against the campaign's source canon it is a house rule (it was refused before)
    assert decision.proposal_id == claim.id and decision.status is ProposalStatus.ACCEPTED, decision.rationale
    assert decision.house_rule and "of source authority, kept as a house rule" in decision.rationale

    def player_says(value: str) -> str:
        scene = story.start_scene(campaign_id)
        story.propose(
            scene.id,
            type="fact",
            content={"subject_entity_id": ids["orc"], "predicate": "species", "value": value},
            authority="player",
            confidence=1.0,
            resolution=ROLL,
            evidence={"turn_ids": [turn_id]},
        )
        return scene.id

    (decision,) = story.end_scene(player_says("troll")).decisions
    assert decision.status is ProposalStatus.REJECTED and "outranks" in decision.rationale

    story.policy = GatePolicy(contradiction=ContradictionPolicy.DISPUTE)
    scene = story.get_scene(player_says("troll"))
    (decision,) = story.end_scene(scene.id).decisions
    assert decision.status is ProposalStatus.ACCEPTED and "disputes" in decision.rationale
    facts = [f for f in story.state(campaign_id).facts if f.predicate == "species"]
    assert sorted(f.status.value for f in facts) == ["disputed", "disputed", "superseded"]


def test_mid_scene_commit_of_given_proposals(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    first = story.propose(scene_id, type="event", content={"title": "Doors burst open"}, authority="gm", confidence=1)
    second = story.propose(scene_id, type="event", content={"title": "Guards enter"}, authority="gm", confidence=1)
    report = story.commit(scene_id, [first.id])
    assert [d.proposal_id for d in report.decisions] == [first.id]
    assert story.get_proposal(second.id).status is ProposalStatus.PENDING
    assert story.commit(scene_id, [first.id]).skipped == [first.id]  # already decided: nothing again
    with pytest.raises(NotFound):
        story.commit(scene_id, ["prop_missing"])
    report = story.end_scene(scene_id)
    assert [d.proposal_id for d in report.decisions] == [second.id]
    assert [h["title"] for h in story.happenings(campaign_id)] == ["Doors burst open", "Guards enter"]


def test_ending_a_scene_again_changes_nothing(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    story.propose(scene_id, type="event", content={"title": "A toast"}, authority="gm", confidence=1)
    first = story.end_scene(scene_id)
    version = story.story.context(campaign_id).version
    state = story.state(campaign_id).state_hash
    again = story.end_scene(scene_id)
    assert again.already_completed and again.decisions == [] and first.events_committed == 1
    assert story.story.context(campaign_id).version == version
    assert story.state(campaign_id).state_hash == state
    with pytest.raises(InvalidRequest):
        story.propose(scene_id, type="event", content={"title": "late"}, authority="gm", confidence=1)


def test_a_commit_behind_the_tip_forks(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    story.end_scene(scene_id)
    play(story, campaign_id, "later")
    main_tip = story.get_campaign(campaign_id).head_turn_id
    story.undo(campaign_id)
    scene = story.start_scene(campaign_id, title="a different evening")  # a write below the tip: forks
    story.propose(scene.id, type="event", content={"title": "Only on the fork"}, authority="gm", confidence=1)
    report = story.end_scene(scene.id)
    assert report.branch_id == story.get_campaign(campaign_id).active_branch_id
    assert [h["title"] for h in story.happenings(campaign_id)] == ["Only on the fork"]
    assert story.state(campaign_id, turn_id=main_tip).event_count < story.state(campaign_id).event_count
    main = next(b for b in story.branches(campaign_id) if b.name == "main")
    story.switch_branch(campaign_id, main.id)
    assert story.happenings(campaign_id) == []  # the original future never saw it


def test_retcon_supersedes_keeps_both_and_lists_dependents(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    base = story.propose(
        scene_id,
        type="fact",
        authority="gm",
        confidence=1.0,
        content={"subject_entity_id": ids["orc"], "predicate": "home", "object_entity_id": ids["inn"]},
    )
    story.end_scene(scene_id)
    home_id = next(f.id for f in story.state(campaign_id).facts if f.predicate == "home")
    scene = story.start_scene(campaign_id)
    story.propose(
        scene.id,
        type="fact",
        authority="gm",
        confidence=1.0,
        content={
            "subject_entity_id": ids["orc"],
            "predicate": "drinks_at",
            "object_entity_id": ids["inn"],
            "depends_on": [home_id],
        },
    )
    story.end_scene(scene.id)
    dependent = next(f.id for f in story.state(campaign_id).facts if f.predicate == "drinks_at")
    assert story.dependents(campaign_id, home_id) == [dependent]
    t_before = story.get_campaign(campaign_id).head_turn_id
    play(story, campaign_id, "a season passes")  # the retcon happens at a later turn

    new_fact = story.retcon(campaign_id, home_id, reason="He never lived there", value="the northern wastes")
    facts = {f.id: f for f in story.state(campaign_id).facts}
    assert facts[home_id].canon_level.value == "retconned" and facts[home_id].status.value == "superseded"
    assert facts[new_fact].replaces == home_id and facts[new_fact].status.value == "active"
    assert (
        story.graph.run(
            "MATCH (n:Fact {uid: $n})-[:REPLACES]->(o:Fact {uid: $o}) RETURN count(*) AS n",
            {"n": new_fact, "o": home_id},
        )[0]["n"]
        == 1
    )
    assert any(c.kind.value == "before_ooc_mutation" for c in story.checkpoints(campaign_id))
    # the proposal that made the old fact canon is still there, still accepted and still linked to it
    assert story.get_proposal(base.id).status is ProposalStatus.ACCEPTED
    assert story.graph.run(
        "MATCH (f:Fact {uid: $f})-[:ESTABLISHED_BY]->(:StateEvent)-[:FROM_PROPOSAL]->(p:ProposedChange {uid: $p}) "
        "RETURN count(*) AS n",
        {"f": home_id, "p": base.id},
    ) == [{"n": 1}]
    # scoped to its branch: a branch from before the retcon still has the old fact
    story.create_branch(campaign_id, t_before, name="old canon")
    play(story, campaign_id, "elsewhere")
    assert {f.id: f for f in story.state(campaign_id).facts}[home_id].canon_level.value == "canon"
    with pytest.raises(NotFound):
        story.retcon(campaign_id, "fact_missing", reason="?")


def test_racing_writers_never_lose_an_update(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    story.end_scene(scene_id)
    # separate service objects: no shared in-process lock, so only the graph's commit token guards them
    services = [StoryService(story.graph, story.blobs) for _ in range(8)]
    errors: list[BaseException] = []
    lock = threading.Lock()
    written: list[str] = []  # texts of the turns add_turn returned from, under the lock

    def writer(n: int) -> None:
        service = services[n % len(services)]
        try:
            for i in range(5):
                text = f"writer {n} turn {i}"
                service.add_turn(campaign_id, text, narration="ok")
                with lock:
                    written.append(text)
        except BaseException as exc:  # pragma: no cover - reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(written) == 80
    history = story.history(campaign_id)
    # every acknowledged turn is on the one line (none lost), once (none doubled), each below the last
    assert Counter(t.text for t in history[1:]) == Counter(written)
    assert [t.depth for t in history] == list(range(81))
    assert len(story.branches(campaign_id)) == 1


def test_racing_scene_ends_commit_once(story: StoryService) -> None:
    campaign_id, scene_id, ids, turn_id = _setup(story)
    for i in range(10):
        story.propose(scene_id, type="event", content={"title": f"event {i}"}, authority="gm", confidence=1)
    services = [StoryService(story.graph, story.blobs) for _ in range(6)]
    reports = []
    lock = threading.Lock()

    def end(service: StoryService) -> None:
        report = service.end_scene(scene_id)
        with lock:
            reports.append(report)

    threads = [threading.Thread(target=end, args=(s,)) for s in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.already_completed for r in reports) == [False] + [True] * 5
    assert len(story.happenings(campaign_id)) == 10


def test_an_archived_campaign_is_read_only(story: StoryService) -> None:
    campaign = new_campaign(story)
    play(story, campaign.id, "one")
    story.archive_campaign(campaign.id)
    with pytest.raises(InvalidRequest, match="archived"):
        play(story, campaign.id, "two")
    assert len(story.history(campaign.id)) == 1
    story.archive_campaign(campaign.id, archived=False)
    play(story, campaign.id, "two")


def test_a_real_uniqueness_violation_is_not_retried_forever(story: StoryService) -> None:
    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "one")

    def collide(ctx: object, writes: Writes) -> tuple[None, dict[str, object]]:
        writes.add("CREATE (t:Turn {uid: $t})", t=turn_id)  # collides whatever the version
        return None, {}

    with pytest.raises(Conflict):
        story._mutate(campaign.id, "test", collide)  # type: ignore[arg-type]
    assert story.story.context(campaign.id).version == 1
