"""ust.linalg's Krylov solvers on the GPU: the CPU's answers (same convergence, same errors) for
CuPy operands and for execution="cuda", in several formats; x comes back in b's package."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from ust.linalg import IterativeSolver, IterativeSolverWarning, bicgstab, cg, gmres, minres

import ust
from ust.runtime.errors import InvalidValueError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

METHODS = {"cg": cg, "minres": minres, "gmres": gmres, "bicgstab": bicgstab}


def poisson2d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def convection_diffusion(m: int, wind: float = 0.4) -> sp.csr_array:
    t = sp.diags_array([-1.0 - wind, 2.0 + wind, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def rel(a: sp.csr_array, x: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))


CASES = [
    ("cg", "spd"),
    ("minres", "spd"),
    ("gmres", "spd"),
    ("bicgstab", "spd"),
    ("gmres", "unsym"),
    ("bicgstab", "unsym"),
]


@pytest.mark.parametrize(("method", "kind"), CASES)
@pytest.mark.parametrize("fmt", ["CSR", "DIA", "BSR[2,2]", "(i, j) -> (i : dense, j : loose_compressed)"])
def test_gpu_matches_cpu(method: str, kind: str, fmt: str) -> None:
    a = poisson2d(20) if kind == "spd" else convection_diffusion(20)
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    t = ust.asarray(a, format=fmt)
    x_cpu, info_cpu = METHODS[method](t, b, rtol=1e-9, maxiter=5000)
    x_gpu, info_gpu, res = METHODS[method](
        t.to("cuda"), cp.asarray(b), rtol=1e-9, maxiter=5000, return_result=True
    )
    assert info_cpu == info_gpu == 0
    assert isinstance(x_gpu, cp.ndarray)
    assert rel(a, cp.asnumpy(x_gpu), b) <= 1e-9
    np.testing.assert_allclose(cp.asnumpy(x_gpu), x_cpu, rtol=1e-6, atol=1e-7)
    assert res.device.startswith("cuda")


def test_execution_cuda_moves_and_returns_numpy() -> None:
    a = poisson2d(16)
    b = np.random.default_rng(1).standard_normal(a.shape[0])
    x, info, res = cg(a, b, rtol=1e-10, execution="cuda", return_result=True)
    assert info == 0 and isinstance(x, np.ndarray) and res.device.startswith("cuda")
    assert rel(a, x, b) <= 1e-10


def test_cupyx_operands_and_check_every() -> None:
    a = poisson2d(16)
    b = np.random.default_rng(2).standard_normal(a.shape[0])
    ga, gb = csp.csr_matrix(a), cp.asarray(b)
    _, _, r1 = cg(ga, gb, rtol=1e-10, options={"check_every": 1}, return_result=True)
    x8, _, r8 = cg(ga, gb, rtol=1e-10, return_result=True)  # the GPU default tests every 8
    assert r8.iterations - r1.iterations in range(0, 8)
    assert rel(a, cp.asnumpy(x8), b) <= 1e-10
    seen: list[int] = []
    cg(ga, gb, rtol=1e-10, callback=lambda xk: seen.append(int(isinstance(xk, cp.ndarray))))
    assert seen and all(seen)


def test_maxiter_and_non_finite_input_as_on_the_cpu() -> None:
    a = poisson2d(16)
    b = cp.asarray(np.random.default_rng(3).standard_normal(a.shape[0]))
    with pytest.warns(IterativeSolverWarning):
        x, info = cg(csp.csr_matrix(a), b, rtol=1e-12, maxiter=4)
    assert info == 4 and bool(cp.isfinite(x).all())
    bad = b.copy()
    bad[0] = cp.nan
    with pytest.raises(InvalidValueError):
        cg(csp.csr_matrix(a), bad)


def test_iterative_solver_object_on_the_gpu_agrees_with_scipy() -> None:
    a = poisson2d(24)
    b = np.random.default_rng(4).standard_normal(a.shape[0])
    s = IterativeSolver(ust.asarray(a, format="DIA", device="cuda"), method="cg", rtol=1e-10)
    s.plan()
    x = s.solve(cp.asarray(b))
    xs, _ = spla.cg(a, b, rtol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(x), xs, rtol=1e-7, atol=1e-8)
    assert s.result is not None and s.result.converged and s.result.spmv_route != "unknown"
