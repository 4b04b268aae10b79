"""A child process for tests/unit/test_trigger_crash.py: set up a campaign with a proposal trigger, or play the
turn that fires it and SIGKILL itself at a named moment of the firing.

``python -m tests.unit.trigger_crash_child setup FOLDER`` prints the ids as JSON;
``python -m tests.unit.trigger_crash_child kill FOLDER POINT`` plays the firing turn and dies at POINT
(``before_fire``, ``after_activation``, ``after_propose``, ``after_turn``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from schemas.triggers import TriggerCreate
from story.service import StoryService
from story.triggers import Triggers
from tests.unit.test_story_campaign import gm_entity, new_campaign

POINTS = ("before_fire", "after_activation", "after_propose", "after_turn")


def open_story(folder: Path) -> tuple[StoryService, Any]:
    from stores.blob.local import LocalBlobStore
    from stores.graph.falkordb import EmbeddedFalkorGraphStore

    graph = EmbeddedFalkorGraphStore(folder / "graph")
    story = StoryService(graph, LocalBlobStore(folder / "blobs"))
    story.prepare()
    return story, graph


def _die(*_: Any, **__: Any) -> Any:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def setup(folder: Path) -> dict[str, str]:
    story, graph = open_story(folder)
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We arrive", narration="The gate creaks.")
    cast = story.start_scene(campaign.id, title="Cast")
    mira = gm_entity(story, cast.id, "character", "Mira")
    story.end_scene(cast.id)
    spec = {
        "name": "Vanishing",
        "conditions": [{"on": "turn_count", "at_least": 2}],
        "action": {"kind": "proposal", "authority": "gm", "events": [
            {"kind": "set_entity_status", "entity_id": mira, "status": "missing"}
        ]},
    }  # fmt: skip
    trigger = story.triggers.create(campaign.id, TriggerCreate.model_validate(spec))
    scene = story.start_scene(campaign.id, title="Night")
    graph.close()
    return {"campaign_id": campaign.id, "mira": mira, "trigger_id": trigger.id, "scene_id": scene.id}


def kill(folder: Path, campaign_id: str, point: str) -> None:
    story, _ = open_story(folder)
    if point == "before_fire":
        Triggers._fire = _die  # type: ignore[method-assign]
    elif point == "after_activation":
        Triggers._complete = _die  # type: ignore[method-assign]
    elif point == "after_propose":
        propose = story.triggers.scenes.propose

        def proposed_then_die(*args: Any, **kwargs: Any) -> Any:
            propose(*args, **kwargs)
            _die()

        story.triggers.scenes.propose = proposed_then_die  # type: ignore[method-assign]
    story.add_turn(campaign_id, "The lamps go out", narration="Darkness.")
    _die()  # after_turn: the turn and its firing done


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "setup":
        print(json.dumps(setup(where)))
    else:
        kill(where, sys.argv[3], sys.argv[4])
