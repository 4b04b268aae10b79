"""SIGKILL while a trigger fires, at several moments, then a restart: the trigger fires exactly once.

A child process (tests/unit/trigger_crash_child.py) plays the turn that makes a proposal trigger's condition
hold on the embedded stores and is killed for real before the firing, after its activation is written, after
its proposal is made, and after the turn returned. The story then opens again on the folder and plays one more
turn (its evaluation finishes what was cut short, or fires the trigger then): there is exactly one activation,
finished, naming the one proposal the trigger made, and the scene's end makes that proposal canon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.crash_support import graph_servers_on
from tests.unit.trigger_crash_child import POINTS, open_story

pytestmark = [pytest.mark.servers, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_CHILD = [sys.executable, "-m", "tests.unit.trigger_crash_child"]


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*_CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("point", POINTS)
def test_a_trigger_killed_while_firing_fires_exactly_once(tmp_path: Path, point: str) -> None:
    setup = _child("setup", str(tmp_path))
    assert setup.returncode == 0, setup.stderr[-3000:]
    ids = json.loads(setup.stdout.strip().splitlines()[-1])
    killed = _child("kill", str(tmp_path), ids["campaign_id"], point)
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-3000:])
    deadline = time.monotonic() + 30
    while graph_servers_on(tmp_path / "graph") and time.monotonic() < deadline:  # its watchdog stops it
        time.sleep(0.1)

    story, graph = open_story(tmp_path)
    try:
        campaign_id = ids["campaign_id"]
        story.add_turn(campaign_id, "Dawn comes", narration="Grey light.")
        (fired,) = story.triggers.activations(campaign_id)
        mine = [p for p in story.proposals(ids["scene_id"]) if p.proposed_by == f"trigger:{ids['trigger_id']}"]
        assert [p.id for p in mine] == [fired.proposal_id], (point, fired, mine)
        pending = story.graph.run("MATCH (a:TriggerActivation) WHERE a.pending = true RETURN a.uid AS u", {})
        assert pending == []
        story.end_scene(ids["scene_id"])
        assert next(e for e in story.state(campaign_id).entities if e.id == ids["mira"]).status.value == "missing"
    finally:
        graph.close()
