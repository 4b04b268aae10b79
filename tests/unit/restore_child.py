"""A child process for the restore kill test (tests/unit/test_restore_crash.py).

    python -m tests.unit.restore_child setup DATA_DIR                    # a table with a checkpoint behind canon
    python -m tests.unit.restore_child restore DATA_DIR [PAUSE_AT] [naive]  # restore it, pausing at PAUSE_AT
    python -m tests.unit.restore_child world DATA_DIR                    # print the world the stores hold (JSON)

``setup`` writes ``DATA_DIR/table.json`` (ids, and the world before the restore). The restore brings the campaign
back to a named checkpoint behind a scene's canon (a character moved, an item changed hands, an attribute
changed, a relationship ended, two beings created, one holding the other), so it re-creates or overwrites live
entities, re-homes placements and relationships, deletes entities leaf to root and forks a branch. With
``PAUSE_AT`` it prints ``PAUSED <point>`` and sleeps there, for the test to SIGKILL it. The moments are found by
watching the graph from outside the code under test (the statements given to it), so they exist whatever the
restore's implementation:

- ``begin``: the first statement of the restore's write was given to the graph;
- ``upsert``: the live entities' create-or-overwrite was given;
- ``rehome``: the last placement or relationship edge statement was given;
- ``delete``: the deletion of the live entities that no longer exist was given;
- ``commit``: every statement was given and the transaction is about to be committed;
- ``done``: ``restore_checkpoint`` returned.

``naive`` swaps the graph's transactions for ones that run each statement at once (no atomicity): the
test shows that its kills leave a mix, so the test can tell.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

POINTS = ("begin", "upsert", "rehome", "delete", "commit", "done")


def _open(data: Path) -> tuple[Any, Any]:
    from schemas.settings import Settings
    from stores.factory import open_blob_store, open_graph_store
    from story.service import StoryService

    settings = Settings(data_dir=data)
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    story = StoryService(graph, blobs)
    story.prepare()
    return story, graph


def _entity(story: Any, scene_id: str, kind: str, name: str, **attributes: Any) -> str:
    content = {"kind": kind, "name": name, "attributes": attributes}
    proposal = story.propose(scene_id, type="entity", content=content, authority="gm", confidence=1.0)
    return f"ent_{proposal.id.split('_', 1)[1]}"


def _events(story: Any, scene_id: str, *events: dict[str, Any]) -> None:
    story.propose(scene_id, type="state_change", content={"events": list(events)}, authority="gm", confidence=1.0)


def world(story: Any, campaign_id: str) -> dict[str, Any]:
    """What the stores hold for the campaign: the head, the fold there, and the live world in the graph."""
    campaign = story.get_campaign(campaign_id)
    live = story.live_world(campaign_id)
    return {
        "head": campaign.head_turn_id,
        "branches": len(story.branches(campaign_id)),
        "state_hash": story.state(campaign_id).state_hash,
        "live_entities": sorted(json.dumps(n, sort_keys=True) for n in live.entities.values()),
        "live_placement": sorted(f"{a} {k} {b}" for (a, k), b in live.placement.items()),
        "live_relationships": sorted(" ".join(v) + f" {k}" for k, v in live.relationships.items()),
    }


def setup(data: Path) -> None:
    story, graph = _open(data)
    story.memory_former = None
    w = story.create_world("Eldoria")
    from schemas.story import StoryProfile

    campaign = story.create_campaign(w.id, "The Ring", StoryProfile(genre="fantasy"))
    story.add_turn(campaign.id, "I arrive in town", narration="The gates open.")
    scene = story.start_scene(campaign.id, title="Arrival")
    ids = {
        "ayla": _entity(story, scene.id, "character", "Ayla", hp=12),
        "bren": _entity(story, scene.id, "character", "Bren"),
        "inn": _entity(story, scene.id, "location", "The Gilded Goose"),
        "crypt": _entity(story, scene.id, "location", "The Crypt"),
        "ring": _entity(story, scene.id, "item", "Silver Ring"),
    }
    story.end_scene(scene.id)
    story.add_turn(campaign.id, "I enter the inn", narration="Warm light and ale.")
    scene = story.start_scene(campaign.id, title="The inn")
    _events(
        story,
        scene.id,
        {"kind": "current_location_set", "entity_id": ids["ayla"], "location_entity_id": ids["inn"]},
        {"kind": "current_location_set", "entity_id": ids["bren"], "location_entity_id": ids["inn"]},
        {"kind": "possession_set", "item_entity_id": ids["ring"], "holder_entity_id": ids["bren"]},
        {
            "kind": "relationship_added",
            "relationship_id": "rel_friends",
            "source_entity_id": ids["ayla"],
            "target_entity_id": ids["bren"],
            "relationship_kind": "friend_of",
        },
    )
    story.end_scene(scene.id)
    checkpoint = story.create_checkpoint(campaign.id, "at the inn")
    scene = story.start_scene(campaign.id, title="The crypt")  # canon at the checkpoint's turn, after it
    ghoul = _entity(story, scene.id, "creature", "Ghoul")
    story.end_scene(scene.id)
    scene = story.start_scene(campaign.id, title="Below")
    key = _entity(story, scene.id, "item", "Bone Key")
    _events(
        story,
        scene.id,
        {"kind": "current_location_set", "entity_id": ids["ayla"], "location_entity_id": ids["crypt"]},
        {"kind": "current_location_set", "entity_id": ghoul, "location_entity_id": ids["crypt"]},
        {"kind": "possession_set", "item_entity_id": ids["ring"], "holder_entity_id": ids["ayla"]},
        {"kind": "possession_set", "item_entity_id": key, "holder_entity_id": ghoul},
        {"kind": "set_entity_attribute", "entity_id": ids["ayla"], "attribute": "hp", "op": "increment", "amount": -5},
        {"kind": "relationship_ended", "relationship_id": "rel_friends", "reason": "Bren stole it"},
    )
    story.end_scene(scene.id)
    story.add_turn(campaign.id, "We go down", narration="Bones crunch underfoot.")
    table = {"campaign_id": campaign.id, "checkpoint_id": checkpoint.id, "before": world(story, campaign.id)}
    (data / "table.json").write_text(json.dumps(table))
    graph.close()


def _pause(point: str) -> None:
    print(f"PAUSED {point}", flush=True)
    while True:
        time.sleep(60)


def _is_edge(query: str) -> bool:
    return any(f":{kind}" in query for kind in ("LOCATED_IN", "HELD_BY", "RELATED"))


class _Immediate:
    """A 'transaction' that runs each statement at once: what a restore without one would do."""

    def __init__(self, graph: Any, run: Any) -> None:
        self.graph, self._run = graph, run

    def run(self, query: str, params: Any = None) -> Any:
        return self._run(query, params)


class _Watched:
    """The statements of one transaction as they are given to the graph, pausing at ``pause_at``."""

    def __init__(self, tx: Any, pause_at: str) -> None:
        self.tx, self.pause_at = tx, pause_at
        self.given = 0
        self.edges = False

    def run(self, query: str, params: Any = None) -> Any:
        if self.pause_at == "rehome" and self.edges and not _is_edge(query):
            _pause("rehome")  # every placement and relationship statement was given
        rows = self.tx.run(query, params)
        self.given += 1
        self.edges = self.edges or _is_edge(query)
        if self.pause_at == "begin" and self.given == 1:
            _pause("begin")
        if self.pause_at == "upsert" and "MERGE (n:LiveEntity" in query:
            _pause("upsert")
        if self.pause_at == "delete" and "LiveEntity" in query and "DETACH DELETE" in query:
            _pause("delete")
        return rows

    def finished(self) -> None:
        """Every statement was given; the transaction commits next."""
        if self.pause_at == "commit" or (self.pause_at == "rehome" and self.edges):
            _pause(self.pause_at)


def _watch(graph: Any, pause_at: str, naive: bool) -> None:
    """Wrap the graph's transactions so the process pauses at ``pause_at`` (see the module's doc)."""
    transaction, run = graph.transaction, graph.run

    @contextmanager
    def watched() -> Iterator[Any]:
        with transaction() as inner:
            tx = _Watched(_Immediate(graph, run) if naive else inner, pause_at)
            yield tx
            tx.finished()

    graph.transaction = watched


def restore(data: Path, pause_at: str | None, naive: bool) -> None:
    table = json.loads((data / "table.json").read_text())
    story, graph = _open(data)
    if pause_at is not None:
        _watch(graph, pause_at, naive)
    story.restore_checkpoint(table["campaign_id"], table["checkpoint_id"])
    if pause_at == "done":
        _pause(pause_at)
    print(json.dumps(world(story, table["campaign_id"])), flush=True)
    graph.close()


def show(data: Path) -> None:
    table = json.loads((data / "table.json").read_text())
    story, graph = _open(data)
    print(json.dumps(world(story, table["campaign_id"])), flush=True)
    graph.close()


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "setup":
        setup(folder)
    elif command == "world":
        show(folder)
    else:
        args = sys.argv[3:]
        restore(folder, next((a for a in args if a != "naive"), None), "naive" in args)
