"""A narrated turn, end to end: record → assemble → narrate (streamed) → keep → extract proposals.

1. The turn is recorded at the campaign's head (pending), so a crash mid-generation leaves a
   visible, retryable turn rather than nothing.
2. The prompt is assembled in its fixed order (:mod:`narrator.context`), with retrieved knowledge
   scoped to the campaign and what the campaign recalls for the input (its own past on the turn's
   line, by meaning: :meth:`story.service.StoryService.recall`).
3. The narration streams from the engine; time to first token and tokens are measured.
4. The narration becomes the turn's take, with its prompt snapshot and retrieval records (the
   knowledge passages, and the recalled records with the turns they belong to).
5. The extractor writes proposals as structured output against the typed schema
   (:mod:`narrator.extraction`); each one is validated, repaired where that is safe, or dropped with
   the reason recorded on the turn. They are *staged* on the scene: only the gate makes canon.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from pydantic import BaseModel, Field

from narrator.context import Assembled, PromptAssembler, estimate_tokens, for_viewer
from narrator.engines import AnswerTruncated, NarratorEngine
from narrator.extraction import extraction_messages, extraction_schema, extractor_budget, parse_extraction
from narrator.metrics import NARRATOR_OUTPUT_TOKENS, NARRATOR_REQUESTS, NARRATOR_TTFT
from schemas.desk import SceneNote
from schemas.errors import LorekeeperError, NotFound
from schemas.model_roles import ModelCall, Seat
from schemas.recall import RecallHit, RecallKind
from schemas.search import SearchFilters, SearchHit
from schemas.serving import ServeSettings, TurnRequest
from schemas.story import GenerationMetadata, Turn, WorldStateView
from story.service import StoryService
from story.viewer import TABLE, Viewer

log = structlog.get_logger(__name__)


class SearchBackend(Protocol):
    """Hybrid search over the ingested knowledge (blocking: call it from a worker thread)."""

    def search(
        self, query: str, *, filters: SearchFilters | None = None, limit: int = 10, rerank: bool | None = None
    ) -> list[SearchHit]: ...


@dataclass(frozen=True)
class TurnEngines:
    """The engines that narrate and extract a campaign's turn, with their names on the server."""

    narrator: NarratorEngine
    extractor: NarratorEngine
    narrator_name: str = "narrator"
    extractor_name: str = "narrator"


class TurnOutcome(BaseModel):
    """What a turn produced: the last event of a streamed turn, the body of a JSON one."""

    turn_id: str
    take_id: str
    narration: str
    proposal_ids: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list, description="Extracted proposals dropped, and why.")
    generation: dict[str, Any] = Field(default_factory=dict)
    retrieval_error: str | None = Field(
        default=None, description="Set when the knowledge search failed: the turn was narrated without it."
    )
    recall_error: str | None = Field(
        default=None, description="Set when recall failed: the turn was narrated without the campaign's past."
    )


class TurnFlow:
    """Plays turns for any campaign through the story service, a searcher and two engines."""

    def __init__(
        self,
        story: StoryService,
        narrator: NarratorEngine,
        *,
        settings: ServeSettings,
        extractor: NarratorEngine | None = None,
        searcher: SearchBackend | None = None,
        campaign_filters: Callable[[str], SearchFilters] | None = None,
        narrator_for: Callable[[str], NarratorEngine] | None = None,
        engines_for: Callable[[str], TurnEngines] | None = None,
    ) -> None:
        self.story = story
        self.narrator = narrator
        self.extractor = extractor
        self.narrator_for = narrator_for or (lambda campaign_id: narrator)
        # which engines play the campaign's narrator and extractor (its model roles; a blocking read)
        self.engines_for = engines_for or self._deployment_engines
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="turn-context")
        self.searcher = searcher
        self.settings = settings
        self.assembler = PromptAssembler(budget=settings.context_tokens, window=settings.recent_turns)
        # what the campaign draws on (its library pins; none: the whole library), read each turn
        self.campaign_filters = campaign_filters or story.knowledge_filters

    async def play(
        self, campaign_id: str, request: TurnRequest, *, viewer: Viewer | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Events of one turn: ``turn`` (recorded), ``delta`` (narration pieces), ``done`` (the outcome).

        ``viewer``: the seat the turn is narrated from (:func:`narrator.context.for_viewer`). The narration is
        read by the whole table, so the API narrates every turn from the table's seat (public records only);
        None (the CLI's table, its operator's own) narrates from everything."""
        turn = await asyncio.to_thread(
            self.story.add_turn, campaign_id, request.text, input_mode=request.input_mode, speaker=request.speaker
        )
        yield {"event": "turn", "turn_id": turn.id, "branch_id": turn.branch_id, "depth": turn.depth}
        async for event in self._narrate(campaign_id, turn, request.text, viewer, seed=request.seed):
            yield event

    async def retake(
        self, campaign_id: str, turn_id: str, *, viewer: Viewer | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Narrate a turn again as a new take (a retry); the old takes stay. ``viewer`` as for :meth:`play`."""
        turn = await asyncio.to_thread(self.story.get_turn, turn_id)
        if turn.campaign_id != campaign_id:
            raise NotFound("story", f"no turn {turn_id!r} in campaign {campaign_id!r}")
        yield {"event": "turn", "turn_id": turn.id, "branch_id": turn.branch_id, "depth": turn.depth}
        # a retake's rewind may have forked at the turn: the new take is told from the head's branch, which
        # sees none of the canon committed at the turn after its first take (the state read does the same)
        campaign = await asyncio.to_thread(self.story.get_campaign, campaign_id)
        seen_from = campaign.active_branch_id if campaign.head_turn_id == turn.id else None
        async for event in self._narrate(campaign_id, turn, turn.text, viewer, seen_from=seen_from):
            yield event

    async def _narrate(
        self,
        campaign_id: str,
        turn: Turn,
        text: str,
        viewer: Viewer | None = None,
        *,
        seen_from: str | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        # one worker hop before the first token: the campaign's engines, then its context
        engines, assembled, state = await asyncio.to_thread(
            self._prepare, campaign_id, turn, text, viewer, seen_from=seen_from
        )
        engine = engines.narrator
        # the prompt and retrieval records need nothing of the narration: written while the model writes it
        records = self._record(turn, assembled)
        started = time.perf_counter()
        first: float | None = None
        pieces: list[str] = []
        status = "ok"
        try:
            async for piece in engine.stream(
                assembled.messages,
                max_tokens=self.settings.narrator_max_tokens,
                temperature=self.settings.narrator_temperature,
                seed=seed,
            ):
                if first is None:
                    first = time.perf_counter() - started
                    NARRATOR_TTFT.labels(model=engine.model).observe(first)
                pieces.append(piece)
                yield {"event": "delta", "text": piece}
        except BaseException:
            status = "error"
            raise
        finally:
            NARRATOR_REQUESTS.labels(model=engine.model, status=status).inc()
        latency = time.perf_counter() - started
        narration = "".join(pieces).strip() or "(the narrator is silent)"
        # Engines stream pieces (a token, or a few batched across processes): count tokens by estimate.
        tokens = estimate_tokens(narration)
        NARRATOR_OUTPUT_TOKENS.labels(model=engine.model).inc(tokens)
        generation = GenerationMetadata(
            model=engine.model,
            prompt_tokens=assembled.snapshot.total_tokens,
            completion_tokens=tokens,
            latency_ms=latency * 1000,
            time_to_first_token_ms=(first or latency) * 1000,
            temperature=self.settings.narrator_temperature,
            seed=seed,
            prompt_snapshot_id=assembled.snapshot.id,
        )
        take = await asyncio.to_thread(self._keep, turn, narration, generation, records)
        proposal_ids, dropped = await self._extract(campaign_id, turn, text, narration, state, engines.extractor)
        if dropped:
            await asyncio.to_thread(self.story.note_extraction, turn.id, dropped)
        log.info(
            "turn_narrated",
            campaign_id=campaign_id,
            turn_id=turn.id,
            ttft_ms=round(generation.time_to_first_token_ms or 0, 1),
            latency_ms=round(generation.latency_ms, 1),
            pieces=len(pieces),
            proposals=len(proposal_ids),
            dropped=len(dropped),
        )
        outcome = TurnOutcome(
            turn_id=turn.id,
            take_id=take,
            narration=narration,
            proposal_ids=proposal_ids,
            dropped=dropped,
            generation=generation.model_dump(mode="json"),
            retrieval_error=assembled.retrieval.error if assembled.retrieval else None,
            recall_error=assembled.recall.error if assembled.recall else None,
        )
        yield {"event": "done", **outcome.model_dump(mode="json")}

    def _deployment_engines(self, campaign_id: str) -> TurnEngines:
        narrator = self.narrator_for(campaign_id)
        if self.extractor is None:
            return TurnEngines(narrator, narrator)
        return TurnEngines(narrator, self.extractor, extractor_name="extractor")

    def _calls(self, engines: TurnEngines) -> list[ModelCall]:
        """The model calls of a turn (the narration, the extraction), as its prompt snapshot records them."""
        s = self.settings
        narrate = ModelCall(
            seat=Seat.NARRATOR,
            engine=engines.narrator_name,
            model=engines.narrator.model,
            max_tokens=s.narrator_max_tokens,
            temperature=s.narrator_temperature,
        )
        extract = ModelCall(
            seat=Seat.EXTRACTOR,
            engine=engines.extractor_name,
            model=engines.extractor.model,
            max_tokens=extractor_budget(s, engines.extractor),
            temperature=0.0,
        )
        return [narrate, extract]

    # -- the blocking parts (run in a worker thread) ---------------------------------------------

    def _prepare(
        self, campaign_id: str, turn: Turn, text: str, viewer: Viewer | None, *, seen_from: str | None
    ) -> tuple[TurnEngines, Assembled, WorldStateView]:
        """The campaign's engines and the turn's prompt (:meth:`_assemble`), in one worker hop."""
        engines = self.engines_for(campaign_id)
        assembled, state = self._assemble(campaign_id, turn, text, engines.narrator.model, viewer, seen_from=seen_from)
        assembled.snapshot.calls = self._calls(engines)
        return engines, assembled, state

    def _assemble(
        self,
        campaign_id: str,
        turn: Turn,
        text: str,
        model: str,
        viewer: Viewer | None = None,
        *,
        seen_from: str | None = None,
    ) -> tuple[Assembled, WorldStateView]:
        """The prompt, and the state it shows (the extractor reuses it): for a player's turn (``viewer``), only
        the records that player may see.

        Everything the story holds for the turn comes in one call (:meth:`StoryService.turn_context`,
        a few graph round trips); the knowledge search and the recall (one embedding of the input,
        shared, which releases the GIL, and two index queries each) run beside it. ``seen_from``: the branch
        the turn is recalled from (a retake's head branch; None: the turn's own).
        """
        search = self._pool.submit(self._knowledge, campaign_id, text)
        filtered = viewer is not None
        recall = self._pool.submit(self._recall, campaign_id, turn, text, filtered=filtered, seen_from=seen_from)
        context = self.story.turn_context(campaign_id, turn=turn, recent=self.settings.recent_turns)
        notes = self.story.triggers.notes_for(turn)
        hits, retrieval_error = search.result()
        recalled, recall_error = recall.result()
        # the recent turns the prompt's window shows (it moves in steps: narrator.context); the others are recalled
        start = self.assembler.window_start(turn.depth)
        context = context.model_copy(update={"recent": [t for t in context.recent if t.depth >= start]})
        if recalled is not None:
            # the turn itself and the recent turns are in the prompt verbatim already
            verbatim = {turn.id, *(t.id for t in context.recent)}
            recalled = [h for h in recalled if not (h.kind is RecallKind.TURN and h.turn_id in verbatim)]
        shared_notes: list[SceneNote] = []
        if recalled is not None and any(h.kind is RecallKind.NOTE for h in recalled):
            # the GM's notes reach the narration (which the table reads) only when shared with the whole table,
            # whatever the seat: the narrator is never told what the GM keeps to themself
            shared_notes = [n for n in self.story.desk.notes.of_campaign(campaign_id) if TABLE.sees(n.visibility)]
            shared = {n.id for n in shared_notes}
            recalled = [h for h in recalled if h.kind is not RecallKind.NOTE or h.id in shared]
        if viewer is not None:  # before the cut: a hidden record does not take a shown one's place
            context, recalled = for_viewer(viewer, context, recalled, notes=shared_notes)
        if recalled is not None:
            recalled = recalled[: self.settings.recall_hits]
        assembled = self.assembler.assemble(
            turn=turn,
            model=model,
            campaign=context.campaign,
            axioms=context.axioms,
            state=context.state,
            hits=hits,
            query=text,
            memories=context.memories,
            summaries=context.summaries,
            recent=context.recent,
            # the GM's notes from triggers fired for this turn: last, so the prompt's prefix stays the same
            player_input="\n\n".join([text, *(f"[GM's note to the narrator] {n}" for n in notes)]) if notes else text,
            retrieval_error=retrieval_error,
            recalled=recalled,
            recall_error=recall_error,
        )
        return assembled, context.state

    def _knowledge(self, campaign_id: str, text: str) -> tuple[list[SearchHit], str | None]:
        """The knowledge hits for a turn, or none and why the search failed.

        Knowledge is a help, not a precondition of narrating: a failed search does not stop the turn,
        but the turn's retrieval record and its response say so, so the table knows what it got.
        """
        if self.searcher is None or not text.strip() or not self.settings.knowledge_hits:
            return [], None
        try:
            hits = self.searcher.search(
                text, filters=self.campaign_filters(campaign_id), limit=self.settings.knowledge_hits
            )
            return hits, None
        except LorekeeperError as exc:
            log.warning("turn_search_failed", campaign_id=campaign_id, error=exc.message)
            return [], f"knowledge search failed: {exc.client_message}"

    def _recall(
        self, campaign_id: str, turn: Turn, text: str, *, filtered: bool = False, seen_from: str | None = None
    ) -> tuple[list[RecallHit] | None, str | None]:
        """What the campaign recalls for the input on the turn's line, or None and why it could not.

        None without an input, a memory index or ``recall_hits`` (the prompt then lists the line's
        memories instead). Recall is a help, like knowledge: when it fails the turn goes on without
        it (event ``recall_failed``), and its record and the response say why. ``filtered``: the hits
        will be cut to what a seat may see, so four times as many are asked for (as the API's recall does).
        ``seen_from``: the branch the turn is seen from (None: its own).
        """
        if self.story.recall_index is None or not text.strip() or not self.settings.recall_hits:
            return None, None
        # enough to fill the section after the recent turns (already in the prompt) and, for a seat, the
        # records hidden from it are taken out
        wanted = self.settings.recall_hits * (4 if filtered else 1)
        limit = min(100, wanted + self.settings.recent_turns + 1)
        try:
            # the table's turns still being indexed (story.recall_writer) are its latest, in the prompt verbatim
            hits = self.story.recall(
                campaign_id,
                text,
                as_of_turn_id=turn.id,
                branch_id=seen_from,
                limit=limit,
                wait_for_turns=not self.settings.recent_turns,
            )
            return hits, None
        except Exception as exc:  # noqa: BLE001 - the memory index is derived and optional: never fail a turn on it
            message = exc.client_message if isinstance(exc, LorekeeperError) else type(exc).__name__
            log.warning("recall_failed", campaign_id=campaign_id, turn_id=turn.id, error=repr(exc))
            return None, f"recall failed: {message}"

    def _record(self, turn: Turn, assembled: Assembled) -> list[Future[Any]]:
        """The prompt snapshot and the retrieval records, submitted to be written beside the generation
        (before, they were written after it, on every turn's way to ``done``: 20-35 ms a turn on the embedded
        stores). Narrated or not, the turn keeps what was sent for it; a write that fails is logged, and
        raised by :meth:`_keep` when the turn goes on to its take."""
        writes: list[Future[Any]] = [
            self._pool.submit(self.story.record_prompt, turn.id, assembled.text, assembled.snapshot)
        ]
        for record in (assembled.retrieval, assembled.recall):
            if record is not None:
                writes.append(self._pool.submit(self.story.record_retrieval, record))
        for write in writes:
            write.add_done_callback(functools.partial(_log_failed_record, turn.id))
        return writes

    def _keep(self, turn: Turn, narration: str, generation: GenerationMetadata, records: list[Future[Any]]) -> str:
        """The take, once the turn's prompt and retrieval records (:meth:`_record`) are written."""
        take = self._pool.submit(self.story.add_take, turn.id, narration, generation=generation)
        for write in records:  # every write finishes (or raises) before the turn is done
            write.result()
        return take.result().id

    async def _extract(
        self,
        campaign_id: str,
        turn: Turn,
        text: str,
        narration: str,
        state: WorldStateView,
        extractor: NarratorEngine,
    ) -> tuple[list[str], list[str]]:
        messages = extraction_messages(state, text, narration)
        try:
            budget = extractor_budget(self.settings, extractor)
            # off the event loop: narrowing the schema to a new cast costs tens of ms of CPU, and the loop
            # streams every other table's narration meanwhile (it is cached per budget and cast)
            schema = await asyncio.to_thread(extraction_schema, budget, [e.id for e in state.entities])
            raw = await extractor.structured(messages, schema=schema, max_tokens=budget)
        except AnswerTruncated as exc:  # a cut document is no answer: say so, never read it as "nothing found"
            return [], [f"extractor answer cut short: {exc.detail}"]
        except LorekeeperError as exc:
            return [], [f"extractor unavailable: {exc.message}"]
        batch, dropped = parse_extraction(raw)
        if not batch:
            return [], dropped
        scene_id = await asyncio.to_thread(self._scene_for, campaign_id)
        staged: list[str] = []
        for index, item in enumerate(batch):
            try:
                proposal = await asyncio.to_thread(
                    self.story.propose,
                    scene_id,
                    type=item.content.type,
                    content=item.content.model_dump(mode="json"),
                    authority="system",
                    confidence=item.confidence,
                    turn_id=turn.id,
                    proposed_by="extractor",
                    evidence={"turn_ids": [turn.id], "quote": item.quote},
                )
                staged.append(proposal.id)
            except LorekeeperError as exc:
                dropped.append(f"proposal {index}: {exc.message}")
        return staged, dropped

    def _scene_for(self, campaign_id: str) -> str:
        """The scene active at the head, opening one when none is (proposals are staged on scenes; a scene
        active on another branch is not this one's)."""
        active = self.story.active_scene(campaign_id)
        return active.id if active is not None else self.story.start_scene(campaign_id).id


def _log_failed_record(turn_id: str, write: Future[Any]) -> None:
    """Say when a turn's prompt or retrieval record could not be written (a narration that failed or was left
    never reaches :meth:`TurnFlow._keep`, which raises it)."""
    if not write.cancelled() and write.exception() is not None:
        log.warning("turn_record_failed", turn_id=turn_id, error=repr(write.exception()))
