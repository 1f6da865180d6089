"""ust.api.precond on the GPU: every preconditioner built from a CuPy-backed Tensor gives, on a
CuPy r, what the CPU build gives on the same r (up to rounding), in CSR, DIA, BSR[2,2] and a
user format; r and A untouched, r's dtype kept, user operators on the device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.test_precond import FORMATS, block_jacobi_dense, convdiff2d, poisson2d, rhs
from ust.api.precond import PRECONDITIONERS, build_preconditioner
from ust.runtime.errors import DeviceError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")
cspla = pytest.importorskip("cupyx.scipy.sparse.linalg")

#: (name, options, matrix, tolerance): the matrices each preconditioner applies to.
CASES = [
    ("jacobi", None, "poisson", 1e-14),
    ("jacobi", None, "convdiff", 1e-14),
    ("block_jacobi", {"block_size": 3}, "convdiff", 1e-12),
    ("block_jacobi", None, "poisson", 1e-12),
    ("ilu0", None, "poisson", 1e-11),
    ("ilu0", None, "convdiff", 1e-11),
    ("ic0", None, "poisson", 1e-11),
    ("chebyshev", None, "poisson", 1e-9),
    ("chebyshev", {"degree": 5}, "poisson", 1e-9),
    ("amg", {"max_coarse": 50}, "poisson", 1e-9),
    ("amg", {"max_coarse": 50, "omega": 0.6}, "poisson", 1e-9),
    ("amg", {"max_coarse": 50, "smoother": "chebyshev"}, "poisson", 1e-9),
    ("amg", {"max_coarse": 50, "pyamg": {"symmetry": "nonsymmetric"}}, "convdiff", 1e-9),
    ("amg", {"max_coarse": 50, "coarse_solver": "splu"}, "poisson", 1e-9),
]
MATRICES = {"poisson": poisson2d(24), "convdiff": convdiff2d(24)}


def _ids(case: tuple[Any, ...]) -> str:
    name, options, matrix, _ = case
    return f"{name}-{matrix}" + ("" if not options else "-" + "-".join(f"{k}" for k in options))


def _pair(S: sp.csr_array, fmt: str) -> tuple[Any, Any]:
    cpu = ust.asarray(S, fmt)
    return cpu, ust.asarray(S, fmt, device="cuda")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_gpu_apply_equals_cpu_apply(case: tuple[Any, ...], fmt: str) -> None:
    name, options, matrix, tol = case
    if name == "amg":
        pytest.importorskip("pyamg")
    S = MATRICES[matrix]
    a_cpu, a_gpu = _pair(S, fmt)
    p_gpu = build_preconditioner(name, a_gpu, options=options)
    if name == "amg":  # the CPU builds the hierarchy the way the GPU did (setup "auto" differs)
        options = {**(options or {}), "setup": p_gpu.setup}
    p_cpu = build_preconditioner(name, a_cpu, options=options)
    assert p_gpu.name == name
    for seed in (0, 1):
        r = rhs(S.shape[0], seed)
        r_gpu = cp.asarray(r)
        z_gpu = p_gpu.apply(r_gpu)
        assert isinstance(z_gpu, cp.ndarray) and z_gpu.dtype == np.float64 and z_gpu.shape == r.shape
        z_cpu = p_cpu.apply(r)
        got = cp.asnumpy(z_gpu)
        assert np.linalg.norm(got - z_cpu) <= tol * np.linalg.norm(z_cpu), (name, fmt)
        np.testing.assert_array_equal(cp.asnumpy(r_gpu), r)  # r untouched
    assert p_gpu.describe()


def test_gpu_block_jacobi_from_bsr_blocks_against_dense() -> None:
    S = convdiff2d(10)
    p = build_preconditioner("block_jacobi", ust.asarray(S, "BSR[2,2]", device="cuda"))
    r = rhs(100)
    z = cp.asnumpy(p.apply(cp.asarray(r)))
    np.testing.assert_allclose(z, block_jacobi_dense(S.toarray(), 2) @ r, rtol=1e-12)


def test_gpu_ilu0_says_where_it_runs() -> None:
    p = build_preconditioner("ilu0", ust.asarray(poisson2d(8), device="cuda"))
    assert "factors computed on the host" in p.describe() and "triangular solves on cuda" in p.describe()


@pytest.mark.parametrize("name", PRECONDITIONERS)
def test_gpu_keeps_dtype_and_leaves_a_alone(name: str) -> None:
    if name == "amg":
        pytest.importorskip("pyamg")
    S = poisson2d(12)
    a = ust.asarray(S, "CSR", device="cuda")
    before = {k: cp.asnumpy(v) for k, v in a.buffers().items() if v is not None}
    p = build_preconditioner(name, a, options={"max_coarse": 40} if name == "amg" else None)
    r = cp.asarray(rhs(144))
    z = p.apply(r)
    z32 = p.apply(r.astype(cp.float32))
    assert z32.dtype == cp.float32
    np.testing.assert_allclose(cp.asnumpy(z32), cp.asnumpy(z), rtol=1e-4, atol=1e-5 * float(cp.abs(z).max()))
    zc = p.apply(r.astype(cp.complex128))
    assert zc.dtype == cp.complex128
    np.testing.assert_allclose(cp.asnumpy(zc).real, cp.asnumpy(z), rtol=1e-12, atol=1e-14)
    for k, v in a.buffers().items():
        if v is not None:
            np.testing.assert_array_equal(cp.asnumpy(v), before[k])
    with pytest.raises(DeviceError):
        p.apply(rhs(144))  # a NumPy r for a GPU preconditioner


def test_gpu_user_operators() -> None:
    S = convdiff2d(6)
    Minv = sp.csr_array(block_jacobi_dense(S.toarray(), 4))
    a = ust.asarray(S, device="cuda")
    r = rhs(36)
    want = Minv @ r
    Mg = csp.csr_matrix(Minv)
    cases: list[Any] = [
        Mg,
        Minv,  # a host matrix: moved to the device once
        ust.asarray(Minv, "DIA", device="cuda"),
        cp.asarray(Minv.toarray()),
        cspla.aslinearoperator(Mg),
        lambda v: Mg @ v,
    ]
    for M in cases:
        p = build_preconditioner(M, a)
        z = p.apply(cp.asarray(r))
        assert isinstance(z, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(z), want, rtol=1e-13)


def _pcg_iterations(A: Any, b: Any, psolve: Any, rtol: float = 1e-8, maxiter: int = 2000) -> int:
    """Textbook preconditioned CG on the device (not cupyx's: its keyword names vary by version)."""
    x = cp.zeros_like(b)
    r = b.copy()
    z = psolve(r)
    p = z.copy()
    rz = float(cp.vdot(r, z).real)
    stop = rtol * float(cp.linalg.norm(b))
    for it in range(1, maxiter + 1):
        q = A @ p
        alpha = rz / float(cp.vdot(p, q).real)
        x += alpha * p
        r -= alpha * q
        if float(cp.linalg.norm(r)) <= stop:
            return it
        z = psolve(r)
        rz, rz_old = float(cp.vdot(r, z).real), rz
        p = z + (rz / rz_old) * p
    raise AssertionError("PCG did not converge")


def test_gpu_cg_with_each_preconditioner_converges_faster() -> None:
    """PCG with z = p.apply(r) needs fewer iterations than plain CG on Poisson 40x40."""
    S = poisson2d(40)
    A = csp.csr_matrix(S)
    b = cp.ones(1600)
    plain = _pcg_iterations(A, b, lambda r: r.copy())
    a = ust.asarray(S, "DIA", device="cuda")
    names: list[tuple[str, Any]] = [
        ("ilu0", None),
        ("ic0", None),
        ("chebyshev", None),
        ("block_jacobi", {"block_size": 40}),
    ]
    try:
        import pyamg  # noqa: F401

        names.append(("amg", None))
    except ImportError:
        pass
    for name, options in names:
        p = build_preconditioner(name, a, options=options)
        assert _pcg_iterations(A, b, p.apply) < plain, name
