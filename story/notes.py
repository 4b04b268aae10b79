"""The GM's notes, ideas and TODOs on a scene: narrative records beside the story, never canon.

A :class:`~schemas.desk.SceneNote` is anchored to a turn (the one given, else the head) of its scene's line, like
a memory: listed and recalled only from that turn's future on its lineage. It is never a state event, never
judged by the gate and never in the state; it travels in a campaign bundle as a record of the campaign
(``SceneNote``), beside the canon, not in it.

It is the GM's alone unless the GM shares it with the table or with characters (its
:class:`~schemas.visibility.Visibility`). It is indexed into the campaign's recall (kind ``note``) with the
rest of the campaign's past, so the GM's recall finds it; every reader who is not the GM is cut by the secrets
rule (:meth:`story.viewer.Viewer.hits`, which looks each note hit up among the notes it is given and fails
closed): a player's recall, and the narrator's prompt (narrated from the table's seat), see a note only when
its visibility lets them.

Writes go to the graph first; the recall index follows (``recall_index_failed`` when it is down, caught up by
:func:`story.recall_sync.reconcile`, which reads the notes through :func:`note_records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from schemas.common import utc_now
from schemas.desk import GM_ONLY, NoteKind, SceneNote
from schemas.errors import LorekeeperError
from schemas.recall import RecallKind, RecallRecord
from schemas.story import Scene, Turn
from schemas.visibility import Visibility
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.cypher import Statement
from story.errors import InvalidReference, StoryInvalid, StoryNotFound
from story.graph import anchored_on, node_props

if TYPE_CHECKING:
    from story.recall_index import RecallIndex

log = structlog.get_logger(__name__)

LABEL = "SceneNote"


def _set(note_id: str, props: dict[str, Any]) -> Statement:
    return "MATCH (n:SceneNote {uid: $u}) SET n += $p RETURN n", {"u": note_id, "p": props}


def _reopen(note_id: str) -> Statement:
    return "MATCH (n:SceneNote {uid: $u}) REMOVE n.done_at RETURN n", {"u": note_id}


def _delete(note_id: str) -> Statement:
    return "MATCH (n:SceneNote {uid: $u}) DETACH DELETE n", {"u": note_id}


def note_record(note: SceneNote, anchor: Turn) -> RecallRecord:
    """A note's recall record, placed at its anchor turn (its visibility is looked up when it is recalled)."""
    return RecallRecord(
        id=note.id,
        kind=RecallKind.NOTE,
        campaign_id=note.campaign_id,
        anchor_turn_id=anchor.id,
        branch_id=anchor.branch_id,
        depth=anchor.depth,
        scene_id=note.scene_id,
        speakers=["GM"],
        story_time=anchor.story_time,
        text=note.text,
        salience=0.6,
        created_at=note.created_at,
    )


def note_records(core: StoryCore, campaign_id: str, turns: Mapping[str, Turn]) -> list[RecallRecord]:
    """The recall records of every note of a campaign (all branches) whose anchor is among ``turns``."""
    rows = core.story.nodes(cypher.anchored_of_campaign(LABEL, campaign_id))
    notes = [from_props(SceneNote, r, key="id") for r in rows]
    return [note_record(n, turns[n.anchor_turn_id]) for n in notes if n.anchor_turn_id in turns]


class Notes:
    """The GM's notes on scenes, written to the graph and followed into recall (``index`` None: recall is off)."""

    def __init__(self, core: StoryCore, index: RecallIndex | None) -> None:
        self.core = core
        self.story = core.story
        self.index = index

    def add(
        self,
        scene_id: str,
        text: str,
        *,
        kind: NoteKind = NoteKind.NOTE,
        turn_id: str | None = None,
        visibility: Visibility | None = None,
    ) -> SceneNote:
        """A note on a scene, anchored at ``turn_id`` (a turn of the scene's campaign, not of another scene) or
        else the head (when the scene is on the head's line; otherwise the scene's end, or start, turn).

        Raises:
            StoryNotFound: no such scene.
            InvalidReference: the turn is not one of the campaign's, or belongs to another scene.
            StoryInvalid: no turn given and the campaign has none yet.
        """
        scene = from_props(Scene, self.story.node("Scene", scene_id), key="id")
        anchor = self._anchor(scene, turn_id)
        note = SceneNote(
            campaign_id=scene.campaign_id,
            scene_id=scene.id,
            anchor_turn_id=anchor.id,
            kind=kind,
            text=text,
            visibility=visibility or GM_ONLY,
        )
        props = node_props(note, anchor_turn_uid=anchor.id, branch_id=anchor.branch_id, depth=anchor.depth)
        self.core.graph.run(*cypher.create_anchored(LABEL, anchor.id, props))
        log.info("note_added", campaign_id=note.campaign_id, note_id=note.id, scene_id=scene.id, kind=kind.value)
        self._index(note, anchor)
        return note

    def _anchor(self, scene: Scene, turn_id: str | None) -> Turn:
        if turn_id is None:
            ctx = self.story.context(scene.campaign_id)
            placed = scene.end_turn_id or scene.start_turn_id
            if ctx.head is not None:
                at = self.story.turn(placed) if placed else None
                if at is None or ctx.lineage().contains(at.branch_id, at.depth):
                    return ctx.head
            # a scene off the head's line: the note goes on the scene's own line, at its end (or start)
            if placed is None:
                raise StoryInvalid(f"no turn to anchor a note on scene {scene.id!r} to yet: give turn_id")
            turn_id = placed
        try:
            turn = self.story.turn(turn_id)
        except StoryNotFound:
            turn = None
        if turn is None or turn.campaign_id != scene.campaign_id:
            raise InvalidReference("turn_id", f"no turn {turn_id!r} in campaign {scene.campaign_id!r}")
        if turn.scene_id is not None and turn.scene_id != scene.id:
            raise InvalidReference("turn_id", f"turn {turn_id!r} is of scene {turn.scene_id!r}, not {scene.id!r}")
        return turn

    def get(self, campaign_id: str, note_id: str) -> SceneNote:
        """A note of the campaign; another campaign's answers like a missing one."""
        rows = self.core.graph.run(*cypher.node(LABEL, note_id))
        if not rows or rows[0]["n"].get("campaign_id") != campaign_id:
            raise StoryNotFound(f"no note {note_id!r} in campaign {campaign_id!r}")
        return from_props(SceneNote, rows[0]["n"], key="id")

    def update(
        self,
        campaign_id: str,
        note_id: str,
        *,
        text: str | None = None,
        visibility: Visibility | None = None,
        done: bool | None = None,
    ) -> SceneNote:
        """Change a note's text, share it (or take it back), mark a TODO done or open again.

        Raises:
            StoryNotFound: no such note in the campaign.
            StoryInvalid: ``done`` on a note that is not a TODO (nothing is written then).
        """
        note = self.get(campaign_id, note_id)
        if done is not None and note.kind is not NoteKind.TODO:
            raise StoryInvalid(f"note {note_id!r} is a {note.kind.value}: only a TODO is done or open")
        now = utc_now()
        changes: dict[str, Any] = {"updated_at": now}
        if text is not None:
            changes["text"] = text
        if visibility is not None:
            changes["visibility"] = visibility
        if done is not None:
            changes["done_at"] = (note.done_at or now) if done else None
        changed = note.validated_copy(**changes)  # checked whole before anything is written
        props = {k: v for k, v in node_props(changed).items() if k in {"text", "visibility_json", "updated_at"}}
        if changed.done_at is not None:
            props["done_at"] = changed.done_at.isoformat()
        self.core.graph.run(*_set(note_id, props))
        if done is False:
            self.core.graph.run(*_reopen(note_id))
        log.info(
            "note_updated",
            campaign_id=campaign_id,
            note_id=note_id,
            fields=sorted(k for k in changes if k != "updated_at"),
        )
        if text is not None:
            self._index(changed, self.story.turn(changed.anchor_turn_id))
        return changed

    def delete(self, campaign_id: str, note_id: str) -> SceneNote:
        """Remove a note (a narrative record, not canon: nothing else rests on it) and take it out of recall."""
        note = self.get(campaign_id, note_id)
        self.core.graph.run(*_delete(note_id))
        log.info("note_deleted", campaign_id=campaign_id, note_id=note_id)
        if self.index is not None:
            try:
                self.index.delete([note_id])
            except (LorekeeperError, OSError) as exc:
                log.warning("recall_index_failed", what="note", note_id=note_id, error=str(exc))
        return note

    def at(
        self,
        campaign_id: str,
        *,
        scene_id: str | None = None,
        kind: NoteKind | None = None,
        open_only: bool = False,
        turn_id: str | None = None,
        branch_id: str | None = None,
    ) -> list[SceneNote]:
        """The notes anchored on the line up to a position (the head; a branch's tip; a turn), oldest first."""
        ctx = self.story.context(campaign_id)
        lineage = self.core.lineage_for(ctx, turn_id, branch_id)
        rows = anchored_on(self.story.nodes(cypher.anchored_on(LABEL, campaign_id, lineage.branch_ids)), lineage)
        notes = [from_props(SceneNote, r, key="id") for r in rows]
        return [
            n
            for n in notes
            if (scene_id is None or n.scene_id == scene_id)
            and (kind is None or n.kind is kind)
            and not (open_only and (n.kind is not NoteKind.TODO or n.done_at is not None))
        ]

    def of_campaign(self, campaign_id: str) -> list[SceneNote]:
        """Every note of the campaign, on every branch (what a recall hit is looked up in)."""
        rows = self.story.nodes(cypher.anchored_of_campaign(LABEL, campaign_id))
        return [from_props(SceneNote, r, key="id") for r in rows]

    def _index(self, note: SceneNote, anchor: Turn) -> None:
        if self.index is None:
            return
        try:
            self.index.write([note_record(note, anchor)])
        except (LorekeeperError, OSError) as exc:
            # the note is written; the index catches up on reconcile or reindex
            log.warning("recall_index_failed", what="note", note_id=note.id, error=str(exc))
