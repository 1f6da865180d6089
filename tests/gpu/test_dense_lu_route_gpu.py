"""The dense LU solve route on the GPU (cuSOLVER getrf / getrs): chosen for small one-shot solves,
forced by ``route="dense-lu"``, and giving the CPU's answers and errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import ust.linalg as L

from tests.linalg_safety_cases import FAMILIES, SEEDS, outcome, rhs_for
from tests.test_dense_lu_route import DTYPES, _matrix, _rhs
from ust.plan.rules import DENSE_SOLVE_MAX_N
from ust.runtime.errors import SingularMatrixError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")


def _chosen(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m.split(" ")[3] for m in caplog.messages if m.startswith("route for solve: ")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [None, 1, 3])
def test_a_small_one_shot_gpu_solve_runs_the_dense_lu_and_matches_scipy(
    caplog: pytest.LogCaptureFixture, dtype: type, k: int | None
) -> None:
    n = 70
    a, b = _matrix(n, dtype), _rhs(n, k, dtype)
    with caplog.at_level(logging.INFO, logger="ust"):
        x = L.solve(csp.csr_matrix(a), cp.asarray(b))
    assert _chosen(caplog) == ["dense-lu"]
    assert isinstance(x, cp.ndarray) and x.shape == b.shape and x.dtype == np.dtype(dtype)
    ref = np.asarray(sla.spsolve(sp.csc_array(a), b)).reshape(b.shape)
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11
    np.testing.assert_allclose(cp.asnumpy(x), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(L.solve(a, b, execution="cuda"), ref, rtol=tol, atol=tol)


def test_the_gpu_cap_and_the_stateful_solver_keep_cudss(caplog: pytest.LogCaptureFixture) -> None:
    cap = DENSE_SOLVE_MAX_N["cuda"]
    with caplog.at_level(logging.INFO, logger="ust"):
        L.solve(_matrix(cap), np.ones(cap), execution="cuda")
        L.solve(_matrix(cap + 1), np.ones(cap + 1), execution="cuda")
        with L.DirectSolver(_matrix(30), np.ones(30), execution="cuda") as s:
            s.execute()
    assert _chosen(caplog) == ["dense-lu", "cudss", "cudss"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", list(SEEDS))
def test_every_safety_family_gives_the_cpus_outcome_on_cudss_too(family: str, seed: int) -> None:
    """tests/gpu/test_linalg_safety_gpu.py now runs these small systems on the dense LU: cuDSS, forced,
    must still give the same outcome."""
    build, expected = FAMILIES[family]
    a = build(seed)
    b = rhs_for(a, seed)
    got, x = outcome(lambda: L.solve(a, b, execution="cuda", route="cudss"))
    assert got == expected, f"{family}[{seed}]: {got}: {x}"


def test_an_exactly_singular_matrix_is_refused_on_the_gpu() -> None:
    a = sp.csr_array(np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]))
    with pytest.raises(SingularMatrixError, match="singular"):
        L.solve(csp.csr_matrix(a), cp.ones(3))


def test_a_forced_dense_lu_on_the_gpu_refactorises_on_its_stream() -> None:
    n = 400
    a, b = _matrix(n), _rhs(n, 2, np.float64)
    stream = cp.cuda.Stream(non_blocking=True)
    with L.DirectSolver(csp.csr_matrix(a), cp.asarray(b), options={"route": "dense-lu"}, stream=stream) as s:
        s.plan()
        f = s.factorize()
        assert s.backend == "dense-lu" and f.lu_nnz == n * n
        np.testing.assert_allclose(cp.asnumpy(s.solve()), sla.spsolve(a.tocsc(), b), rtol=1e-11)
        a2 = sp.csr_array((a.data * 3, a.indices, a.indptr), shape=a.shape)
        s.reset_operands(a=csp.csr_matrix(a2))
        s.refactorize()
        np.testing.assert_allclose(cp.asnumpy(s.solve()), sla.spsolve(a2.tocsc(), b), rtol=1e-11)


def test_the_device_screen_refuses_what_the_host_checks_refuse() -> None:
    """NaN / Inf values (also in a triangle the view ignores) and empty lines: the CPU's errors."""
    from ust.runtime.errors import InvalidValueError

    nan = sp.csr_array(np.array([[1.0, np.nan], [0.0, 1.0]]))
    for ex in ("cpu", "cuda"):
        with pytest.raises(InvalidValueError, match="1 NaN or Inf"):
            L.solve(nan, np.ones(2), execution=ex)
        with pytest.raises(InvalidValueError, match="1 NaN or Inf"):
            L.solve(nan, np.ones(2), execution=ex, matrix_type="symmetric", matrix_view="lower")
        with pytest.raises(SingularMatrixError, match="column 1 has no nonzero entry"):
            L.solve(sp.csr_array(np.array([[1.0, 0.0], [1.0, 0.0]])), np.ones(2), execution=ex)
        with pytest.raises(SingularMatrixError, match="row 0 has no nonzero entry"):
            L.solve(sp.csr_array(np.array([[0.0, 0.0], [1.0, 1.0]])), np.ones(2), execution=ex)
