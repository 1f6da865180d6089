"""Sparse algebra on the CPU against SciPy: every op on every standard format and two user formats.

Inputs carry the awkward cases (an empty row, an empty column, an explicit zero; COO inputs
with duplicates; complex values).  Storage is compared exactly where it is defined (SciPy's
canonical buffers for CSR / CSC / BSR results), values with tolerances, errors by class and
message, and every test checks that the inputs' buffers were not written.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ust
import ust.api.algebra as ops
import ust.api.matmul as api_matmul
from tests.algebra_cases import FORMATS, SHAPE, coo_with_duplicates, fmt, matrix, snapshot, unchanged
from ust.api.linop import aslinearoperator
from ust.convert import asarray
from ust.plan import Decision

DTYPES = [np.float64, np.complex128]


def tensor(A, name):
    return asarray(A, fmt(name))


def dense(x):
    return x.todense() if hasattr(x, "todense") and not isinstance(x, np.ndarray) else np.asarray(x)


# ----------------------------------------------------------------------------- union / intersection


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
def test_binary_every_format(op, name, dtype):
    A, B = matrix(1, dtype), matrix(2, dtype)
    ta, tb = tensor(A, name), tensor(B, name)
    sa, sb = snapshot(ta), snapshot(tb)
    out = getattr(ops, op)(ta, tb)
    ref = {"add": A + B, "subtract": A - B, "multiply": A.multiply(B)}[op]
    assert out.format == ta.format
    np.testing.assert_allclose(out.todense(), ref.toarray(), rtol=1e-13, atol=1e-13)
    assert unchanged(ta, sa) and unchanged(tb, sb)


@pytest.mark.parametrize("name", FORMATS)
def test_binary_mixed_formats_and_coo_duplicates(name):
    A = matrix(3)
    D = coo_with_duplicates(4)
    ta, td = tensor(A, name), asarray(D)  # td: COO labelled nonunique / nonordered
    assert not td.format.is_unique
    sd = snapshot(td)
    for op, ref in (("add", A + D), ("subtract", A - D), ("multiply", A.multiply(D.tocsr()))):
        out = getattr(ops, op)(ta, td)
        np.testing.assert_allclose(out.todense(), ref.toarray(), atol=1e-13)
        out2 = getattr(ops, op)(td, ta)
        ref2 = {"add": D + A, "subtract": D - A, "multiply": D.tocsr().multiply(A)}[op]
        np.testing.assert_allclose(out2.todense(), ref2.toarray(), atol=1e-13)
    assert unchanged(td, sd)


@pytest.mark.parametrize("layout", ["CSR", "CSC", "BSR[2,2]"])
@pytest.mark.parametrize("route", [None, "array-program"])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
def test_binary_exact_scipy_buffers(op, route, layout):
    A, B = matrix(5), matrix(6)
    B = B + A.multiply(-1.0).multiply(B != 0)  # entries that cancel exactly: scipy drops them
    ta, tb = tensor(A, layout), tensor(B, layout)
    out = getattr(ops, op)(ta, tb, route=route)
    sa, sb = ta.to_scipy(), tb.to_scipy()
    ref = {"add": sa + sb, "subtract": sa - sb, "multiply": sa.multiply(sb)}[op]
    ref.sum_duplicates()
    assert out.format == ta.format
    np.testing.assert_array_equal(out.pos(1), ref.indptr)
    np.testing.assert_array_equal(out.crd(1), ref.indices)
    np.testing.assert_array_equal(out.values, ref.data.reshape(-1))


def test_binary_result_format_and_drop_zeros():
    A = matrix(7)
    ta = tensor(A, "CSR")
    z = ops.subtract(ta, ta)
    assert z.nse == 0 and z.format.standard_name == "CSR"
    c = ops.add(ta, tensor(A, "DIA"), format="COO")
    assert c.format.standard_name == "COO"
    np.testing.assert_allclose(c.todense(), 2 * A.toarray())
    assert not np.any(c.values == 0)  # the explicit zero of A is gone, as in scipy


def test_binary_integer_and_mixed_dtypes():
    A = matrix(8, np.int8)
    B = matrix(9, np.float32)
    out = ops.add(tensor(A, "DCSR"), tensor(B, "DCSR"))
    assert out.dtype == np.result_type(np.int8, np.float32)
    np.testing.assert_allclose(out.todense(), (A + B).toarray(), rtol=1e-6)
    m = ops.multiply(tensor(A, "COO"), tensor(A, "COO"))
    assert m.dtype == np.int8
    np.testing.assert_array_equal(m.todense(), A.multiply(A).toarray())


def test_binary_n_dimensional():
    rng = np.random.default_rng(0)
    x = np.where(rng.random((3, 4, 5)) < 0.3, rng.standard_normal((3, 4, 5)), 0)
    y = np.where(rng.random((3, 4, 5)) < 0.3, rng.standard_normal((3, 4, 5)), 0)
    tx, ty = asarray(x, "CSF"), asarray(y, "COO3")
    np.testing.assert_allclose(ops.add(tx, ty).todense(), x + y)
    np.testing.assert_allclose(ops.multiply(tx, ty).todense(), x * y)
    assert ops.add(tx, ty).format.standard_name == "CSF"
    tb = asarray(x, "BatchedCSR")
    for t in (tx, ty, tb):
        ref = t.todense()
        for axis in (None, 0, 1, 2):  # implicit zeros counted: the dense reductions
            np.testing.assert_allclose(ops.sum(t, axis), ref.sum(axis=axis))
            np.testing.assert_allclose(ops.max(t, axis), ref.max(axis=axis))
            np.testing.assert_allclose(ops.min(t, axis), ref.min(axis=axis))
    np.testing.assert_allclose(ops.add(tb, asarray(y, "BatchedCSR")).todense(), x + y)


# ----------------------------------------------------------------------------- scalars and dense


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_scalar_ops_keep_structure(name, dtype):
    A = matrix(10, dtype)
    t = tensor(A, name)
    s = snapshot(t)
    for out, ref in (
        (ops.multiply(t, 2.5), 2.5 * A),
        (ops.multiply(-3, t), -3 * A),
        (ops.divide(t, 4.0), A / 4.0),
        (ops.negative(t), -A),
        (ops.add(t, 0), A),
        (ops.subtract(0, t), -A),
    ):
        assert out.format == t.format and out.nse == t.nse
        np.testing.assert_allclose(out.todense(), ref.toarray(), atol=1e-14)
        for k in range(t.format.nlevels):  # index buffers equal, but copies (never shared)
            for got, orig in ((out.pos(k), t.pos(k)), (out.crd(k), t.crd(k))):
                if orig is not None:
                    np.testing.assert_array_equal(got, orig)
                    assert not np.shares_memory(got, orig)
    assert unchanged(t, s)


@pytest.mark.parametrize("name", FORMATS)
def test_dense_operands(name):
    A = matrix(11)
    t = tensor(A, name)
    rng = np.random.default_rng(1)
    D = rng.standard_normal(SHAPE)
    row = rng.standard_normal(SHAPE[1])
    for other in (D, row, row[None, :], rng.standard_normal((SHAPE[0], 1))):
        out = ops.multiply(t, other)
        assert out.format == t.format
        np.testing.assert_allclose(out.todense(), A.toarray() * other, atol=1e-14)
        np.testing.assert_allclose(ops.multiply(other, t).todense(), other * A.toarray(), atol=1e-14)
    np.testing.assert_allclose(ops.add(t, D), A.toarray() + D)
    np.testing.assert_allclose(ops.subtract(t, D), A.toarray() - D)
    np.testing.assert_allclose(ops.subtract(D, t), D - A.toarray())
    assert isinstance(ops.add(D, t), np.ndarray)


def test_astype():
    A = matrix(12)
    t = tensor(A, "BSR[2,2]")
    c = ops.astype(t, np.complex64)
    assert c.dtype == np.complex64 and c.format == t.format
    np.testing.assert_allclose(c.todense(), A.toarray().astype(np.complex64))


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.int16])
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_every_format(op, name, dtype):
    A = matrix(13, dtype)
    t = tensor(A, name)
    s = snapshot(t)
    for axis in (None, 0, 1, -1):
        got = getattr(ops, op)(t, axis)
        ref = getattr(A, op)(axis=axis)
        ref = ref.toarray() if hasattr(ref, "toarray") else ref
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        assert np.asarray(got).dtype == np.asarray(ref).dtype
        if axis is not None:
            assert np.shape(got) == (SHAPE[1 - (axis % 2)],)
    assert unchanged(t, s)


@pytest.mark.parametrize("route", ["scipy", "array-program"])
def test_reductions_routes_agree_with_duplicates_and_full_rows(route):
    D = coo_with_duplicates(14)
    Dc = D.tocsr()
    full = np.arange(1.0, 9.0)
    A = sp.csr_array(np.vstack([-full, np.zeros(8), full, Dc.toarray()[:7]]))  # a row with no zero
    for X in (D, A):
        t = asarray(X)
        for op in ("sum", "max", "min"):
            for axis in (None, 0, 1):
                ref = getattr(X.tocsr(), op)(axis=axis)
                ref = ref.toarray() if hasattr(ref, "toarray") else ref
                np.testing.assert_allclose(getattr(ops, op)(t, axis, route=route), ref)


def test_reduction_dtypes_and_errors():
    A = matrix(15, np.int8)
    assert ops.sum(tensor(A, "DCSR")).dtype == np.int64
    assert ops.sum(tensor(A, "CROW"), axis=0).dtype == np.int64
    empty = asarray(sp.csr_array((0, 4)))
    with pytest.raises(ust.ShapeError, match="zero-size"):
        ops.max(empty)
    assert ops.sum(empty) == 0
    with pytest.raises(ust.ShapeError, match="out of range"):
        ops.sum(tensor(A, "CSR"), axis=2)
    z = asarray(sp.csr_array((3, 4)), "DCSC")
    assert ops.max(z) == 0 and np.array_equal(ops.min(z, axis=1), np.zeros(3))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
def test_sorted_extreme_matches_ufunc_at(dtype):
    """The GPU's sort-based max/min (CuPy's float64 atomics round) equals ``maximum.at`` exactly."""
    from ust.algebra.reduce import segment_extreme, sorted_extreme

    rng = np.random.default_rng(7)
    for n, G in ((0, 3), (1, 1), (37, 5), (200, 40)):
        v = rng.standard_normal(n) + 1e-9 * rng.standard_normal(n)  # differences below float32's
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(n)
            v[: n // 3] = v[: n // 3].real + 1j * rng.integers(-2, 3, n // 3)  # ties in the real part
            v[1 : n // 3 : 2] = v[0 : n // 3 - 1 : 2].real + 1j * rng.standard_normal(len(v[1 : n // 3 : 2]))
        v = v.astype(dtype)
        g = rng.integers(0, G, n)
        before = v.copy()
        for op in ("maximum", "minimum"):
            got, ref = sorted_extreme(np, op, v, g, G), segment_extreme(np, op, v, g, G)
            assert got.dtype == ref.dtype and np.array_equal(got, ref)
        assert np.array_equal(v, before)
    v, g = np.array([1.0, np.nan, 3.0, 2.0]), np.array([0, 0, 1, 1])  # NaN propagates like np.maximum
    assert np.array_equal(sorted_extreme(np, "minimum", v, g, 2), [np.nan, 2.0], equal_nan=True)
    assert np.array_equal(sorted_extreme(np, "maximum", v, g, 2), [np.nan, 3.0], equal_nan=True)


class _NumpyAsCupy:
    """NumPy behind a namespace that is not ``numpy``, so the CuPy branches run here."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def argsort(a, axis=-1):
        return np.argsort(a, axis=axis, kind="stable")  # CuPy's argsort is always stable


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_reductions_gpu_branch_on_numpy(monkeypatch, dtype):
    """max/min through the GPU's sort-based branch equal SciPy exactly (every format)."""
    from ust.runtime import xp as _xp

    A = matrix(11, dtype)
    A.data[:] += 1e-9  # differences below float32's resolution
    tensors = {name: tensor(A, name) for name in FORMATS}
    fake = _NumpyAsCupy()
    monkeypatch.setattr(_xp, "namespace", lambda a: fake)
    for name, t in tensors.items():
        assert t.xp is fake
        for op in ("max", "min"):
            for axis in (None, 0, 1):
                ref = getattr(A, op)(axis=axis)
                ref = ref.toarray() if hasattr(ref, "toarray") else ref
                got = getattr(ops, op)(t, axis, route="array-program")
                np.testing.assert_array_equal(got, ref, err_msg=f"{name} {op} {axis}")


# ----------------------------------------------------------------------------- transpose


EXPECTED_T = {
    "CSR": "(i, j) -> (j : dense, i : compressed)",
    "CSC": "(i, j) -> (i : dense, j : compressed)",
    "COO": "(i, j) -> (j : compressed(nonunique), i : singleton)",
    "DCSR": "(i, j) -> (j : compressed, i : compressed)",
    "CROW": "(i, j) -> (j : compressed, i : dense)",
    "DIA": "(i, j) -> (i - j : compressed, i : range)",
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_transpose_is_a_view(name, dtype):
    A = matrix(16, dtype)
    t = tensor(A, name)
    T = ops.transpose(t)
    assert T.shape == (SHAPE[1], SHAPE[0])
    np.testing.assert_array_equal(T.todense(), A.toarray().T)
    assert T.values is t.values
    for k in range(t.format.nlevels):
        assert T.pos(k) is t.pos(k) and T.crd(k) is t.crd(k)
    if name in EXPECTED_T:
        assert T.format == ust.format(EXPECTED_T[name])
    back = ops.transpose(T)
    assert back.format == t.format  # transposing twice gives the original map
    np.testing.assert_array_equal(back.todense(), A.toarray())


def test_transpose_standard_names_and_conversion():
    A = matrix(17)
    assert ops.transpose(tensor(A, "CSR")).format.standard_name == "CSC"
    assert ops.transpose(tensor(A, "CSC")).format.standard_name == "CSR"
    assert ops.transpose(tensor(A, "DCSC")).format.standard_name == "DCSR"
    assert ops.transpose(tensor(A, "CCOL")).format.standard_name == "CROW"
    c = ops.transpose(tensor(A, "BSR[2,2]"), format="BSR[2,2]")
    assert c.format.standard_name == "BSR[2, 2]"
    np.testing.assert_array_equal(c.todense(), A.toarray().T)
    x = np.arange(24.0).reshape(2, 3, 4)
    x[x % 3 == 0] = 0
    t3 = asarray(x, "CSF")
    np.testing.assert_array_equal(ops.transpose(t3, (1, 2, 0)).todense(), x.transpose(1, 2, 0))
    with pytest.raises(ust.ShapeError, match="permutation"):
        ops.transpose(t3, (0, 0, 1))


# ----------------------------------------------------------------------------- SpGEMM


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_spgemm_every_format(name, dtype):
    A = matrix(18, dtype)
    B = matrix(19, dtype, shape=(SHAPE[1], 6))
    ta = tensor(A, name)
    tb = asarray(B, "CSR" if name.startswith(("BSR", "BSC", "rowpairs")) else fmt(name))
    sa, sb = snapshot(ta), snapshot(tb)
    ref = (A @ B).toarray()
    d = ops.plan("spgemm", ta, tb)
    for route in dict.fromkeys([d.route, *(r.route for r in d.alternatives)]):
        C = ops.matmul_sparse(ta, tb, route=route)
        assert C.format.standard_name == "CSR"
        np.testing.assert_allclose(C.todense(), ref, atol=1e-13)
    C2 = ops.matmul_sparse(ta, tb, format=fmt(name) if name != "BSR[2,2]" else "BSR[2,2]")
    np.testing.assert_allclose(C2.todense(), ref, atol=1e-13)
    assert unchanged(ta, sa) and unchanged(tb, sb)


def test_spgemm_exact_scipy_csr_and_duplicates():
    A, B = matrix(20), matrix(21, shape=(8, 8))
    for route in (None, "scipy", "generated-c", "array-program"):
        C = ops.matmul_sparse(tensor(A, "CSR"), tensor(B, "CSR"), route=route)
        ref = A @ B
        ref.sum_duplicates()
        np.testing.assert_array_equal(C.pos(1), ref.indptr)
        np.testing.assert_array_equal(C.crd(1), ref.indices)
        np.testing.assert_allclose(C.values, ref.data, rtol=1e-14)
    D = coo_with_duplicates(22, shape=(10, 10))
    np.testing.assert_allclose(ops.matmul_sparse(D, D).todense(), (D @ D).toarray(), atol=1e-13)
    np.testing.assert_allclose(ops.matmul_sparse(D, D, route="array-program").todense(), (D @ D).toarray())
    # ints (the array program takes every value dtype)
    Ai = matrix(23, np.int32, shape=(8, 8))
    Ci = ops.matmul_sparse(tensor(Ai, "COO"), tensor(Ai, "COO"), route="array-program")
    assert Ci.dtype == np.int32
    np.testing.assert_array_equal(Ci.todense(), (Ai @ Ai).toarray())


@pytest.mark.parametrize("route", ["scipy", "generated-c", "array-program", "convert-scipy"])
def test_spgemm_drops_exact_cancellation_like_scipy(route):
    A = sp.csr_array(np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0]]))
    B = sp.csr_array(np.array([[1.0, 3.0], [-1.0, 0.0], [5.0, 0.0]]))
    C = ops.matmul_sparse(asarray(A), asarray(B), route=route)
    ref = A @ B
    ref.sum_duplicates()
    assert C.nse == ref.nnz == 2  # the (0, 0) entry cancels: 1 * 1 + 1 * (-1)
    np.testing.assert_array_equal(C.pos(1), ref.indptr)
    np.testing.assert_array_equal(C.crd(1), ref.indices)
    np.testing.assert_array_equal(C.values, ref.data)


def test_matmul_operator_and_rmatmul():
    A = matrix(24)
    t = tensor(A, "DCSR")
    x = np.arange(SHAPE[0], dtype=float)
    X = np.arange(3.0 * SHAPE[0]).reshape(3, SHAPE[0])
    np.testing.assert_allclose(api_matmul.rmatmul(x, t), x @ A.toarray())
    np.testing.assert_allclose(api_matmul.rmatmul(X, t), X @ A.toarray())
    np.testing.assert_allclose(
        api_matmul.matmul_operator(t, np.ones(SHAPE[1])), A.toarray() @ np.ones(SHAPE[1])
    )
    np.testing.assert_allclose(api_matmul.matmul_operator(X, t), X @ A.toarray())
    sq = api_matmul.matmul_operator(ops.transpose(t), t)
    np.testing.assert_allclose(sq.todense(), A.toarray().T @ A.toarray(), atol=1e-13)


# ----------------------------------------------------------------------------- SDDMM


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_sddmm_every_format(name, dtype):
    S = matrix(25, dtype)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((SHAPE[0], 5)).astype(dtype)
    b = rng.standard_normal((5, SHAPE[1])).astype(dtype)
    t = tensor(S, name)
    s_snap, a_copy, b_copy = snapshot(t), a.copy(), b.copy()
    pattern = np.zeros(SHAPE, bool)
    from ust.algebra.slots import slots

    sl = slots(t)
    pattern[sl.dims] = True  # every stored slot: explicit zeros and block padding included
    for alpha, beta in ((1, 0), (2.0, -0.5)):
        R = ops.sddmm(t, a, b, alpha=alpha, beta=beta)
        assert R.format == t.format and R.nse == t.nse
        ref = alpha * (a @ b) * pattern + beta * S.toarray()
        np.testing.assert_allclose(R.todense(), ref, atol=1e-12)
    assert unchanged(t, s_snap) and np.array_equal(a, a_copy) and np.array_equal(b, b_copy)


def test_sddmm_duplicates_epilogues_and_chunks(monkeypatch):
    D = coo_with_duplicates(26)
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((SHAPE[0], 3)), rng.standard_normal((3, SHAPE[1]))
    pattern = D.toarray() != 0
    Dd = D.toarray()
    R = ops.sddmm(D, a, b, beta=1.0)
    np.testing.assert_allclose(R.todense(), (a @ b) * (pattern | (D.tocsr() != 0).toarray()) + Dd, atol=1e-12)
    t = asarray(D, "CSR")
    R = ops.sddmm(t, a, b, epilog="max(y, 0) * scale", epilog_params={"scale": 2})
    ref = np.maximum(a @ b, 0) * 2 * (t.todense() != 0 if False else _pattern(t))
    np.testing.assert_allclose(R.todense(), ref, atol=1e-12)
    import ust.algebra.sddmm as mod

    monkeypatch.setattr(mod, "_CHUNK_ELEMENTS", 7)  # many chunks: same result
    np.testing.assert_allclose(
        ops.sddmm(t, a, b, epilog="max(y, 0) * scale", epilog_params={"scale": 2}).todense(), ref
    )
    with pytest.raises(ust.UnsupportedError, match="scale"):
        ops.sddmm(t, a, b, epilog="y * scale")
    with pytest.raises(ust.UnsupportedError, match="real dtypes"):
        ops.sddmm(t, a + 0j, b, epilog="max(y, 0)")


def _pattern(t):
    from ust.algebra.slots import slots

    p = np.zeros(t.shape, bool)
    p[slots(t).dims] = True
    return p


def test_apply_epilog_on_arrays_and_tensors():
    y = np.array([-2.0, 0.5, 3.0])
    assert ops.apply_epilog(y, "max(y, 0)") is y
    np.testing.assert_array_equal(y, [0.0, 0.5, 3.0])
    A = matrix(27)
    t = tensor(A, "DIA")
    pad_before = t.values.copy()
    ops.apply_epilog(t, "y + 1")
    inside = _pattern(t)
    np.testing.assert_allclose(t.todense()[inside], A.toarray()[inside] + 1)
    from ust.algebra.slots import slots

    sl = slots(t)
    padding = np.setdiff1d(np.arange(t.nse), sl.slot)
    np.testing.assert_array_equal(t.values[padding], pad_before[padding])  # padding untouched
    c = tensor(A, "CSR").copy()  # in place: never on buffers shared with A
    ref = 3 * A.toarray()
    assert ops.apply_epilog(c, "y * s", {"s": 3.0}) is c
    np.testing.assert_allclose(c.todense(), ref)


# ----------------------------------------------------------------------------- LinearOperator


@pytest.mark.parametrize("name", ["DIA", "BSR[2,2]", "rowpairs", "COO"])
def test_linear_operator_solvers(name):
    n = 40
    P = sp.diags_array([4.0, -1.0, -1.0], offsets=[0, 1, -1], shape=(n, n), format="csr")
    t = asarray(P, fmt(name))
    op = aslinearoperator(t)
    rhs = np.linspace(1, 2, n)
    x, info = spla.cg(op, rhs, rtol=1e-10)
    assert info == 0 and np.allclose(P @ x, rhs, atol=1e-8)
    x2, info2 = spla.gmres(op, rhs, rtol=1e-10)
    assert info2 == 0 and np.allclose(P @ x2, rhs, atol=1e-7)


def test_linear_operator_rmatvec_complex():
    A = matrix(28, np.complex128)
    op = aslinearoperator(tensor(A, "CSC"))
    x = np.arange(SHAPE[1]) + 1j
    y = np.arange(SHAPE[0]) - 2j
    np.testing.assert_allclose(op.matvec(x), A.toarray() @ x)
    np.testing.assert_allclose(op.rmatvec(y), A.toarray().conj().T @ y)
    np.testing.assert_allclose(op.matmat(np.eye(SHAPE[1])), A.toarray())
    np.testing.assert_allclose(op.H.matvec(y), A.toarray().conj().T @ y)


# ----------------------------------------------------------------------------- errors


def test_shape_errors_before_work():
    A = matrix(29)
    t = tensor(A, "CSR")
    other = asarray(sp.csr_array((4, 4)))
    for fn in (ops.add, ops.subtract, ops.multiply):
        with pytest.raises(ust.ShapeError, match="differ"):
            fn(t, other)
    with pytest.raises(ust.ShapeError, match="inner extents"):
        ops.matmul_sparse(t, t)
    with pytest.raises(ust.ShapeError, match="does not match"):
        ops.sddmm(t, np.ones((10, 3)), np.ones((4, 8)))
    with pytest.raises(ust.ShapeError, match="broadcast"):
        ops.multiply(t, np.ones((3, 3)))
    with pytest.raises(ust.FormatError, match="block"):
        ops.add(t, t, format="BSR[3,3]")


def test_unsupported_combinations_name_what_is_supported():
    A = matrix(30)
    t = tensor(A, "CSR")
    with pytest.raises(ust.UnsupportedError, match="supported: scalar 0"):
        ops.add(t, 1.0)
    with pytest.raises(ust.UnsupportedError, match="sparse / scalar"):
        ops.divide(t, t)
    with pytest.raises(ust.UnsupportedError, match="at least one operand must be sparse"):
        ops.add(np.ones(3), np.ones(3))
    with pytest.raises(ust.UnsupportedError, match="must be a dense array"):
        ops.sddmm(t, t, np.ones((8, 8)))
    with pytest.raises(ust.UnsupportedError, match="2-D operands"):
        ops.matmul_sparse(asarray(np.ones((2, 2, 2)), "CSF"), t)
    with pytest.raises(ust.UnsupportedError, match="candidates: scipy, array-program"):
        ops.add(t, t, route="cusparse")
    with pytest.raises(ust.UnsupportedError, match="supported: "):
        ops.add(t, object())
    with pytest.raises(ust.UnsupportedError, match="no algebra op"):
        ops.plan("frobnicate", t)
    with pytest.raises(ust.UnsupportedError, match="grow"):
        ops.multiply(asarray(sp.csr_array((3, 1))), np.ones((3, 4)))


# ----------------------------------------------------------------------------- plan / explain


def test_plan_and_explain_every_op():
    A = matrix(31)
    t = tensor(A, "CSR")
    d = tensor(A, "DCSR")
    a, b = np.ones((10, 2)), np.ones((2, 8))
    from ust.plan.planner import c_compiler_available

    cc = c_compiler_available()
    cases = {
        "spgemm": ((t, ops.transpose(t)), {}, "generated-c" if cc else "scipy"),
        "sddmm": ((t, a, b), {}, "array-program"),
        "add": ((t, t), {}, "scipy"),
        "subtract": ((d, t), {}, "array-program"),
        "multiply": ((t, 3.0), {}, "values"),
        "divide": ((t, 3.0), {}, "values"),
        "negative": ((t,), {}, "values"),
        "transpose": ((d,), {}, "relabel"),
        "sum": ((d,), {"axis": 0}, "array-program"),
        "max": ((t,), {"axis": 1}, "scipy"),
        "min": ((asarray(A, "DIA"),), {}, "array-program"),
    }
    for op, (args, kw, route) in cases.items():
        dec = ops.plan(op, *args, **kw)
        assert isinstance(dec, Decision) and dec.route == route, (op, dec.route)
        text = ops.explain(op, *args, **kw)
        assert f"route: {route}" in text and "reason: " in text
        assert getattr(ops, f"plan_{op}")(*args, **kw).route == route
        assert f"route: {route}" in getattr(ops, f"explain_{op}")(*args, **kw)
    assert "result format: COO" in ops.explain("add", t, t, format="COO")
    sq = tensor(matrix(33, shape=(8, 8)), "DCSR")
    assert ops.plan("spgemm", sq, sq).route == ("generated-c" if cc else "convert-scipy")


def test_execution_override_cpu_is_a_no_op():
    A = matrix(32)
    t = tensor(A, "CSR")
    np.testing.assert_allclose(ops.add(t, t, execution="cpu").todense(), 2 * A.toarray())
    with pytest.raises(ust.DeviceError):
        ops.add(t, t, execution="tpu")
    from ust.backends.cuda.arrays import gpu_available

    if not gpu_available():  # no device: DeviceError; no CuPy at all: the error naming the extra
        with pytest.raises((ust.DeviceError, ust.BackendUnavailableError), match=r"CUDA device|ust\[cu"):
            ops.sum(t, execution="cuda")


@pytest.mark.parametrize(
    "module",
    ["ust.api.algebra", "ust.algebra.epilogue", "ust.api.linop"],
)
def test_module_doctests(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("epilog", [None, "max(y, 0) * scale", "where(y > t, exp(y * 0.1), -abs(y))"])
def test_generated_sddmm_kernel_compiles_with_nvrtc(dtype, epilog):
    """The generated CUDA source needs no GPU to check: NVRTC compiles it (skipped without NVRTC)."""
    from ust.algebra.sddmm import kernel_source
    from ust.codegen.epilog import compile_epilog

    try:
        from ust.backends.cuda.nvrtc import compile_cuda, load_nvrtc

        load_nvrtc()
    except Exception as exc:  # no NVRTC on this machine
        pytest.skip(f"NVRTC unavailable: {exc}")
    ep = compile_epilog(epilog) if epilog else None
    src = kernel_source(dtype, ep)
    assert "ust_sddmm_warp" in src
    assert all(f"p_{name}" in src for name in (ep.params if ep else ()))
    cubin = compile_cuda(src, options=("--std=c++14", "--gpu-architecture=sm_90"))
    assert len(cubin) > 1000
    with pytest.raises(ust.UnsupportedError, match="float32, float64"):
        kernel_source("complex128")
