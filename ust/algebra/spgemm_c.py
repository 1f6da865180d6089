"""A C SpGEMM kernel (Gustavson, OpenMP over chunks of rows) whose output rows come out sorted.

SciPy's SpGEMM is single-threaded and leaves each row's columns in linked-list order, so a
canonical CSR result costs it a second pass (``sort_indices``).  This kernel makes the
canonical result in one pass over the rows:

* Each row is accumulated Gustavson's way (a per-thread marker array and dense accumulator;
  sums in SciPy's order, from 0, so the values are SciPy's bit for bit), its column list
  sorted, its sums written, and exact zeros dropped in place where the row has any (SciPy's
  rule) -- no separate symbolic pass, no global compaction pass.
* The output is reserved at the product count (an upper bound on the entries; untouched
  pages cost nothing) and trimmed in place (``realloc``) afterwards.  A product count too
  large to reserve falls back to two passes (count, then fill) with exact sizes.
* Sorting: rows of stencil-like matrices repeat one column pattern shifted by a constant; a
  row whose list is the previous row's shifted reuses that row's sorting permutation (no
  comparisons); other rows are argsorted (insertion sort when short, introsort when long).
* Threads take chunks of rows (about :data:`CHUNK_WORK` products) in order.  A chunk whose
  predecessors all have their place is written in place, any other into the thread's arena
  and copied out once its place -- a prefix sum over chunk lengths, advanced by whichever
  thread finishes a chunk -- is known.  No thread waits for another until the chunks run out,
  so a thread that the OS holds back (a shared machine) delays no one; the earlier count +
  fill design waited at a barrier between its passes.
* :func:`ust.runtime.cpu_threads.threads` picks one thread below :data:`SMALL_PRODUCTS`
  products and otherwise the cores that other processes leave free.

The source is generated per (value type, index type), compiled with the system compiler
through :mod:`ust.backends.generated.compile_c` (cached on disk by a hash of the source).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ust.codegen.emit_c import C_INDEX, C_SCALAR
from ust.runtime.cpu_threads import threads

__all__ = ["SOURCE_TEMPLATE", "source", "spgemm_csr_c"]

SOURCE_TEMPLATE = r"""
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
@INCLUDES@
typedef @VAL@ val_t;
typedef @IDX@ idx_t;

/* ------------------------------------------------------------------ sorting */

#define UST_INSERTION(T, c, len)                                                   \
    for (int64_t s_ = 1; s_ < (len); ++s_) {                                       \
        T v_ = (c)[s_];                                                            \
        int64_t t_ = s_ - 1;                                                       \
        while (t_ >= 0 && (c)[t_] > v_) { (c)[t_ + 1] = (c)[t_]; --t_; }           \
        (c)[t_ + 1] = v_;                                                          \
    }

/* introsort: median-of-three quicksort, heapsort below a depth limit, insertion sort for
   short ranges (no O(len^2) worst case) */
#define UST_DEFINE_SORT(NAME, T)                                                   \
static void NAME##_sift(T* c, int64_t root, int64_t end) {                       \
    for (;;) {                                                                     \
        int64_t ch = 2 * root + 1;                                                 \
        if (ch >= end) return;                                                     \
        if (ch + 1 < end && c[ch + 1] > c[ch]) ++ch;                               \
        if (!(c[ch] > c[root])) return;                                            \
        T t = c[root]; c[root] = c[ch]; c[ch] = t;                                 \
        root = ch;                                                                 \
    }                                                                              \
}                                                                                  \
static void NAME##_heap(T* c, int64_t len) {                                       \
    for (int64_t s = len / 2 - 1; s >= 0; --s) NAME##_sift(c, s, len);             \
    for (int64_t e = len - 1; e > 0; --e) {                                        \
        T t = c[0]; c[0] = c[e]; c[e] = t;                                         \
        NAME##_sift(c, 0, e);                                                      \
    }                                                                              \
}                                                                                  \
static void NAME(T* c, int64_t len) {                                              \
    int depth = 0;                                                                 \
    for (int64_t l = len; l > 1; l >>= 1) depth += 2;                              \
    while (len > 32) {                                                             \
        if (depth-- == 0) { NAME##_heap(c, len); return; }                         \
        T a = c[0], b = c[len / 2], d = c[len - 1];                                \
        T piv = a < b ? (b < d ? b : (a < d ? d : a)) : (a < d ? a : (b < d ? d : b)); \
        int64_t i = 0, j = len - 1;                                                \
        for (;;) {                                                                 \
            while (c[i] < piv) ++i;                                                \
            while (c[j] > piv) --j;                                                \
            if (i >= j) break;                                                     \
            T t = c[i]; c[i] = c[j]; c[j] = t;                                     \
            ++i; --j;                                                              \
        }                                                                          \
        if (j + 1 < len - j - 1) { NAME(c, j + 1); c += j + 1; len -= j + 1; }      \
        else { NAME(c + j + 1, len - j - 1); len = j + 1; }                        \
    }                                                                              \
    UST_INSERTION(T, c, len)                                                       \
}

UST_DEFINE_SORT(sort_idx, idx_t)
UST_DEFINE_SORT(sort_key, uint64_t)

/* ------------------------------------------------------------------ one thread's workspace */

#define REUSE_BITS 12
#define REUSE_MAX ((int64_t)1 << REUSE_BITS)

typedef struct {
    idx_t* mark;      /* mark[j] == i: column j already in row i's list */
    val_t* acc;       /* dense accumulator, valid where marked */
    idx_t* prev;      /* the previous sorted-by-argsort row's column list, in accumulation order */
    uint16_t* perm;   /* the permutation that sorted it */
    uint64_t* keys;   /* (column << REUSE_BITS) | position, for the argsort */
    int64_t plen;     /* its length (-1: none) */
    int reuse;
} ws_t;

static void ws_close(ws_t* w) {
    free(w->mark); free(w->acc); free(w->prev); free(w->perm); free(w->keys);
}

static int ws_open(ws_t* w, int64_t n) {
    size_t cols = (size_t)(n > 0 ? n : 1);
    w->mark = (idx_t*)malloc(cols * sizeof(idx_t));
    w->acc = (val_t*)malloc(cols * sizeof(val_t));
    w->prev = (idx_t*)malloc((size_t)REUSE_MAX * sizeof(idx_t));
    w->perm = (uint16_t*)malloc((size_t)REUSE_MAX * sizeof(uint16_t));
    w->keys = (uint64_t*)malloc((size_t)REUSE_MAX * sizeof(uint64_t));
    w->plen = -1;
    w->reuse = n < ((int64_t)1 << (63 - REUSE_BITS));
    if (!w->mark || !w->acc || !w->prev || !w->perm || !w->keys) {
        ws_close(w);
        memset(w, 0, sizeof(*w));
        return 0;
    }
    memset(w->mark, 0xff, cols * sizeof(idx_t)); /* -1: no row */
    return 1;
}

/* Sort a row's column list.  Rows of stencil-like matrices repeat one pattern shifted by a
   constant; when the list is the previous one shifted, the previous sorting permutation
   applies (no comparison sort), otherwise an argsort records the permutation for the next. */
static void sort_row(ws_t* w, idx_t* restrict c, int64_t len) {
    if (len < 2) return;
    if (len > REUSE_MAX || !w->reuse) { sort_idx(c, len); w->plen = -1; return; }
    idx_t* restrict prev = w->prev;
    uint16_t* restrict perm = w->perm;
    if (len == w->plen) {
        idx_t d = c[0] - prev[0];
        int same = 1;
        for (int64_t t = 1; t < len; ++t) same &= (c[t] - prev[t] == d);
        if (same) {
            for (int64_t t = 0; t < len; ++t) prev[t] = c[t];
            for (int64_t t = 0; t < len; ++t) c[t] = prev[perm[t]];
            return;
        }
    }
    uint64_t* restrict keys = w->keys;
    for (int64_t t = 0; t < len; ++t) {
        prev[t] = c[t];
        keys[t] = ((uint64_t)c[t] << REUSE_BITS) | (uint64_t)t;
    }
    if (len <= 32) { UST_INSERTION(uint64_t, keys, len) } else sort_key(keys, len);
    for (int64_t t = 0; t < len; ++t) {
        c[t] = (idx_t)(keys[t] >> REUSE_BITS);
        perm[t] = (uint16_t)(keys[t] & (REUSE_MAX - 1));
    }
    w->plen = len;
}

/* Row i of A @ B: its distinct columns sorted into c, their sums into x (in SciPy's order of
   summation: A's row in order, each B row in order, from 0); returns the length and adds the
   number of exact zeros to *zeros. */
static inline int64_t row(int64_t i, const idx_t* restrict ap, const idx_t* restrict aj,
                          const val_t* restrict ax, const idx_t* restrict bp,
                          const idx_t* restrict bj, const val_t* restrict bx, ws_t* w,
                          idx_t* restrict c, val_t* restrict x, int64_t* zeros) {
    idx_t* restrict mark = w->mark;
    val_t* restrict acc = w->acc;
    int64_t len = 0;
    for (int64_t p = ap[i]; p < ap[i + 1]; ++p) {
        int64_t k = aj[p];
        val_t a = ax[p];
        for (int64_t q = bp[k]; q < bp[k + 1]; ++q) {
            int64_t j = bj[q];
            if (mark[j] != (idx_t)i) {
                mark[j] = (idx_t)i;
                acc[j] = (val_t)0 + a * bx[q];
                c[len++] = (idx_t)j;
            } else {
                acc[j] += a * bx[q];
            }
        }
    }
    sort_row(w, c, len);
    int64_t z = 0;
    for (int64_t t = 0; t < len; ++t) {
        val_t v = acc[c[t]];
        x[t] = v;
        z += (v == (val_t)0);
    }
    *zeros += z;
    return len;
}

/* drop the exact zeros of one row in place (SciPy's rule); returns the new length */
static int64_t drop_zeros(idx_t* restrict c, val_t* restrict x, int64_t len) {
    int64_t out = 0;
    for (int64_t t = 0; t < len; ++t)
        if (x[t] != (val_t)0) { c[out] = c[t]; x[out] = x[t]; ++out; }
    return out;
}

/* ------------------------------------------------------------------ products per row */

/* rub[i + 1] - rub[i]: the products of row i (an upper bound on its entries); returns the total */
int64_t ust_spgemm_work(int64_t m, const idx_t* ap, const idx_t* aj, const idx_t* bp,
                        int64_t* rub, int nt) {
    rub[0] = 0;
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < m; ++i) {
        int64_t s = 0;
        for (int64_t p = ap[i]; p < ap[i + 1]; ++p) s += (int64_t)bp[aj[p] + 1] - bp[aj[p]];
        rub[i + 1] = s;
    }
    for (int64_t i = 0; i < m; ++i) rub[i + 1] += rub[i];
    return rub[m];
}

/* ------------------------------------------------------------------ one pass */

/* C = A @ B in one pass, into cj / cx of rub[m] entries (the caller trims them to cp[m]).
   Rows go in chunks of about `work` products.  One thread: each chunk is written in place.
   Several: chunks are handed out in order; a chunk whose predecessors all have their place
   when it starts is written in place, any other into the thread's arena and copied out as
   soon as its place is known (usually right after it is done, from cache).  Placing (a
   prefix sum over chunk lengths) is done by whichever thread finishes a chunk, and a thread
   never waits for another until its chunks run out: a thread that the OS holds back delays
   no one (the others keep their chunks in their arenas meanwhile). */

typedef struct { idx_t* j; val_t* x; int64_t cap; } buf_t;

typedef struct { int64_t chunk, r0, r1, len; buf_t b; } pend_t;

/* a thread's chunks waiting for their place, oldest first, each in its own buffer; flushed
   buffers go back to a spare stack, so a thread in step with the others cycles through two
   or three cache-resident buffers */
typedef struct {
    pend_t* list;
    int64_t head, count, cap;  /* pending: list[head .. head + count) */
    buf_t* spare;
    int64_t nspare, capspare;
} arena_t;

static int64_t chunk_start(const int64_t* rub, int64_t m, int64_t nch, int64_t c) {
    if (c <= 0) return 0;
    if (c >= nch) return m;
    int64_t target = (int64_t)((double)rub[m] * ((double)c / (double)nch));
    int64_t lo = 0, hi = m; /* the first row r with rub[r] >= target */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rub[mid] < target) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void place(const int64_t* clen, int64_t* cbase, int64_t nch, int64_t* placed, int64_t* running) {
    #pragma omp critical(ust_spgemm_place)
    {
        int64_t f = __atomic_load_n(placed, __ATOMIC_RELAXED);
        int64_t r = __atomic_load_n(running, __ATOMIC_RELAXED);
        while (f < nch) {
            int64_t len = __atomic_load_n(&clen[f], __ATOMIC_ACQUIRE);
            if (len < 0) break;
            cbase[f] = r;
            r += len;
            ++f;
        }
        __atomic_store_n(running, r, __ATOMIC_RELAXED);
        __atomic_store_n(placed, f, __ATOMIC_RELEASE);
    }
}

/* copy out the pending chunks that have their place (all of them, waiting, when `all`) */
static void flush(arena_t* ar, const int64_t* cbase, const int64_t* placed, const int* failed, int all,
                  int64_t* cp, idx_t* cj, val_t* cx) {
    int spins = 0;
    while (ar->count) {
        pend_t* pd = &ar->list[ar->head];
        if (__atomic_load_n(placed, __ATOMIC_ACQUIRE) <= pd->chunk) {
            if (!all || __atomic_load_n(failed, __ATOMIC_RELAXED)) return;
            if (++spins > 64) sched_yield();
            continue;
        }
        int64_t base = cbase[pd->chunk];
        if (pd->len) {
            memcpy(cj + base, pd->b.j, (size_t)pd->len * sizeof(idx_t));
            memcpy(cx + base, pd->b.x, (size_t)pd->len * sizeof(val_t));
        }
        for (int64_t i = pd->r0; i < pd->r1; ++i) cp[i + 1] += base;
        ar->spare[ar->nspare++] = pd->b; /* room: every buffer is pending or spare */
        ++ar->head;
        --ar->count;
    }
    ar->head = 0;
}

/* a pending slot with a buffer of `need` entries (NULL: out of memory) */
static pend_t* arena_push(arena_t* ar, int64_t need) {
    if (ar->head + ar->count == ar->cap) {
        if (ar->head) {
            memmove(ar->list, ar->list + ar->head, (size_t)ar->count * sizeof(pend_t));
            ar->head = 0;
        } else {
            int64_t cap = ar->cap ? 2 * ar->cap : 8;
            pend_t* l = (pend_t*)realloc(ar->list, (size_t)cap * sizeof(pend_t));
            buf_t* s = (buf_t*)realloc(ar->spare, (size_t)cap * sizeof(buf_t));
            if (l) ar->list = l;
            if (s) ar->spare = s;
            if (!l || !s) return NULL;
            ar->cap = cap;
        }
    }
    buf_t b = {NULL, NULL, 0};
    if (ar->nspare) b = ar->spare[--ar->nspare];
    if (b.cap < need) {
        free(b.j);
        free(b.x);
        b.cap = need > 2 * b.cap ? need : 2 * b.cap;
        b.j = (idx_t*)malloc((size_t)(b.cap > 0 ? b.cap : 1) * sizeof(idx_t));
        b.x = (val_t*)malloc((size_t)(b.cap > 0 ? b.cap : 1) * sizeof(val_t));
        if (!b.j || !b.x) { free(b.j); free(b.x); return NULL; }
    }
    pend_t* pd = &ar->list[ar->head + ar->count++];
    pd->b = b;
    return pd;
}

static void arena_close(arena_t* ar) {
    for (int64_t s = 0; s < ar->count; ++s) { free(ar->list[ar->head + s].b.j); free(ar->list[ar->head + s].b.x); }
    for (int64_t s = 0; s < ar->nspare; ++s) { free(ar->spare[s].j); free(ar->spare[s].x); }
    free(ar->list);
    free(ar->spare);
}

int ust_spgemm(int64_t m, int64_t n, const idx_t* ap, const idx_t* aj, const val_t* ax,
               const idx_t* bp, const idx_t* bj, const val_t* bx, const int64_t* rub,
               int64_t work, int64_t* cp, idx_t* cj, val_t* cx, int nt) {
    int64_t total = rub[m];
    int64_t nch = nt > 1 && work > 0 ? (total + work - 1) / work : 1;
    if (nch > m) nch = m;
    if (nch < 1) nch = 1;
    if (nch == 1) nt = 1;
    int64_t* clen = (int64_t*)malloc((size_t)nch * sizeof(int64_t));
    int64_t* cbase = (int64_t*)malloc((size_t)nch * sizeof(int64_t));
    if (!clen || !cbase) { free(clen); free(cbase); return 1; }
    for (int64_t c = 0; c < nch; ++c) clen[c] = -1;
    int64_t next = 0, placed = 0, running = 0;
    int failed = 0;
    cp[0] = 0;
    #pragma omp parallel num_threads(nt)
    {
        ws_t w;
        arena_t ar;
        memset(&ar, 0, sizeof(ar));
        int ok = ws_open(&w, n);
        if (!ok) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        for (;;) {
            if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) break;
            int64_t c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (c >= nch) break;
            int64_t r0 = chunk_start(rub, m, nch, c), r1 = chunk_start(rub, m, nch, c + 1);
            int direct = __atomic_load_n(&placed, __ATOMIC_ACQUIRE) == c;
            int64_t base = 0;
            pend_t* pd = NULL;
            idx_t* oj;
            val_t* ox;
            if (direct) {
                base = __atomic_load_n(&running, __ATOMIC_RELAXED); /* fixed until this chunk is done */
                oj = cj + base;
                ox = cx + base;
            } else {
                int64_t need = rub[r1] - rub[r0];
                if ((double)need > (double)(r1 - r0) * (double)n) need = (r1 - r0) * n;
                pd = arena_push(&ar, need);
                if (!pd) { __atomic_store_n(&failed, 1, __ATOMIC_RELAXED); break; }
                oj = pd->b.j;
                ox = pd->b.x;
            }
            int64_t pos = 0;
            for (int64_t i = r0; i < r1; ++i) {
                int64_t zeros = 0;
                int64_t len = row(i, ap, aj, ax, bp, bj, bx, &w, oj + pos, ox + pos, &zeros);
                if (zeros) len = drop_zeros(oj + pos, ox + pos, len);
                pos += len;
                cp[i + 1] = base + pos;
            }
            if (pd) { pd->chunk = c; pd->r0 = r0; pd->r1 = r1; pd->len = pos; }
            __atomic_store_n(&clen[c], pos, __ATOMIC_RELEASE);
            place(clen, cbase, nch, &placed, &running);
            flush(&ar, cbase, &placed, &failed, 0, cp, cj, cx);
        }
        flush(&ar, cbase, &placed, &failed, 1, cp, cj, cx);
        arena_close(&ar);
        if (ok) ws_close(&w);
    }
    free(clen);
    free(cbase);
    return failed;
}

/* ------------------------------------------------------------------ two passes (exact sizes) */

int ust_spgemm_count(int64_t m, int64_t n, const idx_t* ap, const idx_t* aj,
                     const idx_t* bp, const idx_t* bj, int64_t* counts, int nt) {
    int failed = 0;
    #pragma omp parallel num_threads(nt)
    {
        idx_t* mark = (idx_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(idx_t));
        if (!mark) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        else memset(mark, 0xff, (size_t)(n > 0 ? n : 1) * sizeof(idx_t));
        #pragma omp for schedule(dynamic, 512)
        for (int64_t i = 0; i < m; ++i) {
            if (!mark) continue;
            int64_t c = 0;
            for (int64_t p = ap[i]; p < ap[i + 1]; ++p) {
                int64_t k = aj[p];
                for (int64_t q = bp[k]; q < bp[k + 1]; ++q) {
                    int64_t j = bj[q];
                    if (mark[j] != (idx_t)i) { mark[j] = (idx_t)i; ++c; }
                }
            }
            counts[i] = c;
        }
        free(mark);
    }
    return failed;
}

int ust_spgemm_fill(int64_t m, int64_t n, const idx_t* ap, const idx_t* aj, const val_t* ax,
                    const idx_t* bp, const idx_t* bj, const val_t* bx,
                    const int64_t* cp, idx_t* cj, val_t* cx, int nt, int64_t* zeros) {
    int failed = 0;
    int64_t nzero = 0;
    #pragma omp parallel num_threads(nt) reduction(+:nzero)
    {
        ws_t w;
        int ok = ws_open(&w, n);
        if (!ok) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        #pragma omp for schedule(dynamic, 512)
        for (int64_t i = 0; i < m; ++i)
            if (ok) row(i, ap, aj, ax, bp, bj, bx, &w, cj + cp[i], cx + cp[i], &nzero);
        if (ok) ws_close(&w);
    }
    *zeros = nzero;
    return failed;
}
"""

SUPPORTED_VALUES = frozenset(C_SCALAR)


def source(value_dtype: Any, index_dtype: Any) -> str:
    """C source of the kernels for one value and one index dtype."""
    v = C_SCALAR[np.dtype(value_dtype).name]
    i = C_INDEX[np.dtype(index_dtype).name]
    return (
        SOURCE_TEMPLATE.replace("@VAL@", v)
        .replace("@IDX@", i)
        .replace("@INCLUDES@", "#include <complex.h>" if "Complex" in v else "")
    )


@functools.lru_cache(maxsize=32)
def _library(value: str, index: str) -> Any:
    from ust.backends.generated.compile_c import load_library

    lib = load_library(source(value, index), name=f"ust_spgemm_{value}_{index}")
    vp, i64, cint = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.ust_spgemm_work.restype = i64
    lib.ust_spgemm_work.argtypes = [i64, vp, vp, vp, vp, cint]
    lib.ust_spgemm.restype = cint
    lib.ust_spgemm.argtypes = [i64, i64, vp, vp, vp, vp, vp, vp, vp, i64, vp, vp, vp, cint]
    lib.ust_spgemm_count.restype = cint
    lib.ust_spgemm_count.argtypes = [i64, i64, vp, vp, vp, vp, vp, cint]
    lib.ust_spgemm_fill.restype = cint
    lib.ust_spgemm_fill.argtypes = [i64, i64, vp, vp, vp, vp, vp, vp, vp, vp, vp, cint, vp]
    return lib


#: Products (A's entries times the B rows they meet) below which SpGEMM runs on one thread:
#: measured here, two threads win from about 5e4 products (Poisson 12^3: 0.23 ms vs 0.29 ms)
#: and break even at 2e4 (Poisson 8^3).
SMALL_PRODUCTS = 1 << 16
#: Most products per chunk of rows on several threads (a chunk's result stays in cache
#: until its place is known).
CHUNK_WORK = 1 << 15
#: One-pass results are first allocated at the product count and trimmed; past this many
#: bytes (a product count far above the result's size would reserve that much address
#: space) two passes (count, then fill) size the result exactly.
_ONE_PASS_BYTES = 1 << 34


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
    m, n = int(shape_a[0]), int(shape_b[1])
    lib = _library(ax.dtype.name, itype.name)
    rub = np.empty(m + 1, dtype=np.int64)
    work = int(lib.ust_spgemm_work(m, _p(ap), _p(aj), _p(bp), _p(rub), threads(int(aj.shape[0]))))
    nt = threads(work, SMALL_PRODUCTS)
    chunk = min(CHUNK_WORK, max(1 << 12, work // (8 * nt)))
    entry = itype.itemsize + ax.dtype.itemsize
    if work * entry <= _ONE_PASS_BYTES:
        cp = np.empty(m + 1, dtype=np.int64)
        cj = np.empty(max(work, 1), dtype=itype)
        cx = np.empty(max(work, 1), dtype=ax.dtype)
        args = (_p(ap), _p(aj), _p(ax), _p(bp), _p(bj), _p(bx), _p(rub), chunk, _p(cp), _p(cj), _p(cx))
        if lib.ust_spgemm(m, n, *args, nt):
            raise InvalidValueError(f"SpGEMM: out of memory for the workspaces ({n} columns per thread)")
        nnz = int(cp[-1])
        if nnz > np.iinfo(itype).max:
            raise InvalidValueError(f"SpGEMM result has {nnz} entries, more than {itype.name} indices hold")
        # trim in place: realloc shrinks the block (the untouched tail was never paged in)
        cj.resize(nnz, refcheck=False)
        cx.resize(nnz, refcheck=False)
        return cp.astype(itype, copy=False), cj, cx
    counts = np.empty(m, dtype=np.int64)
    if lib.ust_spgemm_count(m, n, _p(ap), _p(aj), _p(bp), _p(bj), _p(counts), nt):
        raise InvalidValueError(f"SpGEMM: out of memory for the marker arrays ({n} columns per thread)")
    cp = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=cp[1:])
    nnz = int(cp[-1])
    if nnz > np.iinfo(itype).max:
        raise InvalidValueError(f"SpGEMM result has {nnz} entries, more than {itype.name} indices hold")
    cj = np.empty(nnz, dtype=itype)
    cx = np.empty(nnz, dtype=ax.dtype)
    zeros = np.zeros(1, dtype=np.int64)
    args2 = (_p(ap), _p(aj), _p(ax), _p(bp), _p(bj), _p(bx), _p(cp), _p(cj), _p(cx))
    if lib.ust_spgemm_fill(m, n, *args2, nt, _p(zeros)):
        raise InvalidValueError(f"SpGEMM: out of memory for the accumulator arrays ({n} columns per thread)")
    if zeros[0]:  # SciPy drops exact zeros of the sum
        keep = cx != 0
        rows = np.repeat(np.arange(m, dtype=np.int64), counts)
        cp = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=m), out=cp[1:])
        cj, cx = cj[keep], cx[keep]
    return cp.astype(itype, copy=False), cj, cx
