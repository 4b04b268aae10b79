"""The extractor's budget is sized per engine, and an answer cut at it is an error the turn records.

At ~8 tokens/s, the local model's old 1024-token budget made one turn's extraction take 103 s (and the answer
was still cut short); the local engine now asks for 320 unless LOREKEEPER_EXTRACTOR_MAX_TOKENS says otherwise,
other engines keep 1024. A document cut at the budget is :class:`~narrator.engines.AnswerTruncated`: the turn
lists it among its dropped reasons instead of reading the half document as "no proposals".
"""

from __future__ import annotations

import pytest

from narrator.engines import AnswerTruncated, EchoEngine, Message
from narrator.extraction import extractor_budget
from narrator.local_engine import LOCAL_STRUCTURED_MAX_TOKENS, LocalEngine
from schemas.serving import EngineKind, ServeSettings

pytestmark = pytest.mark.servers  # the turn's test runs the embedded graph (redis-server with FalkorDB)


def test_the_budget_is_the_engines_unless_the_settings_name_one() -> None:
    settings = ServeSettings(narrator_engine=EngineKind.ECHO)
    assert settings.extractor_max_tokens is None
    assert extractor_budget(settings, LocalEngine()) == LOCAL_STRUCTURED_MAX_TOKENS == 480  # nothing loads
    assert extractor_budget(settings, EchoEngine()) == 1024
    fixed = ServeSettings(narrator_engine=EngineKind.ECHO, extractor_max_tokens=200)
    assert extractor_budget(fixed, LocalEngine()) == extractor_budget(fixed, EchoEngine()) == 200


class CutShort(EchoEngine):
    """A model whose proposals document never closes within the budget."""

    async def structured(self, messages: list[Message], *, schema: dict[str, object], max_tokens: int) -> str:
        raise AnswerTruncated.at("extractor", max_tokens)


def test_a_cut_answer_is_a_dropped_reason_of_the_turn() -> None:
    import asyncio

    from schemas.serving import TurnRequest
    from schemas.story import StoryProfile
    from tests.unit.serve_support import api_services

    serve = ServeSettings(api_host="127.0.0.1", narrator_engine=EngineKind.ECHO)
    with api_services(serve, extractor=CutShort("cut"), with_recall=False) as services:
        world = services.story.create_world("W")
        campaign = services.story.create_campaign(world.id, "C", StoryProfile(genre="fantasy"))

        async def play() -> dict[str, object]:
            events = [e async for e in services.flow.play(campaign.id, TurnRequest(text="I look around."))]
            return events[-1]

        done = asyncio.run(play())
    assert done["proposal_ids"] == []
    assert done["dropped"] == [
        "extractor answer cut short: the answer was cut short at max_tokens=1024 before its JSON closed "
        "(raise LOREKEEPER_EXTRACTOR_MAX_TOKENS)"
    ]
