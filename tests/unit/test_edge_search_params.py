"""How a filtered qdrant-edge search is run: exact, ACORN or plain HNSW by the share the filter keeps.

ACORN cost 28 ms on 100,000 memory records under a filter keeping 8 % (exact: 4.4 ms), so the index
picks per search from the payload index's estimate; the results must stay those of an exact search.
The fixtures that test ACORN and HNSW use one condition, so they set ``exact_below_alone`` as low as
``exact_below`` (one condition is searched exactly up to ``exact_below_alone`` under ``WIDE_EF_BELOW``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from schemas.search import SearchFilters
from stores.vector import edge
from stores.vector.base import VectorPoint, VectorSpace
from stores.vector.edge import QdrantEdgeVectorIndex
from stores.vector.filters import build_filter

DIM = 16


@pytest.fixture
def index(tmp_path: Path) -> Iterator[QdrantEdgeVectorIndex]:
    """600 points: 30 in library ``small`` (5 %), 90 in ``mid`` (15 %), 480 in ``big`` (80 %)."""
    idx = QdrantEdgeVectorIndex(
        tmp_path / "edge", optimize_every=None, exact_below=50, exact_below_alone=50, acorn_below=0.2
    )
    idx.ensure_collection("c", VectorSpace(dim=DIM))
    rng = np.random.default_rng(3)
    libraries = ["small"] * 30 + ["mid"] * 90 + ["big"] * 480
    idx.upsert(
        "c",
        [
            VectorPoint(id=f"p{k}", vector=rng.normal(size=DIM).tolist(), payload={"library": lib})
            for k, lib in enumerate(libraries)
        ],
    )
    yield idx
    idx.close()


def _params(index: QdrantEdgeVectorIndex, library: str | None) -> qe.SearchParams:
    col = index._collection("c")
    edge_filter = build_filter(qe, SearchFilters(library=[library]) if library else None)
    return index._search_params(qe, col, edge_filter)


def test_few_points_are_searched_exactly(index: QdrantEdgeVectorIndex) -> None:
    assert _params(index, "small").exact is True


def test_a_selective_filter_uses_acorn(index: QdrantEdgeVectorIndex) -> None:
    params = _params(index, "mid")
    assert not params.exact
    assert params.acorn is not None and params.acorn.enable


def test_a_wide_filter_searches_hnsw_with_ef_raised(
    index: QdrantEdgeVectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = _params(index, "big")
    assert not params.exact and (params.acorn is None or not params.acorn.enable)
    assert params.hnsw_ef == 128  # 80 %: as configured
    assert _params(index, None).hnsw_ef == 128  # unfiltered: as configured
    col = index._collection("c")
    index.acorn_below = 0.1
    monkeypatch.setattr(edge, "WIDE_EF_BELOW", 0.1)  # the capped raise, on a filter keeping ~20 %
    share_20 = index._search_params(qe, col, build_filter(qe, SearchFilters(library=["small", "mid"])))
    assert not share_20.exact and share_20.acorn is None
    assert share_20.hnsw_ef == 4 * 128  # 128 / 0.2, capped at 4x


def test_a_filter_keeping_a_tenth_to_a_fifth_searches_hnsw_at_the_widest_ef(tmp_path: Path) -> None:
    """ACORN cost 10-12 ms on 100,000 memory records under a filter keeping 18 %, plain HNSW at ef 1024
    7 ms for the same top 10; ACORN stays below a tenth (the default ``acorn_below``)."""
    idx = QdrantEdgeVectorIndex(tmp_path / "edge", optimize_every=None, exact_below=50, exact_below_alone=50)
    try:
        idx.ensure_collection("c", VectorSpace(dim=DIM))
        rng = np.random.default_rng(5)
        libraries = ["tiny"] * 55 + ["mid"] * 90 + ["big"] * 455  # 9 %, 15 %, 76 %
        idx.upsert(
            "c",
            [
                VectorPoint(id=f"p{k}", vector=rng.normal(size=DIM).tolist(), payload={"library": lib})
                for k, lib in enumerate(libraries)
            ],
        )
        mid = _params(idx, "mid")
        assert not mid.exact and mid.acorn is None and mid.hnsw_ef == 8 * 128
        tiny = _params(idx, "tiny")
        assert not tiny.exact and tiny.acorn is not None and tiny.acorn.enable
    finally:
        idx.close()


def test_each_mode_finds_the_exact_top_k(index: QdrantEdgeVectorIndex) -> None:
    points = {p.id: (np.array(p.vector), p.payload["library"]) for p in index.scroll("c")}
    rng = np.random.default_rng(4)
    for library in ("small", "mid", "big"):
        query = rng.normal(size=DIM)
        scores = {
            pid: float(v @ query / np.linalg.norm(v) / np.linalg.norm(query))
            for pid, (v, lib) in points.items()
            if lib == library
        }
        truth = sorted(scores, key=scores.__getitem__, reverse=True)[:10]
        got = index.search("c", query.tolist(), filters=SearchFilters(library=[library]), limit=10)
        assert [h.id for h in got] == truth


def test_a_batch_is_searched_as_its_single_searches_in_every_mode(tmp_path: Path) -> None:
    """``search_batch`` plans its queries together (qdrant-edge ``query_batch``) under the parameters
    one filter estimate picks; on an HNSW index each mode (exact, ACORN, HNSW at 8x ef, as configured,
    unfiltered) answers what the single searches answer: same ids, same scores, same payloads."""
    idx = QdrantEdgeVectorIndex(
        tmp_path / "hnsw",
        optimize_every=None,
        exact_below=50,
        exact_below_alone=50,
        indexing_threshold_kb=1,
        full_scan_threshold_kb=1,
    )
    try:
        idx.ensure_collection("c", VectorSpace(dim=DIM))
        rng = np.random.default_rng(6)
        libraries = ["tiny"] * 40 + ["few"] * 200 + ["mid"] * 400 + ["big"] * 1760  # 2 %, 8 %, 17 %, 73 %
        idx.upsert(
            "c",
            [
                VectorPoint(id=f"p{k}", vector=rng.normal(size=DIM).tolist(), payload={"library": lib})
                for k, lib in enumerate(libraries)
            ],
        )
        assert idx.optimize("c")
        modes = {lib: _params(idx, lib) for lib in ("tiny", "few", "mid", "big")}
        assert modes["tiny"].exact and modes["few"].acorn is not None and modes["mid"].hnsw_ef == 8 * 128
        queries = rng.normal(size=(6, DIM)).tolist()
        for library in (None, "tiny", "few", "mid", "big"):
            filters = SearchFilters(library=[library]) if library else None
            singles = [idx.search("c", q, filters=filters, limit=25) for q in queries]
            assert idx.search_batch("c", queries, filters=filters, limit=25) == singles
    finally:
        idx.close()


def test_one_condition_keeping_under_a_fifth_is_searched_exactly_up_to_its_own_bound(tmp_path: Path) -> None:
    """A recall's lineage keys are one condition: its exact search walks their matches alone (lineages of
    12,001-19,001 of 100,000 memory records: 4.9-6.6 ms of CPU, against 22.7-26.6 ms at ef 1024), so such a
    filter is exact up to ``exact_below_alone`` where HNSW would need 8x ef or ACORN; a second condition,
    or a share of a fifth or more, keeps the other modes."""
    idx = QdrantEdgeVectorIndex(tmp_path / "edge", optimize_every=None, exact_below=50, exact_below_alone=200)
    try:
        idx.ensure_collection("c", VectorSpace(dim=DIM))
        rng = np.random.default_rng(7)
        libraries = ["tiny"] * 55 + ["mid"] * 90 + ["wide"] * 150 + ["big"] * 305  # 9 %, 15 %, 25 %, 51 %
        idx.upsert(
            "c",
            [
                VectorPoint(
                    id=f"p{k}",
                    vector=rng.normal(size=DIM).tolist(),
                    payload={"library": lib, "classification": "canon" if k % 2 else "lore"},
                )
                for k, lib in enumerate(libraries)
            ],
        )
        assert _params(idx, "tiny").exact and _params(idx, "mid").exact  # ACORN and 8x ef before
        wide = _params(idx, "wide")  # a fifth or more: HNSW at a raised ef, as before
        assert not wide.exact and wide.hnsw_ef == 4 * 128
        col = idx._collection("c")
        two_filter = build_filter(qe, SearchFilters(library=["tiny", "mid"], classification=["canon"]))
        passing = col.shard.count(qe.CountRequest(exact=False, filter=two_filter))
        assert 50 < passing <= 200 and passing / 600 < 0.2
        assert not idx._search_params(qe, col, two_filter).exact  # two conditions: exact_below holds
    finally:
        idx.close()
