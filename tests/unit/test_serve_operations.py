"""One operation, two doors: every operation has a REST route and an MCP tool (or a stated reason), and the
role matrix — admin, the campaign's GM, its player, another campaign's GM and player, no key — gives the
same answer through both doors, from one list.

``ROLES`` is the specification: who may call each operation. It is checked against what each operation
declares, and then run for real, over REST and over MCP, on the embedded stores.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services, extraction

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

# who may call each operation: "any" (any valid key), "player" (a key of the campaign), "gm" (its GM key),
# "admin"; an admin may call everything
ROLES: dict[str, str] = {
    # knowledge and the library: any key
    "search_knowledge": "any",
    "search_by_category": "any",
    "list_libraries": "any",
    "list_collections": "any",
    "list_items": "any",
    "get_item": "any",
    "get_concepts": "any",
    "get_entry_facts": "any",
    "get_health": "any",
    # worlds and campaigns
    "create_world": "admin",
    "get_world": "player",
    "list_axioms": "player",
    "add_axiom": "gm",  # a campaign's GM authors its world
    "create_campaign": "admin",
    "list_campaigns": "any",
    "get_campaign": "player",
    "get_library": "player",
    "set_library": "gm",  # pins books
    "get_models": "player",
    "set_models": "gm",  # names the engines of the campaign's seats
    "export_campaign": "gm",  # the whole campaign, its secrets with it
    "import_campaign": "admin",
    # turns
    "play_turn": "player",
    "list_turns": "player",
    "retake_turn": "gm",  # retaking withdraws the old take's proposals
    "list_takes": "player",
    "select_take": "gm",
    "get_provenance": "player",
    # the head
    "undo": "gm",
    "redo": "gm",
    "list_branches": "player",
    "create_branch": "gm",
    "switch_branch": "gm",
    "create_checkpoint": "gm",
    "list_checkpoints": "player",
    "restore_checkpoint": "gm",
    "list_turn_versions": "player",
    "revert_turn_version": "gm",
    "get_state_as_of": "player",
    # scenes, the gate and rulings
    "start_scene": "gm",
    "list_scenes": "player",
    "get_scene": "player",
    "propose_change": "player",
    "list_proposals": "player",
    "review_proposal": "gm",  # lets a system proposal through
    "commit_scene": "gm",
    "end_scene": "gm",
    "retcon_fact": "gm",
    "list_dependents": "gm",
    "retcon_record": "gm",
    "list_house_rules": "player",
    # memory
    "recall": "player",
    "list_memories": "player",
    "add_memory": "player",  # for the character the key plays
    "retract_memory": "gm",
    "list_summaries": "player",
    # threads and triggers
    "list_threads": "player",
    "open_thread": "gm",
    "advance_thread": "gm",
    "resolve_thread": "gm",
    "abandon_thread": "gm",
    "list_triggers": "gm",
    "create_trigger": "gm",
    "update_trigger": "gm",
    "delete_trigger": "gm",
    "list_activations": "gm",
    # the GM's desk: notes, sessions and arcs, dispositions and pruning, what happened between two turns
    "add_scene_note": "gm",
    "list_scene_notes": "gm",
    "update_scene_note": "gm",
    "delete_scene_note": "gm",
    "start_session": "gm",
    "end_session": "gm",
    "create_span": "gm",
    "summarize_span": "gm",
    "list_spans": "player",
    "set_take_disposition": "gm",
    "set_version_disposition": "gm",
    "prune_disposable": "gm",
    "list_prunes": "gm",
    "happenings_between": "player",
    # presentation and media
    "get_presentation": "player",
    "list_presentation_versions": "player",
    "set_presentation": "gm",
    "regenerate_presentation": "gm",
    "upload_media": "gm",
    "list_media": "player",
    "get_media": "player",
    "get_media_content": "player",
    "submit_media_job": "gm",
    "list_media_jobs": "gm",
    "get_media_job": "gm",
    "run_media_jobs": "gm",
    # keys
    "create_key": "admin",
    "list_keys": "admin",
    "revoke_key": "admin",
    "create_player_key": "gm",
    "list_player_keys": "gm",
    "revoke_player_key": "gm",
}
CALLERS = ("none", "other_player", "other_gm", "player", "gm", "admin")
ALLOWED = {
    "any": {"other_player", "other_gm", "player", "gm", "admin"},
    "player": {"player", "gm", "admin"},
    "gm": {"gm", "admin"},
    "admin": {"admin"},
}


@dataclass
class Table:
    """Campaign A (its GM, its player playing a character) and campaign B (another table), with records of A."""

    services: Any
    keys: dict[str, str | None] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    bundle: bytes = b""


def _table(services: Any) -> Table:
    from schemas.knowledge import FileType, Item, Library, LibraryType
    from schemas.serving import KeyRole
    from schemas.story import Authority, Memory, StoryProfile

    story, t = services.story, Table(services)
    world = story.create_world("Ashfall", axioms=["Magic has a price."])
    a = story.create_campaign(world.id, "A", StoryProfile(genre="fantasy"))
    b = story.create_campaign(story.create_world("Elsewhere").id, "B", StoryProfile(genre="noir"))
    turn = story.add_turn(a.id, "I enter the keep.", narration="The gate creaks.")
    head = story.add_turn(a.id, "I look around.", narration="Dust everywhere.")
    scene = story.start_scene(a.id, title="The keep")
    hero = story.propose(
        scene.id,
        type="entity",
        content={"type": "entity", "kind": "character", "name": "Ada"},
        authority=Authority.GM,
        confidence=1.0,
    )
    story.commit(scene.id, [hero.id])
    hero_id = story.state(a.id).entities[0].id
    fact = story.propose(
        scene.id,
        type="fact",
        authority=Authority.GM,
        confidence=1.0,
        content={"type": "fact", "subject_entity_id": hero_id, "predicate": "mood", "value": "calm"},
    )
    story.commit(scene.id, [fact.id])
    checkpoint = story.create_checkpoint(a.id, "at the gate", turn_id=turn.id)
    at_head = story.create_checkpoint(a.id, "the table's head").id
    library = services.catalog.save_library(Library(name="Fate SRD", type=LibraryType.RULEBOOK))
    item = services.catalog.save_item(
        Item(
            uid="item_fate",
            library_uid=library.uid,
            title="Fate",
            file_type=FileType.MARKDOWN,
            size_bytes=1,
            content_hash="0" * 64,
            source_ref="fate.md",
        )
    )
    story.add_memory(
        Memory(campaign_id=a.id, observer_entity_id=hero_id, text="The gate was cold.", anchor_turn_id=head.id)
    )
    keys = services.keys
    t.keys = {
        "none": None,
        "admin": keys.create("admin", admin=True)[0],
        "gm": keys.create("gm A", campaigns=[a.id], role=KeyRole.GM)[0],
        "player": keys.create("player A", campaigns=[a.id], character_entity_id=hero_id)[0],
        "other_gm": keys.create("gm B", campaigns=[b.id], role=KeyRole.GM)[0],
        "other_player": keys.create("player B", campaigns=[b.id])[0],
    }
    t.ids = {
        "world_id": world.id,
        "campaign_id": a.id,
        "turn_id": turn.id,
        "scene_id": scene.id,
        "hero": hero_id,
        "fact_id": story.state(a.id).facts[0].id,
        "checkpoint_id": checkpoint.id,
        "branch_id": a.active_branch_id,
        "take_id": story.takes(turn.id)[0].id,
        "head": head.id,
        "at_head": at_head,
        "library_uid": library.uid,
        "item_uid": item.uid,
    }
    import io

    buffer = io.BytesIO()
    story.export_campaign(a.id, buffer)
    t.bundle = buffer.getvalue()
    return t


def _active_scene(t: Table) -> str:
    """The scene active at the campaign's head (one is started if none is)."""
    story, cid = t.services.story, t.ids["campaign_id"]
    scene = story.active_scene(cid) or story.start_scene(cid)
    return str(scene.id)


def _fresh(t: Table, what: str) -> str:
    """A record made for one call (a call may use it up: revoke a key, retract a memory, commit a proposal)."""
    from schemas.serving import KeyRole
    from schemas.story import Authority, Memory
    from schemas.triggers import TriggerCreate

    story, cid = t.services.story, t.ids["campaign_id"]
    if what == "key":
        return str(t.services.keys.create("spare", campaigns=[cid], role=KeyRole.PLAYER)[1].id)
    if what == "memory":
        memory = Memory(
            campaign_id=cid, observer_entity_id=t.ids["hero"], text="A spare memory.", anchor_turn_id=t.ids["head"]
        )
        return str(story.add_memory(memory).id)
    if what == "thread":
        return story.threads.open(cid, "A spare thread").id
    if what == "trigger":
        return story.triggers.create(cid, TriggerCreate.model_validate(_NEVER)).id
    if what == "version":  # a retake's archive of the take it replaced
        story.versions.rewind(cid, t.ids["turn_id"])
        story.add_take(t.ids["turn_id"], "The gate creaks again.")
        return str(story.versions.list(cid, t.ids["turn_id"])[-1].id)
    event = {"type": "event", "title": "A bell rings"}
    return str(story.propose(_active_scene(t), type="event", content=event, authority=Authority.GM, confidence=1.0).id)


_SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"/>').decode()


def _media(t: Table, what: str) -> dict[str, str]:
    """The ids of a call on a turn's presentation, a media record or a media job of campaign A (made for it)."""
    from schemas.media import MediaAttachment, MediaJob

    story, cid = t.services.story, t.ids["campaign_id"]
    ids = {"campaign_id": cid}
    if what == "presentation":
        if story.presentation(t.ids["turn_id"]) is None:
            story.presentations.regenerate(t.ids["turn_id"])
        return ids | {"turn_id": t.ids["turn_id"]}
    if what == "media_id":
        data = base64.b64decode(_SVG)
        return ids | {"media_id": story.media.upload(cid, data, mime="image/svg+xml", attachment=MediaAttachment()).id}
    return ids | {"job_id": story.media.submit(MediaJob(campaign_id=cid, prompt="A bell")).id}


def _desk(t: Table, what: str) -> dict[str, str]:
    """The ids of a call on a GM's note, the session being played or a span of campaign A (made for it)."""
    from schemas.desk import SpanKind

    story, cid = t.services.story, t.ids["campaign_id"]
    spans = story.desk.spans
    if what == "note":
        return {"campaign_id": cid, "note_id": story.desk.notes.add(t.ids["scene_id"], "A spare note").id}
    if what == "session":
        playing = [s for s in spans.at(cid, kind=SpanKind.SESSION) if s.to_turn_id is None]
        return {"campaign_id": cid, "span_id": (playing[0] if playing else spans.start_session(cid)).id}
    span = spans.create(cid, "A spare arc", from_turn_id=t.ids["turn_id"], to_turn_id=t.ids["head"])
    return {"campaign_id": cid, "span_id": span.id}


_NEVER = {
    "name": "Far off",
    "conditions": [{"on": "turn_count", "at_least": 999}],
    "action": {"kind": "note", "text": "-"},
}

# each operation's call: (ids, request) built from the table
REQUESTS: dict[str, Callable[[Table], tuple[list[str] | dict[str, str], dict[str, Any]]]] = {
    "search_knowledge": lambda t: ([], {"query": "aspects"}),
    "search_by_category": lambda t: ([], {"query": "aspects", "library_type": "rulebook"}),
    "list_libraries": lambda t: ([], {}),
    "list_collections": lambda t: (["library_uid"], {}),
    "list_items": lambda t: (["library_uid"], {}),
    "get_item": lambda t: (["item_uid"], {}),
    "get_concepts": lambda t: ([], {}),
    "get_entry_facts": lambda t: ([], {"entry": "Goblin"}),
    "get_health": lambda t: ([], {}),
    "create_world": lambda t: ([], {"name": "New world"}),
    "get_world": lambda t: (["world_id"], {}),
    "list_axioms": lambda t: (["world_id"], {}),
    "add_axiom": lambda t: (["world_id"], {"text": "Iron burns the fey."}),
    "create_campaign": lambda t: ([], {"world_id": t.ids["world_id"], "name": "C", "profile": {"genre": "x"}}),
    "list_campaigns": lambda t: ([], {}),
    "get_campaign": lambda t: (["campaign_id"], {}),
    "get_library": lambda t: (["campaign_id"], {}),
    "set_library": lambda t: (["campaign_id"], {"pins": []}),
    "get_models": lambda t: (["campaign_id"], {}),
    "set_models": lambda t: (["campaign_id"], {"narrator": "narrator"}),
    "export_campaign": lambda t: (["campaign_id"], {}),
    "import_campaign": lambda t: ([], {"data": t.bundle}),
    "play_turn": lambda t: (["campaign_id"], {"text": "I listen."}),
    "list_turns": lambda t: (["campaign_id"], {}),
    "retake_turn": lambda t: (["campaign_id", "turn_id"], {}),
    "list_takes": lambda t: (["campaign_id", "turn_id"], {}),
    "select_take": lambda t: (["campaign_id", "turn_id", "take_id"], {}),
    "get_provenance": lambda t: (["campaign_id", "turn_id"], {}),
    "undo": lambda t: (["campaign_id"], {}),
    "redo": lambda t: (["campaign_id"], {}),
    "list_branches": lambda t: (["campaign_id"], {}),
    "create_branch": lambda t: (["campaign_id"], {"from_turn_id": t.ids["turn_id"]}),
    "switch_branch": lambda t: (["campaign_id", "branch_id"], {}),
    "create_checkpoint": lambda t: (["campaign_id"], {"name": "here"}),
    "list_checkpoints": lambda t: (["campaign_id"], {}),
    "restore_checkpoint": lambda t: (["campaign_id", "checkpoint_id"], {}),
    "list_turn_versions": lambda t: (["campaign_id", "turn_id"], {}),
    "revert_turn_version": lambda t: (["campaign_id", "turn_id", "version_id"], {}),
    "get_state_as_of": lambda t: (["campaign_id"], {"turn_id": t.ids["turn_id"]}),
    "start_scene": lambda t: (["campaign_id"], {"title": "Another"}),
    "list_scenes": lambda t: (["campaign_id"], {}),
    "get_scene": lambda t: (["scene_id"], {}),
    "propose_change": lambda t: (["scene_id"], {"type": "event", "content": {"type": "event", "title": "Rain"}}),
    "list_proposals": lambda t: (["scene_id"], {}),
    "review_proposal": lambda t: (
        {"scene_id": _active_scene(t), "proposal_id": _fresh(t, "proposal")},
        {"action": "accept", "rationale": "It fits."},
    ),
    "commit_scene": lambda t: (["scene_id"], {"proposal_ids": [_fresh(t, "proposal")]}),
    "end_scene": lambda t: (["scene_id"], {}),
    "retcon_fact": lambda t: (["fact_id"], {"campaign_id": t.ids["campaign_id"], "reason": "no", "value": "wild"}),
    "list_dependents": lambda t: ({"campaign_id": t.ids["campaign_id"], "record_id": t.ids["fact_id"]}, {}),
    "retcon_record": lambda t: (
        {"campaign_id": t.ids["campaign_id"], "record_id": t.ids["fact_id"]},
        {"reason": "it never was", "dependents": "keep"},
    ),
    "list_house_rules": lambda t: (["campaign_id"], {}),
    "recall": lambda t: (["campaign_id"], {"query": "the gate"}),
    "list_memories": lambda t: (["campaign_id"], {}),
    "add_memory": lambda t: (["campaign_id"], {"observer_entity_id": t.ids["hero"], "text": "I was afraid."}),
    "retract_memory": lambda t: (["campaign_id", "memory_id"], {"reason": "it was a dream"}),
    "list_threads": lambda t: (["campaign_id"], {"status": "open"}),
    "open_thread": lambda t: (["campaign_id"], {"title": "The lost bell"}),
    "advance_thread": lambda t: (["campaign_id", "thread_id"], {"progress": "A clue"}),
    "resolve_thread": lambda t: (["campaign_id", "thread_id"], {"resolution": "Found"}),
    "abandon_thread": lambda t: (["campaign_id", "thread_id"], {"reason": "Forgotten"}),
    "list_triggers": lambda t: (["campaign_id"], {}),
    "create_trigger": lambda t: (["campaign_id"], _NEVER),
    "update_trigger": lambda t: (["campaign_id", "trigger_id"], {"active": False}),
    "delete_trigger": lambda t: (["campaign_id", "trigger_id"], {}),
    "list_activations": lambda t: (["campaign_id"], {}),
    "add_scene_note": lambda t: (["scene_id"], {"text": "A spare note", "kind": "todo"}),
    "list_scene_notes": lambda t: (["campaign_id"], {"open_only": True}),
    "update_scene_note": lambda t: (_desk(t, "note"), {"text": "Changed"}),
    "delete_scene_note": lambda t: (_desk(t, "note"), {}),
    "start_session": lambda t: (["campaign_id"], {}),
    "end_session": lambda t: (_desk(t, "session"), {}),
    "create_span": lambda t: (["campaign_id"], {"name": "Arc", "from_turn_id": t.ids["turn_id"]}),
    "summarize_span": lambda t: (_desk(t, "span"), {"text": "What we did."}),
    "list_spans": lambda t: (["campaign_id"], {}),
    "set_take_disposition": lambda t: (["campaign_id", "turn_id", "take_id"], {"disposition": "retained"}),
    "set_version_disposition": lambda t: (["campaign_id", "turn_id", "version_id"], {"disposition": "retained"}),
    "prune_disposable": lambda t: (["campaign_id"], {"dry_run": True}),
    "list_prunes": lambda t: (["campaign_id"], {}),
    "happenings_between": lambda t: (["campaign_id"], {"from_turn_id": t.ids["turn_id"]}),
    "get_presentation": lambda t: (_media(t, "presentation"), {}),
    "list_presentation_versions": lambda t: (["campaign_id", "turn_id"], {}),
    "set_presentation": lambda t: (["campaign_id", "turn_id"], {"blocks": [{"type": "narration", "text": "Rain."}]}),
    "regenerate_presentation": lambda t: (["campaign_id", "turn_id"], {}),
    "upload_media": lambda t: (["campaign_id"], {"data_base64": _SVG, "mime": "image/svg+xml"}),
    "list_media": lambda t: (["campaign_id"], {}),
    "get_media": lambda t: (_media(t, "media_id"), {}),
    "get_media_content": lambda t: (_media(t, "media_id"), {}),
    "submit_media_job": lambda t: (["campaign_id"], {"task": "image", "prompt": "A bell tower"}),
    "list_media_jobs": lambda t: (["campaign_id"], {}),
    "get_media_job": lambda t: (_media(t, "job_id"), {}),
    "run_media_jobs": lambda t: (["campaign_id"], {}),
    "list_summaries": lambda t: (["campaign_id"], {}),
    "create_key": lambda t: ([], {"name": "new", "campaigns": [t.ids["campaign_id"]]}),
    "list_keys": lambda t: ([], {}),
    "revoke_key": lambda t: (["key_id"], {}),
    "create_player_key": lambda t: (["campaign_id"], {"name": "new player"}),
    "list_player_keys": lambda t: (["campaign_id"], {}),
    "revoke_player_key": lambda t: (["campaign_id", "key_id"], {}),
}


def _request(t: Table, name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The call's ids and request, on the table as it was set (a call before may have moved the head)."""
    t.services.story.restore_checkpoint(t.ids["campaign_id"], t.ids["at_head"])
    id_names, body = REQUESTS[name](t)
    if isinstance(id_names, dict):  # ids made for the call
        return id_names, body
    ids = {}
    for id_name in id_names:
        made = {"memory_id": "memory", "key_id": "key", "proposal_id": "proposal", "version_id": "version"}
        made |= {"thread_id": "thread", "trigger_id": "trigger"}
        fresh = made.get(id_name)
        ids[id_name] = _fresh(t, fresh) if fresh else t.ids[id_name]
    return ids, body


@pytest.fixture(scope="module")
def table() -> Iterator[tuple[Table, Doors]]:
    from serve.app import create_app

    with api_services(answers=[extraction()] * 200) as services:
        t = _table(services)
        with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield t, Doors(client)


def test_every_operation_has_both_doors_or_a_reason() -> None:
    from serve.app import create_app
    from serve.operations import OPERATIONS, REST_ONLY_ROUTES, Role

    assert set(OPERATIONS) == set(ROLES) == set(REQUESTS)
    for op in OPERATIONS.values():
        assert op.rest is not None, f"{op.name} has no REST door"
        assert op.mcp or op.rest_only, f"{op.name} has no MCP tool and no reason"
        declared = {Role.ANY: "any", Role.PLAYER: "player", Role.GM: "gm", Role.ADMIN: "admin"}[op.access.role]
        assert declared == ROLES[op.name], (op.name, declared)
    assert {op.name for op in OPERATIONS.values() if not op.mcp} == {"import_campaign"}
    assert all(reason for reason in REST_ONLY_ROUTES.values())
    # every REST route of the app is an operation's door, or a REST-only route listed with its reason
    with api_services() as services:
        app = create_app(services)
    doors = {"/api/v1" + op.rest.path for op in OPERATIONS.values() if op.rest}
    listed = " ".join(REST_ONLY_ROUTES)
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith(("/docs", "/openapi", "/redoc", "/mcp")):  # the MCP door itself
            continue
        assert path in doors or path in listed, f"{path} is neither an operation's door nor listed REST-only"


def test_the_doors_stay_small() -> None:
    """Adding an operation adds a declaration, not code in the doors: no module of serve over 600 lines, and no
    function of the operations or of the two doors over 80 (the registrars were the packages' largest)."""
    import ast
    from pathlib import Path

    serve = Path(__file__).resolve().parents[2] / "serve"
    for path in serve.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) <= 600, path
        if path.parent.name in ("operations", "routes") or path.name == "mcp.py":
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    assert size <= 80, f"{path.name}:{node.name} is {size} lines"


@pytest.mark.parametrize("door", ["rest", "mcp"])
def test_the_role_matrix_over_both_doors(table: tuple[Table, Doors], door: str) -> None:
    from serve.operations import OPERATIONS, On

    t, doors = table
    wrong: list[str] = []
    for name, role in ROLES.items():
        op = OPERATIONS[name]
        if door == "mcp" and not op.mcp:
            continue
        for caller in CALLERS:
            ids, body = _request(t, name)
            code, answer = doors.call(door, name, t.keys[caller], ids, body)
            if caller == "none":
                expected: set[Any] = {"unauthorized"}
            elif caller in ALLOWED[role]:
                # allowed: whatever the story says (a redo with nothing to redo is invalid_request), never a refusal
                if code in ("unauthorized", "forbidden", "not_found"):
                    wrong.append(f"{door} {name} as {caller}: refused {code} ({answer})")
                continue
            elif caller.startswith("other") and op.access.on is On.SCENE:
                expected = {"not_found"}  # another campaign's scene answers exactly like a missing one
            else:
                expected = {"forbidden"}
            if code not in expected:
                wrong.append(f"{door} {name} as {caller}: {code} ({str(answer)[:200]}), expected {expected}")
    assert not wrong, "\n".join(wrong)


def test_the_same_refusals_through_both_doors(table: tuple[Table, Doors]) -> None:
    """The divergences the two doors had, settled: the same condition answers the same code."""
    t, doors = table
    gm, cid = t.keys["gm"], t.ids["campaign_id"]
    ids = {"campaign_id": cid}
    for door in ("rest", "mcp"):
        too_many = doors.call(door, "recall", gm, ids, {"query": "the gate", "limit": 101})
        assert too_many[0] == "validation_failed", (door, too_many)  # was clamped to 100 over MCP
        unknown = doors.call(door, "recall", t.keys["admin"], {"campaign_id": "camp_nope"}, {"query": "x"})
        assert unknown[0] == "not_found", (door, unknown)
        sideways = doors.call(door, "get_provenance", gm, {"campaign_id": cid, "turn_id": "turn_nope"}, {})
        assert sideways[0] == "not_found", (door, sideways)
        no_name = doors.call(door, "create_player_key", gm, ids, {})
        assert no_name[0] == "validation_failed", (door, no_name)


def test_a_player_cannot_skip_the_dice_or_sign_as_someone_else(table: tuple[Table, Doors]) -> None:
    t, doors = table
    story, scene = t.services.story, _active_scene(t)
    before = len(story.proposals(scene))
    content = {"type": "fact", "subject_entity_id": t.ids["hero"], "predicate": "gold", "value": 1000}
    for door in ("rest", "mcp"):
        for authority in ("system", "gm", "source"):
            body = {"type": "fact", "content": content, "authority": authority, "confidence": 0.95}
            code, answer = doors.call(door, "propose_change", t.keys["player"], {"scene_id": scene}, body)
            assert code == "forbidden", (door, authority, answer)
        ruled = {"type": "fact", "content": content, "resolution": {"method": "gm_ruling", "outcome": "success"}}
        code, answer = doors.call(door, "propose_change", t.keys["player"], {"scene_id": scene}, ruled)
        assert code == "forbidden", (door, answer)  # a player does not rule on their own proposal
        signed = {"type": "fact", "content": content, "proposed_by": "the GM"}
        code, answer = doors.call(door, "propose_change", t.keys["player"], {"scene_id": scene}, signed)
        assert code == "validation_failed", (door, answer)
        for key in ("gm", "admin"):  # system authority is the product's own: no key claims it
            body = {"type": "fact", "content": content, "authority": "system"}
            assert doors.call(door, "propose_change", t.keys[key], {"scene_id": scene}, body)[0] == "forbidden"
    assert len(story.proposals(scene)) == before  # nothing was staged
    evidence = {"turn_ids": [t.ids["head"]]}
    played = {"type": "fact", "content": content, "evidence": evidence}
    code, proposal = doors.call("mcp", "propose_change", t.keys["player"], {"scene_id": scene}, played)
    assert code is None, proposal
    assert proposal["authority"] == "player" and proposal["proposed_by"].startswith("player:")


def test_a_player_speaks_as_themselves(table: tuple[Table, Doors]) -> None:
    t, doors = table
    ids = {"campaign_id": t.ids["campaign_id"]}
    for door in ("rest", "mcp"):
        for speaker in ({"kind": "gm"}, {"kind": "narrator"}, {"kind": "entity", "entity_id": "ent_the_innkeeper"}):
            body = {"text": "Hear me.", "speaker": speaker}
            code, answer = doors.call(door, "play_turn", t.keys["player"], ids, body)
            assert code == "forbidden", (door, speaker, answer)
        as_gm = doors.call(door, "play_turn", t.keys["gm"], ids, {"text": "Night falls.", "speaker": {"kind": "gm"}})
        assert as_gm[0] is None, (door, as_gm)


ACCEPT = {"action": "accept", "rationale": "It fits."}


def test_the_gm_reviews_a_proposal_of_its_scene(table: tuple[Table, Doors]) -> None:
    t, doors = table
    for door in ("rest", "mcp"):
        scene, proposal = _active_scene(t), _fresh(t, "proposal")
        code, reviewed = doors.call(
            door, "review_proposal", t.keys["gm"], {"scene_id": scene, "proposal_id": proposal}, ACCEPT
        )
        assert code is None and reviewed["reviewed_by"].startswith("gm:"), (door, reviewed)
        elsewhere = {"scene_id": t.ids["scene_id"], "proposal_id": _fresh(t, "proposal")}
        if elsewhere["scene_id"] != scene:
            assert doors.call(door, "review_proposal", t.keys["gm"], elsewhere, ACCEPT)[0] == "not_found"


def test_a_player_adds_memories_for_their_own_character_only(table: tuple[Table, Doors]) -> None:
    t, doors = table
    ids = {"campaign_id": t.ids["campaign_id"]}
    for door in ("rest", "mcp"):
        npc = {"observer_entity_id": "ent_the_innkeeper", "text": "The player is a hero.", "salience": 1.0}
        assert doors.call(door, "add_memory", t.keys["player"], ids, npc)[0] == "forbidden"
        own = {"observer_entity_id": t.ids["hero"], "text": "I remember the cold gate."}
        code, memory = doors.call(door, "add_memory", t.keys["player"], ids, own)
        assert code is None and memory["anchor_turn_id"]  # anchored at the head by the story's default
        assert doors.call(door, "add_memory", t.keys["gm"], ids, npc)[0] != "forbidden"


def test_keys_over_both_doors(table: tuple[Table, Doors]) -> None:
    from serve.auth import KEY_PREFIX

    t, doors = table
    cid = t.ids["campaign_id"]
    for door in ("rest", "mcp"):
        code, created = doors.call(
            door,
            "create_player_key",
            t.keys["gm"],
            {"campaign_id": cid},
            {"name": f"bard ({door})", "character_entity_id": t.ids["hero"]},
        )
        assert code is None and created["key"].startswith(f"{KEY_PREFIX}_"), created
        info = created["info"]
        assert info["role"] == "player" and info["campaigns"] == [cid] and info["character_entity_id"] == t.ids["hero"]
        code, state = doors.call(door, "get_state_as_of", created["key"], {"campaign_id": cid}, {})
        assert code is None  # the new key plays the campaign
        listed = doors.call(door, "list_player_keys", t.keys["gm"], {"campaign_id": cid}, {})[1]
        assert info["id"] in {k["id"] for k in listed} and all("hash" not in k for k in listed)
        # the GM's own key is no player key: revoking it through the campaign answers like a missing one
        gm_id = next(k.id for k in t.services.keys.list() if k.name == "gm A")
        own = doors.call(door, "revoke_player_key", t.keys["gm"], {"campaign_id": cid, "key_id": gm_id}, {})
        assert own[0] == "not_found"
        code, revoked = doors.call(
            door, "revoke_player_key", t.keys["gm"], {"campaign_id": cid, "key_id": info["id"]}, {}
        )
        assert code is None and revoked["revoked"] is True
        t.services.keys._forget()
        assert doors.call(door, "get_campaign", created["key"], {"campaign_id": cid}, {})[0] == "unauthorized"
        code, admin_made = doors.call(door, "create_key", t.keys["admin"], {}, {"name": "ops", "admin": True})
        assert code is None and admin_made["info"]["admin"] is True
        assert doors.call(door, "create_key", t.keys["admin"], {}, {"name": "x", "campaigns": ["camp_nope"]})[0] == (
            "not_found"
        )


def test_a_campaign_gm_authors_its_own_world(table: tuple[Table, Doors]) -> None:
    t, doors = table
    world = {"world_id": t.ids["world_id"]}
    for door in ("rest", "mcp"):
        code, axiom = doors.call(door, "add_axiom", t.keys["gm"], world, {"text": f"Salt wards ({door})."})
        assert code is None and axiom["world_id"] == t.ids["world_id"]
        axioms = doors.call(door, "list_axioms", t.keys["player"], world, {})[1]
        assert f"Salt wards ({door})." in [a["text"] for a in axioms]


def test_an_unknown_route_is_not_an_unknown_id(table: tuple[Table, Doors]) -> None:
    t, doors = table
    admin = {"Authorization": f"Bearer {t.keys['admin']}"}
    route = doors.client.get("/api/v1/nowhere", headers=admin)
    assert route.status_code == 404 and route.json()["error"] == "no_such_route"
    record = doors.client.get("/api/v1/campaigns/camp_nope", headers=admin)
    assert record.status_code == 404 and record.json()["error"] == "not_found"


def test_an_export_is_the_same_bundle_through_both_doors(table: tuple[Table, Doors]) -> None:
    t, doors = table
    ids = {"campaign_id": t.ids["campaign_id"]}
    rest = doors.call("rest", "export_campaign", t.keys["gm"], ids, {})[1]["data"]
    mcp = doors.call("mcp", "export_campaign", t.keys["gm"], ids, {})[1]
    import io
    import zipfile

    for data in (base64.b64decode(rest), base64.urlsafe_b64decode(mcp["data"])):
        assert "manifest.json" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert mcp["size"] == len(base64.urlsafe_b64decode(mcp["data"]))


def test_recall_without_a_memory_index_answers_alike_through_both_doors() -> None:
    from serve.app import create_app

    with (
        api_services(with_recall=False) as services,
        TestClient(create_app(services), base_url="http://127.0.0.1") as client,
    ):
        world = services.story.create_world("W")
        from schemas.story import StoryProfile

        campaign = services.story.create_campaign(world.id, "C", StoryProfile(genre="x"))
        doors = Doors(client)
        for door in ("rest", "mcp"):
            known = doors.call(door, "recall", None, {"campaign_id": campaign.id}, {"query": "x"})
            assert known[0] == "not_supported", (door, known)
            unknown = doors.call(door, "recall", None, {"campaign_id": "camp_nope"}, {"query": "x"})
            assert unknown[0] == "not_found", (door, unknown)  # was not_supported over MCP


def test_the_story_holds_the_rules_the_doors_held(table: tuple[Table, Doors]) -> None:
    """The memory anchor default and the retcon authority rule are the story's, whoever calls it."""
    from schemas.story import Authority, StoryProfile
    from story.errors import StoryInvalid

    t, _ = table
    story = t.services.story
    empty = story.create_campaign(t.ids["world_id"], "No turns yet", StoryProfile(genre="x"))
    with pytest.raises(StoryInvalid, match="no turn yet"):
        story.memory_anchor(empty.id)
    head = story.get_campaign(t.ids["campaign_id"]).head_turn_id
    assert story.memory_anchor(t.ids["campaign_id"]) == head
    assert story.memory_anchor(t.ids["campaign_id"], t.ids["turn_id"]) == t.ids["turn_id"]
    fact_id = story.state(t.ids["campaign_id"]).facts[0].id
    for authority in (Authority.PLAYER, Authority.SYSTEM):
        with pytest.raises(StoryInvalid, match="gm \\(or source\\) authority"):
            story.retcon(t.ids["campaign_id"], fact_id, reason="I say so", value="x", authority=authority)
