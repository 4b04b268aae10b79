"""The secrets matrix: every read of a campaign, through both doors, for every caller, shows exactly what the
caller's role and character may see — and 0 GM-only records reach a player key.

The GM creates, over the doors, canon facts and memories of each visibility (public, GM only, known to named
characters); summaries and a pending secret proposal are added too. Each record carries a marker word; an
answer's markers are the records it shows. ``SEES`` is the specification: what each caller may see.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services, extraction

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

GM_ONLY = {
    "gmplanmarker",
    "npcmemmarker",
    "herogmmemmarker",
    "gmsummarymarker",
    "pendinggmmarker",
    "hiddennpcmarker",  # an NPC the GM keeps hidden: its name
    "npcfactmarker",  # and a fact about it, public itself
}
PUBLIC = {"sunlitmarker", "npcpublicmarker", "publicsummarymarker"}
HERO = {"herosecretmarker", "heromemmarker", "sharedclaimmarker"}
RIVAL = {"rivalsecretmarker", "rivalmemmarker", "sharedclaimmarker"}
EVERYTHING = GM_ONLY | PUBLIC | HERO | RIVAL

# what each caller may see of the campaign's records
SEES: dict[str, set[str]] = {
    "admin": EVERYTHING,
    "gm": EVERYTHING,
    "hero_player": PUBLIC | HERO,
    "rival_player": PUBLIC | RIVAL,
    "bystander": PUBLIC,  # a player key of the campaign that plays no character
}
OTHERS = ("other_gm", "other_player")  # keys of another campaign: refused, and shown nothing
PLAYERS = ("hero_player", "rival_player", "bystander")

# each read and the records it can show (the GM sees all of them)
READS: dict[str, set[str]] = {
    "get_state_as_of": {
        "sunlitmarker",
        "gmplanmarker",
        "herosecretmarker",
        "rivalsecretmarker",
        "hiddennpcmarker",
        "npcfactmarker",
    },
    "list_memories": {
        "heromemmarker",
        "rivalmemmarker",
        "npcmemmarker",
        "npcpublicmarker",
        "herogmmemmarker",
        "sharedclaimmarker",
    },
    "list_summaries": {"publicsummarymarker", "gmsummarymarker"},
    "list_proposals": {
        "sunlitmarker",
        "gmplanmarker",
        "herosecretmarker",
        "rivalsecretmarker",
        "pendinggmmarker",
        "hiddennpcmarker",
        "npcfactmarker",
    },
}


@dataclass
class Secrets:
    services: Any
    keys: dict[str, str | None] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)


def _fact(predicate: str, subject: str, value: str, visibility: dict[str, Any] | None) -> dict[str, Any]:
    content: dict[str, Any] = {"type": "fact", "subject_entity_id": subject, "predicate": predicate, "value": value}
    if visibility is not None:
        content["visibility"] = visibility
    return {"type": "fact", "content": content, "authority": "gm", "confidence": 1.0}


def _only(*characters: str) -> dict[str, Any]:
    return {"audience": "characters", "character_ids": list(characters)}


GM = {"audience": "gm"}


def _setup(services: Any, doors: Doors) -> Secrets:
    from schemas.serving import KeyRole
    from schemas.story import Authority, Summary, SummaryScope

    story, s = services.story, Secrets(services)
    world = story.create_world("Ashfall")
    a = story.create_campaign(world.id, "A", _profile())
    b = story.create_campaign(story.create_world("Elsewhere").id, "B", _profile())
    story.add_turn(a.id, "We reach the keep.", narration="The gate creaks.")
    scene = story.start_scene(a.id, title="The keep")
    people = {}
    for name in ("Ada", "Brand", "Mordecai"):
        kind = "character" if name != "Mordecai" else "creature"
        made = story.propose(
            scene.id,
            type="entity",
            content={"type": "entity", "kind": kind, "name": name},
            authority=Authority.GM,
            confidence=1.0,
        )
        story.commit(scene.id, [made.id])
        people[name] = next(e.id for e in story.state(a.id).entities if e.name == name)
    hero, rival, npc = people["Ada"], people["Brand"], people["Mordecai"]
    keys = services.keys
    s.keys = {
        "admin": keys.create("admin", admin=True)[0],
        "gm": keys.create("gm A", campaigns=[a.id], role=KeyRole.GM)[0],
        "hero_player": keys.create("Ada's player", campaigns=[a.id], character_entity_id=hero)[0],
        "rival_player": keys.create("Brand's player", campaigns=[a.id], character_entity_id=rival)[0],
        "bystander": keys.create("watcher", campaigns=[a.id])[0],
        "other_gm": keys.create("gm B", campaigns=[b.id], role=KeyRole.GM)[0],
        "other_player": keys.create("player B", campaigns=[b.id])[0],
    }
    s.ids = {"campaign_id": a.id, "scene_id": scene.id, "hero": hero, "rival": rival, "npc": npc}
    gm, cid, sid = s.keys["gm"], {"campaign_id": a.id}, {"scene_id": scene.id}
    hidden = {"type": "entity", "kind": "creature", "name": "Hiddennpcmarker", "visibility": GM}
    code, made = doors.call("mcp", "propose_change", gm, sid, {"type": "entity", "content": hidden, "authority": "gm"})
    assert code is None, made
    assert doors.call("rest", "commit_scene", gm, sid, {"proposal_ids": [made["id"]]})[0] is None
    lurker = next(e.id for e in story.state(a.id).entities if e.name == "Hiddennpcmarker")
    # the GM writes the secrets, half through each door
    facts = [
        ("rest", _fact("weather", hero, "sunlitmarker", None)),
        ("mcp", _fact("plan", npc, "gmplanmarker", GM)),  # the GM's hidden plans
        ("rest", _fact("secret", hero, "herosecretmarker", _only(hero))),  # a character's secret
        ("mcp", _fact("secret", rival, "rivalsecretmarker", _only(rival))),
        ("rest", _fact("lair", lurker, "npcfactmarker", None)),  # public, but about a hidden entity
    ]
    proposed = []
    for door, body in facts:
        code, proposal = doors.call(door, "propose_change", gm, sid, body)
        assert code is None, proposal
        proposed.append(proposal["id"])
    code, report = doors.call("rest", "commit_scene", gm, sid, {"proposal_ids": proposed})
    assert code is None and [d["status"] for d in report["decisions"]] == ["accepted"] * 5, report
    code, pending = doors.call("mcp", "propose_change", gm, sid, _fact("plan", npc, "pendinggmmarker", GM))
    assert code is None, pending
    memories = [
        ("rest", {"observer_entity_id": hero, "text": "I saw heromemmarker."}),  # known to its observer
        ("mcp", {"observer_entity_id": rival, "text": "I saw rivalmemmarker."}),
        ("rest", {"observer_entity_id": npc, "text": "I plot npcmemmarker."}),  # an NPC's: the GM's
        ("mcp", {"observer_entity_id": npc, "text": "I sing npcpublicmarker.", "visibility": {"audience": "public"}}),
        ("rest", {"observer_entity_id": hero, "text": "Cursed herogmmemmarker.", "visibility": GM}),
        (
            "mcp",
            {"observer_entity_id": hero, "text": "Brand owes sharedclaimmarker.", "visibility": _only(hero, rival)},
        ),
    ]
    for door, body in memories:
        code, memory = doors.call(door, "add_memory", gm, cid, {**body, "kind": "claim"})
        assert code is None, memory
    head = story.get_campaign(a.id).head_turn_id
    for text, visibility in (("The keep, publicsummarymarker.", None), ("Traitor gmsummarymarker.", GM)):
        story.add_summary(
            Summary(
                campaign_id=a.id,
                scope=SummaryScope.SESSION,
                anchor_turn_id=head,
                text=text,
                visibility=visibility,
            )
        )
    code, turn = doors.call("rest", "play_turn", gm, cid, {"text": "Mordecai's plan and Ada's secret?"})
    assert code is None, turn
    s.ids["turn_id"] = turn["turn_id"]
    return s


def _profile() -> Any:
    from schemas.story import StoryProfile

    return StoryProfile(genre="fantasy")


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Secrets, Doors]]:
    from schemas.settings import get_settings
    from serve.app import create_app

    # this module's own stores: a module fixture runs before conftest's per-test data folder is set, and would
    # otherwise open the default one (shared with every other such run)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LOREKEEPER_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        get_settings.cache_clear()
        with api_services(answers=[extraction()] * 50) as services:
            app = create_app(services)
            with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
                doors = Doors(client)
                yield _setup(services, doors), doors


def _markers(answer: Any) -> set[str]:
    text = json.dumps(answer).lower()
    return {m for m in EVERYTHING if m in text}


def _read(s: Secrets, name: str) -> tuple[dict[str, str], dict[str, Any]]:
    cid = {"campaign_id": s.ids["campaign_id"]}
    return {
        "get_state_as_of": (cid, {}),
        "list_memories": (cid, {}),
        "list_summaries": (cid, {}),
        "list_proposals": ({"scene_id": s.ids["scene_id"]}, {}),
        "recall": (cid, {"query": " ".join(sorted(EVERYTHING)), "limit": 100}),
        "get_provenance": ({**cid, "turn_id": s.ids["turn_id"]}, {}),
        "list_house_rules": (cid, {}),
        "export_campaign": (cid, {}),
    }[name]


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_the_secrets_matrix_over_both_doors(secrets: tuple[Secrets, Doors], door: str) -> None:
    s, doors = secrets
    wrong: list[str] = []
    leaked = 0
    for name, shown in READS.items():
        ids, body = _read(s, name)
        for caller, may in SEES.items():
            code, answer = doors.call(door, name, s.keys[caller], ids, body)
            assert code is None, (door, name, caller, answer)
            got, expected = _markers(answer), shown & may
            leaked += len(got & GM_ONLY) if caller in PLAYERS else 0
            if got != expected:
                wrong.append(f"{door} {name} as {caller}: shows {sorted(got)}, expected {sorted(expected)}")
        for caller in OTHERS:
            code, answer = doors.call(door, name, s.keys[caller], ids, body)
            assert code in ("forbidden", "not_found") and not _markers(answer), (door, name, caller, answer)
    assert not wrong, "\n".join(wrong)
    assert leaked == 0


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_recall_shows_a_player_only_what_they_may_see(secrets: tuple[Secrets, Doors], door: str) -> None:
    s, doors = secrets
    ids, body = _read(s, "recall")
    code, answer = doors.call(door, "recall", s.keys["gm"], ids, body)
    assert code is None, answer
    found = _markers(answer["hits"])  # (the answer repeats the query, which names every marker)
    assert found & GM_ONLY and found & HERO, found  # the GM's recall finds the secrets (the test can fail)
    for caller in PLAYERS:
        code, answer = doors.call(door, "recall", s.keys[caller], ids, body)
        assert code is None, answer
        assert _markers(answer["hits"]) == found & SEES[caller], (door, caller, _markers(answer["hits"]))
        assert len(answer["hits"]) <= 100
    for caller in OTHERS:
        code, answer = doors.call(door, "recall", s.keys[caller], ids, body)
        assert code == "forbidden" and "hits" not in str(answer)


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_a_prompt_is_the_gms(secrets: tuple[Secrets, Doors], door: str) -> None:
    """The GM reads a turn's prompt, a player's provenance shows none (its snapshot, its text, the records recall
    put in it), the books it cited stay. The narration is the table's: even the GM's turn was narrated from the
    public records alone (tests/unit/test_serve_secret_narration.py)."""
    s, doors = secrets
    ids, body = _read(s, "get_provenance")
    code, answer = doors.call(door, "get_provenance", s.keys["gm"], ids, body)
    assert code is None and answer["prompt_text"] and answer["prompt"], answer
    assert _markers(answer["prompt_text"]) == {"sunlitmarker", "publicsummarymarker", "npcpublicmarker"}
    for caller in PLAYERS:
        code, answer = doors.call(door, "get_provenance", s.keys[caller], ids, body)
        assert code is None, answer
        assert answer["prompt"] is None and answer["prompt_text"] is None, (door, caller)
        assert not _markers(answer) and all(not r["recalled"] for r in answer["retrievals"]), (door, caller)


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_the_export_and_the_house_rules(secrets: tuple[Secrets, Doors], door: str) -> None:
    """A bundle holds every secret and prompt: exporting is the GM's. House rules are the table's rules (public)."""
    s, doors = secrets
    ids, body = _read(s, "export_campaign")
    for caller in PLAYERS:
        code, answer = doors.call(door, "export_campaign", s.keys[caller], ids, body)
        assert code == "forbidden", (door, caller, str(answer)[:200])
    code, answer = doors.call(door, "export_campaign", s.keys["gm"], ids, body)
    assert code is None and answer["data"]
    for caller in PLAYERS:
        code, answer = doors.call(door, "list_house_rules", s.keys[caller], {"campaign_id": s.ids["campaign_id"]}, {})
        assert code is None and not _markers(answer), answer


def test_a_secret_keeps_its_visibility_through_a_retcon_and_a_bundle(secrets: tuple[Secrets, Doors]) -> None:
    """A retcon's new value keeps the fact's audience; an exported bundle carries every visibility (this test
    empties the store: it runs last on the table)."""
    import io

    s, doors = secrets
    story, cid = s.services.story, s.ids["campaign_id"]
    plan = next(f for f in story.state(cid).facts if f.value == "gmplanmarker")
    assert plan.visibility is not None and plan.visibility.audience == "gm"
    body = {"campaign_id": cid, "reason": "the plan changed", "value": "gmplanmarker two"}
    code, answer = doors.call("mcp", "retcon_fact", s.keys["gm"], {"fact_id": plan.id}, body)
    assert code is None, answer
    state = story.state(cid)
    retold = next(f for f in state.facts if f.value == "gmplanmarker two")
    assert retold.visibility == plan.visibility
    code, seen = doors.call("rest", "get_state_as_of", s.keys["hero_player"], {"campaign_id": cid}, {})
    assert code is None and "gmplanmarker" not in json.dumps(seen)
    buffer = io.BytesIO()
    story.export_campaign(cid, buffer)
    story.graph.run("MATCH (n) DETACH DELETE n")  # another store (this module's last use of the table)
    story.recall_index.delete_campaign(cid)
    restored = story.import_campaign(buffer.getvalue())
    again = {f.value: f.visibility for f in story.state(restored.id).facts}
    assert again["gmplanmarker two"] == plan.visibility
    assert again["herosecretmarker"] is not None and again["herosecretmarker"].character_ids == [s.ids["hero"]]
    kept = {m.text: m.visibility for m in story.memories(restored.id)}
    assert kept["Cursed herogmmemmarker."] is not None and kept["Cursed herogmmemmarker."].audience == "gm"


def test_a_visibility_names_its_characters() -> None:
    from pydantic import ValidationError

    from schemas.proposals import ProposedEntity
    from schemas.visibility import Visibility, may_see

    with pytest.raises(ValidationError, match="names at least one character"):
        Visibility(audience="characters")
    with pytest.raises(ValidationError, match="names no characters"):
        Visibility(audience="gm", character_ids=["ent_a"])
    with pytest.raises(ValidationError, match="when an entity enters the story"):  # not dropped without a word
        ProposedEntity(entity_id="ent_a", kind="character", name="Ada", visibility={"audience": "gm"})
    hers = Visibility(audience="characters", character_ids=["ent_a"])
    assert may_see(hers, gm=False, character_id="ent_a") and not may_see(hers, gm=False, character_id="ent_b")
    assert not may_see(hers, gm=False, character_id=None) and may_see(hers, gm=True, character_id=None)
    assert not may_see(Visibility(audience="gm"), gm=False, character_id="ent_a") and may_see(
        None, gm=False, character_id=None
    )
