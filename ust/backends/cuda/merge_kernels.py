"""Two canonical CSR (or CSC) matrices added, subtracted or multiplied elementwise by a CUDA
kernel that walks each row of both once to count and once to write, checking as it reads.

Why not cuSPARSE's ``csrgeam2`` or CuPy's product kernel: both read the caller's index arrays
as they are, so ust had to check them first (a kernel and a host synchronisation per operand),
and their results keep exact zeros, which SciPy drops (another pass and another
synchronisation).  Here the counting pass itself checks what SciPy's check does (``indptr``
starts at 0, never decreases and ends inside ``indices``; every index in ``[0, n)``), clamps
what it reads so that a bad operand is never followed out of its arrays, and counts only the
nonzero results: one host synchronisation in all (the flag and the result's size, read
together), the same number CuPy's own ``A + B`` makes.  A flagged operand raises before the
result is written.

The arithmetic is SciPy's for canonical operands (``csr_binop_csr_canonical``): an entry
stored in one operand only is combined with an implicit 0 (so ``nan * 0`` is stored, as
NumPy's dense product has it), and a result equal to 0 is not stored.

Kernels (one warp per row, 32 rows a block; each lane merges a 32nd of its row's merge path,
found by binary search, so a long row is shared out): ``count`` (per-row nonzero results,
per-block sums, the checks), ``scan`` (one block: the exclusive scan of the block sums and the
total), ``fill`` (each row's start from its block's offset, each lane's from a warp scan of the
lanes' counts; the row written).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ust.codegen.emit_compute_cuda import COMPUTE_CUDA_VALUE
from ust.convert.gpu_transpose import ROW_SPAN_CUDA

__all__ = ["MERGE_OPS", "MERGE_VALUES", "MergeResult", "merge_compressed"]

#: op -> the code the kernels switch on (``x op y``)
MERGE_OPS = {"add": 0, "subtract": 1, "multiply": 2}

#: value dtype -> its CUDA type: the compiler's names, complex as CuPy's header spells it
#: (float16 is left to the array program)
MERGE_VALUES = {
    **COMPUTE_CUDA_VALUE,
    "complex64": "complex<float>",
    "complex128": "complex<double>",
}
_INDEX = {name: COMPUTE_CUDA_VALUE[name] for name in ("int32", "int64")}
_BLOCK = 1024  # 32 warps: 32 rows a block
_ROWS = 32
_SCAN_BLOCK = 1024

_SOURCE = (
    "#include <cupy/complex.cuh>\n"
    + ROW_SPAN_CUDA
    + r"""
template <typename T>
__device__ __forceinline__ T ust_combine(int op, T x, T y) {
    if (op == 0) return (T)(x + y);
    if (op == 1) return (T)(x - y);
    return (T)(x * y);
}

// the merge path: how many of A's entries come among the first d of the merged row (ties: A
// first); every read stays inside A[0, la) and B[0, lb)
template <typename I>
__device__ __forceinline__ long long ust_split(const I* A, long long la, const I* B, long long lb, long long d) {
    long long lo = d > lb ? d - lb : 0, hi = d < la ? d : la;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (A[mid] <= B[d - 1 - mid]) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// `steps` steps of SciPy's canonical merge of one row from (a, b): an entry of A meets B's entry
// of its column or an implicit 0; an entry of B meets an implicit 0 unless A's previous entry
// has its column (then that step already combined them).  Nonzero results are counted, and
// written from c while c < c1 (WRITE).
template <typename I, typename T, bool WRITE>
__device__ long long ust_merge_steps(int op, const I* A, const T* Ad, long long la, const I* B, const T* Bd,
                                     long long lb, long long a, long long b, long long steps,
                                     I* ci, T* cd, long long c, long long c1) {
    const T z = T(0);
    long long k = 0;
    for (long long s = 0; s < steps; ++s) {
        I j;
        T v = z;
        if (a < la && (b >= lb || A[a] <= B[b])) {
            j = A[a];
            v = (b < lb && B[b] == j) ? ust_combine<T>(op, Ad[a], Bd[b]) : ust_combine<T>(op, Ad[a], z);
            ++a;
        } else if (b < lb) {
            j = B[b];
            if (!(a > 0 && A[a - 1] == j)) v = ust_combine<T>(op, z, Bd[b]);
            ++b;
        } else {
            break;
        }
        if (v != z) {
            if (WRITE && c + k < c1) { ci[c + k] = j; cd[c + k] = v; }
            ++k;
        }
    }
    return k;
}

// one warp per row (32 rows a block of 1024): lane l merges the l-th 32nd of the row's merge path
template <typename I, typename T, bool WRITE>
__device__ __forceinline__ long long ust_lane_merge(int op, const I* ai, const T* ad, long long a0, long long a1,
                                                    const I* bi, const T* bd, long long b0, long long b1, int lane,
                                                    I* ci, T* cd, long long c, long long c1) {
    const long long la = a1 - a0, lb = b1 - b0, L = la + lb, seg = (L + 31) / 32;
    const long long d = lane * seg < L ? lane * seg : L, e = d + seg < L ? d + seg : L;
    const long long a = ust_split<I>(ai + a0, la, bi + b0, lb, d);
    return ust_merge_steps<I, T, WRITE>(op, ai + a0, ad + a0, la, bi + b0, bd + b0, lb, a, d - a, e - d,
                                        ci, cd, c, c1);
}

template <typename I, typename T>
__global__ void ust_merge_count(const I* ap, const I* ai, const T* ad, const I* bp, const I* bi, const T* bd,
                                long long m, unsigned long long n, long long na, long long nb, int op,
                                long long* counts, long long* block_sums, unsigned long long* info) {
    __shared__ long long warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    bool bad = false;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < na || g < nb; g += stride) {
        if (g < na && (unsigned long long)(long long)ai[g] >= n) bad = true;
        if (g < nb && (unsigned long long)(long long)bi[g] >= n) bad = true;
    }
    const long long r = (long long)blockIdx.x * 32 + warp;
    long long c = 0;
    if (r < m) {  // the whole warp
        long long a0, a1, b0, b1;
        if (!ust_span<I>(ap, r, na, a0, a1)) bad = true;
        if (!ust_span<I>(bp, r, nb, b0, b1)) bad = true;
        if (r == 0 && (ap[0] != 0 || bp[0] != 0)) bad = true;
        c = ust_lane_merge<I, T, false>(op, ai, ad, a0, a1, bi, bd, b0, b1, lane, (I*)0, (T*)0, 0, 0);
        for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xffffffffu, c, off);
        if (lane == 0) counts[r] = c;
    }
    if (bad) atomicOr(info, 1ULL);
    if (lane == 0) warp_sums[warp] = c;
    __syncthreads();
    if (warp == 0) {
        long long v = warp_sums[lane];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) block_sums[blockIdx.x] = v;
    }
}

// one block: the block sums scanned in place (exclusive; each thread a contiguous run, then a
// scan of the runs' sums), their total into info[1]
extern "C" __global__ void ust_merge_scan(long long* sums, long long nblk, unsigned long long* info) {
    __shared__ long long buf[1024];
    const int t = threadIdx.x;
    const long long per = (nblk + 1023) / 1024, lo = t * per, hi = lo + per < nblk ? lo + per : nblk;
    long long s = 0;
    for (long long i = lo; i < hi; ++i) s += sums[i];
    buf[t] = s;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        const long long v = t >= off ? buf[t - off] : 0;
        __syncthreads();
        buf[t] += v;
        __syncthreads();
    }
    long long run = buf[t] - s;
    for (long long i = lo; i < hi; ++i) {
        const long long v = sums[i];
        sums[i] = run;
        run += v;
    }
    if (t == 1023) info[1] = (unsigned long long)buf[1023];
}

template <typename I, typename T>
__global__ void ust_merge_fill(const I* ap, const I* ai, const T* ad, const I* bp, const I* bi, const T* bd,
                               long long m, long long na, long long nb, int op,
                               const long long* counts, const long long* block_offsets,
                               I* cp, I* ci, T* cd, long long cap) {
    __shared__ long long row_start[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp == 0) {  // the block's 32 rows: their starts from the block's offset
        const long long r = (long long)blockIdx.x * 32 + lane;
        const long long c = r < m ? counts[r] : 0;
        long long incl = c;
        for (int off = 1; off < 32; off <<= 1) {
            const long long v = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += v;
        }
        row_start[lane] = block_offsets[blockIdx.x] + incl - c;
    }
    __syncthreads();
    const long long r = (long long)blockIdx.x * 32 + warp;
    if (r >= m) return;  // the whole warp
    const long long start = row_start[warp], count = counts[r];
    if (lane == 0) {
        cp[r] = (I)start;
        if (r == m - 1) cp[m] = (I)(start + count);
    }
    long long a0, a1, b0, b1;
    ust_span<I>(ap, r, na, a0, a1);
    ust_span<I>(bp, r, nb, b0, b1);
    const long long mine = ust_lane_merge<I, T, false>(op, ai, ad, a0, a1, bi, bd, b0, b1, lane, (I*)0, (T*)0, 0, 0);
    long long incl = mine;
    for (int off = 1; off < 32; off <<= 1) {
        const long long v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
    }
    const long long end = start + count < cap ? start + count : cap;
    ust_lane_merge<I, T, true>(op, ai, ad, a0, a1, bi, bd, b0, b1, lane, ci, cd, start + incl - mine, end);
}
"""
)


@functools.cache
def _module(index: str, value: str) -> tuple[Any, Any, Any]:
    """(count, scan, fill) compiled for one (index, value) dtype pair (CuPy's NVRTC and cache)."""
    from ust.runtime.xp import import_cupy

    cp = import_cupy()
    i, t = _INDEX[index], MERGE_VALUES[value]
    names = (f"ust_merge_count<{i}, {t}>", f"ust_merge_fill<{i}, {t}>")
    # no fused multiply-add: a complex product rounds as SciPy's kernel rounds it (bit for bit)
    mod = cp.RawModule(code=_SOURCE, options=("--std=c++17", "--fmad=false"), name_expressions=names)
    return mod.get_function(names[0]), mod.get_function("ust_merge_scan"), mod.get_function(names[1])


class MergeResult:
    """A merge's outcome: ``sound`` False where an operand failed the checks (then the buffers
    are None: nothing was written); else the result's ``indptr``, ``indices`` and ``data``."""

    __slots__ = ("data", "indices", "indptr", "sound")

    def __init__(self, sound: bool, indptr: Any = None, indices: Any = None, data: Any = None) -> None:
        self.sound, self.indptr, self.indices, self.data = sound, indptr, indices, data


def merge_compressed(
    op: str, m: int, n: int, a: tuple[Any, Any, Any], b: tuple[Any, Any, Any]
) -> MergeResult:
    """``a op b`` for two compressed matrices of ``m`` rows (the compressed dimension) and ``n``
    columns, each given as ``(indptr, indices, data)`` CuPy arrays on the current device (one
    index dtype and one value dtype of :data:`MERGE_VALUES` for both; ``indices`` may be longer
    than the entries, ``data`` at least as long as ``indices``).  The result's indices are
    ascending where the operands' are; its index dtype is the operands'."""
    from ust.runtime.xp import import_cupy

    cp = import_cupy()
    ap, ai, ad, bp, bi, bd = (cp.ascontiguousarray(x) for x in (*a, *b))  # the kernels read flat arrays
    itype, vtype = ap.dtype, ad.dtype
    na, nb = int(ai.shape[0]), int(bi.shape[0])
    if m == 0:
        return MergeResult(True, cp.zeros(1, dtype=itype), cp.zeros(0, dtype=itype), cp.zeros(0, dtype=vtype))
    count, scan, fill = _module(itype.name, vtype.name)
    code = np.int32(MERGE_OPS[op])
    grid = -(-m // _ROWS)
    work = cp.zeros(2 + grid, dtype=np.int64)  # info (flag, total) then the block sums
    info, block_sums = work[:2], work[2:]
    counts = cp.empty(m, dtype=np.int64)
    m64, na64, nb64 = np.int64(m), np.int64(na), np.int64(nb)
    args = (ap, ai, ad, bp, bi, bd, m64)
    count((grid,), (_BLOCK,), (*args, np.uint64(n), na64, nb64, code, counts, block_sums, info))
    scan((1,), (_SCAN_BLOCK,), (block_sums, np.int64(grid), info))
    flag, total = (int(v) for v in info.get())
    if flag:
        return MergeResult(False)
    indptr = cp.empty(m + 1, dtype=itype)
    indices = cp.empty(total, dtype=itype)
    data = cp.empty(total, dtype=vtype)
    fill(
        (grid,),
        (_BLOCK,),
        (*args, na64, nb64, code, counts, block_sums, indptr, indices, data, np.int64(total)),
    )
    return MergeResult(True, indptr, indices, data)
