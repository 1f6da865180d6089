"""``ust.compute`` / ``ust.einsum`` / ``ust.Compute`` (issue 17) on the CPU, against ``numpy.einsum``.

Every result is compared with ``numpy.einsum`` on dense copies of the operands: exact equality
for integer values, rtol 1e-12 for fp64 (and a loose tolerance for fp32).  Sparse operands are
built with ``ust.asarray(scipy_matrix).convert(fmt)`` in the standard formats and in user
formats; semirings are compared with NumPy / scipy.sparse.csgraph references.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

import ust
from tests.algebra_cases import matrix, snapshot, unchanged

pytestmark = pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")

#: The formats of the issue's matrix: standard ones and user formats (one of them structurally
#: no standard format's twin under its own name, one that is DCSR by structure).
USER_CSC = "(i, j) -> (j : dense, i : compressed)"
USER_DCSR = "(i, j) -> (i : compressed, j : compressed)"
FORMATS = ["CSR", "CSC", "COO", "DCSR", "BSR", "DIA", USER_CSC, USER_DCSR]
FMT_IDS = ["CSR", "CSC", "COO", "DCSR", "BSR", "DIA", "userCSC", "userDCSR"]


def to_fmt(m: Any, name: str, index_dtype: Any = None) -> ust.Tensor:
    """``ust.asarray(m).convert(name)`` (BSR with 2x2 blocks)."""
    t = ust.asarray(m, index_dtype=index_dtype) if index_dtype is not None else ust.asarray(m)
    if name == "BSR":
        return t.convert("bsr", blocksize=(2, 2))
    return t.convert(name)


def dense(x: Any) -> np.ndarray:
    """A dense NumPy copy of a result or operand (a Tensor densifies with its fill value)."""
    if isinstance(x, ust.Tensor):
        return np.asarray(x.todense())
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


def check(got: Any, want: np.ndarray) -> None:
    """``got`` equals ``want``: exactly for integers and bools, rtol 1e-12 for fp64 / complex128."""
    g = dense(got)
    want = np.asarray(want)
    assert g.shape == want.shape, (g.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(g, want)
        return
    finite = np.abs(want[np.isfinite(want)])
    scale = float(np.max(finite)) if finite.size else 0.0
    if want.dtype in (np.float32, np.complex64) or g.dtype in (np.float32, np.complex64):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5 * (scale + 1))
    else:
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-13 * scale)


def mat(seed: int, shape: tuple[int, int], dtype: Any = np.float64, density: float = 0.3) -> Any:
    """A scipy CSR array with an empty row, an empty column and an explicit zero (shape >= 6x6)."""
    return matrix(seed, dtype, shape, density)


def rand_dense(seed: int, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, size=shape).astype(dtype)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def rand_sparse_nd(
    seed: int, shape: tuple[int, ...], density: float = 0.3, dtype: Any = np.float64
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rand_dense(seed + 1, shape, dtype), 0).astype(dtype)


# ----------------------------------------------------------------------------- SpMV, SpMM, SpGEMM


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("fb", FORMATS, ids=FMT_IDS)
def test_spgemm_every_pair(fa: str, fb: str) -> None:
    A, B = mat(1, (10, 8)), mat(2, (8, 6))
    a, b = to_fmt(A, fa), to_fmt(B, fb)
    snaps = snapshot(a), snapshot(b)
    C = ust.einsum("ik,kj->ij", a, b)
    assert isinstance(C, ust.Tensor)
    assert C.format == ust.format("CSR")  # a product of sparse operands: CSR by default
    check(C, A.toarray() @ B.toarray())
    C2 = ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b)
    check(C2, A.toarray() @ B.toarray())
    assert unchanged(a, snaps[0]) and unchanged(b, snaps[1])


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
def test_spmv(fa: str) -> None:
    A = mat(3, (10, 8))
    a = to_fmt(A, fa)
    x = rand_dense(4, (8,))
    x0 = x.copy()
    y = ust.einsum("ij,j->i", a, x)
    assert isinstance(y, np.ndarray) and y.shape == (10,)
    check(y, A.toarray() @ x)
    check(ust.compute("y(i) = A(i,j) * x(j)", A=a, x=x), A.toarray() @ x)
    assert np.array_equal(x, x0)


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("fx", ["SparseVector", "(i) -> (i : dense)"], ids=["sparsevec", "densevec"])
def test_spmv_vector_in_a_format(fa: str, fx: str) -> None:
    A = mat(5, (10, 8))
    xv = np.zeros(8)
    xv[[0, 3, 6]] = [1.5, -2.0, 4.0]
    x = ust.asarray(xv, format=fx)
    y = ust.einsum("ij,j->i", to_fmt(A, fa), x)
    check(y, A.toarray() @ xv)


@pytest.mark.parametrize("fa", FORMATS, ids=FMT_IDS)
def test_spmm_sparse_times_dense(fa: str) -> None:
    A = mat(6, (10, 8))
    X = rand_dense(7, (8, 3))
    Y = ust.einsum("ij,jk->ik", to_fmt(A, fa), X)
    assert isinstance(Y, np.ndarray)
    check(Y, A.toarray() @ X)


@pytest.mark.parametrize("fb", FORMATS, ids=FMT_IDS)
def test_spmm_dense_times_sparse(fb: str) -> None:
    B = mat(8, (8, 6))
    X = rand_dense(9, (4, 8))
    Y = ust.compute("Y(i,j) = X(i,k) * B(k,j)", X=X, B=to_fmt(B, fb))
    assert isinstance(Y, np.ndarray)
    check(Y, X @ B.toarray())


@pytest.mark.parametrize(
    "make",
    [
        lambda m: sp.csr_array(m),
        lambda m: sp.csc_array(m),
        lambda m: sp.coo_array(m),
        lambda m: sp.bsr_array(m, blocksize=(2, 2)),
        lambda m: sp.dia_array(m),
        lambda m: sp.csr_matrix(m),
        lambda m: sp.coo_matrix(m),
    ],
    ids=["csr_array", "csc_array", "coo_array", "bsr_array", "dia_array", "csr_matrix", "coo_matrix"],
)
def test_scipy_operands_directly(make: Any) -> None:
    A, B = mat(10, (10, 8)), mat(11, (8, 6))
    a, b = make(A), make(B)
    a0 = a.copy()
    x = rand_dense(12, (8,))
    check(ust.einsum("ij,j->i", a, x), A.toarray() @ x)
    C = ust.einsum("ij,jk->ik", a, b)
    assert isinstance(C, ust.Tensor)
    check(C, A.toarray() @ B.toarray())
    check(ust.compute("C(i,j) = A(i,j) + B(j,i)", A=a, B=make(sp.csr_array(A.T))), 2 * A.toarray())
    assert np.array_equal(a.toarray(), a0.toarray()) and np.array_equal(a.data, a0.data)


def test_dense_numpy_operands_only() -> None:
    X, Y, Z = rand_dense(1, (4, 5)), rand_dense(2, (5, 3)), rand_dense(3, (4, 3))
    R = ust.compute("R(i,j) = X(i,k) * Y(k,j) + Z(i,j)", X=X, Y=Y, Z=Z)
    assert isinstance(R, np.ndarray)
    check(R, X @ Y + Z)
    check(ust.einsum("ij,jk->ik", X, Y), X @ Y)
    check(ust.einsum("ij,ij->", X, X), np.einsum("ij,ij->", X, X))


# ----------------------------------------------------------------------------- SDDMM, elementwise


@pytest.mark.parametrize("fs", FORMATS, ids=FMT_IDS)
def test_sddmm(fs: str) -> None:
    S = mat(13, (10, 8))
    A, B = rand_dense(14, (10, 4)), rand_dense(15, (8, 4))
    s = to_fmt(S, fs)
    C = ust.compute("C(i,j) = S(i,j) * A(i,k) * B(j,k)", S=s, A=A, B=B)
    assert isinstance(C, ust.Tensor)  # S has exactly the output's indices: sparse
    check(C, np.einsum("ij,ik,jk->ij", S.toarray(), A, B))
    assert C.nse <= s.nse or fs in ("BSR", "DIA")


def test_sddmm_result_takes_the_pattern_format() -> None:
    S = mat(16, (10, 8))
    s = to_fmt(S, "CSC")
    C = ust.compute(
        "C(i,j) = S(i,j) * A(i,k) * B(j,k)", S=s, A=rand_dense(1, (10, 3)), B=rand_dense(2, (8, 3))
    )
    assert C.format == ust.format("CSC")
    # the pattern operand read transposed: its format permuted to the output's index order
    C = ust.compute(
        "C(i,j) = S(j,i) * A(i,k) * B(j,k)",
        S=to_fmt(S.T.tocsr(), "CSR"),
        A=rand_dense(1, (10, 3)),
        B=rand_dense(2, (8, 3)),
    )
    assert C.format == ust.format("CSC")
    check(C, np.einsum("ij,ik,jk->ij", S.toarray(), rand_dense(1, (10, 3)), rand_dense(2, (8, 3))))


PAIRS = [("CSR", "COO"), ("CSC", "DIA"), ("BSR", USER_CSC), ("DCSR", "CSR"), (USER_DCSR, "BSR")]


@pytest.mark.parametrize("fa,fb", PAIRS)
@pytest.mark.parametrize(
    "expr,ref",
    [
        ("C(i,j) = A(i,j) + B(i,j)", lambda a, b: a + b),
        ("C(i,j) = A(i,j) * B(i,j)", lambda a, b: a * b),
        ("C(i,j) = A(i,j) - B(i,j)", lambda a, b: a - b),
        ("C(i,j) = A(i,j) * B(i,j) + A(i,j)", lambda a, b: a * b + a),
    ],
    ids=["add", "mul", "sub", "fma"],
)
def test_elementwise_two(fa: str, fb: str, expr: str, ref: Any) -> None:
    A, B = mat(17, (10, 8)), mat(18, (10, 8))
    C = ust.compute(expr, A=to_fmt(A, fa), B=to_fmt(B, fb))
    assert isinstance(C, ust.Tensor)
    check(C, ref(A.toarray(), B.toarray()))


@pytest.mark.parametrize(
    "fa,fb,fd", [("CSR", "CSC", "COO"), ("DIA", "BSR", USER_CSC), ("DCSR", USER_DCSR, "CSR")]
)
def test_elementwise_three(fa: str, fb: str, fd: str) -> None:
    A, B, D = mat(19, (10, 8)), mat(20, (10, 8)), mat(21, (10, 8))
    a, b, d = to_fmt(A, fa), to_fmt(B, fb), to_fmt(D, fd)
    Ad, Bd, Dd = A.toarray(), B.toarray(), D.toarray()
    check(ust.compute("C(i,j) = A(i,j) + B(i,j) + D(i,j)", A=a, B=b, D=d), Ad + Bd + Dd)
    check(ust.compute("C(i,j) = A(i,j) * B(i,j) * D(i,j)", A=a, B=b, D=d), Ad * Bd * Dd)
    check(ust.compute("C(i,j) = A(i,j) * B(i,j) + D(i,j)", A=a, B=b, D=d), Ad * Bd + Dd)
    check(ust.einsum("ij,ij,ij->ij", a, b, d), Ad * Bd * Dd)


def test_sparse_plus_dense_is_dense() -> None:
    A = mat(22, (10, 8))
    D = rand_dense(23, (10, 8))
    R = ust.compute("C(i,j) = A(i,j) + D(i,j)", A=to_fmt(A, "CSR"), D=D)
    assert isinstance(R, np.ndarray)
    check(R, A.toarray() + D)
    # sparse times dense elementwise: bounded by A's pattern, sparse
    R = ust.compute("C(i,j) = A(i,j) * D(i,j)", A=to_fmt(A, "CSR"), D=D)
    assert isinstance(R, ust.Tensor)
    check(R, A.toarray() * D)


def test_out_format_dense_and_named() -> None:
    A, B = mat(24, (10, 8)), mat(25, (8, 6))
    a, b = to_fmt(A, "CSR"), to_fmt(B, "CSR")
    R = ust.einsum("ij,jk->ik", a, b, out_format="dense")
    assert isinstance(R, np.ndarray)
    check(R, A.toarray() @ B.toarray())
    for f in ["CSC", "COO", "DCSR", USER_CSC]:
        R = ust.einsum("ij,jk->ik", a, b, out_format=f)
        assert isinstance(R, ust.Tensor) and R.format == ust.format(f)
        check(R, A.toarray() @ B.toarray())
    # a sparse result asked of a dense expression
    R = ust.einsum("ij,j->i", a, rand_dense(1, (8,)), out_format="SparseVector")
    assert isinstance(R, ust.Tensor)
    check(R, A.toarray() @ rand_dense(1, (8,)))


def test_sparse_vector_result_format() -> None:
    x = ust.asarray(np.array([0.0, 1.0, 0.0, 2.0]), format="SparseVector")
    y = ust.asarray(np.array([3.0, 0.0, 0.0, 4.0]), format="SparseVector")
    r = ust.compute("z(i) = x(i) + y(i)", x=x, y=y)
    assert isinstance(r, ust.Tensor) and r.ndim == 1
    assert r.format == ust.format("(i) -> (i : compressed)")
    check(r, np.array([3.0, 1.0, 0.0, 6.0]))
    r = ust.compute("z(i) = x(i) * y(i)", x=x, y=y)
    check(r, np.array([0.0, 0.0, 0.0, 8.0]))


# ----------------------------------------------------------------------------- einsum shapes


@pytest.mark.parametrize(
    "fa", ["CSR", "CSC", "COO", "DIA", USER_CSC], ids=["CSR", "CSC", "COO", "DIA", "userCSC"]
)
@pytest.mark.parametrize(
    "subs",
    [
        "ji,jk->ik",
        "ij,kj->ik",
        "ji,kj->ki",
        "ij->ji",
        "ij,ij->",
        "ij->i",
        "ij->j",
        "ij->",
        "ij,jk",
        "ij,ij->ij",
    ],
)
def test_einsum_transposes_and_reductions(fa: str, subs: str) -> None:
    A = mat(26, (8, 8))
    B = mat(27, (8, 8))
    ops = [A, B][: subs.split("->")[0].count(",") + 1]
    got = ust.einsum(subs, *(to_fmt(m, fa) for m in ops))
    want = np.einsum(subs, *(m.toarray() for m in ops))
    if "->" in subs and subs.endswith("->"):
        assert isinstance(got, np.ndarray) and got.shape == ()
    check(got, want)


def test_einsum_mixed_sparse_dense_transposed() -> None:
    A = mat(28, (10, 8))
    X = rand_dense(29, (10, 3))
    check(ust.einsum("ji,jk->ik", to_fmt(A, "CSR"), X), A.toarray().T @ X)
    check(ust.einsum("ji,jk->ik", X, to_fmt(A, "CSC")), X.T @ A.toarray())
    check(ust.einsum("ij,kj->ik", X.T.copy(), to_fmt(sp.csr_array(A.T), "COO")), X.T @ A.toarray())


@pytest.mark.parametrize("fa", ["CSR", "COO", "CSC", "DIA"])
def test_diagonals(fa: str) -> None:
    A = mat(30, (8, 8))
    a = to_fmt(A, fa)
    check(ust.einsum("ii->i", a), np.diag(A.toarray()))
    check(ust.einsum("ii->", a), np.trace(A.toarray()))
    x = rand_dense(31, (8,))
    check(ust.einsum("ii,i->i", a, x), np.diag(A.toarray()) * x)
    D = rand_dense(32, (5, 5))
    check(ust.einsum("ii->i", D), np.diag(D))


@pytest.mark.parametrize("fa", ["CSR", "COO", "CSC"])
def test_diagonal_under_semirings(fa: str) -> None:
    """A diagonal read of a sparse operand keeps only its stored diagonal slots as entries."""
    A = sp.csr_array(np.array([[2.0, 1, 0], [0, 0, 3], [0, 0, -1]]))  # A(1,1) not stored
    a = to_fmt(A, fa)
    x = np.array([5.0, 7.0, 11.0])
    inf = np.inf
    check(ust.compute("C(k) = A(k, k)", A=a, semiring="min_plus"), np.array([2.0, inf, -1.0]))
    check(ust.einsum("ii->i", a, semiring="min_plus"), np.array([2.0, inf, -1.0]))
    check(ust.compute("C(k) = A(k, k) * x(k)", A=a, x=x, semiring="min_plus"), np.array([7.0, inf, 10.0]))
    check(ust.compute("C(k) = A(k, k) + x(k)", A=a, x=x, semiring="min_plus"), np.array([2.0, 7.0, -1.0]))
    check(ust.compute("C = A(k, k)", A=a, semiring="min_plus"), np.float64(-1.0))
    check(ust.compute("C = A(k, k)", A=a, semiring="max_plus"), np.float64(2.0))
    check(ust.einsum("ii->", a, semiring="plus_pair"), np.float64(2.0))  # two stored diagonal slots


def test_einsum_spelling() -> None:
    """Upper-case letters, spaces and three or more operands, as NumPy takes them."""
    A = mat(35, (8, 8))
    a, Ad = to_fmt(A, "CSR"), A.toarray()
    check(ust.einsum("IJ,JK->IK", a, a), Ad @ Ad)
    check(ust.einsum(" ij , jk -> ik ", a, to_fmt(A, "COO")), Ad @ Ad)
    check(ust.einsum("ij,jk,kl->il", a, a, a), Ad @ Ad @ Ad)
    check(ust.einsum("aB,Bc->ac", a, Ad), Ad @ Ad)
    B3 = rand_dense(36, (2, 8, 8))
    check(ust.einsum("bij,jk->bik", B3, a), np.einsum("bij,jk->bik", B3, Ad))


def test_implicit_mode() -> None:
    A, B = mat(33, (10, 8)), mat(34, (8, 6))
    check(ust.einsum("ij,jk", to_fmt(A, "CSR"), to_fmt(B, "CSR")), A.toarray() @ B.toarray())
    check(ust.einsum("ij", to_fmt(A, "COO")), A.toarray())
    check(ust.einsum("ji", to_fmt(A, "COO")), np.einsum("ji", A.toarray()))
    check(
        ust.einsum("ij,ij", to_fmt(A, "CSR"), to_fmt(A, "CSC")), np.einsum("ij,ij", A.toarray(), A.toarray())
    )


# ----------------------------------------------------------------------------- 3-D and 4-D


FORMATS_3D = ["COO3", "CSF", "(i, j, k) -> (k : dense, i : compressed, j : compressed)"]
IDS_3D = ["COO3", "CSF", "userKIJ"]


@pytest.mark.parametrize("f3", FORMATS_3D, ids=IDS_3D)
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
    ids=["ttv0", "ttv1", "ttv2", "ttm0", "ttm1", "ttm2"],
)
def test_ttv_ttm_every_mode(f3: str, subs: str, other: tuple[int, ...]) -> None:
    X = rand_sparse_nd(40, (6, 5, 4))
    V = rand_dense(41, other)
    x = ust.asarray(X, format=f3)
    check(ust.einsum(subs, x, V), np.einsum(subs, X, V))


@pytest.mark.parametrize("f3", FORMATS_3D, ids=IDS_3D)
def test_mttkrp(f3: str) -> None:
    X = rand_sparse_nd(42, (6, 5, 4))
    B, C = rand_dense(43, (5, 3)), rand_dense(44, (4, 3))
    x = ust.asarray(X, format=f3)
    want = np.einsum("ijk,jr,kr->ir", X, B, C)
    check(ust.einsum("ijk,jr,kr->ir", x, B, C), want)
    check(ust.compute("M(i,r) = X(i,j,k) * B(j,r) * C(k,r)", X=x, B=B, C=C), want)


def test_3d_sparse_results() -> None:
    X, Y = rand_sparse_nd(45, (4, 5, 3)), rand_sparse_nd(46, (4, 5, 3))
    x, y = ust.asarray(X, format="COO3"), ust.asarray(Y, format="CSF")
    R = ust.compute("R(i,j,k) = X(i,j,k) + Y(i,j,k)", X=x, Y=y)
    assert isinstance(R, ust.Tensor) and R.ndim == 3
    check(R, X + Y)
    R = ust.einsum("ijk,ijk->kij", x, y)
    assert isinstance(R, ust.Tensor)
    check(R, np.einsum("ijk,ijk->kij", X, Y))


def test_4d_contraction() -> None:
    T = rand_sparse_nd(47, (3, 4, 5, 2))
    U = rand_sparse_nd(48, (5, 2, 3))
    t = ust.asarray(
        T,
        format="(a, b, c, d) -> (a : compressed(nonunique), b : singleton(nonunique), c : singleton(nonunique), d : singleton)",
    )
    u = ust.asarray(U, format="CSF")
    check(ust.einsum("abcd,cde->abe", t, u), np.einsum("abcd,cde->abe", T, U))
    W = rand_dense(49, (4, 2, 6))
    check(ust.einsum("abcd,bde->ace", t, W), np.einsum("abcd,bde->ace", T, W))
    check(ust.einsum("abcd,abcd->", t, t), np.einsum("abcd,abcd->", T, T))


# ----------------------------------------------------------------------------- awkward operands


def test_explicit_zeros_are_entries() -> None:
    # A stores an explicit zero at (0, 1); B stores one at (1, 0)
    A = sp.csr_array((np.array([0.0, 2.0]), np.array([1, 1]), np.array([0, 1, 2, 2])), shape=(3, 2))
    B = sp.csr_array((np.array([0.0, 5.0]), np.array([0, 1]), np.array([0, 0, 2])), shape=(2, 2))
    a, b = ust.asarray(A), ust.asarray(B)
    assert a.nnz == 2 and b.nnz == 2
    check(ust.einsum("ij,jk->ik", a, b), A.toarray() @ B.toarray())
    # plus_pair counts the stored products: the explicit zeros count
    P = ust.einsum("ij,jk->ik", a, b, semiring="plus_pair")
    struct_a = np.zeros((3, 2), int)
    struct_a[[0, 1], [1, 1]] = 1
    struct_b = np.zeros((2, 2), int)
    struct_b[[1, 1], [0, 1]] = 1
    check(P, struct_a @ struct_b)
    # min_plus: a stored 0 is an edge of weight 0, an absent one is +inf
    M = ust.einsum("ij,jk->ik", a, b, semiring="min_plus")
    want = np.full((3, 2), np.inf)
    want[0, 0] = 0.0 + 0.0
    want[0, 1] = 0.0 + 5.0
    want[1, 0] = 2.0 + 0.0
    want[1, 1] = 2.0 + 5.0
    check(M, want)


@pytest.mark.parametrize("fa", ["BSR", "DIA"])
def test_padding_slots_are_entries(fa: str) -> None:
    """Stored padding (BSR's blocks, DIA's in-bounds diagonal slots) counts as nnz, as in SciPy:
    every stored slot is an entry, so under min_plus a padded slot is an edge of weight 0."""
    A = sp.csr_array(np.array([[1.0, 0, 0, 0], [0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 0]]))
    B = sp.csr_array(np.array([[0.0, 0, 0, 0], [3, 0, 0, 0], [0, 0, 0, 0], [0, 0, 5, 0]]))
    a = to_fmt(A, fa)
    from ust.convert.unpack import unpack

    ent = unpack(a, keep_zeros=True)
    stored = np.zeros((4, 4), bool)
    stored[tuple(np.asarray(d) for d in ent.dims())] = True
    assert stored.sum() == a.nnz > A.nnz  # padding is stored
    W = np.where(stored, A.toarray(), np.inf)
    Wb = np.where(B.toarray() != 0, B.toarray(), np.inf)
    want = (W[:, :, None] + Wb[None, :, :]).min(axis=1)
    check(ust.einsum("ij,jk->ik", a, ust.asarray(B), semiring="min_plus"), want)
    check(ust.einsum("ij->i", a, semiring="plus_pair"), stored.sum(axis=1).astype(np.float64))


@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO", "DCSR", "DIA", "BSR"])
def test_empty_operands(fa: str) -> None:
    A = sp.csr_array((10, 8))
    B = mat(50, (8, 6))
    a = to_fmt(A, fa)
    assert a.nnz == 0
    C = ust.einsum("ij,jk->ik", a, to_fmt(B, "CSR"))
    assert isinstance(C, ust.Tensor) and C.nnz == 0
    check(C, np.zeros((10, 6)))
    check(ust.einsum("ij,j->i", a, np.ones(8)), np.zeros(10))
    check(ust.einsum("ij,ij->", a, a), np.float64(0.0))
    check(
        ust.compute("C(i,j) = A(i,j) + B(i,j)", A=a, B=to_fmt(mat(51, (10, 8)), "CSR")),
        mat(51, (10, 8)).toarray(),
    )


@pytest.mark.parametrize("fmt", ["COO", "CSR", "CSC", "DCSR", "DIA"])
@pytest.mark.parametrize("n", [1, 3])
def test_empty_operand_in_a_union(fmt: str, n: int) -> None:
    """A dense term plus an empty sparse operand (a union with nothing stored on one side)."""
    S = to_fmt(sp.csr_array((n, n)), fmt)
    check(ust.compute("C(j) = x(k) + S(k, j)", x=np.ones(n), S=S), np.full(n, float(n)))
    check(ust.compute("C(k, j) = X(k, j) + S(k, j)", X=np.ones((n, n)), S=S), np.ones((n, n)))
    check(
        ust.compute("C(k, j) = T(k, j) + S(k, j)", T=to_fmt(sp.csr_array(np.eye(n)), "COO"), S=S), np.eye(n)
    )


def test_one_by_one() -> None:
    A = sp.csr_array(np.array([[3.0]]))
    B = sp.csr_array(np.array([[-2.0]]))
    for f in ["CSR", "CSC", "COO", "DIA", "DCSR"]:
        check(ust.einsum("ij,jk->ik", to_fmt(A, f), to_fmt(B, f)), np.array([[-6.0]]))
        check(ust.einsum("ij,j->i", to_fmt(A, f), np.array([4.0])), np.array([12.0]))
        check(ust.einsum("ij->", to_fmt(A, f)), np.float64(3.0))


@pytest.mark.parametrize(
    "shape_a,shape_b", [((0, 5), (5, 3)), ((4, 0), (0, 3)), ((4, 5), (5, 0)), ((0, 0), (0, 0))]
)
def test_zero_extents(shape_a: tuple[int, int], shape_b: tuple[int, int]) -> None:
    A, B = sp.csr_array(shape_a), sp.csr_array(shape_b)
    for f in ["CSR", "COO", "CSC"]:
        a, b = to_fmt(A, f), to_fmt(B, f)
        C = ust.einsum("ij,jk->ik", a, b)
        assert C.shape == (shape_a[0], shape_b[1])
        check(C, np.zeros((shape_a[0], shape_b[1])))
        y = ust.einsum("ij,j->i", a, np.ones(shape_a[1]))
        check(y, np.zeros(shape_a[0]))
        check(ust.einsum("ij->", a), np.float64(0.0))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("fa", ["CSR", "COO", "CSC", "DCSR"])
def test_index_dtypes(itype: Any, fa: str) -> None:
    A, B = mat(52, (10, 8)), mat(53, (8, 6))
    a = to_fmt(A, fa, index_dtype=itype)
    b = to_fmt(B, fa, index_dtype=itype)
    assert a.index_dtype == np.dtype(itype)
    C = ust.einsum("ij,jk->ik", a, b)
    check(C, A.toarray() @ B.toarray())
    assert C.index_dtype in (np.dtype(np.int32), np.dtype(np.int64))
    check(ust.einsum("ij,j->i", a, np.arange(8.0)), A.toarray() @ np.arange(8.0))


def test_mixed_index_dtypes() -> None:
    A, B = mat(54, (10, 8)), mat(55, (8, 6))
    a = ust.asarray(A, index_dtype=np.int32)
    b = ust.asarray(B, index_dtype=np.int64)
    C = ust.einsum("ij,jk->ik", a, b)
    check(C, A.toarray() @ B.toarray())
    C32 = ust.einsum("ij,jk->ik", a, ust.asarray(B, index_dtype=np.int32))
    assert C32.index_dtype == np.dtype(np.int32)
    assert C.index_dtype == np.dtype(np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64, np.int32])
@pytest.mark.parametrize("fa", ["CSR", "COO", "DIA"])
def test_value_dtypes(dtype: Any, fa: str) -> None:
    A, B = mat(56, (10, 8), dtype), mat(57, (8, 6), dtype)
    a, b = to_fmt(A, fa), to_fmt(B, fa)
    Ad, Bd = A.toarray(), B.toarray()
    C = ust.einsum("ij,jk->ik", a, b)
    assert C.dtype == np.dtype(dtype)
    check(C, np.einsum("ij,jk->ik", Ad, Bd))
    x = rand_dense(58, (8,), dtype)
    y = ust.einsum("ij,j->i", a, x)
    assert y.dtype == np.dtype(dtype)
    check(y, Ad @ x)
    check(ust.compute("C(i,j) = A(i,j) + 2 * A(i,j) * A(i,j)", A=a), Ad + 2 * Ad * Ad)


def test_mixed_value_dtypes_promote() -> None:
    A = mat(59, (10, 8), np.int64)
    x = rand_dense(60, (8,), np.float64)
    y = ust.einsum("ij,j->i", ust.asarray(A), x)
    assert y.dtype == np.float64
    check(y, A.toarray() @ x)
    Z = mat(61, (10, 8), np.complex128)
    R = ust.compute("C(i,j) = A(i,j) + Z(i,j)", A=ust.asarray(A), Z=ust.asarray(Z))
    assert R.dtype == np.complex128
    check(R, A.toarray() + Z.toarray())


# ----------------------------------------------------------------------------- scalars, literals, order


def test_scalars_and_literals() -> None:
    A, B = mat(62, (10, 8)), mat(63, (10, 8))
    x, z = rand_dense(64, (8,)), rand_dense(65, (8,))
    y = ust.compute(
        "y(i) = alpha * A(i,j) * x(j) + 2 * B(i,j) * z(j)",
        A=to_fmt(A, "CSR"),
        B=to_fmt(B, "COO"),
        x=x,
        z=z,
        alpha=1.5,
    )
    check(y, 1.5 * A.toarray() @ x + 2 * B.toarray() @ z)
    y = ust.compute("y(i) = alpha * A(i,j) * x(j)", A=to_fmt(A, "CSC"), x=x, alpha=np.float64(-0.25))
    check(y, -0.25 * A.toarray() @ x)
    C = ust.compute(
        "C(i,j) = 0.5 * A(i,j) * beta + B(i,j) * 3", A=to_fmt(A, "CSR"), B=to_fmt(B, "DCSR"), beta=4
    )
    check(C, 2.0 * A.toarray() + 3 * B.toarray())


def test_unary_minus_and_parentheses() -> None:
    A, B, D = mat(66, (10, 8)), mat(67, (10, 8)), mat(68, (8, 6))
    a, b, d = to_fmt(A, "CSR"), to_fmt(B, "CSC"), to_fmt(D, "COO")
    Ad, Bd, Dd = A.toarray(), B.toarray(), D.toarray()
    check(ust.compute("C(i,j) = -A(i,j)", A=a), -Ad)
    check(ust.compute("C(i,j) = -A(i,j) + B(i,j)", A=a, B=b), -Ad + Bd)
    check(ust.compute("C(i,j) = -(A(i,j) - B(i,j))", A=a, B=b), Bd - Ad)
    check(ust.compute("C(i,k) = (A(i,j) + B(i,j)) * D(j,k)", A=a, B=b, D=d), (Ad + Bd) @ Dd)
    check(
        ust.compute("C(i,k) = (A(i,j) - 2 * B(i,j)) * (D(j,k) + D(j,k))", A=a, B=b, D=d),
        (Ad - 2 * Bd) @ (2 * Dd),
    )
    check(ust.compute("C(i,j) = --A(i,j)", A=a), Ad)
    check(ust.compute("C(i,j) = (A(i,j))", A=a), Ad)
    x = rand_dense(69, (8,))
    check(ust.compute("y(i) = A(i,j) * (x(j) + 1)", A=a, x=x), Ad @ (x + 1))


@pytest.mark.parametrize("order", ["ijk", "ikj", "kij", "jik", "jki", "kji"])
def test_loop_order_option(order: str) -> None:
    A, B = mat(70, (10, 8)), mat(71, (8, 6))
    X = rand_dense(72, (8, 6))
    want = A.toarray() @ B.toarray()
    a, b = to_fmt(A, "CSR"), to_fmt(B, "CSR")
    opts = {"order": order}
    if order[0] == "k":  # a sparse result is assembled row by row: an output index must lead
        with pytest.raises(ust.UnsupportedError, match="first loop must be an output index"):
            ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, options=opts)
        check(ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, options=opts, out_format="dense"), want)
    else:
        check(ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, options=opts), want)
    check(ust.compute("C(i,j) = A(i,k) * X(k,j)", A=a, X=X, options=opts), A.toarray() @ X)
    text = ust.explain("compute", "C(i,j) = A(i,k) * X(k,j)", A=a, X=X, options=opts)
    assert " -> ".join(order) in text


@pytest.mark.parametrize("density", [0.02, 0.3, 0.9])
def test_broadcast_terms_long_rows(density: float) -> None:
    """Short and long rows (thread and work splits): a term outside the row's reduction is added once."""
    rng = np.random.default_rng(30)
    Ad = np.where(rng.random((40, 300)) < density, rng.standard_normal((40, 300)), 0.0)
    a = ust.asarray(sp.csr_array(Ad))
    x, z = rand_dense(31, (300,)), rand_dense(32, (40,))
    X = rand_dense(33, (300, 3))
    check(ust.compute("y(i) = A(i,k) * x(k) + z(i)", A=a, x=x, z=z), Ad @ x + z)
    check(ust.compute("y(i) = A(i,k) * x(k) + 3", A=a, x=x), Ad @ x + 3)
    check(
        ust.compute("C(i,j) = A(i,k) * X(k,j) + z(i) + y(j)", A=a, X=X, z=z, y=np.arange(3.0)),
        Ad @ X + z[:, None] + np.arange(3.0)[None, :],
    )
    check(ust.compute("y(i) = A(i,k) * x(k) + B(i,k)", A=a, x=x, B=a), Ad @ x + Ad.sum(axis=1))


def assert_no_duplicates(t: ust.Tensor) -> None:
    """A sparse result stores each coordinate once (whatever it claims)."""
    from ust.convert.unpack import unpack

    dims = [np.asarray(d) for d in unpack(t, keep_zeros=True).dims()]
    flat = np.ravel_multi_index(dims, t.shape) if dims and dims[0].size else np.zeros(0, np.int64)
    assert flat.size == np.unique(flat).size, "duplicate coordinates in a sparse result"


PARALLEL_CASES = [
    ("C(i,j) = A(i,k) * B(k,j)", lambda A, B, x, X: A @ B),
    ("y(i) = A(i,k) * x(k)", lambda A, B, x, X: A @ x),
    ("y(k) = A(i,k) * w(i)", lambda A, B, x, X: A.T @ np.ones(A.shape[0], A.dtype)),
    ("C(i,j) = A(i,k) * X(k,j)", lambda A, B, x, X: A @ X),
    ("C(j) = A(i,k) * B(k,j)", lambda A, B, x, X: (A @ B).sum(axis=0)),
    ("s = A(i,k) * B(k,j)", lambda A, B, x, X: (A @ B).sum()),
    (
        "C(i,k) = A(i,k) + A(i,k) * A(i,k) - 2 * A(i,k) * X(k,j) * X(k,j)",
        lambda A, B, x, X: A + A * A - 2 * A * (X * X).sum(1)[None, :],
    ),
]


@pytest.mark.parametrize("mode", [None, "workspace", "expand", "partials"])
@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO"])
def test_parallel_modes(monkeypatch: pytest.MonkeyPatch, mode: str | None, fa: str) -> None:
    """Operands big enough for several threads (forced to 4) and every workspace mode: integer
    values, so a lost or doubled update shows exactly."""
    import ust.runtime.cpu_threads as cpu_threads

    monkeypatch.setattr(cpu_threads, "THREADS", 4)
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
    a, b = to_fmt(A, fa), to_fmt(B, "CSR")
    Ad, Bd = A.toarray(), B.toarray()
    opts = {"mode": mode} if mode else None
    for expr, ref in PARALLEL_CASES:
        ops = {
            k: v
            for k, v in {"A": a, "B": b, "x": x, "X": X, "w": np.ones(300, np.int64)}.items()
            if f"{k}(" in expr
        }
        try:
            r = ust.compute(expr, options=opts, **ops)
        except ust.InvalidValueError:  # a mode that does not fit the result kind may be refused
            assert mode in ("partials", "expand")
            continue
        check(r, ref(Ad, Bd, x, X))
        if isinstance(r, ust.Tensor):
            assert_no_duplicates(r)
    try:
        m = ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, semiring="min_plus", options=opts)
    except ust.InvalidValueError:
        assert mode == "partials"
        return
    assert_no_duplicates(m)
    sa, sb = Ad != 0, Bd != 0
    sa[A.tocoo().row, A.tocoo().col] = True
    sb[B.tocoo().row, B.tocoo().col] = True
    big = np.iinfo(np.int64).max
    want = np.full((300, 250), big)
    for k in range(200):  # min over k of A(i,k) + B(k,j) where both are stored
        cand = np.where(sa[:, k, None] & sb[None, k, :], Ad[:, k, None] + Bd[None, k, :], big)
        want = np.minimum(want, cand)
    check(m, want)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_two_pass_assembly_when_the_bound_is_too_large(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, nthreads: int
) -> None:
    """A one-pass bound over the limit falls back to counting entries first (two passes)."""
    import logging

    import ust.backends.generated.compute_exec as compute_exec
    import ust.runtime.cpu_threads as cpu_threads

    caplog.set_level(logging.INFO, logger="ust")

    monkeypatch.setattr(compute_exec, "BOUND_LIMIT", 16)
    monkeypatch.setattr(cpu_threads, "THREADS", nthreads)
    A, B, D = mat(120, (60, 40)), mat(121, (40, 50)), mat(122, (60, 40))
    a, b, d = to_fmt(A, "CSR"), to_fmt(B, "CSC"), to_fmt(D, "COO")
    Ad, Bd, Dd = A.toarray(), B.toarray(), D.toarray()
    M = mat(124, (40, 40))
    results = [
        (ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b), Ad @ Bd),
        (ust.compute("C(i,k) = A(i,k) + D(i,k) - A(i,k) * D(i,k)", A=a, D=d), Ad + Dd - Ad * Dd),
        (
            ust.compute("C(i,j) = A(i,k) * M(k,j) + A(i,j) * D(i,j)", A=a, M=to_fmt(M, "CSR"), D=d),
            Ad @ M.toarray() + Ad * Dd,
        ),
    ]
    assert any("counting entries first" in r.getMessage() for r in caplog.records)
    for r, want in results:
        assert isinstance(r, ust.Tensor)
        check(r, want)
        assert_no_duplicates(r)
    X = rand_sparse_nd(123, (6, 5, 4))
    x3 = ust.asarray(X, format="CSF")
    r = ust.compute("R(k,i,j) = X(i,j,k) + X(i,j,k) * X(i,j,k)", X=x3)
    check(r, np.einsum("ijk->kij", X + X * X))
    assert_no_duplicates(r)
    m = ust.compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, semiring="min_plus")
    sa = np.zeros(Ad.shape, bool)
    sb = np.zeros(Bd.shape, bool)
    sa[A.tocoo().row, A.tocoo().col] = True
    sb[B.tocoo().row, B.tocoo().col] = True
    want = np.where(sa[:, :, None] & sb[None, :, :], Ad[:, :, None] + Bd[None, :, :], np.inf).min(axis=1)
    check(m, want)
    assert_no_duplicates(m)


def test_explain() -> None:
    A = mat(73, (10, 8))
    text = ust.explain("einsum", "ij,j->i", to_fmt(A, "DIA"), np.ones(8))
    assert "generated-c" in text and "loop order" in text and "concrete index notation" in text
    text = ust.explain(
        "compute", "C(i,j) = A(i,k) * B(k,j)", A=to_fmt(A, "CSR"), B=to_fmt(A.T.tocsr(), "CSR")
    )
    assert "sparse Tensor" in text and "workspace" in text


# ----------------------------------------------------------------------------- semirings


def weighted_graph(seed: int, n: int = 9, density: float = 0.3) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < density
    np.fill_diagonal(mask, False)
    w = rng.integers(1, 10, size=(n, n)).astype(np.float64)
    return sp.csr_array(np.where(mask, w, 0.0))


@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO", "DCSR"])
def test_min_plus_shortest_paths(fa: str) -> None:
    G = weighted_graph(80)
    n = G.shape[0]
    # D0: the edges plus a zero-weight diagonal (stored explicitly)
    Gc = G.tocoo()
    rows = np.concatenate([Gc.row, np.arange(n)])
    cols = np.concatenate([Gc.col, np.arange(n)])
    D0 = sp.csr_array((np.concatenate([Gc.data, np.zeros(n)]), (rows, cols)), shape=(n, n))
    assert D0.nnz == G.nnz + n
    d = to_fmt(D0, fa)
    for _ in range(int(np.ceil(np.log2(n)))):
        d = ust.compute("D(i,j) = A(i,k) * A(k,j)", A=d, semiring="min_plus")
        assert isinstance(d, ust.Tensor) and d.fill_value == np.inf
        d = d.convert(fa)
    want = shortest_path(G, method="D", directed=True)
    check(d, want)


def test_min_plus_fill_value_and_todense() -> None:
    A = sp.csr_array(np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]))
    a = ust.asarray(A)
    R = ust.einsum("ij,jk->ik", a, a, semiring="min_plus")
    assert isinstance(R, ust.Tensor)
    assert R.fill_value == np.inf
    want = np.full((3, 3), np.inf)
    want[0, 2] = 3.0
    check(R, want)
    assert R.nse == 1
    # a dense result of min_plus: the identity where nothing meets
    y = ust.einsum("ij,j->i", a, np.zeros(3), semiring="min_plus")
    check(y, np.array([1.0, 2.0, np.inf]))
    # max_plus: -inf
    R = ust.einsum("ij,jk->ik", a, a, semiring="max_plus")
    assert R.fill_value == -np.inf
    want[:] = -np.inf
    want[0, 2] = 3.0
    check(R, want)


def test_min_plus_integers_use_the_integer_limits() -> None:
    A = sp.csr_array(np.array([[0, 1, 0], [0, 0, 2], [0, 0, 0]], dtype=np.int64))
    R = ust.einsum("ij,jk->ik", ust.asarray(A), ust.asarray(A), semiring="min_plus")
    assert R.dtype == np.int64
    big = np.iinfo(np.int64).max
    assert R.fill_value == big
    want = np.full((3, 3), big, dtype=np.int64)
    want[0, 2] = 3
    check(R, want)


def bfs_levels(G: sp.csr_array, src: int) -> np.ndarray:
    d = shortest_path(G, method="D", unweighted=True, indices=src)
    return d


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
@pytest.mark.parametrize("fa", ["CSR", "CSC", "COO"])
def test_or_and_bfs(dtype: Any, fa: str) -> None:
    G = weighted_graph(81, n=12, density=0.15)
    n = G.shape[0]
    Ab = sp.csr_array((G != 0).astype(dtype))
    a = to_fmt(Ab, fa)
    src = 0
    frontier = np.zeros(n, dtype=bool)  # a bool frontier against integer adjacency
    frontier[src] = True
    seen = frontier.astype(bool)
    want = bfs_levels(G, src)
    level = 0
    while frontier.any():
        np.testing.assert_array_equal(np.flatnonzero(frontier), np.flatnonzero(want == level))
        nxt = ust.einsum("ji,j->i", a, frontier, semiring="or_and")  # i reached from j when A(j, i)
        assert nxt.dtype in (np.dtype(dtype), np.dtype(np.bool_))  # a bool operand may make the result bool
        nxt_int = ust.einsum("ji,j->i", a, frontier.astype(dtype), semiring="or_and")
        assert nxt_int.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(nxt_int).astype(bool), np.asarray(nxt).astype(bool))
        assert set(np.unique(nxt)) <= {0, 1}
        nxt = np.asarray(nxt).astype(bool) & ~seen
        seen |= nxt
        frontier = nxt
        level += 1
    np.testing.assert_array_equal(seen, np.isfinite(want))
    # reachability by repeated or_and squaring, sparse
    R = to_fmt(sp.csr_array((G != 0).astype(dtype) + sp.eye_array(n, dtype=dtype)), fa)
    for _ in range(4):
        R = ust.einsum("ik,kj->ij", R, R, semiring="or_and").convert(fa)
    reach = np.isfinite(shortest_path(G, method="D", unweighted=True))
    np.testing.assert_array_equal(dense(R).astype(bool), reach)


def test_or_and_dense_bool() -> None:
    G = weighted_graph(79, n=10, density=0.2)
    Ad = G.toarray() != 0
    x = np.zeros(10, dtype=bool)
    x[[0, 4]] = True
    y = ust.einsum("ij,j->i", Ad, x, semiring="or_and")
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, (Ad.astype(int) @ x.astype(int)) > 0)
    R = ust.einsum(
        "ij,jk->ik", ust.asarray(sp.csr_array(Ad.astype(np.int32))), Ad.astype(np.int32), semiring="or_and"
    )
    np.testing.assert_array_equal(dense(R), ((Ad.astype(int) @ Ad.astype(int)) > 0).astype(np.int32))


def test_max_times() -> None:
    rng = np.random.default_rng(82)
    P = sp.csr_array(np.where(rng.random((8, 8)) < 0.4, rng.random((8, 8)), 0.0))
    Q = sp.csr_array(np.where(rng.random((8, 8)) < 0.4, rng.random((8, 8)), 0.0))
    Pd, Qd = P.toarray(), Q.toarray()
    pm, qm = P.toarray() != 0, Q.toarray() != 0
    prod = np.where(pm[:, :, None] & qm[None, :, :], Pd[:, :, None] * Qd[None, :, :], -np.inf)
    want = prod.max(axis=1)
    R = ust.einsum(
        "ik,kj->ij", ust.asarray(P).convert("CSC"), ust.asarray(Q).convert("COO"), semiring="max_times"
    )
    assert R.fill_value == -np.inf
    check(R, want)
    # dense x: max over stored j of A(i,j) * x(j)
    x = rng.random(8)
    wantv = np.where(pm, Pd * x[None, :], -np.inf).max(axis=1)
    check(ust.einsum("ij,j->i", ust.asarray(P), x, semiring="max_times"), wantv)


@pytest.mark.parametrize("fa,fb", [("CSR", "CSR"), ("CSC", "COO"), ("DIA", "BSR")])
def test_plus_pair_counts(fa: str, fb: str) -> None:
    A, B = mat(83, (10, 8)), mat(84, (8, 6))
    Sa = np.zeros(A.shape, np.int64)
    Sb = np.zeros(B.shape, np.int64)
    Ac, Bc = A.tocoo(), B.tocoo()
    Sa[Ac.row, Ac.col] = 1  # every stored slot, explicit zeros included
    Sb[Bc.row, Bc.col] = 1
    a, b = ust.asarray(A), ust.asarray(B)
    R = ust.einsum("ij,jk->ik", a, b, semiring="plus_pair")
    check(np.asarray(dense(R)).astype(np.int64), Sa @ Sb)
    if fa in ("CSR", "CSC", "COO") and fb in ("CSR", "COO"):
        R = ust.einsum("ij,jk->ik", to_fmt(A, fa), to_fmt(B, fb), semiring="plus_pair")
        check(np.asarray(dense(R)).astype(np.int64), Sa @ Sb)
    # triangle counting style: C = A .* (A @ A) with plus_pair
    S = sp.csr_array(((Sa[:8, :8] + Sa[:8, :8].T) > 0).astype(np.float64))
    s = ust.asarray(S)
    T = ust.compute("C(i,j) = S(i,j) * S(i,k) * S(k,j)", S=s, semiring="plus_pair")
    Sd = S.toarray()
    check(np.asarray(dense(T)).astype(np.int64), ((Sd @ Sd) * Sd).astype(np.int64))


def test_custom_semiring() -> None:
    sr = ust.Semiring(add="min(a, b)", multiply="a + b", identity=float("inf"))
    G = weighted_graph(85, n=7)
    g = ust.asarray(G)
    R = ust.einsum("ik,kj->ij", g, g, semiring=sr)
    Gd = np.where(G.toarray() != 0, G.toarray(), np.inf)
    want = (Gd[:, :, None] + Gd[None, :, :]).min(axis=1)
    check(R, want)
    assert R.fill_value == np.inf
    # a max-min (bottleneck) semiring
    bott = ust.Semiring(add="max(a, b)", multiply="min(a, b)", identity=0)
    R = ust.einsum("ik,kj->ij", g, g, semiring=bott)
    Gz = G.toarray()
    m = (Gz != 0)[:, :, None] & (Gz != 0)[None, :, :]
    want = np.where(m, np.minimum(Gz[:, :, None], Gz[None, :, :]), 0).max(axis=1)
    check(R, want)
    # a plus-times written by hand equals the default
    pt = ust.Semiring(add="a + b", multiply="a * b", identity=0)
    A, B = mat(86, (10, 8)), mat(87, (8, 6))
    check(ust.einsum("ij,jk->ik", ust.asarray(A), ust.asarray(B), semiring=pt), A.toarray() @ B.toarray())
    # a multiply with constants and a minus
    sq = ust.Semiring(add="a + b", multiply="2 * a - b", identity=0)
    x = rand_dense(88, (8,))
    Ad = A.toarray()
    want = np.where(Ad != 0, 2 * Ad - x[None, :], 0).sum(axis=1)
    Ac = A.tocoo()
    want = np.zeros(10)
    np.add.at(want, Ac.row, 2 * Ac.data - x[Ac.col])
    check(ust.einsum("ij,j->i", ust.asarray(A), x, semiring=sq), want)


def test_semiring_names() -> None:
    names = set(ust.api.compute.semirings())
    assert {"plus_times", "min_plus", "max_plus", "max_times", "or_and", "plus_pair"} <= names


# ----------------------------------------------------------------------------- operands never modified


def test_operands_not_modified() -> None:
    A = mat(89, (10, 8))
    # a non-canonical COO operand (unsorted, duplicates) goes through sum_duplicates internally
    from tests.algebra_cases import coo_with_duplicates

    Dup = coo_with_duplicates(90, shape=(10, 8))
    dup = ust.asarray(Dup)
    a = to_fmt(A, "DIA")
    X = rand_dense(91, (8, 3))
    snaps = [snapshot(a), snapshot(dup)]
    X0 = X.copy()
    dup_rows, dup_vals = Dup.row.copy(), Dup.data.copy()
    R = ust.compute("C(i,k) = A(i,j) * X(j,k) + D(i,j) * X(j,k)", A=a, D=dup, X=X)
    check(R, (A.toarray() + Dup.toarray()) @ X)
    check(ust.compute("C(i,j) = A(i,j) + D(i,j)", A=a, D=dup), A.toarray() + Dup.toarray())
    assert unchanged(a, snaps[0]) and unchanged(dup, snaps[1])
    assert np.array_equal(X, X0) and np.array_equal(Dup.row, dup_rows) and np.array_equal(Dup.data, dup_vals)


def test_same_operand_twice_with_two_index_patterns() -> None:
    A = mat(92, (8, 8))
    Ad = A.toarray()
    for f in ["CSR", "CSC", "COO"]:
        check(ust.compute("C(i,j) = A(i,j) + A(j,i)", A=to_fmt(A, f)), Ad + Ad.T)
        check(ust.compute("C(i,j) = A(i,k) * A(j,k)", A=to_fmt(A, f)), Ad @ Ad.T)
        check(ust.einsum("ij,ji->i", to_fmt(A, f), to_fmt(A, f)), np.einsum("ij,ji->i", Ad, Ad))


# ----------------------------------------------------------------------------- the stateful twin


def test_compute_plan_execute_twice() -> None:
    A, B = mat(93, (10, 8)), mat(94, (8, 6))
    want = A.toarray() @ B.toarray()
    with ust.Compute("C(i,j) = A(i,k) * B(k,j)", A=to_fmt(A, "CSR"), B=to_fmt(B, "CSC")) as c:
        c.plan()
        r1 = c.execute()
        r2 = c.execute()
    check(r1, want)
    check(r2, want)
    assert r1 is not r2


def test_compute_reset_operands() -> None:
    A, B = mat(95, (10, 8)), mat(96, (10, 8))
    x1, x2 = rand_dense(97, (8,)), rand_dense(98, (8,))
    c = ust.Compute("y(i) = alpha * A(i,j) * x(j)", A=to_fmt(A, "CSR"), x=x1, alpha=2.0)
    c.plan()
    check(c.execute(), 2 * A.toarray() @ x1)
    c.reset_operands(x=x2)
    check(c.execute(), 2 * A.toarray() @ x2)
    c.reset_operands(A=to_fmt(B, "CSR"), alpha=-1.0)
    check(c.execute(), -(B.toarray() @ x2))
    # another format, shape or dtype is refused
    with pytest.raises(ust.UstError):
        c.reset_operands(A=to_fmt(B, "CSC"))
    with pytest.raises(ust.UstError):
        c.reset_operands(x=np.ones(9))
    with pytest.raises(ust.UstError):
        c.reset_operands(y=np.ones(8))
    check(c.execute(), -(B.toarray() @ x2))  # the refused resets changed nothing
    c.free()


def test_compute_reset_sparse_result() -> None:
    A, B = mat(99, (10, 8)), mat(100, (10, 8))
    D = mat(101, (8, 6))
    c = ust.Compute("C(i,j) = A(i,k) * D(k,j)", A=to_fmt(A, "CSR"), D=to_fmt(D, "CSR"))
    c.plan()
    check(c.execute(), A.toarray() @ D.toarray())
    c.reset_operands(A=to_fmt(B, "CSR"))  # another pattern, same format
    check(c.execute(), B.toarray() @ D.toarray())


def test_compute_autotune() -> None:
    A, B = mat(102, (10, 8)), mat(103, (8, 6))
    X = rand_dense(104, (8, 6))
    c = ust.Compute("C(i,j) = A(i,k) * B(k,j) + A(i,k) * X(k,j)", A=to_fmt(A, "CSR"), B=to_fmt(B, "COO"), X=X)
    c.autotune(repeats=1)
    check(c.execute(), A.toarray() @ (B.toarray() + X))
    c.plan()
    c.autotune(repeats=2)
    check(c.execute(), A.toarray() @ (B.toarray() + X))
    c2 = ust.Compute("C(i,j) = A(i,k) * B(k,j)", A=to_fmt(A, "CSR"), B=to_fmt(B, "CSR"))
    c2.plan()
    c2.autotune(repeats=1)
    check(c2.execute(), A.toarray() @ B.toarray())


def test_save_and_load_plan(tmp_path: Any) -> None:
    A, B = mat(105, (10, 8)), mat(106, (8, 6))
    a, b = to_fmt(A, "CSR"), to_fmt(B, "CSR")
    expr = "C(i,j) = A(i,k) * B(k,j)"
    c = ust.Compute(expr, A=a, B=b, options={"order": "ikj"})
    c.plan()
    path = tmp_path / "plan.json"
    c.save_plan(path)
    c2 = ust.Compute.load_plan(path, expr, A=a, B=b)
    check(c2.execute(), A.toarray() @ B.toarray())
    assert "i -> k -> j" in c2.explain()
    # a semiring passed through load_plan
    c3 = ust.Compute(expr, A=a, B=b, semiring="min_plus")
    c3.plan()
    c3.save_plan(path)
    c4 = ust.Compute.load_plan(path, expr, A=a, B=b, semiring="min_plus")
    r = c4.execute()
    assert r.fill_value == np.inf
    check(r, dense(ust.compute(expr, A=a, B=b, semiring="min_plus")))


def test_load_plan_in_another_process(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    A, B = mat(112, (10, 8)), mat(113, (8, 6))
    sp.save_npz(tmp_path / "a.npz", A)
    sp.save_npz(tmp_path / "b.npz", B)
    expr = "C(i,j) = A(i,k) * B(k,j)"
    c = ust.Compute(expr, A=to_fmt(A, "CSC"), B=to_fmt(B, "COO"), options={"order": "ikj"})
    c.plan()
    c.save_plan(tmp_path / "plan.json")
    code = f"""
import json, numpy as np, scipy.sparse as sp, ust
A = ust.asarray(sp.load_npz({str(tmp_path / "a.npz")!r})).convert("CSC")
B = ust.asarray(sp.load_npz({str(tmp_path / "b.npz")!r})).convert("COO")
c = ust.Compute.load_plan({str(tmp_path / "plan.json")!r}, {expr!r}, A=A, B=B)
print(json.dumps(np.asarray(c.execute().todense()).tolist()))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    check(np.array(json.loads(out.stdout.strip().splitlines()[-1])), A.toarray() @ B.toarray())


def test_logging_says_the_route(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    A = mat(114, (10, 8))
    with caplog.at_level(logging.INFO, logger="ust"):
        ust.einsum("ij,j->i", to_fmt(A, "CSR"), np.ones(8))
    text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("ust"))
    assert "generated-c" in text


def test_save_plan_before_plan_is_refused(tmp_path: Any) -> None:
    A = mat(107, (10, 8))
    c = ust.Compute("y(i) = A(i,j) * x(j)", A=to_fmt(A, "CSR"), x=np.ones(8))
    with pytest.raises(ust.UstError):
        c.save_plan(tmp_path / "p.json")
    with pytest.raises(ust.UstError):
        c.execute()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: "not json at all {",
        lambda d: "[]",
        lambda d: d.replace('"ust_compute_plan": 1', '"ust_compute_plan": 2'),
        lambda d: d.replace('"order": ["i", "k", "j"]', '"order": "ikj"'),
        lambda d: d.replace('"order": ["i", "k", "j"]', '"order": ["i", "q", "j"]'),
        lambda d: d.replace('"order": ["i", "k", "j"]', '"order": ["i", "k"]'),
        lambda d: d.replace('"mode": "', '"mode": "bogus'),
        lambda d: d.replace("A(i,k)", "A(i,q)"),
        lambda d: "\x00\xff\xfe",
    ],
    ids=[
        "garbage",
        "list",
        "version",
        "order-type",
        "order-unknown-index",
        "order-short",
        "mode",
        "expression",
        "binary",
    ],
)
def test_tampered_plan_file(tmp_path: Any, tamper: Any) -> None:
    A, B = mat(108, (10, 8)), mat(109, (8, 6))
    a, b = to_fmt(A, "CSR"), to_fmt(B, "CSR")
    expr = "C(i,j) = A(i,k) * B(k,j)"
    c = ust.Compute(expr, A=a, B=b, options={"order": "ikj"})
    c.plan()
    path = tmp_path / "plan.json"
    c.save_plan(path)
    text = path.read_text()
    assert '"order": ["i", "k", "j"]' in text
    path.write_text(tamper(text), encoding="utf-8", errors="surrogateescape")
    with pytest.raises(ust.UstError):
        ust.Compute.load_plan(path, expr, A=a, B=b)


def test_load_plan_missing_file(tmp_path: Any) -> None:
    with pytest.raises(ust.UstError):
        ust.Compute.load_plan(tmp_path / "nope.json", "C(i,j) = A(i,j)", A=np.ones((2, 2)))


def test_every_format_pair_on_a_dense_scaled_sum() -> None:
    """``C = A + 2 * B`` over every pair (a sparse result from a sum of products of sparse operands)."""
    A, B = mat(110, (10, 8)), mat(111, (10, 8))
    for fa, fb in itertools.product(["CSR", "COO", "DIA", USER_CSC], repeat=2):
        check(
            ust.compute("C(i,j) = A(i,j) + 2 * B(i,j)", A=to_fmt(A, fa), B=to_fmt(B, fb)),
            A.toarray() + 2 * B.toarray(),
        )
