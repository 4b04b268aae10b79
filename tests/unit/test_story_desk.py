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
    span = story.desk.spans.create(campaign_id, "The harbour", from_turn_id=story.history(campaign_id)[0].id)
    prune = story.desk.pruning.prune(campaign_id, keep_turns=0)
    bundle = tmp_path / "c.zip"
    story.export_campaign(campaign_id, bundle)
    story.graph.run("MATCH (n) WHERE n.campaign_id = $c DETACH DELETE n", {"c": campaign_id})
    story.graph.run("MATCH (n:Campaign {uid: $c}) DETACH DELETE n", {"c": campaign_id})
    story.recall_index.delete_campaign(campaign_id)
    imported = story.import_campaign(bundle)
    [back] = story.desk.notes.at(imported.id)
    assert (back.id, back.text, back.kind, back.visibility.audience) == (note.id, note.text, NoteKind.IDEA, Audience.GM)
    assert [s.id for s in story.desk.spans.at(imported.id)] == [span.id]  # sessions, arcs and prunes travel too
    assert [r.id for r in story.desk.pruning.records(imported.id)] == [prune.id]
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
    main = story.get_campaign(campaign_id).active_branch_id
    story.end_scene(scene_id)
    story.undo(campaign_id)
    story.add_turn(campaign_id, "Instead we go to the tavern.", narration="Smoke and song.")
    assert [n.id for n in story.desk.notes.at(campaign_id)] == [todo.id]
    # written from the fork, a note on the harbour scene (ended on the first line) goes on the scene's line
    late = story.desk.notes.add(scene_id, "Remember the harbourmaster")
    assert late.anchor_turn_id == story.get_scene(scene_id, branch_id=main).end_turn_id  # where it ended
    assert late.id not in {n.id for n in story.desk.notes.at(campaign_id)}
    assert late.id in {n.id for n in story.desk.notes.at(campaign_id, branch_id=main)}


def _fact(story: Any, campaign_id: str, ayla: str, predicate: str, value: str, **extra: Any) -> None:
    """A GM's fact about Ayla, canon at once (committed mid-scene at the head)."""
    scene = story.active_scene(campaign_id) or story.start_scene(campaign_id, title=predicate)
    content = {"subject_entity_id": ayla, "predicate": predicate, "value": value, **extra}
    made = story.propose(scene.id, type="fact", content=content, authority="gm", confidence=1.0)
    story.commit(scene.id, [made.id])


def test_what_happened_between_two_turns_is_read_on_each_line_for_each_seat(story: Any) -> None:
    from story.errors import StoryInvalid
    from story.viewer import Viewer

    campaign_id, _, ayla = _table(story)
    left = story.get_campaign(campaign_id).head_turn_id
    main = story.get_campaign(campaign_id).active_branch_id
    story.add_turn(campaign_id, "We sail north.", narration="The sea is calm.")
    _fact(story, campaign_id, ayla, "mood", "hopeful")
    _fact(story, campaign_id, ayla, "plan", "betray the captain", visibility={"audience": "gm"})
    thread = story.threads.open(campaign_id, "The northern light")
    main_tip = story.add_turn(campaign_id, "We reach the ice.", narration="It glows.").id
    plan = next(f for f in story.state(campaign_id).facts if f.predicate == "plan")
    story.retcon(campaign_id, plan.id, reason="the traitor repents")  # a retcon of a secret names the secret

    # undo to where we left and play another way: a fork with its own canon
    for _ in range(2):
        story.undo(campaign_id)
    assert story.get_campaign(campaign_id).head_turn_id == left
    story.add_turn(campaign_id, "We stay in port.", narration="Rain.")
    _fact(story, campaign_id, ayla, "mood", "restless")
    fork = story.get_campaign(campaign_id).active_branch_id
    assert fork != main

    gm_fork = story.desk.between(campaign_id, left)
    values = [e.event.get("fact", e.event).get("value") for e in gm_fork.events if "fact" in e.kind]
    assert gm_fork.branch_id == fork and gm_fork.turns == 1 and "restless" in json.dumps(values), gm_fork
    assert "hopeful" not in gm_fork.model_dump_json() and gm_fork.threads == []

    gm_main = story.desk.between(campaign_id, left, main_tip)
    text = gm_main.model_dump_json()
    assert gm_main.branch_id == main and gm_main.turns == 2
    assert "hopeful" in text and "betray the captain" in text and "restless" not in text and "repents" in text
    assert [e.event["thread_id"] for e in gm_main.threads] == [thread.id]

    player = story.desk.between(campaign_id, left, main_tip, viewer=Viewer(character_id=ayla))
    seen = player.model_dump_json()
    assert "hopeful" in seen and "betray the captain" not in seen and "repents" not in seen, seen
    assert [e.event["thread_id"] for e in player.threads] == [thread.id]

    with pytest.raises(StoryInvalid):  # the fork's turn is not on the main line
        story.desk.between(campaign_id, story.get_campaign(campaign_id).head_turn_id, main_tip)
    with pytest.raises(StoryInvalid):  # nor after the later turn
        story.desk.between(campaign_id, main_tip, left)


def test_sessions_and_arcs_are_summarized_and_listed_per_line(story: Any) -> None:
    from schemas.desk import SpanKind
    from schemas.story import SummaryScope
    from story.errors import InvalidReference, StoryInvalid

    campaign_id, scene_id, _ = _table(story)
    session = story.desk.spans.start_session(campaign_id)
    assert session.name == "Session 1" and session.to_turn_id is None
    with pytest.raises(StoryInvalid, match="being played"):
        story.desk.spans.start_session(campaign_id)
    with pytest.raises(StoryInvalid, match="no turn"):  # nothing played in it yet
        story.desk.spans.end_session(campaign_id, session.id)
    story.add_turn(campaign_id, "The lighthouse keeper waves us in.", narration="His lamp swings twice.")
    story.add_turn(campaign_id, "We climb the lighthouse stairs.", narration="The keeper hides a brass key.")
    ended = story.desk.spans.end_session(campaign_id, session.id)
    assert ended.to_turn_id == story.get_campaign(campaign_id).head_turn_id
    assert len(story.desk.spans.turns(ended)) == 2

    formed = story.desk.spans.summarize(campaign_id, session.id)  # the extractive former
    assert formed.scope is SummaryScope.SESSION and "key" in formed.text, formed.text
    written = story.desk.spans.summarize(campaign_id, session.id, text="The keeper is hiding something.")
    assert story.desk.spans.get(campaign_id, session.id).summary_id == written.id
    assert {s.id for s in story.summaries(campaign_id)} >= {formed.id, written.id}

    story.end_scene(scene_id)
    arc = story.desk.spans.create(campaign_id, "The harbour arc", scene_ids=[scene_id])
    summary = story.desk.spans.summarize(campaign_id, arc.id)
    assert summary.scope is SummaryScope.ARC and arc.to_turn_id == story.get_scene(scene_id).end_turn_id
    assert [s.kind for s in story.desk.spans.at(campaign_id)] == [SpanKind.SESSION, SpanKind.ARC]
    with pytest.raises(InvalidReference):
        story.desk.spans.create(campaign_id, "Nothing", scene_ids=["scene_0000"])
    with pytest.raises(StoryInvalid):
        story.desk.spans.create(campaign_id, "Both", scene_ids=[scene_id], to_turn_id=arc.to_turn_id)

    # a branch forked before the session ended does not list it
    first = story.history(campaign_id)[0].id
    fork = story.create_branch(campaign_id, first)
    assert story.desk.spans.at(campaign_id, branch_id=fork.id) == []


def test_prune_removes_disposable_takes_and_branches_never_canon_nor_the_selected_take(story: Any) -> None:
    from schemas.story import BranchDisposition
    from story.errors import StoryInvalid

    campaign_id, _, ayla = _table(story)
    turn = story.add_turn(campaign_id, "I call for the ferry.")
    first = story.add_take(turn.id, "No one comes.")
    second = story.add_take(turn.id, "A boat appears.")
    third = story.add_take(turn.id, "Fog rolls in.")
    # selecting an older take archives the one it replaces, as a retake does
    story.select_take(turn.id, second.id)
    versions = story.versions.list(campaign_id, turn.id)
    assert versions[-1].take_id == third.id and versions[-1].replaced_by == second.id

    pruning = story.desk.pruning
    with pytest.raises(StoryInvalid, match="the one told"):
        pruning.set_take(campaign_id, turn.id, second.id, disposition=BranchDisposition.DISPOSABLE)
    with pytest.raises(StoryInvalid, match="the one told"):
        pruning.set_take(campaign_id, turn.id, second.id, archived=True)
    pruning.set_take(campaign_id, turn.id, first.id, disposition=BranchDisposition.DISPOSABLE)
    assert pruning.set_take(campaign_id, turn.id, third.id, archived=True).archived
    pruning.set_take(campaign_id, turn.id, third.id, disposition=BranchDisposition.DISPOSABLE)
    story.desk.pruning.set_version(campaign_id, turn.id, versions[-1].id, BranchDisposition.RETAINED)

    # a disposable branch with canon on it, and one with turns only
    story.undo(campaign_id)
    story.add_turn(campaign_id, "We swim instead.", narration="Cold water.")
    _fact(story, campaign_id, ayla, "soaked", "yes")
    canon_branch = story.get_campaign(campaign_id).active_branch_id
    story.undo(campaign_id)
    story.add_turn(campaign_id, "We wait.", narration="Nothing.")
    idle_branch = story.get_campaign(campaign_id).active_branch_id
    main = story.branches(campaign_id)[0].id
    story.switch_branch(campaign_id, main)
    for branch in (canon_branch, idle_branch):
        story.set_disposition(campaign_id, branch, BranchDisposition.DISPOSABLE)
    for i in range(3):  # the story moves on
        story.add_turn(campaign_id, f"We ride on, day {i}.", narration="Dust.")

    state_before = story.state(campaign_id).model_dump_json()
    canon_before = story.state(campaign_id, branch_id=canon_branch).model_dump_json()
    dry = pruning.prune(campaign_id, keep_turns=1, dry_run=True)
    assert dry.takes == [first.id] and story.takes(turn.id)[0].id == first.id
    record = pruning.prune(campaign_id, keep_turns=1)
    assert record.takes == [first.id], record
    assert record.kept[third.id] == "a retained version archives it" and second.id not in record.takes
    assert record.branches == [idle_branch] and "canon is never deleted" in record.kept[canon_branch], record
    assert [t.id for t in story.takes(turn.id, include_archived=True)] == [second.id, third.id]
    assert [t.id for t in story.takes(turn.id)] == [second.id]  # the archived one listed on request only
    assert story.get_turn(turn.id).selected_take_id == second.id
    assert story.state(campaign_id).model_dump_json() == state_before
    assert story.state(campaign_id, branch_id=canon_branch).model_dump_json() == canon_before
    assert [r.id for r in pruning.records(campaign_id)] == [record.id]
    assert pruning.prune(campaign_id, keep_turns=100).takes == []  # nothing has moved on that far


def test_a_prune_cut_short_stays_recorded_and_the_next_prune_finishes_it(story: Any, monkeypatch: Any) -> None:
    """A prune whose branch deletions fail is recorded pending (its takes gone, its branches named); the next prune
    finishes it first, keeping a planned branch that was played since."""
    from schemas.desk import PruneStatus
    from schemas.story import BranchDisposition

    campaign_id, _, _ = _table(story)
    main = story.get_campaign(campaign_id).active_branch_id
    idle = []
    for text in ("We wait.", "We sleep."):
        story.undo(campaign_id)
        story.add_turn(campaign_id, text, narration="Nothing.")
        idle.append(story.get_campaign(campaign_id).active_branch_id)
        story.switch_branch(campaign_id, main)
        story.set_disposition(campaign_id, idle[-1], BranchDisposition.DISPOSABLE)
    for i in range(3):
        story.add_turn(campaign_id, f"We ride on, day {i}.", narration="Dust.")
    pruning = story.desk.pruning

    def down(*_: Any) -> int:
        raise ConnectionError("the graph went away")

    monkeypatch.setattr(pruning.campaigns, "delete_branch", down)
    with pytest.raises(ConnectionError):
        pruning.prune(campaign_id, keep_turns=1)
    (cut,) = pruning.records(campaign_id)
    assert cut.status is PruneStatus.PENDING and sorted(cut.branches_planned) == sorted(idle), cut
    assert {b.id for b in story.branches(campaign_id)} >= set(idle)  # nothing half-deleted: reads still work
    story.catch_up()  # a start whose finish fails still starts, the prune left pending
    assert [r.status for r in pruning.records(campaign_id)] == [PruneStatus.PENDING]
    monkeypatch.undo()
    story.switch_branch(campaign_id, idle[1])  # played since: the finish keeps it
    again = pruning.prune(campaign_id, keep_turns=1)
    first, second = pruning.records(campaign_id)
    assert first.id == cut.id and first.status is PruneStatus.DONE and first.branches == [idle[0]], first
    assert first.kept[idle[1]] == "played since the prune was decided", first
    assert second.id == again.id and second.status is PruneStatus.DONE and second.branches == [], second
    assert pruning.finish(campaign_id) == []


def test_a_gm_only_note_never_reaches_the_prompt_even_of_a_turn_narrated_from_everything(
    recalling_story: Any,
) -> None:
    """A turn the CLI narrates has no seat (it narrates from everything); the GM's note is still left out of its
    prompt, until the GM shares it with the table."""
    import asyncio

    from narrator.engines import EchoEngine
    from narrator.turn import TurnFlow, TurnOutcome
    from schemas.serving import ServeSettings, TurnRequest
    from schemas.visibility import PUBLIC

    story = recalling_story
    story.memory_former = None
    campaign_id, scene_id, _ = _table(story)
    note = story.desk.notes.add(scene_id, f"The {MARKER} ferryman is the drowned king's ghost.")
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=ServeSettings(recall_hits=4, knowledge_hits=0))

    def prompt(text: str) -> str:
        async def run() -> dict[str, Any]:
            return [e async for e in flow.play(campaign_id, TurnRequest(text=text), viewer=None)][-1]

        outcome = TurnOutcome.model_validate(asyncio.run(run()))
        text_of = story.provenance(outcome.turn_id).prompt_text
        assert text_of is not None
        return str(text_of)

    assert "drowned king" not in prompt(f"Who is the {MARKER} ferryman, really?")
    story.desk.notes.update(campaign_id, note.id, visibility=PUBLIC)
    assert "drowned king" in prompt(f"Tell me again about the {MARKER} ferryman.")
