"""Hybrid search on the real embedded stores: three legs, fusion with per-leg scores, filters on every leg.

The world is written through the same store APIs and record builders that ingestion uses
(``Catalog``, ``jobs.stages.index_records``), with real MiniLM embeddings; no store is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.stages import index_records
from models.embedding import SentenceTransformerEmbedder
from schemas.common import content_id, sha256_hex
from schemas.knowledge import Chunk, Classification, Concept, FileType, Item, ItemStatus, Library, LibraryType
from schemas.search import FILTER_FIELDS, LegWeights, SearchFilters, SearchRequest
from schemas.settings import Settings, load_settings
from search.hybrid import (
    EQUAL_WEIGHTS,
    GRAPH_ONLY,
    HYBRID_RRF,
    TEXT_ONLY,
    VECTOR_ONLY,
    HybridConfig,
    HybridSearcher,
)
from search.service import open_searcher
from stores.blob.layout import chunk_key
from stores.catalog import Catalog
from stores.factory import open_graph_store, open_text_index, open_vector_index
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from stores.vector.base import VectorSpace

pytestmark = [pytest.mark.servers, pytest.mark.slow]


@dataclass(frozen=True)
class Doc:
    heading: tuple[str, ...]
    text: str
    concepts: tuple[str, ...]


# (library name, type, classification, item title, collection?, chunks)
BOOKS: list[tuple[str, LibraryType, Classification, str, str | None, list[Doc]]] = [
    (
        "Fate Rules",
        LibraryType.RULEBOOK,
        Classification.CANON,
        "Fate Core",
        "core",
        [
            Doc(
                ("Aspects",),
                "An aspect is a phrase that describes something unique about a character or a scene.",
                ("Aspect",),
            ),
            Doc(
                ("Fate Points",),
                "Spend a fate point to invoke an aspect and gain a +2 bonus on your roll.",
                ("Fate Point", "Aspect"),
            ),
            Doc(("Stress",), "Stress boxes soak up shifts of harm; they clear at the end of the scene.", ("Stress",)),
            Doc(
                ("Consequences",),
                "A consequence is a new aspect that reflects a lasting injury.",
                ("Consequence", "Aspect"),
            ),
            Doc(
                ("Refresh",),
                "At the start of each session your pool is restored to its refresh value.",
                ("Fate Point", "Refresh"),
            ),
            Doc(("Skills", "Athletics"), "Athletics measures running, jumping and climbing.", ("Athletics",)),
        ],
    ),
    (
        "Eberron Lore",
        LibraryType.LORE,
        Classification.INSPIRATION,
        "Khorvaire Gazetteer",
        None,
        [
            # Neither the words nor their meaning say "dragonmark": only the graph links it.
            Doc(
                ("Houses", "House Lyrandar"),
                "The heirs of Lyrandar call storms and steer elemental vessels.",
                ("Dragonmark", "House Lyrandar"),
            ),
            Doc(
                ("Airships",),
                "Airships bound with fire elementals cross the sky between Sharn and Fairhaven.",
                ("Airship",),
            ),
            Doc(("Sharn",), "Sharn is the city of towers, built on a manifest zone to Syrania.", ("Sharn",)),
        ],
    ),
    (
        "Homebrew",
        LibraryType.RULEBOOK,
        Classification.REFERENCE,
        "Table Rules",
        None,
        [
            Doc(
                ("House Rules", "Aspects"),
                "At our table an aspect can be invoked once per scene for free.",
                ("Aspect",),
            ),
        ],
    ),
]


@dataclass
class World:
    settings: Settings
    libraries: dict[str, Library]
    items: dict[str, Item]
    chunks: dict[str, str]  # chunk uid -> text


def build_world(data_dir: Path, embedder: SentenceTransformerEmbedder) -> World:
    settings = load_settings(data_dir=data_dir)
    graph, text, vectors = open_graph_store(settings), open_text_index(settings), open_vector_index(settings)
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    catalog = Catalog(graph)
    text.ensure()
    vectors.ensure_collection("chunks", VectorSpace(dim=embedder.dim))
    libraries: dict[str, Library] = {}
    items: dict[str, Item] = {}
    chunk_texts: dict[str, str] = {}
    try:
        for lib_name, lib_type, classification, title, collection, docs in BOOKS:
            library = catalog.save_library(Library(name=lib_name, type=lib_type))
            libraries[lib_name] = library
            collection_uid = None
            if collection:
                from schemas.knowledge import Collection

                collection_uid = catalog.save_collection(Collection(library_uid=library.uid, name=collection)).uid
            body = "\n".join(d.text for d in docs)
            item = Item(
                uid=content_id("item", body),
                library_uid=library.uid,
                collection_uid=collection_uid,
                title=title,
                file_type=FileType.MARKDOWN,
                size_bytes=len(body),
                content_hash=sha256_hex(body),
                classification=classification,
                source_ref=f"{title}.md",
                status=ItemStatus.READY,
            )
            catalog.save_item(item)
            items[title] = item
            chunks = [
                Chunk(
                    uid=f"{item.uid}-c{seq}",
                    item_uid=item.uid,
                    sequence=seq,
                    text_key=chunk_key(item.uid, seq),
                    heading_path=list(doc.heading),
                    token_count=len(doc.text.split()),
                )
                for seq, doc in enumerate(docs)
            ]
            catalog.save_chunks(chunks)
            concepts: dict[str, Concept] = {}
            mentions = []
            for chunk, doc in zip(chunks, docs, strict=True):
                for name in doc.concepts:
                    concept = concepts.setdefault(name, Concept(uid=content_id("concept", name.lower()), name=name))
                    mentions.append((chunk.uid, concept.uid))
                chunk_texts[chunk.uid] = doc.text
            catalog.save_mentions(list(concepts.values()), mentions)
            catalog.refresh_related(item.uid)
            vectors_ = embedder.embed_documents([d.text for d in docs])
            records = [
                index_records(library, item, chunk, doc.text, vec, embedder.name)
                for chunk, doc, vec in zip(chunks, docs, vectors_, strict=True)
            ]
            text.upsert([r[0] for r in records])
            vectors.upsert("chunks", [r[1] for r in records])
        text.refresh()
        vectors.optimize("chunks")
    finally:
        for store in (graph, text, vectors):
            store.close()
    return World(settings, libraries, items, chunk_texts)


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> World:
    return build_world(tmp_path_factory.mktemp("search") / "data", embedder)


@pytest.fixture(scope="module")
def searcher(world: World, embedder: SentenceTransformerEmbedder) -> Iterator[HybridSearcher]:
    with open_searcher(world.settings, reranker=None) as s:
        s.embedder = embedder
        yield s


def _with(searcher: HybridSearcher, config: HybridConfig) -> HybridSearcher:
    return HybridSearcher(
        text=searcher.text, vectors=searcher.vectors, graph=searcher.graph, embedder=searcher.embedder, config=config
    )


def test_every_leg_contributes_with_its_own_scores_and_ranks(searcher: HybridSearcher, world: World) -> None:
    hits = _with(searcher, EQUAL_WEIGHTS).search("how do I invoke an aspect with a fate point", limit=5)
    assert hits, "nothing found"
    top = hits[0]
    assert world.chunks[top.chunk_id].startswith("Spend a fate point")
    assert set(top.scores) == set(top.ranks) == {"vector", "text", "graph"}
    assert top.ranks["graph"] == 1 and "Fate Point" in top.concepts
    assert top.title == "Fate Core" and top.heading_path == ["Fate Points"] and top.text
    assert top.fused_score == top.score and top.reranker is None
    # the fused score is the weighted RRF of the recorded ranks
    for hit in hits:
        assert hit.score == pytest.approx(sum(1 / (60 + r) for r in hit.ranks.values()), abs=1e-6)  # k=60, weights 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("deferred", [True, False], ids=["embedded-index", "server-index"])
def test_returned_hits_carry_the_snippets_the_text_index_gives_them(
    searcher: HybridSearcher, deferred: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Embedded: the text leg searches without highlights and only the returned hits it found are highlighted,
    # after fusion. A server index (deferred_highlights False) gives them with the leg's hits.
    monkeypatch.setattr(searcher.text, "deferred_highlights", deferred)
    query = "how do I invoke an aspect with a fate point"
    hits = searcher.search(query, limit=4)
    by_text = {hit.id: hit.highlights for hit in searcher.text.search(query, limit=50, highlight=True)}
    assert any(hit.highlights for hit in hits)
    for hit in hits:
        assert hit.highlights == (by_text[hit.chunk_id] if "text" in hit.ranks else []), hit.chunk_id


def test_graph_leg_finds_chunks_by_concept_alone(searcher: HybridSearcher, world: World) -> None:
    lyrandar = next(uid for uid, text in world.chunks.items() if "Lyrandar" in text)
    graph_hits = _with(searcher, GRAPH_ONLY).search("what does a dragonmark do", limit=5)
    assert [h.chunk_id for h in graph_hits] == [lyrandar]
    assert graph_hits[0].concepts[0] == "Dragonmark" and graph_hits[0].text.startswith("The heirs of Lyrandar")
    assert graph_hits[0].title == "Khorvaire Gazetteer"
    text_hits = _with(searcher, TEXT_ONLY).search("what does a dragonmark do", limit=5)
    assert lyrandar not in [h.chunk_id for h in text_hits]
    hybrid = _with(searcher, EQUAL_WEIGHTS).search("what does a dragonmark do", limit=3)
    assert hybrid[0].chunk_id == lyrandar and hybrid[0].ranks["graph"] == 1
    # the tuned preset weights the graph leg low, and still returns what only the graph found
    tuned = searcher.search("what does a dragonmark do", limit=10)
    assert lyrandar in [h.chunk_id for h in tuned]


def test_graph_leg_follows_related_concepts_with_a_lower_weight(searcher: HybridSearcher, world: World) -> None:
    # "Refresh" is mentioned by one chunk; that chunk also mentions Fate Point, so Fate Point is a
    # RELATED_TO neighbour and its other chunk comes second, with a lower score.
    hits = _with(searcher, GRAPH_ONLY).search("refresh", limit=5)
    texts = [world.chunks[h.chunk_id] for h in hits]
    assert texts[0].startswith("At the start of each session")
    assert any(t.startswith("Spend a fate point") for t in texts[1:])
    assert hits[1].scores["graph"] < hits[0].scores["graph"]
    # plural and case in the query find the singular concept
    plural = _with(searcher, GRAPH_ONLY).search("CONSEQUENCES", limit=1)
    assert world.chunks[plural[0].chunk_id].startswith("A consequence")


def test_weights_turn_legs_off_and_requests_carry_them(searcher: HybridSearcher) -> None:
    vector_only = searcher.search("jumping and climbing", weights=LegWeights(text=0, graph=0), limit=3)
    assert vector_only and all(set(h.ranks) == {"vector"} for h in vector_only)
    request = SearchRequest(query="stress boxes", limit=2, weights=LegWeights(vector=0, graph=0))
    hits = searcher.search_request(request)
    assert len(hits) <= 2 and all(set(h.ranks) == {"text"} for h in hits)
    assert HYBRID_RRF.weights() == {"vector": 1.0, "text": 1.0, "graph": 0.5}
    assert EQUAL_WEIGHTS.weights(LegWeights(graph=0)) == {"vector": 1.0, "text": 1.0, "graph": 0.0}


def test_settings_change_the_preset(world: World) -> None:
    from search.service import config_from_settings

    assert config_from_settings(world.settings) == HYBRID_RRF
    changed = load_settings(
        data_dir=world.settings.data_dir, search_graph_weight=0.5, search_rrf_k=60, rerank_candidates=20
    )
    config = config_from_settings(changed)
    assert (config.graph_weight, config.rrf_k, config.rerank_candidates, config.text_weight) == (0.5, 60, 20, 1.0)
    off = config_from_settings(load_settings(data_dir=world.settings.data_dir, search_coverage_weight=0))
    assert (off.coverage_weight, HYBRID_RRF.coverage_weight) == (0.0, 1.0)


def _fields(world: World, chunk_id: str) -> dict[str, object]:
    item = next(i for i in world.items.values() if chunk_id.startswith(i.uid))
    library = next(lib for lib in world.libraries.values() if lib.uid == item.library_uid)
    fields: dict[str, object] = {
        "library": library.uid,
        "library_type": library.type.value,
        "item": item.uid,
        "classification": item.classification.value,
    }
    if item.collection_uid:
        fields["collection"] = item.collection_uid
    return fields


@pytest.mark.parametrize(
    "config", [VECTOR_ONLY, TEXT_ONLY, GRAPH_ONLY, HYBRID_RRF], ids=["vector", "text", "graph", "hybrid"]
)
def test_every_filter_holds_on_every_leg(searcher: HybridSearcher, world: World, config: HybridConfig) -> None:
    leg = _with(searcher, config)
    homebrew, fate = world.libraries["Homebrew"], world.libraries["Fate Rules"]
    cases = [
        SearchFilters(library=homebrew.uid),
        SearchFilters(library_type="lore"),
        SearchFilters(classification=["reference", "inspiration"]),
        SearchFilters(item=world.items["Fate Core"].uid),
        SearchFilters(collection=world.items["Fate Core"].collection_uid),
        SearchFilters(library=[fate.uid, homebrew.uid], classification="canon"),
    ]
    query = "aspect invoked in a scene"
    unfiltered = {h.chunk_id for h in leg.search(query, limit=20)}
    for filters in cases:
        hits = leg.search(query, filters=filters, limit=20)
        assert all(filters.matches(_fields(world, h.chunk_id)) for h in hits), filters
        # nothing that passes the filter and was found unfiltered is lost... within the same depth
        expected = {c for c in unfiltered if filters.matches(_fields(world, c))}
        assert expected <= {h.chunk_id for h in hits}, filters
    # campaign and status, and the recall fields (memory records): library chunks carry none, on any leg
    assert leg.search(query, filters=SearchFilters(campaign="camp-1"), limit=5) == []
    assert leg.search(query, filters=SearchFilters(status="active"), limit=5) == []
    assert leg.search(query, filters=SearchFilters(kind="turn"), limit=5) == []
    assert leg.search(query, filters=SearchFilters(lineage="b:0:0"), limit=5) == []
    assert leg.search(query, filters=SearchFilters(observer="ent-1"), limit=5) == []
    assert set(FILTER_FIELDS) == {
        "library",
        "library_type",
        "collection",
        "item",
        "classification",
        "campaign",
        "status",
        "kind",
        "lineage",
        "observer",
    }, "a new filter field needs a case here"


def test_library_type_filter_is_search_by_category(searcher: HybridSearcher, world: World) -> None:
    hits = searcher.search("ships in the sky", filters=SearchFilters(library_type="lore"), limit=3)
    assert hits and all(h.title == "Khorvaire Gazetteer" for h in hits)
    assert world.chunks[hits[0].chunk_id].startswith("Airships")


def test_disabled_items_vanish_from_every_leg(world: World, embedder: SentenceTransformerEmbedder) -> None:
    homebrew = world.items["Table Rules"]
    graph = open_graph_store(world.settings)
    try:
        Catalog(graph).set_item_status(homebrew.uid, ItemStatus.READY, enabled=False)
    finally:
        graph.close()
    try:
        with open_searcher(world.settings, reranker=None) as s:
            s.embedder = embedder
            for config in (VECTOR_ONLY, TEXT_ONLY, GRAPH_ONLY):
                assert all(h.item_uid != homebrew.uid for h in _with(s, config).search("aspect at our table", limit=20))
    finally:
        graph = open_graph_store(world.settings)
        try:
            Catalog(graph).set_item_status(homebrew.uid, ItemStatus.READY, enabled=True)
        finally:
            graph.close()


def test_cli_search_uses_the_service_with_filters(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from lorekeeper.cli import app

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(world.settings.data_dir))
    runner = CliRunner()
    args = ["search", "ships in the sky", "--json", "--type", "lore", "--no-rerank", "--limit", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert hits and all(h["title"] == "Khorvaire Gazetteer" for h in hits)
    assert {"scores", "ranks", "reranker", "concepts"} <= set(hits[0])
    named = runner.invoke(app, ["search", "aspect", "--json", "--library", "Homebrew"])
    assert named.exit_code == 0, named.output
    assert {json.loads(line)["title"] for line in named.stdout.splitlines() if line.startswith("{")} == {"Table Rules"}
    missing = runner.invoke(app, ["search", "aspect", "--library", "No Such Shelf"])
    assert missing.exit_code == 2 and "No Such Shelf" in missing.output


def test_graph_leg_matches_inflected_names(searcher: HybridSearcher, world: World) -> None:
    hits = _with(searcher, GRAPH_ONLY).search("refreshing my pool", limit=3)
    assert hits and world.chunks[hits[0].chunk_id].startswith("At the start of each session")
    assert hits[0].concepts[0] == "Refresh"


def test_a_new_concept_is_found_by_name_before_the_vocabulary_refreshes(searcher: HybridSearcher, world: World) -> None:
    graph_only = _with(searcher, GRAPH_ONLY)
    graph_only.search("aspect", limit=1)  # the vocabulary is read now, and kept for a minute
    airships = next(uid for uid, text in world.chunks.items() if text.startswith("Airships"))
    concept = Concept(uid=content_id("concept", "skyship"), name="Skyship")
    Catalog(searcher.graph).save_mentions([concept], [(airships, concept.uid)])
    hits = graph_only.search("tell me about skyships", limit=3)
    assert [h.chunk_id for h in hits] == [airships] and hits[0].concepts == ["Skyship"]


def test_cli_rerank_without_a_model_says_what_to_set(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lorekeeper.cli import app

    monkeypatch.setenv("LOREKEEPER_DATA_DIR", str(world.settings.data_dir))
    result = CliRunner().invoke(app, ["search", "aspect", "--rerank"])
    assert result.exit_code == 2 and "LOREKEEPER_RERANKER_MODEL" in result.output
