"""A transcript becomes a campaign: one scene per session, one turn per line, every line recallable.

The campaign is an ordinary one (the engine's own scenes, turns on the main branch, lineage, the
recall index), written in bulk: a session's turns go in one story transaction (a few UNWIND
statements, however many lines), not one transaction per line, and their recall records are embedded
in large batches, so a long conversation loads in about the time its embedding takes.

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

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

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
from story.graph import CampaignContext, Writes, node_props
from story.memory import Memories
from story.recall import summary_record, turn_record
from story.recall_index import RecallIndex
from story.scenes import Scenes
from story.transcripts import Transcript, TranscriptSession

log = structlog.get_logger(__name__)

#: Turns per story transaction: a session longer than this is written in several.
TURN_BATCH = 1000
#: Recall records embedded and written together, at least (whole sessions, so each turn's neighbours go
#: with it: the index may embed a turn with its neighbours as context).
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
        if world_id is None:
            world = self.campaigns.create_world(
                name, description=f"Imported from the {transcript.format.value} transcript {transcript.name!r}."
            )
            world_id = world.id
        campaign = self.campaigns.create_campaign(world_id, name, profile or StoryProfile(genre="transcript"))
        indexing = _Indexing(self.index, on_progress)
        turns = 0
        records = 0
        summaries = 0
        try:
            for session in sessions:
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
                session_records = [r for t in session_turns if (r := turn_record(t, scene)) is not None]
                if session_turns and (summary := self._summarise(scene.id, session_turns)) is not None:
                    summaries += 1
                    session_records.append(summary_record(summary, session_turns[-1], scene))
                records += len(session_records)
                indexing.add(session_records)
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
                turn = Turn(
                    campaign_id=ctx.id,
                    branch_id=branch_id,
                    parent_turn_id=parent_id,
                    depth=depth,
                    input_mode=InputMode.DIALOGUE,
                    speaker=Speaker(kind=SpeakerKind.PLAYER, name=line.speaker),
                    text=line.text,
                    status=TurnStatus.RECORDED,
                    scene_id=scene.id,
                    ref=line.ref,
                    story_time=line.time or session.time,
                )
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


def scene_title(session: TranscriptSession) -> str:
    """``Session 3 (1:56 pm on 8 May, 2023)``; a session named by words keeps its name."""
    label = f"Session {session.session}" if session.session.isdigit() else session.session
    return f"{label} ({session.time})" if session.time else label


class _Indexing:
    """Indexes an import's records while the next sessions are written to the graph.

    Records are written in batches of whole sessions (at least :data:`RECORD_BATCH` records, so each
    turn's neighbours go with it) on one background thread: the model embeds a batch (torch releases
    the GIL) while the main thread writes the next sessions' turns, so an import costs about its
    embedding, not its embedding plus its graph writes. The index embeds the records itself, so what
    it embeds is what a rebuild would embed. A failed index write stops the import: :meth:`finish`
    raises it once the graph writes have ended (they are the record of truth and stay).
    """

    def __init__(self, index: RecallIndex | None, on_progress: Progress | None) -> None:
        self.index = index
        self.on_progress = on_progress
        self.model_seconds = 0.0
        self._pending: list[RecallRecord] = []
        self._pool: ThreadPoolExecutor | None = None
        self._writes: list[Future[float]] = []

    def add(self, records: Sequence[RecallRecord]) -> None:
        """Queue a whole session's records; a batch leaves once it holds enough."""
        if self.index is None or not records:
            return
        self._pending.extend(records)
        if len(self._pending) >= RECORD_BATCH:
            self._submit()

    def _submit(self) -> None:
        index = self.index
        if index is None or not self._pending:
            return
        if self._pool is None:
            began = time.perf_counter()
            index.embedder.embed_documents(["warm-up"])  # loads the model (a lazy embedder's first call)
            self.model_seconds = time.perf_counter() - began
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-index")
        batch, self._pending = self._pending, []
        self._writes.append(self._pool.submit(self._write, index, batch))

    def _write(self, index: RecallIndex, batch: list[RecallRecord]) -> float:
        began = time.perf_counter()
        index.write(batch)
        if self.on_progress:
            self.on_progress("records", len(batch))
        return time.perf_counter() - began

    def abandon(self) -> None:
        """The graph writes failed: drop what is queued (what is being written finishes)."""
        self._pending = []
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def finish(self) -> tuple[float, float]:
        """Write what is left and wait for every batch.

        Returns:
            Seconds spent loading the model, and embedding and writing the records.

        Raises:
            The first error of a batch write.
        """
        try:
            self._submit()
            return self.model_seconds, sum(write.result() for write in self._writes)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
