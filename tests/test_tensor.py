"""ust.Tensor: construction from buffers, validation, facts, repr, copies, casts, moves."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ust.convert import asarray
from ust.runtime.errors import DeviceError, FormatError, ShapeError, UnsupportedError
from ust.tensor import Tensor

M = np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 0, 0, 5]])
INDPTR = np.array([0, 2, 3, 5], dtype=np.int32)
INDICES = np.array([0, 2, 2, 0, 3], dtype=np.int32)
DATA = np.array([1.0, 2, 3, 4, 5])


def test_from_buffers_shares_and_reports() -> None:
    t = Tensor.from_buffers((3, 4), "CSR", DATA, pos={1: INDPTR}, crd={1: INDICES})
    assert t.shape == (3, 4) and t.ndim == 2
    assert t.format.standard_name == "CSR"
    assert t.dtype == np.float64 and t.index_dtype == np.int32
    assert t.device == "cpu"
    assert t.pos(0) is None and t.crd(0) is None
    assert t.pos(1) is INDPTR and t.crd(1) is INDICES and t.values is DATA
    assert t.nse == 5 and t.nnz == 5
    np.testing.assert_array_equal(t.todense(), M)


def test_constructor_sequence_form_and_index_dtype_cast() -> None:
    t = Tensor((3, 4), "CSR", DATA, pos=[None, INDPTR], crd=[None, INDICES], index_dtype=np.int64)
    assert t.index_dtype == np.int64 and t.crd(1).dtype == np.int64
    np.testing.assert_array_equal(t.todense(), M)
    assert INDICES.dtype == np.int32  # the caller's array is untouched


def test_dense_tensor_index_dtype_default() -> None:
    t = asarray(M)
    assert t.index_dtype == np.int32
    assert t.format.is_dense and t.nse == 12 and t.nnz == 12
    assert np.shares_memory(t.values, M)


def test_repr_is_brief() -> None:
    t = asarray(sp.random_array((50, 50), density=0.5, rng=0, format="csr"))
    r = repr(t)
    assert "CSR" in r and "(i, j) -> (i : dense, j : compressed)" in r
    assert "pos1" in r and "crd1" in r and "values" in r and "..." in r
    assert len(r) < 600


def test_copy_astype_are_independent() -> None:
    t = Tensor((3, 4), "CSR", DATA.copy(), pos={1: INDPTR}, crd={1: INDICES})
    c = t.copy()
    assert not np.shares_memory(c.values, t.values) and not np.shares_memory(c.crd(1), t.crd(1))
    f = t.astype(np.complex128)
    assert f.dtype == np.complex128 and not np.shares_memory(f.crd(1), t.crd(1))
    g = t.astype(np.float32, copy=False)
    assert g.dtype == np.float32 and np.shares_memory(g.crd(1), t.crd(1))
    assert t.astype(np.float64, copy=False) is t
    with pytest.raises(UnsupportedError):
        t.astype(bool)


def test_to_cpu_is_identity_and_bad_device() -> None:
    t = asarray(M, "CSR")
    assert t.to("cpu") is t
    with pytest.raises(DeviceError):
        t.to("tpu")


def test_nnz_counts_like_scipy() -> None:
    rng = np.random.default_rng(5)
    X = sp.random_array((6, 8), density=0.4, rng=rng, format="csr")
    X.data[::3] = 0  # explicit zeros count
    t = asarray(X)
    assert t.nnz == X.nnz
    b = t.convert("BSR[2,2]")
    assert b.nnz == X.tobsr((2, 2)).nnz
    d = t.convert("DIA")
    assert d.nnz == X.todia().nnz


def test_buffers_names() -> None:
    t = asarray(M, "DCSR")
    assert list(t.buffers()) == ["pos0", "crd0", "pos1", "crd1", "values"]


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"pos": {1: np.array([0, 2, 1, 5], np.int32)}}, FormatError, "non-decreasing"),
        ({"pos": {1: np.array([1, 2, 3, 5], np.int32)}}, FormatError, "start at 0"),
        ({"pos": {1: np.array([0, 2, 5], np.int32)}}, ShapeError, "expected 4"),
        ({"crd": {1: np.array([0, 2, 2, 0, 4], np.int32)}}, ShapeError, "outside"),
        ({"crd": {1: np.array([0, 2, 2, -1, 3], np.int32)}}, ShapeError, "outside"),
        ({"crd": {1: np.array([2, 0, 2, 0, 3], np.int32)}}, FormatError, "ordered"),
        ({"crd": {1: np.array([0, 0, 2, 0, 3], np.int32)}}, FormatError, "same coordinates"),
        ({"crd": {1: np.array([0, 2, 2, 0, 3.0])}}, UnsupportedError, "floating-point"),
        ({"crd": {1: np.array([0, 2, 2, 0, np.nan])}}, UnsupportedError, "floating-point"),
        ({"crd": {1: np.array([0, 2, 2, 0, 3], np.int16)}}, UnsupportedError, "int32 or int64"),
        ({"crd": {1: np.array([0, 2, 2, 0, 3], np.int64)}}, UnsupportedError, "share one index dtype"),
        ({"values": np.ones(4)}, ShapeError, "length 5"),
        ({"values": np.ones(5, dtype=bool)}, UnsupportedError, "not supported"),
        ({"values": np.array([1, 2, 3, 4, 5], dtype=object)}, UnsupportedError, "not supported"),
        ({"crd": {0: INDICES, 1: INDICES}}, FormatError, "stores no"),
        ({"crd": {}}, FormatError, "needs a crd"),
    ],
)
def test_bad_buffers(kwargs: dict, error: type, match: str) -> None:
    args = {"pos": {1: INDPTR}, "crd": {1: INDICES}, "values": DATA}
    args.update(kwargs)
    vals = args.pop("values")
    with pytest.raises(error, match=match):
        Tensor((3, 4), "CSR", vals, **args)


def test_bad_shape() -> None:
    with pytest.raises(ShapeError):
        Tensor((3,), "CSR", DATA, pos={1: INDPTR}, crd={1: INDICES})
    with pytest.raises(ShapeError):
        Tensor((3, -4), "CSR", DATA, pos={1: INDPTR}, crd={1: INDICES})
    with pytest.raises(ShapeError):
        Tensor((3, 4), "CSR", DATA, pos={5: INDPTR}, crd={1: INDICES})


def test_nonordered_label_accepts_unsorted() -> None:
    crd = np.array([2, 0, 2, 3, 0], np.int32)
    t = Tensor(
        (3, 4), "(i, j) -> (i : dense, j : compressed(nonordered))", DATA, pos={1: INDPTR}, crd={1: crd}
    )
    want = np.array([[2.0, 0, 1, 0], [0, 0, 3, 0], [5, 0, 0, 4]])
    np.testing.assert_array_equal(t.todense(), want)
    np.testing.assert_array_equal(t.convert("CSR").crd(1), [0, 2, 2, 0, 3])


def test_loose_compressed_holes() -> None:
    # rows as (lo, hi) pairs with a hole at crd[2]
    lohi = np.array([0, 2, 3, 4, 4, 6], np.int64)
    crd = np.array([0, 2, 99, 2, 0, 3], np.int64)
    vals = np.array([1.0, 2, -1, 3, 4, 5])
    t = Tensor((3, 4), "(i, j) -> (i : dense, j : loose_compressed)", vals, pos={1: lohi}, crd={1: crd})
    assert t.nnz == 5 and t.nse == 6
    np.testing.assert_array_equal(t.todense(), M)
    bad = crd.copy()
    bad[3] = 9  # a live entry out of range (the hole's 99 is never read)
    with pytest.raises(ShapeError):
        Tensor((3, 4), "(i, j) -> (i : dense, j : loose_compressed)", vals, pos={1: lohi}, crd={1: bad})


def test_batched_buffers_validated() -> None:
    pos = np.array([[0, 1, 2], [0, 0, 1]], np.int32)
    crd = np.array([[1, 0], [2, 0]], np.int32)
    vals = np.array([[1.0, 2.0], [3.0, 0.0]])
    t = Tensor((2, 2, 3), "BatchedCSR", vals, pos={2: pos}, crd={2: crd})
    want = np.zeros((2, 2, 3))
    want[0, 0, 1], want[0, 1, 0], want[1, 1, 2] = 1, 2, 3
    np.testing.assert_array_equal(t.todense(), want)
    assert t.nnz == 3 and t.nse == 4
    with pytest.raises(ShapeError):
        Tensor((2, 2, 3), "BatchedCSR", vals, pos={2: pos}, crd={2: np.array([[1, 0], [3, 0]], np.int32)})
    with pytest.raises(ShapeError):
        Tensor((2, 2, 3), "BatchedCSR", vals[:, :1], pos={2: pos}, crd={2: crd})


def test_check_false_trusts() -> None:
    crd = np.array([2, 0, 2, 0, 3], np.int32)
    t = Tensor((3, 4), "CSR", DATA, pos={1: INDPTR}, crd={1: crd}, check=False)
    assert t.nse == 5


@pytest.mark.parametrize("dtype", [np.float16, np.longdouble, np.bool_, np.str_])
def test_unsupported_value_dtypes(dtype: type) -> None:
    with pytest.raises(UnsupportedError, match="float32, float64"):
        asarray(np.ones((2, 2), dtype=dtype))
