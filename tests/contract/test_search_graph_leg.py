"""The graph leg and the item scope on every graph backend: the embedded store, the Neo4j driver against
FalkorDB's Bolt endpoint, and a real Neo4j under ``-m integration`` (``LOREKEEPER_GRAPH_URL``). The same
query text runs on each (dialect differences live in ``stores.graph.dialect``)."""

from __future__ import annotations

import pytest

from schemas.common import content_id, sha256_hex
from schemas.knowledge import Chunk, Classification, Concept, FileType, Item, ItemStatus, Library, LibraryType
from schemas.search import SearchFilters
from search.graph import GraphLeg
from search.scope import ItemScope
from stores.catalog import Catalog
from stores.graph.base import GraphStore

pytestmark = pytest.mark.contract

# item title -> (library type, classification, [(heading path, concepts)])
SHELF = {
    "Fate Core": (
        LibraryType.RULEBOOK,
        Classification.CANON,
        [
            (["Aspects"], ["Aspect"]),
            (["Fate Points"], ["Fate Point", "Aspect"]),
            (["Refresh"], ["Refresh", "Fate Point"]),
            (["Conflicts", "Stress"], ["Stress"]),
        ],
    ),
    "Gazetteer": (
        LibraryType.LORE,
        Classification.INSPIRATION,
        [
            (["Houses", "House Lyrandar"], ["Dragonmark", "House Lyrandar"]),
            (["Airships"], ["Airship", "Aspect"]),
        ],
    ),
}


# A book of entries: a heading that is no concept, a rule whose heading only contains a named word, an
# entry's name that holds another entry's name.
ENTRIES = {
    "Compendium": (
        LibraryType.RULEBOOK,
        Classification.CANON,
        [
            (["Components", "Material (M)"], ["Material"]),
            (["Spells", "Major Image"], ["Illusion"]),
            (["Spells", "Major Image"], ["Illusion"]),
            (["Monsters", "Air Elemental"], ["Air Elemental"]),
            (["Wondrous Items", "Censer of Controlling Air Elementals"], ["Air Elemental"]),
        ],
    ),
}


def write_shelf(graph: GraphStore, shelf: dict = SHELF) -> dict[str, Item]:
    catalog = Catalog(graph)
    items = {}
    for title, (kind, classification, chunks) in shelf.items():
        library = catalog.save_library(Library(name=f"{title} shelf", type=kind))
        item = Item(
            uid=content_id("item", title),
            library_uid=library.uid,
            title=title,
            file_type=FileType.MARKDOWN,
            size_bytes=100,
            content_hash=sha256_hex(title),
            classification=classification,
            source_ref=f"{title}.md",
            status=ItemStatus.READY,
        )
        catalog.save_item(item)
        rows = [
            Chunk(
                uid=f"{item.uid}-{n}",
                item_uid=item.uid,
                sequence=n,
                text_key=f"k/{item.uid}/{n}",
                heading_path=headings,
                token_count=10,
            )
            for n, (headings, _) in enumerate(chunks)
        ]
        catalog.save_chunks(rows)
        concepts = {
            name: Concept(uid=content_id("concept", name.lower()), name=name) for _, names in chunks for name in names
        }
        catalog.save_mentions(
            list(concepts.values()),
            [(row.uid, concepts[name].uid) for row, (_, names) in zip(rows, chunks, strict=True) for name in names],
        )
        catalog.refresh_related(item.uid)
        items[title] = item
    return items


@pytest.fixture(params=["embedded", "falkor_bolt", "neo4j"])
def graph(request: pytest.FixtureRequest) -> GraphStore:
    if request.param == "neo4j":
        request.applymarker(pytest.mark.integration)
    return request.getfixturevalue(f"{request.param}_graph")


def test_graph_leg_and_scope_on_every_backend(graph: GraphStore) -> None:
    items = write_shelf(graph)
    scope = ItemScope(graph).allowed(None)
    assert set(scope.items) == {i.uid for i in items.values()} and not scope.restricted
    leg = GraphLeg(graph)

    result = leg.search("how do I get my fate points back", items=scope.items.keys(), restricted=False)
    ids = [h.chunk_id for h in result.hits]
    fate = items["Fate Core"].uid
    assert ids[0] == f"{fate}-1"  # the section about Fate Points
    assert f"{fate}-2" in ids  # Refresh mentions it too
    assert [c.name for c in result.named] == ["Fate Point"]
    assert {c.name for c in result.neighbours} <= {"Aspect", "Refresh"} and result.neighbours

    # a filter restricts the items, and the leg checks them row by row
    lore = ItemScope(graph).allowed(SearchFilters(library_type="lore"))
    assert set(lore.items) == {items["Gazetteer"].uid} and lore.restricted
    hits = leg.search("aspects", items=lore.items.keys(), restricted=lore.restricted).hits
    assert [h.chunk_id for h in hits] == [f"{items['Gazetteer'].uid}-1"]

    # a disabled item leaves the scope
    Catalog(graph).set_item_status(items["Gazetteer"].uid, ItemStatus.READY, enabled=False)
    assert set(ItemScope(graph).allowed(None).items) == {fate}


def test_graph_leg_finds_the_entry_a_query_names(graph: GraphStore) -> None:
    book = write_shelf(graph, ENTRIES)["Compendium"].uid
    scope = ItemScope(graph).allowed(None)
    leg = GraphLeg(graph)

    # "Major Image" is no concept, but it is a heading: its entry comes first, opening chunk first, before
    # the rule whose heading only contains a named word
    result = leg.search("Does Major Image have a material component?", items=scope.items.keys(), restricted=False)
    ids = [h.chunk_id for h in result.hits]
    assert ids[:2] == [f"{book}-1", f"{book}-2"] and f"{book}-0" in ids
    assert result.hits[0].concepts[0] == "Major Image"

    # a name inside a longer entry's name is not looked up on its own
    result = leg.search("Censer of Controlling Air Elementals rarity?", items=scope.items.keys(), restricted=False)
    assert [h.chunk_id for h in result.hits] == [f"{book}-4"]
    assert result.named == []

    # the entries honour the item scope
    assert leg.search("major image", items=["another-item"], restricted=True).hits == []
