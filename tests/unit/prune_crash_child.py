"""A child process for tests/unit/test_prune_crash.py: set up a campaign with disposable takes, versions and
branches the story has moved on from, or prune it, pausing at a named moment to be killed.

    python -m tests.unit.prune_crash_child setup DATA_DIR           # writes DATA_DIR/prune.json (the ids)
    python -m tests.unit.prune_crash_child prune DATA_DIR [POINT]   # prune (keep_turns=1), pausing at POINT

The moments: ``after_record`` (the pending record committed with its takes and versions gone, no branch yet),
``mid_branches`` (the first planned branch deleted, the second not), ``before_done`` (every planned branch
deleted, the record not marked done).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from schemas.campaign import BranchDisposition
from schemas.settings import Settings
from schemas.story import StoryProfile
from story.pruning import Pruning
from tests.unit.crash_support import pause

POINTS = ("after_record", "mid_branches", "before_done")
KEEP_TURNS = 1


def open_story(data: Path) -> tuple[Any, Any]:
    """The story service on the embedded stores under ``data`` (no recall index: the restart builds it)."""
    from stores.factory import open_blob_store, open_graph_store
    from story.service import StoryService

    settings = Settings(data_dir=data)
    graph = open_graph_store(settings)
    story = StoryService(graph, open_blob_store(settings))
    story.prepare()
    return story, graph


def setup(data: Path) -> dict[str, Any]:
    story, graph = open_story(data)
    world = story.create_world("Ashfall")
    campaign = story.create_campaign(world.id, "The Ferry", StoryProfile(genre="fantasy"))
    cid = campaign.id
    cast = story.start_scene(cid, title="Cast")
    made = story.propose(
        cast.id, type="entity", authority="gm", confidence=1.0, content={"kind": "character", "name": "Ayla"}
    )
    story.commit(cast.id, [made.id])
    story.end_scene(cast.id)
    ayla = story.state(cid).entities[0].id
    story.add_turn(cid, "We walk to the harbour.", narration="Gulls cry over the grey water.")
    turn = story.add_turn(cid, "I call for the ferry.")
    first, second, third = (story.add_take(turn.id, n) for n in ("No one comes.", "A boat appears.", "Fog rolls in."))
    story.select_take(turn.id, second.id)  # archives the third as a version
    pruning = story.desk.pruning
    pruning.set_take(cid, turn.id, first.id, disposition=BranchDisposition.DISPOSABLE)
    pruning.set_take(cid, turn.id, third.id, archived=True)
    for version in story.versions.list(cid, turn.id):
        pruning.set_version(cid, turn.id, version.id, BranchDisposition.DISPOSABLE)
    main = story.get_campaign(cid).active_branch_id
    # an idle branch with a branch forked from it (leaves first), and one holding canon (kept)
    story.undo(cid)
    story.add_turn(cid, "We swim across.", narration="The kelpie swimmer wades into cold water.")
    story.add_turn(cid, "We keep swimming.", narration="The far shore nears.")
    swim = story.get_campaign(cid).active_branch_id
    story.undo(cid)
    story.add_turn(cid, "We dive for pearls.", narration="A pearl glints in the kelpie weeds.")
    dive = story.get_campaign(cid).active_branch_id
    story.switch_branch(cid, main)
    story.undo(cid)
    story.add_turn(cid, "We build a raft.", narration="Planks and rope.")
    scene = story.start_scene(cid, title="Raft")
    fact = story.propose(
        scene.id, type="fact", authority="gm", confidence=1.0,
        content={"subject_entity_id": ayla, "predicate": "carpenter", "value": "yes"},
    )  # fmt: skip
    story.commit(scene.id, [fact.id])
    story.end_scene(scene.id)
    raft = story.get_campaign(cid).active_branch_id
    story.switch_branch(cid, main)
    for branch in (swim, dive, raft):
        story.set_disposition(cid, branch, BranchDisposition.DISPOSABLE)
    for i in range(3):  # the story moves on
        story.add_turn(cid, f"We ride on, day {i}.", narration="Dust on the road.")
    ids = {"campaign_id": cid, "turn_id": turn.id, "takes": [first.id, second.id, third.id]}
    ids |= {"swim": swim, "dive": dive, "raft": raft, "main": main}
    (data / "prune.json").write_text(json.dumps(ids))
    graph.close()
    return ids


def prune(data: Path, point: str | None) -> None:
    story, graph = open_story(data)
    ids = json.loads((data / "prune.json").read_text())
    pruning = story.desk.pruning
    if point == "after_record":
        Pruning._roll_forward = lambda self, record: pause(point)  # type: ignore[method-assign,assignment,misc]
    elif point == "mid_branches":
        delete = pruning.campaigns.delete_branch

        def deleted_then_pause(campaign_id: str, branch_id: str) -> int:
            delete(campaign_id, branch_id)
            pause(point)
            return 0

        pruning.campaigns.delete_branch = deleted_then_pause  # type: ignore[method-assign]
    elif point == "before_done":
        Pruning._mark_done = lambda self, record: pause(point)  # type: ignore[method-assign,assignment,misc]
    record = pruning.prune(ids["campaign_id"], keep_turns=KEEP_TURNS)
    graph.close()
    print("PRUNED " + record.model_dump_json())


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "setup":
        print(json.dumps(setup(where)))
    else:
        prune(where, sys.argv[3] if len(sys.argv) > 3 else None)
