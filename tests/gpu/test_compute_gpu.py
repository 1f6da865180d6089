"""``ust.compute`` / ``ust.einsum`` / ``ust.Compute`` on the GPU (issue 17): the CPU suite's twins.

Operands on the GPU (ust Tensors moved with ``.to("cuda")``, CuPy arrays) run the generated CUDA
route; every result must stay on the GPU (sparse results: Tensors on the device, dense: CuPy
arrays), equal ``numpy.einsum`` on dense host copies (exact for integers, rtol 1e-12 for fp64)
and the CPU route's result.  ``execution=`` moves the work and brings the result back to the
operands' own package.  Bad input raises the same ust error as on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from scipy.sparse.csgraph import shortest_path

import ust
from tests.algebra_cases import snapshot, unchanged
from tests.test_compute import (
    FMT_IDS,
    FORMATS,
    PARALLEL_CASES,
    USER_CSC,
    assert_no_duplicates,
    mat,
    rand_dense,
    rand_sparse_nd,
    to_fmt,
    weighted_graph,
)
from tests.test_compute import check as check_host
from tests.test_compute_hypothesis import Problem, problems, reference
from ust.runtime import xp as _xp
from ust.runtime.errors import DeviceError, InvalidValueError, ShapeError, UnsupportedError

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")]


@pytest.fixture(scope="module")
def cp() -> Any:
    import cupy

    return cupy


def dev(x: Any) -> Any:
    """``x`` on the GPU: a Tensor moved, an array as CuPy, a scalar as it is."""
    import cupy

    if isinstance(x, ust.Tensor):
        return x.to("cuda")
    if sp.issparse(x):
        return ust.asarray(x).to("cuda")
    if isinstance(x, np.ndarray):
        return cupy.asarray(x)
    return x


def on_gpu(x: Any) -> bool:
    if isinstance(x, ust.Tensor):
        return str(x.device).startswith("cuda")
    return _xp.is_cupy(x)


def host(x: Any) -> np.ndarray:
    if isinstance(x, ust.Tensor):
        return np.asarray(_xp.to_host(x.todense()))
    return np.asarray(_xp.to_host(x))


def check(got: Any, want: np.ndarray, *, where: str = "cuda") -> None:
    """``got`` lives where expected and equals ``want`` (see tests/test_compute.py::check)."""
    assert on_gpu(got) == (where == "cuda"), type(got)
    check_host(host(got), want)


# ----------------------------------------------------------------------------- SpMV, SpMM, SpGEMM


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("fb", FORMATS, ids=FMT_IDS)
def test_spgemm_every_pair(fa: str, fb: str) -> None:
    A, B = mat(1, (10, 8)), mat(2, (8, 6))
    a, b = dev(to_fmt(A, fa)), dev(to_fmt(B, fb))
    snaps = snapshot(a), snapshot(b)
    C = ust.einsum("ik,kj->ij", a, b)
    assert isinstance(C, ust.Tensor) and C.format == ust.format("CSR")
    check(C, A.toarray() @ B.toarray())
    assert unchanged(a, snaps[0]) and unchanged(b, snaps[1])


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
def test_spmv_spmm(fa: str, cp: Any) -> None:
    A = mat(3, (10, 8))
    a = dev(to_fmt(A, fa))
    x, X, Y = rand_dense(4, (8,)), rand_dense(5, (8, 3)), rand_dense(6, (4, 10))
    check(ust.einsum("ij,j->i", a, cp.asarray(x)), A.toarray() @ x)
    check(ust.compute("y(i) = A(i,j) * x(j)", A=a, x=cp.asarray(x)), A.toarray() @ x)
    check(ust.einsum("ij,jk->ik", a, cp.asarray(X)), A.toarray() @ X)
    check(ust.compute("Z(i,j) = Y(i,k) * A(k,j)", Y=cp.asarray(Y), A=a), Y @ A.toarray())
    check(ust.einsum("ji,j->i", a, cp.asarray(rand_dense(7, (10,)))), A.toarray().T @ rand_dense(7, (10,)))


def test_cupyx_and_dense_operands(cp: Any) -> None:
    import cupyx.scipy.sparse as csp

    A, B = mat(8, (10, 8)), mat(9, (8, 6))
    for make in (csp.csr_matrix, csp.csc_matrix, csp.coo_matrix):
        a = make(cp.asarray(A.toarray()))
        check(ust.einsum("ij,jk->ik", a, make(cp.asarray(B.toarray()))), A.toarray() @ B.toarray())
        check(ust.einsum("ij,j->i", a, cp.ones(8)), A.toarray() @ np.ones(8))
    X, Y = rand_dense(10, (4, 5)), rand_dense(11, (5, 3))
    check(ust.einsum("ij,jk->ik", cp.asarray(X), cp.asarray(Y)), X @ Y)


# ----------------------------------------------------------------------------- execution spaces


def test_execution_override_brings_results_back(cp: Any) -> None:
    A, B = mat(12, (10, 8)), mat(13, (8, 6))
    x = rand_dense(14, (8,))
    y = ust.einsum("ij,j->i", ust.asarray(A), x, execution="cuda")
    assert isinstance(y, np.ndarray)
    check(y, A.toarray() @ x, where="cpu")
    C = ust.einsum("ij,jk->ik", ust.asarray(A), ust.asarray(B), execution="cuda")
    check(C, A.toarray() @ B.toarray(), where="cpu")
    s = ust.einsum("ij,ij->", ust.asarray(A), ust.asarray(A), execution="cuda")
    check(s, np.einsum("ij,ij->", A.toarray(), A.toarray()), where="cpu")
    # GPU operands computed on the CPU come back as GPU objects
    y = ust.einsum("ij,j->i", dev(ust.asarray(A)), cp.asarray(x), execution="cpu")
    check(y, A.toarray() @ x)
    C = ust.einsum("ij,jk->ik", dev(ust.asarray(A)), dev(ust.asarray(B)), execution="cpu")
    check(C, A.toarray() @ B.toarray())


def test_explain_on_gpu(cp: Any) -> None:
    A = mat(15, (10, 8))
    text = ust.explain("einsum", "ij,j->i", dev(to_fmt(A, "CSR")), cp.ones(8))
    assert "generated-cuda" in text and "cuda" in text


# ----------------------------------------------------------------------------- kernels and shapes


@pytest.mark.parametrize("fs", ["CSR", "CSC", "COO", "DIA", "BSR", USER_CSC])
def test_sddmm_and_elementwise(fs: str, cp: Any) -> None:
    S, T = mat(16, (10, 8)), mat(17, (10, 8))
    A, B = rand_dense(18, (10, 4)), rand_dense(19, (8, 4))
    s, t = dev(to_fmt(S, fs)), dev(to_fmt(T, "CSR"))
    C = ust.compute("C(i,j) = S(i,j) * A(i,k) * B(j,k)", S=s, A=cp.asarray(A), B=cp.asarray(B))
    assert isinstance(C, ust.Tensor)
    check(C, np.einsum("ij,ik,jk->ij", S.toarray(), A, B))
    Sd, Td = S.toarray(), T.toarray()
    check(ust.compute("C(i,j) = S(i,j) + T(i,j)", S=s, T=t), Sd + Td)
    check(ust.compute("C(i,j) = S(i,j) * T(i,j)", S=s, T=t), Sd * Td)
    check(
        ust.compute("C(i,j) = S(i,j) - 2 * T(i,j) + S(i,j) * T(i,j) * S(i,j)", S=s, T=t),
        Sd - 2 * Td + Sd * Td * Sd,
    )
    check(ust.compute("C(i,j) = S(i,j) + D(i,j)", S=s, D=cp.asarray(Td)), Sd + Td)


@pytest.mark.parametrize(
    "subs", ["ji,jk->ik", "ij,ij->", "ij->i", "ij->j", "ij->", "ij->ji", "ii->i", "ii->"]
)
def test_einsum_reductions(subs: str) -> None:
    A, B = mat(20, (8, 8)), mat(21, (8, 8))
    ops = [A, B][: subs.split("->")[0].count(",") + 1]
    for f in ["CSR", "COO", "DIA"]:
        got = ust.einsum(subs, *(dev(to_fmt(m, f)) for m in ops))
        check(got, np.einsum(subs, *(m.toarray() for m in ops)))


@pytest.mark.parametrize("f3", ["COO3", "CSF"])
@pytest.mark.parametrize(
    "subs,other",
    [
        ("ijk,i->jk", (6,)),
        ("ijk,j->ik", (5,)),
        ("ijk,k->ij", (4,)),
        ("ijk,ir->rjk", (6, 3)),
        ("ijk,jr->irk", (5, 3)),
        ("ijk,kr->ijr", (4, 3)),
    ],
)
def test_ttv_ttm(f3: str, subs: str, other: tuple[int, ...], cp: Any) -> None:
    X = rand_sparse_nd(40, (6, 5, 4))
    V = rand_dense(41, other)
    check(ust.einsum(subs, dev(ust.asarray(X, format=f3)), cp.asarray(V)), np.einsum(subs, X, V))


def test_mttkrp_and_4d(cp: Any) -> None:
    X = rand_sparse_nd(42, (6, 5, 4))
    B, C = rand_dense(43, (5, 3)), rand_dense(44, (4, 3))
    for f3 in ["COO3", "CSF"]:
        x = dev(ust.asarray(X, format=f3))
        check(
            ust.einsum("ijk,jr,kr->ir", x, cp.asarray(B), cp.asarray(C)), np.einsum("ijk,jr,kr->ir", X, B, C)
        )
    T = rand_sparse_nd(47, (3, 4, 5, 2))
    U = rand_sparse_nd(48, (5, 2, 3))
    t = dev(
        ust.asarray(
            T,
            format="(a, b, c, d) -> (a : compressed(nonunique), b : singleton(nonunique), c : singleton(nonunique), d : singleton)",
        )
    )
    u = dev(ust.asarray(U, format="CSF"))
    check(ust.einsum("abcd,cde->abe", t, u), np.einsum("abcd,cde->abe", T, U))
    check(ust.einsum("abcd,abcd->", t, t), np.einsum("abcd,abcd->", T, T))
    R = ust.einsum("ijk,ijk->kij", x, x)
    check(R, np.einsum("ijk,ijk->kij", X, X))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64, np.int32])
def test_value_dtypes(dtype: Any, cp: Any) -> None:
    A, B = mat(56, (10, 8), dtype), mat(57, (8, 6), dtype)
    a, b = dev(to_fmt(A, "CSR")), dev(to_fmt(B, "COO"))
    C = ust.einsum("ij,jk->ik", a, b)
    assert C.dtype == np.dtype(dtype)
    check(C, A.toarray() @ B.toarray())
    x = rand_dense(58, (8,), dtype)
    y = ust.einsum("ij,j->i", a, cp.asarray(x))
    assert y.dtype == np.dtype(dtype)
    check(y, A.toarray() @ x)  # atomics may reorder a sum: fp64 still within rtol 1e-12
    check(ust.einsum("ij,ij->", a, a), np.einsum("ij,ij->", A.toarray(), A.toarray()))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_index_dtypes(itype: Any) -> None:
    A, B = mat(52, (10, 8)), mat(53, (8, 6))
    a, b = dev(to_fmt(A, "CSR", index_dtype=itype)), dev(to_fmt(B, "CSC", index_dtype=itype))
    check(ust.einsum("ij,jk->ik", a, b), A.toarray() @ B.toarray())


def test_awkward_operands(cp: Any) -> None:
    # explicit zeros
    A = sp.csr_array((np.array([0.0, 2.0]), np.array([1, 1]), np.array([0, 1, 2, 2])), shape=(3, 2))
    B = sp.csr_array((np.array([0.0, 5.0]), np.array([0, 1]), np.array([0, 0, 2])), shape=(2, 2))
    a, b = dev(ust.asarray(A)), dev(ust.asarray(B))
    check(ust.einsum("ij,jk->ik", a, b), A.toarray() @ B.toarray())
    M = ust.einsum("ij,jk->ik", a, b, semiring="min_plus")
    check(M, np.array([[0.0, 5.0], [2.0, 7.0], [np.inf, np.inf]]))
    # empty, 1x1, zero extents
    E = dev(ust.asarray(sp.csr_array((10, 8))))
    check(ust.einsum("ij,jk->ik", E, dev(ust.asarray(mat(1, (8, 6))))), np.zeros((10, 6)))
    check(ust.einsum("ij,j->i", E, cp.ones(8)), np.zeros(10))
    one = dev(ust.asarray(sp.csr_array(np.array([[3.0]]))))
    check(ust.einsum("ij,jk->ik", one, one), np.array([[9.0]]))
    for sa, sb in [((0, 5), (5, 3)), ((4, 0), (0, 3))]:
        za, zb = dev(ust.asarray(sp.csr_array(sa))), dev(ust.asarray(sp.csr_array(sb)))
        check(ust.einsum("ij,jk->ik", za, zb), np.zeros((sa[0], sb[1])))
        check(ust.einsum("ij->", za), np.float64(0.0))


@pytest.mark.parametrize("fmt", ["COO", "CSR", "CSC", "DCSR"])
@pytest.mark.parametrize("n", [1, 3])
def test_empty_coo_in_a_union(fmt: str, n: int, cp: Any) -> None:
    """A dense term plus an empty sparse operand (a union with nothing stored on one side)."""
    S = dev(to_fmt(sp.csr_array((n, n)), fmt))
    check(ust.compute("C(j) = x(k) + S(k, j)", x=cp.ones(n), S=S), np.full(n, float(n)))
    check(ust.compute("C(k, j) = X(k, j) + S(k, j)", X=cp.ones((n, n)), S=S), np.ones((n, n)))
    check(ust.compute("C(j) = S(k, j)", S=S), np.zeros(n))


def test_scalars_minus_parentheses_order(cp: Any) -> None:
    A, B, D = mat(62, (10, 8)), mat(63, (10, 8)), mat(64, (8, 6))
    a, b, d = dev(to_fmt(A, "CSR")), dev(to_fmt(B, "COO")), dev(to_fmt(D, "CSC"))
    Ad, Bd, Dd = A.toarray(), B.toarray(), D.toarray()
    x, z = rand_dense(65, (8,)), rand_dense(66, (8,))
    y = ust.compute(
        "y(i) = alpha * A(i,j) * x(j) + 2 * B(i,j) * z(j)",
        A=a,
        B=b,
        x=cp.asarray(x),
        z=cp.asarray(z),
        alpha=1.5,
    )
    check(y, 1.5 * Ad @ x + 2 * Bd @ z)
    check(ust.compute("C(i,k) = -(A(i,j) - 2 * B(i,j)) * D(j,k)", A=a, B=b, D=d), -(Ad - 2 * Bd) @ Dd)
    for order in ["ijk", "ikj", "kij", "kji"]:
        check(ust.compute("C(i,k) = A(i,j) * D(j,k)", A=a, D=d, options={"order": order}), Ad @ Dd)
    check(ust.compute("C(i,k) = A(i,j) * X(j,k)", A=a, X=cp.asarray(Dd), options={"order": "kij"}), Ad @ Dd)


@pytest.mark.parametrize("density", [0.02, 0.3, 0.9])
def test_broadcast_term_with_lanes(density: float, cp: Any) -> None:
    """Rows short and long (1, 8 or 32 lanes per row): a term outside the row's reduction is added once."""
    rng = np.random.default_rng(30)
    Ad = np.where(rng.random((40, 300)) < density, rng.standard_normal((40, 300)), 0.0)
    a = dev(ust.asarray(sp.csr_array(Ad)))
    x, z = rand_dense(31, (300,)), rand_dense(32, (40,))
    X = rand_dense(33, (300, 3))
    check(ust.compute("y(i) = A(i,k) * x(k) + z(i)", A=a, x=cp.asarray(x), z=cp.asarray(z)), Ad @ x + z)
    check(ust.compute("y(i) = A(i,k) * x(k) + 3", A=a, x=cp.asarray(x)), Ad @ x + 3)
    check(
        ust.compute(
            "y(i) = A(i,k) * x(k) - A(i,k) * x(k) * 2 + z(i) * w",
            A=a,
            x=cp.asarray(x),
            z=cp.asarray(z),
            w=2.0,
        ),
        -(Ad @ x) + 2 * z,
    )
    check(
        ust.compute(
            "C(i,j) = A(i,k) * X(k,j) + z(i) + y(j)", A=a, X=cp.asarray(X), z=cp.asarray(z), y=cp.arange(3.0)
        ),
        Ad @ X + z[:, None] + np.arange(3.0)[None, :],
    )
    check(ust.compute("y(i) = A(i,k) * x(k) + B(i,k)", A=a, x=cp.asarray(x), B=a), Ad @ x + Ad.sum(axis=1))
    m = ust.einsum("ik,k->i", a, cp.asarray(x), semiring="min_plus")
    want = np.where(Ad != 0, Ad + x[None, :], np.inf).min(axis=1)
    check(m, want)


@pytest.mark.parametrize("mode", [None, "workspace", "expand"])
@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO"])
def test_larger_exact(mode: str | None, fa: str, cp: Any) -> None:
    """Operands of thousands of entries (many blocks, atomics, expand-sort-compress) with integer
    values: a lost or doubled update shows exactly; sparse results hold each coordinate once."""
    A = sp.random_array(
        (300, 200),
        density=0.1,
        random_state=0,
        format="csr",
        dtype=np.int64,
        data_sampler=lambda size: np.arange(size) % 7 - 3,
    )
    B = sp.random_array(
        (200, 250),
        density=0.1,
        random_state=1,
        format="csr",
        dtype=np.int64,
        data_sampler=lambda size: np.arange(size) % 5 - 2,
    )
    x = np.arange(200, dtype=np.int64) % 11 - 5
    X = (np.arange(1000, dtype=np.int64).reshape(200, 5) % 3) - 1
    a, b = dev(to_fmt(A, fa)), dev(to_fmt(B, "CSR"))
    Ad, Bd = A.toarray(), B.toarray()
    opts = {"mode": mode} if mode else None
    given = {"A": a, "B": b, "x": cp.asarray(x), "X": cp.asarray(X), "w": cp.ones(300, dtype=np.int64)}
    for expr, ref in PARALLEL_CASES:
        ops = {k: v for k, v in given.items() if f"{k}(" in expr}
        try:
            r = ust.compute(expr, options=opts, **ops)
        except ust.InvalidValueError:  # a mode that does not fit the result kind may be refused
            continue
        check(r, ref(Ad, Bd, x, X))
        if isinstance(r, ust.Tensor):
            assert_no_duplicates(r.to("cpu"))


# ----------------------------------------------------------------------------- semirings


def test_min_plus_shortest_paths() -> None:
    G = weighted_graph(80)
    n = G.shape[0]
    Gc = G.tocoo()
    idx = np.arange(n)
    D0 = sp.csr_array(
        (
            np.concatenate([Gc.data, np.zeros(n)]),
            (np.concatenate([Gc.row, idx]), np.concatenate([Gc.col, idx])),
        ),
        shape=(n, n),
    )
    d = dev(ust.asarray(D0))
    for _ in range(int(np.ceil(np.log2(n)))):
        d = ust.compute("D(i,j) = A(i,k) * A(k,j)", A=d, semiring="min_plus")
        assert d.fill_value == np.inf
    check(d, shortest_path(G, method="D", directed=True))


def test_diagonal_under_semirings(cp: Any) -> None:
    A = sp.csr_array(np.array([[2.0, 1, 0], [0, 0, 3], [0, 0, -1]]))  # A(1,1) not stored
    x = np.array([5.0, 7.0, 11.0])
    for fa in ["CSR", "COO"]:
        a = dev(to_fmt(A, fa))
        check(ust.compute("C(k) = A(k, k)", A=a, semiring="min_plus"), np.array([2.0, np.inf, -1.0]))
        check(
            ust.compute("C(k) = A(k, k) * x(k)", A=a, x=cp.asarray(x), semiring="min_plus"),
            np.array([7.0, np.inf, 10.0]),
        )
        check(ust.compute("C = A(k, k)", A=a, semiring="max_plus"), np.float64(2.0))


def test_or_and_max_times_plus_pair_custom(cp: Any) -> None:
    G = weighted_graph(81, n=12, density=0.15)
    Ab = sp.csr_array((G != 0).astype(np.int64))
    a = dev(ust.asarray(Ab))
    R = dev(ust.asarray(sp.csr_array(Ab + sp.eye_array(12, dtype=np.int64))))
    for _ in range(4):
        R = ust.einsum("ik,kj->ij", R, R, semiring="or_and")
    reach = np.isfinite(shortest_path(G, method="D", unweighted=True))
    np.testing.assert_array_equal(host(R).astype(bool), reach)
    f = np.zeros(12, np.int64)
    f[0] = 1
    nxt = ust.einsum("ji,j->i", a, cp.asarray(f), semiring="or_and")
    np.testing.assert_array_equal(host(nxt), (Ab.toarray().T @ f > 0).astype(np.int64))
    # max_times
    rng = np.random.default_rng(82)
    P = sp.csr_array(np.where(rng.random((8, 8)) < 0.4, rng.random((8, 8)), 0.0))
    Pd, pm = P.toarray(), P.toarray() != 0
    want = np.where(pm[:, :, None] & pm[None, :, :], Pd[:, :, None] * Pd[None, :, :], -np.inf).max(axis=1)
    p = dev(ust.asarray(P))
    check(ust.einsum("ik,kj->ij", p, p, semiring="max_times"), want)
    # plus_pair counts stored products
    S = (Pd != 0).astype(np.int64)
    check(
        np.asarray(host(ust.einsum("ik,kj->ij", p, p, semiring="plus_pair"))).astype(np.int64),
        S @ S,
        where="cpu",
    )
    # a custom semiring
    sr = ust.Semiring(add="min(a, b)", multiply="a + b", identity=float("inf"))
    g = dev(ust.asarray(G))
    Gw = np.where(G.toarray() != 0, G.toarray(), np.inf)
    check(ust.einsum("ik,kj->ij", g, g, semiring=sr), (Gw[:, :, None] + Gw[None, :, :]).min(axis=1))
    y = ust.einsum("ij,j->i", g, cp.zeros(12), semiring="min_plus")  # dense result: +inf where nothing meets
    check(y, np.where(np.isfinite(Gw).any(axis=1), np.where(np.isfinite(Gw), Gw, np.inf).min(axis=1), np.inf))


# ----------------------------------------------------------------------------- the stateful twin


def test_compute_stateful(cp: Any, tmp_path: Any) -> None:
    A, B = mat(93, (10, 8)), mat(94, (10, 8))
    x1, x2 = rand_dense(97, (8,)), rand_dense(98, (8,))
    c = ust.Compute("y(i) = alpha * A(i,j) * x(j)", A=dev(to_fmt(A, "CSR")), x=cp.asarray(x1), alpha=2.0)
    c.plan()
    check(c.execute(), 2 * A.toarray() @ x1)
    check(c.execute(), 2 * A.toarray() @ x1)
    c.reset_operands(x=cp.asarray(x2), A=dev(to_fmt(B, "CSR")))
    check(c.execute(), 2 * B.toarray() @ x2)
    with pytest.raises(ust.UstError):
        c.reset_operands(x=np.ones(8))  # a host array for a GPU plan
    c.autotune(repeats=1)
    check(c.execute(), 2 * B.toarray() @ x2)
    path = tmp_path / "plan.json"
    c.save_plan(path)
    c2 = ust.Compute.load_plan(
        path, "y(i) = alpha * A(i,j) * x(j)", A=dev(to_fmt(B, "CSR")), x=cp.asarray(x2), alpha=2.0
    )
    check(c2.execute(), 2 * B.toarray() @ x2)
    D = mat(95, (8, 6))
    c3 = ust.Compute("C(i,j) = A(i,k) * D(k,j)", A=dev(to_fmt(A, "CSR")), D=dev(to_fmt(D, "CSR")))
    c3.plan()
    check(c3.execute(), A.toarray() @ D.toarray())
    c3.reset_operands(A=dev(to_fmt(B, "CSR")))
    check(c3.execute(), B.toarray() @ D.toarray())


# ----------------------------------------------------------------------------- errors


def test_errors_on_gpu(cp: Any) -> None:
    A = dev(ust.asarray(mat(1, (6, 7))))
    Z = dev(ust.asarray(mat(2, (6, 7), np.complex128)))
    snap = snapshot(A)
    with pytest.raises(ShapeError):
        ust.einsum("ij,jk->ik", A, A)
    with pytest.raises(InvalidValueError):
        ust.einsum("ij,jk->ik", A)
    with pytest.raises(InvalidValueError):
        ust.compute("C(i,j) = A(i,j) + B(i,j)", A=A)
    with pytest.raises(ShapeError):
        ust.compute("C(i,j) = A(i,j)", A=A, out_format="CSF")
    with pytest.raises(UnsupportedError):
        ust.einsum("ij,ij->ij", Z, Z, semiring="min_plus")
    with pytest.raises(UnsupportedError):
        ust.compute("C(i,j) = A(i,j) - A(i,j)", A=A, semiring="max_plus")
    with pytest.raises(ust.UstSyntaxError):
        ust.compute("C(i,j) = A(i,j) +", A=A)
    with pytest.raises(DeviceError):  # operands in two memory spaces without execution=
        ust.einsum("ij,j->i", A, np.ones(7))
    assert unchanged(A, snap)


# ----------------------------------------------------------------------------- random expressions


def _gpu_problem(p: Problem) -> dict[str, Any]:
    return {n: dev(v) for n, v in p.kwargs().items()}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems())
def test_random_expressions_gpu(p: Problem) -> None:
    import cupy

    got = ust.compute(p.text, out_format=p.out_format, **_gpu_problem(p))
    cupy.cuda.runtime.deviceSynchronize()  # a kernel fault is this example's, not the next one's
    try:
        want = reference(p, "plus_times")
        if p.out:
            check(got, want)
        else:
            check_host(host(got), want)
    except AssertionError as exc:
        raise AssertionError(p.describe()) from exc


# ------------------------------------------------------------------- rows split across threads


@pytest.mark.parametrize("parts", [2, 3, 64])
@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
def test_split_rows_spmv_spmm(fa: str, parts: int, cp: Any) -> None:
    """``options={"split": S}`` cuts each row's reduction into S parts combined atomically (the
    variant few long rows take on their own); results equal the unsplit ones in every format."""
    A = mat(61, (10, 40), density=0.5)  # even: BSR takes 2x2 blocks
    x, B = rand_dense(62, (40,)), rand_dense(63, (40, 5))
    a = dev(to_fmt(A, fa))
    opts = {"split": parts}
    check(ust.compute("y(i) = A(i,j) * x(j)", A=a, x=cp.asarray(x), options=opts), A @ x)
    check(ust.compute("C(i,k) = A(i,j) * B(j,k)", A=a, B=cp.asarray(B), options=opts), A @ B)


@pytest.mark.parametrize("f3", ["COO3", "CSF"])
def test_split_rows_mttkrp_semirings_and_dtypes(f3: str, cp: Any) -> None:
    X = rand_sparse_nd(64, (4, 9, 8), density=0.5)
    B, C = rand_dense(65, (9, 6)), rand_dense(66, (8, 6))
    x = dev(ust.asarray(X, format=f3))
    got = ust.einsum("ijk,jr,kr->ir", x, cp.asarray(B), cp.asarray(C), options={"split": 5})
    check(got, np.einsum("ijk,jr,kr->ir", X, B, C))
    G = weighted_graph(67, n=12, density=0.6)
    d = rand_dense(68, (12,))
    Gd = G.toarray()
    want = np.where(Gd != 0, Gd + d[None, :], np.inf).min(axis=1)  # stored entries only
    got = ust.compute(
        "y(i) = G(i,j) * d(j)", G=dev(G), d=cp.asarray(d), semiring="min_plus", options={"split": 4}
    )
    np.testing.assert_array_equal(host(got), want)
    for dtype in (np.int64, np.int32, np.complex128, np.float32):
        A = mat(69, (7, 30), dtype=dtype, density=0.6)
        v = rand_dense(70, (30,), dtype)
        got = ust.compute("y(i) = A(i,j) * v(j)", A=dev(A), v=cp.asarray(v), options={"split": 3})
        check(got, A @ v)


def test_few_long_rows_split_on_their_own(cp: Any) -> None:
    """64 rows of 4096 entries: the launcher splits the rows (and the result is the same)."""
    from ust.backends.cuda.compute_cuda import split_parts

    A = sp.random_array((64, 4096), density=0.9, random_state=71, format="csr")
    x = rand_dense(72, (4096,))
    assert split_parts(64, A.nnz, 64) > 1
    check(ust.compute("y(i) = A(i,j) * x(j)", A=dev(A), x=cp.asarray(x)), A @ x)
