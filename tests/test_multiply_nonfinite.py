"""Elementwise arithmetic of two sparse operands holding NaN / +inf / -inf, every format against SciPy.

SciPy's rule for ``A.multiply(B)`` (NumPy's for dense ``A * B``): an entry stored in one operand
only meets the other's implicit zero, so a non-finite value there gives ``v * 0`` (NaN), stored;
a finite one gives 0, dropped.  Entries stored in both give ``a * b``, kept when nonzero (NaN
kept).  Every format and route must give SciPy's values and SciPy's stored pattern.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust.api.algebra as ops
from tests.algebra_cases import snapshot
from ust.convert import asarray

NAN, INF = np.nan, np.inf

#: formats without explicit zeros in an elementwise result: the stored pattern is SciPy's exactly
EXACT = [
    "CSR",
    "CSC",
    "COO",
    "DCSR",
    "(i, j) -> (i : compressed, j : compressed)",
    "(i, j) -> (j : compressed, i : compressed)",
]
BLOCKED = ["BSR[2,2]", "BSC[2,2]"]  # blocks keep the zeros inside a block, as SciPy's BSR does
FORMATS = [*EXACT, *BLOCKED, "DIA"]
DTYPES = [np.float64, np.complex128]


def fixed_pair(dtype) -> tuple[np.ndarray, np.ndarray]:
    """6x4 dense A, B: non-finite values in A-only, B-only and both-stored positions, finite
    one-sided entries, a product that underflows to 0, an empty row."""
    A = np.zeros((6, 4))
    B = np.zeros((6, 4))
    A[0, 0], A[0, 1], A[0, 3] = NAN, INF, -INF  # A only (B[0, :] empty)
    B[1, 0], B[1, 2], B[1, 3] = NAN, INF, -INF  # B only
    A[1, 1] = 5.0  # finite, A only: dropped
    A[2, 0], B[2, 0] = NAN, 2.0  # both stored
    A[2, 1], B[2, 1] = INF, -3.0
    A[2, 2], B[2, 2] = INF, INF
    A[2, 3], B[2, 3] = -INF, NAN
    A[3, 0], B[3, 0] = 1e-200, 1e-200  # both finite, product underflows to 0: dropped
    A[3, 1], B[3, 1] = 2.0, 4.0
    B[3, 2] = 7.0  # finite, B only: dropped
    # row 4 empty in both; row 5: a 2x2 block holding one NaN beside zeros
    A[5, 3] = NAN
    B[4, 2] = 1.5
    if np.dtype(dtype).kind == "c":
        A = A.astype(dtype)
        B = B.astype(dtype)
        A[0, 2] = complex(1.0, INF)  # A only: a non-finite imaginary part
        B[4, 0] = complex(NAN, 0.0)  # B only
        A[3, 3], B[3, 3] = complex(INF, 1.0), complex(0.0, 2.0)  # both
        A[4, 3], B[4, 3] = complex(1.0, 1.0), complex(2.0, -1.0)
    return A.astype(dtype), B.astype(dtype)


def random_pair(seed: int, dtype, shape=(12, 10), density=0.35) -> tuple[np.ndarray, np.ndarray]:
    """Random A, B with NaN / +inf / -inf sprinkled over about a fifth of the stored entries."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        mask = rng.random(shape) < density
        vals = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            vals = vals + 1j * rng.standard_normal(shape)
        vals = vals.astype(dtype)
        special = mask & (rng.random(shape) < 0.2)
        picks = rng.choice(np.array([NAN, INF, -INF]), size=shape)
        if np.dtype(dtype).kind == "c":
            # the non-finite part in the real or the imaginary part
            imag = rng.random(shape) < 0.5
            vals.imag[special & imag] = picks[special & imag]  # the other part stays finite
            vals.real[special & ~imag] = picks[special & ~imag]
        else:
            vals[special] = picks[special]
        out.append(np.where(mask, vals, 0).astype(dtype))
    return out[0], out[1]


def unchanged(t, snap) -> bool:
    """``t``'s buffers equal the snapshot (NaN equal to NaN: the inputs hold some)."""
    from ust.runtime import xp as _xp

    now = [_xp.to_host(a) for a in t.buffers().values()]
    return len(now) == len(snap) and all(
        np.array_equal(x, y, equal_nan=x.dtype.kind in "fc") for x, y in zip(now, snap)
    )


def assert_same(actual, desired, msg):
    """Equal, NaN where NaN and the same infinities; complex values part by part, finite parts
    to a few ulps (NumPy's complex product and SciPy's kernel may round the last bit apart)."""
    if np.iscomplexobj(desired):
        for part in ("real", "imag"):
            x, y = getattr(actual, part), getattr(desired, part)
            np.testing.assert_array_equal(np.isfinite(x), np.isfinite(y), err_msg=msg)
            np.testing.assert_allclose(x, y, rtol=1e-14, atol=1e-14, err_msg=msg)
    else:
        np.testing.assert_array_equal(actual, desired, err_msg=msg)


def routes(ta, tb, op="multiply"):
    """The planner's choice and the array program (every format's generic route)."""
    d = ops.plan(op, ta, tb)
    return sorted({d.route, "array-program"})


def check(op, A, B, name):
    a, b = sp.csr_array(A), sp.csr_array(B)
    ref = {"multiply": lambda: a.multiply(b), "add": lambda: a + b, "subtract": lambda: a - b}[op]()
    ref = sp.csr_array(ref)
    ref.eliminate_zeros()  # SciPy's result holds none already; the reference pattern for sure
    ta, tb = asarray(a, name), asarray(b, name)
    sa, sb = snapshot(ta), snapshot(tb)
    for route in routes(ta, tb, op):
        with np.errstate(invalid="ignore"):
            out = getattr(ops, op)(ta, tb, route=route)
        assert out.format == ta.format
        assert out.dtype == ref.dtype
        dense = out.todense()
        assert_same(dense, ref.toarray(), f"{op} {name} route={route}")
        s = out.to_scipy()
        if name in EXACT:
            assert s.nnz == ref.nnz, (op, name, route)
            assert np.all(s.data != 0)  # no explicit zero stored (NaN != 0)
        elif name == "BSR[2,2]":
            blk = {"multiply": lambda x, y: x.multiply(y), "add": lambda x, y: x + y,
                   "subtract": lambda x, y: x - y}[op]  # fmt: skip
            with np.errstate(invalid="ignore"):
                ref_bsr = blk(sp.bsr_array(A, blocksize=(2, 2)), sp.bsr_array(B, blocksize=(2, 2)))
            assert s.nnz == ref_bsr.nnz, (op, name, route)
        if name == "COO":  # sorted and unique, as every result of the route
            c = s.tocoo()
            lin = c.coords[0].astype(np.int64) * A.shape[1] + c.coords[1]
            assert np.all(np.diff(lin) > 0)
    assert unchanged(ta, sa) and unchanged(tb, sb)
    return ref


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_multiply_nonfinite_one_sided_and_both(name, dtype):
    A, B = fixed_pair(dtype)
    ref = check("multiply", A, B, name)
    # the case is the one it claims to be: NaN where a non-finite value met an implicit zero
    r = ref.toarray()
    for i, j in [(0, 0), (0, 1), (0, 3), (1, 0), (1, 2), (1, 3), (5, 3)]:
        assert np.isnan(r[i, j])
    assert r[1, 1] == 0 and r[3, 2] == 0 and r[3, 0] == 0
    if np.dtype(dtype).kind == "f":
        assert r[2, 2] == INF and r[2, 1] == -INF


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("seed", range(4))
def test_multiply_nonfinite_random(seed, name, dtype):
    A, B = random_pair(seed, dtype)
    assert not np.isfinite(A).all() and not np.isfinite(B).all()
    check("multiply", A, B, name)


@pytest.mark.parametrize("name", ["COO", "DCSR", "CSR", "DIA"])
def test_multiply_nonfinite_against_an_empty_operand(name):
    A, B = fixed_pair(np.float64)
    ref = check("multiply", np.zeros_like(A), B, name)
    assert ref.nnz == np.count_nonzero(~np.isfinite(B))  # B's non-finite values, nothing else
    check("multiply", A, np.zeros_like(B), name)


@pytest.mark.parametrize("name", ["COO", "DCSR", "CSR"])
def test_multiply_mixed_dtypes(name):
    A, B = fixed_pair(np.float64)
    check("multiply", A, B.astype(np.complex128), name)
    check("multiply", A.astype(np.float32), B, name)
    # an integer operand cannot hold NaN; the float one's one-sided values still give NaN
    check("multiply", np.where(np.isfinite(A), A, 3).astype(np.int64), B, name)


@pytest.mark.parametrize("name", ["COO", "DCSR", "CSC"])
def test_multiply_finite_values_whose_sum_overflows(name):
    # every value finite, their sum not: the result is the plain intersection
    A = np.zeros((4, 4))
    B = np.zeros((4, 4))
    A[0, :] = 1.5e308
    A[1, 1] = 0.5
    B[1, :] = -1.7e308
    B[0, 2] = 0.5
    ref = check("multiply", A, B, name)
    assert ref.nnz == 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("op", ["add", "subtract"])
def test_add_subtract_nonfinite(op, name, dtype):
    A, B = fixed_pair(dtype)
    check(op, A, B, name)
    A, B = random_pair(7, dtype)
    check(op, A, B, name)


@pytest.mark.parametrize("name", ["COO", "DCSR", "CSR", "CSC"])
def test_multiply_by_dense_or_scalar_keeps_the_structure(name):
    # a dense operand or a scalar meets only the stored entries (SciPy's multiply does the same)
    A, B = fixed_pair(np.float64)
    a = sp.csr_array(A)
    ta = asarray(a, name)
    with np.errstate(invalid="ignore"):
        ref = a.multiply(B)
        out = ops.multiply(ta, B)
    np.testing.assert_array_equal(out.todense(), np.asarray(sp.csr_array(ref).toarray()))
    assert out.format == ta.format and out.to_scipy().nnz == ta.to_scipy().nnz
    out = ops.multiply(ta, 3.0)
    np.testing.assert_array_equal(out.todense(), (a * 3.0).toarray())
    assert out.to_scipy().nnz == ta.to_scipy().nnz
