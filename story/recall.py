"""Campaign recall: every turn, scene summary, canon outcome and memory, indexed and recalled by meaning.

The graph stays the record; the memory index (:mod:`story.recall_index`) is derived from it. Writes
follow the story's own commits: a narrated turn is indexed once its narration is told (a new take
re-indexes it), a memory or summary when it is added, what a scene's end made (canon outcomes, summary,
memories) once it is committed (:func:`story.recall_sync.sync_scene`, from :meth:`Recollection.records_of`).
Those index writes come after the graph commit and never undo it: if the index is down the story goes
on (event ``recall_index_failed``) and is caught up later, and :meth:`Recollection.rebuild` rebuilds a
campaign from the graph (``lorekeeper reindex``).

Each record sits where the state has what it recalls (branch, depth, commit sequence number): a turn
at its place, what a scene's end made where that end's canon was committed (:class:`SceneEnd`), so a
branch forked at the end turn before the end never recalls it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel

from schemas.errors import LorekeeperError
from schemas.recall import RecallHit, RecallKind, RecallRecord
from schemas.story import Memory, Scene, SpeakerKind, Summary, Turn
from stores.catalog import from_props
from story import cypher
from story.core import StoryCore
from story.errors import RecallUnavailable
from story.notes import note_records
from story.outcomes import canon_marks, outcome_canon
from story.recall_index import RecallIndex

log = structlog.get_logger(__name__)

T = TypeVar("T", bound=BaseModel)


def _scenes_ended_at(campaign_id: str, turn_id: str) -> cypher.Statement:
    """The campaign's scenes with an end at a turn (the ends a memory or summary anchored there follows):
    their last end there, or one listed (:data:`ENDS`, a JSON list that names its end turns)."""
    return (
        "MATCH (n:Scene) WHERE n.campaign_id = $c AND (n.end_turn_id = $t OR n.ends_json CONTAINS $q) RETURN n",
        {"c": campaign_id, "t": turn_id, "q": json.dumps(turn_id)},
    )


_SPEAKER_NAMES = {SpeakerKind.GM: "GM", SpeakerKind.NARRATOR: "Narrator", SpeakerKind.PLAYER: "Player"}


def speaker_name(turn: Turn) -> str:
    """Who spoke a turn, as a reader would name them."""
    if turn.speaker.name:
        return turn.speaker.name
    if turn.speaker.entity_id:
        return turn.speaker.entity_id
    return _SPEAKER_NAMES.get(turn.speaker.kind, turn.speaker.kind.value)


ENDS = "ends_json"
"""The scene node's property that lists its ends (:func:`end_mark`; a scene ends per branch)."""


@dataclass(frozen=True, slots=True)
class SceneEnd:
    """Where one end of a scene was committed: the branch its canon went to (the active branch, or the
    one the gate forked), the end turn and its depth, the campaign's commit sequence number of the end,
    and the scene's canon outcomes it made (``outcomes``: a range of their indexes). What an end made
    (its outcomes, the summary and memories formed at it) sits there, so a branch forked at the end turn
    before the end never sees it and one forked after it does, as the state's canon."""

    scene_id: str
    end_turn_id: str
    branch_id: str
    depth: int
    seq: int | None
    ended_at: datetime
    outcomes: tuple[int, int]

    @classmethod
    def all_of(cls, props: Mapping[str, Any], turns: Mapping[str, Turn]) -> list[SceneEnd]:
        """The ends of a scene node (its properties) whose end turns are in ``turns``. A scene ended before
        ends were listed has one, at its end turn's place and without a sequence number."""
        scene_id = str(props["id"])
        listed = props.get(ENDS)
        if listed is None:
            turn = turns.get(str(props.get("end_turn_id")))
            if turn is None or props.get("ended_at") is None:
                return []
            outcomes = (0, len(props.get("canonical_outcomes") or []))
            return [cls(scene_id, turn.id, turn.branch_id, turn.depth, None, _when(props["ended_at"]), outcomes)]
        ends = []
        for end in json.loads(listed) if isinstance(listed, str) else listed:
            if (turn := turns.get(end["turn_id"])) is not None:
                span = (int(end["outcomes"][0]), int(end["outcomes"][1]))
                at = _when(end["ended_at"])
                ends.append(cls(scene_id, turn.id, end["branch_id"], turn.depth, int(end["seq"]), at, span))
        return ends


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def end_mark(
    props: Mapping[str, Any], outcomes_before: int, ended: Mapping[str, Any], *, branch_id: str, seq: int
) -> dict[str, Any]:
    """The scene node's list of ends (:data:`ENDS`) with the one being committed: ``props`` are the node's
    before it, ``ended`` what the end sets on it (its end turn, time and canon outcomes), ``branch_id``
    and ``seq`` where its canon is committed. An end without a turn (a campaign without turns) is not
    listed: it makes no record."""
    listed = props.get(ENDS)
    ends = list(json.loads(listed) if isinstance(listed, str) else listed or [])
    if ended.get("end_turn_id") is None:
        return {}
    if ends and not any("pending" in e for e in ends):  # listed before each end was pending on its own
        for i, e in enumerate(ends):
            e["pending"] = bool(props.get(cypher.END_PENDING)) and i == len(ends) - 1
    outcomes = [outcomes_before, len(ended["canonical_outcomes"])]
    mark = {"branch_id": branch_id, "turn_id": ended["end_turn_id"], "seq": seq, "ended_at": ended["ended_at"]}
    # each end is formed on its own (story.scene_end): pending until what it forms is written, with the
    # GM's summary given at it
    mark |= {"pending": True, **({"summary": ended["summary"]} if ended.get("summary") else {})}
    return {ENDS: json.dumps([*ends, {**mark, "outcomes": outcomes}])}


def formed_at(ends: Iterable[SceneEnd], anchor_turn_id: str, created_at: datetime, seq: Any = None) -> SceneEnd | None:
    """The scene end a memory or summary anchored at ``anchor_turn_id`` was formed at: the end its ``seq``
    names (what :mod:`story.scene_end` forms carries it), else the latest end at that turn before it was
    written (a record formed before records carried it), or None."""
    if seq is not None:
        return next((e for e in ends if e.end_turn_id == anchor_turn_id and e.seq == int(seq)), None)
    before = [e for e in ends if e.end_turn_id == anchor_turn_id and e.ended_at <= created_at]
    return max(before, key=lambda e: (e.ended_at, e.seq), default=None)


def _anchored(anchor: Turn, end: SceneEnd | None = None, **fields: Any) -> RecallRecord:
    """A record anchored at ``anchor``: its campaign and time are the turn's, its place (branch, depth,
    commit sequence) the turn's, or that of the scene end that made it (a memory, summary or outcome is
    checked to be of the anchor's campaign when it is written)."""
    return RecallRecord(
        campaign_id=anchor.campaign_id,
        anchor_turn_id=anchor.id,
        branch_id=end.branch_id if end else anchor.branch_id,
        depth=end.depth if end else anchor.depth,
        seq=end.seq if end else None,
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


def memory_record(memory: Memory, anchor: Turn, end: SceneEnd | None = None) -> RecallRecord:
    """A memory's record; ``end``: the scene end it was formed at (:func:`formed_at`)."""
    return _anchored(
        anchor,
        end,
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


def summary_record(
    summary: Summary, anchor: Turn, scene: Scene | None = None, end: SceneEnd | None = None
) -> RecallRecord:
    """A summary's record; ``end``: the scene end it was made at (:func:`formed_at`)."""
    participants = list(scene.participant_entity_ids) if scene else []
    return _anchored(
        anchor,
        end,
        id=summary.id,
        kind=RecallKind.SUMMARY,
        scene_id=summary.scene_id,
        participants=participants,
        observers=participants,
        text=summary.text,
        salience=0.7,
        created_at=summary.created_at,
    )


def outcome_records(
    scene: Scene,
    anchor: Turn,
    end: SceneEnd | None = None,
    *,
    canon: Sequence[Sequence[str]] = (),
    retconned: Set[str] = frozenset(),
) -> list[RecallRecord]:
    """A record per canon outcome an end of a scene made (what became true, in words), placed at the
    ``end`` (its outcomes only); without one, every outcome of the scene at ``anchor``. ``canon``: the canon
    ids beside each outcome (:func:`story.outcomes.outcome_canon`), carried as the record's ``ref``; an outcome
    whose canon is all ``retconned`` is left out (a retcon takes it out of recall)."""
    participants = list(scene.participant_entity_ids)
    first, last = end.outcomes if end else (0, len(scene.canonical_outcomes))
    made = [list(ids) for ids in canon]
    out = []
    for i in range(first, min(last, len(scene.canonical_outcomes))):
        ids = made[i] if i < len(made) else []
        if ids and all(x in retconned for x in ids):
            continue
        record = _anchored(
            anchor,
            end,
            id=f"{scene.id}#canon{i}",
            kind=RecallKind.FACT,
            scene_id=scene.id,
            participants=participants,
            observers=participants,
            text=scene.canonical_outcomes[i],
            salience=0.8,
        )
        out.append(record.model_copy(update={"ref": " ".join(ids)}) if ids else record)
    return out


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
            # behind the turn, many turns to a commit; the index's reads wait for it (story.recall_writer)
            self.index.submit([record])

    def turn_told(self, turn_id: str) -> None:
        """Index (again) a turn whose selected narration changed."""
        if self.index is not None:
            self.turn_recorded(self.story.turn(turn_id))

    def _ends_at(self, anchor: Turn) -> list[SceneEnd]:
        """The ends at ``anchor`` of the campaign's scenes that ended there."""
        rows = self.story.nodes(_scenes_ended_at(anchor.campaign_id, anchor.id))
        return [end for row in rows for end in SceneEnd.all_of(row, {anchor.id: anchor})]

    def memory_added(self, memory: Memory) -> None:
        if self.index is not None:
            anchor = self.story.turn(memory.anchor_turn_id)
            end = formed_at(self._ends_at(anchor), anchor.id, memory.created_at)
            self._write([memory_record(memory, anchor, end)], "memory")

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
            end = formed_at(self._ends_at(anchor), anchor.id, summary.created_at)
            self._write([summary_record(summary, anchor, self._scene(summary.scene_id), end)], "summary")

    # -- recall ---------------------------------------------------------------------------------------

    def recall(
        self,
        campaign_id: str,
        query: str,
        *,
        as_of_turn_id: str | None = None,
        branch_id: str | None = None,
        observer_entity_id: str | None = None,
        kinds: Iterable[RecallKind] | None = None,
        limit: int = 10,
        wait_for_turns: bool = True,
    ) -> list[RecallHit]:
        """What the campaign remembers of ``query``: records on the lineage of a position, optionally only
        those ``observer_entity_id`` witnessed, best first.

        The position is the head (or ``branch_id``'s tip); or ``as_of_turn_id`` on its own branch (a turn is
        its own position whatever the head); or that turn seen from ``branch_id`` (a branch whose line holds it), as
        :meth:`story.service.StoryService.state` reads it. A record is on the position's lineage when its
        place (branch, depth, and for what a scene's end made its commit sequence number) is: a branch
        forked at a turn sees, on the line it left, only what was committed there before the fork. So a
        retake, whose rewind forked at the retaken turn, recalls from the head's branch none of the canon
        committed at that turn after its first take, and the turn on its own branch still recalls it.

        ``wait_for_turns``: False recalls without waiting for the turn records still being written
        (:mod:`story.recall_writer`): for a caller that holds the latest turns already.

        Raises:
            RecallUnavailable: no memory index is configured.
            StoryNotFound: no such turn or branch in the campaign.
            StoryInvalid: the turn is not on the line of ``branch_id``.
        """
        if self.index is None:
            raise RecallUnavailable("no memory index is configured for this story service")
        ctx = self.story.context(campaign_id)
        if as_of_turn_id is None and ctx.head is None:
            return []
        lineage = self.core.lineage_for(ctx, as_of_turn_id, branch_id)
        return self.index.search(
            campaign_id,
            query,
            lineage=lineage,
            observer=observer_entity_id,
            kinds=kinds,
            limit=limit,
            wait_for_turns=wait_for_turns,
        )

    # -- rebuild --------------------------------------------------------------------------------------

    def records_of(self, campaign_id: str, *, unreadable: Unreadable | None = None) -> list[RecallRecord]:
        """Every record the campaign's graph holds, for a rebuild (all branches).

        Args:
            unreadable: called with (label, record id, error) for each graph record that cannot be read,
                which is then left out (with what depends on it); without it, such a record raises.
        """
        scene_rows = self.story.nodes(cypher.scenes_of(campaign_id))
        scenes = {s.id: s for s, _ in _readable(Scene, "Scene", scene_rows, unreadable)}
        turn_rows = self.story.nodes(cypher.turns_of_campaign(campaign_id))
        turns = {t.id: t for t, _ in _readable(Turn, "Turn", turn_rows, unreadable)}
        ends = [end for row in scene_rows if str(row.get("id")) in scenes for end in SceneEnd.all_of(row, turns)]
        records: list[RecallRecord] = []
        for turn in turns.values():
            scene = scenes.get(turn.scene_id) if turn.scene_id else None
            if (record := turn_record(turn, scene)) is not None:
                records.append(record)
        memory_rows = self.story.nodes(cypher.anchored_of_campaign("Memory", campaign_id))
        for memory, row in _readable(Memory, "Memory", memory_rows, unreadable):
            if memory.anchor_turn_id in turns and memory.retracted_at is None:
                end = formed_at(ends, memory.anchor_turn_id, memory.created_at, row.get("seq"))
                records.append(memory_record(memory, turns[memory.anchor_turn_id], end))
        summary_rows = self.story.nodes(cypher.anchored_of_campaign("Summary", campaign_id))
        for summary, row in _readable(Summary, "Summary", summary_rows, unreadable):
            if summary.anchor_turn_id in turns:
                scene = scenes.get(summary.scene_id) if summary.scene_id else None
                end = formed_at(ends, summary.anchor_turn_id, summary.created_at, row.get("seq"))
                records.append(summary_record(summary, turns[summary.anchor_turn_id], scene, end))
        marks = canon_marks(self.core.graph, campaign_id, turns)  # what retcons took out and put in
        rows_by_id = {str(row.get("id")): row for row in scene_rows}
        for end in ends:
            scene = scenes[end.scene_id]
            made = outcome_canon(rows_by_id[end.scene_id], len(scene.canonical_outcomes))
            records.extend(outcome_records(scene, turns[end.end_turn_id], end, canon=made, retconned=marks.retconned))
        records.extend(marks.records)
        records.extend(note_records(self.core, campaign_id, turns))  # the GM's notes (story.notes)
        return records

    def rebuild(self, campaign_id: str, *, batch_size: int = 256, unreadable: Unreadable | None = None) -> int:
        """Drop a campaign's records from the memory index and write them again from the graph
        (``unreadable``: as :meth:`records_of`, a record that cannot be read is reported and left out)."""
        if self.index is None:
            raise RecallUnavailable("no memory index is configured for this story service")
        records = self.records_of(campaign_id, unreadable=unreadable)
        self.index.delete_campaign(campaign_id)
        for start in range(0, len(records), batch_size):
            self.index.write(records[start : start + batch_size])
        log.info("recall_rebuilt", campaign_id=campaign_id, records=len(records))
        return len(records)


Unreadable = Callable[[str, str, Exception], None]
"""Told of a graph record a rebuild cannot read: its label, its id and the error reading it raised."""

# what reading a broken record raises (a ValidationError is a ValueError; a JSON property that is not JSON too)
UNREADABLE_ERRORS = (ValueError, KeyError, TypeError)


def _readable(
    model: type[T], label: str, rows: Iterable[dict[str, Any]], unreadable: Unreadable | None
) -> Iterator[tuple[T, dict[str, Any]]]:
    """Each row read as ``model`` with the row; a row that cannot be read raises, or with ``unreadable`` is
    reported to it and left out."""
    for row in rows:
        try:
            yield from_props(model, row, key="id"), row
        except UNREADABLE_ERRORS as exc:
            if unreadable is None:
                raise
            unreadable(label, str(row.get("id", row.get("uid", "?"))), exc)
