"""Dense operands in any memory layout, and inf / NaN operands, on the CPU.

Every route (SciPy, generated C, the no-compiler fallbacks) and every format of the support
table must give SciPy's result for strided, reversed, offset and Fortran-order operands (x, B,
C, SDDMM's dense factors, epilogue inputs, a caller's ``out``), for lists, and for inf / NaN in
x: padding slots (DIA's empty slots, the zero fill of blocked and structured levels) are not
entries and never meet x.  Caller arrays are never modified.
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
from tests.support import STANDARD_2D

FORMATS = [*STANDARD_2D, LOOSE, DCSR_CUSTOM]

A3 = np.array([[1.0, 0, 2], [0, 0, 0], [0, 3, 0]])
X3 = np.array([[1.0, 10], [2, 20], [3, 30]])
#: 4x4 with off-diagonal entries: DIA has empty in-matrix slots, BSR[2,2] zero fill in blocks
A4 = np.array([[1.0, 0, 0, 2], [0, 3, 0, 0], [0, 0, 0, 0], [4, 0, 0, 5]])
#: 4x6 for BSR[2,3] (block columns of 3 must divide the width)
A46 = np.array([[1.0, 0, 0, 2, 0, 0], [0, 3, 0, 0, 0, 0], [0, 0, 0, 0, 0, 6], [4, 0, 0, 5, 0, 0]])


def _nonfinite_matrix(fmt: str) -> np.ndarray:
    return A46 if fmt == "BSR[2,3]" else A4


def _all_dense(fmt: str) -> bool:
    return bool(_tensor(np.zeros((2, 2)), fmt).format.is_dense) if "[" not in fmt else False


def _ref(a: np.ndarray, fmt: str, x: np.ndarray) -> np.ndarray:
    """SciPy CSR (zeros absent) for sparse formats; NumPy for all-dense layouts (every slot an entry)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if _all_dense(fmt):
            return np.asarray(a @ x)
        return np.asarray(sp.csr_array(a) @ x)


def _tensor(a: np.ndarray, fmt: str) -> Any:
    return ust.asarray(a, format=fmt, max_padding=10**6)


# ----------------------------------------------------------------------------- views


def _snapshot(*arrays: Any) -> list[tuple[Any, np.ndarray | None]]:
    return [(a, None if a is None else np.array(a, copy=True)) for a in arrays]


def _unchanged(snap: list[tuple[Any, np.ndarray | None]]) -> None:
    for a, before in snap:
        if before is not None:
            np.testing.assert_array_equal(a, before)


# ----------------------------------------------------------------------------- defect 1: layouts


@pytest.mark.parametrize("fmt", ["DCSR", "DCSC", LOOSE, "CROW", "BSC[2,2]", "DIAI", "CSR", "DIA"])
def test_the_issue_example_strided_column(fmt: str) -> None:
    a = A3 if "2,2" not in fmt else np.pad(A3, ((0, 1), (0, 1)))
    x_full = X3 if "2,2" not in fmt else np.pad(X3, ((0, 1), (0, 0)))
    t = _tensor(a, fmt)
    x = x_full[:, 0]
    snap = _snapshot(x_full)
    want = a @ x_full[:, 0].copy()
    np.testing.assert_array_equal(ust.matmul(t, x), want)
    np.testing.assert_array_equal(t @ x, want)
    _unchanged(snap)
    if fmt == "DCSR":
        np.testing.assert_array_equal(ust.matmul(t, x), [7.0, 0.0, 6.0])


@pytest.mark.parametrize("fmt", ["DCSR", "DCSC", LOOSE, DCSR_CUSTOM, "BSR[2,3]", "DIA"])
@pytest.mark.parametrize("how", VECTOR_VIEWS)
def test_vector_views_every_entry_point(fmt: str, how: str) -> None:
    a = np.arange(1.0, 37.0).reshape(6, 6) * (np.arange(36).reshape(6, 6) % 3 == 0)
    t = _tensor(a, fmt)
    v = np.arange(1.0, 7.0)
    x = vector_view(v, how)
    snap = _snapshot(x)
    want = a @ v
    np.testing.assert_allclose(ust.matmul(t, x), want)
    np.testing.assert_allclose(t @ x, want)
    np.testing.assert_allclose(x @ t, v @ a)
    np.testing.assert_allclose(ust.matmul(t, x, x, alpha=2.0, beta=-1.0), 2.0 * want - v)
    with ust.Matmul(t, x, alpha=0.5) as mm:
        mm.plan()
        np.testing.assert_allclose(mm.execute(), 0.5 * want)
        mm.reset_operands(b=vector_view(2 * v, "reversed"))
        np.testing.assert_allclose(mm.execute(), want)
    _unchanged(snap)


def test_reversed_vector_reads_no_memory_outside_the_view() -> None:
    t = _tensor(A3, "DCSR")
    buf = np.array([np.nan, np.nan, 1.0, 2.0, 3.0, np.nan, np.nan])
    x = buf[4:1:-1]  # [3, 2, 1], negative stride inside a NaN-padded buffer
    np.testing.assert_array_equal(ust.matmul(t, x), A3 @ np.array([3.0, 2.0, 1.0]))


def test_lists_and_nested_lists_work_like_numpy_array_likes() -> None:
    for fmt in ("CSR", "DCSR", "DIA"):
        t = _tensor(A3, fmt)
        np.testing.assert_array_equal(ust.matmul(t, [1.0, 2.0, 3.0]), A3 @ [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(ust.matmul(t, [[1, 2], [3, 4], [5, 6]]), A3 @ [[1, 2], [3, 4], [5, 6]])
        np.testing.assert_array_equal(
            ust.matmul(t, [1, 2, 3], [1, 1, 1], alpha=2, beta=3), 2 * A3 @ [1, 2, 3] + 3
        )
        np.testing.assert_array_equal(t @ [1, 2, 3], A3 @ [1, 2, 3])
        np.testing.assert_array_equal([1, 2, 3] @ t, np.array([1, 2, 3]) @ A3)
        np.testing.assert_array_equal([[1, 2, 3]] @ t, np.array([[1, 2, 3]]) @ A3)
        with ust.Matmul(t, [1.0, 2.0, 3.0]) as mm:
            mm.plan()
            mm.reset_operands(b=[3.0, 2.0, 1.0])
            np.testing.assert_array_equal(mm.execute(), A3 @ [3.0, 2.0, 1.0])


@pytest.mark.parametrize("fmt", ["CSR", "DCSR", "DIA", "BSR[2,3]", LOOSE])
@pytest.mark.parametrize("how", MATRIX_VIEWS)
def test_matrix_views_with_c_and_beta(fmt: str, how: str) -> None:
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((6, 6)), 1) * (rng.random((6, 6)) < 0.4)
    t = _tensor(a, fmt)
    b0 = np.round(rng.standard_normal((6, 4)), 1)
    c0 = np.round(rng.standard_normal((6, 4)), 1)
    b, c = matrix_view(b0, how), matrix_view(c0, MATRIX_VIEWS[::-1][MATRIX_VIEWS.index(how)])
    snap = _snapshot(b, c)
    np.testing.assert_allclose(ust.matmul(t, b), a @ b0, atol=1e-12)
    np.testing.assert_allclose(t @ b, a @ b0, atol=1e-12)
    np.testing.assert_allclose(
        ust.matmul(t, b, c, alpha=1.5, beta=-2.0), 1.5 * (a @ b0) - 2.0 * c0, atol=1e-12
    )
    np.testing.assert_allclose(b.T @ t, b0.T @ a, atol=1e-12)
    _unchanged(snap)


def test_one_shot_cache_keys_on_the_layout() -> None:
    t = _tensor(A3, "DCSR")
    b0 = X3.copy()
    for how in ("C", "F", "rows2", "cols2", "F", "reversed", "C"):
        np.testing.assert_array_equal(ust.matmul(t, matrix_view(b0, how)), A3 @ b0)


@pytest.mark.parametrize("fmt", ["DCSR", "BSR[2,3]", "DIA"])
def test_generated_entry_points_write_into_a_strided_out(fmt: str) -> None:
    from ust.backends.cpu.ckernels import matmul_c
    from ust.backends.generated.executors import matmul_generated

    a = np.arange(1.0, 37.0).reshape(6, 6) * (np.arange(36).reshape(6, 6) % 4 == 0)
    t = _tensor(a, fmt)
    v = np.arange(1.0, 7.0)
    for run in (matmul_generated, matmul_c):
        big = np.full((6, 3), -7.0)
        out = big[:, 1]
        got = run(t, vector_view(v, "step2"), out=out)
        assert got is out
        np.testing.assert_allclose(big[:, 1], a @ v)
        np.testing.assert_array_equal(big[:, [0, 2]], -7.0)
        b0 = np.stack([v, -v, 2 * v], axis=1)
        big2 = np.full((6, 7), -7.0)
        out2 = big2[:, ::2][:, :3]
        got2 = run(t, matrix_view(b0, "cols2"), matrix_view(b0, "F"), alpha=2.0, beta=1.0, out=out2)
        assert got2 is out2
        np.testing.assert_allclose(big2[:, 0:6:2], 2 * (a @ b0) + b0)
        np.testing.assert_array_equal(big2[:, 1::2], -7.0)


def test_dense_operand_copies_only_what_it_must() -> None:
    from ust.backends.generated.launch import array_layout, dense_operand

    c = np.arange(12.0).reshape(3, 4)
    f = np.asfortranarray(c)
    assert dense_operand(np, c) is c
    assert dense_operand(np, f) is f
    assert dense_operand(np, f, layouts=("row",)) is not f
    for view in (c[:, 0], c[::2], c[:, ::-1], c[::-1], c.ravel()[::-1]):
        before = c.copy()
        got = dense_operand(np, view)
        assert array_layout(got) is not None
        np.testing.assert_array_equal(got, view)
        np.testing.assert_array_equal(c, before)
    off = np.arange(10.0)[3:]
    assert dense_operand(np, off) is off  # a contiguous offset view needs no copy
    assert dense_operand(np, [1, 2]).dtype.kind == "i"
    assert dense_operand(np, c[:, 0], "float32").dtype == np.float32


@pytest.mark.parametrize("fmt", ["CSR", "DCSR", "BSR[2,2]", "DIA"])
def test_sddmm_dense_factors_in_any_layout(fmt: str) -> None:
    rng = np.random.default_rng(4)
    s = _tensor(np.round(rng.standard_normal((6, 4)), 1) * (rng.random((6, 4)) < 0.5), fmt)
    # every stored slot gets a dot product (block fill included, DIA's outside slots not)
    pattern = np.asarray(ust.ops.sddmm(s, np.ones((6, 1)), np.ones((1, 4))).todense()) != 0
    x0, y0 = np.round(rng.standard_normal((6, 3)), 1), np.round(rng.standard_normal((3, 4)), 1)
    for hx, hy in (("rows2", "cols2"), ("F", "reversed"), ("offset", "transposed"), ("reversed", "C")):
        x, y = matrix_view(x0, hx), matrix_view(y0, hy)
        snap = _snapshot(x, y)
        r = ust.ops.sddmm(s, x, y, alpha=2.0)
        dense = np.asarray(r.todense())
        np.testing.assert_allclose(dense[pattern], (2.0 * (x0 @ y0))[pattern], atol=1e-12)
        np.testing.assert_array_equal(dense[~pattern], 0.0)
        _unchanged(snap)


def test_epilogue_inputs_in_any_layout_and_lists() -> None:
    t = _tensor(A3, "DCSR")
    bias = X3[::-1, 1]  # reversed column view [30, 20, 10]
    x = X3[:, 0]
    got = ust.matmul(t, x, epilog="max(y + b, 0) * s", epilog_params={"b": bias, "s": 2})
    np.testing.assert_array_equal(got, np.maximum(A3 @ X3[:, 0] + X3[::-1, 1], 0) * 2)
    got = ust.matmul(t, x, epilog="y + b", epilog_params={"b": [1, 2, 3]})
    np.testing.assert_array_equal(got, A3 @ X3[:, 0] + [1, 2, 3])
    b2 = np.asfortranarray(np.arange(6.0).reshape(3, 2))[::-1]
    got = ust.matmul(t, matrix_view(X3, "cols2"), epilog="y * w", epilog_params={"w": b2})
    np.testing.assert_array_equal(got, (A3 @ X3) * b2)


# ----------------------------------------------------------------------------- defect 4: inf / NaN


NONFINITE_FORMATS = [*FORMATS, "NM[2,4]"]


@pytest.mark.parametrize("fmt", NONFINITE_FORMATS)
def test_inf_and_nan_in_x_agree_with_scipy_csr(fmt: str) -> None:
    a = _nonfinite_matrix(fmt)
    t = _tensor(a, fmt)
    for x in special_vectors(a.shape[1]):
        np.testing.assert_array_equal(ust.matmul(t, x), _ref(a, fmt, x))
        xx = np.stack([x, x[::-1]], axis=1)
        np.testing.assert_array_equal(
            ust.matmul(t, xx, np.ones((a.shape[0], 2)), alpha=2.0, beta=0.5), 2.0 * _ref(a, fmt, xx) + 0.5
        )
        np.testing.assert_array_equal(t @ vector_view(x, "step2"), _ref(a, fmt, x))


def test_padded_routes_without_a_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SciPy fallbacks (no C compiler) drop the padding of DIA / BSR / BSC / CROW too."""
    import ust.api.matmul as om
    import ust.backends.generated.executors as rt

    monkeypatch.setattr(om, "c_compiler_available", lambda: False)
    monkeypatch.setattr(rt, "_no_compiler", lambda: True)
    for fmt in ("BSR[2,2]", "BSC[2,2]", "DIA", "CROW", "DCSR"):
        t = _tensor(A4, fmt)
        for x in special_vectors(4):
            want = _ref(A4, fmt, x)
            with ust.Matmul(t, x, alpha=2.0) as mm:
                assert mm.decision.route in ("scipy", "convert-scipy"), mm.explain()
                mm.plan()
                np.testing.assert_array_equal(mm.execute(), 2.0 * want)
            np.testing.assert_array_equal(rt.matmul_generated(t, x), want)


def test_scipy_dia_with_garbage_outside_the_matrix() -> None:
    """SciPy's DIA layout may hold anything in slots outside the matrix: never read."""
    # offset -1: data[0, 3] lies outside the matrix; data[1, 2] is an empty slot on the diagonal
    data = np.array([[1.0, 2.0, 3.0, np.inf], [4.0, 5.0, 0.0, 7.0]])
    d = sp.dia_array((data, [-1, 0]), shape=(4, 4))
    d_csr = sp.csr_array(d)
    assert d_csr.nnz == 6
    t = ust.asarray(d)
    x = np.array([1.0, 2.0, np.inf, 3.0])
    for y in (ust.matmul(t, x), ust.matmul(t, x, alpha=3.0) / 3.0, t.convert("DIAI") @ x):
        np.testing.assert_array_equal(y, d_csr @ x)


def test_scipy_csr_explicit_zeros_keep_scipys_semantics() -> None:
    m = sp.csr_array((np.array([0.0, 1.0]), np.array([1, 0]), np.array([0, 1, 2])), shape=(2, 2))
    x = np.array([1.0, np.inf])
    want = m @ x  # 0 * inf: NaN, as SciPy computes it
    assert np.isnan(want[0])
    np.testing.assert_array_equal(ust.matmul(ust.asarray(m), x), want)
    np.testing.assert_array_equal(ust.matmul(ust.asarray(m), x, alpha=2.0) / 2.0, want)


@pytest.mark.parametrize("fmt", [f for f in NONFINITE_FORMATS if not f.startswith("Dense")])
def test_inf_and_nan_values_in_the_matrix_agree_with_scipy_csr(fmt: str) -> None:
    """(All-dense layouts are NumPy arrays: whether BLAS computes ``inf * 0`` is its own affair.)"""
    a = _nonfinite_matrix(fmt).copy()
    a[0, 0], a[3, 3] = np.inf, np.nan
    t = _tensor(a, fmt)
    n = a.shape[1]
    for x in (np.arange(float(n)), np.array([1.0, -1.0] + [0.0] * (n - 2)), np.zeros(n)):
        np.testing.assert_array_equal(ust.matmul(t, x), _ref(a, fmt, x))
        np.testing.assert_array_equal(ust.matmul(t, x, alpha=-1.0), -_ref(a, fmt, x))


# ----------------------------------------------------------------------------- the property


def _call(style: str, t: Any, x: Any, c: Any, alpha: float, beta: float) -> Any:
    if style == "matmul":
        return ust.matmul(t, x, c, alpha=alpha, beta=beta)
    if style == "operator":
        return t @ x
    with ust.Matmul(t, x, c, alpha=alpha, beta=beta) as mm:
        mm.plan()
        return mm.execute()


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=12)
@given(case=layout_case())
def test_every_route_and_format_matches_scipy_for_any_operand_layout(fmt: str, case: dict[str, Any]) -> None:
    a, x0, c0 = case["a"], case["x0"], case["c0"]
    view = vector_view if x0.ndim == 1 else matrix_view
    x, c = view(x0, case["xview"]), view(c0, case["cview"])
    snap = _snapshot(x, c)
    t = _tensor(a, fmt)
    alpha, beta = case["alpha"], case["beta"]
    got = _call(case["style"], t, x, c if beta != 0 else None, alpha, beta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = alpha * _ref(a, fmt, x0) + (beta * c0 if beta != 0 else 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if case["style"] == "operator":  # x @ A too (the transpose's route)
        xt = x.T if x.ndim == 2 else x
        want_t = _ref(a.T.copy(), fmt, x0)
        np.testing.assert_allclose(xt @ t, want_t.T, rtol=1e-12, atol=1e-12)
    _unchanged(snap)
