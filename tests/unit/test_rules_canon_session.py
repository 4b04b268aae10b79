"""Issue 14's "done when", over HTTP: a rulebook is ingested, and at the table a player's false claim about a
monster is rejected with the rule and its page cited, a correct one is accepted, and a GM's ruling becomes a
house rule the API lists.

The rulebook is built in the test's folder from the SRD 5.1 JSON of the shared corpus: a monsters chapter
written as Markdown, typeset to a PDF (so its entries have pages), and ingested the project's way (the real
ingest on local Ray and the embedded stores, facts read at ingest). The API then runs in this process on
the same stores with the echo engine in the narrator's place; every table step is a request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from fastapi.testclient import TestClient

from schemas.settings import get_settings
from tests.corpus import corpus_file
from tests.unit.recall_support import API, ok, turn
from tests.unit.serve_support import api_services

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

MONSTERS = ("Bugbear", "Giant Rat", "Gnoll", "Goblin", "Hobgoblin", "Kobold", "Orc", "Skeleton")
ROLL = {"method": "dice", "outcome": "success", "roll": {"expression": "1d20+2", "rolls": [15], "total": 17}}


def _mod(score: int) -> str:
    m = (score - 10) // 2
    return f"{score} ({'+' if m >= 0 else '-'}{abs(m)})"


def stat_block(c: dict[str, Any]) -> str:
    """One creature of the SRD JSON as a Markdown stat block, printed as the SRD prints it."""
    abilities = ["strength", "dexterity", "constitution", "intelligence", "wisdom", "charisma"]
    cr = {0.125: "1/8", 0.25: "1/4", 0.5: "1/2"}.get(
        float(c["challenge_rating"]), str(int(float(c["challenge_rating"])))
    )
    ac = f"{c['armor_class']}" + (f" ({c['armor_detail']})" if c["armor_detail"] else "")
    return "\n".join(
        [
            f"## {c['name']}",
            "",
            f"*{c['size'].capitalize()} {c['type']}, {c['alignment']}*",
            "",
            f"**Armor Class** {ac}  ",
            f"**Hit Points** {c['hit_points']} ({c['hit_dice']})  ",
            f"**Speed** {int(c['walk'] or 0)} ft.",
            "",
            "| STR | DEX | CON | INT | WIS | CHA |",
            "|---|---|---|---|---|---|",
            "| " + " | ".join(_mod(c[f"ability_score_{a}"]) for a in abilities) + " |",
            "",
            f"**Senses** passive Perception {c['passive_perception']}  ",
            f"**Languages** {c['languages_desc'] or '—'}  ",
            f"**Challenge** {cr}",
            "",
        ]
    )


def monsters_markdown() -> str:
    rows = json.loads(corpus_file("rulebooks/dnd-srd-5.1/json-srd-2014/Creature.json").read_text())
    by_name = {r["fields"]["name"]: r["fields"] for r in rows}
    intro = "Creatures the heroes meet on the road. " * 40
    return (
        "# Introduction\n\n"
        + f"{intro}\n\n" * 6
        + "# Monsters\n\n"
        + "\n".join(stat_block(by_name[n]) for n in MONSTERS)
    )


def typeset(markdown: str, path: Path) -> None:
    """The Markdown as a PDF of A4 pages (PyMuPDF's Story), so every entry is printed on a page."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(markdown)
    story = pymupdf.Story(
        html=html, user_css="body { font-size: 10pt; } h1 { font-size: 18pt; } h2 { font-size: 13pt; }"
    )
    writer = pymupdf.DocumentWriter(str(path))
    more = True
    while more:
        device = writer.begin_page(pymupdf.paper_rect("a4"))
        more, _ = story.place(pymupdf.Rect(50, 50, 545, 790))
        story.draw(device)
        writer.end_page()
    writer.close()


def page_of(path: Path, heading: str) -> int:
    with pymupdf.open(path) as pdf:
        return next(p.number + 1 for p in pdf if any(b[4].strip() == heading for b in p.get_text("blocks")))


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rulebook")
    (folder / "monsters.md").write_text(monsters_markdown())
    typeset(monsters_markdown(), folder / "monsters.pdf")
    return folder / "monsters.pdf"


@pytest.fixture
def client(book: Path) -> Iterator[tuple[TestClient, str, int]]:
    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions
    from schemas.knowledge import LibraryType
    from serve.app import create_app

    books = book.parent / "books"
    books.mkdir(exist_ok=True)
    (books / book.name).write_bytes(book.read_bytes())
    report = run_ingest(
        [str(books)], IngestOptions(library="srd", library_type=LibraryType.RULEBOOK), settings=get_settings()
    )
    (done,) = report.files
    assert done.status == "completed", done
    with (
        api_services() as services,
        TestClient(create_app(services), base_url="http://127.0.0.1", raise_server_exceptions=False) as client,
    ):
        yield client, str(done.item_uid), page_of(book, "Goblin")


def propose(client: TestClient, scene_id: str, body: dict[str, Any]) -> str:
    return str(ok(client.post(f"{API}/scenes/{scene_id}/proposals", json=body), 201)["id"])


def test_a_false_claim_about_a_monster_is_rejected_citing_rule_and_page(client: tuple[TestClient, str, int]) -> None:
    http, item, page = client
    world = ok(http.post(f"{API}/worlds", json={"name": "The Marches", "axioms": ["The dead stay dead."]}), 201)
    body = {"world_id": world["id"], "name": "Goblin Trouble", "profile": {"genre": "fantasy"},
            "library_pins": [{"item_id": item}]}  # fmt: skip
    cid = ok(http.post(f"{API}/campaigns", json=body), 201)["id"]
    ambush = turn(http, cid, "A goblin leaps out of the ditch, blade drawn.")

    scene = ok(http.post(f"{API}/campaigns/{cid}/scenes", json={"title": "Ambush"}), 201)["id"]
    made = propose(
        http, scene, {"type": "entity", "content": {"kind": "creature", "name": "Goblin"}, "authority": "gm"}
    )
    goblin = "ent_" + made.split("_", 1)[1]
    ok(http.post(f"{API}/scenes/{scene}/end", json={}))

    # the table: a player claims 30 hit points, another states the book's 7 in words
    claims = ok(http.post(f"{API}/campaigns/{cid}/scenes", json={"title": "The fight"}), 201)["id"]
    player = {"authority": "player", "resolution": ROLL, "evidence": {"turn_ids": [ambush]}, "type": "fact"}
    false = propose(
        http, claims, {**player, "content": {"subject_entity_id": goblin, "predicate": "hit points", "value": 30}}
    )
    true = propose(
        http, claims, {**player, "content": {"subject_entity_id": goblin, "predicate": "hp", "value": "seven"}}
    )
    report = ok(http.post(f"{API}/scenes/{claims}/end", json={}))
    decisions = {d["proposal_id"]: d for d in report["decisions"]}
    assert decisions[false]["status"] == "rejected"
    rationale = decisions[false]["rationale"]
    assert "contradicts the rulebook: Goblin — Hit Points 7 (2d6) (item" in rationale
    assert f"(item {item}, p. {page}, chunk chunk_" in rationale
    assert decisions[true]["status"] == "accepted", decisions[true]
    assert "agrees with the rulebook" in decisions[true]["rationale"]
    assert decisions[true]["source_fact_ids"] == decisions[false]["source_fact_ids"]
    assert report["unchecked_axioms"] == ["The dead stay dead."]  # no axiom judge configured: said so

    # the GM rules 12: accepted as a house rule, and the API lists it
    ruling = ok(http.post(f"{API}/campaigns/{cid}/scenes", json={"title": "A ruling"}), 201)["id"]
    twelve = {"subject_entity_id": goblin, "predicate": "hit_points", "value": 12}
    gm = propose(http, ruling, {"type": "fact", "authority": "gm", "content": twelve})
    decision = ok(http.post(f"{API}/scenes/{ruling}/end", json={}))["decisions"][0]
    assert decision["proposal_id"] == gm and decision["status"] == "accepted" and decision["house_rule"]
    (rule,) = ok(http.get(f"{API}/campaigns/{cid}/house-rules"))
    assert (rule["entry"], rule["field"], rule["book_value"], rule["ruled_value"]) == ("Goblin", "hit_points", "7", 12)
    assert rule["ruled_by"] and rule["turn_id"] == ambush and rule["book_page"] == page
    assert ok(http.get(f"{API}/campaigns/{cid}/house-rules", params={"turn_id": ambush})) == [rule]
    assert http.get(f"{API}/campaigns/campaign_nope/house-rules").status_code == 404
