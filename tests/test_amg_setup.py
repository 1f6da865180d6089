"""ust.algebra.aggregation on the CPU (NumPy / scipy.sparse): the smoothed-aggregation setup's
pieces against their definitions (strength, MIS-2 aggregates, T, P, R A P), and CG + AMG with
``setup="device"`` against the pyamg setup and SciPy's direct solve."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as sla

import ust
from tests.test_precond import convdiff2d, poisson2d
from ust.algebra import aggregation as ag
from ust.api.precond import build_preconditioner
from ust.runtime import xp as _xp
from ust.runtime.errors import InvalidValueError, ShapeError


def poisson3d(m: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return sp.csr_array(sp.kron(sp.kron(t, e), e) + sp.kron(sp.kron(e, t), e) + sp.kron(sp.kron(e, e), t))


def anisotropic2d(m: int, eps: float = 1e-3) -> sp.csr_array:
    """``-eps u_xx - u_yy``: strong coupling along y only."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    return sp.csr_array(eps * sp.kron(e, t) + sp.kron(t, e))


def with_isolated(m: int, k: int) -> sp.csr_array:
    """Poisson 2-D plus a diagonal block of k rows (isolated nodes, like Dirichlet rows)."""
    return sp.csr_array(sp.block_diag([poisson2d(m), sp.diags_array(np.linspace(1.0, 3.0, k))]))


MATRICES = {
    "poisson2d": lambda: poisson2d(30),
    "poisson3d": lambda: poisson3d(12),
    "anisotropic2d": lambda: anisotropic2d(30),
    "isolated": lambda: with_isolated(25, 40),
}


def csr(S: sp.csr_array) -> sp.csr_matrix:
    A = sp.csr_matrix(S)
    A.sort_indices()
    return A


def strength_graph(A: Any, theta: float = 0.0) -> sp.csr_array:
    src, dst = ag.strength(A, theta)
    n = A.shape[0]
    return sp.csr_array((np.ones(src.shape[0]), (src, dst)), shape=(n, n))


# ----------------------------------------------------------------------------- strength


def test_strength_is_pyamgs_symmetric_measure() -> None:
    S = anisotropic2d(12)
    A = csr(S)
    D = np.abs(S.diagonal())
    for theta in (0.0, 0.01, 0.25, 0.5):
        G = strength_graph(A, theta)
        dense = np.abs(S.toarray())
        want = (dense >= theta * np.sqrt(np.outer(D, D))) & (dense > 0)
        np.fill_diagonal(want, False)
        np.testing.assert_array_equal(G.toarray() > 0, want)
    # theta 0.25 keeps the y couplings (1) and drops the x couplings (1e-3)
    assert strength_graph(A, 0.25).nnz == 2 * 12 * 11
    with pytest.raises(InvalidValueError, match="theta"):
        ag.strength(A, 1.5)


def test_stored_zeros_and_rounding_residue_are_never_strong() -> None:
    S = poisson2d(4).tolil()
    S[0, 5] = S[5, 0] = 0.0
    S[1, 9] = S[9, 1] = 1e-14
    G = strength_graph(csr(sp.csr_array(S)))
    assert G[0, 5] == 0 and G[1, 9] == 0 and G[0, 1] == 1


# ----------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_aggregates_partition_the_nodes_and_are_connected(name: str) -> None:
    A = csr(MATRICES[name]())
    n = A.shape[0]
    src, dst = ag.strength(A)
    agg, nagg, rounds = ag.aggregate(np, n, src, dst, seed=0)
    isolated = np.bincount(src, minlength=n) == 0
    # every node with a strong neighbour is in exactly one aggregate, the others in none
    np.testing.assert_array_equal(agg < 0, isolated)
    assert agg.max() == nagg - 1 and np.unique(agg[agg >= 0]).shape[0] == nagg
    assert 0 < nagg < n and 1 <= rounds < ag.MAX_ROUNDS
    # each aggregate is connected through strong edges inside it
    inside = agg[src] == agg[dst]
    G = sp.csr_array((np.ones(int(inside.sum())), (src[inside], dst[inside])), shape=(n, n))
    ncomp, label = csgraph.connected_components(G, directed=True, connection="weak")
    assert ncomp - int(isolated.sum()) == nagg
    # components and aggregates are the same sets
    assigned = agg >= 0
    pairs = np.unique(np.stack([label[assigned], agg[assigned]]), axis=1)
    assert pairs.shape[1] == nagg


@pytest.mark.parametrize("name", ["poisson2d", "poisson3d", "anisotropic2d"])
def test_roots_are_a_distance_two_maximal_independent_set(name: str) -> None:
    A = csr(MATRICES[name]())
    n = A.shape[0]
    src, dst = ag.strength(A)
    roots, _ = ag.mis2(np, n, src, dst, ag.priorities(np, n, 7))
    G = sp.csr_array((np.ones(src.shape[0]), (src, dst)), shape=(n, n))
    near = ((G + sp.eye_array(n)) @ (G + sp.eye_array(n))) > 0  # within distance two
    r = np.flatnonzero(roots)
    assert near[r][:, r].sum() == r.shape[0]  # independent: each root sees only itself
    assert np.all(near[:, r].sum(axis=1) > 0)  # maximal: everyone sees a root


def test_priorities_are_distinct_and_depend_on_the_seed() -> None:
    p0, p1 = ag.priorities(np, 100_000, 0), ag.priorities(np, 100_000, 1)
    assert p0.dtype == np.uint32 and np.unique(p0).shape[0] == 100_000
    assert not np.array_equal(p0, p1)
    np.testing.assert_array_equal(p0, ag.priorities(np, 100_000, 0))


# ----------------------------------------------------------------------------- T, P, R A P


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_tentative_smoothed_and_galerkin_operators(name: str) -> None:
    S = MATRICES[name]()
    h = ag.smoothed_aggregation(csr(S), max_coarse=20)
    assert len(h.levels) >= 2 and h.hermitian
    B = np.ones(S.shape[0])
    for lv in h.levels[:-1]:
        A, agg = lv.A, lv.aggregates
        nagg = int(agg.max()) + 1
        T, Bc = ag.tentative(agg, nagg, B, A.dtype)
        # one entry per aggregated row, orthonormal columns, B in their span
        np.testing.assert_array_equal(np.diff(T.indptr), (agg >= 0).astype(int))
        np.testing.assert_allclose((T.T @ T).toarray(), np.eye(nagg), atol=1e-13)
        np.testing.assert_allclose(T @ Bc, np.where(agg >= 0, B, 0), rtol=1e-13)
        # P = (I - omega D^-1 A) T with omega = 4/3 / rho(D^-1 A), on the pattern of (I + |A|) T
        Ad = A.toarray()
        Dinv = np.diag(1 / np.diag(Ad))
        rho = np.abs(np.linalg.eigvals(Dinv @ Ad)).max()
        assert 0.9 * rho <= lv.rho <= rho * (1 + 1e-8)
        want = (np.eye(A.shape[0]) - (4 / 3) / lv.rho * Dinv @ Ad) @ T.toarray()
        np.testing.assert_allclose(lv.P.toarray(), want, atol=1e-13)
        pattern = ((abs(A) + sp.eye_array(A.shape[0])) @ abs(T)).toarray() > 0
        assert not np.any((lv.P.toarray() != 0) & ~pattern)
        # R = P^H and A_c = R A P (SciPy's product)
        np.testing.assert_array_equal(lv.R.toarray(), lv.P.toarray().T)
        B = Bc
    for fine, coarse in zip(h.levels[:-1], h.levels[1:]):
        want = sp.csr_array(fine.R) @ sp.csr_array(fine.A) @ sp.csr_array(fine.P)
        np.testing.assert_allclose(coarse.A.toarray(), want.toarray(), rtol=1e-12, atol=1e-14)
        assert coarse.A.has_sorted_indices


def test_levels_stop_at_max_coarse_and_max_levels() -> None:
    A = csr(poisson2d(40))
    h = ag.smoothed_aggregation(A, max_coarse=30)
    sizes = [lv.A.shape[0] for lv in h.levels]
    assert sizes[-1] <= 30 < sizes[-2] and sizes == sorted(sizes, reverse=True)
    assert [lv.P is None for lv in h.levels] == [False] * (len(sizes) - 1) + [True]
    assert len(ag.smoothed_aggregation(A, max_coarse=1, max_levels=2).levels) == 2
    assert len(ag.smoothed_aggregation(A, max_coarse=2000).levels) == 1
    assert 1.0 < h.operator_complexity() < 2.0 and 1.0 < h.grid_complexity() < 1.5
    phases = {"strength", "aggregation", "spectral radius", "prolongator", "galerkin"}
    assert all(set(lv.seconds) == phases for lv in h.levels[:-1]) and h.levels[-1].seconds == {}
    # a diagonal matrix does not coarsen: one level
    assert len(ag.smoothed_aggregation(csr(sp.csr_array(sp.eye_array(900))), max_coarse=10).levels) == 1
    with pytest.raises(ShapeError):
        ag.smoothed_aggregation(sp.csr_matrix(np.ones((3, 4))))


def test_same_seed_same_hierarchy_other_seed_other_aggregates() -> None:
    A = csr(poisson3d(10))
    h1, h2 = ag.smoothed_aggregation(A, max_coarse=20), ag.smoothed_aggregation(A, max_coarse=20)
    for a, b in zip(h1.levels, h2.levels):
        for name in ("A", "P", "R"):
            x, y = getattr(a, name), getattr(b, name)
            if x is not None:
                assert (x != y).nnz == 0
        if a.aggregates is not None:
            np.testing.assert_array_equal(a.aggregates, b.aggregates)
            assert a.rho == b.rho
    h3 = ag.smoothed_aggregation(A, max_coarse=20, seed=5)
    assert not np.array_equal(h1.levels[0].aggregates, h3.levels[0].aggregates)


def test_complex_hermitian_and_nonsymmetric_matrices() -> None:
    n = 400
    H = sp.csr_array(
        poisson2d(20).astype(np.complex128) + 0.3j * (sp.eye_array(n, k=1) - sp.eye_array(n, k=-1))
    )
    assert ag.is_hermitian(csr(H))
    h = ag.smoothed_aggregation(csr(H), max_coarse=20)
    assert h.hermitian and len(h.levels) >= 2
    lv = h.levels[0]
    np.testing.assert_array_equal(lv.R.toarray(), lv.P.toarray().conj().T)
    Ac = h.levels[1].A.toarray()
    np.testing.assert_allclose(Ac, Ac.conj().T, atol=1e-13)
    C = csr(convdiff2d(20))
    assert not ag.is_hermitian(C)
    hc = ag.smoothed_aggregation(C, max_coarse=20)
    assert not hc.hermitian
    Cd = C.toarray()
    rho = np.abs(np.linalg.eigvals(Cd / np.diag(Cd)[:, None])).max()
    assert abs(hc.levels[0].rho - rho) < 0.05 * rho  # Arnoldi


def test_float32_stays_float32() -> None:
    A = csr(poisson2d(30).astype(np.float32))
    h = ag.smoothed_aggregation(A, max_coarse=20)
    assert all(lv.A.dtype == np.float32 for lv in h.levels)
    assert all(lv.P.dtype == np.float32 for lv in h.levels[:-1])


def test_the_input_matrix_is_not_modified() -> None:
    P = poisson2d(20).tocoo()
    rows, cols = np.concatenate((P.row, [0, 7])), np.concatenate((P.col, [7, 0]))
    A = csr(sp.csr_array((np.concatenate((P.data, [0.0, 0.0])), (rows, cols)), shape=P.shape))  # stored zeros
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    nz = ag.without_zeros(A)
    assert nz.nnz == A.nnz - 2 and ag.without_zeros(nz) is nz
    ag.smoothed_aggregation(A, max_coarse=20)
    for x, y in zip(before, (A.data, A.indices, A.indptr)):
        np.testing.assert_array_equal(x, y)


def test_xp_shims_on_numpy() -> None:
    target = np.zeros(4, dtype=np.uint64)
    _xp.scatter_max(np, target, np.array([1, 1, 3, 0]), np.array([5, 2, 7, 1], dtype=np.uint64))
    np.testing.assert_array_equal(target, [1, 5, 0, 7])
    assert _xp.sparse_module(np) is sp


# ----------------------------------------------------------------------------- CG + AMG


def _cg(A: sp.csr_array, b: np.ndarray, options: dict[str, Any]) -> tuple[np.ndarray, int, Any]:
    s = ust.linalg.IterativeSolver(
        ust.asarray(A), method="cg", M="amg", rtol=1e-8, maxiter=500, options={"preconditioner": options}
    )
    s.plan()
    x = s.solve(b)
    assert s.result is not None and s.result.converged
    return x, s.result.iterations, s


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_cg_with_the_device_setup_converges_like_pyamgs(name: str) -> None:
    pytest.importorskip("pyamg")
    A = MATRICES[name]()
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    x, ours, s = _cg(A, b, {"setup": "device", "max_coarse": 50})
    _, theirs, _ = _cg(A, b, {"setup": "pyamg", "max_coarse": 50})
    assert ours <= 1.5 * theirs + 3, (ours, theirs)
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    exact = sla.spsolve(sp.csc_array(A), b)
    assert np.linalg.norm(x - exact) <= 1e-6 * np.linalg.norm(exact)
    text = s.result.preconditioner
    assert "built on cpu by ust's array programs" in text and "operator complexity" in text


def test_setup_option_values_and_auto() -> None:
    A = ust.asarray(poisson2d(30))
    p = build_preconditioner("amg", A, options={"setup": "device", "max_coarse": 50})
    assert p.setup == "device" and len(p.levels) >= 2 and p.setup_seconds > 0
    assert "MIS-2" in p.describe() and f"{len(p.levels)} levels" in p.describe()
    with pytest.raises(InvalidValueError, match="setup must be one of"):
        build_preconditioner("amg", A, options={"setup": "gpu"})
    with pytest.raises(InvalidValueError, match="setup='pyamg' only"):
        build_preconditioner("amg", A, options={"setup": "device", "pyamg": {"symmetry": "nonsymmetric"}})
    pytest.importorskip("pyamg")
    assert build_preconditioner("amg", A).setup == "pyamg"  # on the CPU with pyamg installed
    q = build_preconditioner("amg", A, options={"pyamg": {"symmetry": "nonsymmetric"}})
    assert q.setup == "pyamg" and "pyamg on the host" in q.describe()


def test_device_setup_is_deterministic_and_chebyshev_works() -> None:
    A = ust.asarray(poisson3d(10))
    r = np.random.default_rng(0).standard_normal(1000)
    z1 = build_preconditioner("amg", A, options={"setup": "device", "max_coarse": 20}).apply(r)
    z2 = build_preconditioner("amg", A, options={"setup": "device", "max_coarse": 20}).apply(r)
    np.testing.assert_array_equal(z1, z2)
    cheb = build_preconditioner(
        "amg", A, options={"setup": "device", "max_coarse": 20, "smoother": "chebyshev"}
    )
    assert "Chebyshev" in cheb.describe()
    assert np.isfinite(cheb.apply(r)).all()


def test_gmres_with_the_device_setup_on_convection_diffusion() -> None:
    C = convdiff2d(30)

    def iterations(M: Any) -> int:
        count = [0]
        _, info = sla.gmres(
            C, np.ones(900), rtol=1e-8, restart=50, maxiter=100, M=M,
            callback=lambda _: count.__setitem__(0, count[0] + 1), callback_type="pr_norm",
        )  # fmt: skip
        assert info == 0
        return count[0]

    p = build_preconditioner("amg", ust.asarray(C), options={"setup": "device"})
    op = sla.LinearOperator((900, 900), matvec=p.apply, dtype=np.float64)
    assert iterations(op) < iterations(None) / 3


def test_module_doctest() -> None:
    import doctest

    result = doctest.testmod(ag, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
