"""cuSPARSE SpGEMM (CSR x CSR) and SDDMM (CSR) through ctypes, on ust's own handle.

Follows :mod:`ust.backends.cuda.cusparse`: every function is declared once with the argument
types of ``cusparse.h`` (cuSPARSE 12.x, shipped with CUDA 12 and CUDA 13), buffers are CuPy
arrays whose device pointers are handed over, and every status is checked.  Descriptors are
destroyed before returning, also when a call fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ust.backends.cuda._lib import declare, load_library
from ust.backends.cuda.cusparse import (
    INDEX_32I,
    INDEX_BASE_ZERO,
    OPERATION_NON_TRANSPOSE,
    SparseDescriptor,
    _check,
    _scalar,
    call,
    cuda_data_type,
    dense_matrix_descriptor,
    handle,
)
from ust.runtime.errors import UnsupportedError

__all__ = [
    "SDDMM_ALG_DEFAULT",
    "SPGEMM_DEFAULT",
    "csr_rows_sorted",
    "csr_without_zeros",
    "sddmm_csr",
    "spgemm_csr",
]

_vp = ctypes.c_void_p
_i64 = ctypes.c_int64
_int = ctypes.c_int
_size_p = ctypes.POINTER(ctypes.c_size_t)
_i64_p = ctypes.POINTER(ctypes.c_int64)

# cusparse.h enum values
SPGEMM_DEFAULT = 0
SDDMM_ALG_DEFAULT = 0

_GEMM_ARGS = [_vp, _int, _int, _vp, _vp, _vp, _vp, _vp, _int, _int, _vp]
_SIGNATURES: dict[str, list[Any]] = {
    "cusparseSpGEMM_createDescr": [ctypes.POINTER(_vp)],
    "cusparseSpGEMM_destroyDescr": [_vp],
    "cusparseSpGEMM_workEstimation": [*_GEMM_ARGS, _size_p, _vp],
    "cusparseSpGEMM_compute": [*_GEMM_ARGS, _size_p, _vp],
    "cusparseSpGEMM_copy": _GEMM_ARGS,
    "cusparseSpMatGetSize": [_vp, _i64_p, _i64_p, _i64_p],
    "cusparseCsrSetPointers": [_vp, _vp, _vp, _vp],
    "cusparseSDDMM_bufferSize": [*_GEMM_ARGS[:-1], _size_p],
    "cusparseSDDMM_preprocess": _GEMM_ARGS,
    "cusparseSDDMM": _GEMM_ARGS,
}


@functools.cache
def _api() -> dict[str, Callable[..., int]]:
    lib = load_library("cusparse", sonames=("libcusparse.so.12", "libcusparse.so.11"))
    return {name: declare(lib, name, ctypes.c_int, args) for name, args in _SIGNATURES.items()}


def _call(name: str, *args: Any) -> None:
    _check(_api()[name](*args), name)


def _ptr(a: Any) -> _vp:
    return _vp(int(a.data.ptr))


def _stream_handle(device_id: int) -> int:
    import cupy

    return handle(device_id, cupy.cuda.get_current_stream().ptr)


@contextlib.contextmanager
def _spgemm_descr() -> Iterator[_vp]:
    d = _vp()
    _call("cusparseSpGEMM_createDescr", ctypes.byref(d))
    try:
        yield d
    finally:
        _call("cusparseSpGEMM_destroyDescr", d)


def _require_csr32(name: str, pos: Any, crd: Any) -> None:
    if pos.dtype != np.int32 or crd.dtype != np.int32:
        raise UnsupportedError(f"cuSPARSE SpGEMM here takes int32 CSR indices; {name} has {crd.dtype}")


def spgemm_csr(
    shape_a: tuple[int, int],
    a: dict[str, Any],
    shape_b: tuple[int, int],
    b: dict[str, Any],
    device_id: int = 0,
) -> tuple[Any, Any, Any]:
    """``C = A @ B`` for canonical CSR ``A``, ``B`` (``pos``/``crd``/``values`` CuPy arrays, int32
    indices, one value dtype); returns C's ``(indptr, indices, data)``."""
    import cupy

    m, n = shape_a[0], shape_b[1]
    dtype = a["values"].dtype
    if b["values"].dtype != dtype:
        raise UnsupportedError("cuSPARSE SpGEMM needs A and B of one value dtype")
    _require_csr32("A", a["pos"], a["crd"])
    _require_csr32("B", b["pos"], b["crd"])
    vt = cuda_data_type(dtype)
    if a["values"].size == 0 or b["values"].size == 0:
        return cupy.zeros(m + 1, dtype=np.int32), cupy.zeros(0, dtype=np.int32), cupy.zeros(0, dtype=dtype)
    da = SparseDescriptor.create("CSR", shape_a, a)
    db = SparseDescriptor.create("CSR", shape_b, b)
    c_pos = cupy.empty(m + 1, dtype=np.int32)
    dc = _vp()
    call("cusparseCreateCsr", ctypes.byref(dc), m, n, 0, _ptr(c_pos), None, None,
         INDEX_32I, INDEX_32I, INDEX_BASE_ZERO, vt)  # fmt: skip
    alpha, beta = _scalar(1, dtype), _scalar(0, dtype)
    op = OPERATION_NON_TRANSPOSE
    try:
        h = _vp(_stream_handle(device_id))
        common = (h, op, op, alpha, _vp(da.ptr), _vp(db.ptr), beta, dc, vt, SPGEMM_DEFAULT)
        with _spgemm_descr() as desc:
            size1 = ctypes.c_size_t(0)
            _call("cusparseSpGEMM_workEstimation", *common, desc, ctypes.byref(size1), None)
            buf1 = cupy.empty(max(int(size1.value), 1), dtype=cupy.uint8)
            _call("cusparseSpGEMM_workEstimation", *common, desc, ctypes.byref(size1), _ptr(buf1))
            size2 = ctypes.c_size_t(0)
            _call("cusparseSpGEMM_compute", *common, desc, ctypes.byref(size2), None)
            buf2 = cupy.empty(max(int(size2.value), 1), dtype=cupy.uint8)
            _call("cusparseSpGEMM_compute", *common, desc, ctypes.byref(size2), _ptr(buf2))
            rows, cols, nnz = _i64(), _i64(), _i64()
            _call("cusparseSpMatGetSize", dc, ctypes.byref(rows), ctypes.byref(cols), ctypes.byref(nnz))
            c_crd = cupy.empty(int(nnz.value), dtype=np.int32)
            c_val = cupy.empty(int(nnz.value), dtype=dtype)
            _call("cusparseCsrSetPointers", dc, _ptr(c_pos), _ptr(c_crd) if nnz.value else None,
                  _ptr(c_val) if nnz.value else None)  # fmt: skip
            _call("cusparseSpGEMM_copy", *common, desc)
            del buf1, buf2
    finally:
        call("cusparseDestroySpMat", dc)
        da.destroy()
        db.destroy()
    return c_pos, c_crd, c_val


@functools.cache
def _unsorted_rows_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "raw I pos, raw J crd",
        "raw int32 flag",
        """
        const I lo = pos[i], hi = pos[i + 1];
        for (I k = lo + 1; k < hi; ++k) {
            if (crd[k] <= crd[k - 1]) { flag[0] = 1; break; }
        }
        """,
        "ust_csr_rows_unsorted",
    )


def csr_rows_sorted(pos: Any, crd: Any) -> bool:
    """Every row's columns strictly ascending (one thread per row, one flag; a single read of
    ``crd`` instead of the expand-compare array program's four passes)."""
    import cupy

    m = int(pos.shape[0]) - 1
    if m <= 0 or int(crd.shape[0]) < 2:
        return True
    flag = cupy.zeros(1, dtype=np.int32)
    _unsorted_rows_kernel()(pos, crd, flag, size=m)
    return not bool(flag.get()[0])


def csr_without_zeros(m: Any) -> Any:
    """A cupyx CSR matrix without its exactly-zero entries (SciPy's rule for sparse arithmetic).

    Not ``eliminate_zeros()``: CuPy implements it with cuSPARSE's csr2csr_compress at tolerance
    0, which for real values also drops every negative entry (seen with CuPy 14.2 on the H200).
    Here the kept count before each stored slot, read at the row starts, is the new ``indptr``.
    """
    import cupy
    import cupyx.scipy.sparse as csp

    keep = m.data != 0
    if bool(keep.all()):
        return m
    kept_before = cupy.zeros(int(keep.shape[0]) + 1, dtype=m.indptr.dtype)
    cupy.cumsum(keep, dtype=m.indptr.dtype, out=kept_before[1:])
    return csp.csr_matrix((m.data[keep], m.indices[keep], kept_before[m.indptr]), shape=m.shape)


def sddmm_csr(
    shape: tuple[int, int],
    c: dict[str, Any],
    a: Any,
    b: Any,
    alpha: complex,
    beta: complex,
    device_id: int = 0,
) -> Any:
    """``C.values = alpha * (A @ B) at C's pattern + beta * C.values`` in place (C canonical CSR,
    A ``(m, k)`` and B ``(k, n)`` dense CuPy arrays, row- or column-major, C's value dtype)."""
    import cupy

    dtype = c["values"].dtype
    if a.dtype != dtype or b.dtype != dtype:
        raise UnsupportedError("cuSPARSE SDDMM needs A, B and C of one value dtype")
    vt = cuda_data_type(dtype)
    if c["values"].size == 0:
        return c["values"]
    dc = SparseDescriptor.create("CSR", shape, c)
    da = dense_matrix_descriptor(a)
    db = dense_matrix_descriptor(b)
    al, be = _scalar(alpha, dtype), _scalar(beta, dtype)
    op = OPERATION_NON_TRANSPOSE
    try:
        h = _vp(_stream_handle(device_id))
        common = (h, op, op, al, da, db, be, _vp(dc.ptr), vt, SDDMM_ALG_DEFAULT)
        size = ctypes.c_size_t(0)
        _call("cusparseSDDMM_bufferSize", *common, ctypes.byref(size))
        buf = cupy.empty(max(int(size.value), 1), dtype=cupy.uint8)
        _call("cusparseSDDMM_preprocess", *common, _ptr(buf))
        _call("cusparseSDDMM", *common, _ptr(buf))
        del buf
    finally:
        for d in (da, db):
            call("cusparseDestroyDnMat", d)
        dc.destroy()
    return c["values"]
