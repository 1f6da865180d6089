"""Dense CuPy operands in any memory layout, and inf / NaN operands, on the GPU.

Every GPU route -- cuSPARSE (CSR, CSC, COO, BSR), generated CUDA (DIA, BSR[2,3], DCSR, ...) --
must give SciPy's result for strided, reversed, offset and Fortran-order CuPy operands (x, B,
C, SDDMM's dense factors, epilogue inputs, a caller's ``out``) and for inf / NaN in x:
padding slots never meet x (cuSPARSE BSR falls back to the guarded generated kernel when x
is not finite).  Caller arrays are never modified.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings

import ust
from tests.operand_layout_cases import (
    DCSR_CUSTOM,
    LOOSE,
    MATRIX_VIEWS,
    VECTOR_VIEWS,
    layout_case,
    matrix_view,
    special_vectors,
    vector_view,
)

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

CUSPARSE = ["CSR", "CSC", "COO", "BSR[2,2]"]
GENERATED = ["DIA", "DIAI", "BSR[2,3]", "BSC[2,2]", "DCSR", "DCSC", "CROW", "CCOL", LOOSE, DCSR_CUSTOM]
FORMATS = CUSPARSE + GENERATED

A3 = np.array([[1.0, 0, 2], [0, 0, 0], [0, 3, 0]])
X3 = np.array([[1.0, 10], [2, 20], [3, 30]])
A4 = np.array([[1.0, 0, 0, 2], [0, 3, 0, 0], [0, 0, 0, 0], [4, 0, 0, 5]])
A46 = np.array([[1.0, 0, 0, 2, 0, 0], [0, 3, 0, 0, 0, 0], [0, 0, 0, 0, 0, 6], [4, 0, 0, 5, 0, 0]])


def _gpu_tensor(a: np.ndarray, fmt: str) -> Any:
    """Converted on the CPU, then moved: the GPU tests exercise the multiplication only."""
    return ust.asarray(a, format=fmt, max_padding=10**6).to("cuda")


def _ref(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(sp.csr_array(a) @ x)


def _host(y: Any) -> np.ndarray:
    assert isinstance(y, cp.ndarray), type(y)
    return cp.asnumpy(y)


def _gpu_vector(v: np.ndarray, how: str) -> Any:
    return vector_view(v, how, cp)


def _gpu_matrix(b: np.ndarray, how: str) -> Any:
    return matrix_view(b, how, cp)


def _snapshot(*arrays: Any) -> list[tuple[Any, np.ndarray | None]]:
    return [(a, None if a is None else cp.asnumpy(a)) for a in arrays]


def _unchanged(snap: list[tuple[Any, np.ndarray | None]]) -> None:
    for a, before in snap:
        if before is not None:
            np.testing.assert_array_equal(cp.asnumpy(a), before)


# ----------------------------------------------------------------------------- routes


@pytest.mark.parametrize(
    ("fmt", "route"),
    [
        ("CSR", "cusparse"),
        ("CSC", "cusparse"),
        ("COO", "cusparse"),
        ("BSR[2,2]", "cusparse"),
        ("DIA", "generated-cuda"),
        ("DCSR", "generated-cuda"),
    ],
)
def test_the_issue_example_on_every_gpu_route(fmt: str, route: str) -> None:
    a = np.pad(A3, ((0, 1), (0, 1)))  # 4x4: BSR[2,2] blocks divide it
    xs = np.pad(X3, ((0, 1), (0, 0)))
    t = _gpu_tensor(a, fmt)
    xg = cp.asarray(xs)
    x = xg[:, 0]
    snap = _snapshot(xg)
    mm = ust.Matmul(t, x)
    assert mm.decision.route == route, mm.explain()
    mm.plan()
    want = a @ xs[:, 0]
    np.testing.assert_allclose(_host(mm.execute()), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_host(ust.matmul(t, x)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_host(t @ x), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_host(ust.matmul(t, xg[::-1, 1][::-1])), a @ xs[:, 1], rtol=1e-12)
    _unchanged(snap)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", MATRIX_VIEWS)
def test_matrix_views_with_c_and_beta_on_the_gpu(fmt: str, how: str) -> None:
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((6, 6)), 1) * (rng.random((6, 6)) < 0.4)
    t = _gpu_tensor(a, fmt)
    b0 = np.round(rng.standard_normal((6, 4)), 1)
    c0 = np.round(rng.standard_normal((6, 4)), 1)
    b, c = _gpu_matrix(b0, how), _gpu_matrix(c0, MATRIX_VIEWS[::-1][MATRIX_VIEWS.index(how)])
    snap = _snapshot(b, c)
    np.testing.assert_allclose(_host(ust.matmul(t, b)), _ref(a, b0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        _host(ust.matmul(t, b, c, alpha=1.5, beta=-2.0)), 1.5 * _ref(a, b0) - 2.0 * c0, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(_host(t.__rmatmul__(b.T)), _ref(a.T.copy(), b0).T, rtol=1e-12, atol=1e-12)
    _unchanged(snap)


@pytest.mark.parametrize("fmt", ["CSR", "COO", "BSR[2,2]", "DIA"])
def test_reset_operands_and_the_one_shot_cache_follow_the_layout(fmt: str) -> None:
    a = np.round(np.random.default_rng(5).standard_normal((6, 6)), 1) * (np.eye(6) + np.eye(6, k=2))
    t = _gpu_tensor(a, fmt)
    b0 = np.arange(24.0).reshape(6, 4)
    with ust.Matmul(t, _gpu_matrix(b0, "C")) as mm:
        mm.plan()
        for how in ("F", "rows2", "C", "transposed", "cols2", "F"):
            mm.reset_operands(b=_gpu_matrix(b0 + 1, how))
            np.testing.assert_allclose(_host(mm.execute()), a @ (b0 + 1), rtol=1e-12)
    for how in ("C", "F", "rows2", "F", "reversed", "C"):
        np.testing.assert_allclose(_host(ust.matmul(t, _gpu_matrix(b0, how))), a @ b0, rtol=1e-12)
    for how in VECTOR_VIEWS + VECTOR_VIEWS[::-1]:
        np.testing.assert_allclose(_host(ust.matmul(t, _gpu_vector(b0[:, 1], how))), a @ b0[:, 1], rtol=1e-12)


def test_host_operands_in_any_layout_with_cuda_execution() -> None:
    t = ust.asarray(A3, format="DCSR")
    y = ust.matmul(t, X3[:, 0], execution="cuda")
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, A3 @ X3[:, 0])
    y = ust.matmul(sp.csr_array(A3), X3[::-1, 1], execution="cuda")
    np.testing.assert_array_equal(y, A3 @ X3[::-1, 1])


@pytest.mark.parametrize("fmt", ["DCSR", "BSR[2,3]", "DIA"])
def test_generated_cuda_entry_points_write_into_a_strided_out(fmt: str) -> None:
    from ust.backends.cuda.kernels import matmul_cuda
    from ust.backends.generated.executors import matmul_generated

    a = np.arange(1.0, 37.0).reshape(6, 6) * (np.arange(36).reshape(6, 6) % 4 == 0)
    t = _gpu_tensor(a, fmt)
    v = np.arange(1.0, 7.0)
    for run in (matmul_generated, matmul_cuda):
        big = cp.full((6, 3), -7.0)
        out = big[:, 1]
        got = run(t, _gpu_vector(v, "step2"), out=out)
        assert got is out
        hb = cp.asnumpy(big)
        np.testing.assert_allclose(hb[:, 1], a @ v, rtol=1e-12)
        np.testing.assert_array_equal(hb[:, [0, 2]], -7.0)
        b0 = np.stack([v, -v, 2 * v], axis=1)
        big2 = cp.full((6, 7), -7.0)
        out2 = big2[:, ::2][:, :3]
        got2 = run(t, _gpu_matrix(b0, "cols2"), _gpu_matrix(b0, "F"), alpha=2.0, beta=1.0, out=out2)
        assert got2 is out2
        hb2 = cp.asnumpy(big2)
        np.testing.assert_allclose(hb2[:, 0:6:2], 2 * (a @ b0) + b0, rtol=1e-12)
        np.testing.assert_array_equal(hb2[:, 1::2], -7.0)


@pytest.mark.parametrize("fmt", ["CSR", "DCSR", "BSR[2,2]"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sddmm_cupy_factors_in_any_layout(fmt: str, dtype: str) -> None:
    rng = np.random.default_rng(4)
    s = _gpu_tensor(
        (np.round(rng.standard_normal((6, 4)), 1) * (rng.random((6, 4)) < 0.5)).astype(dtype), fmt
    )
    pattern = (
        cp.asnumpy(ust.ops.sddmm(s, cp.ones((6, 1), dtype=dtype), cp.ones((1, 4), dtype=dtype)).todense())
        != 0
    )
    x0 = np.round(rng.standard_normal((6, 3)), 1).astype(dtype)
    y0 = np.round(rng.standard_normal((3, 4)), 1).astype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for hx, hy in (("rows2", "cols2"), ("F", "reversed"), ("offset", "transposed"), ("reversed", "C")):
        x, y = _gpu_matrix(x0, hx), _gpu_matrix(y0, hy)
        assert x.dtype == dtype and y.dtype == dtype
        snap = _snapshot(x, y)
        dense = cp.asnumpy(ust.ops.sddmm(s, x, y, alpha=2.0).todense())
        np.testing.assert_allclose(dense[pattern], (2.0 * (x0 @ y0))[pattern], rtol=tol, atol=tol)
        np.testing.assert_array_equal(dense[~pattern], 0.0)
        _unchanged(snap)


def test_sddmm_strided_views_keep_their_strides_as_passed() -> None:
    """A float64 strided view (no dtype cast to hide a missing copy) on the cuSPARSE CSR route."""
    rng = np.random.default_rng(6)
    s = _gpu_tensor(np.round(rng.standard_normal((6, 4)), 1) * (rng.random((6, 4)) < 0.5), "CSR")
    pattern = cp.asnumpy(s.todense()) != 0
    x0, y0 = np.round(rng.standard_normal((6, 3)), 1), np.round(rng.standard_normal((3, 4)), 1)
    for hx, hy in (("rows2", "cols2"), ("reversed", "offset")):
        dense = cp.asnumpy(ust.ops.sddmm(s, _gpu_matrix(x0, hx), _gpu_matrix(y0, hy)).todense())
        np.testing.assert_allclose(dense[pattern], (x0 @ y0)[pattern], rtol=1e-12, atol=1e-12)


def test_epilogue_inputs_on_the_gpu() -> None:
    t = _gpu_tensor(A3, "CSR")
    xg = cp.asarray(X3)
    got = ust.matmul(t, xg[:, 0], epilog="max(y + b, 0) * s", epilog_params={"b": xg[::-1, 1], "s": 2})
    np.testing.assert_array_equal(_host(got), np.maximum(A3 @ X3[:, 0] + X3[::-1, 1], 0) * 2)
    got = ust.matmul(t, xg[:, 0], epilog="y + b", epilog_params={"b": [1, 2, 3]})
    np.testing.assert_array_equal(_host(got), A3 @ X3[:, 0] + [1, 2, 3])
    with pytest.raises(ust.DeviceError, match="epilogue parameter 'b'"):
        ust.matmul(t, xg[:, 0], epilog="y + b", epilog_params={"b": np.ones(3)})


# ----------------------------------------------------------------------------- inf / NaN


@pytest.mark.parametrize("fmt", [*FORMATS, "NM[2,4]"])
def test_inf_and_nan_in_x_agree_with_scipy_csr_on_the_gpu(fmt: str) -> None:
    a = A46 if fmt == "BSR[2,3]" else A4
    t = _gpu_tensor(a, fmt)
    for x in special_vectors(a.shape[1]):
        np.testing.assert_array_equal(_host(ust.matmul(t, cp.asarray(x))), _ref(a, x))
        np.testing.assert_array_equal(_host(ust.matmul(t, _gpu_vector(x, "step2"))), _ref(a, x))
        xx = np.stack([x, x[::-1]], axis=1)
        got = ust.matmul(t, cp.asarray(xx), cp.ones((a.shape[0], 2)), alpha=2.0, beta=0.5)
        np.testing.assert_array_equal(_host(got), 2.0 * _ref(a, xx) + 0.5)
    np.testing.assert_array_equal(
        _host(ust.matmul(t, cp.arange(1.0, a.shape[1] + 1))), _ref(a, np.arange(1.0, a.shape[1] + 1))
    )


def test_cusparse_bsr_falls_back_to_the_guarded_kernel_for_non_finite_x() -> None:
    t = _gpu_tensor(A4, "BSR[2,2]")
    x = np.array([1.0, np.inf, 2.0, 3.0])
    with ust.Matmul(t, cp.asarray(x), alpha=2.0) as mm:
        assert mm.decision.route == "cusparse", mm.explain()
        mm.plan()
        np.testing.assert_array_equal(_host(mm.execute()), 2.0 * _ref(A4, x))
        finite = np.array([1.0, 2.0, 3.0, 4.0])
        mm.reset_operands(b=cp.asarray(finite))
        np.testing.assert_array_equal(_host(mm.execute()), 2.0 * _ref(A4, finite))
        mm.reset_operands(b=cp.asarray(x[::-1]))
        np.testing.assert_array_equal(_host(mm.execute()), 2.0 * _ref(A4, x[::-1]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_inf_and_nan_values_in_the_matrix_agree_with_scipy_csr_on_the_gpu(fmt: str) -> None:
    a = (A46 if fmt == "BSR[2,3]" else A4).copy()
    a[0, 0], a[3, 3] = np.inf, np.nan
    t = _gpu_tensor(a, fmt)
    n = a.shape[1]
    for x in (np.arange(float(n)), np.array([1.0, -1.0] + [0.0] * (n - 2)), np.zeros(n)):
        np.testing.assert_array_equal(_host(ust.matmul(t, cp.asarray(x))), _ref(a, x))


# ----------------------------------------------------------------------------- the property


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=10)
@given(case=layout_case())
def test_every_gpu_route_matches_scipy_for_any_operand_layout(fmt: str, case: dict[str, Any]) -> None:
    a, x0, c0 = case["a"], case["x0"], case["c0"]
    view = _gpu_vector if x0.ndim == 1 else _gpu_matrix
    x, c = view(x0, case["xview"]), view(c0, case["cview"])
    snap = _snapshot(x, c)
    t = _gpu_tensor(a, fmt)
    alpha, beta = case["alpha"], case["beta"]
    cc = c if beta != 0 else None
    if case["style"] == "matmul":
        got = ust.matmul(t, x, cc, alpha=alpha, beta=beta)
    elif case["style"] == "operator":
        got = t @ x
    else:
        with ust.Matmul(t, x, cc, alpha=alpha, beta=beta) as mm:
            mm.plan()
            got = mm.execute()
    want = alpha * _ref(a, x0) + (beta * c0 if beta != 0 else 0.0)
    np.testing.assert_allclose(_host(got), want, rtol=1e-12, atol=1e-12)
    if case["style"] == "operator":  # x @ A: what ``xt @ t`` calls once CuPy defers to the Tensor
        xt = x.T if x.ndim == 2 else x
        np.testing.assert_allclose(_host(t.__rmatmul__(xt)), _ref(a.T.copy(), x0).T, rtol=1e-12, atol=1e-12)
    _unchanged(snap)
