"""Rule facts through ingestion: a small rulebook (Markdown and a PDF typeset with PyMuPDF Story) goes
through the real pipeline on local Ray and the embedded stores, and its entries come out as typed
source facts in the graph, each SUPPORTED_BY the chunk that holds it and on the page it is printed on;
a changed edition supersedes them; the settings can turn them off; the route, the MCP tool and the
command line read them back.

One data folder is shared by the ingest tests of this module, in order (as in test_ingest_pipeline).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from jobs.pipeline import FileOutcome, IngestReport, run_ingest, start_ray
from jobs.plan import IngestOptions
from jobs.rows import SourceRow
from jobs.stages import ExtractStage
from schemas.common import JobStatus
from schemas.knowledge import IngestJob, IngestSource, LibraryType
from schemas.rulefacts import DistanceValue, NumberValue, StoredSourceFact
from schemas.settings import Settings, load_settings
from stores.catalog import Catalog
from stores.factory import open_blob_store, open_graph_store
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from stores.source_facts import SourceFactStore

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

BESTIARY_MD = """# Tiny Bestiary

## Monsters

### Goblin

*Small humanoid (goblinoid), neutral evil*

**Armor Class** 15 (leather armor, shield)
**Hit Points** {hp} ({dice})
**Speed** 30 ft.
**Challenge** 1/4 (50 XP)

***Nimble Escape.*** The goblin can take the Disengage or Hide action as a bonus action on each of its turns.

## Spells

### Fireball

*3rd-level evocation*

**Casting Time:** 1 action
**Range:** 150 feet
**Components:** V, S, M (a tiny ball of bat guano and sulfur)
**Duration:** Instantaneous

A bright streak flashes from your pointing finger to a point you choose within range.
"""

STORY_CSS = """
body { font-family: sans-serif; font-size: 10pt; }
h1 { font-size: 22pt; font-weight: bold; }
h2 { font-size: 16pt; font-weight: bold; }
h3 { font-size: 13pt; font-weight: bold; }
p { margin-top: 0; margin-bottom: 4pt; }
"""

# The goblin's stat block runs over the page break: its challenge rating is printed on page 2.
PDF_PAGES = [
    """<h1>Pocket Grimoire</h1><h2>Monsters</h2><h3>Goblin</h3>
    <p><i>Small humanoid (goblinoid), neutral evil</i></p>
    <p><b>Armor Class</b> 15 (leather armor, shield)</p><p><b>Hit Points</b> 7 (2d6)</p><p><b>Speed</b> 30 ft.</p>""",
    """<p><b>Challenge</b> 1/4 (50 XP)</p>
    <p>Goblins are small, black-hearted humanoids that lair in despoiled dungeons.</p>
    <h2>Spells</h2><h3>Fireball</h3><p><i>3rd-level evocation</i></p>
    <p><b>Casting Time:</b> 1 action</p><p><b>Range:</b> 150 feet</p>
    <p><b>Components:</b> V, S, M (a tiny ball of bat guano and sulfur)</p><p><b>Duration:</b> Instantaneous</p>
    <p>A bright streak flashes from your pointing finger to a point you choose within range.</p>""",
]


def write_pdf(path: Path) -> None:
    """A two-page A5 book typeset by PyMuPDF Story, one HTML part per page."""
    import pymupdf

    writer = pymupdf.DocumentWriter(str(path))
    for html in PDF_PAGES:
        story = pymupdf.Story(html=html, user_css=STORY_CSS)
        device = writer.begin_page(pymupdf.paper_rect("a5"))
        more, _ = story.place(pymupdf.Rect(36, 36, 384, 560))
        assert not more, "a test page overflowed"
        story.draw(device)
        writer.end_page()
    writer.close()


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    import ray

    started = start_ray()
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rulefacts")
    books = root / "books"
    books.mkdir()
    (books / "bestiary.md").write_text(BESTIARY_MD.format(hp=7, dice="2d6"), encoding="utf-8")
    write_pdf(books / "grimoire.pdf")
    (books / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    return {"root": root, "books": books, "data": root / "data"}


@pytest.fixture(scope="module")
def settings(workspace: dict[str, Path]) -> Settings:
    return load_settings(data_dir=workspace["data"])


@pytest.fixture(scope="module")
def state() -> dict[str, Any]:
    """What the ordered tests hand on: item uids of the first ingest."""
    return {}


def _ingest(paths: list[Path], settings: Settings, library: str = "bestiary") -> dict[str, FileOutcome]:
    report: IngestReport = run_ingest(
        [str(p) for p in paths], IngestOptions(library=library, library_type=LibraryType.RULEBOOK), settings=settings
    )
    return {Path(f.source_ref).name: f for f in report.files}


def _facts(settings: Settings, item_uid: str, entry: str | None = None) -> list[StoredSourceFact]:
    graph = open_graph_store(settings)
    try:
        return SourceFactStore(graph).for_item(item_uid, entry=entry)
    finally:
        graph.close()


def _predicates(facts: list[StoredSourceFact], entry: str) -> dict[str, StoredSourceFact]:
    return {f.predicate: f for f in facts if f.subject.key == entry}


def test_ingest_writes_facts_on_their_chunks_and_pages(
    ray_local: None, workspace: dict[str, Path], settings: Settings, state: dict[str, Any]
) -> None:
    outcomes = _ingest([workspace["books"]], settings)
    assert {name: o.status for name, o in outcomes.items()} == {
        "bestiary.md": "completed",
        "grimoire.pdf": "completed",
        "corrupt.pdf": "failed",  # fails alone; the books beside it keep their facts
    }
    md, pdf = outcomes["bestiary.md"], outcomes["grimoire.pdf"]
    assert md.item_uid and pdf.item_uid
    state.update(md=md.item_uid, pdf=pdf.item_uid)
    for outcome in (md, pdf):
        assert outcome.facts > 0 and set(outcome.facts_by_kind) == {"creature", "spell"}
        assert sum(outcome.facts_by_kind.values()) == outcome.facts

    facts = _facts(settings, pdf.item_uid)
    assert len(facts) == pdf.facts
    goblin, fireball = _predicates(facts, "goblin"), _predicates(facts, "fireball")
    assert goblin["hit_points"].value == NumberValue(value=7) and goblin["hit_points"].page == 1
    assert goblin["challenge_rating"].value == NumberValue(value=0.25)
    assert goblin["challenge_rating"].page == 2  # printed after the page break, in the same entry
    assert fireball["range"].value == DistanceValue(amount=150) and fireball["range"].page == 2
    assert {f.status for f in facts} == {"active"} and {f.item_uid for f in facts} == {pdf.item_uid}

    graph = open_graph_store(settings)
    try:
        rows = graph.run(
            "MATCH (:Item {uid: $item})-[:STATES]->(f:SourceFact)-[:SUPPORTED_BY]->(c:Chunk) "
            "RETURN f.subject_key AS entry, f.predicate AS predicate, c.uid AS chunk, c.heading_path AS path, "
            "c.page_start AS first, c.page_end AS last",
            {"item": pdf.item_uid},
        )
        job = next(j for j in Catalog(graph).list_jobs() if j.item_uid == pdf.item_uid)
    finally:
        graph.close()
    assert len(rows) == len(facts)  # every fact is supported by an existing chunk
    for row in rows:
        assert row["path"][-1].casefold() == row["entry"]  # the entry's own chunk
        fact = _predicates(facts, row["entry"])[row["predicate"]]
        assert fact.chunk_id == row["chunk"] and row["first"] <= (fact.page or 0) <= row["last"]
    assert job.status is JobStatus.COMPLETED
    assert job.facts_extracted == pdf.facts and job.facts_by_kind == pdf.facts_by_kind


def test_changed_edition_supersedes_the_old_facts(
    ray_local: None, workspace: dict[str, Path], settings: Settings, state: dict[str, Any]
) -> None:
    book = workspace["books"] / "bestiary.md"
    book.write_text(BESTIARY_MD.format(hp=9, dice="2d6 + 2"), encoding="utf-8")
    outcome = _ingest([book], settings)["bestiary.md"]
    assert outcome.status == "completed" and outcome.item_uid not in (None, state["md"])
    old, new = state["md"], outcome.item_uid

    assert {f.status for f in _facts(settings, old)} == {"superseded"}
    assert {f.status for f in _facts(settings, new)} == {"active"}
    graph = open_graph_store(settings)
    try:
        store = SourceFactStore(graph)
        current = store.lookup(["Goblin"], predicates=["hit_points"])
        pinned = store.lookup(["Goblin"], predicates=["hit_points"], item_uids=[old])
        found = store.find("goblin")
    finally:
        graph.close()
    assert sorted((f.item_uid, f.value) for f in current) == sorted(
        [(new, NumberValue(value=9)), (state["pdf"], NumberValue(value=7))]
    )
    assert [(f.item_uid, f.value, f.status) for f in pinned] == [(old, NumberValue(value=7), "superseded")]
    assert old not in {f.item_uid for f in found}


def test_facts_turned_off_are_not_written(ray_local: None, workspace: dict[str, Path]) -> None:
    off = load_settings(data_dir=workspace["root"] / "data-off", rule_facts=False)
    outcome = _ingest([workspace["books"] / "grimoire.pdf"], off)["grimoire.pdf"]
    assert outcome.status == "completed" and outcome.facts == 0 and outcome.facts_by_kind == {}
    graph = open_graph_store(off)
    try:
        assert graph.run("MATCH (f:SourceFact) RETURN count(f) AS n")[0]["n"] == 0
    finally:
        graph.close()


def test_an_unchanged_book_ingested_without_facts_gets_them_on_the_next_run(
    ray_local: None, workspace: dict[str, Path]
) -> None:
    """The book of the previous test was ingested with facts off (as one ingested before rule facts
    existed): with them on, the unchanged file is skipped, nothing is embedded again, and its facts are
    read, linked to its chunks and visible at once; the run after that skips it on the driver."""
    on = load_settings(data_dir=workspace["root"] / "data-off")
    graph = open_graph_store(on)
    try:
        chunks_before = graph.run("MATCH (c:Chunk) RETURN count(c) AS n")[0]["n"]
    finally:
        graph.close()
    outcome = _ingest([workspace["books"] / "grimoire.pdf"], on)["grimoire.pdf"]
    assert outcome.status == "skipped" and outcome.facts > 0 and set(outcome.facts_by_kind) == {"creature", "spell"}
    assert outcome.item_uid
    facts = _facts(on, outcome.item_uid)
    assert len(facts) == outcome.facts
    assert _predicates(facts, "goblin")["challenge_rating"].page == 2
    graph = open_graph_store(on)
    try:
        linked = graph.run("MATCH (f:SourceFact)-[:SUPPORTED_BY]->(c:Chunk) RETURN count(f) AS n")[0]["n"]
        chunks_after = graph.run("MATCH (c:Chunk) RETURN count(c) AS n")[0]["n"]
    finally:
        graph.close()
    assert linked == len(facts) and chunks_after == chunks_before

    again = _ingest([workspace["books"] / "grimoire.pdf"], on)["grimoire.pdf"]
    assert again.status == "skipped" and again.facts == 0  # already read: skipped before any worker
    assert len(_facts(on, outcome.item_uid)) == len(facts)


def test_a_retried_extract_leaves_one_set_of_facts_invisible_until_ready(
    workspace: dict[str, Path], tmp_path: Path
) -> None:
    """Ray retries a killed extract worker's file from the start: its facts are replaced, not added,
    and nobody reads them while the item is still processing."""
    settings = load_settings(data_dir=tmp_path / "data")
    options = IngestOptions(library="retry", library_type=LibraryType.RULEBOOK)
    graph = open_graph_store(settings)
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    blob = open_blob_store(settings)
    blob.ensure_bucket()
    blob.close()
    catalog = Catalog(graph)
    from jobs.pipeline import ensure_library

    library, _ = ensure_library(catalog, options)
    book = workspace["books"] / "grimoire.pdf"
    job = catalog.save_job(IngestJob(source=IngestSource.PATH, source_ref=str(book), library_uid=library.uid))
    stage = ExtractStage(settings, options, library, max_model_tokens=256)
    try:
        source = SourceRow(job.id, str(book), book.name, IngestSource.PATH, None, None)
        first = stage.process(source)
        item_uid = first[0].item_uid
        store = SourceFactStore(graph)
        once = store.count(item_uid)
        stage.process(source)
        assert once > 0 and store.count(item_uid) == once
        assert graph.run("MATCH (f:SourceFact) RETURN count(f) AS n")[0]["n"] == once
        assert store.for_item(item_uid) == [] and store.find("goblin") == []  # the item is not ready yet
    finally:
        del stage
        graph.close()


def test_a_table_the_worker_cannot_read_costs_the_facts_not_the_file(
    workspace: dict[str, Path], tmp_path: Path
) -> None:
    """LOREKEEPER_RULE_FAMILIES may name a file the driver has and a worker node does not: the extract
    stage logs rule_facts_failed and the file goes on to its chunks, with no facts."""
    from structlog.testing import capture_logs

    table = tmp_path / "house.toml"
    settings = load_settings(data_dir=tmp_path / "data", rule_families=str(table))  # never written
    options = IngestOptions(library="house", library_type=LibraryType.RULEBOOK)
    graph = open_graph_store(settings)
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    blob = open_blob_store(settings)
    blob.ensure_bucket()
    blob.close()
    catalog = Catalog(graph)
    from jobs.pipeline import ensure_library

    library, _ = ensure_library(catalog, options)
    book = workspace["books"] / "grimoire.pdf"
    job = catalog.save_job(IngestJob(source=IngestSource.PATH, source_ref=str(book), library_uid=library.uid))
    stage = ExtractStage(settings, options, library, max_model_tokens=256)
    try:
        with capture_logs() as logs:
            rows = stage.process(SourceRow(job.id, str(book), book.name, IngestSource.PATH, None, None))
        assert rows and all(row.chunk_uid for row in rows)  # chunk rows, not a failed status row
        failed = [e for e in logs if e["event"] == "rule_facts_failed"]
        assert len(failed) == 1 and "house.toml" in failed[0]["message"]
        assert catalog.get_job(job.id).facts_extracted == 0
        assert graph.run("MATCH (f:SourceFact) RETURN count(f) AS n")[0]["n"] == 0
    finally:
        del stage
        graph.close()


def test_route_mcp_tool_and_command_read_an_entrys_facts(
    workspace: dict[str, Path], settings: Settings, state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from jobs.api import create_app

    pdf = state["pdf"]
    with TestClient(create_app(settings, allowed_roots=[workspace["books"]], start_runner=False)) as client:
        got = client.get(f"/api/v1/library/items/{pdf}/facts", params={"entry": "GOBLIN"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert {f["subject"]["key"] for f in body} == {"goblin"}
        hp = next(f for f in body if f["predicate"] == "hit_points")
        assert hp["value"] == {"type": "number", "value": 7.0, "unit": None} and hp["page"] == 1 and hp["chunk_id"]
        assert len(client.get(f"/api/v1/library/items/{pdf}/facts").json()) > len(body)
        assert client.get("/api/v1/library/items/item_nope/facts").status_code == 404
        assert client.get(f"/api/v1/library/items/{pdf}/facts", params={"entry": "!!"}).status_code == 400

    from schemas.settings import get_settings

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(workspace["data"]))
    get_settings.cache_clear()

    from lorekeeper.cli import app

    runner = CliRunner()
    as_json = runner.invoke(app, ["facts", "Fireball", "--item", pdf, "--json"])
    assert as_json.exit_code == 0, as_json.output
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    rng = next(f for f in lines if f["predicate"] == "range")
    assert rng["raw"] == "Range: 150 feet" and rng["page"] == 2 and rng["item_uid"] == pdf
    table = runner.invoke(app, ["facts", "Goblin"])
    assert table.exit_code == 0, table.output
    assert "hit_points" in table.stdout and "Hit Points 9" in table.stdout and "Hit Points 7" in table.stdout
    missing = runner.invoke(app, ["facts", "Tarrasque"])
    assert missing.exit_code == 0 and "no facts" in missing.stdout

    import anyio

    from serve.app import create_app as create_serve_app
    from tests.unit.serve_support import api_services, running
    from tests.unit.test_serve_mcp import _json, session

    with api_services() as services, running(create_serve_app(services)) as url:

        async def scenario() -> None:
            async with session(url) as client:
                everywhere = _json(await client.call_tool("get_entry_facts", {"entry": "fireball"}))
                assert {f["item_uid"] for f in everywhere} == {pdf, _md_now(services)}
                assert all(f["subject"]["key"] == "fireball" and f["chunk_id"] for f in everywhere)
                one = _json(await client.call_tool("get_entry_facts", {"entry": "Goblin", "item_uid": state["md"]}))
                assert {(f["predicate"], f["status"]) for f in one} >= {("hit_points", "superseded")}
                unknown = await client.call_tool("get_entry_facts", {"entry": "Goblin", "item_uid": "item_nope"})
                assert unknown.isError and "not_found" in unknown.content[0].text

        anyio.run(scenario)


def _md_now(services: Any) -> str:
    """The item uid of the bestiary's current (second) edition."""
    items = services.catalog.graph.run(
        "MATCH (i:Item {status: 'ready'}) WHERE i.source_ref ENDS WITH 'bestiary.md' RETURN i.uid AS uid"
    )
    return str(items[0]["uid"])
