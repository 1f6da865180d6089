"""Conversions that must refuse or stay small: int32 that cannot hold the result (never a
wrapped index), hypersparse shapes (O(nnz) memory for O(nnz) formats, a ShapeError naming the
bytes where O(extent) storage is inherent, never a raw MemoryError), and the one default
index-dtype rule (docs/storage.md, "Index dtype" and "Storage size")."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.support import SPARSE_2D, STANDARD_2D
from ust.convert import asarray
from ust.runtime.errors import ShapeError
from ust.tensor import Tensor
from ust.tensor.limits import I32_MAX, min_storage_bytes

#: Formats whose levels are all compressed / singleton: O(nnz) storage at any shape.
HYPERSPARSE_2D = ["COO", "DCSR", "DCSC"]
#: Formats with a dense or range level (extent-sized buffers) in the standard table.
EXTENT_2D = [f for f in STANDARD_2D if f not in HYPERSPARSE_2D]

_MiB = 1 << 20


def _traced(fn: Callable[[], Any]) -> tuple[Any, int, float]:
    """``fn()``, the peak of traced allocations during it (NumPy reports to tracemalloc) and
    the seconds it took."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out, peak, time.perf_counter() - t0


def _raises_small(exc: type[Exception], fn: Callable[[], Any], match: str) -> pytest.ExceptionInfo[Any]:
    """``fn`` raises ``exc`` (matching ``match``) at once, having allocated almost nothing."""
    tracemalloc.start()
    try:
        with pytest.raises(exc, match=match) as info:
            fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not isinstance(info.value, MemoryError)
    assert peak < 16 * _MiB, peak
    return info


# ----------------------------------------------------------------------------- item 3: int32

#: A width divisible by every block size of the table (2 and 3), far beyond int32.
W = 6 * 2**31
#: Formats whose stored coordinates are the rows: refused for the tall matrix instead.
_BY_ROWS = {"CSC", "BSC[2,2]"}


def _wide(fmt: str, index: Any = np.int64) -> Any:
    """A 2 x W COO with entries in the first and the last column (W x 2 for row-stored formats)."""
    r = np.array([0, 1], dtype=index)
    c = np.array([0, W - 1], dtype=index)
    if fmt in _BY_ROWS:
        return sp.coo_array((np.array([1.0, 2.0]), (c, r)), shape=(W, 2))
    return sp.coo_array((np.array([1.0, 2.0]), (r, c)), shape=(2, W))


@pytest.mark.parametrize("source", ["scipy-coo", "scipy-csr", "tensor"])
@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_int32_that_cannot_hold_the_result_is_refused(fmt: str, source: str) -> None:
    A = _wide(fmt)
    if source == "scipy-csr":
        A = A.tocsr() if A.shape[0] == 2 else A.tocsc()
    elif source == "tensor":
        A = asarray(A, "COO")  # a ust COO (int64, O(nnz) at this shape)
    before = [np.array(a, copy=True) for a in (getattr(A, "coords", ()) or ())]
    info = _raises_small(ShapeError, lambda: asarray(A, fmt, index_dtype=np.int32), "int64")
    assert "int32" in str(info.value)
    for a, b in zip(getattr(A, "coords", ()) or (), before):  # the caller's arrays are untouched
        np.testing.assert_array_equal(a, b)


def test_int32_wide_coo_regression() -> None:
    """The issue's case: crd(1) of a 2 x 2**33 matrix was [0, -1] (or a 64 GiB allocation)."""
    A = sp.coo_array(([1.0, 2.0], ([0, 1], [0, 2**33 - 1])), shape=(2, 2**33))
    for fmt in ("COO", "CSR", "DCSR", "DCSC"):
        _raises_small(ShapeError, lambda f=fmt: asarray(A, format=f, index_dtype=np.int32), "int64")
    t = asarray(A, "COO")  # without index_dtype: int64, exact
    assert t.index_dtype == np.int64
    np.testing.assert_array_equal(t.crd(1), [0, 2**33 - 1])
    t64 = asarray(A, "DCSR", index_dtype=np.int64)
    np.testing.assert_array_equal(t64.crd(1), [0, 2**33 - 1])


def test_int32_holds_what_it_can() -> None:
    """No refusal where int32 holds the result (int64 source buffers narrowed exactly)."""
    A = sp.coo_array(([1.0, 2.0], ([0, 1], [0, 5])), shape=(2, 6))
    for fmt in STANDARD_2D:
        t = asarray(A, fmt, index_dtype=np.int32)
        assert t.index_dtype == np.int32
        np.testing.assert_array_equal(t.todense(), A.toarray())


def test_int32_same_format_cast_is_checked() -> None:
    """``asarray(x, index_dtype=int32)`` with no format casts in place of a conversion."""
    A = _wide("COO").tocsr()
    _raises_small(ShapeError, lambda: asarray(A, index_dtype=np.int32), "int64")
    t = asarray(A)
    _raises_small(ShapeError, lambda: t.convert(t.format, index_dtype=np.int32), "int64")


def test_int32_positions_need_nse_to_fit() -> None:
    """nse > 2**31 - 1 needs int64 positions: refused before any value slot is allocated."""
    A = sp.coo_array(([1.0], ([0], [0])), shape=(2**16, 2**16))
    for fmt in ("DenseRowMajor", "DenseColMajor"):
        _raises_small(ShapeError, lambda f=fmt: asarray(A, f, index_dtype=np.int32), "value slots")
    B = sp.coo_array(([1.0], ([0], [0])), shape=(2, 2**31 + 2))
    _raises_small(ShapeError, lambda: asarray(B, "CROW", index_dtype=np.int32), "int64")


def test_tensor_constructor_refuses_a_wrapping_cast() -> None:
    crd = [np.array([0, 1], dtype=np.int64), np.array([0, W - 1], dtype=np.int64)]
    pos = [np.array([0, 2], dtype=np.int64), None]
    vals = np.array([1.0, 2.0])
    with pytest.raises(ShapeError, match="int64"):
        Tensor((2, W), "COO", vals, pos=pos, crd=crd, index_dtype=np.int32)
    t = Tensor((2, W), "COO", vals, pos=pos, crd=crd)  # kept int64
    assert t.index_dtype == np.int64 and int(t.crd(1)[-1]) == W - 1
    assert crd[1].dtype == np.int64  # the caller's arrays are untouched


def test_int32_refusal_from_dense_source() -> None:
    """A dense source cannot reach 2**31 coordinates cheaply; its nse can outgrow int32 in a
    target with a dense level over a long dimension, checked before any work."""
    d = np.zeros((4, 6))
    d[1, 2] = 5.0
    for fmt in STANDARD_2D:
        t = asarray(d, fmt, index_dtype=np.int32)
        assert t.index_dtype == np.int32
        np.testing.assert_array_equal(t.todense(), d)


def test_int32_refusal_from_torch() -> None:
    torch = pytest.importorskip("torch")
    idx = torch.tensor([[0, 1], [0, W - 1]], dtype=torch.int64)
    x = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0]), size=(2, W))
    for fmt in ("COO", "CSR", "DCSR"):
        with pytest.raises(ShapeError, match="int64"):
            asarray(x, fmt, index_dtype=np.int32)
    t = asarray(x, "COO")
    assert t.index_dtype == np.int64 and int(t.crd(1)[-1]) == W - 1


# ----------------------------------------------------------------------------- item 7: hypersparse

N40 = 2**40


def _hyper_coo(n: int = N40, index: Any = np.int64) -> Any:
    """Ten entries (one duplicate pair, unsorted) of an n x n matrix, as a non-canonical scipy COO."""
    r = np.array([5, n // 2, 5, 7, n - 1, 0, n // 3, 7, n // 2, 3], dtype=index)
    c = np.array([3, 1, 3, n - 1, 0, n // 5, 2, 8, n // 7, n - 2], dtype=index)
    return sp.coo_array((np.arange(1.0, 11.0), (r, c)), shape=(n, n))


def _canonical(A: Any, by_column: bool = False) -> Any:
    B = sp.coo_array((A.data, A.coords[::-1] if by_column else A.coords), shape=A.shape)
    B.sum_duplicates()  # scipy's canonical COO (sorted by (row, col)), any shape
    return B


def _expected(A: Any, fmt: str) -> dict[str, np.ndarray]:
    """The exact buffers of ``fmt`` from scipy's canonical COO (DCSC: of the transpose)."""
    B = _canonical(A, by_column=fmt == "DCSC")
    first, second = B.coords
    n = first.shape[0]
    if fmt == "COO":
        return {"pos0": np.array([0, n]), "crd0": first, "crd1": second, "values": B.data}
    lines, counts = np.unique(first, return_counts=True)
    return {
        "pos0": np.array([0, lines.shape[0]]),
        "crd0": lines,
        "pos1": np.concatenate([[0], np.cumsum(counts)]),
        "crd1": second,
        "values": B.data,
    }


def _assert_exact(t: Tensor, expected: dict[str, np.ndarray]) -> None:
    got = {k: np.asarray(v) for k, v in t.buffers().items()}
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
        if k != "values":
            assert got[k].dtype == t.index_dtype


def _sources(A: Any) -> dict[str, Callable[[], Any]]:
    return {
        "scipy-coo": lambda: A,
        "scipy-coo-canonical": lambda: _canonical(A),
        "tensor-coo": lambda: asarray(A),
        "tensor-dcsr": lambda: asarray(A, "DCSR"),
        "tensor-dcsc": lambda: asarray(A, "DCSC"),
    }


@pytest.mark.parametrize("source", list(_sources(_hyper_coo())))
@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_targets_convert_in_o_nnz(fmt: str, source: str) -> None:
    A = _hyper_coo()
    src = _sources(A)[source]()
    t, peak, secs = _traced(lambda: asarray(src, fmt))
    assert peak < 4 * _MiB, peak  # ten entries: kilobytes, never per-row buffers
    assert secs < 5.0
    assert t.shape == (N40, N40) and t.index_dtype == np.int64
    _assert_exact(t, _expected(A, fmt))


@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_2_26_takes_no_per_row_memory(fmt: str) -> None:
    """The issue's second case: 512 MiB for 10 entries of a 2**26 x 2**26 COO conversion."""
    A = _hyper_coo(2**26, np.int32)
    t, peak, _ = _traced(lambda: asarray(A, fmt))
    assert peak < 2 * _MiB, peak
    assert t.index_dtype == np.int32  # the source's
    _assert_exact(t, _expected(A, fmt))


@pytest.mark.parametrize("fmt", EXTENT_2D)
def test_extent_sized_targets_refuse_with_the_bytes(fmt: str) -> None:
    A = _hyper_coo(3 * N40)  # divisible by every block size of the table
    info = _raises_small(ShapeError, lambda: asarray(A, fmt), "bytes")
    msg = str(info.value)
    assert "DCSR" in msg  # it names a format that does hold the matrix
    name = ust.format(fmt).standard_name or fmt
    assert name.split("[")[0] in msg


def test_min_storage_bytes_names_what_dominates() -> None:
    csr = ust.format("CSR")
    nbytes, what = min_storage_bytes(csr, (N40, N40), 10, 8, 8)
    assert what == "pos(1)" and nbytes == 8 * (N40 + 1) + 8
    assert min_storage_bytes(ust.format("DCSR"), (N40, N40), 10, 8, 8)[0] < 100
    nbytes, what = min_storage_bytes(ust.format("DIA"), (N40, N40), 10, 8, 8)
    assert what == "values" and nbytes >= 8 * N40


@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_transpose_matmul_export(fmt: str) -> None:
    A = _hyper_coo()
    t = asarray(A, fmt)
    # .T is a view at any shape; converting it stays O(nnz)
    tt, peak, _ = _traced(lambda: t.T.convert("COO"))
    assert peak < 4 * _MiB
    _assert_exact(tt, _expected(A.T, "COO"))
    # sparse @ sparse needs row pointers: a ShapeError naming the bytes, never a MemoryError
    _raises_small(ShapeError, lambda: t @ t, "bytes")
    _raises_small(ShapeError, lambda: t.T @ t, "bytes")
    # to_scipy: a canonical scipy COO, fine at any shape
    S, peak, _ = _traced(t.to_scipy)
    assert peak < 4 * _MiB
    ref = _canonical(A)  # canonical: by (row, col), whatever the tensor's level order
    assert S.format == "coo" and S.shape == A.shape
    np.testing.assert_array_equal(S.coords[0], ref.coords[0])
    np.testing.assert_array_equal(S.coords[1], ref.coords[1])
    assert S.data.tobytes() == ref.data.tobytes()
    # a dense copy is refused the same way
    _raises_small(ShapeError, t.todense, "bytes")


def test_issue_hypersparse_regressions() -> None:
    """The issue's calls: each raised a raw MemoryError of 8.00 TiB."""
    A = _hyper_coo()
    t = asarray(A, format="COO")
    assert t.nse == 9
    assert t.T.shape == (N40, N40)
    with pytest.raises(ShapeError, match="bytes"):
        t @ t
    assert asarray(_wide("COO"), format="COO").crd(1)[-1] == W - 1


def test_caller_arrays_unmodified_by_hypersparse_conversions() -> None:
    A = _hyper_coo()
    coords = [c.copy() for c in A.coords]
    data = A.data.copy()
    for fmt in HYPERSPARSE_2D:
        asarray(A, fmt)
    for a, b in zip(A.coords, coords):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(A.data, data)
    assert not A.has_canonical_format


def test_sorting_by_comparison_matches_counting() -> None:
    """The general path picks a comparison sort past max(4 nnz, 2**16) buckets: the same
    buffers as scipy for every standard format at a moderate, non-hypersparse shape too."""
    rng = np.random.default_rng(3)
    A = sp.random_array((300, 198), density=0.02, random_state=rng, format="coo")
    for fmt in STANDARD_2D:
        t = asarray(A, fmt, max_padding=10**6)
        np.testing.assert_array_equal(t.todense(), A.toarray())


# ----------------------------------------------------------------------------- item 9: default dtype


def _with_index(A: Any, itype: Any) -> Any:
    B = A.copy()
    for name in ("indices", "indptr", "offsets"):
        if hasattr(B, name):
            setattr(B, name, getattr(B, name).astype(itype))
    if B.format == "coo":
        B.coords = tuple(c.astype(itype) for c in B.coords)
    return B


_SMALL = sp.random_array((12, 18), density=0.3, random_state=0, format="coo")


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("source", ["csr", "csc", "coo", "bsr", "dia"])
@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_default_index_dtype_is_the_sources(fmt: str, source: str, itype: Any) -> None:
    A = _SMALL.tobsr((2, 3)) if source == "bsr" else _SMALL.asformat(source)
    A = _with_index(A, itype)
    t = asarray(A, fmt)
    assert t.index_dtype == np.dtype(itype), (fmt, source)
    for b in t.buffers().values():
        if b is not t.values:
            assert b.dtype == np.dtype(itype)
    np.testing.assert_array_equal(t.todense(), _SMALL.toarray())
    # converting on keeps it too, through every route
    for other in SPARSE_2D:
        assert t.convert(other).index_dtype == np.dtype(itype)


@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_default_index_dtype_of_dense_sources(fmt: str) -> None:
    """No index buffers: int32 when every extent and count fits (scipy's rule)."""
    t = asarray(_SMALL.toarray(), fmt)
    assert t.index_dtype == np.int32
    t64 = asarray(Tensor((12, 18), "DenseRowMajor", _SMALL.toarray().ravel(), index_dtype=np.int64), fmt)
    assert t64.index_dtype == np.int64


@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_explicit_index_dtype_wins(fmt: str) -> None:
    for src, want in ((np.int64, np.int32), (np.int32, np.int64)):
        t = asarray(_with_index(_SMALL.tocsr(), src), fmt, index_dtype=want)
        assert t.index_dtype == np.dtype(want)
        np.testing.assert_array_equal(t.todense(), _SMALL.toarray())


def test_batched_nse_counts_every_member() -> None:
    """Documented: nse is values.size over all members (capacity padding included)."""
    x = np.zeros((3, 4, 5))
    x[0, 1, 2] = 1.0
    x[2, 0, 0] = 2.0
    x[2, 3, 4] = 3.0
    t = asarray(x, "BatchedCSR")
    assert t.nse == t.values.size == 3 * t.values.shape[1]
    assert t.nnz == 3
    assert "MLIR" in (Tensor.nse.__doc__ or "")


def test_limits_constant() -> None:
    assert np.iinfo(np.int32).max == I32_MAX


# ----------------------------------------------------------------------------- non-finite and signed values

#: A quiet NaN with a payload: copied, its bits survive; computed with, they may not.
NAN_PAYLOAD = np.array([0x7FF8000000000123], dtype=np.uint64).view(np.float64)[0]


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint64)


def test_structured_keeps_nan_and_inf_entries_exactly() -> None:
    """A NaN entry scored NaN and lost its structured[2, 4] slot to padding."""
    a = np.zeros((2, 8))
    a[0, 0], a[0, 6] = NAN_PAYLOAD, -np.inf  # block (0, 0): one NaN; block (0, 1): -inf
    a[1, 1], a[1, 3] = np.inf, NAN_PAYLOAD  # block (1, 0): inf and NaN
    a[1, 4], a[1, 7] = -2.0, NAN_PAYLOAD  # block (1, 1): a finite value and NaN
    t = asarray(a, "NM[2,4]")
    got = t.buffers()
    np.testing.assert_array_equal(got["crd2"], [0, 1, 0, 2, 1, 3, 0, 3])
    want = np.array([NAN_PAYLOAD, 0.0, 0.0, -np.inf, np.inf, NAN_PAYLOAD, -2.0, NAN_PAYLOAD])
    np.testing.assert_array_equal(_bits(got["values"]), _bits(want))
    # the stored entries are SciPy's (the padding is explicit zeros, as in the format)
    ref = sp.csr_array(a)
    assert np.isnan(ref.data).sum() == 3
    np.testing.assert_array_equal(_bits(t.todense()), _bits(a))
    csr = t.convert("CSR").to_scipy()
    np.testing.assert_array_equal(_bits(csr.data[csr.data != 0]), _bits(ref.data))


def test_structured_prune_ranks_nan_then_inf_first() -> None:
    b = np.array([[1.0, np.inf, 5.0, NAN_PAYLOAD], [7.0, -np.inf, np.inf, 8.0]])
    t = asarray(b, "NM[2,4]", prune=True)
    np.testing.assert_array_equal(t.crd(2), [1, 3, 1, 2])
    want = np.array([np.inf, NAN_PAYLOAD, -np.inf, np.inf])
    np.testing.assert_array_equal(_bits(t.values), _bits(want))
    c = np.array([[1 + 1j, complex(np.nan, 0.0), 2.0, 0.0]])
    tc = asarray(c, "NM[2,4]", prune=True)
    np.testing.assert_array_equal(tc.crd(2), [1, 2])
    assert np.isnan(tc.values[0]) and tc.values[1] == 2.0


_SIGNED = np.array([[-0.0, 1.0, np.inf, 0.0], [NAN_PAYLOAD, -np.inf, -0.0, -3.0], [0.0, -0.0, 2.0, -0.0]])


@pytest.mark.parametrize("order", ["C", "F"])
def test_dense_round_trips_keep_signed_zeros_and_nan_payloads(order: str) -> None:
    """``asarray(x, format="DenseColMajor")`` scattered x's nonzeros into zeros: -0.0 became 0.0."""
    x = np.array(_SIGNED, order=order)
    before = x.copy()
    for first in ("DenseRowMajor", "DenseColMajor"):
        t = asarray(x, format=first)
        np.testing.assert_array_equal(_bits(t.todense()), _bits(_SIGNED), err_msg=first)
        for second in ("DenseRowMajor", "DenseColMajor"):
            u = t.convert(second)
            d = u.todense()
            np.testing.assert_array_equal(np.signbit(d), np.signbit(_SIGNED), err_msg=f"{first}->{second}")
            np.testing.assert_array_equal(_bits(d), _bits(_SIGNED), err_msg=f"{first}->{second}")
    np.testing.assert_array_equal(_bits(x), _bits(before))  # the caller's array is untouched


@pytest.mark.parametrize("fmt", SPARSE_2D)
def test_a_dense_negative_zero_is_no_entry_of_a_sparse_target(fmt: str) -> None:
    """SciPy stores nothing for -0.0 (it equals 0); the non-zero values are bit-exact."""
    t = asarray(_SIGNED, format=fmt)
    ref = sp.csr_array(_SIGNED)
    vals = np.asarray(t.values).reshape(-1)
    assert not (np.signbit(vals) & (vals == 0)).any()  # no slot holds the -0.0
    d = t.todense()
    np.testing.assert_array_equal(_bits(d), _bits(ref.toarray()))
    assert not np.signbit(d[_SIGNED == 0]).any()


@pytest.mark.parametrize("fmt", ["COO", "CSR", "CSC", "DCSR", "DCSC", "CROW", "CCOL"])
def test_stored_negative_zero_entries_survive_to_dense(fmt: str) -> None:
    """An explicit -0.0 entry (and a NaN payload) of a sparse tensor is copied, never added to 0."""
    S = sp.coo_array(
        (np.array([-0.0, NAN_PAYLOAD, -np.inf, 3.0]), (np.array([0, 0, 1, 2]), np.array([0, 2, 1, 3]))),
        shape=(3, 4),
    )
    t = asarray(S, format=fmt)
    want = np.zeros((3, 4))
    want[0, 0], want[0, 2], want[1, 1], want[2, 3] = -0.0, NAN_PAYLOAD, -np.inf, 3.0
    for d in (t.todense(), t.convert("DenseRowMajor").todense(), t.convert("DenseColMajor").todense()):
        np.testing.assert_array_equal(_bits(d), _bits(want))


# ----------------------------------------------------------------------------- empty dense results


@pytest.mark.parametrize("shape", [(0, 2**62), (2**62, 0)])
@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_todense_of_an_unrepresentable_empty_shape_is_a_shape_error(fmt: str, shape: tuple[int, int]) -> None:
    """NumPy itself refuses ``np.zeros((0, 2**62))`` (its byte span overflows int64)."""
    with pytest.raises(ValueError, match="too big"):
        np.zeros(shape)
    t = asarray(sp.coo_array(shape, dtype=np.float64), format=fmt)
    info = _raises_small(ShapeError, t.todense, "bytes")
    assert "cannot be represented" in str(info.value)


_EMPTY_CASES = [
    *((f, s) for f in HYPERSPARSE_2D for s in ((0, 2**59), (2**59, 0))),
    ("CSR", (0, 2**59)),  # (2**59, 0) as CSR: a pos of 2**59 + 1 entries, refused on conversion
    ("CSC", (2**59, 0)),
]


@pytest.mark.parametrize(("fmt", "shape"), _EMPTY_CASES)
def test_todense_of_a_representable_empty_shape_is_empty(fmt: str, shape: tuple[int, int]) -> None:
    """An empty result has no entries to read: no O(extent) work (SciPy's CSC toarray took it)."""
    t = asarray(sp.coo_array(shape, dtype=np.float64), format=fmt)
    d, peak, _ = _traced(t.todense)
    assert peak < _MiB, peak
    assert d.shape == np.zeros(shape).shape and d.dtype == np.float64


@pytest.mark.parametrize("fmt", ["DIA", "DIAI", "CROW", "NM[2,4]", "CSR", "BSR[2,2]"])
def test_empty_tensor_of_an_absurd_width_converts(fmt: str) -> None:
    """No entries, 2^62 columns: position keys are formed in a dtype that holds the extent."""
    t = asarray(sp.coo_array((0, 2**62)), format=fmt)
    assert t.nse == 0 and t.shape == (0, 2**62)
    if fmt == "DIA":  # SciPy's dia_array would need a (0, 2^62) NumPy array, which cannot exist
        with pytest.raises(ShapeError, match="dia_array"):
            t.to_scipy()
