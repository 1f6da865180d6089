"""Sparse algebra on the GPU (CuPy buffers) against SciPy on the host, every op and format.

Routes exercised: cuSPARSE SpGEMM (CSR x CSR) and SDDMM (CSR), ust's merge kernel (CSR / CSC
elementwise; its own tests in test_merge_kernel_gpu.py), cuSPARSE csrgeam2 through CuPy
(CSR + CSR, on request), the generated warp-per-entry SDDMM kernel with fused epilogues, and the CuPy array
programs (co-iteration, reductions, expand-sort-compress SpGEMM) for every other format.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.api.algebra as ops
from tests.algebra_cases import FORMATS, SHAPE, coo_with_duplicates, fmt, matrix, snapshot, unchanged
from ust.api.linop import aslinearoperator
from ust.convert import asarray

pytestmark = pytest.mark.gpu

DTYPES = [np.float64, np.complex128]


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def gpu(A, name):
    return asarray(A, fmt(name)).to("cuda")


def host(x):
    from ust.runtime import xp as _xp

    if hasattr(x, "format") and hasattr(x, "todense"):
        assert x.device.startswith("cuda")
        return _xp.to_host(x.todense())
    return _xp.to_host(x)


# ----------------------------------------------------------------------------- union / intersection


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
def test_binary_every_format(op, name, dtype):
    A, B = matrix(1, dtype), matrix(2, dtype)
    ta, tb = gpu(A, name), gpu(B, name)
    sa, sb = snapshot(ta), snapshot(tb)
    ref = {"add": A + B, "subtract": A - B, "multiply": A.multiply(B)}[op].toarray()
    d = ops.plan(op, ta, tb)
    routes = [None] + [r.route for r in d.alternatives]
    for route in routes:
        out = getattr(ops, op)(ta, tb, route=route)
        assert out.device.startswith("cuda") and out.format == ta.format
        np.testing.assert_allclose(host(out), ref, atol=1e-13)
    assert unchanged(ta, sa) and unchanged(tb, sb)


def test_add_csr_routes_and_exact_array_program_buffers(cp):
    A, B = matrix(5), matrix(6)
    ta, tb = gpu(A, "CSR"), gpu(B, "CSR")
    assert ops.plan("add", ta, tb).route == "merge-kernel"
    out = ops.add(ta, tb, route="array-program")
    ref = A + B
    ref.sum_duplicates()
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)
    lib = ops.add(ta, tb, route="cupyx")  # csrgeam2, its zeros dropped after
    np.testing.assert_allclose(host(lib), ref.toarray())


def test_duplicates_and_mixed_formats():
    A = matrix(3)
    D = coo_with_duplicates(4)
    ta, td = gpu(A, "DCSC"), asarray(D).to("cuda")
    np.testing.assert_allclose(host(ops.add(ta, td)), (A + D).toarray(), atol=1e-13)
    np.testing.assert_allclose(host(ops.multiply(td, ta)), D.tocsr().multiply(A).toarray(), atol=1e-13)
    np.testing.assert_allclose(host(ops.subtract(td, td)), np.zeros(SHAPE), atol=1e-13)


# ----------------------------------------------------------------------------- scalars, dense


@pytest.mark.parametrize("name", FORMATS)
def test_scalar_and_dense_operands(name, cp):
    A = matrix(10, np.complex128)
    t = gpu(A, name)
    D = cp.asarray(np.random.default_rng(1).standard_normal(SHAPE))
    np.testing.assert_allclose(host(ops.multiply(t, 2.5)), 2.5 * A.toarray())
    np.testing.assert_allclose(host(ops.divide(t, 4.0)), A.toarray() / 4)
    np.testing.assert_allclose(host(ops.negative(t)), -A.toarray())
    np.testing.assert_allclose(host(ops.multiply(t, D)), A.toarray() * cp.asnumpy(D))
    np.testing.assert_allclose(host(ops.add(t, D)), A.toarray() + cp.asnumpy(D))


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.int16, np.float32])
@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_every_format(op, name, dtype):
    A = matrix(13, dtype)
    t = gpu(A, name)
    for axis in (None, 0, 1):
        got = host(getattr(ops, op)(t, axis))
        ref = getattr(A, op)(axis=axis)
        ref = ref.toarray() if hasattr(ref, "toarray") else ref
        np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_reductions_with_duplicates_and_full_rows():
    D = coo_with_duplicates(14)
    full = np.arange(1.0, 9.0)
    A = sp.csr_array(np.vstack([-full, np.zeros(8), full, D.toarray()[:7]]))
    for X in (D, A):
        t = asarray(X).to("cuda")
        for op in ("sum", "max", "min"):
            for axis in (None, 0, 1):
                ref = getattr(X.tocsr(), op)(axis=axis)
                ref = ref.toarray() if hasattr(ref, "toarray") else ref
                np.testing.assert_allclose(host(getattr(ops, op)(t, axis)), ref)


# ----------------------------------------------------------------------------- transpose


@pytest.mark.parametrize("name", FORMATS)
def test_transpose_view(name):
    A = matrix(16)
    t = gpu(A, name)
    T = ops.transpose(t)
    assert T.values is t.values and T.device == t.device
    np.testing.assert_array_equal(host(T), A.toarray().T)


# ----------------------------------------------------------------------------- SpGEMM


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("name", FORMATS)
def test_spgemm_every_format(name, dtype):
    A = matrix(18, dtype)
    B = matrix(19, dtype, shape=(SHAPE[1], 6))
    # cuSPARSE SpGEMM takes int32 indices only: int32 CSR goes straight in, int64 CSR (what
    # these SciPy matrices hold) and every other format are converted first
    ta = asarray(A, fmt(name), index_dtype=np.int32 if name == "CSR" else None).to("cuda")
    tb = asarray(B, index_dtype=np.int32).to("cuda")
    sa, sb = snapshot(ta), snapshot(tb)
    ref = (A @ B).toarray()
    tol = 1e-4 if dtype in (np.float32, np.complex64) else 1e-12
    d = ops.plan("spgemm", ta, tb)
    assert d.route == ("cusparse" if name == "CSR" else "convert-cusparse")
    if name == "CSR":
        assert ops.plan("spgemm", gpu(A, name), tb).route == "convert-cusparse"  # int64 indices
    for route in (None, "array-program"):
        C = ops.matmul_sparse(ta, tb, route=route)
        assert C.device.startswith("cuda") and C.format.standard_name == "CSR"
        np.testing.assert_allclose(host(C), ref, rtol=tol, atol=tol)
    assert unchanged(ta, sa) and unchanged(tb, sb)


def test_spgemm_cusparse_sorted_csr_and_integers(cp):
    A = sp.random_array((300, 300), density=0.02, random_state=3, format="csr")
    t = asarray(A).to("cuda")
    C = ops.matmul_sparse(t, t)
    pos, crd = cp.asnumpy(C.pos(1)), cp.asnumpy(C.crd(1))
    rows = np.repeat(np.arange(300), np.diff(pos))
    assert np.all((rows[1:] != rows[:-1]) | (crd[1:] > crd[:-1]))  # sorted, unique per row
    np.testing.assert_allclose(host(C), (A @ A).toarray(), atol=1e-12)
    Ai = matrix(23, np.int32, shape=(8, 8))
    ti = asarray(Ai).to("cuda")
    assert ops.plan("spgemm", ti, ti).route == "array-program"
    np.testing.assert_array_equal(host(ops.matmul_sparse(ti, ti)), (Ai @ Ai).toarray())
    empty = asarray(sp.csr_array((8, 8))).to("cuda")
    assert ops.matmul_sparse(empty, empty).nse == 0


# ----------------------------------------------------------------------------- SDDMM


def _pattern(t):
    from ust.algebra.slots import slots
    from ust.runtime import xp as _xp

    p = np.zeros(t.shape, bool)
    p[tuple(_xp.to_host(d) for d in slots(t).dims)] = True
    return p


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("name", FORMATS)
def test_sddmm_every_format_every_route(name, dtype, cp):
    S = matrix(25, dtype)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((SHAPE[0], 40)).astype(dtype)
    b = rng.standard_normal((40, SHAPE[1])).astype(dtype)
    t = gpu(S, name)
    pattern = _pattern(t)
    ga, gb = cp.asarray(a), cp.asarray(b)
    d = ops.plan("sddmm", t, ga, gb)
    routes = [d.route] + [r.route for r in d.alternatives]
    if name == "CSR" and dtype != np.complex128:
        # the generated kernel is first: 3x faster than cuSPARSE SDDMM on the H200 (RESULTS.md)
        assert routes[:2] == ["generated-cuda", "cusparse"]
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for route in routes:
        for alpha, beta in ((1, 0), (2.0, -0.5)):
            R = ops.sddmm(t, ga, gb, alpha=alpha, beta=beta, route=route)
            assert R.format == t.format and R.device.startswith("cuda")
            ref = alpha * (a @ b) * pattern + beta * S.toarray()
            np.testing.assert_allclose(host(R), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("route", ["cusparse", "generated-cuda", "array-program"])
def test_sddmm_epilogues(route, cp):
    S = matrix(26, np.float32)
    t = gpu(S, "CSR")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((SHAPE[0], 64)).astype(np.float32)
    b = rng.standard_normal((64, SHAPE[1])).astype(np.float32)
    p = _pattern(t)
    R = ops.sddmm(t, cp.asarray(a), cp.asarray(b), epilog="max(y, 0) * scale", epilog_params={"scale": 2},
                  route=route)  # fmt: skip
    np.testing.assert_allclose(host(R), np.maximum(a @ b, 0) * 2 * p, rtol=1e-4, atol=1e-4)
    R = ops.sddmm(t, cp.asarray(a), cp.asarray(b), epilog="where(y > t, exp(y * 0.1), 0)",
                  epilog_params={"t": 0.5}, route=route)  # fmt: skip
    ab = a @ b
    np.testing.assert_allclose(host(R), np.where(ab > 0.5, np.exp(ab * 0.1), 0) * p, rtol=1e-4, atol=1e-4)


def test_sddmm_host_operands_with_execution_cuda():
    S = matrix(27)
    a, b = np.ones((SHAPE[0], 3)), np.ones((3, SHAPE[1]))
    R = ops.sddmm(S, a, b, execution="cuda")
    assert R.device == "cpu"  # back where the operands live
    np.testing.assert_allclose(R.todense(), 3.0 * _pattern(asarray(S)))


def test_apply_epilog_cupy(cp):
    y = cp.asarray([-1.0, 2.0])
    ops.apply_epilog(y, "max(y, 0)")
    np.testing.assert_array_equal(cp.asnumpy(y), [0.0, 2.0])


# ----------------------------------------------------------------------------- operators, solvers, errors


def test_linear_operator_cupyx_cg(cp):
    from cupyx.scipy.sparse.linalg import cg

    n = 64
    P = sp.diags_array([4.0, -1.0, -1.0], offsets=[0, 1, -1], shape=(n, n), format="csr")
    t = asarray(P, "DIA").to("cuda")
    x, info = cg(aslinearoperator(t), cp.ones(n), rtol=1e-10)
    assert int(info) == 0
    np.testing.assert_allclose(P @ cp.asnumpy(x), np.ones(n), atol=1e-8)


def test_device_mismatch_and_explain():
    A = matrix(30)
    with pytest.raises(ust.DeviceError):
        ops.add(asarray(A), gpu(A, "CSR"))
    a32 = asarray(A, "CSR", index_dtype=np.int32, device="cuda")
    text = ops.explain("spgemm", a32, asarray(sp.csr_array(A.T), "CSR", index_dtype=np.int32, device="cuda"))
    assert "route: cusparse" in text and "execution space: cuda" in text


def test_csr_rows_sorted_kernel(cp) -> None:
    from ust.backends.cuda.cusparse_algebra import csr_rows_sorted

    pos = cp.asarray(np.array([0, 2, 2, 5], dtype=np.int32))
    assert csr_rows_sorted(pos, cp.asarray(np.array([0, 3, 1, 2, 4], dtype=np.int32)))
    assert not csr_rows_sorted(pos, cp.asarray(np.array([0, 3, 2, 1, 4], dtype=np.int32)))
    assert not csr_rows_sorted(pos, cp.asarray(np.array([3, 3, 1, 2, 4], dtype=np.int32)))  # a repeat
    assert csr_rows_sorted(pos.astype(np.int64), cp.asarray(np.array([5, 6, 0, 1, 2], dtype=np.int64)))


def test_gpu_routes_drop_exact_zeros_like_scipy(cp):
    A, B = matrix(7), matrix(8)
    A = sp.csr_matrix(A)
    A.data[::3] = 0.0  # explicit zeros: their products are exact zeros
    ta, tb = gpu(A, "CSR"), gpu(B, "CSR")
    assert ops.plan("multiply", ta, tb).route == "merge-kernel"
    out = ops.multiply(ta, tb)
    ref = sp.csr_matrix(A.multiply(B))
    ref.sum_duplicates()
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)
    assert ops.subtract(ta, ta).nse == 0  # cancellations are not kept either
    assert ops.subtract(ta, ta, route="cupyx").nse == 0  # nor csrgeam2's


@pytest.mark.parametrize("name", ["CSR", "CSC"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_sum_takes_cupyx_on_csr_csc(cp, name, axis):
    A = matrix(9)
    t = gpu(A, name)
    assert ops.plan("sum", t).route == "cupyx"
    got = ops.sum(t, axis=axis)
    want = sp.csr_array(A).sum(axis=axis)
    assert getattr(got, "shape", ()) == np.shape(want)
    np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-13)
