"""A transcript becomes a campaign: one scene per session, one turn per line, every line recallable.

The campaign is an ordinary one (the engine's own scenes, turns on the main branch, lineage, the
recall index), written in bulk: a session's turns go in one story transaction (a few UNWIND
statements, however many lines), not one transaction per line, and their recall records are embedded
in large batches, the turns' texts from before the first graph write (they hold no graph id), so a
long conversation loads in about the time its embedding takes.

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

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
from story.graph import CampaignContext, Writes, node_props
from story.memory import Memories
from story.recall import summary_record, turn_record
from story.recall_index import RecallIndex
from story.scenes import Scenes
from story.transcripts import Transcript, TranscriptLine, TranscriptSession

log = structlog.get_logger(__name__)

#: Turns per story transaction: a session longer than this is written in several.
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
            for batch in batches:
                batch_records: list[RecallRecord] = []
                for session in batch:
                    scene = self.scenes.start_scene(campaign.id, title=scene_title(session))
                    session_turns: list[Turn] = []
                    for start in range(0, len(session.lines), TURN_BATCH):
                        written = self._write_turns(campaign.id, scene, session, start)
                        session_turns.extend(written)
                        if on_progress:
                            on_progress("turns", len(written))
                    # the chapter's end, not the service's: the service would index the scene's turns one
                    # batch per scene; they are indexed in bulk, on a thread, while the next sessions are written
                    self.scenes.end_scene(scene.id)
                    turns += len(session_turns)
                    batch_records.extend(r for t in session_turns if (r := turn_record(t, scene)) is not None)
                    if session_turns and (summary := self._summarise(scene.id, session_turns)) is not None:
                        summaries += 1
                        batch_records.append(summary_record(summary, session_turns[-1], scene))
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

    def _summarise(self, scene_id: str, turns: Sequence[Turn]) -> Summary | None:
        """The ended session's summary, written to the graph (None: no former, or nothing to say)."""
        if self.former is None or self.memories is None:
            return None
        scene = self.scenes.get_scene(scene_id)
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
        return self.memories.add_summary(summary)

    def _write_turns(self, campaign_id: str, scene: Scene, session: TranscriptSession, start: int) -> list[Turn]:
        """One transaction: the session's lines from ``start`` as turns appended at the head."""
        lines = session.lines[start : start + TURN_BATCH]

        def build(ctx: CampaignContext, writes: Writes) -> tuple[list[Turn], dict[str, Any]]:
            branch_id, fork = write_branch(ctx, writes)
            parent_id = ctx.head.id if ctx.head else None
            depth = ctx.head_depth
            turns = []
            for line in lines:
                depth += 1
                turn = line_turn(line, session, ctx.id, branch_id, scene.id, parent_id=parent_id, depth=depth)
                turns.append(turn)
                parent_id = turn.id
            # the same nodes and edges add_turn writes, a session at a time
            writes.add(*cypher.create_nodes("Turn", [node_props(t, parent_uid=t.parent_turn_id) for t in turns]))
            links = [(t.id, t.parent_turn_id) for t in turns if t.parent_turn_id is not None]
            if links:
                writes.add(*cypher.link_nodes("Turn", "CHILD_OF", "Turn", links))
            writes.add(*cypher.set_branch_tip(branch_id, turns[-1].id, turns[-1].depth))
            return turns, {"head_turn_id": turns[-1].id, "active_branch_id": branch_id, **fork}

        return self.core.mutate(campaign_id, "import", build)


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

    Two threads. The embedding thread starts on the turns' texts before the first graph write
    (:meth:`prefetch`, one job per planned batch, a batch or two ahead of the index writes so a long
    transcript's vectors are not all held at once): the model embeds (torch releases the GIL) while the
    main thread writes turns. Each batch of whole sessions, once written (:meth:`add`), queues the texts
    the prediction did not hold (the session summaries, known only once a session is written) behind
    the prefetch jobs, so the embedding thread never waits. The writing thread writes a batch's full text
    once its turns' vectors are ready (:meth:`RecallIndex.write_text`, while the rest is embedded), then
    its vectors (:meth:`RecallIndex.write_vectors`). What is embedded is what the index itself would embed
    for the records (:meth:`RecallIndex.indexed_texts`, looked up by exact text; a text no job held, a
    turn predicted wrong, is embedded then), so a rebuild writes the same vectors. A failed batch stops
    the import: :meth:`finish` raises it once the graph writes have ended (they are the record of truth
    and stay).
    """

    #: Prefetch jobs queued ahead of the batch being written.
    AHEAD = 2

    def __init__(self, index: RecallIndex | None, on_progress: Progress | None) -> None:
        self.index = index
        self.on_progress = on_progress
        self.model_seconds = 0.0
        self._embedding: ThreadPoolExecutor | None = None
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
        self._embedding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-embed")
        self._writing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-index")
        self._planned = texts
        self._ahead(self.AHEAD - 1)

    def _ahead(self, last: int) -> None:
        """Queue the prefetch jobs of the planned batches up to ``last``."""
        with self._lock:
            while len(self._prefetched) <= min(last, len(self._planned) - 1):
                texts = self._planned[len(self._prefetched)]
                assert self._embedding is not None and self.index is not None
                self._prefetched.append(self._embedding.submit(_embed, self.index.embedder, texts))

    def add(self, records: Sequence[RecallRecord]) -> None:
        """Queue the next planned batch's records (whole sessions) for the index, and the embedding of
        its texts the prediction did not hold (its session summaries) behind the prefetch jobs queued."""
        index, embedding, writing = self.index, self._embedding, self._writing
        if index is None or embedding is None or writing is None:
            return
        number = len(self._writes)
        self._ahead(number + self.AHEAD - 1)  # the graph writes ran ahead of the writing thread
        extra: Future[_Embedded] | None = None
        if not index.config.context_in_vector:  # else a record's text waits for its indexed neighbours
            planned = set(self._planned[number]) if number < len(self._planned) else set()
            if texts := [t for r in records if (t := index.indexed_text(r)) not in planned]:
                extra = embedding.submit(_embed, index.embedder, texts)
        self._writes.append(writing.submit(self._write, number, list(records), extra))

    def _write(self, number: int, batch: list[RecallRecord], extra: Future[_Embedded] | None) -> float:
        index, embedding = self.index, self._embedding
        assert index is not None and embedding is not None
        self._ahead(number + self.AHEAD)
        prefetched = self._prefetched[number].result() if number < len(self._prefetched) else _Embedded({}, 0.0)
        began = time.perf_counter()
        index.write_text(batch)  # needs no vectors: written while the summaries are embedded
        writing = time.perf_counter() - began
        vectors, seconds = prefetched.vectors, prefetched.seconds
        if extra is not None:
            vectors = {**vectors, **extra.result().vectors}
            seconds += extra.result().seconds
        texts = index.indexed_texts(batch)
        if missing := [t for t in texts if t not in vectors]:  # any text neither job held
            rest = embedding.submit(_embed, index.embedder, missing).result()
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
        for pool in (self._writing, self._embedding):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

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


@dataclass(frozen=True, slots=True)
class _Embedded:
    """Vectors by the exact text embedded, and the seconds the embedding took."""

    vectors: dict[str, np.ndarray]
    seconds: float


def _embed(embedder: Embedder, texts: Sequence[str]) -> _Embedded:
    began = time.perf_counter()
    unique = list(dict.fromkeys(texts))
    vectors = embedder.embed_documents(unique) if unique else np.zeros((0, embedder.dim), dtype=np.float32)
    return _Embedded(dict(zip(unique, vectors, strict=True)), time.perf_counter() - began)
