"""ust's CUDA merge kernel for two canonical CSR / CSC operands (add, subtract, multiply):
exact buffers against SciPy's compiled kernels on the host, every value dtype, both index
dtypes, non-finite values, explicit zeros and cancellations, sizes past one scan block, a
skewed row, and the cupyx fast path (the same result, one planner decision)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.api.algebra as ops
from ust.convert import asarray

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

SCIPY_OP = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a.multiply(b),
}
VALUE_DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int8, np.int32, np.int64, np.uint16]


def _pair(
    shape: tuple[int, int], density: float, dtype: Any, seed: int, kind: str = "csr"
) -> tuple[Any, Any]:
    """Two canonical SciPy matrices sharing some positions (so union and intersection both work)."""
    rng = np.random.default_rng(seed)
    a = sp.random_array(shape, density=density, format=kind, rng=rng, dtype=np.float64)
    b = sp.random_array(shape, density=density, format=kind, rng=rng, dtype=np.float64)
    b = (b + a.multiply(rng.random(shape) < 0.5)).asformat(kind)  # overlap
    out = []
    for m in (a, b):
        m = m.asformat(kind)
        m.data = (
            (10 * m.data - 3).astype(dtype)
            if np.dtype(dtype).kind != "c"
            else (m.data + 1j * m.data).astype(dtype)
        )
        m.sum_duplicates()
        out.append(m)
    return out[0], out[1]


def _exact(out: Any, ref: Any) -> None:
    """``out`` (a GPU Tensor) holds exactly SciPy's buffers (``ref``, its zeros dropped)."""
    ref = ref.copy()
    ref.sum_duplicates()
    assert out.device.startswith("cuda")
    assert np.dtype(out.dtype) == ref.dtype
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)


def _gpu(m: Any) -> Any:
    cls = csp.csr_matrix if m.format == "csr" else csp.csc_matrix
    g = cls((cp.asarray(m.data), cp.asarray(m.indices), cp.asarray(m.indptr)), shape=m.shape)
    assert g.has_canonical_format
    return g


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("kind", ["csr", "csc"])
@pytest.mark.parametrize("op", list(SCIPY_OP))
def test_exact_buffers_every_dtype(op: str, kind: str, dtype: Any) -> None:
    a, b = _pair((37, 53), 0.2, dtype, 1, kind)
    ref = SCIPY_OP[op](a, b)
    ta, tb = asarray(a).to("cuda"), asarray(b).to("cuda")
    assert ops.plan(op, ta, tb).route == "merge-kernel"
    _exact(getattr(ops, op)(ta, tb), ref)
    if np.dtype(dtype).kind in "fc":  # cupyx holds float and complex values only
        _exact(getattr(ops, op)(_gpu(a), _gpu(b)), ref)  # the cupyx fast path


@pytest.mark.parametrize("op", list(SCIPY_OP))
def test_nonfinite_explicit_zeros_and_cancellations(op: str) -> None:
    a = sp.csr_array(np.array([[np.nan, 1.0, 0.0, 2.0], [np.inf, 0.0, 5.0, 0.0], [0.0, -np.inf, 3.0, 0.0]]))
    b = sp.csr_array(np.array([[0.0, 2.0, 4.0, -2.0], [0.0, 3.0, 5.0, 0.0], [1.0, np.inf, -3.0, 0.0]]))
    a.data[a.data == 3.0] = 0.0  # an explicit zero: dropped unless its partner makes it nonzero
    a = sp.csr_array((a.data, a.indices, a.indptr), shape=a.shape)
    ref = sp.csr_array(SCIPY_OP[op](a, b))
    out = getattr(ops, op)(_gpu(a), _gpu(b))
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)  # NaN where SciPy has NaN
    cpu = getattr(ops, op)(a, b)  # the CPU route gives the same buffers
    np.testing.assert_array_equal(cpu.values, cp.asnumpy(out.values))


def test_subtract_self_is_empty_and_int64_indices() -> None:
    a, b = _pair((64, 64), 0.1, np.float64, 3)
    g = _gpu(a)
    assert ops.subtract(g, g).nse == 0
    a64 = asarray(a, index_dtype=np.int64).to("cuda")
    b64 = asarray(b, index_dtype=np.int64).to("cuda")
    out = ops.add(a64, b64)
    assert out.index_dtype == np.int64
    _exact(out, a + b)


def test_mixed_value_dtypes_take_numpys_result_type() -> None:
    a, _ = _pair((30, 30), 0.2, np.float32, 4)
    _, b = _pair((30, 30), 0.2, np.float64, 5)
    out = ops.add(_gpu(a), _gpu(b))
    assert out.dtype == np.float64
    _exact(out, a + b)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (700_000, 40)])
def test_empty_and_many_row_blocks(shape: tuple[int, int]) -> None:
    """Zero rows or columns, and 700 000 rows: 2 735 row blocks, three rounds of the one-block scan."""
    a, b = _pair(shape, 0.05 if shape[0] > 1000 else 0.5, np.float64, 6)
    for op in SCIPY_OP:
        _exact(getattr(ops, op)(_gpu(a), _gpu(b)), SCIPY_OP[op](a, b))


def test_a_skewed_row_and_an_empty_operand() -> None:
    n = 20_000
    rng = np.random.default_rng(7)
    dense_row = sp.csr_array((rng.random(n), (np.zeros(n, dtype=np.int64), np.arange(n))), shape=(50, n))
    other = sp.random_array((50, n), density=0.01, format="csr", rng=rng)
    for op in SCIPY_OP:
        _exact(getattr(ops, op)(_gpu(dense_row), _gpu(other)), SCIPY_OP[op](dense_row, other))
    empty = sp.csr_array((50, n))
    _exact(ops.add(_gpu(empty), _gpu(other)), other + empty)
    assert ops.multiply(_gpu(empty), _gpu(other)).nse == 0


def test_entries_ending_before_the_arrays() -> None:
    """indices / data longer than ``indptr[-1]``: the tail is not part of the matrix."""
    a, b = _pair((20, 20), 0.3, np.float64, 8)
    g = csp.csr_matrix(
        (cp.asarray(np.concatenate([a.data, [7.0]])), cp.asarray(np.concatenate([a.indices, [3]]).astype(np.int32)),
         cp.asarray(a.indptr)), shape=a.shape,
    )  # fmt: skip
    g._has_canonical_format = True
    _exact(ops.add(g, _gpu(b)), a + b)


def test_cupyx_route_is_still_offered_for_add_and_agrees() -> None:
    a, b = _pair((40, 40), 0.2, np.float64, 9)
    ta, tb = asarray(a).to("cuda"), asarray(b).to("cuda")
    lib = ops.add(ta, tb, route="cupyx")
    np.testing.assert_array_equal(cp.asnumpy(lib.todense()), (a + b).toarray())
    with pytest.raises(ust.UnsupportedError):
        ops.multiply(ta, tb, route="cupyx")  # CuPy's product drops nan * 0: not a route here


def test_caller_buffers_unchanged() -> None:
    a, b = _pair((50, 50), 0.2, np.float64, 10)
    ga, gb = _gpu(a), _gpu(b)
    before = [cp.asnumpy(x).copy() for g in (ga, gb) for x in (g.indptr, g.indices, g.data)]
    for op in SCIPY_OP:
        getattr(ops, op)(ga, gb)
    after = [cp.asnumpy(x) for g in (ga, gb) for x in (g.indptr, g.indices, g.data)]
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)
