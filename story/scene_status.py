"""A scene as a person reads it from a position: its status, end and outcomes on the line read.

A scene ends per branch: its ``scene_ended`` event is canon on the branch it was ended from, so a branch forked
while it was open keeps it open, and an undo (or a revert) that moves the head back before its end opens it again
on the head's line. The scene node keeps what was last written to it (``completed`` once any end was committed);
what a read returns is the scene *at a position* (the head by default; a branch's tip; a turn), from the scene
starts and ends on that position's lineage, as :meth:`story.graph.StoryGraph.scene_at` reads them:

- **active**: the scene is the one open there (the one :meth:`story.scenes.Scenes.active_scene` names and a
  second ``start_scene`` is refused for); no end, no outcomes yet on this line;
- **completed**: it ended on this line; its end turn and time are those of its latest end here, its outcomes
  those of its ends here (an end on another branch made none of them here);
- **not_begun**: it did not begin on this line (it began on another branch, or after the position).

A scene opened before scenes ended per branch (no ``start_seq``: an old scene, or one a transcript import wrote)
ended everywhere when its node was marked completed, as the fold reads it: such a completed node reads as stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schemas.story import Scene, SceneStatus
from stores.graph.base import GraphStore
from story import cypher
from story.gate import scene_of
from story.lineage import Lineage
from story.recall import ENDS


@dataclass(slots=True)
class SceneMarks:
    """The scene starts and ends on one lineage: the scenes begun there, the ends there of each scene (its
    ``scene_ended`` events' branch and commit sequence number), and the scene open at the position."""

    begun: set[str] = field(default_factory=set)
    ended: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    open_id: str | None = None


def scene_marks(graph: GraphStore, lineage: Lineage) -> SceneMarks:
    """The scene starts and ends on ``lineage`` (one read, as :meth:`story.graph.StoryGraph.scene_at` makes)."""
    segments = [{"b": seg.branch_id, "d": seg.max_depth} for seg in lineage.segments]
    rows = graph.run(*cypher.scene_marks_on(segments))
    on_line = sorted(
        (int(r["seq"]), str(r["branch"]), r["payload"])
        for r in rows
        if lineage.contains(r["branch"], int(r["depth"]), int(r["seq"]))
    )
    marks = SceneMarks()
    for seq, branch, payload in on_line:
        event = json.loads(payload)
        if event["kind"] == "scene_set":
            marks.open_id = event.get("active_scene_id")
            if marks.open_id:
                marks.begun.add(marks.open_id)
        else:
            ended = str(event["ended_scene_id"])
            marks.ended.setdefault(ended, set()).add((branch, seq))
            if ended == marks.open_id:
                marks.open_id = None
    return marks


def _legacy_completed(props: Mapping[str, Any]) -> bool:
    """A scene opened before scenes ended per branch, completed: it ended everywhere (as the fold reads it)."""
    return props.get("start_seq") is None and props.get("status") == SceneStatus.COMPLETED.value


def active_at(props: Mapping[str, Any], marks: SceneMarks) -> bool:
    """Whether the scene (its node's properties) is the one open at the marks' position."""
    return marks.open_id == props.get("id") and not _legacy_completed(props)


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _ends(props: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = props.get(ENDS)
    return list(json.loads(listed) if isinstance(listed, str) else listed or [])


def seen_at(props: Mapping[str, Any], marks: SceneMarks) -> Scene:
    """The scene (its node's properties) as read at the marks' position (see the module's doc)."""
    stored = scene_of(dict(props))
    if _legacy_completed(props):
        return stored
    unended: dict[str, Any] = {"ended_at": None, "end_turn_id": None, "canonical_outcomes": [], "summary": None}
    if active_at(props, marks):
        return stored.model_copy(update={"status": SceneStatus.ACTIVE, **unended})
    here = marks.ended.get(stored.id, set())
    if here:
        ends = [e for e in _ends(props) if (str(e.get("branch_id")), int(e.get("seq", -1))) in here]
        if not ends:  # ended before its ends were listed: the node says
            return stored
        ends.sort(key=lambda e: int(e["seq"]))
        last = ends[-1]
        outcomes = [o for e in ends for o in stored.canonical_outcomes[int(e["outcomes"][0]) : int(e["outcomes"][1])]]
        # an end listed before each end kept its own summary: the node's is its
        summary = last.get("summary") if "pending" in last else stored.summary
        return stored.model_copy(
            update={
                "status": SceneStatus.COMPLETED,
                "ended_at": _when(last["ended_at"]),
                "end_turn_id": str(last["turn_id"]),
                "canonical_outcomes": outcomes,
                "summary": summary,
            }
        )
    if stored.id not in marks.begun:
        return stored.model_copy(update={"status": SceneStatus.NOT_BEGUN, **unended})
    return stored  # begun here, neither open nor ended: another scene was set over it (as the node says)
