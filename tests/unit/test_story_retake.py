"""A retake that rewinds: automatic checkpoints, turn versions, superseded proposals, a revert, pruning."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from narrator.engines import EchoEngine
from narrator.turn import TurnFlow
from schemas.serving import ServeSettings
from schemas.story import ProposalStatus, WorldStateCheckpointKind
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers

SETTINGS = ServeSettings(recent_turns=2, recall_hits=0, knowledge_hits=0)


def _names(story: StoryService, campaign_id: str) -> set[str]:
    return {e.name for e in story.state(campaign_id).entities}


def _values(story: StoryService, campaign_id: str) -> list[Any]:
    return [f.value for f in story.state(campaign_id).facts if f.status.value == "active"]


def _retake(story: StoryService, campaign_id: str, turn_id: str, settings: ServeSettings = SETTINGS) -> dict[str, Any]:
    """A retake as the operation runs it: rewind, then narrate the turn again."""
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=settings)

    async def run() -> dict[str, Any]:
        await asyncio.to_thread(story.versions.rewind, campaign_id, turn_id)
        return [event async for event in flow.retake(campaign_id, turn_id)][-1]

    return asyncio.run(run())


def _table(story: StoryService, text: str = "I look at the sky.") -> tuple[str, str, str]:
    """The Old Mill is canon before the turn; the Dragon becomes canon after it was narrated (a scene ended
    at it). Returns the campaign, the turn and the scene of the turn's own proposals."""
    story.memory_former = None
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We walk to the mill.", narration="The mill creaks.")
    cast = story.start_scene(campaign.id, title="Cast")
    gm_entity(story, cast.id, "location", "Old Mill")
    story.end_scene(cast.id)
    turn = story.add_turn(campaign.id, text, narration="A shadow passes over the mill.")
    scene = story.start_scene(campaign.id, title="The shadow")
    gm_entity(story, scene.id, "creature", "Dragon")
    story.end_scene(scene.id)  # canon committed after the turn was told, anchored at it
    assert {"Old Mill", "Dragon"} <= _names(story, campaign.id)
    return campaign.id, turn.id, scene.id


def test_a_retake_prompt_shows_the_world_rewound_to_before_the_turn(story: StoryService) -> None:
    cid, turn_id, _ = _table(story)
    outcome = _retake(story, cid, turn_id)
    prompt = story.provenance(turn_id).prompt_text or ""
    assert "Old Mill" in prompt
    assert "Dragon" not in prompt  # committed at the retaken turn, after it was recorded
    assert outcome["take_id"] == story.get_turn(turn_id).selected_take_id
    campaign = story.get_campaign(cid)
    assert campaign.head_turn_id == turn_id
    assert "Dragon" not in _names(story, cid) and "Old Mill" in _names(story, cid)
    live = {n["name"] for n in story.live_world(cid).entities.values()}
    assert live == _names(story, cid)  # the live world went along in the same transaction


def test_a_retake_recalls_nothing_committed_at_or_after_the_turn(recalling_story: StoryService) -> None:
    story = recalling_story
    cid, turn_id, _ = _table(story, "Is that a dragon in the sky?")
    assert any("Dragon" in h.text for h in story.recall(cid, "dragon", limit=10))  # recalled at the head
    _retake(story, cid, turn_id, SETTINGS.model_copy(update={"recall_hits": 5}))
    prompt = story.provenance(turn_id).prompt_text or ""
    assert "Old Mill" in prompt
    assert "Dragon" not in prompt  # neither in the state nor recalled (the rewound head's line)


def test_a_retake_supersedes_what_the_replaced_take_proposed_and_it_never_reaches_canon(story: StoryService) -> None:
    story.memory_former = None
    campaign = new_campaign(story)
    turn = story.add_turn(campaign.id, "I search the room", narration="You find a hidden key.")
    scene = story.start_scene(campaign.id)
    key = story.propose(
        scene.id,
        type="entity",
        turn_id=turn.id,
        authority="system",
        confidence=0.95,
        content={"kind": "item", "name": "Hidden key"},
        evidence={"turn_ids": [turn.id]},
    )
    lamp = story.propose(
        scene.id,
        type="entity",
        turn_id=turn.id,
        authority="gm",
        confidence=1.0,
        content={"kind": "item", "name": "Lamp"},
    )
    story.versions.rewind(campaign.id, turn.id)
    story.add_take(turn.id, "You find nothing.")
    assert story.get_proposal(key.id).status is ProposalStatus.SUPERSEDED  # not rejected
    assert story.get_proposal(lamp.id).status is ProposalStatus.PENDING  # the GM's own stay
    (version,) = story.versions.list(campaign.id, turn.id)
    assert version.narration == "You find a hidden key." and version.proposal_ids == [key.id]
    story.end_scene(scene.id)
    assert _names(story, campaign.id) == {"Lamp"}


def test_a_revert_brings_back_the_version_and_its_world(story: StoryService) -> None:
    cid, turn_id, _ = _table(story)
    _retake(story, cid, turn_id)
    assert "Dragon" not in _names(story, cid)
    (version,) = story.versions.list(cid, turn_id)
    assert version.narration == "A shadow passes over the mill." and version.checkpoint_id is not None
    reverted = story.revert_turn_version(cid, turn_id, version.id)
    assert reverted.reverted_at is not None
    turn = story.get_turn(turn_id)
    assert turn.selected_take_id == version.take_id and turn.narration == version.narration
    assert "Dragon" in _names(story, cid)  # the world that went with it
    live = {n["name"] for n in story.live_world(cid).entities.values()}
    assert live == _names(story, cid)
    # the take it replaced is archived in turn, and can be brought back (the world of the retake)
    versions = story.versions.list(cid, turn_id)
    assert len(versions) == 2 and versions[-1].take_id != version.take_id
    story.revert_turn_version(cid, turn_id, versions[-1].id)
    assert "Dragon" not in _names(story, cid)


def test_every_turn_checkpoints_its_three_boundaries_and_pruning_keeps_named_and_the_last_n(
    embedded_graph: Any, local_blob_store: Any
) -> None:
    story = StoryService(embedded_graph, local_blob_store, checkpoints_kept=4)
    story.prepare()
    campaign = new_campaign(story)
    first = story.add_turn(campaign.id, "turn 0", narration="told 0")
    kinds = [c.kind for c in story.checkpoints(campaign.id, automatic=True)]
    assert kinds == [
        WorldStateCheckpointKind.BEFORE_USER_INPUT,
        WorldStateCheckpointKind.AFTER_USER_INPUT,
        WorldStateCheckpointKind.AFTER_CHARACTER_ROUND,
    ]
    named = story.create_checkpoint(campaign.id, "the start", turn_id=first.id)
    for i in range(1, 5):
        story.add_turn(campaign.id, f"turn {i}", narration=f"told {i}")
    automatic = story.checkpoints(campaign.id, automatic=True)
    assert len(automatic) == 4  # the newest 4 of the branch
    assert automatic[-1].turn_id == story.get_campaign(campaign.id).head_turn_id
    assert [c.id for c in story.checkpoints(campaign.id, automatic=False)] == [named.id]
    # another branch keeps its own
    story.create_branch(campaign.id, first.id, name="side")
    story.add_turn(campaign.id, "side turn", narration="told side")
    assert len(story.checkpoints(campaign.id, automatic=True)) == 4 + 3


def test_a_named_checkpoint_restore_forks_where_canon_was_committed_since(story: StoryService) -> None:
    story.memory_former = None
    campaign = new_campaign(story)
    turn = story.add_turn(campaign.id, "We rest.", narration="Night falls.")
    named = story.create_checkpoint(campaign.id, "nightfall")
    scene = story.start_scene(campaign.id)
    gm_entity(story, scene.id, "character", "Stranger")
    story.end_scene(scene.id)  # anchored at the checkpoint's turn, committed after it
    assert "Stranger" in _names(story, campaign.id)
    restored = story.restore_checkpoint(campaign.id, named.id)
    assert restored.head_turn_id == turn.id and restored.active_branch_id != turn.branch_id
    assert "Stranger" not in _names(story, campaign.id)
    assert story.state(campaign.id, branch_id=turn.branch_id).entities[0].name == "Stranger"  # the old line keeps it


def test_the_number_kept_is_read_from_the_settings_at_the_entry_point(tmp_path: Any, monkeypatch: Any) -> None:
    from pydantic import ValidationError

    from lorekeeper.command_context import story_service
    from schemas.settings import Settings

    monkeypatch.setenv("LOREKEEPER_CHECKPOINTS_KEPT", "3")
    settings = Settings(data_dir=tmp_path)
    assert settings.checkpoints_kept == 3
    with story_service(settings) as story:
        assert story.versions.checkpoints.keep == 3
    monkeypatch.setenv("LOREKEEPER_CHECKPOINTS_KEPT", "0")
    with pytest.raises(ValidationError, match="checkpoints_kept"):
        Settings(data_dir=tmp_path)


def test_the_checkpoint_a_retcon_takes_first_restores_the_world_before_it(story: StoryService) -> None:
    story.memory_former = None
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We meet the queen.", narration="She smiles.")
    scene = story.start_scene(campaign.id)
    queen = gm_entity(story, scene.id, "character", "Queen")
    content = {"subject_entity_id": queen, "predicate": "mood", "value": "calm"}
    story.propose(scene.id, type="fact", content=content, authority="gm", confidence=1.0)
    story.end_scene(scene.id)
    (fact,) = story.state(campaign.id).facts
    story.retcon(campaign.id, fact.id, reason="she was furious", value="furious")
    assert _values(story, campaign.id) == ["furious"]
    (before,) = [c for c in story.checkpoints(campaign.id) if c.kind is WorldStateCheckpointKind.BEFORE_OOC_MUTATION]
    story.restore_checkpoint(campaign.id, before.id)
    assert _values(story, campaign.id) == ["calm"]  # the retcon is on the old line only


def test_a_retaken_campaign_round_trips_with_its_versions_and_checkpoints(story: StoryService, tmp_path: Any) -> None:
    import io

    from tests.unit.test_story_bundle import _stores

    cid, turn_id, _ = _table(story)
    _retake(story, cid, turn_id)
    buffer = io.BytesIO()
    story.export_campaign(cid, buffer)
    with _stores(tmp_path / "other") as other:
        other.import_campaign(buffer.getvalue())
        (version,) = other.versions.list(cid, turn_id)
        assert version == story.versions.list(cid, turn_id)[0]
        assert other.checkpoints(cid) == story.checkpoints(cid)
        other.revert_turn_version(cid, turn_id, version.id)  # the world that went with it, in the new store too
        assert "Dragon" in _names(other, cid)
