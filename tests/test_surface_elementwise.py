"""The elementwise / structural half of Tensor's scipy.sparse surface (ust.api.surface):
``eliminate_zeros``, ``sum_duplicates``, ``sort_indices``, ``setdiag``, ``abs``, ``**`` /
``power``, ``conj``, ``real``, ``imag``, the six comparisons, ``bool``, ``mean``,
``count_nonzero``, ``diagonal``, ``reshape``, ``multiply`` and ``dot``.

Patterns ported from SciPy's scipy/sparse/tests/test_base.py (test_eliminate_zeros,
test_sum_duplicates, test_sort_indices, test_setdiag / test_setdiag_comprehensive, test_abs,
test_elementwise_power, test_real / test_imag, test_eq / test_ne / test_lt / test_gt /
test_le / test_ge, test_bool, test_mean, test_count_nonzero, test_diagonal, test_reshape,
test_elementwise_multiply(_broadcast), test_dot_scalar), each compared with SciPy's result on
the same data, for CSR, CSC, COO, BSR, DIA and two user formats (DCSR and a DSL format with a
loose_compressed level), with explicit zeros, duplicates (COO), complex values, empty shapes
and NaN values; the in-place methods leave the caller's arrays unchanged.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import SparseEfficiencyWarning

import ust
from tests.algebra_cases import coo_with_duplicates, matrix
from ust.convert.unpack import unpack
from ust.formats.analysis import entries_unique, lex_sorted
from ust.runtime.errors import InvalidValueError, ShapeError, UnsupportedError, UstError

LOOSE = "(i, j) -> (i : dense, j : loose_compressed)"
FORMATS = ["CSR", "CSC", "COO", "BSR[2,2]", "DIA", "DCSR", LOOSE]
#: scipy's twin of each format (user formats: CSR, scipy's default)
TWIN = {"CSR": "csr", "CSC": "csc", "COO": "coo", "BSR[2,2]": "bsr", "DIA": "dia"}
#: formats whose every stored slot is an entry (no block / diagonal padding)
ENTRY_SLOTS = ["CSR", "CSC", "COO", "DCSR", LOOSE]
OPS = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def scipy_twin(A: Any, name: str) -> Any:
    """A copy of ``A`` in the scipy format that ``name`` is (CSR for user formats)."""
    twin = TWIN.get(name, "csr")
    S = A.tobsr((2, 2)) if twin == "bsr" else A.asformat(twin)
    return S.copy()


def tensor(A: Any, name: str) -> ust.Tensor:
    return ust.asarray(A, format=name)


def dense(x: Any) -> np.ndarray:
    if isinstance(x, ust.Tensor):
        return np.asarray(x.todense())
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


def same(x: Any, y: Any, **kw: Any) -> bool:
    a, b = dense(x), dense(y)
    return a.shape == b.shape and np.allclose(a, b, equal_nan=True, **kw)


def buffers(t: ust.Tensor) -> list[np.ndarray]:
    return list(t.buffers().values())


def copies(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a.copy() for a in arrays]


def untouched(arrays: list[np.ndarray], before: list[np.ndarray]) -> bool:
    return all(np.array_equal(a, b, equal_nan=True) for a, b in zip(arrays, before))


def scipy_arrays(S: Any) -> list[np.ndarray]:
    if S.format == "coo":
        return [S.data, *S.coords]
    if S.format == "dia":
        return [S.data, S.offsets]
    return [S.data, S.indices, S.indptr]


@pytest.fixture(autouse=True)
def _quiet_scipy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseEfficiencyWarning)
        yield


def unsorted_csr(dups: bool = False) -> sp.csr_array:
    """A 4 x 5 CSR with each row's columns out of order (and duplicates), as scipy keeps them."""
    indptr = np.array([0, 3, 3, 5, 7])
    indices = np.array([4, 0, 2, 3, 1, 2, 2]) if dups else np.array([4, 0, 2, 3, 1, 2, 0])
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -6.0 if dups else 7.0])
    A = sp.csr_array((data, indices, indptr), shape=(4, 5))
    assert not A.has_sorted_indices
    return A


# ----------------------------------------------------------------------------- eliminate_zeros


@pytest.mark.parametrize("name", FORMATS)
def test_eliminate_zeros(name: str) -> None:
    A = matrix(1)  # holds one explicit zero
    t = tensor(A, name)
    old, before = buffers(t), copies(buffers(t))
    fmt, nnz0 = t.format, t.nnz
    t.eliminate_zeros()
    assert t.format == fmt and same(t, A)
    assert untouched(old, before)
    if name in ENTRY_SLOTS:
        assert t.nnz == nnz0 - 1 == A.count_nonzero()
    if name != "DIA":  # scipy's dia_array has no eliminate_zeros
        S = scipy_twin(A, name)
        S.eliminate_zeros()
        assert t.nnz == S.nnz and same(t, S)


def test_eliminate_zeros_leaves_the_callers_scipy_arrays() -> None:
    A = matrix(2)
    ref = copies(scipy_arrays(A))
    t = ust.asarray(A)  # shares A's buffers
    t.eliminate_zeros()
    assert untouched(scipy_arrays(A), ref) and A.nnz == ref[0].shape[0]
    S = A.copy()
    S.eliminate_zeros()
    assert t.nnz == S.nnz and np.array_equal(t.values, S.data) and np.array_equal(t.crd(1), S.indices)


def test_eliminate_zeros_bsr_drops_only_all_zero_blocks() -> None:
    M = np.zeros((4, 4))
    M[0, 0], M[2, 3] = 1.0, 2.0
    S = sp.bsr_array(M, blocksize=(2, 2))
    S.data[1] = 0.0  # the second block becomes all zeros
    t = ust.asarray(S)
    t.eliminate_zeros()
    S.eliminate_zeros()
    assert t.nnz == S.nnz == 4 and same(t, S)


def test_eliminate_zeros_coo_keeps_duplicates() -> None:
    C = coo_with_duplicates(3)
    C.data[5] = 0.0
    t = ust.asarray(C)
    t.eliminate_zeros()
    C2 = C.copy()
    C2.eliminate_zeros()
    assert t.nnz == C2.nnz and same(t, C2)


def test_eliminate_zeros_dia_drops_zero_diagonals() -> None:
    S = sp.dia_array((np.array([[1.0, 2, 3], [0, 0, 0]]), np.array([0, 1])), shape=(3, 3))
    t = ust.asarray(S)
    t.eliminate_zeros()
    assert t.format.standard_name == "DIA" and t.crd(0).tolist() == [0] and same(t, S)


# ----------------------------------------------------------------------------- sum_duplicates


def _canonical(t: ust.Tensor) -> bool:
    """Labelled sorted and unique, and really so: strictly increasing level coordinates."""
    ent = unpack(t, keep_zeros=True)
    if ent.n > 1:
        key = np.zeros(ent.n - 1, dtype=bool)
        eq = np.ones(ent.n - 1, dtype=bool)
        for c in ent.lvl:
            key |= eq & (c[1:] > c[:-1])
            eq &= c[1:] == c[:-1]
        if not key.all():
            return False
    return lex_sorted(t.format) and entries_unique(t.format)


@pytest.mark.parametrize("seed", [0, 1])
def test_sum_duplicates_coo(seed: int) -> None:
    C = coo_with_duplicates(seed)
    C.data[1] = -C.data[0]  # two duplicates summing to zero: stored, as scipy's
    C.data[2] = 0.0
    ref = copies(scipy_arrays(C))
    t = ust.asarray(C)
    t.sum_duplicates()
    S = C.copy()
    S.sum_duplicates()
    assert untouched(scipy_arrays(C), ref)
    assert t.nnz == S.nnz and same(t, S) and _canonical(t)
    assert t.format == ust.format("COO")
    assert np.array_equal(t.crd(0), S.row) and np.array_equal(t.crd(1), S.col)
    assert np.allclose(t.values, S.data)


@pytest.mark.parametrize("dups", [False, True])
def test_sum_duplicates_csr(dups: bool) -> None:
    A = unsorted_csr(dups)
    ref = copies(scipy_arrays(A))
    t = ust.asarray(A)
    assert not lex_sorted(t.format)
    t.sum_duplicates()
    S = A.copy()
    S.sum_duplicates()
    assert untouched(scipy_arrays(A), ref)
    assert t.format == ust.format("CSR") and _canonical(t)
    assert np.array_equal(t.pos(1), S.indptr) and np.array_equal(t.crd(1), S.indices)
    assert np.array_equal(t.values, S.data)  # the summed zero stays stored


@pytest.mark.parametrize("name", FORMATS)
def test_sum_duplicates_canonical_is_a_copy(name: str) -> None:
    A = matrix(4)
    t = tensor(A, name)
    old = buffers(t)
    t.sum_duplicates()
    assert t.format == ust.format(name) and same(t, A)
    assert not any(np.shares_memory(a, b) for a in buffers(t) for b in old)


def test_sum_duplicates_bsr_blocks() -> None:
    data = np.arange(1.0, 13.0).reshape(3, 2, 2)
    S = sp.bsr_array((data, np.array([1, 0, 1]), np.array([0, 3, 3])), shape=(4, 4))
    t = ust.asarray(S)
    t.sum_duplicates()
    S2 = S.copy()
    S2.sum_duplicates()
    assert t.format == ust.format("BSR[2,2]") and t.nnz == S2.nnz and same(t, S2)


# ----------------------------------------------------------------------------- sort_indices


def test_sort_indices_csr() -> None:
    A = unsorted_csr()
    ref = copies(scipy_arrays(A))
    t = ust.asarray(A)
    t.sort_indices()
    S = A.copy()
    S.sort_indices()
    assert untouched(scipy_arrays(A), ref)
    assert t.format == ust.format("CSR")
    assert np.array_equal(t.crd(1), S.indices) and np.array_equal(t.values, S.data)


def test_sort_indices_keeps_duplicates() -> None:
    A = unsorted_csr(dups=True)
    t = ust.asarray(A)
    t.sort_indices()
    S = A.copy()
    S.sort_indices()
    assert t.nnz == S.nnz == 7 and np.array_equal(t.crd(1), S.indices) and same(t, S)
    assert lex_sorted(t.format) and not entries_unique(t.format)


def test_sort_indices_bsr() -> None:
    data = np.arange(1.0, 9.0).reshape(2, 2, 2)
    S = sp.bsr_array((data, np.array([1, 0]), np.array([0, 2, 2])), shape=(4, 4))
    t = ust.asarray(S)
    t.sort_indices()
    S.sort_indices()
    assert np.array_equal(t.crd(1), S.indices) and np.array_equal(t.values, S.data.reshape(-1))


def test_sort_indices_coo_and_loose() -> None:
    C = coo_with_duplicates(5)
    t = ust.asarray(C)
    t.sort_indices()
    rows, cols = t.crd(0), t.crd(1)
    order = np.lexsort((cols, rows))
    assert np.array_equal(order, np.arange(rows.shape[0])) and same(t, C) and t.nnz == C.nnz
    u = tensor(matrix(5), LOOSE)
    u.sort_indices()
    assert u.format == ust.format(LOOSE) and same(u, matrix(5))


# ----------------------------------------------------------------------------- setdiag


SETDIAG_CASES = [
    (7.0, 0),
    (7.0, 2),
    (-3.0, -4),
    (0.0, 1),  # explicit zeros
    ([1.0, 2.0, 3.0], 0),  # shorter than the diagonal
    (list(range(1, 20)), -1),  # longer: cut
    (np.arange(1.0, 4.0), 5),
    ([], 0),
    ([5.0], -9),
]


@pytest.mark.parametrize("values, k", SETDIAG_CASES)
@pytest.mark.parametrize("name", FORMATS)
def test_setdiag(name: str, values: Any, k: int) -> None:
    A = matrix(3)
    t = tensor(A, name)
    old, before = buffers(t), copies(buffers(t))
    fmt = t.format
    t.setdiag(values, k)
    S = A.copy()  # scipy's csr (its bsr_array.setdiag fails)
    S.setdiag(values, k)
    assert t.format == fmt and same(t, S)
    assert untouched(old, before)
    if name in ("CSR", "CSC", "COO"):
        S2 = scipy_twin(A, name)
        S2.setdiag(values, k)
        assert t.nnz == S2.nnz
    if name == "DIA":
        S3 = scipy_twin(A, name)
        S3.setdiag(values, k)
        assert same(t, S3)


def test_setdiag_leaves_the_callers_arrays() -> None:
    A = matrix(6)
    ref = copies(scipy_arrays(A))
    t = ust.asarray(A)
    t.setdiag(9.0)
    assert untouched(scipy_arrays(A), ref)
    S = A.copy()
    S.setdiag(9.0)
    assert same(t, S) and t.nnz == S.nnz


def test_setdiag_dia_adds_a_diagonal() -> None:
    S = sp.dia_array(np.diag(np.arange(1.0, 5.0)))
    t = ust.asarray(S)
    t.setdiag(0.0, 2)  # a new, all-zero diagonal is stored, as scipy stores it
    S.setdiag(0.0, 2)
    assert t.format.standard_name == "DIA" and sorted(t.crd(0).tolist()) == sorted(S.offsets.tolist())
    assert t.nnz == S.nnz and same(t, S)


def test_setdiag_coo_with_duplicates_on_the_diagonal() -> None:
    C = sp.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([0, 0, 2]))), shape=(3, 3))
    t = ust.asarray(C)
    t.setdiag([5.0, 6.0])
    C.setdiag([5.0, 6.0])
    assert same(t, C) and t.nnz == C.nnz


def test_setdiag_errors() -> None:
    t = ust.asarray(matrix(1))
    for k in (8, -10, 100):
        with pytest.raises(ShapeError, match="k exceeds") as info:
            t.setdiag(1.0, k)
        assert isinstance(info.value, ValueError)
        with pytest.raises(ValueError, match="k exceeds"):
            matrix(1).setdiag(1.0, k)
    with pytest.raises(ShapeError, match="1-D"):
        t.setdiag(np.ones((2, 2)))
    with pytest.raises(InvalidValueError, match="imaginary"):
        t.setdiag([1 + 2j])
    with pytest.raises(UstError, match="integer"):
        t.setdiag(1.0, 1.5)
    with pytest.raises(ShapeError, match="2-D"):
        ust.asarray(sp.coo_array(np.ones((2, 2, 2)))).setdiag(1.0)
    assert same(t, matrix(1))  # nothing changed


def test_setdiag_empty_and_integer() -> None:
    e = ust.asarray(sp.csr_array((0, 3)))
    e.setdiag(1.0)
    assert e.shape == (0, 3) and e.nnz == 0
    A = sp.csr_array(np.array([[1, 0], [0, 2]], dtype=np.int64))
    t = ust.asarray(A)
    t.setdiag(3.7)  # cast to the tensor's dtype, as scipy's
    A.setdiag(3.7)
    assert t.dtype == np.int64 and same(t, A)


# ----------------------------------------------------------------------------- values mapped


DTYPES = [np.float64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_abs_power_conj_real_imag(name: str, dtype: Any) -> None:
    A = matrix(7, dtype)
    t = tensor(A, name)
    before = copies(buffers(t))
    S = scipy_twin(A, name)
    for got, want in [
        (abs(t), abs(S)),
        (t**2, S**2),
        (t.power(3), S.power(3)),
        (t.power(2, dtype=np.complex64), S.power(2, dtype=np.complex64)),
        (abs(t).power(0.5), abs(S).power(0.5)),
        (t.conj(), S.conj()),
        (t.conjugate(copy=False), S.conjugate(copy=False)),
        (t.real, S.real),
        (t.imag, S.imag),
    ]:
        assert isinstance(got, ust.Tensor) and got.format == t.format
        assert got.dtype == want.dtype and same(got, want)
    assert untouched(buffers(t), before)
    if name in ENTRY_SLOTS:
        assert t.imag.nnz == S.imag.nnz == t.nnz  # zeros stored at every stored position


def test_map_results_share_no_values() -> None:
    A = matrix(8)
    t = ust.asarray(A)
    for r in (abs(t), t**2, t.real, t.imag, t.conj()):
        assert not any(np.shares_memory(a, b) for a in buffers(r) for b in buffers(t))
    assert t.conj(copy=False) is t  # real values: scipy's conj(copy=False) returns self
    c = ust.asarray(matrix(8, np.complex128))
    cc = c.conj(copy=False)
    assert np.shares_memory(cc.crd(1), c.crd(1)) and not np.shares_memory(cc.values, c.values)
    assert np.allclose(cc.values, np.conj(c.values))


def test_abs_and_power_sum_duplicates_first() -> None:
    C = sp.coo_array((np.array([2.0, -3.0, 1.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))
    t = ust.asarray(C)
    for got, want in [(abs(t), abs(C.copy())), (t**2, C.copy() ** 2)]:
        assert same(got, want) and got.nnz == want.nnz == 2
    r = t.real  # linear: no merge, as scipy's
    assert r.nnz == C.real.nnz == 3 and same(r, C.real)


def test_negative_power() -> None:
    A = matrix(9)  # an explicit zero: an entry of CSR, so 0 ** -1 is inf there, as scipy's
    t = ust.asarray(A)
    with np.errstate(divide="ignore"):
        got = dense(t.power(-1))
        want = A.power(-1).toarray()
    assert np.array_equal(got, want) and np.isinf(got).sum() == 1
    with np.errstate(divide="ignore"):
        blocked = [dense(tensor(matrix(9), f).power(-1)) for f in ("DIA", "BSR[2,2]")]
    B = A.copy()
    B.eliminate_zeros()
    with np.errstate(divide="ignore"):
        ref = B.power(-1).toarray()
    for got in blocked:  # padding slots are not entries: they stay 0 (scipy's dia/bsr store inf)
        assert np.array_equal(got, ref) and not np.isinf(got).any()


def test_power_errors() -> None:
    t = ust.asarray(matrix(1))
    with pytest.raises(UnsupportedError, match="zero power") as info:
        t.power(0)
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(NotImplementedError):
        matrix(1).power(0)
    with pytest.raises(UnsupportedError, match="scalar"):
        t ** np.array([1, 2])
    with pytest.raises(UnsupportedError, match="scalar"):
        t**t
    ti = ust.asarray(matrix(1, np.int64))
    with pytest.raises(InvalidValueError, match="negative integer powers") as info2:
        ti**-1
    assert isinstance(info2.value, ValueError)
    with pytest.raises(ValueError), np.errstate(all="ignore"):
        matrix(1, np.int64).power(-1)
    assert (ti**2).dtype == matrix(1, np.int64).power(2).dtype
    with np.errstate(invalid="ignore"):  # negative values: NaN, as NumPy
        assert ti.power(0.5).dtype == abs(matrix(1, np.int64)).power(0.5).dtype == np.float64
    assert ust.asarray(matrix(1, np.int8)).power(2).dtype == np.int8
    F = sp.csr_array(np.array([[2.7, 0], [0, 3.9]]))  # cast to dtype first, then the power
    assert same(ust.asarray(F).power(0.5, dtype=np.int8), F.power(0.5, dtype=np.int8))
    assert same(ust.asarray(F).power(2, dtype=np.float32), F.power(2, dtype=np.float32))


# ----------------------------------------------------------------------------- comparisons


SCALARS = [0, 1, -1, 0.5, -0.25, np.inf, -np.inf]


@pytest.mark.parametrize("name", FORMATS)
def test_compare_scalars(name: str) -> None:
    A = matrix(10)
    t = tensor(A, name)
    before = copies(buffers(t))
    S = scipy_twin(A, name)
    for s in SCALARS:
        for op, fn in OPS.items():
            got, want = fn(t, s), fn(S, s)
            assert isinstance(got, ust.Tensor) and got.dtype == np.bool_ and got.format == t.format
            assert np.array_equal(dense(got), want.toarray()), (op, s)
            assert np.array_equal(dense(got), fn(A.toarray(), s))
            if name in ENTRY_SLOTS:
                assert got.nnz == want.nnz  # only True stored
    assert untouched(buffers(t), before)


def test_compare_warns_where_scipy_warns() -> None:
    A = matrix(11)
    t = ust.asarray(A)
    for expr in ("t == 0", "t != 1", "t < 1", "t >= 0", "t <= 2", "t > -1", "t != np.nan", "t == t"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SparseEfficiencyWarning)
            with pytest.raises(SparseEfficiencyWarning):
                eval(expr, {"t": A, "np": np})
        with pytest.warns(SparseEfficiencyWarning, match="inefficient"):
            eval(expr, {"t": t, "np": np})
    for expr in ("t != 0", "t == 1", "t < 0", "t > 0", "t == np.nan", "t < np.nan", "t != t", "t < t"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SparseEfficiencyWarning)
            r = eval(expr, {"t": t, "np": np})
            assert np.array_equal(dense(r), eval(expr, {"t": A, "np": np}).toarray())


@pytest.mark.parametrize("name", FORMATS)
def test_compare_nan_scalar(name: str) -> None:
    A = matrix(12)
    t = tensor(A, name)
    for op, fn in OPS.items():
        got = fn(t, np.nan)
        assert np.array_equal(dense(got), fn(scipy_twin(A, name), np.nan).toarray())
        assert dense(got).all() == (op == "ne") and got.dtype == np.bool_


def test_compare_stored_nan_follows_numpy() -> None:
    M = matrix(13).toarray()
    M[0, 0], M[2, 4] = np.nan, 0.0
    A = sp.csr_array(M)
    t = ust.asarray(A)
    with np.errstate(invalid="ignore"):
        for s in SCALARS:
            for op, fn in OPS.items():
                got = dense(fn(t, s))
                assert np.array_equal(got, fn(M, s)), (op, s)
                scipy_says = fn(A, s).toarray()
                if bool(fn(0, s)) and op in ("lt", "le", "gt", "ge"):
                    # scipy negates the opposite comparison: True at the stored NaN
                    assert scipy_says[0, 0] and not got[0, 0]
                else:
                    assert np.array_equal(got, scipy_says)


@pytest.mark.parametrize("other", ["CSR", "COO", "DIA", LOOSE])
@pytest.mark.parametrize("name", FORMATS)
def test_compare_sparse(name: str, other: str) -> None:
    A, B = matrix(14), matrix(15)
    B = B + A.multiply(sp.csr_array(np.tri(*A.shape)))  # shared positions, some equal values
    ta, tb = tensor(A, name), tensor(B, other)
    for op, fn in OPS.items():
        got = fn(ta, tb)
        assert isinstance(got, ust.Tensor) and got.format == ta.format and got.dtype == np.bool_
        assert np.array_equal(dense(got), fn(A, B).toarray()), op
        assert np.array_equal(dense(got), fn(A.toarray(), B.toarray()))
    assert dense(ta == ta).all() and not dense(ta != ta).any()
    assert np.array_equal(dense(ta == B), (A == B).toarray())  # a scipy operand


def test_compare_dense_operands() -> None:
    A = matrix(16)
    t = ust.asarray(A)
    D = matrix(17).toarray()
    for op, fn in OPS.items():
        got = fn(t, D)
        assert isinstance(got, np.ndarray) and got.dtype == np.bool_
        assert np.array_equal(got, fn(A, D)), op
        row = D[0]
        assert np.array_equal(fn(t, row), fn(A, row))  # broadcast
    assert np.array_equal(t == D.tolist(), operator.eq(A, D.tolist()))
    with pytest.raises(ShapeError):
        t == np.ones(3)  # noqa: B015


def test_compare_other_shapes_and_types() -> None:
    t = ust.asarray(matrix(1))
    other = ust.asarray(sp.csr_array(np.ones((2, 2))))
    assert (t == other) is False and (t != other) is True
    assert (matrix(1) == sp.csr_array(np.ones((2, 2)))) is False
    with pytest.raises(ShapeError, match="inconsistent shape"):
        t < other  # noqa: B015
    assert (t == None) is False and (t != None) is True  # noqa: E711
    with pytest.raises(TypeError):
        t < None  # noqa: B015
    assert t != "abc"
    with pytest.raises(InvalidValueError):
        ust.api.surface.compare(t, 1, "approx")


def test_compare_complex_and_empty() -> None:
    A = matrix(18, np.complex128)
    t = ust.asarray(A)
    v = complex(A.data[0])
    assert np.array_equal(dense(t == v), operator.eq(A, v).toarray())
    assert np.array_equal(dense(t != 0), (A != 0).toarray())
    for shape in [(0, 4), (3, 0), (0, 0)]:
        e = ust.asarray(sp.csr_array(shape))
        for fn in OPS.values():
            r = fn(e, 0)
            assert r.shape == shape and r.nnz == 0 and r.dtype == np.bool_


def test_bool_results_are_usable_and_arithmetic_refuses_them() -> None:
    A = matrix(19)
    m = ust.asarray(A) > 0
    S = m.to_scipy()
    assert S.dtype == np.bool_ and np.array_equal(S.toarray(), (A > 0).toarray())
    assert np.array_equal(dense(m.convert("COO")), (A > 0).toarray())
    assert m.count_nonzero() == (A > 0).count_nonzero()
    assert same(m.astype(np.float64), (A > 0).astype(np.float64))
    with pytest.raises(UnsupportedError, match="bool"):
        m.sum()
    with pytest.raises(UnsupportedError, match="bool"):
        m + m


# ----------------------------------------------------------------------------- bool()


def test_truth() -> None:
    one = sp.csr_array(np.array([[2.0]]))
    none = sp.csr_array((1, 1))
    zero = sp.csr_array((np.array([0.0]), np.array([0]), np.array([0, 1])), shape=(1, 1))
    for S in (one, none, zero):
        for name in ("CSR", "COO", "DIA", LOOSE):
            if name == "DIA" and S is zero:
                continue  # DIA cannot hold an explicit zero
            assert bool(tensor(S, name)) is bool(scipy_twin(S, name))
    assert bool(ust.asarray(zero)) is True  # an explicit zero is stored: scipy's nnz != 0
    for S in (matrix(1), sp.csr_array((2, 2)), sp.coo_array(np.ones(1))):
        with pytest.raises(ShapeError, match="truth value of an array with more than one element") as info:
            bool(ust.asarray(S))
        assert isinstance(info.value, ValueError)
        with pytest.raises(ValueError, match="truth value"):
            bool(S)


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
@pytest.mark.parametrize("name", FORMATS)
def test_mean(name: str, dtype: Any) -> None:
    A = matrix(20, dtype)
    t = tensor(A, name)
    S = scipy_twin(A, name)
    for axis in (None, 0, 1, -1, -2, (0, 1)):
        for out in (None, np.float32, np.complex128):
            if out is np.float32 and np.dtype(dtype).kind == "c":
                continue
            got, want = t.mean(axis=axis, dtype=out), S.mean(axis=axis, dtype=out)
            assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
            assert np.allclose(got, want, rtol=1e-5), (axis, out)


def test_mean_duplicates_and_empty() -> None:
    C = coo_with_duplicates(21)
    t = ust.asarray(C)
    for axis in (None, 0, 1):
        assert np.allclose(t.mean(axis=axis), C.mean(axis=axis))
    e = ust.asarray(sp.csr_array((0, 3)))
    assert e.mean(axis=1).shape == (0,) == sp.csr_array((0, 3)).mean(axis=1).shape
    for axis in (None, 0):
        with pytest.raises(ShapeError, match="no elements"):
            e.mean(axis=axis)
        with pytest.raises(ZeroDivisionError):  # scipy divides by zero
            sp.csr_array((0, 3)).mean(axis=axis)
    with pytest.raises(ShapeError):
        t.mean(axis=2)


@pytest.mark.parametrize("name", FORMATS)
def test_count_nonzero(name: str) -> None:
    M = matrix(22).toarray()
    M[1, 1] = np.nan  # NaN counts as nonzero
    A = sp.csr_array(M)
    A.data[A.data == 1e300] = 0
    t = tensor(A, name)
    assert t.count_nonzero() == A.count_nonzero() == np.count_nonzero(A.toarray())
    for axis in (0, 1, -1, -2):
        got = t.count_nonzero(axis=axis)
        assert got.dtype == np.int64 and np.array_equal(got, np.count_nonzero(A.toarray(), axis=axis))
        if TWIN.get(name, "csr") in ("csr", "csc", "coo"):
            assert np.array_equal(got, scipy_twin(A, name).count_nonzero(axis=axis))


def test_count_nonzero_sums_duplicates() -> None:
    C = sp.coo_array(
        (np.array([1.0, -1.0, 2.0, 0.0]), (np.array([0, 0, 1, 2]), np.array([0, 0, 1, 2]))), shape=(3, 3)
    )
    t = ust.asarray(C)
    assert t.count_nonzero() == C.copy().count_nonzero() == 1
    assert np.array_equal(t.count_nonzero(axis=0), C.copy().count_nonzero(axis=0))
    e = ust.asarray(sp.csr_array((0, 4)))
    assert e.count_nonzero() == 0 and e.count_nonzero(axis=0).tolist() == [0, 0, 0, 0]
    assert e.count_nonzero(axis=1).shape == (0,)
    v = ust.asarray(sp.coo_array(np.array([1.0, 0, 2])))
    assert v.count_nonzero(axis=0) == 2


@pytest.mark.parametrize("name", FORMATS)
def test_diagonal(name: str) -> None:
    A = matrix(23, np.complex128)
    t = tensor(A, name)
    S = scipy_twin(A, name)
    M, N = A.shape
    for k in range(-M - 1, N + 2):
        got, want = t.diagonal(k), S.diagonal(k)
        assert got.dtype == want.dtype and got.shape == want.shape and np.allclose(got, want), k


def test_diagonal_duplicates_and_errors() -> None:
    C = coo_with_duplicates(24)
    t = ust.asarray(C)
    for k in (-2, 0, 1, 3):
        assert np.allclose(t.diagonal(k), C.diagonal(k))
    with pytest.raises(ShapeError, match="2-D"):
        ust.asarray(sp.coo_array(np.ones((2, 2, 2)))).diagonal()
    with pytest.raises(UstError):
        t.diagonal(0.5)
    assert ust.asarray(sp.csr_array((0, 3))).diagonal().shape == (0,)


# ----------------------------------------------------------------------------- reshape


RESHAPES = [(8, 10), (5, 16), (80,), (2, 5, 8), (-1, 4), (16, -1), (1, 80), (80, 1)]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("name", FORMATS)
def test_reshape(name: str, order: str) -> None:
    A = matrix(25)
    t = tensor(A, name)
    before = copies(buffers(t))
    S = scipy_twin(A, name)
    for shape in RESHAPES:
        got = t.reshape(shape, order=order)
        want = S.reshape(shape, order=order)
        assert got.shape == want.shape and same(got, want), shape
        if got.ndim == 2 and name in ENTRY_SLOTS:
            assert got.format == t.format and got.nnz == want.nnz  # explicit zero kept
        elif got.ndim != 2 or name in ("DIA", "BSR[2,2]"):
            assert got.format.standard_name in ("COO", "COO3", "SparseVector")
            assert got.nnz == (A.nnz if name in ENTRY_SLOTS else A.count_nonzero())  # no padding
    assert same(t.reshape(8, 10), S.reshape(8, 10))  # ints instead of one tuple
    assert untouched(buffers(t), before)


def test_reshape_same_shape_copy_and_errors() -> None:
    A = matrix(26)
    t = ust.asarray(A)
    assert t.reshape(A.shape) is t and t.reshape(-1, 8) is t
    c = t.reshape(A.shape, copy=True)
    assert c is not t and not any(np.shares_memory(a, b) for a in buffers(c) for b in buffers(t))
    r = t.reshape((8, 10), copy=True)
    assert not any(np.shares_memory(a, b) for a in buffers(r) for b in buffers(t))
    for bad in [(7, 10), (-1, -1), (-1, 7), (3, 0)]:
        with pytest.raises(ShapeError):
            t.reshape(bad)
        with pytest.raises(ValueError):
            A.reshape(bad)
    with pytest.raises(InvalidValueError, match="'order' must be 'C' or 'F'"):
        t.reshape(8, 10, order="X")
    with pytest.raises(UstError):
        t.reshape(2.5, 32)
    C = coo_with_duplicates(27)  # duplicates stay duplicates
    got = ust.asarray(C).reshape(4, 20)
    assert got.nnz == C.nnz and same(got, C.reshape(4, 20))
    e = ust.asarray(sp.csr_array((0, 6)))
    assert e.reshape(3, 0).shape == (3, 0) and e.reshape(-1, 2).shape == (0, 2)


# ----------------------------------------------------------------------------- multiply / dot


@pytest.mark.parametrize("name", FORMATS)
def test_multiply_scalar_and_dense(name: str) -> None:
    A = matrix(28)
    t = tensor(A, name)
    before = copies(buffers(t))
    S = scipy_twin(A, name)
    D = matrix(29).toarray() + 1.0
    for other in (
        2.5,
        np.float32(2),
        D,
        D[0],
        D[:1],
        D[:, :1],
        np.array([[3.0]]),
        D.astype(np.complex128) * 1j,
    ):
        got, want = t.multiply(other), S.multiply(other)
        assert isinstance(got, ust.Tensor) and sp.issparse(want)
        assert got.format == t.format and same(got, want)
    mask = D > 1.5
    assert same(t.multiply(mask), S.multiply(mask))
    assert untouched(buffers(t), before)


def test_multiply_dense_broadcasting_results() -> None:
    A = matrix(30)
    D = matrix(31).toarray() + 1.0
    row = A[[2]]  # a (1, 8) sparse row
    t = ust.asarray(row)
    got, want = t.multiply(D), row.multiply(D)  # grows to (10, 8)
    assert isinstance(got, ust.Tensor) and got.shape == want.shape and same(got, want)
    col = A[:, [1]]
    got, want = ust.asarray(col).multiply(D), col.multiply(D)
    assert got.shape == want.shape and same(got, want)
    D3 = np.ones((2, *A.shape))
    got3 = ust.asarray(A).multiply(D3)  # more dimensions: dense, as scipy's
    assert isinstance(got3, np.ndarray) and np.allclose(got3, A.multiply(D3))
    one = sp.csr_array(np.array([[2.0]]))
    got1 = ust.asarray(one).multiply(D)
    assert isinstance(got1, np.ndarray) and np.allclose(got1, one.multiply(D))
    with pytest.raises(ShapeError, match="inconsistent shapes"):
        ust.asarray(A).multiply(np.ones(3))


@pytest.mark.parametrize("name", ["CSR", "COO", "DIA", LOOSE])
def test_multiply_sparse_broadcasting(name: str) -> None:
    A, B = matrix(32), matrix(33)
    t = tensor(A, name)
    cases = [
        (A, B),
        (A, B[[4]]),  # times a row
        (A, B[:, [2]]),  # times a column
        (A[[1]], B),  # a row times a matrix
        (A[:, [0]], B[[4]]),  # a column times a row: the outer product
        (A, sp.csr_array(np.array([[3.0]]))),
        (sp.csr_array(np.array([[3.0]])), B),
    ]
    for X, Y in cases:
        tx = t if X is A else tensor(X, "CSR")
        got, want = tx.multiply(tensor(Y, "COO")), X.multiply(Y)
        assert isinstance(got, ust.Tensor) and got.shape == want.shape and same(got, want)
        got2 = tx.multiply(Y)  # a scipy operand
        assert same(got2, want)
    with pytest.raises(ShapeError, match="inconsistent shapes"):
        t.multiply(tensor(B[:3, :3], "CSR"))
    with pytest.raises(ValueError):
        A.multiply(B[:3, :3])


def test_multiply_complex_and_duplicates() -> None:
    A = matrix(34, np.complex128)
    C = coo_with_duplicates(35)
    t, c = ust.asarray(A), ust.asarray(C)
    assert same(t.multiply(c), A.multiply(C))
    assert same(c.multiply(C.tocsr()[[1]]), C.multiply(C.tocsr()[[1]]))


@pytest.mark.parametrize("name", FORMATS)
def test_dot(name: str) -> None:
    A = matrix(36)
    t = tensor(A, name)
    S = scipy_twin(A, name)
    x = np.arange(A.shape[1], dtype=np.float64)
    X = np.ones((A.shape[1], 3))
    B = matrix(37).T
    assert same(t.dot(2.0), S.dot(2.0)) and isinstance(t.dot(2.0), ust.Tensor)
    assert np.allclose(t.dot(x), S.dot(x)) and np.allclose(t.dot(X), S.dot(X))
    got = t.dot(ust.asarray(B))
    assert isinstance(got, ust.Tensor) and same(got, S.dot(B))


# ----------------------------------------------------------------------------- empty shapes


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0, 0)])
def test_empty_shapes(shape: tuple[int, int]) -> None:
    S = sp.csr_array(shape)
    t = ust.asarray(S)
    for fn in (abs, lambda x: x**2, lambda x: x.real, lambda x: x.imag, lambda x: x.conj()):
        r = fn(t)
        assert r.shape == shape and r.nnz == 0
    for method in ("eliminate_zeros", "sum_duplicates", "sort_indices"):
        u = ust.asarray(S)
        getattr(u, method)()
        assert u.shape == shape and u.nnz == 0
    assert t.count_nonzero() == 0
    assert t.diagonal().shape == S.diagonal().shape
    assert t.reshape(shape[::-1]).shape == shape[::-1]
    assert t.multiply(np.ones(shape)).shape == shape
