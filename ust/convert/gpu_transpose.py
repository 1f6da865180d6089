"""CSR -> CSC (or CSC -> CSR) of a small matrix on the GPU by three kernels of ust's own, with
the index checks made as they read.

Why not cuSPARSE's ``csr2cscEx2`` at these sizes: it costs about 55 us of host time a call
(it was most of CuPy's own ``tocsc``), and it reads the caller's arrays as they are, so an
unchecked intake needed one more kernel writing sanitized copies for it.  Here the cost is
four launches and no host synchronisation, and the kernels clamp what they read: a spoiled
matrix is reported (in the answer words) and never followed out of its arrays.

The order needs no sort.  Each column keeps a bitmap of its rows (``m`` bits, stored as
``ceil(m / 32)`` words), so an entry's place in its column is the count of the column's rows
before its own: a prefix count per word (``count``) and a popcount inside the word (``fill``).
That is exact and stable (the rows of a column come out in order, as SciPy's ``tocsc`` has
them) wherever no row holds a column twice; a row that does is flagged (``DUPLICATE``) and the
caller redoes the conversion by cuSPARSE, whose stable order keeps both copies as SciPy does.

The bitmaps make the cost ``O(nnz + n * m / 32)``, so the route is for matrices whose bitmaps
are small (:func:`fits`); larger ones take cuSPARSE, whose host cost they hide.

Kernels: ``mark`` (one warp per row: each entry's bit set, the checks), ``count`` (one block:
the prefix counts of the bitmap words and the exclusive scan of the column counts, which is the
result's ``indptr``), ``fill`` (one warp per row: each entry written to its place).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.runtime.xp import import_cupy

__all__ = ["BAD", "DUPLICATE", "ROW_SPAN_CUDA", "BitmapTranspose", "fits", "transpose_by_bitmaps"]

#: answer flag bits: a check failed (the source's own check words the error) ...
BAD = 1
#: ... or a row holds a column twice (the bitmap order is then not SciPy's: redo by cuSPARSE)
DUPLICATE = 2

_MAX_BITMAP_WORDS = 1 << 17  # 512 KiB of bitmaps and as much of prefix counts
_MAX_COLUMNS = 1 << 15  # the one-block scan of the column counts stays a few microseconds
_ROW_BLOCK = 256  # 8 warps: 8 rows a block
_COUNT_BLOCK = 1024
_ANSWER_WORDS = 4  # two 8-byte words, in uint32 units: the flags, then where the entries end

#: value item size -> the CUDA type the kernels move it as (values are only copied)
_CARRIER = {
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
    16: "ulonglong2",
}

#: CUDA: a row's ``[lo, hi)`` in a CSR's index array, or false (and an empty row) where
#: ``indptr`` is unsound there (negative, decreasing, past the end): the bounds rule of every
#: kernel that checks a CSR as it reads (these, and ``ust.backends.cuda.merge_kernels``)
ROW_SPAN_CUDA = r"""
template <typename I>
__device__ __forceinline__ bool ust_span(const I* indptr, long long r, long long nidx, long long& lo, long long& hi) {
    lo = (long long)indptr[r];
    hi = (long long)indptr[r + 1];
    if (lo < 0 || hi < lo || hi > nidx) { lo = 0; hi = 0; return false; }
    return true;
}
"""

_SOURCE = (
    ROW_SPAN_CUDA
    + r"""
#define UST_FULL 0xffffffffu

template <typename I>
__global__ void ust_transpose_mark(const I* indptr, const I* indices, long long m, long long nidx,
                                   long long n, unsigned int* bits, unsigned long long* answer) {
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (r == 0 && lane == 0) {
        answer[1] = (unsigned long long)(long long)indptr[m];
        if (indptr[0] != 0) atomicOr(&answer[0], 1ULL);
    }
    if (r >= m) return;
    long long lo, hi;
    if (!ust_span(indptr, r, nidx, lo, hi)) { if (lane == 0) atomicOr(&answer[0], 1ULL); return; }
    const unsigned int bit = 1u << (r & 31);
    unsigned int* words = bits + (r >> 5) * n;
    unsigned long long flags = 0;
    for (long long p = lo + lane; p < hi; p += 32) {
        const long long c = (long long)indices[p];
        if ((unsigned long long)c >= (unsigned long long)n) { flags |= 1ULL; continue; }
        if (atomicOr(words + c, bit) & bit) flags |= 2ULL;
    }
    if (flags) atomicOr(&answer[0], flags);
}

// one block: prefix[w * n + c] = rows of column c in the words before w; out_ptr = the
// exclusive scan of the column counts, out_ptr[n] the total (more than nidx only for an
// unsound indptr, already flagged: fill then writes inside its arrays only)
template <typename I>
__global__ void ust_transpose_count(const unsigned int* bits, unsigned int* prefix, long long n,
                                    long long words, long long nidx, I* out_ptr,
                                    unsigned long long* answer) {
    __shared__ long long sums[32];
    __shared__ long long carry;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (long long base = 0; base < n; base += blockDim.x) {
        const long long c = base + threadIdx.x;
        long long count = 0;
        if (c < n) {
            for (long long w = 0; w < words; ++w) {
                prefix[w * n + c] = (unsigned int)count;
                count += __popc(bits[w * n + c]);
            }
        }
        long long x = count;
        for (int d = 1; d < 32; d <<= 1) {
            const long long y = __shfl_up_sync(UST_FULL, x, d);
            if (lane >= d) x += y;
        }
        if (lane == 31) sums[wid] = x;
        __syncthreads();
        if (wid == 0) {
            long long s = lane < nwarps ? sums[lane] : 0;
            for (int d = 1; d < 32; d <<= 1) {
                const long long y = __shfl_up_sync(UST_FULL, s, d);
                if (lane >= d) s += y;
            }
            sums[lane] = s;
        }
        __syncthreads();
        const long long before = carry + (wid ? sums[wid - 1] : 0) + x - count;
        if (c < n) out_ptr[c] = (I)before;
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) carry = before + count;
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out_ptr[n] = (I)carry;
        if (carry > nidx) atomicOr(&answer[0], 1ULL);
    }
}

template <typename I, typename V>
__global__ void ust_transpose_fill(const I* indptr, const I* indices, const V* data, long long m,
                                   long long nidx, long long n, const unsigned int* bits,
                                   const unsigned int* prefix, const I* out_ptr, I* out_idx, V* out_val) {
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (r >= m) return;
    long long lo, hi;
    if (!ust_span(indptr, r, nidx, lo, hi)) return;
    const unsigned int below = (1u << (r & 31)) - 1u;
    const long long row_words = (r >> 5) * n;
    for (long long p = lo + lane; p < hi; p += 32) {
        const long long c = (long long)indices[p];
        if ((unsigned long long)c >= (unsigned long long)n) continue;
        const long long k = row_words + c;
        const long long q = (long long)out_ptr[c] + prefix[k] + __popc(bits[k] & below);
        if (q >= 0 && q < nidx) {
            out_idx[q] = (I)r;
            out_val[q] = data[p];
        }
    }
}
"""
)


def fits(m: int, n: int, nidx: int) -> bool:
    """Whether this route takes an ``m``-row, ``n``-column CSR of ``nidx`` stored entries: its
    bitmaps are small, and ``nidx`` can be canonical (a longer one holds duplicates or
    entries past ``indptr``'s end: cuSPARSE takes it)."""
    words = -(-m // 32)
    return n <= _MAX_COLUMNS and n * words <= _MAX_BITMAP_WORDS and nidx <= m * n and nidx < 2**31 - 1


@functools.cache
def _kernels(index: str, itemsize: int) -> tuple[Any, Any, Any]:
    """(mark, count, fill) for one index dtype and value item size, compiled once a process."""
    cupy = import_cupy()
    i_type = "int" if index == "int32" else "long long"
    names = (
        f"ust_transpose_mark<{i_type}>",
        f"ust_transpose_count<{i_type}>",
        f"ust_transpose_fill<{i_type}, {_CARRIER[itemsize]}>",
    )
    mod = cupy.RawModule(code=_SOURCE, options=("--std=c++17",), name_expressions=names)
    mark, count, fill = (mod.get_function(name) for name in names)
    return mark, count, fill


@dataclass(frozen=True)
class BitmapTranspose:
    """What :func:`transpose_by_bitmaps` queued: the result's buffers (``indices`` and
    ``values`` sized for every stored entry of the source: where its entries end before its
    arrays, only the first ``end`` are the result's) and where the answer words lie."""

    indptr: Any
    indices: Any
    values: Any
    scratch: Any  # the answer words, then the bitmaps and prefix counts
    stream: Any  # the answer is read back on it, in order after the kernels

    def answer(self) -> tuple[int, int]:
        """(flags, where the entries end): one transfer, on the kernels' stream."""
        words = self.scratch[:_ANSWER_WORDS].view(np.uint64).get(stream=self.stream)
        return int(words[0]), int(words[1])


def transpose_by_bitmaps(indptr: Any, indices: Any, data: Any, m: int, n: int) -> BitmapTranspose | None:
    """The CSC buffers (``indptr`` of ``n + 1``, row indices, values) of the ``m`` x ``n`` CSR
    whose arrays are given, queued on the current stream; None where the arrays do not suit
    the kernels (an item size they do not move, a misaligned value array, not :func:`fits`).
    Nothing is read back: the caller reads :meth:`BitmapTranspose.answer` before the result."""
    cupy = import_cupy()
    nidx = int(indices.shape[0])
    itemsize = int(data.dtype.itemsize)
    if not fits(m, n, nidx) or itemsize not in _CARRIER or indptr.dtype != indices.dtype:
        return None
    if not data.flags.c_contiguous or data.data.ptr % itemsize:
        return None
    indptr, indices = cupy.ascontiguousarray(indptr), cupy.ascontiguousarray(indices)  # read flat
    words = -(-m // 32)
    bitmap = n * words
    stream = cupy.cuda.get_current_stream()
    scratch = cupy.empty(_ANSWER_WORDS + 2 * bitmap, dtype=np.uint32)
    cupy.cuda.runtime.memsetAsync(scratch.data.ptr, 0, 4 * (_ANSWER_WORDS + bitmap), stream.ptr)
    answer = np.uint64(scratch.data.ptr)
    bits = np.uint64(scratch.data.ptr + 4 * _ANSWER_WORDS)
    prefix = np.uint64(scratch.data.ptr + 4 * (_ANSWER_WORDS + bitmap))
    out_ptr = cupy.empty(n + 1, dtype=indptr.dtype)
    out_idx = cupy.empty(nidx, dtype=indptr.dtype)
    out_val = cupy.empty(nidx, dtype=data.dtype)
    mark, count, fill = _kernels(indptr.dtype.name, itemsize)
    rows = (max(1, -(-m * 32 // _ROW_BLOCK)),)
    m64, n64, nidx64 = np.int64(m), np.int64(n), np.int64(nidx)
    mark(rows, (_ROW_BLOCK,), (indptr, indices, m64, nidx64, n64, bits, answer))
    count((1,), (_COUNT_BLOCK,), (bits, prefix, n64, np.int64(words), nidx64, out_ptr, answer))
    fill(
        rows,
        (_ROW_BLOCK,),
        (indptr, indices, data, m64, nidx64, n64, bits, prefix, out_ptr, out_idx, out_val),
    )
    return BitmapTranspose(out_ptr, out_idx, out_val, scratch, stream)
