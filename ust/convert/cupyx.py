"""cupyx.scipy.sparse interop: csr/csc/coo/dia matrices in (their buffers), out on the GPU.

Mirrors :mod:`ust.convert.scipy`: the same honest labels for unsorted / duplicated input,
the same checks.  cupyx wants int32 indices in most routines, so exports cast index arrays
to int32 when the sizes allow (a copy only when the tensor holds int64 indices).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.convert.gpu_transpose import BitmapTranspose, transpose_by_bitmaps
from ust.convert.layouts import coo_format, library_layout, relabel
from ust.formats.library import get
from ust.formats.model import Format
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.runtime.xp import on_device
from ust.tensor.validate import INDEX_DTYPES, check_index_array, check_value_dtype

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["from_cupyx", "from_cupyx_trusted", "to_cupyx"]

_CUPYX_DTYPES = "float32, float64, complex64, complex128"


def _index(*arrays: Any) -> list[Any]:
    for k, a in enumerate(arrays):
        if np.dtype(a.dtype).kind not in "iu":
            check_index_array(a, f"index array {k}")
    dts = {np.dtype(a.dtype) for a in arrays}
    if len(dts) == 1 and next(iter(dts)) in INDEX_DTYPES:
        return list(arrays)
    return [a.astype(np.int64) for a in arrays]


_BOUNDS_SOURCE = r"""
// the checks of a csr/csc's indptr and indices: out[0] set where indptr decreases, starts
// elsewhere than 0, or an index lies outside [0, n) (a negative one read as a huge unsigned
// one); out[1] = indptr[m], where the entries end.
// With `safe` (nidx indices then m + 1 positions), copies a library may read whatever the
// caller's arrays hold: the indices with every outside one replaced by 0, and indptr, which the
// last block to finish (out[2] counts the finished ones) replaces by the sound stand-in
// [0, nidx, ..., nidx] where the checks failed or the entries end before the arrays.
template <typename I>
__global__ void ust_compressed_bounds(const I* indptr, const I* indices, long long m, long long nidx,
                                      unsigned long long n, unsigned long long* out, I* safe) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool bad = false;
    if (i < m && indptr[i + 1] < indptr[i]) bad = true;
    if (i < nidx) {
        const bool inside = (unsigned long long)(long long)indices[i] < n;
        if (!inside) bad = true;
        if (safe) safe[i] = inside ? indices[i] : (I)0;
    }
    if (i == 0) {
        out[1] = (unsigned long long)(long long)indptr[m];
        if (indptr[0] != 0) bad = true;
    }
    if (bad) atomicOr(&out[0], 1ULL);
    if (!safe) return;
    if (i <= m) safe[nidx + i] = indptr[i];
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&out[2], 1ULL) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const volatile unsigned long long* answer = out;
    if (answer[0] == 0 && answer[1] == (unsigned long long)nidx) return;
    for (long long k = threadIdx.x; k <= m; k += blockDim.x) safe[nidx + k] = k == 0 ? (I)0 : (I)nidx;
}
"""
_BOUNDS_BLOCK = 256


@functools.cache
def _bounds_kernel(index: str) -> Any:
    """The checks for one index dtype.  A raw kernel: its launch costs a few microseconds where
    an ElementwiseKernel's argument handling costs tens."""
    import cupy

    name = f"ust_compressed_bounds<{'int' if index == 'int32' else 'long long'}>"
    mod = cupy.RawModule(code=_BOUNDS_SOURCE, options=("--std=c++17",), name_expressions=(name,))
    return mod.get_function(name)


def _queue_checks(indptr: Any, indices: Any, n: int, out: Any, safe: Any) -> None:
    """Queue the checks' kernel on the current stream: ``out`` receives the answer (an array of
    3 zeroed words, or a pointer to them), ``safe`` the copies (a pointer; 0 for none)."""
    m, nidx = int(indptr.shape[0]) - 1, int(indices.shape[0])
    grid = -(-max(m + 1, nidx) // _BOUNDS_BLOCK)
    args = (indptr, indices, np.int64(m), np.int64(nidx), np.uint64(n), out, np.uint64(safe))
    _bounds_kernel(indptr.dtype.name)((grid,), (_BOUNDS_BLOCK,), args)


def _bounds(indptr: Any, indices: Any, n: int) -> tuple[bool, int]:
    """(sound, where the entries end) of a csr/csc's index arrays: one kernel, one transfer."""
    import cupy

    indptr, indices = cupy.ascontiguousarray(indptr), cupy.ascontiguousarray(indices)  # the kernel reads flat
    out = cupy.zeros(3, dtype=np.uint64)
    _queue_checks(indptr, indices, n, out, 0)
    flag, end, _ = (int(v) for v in out.get())
    return not flag and end <= int(indices.shape[0]), end


_ANSWER_BYTES = 24  # flag, end, finished blocks: three 8-byte words ahead of the copies


class _Sanitized:
    """Copies of a csr/csc's ``indptr`` and ``indices`` a library may read whatever the caller's
    arrays hold, and the checks' answer, in one device allocation (``buffer``: the answer, the
    indices, then indptr), made by one kernel (:data:`_BOUNDS_SOURCE`) with no host
    synchronisation: whoever uses a result computed from them reads the answer first
    (:class:`_OwedTranspose`).  Where the arrays pass the checks and the entries end at the
    indices' end the copies equal them; else indptr is a sound stand-in."""

    __slots__ = ("buffer", "indices_ptr", "indptr_ptr", "stream")

    def __init__(self, indptr: Any, indices: Any, n: int) -> None:
        import cupy

        if not (indptr.flags.c_contiguous and indices.flags.c_contiguous):  # the kernel reads flat
            indptr, indices = cupy.ascontiguousarray(indptr), cupy.ascontiguousarray(indices)
        m, nidx = int(indptr.shape[0]) - 1, int(indices.shape[0])
        self.buffer = cupy.empty(_ANSWER_BYTES + (nidx + m + 1) * indices.itemsize, dtype=np.uint8)
        base = self.buffer.data.ptr
        self.indices_ptr = base + _ANSWER_BYTES
        self.indptr_ptr = self.indices_ptr + nidx * indices.itemsize
        self.stream = cupy.cuda.get_current_stream()  # the answer is read back on it, in order
        cupy.cuda.runtime.memsetAsync(base, 0, _ANSWER_BYTES, self.stream.ptr)
        _queue_checks(indptr, indices, n, np.uint64(base), self.indices_ptr)  # pointers, by value

    def answer(self) -> tuple[int, int]:
        """(flag, where the entries end): one transfer on the kernel's stream, which waits for it
        (whatever stream is current at the first read of the result)."""
        words = self.buffer[:_ANSWER_BYTES].view(np.uint64).get(stream=self.stream)
        flag, end, _ = (int(v) for v in words)
        return flag, end


class _OwedBounds:
    """The checks a cupyx csr/csc intake defers (a callable: :meth:`ust.Tensor._settle` runs it)."""

    #: the check may return trimmed buffers: reads of ``values`` and ``nse`` settle it first
    trims = True
    #: the check is the compressed-bounds one, which ust's GPU merge kernel and checked transpose
    #: make as they read (:meth:`ust.Tensor._compressed_level_unchecked` hands them the buffers)
    compressed_bounds = True

    def __call__(
        self, shape: tuple[int, ...], fmt: Format, pos: tuple, crd: tuple, values: Any
    ) -> tuple[tuple, tuple, Any] | None:
        """The checks a cupyx csr/csc intake defers to the first read of its buffers
        (:meth:`ust.Tensor._settle`): ``indptr`` starts at 0, never decreases and ends within
        ``indices``; every index in ``[0, N)``.  Where the entries end before the arrays do (cupyx
        counts ``data.size`` as nnz, SciPy ``indptr[-1]``: ust follows SciPy, as the checked path
        does) the trimmed buffers are returned; a failure is worded by the checked path."""
        indptr, indices = pos[1], crd[1]
        csr = fmt == _compressed_format(True)
        ok, end = _bounds(indptr, indices, shape[1] if csr else shape[0])
        if not ok:
            from ust.tensor.buffers import Buffers
            from ust.tensor.validate import check_buffers

            nidx = int(indices.shape[0])
            if end > nidx:
                name = "csr" if csr else "csc"
                raise ShapeError(f"{name} indices hold {nidx} entries but indptr ends at {end}")
            check_buffers(Buffers(shape, fmt, pos, crd, values), "bounds")
            raise ShapeError(
                "csr/csc indptr decreases or an index lies outside the matrix"
            )  # pragma: no cover
        if end == int(indices.shape[0]) and end == int(values.shape[0]):
            return None
        return pos, (None, indices[:end]), values[:end]


_owed_compressed = _OwedBounds()


class _OwedTranspose:
    """What a transpose of an unchecked cupyx intake owes (:func:`transpose_tensor`): the answer
    of the checks it queued, read by the first read of the result's buffers.  Sound: nothing to
    do.  Unsound: the source's own check raises its error.  Entries ending before the arrays:
    the bitmap route's result is trimmed (it read only the entries), cuSPARSE's (it ran on a
    stand-in) is redone after the source's check trims the source, as is a bitmap route's that
    met a row holding a column twice (:data:`ust.convert.gpu_transpose.DUPLICATE`)."""

    trims = True  # the redone transpose replaces the values too

    def __init__(self, run: _Sanitized | BitmapTranspose, source: Tensor, fmt: Format, nidx: int) -> None:
        self.run, self.source, self.fmt, self.nidx = run, source, fmt, nidx

    def __call__(
        self, shape: tuple[int, ...], fmt: Format, pos: tuple, crd: tuple, values: Any
    ) -> tuple[tuple, tuple, Any] | None:
        flag, end = self.run.answer()
        if not flag and end == self.nidx:
            return None
        if not flag and end < self.nidx and isinstance(self.run, BitmapTranspose):
            return pos, (None, crd[1][:end]), values[:end]
        self.source.pos(1)  # the source's check: raises its error, or trims
        redone = transpose_tensor(self.source, self.fmt, library=True)
        assert redone is not None  # the source took this route once; it is only shorter now
        return redone._pos, redone._crd, redone._values


def _compressed_format(csr: bool) -> Format:
    """The standard CSR (``csr``) or CSC format: the SciPy intake's table, built once."""
    from ust.convert.scipy import _CSR_CSC

    return _CSR_CSC["csr" if csr else "csc"]


def _trusted_compressed(A: Any, shape: tuple[int, ...]) -> Tensor | None:
    """A csr/csc matrix as a Tensor on its own buffers after O(1) checks, or None when one
    fails (the checked path then words the error).

    Nothing is read from the device: the checks of ``indptr`` and ``indices`` (one kernel, one
    transfer, :func:`_bounds`) are owed to the first read of the tensor's buffers, as for a
    SciPy intake (:func:`ust.convert.scipy._trusted_compressed`).  Order and uniqueness come
    from cupyx's cached flags; where cupyx has not cached them, its own probe reads the index
    arrays, so the checks run at once first."""
    from ust.tensor import Tensor

    indptr, indices, data = A.indptr, A.indices, A.data
    nd = type(data)  # a cupy.ndarray: cupyx built ``A`` around it
    if type(indptr) is not nd or type(indices) is not nd or nd.__module__.partition(".")[0] != "cupy":
        return None
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        return None
    itype = indptr.dtype
    if itype not in INDEX_DTYPES or indices.dtype != itype:
        return None
    csr = A.format == "csr"
    if indptr.shape[0] != (shape[0] if csr else shape[1]) + 1 or data.shape[0] < indices.shape[0]:
        return None
    fmt = _compressed_format(csr)
    nidx = int(indices.shape[0])
    vals = data if data.shape[0] == nidx else data[:nidx]
    canonical = A.__dict__.get("_has_canonical_format")
    if A.__dict__.get("_has_sorted_indices", True) is False:
        return None  # cupyx says unsorted: the checked path labels it
    if canonical is None:  # cupyx would probe the index arrays: check them first, now
        ok, end = _bounds(indptr, indices, shape[1] if csr else shape[0])
        if not ok or end != nidx or (nidx and not bool(A.has_canonical_format)):
            return None  # the checked path words the error, trims, or labels the order
        t = Tensor._trusted(shape, fmt, vals, (None, indptr), (None, indices))
        t._source = A
        return t
    if nidx and not canonical:
        return None  # unsorted or duplicated: the checked path labels it
    t = Tensor._trusted(shape, fmt, vals, (None, indptr), (None, indices), _owed_compressed)
    t._source = A
    return t


def from_cupyx(A: Any) -> Tensor:
    """A Tensor around a cupyx.scipy.sparse matrix (its buffers, no copy).

    csr and csc in int32/int64 take the trusted path (:func:`_trusted_compressed`: one device
    reduction, one transfer); anything that fails its checks, and the other formats, the fully
    checked path below, which raises ust's error naming the problem."""
    from ust.tensor import Tensor

    name = getattr(A, "format", None)
    check_value_dtype(A.dtype)
    dims = A.shape
    shape = (int(dims[0]), int(dims[1])) if len(dims) == 2 else tuple(int(s) for s in dims)
    if name in ("csr", "csc") and len(shape) == 2:
        t = _trusted_compressed(A, shape)
        if t is not None:
            return t
        indptr, indices = _index(A.indptr, A.indices)
        nnz = int(indptr[-1]) if indptr.shape[0] else 0
        if indices.shape[0] < nnz:
            raise ShapeError(f"{name} indices hold {indices.shape[0]} entries but indptr ends at {nnz}")
        base = get(name.upper())
        fmt = base
        if nnz and not bool(A.has_canonical_format):
            if bool(A.has_sorted_indices):
                fmt = relabel(base, 1, unique=False, ordered=True)
            else:
                probe = A.copy()
                probe.sum_duplicates()
                fmt = relabel(base, 1, unique=int(probe.nnz) == nnz, ordered=False)
        vals = A.data if A.data.shape[0] == nnz else A.data[:nnz]
        return Tensor(shape, fmt, vals, pos={1: indptr}, crd={1: indices[:nnz]}, check="bounds")
    if name == "coo" and len(shape) == 2:
        row, col = _index(A.row, A.col)
        n = int(A.data.shape[0])
        import cupy

        fmt = coo_format(2, canonical=bool(A.has_canonical_format))
        return Tensor(
            shape,
            fmt,
            A.data,
            pos={0: cupy.asarray(np.array([0, n], dtype=row.dtype))},
            crd={0: row, 1: col},
            check="bounds",
        )
    if name == "dia":
        import cupy

        (offsets,) = _index(A.offsets)
        data = A.data
        nd = int(offsets.shape[0])
        N = shape[1]
        if data.shape[1] != N or not data.flags.c_contiguous:
            full = cupy.zeros((nd, N), dtype=data.dtype)
            w = min(N, int(data.shape[1]))
            full[:, :w] = data[:, :w]
            data = full
        ordered = nd < 2 or bool((offsets[1:] > offsets[:-1]).all())
        fmt = get("DIA") if ordered else relabel(get("DIA"), 0, ordered=False)
        return Tensor(
            shape,
            fmt,
            data.reshape(-1),
            pos={0: cupy.asarray(np.array([0, nd], dtype=offsets.dtype))},
            crd={0: offsets},
            check="bounds",
        )
    raise UnsupportedError(f"cupyx.scipy.sparse format {name!r}; supported: csr, csc, coo, dia")


def from_cupyx_trusted(A: Any, fmt: Format) -> Tensor:
    """A library route's result in ``fmt`` (sorted first where cuSPARSE did not promise it)."""
    from ust.tensor import Tensor

    shape = tuple(int(s) for s in A.shape)
    if A.format in ("csr", "csc"):
        if not A.has_sorted_indices:
            A.sort_indices()
        indptr, indices = _index(A.indptr, A.indices)
        if fmt == _compressed_format(A.format == "csr") and int(A.data.shape[0]) == int(indices.shape[0]):
            return Tensor._trusted(shape, fmt, A.data, (None, indptr), (None, indices))  # no resolving
        return Tensor(shape, fmt, A.data, pos={1: indptr}, crd={1: indices}, check=False)
    if A.format == "coo":
        import cupy

        row, col = _index(A.row, A.col)
        n = int(A.data.shape[0])
        pos0 = cupy.asarray(np.array([0, n], dtype=row.dtype))
        return Tensor(shape, fmt, A.data, pos={0: pos0}, crd={0: row, 1: col}, check=False)
    return from_cupyx(A)


def coordinate_twin_of(t: Tensor, fmt: Format) -> Tensor:
    """``t`` (``(a : dense, b : compressed)``, int32-sized) in its coordinate twin ``fmt``
    (``(a : compressed(nonunique), b : singleton)``): cuSPARSE's csr2coo run on the level
    coordinates, which is what scipy's and CuPy's ``csc.tocoo()`` do for CSC."""
    import cupy
    import cupyx.scipy.sparse as csp

    from ust.tensor import Tensor

    extents = tuple(hi - lo for lo, hi in t.format.lvl_bounds(t.shape))
    levels = csp.csr_matrix((t.values, _idx32(t.crd(1)), _idx32(t.pos(1))), shape=extents)
    coo = levels.tocoo()
    first, second = _index(coo.row, coo.col)
    n = int(coo.data.shape[0])
    pos0 = cupy.asarray(np.array([0, n], dtype=first.dtype))
    return Tensor(t.shape, fmt, coo.data, pos={0: pos0}, crd={0: first, 1: second}, check=False)


def _idx32(a: Any) -> Any:
    return a if a.dtype == np.int32 else a.astype(np.int32)


def to_cupyx(t: Tensor, *, reuse_source: bool = False) -> Any:
    """A cupyx.scipy.sparse matrix on the GPU: csr/csc/coo/dia when ``t``'s format is one
    (canonicalised), anything else as CSR.

    ``reuse_source`` (library routes inside ust): where ``t`` was taken whole from a cupyx
    csr/csc whose buffers it still holds (after its owed checks), that matrix itself, instead
    of a new one built around the same buffers (cupyx's constructor is most of a small add)."""
    import cupyx.scipy.sparse as csp

    if reuse_source and (src := t._source) is not None:
        pos, crd = t.pos(1), t.crd(1)  # the owed checks run here
        if src.indptr is pos and src.indices is crd and src.data is t.values and pos.dtype == np.int32:
            return src

    if np.dtype(t.dtype) not in {np.dtype(c) for c in "fdFD"}:
        raise UnsupportedError(f"cupyx.scipy.sparse holds {_CUPYX_DTYPES} values, not {t.dtype}")
    if t.device == "cpu":
        t = t.to("cuda")
    if max(t.nse, *t.shape) >= 2**31:
        raise UnsupportedError("cupyx.scipy.sparse needs int32 indices: this tensor is too large")
    lay = library_layout(t.format)
    if lay is None or lay.name not in ("csr", "csc", "coo", "dia"):
        t = t.convert(get("CSR"))
        lay = library_layout(t.format)
        assert lay is not None
    shape = t.shape
    if lay.name == "dia":
        nd = int(t.crd(0).shape[0])
        return csp.dia_matrix((t.values.reshape(nd, shape[1]), _idx32(t.crd(0))), shape=shape)
    if lay.name in ("csr", "csc"):
        cls = csp.csr_matrix if lay.name == "csr" else csp.csc_matrix
        A = cls((t.values, _idx32(t.crd(1)), _idx32(t.pos(1))), shape=shape)
    else:  # coo
        A = csp.coo_matrix((t.values, (_idx32(t.crd(0)), _idx32(t.crd(1)))), shape=shape)
    if lay.canonical:
        A.has_canonical_format = True
        return A
    A = A.copy()  # sum_duplicates works in place: never on the tensor's buffers
    A.sum_duplicates()
    return A


#: cudaDataType of the value dtypes cuSPARSE's csr2cscEx2 moves (library_types.h)
_CUDA_DATA_TYPE = {
    np.dtype(np.float32): 0,  # CUDA_R_32F
    np.dtype(np.float64): 1,  # CUDA_R_64F
    np.dtype(np.complex64): 4,  # CUDA_C_32F
    np.dtype(np.complex128): 5,  # CUDA_C_64F
}


def transpose_tensor(t: Tensor, fmt: Format, *, library: bool = False) -> Tensor | None:
    """A canonical GPU CSR tensor as CSC (or CSC as CSR) on its buffers, no cupyx object built
    around them on either side (their constructors and order probes were most of a small
    conversion); the GPU twin of :func:`ust.convert.scipy.transpose_tensor`.  Small matrices
    take ust's bitmap kernels (:mod:`ust.convert.gpu_transpose`: no sort, checks as they read),
    larger ones (and ``library``) cuSPARSE's ``csr2cscEx2``.  None where neither takes the
    buffers (int64 indices, another value dtype, a size cuSPARSE's int32 cannot count): the
    caller then takes cupyx's method."""
    import cupy

    held = t._compressed_level_unchecked()  # an unchecked cupyx intake: its checks are queued below
    deferred = held is not None
    indptr, indices, data = held if held is not None else (t.pos(1), t.crd(1), t.values)
    if type(data) is not cupy.ndarray or indptr.dtype != np.int32 or indices.dtype != np.int32:
        return None
    cuda_type = _CUDA_DATA_TYPE.get(np.dtype(data.dtype))
    nnz = int(indices.shape[0])
    if cuda_type is None or int(data.shape[0]) < nnz or max(nnz, *t.shape) >= 2**31 - 1:
        return None
    if int(data.shape[0]) != nnz:
        if not deferred:
            return None
        data = data[:nnz]
    m, n = t.shape if t.format == _compressed_format(True) else t.shape[::-1]
    from ust.tensor import Tensor

    with on_device(data):
        bitmaps = None if library else transpose_by_bitmaps(indptr, indices, data, m, n)
        run: _Sanitized | BitmapTranspose | None = bitmaps
        if bitmaps is not None:
            out_ptr, out_idx, out_val = bitmaps.indptr, bitmaps.indices, bitmaps.values
        else:
            out_ptr, out_idx, out_val, run = _transpose_by_cusparse(
                indptr, indices, data, n, deferred, cuda_type
            )
    owed = _OwedTranspose(run, t, fmt, nnz) if deferred and run is not None else None
    return Tensor._trusted(t.shape, fmt, out_val, (None, out_ptr), (None, out_idx), owed)


def _transpose_by_cusparse(
    indptr: Any, indices: Any, data: Any, n: int, deferred: bool, cuda_type: int
) -> tuple[Any, Any, Any, _Sanitized | None]:
    """cuSPARSE's ``csr2cscEx2`` of the CSR arrays given into new CSC arrays (``indptr`` of
    ``n + 1``), queued on the current stream; ``deferred``: on sanitized copies, whose checks'
    answer is returned with them."""
    import cupy
    from cupy_backends.cuda.libs import cusparse

    m, nnz = int(indptr.shape[0]) - 1, int(indices.shape[0])
    copies, ptr_of, idx_of = None, indptr.data.ptr, indices.data.ptr
    if deferred:  # checks queued, the library given sound copies; the answer owed to the result
        copies = _Sanitized(indptr, indices, n)
        ptr_of, idx_of = copies.indptr_ptr, copies.indices_ptr
    out_val = cupy.empty(nnz, dtype=data.dtype)
    out_idx = cupy.empty(nnz, dtype=np.int32)
    if nnz == 0:
        return cupy.zeros(n + 1, dtype=np.int32), out_idx, out_val, copies
    out_ptr = cupy.empty(n + 1, dtype=np.int32)
    handle = cupy.cuda.device.get_cusparse_handle()
    cusparse.setStream(handle, cupy.cuda.get_current_stream().ptr)
    args: tuple[Any, ...] = (handle, m, n, nnz, data.data.ptr, ptr_of, idx_of)
    args += (out_val.data.ptr, out_ptr.data.ptr, out_idx.data.ptr, cuda_type)
    args += (cusparse.CUSPARSE_ACTION_NUMERIC, cusparse.CUSPARSE_INDEX_BASE_ZERO)
    args += (cusparse.CUSPARSE_CSR2CSC_ALG1,)
    work = cupy.empty(max(1, cusparse.csr2cscEx2_bufferSize(*args)), dtype=np.int8)
    cusparse.csr2cscEx2(*args, work.data.ptr)
    return out_ptr, out_idx, out_val, copies
