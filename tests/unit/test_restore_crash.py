"""SIGKILL during a restore, at several moments, then a restart: the old world or the new one, never a mix.

A child process (tests/unit/restore_child.py) restores a named checkpoint that lies behind a scene's canon, on
the embedded stores: the restore forks a branch, moves the head, and brings the live world back in its three
phases (re-create or overwrite entities, re-home placements and relationships, delete what no longer exists,
leaf to root). It is killed for real as the first statement is given, after each phase was given, just before
the commit and after the restore returned. A fresh process then reads what the stores hold: the head, the
branches, the fold at the head and the live world in the graph must equal exactly what they were before the
restore or what a clean restore leaves.

The same kills on a restore whose statements each run at once (``naive``: no transaction) leave a mix, which
this test tells apart.
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

from tests.unit.crash_support import kill_at
from tests.unit.restore_child import POINTS

pytestmark = [pytest.mark.servers, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_CHILD = [sys.executable, "-m", "tests.unit.restore_child"]
_IGNORED = shutil.ignore_patterns("*.sock")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_child(*args: str) -> str:
    run = subprocess.run([*_CHILD, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def _world(data: Path) -> dict[str, Any]:
    """What the stores hold, read by a fresh process (the restart)."""
    return json.loads(_run_child("world", str(data)).strip().splitlines()[-1])


def _kill_at(data: Path, point: str, *extra: str) -> None:
    """Restore in a child that pauses at ``point``; SIGKILL it there, and wait for its graph to stop."""
    kill_at("tests.unit.restore_child", ["restore", str(data), point, *extra], point, data / "graph")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the table and its checkpoint behind canon (set up once)."""
    folder = tmp_path_factory.mktemp("restore") / "base"
    folder.mkdir()
    _run_child("setup", str(folder))
    return folder


@pytest.fixture(scope="module")
def worlds(base: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The world before the restore, and the one a clean restore leaves (read after a restart)."""
    before = json.loads((base / "table.json").read_text())["before"]
    data = base.parent / "clean"
    shutil.copytree(base, data, ignore=_IGNORED)
    _run_child("restore", str(data))
    after = _world(data)
    assert after["head"] != before["head"] and after["branches"] == before["branches"] + 1
    assert after["state_hash"] != before["state_hash"]
    for part in ("live_entities", "live_placement", "live_relationships"):
        assert after[part] != before[part], part  # each phase has work to do
    return before, after


@pytest.mark.parametrize("point", POINTS)
def test_a_restore_killed_at_any_moment_leaves_the_old_world_or_the_new(
    point: str, base: Path, worlds: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before, after = worlds
    data = base.parent / point
    shutil.copytree(base, data, ignore=_IGNORED)
    _kill_at(data, point)
    found = _world(data)
    if point == "done":
        assert found == after
    elif point in ("begin", "upsert", "rehome", "delete", "commit"):
        assert found == before, {k: (found[k], before[k]) for k in found if found[k] != before[k]}
    assert found in (before, after)


@pytest.mark.parametrize("point", ["upsert", "rehome", "delete"])
def test_the_kill_test_tells_a_restore_without_a_transaction(
    point: str, base: Path, worlds: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """Its statements run one by one: killed between phases it leaves a mix, and the check above would fail."""
    before, after = worlds
    data = base.parent / f"naive-{point}"
    shutil.copytree(base, data, ignore=_IGNORED)
    _kill_at(data, point, "naive")
    found = _world(data)
    assert found not in (before, after)
