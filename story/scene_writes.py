"""A scene as it is opened and written: its node and its opening scene_set canon at the head
(:func:`scene_opening`), queued for a bulk write of several scenes in one transaction (:func:`queue_scene`,
the transcript import's path), and what an end sets on a scene without proposals (:func:`ended_props`).
:class:`story.scenes.Scenes` writes one scene the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.common import Authority, utc_now
from schemas.events import SceneSet
from schemas.story import Scene, SceneStatus
from story import cypher
from story.errors import StoryInvalid
from story.gate import CanonBatch, write_canon
from story.graph import CampaignContext, Writes, node_props
from story.rules import check_events
from story.state import WorldState


def scene_opening(
    ctx: CampaignContext,
    branch_id: str,
    order: int,
    *,
    title: str | None,
    location_entity_id: str | None = None,
    participant_entity_ids: Sequence[str] = (),
) -> tuple[Scene, SceneSet]:
    """A scene opened at the head, and its scene_set event (the scene state it starts with)."""
    scene = Scene(
        campaign_id=ctx.id,
        branch_id=branch_id,
        order=order,
        title=title,
        location_entity_id=location_entity_id,
        participant_entity_ids=list(participant_entity_ids),
        start_turn_id=ctx.head.id if ctx.head else None,
    )
    event = SceneSet(
        turn_id=ctx.head.id if ctx.head else None,
        scene_id=scene.id,
        active_scene_id=scene.id,
        location_entity_id=location_entity_id,
        present_entity_ids=list(participant_entity_ids),
    )
    return scene, event


def queue_scene(
    ctx: CampaignContext,
    writes: Writes,
    state: WorldState,
    scene: Scene,
    event: SceneSet,
    *,
    version: int,
    ended: dict[str, Any] | None = None,
) -> None:
    """Queue a scene from :func:`scene_opening` as :meth:`Scenes.start_scene` writes it at ``ctx``'s head and event
    sequence (its node and its scene_set canon, committed in ``version``), for a bulk write of several scenes in
    one transaction; with ``ended`` (:func:`ended_props`) its node is written ended, as :meth:`Scenes.end_scene`
    leaves a scene without proposals.

    No reads: the caller read what :meth:`Scenes.open_scenes_in_bulk` reads. ``state`` (the world at the head)
    is brought past the event in place.

    Raises:
        StoryInvalid: the event breaks the rules.
    """
    props = node_props(scene, depth=ctx.head_depth)
    if ended is not None:
        props.update(ended)  # what end_scene's SET adds, in the CREATE
    writes.add(*cypher.create_scene(ctx.id, props))
    first_seq = ctx.event_seq + 1
    checked = check_events(state, [event], first_seq=first_seq, authority=Authority.GM.value, in_place=True)
    if checked.issues:
        raise StoryInvalid(
            "the scene's location and participants break the rules: " + "; ".join(i.message for i in checked.issues)
        )
    batch = CanonBatch()
    batch.add([event], authority=Authority.GM.value, confidence=1.0)
    write_canon(
        ctx,
        writes,
        batch,
        branch_id=scene.branch_id,
        depth=ctx.head_depth,
        first_seq=first_seq,
        scene_id=scene.id,
        version=version,
    )


def ended_props(scene: Scene, end_turn_id: str) -> dict[str, Any]:
    """What :meth:`Scenes.end_scene` sets on a scene without proposals whose last turn is ``end_turn_id``."""
    return {
        "status": SceneStatus.COMPLETED.value,
        "ended_at": utc_now().isoformat(),
        "canonical_outcomes": list(scene.canonical_outcomes),
        "end_turn_id": end_turn_id,
    }
