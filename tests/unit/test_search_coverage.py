"""The coverage leg: constraints read from a query, checked against chunk text, and fused by the searcher.

The pure part is tested on strings; the searcher on the real embedded stores (tantivy, qdrant-edge,
FalkorDB) with real MiniLM embeddings, written through the same record builders ingestion uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.stages import index_records
from models.embedding import SentenceTransformerEmbedder
from schemas.common import content_id, sha256_hex
from schemas.knowledge import Chunk, Classification, FileType, Item, ItemStatus, Library, LibraryType
from schemas.search import LegWeights
from schemas.settings import Settings, load_settings
from search.coverage import (
    Constraint,
    Kind,
    StatedText,
    coverage_ranking,
    coverage_scores,
    query_constraints,
    tokens,
)
from search.hybrid import HYBRID_RRF, NO_COVERAGE, HybridSearcher
from search.service import open_searcher
from stores.blob.layout import chunk_key
from stores.catalog import Catalog
from stores.factory import open_graph_store, open_text_index, open_vector_index
from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA
from stores.vector.base import VectorSpace

# -- reading constraints --------------------------------------------------------------------------


@pytest.mark.parametrize("printed", ["60 feet", "60-foot", "60 ft.", "60 Feet", "60 foot"])
def test_a_distance_reads_the_same_however_it_is_printed(printed: str) -> None:
    assert Constraint(Kind.VALUE, "60 ft") in query_constraints("darkvision out to 60 feet")
    assert StatedText(f"Senses darkvision {printed}, passive Perception 10").meets(Constraint(Kind.VALUE, "60 ft"))


@pytest.mark.parametrize("printed", ["3rd-level evocation", "3rd level evocation", "Level 3 Evocation (Wizard)"])
def test_a_level_reads_the_same_in_the_old_and_the_new_print(printed: str) -> None:
    assert StatedText(printed).meets(Constraint(Kind.VALUE, "level 3"))
    assert not StatedText(printed.replace("3", "4")).meets(Constraint(Kind.VALUE, "level 3"))


def test_durations_and_dice_are_values() -> None:
    found = query_constraints("regains 1d3 charges at dawn and lasts 10 minutes")
    assert Constraint(Kind.VALUE, "1d3") in found
    assert Constraint(Kind.VALUE, "10 minute") in found
    assert StatedText("Duration: Concentration, up to 10 minutes").meets(Constraint(Kind.VALUE, "10 minute"))


def test_a_bare_number_counts_only_beside_the_words_it_counts() -> None:
    (number,) = [c for c in query_constraints("the medium undead that has 45 hit points") if c.kind is Kind.NUMBER]
    assert number.text == "45" and {"hit", "point"} <= number.near
    assert StatedText("Armor Class 13\nHit Points 45 (10d8)").meets(number)
    # The same number elsewhere in the stat block is not the hit points.
    assert not StatedText("Hit Points 22 (5d8)\nSpeed 45 ft.\nChallenge 45").meets(number)


def test_question_words_are_no_constraints_and_words_are_stemmed() -> None:
    texts = {c.text for c in query_constraints("What was that spell which creates a burning wall?")}
    assert {"what", "was", "that", "which"}.isdisjoint(texts)
    assert {"spell", "creat", "burn", "wall"} <= texts


def test_a_negated_word_must_be_absent() -> None:
    found = query_constraints("the uncommon weapon that needs no attunement")
    assert Constraint(Kind.ABSENT, "attunement") in found
    assert Constraint(Kind.WORD, "attunement") not in found
    absent = Constraint(Kind.ABSENT, "attunement")
    assert StatedText("Weapon (javelin), uncommon").meets(absent)
    assert not StatedText("Weapon (any sword), rare (requires attunement)").meets(absent)


def test_a_modifier_makes_a_pair_so_very_rare_is_not_rare() -> None:
    (pair,) = [c for c in query_constraints("the very rare ring that holds 6 charges") if c.text.startswith("very ")]
    assert pair.kind is Kind.PAIR
    assert StatedText("Ring, very rare (requires attunement)").meets(pair)
    assert not StatedText("Ring, rare").meets(pair)


def test_a_value_and_the_word_beside_it_make_a_pair_read_alike_in_either_print() -> None:
    # "7th-level conjuration" is the entry's level and school; a 3rd-level conjuration spell that can be
    # cast with a 7th-level slot states "level 7" and "conjuration" apart, never side by side.
    pairs = [c for c in query_constraints("the 7th-level conjuration spell that lasts 1 hour") if c.kind is Kind.PAIR]
    (pair,) = [c for c in pairs if c.text.startswith("level 7")]
    assert pair.text == "level 7 conjuration"
    assert StatedText("Conjure Celestial\n7th-level conjuration").meets(pair)
    assert StatedText("CONJURE CELESTIAL\nLevel 7 Conjuration").meets(pair)
    assert not StatedText("Conjure Animals\n3rd-level conjuration\nAt Higher Levels: a 7th-level slot").meets(pair)
    (before,) = [c for c in query_constraints("a creature with darkvision 60 feet") if c.kind is Kind.PAIR]
    assert before.text == "darkvision 60 ft"
    assert StatedText("Senses darkvision 60 ft., passive Perception 10").meets(before)


def test_tokens_keep_unicode_letters_and_fold_case() -> None:
    assert [t.text for t in tokens("Ætherial Drake’s BREATH")] == ["ætherial", "drak", "breath"]


# -- scoring and ranking ----------------------------------------------------------------------------

WALL = "Wall of Flame\n4th-level evocation\nRange: 120 feet\nDuration: Concentration, up to 1 minute"
FIRE = "Fire Storm\n7th-level evocation\nFire fire fire: a storm of fire deals fire damage. Range: 150 feet"
SPHERE = "Burning Sphere\n3rd-level evocation\nRange: 150 feet\nA 20-foot-radius sphere deals fire damage."


def test_the_entry_that_states_every_constraint_ranks_first_over_one_that_repeats_a_word() -> None:
    query = "the 3rd-level evocation spell that deals fire damage in a 20-foot sphere"
    scores = coverage_scores(query, {"wall": WALL, "fire": FIRE, "sphere": SPHERE})
    assert scores["sphere"] > scores["fire"] > scores["wall"]
    assert all(0.0 <= s <= 1.0 for s in scores.values())


def test_a_constraint_every_candidate_meets_weighs_least() -> None:
    # "evocation" is in all three; "150 feet" in two: stating the rarer one is worth more.
    only_common = coverage_scores("evocation 150 feet", {"wall": WALL, "fire": FIRE, "sphere": SPHERE})
    assert only_common["fire"] == only_common["sphere"] > only_common["wall"] > 0


def test_ties_keep_the_fused_order_and_a_query_without_constraints_changes_nothing() -> None:
    candidates = ["b", "a", "c"]
    texts = {"a": "nothing here", "b": "nothing either", "c": "none"}
    assert [d for d, _ in coverage_ranking("what is it?", candidates, texts)] == candidates
    assert coverage_scores("what is it?", texts) == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert coverage_scores("anything", {}) == {}


# -- in the searcher ---------------------------------------------------------------------------------

# A description question and the book it asks about: the decoys repeat its words, the answer states all
# its constraints once ("2nd-level", "1 hour", "concentration"). Without the coverage leg the text and vector
# legs split between the first decoy and the answer (first in one, second in the other) and the decoy wins.
QUERY = "which 2nd-level illusion spell lasts 1 hour with concentration"
ANSWER = "Quiet Mirage"
ENTRIES: list[tuple[str, str]] = [
    (
        "Veil of Illusions",
        "3rd-level illusion spell. Duration: Concentration, up to 1 minute. This illusion spell "
        "lasts with concentration: each illusion of the spell lasts 1 hour, an illusion over an illusion.",
    ),
    (
        "Phantom Choir",
        "1st-level illusion spell. Duration: Concentration, up to 1 minute. An illusion spell of "
        "phantom voices; the illusion lasts as long as your concentration does.",
    ),
    (
        ANSWER,
        "2nd-level illusion spell. Duration: Concentration, up to 1 hour. A mirage hides one creature while "
        "the spell lasts.",
    ),
    ("Stone Skin", "4th-level abjuration. Duration: Concentration, up to 1 hour. Skin turns hard as stone."),
    ("Flame Lash", "1st-level evocation. Duration: Instantaneous. A whip of fire deals 2d6 fire damage."),
]


def _write_book(settings: Settings, embedder: SentenceTransformerEmbedder) -> None:
    graph, text, vectors = open_graph_store(settings), open_text_index(settings), open_vector_index(settings)
    try:
        graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
        text.ensure()
        vectors.ensure_collection("chunks", VectorSpace(dim=embedder.dim))
        catalog = Catalog(graph)
        library = catalog.save_library(Library(name="Spells", type=LibraryType.RULEBOOK))
        body = "\n".join(t for _, t in ENTRIES)
        item = Item(
            uid=content_id("item", body),
            library_uid=library.uid,
            title="Book of Spells",
            file_type=FileType.MARKDOWN,
            size_bytes=len(body),
            content_hash=sha256_hex(body),
            classification=Classification.CANON,
            source_ref="spells.md",
            status=ItemStatus.READY,
        )
        catalog.save_item(item)
        chunks = [
            Chunk(
                uid=f"{item.uid}-c{seq}",
                item_uid=item.uid,
                sequence=seq,
                text_key=chunk_key(item.uid, seq),
                heading_path=["Spells", name],
                token_count=len(body_text.split()),
            )
            for seq, (name, body_text) in enumerate(ENTRIES)
        ]
        catalog.save_chunks(chunks)
        embedded = embedder.embed_documents([t for _, t in ENTRIES])
        records = [
            index_records(library, item, chunk, t, vec, embedder.name)
            for chunk, (_, t), vec in zip(chunks, ENTRIES, embedded, strict=True)
        ]
        text.upsert([r[0] for r in records])
        vectors.upsert("chunks", [r[1] for r in records])
        text.refresh()
        vectors.optimize("chunks")
    finally:
        for store in (graph, text, vectors):
            store.close()


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearcher]:
    embedder = SentenceTransformerEmbedder()
    settings = load_settings(data_dir=Path(tmp_path_factory.mktemp("coverage")) / "data")
    _write_book(settings, embedder)
    with open_searcher(settings, reranker=None) as s:
        s.embedder = embedder
        yield s


def _with(searcher: HybridSearcher, config: object) -> HybridSearcher:
    return HybridSearcher(
        text=searcher.text,
        vectors=searcher.vectors,
        graph=searcher.graph,
        embedder=searcher.embedder,
        config=config,  # type: ignore[arg-type]
    )


@pytest.mark.slow
def test_the_coverage_leg_puts_the_described_entry_first(searcher: HybridSearcher) -> None:
    without = _with(searcher, NO_COVERAGE).search(QUERY, limit=5)
    assert without[0].heading_path[-1] != ANSWER, "the book no longer tests the leg: the other legs alone win"
    hits = _with(searcher, HYBRID_RRF).search(QUERY, limit=5)
    assert hits[0].heading_path[-1] == ANSWER
    assert hits[0].ranks["coverage"] == 1 and hits[0].scores["coverage"] == max(h.scores["coverage"] for h in hits)


@pytest.mark.slow
def test_a_requests_weights_leave_the_coverage_leg_out_unless_they_name_it(searcher: HybridSearcher) -> None:
    plain = searcher.search(QUERY, limit=5, weights=LegWeights(vector=1, text=1, graph=0.5))
    assert plain and all("coverage" not in h.ranks for h in plain)
    named = searcher.search(QUERY, limit=5, weights=LegWeights(vector=1, text=1, graph=0.5, coverage=1))
    assert named[0].heading_path[-1] == ANSWER and "coverage" in named[0].ranks


@pytest.mark.slow
def test_the_leg_threads_read_the_candidates_ahead_and_the_hits_stay_the_same(searcher: HybridSearcher) -> None:
    from search import coverage

    parallel = _with(searcher, HYBRID_RRF)
    sequential = _with(searcher, HYBRID_RRF.model_copy(update={"parallel": False}))
    coverage._stated.cache_clear()
    hits = parallel.search(QUERY, limit=8)
    # every candidate was read on its leg's thread, so the coverage leg found each one read
    info = coverage._stated.cache_info()
    assert info.hits >= info.currsize > 0, info
    coverage._stated.cache_clear()
    alone = sequential.search(QUERY, limit=8)  # sequential: no read-ahead
    assert coverage._stated.cache_info().hits == 0
    assert [h.model_dump() for h in hits] == [h.model_dump() for h in alone]
