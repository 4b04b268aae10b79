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
<story.service.StoryService.catch_up>`, run by the server and by ``lorekeeper reindex``).

A scene ends per branch (a fork while it was active), so one scene may end several times, even at the
same end turn: each end is listed on the scene node (``ends_json``, :func:`story.recall.end_mark`), is
pending on its own (its entry's ``pending``) and forms its own summary and memories, placed where its
canon was committed (the end's branch and commit sequence number, the ``seq`` of the records). The ids of
what an end forms are derived from the end (its branch and sequence number) and what it is (observer,
kind and text of a memory; the scene and text of a summary): forming the same end again gets the same ids
and writes nothing already there, and two ends never share one.

The recall index follows the graph: once the formation is committed, the scene's records the index
misses (its turns, canon outcomes, summary and memories) are written in one batch
(:func:`story.recall_sync.sync_scene`); a crash before that is caught up by the reconciliation at start-up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from schemas.common import EntityStatus
from schemas.story import Scene, Summary, SummaryScope, Turn
from story import cypher
from story.core import SKIP
from story.formation import FormedScene, NamedEntity, SceneMemoryFormer
from story.gate import scene_of
from story.graph import CampaignContext, Writes, node_props
from story.recall import ENDS
from story.summary_amends import Retold, amended, retold_since

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


@dataclass(frozen=True, slots=True)
class EndToForm:
    """One end of a scene, as forming needs it: its end turn, where its canon was committed (``branch_id``
    and the campaign's commit sequence number ``seq``; None for an end made before ends were listed, which
    keeps its end turn's place) and the GM's summary given at it."""

    turn_id: str
    branch_id: str | None = None
    seq: int | None = None
    summary: str | None = None

    @property
    def key(self) -> str:
        """What the ids of what it forms derive from: the end itself (an unlisted end: its end turn)."""
        return self.turn_id if self.seq is None else f"{self.branch_id}\x1f{self.seq}"


def _listed(props: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = props.get(ENDS)
    return list(json.loads(listed) if isinstance(listed, str) else listed or [])


def _end_of(entry: Mapping[str, Any], props: Mapping[str, Any]) -> EndToForm:
    # an entry listed before ends were pending one by one carries no summary of its own: the node's is its
    summary = entry.get("summary") if "pending" in entry else props.get("summary")
    return EndToForm(str(entry["turn_id"]), str(entry["branch_id"]), int(entry["seq"]), summary)


def ends_of(props: Mapping[str, Any]) -> list[EndToForm]:
    """Every end of a scene node (its properties), oldest first; a scene ended before ends were listed has
    one at its end turn, if it has one."""
    listed = _listed(props)
    if listed:
        return [_end_of(e, props) for e in listed]
    turn_id = props.get("end_turn_id")
    return [EndToForm(str(turn_id), summary=props.get("summary"))] if turn_id and props.get("ended_at") else []


def pending_ends(props: Mapping[str, Any]) -> list[EndToForm]:
    """The ends of a scene node whose formation is still to do, oldest first. A node whose end is pending
    but whose ends carry no mark of their own (written before they did) has its last end pending."""
    if not props.get(cypher.END_PENDING):
        return []
    listed = _listed(props)
    if any("pending" in e for e in listed):
        return [_end_of(e, props) for e in listed if e.get("pending")]
    return ends_of(props)[-1:]


def end_pending(service: StoryService, scene_id: str) -> bool:
    """Whether an end of a scene is committed but what it forms is not written yet."""
    return bool(service.story.node("Scene", scene_id).get(cypher.END_PENDING))


def _finished(props: Mapping[str, Any], end: EndToForm) -> dict[str, Any]:
    """The scene node's properties once ``end`` is formed: its mark cleared, the scene's end pending while
    another end is."""
    listed = _listed(props)
    for entry in listed:
        if end.seq is not None and entry.get("seq") == end.seq and entry.get("branch_id") == end.branch_id:
            entry["pending"] = False
    others = any(e.get("pending") for e in listed)
    return {cypher.END_PENDING: others, **({ENDS: json.dumps(listed)} if listed else {})}


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
    service: StoryService,
    scene: Scene,
    former: SceneMemoryFormer | None,
    *,
    end: EndToForm | None = None,
    finishing: bool = False,
) -> Formation:
    """Form the summary and memories of one end of a scene (``end``; by default its latest, or none when
    ``finishing``: an end without a turn), and write those not there yet in one transaction.

    The GM's summary given at the end (``end_scene(summary=...)``) is the scene summary when there is one;
    the former still forms the memories. A scene without turns, or no former, forms nothing. With
    ``finishing`` the same transaction marks the end finished, and nothing is written if another process
    finished it first.
    """
    if end is None and not finishing:
        end = next(iter(ends_of(service.story.node("Scene", scene.id))[-1:]), None)
    name = getattr(former, "name", type(former).__name__) if former is not None else "none"
    if end is not None:  # the scene as it ended there
        scene = scene.model_copy(update={"end_turn_id": end.turn_id, "summary": end.summary})
    turns = scene_turns(service, scene) if end is not None else []
    formed, present = FormedScene(summary=None, former=name), set[str]()
    if former is not None and turns:
        cast, entities = cast_at(service, scene, turns)
        formed = former.form(scene, turns, cast, entities=entities)
        present = {p.entity_id for p in cast}
    result = _commit(service, scene, end, formed, present, finishing=finishing)
    log.info(
        "memories_formed",
        scene_id=scene.id,
        campaign_id=scene.campaign_id,
        branch_id=end.branch_id if end else None,
        end_seq=end.seq if end else None,
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
    service: StoryService,
    scene: Scene,
    end: EndToForm | None,
    formed: FormedScene,
    present: set[str],
    *,
    finishing: bool,
) -> Formation:
    """Write what ``formed`` adds (and, ``finishing``, the end's mark cleared) as one change to the campaign."""

    def build(ctx: CampaignContext, writes: Writes) -> tuple[Formation, Any]:
        props = service.story.node("Scene", scene.id)
        if finishing and not (end in pending_ends(props) if end else props.get(cypher.END_PENDING)):
            return Formation(scene.id, formed.former), SKIP  # finished meanwhile, by another process
        if end is None:  # an end without a turn forms nothing: finishing it only clears its mark
            if finishing:
                writes.add(*cypher.update_scene(scene.id, {cypher.END_PENDING: False}))
            return Formation(scene.id, formed.former), ({} if writes.statements else SKIP)
        # a retcon committed since the end's canon: what it forms tells the canon as it stands now
        retold = retold_since(service.story, scene.campaign_id, props, end.seq)
        result = _queue(service, scene, end, formed, present, writes, retold)
        if finishing:
            writes.add(*cypher.update_scene(scene.id, _finished(props, end)))
        return result, ({} if writes.statements else SKIP)

    return service._mutate(scene.campaign_id, "scene_memories", build, allow_archived=True)


def _queue(
    service: StoryService,
    scene: Scene,
    end: EndToForm,
    formed: FormedScene,
    present: set[str],
    writes: Writes,
    retold: Sequence[Retold] = (),
) -> Formation:
    """Queue the summary and the memories of ``formed`` that the end has not formed yet, their words amended by the
    retcons ``retold`` (their ids are those of the words formed); count what was dropped."""
    turn = service.story.turn(end.turn_id)
    place: dict[str, Any] = {
        "anchor_turn_uid": turn.id,
        "branch_id": end.branch_id or turn.branch_id,  # where the end's canon went (a fork the gate made)
        "depth": turn.depth,
        "seq": end.seq,  # what a listing and recall cut by (story.lineage), as the state cuts its canon
    }

    def of_this_end(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if r.get("seq") == end.seq]

    summary_added = False
    text = scene.summary or formed.summary
    if text and text.strip():
        summaries = of_this_end(service.story.nodes(cypher.anchored_at("Summary", turn.id)))
        summary_id = formed_id("sum", *((scene.id, text) if end.seq is None else (scene.id, end.key, text)))
        # formed already: the same text, or the same id (its text amended by a retcon since: story.summary_amends)
        if not any(
            s.get("scene_id") == scene.id and (s.get("uid") == summary_id or s.get("text") == text) for s in summaries
        ):
            summary = Summary(
                id=summary_id,
                campaign_id=scene.campaign_id,
                scope=SummaryScope.SCENE,
                scene_id=scene.id,
                anchor_turn_id=turn.id,
                from_turn_id=scene.start_turn_id,
                text=(told := amended(text, retold, told_by_end=True)[0]),
                token_count=len(told.split()),
            )
            writes.add(*cypher.create_anchored_at("Summary", turn.id, [node_props(summary, **place)]))
            summary_added = True
    # this end's memories, retracted ones too (they stay withdrawn)
    held = of_this_end(service.story.nodes(cypher.anchored_at("Memory", turn.id)))
    known = {row["uid"] for row in held} | {(r["observer_entity_id"], r["kind"], r["text"]) for r in held}
    rows: list[dict[str, Any]] = []
    there = dropped = 0
    for draft in formed.memories:
        if draft.observer_entity_id not in present or draft.anchor_turn_id != turn.id or draft.retracted_at:
            dropped += 1  # a former may only give memories to those present, at the scene's end, as held
            continue
        key = (draft.observer_entity_id, draft.kind.value, draft.text)
        memory_id = formed_id("mem", end.key, *key)
        if memory_id in known or key in known:
            there += 1
            continue
        known |= {memory_id, key}
        memory = draft.validated_copy(id=memory_id, campaign_id=scene.campaign_id, text=amended(draft.text, retold)[0])
        rows.append(node_props(memory, **place))
    if rows:
        writes.add(*cypher.create_anchored_at("Memory", turn.id, rows))
    return Formation(scene.id, formed.former, summary_added, len(rows), there, dropped)


def finish_scene_end(service: StoryService, scene_id: str) -> Formation | None:
    """Finish a completed scene's pending ends, oldest first: form each one's memories and summary with
    the service's former and commit them with its mark cleared. Never raises for the former's sake: the
    gate's canon is committed, and a former's failure (a model, a bug in a plug-in former) must not make
    the scene's end look failed; that end stays pending then, to be finished later. Returns the last
    end's formation, None when there was nothing to finish or its former failed."""
    scene = service.scene_record(scene_id)  # as stored: its ends may be on other lines than the head's
    props = service.story.node("Scene", scene_id)
    if not props.get(cypher.END_PENDING):
        return None
    ends: list[EndToForm | None] = [*pending_ends(props)]
    if not ends:
        ends = [None]  # an end without a turn (a campaign without turns): it forms nothing, only finishes
    formation = None
    for end in ends:
        try:
            formation = form_scene(service, scene, service.memory_former, end=end, finishing=True)
        except Exception as exc:  # any former's failure; the scene has ended either way
            formation = None
            log.warning(
                "memory_formation_failed",
                scene_id=scene.id,
                campaign_id=scene.campaign_id,
                end_seq=end.seq if end else None,
                error=f"{type(exc).__name__}: {exc}",
            )
    return formation
