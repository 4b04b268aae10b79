"""With no engine configured, every seat of the direct path is bound to the embedded model, unloaded until used."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.servers  # the embedded graph runs redis-server with FalkorDB as a child process


def test_every_seat_runs_on_the_local_engine_by_default() -> None:
    from narrator.axioms import LLMAxiomJudge
    from narrator.formation import LLMFormer
    from narrator.local_engine import LocalEngine, _loaded
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import get_settings
    from serve.services import open_services

    serve = ServeSettings(api_host="127.0.0.1", narrator_engine=EngineKind.LOCAL)
    loaded_before = dict(_loaded)
    with open_services(get_settings(), serve, with_search=False, with_recall=False) as services:
        assert isinstance(services.narrator.default, LocalEngine)  # the narrator
        assert isinstance(services.flow.extractor, LocalEngine)  # the proposal extractor
        # routed by the campaign's model roles (serve.seats): the deployment's seats behind them
        former, judge = services.story.memory_former.default, services.story.axiom_judge.default  # type: ignore
        assert isinstance(former, LLMFormer) and isinstance(judge, LLMAxiomJudge)
        assert isinstance(former._loop.engine, LocalEngine) and isinstance(judge._loop.engine, LocalEngine)
    assert _loaded == loaded_before  # binding loads nothing: the model loads on first use, once per process
