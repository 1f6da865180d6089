"""``t[key]``: indexing every format as scipy.sparse arrays index (SciPy's test_base.py patterns).

Every result is compared with SciPy's sparray result on the same data -- its type (scalar,
dense array, CSR / CSC / COO), shape, values and, for the formats indexed in place, the number
of stored entries -- and with NumPy's ``dense[key]``.  The formats SciPy cannot index (BSR,
DIA, DCSR, a loose-compressed and a column-major COO DSL format; a row-paired DSL format and a
batched one in the route and property tests) are compared with the SciPy format the planner
serves them through (CSR, CSC for column keys, COO for keys only COO serves).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import ust
from tests.algebra_cases import snapshot, unchanged
from ust.api.indexing import getitem, parse_key, plan
from ust.plan import classify
from ust.runtime.errors import IndexOutOfBoundsError, InvalidIndexError

USER = {
    "loose": "(i, j) -> (i : dense, j : loose_compressed)",
    "colmajor-COO": "(i, j) -> (j : compressed(nonunique), i : singleton)",
    "rowpairs": "(i, j) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : dense)",
    "batched": "(b, i) -> (b : batch, i : compressed)",
}
DIRECT = ["CSR", "CSC", "COO"]
CONVERTED = ["BSR", "DIA", "DCSR", "loose", "colmajor-COO"]
FORMATS = DIRECT + CONVERTED
SCIPY = {"CSR": sp.csr_array, "CSC": sp.csc_array, "COO": sp.coo_array}

#: Keys where SciPy 1.17 disagrees with NumPy (ust follows NumPy; see ust.api.indexing)
SCIPY_QUIRKS = {
    "CSR": ("none-then-arrays", "rows-stepped-cols"),
    "CSC": ("none-then-arrays",),
    "COO": ("rows-none",),
}


def fmt_of(name: str, shape: tuple[int, ...] = (5, 10)) -> ust.Format:
    if name == "BSR":
        return ust.format("BSR[1,2]") if shape[1] % 2 == 0 else ust.format("BSR[1,1]")
    return ust.format(USER.get(name, name))


def tensor(A: Any, name: str, index_dtype: Any = None) -> ust.Tensor:
    """``A`` (a scipy sparse array or a dense array) in format ``name``; CSR / CSC / COO keep
    SciPy's own storage (duplicates, unsorted indices and explicit zeros included)."""
    if name in SCIPY and sp.issparse(A):
        return ust.asarray(A.asformat(name.lower()), index_dtype=index_dtype)
    if not sp.issparse(A):
        return ust.asarray(np.asarray(A), format=fmt_of(name, np.shape(A)), index_dtype=index_dtype)
    return ust.asarray(A.tocsr(), format=fmt_of(name, A.shape), index_dtype=index_dtype)


def served_as(t: ust.Tensor, key: Any) -> str:
    """The SciPy format whose indexing ``t[key]`` follows (by the route the planner picks)."""
    d = plan(t, key)
    if d.route == "direct":
        name = classify(t.format).name
        return name if name in SCIPY else "COO"
    return {"via-csr": "CSR", "via-csc": "CSC", "via-coo": "COO"}[d.route]


def dense_of(x: Any) -> np.ndarray:
    if isinstance(x, ust.Tensor):
        return np.asarray(x.todense())
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


def ust_kind(x: Any) -> str:
    if isinstance(x, ust.Tensor):
        name = classify(x.format).name
        if name in ("SparseVector", "COO3") or (name == "OTHER" and x.ndim > 2):
            return "COO"
        if name == "OTHER" and x.ndim == 1:
            return "COO"
        if name == "OTHER" and x.ndim == 2 and x.format.levels[-1].format.name == "SINGLETON":
            return "COO"
        return name
    if isinstance(x, np.ndarray):
        return "ndarray"
    return "scalar"


def scipy_kind(x: Any) -> str:
    if sp.issparse(x):
        return x.format.upper()
    if isinstance(x, np.ndarray):
        return "ndarray"
    return "scalar"


def check(t: ust.Tensor, A: Any, key: Any, *, quirk: str = "") -> Any:
    """``t[key]`` against SciPy's sparray (the format ``t`` is served as) and NumPy's dense[key]."""
    S = sp.coo_array(A) if not sp.issparse(A) else A
    dense = S.toarray()
    snap = snapshot(t)
    got = t[key]
    assert unchanged(t, snap), "indexing wrote into the operand"
    want = dense[key]
    g = dense_of(got)
    assert g.shape == np.shape(want), (key, g.shape, np.shape(want))
    np.testing.assert_array_equal(g, want, err_msg=repr(key))
    family = served_as(t, key)
    if quirk and quirk in SCIPY_QUIRKS.get(family, ()):
        return got
    ref = SCIPY[family](S)[key]
    assert ust_kind(got) == scipy_kind(ref), (key, family, ust_kind(got), scipy_kind(ref))
    assert np.shape(got) == np.shape(ref)
    np.testing.assert_array_equal(g, dense_of(ref))
    if isinstance(got, ust.Tensor):
        assert got.dtype == ref.dtype
        if plan(t, key).route == "direct" and classify(t.format).name in SCIPY:
            assert got.nnz == ref.nnz, (key, got.nnz, ref.nnz)
        if ust_kind(got) == family and got.ndim == t.ndim and plan(t, key).route == "direct":
            assert got.format == t.format  # the operand's own format kept
    elif isinstance(got, np.ndarray):
        assert got.dtype == ref.dtype
    else:
        assert type(got) is type(ref), (type(got), type(ref))
    return got


def B50(dtype: Any = np.float64) -> np.ndarray:
    return np.arange(50).reshape(5, 10).astype(dtype)


# ----------------------------------------------------------------------------- _TestGetSet


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize(
    "dtype", [np.float64, np.float32, np.int32, np.int64, np.complex128, np.int8, np.uint8]
)
def test_getelement(name, dtype):
    D = np.array([[1, 0, 0], [4, 3, 0], [0, 2, 0], [0, 0, 0]], dtype=dtype)
    t = tensor(D, name)
    M, N = D.shape
    for i in range(-M, M):
        for j in range(-N, N):
            v = t[i, j]
            assert v == D[i, j]
            assert type(v) is np.dtype(dtype).type
    for ij in [(0, 3), (-1, 3), (4, 0), (4, 3), (4, -1), (1, 2, 3)]:
        with pytest.raises(IndexError):
            t[ij]


# ----------------------------------------------------------------------------- _TestSlicing


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("dt", [np.int16, np.int32, np.float32, np.float64])
def test_dtype_preservation(name, dt):
    t = tensor(np.zeros((1, 10), dt), name)
    assert t[0, 1:5].dtype == dt
    t = tensor(np.zeros((3, 2), dt), name)
    for key in [(slice(None), slice(0, 0, 2)), (slice(0, 0, 2), slice(None)), (0, slice(0, 0, 2)),
                (slice(0, 0, 2), 0), (slice(None), [False, False]), ([False, False, False], slice(None)),
                (slice(None), []), ([], slice(None))]:  # fmt: skip
        assert t[key].dtype == dt


@pytest.mark.parametrize("name", FORMATS)
def test_get_horiz_and_vert_slices(name):
    B = np.arange(50.0).reshape(5, 10)
    t = tensor(B, name)
    for key in [(1, slice(None)), (1, slice(2, 5)), (slice(2, 5), 0), (slice(None), 1)]:
        check(t, B, key)
    for C in ([[1, 2, 1], [4, 0, 6], [0, 0, 0], [0, 0, 1]], [[1, 2, 1], [4, 0, 0], [0, 0, 0], [0, 0, 1]],
              [[1, 0, 1], [4, 0, 0], [0, 0, 0], [0, 0, 1]]):  # fmt: skip
        C = np.array(C, dtype=np.float64)
        tc = tensor(C, name)
        for key in [(1, slice(1, 3)), (2, slice(-2, None)), (slice(1, 3), 1), (slice(None), 2),
                    (slice(None), 1), (slice(-2, None), 2)]:  # fmt: skip
            check(tc, C, key)
    with pytest.raises(IndexError):
        t[:, 11]
    with pytest.raises(IndexError):
        t[6, 3:7]


@pytest.mark.parametrize("name", FORMATS)
def test_get_slices_and_strides(name):
    B = np.arange(50.0).reshape(5, 10)
    t = tensor(B, name)
    for key in [np.s_[2:5, 0:3], np.s_[1:, :-1], np.s_[:-1, 1:], np.s_[0:4:2, 2:9:3], np.s_[::-1, ::-2],
                np.s_[4::-2, 8:3:-1], np.s_[:5:-1, :]]:  # fmt: skip
        check(t, B, key)
    E = np.array([[1.0, 0, 1], [4, 0, 0], [0, 0, 0], [0, 0, 1]])
    te = tensor(E, name)
    check(te, E, np.s_[1:2, 1:2])
    check(te, E, np.s_[:, 1:])
    rng = np.random.default_rng(0)
    v0 = rng.random((50, 50))
    v0[v0 < 0.6] = 0
    check(tensor(v0, name), v0, np.s_[0:25:2, 2:30:3])


@pytest.mark.parametrize("name", FORMATS)
def test_slicing_2(name):
    B = np.arange(50).reshape(5, 10).astype(np.int64)
    t = tensor(B, name)
    for key in [(2, 3), (-1, 8), (-1, -2), (np.array(-1), -2), (-1, np.array(-2)), (np.array(-1), np.array(-2)),
                (2, slice(None)), (2, slice(5, -2)), (np.array(2), slice(5, -2)),
                (slice(None), 2), (slice(3, 4), 9), (slice(1, 4), -5), (slice(2, -1), 3), (slice(2, -1), np.array(3)),
                (slice(1, 2), slice(1, 2)), (slice(4, None), slice(3, None)), (slice(None, 4), slice(None, 5)),
                (slice(2, -1), slice(None, 5)), (1, slice(None)), (-2, slice(None)), (np.array(-2), slice(None)),
                slice(1, 4), slice(1, -2)]:  # fmt: skip
        check(t, B, key)
    s = slice(np.int8(2), np.int8(4), None)
    check(t, B, (s, slice(None)))
    check(t, B, (slice(None), s))


SLICES = [np.s_[:2], np.s_[1:2], np.s_[3:], np.s_[3::2], np.s_[15:20], np.s_[3:2], np.s_[8:3:-1], np.s_[4::-2],
          np.s_[:5:-1], 0, 1, np.s_[:], np.s_[1:5], -1, -2, -5, np.array(-1), np.int8(-3)]  # fmt: skip


@pytest.mark.parametrize("name", FORMATS)
def test_slicing_3(name):
    B = np.arange(50).reshape(5, 10).astype(np.float64)
    t = tensor(B, name)
    for a in SLICES:
        check(t, B, a)
    for a, b in itertools.product(SLICES, SLICES):
        check(t, B, (a, b))
    extra = [
        slice(a, b, c)
        for a, b, c in itertools.product(*([(None, 0, 1, 2, 5, 15, -1, -2, 5, -15)] * 3))
        if c != 0
    ]
    if name not in DIRECT:
        extra = extra[::7]
    for a in extra:
        check(t, B, (a, a))
        check(t, B, (a, -2))
        check(t, B, (-2, a))


@pytest.mark.parametrize("name", FORMATS)
def test_none_slicing(name):
    B = np.arange(50.0).reshape(5, 10)
    t = tensor(B, name)
    assert np.ndim(t[1, 2]) == 0
    shapes = [
        ((None, 1, slice(2, 4)), (1, 2)), ((None, 1, 2, None), (1, 1)), ((None, 1), (1, 10)), ((1, None), (1, 10)),
        ((None, 1, slice(None)), (1, 10)), ((1, None, slice(None)), (1, 10)), ((1, slice(None), None), (10, 1)),
        ((None, slice(1, 3), 2), (1, 2)), ((slice(1, 3), None, 2), (2, 1)), ((slice(1, 3), 2, None), (2, 1)),
        ((1, None, slice(2, 4)), (1, 2)), ((1, slice(2, 4), None), (2, 1)), ((slice(1, 3), 2), (2,)),
        ((1, slice(2, 4)), (2,)), ((None, 1, 2), (1,)), ((1, None, 2), (1,)), ((1, 2, None), (1,)),
    ]  # fmt: skip
    for key, shape in shapes:
        assert check(t, B, key).shape == shape


@pytest.mark.parametrize("name", FORMATS)
def test_ellipsis_slicing(name):
    b = np.arange(50.0).reshape(5, 10)
    a = tensor(b, name)
    E = Ellipsis
    for key in [E, (E,), (4, E), (E, 4), (E, 5), (slice(1, None), E), (E, slice(1, None)), (slice(None, 2), E),
                (E, slice(None, 2)), (slice(None, 5), E), (E, slice(None, 5)), (slice(5, None), E),
                (E, slice(5, None)), (slice(10, None), E), (E, slice(10, None)), (slice(1, None), 1, E),
                (1, E, slice(1, None)), (E, 1, slice(1, None)), (slice(None, 2), 1, E), (1, E, slice(None, 2)),
                (E, 1, slice(None, 2)), (1, 1, E), (1, E, 1)]:  # fmt: skip
        check(a, b, key)
    with pytest.raises(IndexError, match=r"index .5. out of range"):
        a[5, ...]
    with pytest.raises(IndexError, match=r"index .10. out of range"):
        a[..., 10]
    with pytest.raises(IndexError, match="an index can only have a single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="an index can only have a single ellipsis"):
        a[..., 1, ...]


@pytest.mark.parametrize("name", FORMATS)
def test_ellipsis_fancy(name):
    b = np.arange(50.0).reshape(5, 10)
    a = tensor(b, name)
    ix5 = [True, False, True, False, True]
    ix10 = [False] * 5 + ix5
    full = [ix10] * 5
    E = Ellipsis
    for key in [(full, E), (E, full), (ix5, E), (E, ix10), (ix5, E, ix10), (E, ix5, ix10), (ix5, ix10, E),
                ([4], E), ([2, 4], E), (E, [4]), (E, [2, 4]), ([4], 1, E), ([2, 4], 1, E), ([4], E, 1),
                (E, [4], 1), ([2, 4], E, [2, 4]), (E, [2, 4], [2, 4])]:  # fmt: skip
        check(a, b, key)
    with pytest.raises(IndexError, match="shape mismatch"):
        a[ix5, ix5 + ix5]


# ----------------------------------------------------------------------------- _TestFancyIndexing


@pytest.mark.parametrize("name", FORMATS)
def test_bad_index(name):
    t = tensor(np.eye(5), name)
    for key in ["foo", (2, "foo"), 1.5, (1, 2.5), np.array([1.0, 2.0]), (np.array(True), 1)]:
        with pytest.raises(InvalidIndexError):
            t[key]
    with pytest.raises(IndexError, match="shape mismatch"):
        t[[1, 2, 3], [1, 2, 3, 4]]
    with pytest.raises(InvalidIndexError, match="inexact"):
        t[1.0, 2]
    with pytest.raises(IndexError, match="too many indices"):
        t[1, 2, 3]
    assert issubclass(InvalidIndexError, IndexError) and issubclass(InvalidIndexError, ust.UstError)
    assert issubclass(InvalidIndexError, TypeError)
    assert issubclass(IndexOutOfBoundsError, IndexError) and issubclass(IndexOutOfBoundsError, ust.ShapeError)


@pytest.mark.parametrize("name", FORMATS)
def test_sparse_keys_are_refused(name):
    t = tensor(np.eye(5), name)
    mask = sp.csr_array(np.eye(5, dtype=bool))
    for key in [mask, ust.asarray(mask.astype(np.float64)), (mask, 1)]:
        with pytest.raises(InvalidIndexError, match="sparse"):
            t[key]


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing(name):
    B = np.arange(50).reshape(5, 10).astype(np.float64)
    A = tensor(B, name)
    a = np.array
    keys = [
        [3], [1, 3], (3, [3]), (3, [1, 3]), (-1, [2, -5]), (a(-1), [2, -5]), (-1, a([2, -5])), (a(-1), a([2, -5])),
        (slice(None), [2, 8, 3, -1]), (slice(3, 4), [9]), (slice(1, 4), [-1, -5]), (slice(1, 4), a([-1, -5])),
        ([3], 3), ([1, 3], 3), ([2, -5], -4), (a([2, -5]), -4), ([2, -5], a(-4)), (a([2, -5]), a(-4)),
        ([3], slice(None)), ([1, 3], slice(None)), ([2, -5], slice(8, -1)), (a([2, -5]), slice(8, -1)),
        ([3], [4]), ([1, 3], [2, 4]), ([-1, -3], [2, -4]), (a([-1, -3]), [2, -4]), ([-1, -3], a([2, -4])),
        (a([-1, -3]), a([2, -4])), ([[1], [3]], [2, 4]), ([[-1], [-3], [-2]], [2, -4]),
        (a([[-1], [-3], [-2]]), [2, -4]), ([[-1], [-3], [-2]], a([2, -4])), (a([[-1], [-3], [-2]]), a([2, -4])),
        [-1, -3], a([-1, -3]), (1, [[1, 3]]), (1, [[-1, -3]]), (a([[1]]), a([[1]])), ([[]], [[]]),
        (slice(2, 4), slice(None)), (slice(None), slice(2, 4)),
    ]  # fmt: skip
    for key in keys:
        check(A, B, key)
    for first, second in [(([3], slice(None)), (slice(None), [4])), (([1, 3], slice(None)), (slice(None), [2, 4])),
                          (([-1, -3], slice(None)), (slice(None), [2, -4])),
                          ((slice(None), [1, 3]), ([2, 4], slice(None))),
                          ((slice(None), [-1, -3]), ([2, -4], slice(None))),
                          ((1, [[1, 3]]), ([[0, 0]], 1)), ((1, [[-1, -3]]), ([[0, -1]], 1))]:  # fmt: skip
        step = A[first]
        np.testing.assert_array_equal(dense_of(step[second]), B[first][second])
    # a 3-D result: COO's indexing; CSR and CSC refuse it as SciPy does, other formats take the COO route
    for key in [(slice(None, 1), [[1, 3]]), ([[0, 0]], slice(None, 1))]:
        if name in ("CSR", "CSC"):
            with pytest.raises(IndexError, match=">2D is not supported"):
                A[key]
        else:
            check(A, B, key)


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing_randomized(name):
    rng = np.random.default_rng(1234)
    M, N = 6, 4
    D = rng.random((M, N))
    D = D * (D > 0.5)
    I = rng.integers(-M + 1, M, size=50)  # noqa: E741
    J = rng.integers(-N + 1, N, size=50)
    S = tensor(D, name)
    check(S, D, (I, J))
    with pytest.raises(IndexOutOfBoundsError):
        S[I + M, J]
    with pytest.raises(IndexOutOfBoundsError):
        S[I, J - N]


@pytest.mark.parametrize("name", FORMATS)
def test_missized_masking(name):
    M, N = 5, 10
    A = tensor(np.arange(M * N, dtype=np.float64).reshape(M, N), name)
    row_long, row_short = np.ones(M + 1, bool), np.ones(M - 1, bool)
    col_long, col_short = np.ones(N + 2, bool), np.ones(N - 2, bool)
    for i, j in itertools.product((row_long, row_short, slice(None)), (col_long, col_short, slice(None))):
        if isinstance(i, slice) and isinstance(j, slice):
            continue
        with pytest.raises(IndexError, match=r"bool index .* has shape .* instead of .*"):
            A[i, j]


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing_boolean(name):
    rng = np.random.default_rng(1234)
    B = np.arange(50).reshape(5, 10).astype(np.float64)
    A = tensor(B, name)
    I = rng.integers(0, 2, size=5).astype(bool)  # noqa: E741
    J = rng.integers(0, 2, size=10).astype(bool)
    X = rng.integers(0, 2, size=(5, 10)).astype(bool)
    for key in [I, (slice(None), J), X, B > 9, (np.array([True, False, True, True, False]),
                np.array([False, True, True, False, True, False, False, False, False, False])),
                (I, slice(2, 7)), (slice(1, 4), J), (1, J), (I, 3)]:  # fmt: skip
        check(A, B, key)
    Z1 = np.zeros((6, 11), dtype=bool)
    Z2 = Z1.copy()
    Z2[0, -1] = True
    Z3 = Z1.copy()
    Z3[-1, 0] = True
    for Z in (Z1, Z2, Z3):
        with pytest.raises(IndexError):
            A[Z]
    with pytest.raises(IndexError):
        A[X, 1]


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing_regression_3087(name):
    D = np.array([[1.0, 0, 0], [0, 1, 0], [1, 0, 0]])
    mat = tensor(D, name)
    desired = np.ravel(D.sum(0)) > 0
    np.testing.assert_array_equal(dense_of(mat[:, desired]), [[1, 0], [0, 1], [1, 0]])


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing_empty(name):
    B = np.arange(50).reshape(5, 10).astype(np.float64)
    B[1, :] = 0
    B[:, 2] = 0
    B[3, 6] = 0
    A = tensor(B, name)
    K = np.array([False] * 5)
    check(A, B, K)
    K = np.array([], dtype=int)
    J = np.array([0, 1, 2, 3, 4], dtype=int)[:, None]
    for key in [K, (K, K), (K, J), (J, K), ([], []), (slice(None), [])]:
        check(A, B, key)


# ----------------------------------------------------------------------------- _TestFancyMultidim


@pytest.mark.parametrize("name", FORMATS)
def test_fancy_indexing_ndarray(name):
    a = np.array
    pairs = [
        (a([[1], [2], [3]]), a([3, 4, 2])),
        (a([[1], [2], [3]]), a([[3, 4, 2]])),
        (a([[1, 2, 3]]), a([[3], [4], [2]])),
        (a([1, 2, 3]), a([[3], [4], [2]])),
        (a([[1, 2, 3], [3, 4, 2]]), a([[5, 6, 3], [2, 3, 1]])),
    ]
    rng = np.random.default_rng(1234)
    D = rng.random((5, 7))
    S = tensor(D, name)
    if name not in ("CSR", "CSC"):  # 3-D results: COO's indexing
        pairs.append((a([[[1], [2], [3]], [[3], [4], [2]]]), a([[[5], [6], [3]], [[2], [3], [1]]])))
    for I, J in pairs:  # noqa: E741
        check(S, D, (I, J))
        with pytest.raises(IndexError):
            S[I + 5, J]
        with pytest.raises(IndexError):
            S[I, J + 7]
        if name in ("CSR", "CSC"):
            with pytest.raises(IndexError):
                S[[I, I], :]
            with pytest.raises(IndexError):
                S[:, [J, J]]
        else:
            check(S, D, ([I, I], slice(None)))
            check(S, D, (slice(None), [J, J]))


# ----------------------------------------------------------------------------- awkward data


KEYS = [
    (1, 2), 1, (slice(None), 1), (1, slice(0, 3)), slice(0, 2), (slice(0, 2), slice(1, 4)), (slice(None, None, -1),
    slice(None, None, -2)), [1, 2], ([1, 2], slice(None)), (slice(None), [0, 3]), (slice(None), [3, 0, 0]),
    (1, [0, 3]), ([1, 2], 3), ([1, 2], [0, 3]), ([1, 1, 2], [2, 2, 0]), (np.array([[1], [2]]), [0, 3]),
    (np.array([[1, 2], [0, 1]]), np.array([[0, 1], [2, 3]])), (np.array([[1, 2], [0, 1]]), 1),
    (1, np.array([[1, 2], [0, 1]])), (None, 1), (1, None), (1, 2, None), (Ellipsis, 1), (slice(None), [True, False,
    True, False, True]), ([0, 1], np.array([[1, 2], [0, 1]])), ([0, 0], slice(None)), (slice(None), slice(None)),
    Ellipsis,
]  # fmt: skip
STEPPED = ([2, 0], slice(None, None, -1))  # SciPy's CSR raises ValueError for it (NumPy's result is checked)
KEYS.append(STEPPED)


def dups_and_zeros(dtype: Any = np.float64) -> sp.coo_array:
    """4 x 5, unsorted, duplicates (one summing to zero), explicit zeros, an empty row and column."""
    r = np.array([2, 0, 1, 1, 3, 0, 2, 1, 3, 3, 0])
    c = np.array([4, 1, 2, 2, 0, 1, 3, 0, 0, 4, 3])
    v = np.array([1, 2, 3, 4, 5, 0, 7, 0, 8, 9, -1], dtype=dtype)
    v[10] = 1  # (0, 3) appears once
    r = np.append(r, [1, 1])
    c = np.append(c, [4, 4])
    v = np.append(v, np.array([6, -6], dtype=dtype))  # (1, 4) sums to zero
    return sp.coo_array((v, (r, c)), shape=(4, 5))


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_duplicates_explicit_zeros_and_index_dtypes(name, index_dtype):
    A = dups_and_zeros()
    t = tensor(A, name, index_dtype=index_dtype)
    assert t.index_dtype == index_dtype
    if name in DIRECT:
        assert not t.format.levels[-1].type.unique or name != "COO"
    for key in KEYS:
        got = check(t, A, key, quirk="rows-stepped-cols" if key is STEPPED else "")
        if isinstance(got, ust.Tensor) and plan(t, key).route == "direct":
            assert got.index_dtype == index_dtype
    assert t[1, 2] == 7.0 and t[1, 4] == 0.0  # duplicates summed


@pytest.mark.parametrize("name", FORMATS)
def test_unsorted_csr_with_duplicates(name):
    indptr = np.array([0, 3, 3, 6])
    indices = np.array([3, 0, 3, 4, 1, 1])
    data = np.array([1.0, 2, 3, 4, 0, 5])
    A = sp.csr_array((data, indices, indptr), shape=(3, 5))
    t = tensor(A, name)
    for key in KEYS[:20]:
        if isinstance(key, tuple) and any(isinstance(k, np.ndarray) and k.ndim == 2 for k in key):
            continue
        try:
            np.zeros((3, 5))[key]
        except IndexError:
            continue
        check(t, A, key)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("shape", [(0, 0), (0, 4), (4, 0), (3, 4)])
def test_empty_matrices(name, shape):
    A = sp.csr_array(shape)
    t = tensor(A, name)
    keys = [(slice(None), slice(None)), (slice(0, 2), slice(None)), (slice(None), slice(1, 3)), ([], slice(None)),
            (slice(None), []), ([], []), (slice(None, None, -1), slice(None))]  # fmt: skip
    if shape[0]:
        keys += [0, (1, slice(None)), ([0, 0], slice(None)), (-1, slice(None, None, 2))]
    if shape[1]:
        keys += [(slice(None), 0), (slice(None), [0, -1])]
    if shape[0] and shape[1]:
        keys += [(0, 0), ([0, 1], [1, 0])]
    for key in keys:
        check(t, A, key)
    if shape[0] == 0:
        with pytest.raises(IndexOutOfBoundsError):
            t[0]


@pytest.mark.parametrize("kdtype", [np.int8, np.uint16, np.int32, np.int64, np.uintp])
def test_key_array_dtypes(kdtype):
    B = np.arange(300.0).reshape(3, 100)
    for name in ["CSR", "CSC", "COO", "DIA"]:
        t = tensor(B, name)
        rows = np.array([2, 0], dtype=kdtype)
        cols = np.array([99, 3, 3], dtype=kdtype)
        check(t, B, (rows, slice(None)))
        check(t, B, (slice(None), cols))
        check(t, B, (rows[:, None], cols))
        if np.dtype(kdtype).kind == "i":
            check(t, B, (np.array([-1, -3], dtype=kdtype), slice(None)))


def test_large_coordinates_pointwise():
    """Pointwise keys on hypersparse matrices: the combined key does not depend on the extents."""
    n = 2**40
    for name, shape in [("COO", (n, n)), ("CSR", (6, n)), ("CSC", (n, 6))]:
        m = min(shape)
        r, c = np.array([0, m - 1, 5]), np.array([n - 1, 0, 4])
        if name == "CSC":
            r, c = c, r
        A = sp.coo_array((np.array([1.0, 2, 3]), (r, c)), shape=shape)
        t = tensor(A, name)
        out = t[np.append(r, r[-1]), np.append(c, c[-1] - 1)]
        np.testing.assert_array_equal(dense_of(out), [1.0, 2.0, 3.0, 0.0])
        assert t[int(r[1]), int(c[1])] == 2.0
        np.testing.assert_array_equal(dense_of(t[[int(r[2])], [int(c[2])]]), [3.0])


# ----------------------------------------------------------------------------- formats, routes, explain


@pytest.mark.parametrize(
    ("name", "key", "route", "result"),
    [
        ("CSR", np.s_[1:3], "direct", "CSR"),
        ("CSR", np.s_[:, [1, 2]], "direct", "CSR"),
        ("CSR", 1, "direct", "SparseVector"),
        ("CSC", np.s_[:, [1, 2]], "direct", "CSC"),
        ("CSC", np.s_[1:3, 2:4], "direct", "CSC"),
        ("COO", np.s_[1:3], "direct", "COO"),
        ("COO", np.s_[[1, 2], [1, 2]], "direct", "SparseVector"),
        ("DIA", np.s_[1:3], "via-csr", "CSR"),
        ("DIA", np.s_[:, 1:3], "via-csc", "CSC"),
        ("DIA", np.s_[:, 2], "via-csc", "SparseVector"),
        ("BSR", np.s_[[0, 2]], "via-csr", "CSR"),
        ("BSR", np.s_[:, [0, 2]], "via-csc", "CSC"),
        ("DCSR", np.s_[2, 3], "via-csr", None),
        ("loose", np.s_[::2, ::3], "via-csr", "CSR"),
        ("rowpairs", np.s_[:, ::3], "via-csc", "CSC"),
        ("colmajor-COO", np.s_[1:4, ::-1], "via-csr", "CSR"),
        ("batched", np.s_[1:3], "via-csr", "CSR"),
        ("DIA", np.s_[None], "via-coo", "COO3"),
        ("DCSR", np.s_[[[0, 1]]], "via-coo", "COO3"),
    ],
)
def test_route_and_result_format(name, key, route, result):
    B = np.arange(60.0).reshape(6, 10)
    B[B % 4 == 0] = 0
    t = tensor(B, name)
    d = plan(t, key)
    assert d.route == route
    out = check(t, B, key) if route != "via-coo" else t[key]
    np.testing.assert_array_equal(dense_of(out), B[key])
    if result is None:
        assert np.ndim(out) == 0
    else:
        assert classify(out.format).name == result
        if route == "direct" and result == name:
            assert out.format == t.format
    text = ust.explain("getitem", t, key)
    assert f"route: {route}" in text
    assert f"reason: {d.reason}" in text
    assert text.startswith("operation: getitem")
    if route.startswith("via-"):
        assert f"conversion: A -> {route[4:].upper()} once, first" in text
    else:
        assert "conversion:" not in text


def test_explain_text():
    B = np.arange(50.0).reshape(5, 10)
    t = ust.asarray(sp.csr_array(B), format="DIA")
    text = ust.explain("getitem", t, (slice(None), [1, 2]))
    lines = text.splitlines()
    assert lines[0] == "operation: getitem (t[key], indexed as scipy.sparse arrays are)"
    assert lines[1].startswith("A: DIA (i, j) -> (j - i : compressed, j : range)  shape (5, 10)")
    assert lines[2] == "key: [:, array(2,)] (selects columns)"
    assert lines[3] == "execution space: cpu"
    assert lines[4] == "route: via-csc"
    assert lines[5].startswith("reason: DIA has no index of its own: converted once to CSC")
    assert lines[6] == "conversion: A -> CSC once, first"
    assert lines[7] == "result: CSC (i, j) -> (j : dense, i : compressed) of shape (5, 2)"
    assert lines[8] == "other candidates: via-coo"
    csr = ust.asarray(sp.csr_array(B))
    assert "result: a scalar" in ust.explain("getitem", csr, (1, 2))
    assert "result: a dense array of shape (2,)" in ust.explain("getitem", csr, ([1, 2], [3, 4]))
    assert "result: SparseVector" in ust.explain("getitem", csr, 1)
    assert "result: an error" in ust.explain("getitem", csr, (slice(None), [[1, 2]]))
    assert "selects more than two dimensions" in ust.explain("getitem", t, (slice(None), [[1, 2]]))
    assert "route: direct" in ust.explain("getitem", sp.coo_array(B), 1)  # scipy operands are taken in
    with pytest.raises(IndexOutOfBoundsError):
        ust.explain("getitem", t, (7, 0))


def test_every_route_agrees():
    """Every candidate route (forced) gives NumPy's values; the default is the first candidate."""
    B = np.arange(20.0).reshape(4, 5)
    B[B % 3 == 0] = 0
    for name in FORMATS:
        t = tensor(B, name)
        for key in KEYS:
            d = plan(t, key)
            for route in [d.route, *(r.route for r in d.alternatives)]:
                try:
                    out = getitem(t, key, route=route)
                except InvalidIndexError:
                    assert route in ("direct", "via-csr", "via-csc")  # CSR / CSC limits
                    continue
                np.testing.assert_array_equal(dense_of(out), B[key], err_msg=f"{name} {key} {route}")
    with pytest.raises(ust.UnsupportedError, match="candidates"):
        getitem(tensor(B, "CSR"), 1, route="no-such-route")


def test_rules_cover_both_devices():
    from ust.plan.planner import rules_for

    for dev in ("cpu", "cuda"):
        routes = {r.route for r in rules_for("getitem", dev)}
        assert routes == {"direct", "via-csr", "via-csc", "via-coo"}


def test_parse_key_follows_numpy_result_axes():
    """The result shape is NumPy's, also where SciPy 1.17's differs (a None before index arrays)."""
    D = np.zeros((5, 10))
    for key in [(None, [0, 1], [1, 2]), ([0, 1], None, [1, 2]), ([1, 2], None), (None, 1, [[1, 2]]), (1, None, 2),
                (slice(1, 3), None, [1, 2, 3]), (Ellipsis, None), (np.zeros((5, 10), bool),), ([[0], [1]], [1, 2, 3])]:  # fmt: skip
        assert parse_key(key, D.shape).shape == D[key].shape, key
    k = parse_key((slice(None), [1, -1]), D.shape)
    assert k.selects == "columns" and k.arrays[0].tolist() == [1, 9]
    assert parse_key((1, slice(None)), D.shape).selects == "rows"
    assert parse_key(([[0], [1]], 1), D.shape).selects == "rows"
    assert parse_key((slice(None), [[1]]), D.shape).selects == "nd"
    assert parse_key((None, slice(None)), D.shape).selects == "nd"
    assert parse_key(1, (4,)).selects == ""


def test_tensor_getitem_is_the_registered_operator():
    from ust.tensor.dispatch import OPERATORS

    assert OPERATORS["getitem"] is getitem


# ----------------------------------------------------------------------------- 1-D and n-D tensors


def test_vectors():
    v = np.array([0, 1.0, 0, 2, 3, 0, 0, 4])
    S = sp.coo_array(v)
    t = ust.asarray(S)
    assert plan(t, 1).route == "direct"
    for key in [1, -1, slice(1, 5), slice(None, None, -2), [1, 1, 3], np.array([True, False] * 4), (None, slice(2, 6)),
                (slice(2, 6), None), Ellipsis, (Ellipsis, 3), [[0, 3], [4, 7]]]:  # fmt: skip
        got = t[key]
        ref = S[key]
        np.testing.assert_array_equal(dense_of(got), dense_of(ref))
        assert np.shape(got) == np.shape(ref) == np.shape(v[key])
        assert ust_kind(got) == scipy_kind(ref)
    dense_vec = ust.asarray(v, format="DenseVector")
    assert plan(dense_vec, slice(1, 3)).route == "via-coo"
    np.testing.assert_array_equal(dense_of(dense_vec[1:6:2]), v[1:6:2])
    with pytest.raises(IndexOutOfBoundsError):
        t[8]


@pytest.mark.parametrize("name", ["COO3", "CSF", "Dense3"])
def test_three_dimensions(name):
    rng = np.random.default_rng(3)
    D = rng.integers(-3, 4, size=(3, 4, 5)).astype(np.float64)
    D[rng.random(D.shape) < 0.5] = 0
    t = ust.asarray(D, format=name)
    S = sp.coo_array(D)
    assert plan(t, 1).route == ("direct" if name == "COO3" else "via-coo")
    for key in [(1, 2, 3), 1, (slice(None), 2), (slice(0, 2), slice(None), [1, 4]), ([0, 2], [1, 3], [4, 0]),
                (Ellipsis, 2), (None, 0, slice(None, None, -1)), (D > 1), ([0, 2], slice(None), [1, 3]),
                (1, [[0, 1], [2, 3]], slice(1, 3))]:  # fmt: skip
        got = t[key]
        ref = S[key]
        np.testing.assert_array_equal(dense_of(got), D[key])
        np.testing.assert_array_equal(dense_of(ref), D[key])
        assert np.shape(got) == np.shape(D[key])
        assert ust_kind(got) == scipy_kind(ref)


# ----------------------------------------------------------------------------- properties


@st.composite
def matrices(draw):
    m = draw(st.integers(0, 6))
    n = draw(st.integers(0, 6))
    nnz = draw(st.integers(0, m * n + 4)) if m * n else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rows, cols = rng.integers(0, max(m, 1), nnz), rng.integers(0, max(n, 1), nnz)
    vals = rng.integers(-3, 4, nnz).astype(np.float64)
    A = sp.coo_array((vals, (rows, cols)), shape=(m, n))  # duplicates and explicit zeros possible
    return A, draw(st.sampled_from([*FORMATS, "batched"]))


def axis_index(draw: Any, n: int) -> Any:
    kinds = ["slice", "full", "array", "bool"] + (["int"] if n else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "full":
        return slice(None)
    if kind == "slice":
        bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
        step = draw(st.one_of(st.none(), st.integers(-3, 3).filter(bool)))
        return slice(draw(bound), draw(bound), step)
    if kind == "bool":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    size = draw(st.integers(0, 4))
    return np.array(
        draw(st.lists(st.integers(-n, n - 1), min_size=size, max_size=size)) if n else [], dtype=np.intp
    )


@st.composite
def keys(draw, shape):
    r, c = axis_index(draw, shape[0]), axis_index(draw, shape[1])
    if isinstance(r, np.ndarray) and r.dtype != bool and isinstance(c, np.ndarray) and draw(st.booleans()):
        r = r[:, None]  # the outer form
    key: list[Any] = [r, c]
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, 2)), None)
    return tuple(key)


@given(data=st.data())
def test_random_keys_match_scipy_and_numpy(data):
    A, name = data.draw(matrices())
    key = data.draw(keys(A.shape))
    t = tensor(A, name) if name != "batched" else tensor(A, "batched")
    dense = A.toarray()
    try:
        want = dense[key]
    except IndexError:
        with pytest.raises(IndexError):
            t[key]
        return
    try:
        got = t[key]
    except InvalidIndexError as exc:  # CSR / CSC limits (SciPy's too): a >2-D result
        assert served_as(t, key) in ("CSR", "CSC") and ">2D" in str(exc)
        return
    np.testing.assert_array_equal(dense_of(got), want)
    assert np.shape(got) == np.shape(want)
    quirks = any(k is None for k in key) and any(isinstance(k, np.ndarray) for k in key)
    stepped = isinstance(key[-1], slice) and key[-1].step not in (None, 1)
    if not quirks and not stepped:
        check(t, A, key)
