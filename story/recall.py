"""Campaign recall: every turn, scene summary, canon outcome and memory, indexed and recalled by meaning.

The graph stays the record; the memory index (:mod:`story.recall_index`) is derived from it. Writes
follow the story's own commits: a narrated turn is indexed once its narration is told (a new take
re-indexes it), a memory or summary when it is added, a scene's summary and canon outcomes when it
ends. Those index writes come after the graph commit and never undo it: if the index is down the
story goes on (event ``recall_index_failed``) and the scene's end repairs what is missing, and
:meth:`Recollection.rebuild` rebuilds a campaign from the graph (``lorekeeper reindex``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from schemas.errors import LorekeeperError
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.story import Memory, Scene, SpeakerKind, Summary, Turn
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.errors import RecallUnavailable
from story.recall_index import RecallIndex

log = structlog.get_logger(__name__)

_SPEAKER_NAMES = {SpeakerKind.GM: "GM", SpeakerKind.NARRATOR: "Narrator", SpeakerKind.PLAYER: "Player"}


def speaker_name(turn: Turn) -> str:
    """Who spoke a turn, as a reader would name them."""
    if turn.speaker.name:
        return turn.speaker.name
    if turn.speaker.entity_id:
        return turn.speaker.entity_id
    return _SPEAKER_NAMES.get(turn.speaker.kind, turn.speaker.kind.value)


def _anchored(anchor: Turn, **fields: Any) -> RecallRecord:
    """A record anchored at ``anchor``: its campaign, branch, depth and time are the turn's (a memory,
    summary or outcome is checked to be of the anchor's campaign when it is written)."""
    return RecallRecord(
        campaign_id=anchor.campaign_id,
        anchor_turn_id=anchor.id,
        branch_id=anchor.branch_id,
        depth=anchor.depth,
        story_time=anchor.story_time,
        **fields,
    )


def turn_record(turn: Turn, scene: Scene | None = None, *, context: str = "") -> RecallRecord | None:
    """The record of a turn: its input and the narration told (None when there is nothing to recall)."""
    parts = [p.strip() for p in (turn.text, turn.narration or "") if p and p.strip()]
    if not parts:
        return None
    speakers = [speaker_name(turn)]
    if turn.narration and turn.narration.strip() and turn.text.strip():
        speakers.append("Narrator")
    participants = list(scene.participant_entity_ids) if scene else []
    observers = list(dict.fromkeys([*participants, *([turn.speaker.entity_id] if turn.speaker.entity_id else [])]))
    return _anchored(
        turn,
        id=turn.id,
        kind=RecallKind.TURN,
        scene_id=turn.scene_id,
        speakers=speakers,
        participants=participants,
        observers=observers,
        ref=turn.ref,
        text="\n".join(parts),
        context=context,
        created_at=turn.created_at,
    )


def memory_record(memory: Memory, anchor: Turn) -> RecallRecord:
    return _anchored(
        anchor,
        id=memory.id,
        kind=RecallKind.MEMORY,
        scene_id=anchor.scene_id,
        participants=list(memory.subject_entity_ids),
        observers=[memory.observer_entity_id],
        ref=anchor.ref,
        text=memory.text,
        salience=memory.salience,
        created_at=memory.created_at,
    )


def summary_record(summary: Summary, anchor: Turn, scene: Scene | None = None) -> RecallRecord:
    participants = list(scene.participant_entity_ids) if scene else []
    return _anchored(
        anchor,
        id=summary.id,
        kind=RecallKind.SUMMARY,
        scene_id=summary.scene_id,
        participants=participants,
        observers=participants,
        text=summary.text,
        salience=0.7,
        created_at=summary.created_at,
    )


def outcome_records(scene: Scene, anchor: Turn) -> list[RecallRecord]:
    """A record per canon outcome of an ended scene (what became true, in words)."""
    participants = list(scene.participant_entity_ids)
    return [
        _anchored(
            anchor,
            id=f"{scene.id}#canon{i}",
            kind=RecallKind.FACT,
            scene_id=scene.id,
            participants=participants,
            observers=participants,
            text=outcome,
            salience=0.8,
        )
        for i, outcome in enumerate(scene.canonical_outcomes)
    ]


class Recollection:
    """The campaign's recall: index writes that follow the story's commits, and recall along a lineage.

    Without an index (``index=None``) every write is a no-op and :meth:`recall` is an error, so a
    story service can run without the memory stores (tests of the story engine alone).
    """

    def __init__(self, core: StoryCore, index: RecallIndex | None) -> None:
        self.core = core
        self.story = core.story
        self.index = index

    # -- writes that follow commits -------------------------------------------------------------------

    def _write(self, records: Sequence[RecallRecord], what: str) -> None:
        if self.index is None or not records:
            return
        try:
            self.index.write(records)
        except (LorekeeperError, OSError) as exc:
            # the story is committed; the index catches up at scene end or on reindex
            log.warning("recall_index_failed", what=what, records=len(records), error=str(exc))

    def _scene(self, scene_id: str | None) -> Scene | None:
        if scene_id is None:
            return None
        return from_props(Scene, self.story.node("Scene", scene_id), key="id")

    def turn_recorded(self, turn: Turn) -> None:
        """Index a turn once it has its narration (or has nothing more to wait for)."""
        if self.index is None:
            return
        record = turn_record(turn, self._scene(turn.scene_id))
        if record is not None:
            self._write([record], "turn")

    def turn_told(self, turn_id: str) -> None:
        """Index (again) a turn whose selected narration changed."""
        if self.index is not None:
            self.turn_recorded(self.story.turn(turn_id))

    def memory_added(self, memory: Memory) -> None:
        if self.index is not None:
            self._write([memory_record(memory, self.story.turn(memory.anchor_turn_id))], "memory")

    def memory_retracted(self, memory_id: str) -> None:
        """Take a retracted memory out of the index (the graph keeps it, marked retracted)."""
        if self.index is None:
            return
        try:
            self.index.delete([memory_id])
        except (LorekeeperError, OSError) as exc:
            # the retraction is committed; a rebuild leaves retracted memories out
            log.warning("recall_index_failed", what="retraction", memory_id=memory_id, error=str(exc))

    def summary_added(self, summary: Summary) -> None:
        if self.index is not None:
            anchor = self.story.turn(summary.anchor_turn_id)
            self._write([summary_record(summary, anchor, self._scene(summary.scene_id))], "summary")

    def scene_ended(self, scene: Scene) -> int:
        """Index an ended scene's canon outcomes, and every turn of it the index misses. Returns how many."""
        if self.index is None or scene.end_turn_id is None:
            return 0
        anchor = self.story.turn(scene.end_turn_id)
        records = outcome_records(scene, anchor)
        turns = [from_props(Turn, row, key="id") for row in self.story.nodes(cypher.turns_of_scene(scene.id))]
        try:
            present = self.index.present([t.id for t in turns])
        except (LorekeeperError, OSError) as exc:
            log.warning("recall_index_failed", what="scene", scene_id=scene.id, error=str(exc))
            return 0
        for turn in turns:
            if turn.id not in present and (record := turn_record(turn, scene)) is not None:
                records.append(record)
        self._write(records, "scene")
        return len(records)

    # -- recall ---------------------------------------------------------------------------------------

    def recall(
        self,
        campaign_id: str,
        query: str,
        *,
        as_of_turn_id: str | None = None,
        observer_entity_id: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
    ) -> list[RecallHit]:
        """What the campaign remembers of ``query``: records on the lineage of the head (or of
        ``as_of_turn_id``), optionally only those ``observer_entity_id`` witnessed, best first."""
        if self.index is None:
            raise RecallUnavailable("no memory index is configured for this story service")
        ctx = self.story.context(campaign_id)
        if as_of_turn_id is None and ctx.head is None:
            return []
        lineage = self.core.lineage_for(ctx, as_of_turn_id)
        return self.index.search(
            campaign_id, query, lineage=lineage, observer=observer_entity_id, kinds=kinds, limit=limit
        )

    # -- rebuild --------------------------------------------------------------------------------------

    def records_of(self, campaign_id: str) -> list[RecallRecord]:
        """Every record the campaign's graph holds, for a rebuild (all branches)."""
        scenes = {
            s.id: s
            for s in (from_props(Scene, row, key="id") for row in self.story.nodes(cypher.scenes_of(campaign_id)))
        }
        turns = {
            t.id: t
            for t in (
                from_props(Turn, row, key="id") for row in self.story.nodes(cypher.turns_of_campaign(campaign_id))
            )
        }
        records: list[RecallRecord] = []
        for turn in turns.values():
            scene = scenes.get(turn.scene_id) if turn.scene_id else None
            if (record := turn_record(turn, scene)) is not None:
                records.append(record)
        for row in self.story.nodes(cypher.anchored_of_campaign("Memory", campaign_id)):
            memory = from_props(Memory, row, key="id")
            if memory.anchor_turn_id in turns and memory.retracted_at is None:
                records.append(memory_record(memory, turns[memory.anchor_turn_id]))
        for row in self.story.nodes(cypher.anchored_of_campaign("Summary", campaign_id)):
            summary = from_props(Summary, row, key="id")
            if summary.anchor_turn_id in turns:
                scene = scenes.get(summary.scene_id) if summary.scene_id else None
                records.append(summary_record(summary, turns[summary.anchor_turn_id], scene))
        for scene in scenes.values():
            if scene.end_turn_id in turns and scene.canonical_outcomes:
                records.extend(outcome_records(scene, turns[scene.end_turn_id]))
        return records

    def rebuild(self, campaign_id: str, *, batch_size: int = 256) -> int:
        """Drop a campaign's records from the memory index and write them again from the graph."""
        if self.index is None:
            raise RecallUnavailable("no memory index is configured for this story service")
        records = self.records_of(campaign_id)
        self.index.delete_campaign(campaign_id)
        for start in range(0, len(records), batch_size):
            self.index.write(records[start : start + batch_size])
        log.info("recall_rebuilt", campaign_id=campaign_id, records=len(records))
        return len(records)
