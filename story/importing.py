"""A transcript becomes a campaign: one scene per session, one turn per line, every line recallable.

The campaign is an ordinary one (the engine's own scenes, turns on the main branch, lineage, the
recall index), written in bulk: sessions go to the graph whole, up to :data:`TURN_BATCH` lines a story
transaction (each session's scene start, its turns as a few UNWIND statements, its end and its summary),
with the commits and nodes the single writes would leave, and their recall records are embedded and
indexed in large batches of whole sessions once those are written, so a long conversation loads in
about the time its embedding takes.

An imported line is a turn whose ``text`` is what was said, spoken in dialogue by a player named as
the transcript names the speaker, with its ``ref`` (the line's id in its source) and ``story_time``
(the line's or its session's time). It has no narration, and none is coming: its status is
``recorded`` (not ``pending``, which means a narration is being generated). Each session is a scene
titled with the session and its time, started before its first line and ended after its last.

Each session also gets its scene summary, as a scene that ends in play does: the service's memory
former (the extractive one unless a model is configured) reads the session's lines, and the summary is
anchored at its last turn and indexed for recall with the turns. No character memories: a transcript
names speakers, not the world's entities, so there is no one to give a memory to.

Importing the same file twice makes two campaigns (a transcript is not an identity); re-indexing
a campaign (:meth:`story.recall.Recollection.rebuild`) rewrites the same records, since they are
built by the same :func:`story.recall.turn_record` from the same turns and scenes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import structlog
from pydantic import BaseModel, Field

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
)
from story import cypher
from story.campaigns import Campaigns, write_branch
from story.core import StoryCore
from story.errors import StoryInvalid
from story.formation import SceneMemoryFormer
from story.gate import scene_of
from story.graph import CampaignContext, Writes, node_props
from story.memory import Memories, anchored
from story.recall import summary_record, turn_record
from story.recall_index import RecallIndex
from story.scenes import Scenes, ended_props, queue_scene, scene_opening
from story.transcripts import Transcript, TranscriptLine, TranscriptSession

log = structlog.get_logger(__name__)

#: Lines per story transaction (whole sessions): a session longer than this is written in several.
TURN_BATCH = 1000
#: Lines whose records are embedded and written together, at least (whole sessions, so each turn's
#: neighbours go with it: the index may embed a turn with its neighbours as context).
RECORD_BATCH = 512

#: ``on_progress(stage, n)``: ``n`` more turns written (stage ``"turns"``) or records indexed (``"records"``).
Progress = Callable[[str, int], None]


class TranscriptImport(BaseModel):
    """What an import wrote, and where its time went."""

    campaign_id: str
    world_id: str
    name: str
    format: str
    sessions: int = Field(description="Scenes written, one per session.")
    turns: int = Field(description="Turns written, one per line.")
    records: int = Field(description="Recall records indexed (0 without a memory index).")
    summaries: int = Field(default=0, description="Session summaries written (one per session with words in it).")
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
        """
        started = time.perf_counter()
        # refuse a bad transcript or name before anything is written
        if not name.strip():
            raise StoryInvalid("a campaign imported from a transcript needs a name")
        name = name.strip()
        sessions = transcript.sessions()
        if not sessions:
            raise StoryInvalid(f"transcript {transcript.name!r} has no lines")
        indexing = _Indexing(self.index, on_progress)
        indexing.load_model()
        turns = 0
        records = 0
        summaries = 0
        if world_id is None:
            world = self.campaigns.create_world(
                name, description=f"Imported from the {transcript.format.value} transcript {transcript.name!r}."
            )
            world_id = world.id
        campaign = self.campaigns.create_campaign(world_id, name, profile or StoryProfile(genre="transcript"))
        open_session: _Written | None = None  # a session longer than TURN_BATCH lines, over transactions
        for batch in plan_batches(sessions):
            batch_records: list[RecallRecord] = []
            for pieces in plan_transactions(batch):
                for written in self._write(campaign.id, pieces, open_session):
                    turns += len(written.turns)
                    if on_progress:
                        on_progress("turns", len(written.turns))
                    scene = written.scene
                    batch_records.extend(r for t in written.turns if (r := turn_record(t, scene)) is not None)
                    if written.summary is not None:
                        summaries += 1
                        batch_records.append(summary_record(written.summary, written.session_turns[-1], scene))
                    open_session = None if written.piece.closes else written
            records += len(batch_records)
            indexing.add(batch_records)
        graph_seconds = time.perf_counter() - started - indexing.model_seconds - indexing.seconds
        model_seconds, recall_seconds = indexing.finish()
        report = TranscriptImport(
            campaign_id=campaign.id,
            world_id=world_id,
            name=name,
            format=transcript.format.value,
            sessions=len(sessions),
            turns=turns,
            records=records if self.index is not None else 0,
            summaries=summaries,
            graph_seconds=round(graph_seconds, 3),
            model_seconds=round(model_seconds, 3),
            recall_seconds=round(recall_seconds, 3),
            seconds=round(time.perf_counter() - started, 3),
        )
        log.info("transcript_imported", **report.model_dump())
        return self.campaigns.get_campaign(campaign.id), report

    def _write(self, campaign_id: str, pieces: Sequence[SessionPiece], open_session: _Written | None) -> list[_Written]:
        """One transaction: the pieces' sessions opened, their lines appended at the head as turns, the sessions
        that end here ended and summarised.

        The graph is the one :meth:`Scenes.start_scene`, a batch of turns, :meth:`Scenes.end_scene` (a scene
        without proposals) and :meth:`Memories.add_summary` leave one after another, with the same commits
        (a ``scene``, an ``import`` per piece and a ``gate`` per session, each its own version), in a few reads
        and one write however many sessions. A crash leaves whole transactions, so whole sessions (a session
        longer than :data:`TURN_BATCH` lines spans transactions, an active scene until its last).

        ``open_session``: what was written of the session the first piece continues.
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
            return written, props

        return self.core.mutate(campaign_id, kinds[0], build)

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


@dataclasses.dataclass(frozen=True, slots=True)
class SessionPiece:
    """Lines ``start:stop`` of a session: what one transaction writes of it."""

    session: TranscriptSession
    start: int
    stop: int

    @property
    def lines(self) -> list[TranscriptLine]:
        return self.session.lines[self.start : self.stop]

    @property
    def opens(self) -> bool:
        """The piece starts its session (its scene opens)."""
        return self.start == 0

    @property
    def closes(self) -> bool:
        """The piece ends its session (its scene ends, and is summarised)."""
        return self.stop == len(self.session.lines)


def plan_transactions(sessions: Sequence[TranscriptSession]) -> list[list[SessionPiece]]:
    """The story transactions that write ``sessions``: whole sessions in order, up to :data:`TURN_BATCH` lines
    a transaction; a longer session alone, :data:`TURN_BATCH` lines a transaction."""
    planned: list[list[SessionPiece]] = []
    lines = TURN_BATCH
    for session in sessions:
        n = len(session.lines)
        if n > TURN_BATCH:
            planned.extend([SessionPiece(session, a, min(a + TURN_BATCH, n))] for a in range(0, n, TURN_BATCH))
            lines = TURN_BATCH
            continue
        if lines + n > TURN_BATCH:
            planned.append([])
            lines = 0
        planned[-1].append(SessionPiece(session, 0, n))
        lines += n
    return planned


def commit_kinds(pieces: Sequence[SessionPiece]) -> list[str]:
    """The commits a transaction of ``pieces`` stands for, in order: those of the single writes (a session's
    ``scene`` start, an ``import`` of its turns per piece, its ``gate`` at the end)."""
    kinds = []
    for piece in pieces:
        kinds.extend(["scene"] * piece.opens + ["import"] + ["gate"] * piece.closes)
    return kinds


def plan_batches(sessions: Sequence[TranscriptSession]) -> list[list[TranscriptSession]]:
    """Whole sessions grouped in order until a group holds :data:`RECORD_BATCH` lines (the last may hold fewer):
    the batches whose records are embedded and written together."""
    batches: list[list[TranscriptSession]] = [[]]
    lines = 0
    for session in sessions:
        if lines >= RECORD_BATCH:
            batches.append([])
            lines = 0
        batches[-1].append(session)
        lines += len(session.lines)
    return batches


def scene_title(session: TranscriptSession) -> str:
    """``Session 3 (1:56 pm on 8 May, 2023)``; a session named by words keeps its name."""
    label = f"Session {session.session}" if session.session.isdigit() else session.session
    return f"{label} ({session.time})" if session.time else label


class _Indexing:
    """Embeds and indexes an import's records, a batch of whole sessions at a time, on the importing thread
    once the batch is in the graph.

    Not beside the graph writes: on CPU the embedding fills every core (torch's threads, which wait for
    each other), so work run beside it costs more wall time than it takes CPU time. LoCoMo 41 (663 turns,
    32 summaries) on 2 cores, one process, interleaved: embedding the turns from before the first graph
    write on a thread, the summaries in jobs of their own and the index written on a second thread took
    ~0.5 s longer than writing, then embedding, then indexing. A batch's texts, turns and summaries, go to
    the model in one call (it sorts them by length), each distinct text once, and they are what the index
    itself embeds for the records (:meth:`RecallIndex.indexed_texts`), so a rebuild writes the same
    vectors. The full text is written before the vectors (the repair check looks for the vectors, so a
    crash between the two leaves the records to be written again).

    A failed batch stops the indexing but not the import: the later sessions still go to the graph, the
    record of truth, and :meth:`finish` raises the error at the end (a rebuild then indexes the campaign).
    """

    def __init__(self, index: RecallIndex | None, on_progress: Progress | None) -> None:
        self.index = index
        self.on_progress = on_progress
        self.model_seconds = 0.0
        self.seconds = 0.0  # embedding and writing the records
        self._error: Exception | None = None

    def load_model(self) -> None:
        """Load the model now (a lazy embedder's first call), so that its loading is timed apart."""
        if self.index is not None:
            began = time.perf_counter()
            self.index.embedder.embed_documents(["warm-up"])
            self.model_seconds = time.perf_counter() - began

    def add(self, records: Sequence[RecallRecord]) -> None:
        """Embed and index a batch of whole sessions' records (nothing once a batch has failed)."""
        index = self.index
        if index is None or not records or self._error is not None:
            return
        began = time.perf_counter()
        try:
            texts = index.indexed_texts(records)
            unique = list(dict.fromkeys(texts))
            vectors = dict(zip(unique, index.embedder.embed_documents(unique), strict=True))
            index.write_text(records)
            index.write_vectors(records, np.stack([vectors[t] for t in texts]))
        except Exception as exc:  # raised by finish, once every session is in the graph
            self._error = exc
            return
        finally:
            self.seconds += time.perf_counter() - began
        if self.on_progress:
            self.on_progress("records", len(records))

    def finish(self) -> tuple[float, float]:
        """Seconds spent loading the model, and embedding and writing the records.

        Raises:
            The error of the batch that failed.
        """
        if self._error is not None:
            raise self._error
        return self.model_seconds, self.seconds


@dataclasses.dataclass(frozen=True, slots=True)
class _Written:
    """What a transaction wrote of a session piece: its scene (as it opened), its turns, the session's turns so
    far, and the session's summary when the piece ended it."""

    piece: SessionPiece
    scene: Scene
    turns: list[Turn]
    session_turns: list[Turn]
    summary: Summary | None
