"""A small ctypes binding of cuSPARSE's generic API (SpMV / SpMM) with its own handle.

CuPy's bindings cover CSR, CSC and COO for one-shot calls; this binding adds BSR and lets a
stateful plan build its descriptors once, so an ``execute()`` is one library call with no
descriptor churn.  Signatures and enum values are those of ``cusparse.h`` (cuSPARSE 12.x,
shipped with CUDA 12 and CUDA 13).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ust.backends.cuda._lib import declare, load_library
from ust.runtime.errors import UnsupportedError, UstError

__all__ = ["CusparseError", "SpMMPlan", "SpMVPlan", "SparseDescriptor", "cuda_data_type"]

_vp = ctypes.c_void_p
_i64 = ctypes.c_int64
_int = ctypes.c_int
_size_p = ctypes.POINTER(ctypes.c_size_t)

# cusparse.h enum values
OPERATION_NON_TRANSPOSE = 0
INDEX_BASE_ZERO = 0
INDEX_32I, INDEX_64I = 2, 3
ORDER_COL, ORDER_ROW = 1, 2
SPMV_ALG_DEFAULT = 0
SPMV_CSR_ALG1, SPMV_CSR_ALG2 = 2, 3
SPMV_COO_ALG1, SPMV_COO_ALG2 = 1, 4
SPMV_BSR_ALG1 = 6
SPMM_ALG_DEFAULT = 0
SPMM_CSR_ALG1, SPMM_CSR_ALG2, SPMM_CSR_ALG3 = 4, 6, 12
SPMM_COO_ALG1, SPMM_COO_ALG2, SPMM_COO_ALG4 = 1, 2, 5
SPMM_BSR_ALG1 = 14

#: SpMV / SpMM algorithms worth timing per format (autotune candidates).
SPMV_ALGORITHMS: dict[str, tuple[int, ...]] = {
    "CSR": (SPMV_CSR_ALG1, SPMV_CSR_ALG2),
    "CSC": (SPMV_ALG_DEFAULT,),
    "COO": (SPMV_COO_ALG1, SPMV_COO_ALG2),
    "BSR": (SPMV_BSR_ALG1,),
}
SPMM_ALGORITHMS: dict[str, tuple[int, ...]] = {
    "CSR": (SPMM_CSR_ALG1, SPMM_CSR_ALG2, SPMM_CSR_ALG3),
    "CSC": (SPMM_ALG_DEFAULT,),
    "COO": (SPMM_COO_ALG1, SPMM_COO_ALG2, SPMM_COO_ALG4),
    "BSR": (SPMM_BSR_ALG1,),
}

_STATUS = {
    1: "NOT_INITIALIZED",
    2: "ALLOC_FAILED",
    3: "INVALID_VALUE",
    4: "ARCH_MISMATCH",
    5: "MAPPING_ERROR",
    6: "EXECUTION_FAILED",
    7: "INTERNAL_ERROR",
    8: "MATRIX_TYPE_NOT_SUPPORTED",
    9: "ZERO_PIVOT",
    10: "NOT_SUPPORTED",
    11: "INSUFFICIENT_RESOURCES",
}

# numpy dtype name -> cudaDataType
_CUDA_TYPES = {"float16": 2, "float32": 0, "float64": 1, "complex64": 4, "complex128": 5}


class CusparseError(UstError, RuntimeError):
    """A cuSPARSE call returned an error status."""


def cuda_data_type(dtype: Any) -> int:
    name = getattr(dtype, "name", str(dtype))
    try:
        return _CUDA_TYPES[name]
    except KeyError:
        raise UnsupportedError(
            f"cuSPARSE has no value type {name}; supported: {', '.join(_CUDA_TYPES)}"
        ) from None


def _index_type(dtype: Any) -> int:
    name = getattr(dtype, "name", str(dtype))
    if name == "int32":
        return INDEX_32I
    if name == "int64":
        return INDEX_64I
    raise UnsupportedError(f"cuSPARSE index arrays must be int32 or int64, not {name}")


# name -> (restype, argtypes): every function ust calls, declared once.
_SIGNATURES: dict[str, list[Any]] = {
    "cusparseCreate": [ctypes.POINTER(_vp)],
    "cusparseDestroy": [_vp],
    "cusparseSetStream": [_vp, _vp],
    "cusparseCreateCsr": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _vp, _vp, _int, _int, _int, _int],
    "cusparseCreateCsc": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _vp, _vp, _int, _int, _int, _int],
    "cusparseCreateCoo": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _vp, _vp, _int, _int, _int],
    "cusparseCreateBsr": [
        ctypes.POINTER(_vp),
        _i64,
        _i64,
        _i64,
        _i64,
        _i64,
        _vp,
        _vp,
        _vp,
        _int,
        _int,
        _int,
        _int,
        _int,
    ],
    "cusparseDestroySpMat": [_vp],
    "cusparseCreateDnVec": [ctypes.POINTER(_vp), _i64, _vp, _int],
    "cusparseDestroyDnVec": [_vp],
    "cusparseDnVecSetValues": [_vp, _vp],
    "cusparseCreateDnMat": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _int, _int],
    "cusparseDestroyDnMat": [_vp],
    "cusparseDnMatSetValues": [_vp, _vp],
    "cusparseSpMatSetValues": [_vp, _vp],
    "cusparseSpMV_bufferSize": [_vp, _int, _vp, _vp, _vp, _vp, _vp, _int, _int, _size_p],
    "cusparseSpMV": [_vp, _int, _vp, _vp, _vp, _vp, _vp, _int, _int, _vp],
    "cusparseSpMM_bufferSize": [_vp, _int, _int, _vp, _vp, _vp, _vp, _vp, _int, _int, _size_p],
    "cusparseSpMM": [_vp, _int, _int, _vp, _vp, _vp, _vp, _vp, _int, _int, _vp],
}


@functools.cache
def _api() -> dict[str, Callable[..., int]]:
    lib = load_library("cusparse", sonames=("libcusparse.so.12", "libcusparse.so.11"))
    return {name: declare(lib, name, ctypes.c_int, args) for name, args in _SIGNATURES.items()}


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CusparseError(f"{what} failed: CUSPARSE_STATUS_{_STATUS.get(status, str(status))}")


def call(name: str, *args: Any) -> None:
    """Call a declared cuSPARSE function and raise CusparseError on a bad status."""
    _check(_api()[name](*args), name)


@functools.cache
def _handle(device_id: int) -> int:
    """One cuSPARSE handle per device for this process (ust's own, not CuPy's)."""
    h = _vp()
    call("cusparseCreate", ctypes.byref(h))
    return int(h.value or 0)


def handle(device_id: int, stream: int) -> int:
    h = _handle(device_id)
    call("cusparseSetStream", _vp(h), _vp(stream))
    return h


def _ptr(a: Any) -> int:
    return int(a.data.ptr)


@dataclass
class SparseDescriptor:
    """A cuSPARSE sparse-matrix descriptor over CuPy buffers (kept alive by ``arrays``)."""

    kind: str  # "CSR" | "CSC" | "COO" | "BSR"
    ptr: int
    arrays: tuple[Any, ...]

    @classmethod
    def create(
        cls, kind: str, shape: tuple[int, int], arrays: dict[str, Any], block: tuple[int, int] = (1, 1)
    ) -> SparseDescriptor:
        rows, cols = shape
        values = arrays["values"]
        vt = cuda_data_type(values.dtype)
        d = _vp()
        if kind in ("CSR", "CSC"):
            offsets, indices = arrays["pos"], arrays["crd"]
            it = _index_type(indices.dtype)
            call(
                f"cusparseCreate{kind.capitalize()}", ctypes.byref(d), rows, cols, int(values.size),
                _vp(_ptr(offsets)), _vp(_ptr(indices)), _vp(_ptr(values)), it, it, INDEX_BASE_ZERO, vt,
            )  # fmt: skip
            keep: tuple[Any, ...] = (offsets, indices, values)
        elif kind == "COO":
            r, c = arrays["row"], arrays["col"]
            call(
                "cusparseCreateCoo", ctypes.byref(d), rows, cols, int(values.size),
                _vp(_ptr(r)), _vp(_ptr(c)), _vp(_ptr(values)), _index_type(r.dtype), INDEX_BASE_ZERO, vt,
            )  # fmt: skip
            keep = (r, c, values)
        elif kind == "BSR":
            offsets, indices = arrays["pos"], arrays["crd"]
            br, bc = block
            it = _index_type(indices.dtype)
            call(
                "cusparseCreateBsr", ctypes.byref(d), rows // br, cols // bc, int(indices.size), br, bc,
                _vp(_ptr(offsets)), _vp(_ptr(indices)), _vp(_ptr(values)), it, it, INDEX_BASE_ZERO, vt, ORDER_ROW,
            )  # fmt: skip
            keep = (offsets, indices, values)
        else:
            raise UnsupportedError(f"no cuSPARSE descriptor for {kind}; supported: CSR, CSC, COO, BSR")
        return cls(kind, int(d.value or 0), keep)

    def destroy(self) -> None:
        if self.ptr:
            call("cusparseDestroySpMat", _vp(self.ptr))
            self.ptr = 0


def _scalar(value: complex, dtype: Any) -> ctypes.Array[Any]:
    """alpha / beta in host memory, in the compute type."""
    import numpy as np

    buf = np.array([value], dtype=dtype)
    return (ctypes.c_char * buf.nbytes).from_buffer_copy(buf.tobytes())


def _dense_vector(a: Any) -> ctypes.c_void_p:
    d = _vp()
    call("cusparseCreateDnVec", ctypes.byref(d), int(a.size), _vp(_ptr(a)), cuda_data_type(a.dtype))
    return d


def dense_matrix_descriptor(a: Any) -> ctypes.c_void_p:
    """A cuSPARSE dense-matrix descriptor over a row- or column-major CuPy array."""
    d = _vp()
    rows, cols = a.shape
    if a.flags.c_contiguous:
        order, ld = ORDER_ROW, cols
    elif a.flags.f_contiguous:
        order, ld = ORDER_COL, rows
    else:
        raise UnsupportedError("cuSPARSE SpMM needs a row-major or column-major contiguous dense operand")
    call(
        "cusparseCreateDnMat",
        ctypes.byref(d),
        rows,
        cols,
        max(ld, 1),
        _vp(_ptr(a)),
        cuda_data_type(a.dtype),
        order,
    )
    return d


@dataclass(frozen=True)
class _Kind:
    """What differs between SpMV and SpMM: the calls, the dense descriptors, the operations."""

    call: str
    create: Callable[[Any], ctypes.c_void_p]
    set_values: str
    destroy: str
    ops: tuple[int, ...]


_SPMV = _Kind(
    "cusparseSpMV",
    _dense_vector,
    "cusparseDnVecSetValues",
    "cusparseDestroyDnVec",
    (OPERATION_NON_TRANSPOSE,),
)
_SPMM = _Kind(
    "cusparseSpMM",
    dense_matrix_descriptor,
    "cusparseDnMatSetValues",
    "cusparseDestroyDnMat",
    (OPERATION_NON_TRANSPOSE, OPERATION_NON_TRANSPOSE),
)


class _Plan:
    """``Y = alpha * A @ X + beta * Y`` with descriptors and workspace made once (SpMV or SpMM)."""

    kind: _Kind

    def __init__(
        self,
        mat: SparseDescriptor,
        x: Any,
        y: Any,
        alpha: complex,
        beta: complex,
        algorithm: int,
        device_id: int,
    ) -> None:
        import cupy

        k = self.kind
        self.mat, self.x, self.y, self.algorithm, self.device_id = mat, x, y, algorithm, device_id
        self.compute = cuda_data_type(y.dtype)
        self.alpha, self.beta = _scalar(alpha, y.dtype), _scalar(beta, y.dtype)
        self._x, self._y = k.create(x), k.create(y)
        head = (*k.ops, self.alpha, _vp(mat.ptr), self._x, self.beta, self._y, self.compute, algorithm)
        size = ctypes.c_size_t()
        call(
            f"{k.call}_bufferSize",
            _vp(handle(device_id, cupy.cuda.get_current_stream().ptr)),
            *head,
            ctypes.byref(size),
        )
        self.workspace = cupy.empty(max(int(size.value), 1), dtype=cupy.uint8)
        self._fn = _api()[k.call]
        self._args = (*head, _vp(int(self.workspace.data.ptr)))

    def set_x(self, x: Any) -> None:
        self.x = x
        call(self.kind.set_values, self._x, _vp(_ptr(x)))

    def set_y(self, y: Any) -> None:
        self.y = y
        call(self.kind.set_values, self._y, _vp(_ptr(y)))

    def run(self, stream: int) -> None:
        _check(self._fn(_vp(handle(self.device_id, stream)), *self._args), self.kind.call)

    def destroy(self) -> None:
        for d in (self._x, self._y):
            if d.value:
                call(self.kind.destroy, d)
                d.value = None


class SpMVPlan(_Plan):
    """``y = alpha * A @ x + beta * y`` (dense vectors)."""

    kind = _SPMV


class SpMMPlan(_Plan):
    """``Y = alpha * A @ X + beta * Y`` for dense X (k columns, row- or column-major)."""

    kind = _SPMM
