"""The GM's desk in the story engine: notes on scenes (never canon, GM-only unless shared, recalled by the GM and
never by a player), sessions and arcs with their summaries, take dispositions and pruning, and what happened on
a line between two turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server)

MARKER = "quillmarker"


def _table(story: Any) -> tuple[str, str, str]:
    """A campaign with Ayla, a scene with two turns; returns (campaign, scene, ayla)."""
    from schemas.story import StoryProfile

    world = story.create_world("Ashfall")
    campaign = story.create_campaign(world.id, "The Storm", StoryProfile(genre="fantasy"))
    cast = story.start_scene(campaign.id, title="Cast")
    made = story.propose(
        cast.id, type="entity", authority="gm", confidence=1.0, content={"kind": "character", "name": "Ayla"}
    )
    story.commit(cast.id, [made.id])
    story.end_scene(cast.id)
    scene = story.start_scene(campaign.id, title="The harbour")
    story.add_turn(campaign.id, "We walk to the harbour.", narration="Gulls cry over the grey water.")
    story.add_turn(campaign.id, "I ask the harbourmaster about the ship.", narration="He spits and points north.")
    return campaign.id, scene.id, story.state(campaign.id).entities[0].id


def _recalled(story: Any, campaign_id: str, viewer: Any, query: str) -> list[str]:
    """What ``viewer`` recalls of ``query`` (the GM's seat all, a player's cut by the secrets rule)."""
    hits = story.recall(campaign_id, query, limit=20)
    seen = viewer.hits(
        hits,
        memories=story.memories(campaign_id),
        state=story.state(campaign_id),
        summaries=story.summaries(campaign_id),
        notes=story.desk.notes.of_campaign(campaign_id),
    )
    return [h.text for h in seen]


def test_a_gm_note_is_recalled_by_the_gm_and_never_by_a_player(recalling_story: Any, tmp_path: Path) -> None:
    from schemas.desk import NoteKind
    from schemas.visibility import Audience, Visibility
    from story.viewer import TABLE, Viewer

    story = recalling_story
    campaign_id, scene_id, ayla = _table(story)
    count_events = ("MATCH (e:StateEvent {campaign_id: $c}) RETURN count(e) AS n", {"c": campaign_id})
    events_before = story.graph.run(*count_events)
    note = story.desk.notes.add(scene_id, f"The harbourmaster {MARKER} is the smuggler's brother.", kind=NoteKind.IDEA)
    assert (
        note.visibility.audience is Audience.GM and note.anchor_turn_id == story.get_campaign(campaign_id).head_turn_id
    )

    query = f"harbourmaster {MARKER} smuggler brother"
    gm, player = Viewer(gm=True), Viewer(character_id=ayla)
    assert any(MARKER in t for t in _recalled(story, campaign_id, gm, query)), "the GM does not recall the note"
    assert not any(MARKER in t for t in _recalled(story, campaign_id, player, query)), "a player recalled a GM note"
    assert not any(MARKER in t for t in _recalled(story, campaign_id, TABLE, query))
    # never canon: no event, nothing in the state
    assert (
        story.graph.run("MATCH (e:StateEvent {campaign_id: $c}) RETURN count(e) AS n", {"c": campaign_id})
        == events_before
    )
    assert MARKER not in story.state(campaign_id).model_dump_json()

    # a rebuild and a reconcile keep it; shared with Ayla, her player recalls it, another seat does not
    story.rebuild_recall(campaign_id)
    assert story.reconcile_recall(campaign_id).removed == 0
    story.desk.notes.update(
        campaign_id, note.id, visibility=Visibility(audience=Audience.CHARACTERS, character_ids=[ayla])
    )
    assert any(MARKER in t for t in _recalled(story, campaign_id, player, query))
    assert not any(MARKER in t for t in _recalled(story, campaign_id, Viewer(character_id="ent_other"), query))

    # it travels with the campaign's bundle, still the GM's alone there
    story.desk.notes.update(campaign_id, note.id, visibility=Visibility(audience=Audience.GM))
    bundle = tmp_path / "c.zip"
    story.export_campaign(campaign_id, bundle)
    story.graph.run("MATCH (n) WHERE n.campaign_id = $c DETACH DELETE n", {"c": campaign_id})
    story.graph.run("MATCH (n:Campaign {uid: $c}) DETACH DELETE n", {"c": campaign_id})
    story.recall_index.delete_campaign(campaign_id)
    imported = story.import_campaign(bundle)
    [back] = story.desk.notes.at(imported.id)
    assert (back.id, back.text, back.kind, back.visibility.audience) == (note.id, note.text, NoteKind.IDEA, Audience.GM)
    assert any(MARKER in t for t in _recalled(story, imported.id, gm, query))
    assert not any(MARKER in t for t in _recalled(story, imported.id, player, query))


def test_todos_are_marked_done_and_bad_notes_write_nothing(story: Any) -> None:
    from schemas.desk import NoteKind
    from story.errors import InvalidReference, StoryInvalid, StoryNotFound

    campaign_id, scene_id, _ = _table(story)
    first_turn = story.history(campaign_id)[0].id
    todo = story.desk.notes.add(scene_id, "Roll for the storm", kind=NoteKind.TODO, turn_id=first_turn)
    note = story.desk.notes.add(scene_id, "The gulls are omens")
    assert [n.id for n in story.desk.notes.at(campaign_id, open_only=True)] == [todo.id]
    done = story.desk.notes.update(campaign_id, todo.id, done=True)
    assert done.done_at is not None and story.desk.notes.at(campaign_id, open_only=True) == []
    assert story.desk.notes.update(campaign_id, todo.id, done=False).done_at is None
    assert story.desk.notes.get(campaign_id, todo.id).done_at is None

    before = json.dumps([n.model_dump(mode="json") for n in story.desk.notes.of_campaign(campaign_id)], sort_keys=True)
    with pytest.raises(StoryInvalid, match="only a TODO"):
        story.desk.notes.update(campaign_id, note.id, done=True)
    with pytest.raises(InvalidReference, match="turn_id"):
        story.desk.notes.add(scene_id, "x", turn_id="turn_0000")
    with pytest.raises(StoryNotFound):
        story.desk.notes.add("scene_0000", "x")
    with pytest.raises(StoryNotFound):
        story.desk.notes.update("campaign_0000", note.id, text="y")
    after = json.dumps([n.model_dump(mode="json") for n in story.desk.notes.of_campaign(campaign_id)], sort_keys=True)
    assert after == before

    # a note is on its scene's line: undone past its turn and forked, the fork does not list it
    story.undo(campaign_id)
    story.add_turn(campaign_id, "Instead we go to the tavern.", narration="Smoke and song.")
    assert [n.id for n in story.desk.notes.at(campaign_id)] == [todo.id]
