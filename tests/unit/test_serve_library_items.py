"""A library's items listed with their rulebook facts and pins, over both doors (issue 25: "a library's items are
listed with their facts and pins"), and a world's axioms read and added over both doors.

The library, its items and their facts are written as ingestion writes them (the catalog, the real rulebook
parser, the source-fact store) on the embedded stores; the pins are two campaigns' own. A key sees the pins of
the campaigns it holds, never another table's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.operations_support import Doors
from tests.unit.serve_support import api_services

pytestmark = pytest.mark.servers  # the embedded graph (a redis-server) behind the services

GOBLIN = """Small humanoid (goblinoid), neutral evil

Armor Class 15 (leather armor, shield)
Hit Points 7 (2d6)
Speed 30 ft.

Challenge 1/4 (50 XP)"""

FIREBALL = """3rd-level evocation

Casting Time: 1 action
Range: 150 feet
Components: V, S, M (a tiny ball of bat guano and sulfur)
Duration: Instantaneous"""


def _book(services: Any, library: str, slug: str, title: str, status: Any, *, facts: bool = True, **more: Any) -> str:
    from rulebook import builtin_table, extract_facts
    from schemas.common import sha256_hex
    from schemas.knowledge import Chunk, FileType, Item
    from schemas.rulefacts import EntrySection

    catalog = services.catalog
    item = Item(
        uid=f"item_{slug}",
        library_uid=library,
        title=title,
        file_type=FileType.MARKDOWN,
        size_bytes=10,
        content_hash=sha256_hex(slug),
        source_ref=f"{slug}.md",
        status=status,
        **more,
    )
    catalog.save_item(item)
    catalog.save_chunks(
        [
            Chunk(uid=f"chunk_{slug}_{n}", item_uid=item.uid, sequence=n, text_key=f"t/{slug}/{n}", token_count=5)
            for n in range(2)
        ]
    )
    if facts:
        table = builtin_table("dnd5e")
        goblin = EntrySection(heading_path=["SRD", "Goblin"], text=GOBLIN, page=3, chunk_id=f"chunk_{slug}_0")
        fireball = EntrySection(heading_path=["SRD", "Fireball"], text=FIREBALL, page=9, chunk_id=f"chunk_{slug}_1")
        stated = [*extract_facts(goblin, table), *extract_facts(fireball, table)]
        assert services.source_facts.save(item.uid, library, stated) == len(stated) > 4
    return item.uid


@pytest.fixture(scope="module")
def shelf() -> Iterator[tuple[Any, Doors, dict[str, Any]]]:
    from schemas.campaign import LibraryPin
    from schemas.knowledge import Classification, ItemStatus, Library, LibraryType
    from schemas.serving import KeyRole
    from schemas.story import StoryProfile
    from serve.app import create_app

    with api_services(with_recall=False) as services:
        lib = services.catalog.save_library(Library(uid="lib_srd", name="SRD", type=LibraryType.RULEBOOK))
        services.catalog.save_library(Library(uid="lib_lore", name="Lore", type=LibraryType.LORE))
        srd = _book(services, lib.uid, "srd", "B: System Reference", ItemStatus.READY)
        old = _book(services, lib.uid, "old", "A: Old", ItemStatus.SUPERSEDED, facts=False, superseded_by_uid=srd)
        new = _book(services, lib.uid, "new", "C: New, still ingesting", ItemStatus.PROCESSING)
        story = services.story
        world = story.create_world("Ashfall", axioms=["Magic has a price."])
        a = story.create_campaign(
            world.id, "A", StoryProfile(genre="fantasy"),
            library_pins=[LibraryPin(library_id=lib.uid, use=Classification.REFERENCE)],
        )  # fmt: skip
        b = story.create_campaign(
            story.create_world("Elsewhere").id, "B", StoryProfile(genre="noir"),
            library_pins=[LibraryPin(item_id=srd, use=Classification.CANON)],
        )  # fmt: skip
        keys = services.keys
        ids = {
            "library": lib.uid, "srd": srd, "old": old, "new": new, "a": a.id, "b": b.id, "world": world.id,
            "admin": keys.create("admin", admin=True)[0],
            "gm": keys.create("gm A", campaigns=[a.id], role=KeyRole.GM)[0],
            "player": keys.create("player A", campaigns=[a.id])[0],
            "other_player": keys.create("player B", campaigns=[b.id])[0],
            "no_campaign": keys.create("reader")[0],
        }  # fmt: skip
        with TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
            yield services, Doors(client), ids


def _both(doors: Doors, key: str, ids: dict[str, str], body: dict[str, Any], name: str = "list_items") -> Any:
    rest, mcp = doors.call("rest", name, key, ids, body), doors.call("mcp", name, key, ids, body)
    assert rest == mcp, (rest, mcp)
    code, answer = rest
    assert code is None, answer
    return answer


def _pins(listing: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(p["campaign_name"], p["via"], p["use"]) for p in listing["pins"]}


def test_items_carry_their_facts_and_the_pins_of_the_callers_campaigns_only(
    shelf: tuple[Any, Doors, dict[str, Any]],
) -> None:
    services, doors, ids = shelf
    where = {"library_uid": ids["library"]}
    seen = {}
    for caller in ("admin", "gm", "player", "other_player", "no_campaign"):
        seen[caller] = _both(doors, ids[caller], where, {"fact_limit": 3})
    answer = seen["admin"]
    assert answer["item_count"] == 2  # the superseded edition left out
    assert [i["uid"] for i in answer["items"]] == [ids["srd"], ids["new"]]  # by title
    srd, new = answer["items"]
    stated = services.source_facts.for_item(ids["srd"])
    assert srd["fact_count"] == len(stated) and srd["status"] == "ready"
    assert [f["uid"] for f in srd["facts"]] == [f.uid for f in stated[:3]]
    assert {f["subject"]["key"] for f in srd["facts"]} == {"goblin"} and srd["facts"][0]["page"] == 3
    assert new["fact_count"] == 0 and new["facts"] == []  # facts show with their item, not while it is ingested
    # the pins: A draws on the whole library (reference), B on the one item (canon)
    a_lib, b_item = ("A", "library", "reference"), ("B", "item", "canon")
    assert _pins(srd) == {a_lib, b_item} and _pins(new) == {a_lib} and _pins(answer) == {a_lib}
    for caller in ("gm", "player"):  # campaign A's keys: A's pins, never B's
        mine = seen[caller]
        assert [_pins(i) for i in mine["items"]] == [{a_lib}, {a_lib}] and _pins(mine) == {a_lib}, caller
        assert [i["facts"] for i in mine["items"]] == [i["facts"] for i in answer["items"]]
    theirs = seen["other_player"]
    assert [_pins(i) for i in theirs["items"]] == [{b_item}, set()] and _pins(theirs) == set()
    assert ids["a"] not in str(theirs) and ids["b"] not in str(seen["player"])  # not even an id
    nobody = seen["no_campaign"]  # a key of no campaign reads the library and sees no pin
    assert [_pins(i) for i in nobody["items"]] == [set(), set()] and _pins(nobody) == set()
    assert [i["fact_count"] for i in nobody["items"]] == [srd["fact_count"], 0]


def test_items_and_facts_are_paged_and_a_missing_library_is_not_found(shelf: tuple[Any, Doors, dict[str, Any]]) -> None:
    services, doors, ids = shelf
    admin, where = ids["admin"], {"library_uid": ids["library"]}
    every = _both(doors, admin, where, {"include_superseded": True, "fact_limit": 0})
    assert every["item_count"] == 3 and [i["uid"] for i in every["items"]] == [ids["old"], ids["srd"], ids["new"]]
    assert all(i["facts"] == [] for i in every["items"]) and every["items"][1]["fact_count"] > 4
    stated = services.source_facts.for_item(ids["srd"])
    page = _both(doors, admin, where, {"limit": 1, "offset": 0, "fact_limit": 2, "fact_offset": 3})
    assert page["item_count"] == 2 and [i["uid"] for i in page["items"]] == [ids["srd"]]
    assert [f["uid"] for f in page["items"][0]["facts"]] == [f.uid for f in stated[3:5]]
    past = _both(doors, admin, where, {"offset": 5})
    assert past["item_count"] == 2 and past["items"] == []
    empty = _both(doors, admin, {"library_uid": "lib_lore"}, {})
    assert empty == {"library_uid": "lib_lore", "item_count": 0, "items": [], "pins": []}
    for door in ("rest", "mcp"):
        code, _ = doors.call(door, "list_items", ids["player"], {"library_uid": "lib_nope"}, {})
        assert code == "not_found", door
        code, _ = doors.call(door, "list_items", admin, where, {"limit": 0})
        assert code == "validation_failed", door
        assert doors.call(door, "list_items", None, where, {})[0] == "unauthorized", door


def test_listing_items_is_a_fixed_number_of_queries(
    shelf: tuple[Any, Doors, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    services, doors, ids = shelf
    graph = services.story.graph
    asked: list[str] = []
    run = graph.run

    def counted(query: str, params: Any = None) -> Any:
        asked.append(query)
        return run(query, params)

    monkeypatch.setattr(graph, "run", counted)
    counts = []
    for limit in (1, 3):
        asked.clear()
        doors.call("rest", "list_items", ids["admin"], {"library_uid": ids["library"]}, {"limit": limit})
        counts.append(len([q for q in asked if "ApiKey" not in q]))
    assert counts[0] == counts[1] <= 6, (counts, asked)


def test_axioms_are_read_and_added_over_both_doors(shelf: tuple[Any, Doors, dict[str, Any]]) -> None:
    _, doors, ids = shelf
    world = {"world_id": ids["world"]}
    added = {}
    for door in ("rest", "mcp"):
        code, axiom = doors.call(door, "add_axiom", ids["gm"], world, {"text": f"Iron burns the fey ({door})."})
        assert code is None, axiom
        added[door] = axiom
        code, _ = doors.call(door, "add_axiom", ids["player"], world, {"text": "Players rule."})
        assert code == "forbidden", door
        code, _ = doors.call(door, "add_axiom", ids["other_player"], world, {"text": "Not my world."})
        assert code == "forbidden", door
    for door in ("rest", "mcp"):  # what one door added, the other reads
        code, axioms = doors.call(door, "list_axioms", ids["player"], world, {})
        assert code is None, axioms
        texts = [a["text"] for a in axioms]
        assert texts[0] == "Magic has a price." and {added["rest"]["text"], added["mcp"]["text"]} <= set(texts)
        assert [a["id"] for a in axioms if a["text"] == added[door]["text"]] == [added[door]["id"]]
