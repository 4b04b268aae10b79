"""A child process for tests/unit/test_media_job_crash.py: queue a media job, or run it on the development engine
and SIGKILL itself at a named moment of the run.

``python -m tests.unit.media_job_crash_child setup FOLDER`` prints the ids as JSON;
``python -m tests.unit.media_job_crash_child kill FOLDER CAMPAIGN POINT`` runs the campaign's queued jobs and dies
at POINT (``in_render``: claimed, rendering; ``after_blob``: the bytes written, the record not; ``after_finish``:
the record and the job's completion written).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from schemas.media import MediaJob
from story.media import Media
from story.media_engines import DevelopmentMediaEngine, media_engine
from tests.unit.test_story_campaign import new_campaign
from tests.unit.trigger_crash_child import open_story

POINTS = ("in_render", "after_blob", "after_finish")


def _die(*_: Any, **__: Any) -> Any:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def setup(folder: Path) -> dict[str, str]:
    story, graph = open_story(folder)
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We arrive", narration="The gate creaks.")
    scene = story.start_scene(campaign.id, title="The gate")
    job = story.media.submit(
        MediaJob(campaign_id=campaign.id, task="image", prompt="The gate at night", target="scene", scene_id=scene.id)
    )
    graph.close()
    return {"campaign_id": campaign.id, "scene_id": scene.id, "job_id": job.id}


def kill(folder: Path, campaign_id: str, point: str) -> None:
    story, _ = open_story(folder)
    story.media.engine = media_engine("development")
    if point == "in_render":
        DevelopmentMediaEngine.render = _die  # type: ignore[method-assign]
    elif point == "after_blob":
        Media._complete = _die  # type: ignore[method-assign]
    story.media.run_pending(campaign_id)
    _die()  # after_finish: the job done


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "setup":
        print(json.dumps(setup(where)))
    else:
        kill(where, sys.argv[3], sys.argv[4])
