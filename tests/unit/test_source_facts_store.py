"""The source-fact store (stores/source_facts.py) on the real embedded graph.

Facts are read from small entries by the real parser and written beside items and chunks written as
ingestion writes them, so what is tested is the graph shape the gate and the API read: STATES and
SUPPORTED_BY edges, typed values back as they went in, facts visible only once their item is, replaced
(not duplicated) on a re-run, and superseded with their item while a pin on the old edition still reads
them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rulebook import builtin_table, extract_facts
from schemas.common import sha256_hex
from schemas.errors import InvalidRequest, NotFound
from schemas.knowledge import Chunk, FileType, Item, ItemStatus, Library, LibraryType
from schemas.rulefacts import DiceValue, DistanceValue, EntrySection, NumberValue, SourceFact, StoredSourceFact
from schemas.settings import Settings
from stores.catalog import Catalog
from stores.factory import open_graph_store
from stores.graph.base import GraphStore
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from stores.source_facts import SourceFactStore

pytestmark = pytest.mark.servers

DND = builtin_table("dnd5e")

GOBLIN = """Small humanoid (goblinoid), neutral evil

Armor Class 15 (leather armor, shield)
Hit Points {hp} (2d6)
Speed 30 ft.

STR DEX CON INT WIS CHA
8 (-1) 14 (+2) 10 (+0) 10 (+0) 8 (-1) 8 (-1)

Skills Stealth +6
Senses darkvision 60 ft., passive Perception 9
Languages Common, Goblin
Challenge 1/4 (50 XP)"""

FIREBALL = """3rd-level evocation

Casting Time: 1 action
Range: 150 feet
Components: V, S, M (a tiny ball of bat guano and sulfur)
Duration: Instantaneous

A bright streak flashes from your pointing finger to a point you choose within range."""


@pytest.fixture(scope="module")
def _graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GraphStore]:
    graph = open_graph_store(Settings(data_dir=tmp_path_factory.mktemp("facts")))
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    try:
        yield graph
    finally:
        graph.close()


@pytest.fixture
def graph(_graph: GraphStore) -> GraphStore:
    _graph.run("MATCH (n) DETACH DELETE n")
    return _graph


def book(
    graph: GraphStore,
    slug: str,
    *,
    library: str = "lib_srd",
    status: ItemStatus = ItemStatus.PROCESSING,
    version: int = 1,
    supersedes: str | None = None,
) -> Item:
    """An item with two chunks, written as ingestion writes it (the library created if new)."""
    catalog = Catalog(graph)
    if not graph.run("MATCH (l:Library {uid: $u}) RETURN l.uid AS uid", {"u": library}):
        catalog.save_library(Library(uid=library, name=library, type=LibraryType.RULEBOOK))
    item = Item(
        uid=f"item_{slug}",
        library_uid=library,
        title=slug,
        file_type=FileType.MARKDOWN,
        size_bytes=10,
        content_hash=sha256_hex(slug),
        source_ref="srd.md",
        status=status,
        version=version,
        supersedes_uid=supersedes,
    )
    catalog.save_item(item)
    catalog.save_chunks(
        [
            Chunk(uid=f"chunk_{slug}_{n}", item_uid=item.uid, sequence=n, text_key=f"t/{slug}/{n}", token_count=5)
            for n in range(2)
        ]
    )
    return item


def facts_of(item: Item, *, hp: int = 7) -> list[SourceFact]:
    """The goblin (chunk 0, page 3) and fireball (chunk 1, page 9) entries of a book, parsed."""
    goblin = EntrySection(
        heading_path=["SRD", "Monsters", "Goblin"], text=GOBLIN.format(hp=hp), page=3, chunk_id=f"chunk_{item.title}_0"
    )
    fireball = EntrySection(
        heading_path=["SRD", "Spells", "Fireball"], text=FIREBALL, page=9, chunk_id=f"chunk_{item.title}_1"
    )
    return [*extract_facts(goblin, DND), *extract_facts(fireball, DND)]


def ready(graph: GraphStore, item: Item) -> None:
    Catalog(graph).set_item_status(item.uid, ItemStatus.READY)


def by_predicate(facts: list[StoredSourceFact], subject: str) -> dict[str, StoredSourceFact]:
    return {f.predicate: f for f in facts if f.subject.key == subject}


def test_saved_facts_read_back_typed_with_their_item_chunk_and_page(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    item = book(graph, "srd")
    facts = facts_of(item)
    assert store.save(item.uid, item.library_uid, facts) == len(facts)
    ready(graph, item)

    back = store.for_item(item.uid)
    assert [(f.subject.key, f.predicate, f.value) for f in back] == [
        (f.subject.key, f.predicate, f.value) for f in facts
    ]
    goblin = by_predicate(back, "goblin")
    assert goblin["hit_points"].value == NumberValue(value=7)
    assert goblin["hit_dice"].value == DiceValue.model_validate({"terms": [{"count": 2, "sides": 6}]})
    assert goblin["armor_class"].page == 3 and goblin["armor_class"].chunk_id == "chunk_srd_0"
    fireball = by_predicate(back, "fireball")
    assert fireball["range"].value == DistanceValue(amount=150)
    assert all(f.canon_level == "canon" and f.authority == "source" and f.status == "active" for f in back)
    assert {f.item_uid for f in back} == {item.uid} and {f.library_uid for f in back} == {"lib_srd"}

    edges = graph.run(
        "MATCH (:Item {uid: $i})-[:STATES]->(f:SourceFact)-[:SUPPORTED_BY]->(c:Chunk) "
        "RETURN f.subject_key AS s, c.uid AS c, count(f) AS n ORDER BY s",
        {"i": item.uid},
    )
    assert [(r["s"], r["c"]) for r in edges] == [("fireball", "chunk_srd_1"), ("goblin", "chunk_srd_0")]
    assert sum(r["n"] for r in edges) == len(facts)

    assert [f.predicate for f in store.for_item(item.uid, entry="FIREBALL")] == [
        f.predicate for f in facts if f.subject.key == "fireball"
    ]


def test_save_replaces_an_items_facts_and_a_rerun_writes_the_same_ids(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    item = book(graph, "srd", status=ItemStatus.READY)
    facts = facts_of(item)
    store.save(item.uid, item.library_uid, facts)
    first = [f.uid for f in store.for_item(item.uid)]
    store.save(item.uid, item.library_uid, facts)
    assert [f.uid for f in store.for_item(item.uid)] == first
    assert store.count(item.uid) == len(facts)

    only_goblin = [f for f in facts if f.subject.key == "goblin"]
    store.save(item.uid, item.library_uid, only_goblin)
    assert {f.subject.key for f in store.for_item(item.uid)} == {"goblin"}
    assert graph.run("MATCH (f:SourceFact) RETURN count(f) AS n")[0]["n"] == len(only_goblin)
    store.save(item.uid, item.library_uid, [])
    assert store.count(item.uid) == 0


def test_a_fact_whose_chunk_is_missing_is_kept_without_a_link(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    item = book(graph, "srd", status=ItemStatus.READY)
    facts = [f.model_copy(update={"chunk_id": "chunk_gone"}) for f in facts_of(item)[:2]]
    store.save(item.uid, item.library_uid, facts)
    assert store.count(item.uid) == 2
    assert not graph.run("MATCH (f:SourceFact)-[:SUPPORTED_BY]->() RETURN f.uid AS uid")


def test_same_subject_predicate_and_offset_twice_in_a_book_get_distinct_ids(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    item = book(graph, "srd", status=ItemStatus.READY)
    goblin = [f for f in facts_of(item) if f.subject.key == "goblin"]
    twice = goblin + goblin  # a "Goblin" entry in two chapters, same text
    assert store.save(item.uid, item.library_uid, twice) == len(twice)
    assert len({f.uid for f in store.for_item(item.uid)}) == len(twice)


def test_facts_become_visible_with_their_item_never_before(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    item = book(graph, "srd", status=ItemStatus.PROCESSING)
    store.save(item.uid, item.library_uid, facts_of(item))
    assert store.for_item(item.uid) == []
    assert store.lookup(["goblin"]) == []
    assert store.lookup(["goblin"], item_uids=[item.uid]) == []
    assert store.find("Goblin") == []
    ready(graph, item)
    assert store.lookup(["Goblin"], predicates=["hit_points"])[0].value == NumberValue(value=7)
    assert {f.subject.key for f in store.find("goblin")} == {"goblin"}


def test_lookup_narrows_by_predicate_library_and_enabled(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    srd = book(graph, "srd", status=ItemStatus.READY)
    homebrew = book(graph, "homebrew", library="lib_home", status=ItemStatus.READY)
    store.save(srd.uid, srd.library_uid, facts_of(srd))
    store.save(homebrew.uid, homebrew.library_uid, facts_of(homebrew, hp=12))

    hp = store.lookup(["goblin", "fireball"], predicates=["hit_points", "range"])
    assert sorted((f.item_uid, f.predicate) for f in hp) == [
        ("item_homebrew", "hit_points"),
        ("item_homebrew", "range"),
        ("item_srd", "hit_points"),
        ("item_srd", "range"),
    ]
    home = store.lookup(["goblin"], predicates=["hit_points"], library_uids=["lib_home"])
    assert [(f.item_uid, f.value) for f in home] == [("item_homebrew", NumberValue(value=12))]
    assert store.lookup(["goblin"], library_uids=[]) == []
    assert store.lookup(["nobody"]) == []

    Catalog(graph).save_item(homebrew.model_copy(update={"enabled": False}))
    assert {f.item_uid for f in store.lookup(["goblin"])} == {"item_srd"}
    assert store.lookup(["goblin"], item_uids=[homebrew.uid]) == []


def test_superseded_edition_keeps_its_facts_for_whoever_pins_it(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    old = book(graph, "srd_v1", status=ItemStatus.READY)
    store.save(old.uid, old.library_uid, facts_of(old, hp=7))
    new = book(graph, "srd_v2", version=2, supersedes=old.uid)
    store.save(new.uid, new.library_uid, facts_of(new, hp=9))
    Catalog(graph).supersede(old.uid, new.uid)
    ready(graph, new)

    assert {f.status for f in store.for_item(old.uid)} == {"superseded"}
    assert {f.status for f in store.for_item(new.uid)} == {"active"}

    def hit_points(**scope: list[str]) -> list[tuple[str, float]]:
        facts = store.lookup(["goblin"], predicates=["hit_points"], **scope)
        return sorted((f.item_uid, f.value.value) for f in facts if isinstance(f.value, NumberValue))

    assert hit_points() == [("item_srd_v2", 9)]
    assert hit_points(library_uids=["lib_srd"]) == [("item_srd_v2", 9)]
    assert hit_points(item_uids=[old.uid]) == [("item_srd_v1", 7)]  # the pinned edition
    assert hit_points(item_uids=[old.uid], library_uids=["lib_srd"]) == [("item_srd_v1", 7), ("item_srd_v2", 9)]
    assert [f.item_uid for f in store.find("Goblin") if f.predicate == "hit_points"] == ["item_srd_v2"]


def test_bad_entry_names_limits_and_unknown_items_are_refused(graph: GraphStore) -> None:
    store = SourceFactStore(graph)
    with pytest.raises(NotFound, match="item_ghost"):
        store.save("item_ghost", "lib_srd", facts_of(Item.model_construct(title="ghost")))
    assert graph.run("MATCH (f:SourceFact) RETURN count(f) AS n")[0]["n"] == 0
    with pytest.raises(InvalidRequest, match="no letters or digits"):
        store.find("  ...  ")
    with pytest.raises(InvalidRequest, match="no letters or digits"):
        store.for_item("item_x", entry="?")
    with pytest.raises(InvalidRequest, match="limit must be at least 1"):
        store.find("goblin", limit=0)


def test_stored_fact_ids_are_deterministic(tmp_path: Path) -> None:
    fact = facts_of(Item.model_construct(title="srd"))[0]
    a = StoredSourceFact.of(fact, item_uid="item_a", library_uid="lib", index=0)
    assert a.uid == StoredSourceFact.of(fact, item_uid="item_a", library_uid="lib", index=5).uid  # offset wins
    assert a.uid != StoredSourceFact.of(fact, item_uid="item_b", library_uid="lib", index=0).uid
    no_offset = fact.model_copy(update={"offset": None})
    assert (
        StoredSourceFact.of(no_offset, item_uid="item_a", library_uid="lib", index=1).uid
        != StoredSourceFact.of(no_offset, item_uid="item_a", library_uid="lib", index=2).uid
    )
