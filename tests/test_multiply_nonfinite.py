"""Elementwise arithmetic of two sparse operands holding NaN / +inf / -inf, every format against SciPy.

SciPy's rule for ``A.multiply(B)`` (NumPy's for dense ``A * B``): an entry stored in one operand
only meets the other's implicit zero, so a non-finite value there gives ``v * 0`` (NaN), stored;
a finite one gives 0, dropped.  Entries stored in both give ``a * b``, kept when nonzero (NaN
kept).  Every format and route must give SciPy's values and SciPy's stored pattern: the
planner's choice, the array program and the tensor-algebra compiler (``route="compiled"``).
Broadcast products (``t.multiply`` of a matrix and a sparse row or column) follow SciPy, which
keeps the NaN of the full-shape operand only (see ``ust.api.surface._joined``).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust.api.algebra as ops
from tests.algebra_cases import snapshot
from ust.convert import asarray
from ust.plan.planner import c_compiler_available

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


def check(op, A, B, name, route_list=None, name_b=None):
    """``op`` of A and B (in format ``name``; B in ``name_b`` where given) on ``route_list``
    (default :func:`routes`) against SciPy: values, dtype, stored pattern, inputs unchanged."""
    a, b = sp.csr_array(A), sp.csr_array(B)
    ref = {"multiply": lambda: a.multiply(b), "add": lambda: a + b, "subtract": lambda: a - b}[op]()
    ref = sp.csr_array(ref)
    ref.eliminate_zeros()  # SciPy's result holds none already; the reference pattern for sure
    ta, tb = asarray(a, name), asarray(b, name_b or name)
    sa, sb = snapshot(ta), snapshot(tb)
    for route in route_list or routes(ta, tb, op):
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


# ----------------------------------------------------------------------------- the compiled route

needs_cc = pytest.mark.skipif(not c_compiler_available(), reason="the compiled route needs a C compiler")
USER = "(i, j) -> (j : compressed, i : compressed)"
COMPILED = ["CSR", "COO", USER, "DCSR", "BSR[2,2]", "DIA"]


@needs_cc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", COMPILED)
def test_multiply_nonfinite_compiled_route(name, dtype):
    # route="compiled" (the tensor-algebra compiler's A(i,j) * B(i,j), an intersection) gives
    # SciPy's result too: NaN where a NaN / inf stored in one operand only meets an implicit 0
    A, B = fixed_pair(dtype)
    ta = asarray(sp.csr_array(A), name)
    d = ops.plan("multiply", ta, ta)
    assert "compiled" in {r.route for r in d.alternatives} | {d.route}  # a candidate the planner lists
    check("multiply", A, B, name, ["compiled"])  # A-only, B-only and both-stored positions
    check("multiply", np.zeros_like(A), B, name, ["compiled"])  # B's non-finite values only
    check("multiply", A, np.zeros_like(B), name, ["compiled"])
    for seed in range(3):
        check("multiply", *random_pair(seed, dtype), name, ["compiled"])


@needs_cc
@pytest.mark.parametrize(("name", "name_b"), [("CSR", "COO"), ("COO", USER), ("DCSR", "CSC")])
def test_multiply_nonfinite_compiled_mixed_formats_and_dtypes(name, name_b):
    A, B = fixed_pair(np.float64)
    check("multiply", A, B, name, ["compiled"], name_b)
    check("multiply", A.astype(np.float32), B.astype(np.complex128), name, ["compiled"], name_b)
    check("multiply", np.where(np.isfinite(A), A, 3).astype(np.int64), B, name, ["compiled"], name_b)


@needs_cc
@pytest.mark.parametrize("name", ["CSR", "COO"])
def test_multiply_compiled_route_finite_is_one_check(name, monkeypatch):
    # all values finite (even with a sum that overflows): the compiled product as it is, no
    # co-iteration of the operands; the index dtype is kept either way
    import ust.algebra.coiterate as co

    A, B = random_pair(1, np.float64)
    A, B = np.where(np.isfinite(A), A, 1.0), np.where(np.isfinite(B), B, 0.0)
    ta, tb = asarray(sp.csr_array(A), name), asarray(sp.csr_array(B), name)
    calls = []
    real = co.keyed
    monkeypatch.setattr(co, "keyed", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = ops.multiply(ta, tb, route="compiled")
    assert calls == [] and out.to_scipy().nnz == np.count_nonzero(A * B)
    A = np.zeros((4, 4))
    B = np.zeros((4, 4))
    A[0, :], A[1, 1], B[1, :], B[0, 2] = 1.5e308, 0.5, -1.7e308, 0.5
    check("multiply", A, B, name, ["compiled"])  # the sum overflows: looked at, nothing added
    ta, tb = asarray(sp.csr_array(A), name), asarray(sp.csr_array(B), name)
    A[2, 2] = NAN
    out = ops.multiply(asarray(sp.csr_array(A), name), tb, route="compiled")
    assert out.index_dtype == ta.index_dtype and np.isnan(out.todense()[2, 2])


@needs_cc
def test_compute_expression_keeps_the_intersection():
    # ust.compute of the user's own A(i,j) * B(i,j) is the compiler's intersection (TACO's
    # semantics): only the multiply op's route completes it to SciPy's rule
    import ust

    A, B = fixed_pair(np.float64)
    ta, tb = asarray(sp.csr_array(A), "CSR"), asarray(sp.csr_array(B), "CSR")
    with np.errstate(invalid="ignore"):
        out = ust.compute("C(i,j) = A(i,j) * B(i,j)", A=ta, B=tb, out_format="CSR")
        stored = (A != 0) & (B != 0)
        want = np.where(stored, A * B, 0)
    assert_same(np.asarray(out.todense()), want, "compute")
    assert np.isnan(ops.multiply(ta, tb, route="compiled").todense()[0, 0])


@needs_cc
@pytest.mark.parametrize("op", ["add", "subtract"])
def test_add_subtract_nonfinite_compiled_route(op):
    for name in ("CSR", "COO", USER):
        check(op, *fixed_pair(np.float64), name, ["compiled"])
        check(op, *random_pair(3, np.float64), name, ["compiled"])
    check("add", *fixed_pair(np.complex128), "CSR", ["compiled"])


@needs_cc
def test_subtract_complex_nonfinite_compiled_route():
    """A subtracted term is negated, not multiplied by a complex -1 ((-1+0j) * (inf+0j) is
    -inf+nanj, where SciPy's and NumPy's 0 - (inf+0j) is -inf+0j)."""
    for name in ("CSR", "COO", USER):
        check("subtract", *fixed_pair(np.complex128), name, ["compiled"])


@needs_cc
def test_a_subtracted_term_of_a_user_expression_is_negated():
    import ust

    a = sp.csr_array(np.array([[complex(INF, 0.0), 0.0], [0.0, 1.0 + 2.0j]]))
    b = sp.csr_array(np.array([[1.0 + 0.0j, 0.0], [0.0, 0.0]]))
    out = ust.compute("C(i,j) = B(i,j) - A(i,j)", A=a, B=b, out_format="CSR")
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out.todense(), b.toarray() - a.toarray())


# ----------------------------------------------------------------------------- broadcast (t.multiply)


def broadcast_operands():
    """(matrix 5x4, row 1x4, column 5x1, 1-D row (4,)): NaN / inf values that meet a stored
    value of the other operand and ones that meet its implicit zeros, in each of them."""
    M = np.zeros((5, 4))
    M[0, 0], M[0, 2], M[1, 1], M[1, 3], M[2, 0], M[3, 3] = NAN, 2.0, INF, 3.0, -INF, 1.0
    R = np.array([[0.0, 5.0, NAN, -INF]])
    C = np.array([[0.0], [-INF], [NAN], [2.0], [0.0]])
    return M, R, C, np.array([INF, 0.0, 1.0, NAN])


def scipy_broadcast(X, Y):
    with np.errstate(invalid="ignore"):
        return sp.csr_array(sp.coo_array(X).multiply(sp.coo_array(Y)))


def as_sparse(X, name):
    return asarray(sp.coo_array(X), name if X.ndim == 2 else "(i) -> (i : compressed)")


def check_broadcast(X, Y, name, ref=None):
    """``X.multiply(Y)`` (X in ``name``, Y in COO) against SciPy's (or ``ref``): values, stored
    pattern; and against NumPy's dense product everywhere but where SciPy drops a NaN."""
    ref = scipy_broadcast(X, Y) if ref is None else ref
    tx, ty = as_sparse(X, name), as_sparse(Y, "COO")
    with np.errstate(invalid="ignore"):
        out = tx.multiply(ty)
        numpy = X * Y
    dense = np.asarray(out.todense())
    assert dense.shape == ref.shape
    assert_same(dense, ref.toarray().reshape(dense.shape), f"{X.shape} * {Y.shape} in {name}")
    s = out.to_scipy()
    assert s.nnz == ref.nnz and np.all(s.data != 0), (X.shape, Y.shape, name)
    # NumPy's value everywhere, except SciPy's dropped NaN: a non-finite value of an operand of
    # a smaller shape against an implicit zero of the other
    off = ~np.isclose(dense, numpy, equal_nan=True)
    assert np.all(np.isnan(numpy[off]) & (dense[off] == 0))
    return dense, numpy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["CSR", "COO", "CSC", USER])
def test_multiply_nonfinite_broadcast_matrix_times_vector(name, dtype):
    M, R, C, r1 = (x.astype(dtype) for x in broadcast_operands())
    for X, Y in [(M, R), (R, M), (M, C), (C, M), (M, r1)]:
        dense, numpy = check_broadcast(X, Y, name)
        # the matrix's NaN / inf against the vector's implicit zero: NaN, as NumPy's
        big = X if X.shape == M.shape else Y
        full = ~np.isfinite(big)
        assert np.all(np.isnan(dense[full & (numpy != numpy)]))
        assert np.isnan(dense[0, 0])  # M's NaN against the vector's implicit zero


@pytest.mark.parametrize("name", ["CSR", "COO", USER])
def test_multiply_nonfinite_broadcast_as_scipy_drops(name):
    M, R, C, r1 = broadcast_operands()
    # a NaN of the row / column against the matrix's implicit zeros: dropped, as SciPy drops it
    dense, numpy = check_broadcast(M, R, name)
    assert np.isnan(numpy[4, 2]) and dense[4, 2] == 0
    dense, numpy = check_broadcast(C, M, name)
    assert np.isnan(numpy[1, 0]) and dense[1, 0] == 0
    # a column times a row: stored pairs only (SciPy's outer product)
    for X, Y, j in [(C, R, 0), (R, C, 0), (C, r1, 1), (r1, C, 1)]:
        dense, numpy = check_broadcast(X, Y, name)
        assert np.isnan(numpy[1, j]) and dense[1, j] == 0  # C's -inf against a zero of the row
    # (1, n) and (n,): both of the full shape; SciPy keeps the first one's NaN / inf only
    dense, _ = check_broadcast(R, r1, name)  # r1's inf against R's implicit zero: dropped
    np.testing.assert_array_equal(np.isnan(dense), [[False, False, True, True]])
    dense, _ = check_broadcast(r1, R, name)
    np.testing.assert_array_equal(np.isnan(dense.reshape(1, -1)), [[True, False, True, True]])


@pytest.mark.parametrize("name", ["CSR", "COO"])
def test_multiply_nonfinite_broadcast_explicit_zeros(name):
    # a stored 0 times a NaN / inf: a stored NaN (SciPy's products and NumPy alike)
    M = sp.coo_array(([0.0, 2.0, 0.0], ([0, 1, 2], [2, 1, 0])), shape=(3, 4))
    R = sp.coo_array(([NAN, INF], ([0, 0], [2, 0])), shape=(1, 4))
    C = sp.coo_array(([NAN, 0.0], ([1, 2], [0, 0])), shape=(3, 1))
    for X, Y in [(M, R), (R, M), (M, C), (C, M), (C, R), (R, C)]:
        with np.errstate(invalid="ignore"):
            ref = sp.csr_array(X.multiply(Y))
            out = asarray(X, name).multiply(asarray(Y, "COO"))
        assert_same(np.asarray(out.todense()), ref.toarray(), f"{X.shape} * {Y.shape}")
        assert out.to_scipy().nnz == ref.nnz and ref.nnz > 0


def test_multiply_nonfinite_broadcast_nd():
    # SciPy does not broadcast beyond 2-D: ust applies its 2-D rule (the full-shape operand's
    # NaN / inf against an implicit zero is NaN; the broadcast operand's is dropped there)
    from ust.convert.layouts import coo_format

    X = np.zeros((2, 3, 4))
    X[0, 0, 0], X[0, 1, 2], X[1, 2, 3] = INF, NAN, 2.0
    Y = np.zeros((3, 4))
    Y[1, 2], Y[2, 2], Y[2, 3] = 3.0, INF, -1.0
    tx, ty = asarray(X, coo_format(3)), asarray(Y, "COO")
    with np.errstate(invalid="ignore"):
        numpy = X * Y
        want = np.where(np.isnan(numpy) & (X == 0), 0, numpy)  # Y's inf against X's zeros
    for out in (tx.multiply(ty), ty.multiply(tx)):
        assert_same(np.asarray(out.todense()), want, "3-D")
        assert out.nnz == int(np.count_nonzero(want))  # the NaN stored, no zero
