"""The Ray Serve gate replica binds the memory former and the axiom judge, from the direct path's one builder.

The application is built by the production builder with a test's engine factory bound
(``build_application(..., engines=ScriptedSeats())``); the Gate replica is then made from exactly what
the builder bound into it, in this process, and a scene ends through it: the judge (the bound engine)
finds the proposal breaking the world's axiom and the gate rejects it; the former (the bound engine)
writes the scene's summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.seat_engines import SCRIPTED_SUMMARY, ScriptedSeats

pytestmark = pytest.mark.servers  # the embedded graph runs redis-server with FalkorDB as a child process


def _gate_of(app: Any) -> Any:
    """The Gate deployment an application's ingress was bound to (its third argument)."""
    return app._bound_deployment.init_args[2]._bound_deployment


@pytest.fixture
def gate_replica(tmp_path: Path) -> Iterator[Any]:
    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, build_application

    settings = load_settings(data_dir=tmp_path / "data")
    serve = ServeSettings(narrator_engine=EngineKind.ECHO, extractor_engine=EngineKind.ECHO)
    gate = _gate_of(build_application(AppConfig(plugins=[], mcp=False), settings, serve, engines=ScriptedSeats()))
    bound_settings, _search, bound_serve, engines = gate.init_args
    assert bound_serve == serve and engines == ScriptedSeats()
    replica = gate.func_or_class(bound_settings, None, bound_serve, engines)  # no Search deployment: no recall
    try:
        yield replica
    finally:
        replica.__del__()


def test_the_gate_replica_has_the_former_and_the_judge(gate_replica: Any) -> None:
    from narrator.axioms import LLMAxiomJudge
    from narrator.formation import LLMFormer

    # routed by the campaign's model roles (serve.seats): the deployment's seats behind them
    former, judge = gate_replica.story.memory_former.default, gate_replica.story.axiom_judge.default
    assert isinstance(former, LLMFormer) and former._loop.engine.model == "scripted-summarizer"
    assert isinstance(judge, LLMAxiomJudge) and judge.engine.model == "scripted-judge"


def test_an_axiom_the_model_judges_broken_is_rejected_at_scene_end_by_the_gate_replica(gate_replica: Any) -> None:
    from schemas.story import ProposalStatus, StoryProfile

    story = gate_replica.story
    world = story.create_world("Skyless", axioms=["No dragon has ever lived in this world."])
    campaign = story.create_campaign(world.id, "Ash", StoryProfile(genre="fantasy"))
    scene = story.start_scene(campaign.id, title="The tower")
    turn = story.add_turn(campaign.id, "I look up.", narration="A Dragon lands on the tower; a Gull circles.")
    ids = {}
    for name in ("Dragon", "Gull"):
        proposal = story.propose(
            scene.id,
            type="entity",
            content={"type": "entity", "kind": "creature", "name": name},
            authority="system",
            confidence=0.95,
            turn_id=turn.id,
            proposed_by="extractor",
            evidence={"turn_ids": [turn.id], "quote": name},
        )
        ids[name] = proposal.id
    report = gate_replica.end_scene(scene.id)
    decisions = {d.proposal_id: d for d in report.decisions}
    assert decisions[ids["Dragon"]].status is ProposalStatus.REJECTED
    assert "No dragon has ever lived in this world." in decisions[ids["Dragon"]].rationale
    assert decisions[ids["Gull"]].status is ProposalStatus.ACCEPTED
    assert report.unchecked_axioms == []  # the judge ran, and nothing went unchecked
    assert [s.text for s in story.summaries(campaign.id)] == [SCRIPTED_SUMMARY]  # the former wrote it
