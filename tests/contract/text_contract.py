"""The full-text index contract, written once and run on every backend (see test_text.py).

A backend's test class mixes in :class:`TextIndexContract` and provides a ``text_index`` fixture
returning a fresh, empty index (not yet ensured). Class attributes describe the few behaviours that
legitimately differ between backends.
"""

from __future__ import annotations

import pickle
import time
from typing import ClassVar

import pytest

from schemas.errors import InvalidRequest, NotFound, NotSupported, StoreError
from schemas.search import FILTER_FIELDS, SearchFilters
from stores.text.base import TextDocument, TextHit, TextIndex

# Queries a player could type that are query syntax to a naive parser. Each must return a list.
HOSTILE_QUERIES = [
    'AC (armor) "class',
    "title:",
    "library:x",
    "((",
    ")",
    '"',
    "\\",
    "NOT",
    "armor AND OR",
    "*",
    "?",
    "a:b:c",
    "~2^",
    "armor^x",
    "{[}]",
    "-",
    "+armor -class",
    "/regex/",
    "&&||!",
    "<em>armor</em>",
    "'; DROP TABLE chunks; --",
    "",
    "   ",
    "armor " * 200,
    "x" * 1000,
    "🐉 dragon 🐉",
    "\x00\x01",
]

# A small, controlled fixture for filter semantics: every keyword field has a value that only some
# documents carry, one document carries a list, one carries nothing.
FILTER_DOCS = [
    TextDocument(
        id="f1",
        text="The dragon sleeps on a hoard of gold.",
        fields={
            "library": "lib-a",
            "library_type": "rulebook",
            "collection": "col-1",
            "item": "item-1",
            "classification": "canon",
            "campaign": "camp-1",
            "status": "active",
            "kind": "turn",
            "lineage": ["b1:0:3", "b1:1:1"],
            "observer": "ent-1",
        },
    ),
    TextDocument(
        id="f2",
        text="A dragon guards the mountain pass.",
        fields={
            "library": "lib-b",
            "library_type": "lore",
            "collection": "col-2",
            "item": "item-2",
            "classification": "reference",
            "campaign": "camp-2",
            "status": "superseded",
            "kind": "memory",
            "lineage": ["b2:0:3"],
            "observer": ["ent-1", "ent-2"],
        },
    ),
    TextDocument(
        id="f3",
        text="The old dragon remembers the first war.",
        fields={
            "library": ["lib-a", "lib-c"],
            "library_type": "lore",
            "collection": "col-1",
            "item": "item-3",
            "classification": "inspiration",
            "campaign": "camp-1",
            "status": "active",
            "kind": "summary",
            "lineage": ["b1:0:4", "b1:1:2"],
        },
    ),
    TextDocument(id="f4", text="A dragon with no keyword fields at all."),
]

# For each filter field: a value carried by exactly these FILTER_DOCS ids.
FIELD_CASES = {
    "library": ("lib-a", {"f1", "f3"}),
    "library_type": ("lore", {"f2", "f3"}),
    "collection": ("col-2", {"f2"}),
    "item": ("item-3", {"f3"}),
    "classification": ("canon", {"f1"}),
    "campaign": ("camp-1", {"f1", "f3"}),
    "status": ("active", {"f1", "f3"}),
    "kind": ("memory", {"f2"}),
    "lineage": ("b1:1:1", {"f1"}),
    "observer": ("ent-1", {"f1", "f2"}),
}
assert set(FIELD_CASES) == set(FILTER_FIELDS), "add the new filter field to FIELD_CASES and FILTER_DOCS"

# (query, rule id expected first) on the SRD rules fixture: queries whose best passage is not in doubt.
RANKING_CASES = [
    ("opportunity attack", "srd_attacking_opportunity-attacks"),
    ("critical hits", "srd_damage-and-healing_critical-hits"),
    ("two weapon fighting light melee weapon", "srd_attacking_two-weapon-fighting"),
    ("suffocating breath", "srd_environment_suffocating"),
    ("cackle fever", "srd_diseases_cackle-fever"),
    ("components verbal somatic material", "srd_spellcasting_components"),
    ("spell slots", "srd_spellcasting_spell-slots"),
    ("difficult terrain", "srd_movement_difficult-terrain"),
]

# BM25 (k1=1.2, b=0.75) on this fixture ranks "tf3" (three matches in six words) above "short" (one
# match in two words), then "tf1", then "long": term frequency saturates, long fields are penalised.
BM25_DOCS = {
    "tf1": "apple pip pip pip pip pip",
    "tf3": "apple apple apple pip pip pip",
    "short": "apple pip",
    "long": "apple " + "pip " * 19,
    "none1": "kiwi kiwi kiwi",
    "none2": "plum",
    "none3": "fig fig",
}
BM25_ORDER = ["tf3", "short", "tf1", "long"]


def ids(hits: list[TextHit]) -> list[str]:
    return [hit.id for hit in hits]


@pytest.mark.contract
class TextIndexContract:
    """Behaviour every :class:`~stores.text.base.TextIndex` backend must have."""

    # Whether a pickled copy sees the same documents (False: the copy cannot be made at all).
    pickles: ClassVar[bool] = True
    # Contract tests this backend is known to fail, with the reason: they run as strict xfails, so
    # a backend that starts passing one is noticed (remove the entry then).
    known_limits: ClassVar[dict[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _known_limit(self, request: pytest.FixtureRequest) -> None:
        reason = self.known_limits.get(request.node.originalname)
        if reason:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    @pytest.fixture
    def index(self, text_index: TextIndex) -> TextIndex:
        text_index.ensure()
        return text_index

    @pytest.fixture
    def filtered_index(self, index: TextIndex) -> TextIndex:
        index.upsert(FILTER_DOCS)
        return index

    @pytest.fixture
    def rules_index(self, index: TextIndex, rule_documents: list[TextDocument]) -> TextIndex:
        index.upsert(rule_documents)
        return index

    # -- lifecycle ---------------------------------------------------------------------------------

    def test_is_a_text_index(self, text_index: TextIndex) -> None:
        assert isinstance(text_index, TextIndex)

    def test_ensure_is_idempotent(self, text_index: TextIndex) -> None:
        text_index.ensure()
        text_index.ensure()
        assert text_index.count() == 0
        text_index.health()

    def test_ensure_keeps_documents(self, filtered_index: TextIndex) -> None:
        filtered_index.ensure()
        assert filtered_index.count() == len(FILTER_DOCS)

    def test_refresh_and_health(self, filtered_index: TextIndex) -> None:
        filtered_index.refresh()
        filtered_index.health()

    def test_close_then_use_keeps_documents(self, filtered_index: TextIndex) -> None:
        filtered_index.close()
        assert filtered_index.count() == len(FILTER_DOCS)
        assert filtered_index.get("f1").id == "f1"

    # -- writes ------------------------------------------------------------------------------------

    def test_upsert_empty_writes_nothing(self, index: TextIndex) -> None:
        assert index.upsert([]) == 0
        assert index.count() == 0

    def test_upsert_is_idempotent(self, index: TextIndex) -> None:
        assert index.upsert(FILTER_DOCS) == len(FILTER_DOCS)
        assert index.upsert(FILTER_DOCS) == len(FILTER_DOCS)
        assert index.count() == len(FILTER_DOCS)

    def test_upsert_replaces_content(self, filtered_index: TextIndex) -> None:
        replacement = TextDocument(
            id="f1", title="Griffon", text="A griffon nests on the cliff.", fields={"library": "lib-z"}
        )
        filtered_index.upsert([replacement])
        assert filtered_index.count() == len(FILTER_DOCS)
        assert filtered_index.get("f1") == replacement
        assert "f1" not in ids(filtered_index.search("hoard gold"))
        assert ids(filtered_index.search("griffon")) == ["f1"]
        assert filtered_index.count(SearchFilters(library="lib-a")) == 1  # only f3 now
        assert filtered_index.count(SearchFilters(library="lib-z")) == 1

    def test_repeated_id_in_one_batch_keeps_the_last(self, index: TextIndex) -> None:
        first = TextDocument(id="dup", text="first version about owls")
        last = TextDocument(id="dup", text="last version about wolves")
        index.upsert([first, last])
        assert index.count() == 1
        assert index.get("dup").text == last.text

    def test_bulk_of_two_thousand_in_one_call(self, index: TextIndex) -> None:
        docs = [
            TextDocument(
                id=f"bulk-{n}",
                title=f"Entry {n}",
                text=f"Bulk passage number {n} about the kingdom of marker{n % 10}.",
                fields={"item": f"item-{n % 4}", "status": "active"},
                data={"n": n},
            )
            for n in range(2000)
        ]
        started = time.monotonic()
        assert index.upsert(docs) == 2000
        elapsed = time.monotonic() - started
        assert index.count() == 2000
        assert index.count(SearchFilters(item="item-3")) == 500
        hits = index.search("marker7", limit=500)
        assert len(hits) == 200 and all(hit.data["n"] % 10 == 7 for hit in hits)
        assert index.get("bulk-1999").data == {"n": 1999}
        assert elapsed < 20, f"2,000 documents took {elapsed:.1f}s"

    # -- get ---------------------------------------------------------------------------------------

    def test_get_round_trips_the_document(self, index: TextIndex) -> None:
        doc = TextDocument(
            id="chunk:42",
            title="Fireball",
            heading="Spells > Evocation",
            text="A bright streak flashes to a point you choose.",
            fields={"library": ["lib-a"], "status": "active"},  # a one-item list stays a list
            data={"page": 241, "pages": [241, 242], "bbox": {"x": 1.5}, "ocr": False, "note": None},
        )
        index.upsert([doc])
        assert index.get("chunk:42") == doc

    def test_get_missing_is_not_found(self, filtered_index: TextIndex) -> None:
        with pytest.raises(NotFound) as caught:
            filtered_index.get("no-such-id")
        assert caught.value.status_code == 404
        assert pickle.loads(pickle.dumps(caught.value)).message == caught.value.message

    def test_get_many_keeps_order_once_and_skips_missing(self, filtered_index: TextIndex) -> None:
        found = filtered_index.get_many(["f3", "missing", "f1", "f3"])
        assert [d.id for d in found] == ["f3", "f1"]
        assert found == [filtered_index.get("f3"), filtered_index.get("f1")]
        assert filtered_index.get_many([]) == []
        assert filtered_index.get_many(["missing"]) == []

    # -- delete ------------------------------------------------------------------------------------

    def test_delete_by_id(self, filtered_index: TextIndex) -> None:
        assert filtered_index.delete(["f1", "missing", "f1"]) == 1
        assert filtered_index.count() == len(FILTER_DOCS) - 1
        with pytest.raises(NotFound):
            filtered_index.get("f1")
        assert "f1" not in ids(filtered_index.search("dragon"))
        assert filtered_index.delete([]) == 0
        assert filtered_index.delete(["missing"]) == 0

    def test_delete_by_filter(self, filtered_index: TextIndex) -> None:
        assert filtered_index.delete_by_filter(SearchFilters(library="lib-a", status="active")) == 2
        assert sorted(ids(filtered_index.search("dragon"))) == ["f2", "f4"]
        assert filtered_index.count() == 2
        assert filtered_index.delete_by_filter(SearchFilters(library="lib-a")) == 0

    def test_delete_by_empty_filter_is_refused(self, filtered_index: TextIndex) -> None:
        with pytest.raises(InvalidRequest, match="at least one filter"):
            filtered_index.delete_by_filter(SearchFilters())
        assert filtered_index.count() == len(FILTER_DOCS)

    # -- count and filters -------------------------------------------------------------------------

    def test_count(self, filtered_index: TextIndex) -> None:
        assert filtered_index.count() == len(FILTER_DOCS)
        assert filtered_index.count(None) == len(FILTER_DOCS)
        assert filtered_index.count(SearchFilters()) == len(FILTER_DOCS)
        assert filtered_index.count(SearchFilters(status="active", campaign="camp-1")) == 2
        assert filtered_index.count(SearchFilters(status="nothing")) == 0

    @pytest.mark.parametrize("field", FILTER_FIELDS)
    def test_each_filter_field(self, filtered_index: TextIndex, field: str) -> None:
        value, expected = FIELD_CASES[field]
        filters = SearchFilters(**{field: value})
        assert set(ids(filtered_index.search("dragon", filters=filters))) == expected
        assert filtered_index.count(filters) == len(expected)

    def test_filter_list_is_any_of(self, filtered_index: TextIndex) -> None:
        filters = SearchFilters(classification=["canon", "inspiration"])
        assert set(ids(filtered_index.search("dragon", filters=filters))) == {"f1", "f3"}

    @pytest.mark.parametrize("others", [0, 5, 100])
    def test_filter_of_many_values_is_any_of(self, filtered_index: TextIndex, others: int) -> None:
        # tantivy builds a few values as a union of terms and many as a term set: both mean any-of
        values = [f"lib-x{k}" for k in range(others)] + ["lib-c"]
        filters = SearchFilters(library=values, status="active")
        assert ids(filtered_index.search("dragon", filters=filters)) == ["f3"]
        assert filtered_index.count(filters) == 1
        assert filtered_index.search("dragon", filters=SearchFilters(library=values[:others] or ["lib-x"])) == []

    def test_filter_matches_any_value_of_a_multi_valued_field(self, filtered_index: TextIndex) -> None:
        assert ids(filtered_index.search("dragon", filters=SearchFilters(library="lib-c"))) == ["f3"]

    def test_filters_across_fields_are_all_required(self, filtered_index: TextIndex) -> None:
        filters = SearchFilters(library_type="lore", campaign=["camp-1", "camp-9"])
        assert ids(filtered_index.search("dragon", filters=filters)) == ["f3"]
        assert filtered_index.search("dragon", filters=SearchFilters(library="lib-b", status="active")) == []

    def test_filter_values_are_exact(self, filtered_index: TextIndex) -> None:
        for near_miss in ("LIB-A", "lib", "lib-a ", "lib-*"):
            assert filtered_index.search("dragon", filters=SearchFilters(library=near_miss)) == []

    def test_filters_do_not_change_scores(self, filtered_index: TextIndex) -> None:
        plain = {hit.id: hit.score for hit in filtered_index.search("dragon hoard")}
        filtered = filtered_index.search("dragon hoard", filters=SearchFilters(status="active"))
        assert filtered
        for hit in filtered:
            assert hit.score == pytest.approx(plain[hit.id], rel=1e-4)

    # -- search ------------------------------------------------------------------------------------

    def test_search_returns_documents_with_their_fields(self, filtered_index: TextIndex) -> None:
        hit = filtered_index.search("hoard")[0]
        original = FILTER_DOCS[0]
        assert (hit.id, hit.text, hit.fields, hit.data) == (
            original.id,
            original.text,
            original.fields,
            original.data,
        )
        assert hit.score > 0

    def test_search_respects_limit(self, filtered_index: TextIndex) -> None:
        assert len(filtered_index.search("dragon", limit=2)) == 2
        with pytest.raises(InvalidRequest):
            filtered_index.search("dragon", limit=0)

    def test_stemming(self, filtered_index: TextIndex) -> None:
        assert "f2" in ids(filtered_index.search("guarding dragons"))

    def test_no_match_and_stop_words_only(self, filtered_index: TextIndex) -> None:
        assert filtered_index.search("xylophone") == []
        assert filtered_index.search("the of a") == []

    @pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
    def test_hostile_query_does_not_fail(self, filtered_index: TextIndex, query: str) -> None:
        hits = filtered_index.search(query)
        assert isinstance(hits, list)

    def test_query_syntax_is_plain_words(self, filtered_index: TextIndex) -> None:
        # Brackets and quotes are ignored, the words still match.
        assert "f1" in ids(filtered_index.search('(hoard) "gold'))
        # A field prefix is not interpreted: "library:" does not leak into keyword fields.
        assert filtered_index.search("library:lib-a") == []

    def test_title_outweighs_text(self, index: TextIndex) -> None:
        index.upsert(
            [
                TextDocument(id="in-text", title="Creatures", text="The basilisk turns flesh to stone."),
                TextDocument(id="in-title", title="Basilisk", text="A reptile whose gaze turns flesh to stone."),
            ]
        )
        assert ids(index.search("basilisk")) == ["in-title", "in-text"]

    def test_bm25_ranking_on_rules(self, rules_index: TextIndex) -> None:
        for query, expected in RANKING_CASES:
            hits = rules_index.search(query, limit=5)
            assert hits and hits[0].id == expected, (query, ids(hits))
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True)

    def test_bm25_term_frequency_and_length(self, index: TextIndex) -> None:
        index.upsert([TextDocument(id=doc_id, text=text) for doc_id, text in BM25_DOCS.items()])
        hits = index.search("apple")
        assert ids(hits) == BM25_ORDER, [(hit.id, round(hit.score, 4)) for hit in hits]

    def test_highlights_mark_query_terms(self, filtered_index: TextIndex) -> None:
        hit = filtered_index.search("hoard")[0]
        assert hit.highlights
        assert any("<em>hoard</em>" in fragment for fragment in hit.highlights)
        assert not filtered_index.search("hoard", highlight=False)[0].highlights

    def test_highlights_of_chosen_documents_are_those_search_gives(self, rules_index: TextIndex) -> None:
        hits = rules_index.search("saving throw damage", limit=10)
        chosen = [hit.id for hit in hits[1::2]]
        assert rules_index.highlights("saving throw damage", [*chosen, "no-such-doc", chosen[0]]) == {
            hit.id: hit.highlights for hit in hits[1::2]
        }
        assert rules_index.highlights("saving throw damage", []) == {}
        assert rules_index.highlights("the of", chosen) in ({}, dict.fromkeys(chosen, []))  # no terms left

    def test_highlights_escape_html(self, index: TextIndex) -> None:
        index.upsert([TextDocument(id="h", text="The <script>alert(1)</script> trap fires a dart.")])
        fragments = index.search("trap")[0].highlights
        assert any("<em>trap</em>" in fragment for fragment in fragments)
        assert not any("<script>" in fragment for fragment in fragments)

    def test_unicode(self, index: TextIndex) -> None:
        doc = TextDocument(
            id="uni-é",
            title="Ünïcode Café",
            heading="Lore > Naïve émigrés",
            text="The émigré drank café au lait in Zürich — 東京 was far; the 🐉 slept.",
            fields={"library": "bibliothèque", "campaign": "カンペーン"},
            data={"note": "ß ∑ 🎲"},
        )
        index.upsert([doc])
        assert index.get("uni-é") == doc
        hits = index.search("zürich café")
        assert ids(hits) == ["uni-é"]
        assert any("<em>Zürich</em>" in fragment or "<em>café</em>" in fragment for fragment in hits[0].highlights)
        assert ids(index.search("émigré", filters=SearchFilters(campaign="カンペーン"))) == ["uni-é"]
        assert index.count(SearchFilters(library="bibliothèque")) == 1

    # -- pickling (Ray ships store objects to workers) ---------------------------------------------

    def test_pickle_before_use(self, text_index: TextIndex) -> None:
        if not self.pickles:
            with pytest.raises(NotSupported):
                pickle.dumps(text_index)
            return
        copy = pickle.loads(pickle.dumps(text_index))
        copy.ensure()
        copy.upsert(FILTER_DOCS[:2])
        text_index.refresh()
        assert text_index.count() == 2
        copy.close()

    def test_pickle_after_use(self, filtered_index: TextIndex) -> None:
        filtered_index.search("dragon")
        if not self.pickles:
            with pytest.raises(NotSupported, match="in-memory"):
                pickle.dumps(filtered_index)
            return
        copy = pickle.loads(pickle.dumps(filtered_index))
        assert copy.count() == len(FILTER_DOCS)
        assert ids(copy.search("hoard")) == ["f1"]
        copy.close()

    def test_errors_name_the_store(self, filtered_index: TextIndex) -> None:
        with pytest.raises(StoreError) as caught:
            filtered_index.get("no-such-id")
        assert caught.value.store in ("tantivy", "opensearch")
        assert caught.value.store in str(caught.value)
