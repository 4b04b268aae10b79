"""The campaign model, told as stories on the embedded stores: the turn tree, the head, branches,
takes, checkpoints, state over time, memories, provenance and presentation."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import InvalidRequest, NotFound
from schemas.media import MediaAsset
from schemas.story import (
    BranchDisposition,
    Campaign,
    Memory,
    NarrationBlock,
    PromptSection,
    PromptSnapshot,
    ProposalStatus,
    RetrievalHit,
    RetrievalRecord,
    SpeakerKind,
    Summary,
    TurnPresentation,
    TurnStatus,
)
from story.service import StoryService
from tests.fixtures.story import FANTASY, SCIFI

pytestmark = pytest.mark.servers


def new_campaign(story: StoryService, profile=FANTASY, name: str = "The Sunken Crown") -> Campaign:
    world = story.create_world("Eldoria", axioms=["Magic needs a spoken word."])
    return story.create_campaign(world.id, name, profile, narrator_rules=["Never speak for the players."])


def play(story: StoryService, campaign_id: str, *texts: str) -> list[str]:
    return [story.add_turn(campaign_id, text, narration=f"(narration of: {text})").id for text in texts]


def texts(story: StoryService, campaign_id: str) -> list[str]:
    return [t.text for t in story.history(campaign_id)]


def gm_entity(story: StoryService, scene_id: str, kind: str, name: str, **attributes: object) -> str:
    proposal = story.propose(
        scene_id,
        type="entity",
        content={"kind": kind, "name": name, "attributes": attributes},
        authority="gm",
        confidence=1.0,
    )
    return f"ent_{proposal.id.split('_', 1)[1]}"


def gm_events(story: StoryService, scene_id: str, *events: dict) -> None:
    story.propose(scene_id, type="state_change", content={"events": list(events)}, authority="gm", confidence=1.0)


# ---------------------------------------------------------------------------------------------------
# the turn tree and the head


def test_close_restart_and_resume_the_exact_story(tmp_path: Path) -> None:
    from stores.blob.local import LocalBlobStore
    from stores.graph.falkordb import EmbeddedFalkorGraphStore

    def open_service() -> tuple[StoryService, EmbeddedFalkorGraphStore]:
        graph = EmbeddedFalkorGraphStore(tmp_path / "graph")
        service = StoryService(graph, LocalBlobStore(tmp_path / "blobs"))
        service.prepare()
        return service, graph

    story, graph = open_service()
    campaign = new_campaign(story)
    play(story, campaign.id, "wake", "walk", "talk")
    story.undo(campaign.id)
    before = (story.get_campaign(campaign.id), texts(story, campaign.id), story.state(campaign.id).state_hash)
    graph.close()  # the embedded server stops; its append-only file holds everything

    story, graph = open_service()
    try:
        after = (story.get_campaign(campaign.id), texts(story, campaign.id), story.state(campaign.id).state_hash)
        assert after[0].head_turn_id == before[0].head_turn_id and after[1:] == before[1:]
        assert after[1] == ["wake", "walk"]
        story.redo(campaign.id)  # the undone turn is still there after the restart
        assert texts(story, campaign.id) == ["wake", "walk", "talk"]
        play(story, campaign.id, "resume")
        assert texts(story, campaign.id)[-1] == "resume"
    finally:
        graph.close()


def test_undo_and_redo_move_the_head_and_delete_nothing(story: StoryService) -> None:
    campaign = new_campaign(story)
    t1, t2, t3 = play(story, campaign.id, "one", "two", "three")
    story.undo(campaign.id)
    story.undo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id == t1
    for turn_id in (t2, t3):
        assert story.get_turn(turn_id).status is TurnStatus.ACCEPTED  # still there
    story.redo(campaign.id)
    story.redo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id == t3
    with pytest.raises(InvalidRequest, match="nothing to redo"):
        story.redo(campaign.id)
    for _ in range(3):
        story.undo(campaign.id)
    assert story.get_campaign(campaign.id).head_turn_id is None and texts(story, campaign.id) == []
    with pytest.raises(InvalidRequest, match="nothing to undo"):
        story.undo(campaign.id)


def test_the_head_sits_behind_the_retained_tip(story: StoryService) -> None:
    campaign = new_campaign(story)
    _, t2, t3 = play(story, campaign.id, "one", "two", "three")
    story.undo(campaign.id)
    campaign = story.get_campaign(campaign.id)
    branch = next(b for b in story.branches(campaign.id) if b.id == campaign.active_branch_id)
    assert campaign.head_turn_id == t2 and branch.tip_turn_id == t3


def test_a_write_below_the_tip_forks_and_keeps_the_old_future(story: StoryService) -> None:
    campaign = new_campaign(story)
    t1, t2, t3 = play(story, campaign.id, "one", "two", "three")
    story.undo(campaign.id)
    story.undo(campaign.id)
    (t2b,) = play(story, campaign.id, "two, differently")
    assert texts(story, campaign.id) == ["one", "two, differently"]
    branches = {b.name: b for b in story.branches(campaign.id)}
    assert branches["main"].disposition is BranchDisposition.RETAINED
    fork = next(b for b in branches.values() if b.name != "main")
    assert fork.disposition is BranchDisposition.ACTIVE and fork.fork_turn_id == t1
    assert story.get_turn(t2b).parent_turn_id == t1  # the shared ancestor is not copied
    story.switch_branch(campaign.id, branches["main"].id)  # the old future is intact
    assert texts(story, campaign.id) == ["one", "two", "three"]
    assert story.get_campaign(campaign.id).head_turn_id == t3


def test_a_branch_from_an_earlier_turn_keeps_the_original_future(story: StoryService) -> None:
    campaign = new_campaign(story)
    t1, _, _ = play(story, campaign.id, "one", "two", "three")
    branch = story.create_branch(campaign.id, t1, name="what if")
    assert story.get_campaign(campaign.id).active_branch_id == branch.id
    play(story, campaign.id, "the road not taken")
    assert texts(story, campaign.id) == ["one", "the road not taken"]
    main = next(b for b in story.branches(campaign.id) if b.name == "main")
    assert texts(story, campaign.id) != [t.text for t in story.history(campaign.id, turn_id=main.tip_turn_id)]
    assert [t.text for t in story.history(campaign.id, turn_id=main.tip_turn_id)] == ["one", "two", "three"]


def test_dispositions_archive_and_delete_are_distinct(story: StoryService) -> None:
    campaign = new_campaign(story)
    t1, _ = play(story, campaign.id, "one", "two")
    story.undo(campaign.id)
    play(story, campaign.id, "two again")  # main is now retained
    main = next(b for b in story.branches(campaign.id) if b.name == "main")
    with pytest.raises(InvalidRequest, match="mark it disposable"):
        story.delete_branch(campaign.id, main.id)
    with pytest.raises(InvalidRequest, match="forked"):  # main holds the shared turn "one"
        story.set_disposition(campaign.id, main.id, BranchDisposition.DISPOSABLE)
        story.delete_branch(campaign.id, main.id)
    active = story.get_campaign(campaign.id).active_branch_id
    with pytest.raises(InvalidRequest, match="being played"):
        story.archive_branch(campaign.id, active)
    story.archive_branch(campaign.id, main.id)
    assert main.id not in {b.id for b in story.branches(campaign.id)}
    assert main.id in {b.id for b in story.branches(campaign.id, include_archived=True)}
    assert story.get_turn(t1)  # archiving deleted nothing

    # an abandoned leaf branch with no canon can be deleted once marked disposable
    story.create_branch(campaign.id, t1, name="scratch")
    scratch = story.get_campaign(campaign.id).active_branch_id
    (scratch_turn,) = play(story, campaign.id, "a doodle")
    story.switch_branch(campaign.id, active)
    story.set_disposition(campaign.id, scratch, BranchDisposition.DISPOSABLE)
    assert story.delete_branch(campaign.id, scratch) == 1
    with pytest.raises(NotFound):
        story.get_turn(scratch_turn)


def test_retry_adds_takes_and_select_picks_one(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn = story.add_turn(campaign.id, "I knock")
    assert story.get_turn(turn.id).status is TurnStatus.PENDING
    first = story.add_take(turn.id, "Nobody answers.")
    second = story.add_take(turn.id, "A voice: 'Who goes there?'")  # retry
    assert story.get_turn(turn.id).narration == second.narration
    story.select_take(turn.id, first.id)
    takes = story.takes(turn.id)
    assert [t.index for t in takes] == [0, 1] and [t.selected for t in takes] == [True, False]
    assert story.get_turn(turn.id).narration == "Nobody answers."
    other = story.add_turn(campaign.id, "I wait", narration="Time passes.")
    with pytest.raises(NotFound) as other_turns:  # another turn's take answers like a missing one
        story.select_take(other.id, first.id)
    with pytest.raises(NotFound) as missing:
        story.select_take(other.id, "take_nope")
    assert other_turns.value.message == missing.value.message.replace("take_nope", first.id)


def test_named_checkpoints_are_created_and_restored(story: StoryService) -> None:
    campaign = new_campaign(story)
    t1, t2 = play(story, campaign.id, "enter the dungeon", "find a door")
    checkpoint = story.create_checkpoint(campaign.id, "before the door")
    play(story, campaign.id, "open the door", "a trap!")
    story.restore_checkpoint(campaign.id, checkpoint.id)
    assert story.get_campaign(campaign.id).head_turn_id == t2
    assert texts(story, campaign.id) == ["enter the dungeon", "find a door"]
    story.redo(campaign.id)  # the future after the checkpoint is still reachable...
    story.restore_checkpoint(campaign.id, checkpoint.id)
    play(story, campaign.id, "leave the door alone")  # ...until a divergent write forks
    assert texts(story, campaign.id) == ["enter the dungeon", "find a door", "leave the door alone"]
    assert len(story.branches(campaign.id)) == 2
    assert [c.name for c in story.checkpoints(campaign.id, automatic=False)] == ["before the door"]
    assert checkpoint.snapshot_id is not None


# ---------------------------------------------------------------------------------------------------
# state over time


def _tavern(story: StoryService) -> tuple[Campaign, dict[str, str], list[str]]:
    campaign = new_campaign(story)
    (t1,) = play(story, campaign.id, "I arrive in town")
    scene = story.start_scene(campaign.id, title="Arrival")
    ids = {
        "ayla": gm_entity(story, scene.id, "character", "Ayla", hp=12),
        "bren": gm_entity(story, scene.id, "character", "Bren"),
        "inn": gm_entity(story, scene.id, "location", "The Gilded Goose"),
        "crypt": gm_entity(story, scene.id, "location", "The Crypt"),
        "ring": gm_entity(story, scene.id, "item", "Silver Ring"),
    }
    story.end_scene(scene.id)
    (t2,) = play(story, campaign.id, "I enter the inn")
    scene = story.start_scene(
        campaign.id, title="The inn", location_entity_id=ids["inn"], participant_entity_ids=[ids["ayla"], ids["bren"]]
    )
    gm_events(
        story,
        scene.id,
        {"kind": "current_location_set", "entity_id": ids["ayla"], "location_entity_id": ids["inn"]},
        {"kind": "possession_set", "item_entity_id": ids["ring"], "holder_entity_id": ids["bren"]},
        {
            "kind": "relationship_added",
            "relationship_id": "rel_friends",
            "source_entity_id": ids["ayla"],
            "target_entity_id": ids["bren"],
            "relationship_kind": "friend_of",
        },
        {
            "kind": "thread_opened",
            "thread_id": "thread_ring",
            "title": "Whose ring is it?",
            "involved_entity_ids": [ids["ring"]],
        },
    )
    story.propose(
        scene.id,
        type="event",
        content={"title": "Bren shows the ring", "participant_entity_ids": [ids["bren"]]},
        authority="gm",
        confidence=1.0,
    )
    story.end_scene(scene.id)
    (t3,) = play(story, campaign.id, "We go to the crypt")
    scene = story.start_scene(campaign.id, title="The crypt")
    gm_events(
        story,
        scene.id,
        {"kind": "current_location_set", "entity_id": ids["ayla"], "location_entity_id": ids["crypt"]},
        {"kind": "possession_set", "item_entity_id": ids["ring"], "holder_entity_id": ids["ayla"]},
        {"kind": "set_entity_attribute", "entity_id": ids["ayla"], "attribute": "hp", "op": "increment", "amount": -5},
        {"kind": "thread_resolved", "thread_id": "thread_ring", "resolution": "It was Ayla's mother's."},
        {"kind": "relationship_ended", "relationship_id": "rel_friends", "reason": "Bren stole it"},
    )
    story.end_scene(scene.id)
    return story.get_campaign(campaign.id), ids, [t1, t2, t3]


def test_current_characters_locations_relationships_and_threads(story: StoryService) -> None:
    campaign, ids, _ = _tavern(story)
    now = story.state(campaign.id)
    names = {e.name: e for e in now.entities}
    assert {"Ayla", "Bren", "The Gilded Goose", "The Crypt", "Silver Ring"} <= set(names)
    assert now.locations[ids["ayla"]] == ids["crypt"] and now.holders[ids["ring"]] == ids["ayla"]
    assert names["Ayla"].attributes["hp"] == 7
    (rel,) = now.relationships
    assert rel.status.value == "ended" and rel.until_turn_id is not None
    (thread,) = now.threads
    assert thread.status.value == "resolved" and thread.resolution == "It was Ayla's mother's."


def test_the_state_at_an_earlier_turn(story: StoryService) -> None:
    campaign, ids, (t1, t2, t3) = _tavern(story)
    at_t2 = story.state(campaign.id, turn_id=t2)
    assert at_t2.locations[ids["ayla"]] == ids["inn"] and at_t2.holders[ids["ring"]] == ids["bren"]
    assert at_t2.relationships[0].status.value == "active" and at_t2.threads[0].status.value == "open"
    assert {e.name for e in story.state(campaign.id, turn_id=t1).entities} >= {"Ayla", "Bren"}
    assert story.state(campaign.id, turn_id=t3).state_hash == story.state(campaign.id).state_hash
    # a new branch from t2 starts from t2's world, and the crypt never happens there
    story.create_branch(campaign.id, t2, name="stay at the inn")
    assert story.state(campaign.id).locations[ids["ayla"]] == ids["inn"]


def test_old_events_are_retrieved_outside_the_recent_window(story: StoryService) -> None:
    campaign, ids, (_, t2, _) = _tavern(story)
    for i in range(6):
        play(story, campaign.id, f"small talk {i}")
    recent = story.history(campaign.id, last=3)
    assert [t.text for t in recent] == ["small talk 3", "small talk 4", "small talk 5"]
    old = story.happenings(campaign.id, about=ids["bren"])
    assert [h["title"] for h in old] == ["Bren shows the ring"] and old[0]["turn_id"] == t2
    assert story.happenings(campaign.id, before_turn=recent[0].id)


def test_a_fantasy_and_a_science_fiction_campaign_share_one_schema(story: StoryService) -> None:
    fantasy = new_campaign(story, FANTASY, "Dragons")
    scifi = new_campaign(story, SCIFI, "Starfall")
    for campaign, (person, place, thing) in (
        (fantasy, ("Sir Aldric", "Castle Dun", "Excalibur")),
        (scifi, ("Captain Vex", "Orbital Dock 9", "Ion Drive")),
    ):
        play(story, campaign.id, "begin")
        scene = story.start_scene(campaign.id)
        p = gm_entity(story, scene.id, "character", person)
        loc = gm_entity(story, scene.id, "vehicle" if campaign is scifi else "location", place)
        item = gm_entity(story, scene.id, "item", thing)
        gm_events(
            story,
            scene.id,
            {"kind": "current_location_set", "entity_id": p, "location_entity_id": loc},
            {"kind": "possession_set", "item_entity_id": item, "holder_entity_id": p},
        )
        report = story.end_scene(scene.id)
        assert len(report.accepted) == 4, report.rejected
    assert story.get_campaign(scifi.id).profile.genre == "science fiction"
    assert {e.name for e in story.state(scifi.id).entities} == {"Captain Vex", "Orbital Dock 9", "Ion Drive"}
    assert {e.name for e in story.state(fantasy.id).entities} == {"Sir Aldric", "Castle Dun", "Excalibur"}


# ---------------------------------------------------------------------------------------------------
# memories, provenance, presentation and media


def test_memories_are_seen_only_on_their_lineage(story: StoryService) -> None:
    campaign, ids, (t1, t2, t3) = _tavern(story)
    story.add_memory(
        Memory(
            campaign_id=campaign.id,
            observer_entity_id=ids["ayla"],
            text="Bren lied to me.",
            anchor_turn_id=t3,
            subject_entity_ids=[ids["bren"]],
        )
    )
    story.add_memory(
        Memory(
            campaign_id=campaign.id,
            observer_entity_id=ids["bren"],
            text="Ayla smiled.",
            kind="emotion",
            anchor_turn_id=t2,
        )
    )
    story.add_summary(Summary(campaign_id=campaign.id, scope="session", anchor_turn_id=t3, text="The ring is found."))
    assert [m.text for m in story.memories(campaign.id)] == ["Ayla smiled.", "Bren lied to me."]
    assert [m.text for m in story.memories(campaign.id, observer_entity_id=ids["ayla"])] == ["Bren lied to me."]
    story.create_branch(campaign.id, t2, name="no crypt")
    assert [m.text for m in story.memories(campaign.id)] == ["Ayla smiled."]  # t3 is not an ancestor here
    assert story.summaries(campaign.id) == []
    with pytest.raises(InvalidRequest, match="observer_entity_id"):
        story.add_memory(Memory(campaign_id=campaign.id, observer_entity_id="ent_nobody", text="?", anchor_turn_id=t1))


def test_what_was_sent_to_the_model_and_which_passages_informed_a_turn(story: StoryService) -> None:
    from schemas.knowledge import Chunk, Item, Library
    from stores.catalog import Catalog

    catalog = Catalog(story.graph)
    library = catalog.save_library(Library(uid="lib_srd", name="SRD", type="rulebook"))
    item = catalog.save_item(
        Item(
            uid="item_srd",
            library_uid=library.uid,
            title="Fate Core SRD",
            file_type="pdf",
            size_bytes=10,
            content_hash="a" * 64,
            source_ref="fate.pdf",
        )
    )
    catalog.save_chunks(
        [
            Chunk(
                uid=f"chunk_{i}",
                item_uid=item.uid,
                sequence=i,
                text_key=f"items/item_srd/chunks/chunk_{i:03d}.txt",
                heading_path=["Aspects", f"Part {i}"],
                page_start=10 + i,
                page_end=10 + i,
                token_count=50,
            )
            for i in range(3)
        ]
    )
    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "How do aspects work?")
    prompt = "RULES...\nAXIOMS...\nKNOWLEDGE: [chunk_2] ...\nINPUT: How do aspects work?"
    story.record_prompt(
        turn_id,
        prompt,
        PromptSnapshot(
            turn_id=turn_id,
            model="tiny-llama",
            sections=[
                PromptSection(kind="narrator_rules", token_count=3, content_hash="b" * 64),
                PromptSection(kind="player_input", token_count=5, content_hash="c" * 64),
            ],
            content_hash="d" * 64,
        ),
    )
    story.record_retrieval(
        RetrievalRecord(
            turn_id=turn_id,
            query="aspects",
            hits=[
                RetrievalHit(chunk_id="chunk_2", rank=1, fused_score=0.9),
                RetrievalHit(chunk_id="chunk_0", rank=2, fused_score=0.5),
                RetrievalHit(chunk_id="chunk_1", rank=3, fused_score=0.1, used_in_prompt=False),
            ],
        )
    )
    why = story.provenance(turn_id)
    assert why.prompt_text == prompt and why.prompt is not None and why.prompt.model == "tiny-llama"
    assert [(p.chunk_id, p.title, p.page_start, p.heading_path[-1]) for p in why.passages] == [
        ("chunk_2", "Fate Core SRD", 12, "Part 2"),
        ("chunk_0", "Fate Core SRD", 10, "Part 0"),
    ]
    assert why.retrievals[0].hits[2].used_in_prompt is False


def test_presentation_and_media_stay_apart_from_truth(story: StoryService) -> None:
    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "I look at the map")
    scene = story.start_scene(campaign.id, title="The map")
    before = story.state(campaign.id).state_hash
    story.set_presentation(TurnPresentation(turn_id=turn_id, blocks=[NarrationBlock(text="An old map.")]))
    asset = MediaAsset(
        kind="image",
        origin="uploaded",
        blob_key="media/map.png",
        mime="image/png",
        size_bytes=2048,
        content_hash="e" * 64,
        width=640,
        height=480,
        campaign_id=campaign.id,
        alt_text="A map",
    )
    story.attach_media(scene.id, asset)
    assert story.presentation(turn_id).blocks[0].text == "An old map."  # type: ignore[union-attr]
    assert [m.id for m in story.scene_media(scene.id)] == [asset.id]
    assert story.state(campaign.id).state_hash == before  # media never becomes canon
    assert story.end_scene(scene.id).events_committed == 0


def test_unknown_ids_are_clear_errors(story: StoryService) -> None:
    campaign = new_campaign(story)
    with pytest.raises(NotFound, match="campaign"):
        story.add_turn("camp_missing", "hello")
    with pytest.raises(NotFound):
        story.switch_branch(campaign.id, "branch_missing")
    with pytest.raises(NotFound):
        story.state(campaign.id, turn_id="turn_missing")
    with pytest.raises(InvalidRequest, match="needs text"):
        story.add_turn(campaign.id, "   ")
    turn = story.add_turn(campaign.id, "hi", narration="Hello.")
    assert story.get_turn(turn.id).speaker.kind is SpeakerKind.PLAYER


def test_what_the_story_does_not_hold_or_refuses_is_a_story_error(story: StoryService) -> None:
    """The story, not the graph it is kept in, names what is missing or refused: ``story: …``."""
    from story.errors import StoryInvalid, StoryNotFound

    campaign = new_campaign(story)
    (turn_id,) = play(story, campaign.id, "hello")
    missing = {
        "no campaign 'camp_missing'": lambda: story.get_campaign("camp_missing"),
        "no world 'world_missing'": lambda: story.get_world("world_missing"),
        "no turn 'turn_missing'": lambda: story.get_turn("turn_missing"),
        "no scene 'scene_missing'": lambda: story.end_scene("scene_missing"),
        "no branch 'branch_missing'": lambda: story.switch_branch(campaign.id, "branch_missing"),
        "no take 'take_missing'": lambda: story.select_take(turn_id, "take_missing"),
        "no checkpoint 'ckpt_missing'": lambda: story.restore_checkpoint(campaign.id, "ckpt_missing"),
        "no proposal 'prop_missing'": lambda: story.get_proposal("prop_missing"),
    }
    for message, call in missing.items():
        with pytest.raises(StoryNotFound) as caught:
            call()
        assert caught.value.status_code == 404 and caught.value.client_message.startswith(f"story: {message}")
    with pytest.raises(StoryInvalid) as refused:
        story.redo(campaign.id)
    assert refused.value.status_code == 400
    assert refused.value.client_message == "story: nothing to redo: the head is at the tip of the branch"


# ---------------------------------------------------------------------------------------------------
# the live world: the head's state materialized in the graph


def _live_matches(story: StoryService, campaign_id: str) -> None:
    live = story.live_world(campaign_id)
    state = story.world_state(campaign_id)
    assert {eid: (n["name"], n["status"]) for eid, n in live.entities.items()} == {
        eid: (e["name"], e["status"]) for eid, e in state.entities.items()
    }
    assert {eid: t for (eid, kind), t in live.placement.items() if kind == "LOCATED_IN"} == {
        eid: e["location_id"] for eid, e in state.entities.items() if e["location_id"]
    }
    assert {eid: t for (eid, kind), t in live.placement.items() if kind == "HELD_BY"} == {
        eid: e["holder_id"] for eid, e in state.entities.items() if e["holder_id"]
    }
    assert set(live.relationships) == {rid for rid, r in state.relationships.items() if r["status"] == "active"}


def test_the_live_world_follows_the_head(story: StoryService) -> None:
    campaign, ids, (t1, t2, t3) = _tavern(story)
    _live_matches(story, campaign.id)
    assert story.live_world(campaign.id).placement[(ids["ring"], "HELD_BY")] == ids["ayla"]
    story.undo(campaign.id)  # back to t2: the crypt scene's canon is behind the head now
    _live_matches(story, campaign.id)
    live = story.live_world(campaign.id)
    assert live.placement[(ids["ring"], "HELD_BY")] == ids["bren"] and "rel_friends" in live.relationships
    story.create_branch(campaign.id, t1, name="before the inn")
    _live_matches(story, campaign.id)
    main = next(b for b in story.branches(campaign.id) if b.name == "main")
    story.switch_branch(campaign.id, main.id)
    _live_matches(story, campaign.id)
    for _ in range(3):
        story.undo(campaign.id)
    assert story.live_world(campaign.id).entities == {}  # before the first turn: nothing exists yet


def test_a_restore_cut_in_the_middle_leaves_the_old_world(story: StoryService, monkeypatch: pytest.MonkeyPatch) -> None:
    import story.core as core_module
    from schemas.errors import Conflict

    campaign, ids, (t1, t2, t3) = _tavern(story)
    before_live = story.live_world(campaign.id)
    before_head = story.get_campaign(campaign.id).head_turn_id
    real_sync = core_module.queue_sync

    def sync_then_fail(writes, campaign_id, current, target):  # type: ignore[no-untyped-def]
        changes = real_sync(writes, campaign_id, current, target)
        assert changes > 0  # phases 1-3 were queued...
        writes.add("CREATE (t:Turn {uid: $t})", t=t1)  # ...and the transaction dies after them
        return changes

    monkeypatch.setattr(core_module, "queue_sync", sync_then_fail)
    with pytest.raises(Conflict):
        story.undo(campaign.id)
    monkeypatch.undo()
    assert story.get_campaign(campaign.id).head_turn_id == before_head
    assert story.live_world(campaign.id) == before_live  # not a mix: the old world whole
    story.undo(campaign.id)
    _live_matches(story, campaign.id)


def test_a_regeneration_drops_what_the_old_narration_proposed(story: StoryService) -> None:
    campaign = new_campaign(story)
    turn = story.add_turn(campaign.id, "I search the room")
    story.add_take(turn.id, "You find a hidden key.")
    scene = story.start_scene(campaign.id)
    key = story.propose(
        scene.id,
        type="entity",
        turn_id=turn.id,
        authority="system",
        confidence=0.9,
        content={"kind": "item", "name": "Hidden key"},
        evidence={"turn_ids": [turn.id]},
    )
    story.add_take(turn.id, "You find nothing.")  # regenerate
    proposal = story.get_proposal(key.id)
    assert proposal.status is ProposalStatus.SUPERSEDED and "replaced" in (proposal.rationale or "")
    assert story.end_scene(scene.id).decisions == []
    assert story.state(campaign.id).entities == []


def test_automatic_checkpoints_are_pruned_once_the_story_moves_on(story: StoryService) -> None:
    campaign = new_campaign(story)
    for i in range(6):
        play(story, campaign.id, f"turn {i}")
        story.create_checkpoint(campaign.id, f"auto {i}", kind="before_user_input")
    story.create_checkpoint(campaign.id, "named", turn_id=story.history(campaign.id)[0].id)
    assert story.prune_checkpoints(campaign.id, keep_turns=2) >= 3  # the turns' own automatic ones too
    assert [c.name for c in story.checkpoints(campaign.id, automatic=False)] == ["auto 3", "auto 4", "auto 5", "named"]
    assert story.prune_checkpoints(campaign.id, keep_turns=2) == 0
