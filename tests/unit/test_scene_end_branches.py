"""A scene that ends on two branches (forked while it was active) forms what each end makes, and what an
end made is listed exactly where the state and recall have it (story/scene_end.py, story/memory.py).

- Each end forms its own summary and memories, even at the same end turn: their ids derive from the end
  (its branch and commit sequence number), so the second end's are not taken for the first's.
- An end is pending on its own: a second branch's end while the first's formation is still to do
  leaves both to be formed, each with what its branch holds.
- ``memories()`` and ``summaries()`` (and what a turn reads) cut where recall and the state cut: a child
  forked during the scene lists nothing of the parent's later end, the parent lists all of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from schemas.recall import RecallKind
from story import cypher
from story.formation import ExtractiveFormer, FormedScene
from story.scene_end import end_pending, form_scene
from story.service import StoryService
from tests.unit.test_recall_isolation import QUESTION, _forge_scene, _made_by_end, _table, service

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the service

__all__ = ["service"]  # the fixture, used by name

GM_SUMMARY = "Hulda told Ayla that bandits took the salt caravan at the old ford."


class _Broken:
    name = "broken"

    def form(self, *args: Any, **kwargs: Any) -> FormedScene:
        raise RuntimeError("the model is down")


def _anchored(story: StoryService, label: str, turn_id: str) -> list[dict[str, Any]]:
    return [r["n"] for r in story.graph.run(*cypher.anchored_at(label, turn_id))]


def _fork_during_the_scene(story: StoryService) -> tuple[str, dict[str, str], str, str, str, str]:
    """A scene active when a branch forks at its last turn; the head back on the parent."""
    cid, cast = _table(story)
    scene_id, told = _forge_scene(story, cid, cast)
    main = story.get_campaign(cid).active_branch_id
    fork = story.create_branch(cid, told, name="the other road")
    story.switch_branch(cid, main)
    return cid, cast, scene_id, told, main, fork.id


def _formed_on(story: StoryService, label: str, turn_id: str, branch_id: str) -> set[str]:
    """The ids of the records of ``label`` anchored at ``turn_id`` that sit on ``branch_id`` (in the graph)."""
    return {r["uid"] for r in _anchored(story, label, turn_id) if r["branch_id"] == branch_id}


def test_a_scene_ended_on_two_branches_at_the_same_turn_forms_each_ends_memories(service: StoryService) -> None:
    story = service
    cid, cast, scene_id, told, main, fork = _fork_during_the_scene(story)
    story.end_scene(scene_id, summary=GM_SUMMARY)
    on_main = _formed_on(story, "Memory", told, main)
    assert on_main and len(_formed_on(story, "Summary", told, main)) == 1

    story.switch_branch(cid, fork)
    with capture_logs() as logs:
        report = story.end_scene(scene_id, summary=GM_SUMMARY)  # the same end turn, the same words
    assert not report.already_completed
    assert not [e for e in logs if e["event"] == "memory_formation_failed"]
    (formed,) = [e for e in logs if e["event"] == "memories_formed"]
    assert (formed["memories"], formed["already_there"], formed["summary"]) == (len(on_main), 0, 1)
    on_fork = _formed_on(story, "Memory", told, fork)
    assert len(on_fork) == len(on_main) and not on_fork & on_main
    assert len(_anchored(story, "Memory", told)) == 2 * len(on_main)
    assert len(_formed_on(story, "Summary", told, fork)) == 1 and len(_anchored(story, "Summary", told)) == 2
    assert not end_pending(story, scene_id)
    # each branch lists its own end's (the lists cut as the state does)
    assert {m.id for m in story.memories(cid)} == on_fork and len(story.summaries(cid)) == 1
    assert {m.id for m in story.memories(cid, branch_id=main)} == on_main
    assert len(story.summaries(cid, branch_id=main)) == 1

    # forming an end again (a crash after its commit) adds nothing: the same end gets the same ids
    again = form_scene(story, story.get_scene(scene_id), ExtractiveFormer())
    assert (again.summary_added, again.memories_added, again.already_there) == (False, 0, len(on_fork))
    assert len(_anchored(story, "Memory", told)) == 2 * len(on_main)


def test_a_second_branchs_end_while_the_first_is_pending_loses_neither(service: StoryService) -> None:
    story = service
    cid, cast, scene_id, told, main, fork = _fork_during_the_scene(story)
    story.memory_former = _Broken()
    story.end_scene(scene_id)  # the parent's end: canon committed, its memories still to form
    assert end_pending(story, scene_id) and _anchored(story, "Memory", told) == []
    story.memory_former = ExtractiveFormer()

    story.switch_branch(cid, fork)
    story.end_scene(scene_id)  # the child's end, and the parent's pending one, are formed
    assert not end_pending(story, scene_id)
    on_main, on_fork = (_formed_on(story, "Memory", told, b) for b in (main, fork))
    assert on_main and len(on_main) == len(on_fork) and not on_main & on_fork
    assert len(_formed_on(story, "Summary", told, main)) == len(_formed_on(story, "Summary", told, fork)) == 1
    # recall places each end's memories at its own end (not the parent's at the child's later end)
    recalled = _made_by_end(story.recall(cid, QUESTION, limit=100), scene_id)
    assert {h.id for h in recalled if h.kind is RecallKind.MEMORY} == on_fork
    story.switch_branch(cid, main)
    recalled = _made_by_end(story.recall(cid, QUESTION, limit=100), scene_id)
    assert {h.id for h in recalled if h.kind is RecallKind.MEMORY} == on_main


def test_listing_cuts_an_end_on_the_parent_after_a_fork_during_the_scene(service: StoryService) -> None:
    """Fork during the scene, end it on the parent: the child lists none of that end's memories or its
    summary (its state has none of the end's canon, and recall none of its records); the parent all."""
    story = service
    cid, cast, scene_id, told, main, fork = _fork_during_the_scene(story)
    story.end_scene(scene_id, summary=GM_SUMMARY)
    formed = _formed_on(story, "Memory", told, main)
    (summary_id,) = _formed_on(story, "Summary", told, main)
    assert formed

    on_main = {m.id for m in story.memories(cid)}
    assert formed <= on_main and summary_id in {s.id for s in story.summaries(cid)}
    assert formed <= {m.id for m in story.memories(cid, branch_id=main)}
    assert formed <= {m.id for m in story.memories(cid, turn_id=told)}  # the end turn's own line has it

    for position in ({"branch_id": fork}, {}):  # the child's tip, and its head once switched to
        if not position:
            story.switch_branch(cid, fork)
        assert not formed & {m.id for m in story.memories(cid, **position)}
        assert not story.memories(cid, observer_entity_id=cast["Ayla"], **position)
        assert summary_id not in {s.id for s in story.summaries(cid, **position)}
    assert not any(h["title"].startswith("The caravan lost") for h in story.world_state(cid).happenings.values())
    assert _made_by_end(story.recall(cid, QUESTION, limit=50), scene_id) == []
    # what a turn reads (the narrator's context) lists as the listing does
    context = story.turn_context(cid, turn=story.get_turn(told), recent=0)
    assert not formed & {m.id for m in context.memories} and summary_id not in {s.id for s in context.summaries}
    story.switch_branch(cid, main)
    context = story.turn_context(cid, turn=story.get_turn(told), recent=0)
    assert formed <= {m.id for m in context.memories} and summary_id in {s.id for s in context.summaries}
