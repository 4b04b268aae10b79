"""SIGKILL during a prune, at several moments, then a restart: the prune ends as an uninterrupted one does.

A child process (tests/unit/prune_crash_child.py) prunes a campaign on the embedded stores: a disposable take
and disposable versions behind the head, two idle disposable branches (one forked from the other) and a
disposable branch holding canon (kept). It is killed for real after the pending record is committed, after the
first branch is deleted, and before the record is marked done. The story then starts on the folder as the server
does (its catch-up finishes the pending prune, then reconciles the recall index): the record, the takes, the
versions, the branches, the turns, the state and the recall must equal what an uninterrupted prune leaves, and
every read works: state at the head and on the kept branch, list_takes, branches, history, recall at the head and
as of the turn whose take was pruned (nothing of the removed branches recalled).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.unit.crash_support import kill_at, run_child
from tests.unit.prune_crash_child import POINTS

pytestmark = [pytest.mark.servers, pytest.mark.slow]

_CHILD = "tests.unit.prune_crash_child"
_IGNORED = shutil.ignore_patterns("*.sock")


@contextmanager
def _restarted(data: Path, minilm: Any) -> Iterator[tuple[Any, list[str]]]:
    """The story as a server starts it on ``data`` (catch-up included), and the prune statuses it found before."""
    from schemas.settings import Settings
    from stores.factory import open_blob_store, open_graph_store
    from story.recall_index import open_recall_index
    from story.service import StoryService

    settings = Settings(data_dir=data)
    graph = open_graph_store(settings)
    recall = open_recall_index(settings, embedder=minilm)
    try:
        story = StoryService(graph, open_blob_store(settings), recall=recall)
        story.prepare()
        found = [r.status.value for r in story.desk.pruning.records(_ids(data)["campaign_id"])]
        story.catch_up()
        yield story, found
    finally:
        recall.close()
        graph.close()


def _ids(data: Path) -> dict[str, Any]:
    return json.loads((data / "prune.json").read_text())  # type: ignore[no-any-return]


def _world(story: Any, ids: dict[str, Any]) -> dict[str, Any]:
    """Everything a prune touches, and every read over it, as plain data."""
    cid, turn = ids["campaign_id"], ids["turn_id"]
    (record,) = story.desk.pruning.records(cid)
    uids = "MATCH (n:{}) WHERE n.campaign_id = $c RETURN n.uid AS u ORDER BY u"
    head = story.history(cid)[-1].id

    def recalled(query: str, **where: Any) -> list[str]:
        return sorted(h.text for h in story.recall(cid, query, limit=20, **where))

    return {
        "record": record.model_dump(mode="json", exclude={"id", "created_at"}),
        "takes": [k.model_dump(mode="json") for k in story.takes(turn, include_archived=True)],
        "live_takes": [k.id for k in story.takes(turn)],
        "told": story.get_turn(turn).selected_take_id,
        **{
            label: [r["u"] for r in story.graph.run(uids.format(label), {"c": cid})]
            for label in ("Turn", "TurnVersion")
        },
        "branches": sorted(b.id for b in story.branches(cid)),
        "history": [t.id for t in story.history(cid)],
        "state": story.state(cid).state_hash,
        "kept_state": story.state(cid, branch_id=ids["raft"]).state_hash,
        "recall_head": recalled("kelpie pearl swimmer"),
        "recall_turn": recalled("ferry boat", as_of_turn_id=turn),
        "recall_kept": recalled("raft planks", branch_id=ids["raft"]),
        "head": head,
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prune") / "base"
    folder.mkdir()
    run_child(_CHILD, "setup", str(folder))
    return folder


@pytest.fixture(scope="module")
def clean(base: Path, minilm: Any) -> dict[str, Any]:
    """What an uninterrupted prune leaves, read after a restart."""
    data = base.parent / "clean"
    shutil.copytree(base, data, ignore=_IGNORED)
    with _restarted(data, minilm) as (story, _):
        before = _world_before(story, _ids(data))
    run_child(_CHILD, "prune", str(data))
    ids = _ids(data)
    with _restarted(data, minilm) as (story, found):
        assert found == ["done"]
        after = _world(story, ids)
    record = after["record"]
    assert record["takes"] == [ids["takes"][0]] and record["versions"], record
    assert record["branches"] == [ids["dive"], ids["swim"]], record  # leaves first
    assert "canon is never deleted" in record["kept"].get(ids["raft"], ""), (ids, record)
    assert after["branches"] == sorted([ids["main"], ids["raft"]])
    assert after["live_takes"] == [ids["takes"][1]] and after["told"] == ids["takes"][1]
    assert after["state"] == before["state"] and after["kept_state"] == before["kept_state"]
    assert after["recall_turn"] and after["recall_kept"], after
    assert not any("kelpie" in text for text in after["recall_head"]), after["recall_head"]
    assert any("kelpie" in text for text in before["recall_swim"]), before  # there was something to lose
    return after


def _world_before(story: Any, ids: dict[str, Any]) -> dict[str, Any]:
    cid = ids["campaign_id"]
    return {
        "state": story.state(cid).state_hash,
        "kept_state": story.state(cid, branch_id=ids["raft"]).state_hash,
        "recall_swim": [h.text for h in story.recall(cid, "kelpie pearl swimmer", limit=20, branch_id=ids["dive"])],
    }


@pytest.mark.parametrize("point", POINTS)
def test_a_prune_killed_at_any_moment_ends_as_an_uninterrupted_prune(
    point: str, base: Path, clean: dict[str, Any], minilm: Any
) -> None:
    data = base.parent / point
    shutil.copytree(base, data, ignore=_IGNORED)
    kill_at(_CHILD, ["prune", str(data), point], point, data / "graph")
    with _restarted(data, minilm) as (story, found):
        assert found == ["pending"], found  # the crash left it recorded, unfinished
        world = _world(story, _ids(data))
        assert story.desk.pruning.finish() == []  # nothing left to finish
    assert world == clean, {k: (world[k], clean[k]) for k in world if world[k] != clean[k]}
