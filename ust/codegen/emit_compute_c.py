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
from ust.codegen.ir import Accumulate, Const, Kernel, Loop, Sort, walk

__all__ = ["CHUNK", "emit_compute_c"]

#: Outer iterations handed out at a time by the dynamic schedule.
CHUNK = 32

_SORT = """
#include <stdlib.h>
static int ust_cmp_index(const void *x, const void *y) {
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}
static void ust_sort_index(int64_t *a, int64_t n) {
    if (n >= 48) { qsort(a, (size_t)n, sizeof(int64_t), ust_cmp_index); return; }
    if (n < 48) {
        for (int64_t i = 1; i < n; ++i) {
            const int64_t v = a[i];
            int64_t j = i - 1;
            while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; --j; }
            a[j + 1] = v;
        }
        return;
    }
    /* heapsort: in place, O(n log n), no recursion */
    for (int64_t start = n / 2 - 1; ; --start) {
        int64_t root = start;
        for (;;) {
            int64_t child = 2 * root + 1;
            if (child >= n) break;
            if (child + 1 < n && a[child] < a[child + 1]) ++child;
            if (a[root] >= a[child]) break;
            const int64_t t = a[root]; a[root] = a[child]; a[child] = t;
            root = child;
        }
        if (start == 0) break;
    }
    for (int64_t end = n - 1; end > 0; --end) {
        const int64_t t = a[0]; a[0] = a[end]; a[end] = t;
        int64_t root = 0;
        for (;;) {
            int64_t child = 2 * root + 1;
            if (child >= end) break;
            if (child + 1 < end && a[child] < a[child + 1]) ++child;
            if (a[root] >= a[child]) break;
            const int64_t t2 = a[root]; a[root] = a[child]; a[child] = t2;
            root = child;
        }
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
    parts = ["\n".join(lines) + "\n"]
    for k in kernels:
        parts.append(_ComputeC(k).function())
    return "\n".join(parts)
