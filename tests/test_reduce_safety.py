"""Reductions of hypersparse tensors: ``axis=None`` in O(nnz) at any shape; an axis result
that no device can hold is a ShapeError naming the bytes (the rule of
:func:`ust.tensor.limits.check_dense`), before any work, never a raw MemoryError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.test_convert_safety import HYPERSPARSE_2D, N40, _hyper_coo, _MiB, _raises_small, _traced
from ust.convert import asarray
from ust.runtime.errors import ShapeError

OPS = ["sum", "max", "min"]


def _ref(A: Any, op: str, axis: int | None) -> Any:
    r = getattr(A, op)(axis=axis)
    return r.toarray() if hasattr(r, "toarray") else r


@pytest.mark.parametrize("axis", [0, 1, -1, (0,)])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_axis_result_of_2_40_entries_is_a_shape_error(fmt: str, op: str, axis: Any) -> None:
    """The issue: ``t.sum(axis=0)`` of ten entries of a 2**40 x 2**40 COO / DCSR raised a raw
    8 TiB MemoryError."""
    t = asarray(_hyper_coo(), fmt)
    info = _raises_small(ShapeError, lambda: getattr(t, op)(axis=axis), "bytes")
    msg = str(info.value)
    assert "8796093022208 bytes" in msg and "axis=None" in msg
    _raises_small(ShapeError, lambda: getattr(ust.ops, op)(t, axis=axis), "bytes")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_scalar_reduction_of_2_40_is_o_nnz(fmt: str, op: str) -> None:
    A = _hyper_coo()  # one duplicate pair: summed before max / min
    t = asarray(A, fmt)
    got, peak, secs = _traced(lambda: getattr(t, op)())
    assert peak < 4 * _MiB, peak
    assert secs < 5.0
    assert got == _ref(A, op, None)
    assert getattr(ust.ops, op)(t, axis=(0, 1)) == got


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("fmt", ["DCSR", "DCSC"])
def test_more_than_2_63_positions_reduce_along_the_long_axis(fmt: str, op: str) -> None:
    """2**60 x 16: no 63-bit key over all positions, yet the axis-0 result is 16 values."""
    n = 2**60
    r = np.array([5, n // 2, 5, 7, n - 1, 0, n // 3])
    c = np.array([3, 1, 3, 15, 0, 4, 1])
    A = sp.coo_array((np.array([1.0, -2.0, 3.0, 4.0, -5.0, 6.0, -7.0]), (r, c)), shape=(n, 16))
    t = asarray(A, fmt)
    np.testing.assert_array_equal(getattr(t, op)(axis=0), _ref(A, op, 0))
    assert getattr(t, op)() == _ref(A, op, None)
    _raises_small(ShapeError, lambda: getattr(t, op)(axis=1), "bytes")


def test_small_results_still_compare_to_scipy() -> None:
    A = _hyper_coo(2**20)
    for fmt in HYPERSPARSE_2D:
        t = asarray(A, fmt)
        for op in OPS:
            for axis in (None, 0, 1):
                np.testing.assert_array_equal(getattr(t, op)(axis=axis), _ref(A, op, axis))


def test_unrepresentable_axis_result_of_an_empty_tensor() -> None:
    """sum over the empty axis of a (0, 2**62) tensor: 2**62 zeros NumPy cannot represent."""
    t = asarray(sp.coo_array((0, 2**62), dtype=np.float64), "DCSR")
    _raises_small(ShapeError, lambda: t.sum(axis=0), "cannot be represented")
    assert t.sum(axis=1).shape == (0,)
    assert t.sum() == 0.0


def test_caller_arrays_unmodified_by_reductions() -> None:
    A = _hyper_coo()
    coords, data = [c.copy() for c in A.coords], A.data.copy()
    t = asarray(A, "COO")
    for op in OPS:
        getattr(t, op)()
    for a, b in zip(A.coords, coords):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(A.data, data)
    assert t.shape == (N40, N40)


def test_tall_hypersparse_axis_sums_take_the_array_program() -> None:
    """SciPy's axis sum multiplies by a vector of ones as long as the matrix: 8 TiB at 2^40 rows."""
    rows, cols = np.arange(10, dtype=np.int64) * 2**30, np.arange(10, dtype=np.int64) % 16
    h = sp.coo_array((np.arange(1.0, 11), (rows, cols)), shape=(2**40, 16))
    t = ust.asarray(h, format="COO")
    assert "route: array-program" in ust.explain("sum", t)
    np.testing.assert_array_equal(t.sum(axis=0), np.bincount(cols, weights=np.arange(1.0, 11), minlength=16))
    small = ust.asarray(sp.random_array((50, 40), density=0.1, random_state=0, format="coo"))
    assert "route: scipy" in ust.explain("sum", small)
