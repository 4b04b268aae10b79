"""A scene's end as one unit: the gate's canon, then the summary and every memory it forms, nothing lost.

A scene ends in two commits that a crash cannot split into a lost end:

1. The gate's transaction (:meth:`story.scenes.Scenes.end_scene`) writes the canon and marks the scene
   completed *with its end pending* (``end_pending``, :data:`story.cypher.END_PENDING`).
2. The scene is read as it ended, a :class:`~story.formation.SceneMemoryFormer` drafts its summary and the
   memories of those present (outside any lock: a model may take seconds), and one transaction writes
   the summary, every memory and clears the mark (:func:`form_scene`). Nothing of a formation is ever
   half written.

Whatever stopped between the two (a SIGKILL, a power cut, a former that failed) leaves a completed scene
whose end is pending, and :func:`finish_scene_end` finishes it: when the scene is ended again (the call
answers ``already_completed``), and at start-up for every pending end (:meth:`StoryService.catch_up
<story.service.StoryService.catch_up>`, run by the server and by ``lorekeeper reindex``). The ids of what
is formed are derived from what it is (the anchor, observer, kind and text of a memory; the scene and text
of a summary), and a formation writes nothing that is already there, so forming again adds nothing.

The recall index follows the graph: once the formation is committed, the scene's records the index
misses (its turns, canon outcomes, summary and memories) are written in one batch
(:func:`story.recall_sync.sync_scene`); a crash before that is caught up by the reconciliation at start-up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from schemas.common import EntityStatus
from schemas.story import Scene, SceneStatus, Summary, SummaryScope, Turn
from story import cypher
from story.core import SKIP
from story.formation import FormedScene, NamedEntity, SceneMemoryFormer
from story.gate import scene_of
from story.graph import CampaignContext, Writes, node_props

if TYPE_CHECKING:
    from story.service import StoryService

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Formation:
    """What forming one scene wrote: the summary (or not), memories added, and drafts already there."""

    scene_id: str
    former: str
    summary_added: bool = False
    memories_added: int = 0
    already_there: int = 0
    dropped: int = 0


def formed_id(prefix: str, *parts: str) -> str:
    """The id of a formed record, derived from what it is: the same draft always gets the same id."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]
    return f"{prefix}_{digest}"


def end_pending(service: StoryService, scene_id: str) -> bool:
    """Whether a scene's end is committed but what it forms is not written yet."""
    return bool(service.story.node("Scene", scene_id).get(cypher.END_PENDING))


def pending_scene_ends(service: StoryService) -> list[Scene]:
    """Every scene, of every campaign, whose end a crash (or a failed former) left unfinished."""
    return [scene_of(row) for row in service.story.nodes(cypher.scenes_ending())]


def scene_turns(service: StoryService, scene: Scene) -> list[Turn]:
    """The scene's turns on its end turn's line, oldest first (a turn of the scene left on another
    branch by an undo is not part of what happened)."""
    if scene.end_turn_id is None:
        return []
    end = service.get_turn(scene.end_turn_id)
    start_depth = service.get_turn(scene.start_turn_id).depth if scene.start_turn_id else -1
    if end.depth <= start_depth:
        return []
    line = service.history(scene.campaign_id, turn_id=end.id, last=end.depth - start_depth)
    return [t for t in line if t.scene_id == scene.id]


def cast_at(service: StoryService, scene: Scene, turns: Sequence[Turn]) -> tuple[list[NamedEntity], list[NamedEntity]]:
    """Who was present (the scene's participants and whoever spoke in it, as the world knows them at
    the scene's end, destroyed ones aside) and every entity of the world then."""
    world = service.world_state(scene.campaign_id, turn_id=scene.end_turn_id)
    entities = {
        eid: NamedEntity(eid, e["name"], kind=e["kind"], aliases=tuple(e.get("aliases") or ()))
        for eid, e in sorted(world.entities.items())
    }
    ids = [*scene.participant_entity_ids, *(t.speaker.entity_id for t in turns if t.speaker.entity_id)]
    present = [
        entities[i]
        for i in dict.fromkeys(ids)
        if i in entities and world.entities[i]["status"] != EntityStatus.DESTROYED.value
    ]
    return present, list(entities.values())


def form_scene(
    service: StoryService, scene: Scene, former: SceneMemoryFormer | None, *, finishing: bool = False
) -> Formation:
    """Form an ended scene's summary and memories, and write those not there yet in one transaction.

    The GM's summary (``end_scene(summary=...)``) is the scene summary when there is one; the former
    still forms the memories. A scene without turns, or no former, forms nothing. With ``finishing``
    the same transaction marks the scene's end finished, and nothing is written if another process
    finished it first.
    """
    name = getattr(former, "name", type(former).__name__) if former is not None else "none"
    turns = scene_turns(service, scene)
    formed, present = FormedScene(summary=None, former=name), set[str]()
    if former is not None and turns and scene.end_turn_id is not None:
        cast, entities = cast_at(service, scene, turns)
        formed = former.form(scene, turns, cast, entities=entities)
        present = {p.entity_id for p in cast}
    result = _commit(service, scene, formed, present, finishing=finishing)
    log.info(
        "memories_formed",
        scene_id=scene.id,
        campaign_id=scene.campaign_id,
        former=formed.former,
        summary=int(result.summary_added),
        memories=result.memories_added,
        already_there=result.already_there,
        dropped=result.dropped,
        present=len(present),
        notes=formed.notes or None,
        reason=None if turns else "the scene has no turns",
    )
    return result


def _commit(
    service: StoryService, scene: Scene, formed: FormedScene, present: set[str], *, finishing: bool
) -> Formation:
    """Write what ``formed`` adds (and, ``finishing``, the end's mark cleared) as one change to the campaign."""

    def build(ctx: CampaignContext, writes: Writes) -> tuple[Formation, Any]:
        if finishing and not end_pending(service, scene.id):
            return Formation(scene.id, formed.former), SKIP  # finished meanwhile, by another process
        result = _queue(service, scene, formed, present, writes)
        if finishing:
            writes.add(*cypher.end_finished(scene.id))
        return result, ({} if writes.statements else SKIP)

    return service._mutate(scene.campaign_id, "scene_memories", build, allow_archived=True)


def _queue(service: StoryService, scene: Scene, formed: FormedScene, present: set[str], writes: Writes) -> Formation:
    """Queue the summary and the memories of ``formed`` that are not in the graph yet; count what was dropped."""
    if scene.end_turn_id is None:
        return Formation(scene.id, formed.former)
    end = service.story.turn(scene.end_turn_id)
    place: dict[str, Any] = {"anchor_turn_uid": end.id, "branch_id": end.branch_id, "depth": end.depth}
    summary_added = False
    text = scene.summary or formed.summary
    if text and text.strip():
        summaries = service.story.nodes(cypher.anchored_at("Summary", end.id))
        if not any(s.get("scene_id") == scene.id and s.get("text") == text for s in summaries):
            summary = Summary(
                id=formed_id("sum", scene.id, text),
                campaign_id=scene.campaign_id,
                scope=SummaryScope.SCENE,
                scene_id=scene.id,
                anchor_turn_id=end.id,
                from_turn_id=scene.start_turn_id,
                text=text,
                token_count=len(text.split()),
            )
            writes.add(*cypher.create_anchored_at("Summary", end.id, [node_props(summary, **place)]))
            summary_added = True
    held = service.story.nodes(cypher.anchored_at("Memory", end.id))  # retracted ones too: they stay withdrawn
    known = {row["uid"] for row in held} | {(r["observer_entity_id"], r["kind"], r["text"]) for r in held}
    rows: list[dict[str, Any]] = []
    there = dropped = 0
    for draft in formed.memories:
        if draft.observer_entity_id not in present or draft.anchor_turn_id != end.id or draft.retracted_at:
            dropped += 1  # a former may only give memories to those present, at the scene's end, as held
            continue
        key = (draft.observer_entity_id, draft.kind.value, draft.text)
        memory_id = formed_id("mem", end.id, *key)
        if memory_id in known or key in known:
            there += 1
            continue
        known |= {memory_id, key}
        memory = draft.validated_copy(id=memory_id, campaign_id=scene.campaign_id)
        rows.append(node_props(memory, **place))
    if rows:
        writes.add(*cypher.create_anchored_at("Memory", end.id, rows))
    return Formation(scene.id, formed.former, summary_added, len(rows), there, dropped)


def finish_scene_end(service: StoryService, scene_id: str) -> Formation | None:
    """Finish a completed scene's end if it is pending: form its memories and summary with the service's
    former and commit them with the end's mark cleared. Never raises for the former's sake: the gate's
    canon is committed, and a former's failure (a model, a bug in a plug-in former) must not make the
    scene's end look failed; the end stays pending then, to be finished later. Returns None when
    there was nothing to finish or the former failed."""
    scene = service.get_scene(scene_id)
    if scene.status is not SceneStatus.COMPLETED or not end_pending(service, scene_id):
        return None
    try:
        return form_scene(service, scene, service.memory_former, finishing=True)
    except Exception as exc:  # any former's failure; the scene has ended either way
        log.warning(
            "memory_formation_failed",
            scene_id=scene.id,
            campaign_id=scene.campaign_id,
            error=f"{type(exc).__name__}: {exc}",
        )
        return None
