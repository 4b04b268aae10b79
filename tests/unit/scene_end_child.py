"""A child process for the scene-end crash test (tests/unit/test_scene_end_crash.py).

The scene holds a GM's event and three of the extractor's: one the GM edited, one the GM rejected and one
nobody reviewed, so the end applies the reviews in its commit and leaves the unreviewed one pending.

    python -m tests.unit.scene_end_child setup DATA_DIR            # a campaign, 30 characters, a played scene
    python -m tests.unit.scene_end_child end DATA_DIR [PAUSE_AT]   # end that scene, pausing at PAUSE_AT

``setup`` writes ``DATA_DIR/scene.json`` (the campaign and scene ids) and exits. ``end`` ends the scene on
the embedded stores under ``DATA_DIR``; with ``PAUSE_AT`` it prints ``PAUSED <point>`` and sleeps at that
moment of the end, for the test to SIGKILL it there. The moments are found by watching the stores from
outside the code under test (the graph's commits and Memory count, the recall index's writes), so the same
points exist whatever the scene end's implementation:

- ``before_gate``: the gate's commit is about to be sent;
- ``after_gate``: the gate's commit returned (the scene is completed, its canon written);
- ``mid_formation``: the graph holds at least 62 memories of the scene;
- ``mid_index``: the recall index is about to write the first batch holding a memory;
- ``after_end``: ``end_scene`` returned.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from schemas.settings import Settings
from schemas.story import InputMode, ReviewAction, Speaker, SpeakerKind, StoryProfile

CHARACTERS = 30
LINES = 40
SCENE_TITLE = "The council of thirty"
CANON_TITLE = "The council votes to march"
EDITED_TITLE = "Brenna is named marshal of the host"  # a GM's edit of the extractor's 0.45 proposal
REJECTED_TITLE = "The council disbands"  # the extractor's 0.92 proposal the GM rejected
WAITING_TITLE = "A raven lands on the table"  # the extractor's 0.30 proposal nobody reviewed
POINTS = ("before_gate", "after_gate", "mid_formation", "mid_index", "after_end")
_MID_FORMATION = 62

_NAMES = [
    "Aldric", "Brenna", "Cassia", "Dorian", "Elowen", "Fenwick", "Galen", "Hestia", "Isolde", "Jorah",
    "Kestrel", "Lysander", "Maren", "Nyx", "Orrin", "Perrin", "Quilla", "Rowan", "Seren", "Talia",
    "Ulric", "Vesna", "Wren", "Xander", "Yara", "Zephyr", "Anselm", "Beatrix", "Corwin", "Delphine",
]  # fmt: skip
_THINGS = ["granary", "bridge", "watchtower", "mill", "chapel", "forge", "harbour", "orchard"]
_PLACES = ["the river ford", "the old road", "the salt marsh", "the north gate", "the pine hills"]
_STATES = ["burned down", "was flooded", "lies abandoned", "was seized by bandits", "collapsed in the storm"]


def _line(i: int) -> str:
    """The i-th line of speech: a claim about the land (three content words or more, not a question)."""
    thing, place = _THINGS[i % len(_THINGS)], _PLACES[(i // len(_THINGS)) % len(_PLACES)]
    state = _STATES[(i * 3) % len(_STATES)]
    return f"The {thing} near {place} {state} {i + 2} days ago."


def _open(data: Path) -> tuple[Any, Any]:
    """The story service on the embedded stores under ``data`` (the recall index on), and the stores to close."""
    from stores.factory import open_blob_store, open_graph_store
    from story.recall_index import open_recall_index
    from story.service import StoryService

    settings = Settings(data_dir=data)
    graph, blobs = open_graph_store(settings), open_blob_store(settings)
    recall = open_recall_index(settings)
    story = StoryService(graph, blobs, recall=recall)
    story.prepare()
    return story, (recall, graph, blobs)


def setup(data: Path) -> None:
    story, stores = _open(data)
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "The Thirty", StoryProfile(genre="fantasy"))
    story.add_turn(campaign.id, "We gather the clans", narration="Riders come from every valley.")
    cast = story.start_scene(campaign.id, title="Cast")
    ids = []
    for name in _NAMES[:CHARACTERS]:
        content = {"kind": "character", "name": name, "attributes": {}}
        proposal = story.propose(cast.id, type="entity", content=content, authority="gm", confidence=1.0)
        ids.append(f"ent_{proposal.id.split('_', 1)[1]}")
    story.end_scene(cast.id)
    scene = story.start_scene(campaign.id, title=SCENE_TITLE, participant_entity_ids=ids)
    for i in range(LINES):
        who = i % CHARACTERS
        speaker = Speaker(kind=SpeakerKind.ENTITY, entity_id=ids[who])
        narration = f"{_NAMES[who]} speaks to the council."
        turn = story.add_turn(
            campaign.id, _line(i), speaker=speaker, input_mode=InputMode.DIALOGUE, narration=narration
        )
    content = {"title": CANON_TITLE, "description": "the clans march north at dawn"}
    story.propose(scene.id, type="event", content=content, authority="gm", confidence=1.0)
    # what the extractor proposed, and the GM's reviews the end applies in its one commit
    extracted = {"authority": "system", "turn_id": turn.id, "evidence": {"turn_ids": [turn.id]}}
    low, high, _ = (
        story.propose(scene.id, type="event", content={"title": title}, confidence=confidence, **extracted).id
        for title, confidence in (("Someone leads", 0.45), (REJECTED_TITLE, 0.92), (WAITING_TITLE, 0.3))
    )
    edit = {"type": "event", "title": EDITED_TITLE}
    story.review(low, "gm:setup", action=ReviewAction.EDIT, rationale="Brenna leads.", content=edit)
    story.review(high, "gm:setup", action=ReviewAction.REJECT, rationale="The council holds.")
    (data / "scene.json").write_text(json.dumps({"campaign_id": campaign.id, "scene_id": scene.id}))
    for store in stores:
        store.close()


def _pause(point: str) -> None:
    print(f"PAUSED {point}", flush=True)
    while True:
        time.sleep(60)


def _watch(story: Any, scene_id: str, pause_at: str) -> None:
    """Wrap the stores so the process pauses at ``pause_at`` (see the module's doc)."""
    graph, index, commits = story.graph, story.recall_index, story.story

    if pause_at in ("before_gate", "after_gate"):
        commit = commits.commit

        def watched_commit(ctx: Any, writes: Any, *, kind: str, **props: Any) -> int:
            if kind == "gate" and pause_at == "before_gate":
                _pause(pause_at)
            version = commit(ctx, writes, kind=kind, **props)
            if kind == "gate":
                _pause(pause_at)
            return int(version)

        commits.commit = watched_commit
    elif pause_at == "mid_formation":
        run, transaction = graph.run, graph.transaction

        def memories() -> int:
            rows = run("MATCH (m:Memory) RETURN count(m) AS n")
            return int(rows[0]["n"])

        def watched_run(query: str, params: Any = None) -> Any:
            rows = run(query, params)
            if "Memory" in query and "CREATE" in query and memories() >= _MID_FORMATION:
                _pause(pause_at)
            return rows

        class WatchedTransaction:
            def __enter__(self) -> Any:
                self.inner = transaction()
                return self.inner.__enter__()

            def __exit__(self, *exc: Any) -> Any:
                out = self.inner.__exit__(*exc)
                if exc[0] is None and memories() >= _MID_FORMATION:
                    _pause(pause_at)
                return out

        graph.run, graph.transaction = watched_run, WatchedTransaction
    elif pause_at == "mid_index":
        write = index.write

        def watched_write(records: Any, vectors: Any = None) -> int:
            if any(r.kind.value == "memory" for r in records):
                _pause(pause_at)
            return int(write(records, vectors))

        index.write = watched_write


def end(data: Path, pause_at: str | None) -> None:
    ids = json.loads((data / "scene.json").read_text())
    story, stores = _open(data)
    if pause_at is not None:
        _watch(story, ids["scene_id"], pause_at)
    report = story.end_scene(ids["scene_id"])
    if pause_at == "after_end":
        _pause(pause_at)
    print(json.dumps({"events_committed": report.events_committed}), flush=True)
    for store in stores:
        store.close()


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "setup":
        setup(folder)
    else:
        end(folder, sys.argv[3] if len(sys.argv) > 3 else None)
