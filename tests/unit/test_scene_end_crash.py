"""SIGKILL during a scene end, at several moments, then a restart: nothing of the end is lost.

A child process (tests/unit/scene_end_child.py) ends a scene of 30 characters present and 40 lines of
speech (a clean end forms 390 memories and a summary) on the embedded stores, and is killed for real at a
named moment: before the gate's commit, after it, with 62 memories in the graph, as the recall index is
about to take the memories, and after the end returned. The services then start on the folder as the
server does (:func:`serve.services.open_services`), and the scene must be either still active with nothing
of its end (and end again to the full count) or completed with everything a clean end leaves: its canon
(the GM's event and the proposal the GM edited, never the one the GM rejected nor the unreviewed one, which
stays pending), its summary and every memory, in the graph and in the recall index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.story import ProposalStatus
from tests.unit.crash_support import kill_at, restarted
from tests.unit.scene_end_child import CANON_TITLE, EDITED_TITLE, POINTS, REJECTED_TITLE, WAITING_TITLE

pytestmark = [pytest.mark.servers, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_CHILD = [sys.executable, "-m", "tests.unit.scene_end_child"]
_IGNORED = shutil.ignore_patterns("*.sock")


def _run_child(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([*_CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def _kill_at(data: Path, point: str) -> None:
    """End the scene in a child that pauses at ``point``; SIGKILL it there, and wait for its graph to stop."""
    kill_at("tests.unit.scene_end_child", ["end", str(data), point], point, data / "graph")


_REVIEWED = (
    "MATCH (h:Happening {campaign_id: $c})-[:ESTABLISHED_BY]->(:StateEvent)-[:FROM_REVIEW]->() RETURN h.title AS t"
)


def _counts(story: Any, campaign_id: str, scene_id: str) -> dict[str, Any]:
    """What a scene's end leaves: its status, canon, summary, memories, and the recall index against the graph."""
    from story.recall import Recollection

    index = story.recall_index
    expected = {r.id for r in Recollection(story._core, index).records_of(campaign_id)}
    memories = story.memories(campaign_id)
    return {
        "status": story.get_scene(scene_id).status.value,
        "canon": sum(1 for h in story.happenings(campaign_id) if h.get("title") == CANON_TITLE),
        "reviewed": sorted(r["t"] for r in story.graph.run(_REVIEWED, {"c": campaign_id})),
        "never_canon": [h for h in story.happenings(campaign_id) if h.get("title") in (REJECTED_TITLE, WAITING_TITLE)],
        "pending": sorted(p.content.title for p in story.proposals(scene_id, ProposalStatus.PENDING)),  # type: ignore[union-attr]
        "summaries": len([s for s in story.summaries(campaign_id) if s.scene_id == scene_id]),
        "memories": len(memories),
        "memory_texts": sorted((m.kind.value, m.text) for m in memories),
        "records": len(expected),
        "indexed": len(index.present(sorted(expected))),
        "index_count": index.count(campaign_id),
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the campaign, its 30 characters and the played scene (set up once)."""
    folder = tmp_path_factory.mktemp("scene-end") / "base"
    folder.mkdir()
    _run_child("setup", str(folder))
    return folder


@pytest.fixture(scope="module")
def clean(base: Path, minilm: Any) -> dict[str, Any]:
    """What a clean end leaves (no kill)."""
    data = base.parent / "clean"
    shutil.copytree(base, data, ignore=_IGNORED)
    _run_child("end", str(data))
    ids = json.loads((data / "scene.json").read_text())
    with restarted(data, minilm) as story:
        counts = _counts(story, ids["campaign_id"], ids["scene_id"])
    assert counts["memories"] == 390 and counts["summaries"] == 1 and counts["canon"] == 1
    assert counts["reviewed"] == [EDITED_TITLE] and counts["never_canon"] == [] and counts["pending"] == [WAITING_TITLE]
    assert counts["indexed"] == counts["records"] == counts["index_count"]
    return counts


@pytest.mark.parametrize("point", POINTS)
def test_a_scene_end_killed_at_any_moment_loses_nothing(
    point: str, base: Path, clean: dict[str, Any], minilm: Any
) -> None:
    data = base.parent / point
    shutil.copytree(base, data, ignore=_IGNORED)
    ids = json.loads((data / "scene.json").read_text())
    _kill_at(data, point)

    with restarted(data, minilm) as story:
        counts = _counts(story, ids["campaign_id"], ids["scene_id"])
        if counts["status"] == "active":  # killed before the gate committed: nothing of the end is there
            assert (counts["canon"], counts["reviewed"], counts["summaries"], counts["memories"]) == (0, [], 0, 0)
            report = story.end_scene(ids["scene_id"])
            assert not report.already_completed and report.events_committed == 2  # the GM's event and the edit
            counts = _counts(story, ids["campaign_id"], ids["scene_id"])
        else:
            again = story.end_scene(ids["scene_id"])
            assert again.already_completed
            assert _counts(story, ids["campaign_id"], ids["scene_id"]) == counts  # ending again adds nothing
    assert counts == clean, {k: (counts[k], clean[k]) for k in counts if k != "memory_texts"}
