"""The LLM former: structured memories, claims and emotions and an abstractive summary from a model (a
test engine answering canned JSON through the engine protocol), each bad item dropped with its reason,
and the extractive former whenever the model fails or answers nothing usable."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from narrator.engines import Message, NarratorEngine
from narrator.formation import LLMFormer, formation_schema, parse_formation
from schemas.errors import Unavailable
from schemas.story import SubjectiveKind
from story.service import StoryService
from tests.unit.test_memory_formation import KEY, _cast, _play_forge, _scripted
from tests.unit.test_story_campaign import new_campaign


class CannedEngine:
    """An engine whose structured answers are given in advance; it keeps what it was asked."""

    def __init__(self, *answers: str, model: str = "canned") -> None:
        self.model = model
        self.answers = list(answers)
        self.asked: list[tuple[list[Message], dict[str, Any]]] = []
        self.closed = False

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        yield "unused"

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        self.asked.append((messages, schema))
        return self.answers.pop(0)

    async def close(self) -> None:
        self.closed = True


class DownEngine(CannedEngine):
    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        raise Unavailable("extractor", "the model endpoint failed: ConnectError")


class SilentEngine(CannedEngine):
    """Never answers (a model stuck behind a full queue)."""

    async def structured(self, messages: list[Message], *, schema: dict[str, Any], max_tokens: int) -> str:
        await asyncio.Event().wait()
        return ""


def _answer(ids: dict[str, str]) -> str:
    aria, bram, brenna, cole = ids["aria"], ids["bram"], ids["brenna"], ids["cole"]
    return json.dumps(
        {
            "summary": "At her forge, Brenna told Aria and Bram that the Millbrook caravan had vanished.",
            "memories": [
                {
                    "observer_entity_id": aria,
                    "kind": "memory",
                    "text": "Aria met Brenna at the forge and learned of the lost caravan.",
                    "subject_entity_ids": [brenna, "ent_nobody"],
                    "salience": 0.8,
                },
                {
                    "observer_entity_id": aria,
                    "kind": "claim",
                    "text": "Brenna says the caravan was last seen at the Old Mill crossing.",
                    "subject_entity_ids": [brenna],
                    "salience": 0.7,
                },
                {"observer_entity_id": aria, "kind": "emotion", "text": "Aria worries about the drivers."},
                {"observer_entity_id": bram, "kind": "claim", "text": "Brenna says wolves hunt near the crossing."},
                {"observer_entity_id": cole, "kind": "memory", "text": "Cole heard everything."},
                {"observer_entity_id": aria, "kind": "dream", "text": "A dream of iron."},
            ],
        }
    )


def _form(engine: NarratorEngine, **kwargs: Any) -> Any:
    scene, turns, cast = _scripted()
    present = [cast["aria"], cast["bram"], cast["brenna"]]
    former = LLMFormer(engine, **kwargs)
    try:
        formed = former.form(scene, turns, present, entities=list(cast.values()))
        assert {m.anchor_turn_id for m in formed.memories} <= {scene.end_turn_id}
        return formed, cast
    finally:
        former.close()


@pytest.mark.unit
def test_the_models_memories_claims_and_emotions_are_kept_for_those_present() -> None:
    _, _, cast = _scripted()
    engine = CannedEngine(_answer({k: v.entity_id for k, v in cast.items()}))
    formed, cast = _form(engine)
    aria, bram, brenna = cast["aria"].entity_id, cast["bram"].entity_id, cast["brenna"].entity_id

    assert formed.former == "llm" and formed.summary.startswith("At her forge, Brenna told Aria")
    kinds = {(m.observer_entity_id, m.kind) for m in formed.memories}
    assert {(aria, SubjectiveKind.MEMORY), (aria, SubjectiveKind.CLAIM), (aria, SubjectiveKind.EMOTION)} <= kinds
    assert (bram, SubjectiveKind.CLAIM) in kinds
    # those the model left without a memory of the scene get the extractive one
    bram_memory = next(m for m in formed.memories if m.observer_entity_id == bram and m.kind is SubjectiveKind.MEMORY)
    assert bram_memory.text.startswith("Bram remembers")
    assert any(m.observer_entity_id == brenna for m in formed.memories)
    assert all(m.observer_entity_id != cast["cole"].entity_id for m in formed.memories)  # absent
    assert not any("dream" in m.text for m in formed.memories)
    first = next(m for m in formed.memories if m.observer_entity_id == aria and m.kind is SubjectiveKind.MEMORY)
    assert first.subject_entity_ids == [brenna] and first.salience == 0.8  # the unknown id is removed
    notes = " | ".join(formed.notes)
    assert "was not present" in notes and "kind" in notes and "ent_nobody" in notes

    # the model was asked with the schema, who was present, and the scene's words
    (messages, schema) = engine.asked[0]
    observers = schema["$defs"]["FormedMemoryDraft"]["properties"]["observer_entity_id"]
    assert observers["enum"] == sorted([aria, bram, brenna])  # only those present may remember the scene
    assert schema == formation_schema([aria, bram, brenna], 1024)
    assert f"- {aria}: Aria Vell" in messages[0]["content"]
    assert f"- {cast['cole'].entity_id}: Cole (character)" in messages[0]["content"]  # known, not present
    assert KEY in messages[1]["content"] and "Missing caravan" in messages[1]["content"]
    assert engine.closed  # the former owns its engine


@pytest.mark.parametrize(
    "engine",
    [
        CannedEngine("The scene was lovely, thank you."),
        CannedEngine(json.dumps({"proposals": []})),  # what an echo engine answers
        CannedEngine(json.dumps({"summary": "", "memories": [{"kind": "memory"}]})),
        DownEngine(),
    ],
    ids=["not-json", "wrong-shape", "nothing-usable", "engine-down"],
)
@pytest.mark.unit
def test_an_unusable_answer_or_a_failed_engine_forms_the_scene_extractively(engine: CannedEngine) -> None:
    with capture_logs() as logs:
        formed, cast = _form(engine)
    assert formed.former == "extractive (fallback)"
    assert formed.summary is not None and KEY in formed.summary
    assert any(m.observer_entity_id == cast["aria"].entity_id for m in formed.memories)
    (fell,) = [e for e in logs if e["event"] == "memory_formation_fell_back"]
    assert fell["model"] == "canned" and fell["reason"]


@pytest.mark.unit
def test_a_model_that_never_answers_is_not_waited_for() -> None:
    with capture_logs() as logs:
        formed, _ = _form(SilentEngine(), timeout_s=0.05)
    assert formed.former == "extractive (fallback)"
    (fell,) = [e for e in logs if e["event"] == "memory_formation_fell_back"]
    assert "TimeoutError" in fell["reason"]


@pytest.mark.unit
def test_json_in_prose_is_cut_out_and_a_missing_summary_is_extractive() -> None:
    _, _, cast = _scripted()
    aria = cast["aria"].entity_id
    raw = (
        "Here you go:\n```json\n"
        + json.dumps(
            {"memories": [{"observer_entity_id": aria, "kind": "claim", "text": "Brenna says the road is unsafe."}]}
        )
        + "\n```"
    )
    summary, drafts, notes = parse_formation(raw, {aria}, {aria})
    assert summary is None and [d.text for d in drafts] == ["Brenna says the road is unsafe."]
    assert notes[0].startswith("repaired")
    formed, _ = _form(CannedEngine(raw))
    assert formed.former == "llm" and formed.summary is not None and KEY in formed.summary
    assert "extractive summary" in formed.notes


@pytest.mark.servers
def test_scene_end_writes_what_the_model_formed(story: StoryService) -> None:
    campaign = new_campaign(story)
    story.add_turn(campaign.id, "We ride into Oakhollow", narration="The village smells of coal smoke.")
    ids = _cast(story, campaign.id)
    scene = _play_forge(story, campaign.id, ids)
    former = LLMFormer(CannedEngine(_answer(ids)))
    story.memory_former = former
    try:
        story.end_scene(scene.id)
    finally:
        former.close()
    (summary,) = story.summaries(campaign.id)
    assert summary.text.startswith("At her forge, Brenna told Aria")
    emotions = [m for m in story.memories(campaign.id, observer_entity_id=ids["aria"]) if m.kind == "emotion"]
    assert [m.text for m in emotions] == ["Aria worries about the drivers."]
    assert story.memories(campaign.id, observer_entity_id=ids["cole"]) == []


@pytest.mark.servers
def test_open_services_gives_the_story_an_llm_former_when_an_extractor_is_configured() -> None:
    from schemas.serving import EngineKind, ServeSettings
    from story.formation import ExtractiveFormer
    from tests.unit.serve_support import api_services

    with api_services(ServeSettings(api_host="127.0.0.1")) as services:
        # routed by the campaign's model roles (serve.seats); the deployment's former behind them
        assert isinstance(services.story.memory_former.default, ExtractiveFormer)  # type: ignore[union-attr]
    with api_services(ServeSettings(api_host="127.0.0.1", extractor_engine=EngineKind.ECHO)) as services:
        former = services.story.memory_former.default  # type: ignore[union-attr]
        assert isinstance(former, LLMFormer) and former.engine is not services.flow.extractor
