"""SIGKILL while turn records are written behind the turn (story/recall_writer.py), then a restart.

A child process (this module run as ``python -m tests.unit.test_recall_writer_crash DATA POINT``) opens the
embedded stores under ``DATA``, plays three turns and waits for their records to be indexed, then holds the
recall index's writer thread at ``POINT`` for good while more turns are played and returned to the caller:

- ``pending``: the writer took the first held turn's record and has written nothing; the later turns'
  records wait in its queue;
- ``text_uncommitted``: the batch's full-text documents are added to the tantivy writer, not committed;
- ``between``: the full-text commit is done, the vectors are about to be written;
- ``after_batch``: the first batch is written (text and vectors); the later turns wait in the queue.

The child then prints ``PAUSED <point>`` and the test SIGKILLs it. The services start on the folder as the
server does (:func:`serve.services.open_services`, start-up catch-up included), and every turn the child
acknowledged must be in the graph and recalled (its distinctive word found by the full-text leg and by the
vector leg), each record indexed once, the index holding exactly what the graph holds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

from schemas.settings import Settings
from schemas.story import StoryProfile
from tests.unit.crash_support import restarted

pytestmark = pytest.mark.servers

ROOT = Path(__file__).resolve().parents[2]
POINTS = ("pending", "text_uncommitted", "between", "after_batch")
BEFORE = ("quokka", "harpsichord", "obsidian")  # indexed before the writer is held
HELD = ("kumquat", "zeppelin", "walrus", "saxophone")  # played while it is held
_CHILD = [sys.executable, "-m", "tests.unit.test_recall_writer_crash"]
_IGNORED = shutil.ignore_patterns("*.sock")


def _narration(word: str) -> str:
    return f"A {word} lies on the table."


# -- the child -----------------------------------------------------------------------------------------


def _hold(index: Any, point: str, held: threading.Event) -> None:
    """Make the index's writer thread stop for good at ``point`` (``held`` set once it is there)."""

    def stop() -> NoReturn:
        held.set()
        while True:
            time.sleep(60)

    writer = index._writer
    write_batch = writer._write

    def after_batch(records: Any) -> None:
        write_batch(records)
        stop()

    if point == "pending":
        writer._write = lambda records: stop()
    elif point == "after_batch":
        writer._write = after_batch
    elif point == "between":
        index.vectors.upsert = lambda collection, points: stop()
    elif point == "text_uncommitted":
        text_write = index.text._write

        def held_write(operation: Any, action: str) -> Any:
            def added_not_committed(tantivy_writer: Any) -> None:
                operation(tantivy_writer)
                stop()

            return text_write(added_not_committed, action)

        index.text._write = held_write
    else:
        raise ValueError(f"unknown point {point!r}")


def child(data: Path, point: str) -> None:
    from stores.factory import open_blob_store, open_graph_store
    from story.recall_index import open_recall_index
    from story.service import StoryService

    settings = Settings(data_dir=data)
    recall = open_recall_index(settings)
    story = StoryService(open_graph_store(settings), open_blob_store(settings), recall=recall)
    story.prepare()
    world = story.create_world("Eldoria")
    campaign = story.create_campaign(world.id, "The Held Quill", StoryProfile(genre="fantasy"))
    acked = [story.add_turn(campaign.id, f"I look at the {w}", narration=_narration(w)).id for w in BEFORE]
    recall.flush()
    held = threading.Event()
    _hold(recall, point, held)
    acked.append(story.add_turn(campaign.id, f"I look at the {HELD[0]}", narration=_narration(HELD[0])).id)
    assert held.wait(60), f"the writer never reached {point}"
    for word in HELD[1:]:  # acknowledged while the writer is held: pending in its queue
        acked.append(story.add_turn(campaign.id, f"I look at the {word}", narration=_narration(word)).id)
    (data / "acked.json").write_text(json.dumps({"campaign_id": campaign.id, "turns": acked}))
    print(f"PAUSED {point} pending={recall._writer.pending}", flush=True)
    while True:
        time.sleep(60)


# -- the test ------------------------------------------------------------------------------------------


def _graph_servers_on(folder: Path) -> set[int]:
    """redis-server processes working in ``folder`` (the child's embedded graph)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"redis" not in (entry / "cmdline").read_bytes() or (entry / "cwd").resolve() != folder.resolve():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
                found.add(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def _kill_at(data: Path, point: str) -> str:
    """Play in a child held at ``point``; SIGKILL it there and wait for its graph server to stop."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [*_CHILD, str(data), point], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert child.stdout is not None
        seen = []
        for line in child.stdout:  # its logs, until it pauses (or ends without pausing)
            seen.append(line)
            if line.startswith("PAUSED"):
                break
        assert seen and seen[-1].startswith(f"PAUSED {point} "), f"no pause at {point}: {''.join(seen)[-2000:]}"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    graph = data / "graph"
    deadline = time.monotonic() + 30
    while _graph_servers_on(graph) and time.monotonic() < deadline:  # its watchdog stops it
        time.sleep(0.1)
    assert not _graph_servers_on(graph), "the killed child's graph server outlived it"
    return seen[-1].strip()


# what the index holds of the first held turn when the child is killed: (full text, vectors)
LEFT = {
    "pending": (False, False),
    "text_uncommitted": (False, False),
    "between": (True, False),
    "after_batch": (True, True),
}


def _left(data: Path, minilm: Any, turns: list[str]) -> tuple[set[str], set[str]]:
    """The turns the index holds, in full text and in vectors, as the kill left it (before any repair)."""
    from story.recall_index import open_recall_index

    index = open_recall_index(Settings(data_dir=data), embedder=minilm)
    try:
        return {d.id for d in index.text.get_many(turns)}, index.present(turns)
    finally:
        index.close()


@pytest.mark.parametrize("point", POINTS)
def test_turns_acknowledged_before_a_kill_are_recalled_after_the_restart(
    point: str, tmp_path: Path, minilm: Any
) -> None:
    from schemas.search import SearchFilters
    from story.recall import Recollection

    data = tmp_path / point
    data.mkdir()
    paused = _kill_at(data, point)
    acked = json.loads((data / "acked.json").read_text())
    campaign_id, turns = acked["campaign_id"], acked["turns"]
    assert len(turns) == len(BEFORE) + len(HELD), paused
    text, vectors = _left(data, minilm, turns)
    first = turns[len(BEFORE)]
    assert set(turns[: len(BEFORE)]) <= text & vectors
    assert (first in text, first in vectors) == LEFT[point], (paused, text, vectors)
    assert not set(turns[len(BEFORE) + 1 :]) & (text | vectors), paused  # never written

    with restarted(data, minilm) as story:
        index = story.recall_index
        expected = {r.id: r for r in Recollection(story._core, index).records_of(campaign_id)}
        assert set(turns) <= set(expected)  # acknowledged: in the graph
        # the index holds exactly what the graph holds, each record once (text and vectors)
        assert index.stored_texts(campaign_id) == {i: r.text for i, r in expected.items()}
        assert index.count(campaign_id) == len(expected)
        assert {d.id for d in index.text.get_many(sorted(expected))} == set(expected)
        assert index.text.count(SearchFilters(campaign=[campaign_id])) == len(expected)
        filters = SearchFilters(campaign=[campaign_id])
        for turn_id, word in zip(turns, [*BEFORE, *HELD], strict=True):
            text_hits = index.text.search(word, filters=filters, limit=3, highlight=False)
            assert [h.id for h in text_hits] == [turn_id], (point, word, text_hits)
            vector = index.embedder.embed_query(word)
            vector_hits = index.vectors.search(index.collection, list(vector), filters=filters, limit=1)
            assert [h.id for h in vector_hits] == [turn_id], (point, word, vector_hits)
            assert story.recall(campaign_id, word, limit=1)[0].turn_id == turn_id


if __name__ == "__main__":
    child(Path(sys.argv[1]), sys.argv[2])
