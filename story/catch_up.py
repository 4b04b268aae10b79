"""What the story finishes at start-up: the scene ends and prunes a crash cut short, then each campaign's recall index
reconciled with the graph (the graph is the record; the index is derived)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from story import scene_end
from story.recall_sync import Reconciled

if TYPE_CHECKING:
    from story.service import StoryService

log = structlog.get_logger(__name__)


def finish_scene_ends(story: StoryService) -> int:
    """Finish every scene end a crash (or a failed former) left pending, in every campaign
    (:mod:`story.scene_end`). Returns how many were finished."""
    finished = 0
    for scene in scene_end.pending_scene_ends(story):
        story.finish_scene_end(scene.id)
        finished += not scene_end.end_pending(story, scene.id)
    return finished


def catch_up(story: StoryService) -> list[Reconciled]:
    """What the server runs at start-up: finish the scene ends and prunes a crash cut short, then reconcile the
    recall index of every campaign with the graph (event ``story_caught_up``)."""
    ends = finish_scene_ends(story)
    try:  # before the recall index is reconciled, so the turns of the branches they remove leave it too
        prunes = len(story.desk.pruning.finish())
    except Exception as exc:  # a prune left pending never stops the story from starting; the next prune finishes it
        log.warning("desk_prune_failed", what="finish", error=repr(exc))
        prunes = 0
    campaigns = story.list_campaigns() if story.recall_index is not None else []
    reconciled = []
    for campaign in campaigns:
        try:
            reconciled.append(story.reconcile_recall(campaign.id))
        except Exception as exc:  # a derived index never stops the story from starting; the next start retries
            log.warning("recall_index_failed", what="reconcile", campaign_id=campaign.id, error=repr(exc))
            reconciled.append(Reconciled(campaign.id, failed=repr(exc)))
    log.info(
        "story_caught_up",
        scene_ends=ends,
        prunes=prunes,
        campaigns=len(reconciled),
        added=sum(r.added + r.rewritten for r in reconciled),
        removed=sum(r.removed for r in reconciled),
        failed=sum(r.failed is not None for r in reconciled),
    )
    return reconciled
