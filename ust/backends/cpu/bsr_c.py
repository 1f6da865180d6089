"""CSR -> canonical BSR in C: each block row's R input rows merged by block column.

SciPy's ``tobsr`` leaves the blocks of a block row in first-appearance order, so canonical
BSR (blocks sorted by block column) costs it a second pass.  Here the CSR rows are already
sorted, so the R rows of a block row are R sorted lists of block columns: a R-way merge
(the smallest head block column, then every row whose head is in it advances) emits the
blocks in order, with no sort.  Two passes, both parallel over block rows (OpenMP, on
:func:`ust.runtime.cpu_threads.threads` threads): count the blocks of each block row, then
fill them (each block zeroed, then its entries added with ``+=`` exactly as SciPy's
``csr_tobsr`` does, so the buffers are bit-identical to ``tobsr`` followed by
``sort_indices``).

The source is generated per (block shape, value type, index type) -- R and C are constants,
so the merge over R heads unrolls and ``j / C`` is a shift or a multiply -- and compiled
with the system compiler through :mod:`ust.backends.generated.compile_c` (cached on disk).  Without a
compiler, or when a row's block columns are not sorted, :func:`csr_to_bsr` returns None and
the caller takes SciPy's route.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ust.codegen.emit_c import C_INDEX, C_SCALAR
from ust.runtime.cpu_threads import threads
from ust.runtime.errors import FormatError

__all__ = ["SOURCE_TEMPLATE", "csr_to_bsr", "source"]

SOURCE_TEMPLATE = r"""
#include <stdint.h>
#include <string.h>
{INCLUDES}
typedef {V} val_t;
typedef {I} idx_t;
#define R {R}
#define C {C}
#define NONE INT64_MAX

static inline int64_t bcol(idx_t j) {{ return (int64_t)((uint64_t)j / (uint64_t)C); }}

/* The R rows of block row bi: each one's next entry p, its end e and its head block column h
   (NONE when the row is empty).  A macro, so the loops compile exactly as written out. */
#define HEADS(bi, p, e, h)                                                         \
    for (int r = 0; r < R; ++r) {{                                                  \
        p[r] = ap[(bi) * R + r];                                                   \
        e[r] = ap[(bi) * R + r + 1];                                               \
        h[r] = p[r] < e[r] ? bcol(aj[p[r]]) : NONE;                                \
    }}

/* bp[bi + 1] = blocks of block row bi, then the running sum (bp[0] = 0): returns the number
   of blocks, or -1 when some row's block columns decrease (the merge needs them sorted). */
int64_t ust_bsr_count(int64_t nbr, const idx_t* ap, const idx_t* aj, idx_t* bp, int nt) {{
    int bad = 0;
    #pragma omp parallel for num_threads(nt) schedule(static) reduction(|:bad)
    for (int64_t bi = 0; bi < nbr; ++bi) {{
        int64_t p[R], e[R], h[R];
        HEADS(bi, p, e, h)
        int64_t n = 0;
        for (;;) {{
            int64_t cur = h[0];
            for (int r = 1; r < R; ++r) cur = h[r] < cur ? h[r] : cur;
            if (cur == NONE) break;
            ++n;
            for (int r = 0; r < R; ++r) {{
                if (h[r] != cur) continue;
                int64_t q = p[r] + 1;
                while (q < e[r] && bcol(aj[q]) == cur) ++q;
                p[r] = q;
                if (q < e[r]) {{
                    int64_t nb = bcol(aj[q]);
                    bad |= nb < cur;
                    h[r] = nb;
                }} else {{
                    h[r] = NONE;
                }}
            }}
        }}
        bp[bi + 1] = (idx_t)n;
    }}
    if (bad) return -1;
    bp[0] = 0;
    for (int64_t bi = 0; bi < nbr; ++bi) bp[bi + 1] += bp[bi];
    return (int64_t)bp[nbr];
}}

void ust_bsr_fill(int64_t nbr, const idx_t* ap, const idx_t* aj, const val_t* ax,
                  const idx_t* bp, idx_t* bj, val_t* bx, int nt) {{
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bi = 0; bi < nbr; ++bi) {{
        int64_t p[R], e[R], h[R];
        HEADS(bi, p, e, h)
        int64_t k = bp[bi];
        for (;;) {{
            int64_t cur = h[0];
            for (int r = 1; r < R; ++r) cur = h[r] < cur ? h[r] : cur;
            if (cur == NONE) break;
            bj[k] = (idx_t)cur;
            val_t* blk = bx + k * (int64_t)(R * C);
            memset(blk, 0, sizeof(val_t) * (size_t)(R * C));
            const int64_t c0 = cur * C;
            for (int r = 0; r < R; ++r) {{
                if (h[r] != cur) continue;
                int64_t q = p[r];
                do {{
                    blk[r * C + (aj[q] - c0)] += ax[q];
                    ++q;
                }} while (q < e[r] && bcol(aj[q]) == cur);
                p[r] = q;
                h[r] = q < e[r] ? bcol(aj[q]) : NONE;
            }}
            ++k;
        }}
    }}
}}
"""

_MAX_BLOCK = 1 << 12  # R and C above this: SciPy's route (a block that size is dense anyway)


def source(blocksize: tuple[int, int], value_dtype: Any, index_dtype: Any) -> str:
    """C source of the count/fill pair for one block shape, value dtype and index dtype."""
    v = C_SCALAR[np.dtype(value_dtype).name]
    i = C_INDEX[np.dtype(index_dtype).name]
    r, c = blocksize
    return SOURCE_TEMPLATE.format(
        V=v, I=i, R=int(r), C=int(c), INCLUDES="#include <complex.h>" if "Complex" in v else ""
    )


@functools.lru_cache(maxsize=64)
def _library(blocksize: tuple[int, int], value: str, index: str) -> tuple[Any, Any] | None:
    from ust.backends.generated.compile_c import load_library, toolchain

    if toolchain() is None:
        return None
    r, c = blocksize
    lib = load_library(source(blocksize, value, index), name=f"ust_csr_bsr_{r}x{c}_{value}_{index}")
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    count = lib.ust_bsr_count
    count.restype = i64
    count.argtypes = [i64, vp, vp, vp, ctypes.c_int]
    fill = lib.ust_bsr_fill
    fill.restype = None
    fill.argtypes = [i64, vp, vp, vp, vp, vp, vp, ctypes.c_int]
    return count, fill


def _p(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def csr_to_bsr(
    shape: tuple[int, int], indptr: Any, indices: Any, data: Any, blocksize: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """BSR ``(indptr, indices, data)`` with blocks sorted by block column (data: ``(nblocks, R, C)``)
    of a CSR matrix whose rows are sorted; None where SciPy's route must do it (no C compiler,
    a row whose block columns are not sorted, an unsupported dtype or a huge block).

    Index arrays come out in the CSR's index dtype (int64 where a block count or block column
    would not fit int32), as ``csr_array.tobsr`` gives them.
    """
    m, n = (int(s) for s in shape)
    r, c = (int(b) for b in blocksize)
    if r < 1 or c < 1 or m % r or n % c:
        raise FormatError(
            f"[block-divides-shape] blocksize {(r, c)} does not divide the shape {(m, n)}",
            rule="block-divides-shape",
        )
    data = np.asarray(data)
    if data.dtype.name not in C_SCALAR or r > _MAX_BLOCK or c > _MAX_BLOCK:
        return None
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    if indptr.dtype.name not in C_INDEX or indices.dtype.name not in C_INDEX:
        return None
    nnz = int(indptr[-1]) if indptr.shape[0] else 0
    wide = indptr.dtype.itemsize == 8 or indices.dtype.itemsize == 8 or max(n // c, nnz) > 2**31 - 1
    itype = np.dtype(np.int64 if wide else np.int32)
    lib = _library((r, c), data.dtype.name, itype.name)
    if lib is None:
        return None
    count, fill = lib
    ap = np.ascontiguousarray(indptr, dtype=itype)
    aj = np.ascontiguousarray(indices, dtype=itype)
    ax = np.ascontiguousarray(data)
    nbr = m // r
    nt = threads(nnz)
    bp = np.empty(nbr + 1, dtype=itype)
    if nbr == 0 or nnz == 0:
        bp[:] = 0
        return bp, np.empty(0, dtype=itype), np.zeros((0, r, c), dtype=data.dtype)
    nblk = int(count(nbr, _p(ap), _p(aj), _p(bp), nt))
    if nblk < 0:
        return None
    bj = np.empty(nblk, dtype=itype)
    bx = np.empty((nblk, r, c), dtype=data.dtype)
    fill(nbr, _p(ap), _p(aj), _p(ax), _p(bp), _p(bj), _p(bx), nt)
    return bp, bj, bx
