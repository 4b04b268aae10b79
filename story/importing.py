"""A transcript becomes a campaign: one scene per session, one turn per line, every line recallable.

The campaign is an ordinary one (the engine's own scenes, turns on the main branch, lineage, the
recall index), written in bulk: sessions go to the graph whole, up to :data:`TURN_BATCH` lines a story
transaction (each session's scene start, its turns as a few UNWIND statements, its end and its summary),
with the commits and nodes the single writes would leave, and their recall records are embedded in
large batches, the turns' texts from before the first graph write (they hold no graph id), so a long
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

Importing the same file twice makes two campaigns (a transcript is not an identity); re-indexing
a campaign (:meth:`story.recall.Recollection.rebuild`) rewrites the same records, since they are
built by the same :func:`story.recall.turn_record` from the same turns and scenes.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import structlog
from pydantic import BaseModel, Field

from models.embedding import Embedder
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
#: neighbours go with it: the index may embed a turn with its neighbours as context). A conversation of up
#: to this many lines is one batch: LoCoMo 41 (663 lines) imported 0.3 s faster as one batch than as two.
RECORD_BATCH = 1000

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
        batches = plan_batches(sessions)
        # the turns' texts do not depend on graph ids: their embedding starts now, beside the graph writes
        indexing.prefetch([predicted_texts(self.index, batch) for batch in batches] if self.index else [])
        turns = 0
        records = 0
        summaries = 0
        try:
            if world_id is None:
                world = self.campaigns.create_world(
                    name, description=f"Imported from the {transcript.format.value} transcript {transcript.name!r}."
                )
                world_id = world.id
            campaign = self.campaigns.create_campaign(world_id, name, profile or StoryProfile(genre="transcript"))
            open_session: _Written | None = None  # a session longer than TURN_BATCH lines, over transactions
            for batch in batches:
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
        except BaseException:
            indexing.abandon()
            raise
        graph_seconds = time.perf_counter() - started - indexing.model_seconds
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


class _Indexing:
    """Embeds and indexes an import's records while its sessions are written to the graph.

    Two threads. The embedding thread starts on the turns' texts before the first graph write (:meth:`prefetch`,
    one job per planned batch, a batch or two ahead of the index writes so a long transcript's vectors are not
    all held at once): the model embeds (torch releases the GIL) while the main thread writes turns. Each batch
    of whole sessions, once written (:meth:`add`), queues the texts the prediction did not hold (the session
    summaries, known only once a session is written) before the next batch's prefetch job if that has not begun
    (:class:`_EmbeddingQueue`), so the batch's vectors are written while the next batch is embedded, and the
    embedding thread never waits. The writing thread writes a batch's full text once its turns' vectors are
    ready (:meth:`RecallIndex.write_text`, while the rest is embedded), then its vectors
    (:meth:`RecallIndex.write_vectors`). What is embedded is what the index itself would embed for the records
    (:meth:`RecallIndex.indexed_texts`, looked up by exact text; a text no job held, a turn predicted wrong, is
    embedded then), so a rebuild writes the same vectors. A failed batch stops the import: :meth:`finish` raises
    it once the graph writes have ended (they are the record of truth and stay).
    """

    #: Prefetch jobs queued ahead of the batch being written.
    AHEAD = 2

    def __init__(self, index: RecallIndex | None, on_progress: Progress | None) -> None:
        self.index = index
        self.on_progress = on_progress
        self.model_seconds = 0.0
        self._embedding: _EmbeddingQueue | None = None
        self._writing: ThreadPoolExecutor | None = None
        self._planned: list[list[str]] = []
        self._prefetched: list[Future[_Embedded]] = []
        self._lock = threading.Lock()
        self._writes: list[Future[float]] = []

    def prefetch(self, texts: list[list[str]]) -> None:
        """Load the model and start embedding the predicted texts, one job per planned batch."""
        index = self.index
        if index is None:
            return
        began = time.perf_counter()
        index.embedder.embed_documents(["warm-up"])  # loads the model (a lazy embedder's first call)
        self.model_seconds = time.perf_counter() - began
        self._embedding = _EmbeddingQueue(index.embedder)
        self._writing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-index")
        self._planned = texts
        self._ahead(self.AHEAD - 1)

    def _ahead(self, last: int) -> None:
        """Queue the prefetch jobs of the planned batches up to ``last``."""
        with self._lock:
            while len(self._prefetched) <= min(last, len(self._planned) - 1):
                number = len(self._prefetched)
                assert self._embedding is not None
                self._prefetched.append(self._embedding.submit((number, 0), self._planned[number]))

    def add(self, records: Sequence[RecallRecord]) -> None:
        """Queue the next planned batch's records (whole sessions) for the index, and the embedding of
        its texts the prediction did not hold (its session summaries) before the later batches' prefetch."""
        index, embedding, writing = self.index, self._embedding, self._writing
        if index is None or embedding is None or writing is None:
            return
        number = len(self._writes)
        self._ahead(number + self.AHEAD - 1)  # the graph writes ran ahead of the writing thread
        extra: Future[_Embedded] | None = None
        texts: list[str] | None = None
        if not index.config.context_in_vector:  # else a record's text waits for its indexed neighbours
            texts = index.indexed_texts(records)
            planned = set(self._planned[number]) if number < len(self._planned) else set()
            if unplanned := [t for t in texts if t not in planned]:
                extra = embedding.submit((number, 1), unplanned)
        self._writes.append(writing.submit(self._write, number, list(records), extra, texts))

    def _write(
        self, number: int, batch: list[RecallRecord], extra: Future[_Embedded] | None, texts: list[str] | None
    ) -> float:
        """Write a batch once its vectors are ready. ``texts``: what the index embeds for ``batch``, when
        :meth:`add` knew them already (without ``context_in_vector``)."""
        index, embedding = self.index, self._embedding
        assert index is not None and embedding is not None
        self._ahead(number + self.AHEAD)
        prefetched = self._prefetched[number].result() if number < len(self._prefetched) else _Embedded({}, 0.0)
        began = time.perf_counter()
        index.write_text(batch)  # needs no vectors: written while the summaries are embedded
        writing = time.perf_counter() - began
        vectors, seconds = prefetched.vectors, prefetched.seconds
        if extra is not None:
            summaries = extra.result()
            vectors = {**vectors, **summaries.vectors}
            seconds += summaries.seconds
        if texts is None:
            texts = index.indexed_texts(batch)
        if missing := [t for t in texts if t not in vectors]:  # any text neither job held
            rest = embedding.submit((number, 1), missing).result()
            vectors = {**vectors, **rest.vectors}
            seconds += rest.seconds
        began = time.perf_counter()
        if batch:
            index.write_vectors(batch, np.stack([vectors[t] for t in texts]))
        if self.on_progress:
            self.on_progress("records", len(batch))
        return seconds + writing + time.perf_counter() - began  # embedding and writing, not waiting

    def abandon(self) -> None:
        """The graph writes failed: drop what is queued (what is running finishes)."""
        if self._writing is not None:
            self._writing.shutdown(wait=True, cancel_futures=True)
        if self._embedding is not None:
            self._embedding.shutdown()

    def finish(self) -> tuple[float, float]:
        """Wait for every batch.

        Returns:
            Seconds spent loading the model, and embedding and writing the records.

        Raises:
            The first error of a batch.
        """
        try:
            return self.model_seconds, sum(write.result() for write in self._writes)
        finally:
            self.abandon()


class _EmbeddingQueue:
    """One thread that embeds the queued jobs, the lowest ``(batch, rank)`` first (submission order among
    equals): a batch's summaries (rank 1), queued once its sessions are written, go before a later batch's
    prefetched turns (rank 0) that have not begun, which a first-in-first-out pool would embed first,
    leaving the batch's vectors to wait for them."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._jobs: list[tuple[tuple[int, int], int, list[str], Future[_Embedded]]] = []
        self._seq = 0
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="import-embed", daemon=True)
        self._thread.start()

    def submit(self, priority: tuple[int, int], texts: Sequence[str]) -> Future[_Embedded]:
        """Queue ``texts``; the future holds their vectors."""
        future: Future[_Embedded] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the import's embedding has stopped")
            heapq.heappush(self._jobs, (priority, self._seq, list(texts), future))
            self._seq += 1
            self._ready.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if not self._jobs:
                    return
                *_, texts, future = heapq.heappop(self._jobs)
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(_embed(self.embedder, texts))
                except BaseException as exc:  # the waiting writer raises it
                    future.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not begun and wait for what has."""
        with self._ready:
            self._closed = True
            for *_, future in self._jobs:
                future.cancel()
            self._jobs.clear()
            self._ready.notify()
        self._thread.join()


@dataclasses.dataclass(frozen=True, slots=True)
class _Written:
    """What a transaction wrote of a session piece: its scene (as it opened), its turns, the session's turns so
    far, and the session's summary when the piece ended it."""

    piece: SessionPiece
    scene: Scene
    turns: list[Turn]
    session_turns: list[Turn]
    summary: Summary | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Embedded:
    """Vectors by the exact text embedded, and the seconds the embedding took."""

    vectors: dict[str, np.ndarray]
    seconds: float


def _embed(embedder: Embedder, texts: Sequence[str]) -> _Embedded:
    began = time.perf_counter()
    unique = list(dict.fromkeys(texts))
    vectors = embedder.embed_documents(unique) if unique else np.zeros((0, embedder.dim), dtype=np.float32)
    return _Embedded(dict(zip(unique, vectors, strict=True)), time.perf_counter() - began)
