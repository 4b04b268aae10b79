"""The narrator's memories section holds what the campaign recalls for the input, and the turn says so.

A turn recalls on its own line for the player's input: the prompt's memories section holds the
recalled records (kind, text, the turn they belong to), not every memory of the branch; the recent
turns already in the prompt are not recalled again; the turn's recall record names the recalled
turns. A recall that fails does not fail the turn. The echo engine narrates; the stores, the memory
index and the embedding model are real.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from models.embedding import EmbeddingError
from narrator.engines import EchoEngine
from narrator.turn import TurnFlow, TurnOutcome
from schemas.serving import ServeSettings, TurnRequest
from schemas.story import Memory, RetrievalRecord, RetrievalSource, TurnProvenance
from story.service import StoryService
from tests.unit.test_story_campaign import gm_entity, new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the story

CARAVAN = "Hulda the smith whispers that bandits seized the salt caravan at the old ford."
FILLER = (
    "I buy a loaf of rye bread and a wedge of cheese.",
    "I climb the bell tower and watch the sunset over the harbour.",
    "I practise sword drills in the courtyard until my arms ache.",
    "I mend my torn cloak by the fire.",
    "I feed the stable horses a bucket of oats.",
    "I count my coins twice and sigh.",
)
SETTINGS = ServeSettings(recent_turns=2, recall_hits=2, knowledge_hits=0)


def play(flow: TurnFlow, campaign_id: str, text: str) -> TurnOutcome:
    async def run() -> dict[str, Any]:
        events = [event async for event in flow.play(campaign_id, TurnRequest(text=text))]
        return events[-1]

    return TurnOutcome.model_validate(asyncio.run(run()))


def memories_section(provenance: TurnProvenance) -> list[str]:
    assert provenance.prompt_text is not None
    section = provenance.prompt_text.split("# Memories and summaries\n", 1)[1].split("\n\n# Recent turns", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def recall_record(provenance: TurnProvenance) -> RetrievalRecord | None:
    found = [r for r in provenance.retrievals if r.source is RetrievalSource.RECALL]
    assert len(found) <= 1
    return found[0] if found else None


def _table(story: StoryService) -> tuple[str, str, str, list[str]]:
    """A campaign with a character, the turn where the caravan's fate is told, then six other turns."""
    story.memory_former = None  # only the records this test writes
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We reach the forge.", narration="Sparks fly from the anvil.")
    scene = story.start_scene(campaign.id, title="Cast")
    ayla = gm_entity(story, scene.id, "character", "Ayla")
    story.end_scene(scene.id)
    told = story.add_turn(campaign.id, CARAVAN, narration="She glances at the door before she goes on.").id
    later = [story.add_turn(campaign.id, text, narration=f"(narration of: {text})").id for text in FILLER]
    return campaign.id, ayla, told, later


def test_the_prompt_holds_what_is_recalled_and_the_turn_names_it(recalling_story: StoryService) -> None:
    story = recalling_story
    cid, ayla, told, later = _table(story)
    story.add_memory(
        Memory(campaign_id=cid, observer_entity_id=ayla, text="Ayla loves green apples.", anchor_turn_id=later[0])
    )
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=SETTINGS)

    outcome = play(flow, cid, "What did the smith tell us about the caravan?")
    assert outcome.recall_error is None
    provenance = story.provenance(outcome.turn_id)
    lines = memories_section(provenance)
    assert len(lines) == SETTINGS.recall_hits  # the recalled records, not every memory of the branch
    assert lines[0].startswith("- (turn 2) turn: Player: Hulda the smith whispers")
    assert "Narrator: She glances at the door" in lines[0]
    assert not any("green apples" in line for line in lines)

    record = recall_record(provenance)
    assert record is not None and record.error is None
    assert record.query == "What did the smith tell us about the caravan?"
    assert record.recalled_turn_ids[0] == told
    assert record.recalled[0].record_id == told and record.recalled[0].kind == "turn"
    assert set(record.recalled[0].leg_scores) <= {"vector", "full_text"} and record.recalled[0].fused_score
    # the recent turns (in the prompt verbatim) and the turn itself are not recalled again
    assert not {outcome.turn_id, *later[-SETTINGS.recent_turns :]} & set(record.recalled_turn_ids)
    assert all(h.used_in_prompt for h in record.recalled)
    # the knowledge record, if any, stays the knowledge one
    assert all(r.source is RetrievalSource.KNOWLEDGE for r in provenance.retrievals if r is not record)


def test_a_memory_is_recalled_with_its_kind_and_turn(recalling_story: StoryService) -> None:
    story = recalling_story
    cid, ayla, told, later = _table(story)
    memory = story.add_memory(
        Memory(
            campaign_id=cid,
            observer_entity_id=ayla,
            kind="claim",
            text="The reeve was paid to look away while the caravan was robbed.",
            anchor_turn_id=told,
            salience=0.9,
        )
    )
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=SETTINGS.model_copy(update={"recall_hits": 3}))
    outcome = play(flow, cid, "Was the reeve bribed to ignore the robbery?")
    provenance = story.provenance(outcome.turn_id)
    record = recall_record(provenance)
    assert record is not None and record.recalled[0].record_id == memory.id
    assert record.recalled[0].kind == "memory" and record.recalled[0].turn_id == told
    assert memories_section(provenance)[0] == (
        "- (turn 2) memory: The reeve was paid to look away while the caravan was robbed."
    )


class QueriesFail:
    """An embedding model that embeds records but fails on every query (a recall that cannot run)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> np.ndarray:
        raise EmbeddingError("the model failed on a batch")


def test_a_failed_recall_does_not_fail_the_turn(recalling_story: StoryService) -> None:
    story = recalling_story
    cid, ayla, told, later = _table(story)
    fear = Memory(campaign_id=cid, observer_entity_id=ayla, text="Ayla fears deep water.", anchor_turn_id=told)
    story.add_memory(fear)
    index = story.recall_index
    assert index is not None
    index.embedder = QueriesFail(index.embedder)
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=SETTINGS)

    with capture_logs() as logs:
        outcome = play(flow, cid, "What did the smith tell us about the caravan?")
    assert outcome.narration and outcome.recall_error is not None and "recall failed" in outcome.recall_error
    assert [e for e in logs if e["event"] == "recall_failed"]
    provenance = story.provenance(outcome.turn_id)
    record = recall_record(provenance)
    assert record is not None and record.error == outcome.recall_error and record.recalled == []
    # the section falls back to the line's memories
    assert memories_section(provenance) == ["- Ayla (memory): Ayla fears deep water."]


def test_without_recall_the_prompt_lists_the_lines_memories(story: StoryService) -> None:
    cid, ayla, told, later = _table(story)
    kept = story.add_memory(
        Memory(campaign_id=cid, observer_entity_id=ayla, text="Ayla fears deep water.", anchor_turn_id=told)
    )
    gone = story.add_memory(
        Memory(campaign_id=cid, observer_entity_id=ayla, text="Ayla trusts the reeve.", anchor_turn_id=told)
    )
    story.retract_memory(cid, gone.id, reason="the reeve betrayed her")
    flow = TurnFlow(story, EchoEngine("echo-narrator"), settings=SETTINGS)
    outcome = play(flow, cid, "What did the smith tell us about the caravan?")
    assert outcome.recall_error is None
    provenance = story.provenance(outcome.turn_id)
    assert recall_record(provenance) is None
    assert memories_section(provenance) == [f"- Ayla (memory): {kept.text}"]  # the retracted one is left out


def test_a_turn_embeds_its_input_once_for_knowledge_and_recall() -> None:
    """The knowledge searcher and the memory index share one model, and a turn's input is embedded once."""
    from serve.services import SharedQueries
    from tests.unit.serve_support import api_services

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.queries: list[str] = []
            self.lock = threading.Lock()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def embed_query(self, text: str) -> np.ndarray:
            with self.lock:
                self.queries.append(text)
            return self.inner.embed_query(text)  # type: ignore[no-any-return]

    with api_services() as services:
        shared = services.search.searcher.embedder
        assert isinstance(shared, SharedQueries) and services.story.recall_index.embedder is shared
        model = shared.inner = Counting(shared.inner)  # what runs the model
        asked = Counting(None)  # who asks the shared embedder
        ask = shared.embed_query
        shared.embed_query = lambda text: asked.queries.append(text) or ask(text)  # type: ignore[method-assign]
        cid, _, _, _ = _table(services.story)

        class EmptyLibrary:
            """The hybrid searcher's first step on an empty library: the query's vector (then nothing)."""

            def search(self, query: str, **_: Any) -> list[Any]:
                shared.embed_query(query)
                return []

        settings = SETTINGS.model_copy(update={"knowledge_hits": 3})
        flow = TurnFlow(services.story, EchoEngine("echo-narrator"), settings=settings, searcher=EmptyLibrary())
        question = "Where did the salt caravan vanish?"
        outcome = play(flow, cid, question)
        assert recall_record(services.story.provenance(outcome.turn_id)) is not None  # recall ran
        assert asked.queries.count(question) == 2  # the knowledge search and the recall asked
        assert model.queries.count(question) == 1  # the model ran once
