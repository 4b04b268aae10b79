"""What happened while we were away: the canon events, thread steps, scene ends and summaries on a line after one
turn up to another, as one seat may see them.

The span is read on the lineage of the later turn (the head by default; a turn on its own branch otherwise), so
two branches that share the earlier turn answer each for its own line. The earlier turn must be on that line and
no deeper. An event belongs to the span when it was committed at a depth after the earlier turn's, up to the later
one's, and is on the line (a branch forked before a commit does not see it): what the state as of the later turn
folds that the state as of the earlier one did not, but for what was committed at the earlier turn itself.

A player's seat sees what the secrets rule lets it (:class:`story.viewer.Viewer`): no event that carries a
visibility it does not see, names an entity hidden from it or names by id a fact or entity it does not see in the
state as of the later turn (failing closed: a retcon of a secret names the secret), no step of a thread it may not
see, no summary it may not read. A scene's outcomes are written for the table and pass as they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import structlog

from schemas.desk import HappenedEvent, Happenings, SceneEnded
from schemas.story import Scene, Turn, WorldStateView
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.errors import StoryInvalid, StoryNotFound
from story.lineage import Lineage
from story.memory import Memories
from story.viewer import Viewer

log = structlog.get_logger(__name__)

_THREAD_KINDS = frozenset({"thread_opened", "thread_advanced", "thread_resolved", "thread_abandoned"})
_GM = Viewer(gm=True)
_RECORD_ID = re.compile(r"\b(?:fact|ent)_[0-9a-f]{32}\b")
"""A fact's or an entity's generated id, as an event names it."""


def happened_between(
    core: StoryCore,
    campaign_id: str,
    from_turn_id: str,
    to_turn_id: str | None = None,
    *,
    state: Callable[..., WorldStateView],
    viewer: Viewer = _GM,
) -> Happenings:
    """What happened after ``from_turn_id`` up to ``to_turn_id`` (the head when None) on that turn's line;
    ``state`` reads the world as of a turn (:meth:`story.timeline.Timeline.state`) for a player's seat.

    Raises:
        StoryNotFound: either turn is not one of the campaign's (or the campaign has no turn yet).
        StoryInvalid: the earlier turn is not on the later one's line, or comes after it.
    """
    ctx = core.story.context(campaign_id)
    later = ctx.head if to_turn_id is None else _turn_of(core, campaign_id, to_turn_id)
    if later is None:
        raise StoryNotFound(f"campaign {campaign_id!r} has no turn yet")
    earlier = _turn_of(core, campaign_id, from_turn_id)
    lineage = core.lineage_for(ctx, to_turn_id)
    if earlier.depth > later.depth or not lineage.contains(earlier.branch_id, earlier.depth):
        raise StoryInvalid(f"turn {from_turn_id!r} is not on the line of turn {later.id!r} before it")
    turns = [t for t in core.story.turns_on(lineage, min_depth=earlier.depth + 1) if t.depth <= later.depth]
    events = _events(core, lineage, earlier.depth, later.depth)
    if not viewer.gm:
        events = _seen_events(viewer, state(campaign_id, turn_id=later.id), events)
    turn_ids = {t.id for t in turns}
    scenes = [from_props(Scene, r, key="id") for r in core.story.nodes(cypher.scenes_of(campaign_id))]
    ended = [
        SceneEnded(scene_id=s.id, title=s.title, end_turn_id=s.end_turn_id, outcomes=list(s.canonical_outcomes))
        for s in scenes
        if s.end_turn_id in turn_ids and s.branch_id in lineage.branch_ids
    ]
    summaries = [
        s
        for s in Memories(core).summaries(campaign_id, turn_id=later.id)
        if s.anchor_turn_id in turn_ids and viewer.sees_summary(s)
    ]
    log.info(
        "happened_between",
        campaign_id=campaign_id,
        from_turn_id=earlier.id,
        to_turn_id=later.id,
        events=len(events),
        scenes=len(ended),
    )
    return Happenings(
        campaign_id=campaign_id,
        from_turn_id=earlier.id,
        to_turn_id=later.id,
        branch_id=lineage.branch_id,
        turns=len(turns),
        events=events,
        threads=[e for e in events if e.kind in _THREAD_KINDS],
        scenes_ended=sorted(ended, key=lambda e: [t.id for t in turns].index(e.end_turn_id)),
        summaries=summaries,
    )


def _turn_of(core: StoryCore, campaign_id: str, turn_id: str) -> Turn:
    try:
        turn = core.story.turn(turn_id)
    except StoryNotFound:
        turn = None
    if turn is None or turn.campaign_id != campaign_id:
        raise StoryNotFound(f"no turn {turn_id!r} in campaign {campaign_id!r}")
    return turn


def _events(core: StoryCore, lineage: Lineage, after_depth: int, up_to_depth: int) -> list[HappenedEvent]:
    """The committed events on ``lineage`` at depths in (after_depth, up_to_depth], in commit order."""
    segments = [{"b": seg.branch_id, "d": seg.max_depth} for seg in lineage.segments]
    rows = core.graph.run(*cypher.events_on(segments, -1))
    out = []
    for r in rows:
        depth, seq = int(r["depth"]), int(r["seq"])
        if after_depth < depth <= up_to_depth and lineage.contains(r["branch"], depth, seq):
            payload = json.loads(r["payload"])
            out.append(HappenedEvent(seq=seq, kind=str(payload.get("kind", "")), depth=depth, event=payload))
    return sorted(out, key=lambda e: e.seq)


def _seen_events(viewer: Viewer, state: WorldStateView, events: list[HappenedEvent]) -> list[HappenedEvent]:
    """The events a player's seat may see, judged against the world as of the later turn."""
    hidden = viewer.hidden(state)
    seen_state = viewer.state(state)
    threads = {t.id for t in seen_state.threads}
    seen = {f.id for f in seen_state.facts} | {e.id for e in seen_state.entities}

    def shown(event: HappenedEvent) -> bool:
        if event.kind in _THREAD_KINDS and event.event.get("thread_id") not in threads:
            return False
        if not all(viewer.sees(v) for v in _visibilities(event.event)):
            return False
        strings = _strings(event.event)
        if hidden & set(strings):
            return False
        # a fact or entity it names by id must be one this seat sees (a retcon of a secret names the secret)
        return {i for text in strings for i in _RECORD_ID.findall(text)} <= seen

    return [e for e in events if shown(e)]


def _visibilities(value: Any) -> list[Any]:
    """Every ``visibility`` a JSON value carries (an event, or the records nested in it)."""
    if isinstance(value, dict):
        own = [value["visibility"]] if isinstance(value.get("visibility"), dict) else []
        return own + [v for k, x in value.items() if k != "visibility" for v in _visibilities(x)]
    if isinstance(value, list):
        return [v for x in value for v in _visibilities(x)]
    return []


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
