"""ust.algebra.aggregation on the GPU (CuPy / cupyx.scipy.sparse): the same seed gives the same
aggregates as the NumPy path on every level, the operators agree to rounding, and CG + AMG with
the device setup converges on Poisson 3-D 64^3 with the hierarchy built on the device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.test_amg_setup import anisotropic2d, poisson3d, with_isolated
from ust.algebra import aggregation as ag
from ust.api.precond import build_preconditioner

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

MATRICES = {
    "poisson3d": lambda: poisson3d(20),
    "anisotropic2d": lambda: anisotropic2d(40),
    "isolated": lambda: with_isolated(30, 50),
}


def _pair(S: sp.csr_array) -> tuple[Any, Any]:
    A = sp.csr_matrix(S)
    A.sort_indices()
    return A, csp.csr_matrix(A)


def _close(gpu: Any, cpu: Any, rtol: float = 1e-12) -> None:
    g = sp.csr_matrix(gpu.get())
    diff = abs(g - cpu).max() if g.nnz or cpu.nnz else 0.0
    assert diff <= rtol * abs(cpu).max()


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_gpu_hierarchy_equals_the_cpu_hierarchy(name: str) -> None:
    A, G = _pair(MATRICES[name]())
    hc = ag.smoothed_aggregation(A, max_coarse=30, seed=3)
    hg = ag.smoothed_aggregation(G, max_coarse=30, seed=3)
    assert hc.hermitian == hg.hermitian
    assert [lv.A.shape for lv in hg.levels] == [lv.A.shape for lv in hc.levels]
    for c, g in zip(hc.levels, hg.levels):
        assert isinstance(g.A, csp.csr_matrix)
        _close(g.A, c.A)
        if c.P is None:
            continue
        np.testing.assert_array_equal(cp.asnumpy(g.aggregates), c.aggregates)
        assert g.rounds == c.rounds and abs(g.rho - c.rho) <= 1e-10 * c.rho
        _close(g.P, c.P)
        _close(g.R, c.R)


def test_gpu_pieces_equal_the_cpu_pieces() -> None:
    A, G = _pair(poisson3d(16))
    n = A.shape[0]
    np.testing.assert_array_equal(cp.asnumpy(ag.priorities(cp, n, 9)), ag.priorities(np, n, 9))
    src, dst = ag.strength(A)
    gsrc, gdst = ag.strength(G)
    np.testing.assert_array_equal(cp.asnumpy(gsrc), src)
    np.testing.assert_array_equal(cp.asnumpy(gdst), dst)
    agg, nagg, _ = ag.aggregate(np, n, src, dst, seed=9)
    gagg, gnagg, _ = ag.aggregate(cp, n, gsrc, gdst, seed=9)
    assert gnagg == nagg
    np.testing.assert_array_equal(cp.asnumpy(gagg), agg)
    assert ag.is_hermitian(G) and not ag.is_hermitian(
        csp.csr_matrix(sp.csr_matrix(sp.random_array((50, 50), density=0.1, rng=0)))
    )


def test_gpu_cg_with_the_device_setup_on_poisson_64() -> None:
    S = poisson3d(64)
    a = ust.asarray(S, device="cuda")
    b = cp.asarray(np.random.default_rng(0).standard_normal(S.shape[0]))
    s = ust.linalg.IterativeSolver(
        a, method="cg", M="amg", rtol=1e-8, maxiter=200, options={"check_every": 1}
    )
    s.plan()
    x = s.solve(b)
    assert s.result is not None and s.result.converged
    assert float(cp.linalg.norm(b - csp.csr_matrix(sp.csr_matrix(S)) @ x) / cp.linalg.norm(b)) <= 1e-8
    assert "built on cuda" in s.result.preconditioner  # setup "auto" on a GPU: the device setup
    assert s.result.iterations <= 40
    # the CPU device setup gives the same hierarchy, so (nearly) the same iteration count
    cpu = ust.linalg.IterativeSolver(
        ust.asarray(S), method="cg", M="amg", rtol=1e-8, maxiter=200,
        options={"preconditioner": {"setup": "device"}},
    )  # fmt: skip
    cpu.plan()
    cpu.solve(cp.asnumpy(b))
    assert cpu.result is not None and abs(cpu.result.iterations - s.result.iterations) <= 1


def test_gpu_device_setup_keeps_every_level_on_the_device() -> None:
    a = ust.asarray(poisson3d(24), device="cuda")
    p = build_preconditioner("amg", a, options={"setup": "device", "max_coarse": 50})
    assert p.setup == "device" and len(p.levels) >= 3
    assert all(isinstance(lv.A, csp.csr_matrix) for lv in p.hierarchy.levels)
    r = cp.asarray(np.random.default_rng(1).standard_normal(24**3))
    z = p.apply(r)
    assert isinstance(z, cp.ndarray) and bool(cp.isfinite(z).all())
