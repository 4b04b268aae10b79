"""A transcript becomes a campaign: one scene per session, one turn per line, every line recallable.

The campaign is an ordinary one (the engine's own scenes, turns on the main branch, lineage, the
recall index), written in bulk: sessions go to the graph whole, up to :data:`TURN_BATCH` lines a story
transaction (each session's scene start, its turns as a few UNWIND statements, its end and its summary),
with the commits and nodes the single writes would leave, and their recall records are embedded and
indexed in large batches while the next sessions are written (:mod:`story.import_indexing`), so a long
conversation loads in about the time its embedding takes.

An imported line is a turn whose ``text`` is what was said, spoken in dialogue by a player named as
the transcript names the speaker, with its ``ref`` (the line's id in its source) and ``story_time``
(the line's or its session's time). It has no narration, and none is coming: its status is
``recorded`` (not ``pending``, which means a narration is being generated). Each session is a scene
titled with the session and its time, started before its first line and ended after its last.

Each session also gets its scene summary, as a scene that ends in play does: the service's memory
former (the extractive one unless a model is configured) reads the session's lines, and the summary is
anchored at its last turn and indexed for recall with the turns. No character memories: a transcript
names speakers, not the world's entities, so there is no one to give a memory to.

An import completes or leaves a campaign marked unfinished, and nothing else:

- the transcript is read and checked whole before the first write (:mod:`story.transcripts`), and every
  store is opened for writing first: a recall index held by another process (a running ``lorekeeper
  serve``) refuses the import before anything is written (:class:`ImportBlocked`);
- the campaign (and its new world) is created in one transaction, already carrying its
  :class:`~schemas.imports.TranscriptImportState`; each later transaction moves its ``written`` cursor
  with the lines it writes, so a crash at any moment leaves whole sessions and a cursor that says how far;
- such a campaign is listed with its state and refused for play (:class:`~story.errors.CampaignIncomplete`);
  :meth:`TranscriptImporter.resume` writes the lines after the cursor, then reconciles the recall index
  with the graph (every record the campaign's graph holds that the index lacks is written), and only then
  clears the state, in a commit of kind ``imported``. A finished import reconciles too when the index
  holds fewer records than it wrote.

Importing the same file again after it finished makes a second campaign (a transcript is not an identity);
while an import of it is unfinished, a new import of the same lines is refused and names the campaign to
resume. Re-indexing a campaign (:meth:`story.recall.Recollection.rebuild`) rewrites the same records, since
they are built by the same :func:`story.recall.turn_record` from the same turns and scenes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

import structlog
from pydantic import BaseModel, Field

from schemas.errors import Unavailable
from schemas.imports import TranscriptImportState
from schemas.recall import RecallRecord
from schemas.story import (
    Campaign,
    InputMode,
    Scene,
    Speaker,
    SpeakerKind,
    StoryProfile,
    Summary,
    SummaryScope,
    Turn,
    TurnStatus,
    World,
)
from stores.catalog import from_props
from story import cypher
from story.campaigns import Campaigns, write_branch
from story.core import StoryCore
from story.errors import STORY, StoryConflict, StoryInvalid
from story.formation import SceneMemoryFormer
from story.gate import scene_of
from story.graph import CampaignContext, Writes, node_props
from story.import_indexing import Progress, _Indexing
from story.import_plan import (
    RECORD_BATCH,
    TURN_BATCH,
    SessionPiece,
    commit_kinds,
    fingerprint,
    plan_batches,
    plan_remaining,
    plan_transactions,
)
from story.memory import Memories, anchored
from story.recall import Recollection, summary_record, turn_record
from story.recall_index import RecallIndex
from story.scene_writes import ended_props, queue_scene, scene_opening
from story.scenes import Scenes
from story.transcripts import Transcript, TranscriptLine, TranscriptSession

__all__ = [
    "RECORD_BATCH",
    "TURN_BATCH",
    "ImportBlocked",
    "Progress",
    "SessionPiece",
    "TranscriptImport",
    "TranscriptImporter",
    "fingerprint",
    "plan_batches",
    "plan_transactions",
]

log = structlog.get_logger(__name__)

#: Records a reconciliation writes at a time.
RECONCILE_BATCH = 500


class ImportBlocked(Unavailable):
    """A store the import writes to is held by another process (503): nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(STORY, message)


class TranscriptImport(BaseModel):
    """What an import wrote, what it read but left out, and where its time went."""

    campaign_id: str
    world_id: str
    name: str
    format: str
    sessions: int = Field(description="Scenes of the campaign, one per session.")
    turns: int = Field(description="Turns written by this run, one per line.")
    records: int = Field(description="Recall records indexed by this run (0 without a memory index).")
    summaries: int = Field(default=0, description="Session summaries written (one per session with words in it).")
    resumed_from: int | None = Field(
        default=None, description="A resumed import: the lines an earlier run had written already."
    )
    reconciled: int = Field(default=0, description="Records the recall index lacked at the end, written then.")
    unknown_fields: dict[str, int] = Field(
        default_factory=dict, description="Fields of the file no format knows (left out), and how often each."
    )
    skipped_sessions: list[str] = Field(default_factory=list, description="Sessions of the file without lines.")
    graph_seconds: float = Field(description="World, campaign, scenes and turns in the graph.")
    model_seconds: float = Field(description="Loading the embedding model (nothing when it was loaded already).")
    recall_seconds: float = Field(
        description="Embedding the records and writing them to the text index and the vector collection."
    )
    seconds: float = Field(description="The whole import.")


class TranscriptImporter:
    """Writes a transcript as a new campaign through the story's own chapters and write protocol."""

    def __init__(
        self,
        core: StoryCore,
        campaigns: Campaigns,
        scenes: Scenes,
        index: RecallIndex | None,
        *,
        memories: Memories | None = None,
        former: SceneMemoryFormer | None = None,
    ) -> None:
        """``former`` (with ``memories``, where summaries are written) summarises each session; None: no summaries."""
        self.core = core
        self.campaigns = campaigns
        self.scenes = scenes
        self.index = index
        self.memories = memories
        self.former = former if memories is not None else None

    def run(
        self,
        transcript: Transcript,
        name: str,
        *,
        world_id: str | None = None,
        profile: StoryProfile | None = None,
        on_progress: Progress | None = None,
    ) -> tuple[Campaign, TranscriptImport]:
        """Create the campaign (and a world, unless ``world_id`` names one) and write every line.

        Raises:
            TranscriptInvalid: a session's lines are not contiguous.
            StoryInvalid: the name is blank, or the transcript has no lines.
            StoryNotFound: ``world_id`` names no world.
            StoryConflict: an import of the same lines is unfinished (resume it instead).
            ImportBlocked: another process holds a store the import writes to.
        """
        started = time.perf_counter()
        # refuse a bad transcript or name, or a store another process holds, before anything is written
        if not name.strip():
            raise StoryInvalid("a campaign imported from a transcript needs a name")
        name = name.strip()
        sessions = transcript.sessions()
        if not sessions:
            raise StoryInvalid(f"transcript {transcript.name!r} has no lines")
        state = TranscriptImportState(
            source=transcript.name,
            format=transcript.format.value,
            fingerprint=fingerprint(transcript),
            lines=len(transcript.lines),
            summaries=self.former is not None,
            new_world=world_id is None,
        )
        if unfinished := self.unfinished(state.fingerprint):
            raise StoryConflict(
                f"an import of transcript {transcript.name!r} is unfinished: campaign {unfinished[0].id!r} "
                f"({_progress(unfinished[0])}); resume it (`--resume`) rather than start another"
            )
        if world_id is not None:
            self.campaigns.get_world(world_id)
        self._check_stores()
        world = None
        if world_id is None:
            description = f"Imported from the {transcript.format.value} transcript {transcript.name!r}."
            world = World(name=name, description=description)
            world_id = world.id
        campaign = self.campaigns.create_campaign(
            world_id, name, profile or StoryProfile(genre="transcript"), new_world=world, transcript_import=state
        )
        log.info("transcript_import_started", campaign_id=campaign.id, lines=state.lines, sessions=len(sessions))
        return self._import(transcript, campaign, state, on_progress, started, resumed=False)

    def resume(
        self, transcript: Transcript, campaign_id: str | None = None, *, on_progress: Progress | None = None
    ) -> tuple[Campaign, TranscriptImport]:
        """Finish an unfinished import of ``transcript``: the lines after its cursor, then the recall index.

        ``campaign_id``: the campaign to finish; by default the one unfinished import of these lines.

        Raises:
            StoryNotFound: no such campaign.
            StoryInvalid: the campaign is not an unfinished import, or not of this transcript; no unfinished
                import of it exists.
            ImportBlocked: another process holds a store the import writes to.
        """
        started = time.perf_counter()
        transcript.sessions()  # refuses sessions out of order, as run does
        print_ = fingerprint(transcript)
        if campaign_id is None:
            found = self.unfinished(print_)
            if not found:
                raise StoryInvalid(f"no unfinished import of transcript {transcript.name!r} to resume")
            campaign = found[0]
        else:
            campaign = self.campaigns.get_campaign(campaign_id)
        state = campaign.transcript_import
        if state is None:
            raise StoryInvalid(f"campaign {campaign.id!r} is not an unfinished transcript import; nothing to resume")
        if state.fingerprint != print_:
            raise StoryInvalid(
                f"transcript {transcript.name!r} is not the one campaign {campaign.id!r} was imported from "
                f"({state.source!r}, {state.lines:,} lines): its lines differ"
            )
        if not state.summaries:
            self.former = None
        self._check_stores()
        log.info("transcript_import_resumed", campaign_id=campaign.id, written=state.written, lines=state.lines)
        return self._import(transcript, campaign, state, on_progress, started, resumed=True)

    def discard(self, campaign_id: str) -> None:
        """Delete an unfinished import's campaign: its records in the recall index, then every node of it in the
        graph, and its world when the import created it and nothing else is in it. Stop the import first.

        Raises:
            StoryNotFound: no such campaign.
            StoryInvalid: the campaign is whole (not an unfinished import): it is never deleted.
        """
        campaign = self.campaigns.get_campaign(campaign_id)
        state = campaign.transcript_import
        if state is None:
            raise StoryInvalid(f"campaign {campaign_id!r} is whole, not an unfinished transcript import; it stays")
        if self.index is not None:  # first: a crash before the graph's delete leaves an unfinished import to resume
            self.index.delete_campaign(campaign_id)
        with self.core.lock(campaign_id), self.core.graph.transaction() as tx:
            tx.run(*cypher.delete_campaign_nodes(campaign_id))
            if state.new_world:
                tx.run(*cypher.delete_world_if_empty(campaign.world_id))
        log.info("transcript_import_discarded", campaign_id=campaign_id, written=state.written, lines=state.lines)

    def unfinished(self, print_: str) -> list[Campaign]:
        """The unfinished imports of the transcript whose lines have this :func:`fingerprint`."""
        return [
            c
            for c in self.campaigns.list_campaigns()
            if c.transcript_import is not None and c.transcript_import.fingerprint == print_
        ]

    def _check_stores(self) -> None:
        """Open every store the import writes to for writing, before the first write.

        The embedded vector index is one process's at a time (a folder lock held while it is open); the
        index is opened now and held by this process until the import ends.
        """
        if self.index is None:
            return
        try:
            self.index.ensure()
        except Unavailable as exc:
            raise ImportBlocked(
                f"cannot import: the recall index is held by another process ({exc.detail}); stop the server "
                "that holds the data folder (`lorekeeper serve`) and import again. Nothing was written"
            ) from exc

    def _import(
        self,
        transcript: Transcript,
        campaign: Campaign,
        state: TranscriptImportState,
        on_progress: Progress | None,
        started: float,
        *,
        resumed: bool,
    ) -> tuple[Campaign, TranscriptImport]:
        """Write the lines after ``state.written``, index them, reconcile the index and clear the state."""
        indexing = _Indexing(self.index, on_progress)
        work = plan_remaining(transcript.sessions(), state.written)
        # the turns' texts do not depend on graph ids: their embedding starts now, beside the graph writes
        indexing.prefetch([predicted_texts(self.index, sessions) for _, sessions in work] if self.index else [])
        turns = records = summaries = 0
        written = state.written
        open_session = self._open_session(campaign.id) if work and not work[0][0][0][0].opens else None
        try:
            for transactions, _ in work:
                batch_records: list[RecallRecord] = []
                for pieces in transactions:
                    written += sum(p.stop - p.start for p in pieces)
                    progress = {"transcript_import_json": _state_json(state.validated_copy(written=written))}
                    for done in self._write(campaign.id, pieces, open_session, progress):
                        turns += len(done.turns)
                        if on_progress:
                            on_progress("turns", len(done.turns))
                        batch_records.extend(r for t in done.turns if (r := turn_record(t, done.scene)) is not None)
                        if done.summary is not None:
                            summaries += 1
                            batch_records.append(summary_record(done.summary, done.session_turns[-1], done.scene))
                        open_session = None if done.piece is None or done.piece.closes else done
                    log.info("transcript_import_written", campaign_id=campaign.id, written=written, lines=state.lines)
                records += len(batch_records)
                indexing.add(batch_records)
            log.info("transcript_import_graph_written", campaign_id=campaign.id, turns=turns)
        except BaseException:
            indexing.abandon()
            raise
        graph_seconds = time.perf_counter() - started - indexing.model_seconds
        model_seconds, recall_seconds = indexing.finish()
        reconciled = self._reconcile(campaign.id, resumed=resumed, written=records)
        self.core.mutate(campaign.id, "imported", _finished, importing=True)
        report = TranscriptImport(
            campaign_id=campaign.id,
            world_id=campaign.world_id,
            name=campaign.name,
            format=transcript.format.value,
            sessions=len(transcript.sessions()),
            turns=turns,
            records=records if self.index is not None else 0,
            summaries=summaries,
            resumed_from=state.written if resumed else None,
            reconciled=reconciled,
            unknown_fields=transcript.unknown_fields,
            skipped_sessions=transcript.skipped,
            graph_seconds=round(graph_seconds, 3),
            model_seconds=round(model_seconds, 3),
            recall_seconds=round(recall_seconds, 3),
            seconds=round(time.perf_counter() - started, 3),
        )
        log.info("transcript_imported", **report.model_dump())
        return self.campaigns.get_campaign(campaign.id), report

    def _open_session(self, campaign_id: str) -> _Written:
        """What an earlier run wrote of the session it left open (a session longer than a transaction): its
        scene, the campaign's last, and its turns so far."""
        scene = self.scenes.scenes(campaign_id)[-1]
        turns = [from_props(Turn, row, key="id") for row in self.core.story.nodes(cypher.turns_of_scene(scene.id))]
        return _Written(None, scene, [], turns, None)

    def _reconcile(self, campaign_id: str, *, resumed: bool, written: int) -> int:
        """Write every record of the campaign's graph that the recall index lacks. Returns how many.

        After a resumed import always (an earlier run may have stopped before indexing what it wrote); after
        a whole run only when the index holds fewer of the campaign's records than the run wrote."""
        index = self.index
        if index is None or (not resumed and index.count(campaign_id) >= written):
            return 0
        records = Recollection(self.core, index).records_of(campaign_id)
        present = index.present([r.id for r in records])
        missing = [r for r in records if r.id not in present]
        for start in range(0, len(missing), RECONCILE_BATCH):
            index.write(missing[start : start + RECONCILE_BATCH])
        if missing:
            log.info("transcript_import_reconciled", campaign_id=campaign_id, records=len(missing))
        return len(missing)

    def _write(
        self,
        campaign_id: str,
        pieces: Sequence[SessionPiece],
        open_session: _Written | None,
        progress: dict[str, Any],
    ) -> list[_Written]:
        """One transaction: the pieces' sessions opened, their lines appended at the head as turns, the sessions
        that end here ended and summarised.

        The graph is the one :meth:`Scenes.start_scene`, a batch of turns, :meth:`Scenes.end_scene` (a scene
        without proposals) and :meth:`Memories.add_summary` leave one after another, with the same commits
        (a ``scene``, an ``import`` per piece and a ``gate`` per session, each its own version), in a few reads
        and one write however many sessions. A crash leaves whole transactions, so whole sessions (a session
        longer than :data:`TURN_BATCH` lines spans transactions, an active scene until its last).

        ``open_session``: what was written of the session the first piece continues; ``progress``: the
        import's cursor (campaign properties), moved in the same transaction.
        """
        kinds = commit_kinds(pieces)

        def build(ctx: CampaignContext, writes: Writes) -> tuple[list[_Written], dict[str, Any]]:
            writes.later_commits = kinds[1:]
            branch_id, fork = write_branch(ctx, writes)
            opens = pieces[0].opens  # a transaction holds whole sessions, or a piece of one long session
            order, state = self.scenes.open_scenes_in_bulk(ctx) if opens else (0, None)
            at = dataclasses.replace(ctx)  # the head and event sequence each write is at, moved along here
            version = ctx.version
            written: list[_Written] = []
            for piece in pieces:
                opened_at = at
                if piece.opens:
                    version += 1
                    scene_version = version
                    scene, event = scene_opening(at, branch_id, order, title=scene_title(piece.session))
                    order += 1
                    before: list[Turn] = []
                    at = dataclasses.replace(at, event_seq=at.event_seq + 1)
                else:
                    assert open_session is not None and open_session.session_turns
                    scene, before = open_session.scene, open_session.session_turns
                version += 1
                turns = self._queue_turns(at, writes, piece, branch_id, scene.id)
                at = dataclasses.replace(at, head=turns[-1])
                session_turns = [*before, *turns]
                ended = ended_props(scene, turns[-1].id) if piece.closes else None
                if piece.opens:
                    assert state is not None
                    queue_scene(opened_at, writes, state, scene, event, version=scene_version, ended=ended)
                elif ended is not None:
                    writes.add(*cypher.update_scene(scene.id, ended))
                summary = None
                if ended is not None:
                    version += 1  # the gate's
                    summary = self._summary(scene_of({**node_props(scene), **ended}), session_turns, writes)
                written.append(_Written(piece, scene, turns, session_turns, summary))
            assert version == ctx.version + len(kinds)
            assert at.head is not None
            writes.add(*cypher.set_branch_tip(branch_id, at.head.id, at.head.depth))
            writes.after_state = state  # the scenes' canon: the live world follows (scene_set changes none of it)
            props = {"head_turn_id": at.head.id, "active_branch_id": branch_id, "event_seq": at.event_seq, **fork}
            return written, {**props, **progress}

        return self.core.mutate(campaign_id, kinds[0], build, importing=True)

    def _queue_turns(
        self, at: CampaignContext, writes: Writes, piece: SessionPiece, branch_id: str, scene_id: str
    ) -> list[Turn]:
        """Queue the piece's lines as turns appended at ``at``'s head: the nodes and edges add_turn writes."""
        parent_id = at.head.id if at.head else None
        depth = at.head_depth
        turns = []
        for line in piece.lines:
            depth += 1
            turn = line_turn(line, piece.session, at.id, branch_id, scene_id, parent_id=parent_id, depth=depth)
            turns.append(turn)
            parent_id = turn.id
        writes.add(*cypher.create_nodes("Turn", [node_props(t, parent_uid=t.parent_turn_id) for t in turns]))
        links = [(t.id, t.parent_turn_id) for t in turns if t.parent_turn_id is not None]
        if links:
            writes.add(*cypher.link_nodes("Turn", "CHILD_OF", "Turn", links))
        return turns

    def _summary(self, scene: Scene, turns: Sequence[Turn], writes: Writes) -> Summary | None:
        """Queue the ended session's summary (None: no former, or nothing to say), anchored at its last turn.

        ``scene``: the ended scene, as :meth:`Scenes.get_scene` would read it."""
        if self.former is None:
            return None
        formed = self.former.form(scene, turns, [])
        if not formed.summary or not formed.summary.strip():
            return None
        summary = Summary(
            campaign_id=scene.campaign_id,
            scope=SummaryScope.SCENE,
            scene_id=scene.id,
            anchor_turn_id=turns[-1].id,
            from_turn_id=turns[0].id,
            text=formed.summary,
            token_count=len(formed.summary.split()),
        )
        writes.add(*anchored("Summary", summary, turns[-1]))
        return summary


def line_turn(
    line: TranscriptLine,
    session: TranscriptSession,
    campaign_id: str,
    branch_id: str,
    scene_id: str,
    *,
    parent_id: str | None,
    depth: int,
) -> Turn:
    """The turn a transcript line becomes: dialogue by a player named as the transcript names the speaker."""
    return Turn(
        campaign_id=campaign_id,
        branch_id=branch_id,
        parent_turn_id=parent_id,
        depth=depth,
        input_mode=InputMode.DIALOGUE,
        speaker=Speaker(kind=SpeakerKind.PLAYER, name=line.speaker),
        text=line.text,
        status=TurnStatus.RECORDED,
        scene_id=scene_id,
        ref=line.ref,
        story_time=line.time or session.time,
    )


def _finished(ctx: CampaignContext, writes: Writes) -> tuple[None, dict[str, Any]]:
    """The last commit of an import: the campaign is whole."""
    return None, {"transcript_import_json": None}


def _state_json(state: TranscriptImportState) -> str:
    """The campaign property that holds an import's state (as :func:`stores.catalog.to_props` writes it)."""
    return json.dumps(state.model_dump(mode="json"), sort_keys=True)


def _progress(campaign: Campaign) -> str:
    state = campaign.transcript_import
    return f"{state.written:,} of {state.lines:,} lines written" if state else "finished"


def predicted_texts(index: RecallIndex, sessions: Sequence[TranscriptSession]) -> list[str]:
    """The texts the index will embed for the turn records of ``sessions``, known before any graph write: a
    record's embedded text holds no graph id. Built by the same :func:`line_turn`, :func:`turn_record` and
    :meth:`RecallIndex.indexed_text` as the records written later; none when the index embeds each turn's
    window (``context_in_vector``), which a prediction without the index's neighbours could miss."""
    if index.config.context_in_vector:
        return []
    texts: list[str] = []
    for session in sessions:
        for line in session.lines:
            turn = line_turn(line, session, "import", "import", "import", parent_id=None, depth=0)
            if (record := turn_record(turn)) is not None:
                texts.append(index.indexed_text(record))
    return texts


def scene_title(session: TranscriptSession) -> str:
    """``Session 3 (1:56 pm on 8 May, 2023)``; a session named by words keeps its name."""
    label = f"Session {session.session}" if session.session.isdigit() else session.session
    return f"{label} ({session.time})" if session.time else label


@dataclasses.dataclass(frozen=True, slots=True)
class _Written:
    """What a transaction wrote of a session piece: its scene (as it opened), its turns, the session's turns so
    far, and the session's summary when the piece ended it."""

    piece: SessionPiece | None  # None: a session an earlier run left open
    scene: Scene
    turns: list[Turn]
    session_turns: list[Turn]
    summary: Summary | None
