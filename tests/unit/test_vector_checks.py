"""The vector checks both Qdrant backends run before a request leaves the process (stores/vector/filters.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from schemas.errors import InvalidRequest
from stores.vector.base import VectorSpace
from stores.vector.filters import check_vector

SPACE = VectorSpace(dim=4)


def _check(vector: object) -> list[float]:
    return check_vector("s", "c", SPACE, vector, what="point 'p'")  # type: ignore[arg-type]


def test_a_vector_comes_back_as_python_floats() -> None:
    assert _check([1, 2.5, -3, 0]) == [1.0, 2.5, -3.0, 0.0]
    assert all(type(x) is float for x in _check([1, 2, 3, 4]))
    as_f32 = np.array([0.1, -0.2, 1e-30, 3.0], dtype=np.float32)
    # an array converts to the floats float() gives each component
    assert _check(as_f32) == [float(x) for x in as_f32]
    assert _check(as_f32.astype(np.float64)) == [float(x) for x in as_f32]
    assert _check((1.0, 2.0, 3.0, 4.0)) == [1.0, 2.0, 3.0, 4.0]
    assert _check(np.arange(4)) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "vector",
    [
        [math.nan, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, math.inf],
        [-math.inf, math.inf, 0.0, 0.0],  # the sum is NaN
        [1e308, 1e308, math.nan, 0.0],
        np.array([0.0, np.nan, 0.0, 0.0], dtype=np.float32),
    ],
)
def test_non_finite_components_are_refused(vector: object) -> None:
    with pytest.raises(InvalidRequest, match="NaN or infinite"):
        _check(vector)


def test_finite_components_whose_sum_overflows_are_accepted() -> None:
    assert _check([1e308, 1e308, 1e308, -1e308]) == [1e308, 1e308, 1e308, -1e308]


@pytest.mark.parametrize("vector", [[0.0] * 3, [0.0] * 5, np.zeros(5, dtype=np.float32)])
def test_a_vector_of_another_size_is_refused(vector: object) -> None:
    with pytest.raises(InvalidRequest, match="size"):
        _check(vector)
