"""ust.api.precond on the CPU: every preconditioner against a reference computed another way
(dense NumPy, or pyamg's own V-cycle), in CSR, DIA, BSR[2,2] and a user format, on 2-D Poisson
and a small unsymmetric convection-diffusion matrix; their effect on SciPy's CG; the errors."""

from __future__ import annotations

import doctest
import sys
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from numpy.polynomial import chebyshev as npcheb

import ust
from ust.api import precond
from ust.api.precond import PRECONDITIONERS, Preconditioner, build_preconditioner
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    SingularMatrixError,
    UnsupportedError,
)

LOOSE = "(i, j) -> (i : dense, j : loose_compressed)"
FORMATS = ["CSR", "DIA", "BSR[2,2]", LOOSE]


def poisson2d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return sp.csr_array(sp.kron(e, t) + sp.kron(t, e))


def convdiff2d(m: int, gamma: float = 0.6) -> sp.csr_array:
    """Upwinded -laplace(u) + c . grad(u): an unsymmetric M-matrix."""
    t = sp.diags_array([-1.0 - gamma, 2.0 + gamma, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return sp.csr_array(sp.kron(e, t) + sp.kron(t, e))


def scaled_poisson2d(m: int) -> sp.csr_array:
    """Poisson with badly scaled unknowns (S A S, S from 1 to 10): what Jacobi repairs."""
    s = np.geomspace(1.0, 10.0, m * m)[np.random.RandomState(3).permutation(m * m)]
    S = sp.diags_array(s)
    return sp.csr_array(S @ poisson2d(m) @ S)


def rhs(n: int, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
    return np.random.RandomState(seed).standard_normal(n).astype(dtype)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ----------------------------------------------------------------------------- dense references


def ilu0_dense(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Saad's ILU(0), Algorithm 10.4 (IKJ), row by row on a dense copy."""
    n = A.shape[0]
    S = (A != 0) | np.eye(n, dtype=bool)
    W = A.astype(np.result_type(A, np.float64)).copy()
    for i in range(1, n):
        for k in range(i):
            if S[i, k]:
                W[i, k] /= W[k, k]
                cols = np.flatnonzero(S[i, k + 1 :]) + k + 1
                W[i, cols] -= W[i, k] * W[k, cols]
    W[~S] = 0
    return np.tril(W, -1) + np.eye(n), np.triu(W)


def ic0_dense(A: np.ndarray) -> np.ndarray:
    """IC(0) column by column on the pattern of A's lower triangle."""
    n = A.shape[0]
    S = np.tril((A != 0) | np.eye(n, dtype=bool))
    L = np.zeros_like(A, dtype=np.result_type(A, np.float64))
    for j in range(n):
        L[j, j] = np.sqrt(A[j, j] - np.sum(np.abs(L[j, :j]) ** 2))
        for i in range(j + 1, n):
            if S[i, j]:
                L[i, j] = (A[i, j] - np.sum(L[i, :j] * np.conj(L[j, :j]))) / L[j, j]
    return L


def block_jacobi_dense(A: np.ndarray, b: int) -> np.ndarray:
    n = A.shape[0]
    out = np.zeros_like(A)
    for s in range(0, n, b):
        e = min(s + b, n)
        out[s:e, s:e] = np.linalg.inv(A[s:e, s:e])
    return out


def chebyshev_dense(A: np.ndarray, lo: float, hi: float, degree: int) -> np.ndarray:
    """p(A) with 1 - x p(x) = T_d((theta - x) / delta) / T_d(theta / delta), by eigenvalues."""
    lam, V = np.linalg.eigh(A)
    theta, delta = (hi + lo) / 2, (hi - lo) / 2
    td = npcheb.Chebyshev.basis(degree)
    p = (1 - td((theta - lam) / delta) / td(theta / delta)) / lam
    return (V * p) @ V.conj().T


def cg_iterations(A: Any, M: Any = None, rtol: float = 1e-8) -> int:
    count = [0]

    def tick(_: Any) -> None:
        count[0] += 1

    _, info = sla.cg(A, np.ones(A.shape[0]), rtol=rtol, maxiter=5000, M=M, callback=tick)
    assert info == 0
    return count[0]


def as_operator(p: Preconditioner, n: int) -> sla.LinearOperator:
    return sla.LinearOperator((n, n), matvec=p.apply, dtype=np.float64)


# ----------------------------------------------------------------------------- Jacobi, block Jacobi


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "matrix", [poisson2d(10), convdiff2d(10), scaled_poisson2d(8)], ids=["poisson", "convdiff", "scaled"]
)
def test_jacobi_is_r_over_the_diagonal(fmt: str, matrix: sp.csr_array) -> None:
    p = build_preconditioner("jacobi", ust.asarray(matrix, fmt))
    r = rhs(matrix.shape[0])
    np.testing.assert_allclose(p.apply(r), r / matrix.diagonal(), rtol=1e-14)
    assert p.name == "jacobi" and isinstance(p, Preconditioner)
    assert "Jacobi" in p.describe()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("b", [2, 3, 5])
@pytest.mark.parametrize("matrix", [poisson2d(10), convdiff2d(10)], ids=["poisson", "convdiff"])
def test_block_jacobi_against_the_dense_block_inverse(fmt: str, b: int, matrix: sp.csr_array) -> None:
    """n = 100: b = 3 leaves a trailing 1x1 block, b = 5 none."""
    p = build_preconditioner("block_jacobi", ust.asarray(matrix, fmt), options={"block_size": b})
    r = rhs(matrix.shape[0])
    np.testing.assert_allclose(
        p.apply(r), block_jacobi_dense(matrix.toarray(), b) @ r, rtol=1e-12, atol=1e-14
    )
    assert f"{b}x{b}" in p.describe()


def test_block_jacobi_takes_its_block_size_from_bsr() -> None:
    A = convdiff2d(10)
    p = build_preconditioner("block_jacobi", ust.asarray(A, "BSR[2,2]"))
    np.testing.assert_allclose(p.apply(rhs(100)), block_jacobi_dense(A.toarray(), 2) @ rhs(100), rtol=1e-12)
    assert "BSR" in p.describe() and "2x2" in p.describe()
    # no block structure in the format, no option: point Jacobi
    q = build_preconditioner("block_jacobi", ust.asarray(A, "CSR"))
    np.testing.assert_allclose(q.apply(rhs(100)), rhs(100) / A.diagonal(), rtol=1e-14)


def test_block_jacobi_trailing_partial_block_and_huge_blocks() -> None:
    A = convdiff2d(7)  # n = 49
    for b in (4, 48, 49, 60):
        p = build_preconditioner("block_jacobi", ust.asarray(A), options={"block_size": b})
        ref = block_jacobi_dense(A.toarray(), min(b, 49))
        np.testing.assert_allclose(p.apply(rhs(49)), ref @ rhs(49), rtol=1e-11)


def test_block_jacobi_singular_block_names_it() -> None:
    A = poisson2d(4).toarray()
    A[4:6, 4:6] = [[1.0, 2.0], [2.0, 4.0]]  # block 2 (rows 4, 5) is singular
    with pytest.raises(SingularMatrixError, match=r"block 2 \(rows 4 \.\. 5\)") as err:
        build_preconditioner("block_jacobi", ust.asarray(sp.csr_array(A)), options={"block_size": 2})
    assert err.value.row == 4
    with pytest.raises(InvalidValueError, match="block_size"):
        build_preconditioner("block_jacobi", ust.asarray(poisson2d(4)), options={"block_size": 0})


# ----------------------------------------------------------------------------- ILU(0), IC(0)


def random_unsymmetric(n: int, seed: int = 5) -> sp.csr_array:
    a = sp.random_array((n, n), density=5.0 / n, random_state=seed, format="csr")
    return sp.csr_array(a + sp.diags_array(np.full(n, 3.0)) - 0.5 * sp.diags_array(np.ones(n - 1), offsets=1))


@pytest.mark.parametrize(
    "matrix", [poisson2d(6), convdiff2d(6), random_unsymmetric(60)], ids=["poisson", "convdiff", "random"]
)
def test_ilu0_factors_equal_the_dense_ikj_algorithm(matrix: sp.csr_array) -> None:
    L, U, levels = precond.ilu0_factors(matrix)
    Lr, Ur = ilu0_dense(matrix.toarray())
    np.testing.assert_allclose(L.toarray(), Lr, atol=1e-13)
    np.testing.assert_allclose(U.toarray(), Ur, atol=1e-13)
    # the defining property: (LU)_ij = a_ij on A's pattern
    S = matrix.toarray() != 0
    np.testing.assert_allclose((L @ U).toarray()[S], matrix.toarray()[S], atol=1e-13)
    assert 1 <= levels < matrix.shape[0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("matrix", [poisson2d(8), convdiff2d(8)], ids=["poisson", "convdiff"])
def test_ilu0_apply_against_dense_triangular_solves(fmt: str, matrix: sp.csr_array) -> None:
    p = build_preconditioner("ilu0", ust.asarray(matrix, fmt))
    Lr, Ur = ilu0_dense(matrix.toarray())
    r = rhs(64)
    np.testing.assert_allclose(p.apply(r), np.linalg.solve(Ur, np.linalg.solve(Lr, r)), rtol=1e-12)
    assert "ILU(0)" in p.describe()


def test_ilu0_adds_a_missing_diagonal_and_reports_a_zero_pivot() -> None:
    A = convdiff2d(5).toarray()
    A[3, 3] = 0.0  # absent from the pattern: ILU(0) stores it, and it fills in
    Lr, Ur = ilu0_dense(A)
    p = build_preconditioner("ilu0", ust.asarray(sp.csr_array(A)))
    np.testing.assert_allclose(
        p.apply(rhs(25)), np.linalg.solve(Ur, np.linalg.solve(Lr, rhs(25))), rtol=1e-12
    )
    Z = np.eye(4)
    Z[0, 0] = 0.0
    Z[0, 1] = Z[1, 0] = 1.0
    with pytest.raises(SingularMatrixError, match="pivot of row 0") as err:
        build_preconditioner("ilu0", ust.asarray(sp.csr_array(Z)))
    assert err.value.row == 0


def test_ilu0_complex() -> None:
    A = convdiff2d(5).astype(np.complex128)
    A = sp.csr_array(A + 1j * sp.diags_array(np.linspace(0.1, 1.0, 25)) + 0.3j * sp.eye_array(25, k=2))
    Lr, Ur = ilu0_dense(A.toarray())
    p = build_preconditioner("ilu0", ust.asarray(A))
    r = rhs(25) + 1j * rhs(25, 1)
    np.testing.assert_allclose(p.apply(r), np.linalg.solve(Ur, np.linalg.solve(Lr, r)), rtol=1e-12)
    assert p.apply(rhs(25)).dtype == np.complex128  # a real r with a complex A


def test_ic0_factor_equals_the_dense_algorithm() -> None:
    A = poisson2d(6)
    L, _ = precond.ic0_factor(A)
    np.testing.assert_allclose(L.toarray(), ic0_dense(A.toarray()), atol=1e-13)
    # a Hermitian complex matrix
    H = A.astype(np.complex128) + 0.2j * (sp.eye_array(36, k=1) - sp.eye_array(36, k=-1))
    Lc, _ = precond.ic0_factor(sp.csr_array(H))
    np.testing.assert_allclose(Lc.toarray(), ic0_dense(H.toarray()), atol=1e-13)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ic0_apply_against_dense_and_equals_ilu0_on_spd(fmt: str) -> None:
    A = poisson2d(8)
    p = build_preconditioner("ic0", ust.asarray(A, fmt))
    Lr = ic0_dense(A.toarray())
    r = rhs(64)
    np.testing.assert_allclose(p.apply(r), np.linalg.solve(Lr.T, np.linalg.solve(Lr, r)), rtol=1e-12)
    q = build_preconditioner("ilu0", ust.asarray(A, fmt))
    np.testing.assert_allclose(p.apply(r), q.apply(r), rtol=1e-12)  # U = D L^T on an SPD matrix
    assert "IC(0)" in p.describe()


def test_ic0_needs_hermitian_positive_definite() -> None:
    with pytest.raises(UnsupportedError, match="symmetric matrix"):
        build_preconditioner("ic0", ust.asarray(convdiff2d(5)))
    indefinite = sp.csr_array(poisson2d(5) - 5.0 * sp.eye_array(25))
    with pytest.raises(InvalidValueError, match="not positive"):
        build_preconditioner("ic0", ust.asarray(indefinite))
    # round-off asymmetry is accepted; a looser tolerance accepts more
    A = poisson2d(5).toarray()
    A[0, 1] += 1e-15
    build_preconditioner("ic0", ust.asarray(sp.csr_array(A)))
    A[0, 1] += 1e-6
    with pytest.raises(UnsupportedError):
        build_preconditioner("ic0", ust.asarray(sp.csr_array(A)))
    build_preconditioner("ic0", ust.asarray(sp.csr_array(A)), options={"symmetry_rtol": 1e-5})


# ----------------------------------------------------------------------------- Chebyshev


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("degree", [1, 2, 3, 6])
def test_chebyshev_is_the_polynomial_evaluated_densely(fmt: str, degree: int) -> None:
    A = poisson2d(10)
    p = build_preconditioner("chebyshev", ust.asarray(A, fmt), options={"degree": degree})
    lo, hi = p.bounds
    r = rhs(100)
    np.testing.assert_allclose(p.apply(r), chebyshev_dense(A.toarray(), lo, hi, degree) @ r, rtol=1e-11)
    lam = np.linalg.eigvalsh(A.toarray()).max()
    assert 0.97 * lam <= p.lambda_max <= lam * (1 + 1e-10)  # a Lanczos (Ritz) value: from below
    assert lo == pytest.approx(p.lambda_max / 30) and hi == pytest.approx(1.1 * p.lambda_max)
    assert f"degree {degree}" in p.describe()


def test_chebyshev_bounds_from_options_and_errors() -> None:
    A = ust.asarray(poisson2d(6))
    p = build_preconditioner(
        "chebyshev", A, options={"lambda_max": 8.0, "lower_bound": 0.1, "upper_bound": 1.0}
    )
    assert p.bounds == pytest.approx((0.8, 8.0))
    np.testing.assert_allclose(
        p.apply(rhs(36)), chebyshev_dense(poisson2d(6).toarray(), 0.8, 8.0, 3) @ rhs(36)
    )
    with pytest.raises(UnsupportedError, match="symmetric"):
        build_preconditioner("chebyshev", ust.asarray(convdiff2d(5)))
    with pytest.raises(InvalidValueError, match="positive definite"):
        build_preconditioner("chebyshev", ust.asarray(sp.csr_array(-poisson2d(5))))
    with pytest.raises(InvalidValueError, match="degree"):
        build_preconditioner("chebyshev", A, options={"degree": 0})
    with pytest.raises(InvalidValueError, match="lower_bound"):
        build_preconditioner("chebyshev", A, options={"lower_bound": 2.0, "upper_bound": 1.0})


def test_chebyshev_matches_pyamgs_polynomial_smoother() -> None:
    pytest.importorskip("pyamg")
    from pyamg.relaxation.chebyshev import chebyshev_polynomial_coefficients
    from pyamg.relaxation.relaxation import polynomial

    A = poisson2d(12)
    p = build_preconditioner("chebyshev", ust.asarray(A, "DIA"), options={"degree": 4})
    coefficients = -chebyshev_polynomial_coefficients(*p.bounds, 4)[:-1]
    r = rhs(144)
    x = np.zeros(144)
    polynomial(sp.csr_matrix(A), x, r, coefficients)
    assert rel(p.apply(r), x) < 1e-12


# ----------------------------------------------------------------------------- AMG (pyamg)


def pyamg_vcycle(A: sp.csr_array, omega: float, sweeps: int = 1, max_coarse: int = 50, **kw: Any) -> Any:
    """pyamg's own V-cycle preconditioner on the hierarchy ust builds (same seed, same options)."""
    pyamg = pytest.importorskip("pyamg")
    smoother = ("jacobi", {"omega": omega, "iterations": sweeps, "withrho": False})
    np.random.seed(0)
    ml = pyamg.smoothed_aggregation_solver(
        sp.csr_matrix(A), max_coarse=max_coarse, presmoother=smoother, postsmoother=smoother,
        coarse_solver="splu", **kw,
    )  # fmt: skip
    return ml


@pytest.mark.parametrize("fmt", FORMATS)
def test_amg_vcycle_equals_pyamgs(fmt: str) -> None:
    A = poisson2d(40)
    ml = pyamg_vcycle(A, omega=0.6)
    p = build_preconditioner("amg", ust.asarray(A, fmt), options={"max_coarse": 50, "omega": 0.6})
    assert len(p.levels) == len(ml.levels) >= 3
    M = ml.aspreconditioner(cycle="V")
    for seed in (0, 1):
        r = rhs(1600, seed)
        assert rel(p.apply(r), M @ r) < 1e-10
    assert "smoothed-aggregation AMG" in p.describe() and f"{len(ml.levels)} levels" in p.describe()


def test_amg_two_sweeps_and_the_unsymmetric_case_equal_pyamg() -> None:
    A = poisson2d(30)
    ml = pyamg_vcycle(A, omega=0.55, sweeps=2)
    p = build_preconditioner("amg", ust.asarray(A), options={"max_coarse": 50, "omega": 0.55, "sweeps": 2})
    assert rel(p.apply(rhs(900)), ml.aspreconditioner() @ rhs(900)) < 1e-10
    C = convdiff2d(30)
    ml = pyamg_vcycle(C, omega=0.6, symmetry="nonsymmetric")
    q = build_preconditioner(
        "amg",
        ust.asarray(C, "BSR[2,2]"),
        options={"max_coarse": 50, "omega": 0.6, "pyamg": {"symmetry": "nonsymmetric"}},
    )
    assert rel(q.apply(rhs(900)), ml.aspreconditioner() @ rhs(900)) < 1e-10


def test_amg_cg_iterations_equal_pyamgs() -> None:
    A = poisson2d(40)
    ml = pyamg_vcycle(A, omega=0.6)
    p = build_preconditioner("amg", ust.asarray(A, "DIA"), options={"max_coarse": 50, "omega": 0.6})
    ours = cg_iterations(A, as_operator(p, 1600))
    assert ours == cg_iterations(A, ml.aspreconditioner(cycle="V"))
    assert ours < cg_iterations(A) / 3


def test_amg_defaults_smoothers_and_coarse_solvers() -> None:
    pytest.importorskip("pyamg")
    A = poisson2d(40)
    p = build_preconditioner("amg", ust.asarray(A))  # max_coarse 500, omega 4/3 / rho(D^-1 A)
    assert p.levels[-1].rows <= 500
    assert all(0.5 < lv.omega < 1.0 for lv in p.levels[:-1])
    assert cg_iterations(A, as_operator(p, 1600)) <= 15
    cheb = build_preconditioner("amg", ust.asarray(A), options={"smoother": "chebyshev", "max_coarse": 50})
    assert "Chebyshev smoothing" in cheb.describe()
    assert cg_iterations(A, as_operator(cheb, 1600)) <= 15
    for mode in ("inv", "pinv"):
        q = build_preconditioner(
            "amg", ust.asarray(A), options={"max_coarse": 50, "coarse_solver": mode, "omega": 0.6}
        )
        assert rel(q.apply(rhs(1600)), pyamg_vcycle(A, 0.6).aspreconditioner() @ rhs(1600)) < 1e-10
        assert "dense" in q.describe()
    # a matrix below max_coarse: one level, solved directly
    small = build_preconditioner("amg", ust.asarray(poisson2d(8)))
    np.testing.assert_allclose(poisson2d(8) @ small.apply(rhs(64)), rhs(64), atol=1e-12)
    with pytest.raises(InvalidValueError, match="smoother"):
        build_preconditioner("amg", ust.asarray(A), options={"smoother": "sor"})
    with pytest.raises(InvalidValueError, match="max_coarse"):
        build_preconditioner("amg", ust.asarray(A), options={"pyamg": {"max_coarse": 3}})


def test_amg_build_is_deterministic_and_leaves_numpys_generator_alone() -> None:
    pytest.importorskip("pyamg")
    A = ust.asarray(poisson2d(30))
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    z1 = build_preconditioner("amg", A, options={"max_coarse": 40}).apply(rhs(900))
    assert np.array_equal(np.random.get_state()[1], before)
    z2 = build_preconditioner("amg", A, options={"max_coarse": 40}).apply(rhs(900))
    np.testing.assert_array_equal(z1, z2)


def test_amg_without_pyamg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyamg", None)
    with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[amg\]"'):
        build_preconditioner("amg", ust.asarray(poisson2d(5)), options={"setup": "pyamg"})
    # setup="auto" (the default) builds the hierarchy itself when pyamg is missing
    assert build_preconditioner("amg", ust.asarray(poisson2d(5))).setup == "device"


# ----------------------------------------------------------------------------- effect on CG


@pytest.mark.parametrize(
    "name, options",
    [
        ("block_jacobi", {"block_size": 40}),
        ("ilu0", None),
        ("ic0", None),
        ("chebyshev", None),
        ("amg", None),
    ],
)
def test_cg_needs_fewer_iterations_on_poisson_40x40(name: str, options: Any) -> None:
    if name == "amg":
        pytest.importorskip("pyamg")
    A = poisson2d(40)
    p = build_preconditioner(name, ust.asarray(A, "DIA"), options=options)
    assert cg_iterations(A, as_operator(p, 1600)) < cg_iterations(A)


def test_jacobi_on_poisson_is_a_scaling_and_repairs_bad_scaling() -> None:
    """Poisson's diagonal is constant: Jacobi only rescales (same iteration count); with badly
    scaled unknowns (S A S) it restores Poisson's conditioning."""
    A = poisson2d(40)
    for name in ("jacobi", "block_jacobi"):
        p = build_preconditioner(name, ust.asarray(A))
        assert abs(cg_iterations(A, as_operator(p, 1600)) - cg_iterations(A)) <= 1
        B = scaled_poisson2d(40)
        options = {"block_size": 1} if name == "block_jacobi" else None
        q = build_preconditioner(name, ust.asarray(B, "BSR[2,2]"), options=options)
        assert cg_iterations(B, as_operator(q, 1600)) < cg_iterations(B) / 3


def test_gmres_with_ilu0_and_amg_on_convection_diffusion() -> None:
    C = convdiff2d(30)

    def iterations(M: Any) -> int:
        count = [0]
        _, info = sla.gmres(
            C, np.ones(900), rtol=1e-8, restart=50, maxiter=100, M=M,
            callback=lambda _: count.__setitem__(0, count[0] + 1), callback_type="pr_norm",
        )  # fmt: skip
        assert info == 0
        return count[0]

    plain = iterations(None)
    for name, options in (("ilu0", None), ("block_jacobi", {"block_size": 30})):
        p = build_preconditioner(name, ust.asarray(C, LOOSE), options=options)
        assert iterations(as_operator(p, 900)) < plain
    pytest.importorskip("pyamg")
    p = build_preconditioner("amg", ust.asarray(C), options={"pyamg": {"symmetry": "nonsymmetric"}})
    assert iterations(as_operator(p, 900)) < plain / 3


# ----------------------------------------------------------------------------- user operators


def test_user_operators_apply_m_at_r() -> None:
    A = convdiff2d(6)
    Minv = sp.csr_array(block_jacobi_dense(A.toarray(), 4))
    r = rhs(36)
    want = Minv @ r
    cases: list[Any] = [
        Minv,
        sp.csr_matrix(Minv),
        ust.asarray(Minv, "DIA"),
        Minv.toarray(),
        sla.aslinearoperator(Minv),
        lambda v: Minv @ v,
    ]
    for M in cases:
        p = build_preconditioner(M, ust.asarray(A))
        assert p is not None and p.name == "user"
        np.testing.assert_allclose(p.apply(r), want, rtol=1e-14)
        assert p.describe()


def test_user_operators_never_see_the_callers_r() -> None:
    def clobber(v: np.ndarray) -> np.ndarray:
        v[:] = 0
        return np.ones_like(v)

    p = build_preconditioner(clobber, ust.asarray(poisson2d(3)))
    r = rhs(9)
    keep = r.copy()
    p.apply(r)
    np.testing.assert_array_equal(r, keep)


def test_user_operator_errors_and_passthrough() -> None:
    A = ust.asarray(poisson2d(4))
    with pytest.raises(ShapeError, match="shape"):
        build_preconditioner(sp.eye_array(15), A)
    with pytest.raises(ShapeError, match="shape"):
        build_preconditioner(sla.aslinearoperator(sp.eye_array(15)), A)
    bad = build_preconditioner(lambda v: v[:3], A)
    with pytest.raises(ShapeError, match="returned 3 values"):
        bad.apply(rhs(16))
    with pytest.raises(InvalidTypeError, match="M must be"):
        build_preconditioner(3.5, A)
    with pytest.raises(InvalidValueError, match="options"):
        build_preconditioner(lambda v: v, A, options={"degree": 2})
    p = build_preconditioner("jacobi", A)
    assert build_preconditioner(p, A) is p
    assert build_preconditioner(None, A) is None


# ----------------------------------------------------------------------------- inputs and contracts


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(UnsupportedError) as err:
        build_preconditioner("ilu", ust.asarray(poisson2d(3)))
    for name in PRECONDITIONERS:
        assert name in str(err.value)
    assert PRECONDITIONERS == ("jacobi", "block_jacobi", "ilu0", "ic0", "chebyshev", "amg")


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(InvalidValueError, match="block_size"):
        build_preconditioner("block_jacobi", ust.asarray(poisson2d(3)), options={"blocksize": 2})
    with pytest.raises(InvalidValueError, match="takes: none"):
        build_preconditioner("jacobi", ust.asarray(poisson2d(3)), options={"omega": 1.0})
    with pytest.raises(InvalidTypeError):
        build_preconditioner("jacobi", ust.asarray(poisson2d(3)), options=[("a", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", PRECONDITIONERS)
def test_bad_matrices_fail_before_work(name: str) -> None:
    with pytest.raises(ShapeError, match="square"):
        build_preconditioner(name, ust.asarray(sp.random_array((4, 5), density=0.5, random_state=0)))
    A = poisson2d(4).toarray()
    A[2, 3] = np.nan
    with pytest.raises(InvalidValueError, match="NaN"):
        build_preconditioner(name, ust.asarray(sp.csr_array(A)))
    A[2, 3] = np.inf
    with pytest.raises(InvalidValueError, match="NaN or Inf"):
        build_preconditioner(name, ust.asarray(sp.csr_array(A)))


def test_zero_diagonal_is_an_error_for_jacobi() -> None:
    A = poisson2d(4).toarray()
    A[5, 5] = 0.0
    with pytest.raises(InvalidValueError, match=r"A\[5, 5\] is zero"):
        build_preconditioner("jacobi", ust.asarray(sp.csr_array(A)))


@pytest.mark.parametrize("name", PRECONDITIONERS)
@pytest.mark.parametrize("fmt", ["CSR", "BSR[2,2]"])
def test_neither_a_nor_r_is_modified_and_r_dtype_is_kept(name: str, fmt: str) -> None:
    if name == "amg":
        pytest.importorskip("pyamg")
    S = poisson2d(12)
    A = ust.asarray(S, fmt)
    before = {k: np.array(v, copy=True) for k, v in A.buffers().items() if v is not None}
    p = build_preconditioner(name, A, options={"max_coarse": 40} if name == "amg" else None)
    r = rhs(144)
    keep = r.copy()
    z = p.apply(r)
    np.testing.assert_array_equal(r, keep)
    assert z is not r and z.dtype == np.float64 and z.shape == (144,)
    after = {k: np.asarray(v) for k, v in A.buffers().items() if v is not None}
    for k, v in before.items():
        np.testing.assert_array_equal(after[k], v)
    z32 = p.apply(r.astype(np.float32))
    assert z32.dtype == np.float32
    np.testing.assert_allclose(z32, z, rtol=1e-5, atol=1e-6 * np.abs(z).max())
    assert p.apply(r.astype(np.complex128)).dtype == np.complex128
    with pytest.raises(ShapeError):
        p.apply(rhs(143))
    repr(p)


def test_integer_matrix_and_apply_checks() -> None:
    A = ust.asarray(sp.csr_array(poisson2d(4).astype(np.int64)))
    p = build_preconditioner("ilu0", A)
    q = build_preconditioner("ilu0", ust.asarray(poisson2d(4)))
    np.testing.assert_allclose(p.apply(rhs(16)), q.apply(rhs(16)))
    with pytest.raises(ShapeError):
        p.apply(rhs(16).reshape(4, 4))
    cupy_like = type("ndarray", (), {"__module__": "cupy"})
    with pytest.raises(DeviceError):
        p.apply(cupy_like())


def test_empty_system() -> None:
    A = ust.asarray(sp.csr_array((0, 0)))
    for name in ("jacobi", "ilu0", "chebyshev"):
        p = build_preconditioner(name, A)
        assert p.apply(np.zeros(0)).shape == (0,)


def test_module_doctest() -> None:
    result = doctest.testmod(precond, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("name", PRECONDITIONERS)
def test_float32_matrix_builds_in_float32(name: str) -> None:
    if name == "amg":
        pytest.importorskip("pyamg")
    S = poisson2d(12)
    options = {"max_coarse": 40, "omega": 0.6} if name == "amg" else None
    p32 = build_preconditioner(name, ust.asarray(S.astype(np.float32)), options=options)
    p64 = build_preconditioner(name, ust.asarray(S), options=options)
    r = rhs(144)
    z32 = p32.apply(r.astype(np.float32))
    assert z32.dtype == np.float32
    assert rel(z32.astype(np.float64), p64.apply(r)) < 1e-4


def test_chebyshev_on_a_complex_hermitian_matrix() -> None:
    H = sp.csr_array(
        poisson2d(6).astype(np.complex128) + 0.3j * (sp.eye_array(36, k=1) - sp.eye_array(36, k=-1))
    )
    p = build_preconditioner("chebyshev", ust.asarray(H, "DIA"))
    r = rhs(36) + 1j * rhs(36, 1)
    np.testing.assert_allclose(p.apply(r), chebyshev_dense(H.toarray(), *p.bounds, 3) @ r, rtol=1e-12)
    q = build_preconditioner("ic0", ust.asarray(H))
    L = ic0_dense(H.toarray())
    np.testing.assert_allclose(q.apply(r), np.linalg.solve(L.conj().T, np.linalg.solve(L, r)), rtol=1e-12)


def test_user_operator_against_a_shape_only_system() -> None:
    """A LinearOperator system has no entries: a user M is checked against its shape alone."""
    A = sla.aslinearoperator(poisson2d(4))
    p = build_preconditioner(lambda v: 2 * v, A)
    np.testing.assert_allclose(p.apply(rhs(16)), 2 * rhs(16))
    with pytest.raises(ShapeError, match="shape"):
        build_preconditioner(sp.eye_array(15), A)
    with pytest.raises(InvalidTypeError):
        build_preconditioner(lambda v: v, object())
