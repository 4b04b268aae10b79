"""SIGKILL while a media job runs, at several moments, then a restart: the job ends completed with exactly one
media record.

A child process (tests/unit/media_job_crash_child.py) runs a queued image job on the development engine over the
embedded stores and is killed for real while the engine renders (the job claimed, processing), after the bytes
are written but before the record, and after the record and the job's completion. The story then opens again
on the folder with the lease at zero (a job still processing is taken for abandoned) and runs the campaign's
jobs: the job is completed, names the one media record on its scene, whose bytes are in the blob store; a job
the killed runner had claimed is counted as retried once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schemas.common import JobStatus
from story.media_engines import media_engine
from tests.unit.crash_support import graph_servers_on
from tests.unit.media_job_crash_child import POINTS
from tests.unit.trigger_crash_child import open_story

pytestmark = [pytest.mark.servers, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_CHILD = [sys.executable, "-m", "tests.unit.media_job_crash_child"]


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*_CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("point", POINTS)
def test_a_media_job_killed_mid_run_completes_once_after_a_restart(tmp_path: Path, point: str) -> None:
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
        cid = ids["campaign_id"]
        left = story.media.job(cid, ids["job_id"])
        expected = JobStatus.COMPLETED if point == "after_finish" else JobStatus.PROCESSING
        assert left.status is expected, (point, left)
        story.media.engine = media_engine("development")
        story.media.lease_s = 0.0
        story.media.run_pending(cid)
        job = story.media.job(cid, ids["job_id"])
        assert job.status is JobStatus.COMPLETED and job.retry_count == (0 if point == "after_finish" else 1), job
        (record,) = story.media.records(cid)
        assert record.id == job.asset_id and record.job_id == job.id
        assert [m.id for m in story.scene_media(ids["scene_id"])] == [record.id]
        data = story.media.content(cid, record.id)[1]
        assert b"The gate at night" in data and len(data) == record.size_bytes
        assert story.media.run_pending(cid) == []  # nothing left to run
    finally:
        graph.close()
