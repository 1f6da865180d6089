"""C99 + OpenMP source of the compiler's kernels (:mod:`ust.codegen.compute_lower`).

The outer parallel loop becomes ``#pragma omp parallel for schedule(dynamic, CHUNK)`` on
``NT`` threads (dynamic: rows of a power-law matrix differ by orders of magnitude in work),
and every iteration knows its thread (``ust_tid``), which selects its slice of a row workspace
or of a thread-private output.  Outside that loop ``ust_tid`` is 0.  Values may be integers
(exact arithmetic), reals or complex; ``+-inf`` literals are ``INFINITY``.

ABI as :func:`ust.codegen.emit_c.c_abi`: index scalars (int64), then ``vscal`` (value
scalars through memory), then the buffers.
"""

from __future__ import annotations

import math

from ust.codegen.emit_c import C_INDEX, C_SCALAR, c_params
from ust.codegen.emit_cstyle import CStyleRenderer
from ust.codegen.ir import Accumulate, Const, Decl, Kernel, Loop, Sort, walk

__all__ = ["CHUNK", "emit_compute_c"]

#: Outer iterations handed out at a time by the dynamic schedule.
CHUNK = 32

_SORT = """
/* introsort of an index list: median-of-three quicksort, heapsort past a depth limit (no
   O(n^2) case), insertion sort for short ranges; inline comparisons (qsort calls a function
   per comparison, which costs more than the comparison) */
static void ust_sift_index(int64_t *c, int64_t root, int64_t end) {
    for (;;) {
        int64_t ch = 2 * root + 1;
        if (ch >= end) return;
        if (ch + 1 < end && c[ch + 1] > c[ch]) ++ch;
        if (!(c[ch] > c[root])) return;
        const int64_t t = c[root]; c[root] = c[ch]; c[ch] = t;
        root = ch;
    }
}
static void ust_sort_index(int64_t *c, int64_t n) {
    int depth = 0;
    for (int64_t l = n; l > 1; l >>= 1) depth += 2;
    while (n > 32) {
        if (depth-- == 0) {
            for (int64_t s = n / 2 - 1; s >= 0; --s) ust_sift_index(c, s, n);
            for (int64_t e = n - 1; e > 0; --e) {
                const int64_t t = c[0]; c[0] = c[e]; c[e] = t;
                ust_sift_index(c, 0, e);
            }
            return;
        }
        const int64_t a = c[0], b = c[n / 2], d = c[n - 1];
        const int64_t piv = a < b ? (b < d ? b : (a < d ? d : a)) : (a < d ? a : (b < d ? d : b));
        int64_t i = 0, j = n - 1;
        for (;;) {
            while (c[i] < piv) ++i;
            while (c[j] > piv) --j;
            if (i >= j) break;
            const int64_t t = c[i]; c[i] = c[j]; c[j] = t;
            ++i; --j;
        }
        if (j + 1 < n - j - 1) { ust_sort_index(c, j + 1); c += j + 1; n -= j + 1; }
        else { ust_sort_index(c + j + 1, n - j - 1); n = j + 1; }
    }
    for (int64_t i = 1; i < n; ++i) {
        const int64_t v = c[i];
        int64_t j = i - 1;
        while (j >= 0 && c[j] > v) { c[j + 1] = c[j]; --j; }
        c[j + 1] = v;
    }
}
"""


#: The most output arrays (coordinates and values) of a blocks loop.
MAX_OUTPUTS = 16

#: In-order placement of the blocks of a one-pass sparse assembly (the runtime of a ``blocks``
#: loop).  Threads take blocks in order; a block whose predecessors all have their place when
#: it starts is written straight into the outputs, any other into the thread's arena and
#: copied out once its place -- a running sum over block lengths, advanced by whichever thread
#: finishes a block -- is known.  No thread waits for another until the blocks run out, and no
#: entry moves twice in memory that was not in cache (the outputs' unwritten tail is never
#: touched).  ``o_sched``: [0] the next block, [1] blocks placed, [2] entries placed, [3] failed
#: (out of memory), then NB block lengths (-1: not done), then NB block offsets.
_BLOCKS = """
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#define UST_MAXOUT @MAXOUT@
typedef struct { char *p[UST_MAXOUT]; int64_t cap; } ust_buf_t;
typedef struct { int64_t block, len; ust_buf_t b; } ust_pend_t;
/* a thread's blocks waiting for their place, oldest first; flushed buffers go back to a
   spare stack, so a thread in step with the others cycles through a few cached buffers */
typedef struct {
    ust_pend_t *list;
    int64_t head, count, cap;
    ust_buf_t *spare;
    int64_t nspare;
} ust_arena_t;
/* the output arrays: where they start and their element sizes */
typedef struct { char *base[UST_MAXOUT]; size_t size[UST_MAXOUT]; int n; } ust_outs_t;

static void ust_place(int64_t *sched, int64_t nb) {
    int64_t *len = sched + 4, *off = sched + 4 + nb;
    #pragma omp critical(ust_blocks_place)
    {
        int64_t f = __atomic_load_n(&sched[1], __ATOMIC_RELAXED);
        int64_t r = __atomic_load_n(&sched[2], __ATOMIC_RELAXED);
        while (f < nb) {
            const int64_t n = __atomic_load_n(&len[f], __ATOMIC_ACQUIRE);
            if (n < 0) break;
            off[f] = r;
            r += n;
            ++f;
        }
        __atomic_store_n(&sched[2], r, __ATOMIC_RELAXED);
        __atomic_store_n(&sched[1], f, __ATOMIC_RELEASE);
    }
}

/* copy out the pending blocks that have their place (all of them, waiting, when `all`) */
static void ust_flush(ust_arena_t *ar, int64_t *sched, int64_t nb, const ust_outs_t *o, int all) {
    const int64_t *off = sched + 4 + nb;
    int spins = 0;
    while (ar->count) {
        ust_pend_t *pd = &ar->list[ar->head];
        if (__atomic_load_n(&sched[1], __ATOMIC_ACQUIRE) <= pd->block) {
            if (!all || __atomic_load_n(&sched[3], __ATOMIC_RELAXED)) return;
            if (++spins > 64) sched_yield();
            continue;
        }
        const int64_t base = off[pd->block];
        for (int k = 0; k < o->n && pd->len; ++k)
            memcpy(o->base[k] + (size_t)base * o->size[k], pd->b.p[k], (size_t)pd->len * o->size[k]);
        ar->spare[ar->nspare++] = pd->b; /* room: every buffer is pending or spare */
        ++ar->head;
        --ar->count;
    }
    ar->head = 0;
}

static void ust_buf_free(ust_buf_t *b, int n) {
    for (int k = 0; k < n; ++k) free(b->p[k]);
}

/* a pending slot with a buffer of `need` entries per output (NULL: out of memory) */
static ust_pend_t *ust_arena_push(ust_arena_t *ar, int64_t need, const ust_outs_t *o) {
    if (ar->head + ar->count == ar->cap) {
        if (ar->head) {
            memmove(ar->list, ar->list + ar->head, (size_t)ar->count * sizeof(ust_pend_t));
            ar->head = 0;
        } else {
            const int64_t cap = ar->cap ? 2 * ar->cap : 8;
            ust_pend_t *l = (ust_pend_t *)realloc(ar->list, (size_t)cap * sizeof(ust_pend_t));
            if (l) ar->list = l;
            ust_buf_t *s = (ust_buf_t *)realloc(ar->spare, (size_t)cap * sizeof(ust_buf_t));
            if (s) ar->spare = s;
            if (!l || !s) return NULL;
            ar->cap = cap;
        }
    }
    ust_buf_t b;
    memset(&b, 0, sizeof(b));
    if (ar->nspare) b = ar->spare[--ar->nspare];
    if (b.cap < need) {
        const int64_t cap = need > 2 * b.cap ? need : 2 * b.cap;
        ust_buf_free(&b, o->n);
        memset(&b, 0, sizeof(b));
        b.cap = cap;
        int ok = 1;
        for (int k = 0; k < o->n; ++k) {
            b.p[k] = (char *)malloc((size_t)(cap > 0 ? cap : 1) * o->size[k]);
            ok &= b.p[k] != NULL;
        }
        if (!ok) { ust_buf_free(&b, o->n); return NULL; }
    }
    ust_pend_t *pd = &ar->list[ar->head + ar->count++];
    pd->b = b;
    return pd;
}

static void ust_arena_close(ust_arena_t *ar, int n) {
    for (int64_t s = 0; s < ar->count; ++s) ust_buf_free(&ar->list[ar->head + s].b, n);
    for (int64_t s = 0; s < ar->nspare; ++s) ust_buf_free(&ar->spare[s], n);
    free(ar->list);
    free(ar->spare);
}
"""


#: A ``blocks`` loop around its body (``@BODY@``): ``@b@`` the block, ``@nb@`` the blocks.
_BLOCKS_LOOP = """\
{
    const ust_outs_t ust_o = {{@bases@}, {@sizes@}, @n@};
    #pragma omp parallel num_threads(NT) if(NT > 1 && (@nb@) > 1)
    {
        #ifdef _OPENMP
        const int64_t ust_tid = omp_get_thread_num();
        #endif
        ust_arena_t ust_ar;
        memset(&ust_ar, 0, sizeof(ust_ar));
        for (;;) {
            if (__atomic_load_n(&o_sched[3], __ATOMIC_RELAXED)) break;
            const int64_t @b@ = __atomic_fetch_add(&o_sched[0], 1, __ATOMIC_RELAXED);
            if (@b@ >= @nb@) break;
            char *ust_p[UST_MAXOUT];
            ust_pend_t *ust_pd = NULL;
            if (__atomic_load_n(&o_sched[1], __ATOMIC_ACQUIRE) == @b@) {
                const int64_t base = __atomic_load_n(&o_sched[2], __ATOMIC_RELAXED);
                for (int o = 0; o < ust_o.n; ++o) ust_p[o] = ust_o.base[o] + (size_t)base * ust_o.size[o];
            } else {
                ust_pd = ust_arena_push(&ust_ar, o_bound[@b@ + 1] - o_bound[@b@], &ust_o);
                if (!ust_pd) { __atomic_store_n(&o_sched[3], 1, __ATOMIC_RELAXED); break; }
                for (int o = 0; o < ust_o.n; ++o) ust_p[o] = ust_pd->b.p[o];
            }
            {
@BODY@
                if (ust_pd) { ust_pd->block = @b@; ust_pd->len = wp; }
                __atomic_store_n(&o_sched[4 + @b@], wp, __ATOMIC_RELEASE);
            }
            ust_place(o_sched, @nb@);
            ust_flush(&ust_ar, o_sched, @nb@, &ust_o, 0);
        }
        ust_flush(&ust_ar, o_sched, @nb@, &ust_o, 1);
        ust_arena_close(&ust_ar, ust_o.n);
    }
}
"""


class _ComputeC(CStyleRenderer):
    value_types = C_SCALAR
    index_types = C_INDEX
    bool_type = "int"

    def __init__(self, kernel: Kernel) -> None:
        super().__init__(kernel)
        self.complex = kernel.value_dtype.startswith("complex")
        self.integer = kernel.value_dtype.startswith(("int", "uint"))

    def const(self, e: Const) -> str:
        if e.kind == "bool":
            return "1" if e.value else "0"
        if e.kind == "value":
            v = e.value
            if isinstance(v, complex) or (self.complex and not isinstance(v, bool)):
                c = complex(v)
                return f"({self.vt})({c.real!r} + {c.imag!r} * I)" if c.imag else f"({self.vt}){c.real!r}"
            if self.integer:
                return f"({self.vt}){int(v)}"
            f = float(v)
            if math.isinf(f):
                return "INFINITY" if f > 0 else "(-INFINITY)"
            return f"({self.vt}){f!r}"
        return super().const(e)

    def loop(self, s: Loop, depth: int) -> None:
        if not s.parallel:
            self.serial_loop(s, depth)
            return
        if s.tag == "blocks":
            self.blocks_loop(s, depth)
            return
        trip = f"({self.expr(s.hi)}) - ({self.expr(s.lo)})"
        chunk = 1 if s.tag == "blocks" else CHUNK  # a few blocks of rows per thread: one at a time
        self.out(
            depth,
            f"#pragma omp parallel for schedule(dynamic, {chunk}) num_threads(NT) if(NT > 1 && {trip} > 1)",
        )
        self.out(depth, self.for_head(s))
        self.out(0, "#ifdef _OPENMP")
        self.out(depth + 1, "const int64_t ust_tid = omp_get_thread_num();")
        self.out(0, "#endif")
        self.block(s.body, depth + 1)
        self.out(depth, "}")

    def outputs(self) -> list[tuple[str, str]]:
        """The (name, C type) of the output arrays a blocks loop places: coordinates, then values."""
        outs = [p for p in self.k.params if p.name.startswith("o_crd")] + [self.k.param("o_val")]
        return [(p.name, self.index_types[p.dtype] if p.kind == "ibuf" else self.vt) for p in outs]

    def blocks_loop(self, s: Loop, depth: int) -> None:
        """Blocks of rows handed out in order, each written into its own window of the outputs
        (its place when known at its start, else the thread's arena) and placed back to back
        (the runtime in ``_BLOCKS``).  The body starts ``wp`` at 0 and leaves the block's length
        in it; a block's window holds its bound (an arena's pages past the entries written are never
        touched, so a long row's large bound costs address space only)."""
        first = s.body.body[0] if s.body.body else None
        if not (isinstance(first, Decl) and first.name == "wp"):  # pragma: no cover - the lowering's form
            raise ValueError("a blocks loop starts by declaring its write position wp")
        outs = self.outputs()
        if len(outs) > MAX_OUTPUTS:  # pragma: no cover - a sparse result of rank > MAX_OUTPUTS
            raise ValueError(f"a blocks loop places at most {MAX_OUTPUTS} output arrays")
        fill = {
            "b": s.var,
            "nb": self.expr(s.hi),
            "n": str(len(outs)),
            "bases": ", ".join(f"(char *){n}" for n, _ in outs),
            "sizes": ", ".join(f"sizeof({t})" for _, t in outs),
        }
        head, tail = _BLOCKS_LOOP.split("@BODY@\n")
        self.template(head, fill, depth)
        for n, (name, t) in enumerate(outs):  # the window shadows the output parameters
            self.out(depth + 4, f"{t} *restrict {name} = ({t} *)ust_p[{n}];")
        self.block(s.body, depth + 4)
        self.template(tail, fill, depth)

    def template(self, text: str, fill: dict[str, str], depth: int) -> None:
        """Emit the lines of ``text`` at ``depth`` plus their own indentation, ``@key@`` filled in
        (preprocessor lines stay in column 0)."""
        for line in text.splitlines():
            for key, val in fill.items():
                line = line.replace(f"@{key}@", val)
            body = line.lstrip(" ")
            if not body:
                continue
            self.out(
                0
                if body.startswith("#if") or body.startswith("#endif")
                else depth + (len(line) - len(body)) // 4,
                body,
            )

    def accumulate(self, s: Accumulate, depth: int) -> None:  # pragma: no cover - the C path uses partials
        raise NotImplementedError(
            "atomic accumulation is the GPU's; the C kernels use thread-private outputs"
        )

    def params(self) -> str:
        return c_params(self)

    def function(self) -> str:
        k = self.k
        self.out(0, f"void {k.name}(\n    {self.params()})")
        self.out(0, "{")
        self.out(1, "const int64_t ust_tid = 0;")
        self.out(1, "(void)ust_tid;")
        vscal = [p.name for p in k.params if p.kind == "vscalar"]
        for i, name in enumerate(vscal):
            self.out(1, f"const {self.vt} {name} = vscal[{i}];")
        self.block(k.body, 1)
        self.out(0, "}")
        return "\n".join(self.lines) + "\n"


def emit_compute_c(kernels: list[Kernel]) -> str:
    """C99 source defining one function per kernel (named ``kernel.name``)."""
    lines = [
        "/* Generated by ust (ust.codegen.emit_compute_c). Do not edit. */",
        "#include <stdint.h>",
        "#include <math.h>",
        "#ifdef _OPENMP",
        "#include <omp.h>",
        "#endif",
    ]
    if any(k.value_dtype.startswith("complex") for k in kernels):
        lines.append("#include <complex.h>")
    if any(isinstance(n, Sort) for k in kernels for n in walk(k.body)):
        lines.append(_SORT)
    if any(isinstance(n, Loop) and n.tag == "blocks" for k in kernels for n in walk(k.body)):
        lines.insert(0, "#define _POSIX_C_SOURCE 200809L /* sched_yield */")
        lines.append(_BLOCKS.replace("@MAXOUT@", str(MAX_OUTPUTS)))
    parts = ["\n".join(lines) + "\n"]
    for k in kernels:
        parts.append(_ComputeC(k).function())
    return "\n".join(parts)
