"""precision="mixed": single-precision factors, GMRES refinement to float64 accuracy, a clear
error (never a silent fall-back) where the refinement cannot get there."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from ust.linalg import DirectSolver, MixedPrecisionSolver, backward_error

import ust
from ust.runtime.errors import SolverAccuracyError, UnsupportedError


def poisson3d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(sp.kron(t, e), e) + sp.kron(sp.kron(e, t), e) + sp.kron(sp.kron(e, e), t)).tocsr()


def convection(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.4, 2.4, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def be(a: sp.csr_array, x: np.ndarray, b: np.ndarray) -> float:
    x2 = x.reshape(x.shape[0], -1)
    b2 = b.reshape(b.shape[0], -1)
    return backward_error(a, x2, b2)


@pytest.mark.parametrize("make", [lambda: poisson3d(10), lambda: convection(25)])
def test_mixed_reaches_double_accuracy(make) -> None:
    a = make()
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    x = ust.solve(a, b, precision="mixed")
    assert x.dtype == np.float64 and x.shape == b.shape
    assert be(a, x, b) <= 1e-14
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), b), rtol=1e-10, atol=1e-12)


def test_the_object_is_a_direct_solver_with_single_precision_factors() -> None:
    a = poisson3d(8)
    b = np.ones(a.shape[0])
    with DirectSolver(a, b, options={"precision": "mixed"}) as s:
        assert isinstance(s, MixedPrecisionSolver) and isinstance(s, DirectSolver)
        x = s.execute()
        assert s.backward_error is not None and s.backward_error <= 1e-14
        assert s._engine.low == np.float32
    assert be(a, x, b) <= 1e-14
    assert type(DirectSolver(a, b)) is DirectSolver


def test_several_right_hand_sides_and_complex() -> None:
    a = convection(12).astype(np.complex128)
    a = (a + 0.3j * sp.eye_array(a.shape[0])).tocsr()
    rng = np.random.default_rng(2)
    b = rng.standard_normal((a.shape[0], 3)) + 1j * rng.standard_normal((a.shape[0], 3))
    x = ust.solve(a, b, precision="mixed")
    assert x.dtype == np.complex128 and x.shape == b.shape
    assert be(a, x, b) <= 1e-14


def test_reset_operands_and_refactorize() -> None:
    a = poisson3d(8)
    b = np.random.default_rng(3).standard_normal(a.shape[0])
    s = DirectSolver(a, b, options={"precision": "mixed"})
    s.plan()
    s.factorize()
    x1 = s.solve()
    s.reset_operands(a=(2.0 * a).tocsr())
    s.refactorize()
    np.testing.assert_allclose(s.solve() * 2.0, x1, rtol=1e-12, atol=1e-14)
    s.reset_operands(b=3.0 * b)
    np.testing.assert_allclose(s.solve(), 1.5 * x1, rtol=1e-12, atol=1e-13)  # (2A) x = 3b
    s.free()


def test_too_ill_conditioned_raises_and_suggests_double() -> None:
    n = 12
    hilbert = sp.csr_array(1.0 / (np.arange(n)[:, None] + np.arange(n)[None, :] + 1))
    with pytest.raises(SolverAccuracyError, match="precision='double'"):
        ust.solve(hilbert, np.ones(n), precision="mixed")


def test_single_precision_systems_are_refused() -> None:
    a = poisson3d(5).astype(np.float32)
    with pytest.raises(UnsupportedError, match="precision='double'"):
        ust.solve(a, np.ones(a.shape[0], dtype=np.float32), precision="mixed")
    with pytest.raises(UnsupportedError, match="precision"):
        ust.solve(poisson3d(4), np.ones(64), precision="half")


def test_inputs_never_written() -> None:
    a = poisson3d(6)
    b = np.random.default_rng(4).standard_normal(a.shape[0])
    keep = (a.data.copy(), a.indices.copy(), a.indptr.copy(), b.copy())
    ust.solve(a, b, precision="mixed")
    for before, after in zip(keep, (a.data, a.indices, a.indptr, b)):
        np.testing.assert_array_equal(before, after)
