"""Browsing the library over both doors (REST and MCP) after a real ingest of a corpus book on local Ray and the
embedded stores: libraries with their counts (one query), an item with chunk previews and concept links, the
concept graph around a concept or an item, and the MCP resources."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from schemas.knowledge import Library, LibraryType
from schemas.settings import Settings, load_settings
from tests.corpus import corpus_file
from tests.unit.test_serve_mcp import _json, session

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]

API = "/api/v1/library"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Any]:
    """The opening of Fate Accelerated (about 20,000 characters, cut at a paragraph) ingested into library 'fate'."""
    import ray

    from jobs.pipeline import run_ingest
    from jobs.plan import IngestOptions

    root = tmp_path_factory.mktemp("browse")
    book = corpus_file("rulebooks/fate-srd/fate-accelerated-SRD.md").read_text(encoding="utf-8")
    books = root / "books"
    books.mkdir()
    (books / "fate-accelerated.md").write_text(book[: book.index("\n\n", 20_000)], encoding="utf-8")
    settings = load_settings(data_dir=root / "data")
    options = IngestOptions(library="fate", library_type=LibraryType.RULEBOOK)
    try:
        report = run_ingest([str(books)], options, settings=settings)
    finally:
        ray.shutdown()  # the embedded stores are this process's again
    (done,) = report.files
    assert done.status == "completed" and done.chunks > 3 and done.concepts > 3, done
    return settings, done


@pytest.fixture(scope="module")
def server(ingested: tuple[Settings, Any]) -> Iterator[tuple[str, Any, Any]]:
    from narrator.engines import EchoEngine
    from schemas.serving import ServeSettings
    from serve.app import create_app
    from serve.services import SingleEngine, check_binding, open_services
    from tests.unit.serve_support import running

    settings, done = ingested
    serve = ServeSettings(api_host="127.0.0.1")
    with open_services(settings, serve, narrator=SingleEngine(EchoEngine("echo")), with_recall=False) as services:
        services.open = check_binding(serve, services.keys)
        services.catalog.save_library(Library(name="empty shelf", type=LibraryType.LORE, description="Nothing yet."))
        with running(create_app(services)) as url:
            yield url, services, done


def _rest(url: str, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{url}{API}{path}", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _tool(url: str, name: str, arguments: dict[str, Any]) -> Any:
    async def call() -> Any:
        async with session(url) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(call)


def _graph(services: Any, query: str, **params: Any) -> list[dict[str, Any]]:
    return services.story.graph.run(query, params)  # type: ignore[no-any-return]


def test_libraries_carry_their_counts_from_one_query_on_both_doors_and_the_resource(
    server: tuple[str, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, services, done = server
    graph = services.story.graph
    asked: list[str] = []
    run = graph.run

    def counted(query: str, params: Any = None) -> Any:
        asked.append(query)
        return run(query, params)

    monkeypatch.setattr(graph, "run", counted)
    rest = _rest(url, "/libraries")
    browsing = [q for q in asked if "ApiKey" not in q]  # the caller's key check aside
    assert len(browsing) == 1 and "Library" in browsing[0], asked  # one query for every library, not N+1
    monkeypatch.undo()
    by_name = {lib["name"]: lib for lib in rest}
    assert set(by_name) == {"fate", "empty shelf"}
    fate, empty = by_name["fate"], by_name["empty shelf"]
    assert (fate["item_count"], fate["chunk_count"], fate["concept_count"]) == (1, done.chunks, done.concepts)
    assert fate["type"] == "rulebook"
    assert (empty["item_count"], empty["chunk_count"], empty["concept_count"]) == (0, 0, 0)
    assert empty["description"] == "Nothing yet."
    assert _json(_tool(url, "list_libraries", {})) == rest

    async def resources() -> tuple[Any, Any]:
        async with session(url) as client:
            types = json.loads((await client.read_resource("lorekeeper://library-types")).contents[0].text)
            libraries = json.loads((await client.read_resource("lorekeeper://libraries")).contents[0].text)
            return types, libraries

    types, libraries = anyio.run(resources)
    assert libraries == rest
    assert types["rulebook"]["max_tokens"] > 0 and set(types) >= {"rulebook", "lore", "setting", "reference"}


def test_an_item_shows_chunk_previews_and_the_concepts_it_mentions_on_both_doors(
    server: tuple[str, Any, Any],
) -> None:
    url, services, done = server
    item = done.item_uid
    rest = _rest(url, f"/items/{item}", chunk_limit=3, concept_limit=5)
    assert _json(_tool(url, "get_item", {"item_uid": item, "chunk_limit": 3, "concept_limit": 5})) == rest
    assert rest["uid"] == item and rest["title"] and rest["status"] == "ready"
    assert rest["chunk_count"] == done.chunks and rest["concept_count"] == done.concepts
    assert [c["sequence"] for c in rest["chunks"]] == [0, 1, 2]
    for chunk in rest["chunks"]:
        (row,) = _graph(services, "MATCH (c:Chunk {uid: $uid}) RETURN c.text_key AS key", uid=chunk["uid"])
        text = " ".join(services.story.blobs.get(row["key"]).decode().split())
        assert chunk["preview"] and text.startswith(chunk["preview"].removesuffix(" …"))
        assert len(chunk["preview"]) <= 242 and chunk["token_count"] > 0
    mentions = [c["mentions"] for c in rest["concepts"]]
    assert len(mentions) == 5 and mentions == sorted(mentions, reverse=True) and mentions[0] >= 1
    top = rest["concepts"][0]
    counted = _graph(
        services,
        "MATCH (:Item {uid: $item})-[:HAS_CHUNK]->(c:Chunk)-[:MENTIONS]->(:Concept {uid: $k}) RETURN count(c) AS n",
        item=item,
        k=top["uid"],
    )
    assert counted[0]["n"] == top["mentions"]
    paged = _rest(url, f"/items/{item}", chunk_limit=2, chunk_offset=2, concept_limit=0)
    assert [c["sequence"] for c in paged["chunks"]] == [2, 3] and paged["concepts"] == []
    assert httpx.get(f"{url}{API}/items/item_nope", timeout=10).status_code == 404
    missing = _tool(url, "get_item", {"item_uid": "item_nope"})
    assert missing.isError and "not_found" in missing.content[0].text
    assert httpx.get(f"{url}{API}/items/{item}", params={"chunk_limit": 101}, timeout=10).status_code == 422
    too_many = _tool(url, "get_item", {"item_uid": item, "chunk_limit": 101})
    assert too_many.isError and "validation_failed" in too_many.content[0].text


def test_concepts_traverse_from_a_concept_or_an_item_to_a_depth_on_both_doors(server: tuple[str, Any, Any]) -> None:
    url, services, done = server
    item = done.item_uid
    start = _rest(url, f"/items/{item}", chunk_limit=0, concept_limit=1)["concepts"][0]
    with capture_logs() as logs:
        rest = _rest(url, "/concepts", concept=start["name"], depth=2)
    assert _json(_tool(url, "get_concepts", {"concept": start["name"], "depth": 2})) == rest
    assert (rest["start"], rest["start_kind"], rest["depth"], rest["relationships"]) == (
        start["uid"],
        "concept",
        2,
        ["RELATED_TO"],
    )
    depth = {c["uid"]: c["depth"] for c in rest["concepts"]}
    assert depth[start["uid"]] == 0
    around = "MATCH (:Concept {uid: $k})-[:RELATED_TO]-(b:Concept) RETURN DISTINCT b.uid AS uid"
    neighbours = {r["uid"] for r in _graph(services, around, k=start["uid"])}
    assert neighbours and {uid for uid, d in depth.items() if d == 1} == neighbours
    assert any(d == 2 for d in depth.values())
    for link in rest["links"]:  # every concept past the start is reached by a link from one step nearer
        assert link["relationship"] == "RELATED_TO" and link["weight"] >= 1
        assert depth[link["target"]] == depth[link["source"]] + 1
    reached = {link["target"] for link in rest["links"]}
    assert reached >= set(depth) - {start["uid"]}
    (traversed,) = [e for e in logs if e["event"] == "mcp_graph_traverse"]
    assert traversed["start_nodes"] == [start["uid"]] and traversed["relationships"] == ["RELATED_TO"]
    assert traversed["depth"] == 2 and traversed["nodes_visited"] == len(rest["concepts"])

    by_uid = _rest(url, "/concepts", concept=start["uid"], depth=1)
    assert {c["uid"] for c in by_uid["concepts"]} == {start["uid"], *neighbours}

    from_item = _rest(url, "/concepts", item_uid=item, depth=1, limit=1000)
    assert _json(_tool(url, "get_concepts", {"item_uid": item, "depth": 1, "limit": 1000})) == from_item
    mentioned = _rest(url, f"/items/{item}", chunk_limit=0, concept_limit=500)["concepts"]
    assert {c["uid"] for c in from_item["concepts"]} == {c["uid"] for c in mentioned}
    assert {(link["relationship"], link["source"]) for link in from_item["links"]} == {("MENTIONS", item)}
    assert from_item["start_kind"] == "item" and all(c["depth"] == 1 for c in from_item["concepts"])
    deeper = _rest(url, "/concepts", item_uid=item, depth=2, limit=1000)
    assert deeper["relationships"] == ["MENTIONS", "RELATED_TO"]

    listed = _rest(url, "/concepts", limit=5)
    assert listed["start"] is None and len(listed["concepts"]) == 5 and listed["links"] == []
    assert httpx.get(f"{url}{API}/concepts", params={"concept": "no such thing"}, timeout=10).status_code == 404
    both = httpx.get(f"{url}{API}/concepts", params={"concept": start["uid"], "item_uid": item}, timeout=10)
    assert both.status_code == 422
    refused = _tool(url, "get_concepts", {"concept": start["uid"], "item_uid": item})
    assert refused.isError and "validation_failed" in refused.content[0].text


def test_the_collections_of_a_library_over_both_doors(server: tuple[str, Any, Any]) -> None:
    url, services, _ = server
    (fate,) = [lib for lib in _rest(url, "/libraries") if lib["name"] == "fate"]
    assert _rest(url, f"/libraries/{fate['uid']}/collections") == []
    assert _json(_tool(url, "list_collections", {"library_uid": fate["uid"]})) == []
    assert httpx.get(f"{url}{API}/libraries/lib_nope/collections", timeout=10).status_code == 404
