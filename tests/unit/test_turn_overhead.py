"""What a turn costs beside its model: nothing heavy on the event loop that streams every table's narration,
the narrowed extraction schema built once per cast, the prompt's records written while the model writes.

The stores are real (the embedded graph and a local blob folder); the engines are small stand-ins that
watch the turn from inside the generation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import narrator.turn as turn_module
from narrator.engines import EchoEngine, Message
from narrator.extraction import extraction_schema
from narrator.turn import TurnFlow
from schemas.serving import ServeSettings, TurnRequest
from story.service import StoryService
from tests.unit.test_story_campaign import new_campaign

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the story

SETTINGS = ServeSettings(recent_turns=2, recall_hits=0, knowledge_hits=0, extractor_max_tokens=480)


def _play(flow: TurnFlow, campaign_id: str, text: str = "I open the cellar door.") -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        return [e async for e in flow.play(campaign_id, TurnRequest(text=text))][-1]

    return asyncio.run(run())


def test_the_narrowed_extraction_schema_is_built_once_per_budget_and_cast() -> None:
    """Narrowing took ~60 ms of CPU on every turn (profiled at load 8), for a schema that changes only with
    the campaign's cast."""
    cast = ["ent_mira", "ent_bram"]
    first = extraction_schema(480, cast)
    assert extraction_schema(480, list(cast)) is first
    assert extraction_schema(480, ["ent_mira"]) is not first  # another cast, another schema
    assert extraction_schema(320, cast) is not first  # another budget too
    subject = first["$defs"]["ProposedFact"]["properties"]["subject_entity_id"]
    assert set(subject["enum"]) == set(cast)


def test_the_extraction_schema_is_not_built_on_the_event_loop(story: StoryService, monkeypatch) -> None:
    """The loop that runs a turn streams every other table's narration (and, on vLLM, reads the engine's
    outputs): a turn's schema was built on it, and held every stream for tens of ms a turn."""
    built_on: list[bool] = []
    original = turn_module.extraction_schema

    def watched(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
            built_on.append(True)
        except RuntimeError:
            built_on.append(False)
        return original(*args, **kwargs)

    monkeypatch.setattr(turn_module, "extraction_schema", watched)
    campaign = new_campaign(story)
    flow = TurnFlow(story, EchoEngine(), settings=SETTINGS)
    assert _play(flow, campaign.id)["event"] == "done"
    assert built_on == [False]


class _WatchingEngine(EchoEngine):
    """Narrates like echo, but first waits (up to ``wait_s``) for the turn's prompt snapshot to be written."""

    def __init__(self, story: StoryService, wait_s: float) -> None:
        super().__init__()
        self.story = story
        self.wait_s = wait_s
        self.seen: list[bool] = []

    async def stream(
        self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
    ) -> AsyncIterator[str]:
        turn_id = self.story.get_campaign(self.campaign_id).head_turn_id
        assert turn_id is not None
        deadline = time.monotonic() + self.wait_s
        while not (found := self.story.provenance(turn_id).prompt_text is not None) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.seen.append(found)
        async for piece in super().stream(messages, max_tokens=max_tokens, temperature=temperature, seed=seed):
            yield piece

    campaign_id = ""


def test_the_prompt_is_recorded_while_the_model_writes(story: StoryService) -> None:
    """The prompt snapshot needs nothing of the narration; it was written after it, on every turn's way to
    ``done``. The narration, the take and the snapshot are all the turn's at the end, as before."""
    campaign = new_campaign(story)
    engine = _WatchingEngine(story, wait_s=5.0)
    engine.campaign_id = campaign.id
    flow = TurnFlow(story, engine, settings=SETTINGS, extractor=EchoEngine())
    done = _play(flow, campaign.id)
    assert engine.seen == [True]
    provenance = story.provenance(done["turn_id"])
    assert provenance.prompt_text is not None and "I open the cellar door." in provenance.prompt_text
    assert story.get_turn(done["turn_id"]).narration == done["narration"]


def test_a_narration_that_fails_keeps_the_prompt_it_was_sent(story: StoryService) -> None:
    """A turn left without a take (the engine failed) still holds what was sent for it, as a retake's does."""

    class Failing(EchoEngine):
        async def stream(
            self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None = None
        ) -> AsyncIterator[str]:
            yield "The"
            raise RuntimeError("the engine fell over")

    campaign = new_campaign(story)
    flow = TurnFlow(story, Failing(), settings=SETTINGS, extractor=EchoEngine())
    with pytest.raises(RuntimeError, match="fell over"):
        _play(flow, campaign.id)
    head = story.get_campaign(campaign.id).head_turn_id
    assert head is not None
    deadline = time.monotonic() + 5
    while story.provenance(head).prompt_text is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert story.provenance(head).prompt_text is not None


def test_a_tables_next_prompt_begins_with_this_one_byte_for_byte(story: StoryService) -> None:
    """The prefix cache holds a table's last prompt and the narration written for it: the next turn's prompt
    must begin with exactly those tokens. Before, the recent turns sat inside the system message, so a
    table's second turn shared only the head up to them with its first (62 % of its prompt cached on vLLM)."""
    campaign = new_campaign(story)
    engine = EchoEngine()
    flow = TurnFlow(story, engine, settings=SETTINGS, extractor=EchoEngine())
    said = ["I open the cellar door.", "I light a candle.", "I read the letter on the table."]
    narrations = [_play(flow, campaign.id, text)["narration"] for text in said]
    prompts = [m for m in engine.calls if m[0]["role"] == "system" and "narrator" in m[0]["content"]]
    assert len(prompts) == 3
    for before, after, narration in zip(prompts, prompts[1:], narrations, strict=False):
        assert after[: len(before)] == before
        assert after[len(before)] == {"role": "assistant", "content": narration}
    assert prompts[-1][-1]["content"].endswith(said[-1])  # the input is the last line, as it was


def test_past_the_recent_turns_window_most_prompts_still_begin_with_the_last(story: StoryService) -> None:
    """A window that slid one turn a turn changed every prompt right after its head once a table had played
    more turns than ``recent_turns``: the prefix cache then held the head alone. It moves in steps of half the
    window, so all but one turn of each step keep the previous prompt as their beginning."""
    campaign = new_campaign(story)
    engine = EchoEngine()
    settings = SETTINGS.model_copy(update={"recent_turns": 4})
    flow = TurnFlow(story, engine, settings=settings, extractor=EchoEngine())
    for i in range(12):
        _play(flow, campaign.id, f"I take step {i} down the stair.")
    prompts = [m for m in engine.calls if m[0]["role"] == "system" and "narrator" in m[0]["content"]]
    assert len(prompts) == 12
    kept = [after[: len(before)] == before for before, after in zip(prompts, prompts[1:], strict=False)]
    assert all(kept[:4]), kept  # inside the first window every turn begins with the last
    assert sum(kept[4:]) >= 3, kept  # past it, one turn in two (window 4, step 2)
    shown = [sum(m["role"] == "user" for m in p) - 1 for p in prompts]  # the recent turns in each prompt
    assert max(shown) == 4 and min(shown[5:]) >= 3, shown
