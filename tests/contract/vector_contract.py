"""The vector index contract, written once and run on every backend (tests/contract/test_vector.py).

A test class mixes in :class:`VectorIndexContract` and provides a ``vectors`` fixture returning a fresh
:class:`~stores.vector.base.VectorIndex`; ``persistent`` says whether its data outlives ``close()``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence

import numpy as np
import pytest

from schemas.errors import Conflict, InvalidRequest, NotFound, StoreError
from schemas.search import FILTER_FIELDS, SearchFilters
from stores.vector.base import Distance, VectorHit, VectorIndex, VectorPoint, VectorSpace
from tests.fixtures.vector import DIM, FIELD_VALUES, make_points, unique_collection

SPACE = VectorSpace(name="dense", dim=DIM)


def hit_ids(hits: Sequence[VectorHit]) -> list[str]:
    return [h.id for h in hits]


def expected_ids(points: Sequence[VectorPoint], filters: SearchFilters) -> set[str]:
    """The ids a filter must select, by the filter model's own rule (:meth:`SearchFilters.matches`)."""
    return {p.id for p in points if filters.matches(p.payload)}


def unit(vector: Sequence[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    return array / np.linalg.norm(array)


class VectorIndexContract:
    """Behaviour every :class:`VectorIndex` backend must show."""

    persistent: bool = False

    @pytest.fixture
    def collection(self, vectors: VectorIndex) -> str:
        name = unique_collection()
        vectors.ensure_collection(name, SPACE)
        return name

    @pytest.fixture
    def loaded(self, vectors: VectorIndex, collection: str, vector_fixture: list[VectorPoint]) -> str:
        assert vectors.upsert(collection, vector_fixture) == len(vector_fixture)
        return collection

    # -- collections ------------------------------------------------------------------------------

    def test_is_a_vector_index(self, vectors: VectorIndex) -> None:
        assert isinstance(vectors, VectorIndex)
        assert vectors.name

    def test_ensure_collection_is_idempotent(self, vectors: VectorIndex, loaded: str) -> None:
        vectors.ensure_collection(loaded, SPACE)
        assert loaded in vectors.collections()
        assert vectors.count(loaded) == len(make_points())

    @pytest.mark.parametrize(
        "other",
        [
            VectorSpace(name="dense", dim=DIM + 1),
            VectorSpace(name="dense", dim=DIM, distance=Distance.DOT),
            VectorSpace(name="minilm", dim=DIM),
        ],
        ids=["dim", "distance", "name"],
    )
    def test_ensure_collection_conflicts_on_another_space(
        self, vectors: VectorIndex, collection: str, other: VectorSpace
    ) -> None:
        with pytest.raises(Conflict) as err:
            vectors.ensure_collection(collection, other)
        assert collection in str(err.value)

    def test_collections_and_drop(self, vectors: VectorIndex, collection: str) -> None:
        other = unique_collection()
        vectors.ensure_collection(other, SPACE)
        assert {collection, other} <= set(vectors.collections())
        vectors.drop_collection(other)
        assert other not in vectors.collections()
        assert collection in vectors.collections()
        vectors.drop_collection(other)  # missing is fine: the index is derived
        with pytest.raises(NotFound):
            vectors.count(other)

    def test_drop_then_recreate_with_another_space(self, vectors: VectorIndex, loaded: str) -> None:
        vectors.drop_collection(loaded)
        vectors.ensure_collection(loaded, VectorSpace(name="dense", dim=4))
        assert vectors.count(loaded) == 0
        vectors.upsert(loaded, [VectorPoint(id="x", vector=[1.0, 0.0, 0.0, 0.0])])
        assert hit_ids(vectors.search(loaded, [1.0, 0.0, 0.0, 0.0])) == ["x"]

    @pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden", "x" * 200])
    def test_bad_collection_name_is_refused(self, vectors: VectorIndex, name: str) -> None:
        with pytest.raises(InvalidRequest):
            vectors.ensure_collection(name, SPACE)

    def test_unknown_collection_is_not_found(self, vectors: VectorIndex) -> None:
        missing = unique_collection("missing")
        point = VectorPoint(id="a", vector=[0.5] * DIM)
        calls = [
            lambda: vectors.search(missing, [0.5] * DIM),
            lambda: vectors.search_batch(missing, [[0.5] * DIM]),
            lambda: vectors.upsert(missing, [point]),
            lambda: vectors.get(missing, ["a"]),
            lambda: vectors.count(missing),
            lambda: vectors.delete(missing, ["a"]),
            lambda: vectors.delete_by_filter(missing, SearchFilters(library="x")),
            lambda: list(vectors.scroll(missing)),
        ]
        for call in calls:
            with pytest.raises(NotFound) as err:
                call()
            assert missing in str(err.value)

    # -- writes -----------------------------------------------------------------------------------

    def test_upsert_is_idempotent(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        vectors.upsert(loaded, vector_fixture)
        assert vectors.count(loaded) == len(vector_fixture)
        changed = vector_fixture[4].model_copy(update={"payload": {**vector_fixture[4].payload, "status": "retconned"}})
        vectors.upsert(loaded, [changed])
        assert vectors.count(loaded) == len(vector_fixture)
        assert vectors.get(loaded, [changed.id])[0].payload["status"] == "retconned"

    def test_upsert_empty_is_a_no_op(self, vectors: VectorIndex, collection: str) -> None:
        assert vectors.upsert(collection, []) == 0
        assert vectors.count(collection) == 0

    def test_wrong_vector_size_is_invalid(self, vectors: VectorIndex, loaded: str) -> None:
        with pytest.raises(InvalidRequest) as err:
            vectors.upsert(loaded, [VectorPoint(id="short", vector=[0.1] * (DIM - 1))])
        assert str(DIM) in str(err.value)
        with pytest.raises(InvalidRequest):
            vectors.search(loaded, [0.1] * (DIM + 1))
        with pytest.raises(InvalidRequest):
            vectors.upsert(loaded, [VectorPoint(id="nan", vector=[float("nan")] * DIM)])
        assert vectors.get(loaded, ["short", "nan"]) == []

    def test_reserved_id_field_is_refused(self, vectors: VectorIndex, collection: str) -> None:
        with pytest.raises(InvalidRequest):
            vectors.upsert(collection, [VectorPoint(id="a", vector=[0.1] * DIM, payload={"_id": "b"})])

    def test_delete_by_ids(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        gone = [vector_fixture[0].id, vector_fixture[7].id]
        vectors.delete(loaded, [*gone, "never-existed"])
        assert vectors.count(loaded) == len(vector_fixture) - 2
        assert vectors.get(loaded, gone) == []
        assert not set(gone) & set(hit_ids(vectors.search(loaded, vector_fixture[0].vector, limit=20)))
        vectors.delete(loaded, [])
        assert vectors.count(loaded) == len(vector_fixture) - 2

    def test_delete_by_filter(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        doomed = SearchFilters(library="lib-a", status="superseded")
        expected_gone = expected_ids(vector_fixture, doomed)
        assert expected_gone
        vectors.delete_by_filter(loaded, doomed)
        assert vectors.count(loaded, doomed) == 0
        assert vectors.count(loaded) == len(vector_fixture) - len(expected_gone)
        assert vectors.count(loaded, SearchFilters(library="lib-a")) == len(
            expected_ids(vector_fixture, SearchFilters(library="lib-a"))
        ) - len(expected_gone)

    def test_delete_by_empty_filter_is_refused(self, vectors: VectorIndex, loaded: str) -> None:
        with pytest.raises(InvalidRequest):
            vectors.delete_by_filter(loaded, SearchFilters())
        assert vectors.count(loaded) == len(make_points())

    # -- reads ------------------------------------------------------------------------------------

    def test_nearest_is_itself(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        for point in vector_fixture[::17]:
            hits = vectors.search(loaded, point.vector, limit=5)
            assert hits[0].id == point.id
            assert hits[0].score == pytest.approx(1.0, abs=1e-4)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            assert hits[0].payload == point.payload

    def test_search_limit(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        assert len(vectors.search(loaded, vector_fixture[0].vector, limit=3)) == 3
        assert len(vectors.search(loaded, vector_fixture[0].vector, limit=1000)) == len(vector_fixture)
        with pytest.raises(InvalidRequest):
            vectors.search(loaded, vector_fixture[0].vector, limit=0)

    def test_search_on_empty_collection(self, vectors: VectorIndex, collection: str) -> None:
        assert vectors.search(collection, [0.3] * DIM) == []
        assert vectors.search_batch(collection, [[0.3] * DIM, [0.1] * DIM]) == [[], []]

    @pytest.mark.parametrize(
        "filters",
        [None, SearchFilters(library="lib-b"), SearchFilters(library=["lib-a", "lib-c"], status="active")],
        ids=["unfiltered", "one-field", "two-fields"],
    )
    def test_search_batch_answers_as_single_searches(
        self,
        vectors: VectorIndex,
        loaded: str,
        vector_fixture: list[VectorPoint],
        filters: SearchFilters | None,
    ) -> None:
        queries = [p.vector for p in vector_fixture[2::37]]
        assert len(queries) >= 4
        for limit in (7, len(vector_fixture)):
            singles = [vectors.search(loaded, q, filters=filters, limit=limit) for q in queries]
            batch = vectors.search_batch(loaded, queries, filters=filters, limit=limit)
            # same hits and payloads, in the order asked; the scores to float32 precision (qdrant-client
            # local mode scores a batch with another numpy product than a single query)
            assert [[(h.id, h.payload) for h in hits] for hits in batch] == [
                [(h.id, h.payload) for h in hits] for hits in singles
            ]
            for got, want in zip(batch, singles, strict=True):
                assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
        assert vectors.search_batch(loaded, [], filters=filters) == []

    def test_search_batch_refuses_what_search_refuses(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        good = vector_fixture[0].vector
        with pytest.raises(InvalidRequest):
            vectors.search_batch(loaded, [good], limit=0)
        with pytest.raises(InvalidRequest) as err:
            vectors.search_batch(loaded, [good, [0.1] * (DIM + 1)])
        assert str(DIM) in str(err.value)
        with pytest.raises(InvalidRequest):
            vectors.search_batch(loaded, [good, [float("nan")] * DIM])

    @pytest.mark.parametrize("field", FILTER_FIELDS)
    def test_every_filter_field(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint], field: str
    ) -> None:
        one = SearchFilters(**{field: FIELD_VALUES[field][1]})
        any_of = SearchFilters(**{field: FIELD_VALUES[field][:2]})
        for filters in (one, any_of):
            expected = expected_ids(vector_fixture, filters)
            assert expected
            assert len(expected) < len(vector_fixture) or filters is any_of  # two values may be all of them
            hits = vectors.search(loaded, vector_fixture[3].vector, filters=filters, limit=len(vector_fixture))
            assert set(hit_ids(hits)) == expected
            assert vectors.count(loaded, filters) == len(expected)
            assert {p.id for p in vectors.scroll(loaded, filters=filters, batch_size=50)} == expected

    def test_filters_combine_with_and(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        filters = SearchFilters(library=["lib-a", "lib-c"], classification="canon", campaign="camp-2")
        expected = expected_ids(vector_fixture, filters)
        assert expected
        hits = vectors.search(loaded, vector_fixture[0].vector, filters=filters, limit=len(vector_fixture))
        assert set(hit_ids(hits)) == expected
        assert vectors.count(loaded, SearchFilters(library="no-such-library")) == 0

    def test_filter_matches_a_list_value(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        last = vector_fixture[-1]
        assert last.payload["collection"] == ["col-1", "col-9"]
        only_nine = SearchFilters(collection="col-9")
        assert hit_ids(vectors.search(loaded, vector_fixture[0].vector, filters=only_nine)) == [last.id]
        assert last.id in {p.id for p in vectors.scroll(loaded, filters=SearchFilters(collection="col-1"))}

    def test_filtered_nearest_is_itself(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        for point in vector_fixture[1::29]:
            filters = SearchFilters(library=point.payload["library"], status=point.payload["status"])
            hits = vectors.search(loaded, point.vector, filters=filters, limit=3)
            assert hits[0].id == point.id
            assert all(filters.matches(h.payload) for h in hits)

    def test_scroll_returns_everything_once(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        seen = [p.id for p in vectors.scroll(loaded, batch_size=7)]
        assert len(seen) == len(vector_fixture)
        assert set(seen) == {p.id for p in vector_fixture}
        by_id = {p.id: p for p in vector_fixture}
        for point in vectors.scroll(loaded, batch_size=100):
            assert point.payload == by_id[point.id].payload
            assert len(point.vector) == DIM
        with pytest.raises(InvalidRequest):
            list(vectors.scroll(loaded, batch_size=0))

    def test_get_keeps_order_and_skips_missing(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        wanted = [vector_fixture[9].id, "missing", vector_fixture[2].id, vector_fixture[5].id]
        got = vectors.get(loaded, wanted)
        assert [p.id for p in got] == [vector_fixture[9].id, vector_fixture[2].id, vector_fixture[5].id]
        for point in got:
            original = next(p for p in vector_fixture if p.id == point.id)
            assert point.payload == original.payload
            # Cosine collections store unit vectors (Qdrant normalises on write): compare directions.
            assert np.allclose(unit(point.vector), unit(original.vector), atol=1e-5)
        assert vectors.get(loaded, []) == []

    def test_euclid_and_dot_scores_are_higher_is_better(self, vectors: VectorIndex) -> None:
        for distance in (Distance.EUCLID, Distance.DOT):
            name = unique_collection(distance.value)
            vectors.ensure_collection(name, VectorSpace(name="v", dim=2, distance=distance))
            vectors.upsert(
                name,
                [
                    VectorPoint(id="near", vector=[1.0, 1.0]),
                    VectorPoint(id="far", vector=[-3.0, -4.0]),
                ],
            )
            hits = vectors.search(name, [1.0, 1.1], limit=2)
            assert hit_ids(hits) == ["near", "far"]
            assert hits[0].score > hits[1].score
            if distance is Distance.EUCLID:
                assert hits[0].score == pytest.approx(-0.1, abs=1e-4)

    def test_health(self, vectors: VectorIndex) -> None:
        vectors.health()

    # -- lifecycle --------------------------------------------------------------------------------

    def test_pickles_before_use(self, vectors: VectorIndex) -> None:
        copy = pickle.loads(pickle.dumps(vectors))
        name = unique_collection()
        copy.ensure_collection(name, SPACE)
        assert name in copy.collections()
        copy.close()

    def test_pickles_after_use(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        payload = pickle.dumps(vectors)
        # One process opens a folder at a time (both embedded engines lock it), so the original lets go
        # first, as a Ray driver does once the workers own the index.
        vectors.close()
        copy = pickle.loads(payload)
        try:
            if self.persistent:
                assert copy.count(loaded) == len(vector_fixture)
                assert hit_ids(copy.search(loaded, vector_fixture[1].vector, limit=1)) == [vector_fixture[1].id]
            else:
                copy.health()
        finally:
            copy.close()

    def test_close_then_use_reopens(self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]) -> None:
        vectors.close()
        vectors.close()  # closing twice is harmless
        if self.persistent:
            assert vectors.count(loaded) == len(vector_fixture)
            assert vectors.get(loaded, [vector_fixture[3].id])[0].payload == vector_fixture[3].payload
            assert hit_ids(vectors.search(loaded, vector_fixture[3].vector, limit=1)) == [vector_fixture[3].id]
            vectors.upsert(loaded, [VectorPoint(id="after-reopen", vector=vector_fixture[0].vector)])
            assert vectors.count(loaded) == len(vector_fixture) + 1
        else:
            vectors.health()

    def test_errors_are_store_errors_and_pickle(self, vectors: VectorIndex) -> None:
        with pytest.raises(StoreError) as err:
            vectors.count(unique_collection("missing"))
        again = pickle.loads(pickle.dumps(err.value))
        assert type(again) is type(err.value) and str(again) == str(err.value)

    def test_search_is_fast_enough_for_the_fixture(
        self, vectors: VectorIndex, loaded: str, vector_fixture: list[VectorPoint]
    ) -> None:
        # A smoke bound, not a benchmark (benchmarks/vector_search.py measures): catches a backend
        # that, say, reopens its engine on every call.
        started = time.perf_counter()
        for point in vector_fixture[:20]:
            vectors.search(loaded, point.vector, filters=SearchFilters(library="lib-b"), limit=10)
        assert time.perf_counter() - started < 5.0
