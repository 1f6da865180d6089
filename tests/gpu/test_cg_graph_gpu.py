"""CG with blocks of iterations replayed as CUDA graphs (ust.api.cg_graph) against the eager
fused loop: the same kernels in the same order, so the same iterations and the same x to the
bit; the tail before ``maxiter``, breakdowns and routes that cannot be recorded."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.api import krylov
from ust.api.linop import _Product
from ust.backends.cuda import krylov_kernels as kk

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

from tests.gpu.test_krylov_kernels_gpu import _count_steps, poisson2d  # noqa: E402


def _system(dtype: str, fmt: str, m: int = 40) -> tuple[Any, Any]:
    a = (poisson2d(m) + sp.diags_array(np.linspace(0.1, 2.0, m * m))).astype(dtype)
    rng = np.random.default_rng(1)
    b = rng.standard_normal(m * m) + (1j * rng.standard_normal(m * m) if dtype.startswith("complex") else 0)
    return ust.asarray(a.tocsr(), format=fmt).to("cuda"), cp.asarray(b.astype(dtype))


def _both(monkeypatch: pytest.MonkeyPatch, t: Any, b: Any, **kw: Any) -> tuple[Any, Any, list[int]]:
    """(graph run, eager run, cg_step calls of the graph run): x, info, result of each."""
    calls = _count_steps(monkeypatch)
    g = ust.linalg.cg(t, b, return_result=True, **kw)
    n_graph = len(calls)
    monkeypatch.setattr(krylov, "GRAPHED_GPU_CG", False)
    e = ust.linalg.cg(t, b, return_result=True, **kw)
    monkeypatch.setattr(krylov, "GRAPHED_GPU_CG", True)
    return g, e, [n_graph, len(calls) - n_graph]


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("fmt", ["CSR", "DIA"])
def test_graph_cg_is_the_eager_fused_loop(
    monkeypatch: pytest.MonkeyPatch, dtype: str, M: Any, fmt: str
) -> None:
    t, b = _system(dtype, fmt)
    rtol = 1e-4 if dtype == "float32" else 1e-9
    (xg, ig, rg), (xe, ie, re_), (n_graph, n_eager) = _both(
        monkeypatch, t, b, rtol=rtol, M=M, maxiter=4000, options={"check_every": 8}
    )
    probe = _Product(t)
    probe(b)
    graphed = probe.capturable(b)  # the generated CUDA route; cuSPARSE's (small CSR) runs eagerly
    assert graphed or fmt != "DIA"
    assert n_graph == (8 if graphed else re_.iterations)  # recorded once (8 steps), replayed
    assert n_eager == re_.iterations
    assert ig == ie == 0 and rg.iterations == re_.iterations
    assert xg.tobytes() == xe.tobytes()  # the same kernels in the same order
    assert rg.residual <= rtol


@pytest.mark.parametrize("check_every", [2, 5, 8])
def test_graph_cg_tail_before_maxiter(monkeypatch: pytest.MonkeyPatch, check_every: int) -> None:
    t, b = _system("float64", "DIA", m=64)
    with pytest.warns(ust.linalg.IterativeSolverWarning):
        (xg, ig, rg), (xe, ie, re_), (n_graph, _) = _both(
            monkeypatch, t, b, rtol=1e-12, M="jacobi", maxiter=13, options={"check_every": check_every}
        )
    assert ig == ie == 13 and rg.iterations == re_.iterations == 13
    assert n_graph == check_every + 13 % check_every  # one recording, the tail eager
    assert xg.tobytes() == xe.tobytes()


def test_graph_cg_from_x0(monkeypatch: pytest.MonkeyPatch) -> None:
    t, b = _system("float64", "CSR")
    x0 = cp.asarray(np.random.default_rng(5).standard_normal(b.shape[0]))
    keep = x0.copy()
    (xg, _, rg), (xe, _, re_), _ = _both(monkeypatch, t, b, x0=x0, rtol=1e-10, M="jacobi")
    assert xg.tobytes() == xe.tobytes() and rg.iterations == re_.iterations
    assert x0.tobytes() == keep.tobytes()  # the caller's x0 is not modified


def test_graph_cg_breakdown_returns_a_finite_iterate() -> None:
    a = sp.diags_array([1.0, -1.0, 2.0, 3.0]).tocsr()  # p^H A p = 0 at the first step
    b = cp.asarray([1.0, 1.0, 0.0, 0.0])
    with pytest.warns(ust.linalg.IterativeSolverWarning, match="broke down"):
        x, info = ust.linalg.cg(a, b, execution="cuda")
    assert info < 0 and bool(cp.isfinite(cp.asarray(x)).all())


def test_routes_that_cannot_be_recorded_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Product, "capturable", lambda self, x: False)
    t, b = _system("float64", "CSR")
    calls = _count_steps(monkeypatch)
    _, info, res = ust.linalg.cg(t, b, rtol=1e-9, return_result=True)
    assert info == 0 and len(calls) == res.iterations


def test_callback_and_general_preconditioners_run_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    t, b = _system("float64", "DIA")
    calls = _count_steps(monkeypatch)
    seen: list[Any] = []
    _, info, res = ust.linalg.cg(t, b, rtol=1e-9, callback=seen.append, return_result=True)
    assert info == 0 and len(calls) == res.iterations == len(seen)
    calls.clear()
    _, info, res = ust.linalg.cg(t, b, rtol=1e-9, M="block_jacobi", return_result=True)
    assert info == 0 and len(calls) == res.iterations


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32", "complex64"])
@pytest.mark.parametrize("fmt", ["DIA", "DIAI"])
def test_spmv_with_dot_is_the_spmv_and_vdot(dtype: str, fmt: str) -> None:
    t, x = _system(dtype, fmt, m=70)  # 4900 rows: several blocks of partial sums
    prod = _Product(t)
    want = prod(x)
    q = cp.empty_like(x)
    part = kk.workspace(x.shape[0], x.dtype)
    n = prod.into_dot(x, q, part)
    assert n is not None and 1 < n <= part.size
    rtol = 1e-5 if dtype in ("float32", "complex64") else 1e-12
    np.testing.assert_allclose(cp.asnumpy(q), cp.asnumpy(want), rtol=rtol, atol=rtol * float(abs(want).max()))
    got = kk.sum_partials(part, n)
    ref = cp.vdot(x, want)
    assert got.shape == () and abs(complex(got) - complex(ref)) <= rtol * float(
        cp.linalg.norm(x) * cp.linalg.norm(want)
    )
    again = cp.empty(1, dtype=x.dtype)
    prod.into_dot(x, q, part)  # the bound launch reused: the same bits
    kk.sum_partials(part, n, out=again)
    assert again.tobytes() == got.reshape(1).tobytes()


def test_spmv_with_dot_is_none_where_the_route_has_no_such_kernel() -> None:
    t, x = _system("float64", "COO")  # cuSPARSE's route
    q = cp.zeros_like(x)
    assert _Product(t).into_dot(x, q, kk.workspace(x.shape[0], x.dtype)) is None
    assert not bool(q.any())  # nothing written
