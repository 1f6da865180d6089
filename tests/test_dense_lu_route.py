"""The dense LU solve route (LAPACK on the CPU): chosen for small one-shot solves, forced by
``route="dense-lu"``, and judged by the same solution check as SuperLU -- same answers (to
rounding), same errors, on every matrix family of the safety cases."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import ust.linalg as L

import ust
from tests.linalg_safety_cases import FAMILIES, SEEDS, outcome, rhs_for
from ust.backends.dense_lu import hager_inverse_norm
from ust.plan.rules import DENSE_SOLVE_LIMIT, DENSE_SOLVE_MAX_N
from ust.runtime.errors import InvalidValueError, SingularMatrixError, UnsupportedError

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _matrix(n: int, dtype: type = np.float64, seed: int = 0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = sp.random_array((n, n), density=0.1, format="csr", rng=rng) + 4 * sp.eye_array(n)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * sp.random_array((n, n), density=0.1, format="csr", rng=rng)
    return sp.csr_array(a.astype(dtype))


def _rhs(n: int, k: int | None, dtype: type, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((n,) if k is None else (n, k))
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(b.shape)
    return b.astype(dtype)


def _route_of_one_shot(caplog: pytest.LogCaptureFixture, *args: object, **kwargs: object) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ust.plan"):
        L.solve(*args, **kwargs)
    chosen = [m for m in caplog.messages if m.startswith("route for solve: ")]
    assert len(chosen) == 1, caplog.messages
    return chosen[0].removeprefix("route for solve: ").split(" ")[0]


def test_small_one_shot_solves_take_the_dense_lu_and_larger_ones_superlu(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cap = DENSE_SOLVE_MAX_N["cpu"]
    for n, route in ((1, "dense-lu"), (cap, "dense-lu"), (cap + 1, "superlu")):
        assert _route_of_one_shot(caplog, _matrix(n), np.ones(n)) == route, n
    # the stateful solver keeps the sparse route (its plan holds the ordering)
    with L.DirectSolver(_matrix(20), np.ones(20)) as s:
        assert s.backend == "superlu"


@pytest.mark.parametrize(
    "options",
    [{"pivoting": "none"}, {"reordering": "colamd"}, {"pivot_threshold": 0.5}, {"precision": "mixed"}],
)
def test_options_only_a_sparse_library_honours_keep_the_sparse_route(
    caplog: pytest.LogCaptureFixture, options: dict[str, object]
) -> None:
    assert _route_of_one_shot(caplog, _matrix(20), np.ones(20), **options) == "superlu"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [None, 1, 3])
def test_the_dense_lu_matches_scipy(dtype: type, k: int | None) -> None:
    n = 60
    a, b = _matrix(n, dtype), _rhs(n, k, dtype)
    a0, b0 = a.copy(), b.copy()
    x = L.solve(a, b)
    ref = np.asarray(sla.spsolve(sp.csc_array(a), b)).reshape(b.shape)
    assert x.shape == b.shape and x.dtype == np.dtype(dtype)
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11
    np.testing.assert_allclose(x, ref, rtol=tol, atol=tol)
    # the caller's arrays are read, never written
    np.testing.assert_array_equal(b, b0)
    np.testing.assert_array_equal(a.data, a0.data)
    np.testing.assert_array_equal(a.indices, a0.indices)


@pytest.mark.parametrize(
    ("matrix_type", "view"),
    [("spd", "lower"), ("spd", "upper"), ("symmetric", "full"), ("hpd", "lower"), ("general", "full")],
)
def test_the_dense_lu_reads_the_stored_triangle_as_the_sparse_route_does(matrix_type: str, view: str) -> None:
    n = 40
    m = _matrix(n, np.complex128 if matrix_type == "hpd" else np.float64)
    full = sp.csr_array(m @ m.T.conj() + n * sp.eye_array(n)) if matrix_type in ("spd", "hpd") else m + m.T
    stored = {"lower": sp.tril(full), "upper": sp.triu(full), "full": full}[view].tocsr()
    b = _rhs(n, 2, full.dtype)
    x = L.solve(stored, b, matrix_type=matrix_type, matrix_view=view)
    with L.DirectSolver(stored, b, options={"matrix_type": matrix_type, "matrix_view": view}) as s:
        x_sparse = s.execute()
        assert s.backend == "superlu"
    np.testing.assert_allclose(x, x_sparse, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(full @ x, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", list(SEEDS))
def test_every_safety_family_gives_the_sparse_routes_outcome(family: str, seed: int) -> None:
    build, expected = FAMILIES[family]
    a = build(seed)
    b = rhs_for(a, seed)
    dense, x = outcome(lambda: L.solve(a, b, route="dense-lu"))
    sparse, _ = outcome(lambda: L.solve(a, b, route="superlu"))
    assert dense == sparse == expected, f"{family}[{seed}]: dense {dense} ({x}), superlu {sparse}"


def test_an_exactly_singular_matrix_and_an_empty_row_are_refused_before_a_junk_x() -> None:
    a = sp.csr_array(np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]))
    with pytest.raises(SingularMatrixError, match="singular"):
        L.solve(a, np.ones(3), route="dense-lu")
    empty_row = sp.csr_array(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(SingularMatrixError, match="row 1 has no nonzero entry"):
        L.solve(empty_row, np.ones(2))
    with pytest.raises(InvalidValueError, match="NaN or Inf"):
        L.solve(sp.csr_array(np.array([[1.0, np.nan], [0.0, 1.0]])), np.ones(2))


def test_a_forced_dense_lu_runs_every_phase_of_the_stateful_solver(tmp_path: Path) -> None:
    n = 300  # above the one-shot cap: the route is forced
    a, b = _matrix(n), _rhs(n, None, np.float64)
    with L.DirectSolver(a, b, options={"route": "dense-lu"}) as s:
        assert s.backend == "dense-lu"
        info = s.plan()
        assert info.ordering.startswith("none (dense LU")
        f = s.factorize()
        assert f.lu_nnz == n * n and f.small_pivots == 0
        np.testing.assert_allclose(s.solve(), sla.spsolve(a.tocsc(), b), rtol=1e-11)
        a2 = sp.csr_array((a.data * 2, a.indices, a.indptr), shape=a.shape)
        s.reset_operands(a=a2)
        s.refactorize()
        np.testing.assert_allclose(s.solve(), sla.spsolve(a2.tocsc(), b), rtol=1e-11)
        path = tmp_path / "dense.plan"
        s.save_plan(path)
    with L.DirectSolver.load_plan(path, a, b, options={"route": "dense-lu"}) as s2:
        np.testing.assert_allclose(s2.execute(), sla.spsolve(a.tocsc(), b), rtol=1e-11)


def test_a_forced_route_that_cannot_run_names_the_candidates() -> None:
    with pytest.raises(UnsupportedError, match="candidates: superlu"):
        L.solve(
            sp.eye_array(DENSE_SOLVE_LIMIT + 1, format="csr"),
            np.ones(DENSE_SOLVE_LIMIT + 1),
            route="dense-lu",
        )
    with pytest.raises(UnsupportedError, match="route 'cudss' does not apply"):
        L.solve(_matrix(10), np.ones(10), route="cudss", execution="cpu")
    with pytest.raises(InvalidValueError, match="route must be"):
        L.solve(_matrix(10), np.ones(10), route=3)


def test_mixed_precision_runs_over_a_forced_dense_lu() -> None:
    n = 50
    a, b = _matrix(n), _rhs(n, None, np.float64)
    x = L.solve(a, b, precision="mixed", route="dense-lu")
    np.testing.assert_allclose(x, sla.spsolve(a.tocsc(), b), rtol=1e-12)


def test_explain_names_the_dense_lu_for_a_small_system() -> None:
    text = ust.explain("solve", _matrix(30), np.ones(30))
    assert "dense-lu" in text and "n <= 128" in text
    assert "superlu" in ust.explain("solve", _matrix(300), np.ones(300))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_hagers_estimate_is_a_lower_bound_close_to_the_inverse_norm(dtype: type) -> None:
    rng = np.random.default_rng(5)
    for n in (1, 7, 40):
        a = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if dtype is np.complex128 else 0)
        a = a.astype(dtype)
        exact = np.abs(np.linalg.inv(a)).sum(axis=1).max()
        est = hager_inverse_norm(
            n, lambda v, t, a=a: np.linalg.solve(a if t == 0 else a.conj().T, v), np, a.dtype
        )
        assert est <= exact * (1 + 1e-10) and est >= exact / 10, (n, est, exact)
