"""ust.linalg's Krylov solvers against SciPy: every method on SPD, symmetric indefinite and
unsymmetric systems, several formats, SciPy's conventions (info, maxiter, callbacks), the true
residual as the convergence test, bad input refused before work, operands never written."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from ust.linalg import IterativeSolver, IterativeSolverWarning, bicgstab, cg, gmres, minres

import ust
from ust.runtime.errors import InvalidValueError, ShapeError, UnsupportedError

METHODS = {"cg": cg, "minres": minres, "gmres": gmres, "bicgstab": bicgstab}
FORMATS = ["CSR", "DIA", "BSR[2,2]", "(i, j) -> (i : dense, j : loose_compressed)", "DCSR"]


def poisson2d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def poisson3d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(sp.kron(t, e), e) + sp.kron(sp.kron(e, t), e) + sp.kron(sp.kron(e, e), t)).tocsr()


def convection_diffusion(m: int, wind: float = 0.4) -> sp.csr_array:
    """Upwinded 2-D convection-diffusion: unsymmetric, positive real part."""
    t = sp.diags_array([-1.0 - wind, 2.0 + wind, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return (sp.kron(t, e) + sp.kron(e, t)).tocsr()


def helmholtz(m: int, sigma: float = 0.3) -> sp.csr_array:
    """Shifted Poisson: symmetric indefinite (eigenvalues of both signs)."""
    a = poisson2d(m)
    return (a - sigma * sp.eye_array(a.shape[0])).tocsr()


def rhs(n: int, seed: int = 0, dtype: type = np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def true_rel(a: sp.csr_array, x: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))


SYSTEMS = {
    "poisson2d": (poisson2d(24), ("cg", "minres", "gmres", "bicgstab")),
    "poisson3d": (poisson3d(8), ("cg", "minres", "gmres", "bicgstab")),
    "helmholtz": (helmholtz(16), ("minres", "gmres")),
    "convdiff": (convection_diffusion(20), ("gmres", "bicgstab")),
}
CASES = [(name, m) for name, (_, methods) in SYSTEMS.items() for m in methods]


@pytest.mark.parametrize(("system", "method"), CASES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_converges_to_scipys_solution_in_every_format(system: str, method: str, fmt: str) -> None:
    a, _ = SYSTEMS[system]
    b = rhs(a.shape[0])
    t = ust.asarray(a, format=fmt)
    x, info, res = METHODS[method](t, b, rtol=1e-10, maxiter=4000, return_result=True)
    assert info == 0 and res.converged
    assert true_rel(a, x, b) <= 1e-10
    assert res.residual == pytest.approx(true_rel(a, x, b), rel=1e-6, abs=1e-16)
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), b), rtol=1e-7, atol=1e-8)
    assert isinstance(x, np.ndarray) and x.shape == b.shape


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_iteration_counts_match_scipy(method: str) -> None:
    """CG and BiCGSTAB are SciPy's recurrences: same iterations to the same tolerance (a BiCGSTAB
    that converges at a half step counts that step; SciPy returns there without a callback)."""
    a = poisson2d(20)
    b = rhs(a.shape[0], 3)
    seen: list[int] = []
    getattr(spla, method)(a, b, rtol=1e-8, callback=lambda _x: seen.append(1))
    _x, info, res = METHODS[method](a, b, rtol=1e-8, return_result=True)
    assert info == 0
    assert res.iterations - len(seen) in ((0,) if method == "cg" else (0, 1))


def test_gmres_restart_cycles_match_scipy() -> None:
    a = convection_diffusion(16)
    b = rhs(a.shape[0], 5)
    steps: list[float] = []
    spla.gmres(a, b, rtol=1e-9, restart=15, callback=steps.append, callback_type="pr_norm")
    mine: list[float] = []
    x, info = gmres(a, b, rtol=1e-9, restart=15, callback=mine.append, callback_type="pr_norm")
    assert info == 0 and true_rel(a, x, b) <= 1e-9
    assert abs(len(mine) - len(steps)) <= 2  # right- vs left-preconditioned: same Krylov space


def test_minres_meets_the_true_residual_where_scipy_stops_earlier() -> None:
    a = helmholtz(14)
    b = rhs(a.shape[0], 1)
    xs, _ = spla.minres(a, b, rtol=1e-8)
    x, info = minres(a, b, rtol=1e-8)
    assert info == 0 and true_rel(a, x, b) <= 1e-8
    assert true_rel(a, x, b) <= true_rel(a, xs, b) * 1.0001


@pytest.mark.parametrize("method", list(METHODS))
def test_maxiter_returns_info_and_warns(method: str) -> None:
    a = poisson2d(24)
    b = rhs(a.shape[0])
    with pytest.warns(IterativeSolverWarning, match="did not converge"):
        x, info, res = METHODS[method](a, b, rtol=1e-12, maxiter=3, return_result=True)
    assert info == 3 and not res.converged
    assert np.isfinite(x).all()
    assert res.residual == pytest.approx(true_rel(a, x, b), rel=1e-6)
    assert res.residual > 1e-12


@pytest.mark.parametrize("method", list(METHODS))
def test_callback_once_per_iteration_with_x(method: str) -> None:
    a = poisson2d(12)
    b = rhs(a.shape[0])
    seen: list[np.ndarray] = []
    kw = {"callback_type": "x"} if method == "gmres" else {}
    x, info, res = METHODS[method](
        a, b, rtol=1e-8, callback=lambda xk: seen.append(xk.copy()), return_result=True, **kw
    )
    assert info == 0 and seen
    if method != "gmres":  # gmres 'x': once per restart cycle, as SciPy's
        assert len(seen) == res.iterations
    np.testing.assert_allclose(seen[-1], x)


def test_gmres_legacy_maxiter_counts_inner_steps() -> None:
    a = convection_diffusion(16)
    b = rhs(a.shape[0])
    calls: list[float] = []
    with pytest.warns(IterativeSolverWarning):
        _x, info = gmres(a, b, rtol=1e-12, maxiter=7, callback=calls.append)  # callback_type None: legacy
    assert info == 7 and len(calls) == 7


@pytest.mark.parametrize("method", list(METHODS))
def test_check_every_changes_nothing_but_when_convergence_is_seen(method: str) -> None:
    a = poisson2d(16)
    b = rhs(a.shape[0])
    _x1, i1, r1 = METHODS[method](a, b, rtol=1e-9, return_result=True)
    x4, i4, r4 = METHODS[method](a, b, rtol=1e-9, return_result=True, options={"check_every": 4})
    assert i1 == i4 == 0
    assert r4.iterations - r1.iterations in range(0, 5)
    assert true_rel(a, x4, b) <= 1e-9


def test_x0_atol_and_zero_rhs() -> None:
    a = poisson2d(10)
    b = rhs(a.shape[0])
    x_exact = spla.spsolve(a.tocsc(), b)
    x, info, res = cg(a, b, x0=x_exact, return_result=True)
    assert info == 0 and res.iterations == 0
    x, info = cg(a, b, atol=1e3)  # ||b|| < 1e3: converged before the first step
    assert info == 0 and not x.any()
    x, info = cg(a, np.zeros(a.shape[0]))
    assert info == 0 and not x.any()


def test_complex_systems() -> None:
    a = convection_diffusion(12).astype(np.complex128)
    a = (a + 0.5j * sp.eye_array(a.shape[0])).tocsr()
    b = rhs(a.shape[0]) + 1j * rhs(a.shape[0], 9)
    for method in ("gmres", "bicgstab"):
        x, info = METHODS[method](a, b, rtol=1e-10)
        assert info == 0 and true_rel(a, x, b) <= 1e-10
    h = poisson2d(12).astype(np.complex128)
    h = (
        h
        + sp.diags_array(np.full(h.shape[0] - 1, 0.2j), offsets=1)
        - sp.diags_array(np.full(h.shape[0] - 1, 0.2j), offsets=-1)
    ).tocsr()
    for method in ("cg", "minres"):  # Hermitian positive definite
        x, info = METHODS[method](h, b, rtol=1e-10)
        assert info == 0 and true_rel(h, x, b) <= 1e-10


def test_float32_stays_float32() -> None:
    a = poisson2d(10).astype(np.float32)
    b = rhs(a.shape[0], dtype=np.float32)
    x, info = cg(a, b, rtol=1e-5)
    assert info == 0 and x.dtype == np.float32


def test_column_rhs_and_linear_operator() -> None:
    a = poisson2d(10)
    b = rhs(a.shape[0])
    x, info = cg(a, b[:, None])
    assert info == 0 and x.shape == (a.shape[0],)
    op = spla.aslinearoperator(a)
    x2, info2 = cg(op, b, rtol=1e-9)
    assert info2 == 0 and true_rel(a, x2, b) <= 1e-9
    jac = spla.LinearOperator(a.shape, matvec=lambda r: r / a.diagonal())
    x3, info3 = cg(op, b, rtol=1e-9, M=jac)
    assert info3 == 0 and true_rel(a, x3, b) <= 1e-9


def test_inputs_never_written() -> None:
    a = poisson2d(10)
    t = ust.asarray(a, format="CSR")
    b = rhs(a.shape[0])
    x0 = np.ones(a.shape[0])
    keep = [arr.copy() for arr in (t.values, t.pos(1), t.crd(1), b, x0)]
    for method in METHODS:
        METHODS[method](t, b, x0=x0, rtol=1e-8)
    for before, after in zip(keep, (t.values, t.pos(1), t.crd(1), b, x0)):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("where", ["A", "b", "x0"])
def test_non_finite_input_raises_before_work(where: str) -> None:
    a = poisson2d(6).tocsr()
    b = rhs(a.shape[0])
    x0 = None
    if where == "A":
        a = a.copy()
        a.data[3] = np.nan
    elif where == "b":
        b = b.copy()
        b[2] = np.inf
    else:
        x0 = np.zeros(a.shape[0])
        x0[0] = np.nan
    with pytest.raises(InvalidValueError, match="NaN or Inf"):
        cg(a, b, x0=x0)


def test_bad_arguments() -> None:
    a = poisson2d(5)
    b = rhs(a.shape[0])
    with pytest.raises(ShapeError, match="square"):
        cg(sp.random_array((4, 5), density=0.5, random_state=1), np.ones(4))
    with pytest.raises(ShapeError, match="shape"):
        cg(a, np.ones(3))
    with pytest.raises(UnsupportedError, match="rtol"):
        cg(a, b, rtol=-1)
    with pytest.raises(UnsupportedError, match="maxiter"):
        cg(a, b, maxiter=0)
    with pytest.raises(UnsupportedError, match="method"):
        IterativeSolver(a, method="qmr")
    with pytest.raises(UnsupportedError, match="callback_type"):
        gmres(a, b, callback=print, callback_type="y")
    with pytest.raises(UnsupportedError, match="unknown iterative-solver options"):
        cg(a, b, options={"chek_every": 2})
    with pytest.raises(UnsupportedError, match="unexpected keyword"):
        cg(a, b, restart=5)


def test_iterative_solver_object_plans_once_and_solves_many() -> None:
    a = poisson2d(14)
    s = IterativeSolver(ust.asarray(a, format="DIA"), method="cg", rtol=1e-9)
    s.plan()
    for seed in range(3):
        b = rhs(a.shape[0], seed)
        x = s.solve(b)
        assert s.result is not None and s.result.converged and s.result.iterations > 0
        assert true_rel(a, x, b) <= 1e-9
        assert s.result.device == "cpu" and s.result.setup_seconds >= 0
    x = s.execute(b=b)
    assert true_rel(a, x, b) <= 1e-9
    a2 = (a * 2.0).tocsr()
    s.reset_operands(a=ust.asarray(a2, format="DIA"))
    x = s.solve(b)
    assert true_rel(a2, x, b) <= 1e-9
    with pytest.raises(ShapeError):
        s.reset_operands(a=poisson2d(5))
    s.free()


def test_breakdown_returns_a_finite_iterate() -> None:
    """CG on a singular indefinite matrix where p^H A p hits zero: info < 0, x finite, a warning."""
    a = sp.csr_array(np.array([[0.0, 1.0], [1.0, 0.0]]))
    b = np.array([1.0, 0.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x, info = cg(a, b)
    assert info != 0
    assert np.isfinite(x).all()
    assert any(issubclass(w.category, IterativeSolverWarning) for w in caught)


def test_logs_what_ran(caplog: pytest.LogCaptureFixture) -> None:
    a = poisson2d(8)
    with caplog.at_level("INFO", logger="ust"):
        cg(ust.asarray(a, format="DIA"), rhs(a.shape[0]), rtol=1e-8)
    text = caplog.text
    assert "cg on cpu" in text and "SpMV route" in text
    assert "iterations, relative residual" in text


pyamg = pytest.importorskip("pyamg", reason="pyamg's gallery examples need the amg extra")


@pytest.mark.parametrize(
    ("example", "methods"),
    [
        ("airfoil", ("cg", "minres", "gmres", "bicgstab")),
        ("bar", ("cg", "minres", "gmres")),
        ("recirc_flow", ("gmres", "bicgstab")),
        ("helmholtz_2D", ("gmres", "bicgstab")),  # complex symmetric, indefinite
    ],
)
def test_pyamg_gallery_examples(example: str, methods: tuple[str, ...]) -> None:
    from pyamg.gallery import load_example

    a = sp.csr_array(load_example(example)["A"])
    a = a.astype(np.result_type(a.dtype, np.float64))  # complex examples stay complex
    b = rhs(a.shape[0], 11)
    for method in methods:
        x, info = METHODS[method](a, b, rtol=1e-8, maxiter=20 * a.shape[0])
        assert info == 0, method
        assert true_rel(a, x, b) <= 1e-8


def test_minres_on_a_non_hermitian_matrix_reports_it_did_not_converge() -> None:
    """pyamg's helmholtz_2D is complex symmetric, not Hermitian: MINRES does not apply, and says so
    through info > 0 and a warning, never a silently wrong x."""
    from pyamg.gallery import load_example

    a = sp.csr_array(load_example("helmholtz_2D")["A"])
    b = rhs(a.shape[0], 11).astype(a.dtype)
    with pytest.warns(IterativeSolverWarning, match="did not converge"):
        x, info, res = minres(a, b, rtol=1e-8, maxiter=300, return_result=True)
    assert info == 300 and not res.converged
    assert res.residual == pytest.approx(true_rel(a, x, b), rel=1e-6)
