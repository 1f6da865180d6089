"""The fused Krylov kernels on the GPU: each operation against its unfused CuPy expression for
every dtype, bitwise reproducible, and ust.linalg.cg through them against the plain CuPy
recurrence (the same iterations, the same x to rounding)."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.api import krylov
from ust.backends.cuda import krylov_kernels as kk

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

DTYPES = ["float32", "float64", "complex64", "complex128"]
#: Lengths: one element, one block, a block boundary, several blocks, past the grid cap.
SIZES = [1, 255, 256, 257, 10_000, kk.BLOCK * kk.MAX_BLOCKS + 3, 1_000_003]


def _rtol(dtype: str) -> float:
    return 1e-5 if dtype in ("float32", "complex64") else 1e-12


def _random(rng: np.random.Generator, n: int, dtype: str) -> Any:
    v = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(n)
    return cp.asarray(v.astype(dtype))


def _scalar(rng: np.random.Generator, dtype: str) -> Any:
    return _random(rng, 1, dtype).reshape(())


def _close(got: Any, want: Any, dtype: str, scale: float = 0.0) -> None:
    got, want = cp.asnumpy(got), cp.asnumpy(want)
    atol = _rtol(dtype) * (scale if scale else float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=_rtol(dtype), atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_dot_is_vdot(dtype: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = _random(rng, n, dtype), _random(rng, n, dtype)
    d = kk.dot(a, b)
    assert isinstance(d, cp.ndarray) and d.shape == () and d.dtype == dtype
    scale = float(cp.linalg.norm(a) * cp.linalg.norm(b))
    _close(d, cp.vdot(a, b), dtype, scale)
    assert kk.dot(a, b).tobytes() == d.tobytes()  # bitwise reproducible


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("jacobi", [False, True])
@pytest.mark.parametrize("ratio", [False, True])
def test_cg_step_is_the_unfused_update(dtype: str, n: int, jacobi: bool, ratio: bool) -> None:
    rng = np.random.default_rng(n)
    x, r, p, q = (_random(rng, n, dtype) for _ in range(4))
    dinv = _random(rng, n, dtype) if jacobi else None
    num, den = _scalar(rng, dtype), _scalar(rng, dtype)
    alpha_arg = (num, den) if ratio else num
    alpha = num / den if ratio else num
    x0, r0 = x.copy(), r.copy()
    z, rz, rr = kk.cg_step(x, r, p, q, alpha_arg, dinv)
    x_want = x0 + alpha * p
    r_want = r0 - alpha * q
    z_want = r_want * dinv if jacobi else r_want
    _close(x, x_want, dtype)
    _close(r, r_want, dtype)
    _close(z, z_want, dtype)
    assert jacobi or z is r
    assert rz.shape == () and rz.dtype == dtype
    assert rr.shape == () and rr.dtype == np.empty(0, dtype).real.dtype
    _close(rz, cp.vdot(r_want, z_want), dtype, float(cp.linalg.norm(r_want) * cp.linalg.norm(z_want)))
    _close(rr, cp.vdot(r_want, r_want).real, dtype)
    # two runs from the same inputs: bitwise the same
    runs = []
    for _ in range(2):
        xa, ra = x0.copy(), r0.copy()
        za, rza, rra = kk.cg_step(xa, ra, p, q, alpha_arg, dinv)
        runs.append(b"".join(v.tobytes() for v in (xa, ra, za, rza, rra)))
    assert runs[0] == runs[1]
    if jacobi:
        buf = cp.empty(n, dtype=dtype)
        zb, _, _ = kk.cg_step(x0.copy(), r0.copy(), p, q, alpha_arg, dinv, out=buf)
        assert zb is buf
        _close(buf, z_want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("ratio", [False, True])
def test_xpby_is_the_unfused_update(dtype: str, n: int, ratio: bool) -> None:
    rng = np.random.default_rng(n)
    z, p = _random(rng, n, dtype), _random(rng, n, dtype)
    num, den = _scalar(rng, dtype), _scalar(rng, dtype)
    beta = num / den if ratio else num
    p0 = p.copy()
    assert kk.xpby(z, (num, den) if ratio else num, p) is p
    _close(p, z + beta * p0, dtype)
    p1 = p0.copy()
    kk.xpby(z, (num, den) if ratio else num, p1)
    assert p1.tobytes() == p.tobytes()


def test_nothing_waits_for_the_device() -> None:
    """The three operations queue their kernels with no host read (CuPy raises on one here)."""
    cupyx = pytest.importorskip("cupyx")
    if not hasattr(cupyx, "allow_synchronize"):
        pytest.skip("this CuPy has no cupyx.allow_synchronize")
    rng = np.random.default_rng(0)
    x, r, p, q, dinv = (_random(rng, 100_000, "float64") for _ in range(5))
    for check in (False, True):  # the first round compiles and loads the kernels
        with cupyx.allow_synchronize(False) if check else contextlib.nullcontext():
            rz0 = kk.dot(r, dinv * r)
            pq = kk.dot(p, q)
            z, rz, rr = kk.cg_step(x, r, p, q, (rz0, pq), dinv)
            kk.xpby(z, (rz, rz0), p)
    assert all(isinstance(v, cp.ndarray) for v in (pq, rz, rr))
    assert bool(cp.isfinite(rr))


# ------------------------------------------------------------------------------ CG


def poisson2d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def _count_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    step = kk.cg_step

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return step(*args, **kwargs)

    monkeypatch.setattr(kk, "cg_step", counted)
    return calls


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("M", [None, "jacobi", "block_jacobi"])
@pytest.mark.parametrize("fmt", ["CSR", "DIA"])
def test_fused_cg_is_the_plain_cupy_recurrence(
    monkeypatch: pytest.MonkeyPatch, dtype: str, M: str | None, fmt: str
) -> None:
    m = 40
    a = (poisson2d(m) + sp.diags_array(np.linspace(0.1, 2.0, m * m))).astype(dtype)
    rng = np.random.default_rng(1)
    b = rng.standard_normal(m * m) + (1j * rng.standard_normal(m * m) if dtype.startswith("complex") else 0)
    t = ust.asarray(a.tocsr(), format=fmt).to("cuda")
    gb = cp.asarray(b.astype(dtype))
    rtol = 1e-4 if dtype == "float32" else 1e-9
    monkeypatch.setattr(krylov, "GRAPHED_GPU_CG", False)  # the eager fused loop (graphs: test_cg_graph_gpu)
    calls = _count_steps(monkeypatch)
    x_f, info_f, res_f = ust.linalg.cg(t, gb, rtol=rtol, M=M, maxiter=4000, return_result=True)
    assert len(calls) == res_f.iterations  # the fused path ran
    monkeypatch.setattr(krylov, "FUSED_GPU_CG", False)
    x_p, info_p, res_p = ust.linalg.cg(t, gb, rtol=rtol, M=M, maxiter=4000, return_result=True)
    assert len(calls) == res_f.iterations  # the plain path did not
    assert info_f == info_p == 0
    assert res_f.iterations == res_p.iterations
    err = float(cp.linalg.norm(x_f - x_p) / cp.linalg.norm(x_p))
    assert err <= (1e-4 if dtype == "float32" else 1e-10)
    assert res_f.residual <= rtol


@pytest.mark.parametrize("check_every", [1, 8])
def test_fused_cg_check_every_and_callback(monkeypatch: pytest.MonkeyPatch, check_every: int) -> None:
    a = poisson2d(64)
    b = cp.asarray(np.random.default_rng(2).standard_normal(a.shape[0]))
    t = ust.asarray(a, format="DIA").to("cuda")
    seen: list[Any] = []
    opts = {"check_every": check_every}
    x_f, _, r_f = ust.linalg.cg(
        t, b, rtol=1e-10, M="jacobi", options=opts, callback=seen.append, return_result=True
    )
    assert len(seen) == r_f.iterations and all(isinstance(v, cp.ndarray) for v in seen)
    monkeypatch.setenv("UST_KRYLOV_FUSED", "0")
    calls = _count_steps(monkeypatch)
    x_p, _, r_p = ust.linalg.cg(t, b, rtol=1e-10, M="jacobi", options=opts, return_result=True)
    assert calls == []  # the environment variable turned fusion off
    assert r_f.iterations == r_p.iterations
    assert float(cp.linalg.norm(x_f - x_p) / cp.linalg.norm(x_p)) <= 1e-10


def test_fused_cg_is_reproducible() -> None:
    a = poisson2d(100)
    b = cp.asarray(np.random.default_rng(3).standard_normal(a.shape[0]))
    t = ust.asarray(a, format="DIA").to("cuda")
    x1, _ = ust.linalg.cg(t, b, rtol=1e-8, M="jacobi")
    x2, _ = ust.linalg.cg(t, b, rtol=1e-8, M="jacobi")
    assert x1.tobytes() == x2.tobytes()


def test_fused_cg_breakdown_returns_a_finite_iterate() -> None:
    a = sp.diags_array([1.0, -1.0, 2.0, 3.0]).tocsr()  # p^H A p = 0 at the first step
    b = cp.asarray([1.0, 1.0, 0.0, 0.0])
    with pytest.warns(ust.linalg.IterativeSolverWarning, match="broke down"):
        x, info = ust.linalg.cg(a, b, execution="cuda")
    assert info < 0 and bool(cp.isfinite(cp.asarray(x)).all())
