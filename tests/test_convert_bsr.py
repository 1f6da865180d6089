"""CSR/COO/CSC/DIA -> BSR: exact buffers of scipy's ``tobsr`` followed by ``sort_indices``.

The CPU route merges each block row's CSR rows by block column in C
(:mod:`ust.backends.cpu.bsr_c`); without a compiler it falls back to scipy's ``tobsr``
and a block sort.  Both must give scipy's canonical buffers bit for bit: blocks sorted by
block column, explicit zeros kept, duplicates summed, index dtype as ``csr_array.tobsr``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust.runtime.cpu_threads as cpu_threads
from ust.backends.cpu import bsr_c
from ust.backends.cpu.bsr_c import csr_to_bsr
from ust.convert import asarray
from ust.convert.routes import explain_route
from ust.convert.scipy import csr_tobsr_sorted
from ust.runtime.errors import FormatError

BLOCKS = [(1, 1), (2, 2), (2, 3), (3, 2), (4, 4), (1, 5), (5, 1)]
VALUE_DTYPES = ["float32", "float64", "complex64", "complex128", "int8", "uint16", "int64"]


def _csr(
    m: int, n: int, density: float, dtype: Any = np.float64, index: Any = np.int32, seed: int = 0
) -> Any:
    rng = np.random.default_rng(seed)
    a = sp.random_array((m, n), density=density, format="csr", rng=rng, dtype=np.float64)
    a.data = (10 * a.data - 5).astype(dtype) if np.dtype(dtype).kind in "iu" else a.data.astype(dtype)
    if np.dtype(dtype).kind == "c":
        a.data = a.data + 1j * rng.standard_normal(a.data.shape[0]).astype(dtype)
    if np.dtype(dtype).kind == "u":
        a.data = np.abs(10 * rng.standard_normal(a.data.shape[0])).astype(dtype)
    a.indptr = a.indptr.astype(index)
    a.indices = a.indices.astype(index)
    a.has_sorted_indices = True
    return a


def _reference(a: Any, blocksize: tuple[int, int]) -> Any:
    b = a.tobsr(blocksize)
    b.sort_indices()
    return b


def _same(got: tuple[np.ndarray, ...] | Any, ref: Any) -> None:
    if not isinstance(got, tuple):
        got = (got.indptr, got.indices, got.data)
    indptr, indices, data = got
    for name, x, y in (
        ("indptr", indptr, ref.indptr),
        ("indices", indices, ref.indices),
        ("data", data, ref.data),
    ):
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    # bit for bit (signed zeros, NaN payloads): scipy adds each entry onto a zeroed block
    assert np.ascontiguousarray(data).tobytes() == np.ascontiguousarray(ref.data).tobytes()


@pytest.mark.parametrize("blocksize", BLOCKS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_kernel_exact_buffers(blocksize: tuple[int, int], dtype: str) -> None:
    r, c = blocksize
    a = _csr(12 * r, 7 * c, 0.2, dtype, seed=r * 10 + c)
    got = csr_to_bsr(a.shape, a.indptr, a.indices, a.data, blocksize)
    assert got is not None
    _same(got, _reference(a, blocksize))


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("blocksize", [(2, 2), (3, 2)])
def test_index_dtype_like_csr_array_tobsr(index: Any, blocksize: tuple[int, int]) -> None:
    a = _csr(30, 24, 0.3, index=index)
    got = csr_tobsr_sorted(a, blocksize)
    _same(got, _reference(a, blocksize))
    assert got.indices.dtype == np.dtype(index)
    assert got.has_sorted_indices


def test_empty_rows_block_rows_and_matrices() -> None:
    M = np.zeros((8, 6))
    M[0, 5] = 1.0  # block row 0: only its first row has entries
    M[3, 0] = 2.0  # block row 1: only its second row
    M[3, 4] = 3.0  # block rows 2 and 3 are empty
    a = sp.csr_array(M)
    _same(csr_tobsr_sorted(a, (2, 2)), _reference(a, (2, 2)))
    for shape in [(0, 4), (4, 0), (0, 0), (6, 4)]:
        e = sp.csr_array(shape)
        got = csr_to_bsr(shape, e.indptr, e.indices, e.data, (2, 2))
        assert got is not None
        _same(got, _reference(e, (2, 2)))


def test_explicit_zeros_make_blocks_like_scipy() -> None:
    data = np.array([0.0, 1.0, -0.0, 0.0, 2.0])  # blocks (0, 1), (1, 0), (1, 2): zeros only
    indices = np.array([3, 0, 1, 5, 4], dtype=np.int32)
    indptr = np.array([0, 1, 2, 2, 4, 5, 5], dtype=np.int32)
    a = sp.csr_array((data, indices, indptr), shape=(6, 6))
    ref = _reference(a, (2, 2))
    assert ref.indptr[-1] == 5  # the blocks holding only explicit zeros are stored
    _same(csr_tobsr_sorted(a, (2, 2)), ref)
    t = asarray(a, "BSR[2,2]")
    np.testing.assert_array_equal(t.pos(1), ref.indptr)
    np.testing.assert_array_equal(t.crd(1), ref.indices)
    assert t.values.tobytes() == ref.data.tobytes()  # -0.0 became +0.0, as scipy's += does


def test_duplicates_summed_like_scipy() -> None:
    data = np.array([1.0, 2.0, 4.0, 8.0])
    indices = np.array([1, 1, 2, 2], dtype=np.int32)  # sorted, with duplicates
    indptr = np.array([0, 2, 4], dtype=np.int32)
    a = sp.csr_array((data, indices, indptr), shape=(2, 4))
    got = csr_to_bsr(a.shape, a.indptr, a.indices, a.data, (2, 2))
    assert got is not None
    _same(got, _reference(a, (2, 2)))


def test_unsorted_rows_fall_back_to_scipy() -> None:
    data = np.arange(1.0, 6.0)
    indices = np.array([5, 0, 1, 4, 2], dtype=np.int32)  # row 0's block columns decrease
    indptr = np.array([0, 2, 5, 5, 5], dtype=np.int32)
    assert csr_to_bsr((4, 6), indptr, indices, data, (2, 2)) is None
    a = sp.csr_array((data, indices, indptr), shape=(4, 6))
    _same(csr_tobsr_sorted(a, (2, 2)), _reference(a, (2, 2)))


def test_without_compiler_scipy_route(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bsr_c, "_library", lambda *args: None)
    a = _csr(40, 30, 0.2, np.complex128, index=np.int64)
    assert csr_to_bsr(a.shape, a.indptr, a.indices, a.data, (2, 3)) is None
    _same(csr_tobsr_sorted(a, (2, 3)), _reference(a, (2, 3)))


def test_blocksize_must_divide_shape() -> None:
    a = _csr(5, 4, 0.5)
    with pytest.raises(ValueError):  # scipy raises too
        a.tobsr((2, 2))
    with pytest.raises(FormatError):
        csr_to_bsr(a.shape, a.indptr, a.indices, a.data, (2, 2))
    with pytest.raises(FormatError):
        csr_tobsr_sorted(a, (2, 2))
    with pytest.raises(FormatError):
        asarray(a, "CSR").convert("BSR[2,2]")


@pytest.mark.parametrize("src", ["CSR", "COO", "CSC", "DIA"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_convert_routes_exact(src: str, index: Any, dtype: str) -> None:
    a = _csr(24, 18, 0.25, dtype, index=index)
    t = asarray(a, src)
    assert "C merge" in explain_route(t, "BSR[2,3]")
    out = t.convert("BSR[2,3]")
    # the same scipy steps the route takes to CSR (DIA drops explicit zeros)
    csr = {
        "CSR": lambda x: x,
        "COO": lambda x: x.tocsr(),
        "CSC": lambda x: x.tocsr(),
        "DIA": lambda x: x.tocsr(),
    }[src](t.to_scipy())
    ref = _reference(csr, (2, 3))
    np.testing.assert_array_equal(out.pos(1), ref.indptr)
    np.testing.assert_array_equal(out.crd(1), ref.indices)
    # the source's index dtype, whatever scipy's intermediate picked (docs/storage.md, "Index dtype")
    assert out.index_dtype == t.index_dtype == np.dtype(index)
    assert out.values.dtype == np.dtype(dtype)
    assert out.values.tobytes() == ref.data.tobytes()
    np.testing.assert_array_equal(out.todense(), a.toarray())


def test_parallel_kernel_on_a_large_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.cli.demo import poisson3d

    a = sp.csr_array(poisson3d(40))  # 440 k entries: above the one-thread threshold
    monkeypatch.setattr(cpu_threads, "THREADS", 2)
    got = csr_to_bsr(a.shape, a.indptr, a.indices, a.data, (2, 2))
    assert got is not None
    _same(got, _reference(a, (2, 2)))
    b = sp.csr_array(a[:, ::-1])  # denser block rows out of step with each other
    b.sort_indices()
    got = csr_to_bsr(b.shape, b.indptr, b.indices, b.data, (4, 2))
    assert got is not None
    _same(got, _reference(b, (4, 2)))
