"""A C SpGEMM kernel (Gustavson, OpenMP over rows) whose output rows come out sorted.

SciPy's SpGEMM is single-threaded and leaves each row's columns in linked-list order, so a
canonical CSR result costs it a second pass (``sort_indices``).  This kernel does both jobs
in one parallel sweep per pass: a symbolic pass counts each row's distinct columns with a
per-thread marker array, a numeric pass accumulates into a per-thread dense row and sorts the
row's column list (insertion sort for short rows, ``qsort`` for long ones) before writing.
Exact zeros are then dropped (SciPy's rule) by one vectorised compaction, only when present.

The source is generated per (value type, index type), compiled with the system compiler
through :mod:`ust.codegen.compile_c` (cached on disk by a hash of the source).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import numpy as np

__all__ = ["SOURCE_TEMPLATE", "source", "spgemm_csr_c"]

SOURCE_TEMPLATE = r"""
#include <stdint.h>
#include <stdlib.h>
{INCLUDES}
typedef {V} val_t;
typedef {I} idx_t;

static int cmp_idx(const void* a, const void* b) {{
    idx_t x = *(const idx_t*)a, y = *(const idx_t*)b;
    return (x > y) - (x < y);
}}

static void sort_cols(idx_t* c, int64_t len) {{
    if (len > 48) {{ qsort(c, (size_t)len, sizeof(idx_t), cmp_idx); return; }}
    for (int64_t s = 1; s < len; ++s) {{
        idx_t v = c[s];
        int64_t t = s - 1;
        while (t >= 0 && c[t] > v) {{ c[t + 1] = c[t]; --t; }}
        c[t + 1] = v;
    }}
}}

int ust_spgemm_count(int64_t m, int64_t n, const idx_t* ap, const idx_t* aj,
                     const idx_t* bp, const idx_t* bj, int64_t* counts, int nt) {{
    int failed = 0;
    #pragma omp parallel num_threads(nt)
    {{
        idx_t* mark = (idx_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(idx_t));
        if (!mark) {{
            #pragma omp atomic write
            failed = 1;
        }} else {{
            for (int64_t j = 0; j < n; ++j) mark[j] = -1;
        }}
        #pragma omp for schedule(dynamic, 512)
        for (int64_t i = 0; i < m; ++i) {{
            if (!mark) continue;
            int64_t c = 0;
            for (int64_t p = ap[i]; p < ap[i + 1]; ++p) {{
                int64_t k = aj[p];
                for (int64_t q = bp[k]; q < bp[k + 1]; ++q) {{
                    int64_t j = bj[q];
                    if (mark[j] != (idx_t)i) {{ mark[j] = (idx_t)i; ++c; }}
                }}
            }}
            counts[i] = c;
        }}
        free(mark);
    }}
    return failed;
}}

int ust_spgemm_fill(int64_t m, int64_t n, const idx_t* ap, const idx_t* aj, const val_t* ax,
                    const idx_t* bp, const idx_t* bj, const val_t* bx,
                    const int64_t* cp, idx_t* cj, val_t* cx, int nt, int64_t* zeros) {{
    int failed = 0;
    int64_t nzero = 0;
    #pragma omp parallel num_threads(nt) reduction(+:nzero)
    {{
        idx_t* mark = (idx_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(idx_t));
        val_t* acc = (val_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(val_t));
        if (!mark || !acc) {{
            #pragma omp atomic write
            failed = 1;
        }} else {{
            for (int64_t j = 0; j < n; ++j) mark[j] = -1;
        }}
        #pragma omp for schedule(dynamic, 512)
        for (int64_t i = 0; i < m; ++i) {{
            if (!mark || !acc) continue;
            int64_t start = cp[i], len = 0;
            for (int64_t p = ap[i]; p < ap[i + 1]; ++p) {{
                int64_t k = aj[p];
                val_t a = ax[p];
                for (int64_t q = bp[k]; q < bp[k + 1]; ++q) {{
                    int64_t j = bj[q];
                    if (mark[j] != (idx_t)i) {{ mark[j] = (idx_t)i; acc[j] = a * bx[q]; cj[start + len++] = (idx_t)j; }}
                    else acc[j] += a * bx[q];
                }}
            }}
            sort_cols(cj + start, len);
            for (int64_t t = 0; t < len; ++t) {{
                val_t v = acc[cj[start + t]];
                cx[start + t] = v;
                nzero += (v == (val_t)0);
            }}
        }}
        free(mark);
        free(acc);
    }}
    *zeros = nzero;
    return failed;
}}
"""

_C_VALUES = {
    "float32": "float",
    "float64": "double",
    "complex64": "float _Complex",
    "complex128": "double _Complex",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
}
_C_INDEX = {"int32": "int32_t", "int64": "int64_t"}
SUPPORTED_VALUES = frozenset(_C_VALUES)


def source(value_dtype: Any, index_dtype: Any) -> str:
    """C source of the kernel pair for one value and one index dtype."""
    v = _C_VALUES[np.dtype(value_dtype).name]
    i = _C_INDEX[np.dtype(index_dtype).name]
    return SOURCE_TEMPLATE.format(V=v, I=i, INCLUDES="#include <complex.h>" if "Complex" in v else "")


@functools.lru_cache(maxsize=32)
def _library(value: str, index: str) -> tuple[Any, Any]:
    from ust.codegen.compile_c import load_library

    lib = load_library(source(value, index), name=f"ust_spgemm_{value}_{index}")
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    count = lib.ust_spgemm_count
    count.restype = ctypes.c_int
    count.argtypes = [i64, i64, vp, vp, vp, vp, vp, ctypes.c_int]
    fill = lib.ust_spgemm_fill
    fill.restype = ctypes.c_int
    fill.argtypes = [i64, i64, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_int, vp]
    return count, fill


#: Threads for the kernel: None picks them (one for small operands, else every usable core);
#: an int forces a count (benchmarks compare 1 and all).
THREADS: int | None = None
_SMALL = 1 << 18  # stored entries below which a parallel region costs more than it saves


def threads(entries: int) -> int:
    """How many OpenMP threads to use for operands with ``entries`` stored entries in all.

    ``OMP_NUM_THREADS`` when set; otherwise, as OpenMP's dynamic adjustment does (libgomp with
    ``OMP_DYNAMIC``), the usable cores that the 15-minute load average leaves free (not counting
    this process), at least one: on a shared machine a thread that waits for a busy core costs
    more than it brings (measured here: 2 threads 1.3x slower than 1 at a load of 2 on 2 cores).
    """
    if THREADS is not None:
        return max(1, int(THREADS))
    if entries < _SMALL:
        return 1
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        cores = max(1, os.cpu_count() or 1)
    try:
        busy = os.getloadavg()[2] + 0.1
    except OSError:  # pragma: no cover - no load average on this platform
        return cores
    return max(1, min(cores, int(cores - max(busy - 1.0, 0.0) + 0.5)))  # this process is one of the busy


def _p(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def spgemm_csr_c(
    shape_a: tuple[int, int], a: tuple[Any, Any, Any], shape_b: tuple[int, int], b: tuple[Any, Any, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``C = A @ B`` for canonical CSR operands given as ``(indptr, indices, data)`` of one index
    dtype and one value dtype; returns C's sorted ``(indptr, indices, data)``, exact zeros dropped."""
    from ust.runtime.errors import InvalidValueError

    ap, aj, ax = (np.ascontiguousarray(x) for x in a)
    bp, bj, bx = (np.ascontiguousarray(x) for x in b)
    itype = ap.dtype
    m, n = shape_a[0], shape_b[1]
    count, fill = _library(ax.dtype.name, itype.name)
    nt = threads(int(aj.shape[0]) + int(bj.shape[0]))
    counts = np.empty(m, dtype=np.int64)
    if count(m, n, _p(ap), _p(aj), _p(bp), _p(bj), _p(counts), nt):
        raise InvalidValueError(f"SpGEMM: out of memory for the marker arrays ({n} columns per thread)")
    cp = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=cp[1:])
    nnz = int(cp[-1])
    if nnz > np.iinfo(itype).max:
        raise InvalidValueError(f"SpGEMM result has {nnz} entries, more than {itype.name} indices hold")
    cj = np.empty(nnz, dtype=itype)
    cx = np.empty(nnz, dtype=ax.dtype)
    zeros = np.zeros(1, dtype=np.int64)
    if fill(m, n, _p(ap), _p(aj), _p(ax), _p(bp), _p(bj), _p(bx), _p(cp), _p(cj), _p(cx), nt, _p(zeros)):
        raise InvalidValueError(f"SpGEMM: out of memory for the accumulator arrays ({n} columns per thread)")
    if zeros[0]:  # SciPy drops exact zeros of the sum
        keep = cx != 0
        rows = np.repeat(np.arange(m, dtype=np.int64), counts)
        cp = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=m), out=cp[1:])
        cj, cx = cj[keep], cx[keep]
    return cp.astype(itype, copy=False), cj, cx
