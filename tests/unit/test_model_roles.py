"""Model roles per campaign: a campaign names which of the server's engines plays narrator, extractor, summarizer
and judge, at its creation or by its GM, over both doors; an unknown engine is refused naming what the server
has; a seat left unset plays on the deployment's engine; each turn's prompt snapshot records its calls.

The server has a second engine, ``second`` (``LOREKEEPER_ENGINES``), built by the test's engine factory bound
like ``build_engine`` (:class:`tests.unit.seat_engines.ScriptedSeats`): its judge finds every proposal naming a
dragon breaking every axiom.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.seat_engines import ScriptedSeats
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph runs redis-server with FalkorDB as a child process


@pytest.fixture
def served() -> Iterator[tuple[Any, Doors]]:
    from schemas.serving import EngineKind, ServeSettings
    from serve.app import create_app

    serve = ServeSettings(
        api_host="127.0.0.1",
        narrator_engine=EngineKind.ECHO,
        engines={"second": {"kind": "echo", "model": "second-model"}},
    )
    with (
        api_services(serve, engines=ScriptedSeats(), with_recall=False) as services,
        TestClient(create_app(services), base_url="http://127.0.0.1") as client,
    ):
        yield services, Doors(client)


def _ok(answer: tuple[Any, Any]) -> Any:
    code, value = answer
    assert code is None, value
    return value


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_campaign_plays_on_the_engines_it_names(served: tuple[Any, Doors], door: str) -> None:
    services, doors = served
    key = services.keys.create("the operator", admin=True)[0]

    def call(op: str, ids: dict[str, str] | None = None, **body: Any) -> tuple[Any, Any]:
        return doors.call(door, op, key, ids or {}, body)

    world = _ok(call("create_world", name="Skyless", axioms=["No dragon lives here."]))
    base = {"world_id": world["id"], "name": "Ash", "profile": {"genre": "fantasy"}}
    code, refused = call("create_campaign", **base, model_roles={"narrator": "nope"})
    assert code == "invalid_request" and "narrator='nope'" in str(refused) and "['narrator', 'second']" in str(refused)
    campaign = _ok(call("create_campaign", **base, model_roles={"narrator": "second", "judge": "second"}))
    camp = {"campaign_id": campaign["id"]}
    models = _ok(call("get_models", camp))
    seats = models["seats"]
    assert seats["narrator"] == {"engine": "second", "kind": "echo", "model": "second-model", "chosen": True}
    assert seats["extractor"]["engine"] == "narrator" and not seats["extractor"]["chosen"]  # the deployment's
    assert seats["summarizer"]["engine"] is None  # no extractor configured: extractive memories
    assert models["available"] == ["narrator", "second"] and models["embedding"] == "all-MiniLM-L6-v2"

    scene_id = _ok(call("start_scene", camp, title="The tower"))["id"]
    turn = _ok(call("play_turn", camp, text="A dragon lands on the tower."))
    assert turn["generation"]["model"] == "second-model"
    provenance = _ok(call("get_provenance", {**camp, "turn_id": turn["turn_id"]}))
    calls = {c["seat"]: c for c in provenance["prompt"]["calls"]}
    assert calls["narrator"] == {
        "seat": "narrator",
        "engine": "second",
        "model": "second-model",
        "max_tokens": services.serve.narrator_max_tokens,
        "temperature": services.serve.narrator_temperature,
    }
    assert calls["extractor"]["engine"] == "narrator" and calls["extractor"]["model"] == "echo-narrator"

    # the judge the campaign named rejects what breaks the world's axiom at the scene's end
    proposal = services.story.propose(
        scene_id,
        type="entity",
        content={"type": "entity", "kind": "creature", "name": "Dragon"},
        authority="system",
        confidence=0.95,
        turn_id=turn["turn_id"],
        proposed_by="extractor",
        evidence={"turn_ids": [turn["turn_id"]], "quote": "dragon"},
    )
    report = _ok(call("end_scene", {"scene_id": scene_id}))
    (decision,) = report["decisions"]
    assert decision["proposal_id"] == proposal.id and decision["status"] == "rejected", decision
    assert report["unchecked_axioms"] == []

    # the GM gives the narration back to the deployment: the next turn is the deployment's engine's
    code, refused = call("set_models", camp, narrator="gone")
    assert code == "invalid_request"
    models = _ok(call("set_models", camp, judge="second"))
    assert models["seats"]["narrator"]["engine"] == "narrator" and not models["seats"]["narrator"]["chosen"]
    assert _ok(call("play_turn", camp, text="I wait."))["generation"]["model"] == "echo-narrator"


def test_a_campaign_naming_no_judge_leaves_the_axioms_unchecked_here(served: tuple[Any, Doors]) -> None:
    """The same server, a campaign with no roles: no extractor is configured, so nobody judges its axioms."""
    from schemas.story import StoryProfile

    services, _ = served
    story = services.story
    world = story.create_world("Skyless", axioms=["No dragon lives here."])
    campaign = story.create_campaign(world.id, "Plain", StoryProfile(genre="fantasy"))
    assert campaign.model_roles is None
    scene = story.start_scene(campaign.id)
    turn = story.add_turn(campaign.id, "Look.", narration="A dragon lands.")
    story.propose(
        scene.id,
        type="entity",
        content={"type": "entity", "kind": "creature", "name": "Dragon"},
        authority="system",
        confidence=0.95,
        turn_id=turn.id,
        proposed_by="extractor",
        evidence={"turn_ids": [turn.id], "quote": "dragon"},
    )
    report = story.end_scene(scene.id)
    assert report.unchecked_axioms == ["No dragon lives here."]
    assert [d.status.value for d in report.decisions] == ["accepted"]


def test_named_engines_refuse_the_deployment_names_and_vllm() -> None:
    from schemas.errors import ConfigError
    from schemas.serving import ServeSettings

    with pytest.raises(ConfigError, match="extractor"):
        ServeSettings(engines={"extractor": {"kind": "echo"}})
    with pytest.raises(ValueError, match="vllm"):
        ServeSettings(engines={"gpu": {"kind": "vllm"}})
    with pytest.raises(ValueError, match="base_url"):
        ServeSettings(engines={"far": {"kind": "openai"}})
