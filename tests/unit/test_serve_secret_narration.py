"""Secrets the narrator keeps, and secrets of every kind of record, over both doors.

The narrator here echoes its context: the narration of a turn is every line of its prompt that holds a
marker word, so a record the prompt was given is a record the whole table reads (in the turn's answer, the
listed turns and takes, recall). The GM keeps secrets of each kind — canon facts, an NPC hidden whole,
relationships, threads, memories, a summary, a house rule — and the scene they were made in ends with them,
so its outcomes in words and the summary formed at its end are written too. Then each player plays a turn
(over REST and over MCP) and reads everything a player can read: 0 GM-only records reach a player key, and a
player's turn is narrated from what that player may see.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

GM_ONLY = {
    "gmplanmarker",  # a GM-only fact
    "lurkmarker",  # an NPC the GM keeps hidden: its name
    "lairmarker",  # a public fact about it
    "lurkwatchmarker",  # a public relationship of it
    "gmtiemarker",  # a GM-only relationship
    "gmthreadmarker",  # a GM-only thread
    "npcmemmarker",  # an NPC's memory (the GM's)
    "gmsummarymarker",  # a GM-only summary
}
PUBLIC = {"sunlitmarker", "allymarker", "questmarker", "publicsummarymarker"}
HERO = {"herosecretmarker", "heromemmarker", "herotiemarker"}
RIVAL = {"rivalsecretmarker", "rivalmemmarker", "rivalthreadmarker"}
EVERYTHING = GM_ONLY | PUBLIC | HERO | RIVAL
SEES = {"hero_player": PUBLIC | HERO, "rival_player": PUBLIC | RIVAL, "bystander": PUBLIC}
PLAYERS = tuple(SEES)
GM = {"audience": "gm"}


def _only(*characters: str) -> dict[str, Any]:
    return {"audience": "characters", "character_ids": list(characters)}


def _markers(answer: Any) -> set[str]:
    text = json.dumps(answer).lower()
    return {m for m in EVERYTHING if m in text}


def _context_echo() -> Any:
    from narrator.engines import EchoEngine

    class ContextEcho(EchoEngine):
        """Narrates every line of its prompt that holds a marker: what it was told, the table reads."""

        async def stream(
            self, messages: list[Any], *, max_tokens: int, temperature: float, seed: int | None = None
        ) -> AsyncIterator[str]:
            self.calls.append(messages)
            lines = [line for m in messages for line in m["content"].splitlines() if "marker" in line.lower()]
            yield " / ".join(lines) or "Nothing stirs."

    return ContextEcho("context-echo")


@dataclass
class Table:
    services: Any
    doors: Doors
    keys: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    turns: dict[str, dict[str, Any]] = field(default_factory=dict)  # who played -> the play_turn answer


def _propose(story: Any, scene_id: str, kind: str, content: dict[str, Any]) -> str:
    return str(story.propose(scene_id, type=kind, content=content, authority="gm", confidence=1.0).id)


def _entities(story: Any, scene_id: str, campaign_id: str) -> dict[str, str]:
    made = [
        _propose(story, scene_id, "entity", {"type": "entity", "kind": kind, "name": name})
        for name, kind in (("Ada", "character"), ("Brand", "character"), ("Mordecai", "creature"))
    ]
    made.append(_propose(story, scene_id, "entity", {"type": "entity", "kind": "creature", "name": "Goblin"}))
    hidden = {"type": "entity", "kind": "creature", "name": "Lurkmarker", "visibility": GM}
    made.append(_propose(story, scene_id, "entity", hidden))
    story.commit(scene_id, made)
    return {e.name: e.id for e in story.state(campaign_id).entities}


def _secrets(story: Any, scene_id: str, people: dict[str, str]) -> None:
    """Every kind of record, of every audience, proposed in the scene (made canon when it ends)."""
    ada, brand, mordecai, lurk, goblin = (people[n] for n in ("Ada", "Brand", "Mordecai", "Lurkmarker", "Goblin"))

    def fact(subject: str, predicate: str, value: Any, visibility: dict[str, Any] | None = None) -> None:
        content = {"type": "fact", "subject_entity_id": subject, "predicate": predicate, "value": value}
        _propose(story, scene_id, "fact", {**content, **({"visibility": visibility} if visibility else {})})

    def tie(source: str, target: str, words: str, visibility: dict[str, Any] | None = None) -> None:
        content = {"type": "relationship", "source_entity_id": source, "target_entity_id": target, "kind": "knows"}
        extra = {"visibility": visibility} if visibility else {}
        _propose(story, scene_id, "relationship", {**content, "description": words, **extra})

    def thread(title: str, visibility: dict[str, Any] | None = None) -> None:
        event = {"kind": "thread_opened", "title": title, "involved_entity_ids": [ada]}
        events = [{**event, **({"visibility": visibility} if visibility else {})}]
        _propose(story, scene_id, "state_change", {"type": "state_change", "events": events})

    fact(ada, "weather", "sunlitmarker")
    fact(mordecai, "plan", "gmplanmarker", GM)
    fact(ada, "secret", "herosecretmarker", _only(ada))
    fact(brand, "secret", "rivalsecretmarker", _only(brand))
    fact(lurk, "lair", "lairmarker")
    fact(goblin, "hit_points", 12, GM)  # a house rule the GM keeps to themself
    fact(goblin, "armor_class", 17)  # and one the table knows
    tie(ada, brand, "allymarker")
    tie(mordecai, ada, "gmtiemarker", GM)
    tie(ada, mordecai, "herotiemarker", _only(ada))
    tie(lurk, ada, "lurkwatchmarker")
    thread("questmarker")
    thread("gmthreadmarker", GM)
    thread("rivalthreadmarker", _only(brand))


def _setup(services: Any, doors: Doors) -> Table:
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile, Summary, SummaryScope
    from tests.unit.test_source_check import rulebook

    story, table = services.story, Table(services, doors)
    rulebook(story, "Basic Rules")
    world = story.create_world("Ashfall")
    a = story.create_campaign(world.id, "A", StoryProfile(genre="fantasy"))
    b = story.create_campaign(story.create_world("Elsewhere").id, "B", StoryProfile(genre="fantasy"))
    story.add_turn(a.id, "We reach the keep.", narration="The gate creaks.")
    scene = story.start_scene(a.id, title="The keep")
    people = _entities(story, scene.id, a.id)
    story.add_turn(a.id, "We walk into the hall.", narration="Torches gutter.")
    _secrets(story, scene.id, people)
    keys = services.keys
    table.keys = {
        "gm": keys.create("gm A", campaigns=[a.id], role=KeyRole.GM)[0],
        "hero_player": keys.create("Ada's player", campaigns=[a.id], character_entity_id=people["Ada"])[0],
        "rival_player": keys.create("Brand's player", campaigns=[a.id], character_entity_id=people["Brand"])[0],
        "bystander": keys.create("watcher", campaigns=[a.id])[0],
        "other_player": keys.create("player B", campaigns=[b.id])[0],
    }
    table.ids = {"campaign_id": a.id, "scene_id": scene.id, "hero": people["Ada"], "rival": people["Brand"]}
    code, report = doors.call("rest", "end_scene", table.keys["gm"], {"scene_id": scene.id}, {})
    assert code is None and all(d["status"] == "accepted" for d in report["decisions"]), report
    cid = {"campaign_id": a.id}
    memories = [
        {"observer_entity_id": people["Ada"], "text": "I saw heromemmarker."},
        {"observer_entity_id": people["Brand"], "text": "I saw rivalmemmarker."},
        {"observer_entity_id": people["Mordecai"], "text": "I plot npcmemmarker."},
    ]
    for body in memories:
        assert doors.call("mcp", "add_memory", table.keys["gm"], cid, body)[0] is None
    head = story.get_campaign(a.id).head_turn_id
    for text, visibility in (("The keep, publicsummarymarker.", None), ("Traitor gmsummarymarker.", GM)):
        story.add_summary(
            Summary(campaign_id=a.id, scope=SummaryScope.SESSION, anchor_turn_id=head, text=text, visibility=visibility)
        )
    plays = [("hero_player", "rest"), ("rival_player", "mcp"), ("bystander", "rest"), ("gm", "mcp")]
    for who, door in plays:
        code, outcome = doors.call(door, "play_turn", table.keys[who], cid, {"text": "I look around the hall."})
        assert code is None, outcome
        table.turns[who] = outcome
    return table


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Table]:
    from schemas.serving import ServeSettings
    from schemas.settings import get_settings
    from serve.app import create_app
    from serve.services import SingleEngine, check_binding, open_services

    serve = ServeSettings(api_host="127.0.0.1")
    with pytest.MonkeyPatch.context() as env:  # this module's own stores (a module fixture runs before conftest's)
        env.setenv("LOREKEEPER_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        get_settings.cache_clear()
        settings = get_settings()
    with open_services(settings, serve, narrator=SingleEngine(_context_echo())) as services:
        services.open = check_binding(serve, services.keys)
        with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield _setup(services, Doors(client))


def _prompt(t: Table, who: str) -> str:
    """The exact prompt of ``who``'s turn, as the GM reads it."""
    ids = {"campaign_id": t.ids["campaign_id"], "turn_id": t.turns[who]["turn_id"]}
    code, provenance = t.doors.call("rest", "get_provenance", t.keys["gm"], ids, {})
    assert code is None and provenance["prompt_text"], provenance
    return str(provenance["prompt_text"])


def test_every_turn_is_narrated_from_what_the_table_may_see(table: Table) -> None:
    """The narration of a turn is read by the whole table (the answer, the listed turns and takes, recall, the
    next turns' prompts), so its prompt holds the public records alone: never a GM-only record, nor one known
    only to some characters — not even the player's own character's, which another player would read."""
    for who in (*PLAYERS, "gm"):
        prompt, narration = _markers(_prompt(table, who)), _markers(table.turns[who]["narration"])
        assert prompt == narration, (who, prompt, narration)  # the narrator told what it was given
        assert prompt <= PUBLIC, (who, sorted(prompt - PUBLIC))
        assert {"sunlitmarker", "questmarker", "publicsummarymarker"} <= prompt, (who, prompt)  # it had the table's


def test_the_gm_still_reads_every_secret(table: Table) -> None:
    cid = {"campaign_id": table.ids["campaign_id"]}
    for door in ("rest", "mcp"):
        seen: set[str] = set()
        for name in ("get_state_as_of", "list_memories", "list_summaries"):
            code, answer = table.doors.call(door, name, table.keys["gm"], cid, {})
            assert code is None, answer
            seen |= _markers(answer)
        assert seen == EVERYTHING, sorted(EVERYTHING - seen)
        code, rules = table.doors.call(door, "list_house_rules", table.keys["gm"], cid, {})
        assert code is None and sorted(r["field"] for r in rules) == ["armor_class", "hit_points"], rules


def _reads(t: Table) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    cid = {"campaign_id": t.ids["campaign_id"]}
    turn = {**cid, "turn_id": t.turns["hero_player"]["turn_id"]}
    gm_turn = {**cid, "turn_id": t.turns["gm"]["turn_id"]}
    return [
        ("get_state_as_of", cid, {}),
        ("list_memories", cid, {}),
        ("list_summaries", cid, {}),
        ("list_scenes", cid, {}),
        ("get_scene", {"scene_id": t.ids["scene_id"]}, {}),
        ("list_proposals", {"scene_id": t.ids["scene_id"]}, {}),
        ("recall", cid, {"query": " ".join(sorted(EVERYTHING)) + " Mordecai plan Ada Brand", "limit": 100}),
        ("list_turns", cid, {}),
        ("list_takes", turn, {}),
        ("list_takes", gm_turn, {}),
        ("get_provenance", turn, {}),
        ("get_provenance", gm_turn, {}),
        ("list_house_rules", cid, {}),
        ("get_campaign", cid, {}),
    ]


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_no_gm_only_record_reaches_a_player_through_any_answer(table: Table, door: str) -> None:
    """Every read a player key can make, and the answers of the turns they played: 0 GM-only records."""
    leaks: list[str] = []
    for who in PLAYERS:
        answers = [("play_turn", table.turns[who])]
        for name, ids, body in _reads(table):
            code, answer = table.doors.call(door, name, table.keys[who], ids, body)
            assert code is None, (door, name, who, answer)
            if name == "recall":
                answer = answer["hits"]  # the answer repeats the query, which names every marker
            answers.append((name, answer))
        leaks += [
            f"{door} {name} as {who}: {sorted(_markers(a) & GM_ONLY)}" for name, a in answers if _markers(a) & GM_ONLY
        ]
    assert not leaks, "\n".join(leaks)


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_relationships_threads_and_house_rules_are_filtered_by_their_visibility(table: Table, door: str) -> None:
    cid = {"campaign_id": table.ids["campaign_id"]}
    for who, may in SEES.items():
        code, state = table.doors.call(door, "get_state_as_of", table.keys[who], cid, {})
        assert code is None, state
        ties = _markers(state["relationships"])
        threads = _markers(state["threads"])
        assert ties == {"allymarker", "gmtiemarker", "herotiemarker", "lurkwatchmarker"} & may, (who, ties)
        assert threads == {"questmarker", "gmthreadmarker", "rivalthreadmarker"} & may, (who, threads)
        code, rules = table.doors.call(door, "list_house_rules", table.keys[who], cid, {})
        assert code is None and [r["field"] for r in rules] == ["armor_class"], (who, rules)
    code, answer = table.doors.call(door, "list_house_rules", table.keys["other_player"], cid, {})
    assert code == "forbidden" and not _markers(answer)


def test_a_scenes_outcomes_and_what_its_end_formed_are_the_tables(table: Table) -> None:
    """The scene ended with secrets among its canon: its outcomes in words name none, nor does the summary
    formed from them (both are read by every player); the GM reads the secrets in the state."""
    story = table.services.story
    scene = story.get_scene(table.ids["scene_id"])
    assert scene.canonical_outcomes and "sunlitmarker" in " ".join(scene.canonical_outcomes).lower()
    assert not _markers(scene.canonical_outcomes) - PUBLIC, scene.canonical_outcomes
    formed = [s.text for s in story.summaries(table.ids["campaign_id"]) if s.scene_id == scene.id]
    assert formed and not _markers(formed) - PUBLIC, formed
    players = (table.ids["hero"], table.ids["rival"])  # the memories formed for the characters their players read
    theirs = [m.text for m in story.memories(table.ids["campaign_id"]) if m.observer_entity_id in players]
    assert not _markers(theirs) & GM_ONLY, theirs


def test_a_decisions_rationale_does_not_quote_a_secret_to_a_player(table: Table) -> None:
    """A player's claim against the GM's hidden plan is rejected by the gate, which quotes the fact it
    contradicts; the player reads the rejection, not the plan (runs last: it starts a scene)."""
    gm, hero = table.keys["gm"], table.keys["hero_player"]
    code, scene = table.doors.call("rest", "start_scene", gm, {"campaign_id": table.ids["campaign_id"]}, {})
    assert code is None, scene
    mordecai = next(e.id for e in table.services.story.state(table.ids["campaign_id"]).entities if e.name == "Mordecai")
    roll = {"expression": "1d20", "rolls": [15], "total": 15, "target": 12}
    claim = {
        "type": "fact",
        "content": {"type": "fact", "subject_entity_id": mordecai, "predicate": "plan", "value": "peace"},
        "authority": "player",
        "confidence": 1.0,
        "resolution": {"method": "dice", "outcome": "success", "roll": roll},
        "evidence": {"turn_ids": [table.turns["hero_player"]["turn_id"]]},
    }
    sid = {"scene_id": scene["id"]}
    code, proposal = table.doors.call("mcp", "propose_change", hero, sid, claim)
    assert code is None, proposal
    code, report = table.doors.call("rest", "commit_scene", gm, sid, {"proposal_ids": [proposal["id"]]})
    assert code is None and report["decisions"][0]["status"] == "rejected", report
    code, queue = table.doors.call("rest", "list_proposals", gm, sid, {})
    assert code is None and "gmplanmarker" in json.dumps(queue)  # the rationale quotes the plan: the test can fail
    for door in ("rest", "mcp"):
        for who in PLAYERS:
            code, queue = table.doors.call(door, "list_proposals", table.keys[who], sid, {})
            assert code is None, queue
            (seen,) = [p for p in queue if p["id"] == proposal["id"]]
            assert seen["status"] == "rejected" and "gmplanmarker" not in json.dumps(queue), (door, who, seen)
