"""Random sequences of operations by the GM, two players and another campaign's GM, over the real app and both
doors, checked after every step against the access and secrets invariants:

* a player never gets a success from an operation that is the GM's (by its declared role, or by what it asks:
  a GM's authority, another character's memory), and both doors refuse it;
* a player never sees a GM-only record, nor one known only to the other player's character, in any answer;
* a key that does not hold the campaign gets, for any of its records, exactly the answer it gets for a missing
  one (403 for a campaign, 404 for a scene or a turn; a request invalid in itself is refused as such either
  way), and sees nothing of it;
* a read, and any refusal, has the same outcome through REST and through MCP.

The story moves under the walk (the GM plays, undoes, redoes, forks, checkpoints, starts and ends scenes; the
players play and propose), so the invariants are checked at many positions of it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

GM_ONLY = {"gmonlymarker", "gmmemmarker", "gmtiemarker", "gmthreadmarker"}
P1_ONLY = {"p1onlymarker", "p1memmarker"}
P2_ONLY = {"p2onlymarker", "p2memmarker"}
OTHER_CAMPAIGN = {"otherwordmarker"}
ALL = GM_ONLY | P1_ONLY | P2_ONLY | OTHER_CAMPAIGN | {"publicmarker"}
HIDDEN_FROM = {
    "gm": OTHER_CAMPAIGN,
    "p1": GM_ONLY | P2_ONLY | OTHER_CAMPAIGN,
    "p2": GM_ONLY | P1_ONLY | OTHER_CAMPAIGN,
    "other_gm": ALL - OTHER_CAMPAIGN,
}
PLAYERS = ("p1", "p2")
MISSING = {"campaign_id": "camp_missing", "scene_id": "scene_missing", "turn_id": "turn_missing"}


@dataclass
class Walk:
    """The table the walk plays on, and the records it has made (ids to pick from)."""

    services: Any
    doors: Doors
    keys: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    turns: list[str] = field(default_factory=list)
    scenes: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    proposals: list[str] = field(default_factory=list)
    steps: int = 0


@dataclass(frozen=True)
class Step:
    """How to call an operation: on what (``campaign``, ``scene``, ``turn``), and its request for a caller."""

    on: str
    body: Callable[[Walk, str, int], dict[str, Any]] = lambda w, who, pick: {}
    read: bool = False
    op: str | None = None  # the operation, when the step's name is a variant of it
    players_refused: bool = False  # the request is the GM's whatever the declared role (what it asks for)
    all_refused: bool = False  # the request is no key's (system authority is the product's own)


def _pick(items: list[str], pick: int) -> str:
    return items[pick % len(items)]


def _memory(w: Walk, who: str, pick: int) -> dict[str, Any]:
    own = {"p1": w.ids["ada"], "p2": w.ids["brand"]}.get(who, w.ids["ada"])
    return {"observer_entity_id": own, "text": f"A memory {pick}."}


def _others_memory(w: Walk, who: str, pick: int) -> dict[str, Any]:
    return {"observer_entity_id": w.ids["brand"] if who == "p1" else w.ids["ada"], "text": "Not mine."}


def _proposal(authority: str) -> Callable[[Walk, str, int], dict[str, Any]]:
    def body(w: Walk, who: str, pick: int) -> dict[str, Any]:
        content = {"type": "event", "title": f"A noise {pick}"}
        return {"type": "event", "content": content, "authority": authority, "confidence": 0.9}

    return body


STEPS: dict[str, Step] = {
    # reads
    "get_campaign": Step("campaign", read=True),
    "get_state_as_of": Step("campaign", read=True),
    "list_turns": Step("campaign", read=True),
    "list_memories": Step("campaign", read=True),
    "list_summaries": Step("campaign", read=True),
    "list_scenes": Step("campaign", read=True),
    "list_house_rules": Step("campaign", read=True),
    "list_branches": Step("campaign", read=True),
    "list_checkpoints": Step("campaign", read=True),
    "recall": Step("campaign", lambda w, who, pick: {"query": "marker plan secret memory", "limit": 50}, read=True),
    "get_scene": Step("scene", read=True),
    "list_proposals": Step("scene", read=True),
    "get_provenance": Step("turn", read=True),
    "list_takes": Step("turn", read=True),
    # a player's writes
    "play_turn": Step("campaign", lambda w, who, pick: {"text": f"I look around ({pick})."}),
    "add_memory": Step("campaign", _memory),
    "add_memory_of_another": Step("campaign", _others_memory, op="add_memory", players_refused=True),
    "propose_change": Step("scene", _proposal("player")),
    "propose_as_gm": Step("scene", _proposal("gm"), op="propose_change", players_refused=True),
    "propose_as_system": Step("scene", _proposal("system"), op="propose_change", all_refused=True),
    # the GM's
    "undo": Step("campaign"),
    "redo": Step("campaign"),
    "start_scene": Step("campaign", lambda w, who, pick: {"title": f"Scene {pick}"}),
    "end_scene": Step("scene"),
    "commit_scene": Step("scene", lambda w, who, pick: {"proposal_ids": [_pick(w.proposals, pick)]}),
    "create_branch": Step("campaign", lambda w, who, pick: {"from_turn_id": _pick(w.turns, pick)}),
    "create_checkpoint": Step("campaign", lambda w, who, pick: {"name": f"cp {pick}"}),
    "export_campaign": Step("campaign"),
    "list_player_keys": Step("campaign"),
    "retake_turn": Step("turn"),
}


def _ids(w: Walk, on: str, pick: int) -> dict[str, str]:
    campaign = {"campaign_id": w.ids["campaign_id"]}
    if on == "scene":
        return {"scene_id": _pick(w.scenes, pick)}
    if on == "turn":
        return {**campaign, "turn_id": _pick(w.turns, pick)}
    return campaign


def _seen(answer: Any) -> set[str]:
    text = json.dumps(answer).lower()
    return {m for m in ALL if m in text}


def _outcome(code: Any) -> str:
    """An answer's class: a success, a refusal of the key, a missing record, or another error of the request."""
    if code is None:
        return "ok"
    return code if code in ("forbidden", "unauthorized", "not_found") else "invalid"


def _step(w: Walk, who: str, name: str, door: str, pick: int) -> None:
    from serve.operations import OPERATIONS, Role

    spec = STEPS[name]
    op = OPERATIONS[spec.op or name]
    ids, body, key = _ids(w, spec.on, pick), spec.body(w, who, pick), w.keys[who]
    w.steps += 1
    if who == "other_gm":  # holds nothing of this campaign: its records answer like missing ones
        missing = {k: MISSING.get(k, v) for k, v in ids.items()}
        for d in ("rest", "mcp"):
            (code, answer), (code_missing, _) = (
                w.doors.call(d, op.name, key, ids, body),
                w.doors.call(d, op.name, key, missing, body),
            )
            assert code == code_missing and code is not None, (d, name, code, code_missing)
            assert not _seen(answer) & HIDDEN_FROM[who], (d, name, answer)
        return
    refused = spec.all_refused or (who in PLAYERS and (op.access.role in (Role.GM, Role.ADMIN) or spec.players_refused))
    if spec.read or refused:  # no change to the story: both doors, the same outcome
        answers = [w.doors.call(d, op.name, key, ids, body) for d in ("rest", "mcp")]
        outcomes = [_outcome(code) for code, _ in answers]
        assert outcomes[0] == outcomes[1], (name, who, answers)
        if refused:
            assert outcomes == ["forbidden", "forbidden"], (name, who, answers)
        if spec.read:
            assert outcomes == ["ok", "ok"], (name, who, answers)
        for _, answer in answers:
            _no_secrets(who, name, answer)
        return
    code, answer = w.doors.call(door, op.name, key, ids, body)
    assert _outcome(code) not in ("forbidden", "unauthorized", "not_found"), (door, name, who, answer)
    _no_secrets(who, name, answer)
    if code is None:
        _remember(w, name, answer)


def _no_secrets(who: str, name: str, answer: Any) -> None:
    if name == "recall" and isinstance(answer, dict):
        answer = answer.get("hits")  # the answer repeats the query
    leaked = _seen(answer) & HIDDEN_FROM[who]
    assert not leaked, (who, name, sorted(leaked))


def _remember(w: Walk, name: str, answer: Any) -> None:
    if name == "play_turn":
        w.turns.append(answer["turn_id"])
    elif name == "start_scene":
        w.scenes.append(answer["id"])
    elif name == "create_checkpoint":
        w.checkpoints.append(answer["id"])
    elif name == "propose_change":
        w.proposals.append(answer["id"])


def _setup(services: Any, doors: Doors) -> Walk:
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile

    story, w = services.story, Walk(services, doors)
    profile = StoryProfile(genre="fantasy")
    a = story.create_campaign(story.create_world("Ashfall").id, "A", profile)
    b = story.create_campaign(story.create_world("Elsewhere").id, "B", profile)
    for campaign in (a, b):
        story.add_turn(campaign.id, "We arrive.", narration="The gate creaks.")
    scene = story.start_scene(a.id, title="The keep")
    made = [
        story.propose(scene.id, type="entity", content={"kind": k, "name": n}, authority="gm", confidence=1.0).id
        for n, k in (("Ada", "character"), ("Brand", "character"), ("Mordecai", "creature"))
    ]
    story.commit(scene.id, made)
    people = {e.name: e.id for e in story.state(a.id).entities}
    ada, brand, npc = people["Ada"], people["Brand"], people["Mordecai"]

    def secret(subject: str, value: str, visibility: dict[str, Any] | None) -> str:
        content = {"subject_entity_id": subject, "predicate": "note", "value": value, "visibility": visibility}
        return str(story.propose(scene.id, type="fact", content=content, authority="gm", confidence=1.0).id)

    only = lambda entity: {"audience": "characters", "character_ids": [entity]}  # noqa: E731
    facts = [
        secret(ada, "publicmarker", None),
        secret(npc, "gmonlymarker", {"audience": "gm"}),
        secret(ada, "p1onlymarker", only(ada)),
        secret(brand, "p2onlymarker", only(brand)),
    ]
    tie = {"source_entity_id": npc, "target_entity_id": ada, "kind": "hunts", "description": "gmtiemarker"}
    tie["visibility"] = {"audience": "gm"}
    facts.append(story.propose(scene.id, type="relationship", content=tie, authority="gm", confidence=1.0).id)
    thread = {"kind": "thread_opened", "title": "gmthreadmarker", "visibility": {"audience": "gm"}}
    content = {"events": [thread]}
    facts.append(story.propose(scene.id, type="state_change", content=content, authority="gm", confidence=1.0).id)
    story.commit(scene.id, facts)
    b_scene = story.start_scene(b.id, title="Elsewhere")
    story.propose(b_scene.id, type="event", content={"title": "otherwordmarker"}, authority="gm", confidence=1.0)
    story.end_scene(b_scene.id)
    keys = services.keys
    w.keys = {
        "gm": keys.create("gm A", campaigns=[a.id], role=KeyRole.GM)[0],
        "p1": keys.create("Ada's player", campaigns=[a.id], character_entity_id=ada)[0],
        "p2": keys.create("Brand's player", campaigns=[a.id], character_entity_id=brand)[0],
        "other_gm": keys.create("gm B", campaigns=[b.id], role=KeyRole.GM)[0],
    }
    gm, cid = w.keys["gm"], {"campaign_id": a.id}
    for observer, text in ((npc, "gmmemmarker"), (ada, "p1memmarker"), (brand, "p2memmarker")):
        assert doors.call("rest", "add_memory", gm, cid, {"observer_entity_id": observer, "text": text})[0] is None
    w.ids = {"campaign_id": a.id, "ada": ada, "brand": brand}
    w.turns = [t.id for t in story.history(a.id)]
    w.scenes = [scene.id]
    w.proposals = [*made, *facts]
    return w


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    from schemas.settings import get_settings
    from serve.app import create_app

    with pytest.MonkeyPatch.context() as env:  # this module's own stores (a module fixture runs before conftest's)
        env.setenv("LOREKEEPER_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        get_settings.cache_clear()
        with (
            api_services() as services,
            TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
        ):
            yield _setup(services, Doors(client))


CALLERS = ("gm", "p1", "p2", "other_gm")
WEIGHTS = {"play_turn": 4, "start_scene": 2, "end_scene": 2, "propose_change": 2}  # the story moves on


def _walk(seed: int, length: int) -> list[tuple[str, str, str, int]]:
    """A walk of ``length`` steps drawn from ``seed``: who, which operation, through which door, and a number
    that picks the records it names."""
    rng = random.Random(seed)
    names = sorted(STEPS)
    weights = [WEIGHTS.get(n, 1) for n in names]
    return [
        (rng.choice(CALLERS), rng.choices(names, weights)[0], rng.choice(("rest", "mcp")), rng.randrange(1000))
        for _ in range(length)
    ]


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,  # the same walks on every run: a failure is a failure again
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_walks_keep_the_access_and_secrets_invariants(walk: Walk, seed: int) -> None:
    for who, name, door, pick in _walk(seed, 15):
        _step(walk, who, name, door, pick)


def test_the_walks_moved_the_story(walk: Walk) -> None:
    """Runs after the walks: they made their steps, and the story moved (turns were played)."""
    assert walk.steps >= 100, walk.steps
    assert len(walk.turns) > 3, walk.turns
