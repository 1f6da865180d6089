"""Property-based round trips: random sparse data through every pair of formats (standard and
random user formats) back to the same dense array, for several value and index dtypes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ust.formats as F
from tests.support import DENSE_2D, SPARSE_2D
from ust.convert import asarray
from ust.convert.routes import convert
from ust.runtime.errors import FormatError

STANDARD = [*SPARSE_2D, *DENSE_2D]
BLOCKED = ["BSR[{r},{c}]", "BSC[{r},{c}]"]
USER = [
    "(i, j) -> (j : compressed, i : dense)",
    "(i, j) -> (i : loose_compressed, j : compressed)",
    "(i, j) -> (i : dense, j : loose_compressed(nonordered))",
    "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))",
    "(i, j) -> (j : compressed(nonunique), i : singleton)",
    "(i, j) -> (i + j : compressed, i : range)",
    "(i, j) -> (i - j : compressed, j : range)",
    "(i, j) -> (i floordiv {r} : dense, j : compressed, i mod {r} : dense)",
    "(i, j) -> (j floordiv {c} : compressed, i : compressed, j mod {c} : dense)",
    "(i, j) -> (i floordiv {r} : compressed, j floordiv {c} : compressed, j mod {c} : dense, i mod {r} : dense)",
    "(i, j) -> (j floordiv {c} : dense, i : dense, j mod {c} : dense)",
]
DTYPES = [np.float32, np.float64, np.complex128]
INDEX = [np.int32, np.int64]


@st.composite
def sparse_coo(draw: st.DrawFn) -> tuple[sp.coo_array, int, int]:
    """A random coo (duplicates, explicit zeros, empty rows/columns) and block sizes dividing it."""
    r = draw(st.sampled_from([1, 2, 3]))
    c = draw(st.sampled_from([1, 2, 3]))
    m = r * draw(st.integers(0, 4))
    n = c * draw(st.integers(0, 4))
    dtype = draw(st.sampled_from(DTYPES))
    nnz = draw(st.integers(0, 2 * m * n)) if m * n else 0
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    row = rng.integers(0, max(m, 1), nnz)
    col = rng.integers(0, max(n, 1), nnz)
    vals = rng.integers(-3, 4, nnz).astype(dtype)  # small integers: sums are exact, zeros happen
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.integers(-2, 3, nnz)
    A = sp.coo_array((vals.astype(dtype), (row, col)), shape=(m, n))
    return A, r, c


def _formats(r: int, c: int) -> list[str]:
    return STANDARD + [b.format(r=r, c=c) for b in BLOCKED] + [u.format(r=r, c=c) for u in USER]


@settings(max_examples=25)
@given(sparse_coo(), st.sampled_from(INDEX))
def test_every_pair_round_trips(case: tuple[sp.coo_array, int, int], itype: type) -> None:
    A, r, c = case
    want = A.toarray()
    fmts = _formats(r, c)
    tensors = [asarray(A, f, index_dtype=itype, max_padding=10**6) for f in fmts]
    for f, t in zip(fmts, tensors):
        assert t.index_dtype == itype, f
        np.testing.assert_array_equal(t.todense(), want, err_msg=f)
        for g in fmts:
            u = t.convert(g, index_dtype=itype, max_padding=10**6)
            assert u.format == F.format(g)
            np.testing.assert_array_equal(u.todense(), want, err_msg=f"{f} -> {g}")


_KINDS = ["dense", "compressed", "compressed(nonordered)", "loose_compressed", "compressed(nonunique)"]


@st.composite
def random_user_format(draw: st.DrawFn, r: int, c: int) -> str:
    """A random valid 2-D format: a level order, optional blocking of either dimension
    (the ``mod`` level last or right after), and a level type per level."""
    order = draw(st.sampled_from([("i", "j"), ("j", "i")]))
    block = {"i": r, "j": c}
    exprs: list[str] = []
    tail: list[str] = []
    for d in order:
        if block[d] > 1 and draw(st.booleans()):
            exprs.append(f"{d} floordiv {block[d]}")
            (tail if draw(st.booleans()) else exprs).append(f"{d} mod {block[d]}")
        else:
            exprs.append(d)
    exprs += tail
    kinds = [draw(st.sampled_from(_KINDS)) for _ in exprs]
    levels = ", ".join(f"{e} : {k}" for e, k in zip(exprs, kinds))
    text = f"(i, j) -> ({levels})"
    try:
        F.format(text)
    except FormatError:
        assume(False)
    return text


@settings(max_examples=40)
@given(st.data())
def test_random_user_formats_round_trip(data: st.DataObject) -> None:
    A, r, c = data.draw(sparse_coo())
    want = A.toarray()
    fmts = [data.draw(random_user_format(r, c)) for _ in range(3)]
    for f in fmts:
        t = asarray(A, f, max_padding=10**6)
        np.testing.assert_array_equal(t.todense(), want, err_msg=f)
        for g in [*fmts, "CSR", "COO", "DIA", f"BSR[{r},{c}]"]:
            np.testing.assert_array_equal(
                t.convert(g, max_padding=10**6).todense(), want, err_msg=f"{f} -> {g}"
            )


@settings(max_examples=40)
@given(sparse_coo())
def test_library_routes_equal_general_path(case: tuple[sp.coo_array, int, int]) -> None:
    A, r, c = case
    fmts = ["CSR", "CSC", "COO", "DIA", f"BSR[{r},{c}]"]
    for f in fmts:
        t = asarray(A, f, max_padding=10**6)
        for g in fmts:
            if g == f:
                continue  # no conversion at all (DIA's general path would drop zero diagonals)
            a = t.convert(g, max_padding=10**6)
            b = convert(t, F.format(g), route="general", max_padding=10**6)
            for k, v in a.buffers().items():
                np.testing.assert_array_equal(v, b.buffers()[k], err_msg=f"{f} -> {g}: {k}")


@settings(max_examples=40)
@given(sparse_coo())
def test_scipy_canonical_buffers(case: tuple[sp.coo_array, int, int]) -> None:
    A, r, c = case
    csr = A.tocsr()
    t = asarray(A, "CSR")
    np.testing.assert_array_equal(t.pos(1), csr.indptr)
    np.testing.assert_array_equal(t.crd(1), csr.indices)
    np.testing.assert_array_equal(t.values, csr.data)
    csc = A.tocsc()
    u = asarray(A, "CSC")
    np.testing.assert_array_equal(u.pos(1), csc.indptr)
    np.testing.assert_array_equal(u.crd(1), csc.indices)
    np.testing.assert_array_equal(u.values, csc.data)
    b = csr.tobsr((r, c))
    b.sort_indices()
    v = asarray(A, f"BSR[{r},{c}]")
    np.testing.assert_array_equal(v.crd(1), b.indices)
    np.testing.assert_array_equal(v.values, b.data.ravel())


@st.composite
def nm_case(draw: st.DrawFn) -> np.ndarray:
    m = draw(st.integers(0, 5))
    blocks = draw(st.integers(0, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.integers(-9, 10, size=(m, 4 * blocks)).astype(np.float64)
    X[rng.random(X.shape) < 0.5] = 0
    return X


@settings(max_examples=40)
@given(nm_case())
def test_structured_prune_keeps_largest(X: np.ndarray) -> None:
    t = asarray(X, "NM[2,4]", prune=True)
    want = X.copy()
    for row in want:
        for blk in row.reshape(-1, 4):
            order = np.argsort(-np.abs(blk), kind="stable")
            blk[order[2:]] = 0
    np.testing.assert_array_equal(t.todense(), want)
    assert t.nse == X.size // 2
    for g in ("CSR", "COO", "DIA", "NM[2,4]", "DenseColMajor"):
        np.testing.assert_array_equal(t.convert(g, max_padding=10**6).todense(), want)
    if np.any((X.reshape(-1, 4) != 0).sum(axis=1) > 2):
        try:
            asarray(X, "NM[2,4]")
        except FormatError:
            pass
        else:
            raise AssertionError("an overfull block must raise without prune")


FORMATS_3D = [
    "CSF",
    "COO3",
    "BatchedCSR",
    "Dense3",
    "(b, i, j) -> (b : batch, j : dense, i : compressed)",
    "(b, i, j) -> (b : batch, i : compressed, j : compressed)",
    "(b, i, j) -> (b : batch, i : compressed(nonunique), j : singleton)",
    "(i, j, k) -> (k : compressed, i : dense, j : compressed)",
    "(i, j, k) -> (j : dense, k - i : compressed, k : range)",
]


@st.composite
def dense3(draw: st.DrawFn) -> np.ndarray:
    shape = tuple(draw(st.integers(0, 4)) for _ in range(3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.integers(-5, 6, size=shape).astype(draw(st.sampled_from(DTYPES)))
    X[rng.random(shape) < draw(st.floats(0, 1))] = 0
    return X


@settings(max_examples=30)
@given(dense3(), st.sampled_from(INDEX))
def test_3d_round_trips(X: np.ndarray, itype: type) -> None:
    for f in FORMATS_3D:
        t = asarray(X, f, index_dtype=itype)
        assert t.index_dtype == itype
        np.testing.assert_array_equal(t.todense(), X, err_msg=f)
        for g in FORMATS_3D:
            np.testing.assert_array_equal(t.convert(g).todense(), X, err_msg=f"{f} -> {g}")
