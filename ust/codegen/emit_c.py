"""C99 + OpenMP source from the loop IR.

The parallel loops of the IR become ``#pragma omp parallel for`` (``collapse`` over perfectly
nested ones; for batched kernels every thread walks the batch loop and the row loop is shared
out with ``omp for nowait``), skipped for fewer than ``PAR_THRESHOLD`` iterations.  Where
iterations may write the same output (COO, CSC, DIA walked by diagonal, ...) each thread
accumulates into its own partial output -- thread 0 straight into ``y`` -- and the partials are
summed at the end; only when that memory is refused does the kernel fall back to
``#pragma omp atomic`` (split into real and imaginary parts for complex values: OpenMP has no
complex atomics).  ``simd=True`` adds ``#pragma omp simd reduction`` on reduction loops (off by
default: AVX-512 gathers lost on short rows).  Complex values are C99 ``double _Complex`` /
``float _Complex``.

ABI: index scalars (of the kernel's compute index type) in parameter order, then one
``const VT *vscal`` holding ``alpha, beta`` (value scalars are passed through memory, which
side-steps the complex-by-value calling convention), then the buffers.
"""

from __future__ import annotations

from ust.codegen.emit_cstyle import CStyleRenderer
from ust.codegen.ir import Accumulate, Block, Const, Kernel, Loop, Param, walk

__all__ = ["C_INDEX", "C_SCALAR", "C_VALUE", "c_abi", "c_params", "emit_c"]

C_VALUE = {
    "float32": "float",
    "float64": "double",
    "complex64": "float _Complex",
    "complex128": "double _Complex",
}
C_INDEX = {"int32": "int32_t", "int64": "int64_t"}
#: Every value dtype a hand-written C kernel (SpGEMM, CSR -> BSR) takes: C_VALUE plus integers.
C_SCALAR = {
    **C_VALUE,
    **{f"{s}int{b}": f"{s}int{b}_t" for s in ("", "u") for b in (8, 16, 32, 64)},
}
_REAL_PART = {"complex64": ("crealf", "cimagf", "float"), "complex128": ("creal", "cimag", "double")}
#: Fewer iterations than this run the parallel loop on one thread (no fork/join cost).
PAR_THRESHOLD = 64
#: Largest total size of per-thread partial outputs; beyond it atomics are used instead.
PARTIAL_LIMIT = 1 << 28


def c_params(r: CStyleRenderer) -> str:
    """The C parameter list of ``r``'s kernel in :func:`c_abi` order (index types from ``r``'s table)."""
    parts: list[str] = []
    for name, kind in c_abi(r.k):
        if kind == "iscalar":
            parts.append(f"const {r.it} {name}")
        elif kind == "vscal":
            parts.append(f"const {r.vt} *restrict vscal")
        else:
            p: Param = r.k.param(name)
            t = r.index_types[p.dtype] if p.kind == "ibuf" else r.vt
            parts.append(f"{'const ' if p.const else ''}{t} *restrict {name}")
    return ",\n    ".join(parts)


def c_abi(kernel: Kernel) -> list[tuple[str, str]]:
    """The C parameter list as (name, kind) with kind ``"iscalar"``, ``"vscal"`` or ``"ptr"``."""
    out: list[tuple[str, str]] = [(p.name, "iscalar") for p in kernel.params if p.kind == "iscalar"]
    if any(p.kind == "vscalar" for p in kernel.params):
        out.append(("vscal", "vscal"))
    out += [(p.name, "ptr") for p in kernel.params if p.kind in ("ibuf", "vbuf")]
    return out


class _CEmitter(CStyleRenderer):
    value_types = C_VALUE
    index_types = C_INDEX
    bool_type = "int"

    def __init__(self, kernel: Kernel, simd: bool) -> None:
        super().__init__(kernel)
        self.complex = kernel.value_dtype.startswith("complex")
        self.simd = simd and not self.complex
        self.partials = False  # atomic accumulations go to the thread's partial output instead
        self.in_par = False  # inside a parallel region
        self.balance_rows = False  # the main pass's row loop is split by rows + entries

    def const(self, e: Const) -> str:
        if e.kind == "bool":
            return "1" if e.value else "0"
        if e.kind == "value":
            v = complex(e.value)
            if v.imag:
                return f"({v.real!r} + {v.imag!r} * I)"
            return repr(float(v.real))
        return super().const(e)

    def par_block(self, b: Block, depth: int, in_par: bool) -> None:
        """``b`` rendered with ``in_par`` (inside a parallel region or not)."""
        saved, self.in_par = self.in_par, in_par
        self.block(b, depth)
        self.in_par = saved

    def accumulate(self, s: Accumulate, depth: int) -> None:
        in_par = self.in_par
        idx, val = self.expr(s.index), self.expr(s.value)
        if s.atomic and in_par and self.partials:
            self.out(depth, f"ust_yp[{idx}] += {val};")
        elif not (s.atomic and in_par):
            self.out(depth, f"{s.buf}[{idx}] += {val};")
        elif not self.complex:
            self.out(depth, "#pragma omp atomic")
            self.out(depth, f"{s.buf}[{idx}] += {val};")
        else:
            re, im, part = _REAL_PART[self.k.value_dtype]
            self.out(depth, "{")
            self.out(depth + 1, f"const {self.vt} ust_v = {val};")
            self.out(depth + 1, f"{part} *ust_p = ({part} *)&{s.buf}[{idx}];")
            self.out(depth + 1, "#pragma omp atomic")
            self.out(depth + 1, f"ust_p[0] += {re}(ust_v);")
            self.out(depth + 1, "#pragma omp atomic")
            self.out(depth + 1, f"ust_p[1] += {im}(ust_v);")
            self.out(depth, "}")

    def loop(self, s: Loop, depth: int) -> None:
        in_par = self.in_par
        if s.parallel and not in_par and s.tag == "batch":
            self.out(depth, "#pragma omp parallel")
            self.out(depth, "{")
            self.thread_output(depth + 1)
            self.out(depth + 1, self.for_head(s))
            self.par_block(s.body, depth + 2, in_par=True)
            self.out(depth + 1, "}")
            self.out(depth, "}")
            return
        if s.parallel and s.tag == "rows" and not in_par and self.balance_rows:
            self.balanced_rows(s, depth)
            return
        if s.parallel and s.tag == "rows" and (not in_par or self._in_batch(s)):
            chain = self.rows_chain(s)
            collapse = f" collapse({len(chain)})" if len(chain) > 1 else ""
            if in_par:
                self.out(depth, f"#pragma omp for schedule(static){collapse} nowait")
            elif self.partials:
                trip = f"({self.expr(s.hi)}) - ({self.expr(s.lo)})"
                self.out(depth, f"#pragma omp parallel if({trip} > {PAR_THRESHOLD})")
                self.out(depth, "{")
                depth += 1
                self.thread_output(depth)
                self.out(depth, f"#pragma omp for schedule(static){collapse}")
            else:
                trip = f"({self.expr(s.hi)}) - ({self.expr(s.lo)})"
                self.out(
                    depth, f"#pragma omp parallel for schedule(static){collapse} if({trip} > {PAR_THRESHOLD})"
                )
            for d, lp in enumerate(chain):
                self.out(depth + d, self.for_head(lp))
            self.par_block(chain[-1].body, depth + len(chain), in_par=True)
            for d in reversed(range(len(chain))):
                self.out(depth + d, "}")
            if self.partials and not in_par:
                self.out(depth - 1, "}")
            return
        if s.reduce and self.simd and not any(isinstance(n, Loop) for n in walk(s.body)):
            self.out(depth, f"#pragma omp simd reduction(+:{s.reduce})")
        self.serial_loop(s, depth)

    def balanced_rows(self, s: Loop, depth: int) -> None:
        """The row loop split into one contiguous range per thread, of equal rows + entries
        (a merge-path split of the rows' ``pos``): a static schedule of equal row counts gave
        one thread 75 % of an R-MAT matrix's entries.  Whole rows per thread, so every output
        is still written once, by one thread, in the serial order (results do not change)."""
        it = self.it
        pos = f"pos{self.k.info['balance_level']}"
        split = _SPLIT_FN[self.k.index_dtype]
        self.out(depth, "{")
        d = depth + 1
        self.out(d, f"const int64_t ust_blo = (int64_t)({self.expr(s.lo)});")
        self.out(d, f"const int64_t ust_bhi = (int64_t)({self.expr(s.hi)});")
        self.out(d, f"#pragma omp parallel if(ust_bhi - ust_blo > {PAR_THRESHOLD})")
        self.out(d, "{")
        d += 1
        self.thread_output(d)
        self.out(0, "#ifdef _OPENMP")
        self.out(d, "const int64_t ust_bt = omp_get_thread_num(), ust_bn = omp_get_num_threads();")
        self.out(0, "#else")
        self.out(d, "const int64_t ust_bt = 0, ust_bn = 1;")
        self.out(0, "#endif")
        self.out(d, f"const int64_t ust_w0 = (int64_t){pos}[ust_blo] + ust_blo;")
        self.out(d, f"const int64_t ust_wn = (int64_t){pos}[ust_bhi] + ust_bhi - ust_w0;")
        self.out(
            d,
            f"const {it} ust_ba = ({it}){split}({pos}, ust_blo, ust_bhi, ust_w0 + ust_wn / ust_bn * ust_bt + ust_wn % ust_bn * ust_bt / ust_bn);",
        )
        self.out(
            d,
            f"const {it} ust_bb = ust_bt + 1 == ust_bn ? ({it})ust_bhi : ({it}){split}({pos}, ust_blo, ust_bhi, ust_w0 + ust_wn / ust_bn * (ust_bt + 1) + ust_wn % ust_bn * (ust_bt + 1) / ust_bn);",
        )
        self.out(d, f"for ({it} {s.var} = ust_ba; {s.var} < ust_bb; ++{s.var}) {{")
        self.par_block(s.body, d + 1, in_par=True)
        self.out(d, "}")
        self.out(depth + 1, "}")
        self.out(depth, "}")

    def thread_output(self, depth: int) -> None:
        """``ust_yp``: where this thread accumulates (thread 0: y itself; others: a partial)."""
        if not self.partials:
            return
        self.out(0, "#ifdef _OPENMP")
        self.out(depth, "const int ust_t = omp_get_thread_num();")
        self.out(0, "#else")
        self.out(depth, "const int ust_t = 0;")
        self.out(0, "#endif")
        self.out(
            depth,
            f"{self.vt} *restrict ust_yp = ust_t == 0 ? y : ust_part + (size_t)(ust_t - 1) * (size_t)NY;",
        )

    def main_with_partials(self, body: Block) -> None:
        """Accumulations other threads may share: per-thread partial outputs summed at the end
        (thread 0 writes y directly, so one thread needs no extra memory and no atomics);
        ``#pragma omp atomic`` only where the partials cannot be allocated."""
        vt = self.vt
        self.out(1, "{")
        self.out(0, "#ifdef _OPENMP")
        self.out(2, "const int ust_nt = omp_get_max_threads();")
        self.out(0, "#else")
        self.out(2, "const int ust_nt = 1;")
        self.out(0, "#endif")
        self.out(2, f"const size_t ust_bytes = (size_t)(ust_nt - 1) * (size_t)NY * sizeof({vt});")
        self.out(2, f"{vt} *ust_part = NULL;")
        self.out(
            2,
            f"if (ust_nt > 1 && ust_bytes <= (size_t){PARTIAL_LIMIT}) ust_part = ({vt} *)calloc((size_t)(ust_nt - 1) * (size_t)NY, sizeof({vt}));",
        )
        self.out(2, "if (ust_nt == 1 || ust_part != NULL) {")
        self.partials = True
        self.par_block(body, 3, in_par=False)
        self.partials = False
        self.out(3, "if (ust_part != NULL) {")
        self.out(4, f"#pragma omp parallel for schedule(static) if(NY > {PAR_THRESHOLD})")
        self.out(4, f"for ({self.it} f = 0; f < NY; ++f) {{")
        self.out(5, f"{vt} ust_s = 0;")
        self.out(
            5, "for (int t = 0; t < ust_nt - 1; ++t) ust_s += ust_part[(size_t)t * (size_t)NY + (size_t)f];"
        )
        self.out(5, "y[f] += ust_s;")
        self.out(4, "}")
        self.out(4, "free(ust_part);")
        self.out(3, "}")
        self.out(2, "} else {")
        self.par_block(body, 3, in_par=False)
        self.out(2, "}")
        self.out(1, "}")

    def _in_batch(self, s: Loop) -> bool:
        return self._batch_rows is not None and s is self._batch_rows

    _batch_rows: Loop | None = None

    def params(self) -> str:
        return c_params(self)

    def function(self) -> str:
        k = self.k
        for n in walk(k.body):  # the row loop directly inside a batch loop is shared out with omp for
            if isinstance(n, Loop) and n.tag == "batch" and n.parallel:
                for m in n.body.body:
                    if isinstance(m, Loop) and m.parallel and m.tag == "rows":
                        self._batch_rows = m
        self.out(0, f"void {k.name}(\n    {self.params()})")
        self.out(0, "{")
        vscal = [p.name for p in k.params if p.kind == "vscalar"]
        for i, name in enumerate(vscal):
            self.out(1, f"const {self.vt} {name} = vscal[{i}];")
        if k.init is not None:
            self.out(1, "/* init: y = beta * y0 (or 0) before accumulating into it */")
            self.par_block(k.init, 1, in_par=False)
        self.balance_rows = k.info.get("balance") == "rows"
        if _has_atomics(k):
            self.main_with_partials(k.body)
        else:
            self.par_block(k.body, 1, in_par=False)
        self.balance_rows = False
        self.out(0, "}")
        return "\n".join(self.lines) + "\n"


def _has_atomics(k: Kernel) -> bool:
    return any(isinstance(n, Accumulate) and n.atomic for n in walk(k.body))


#: index dtype of ``pos`` -> the row-split search of :meth:`_CEmitter.balanced_rows`
_SPLIT_FN = {"int32": "ust_split_i32", "int64": "ust_split_i64"}
_SPLIT_SRC = """/* the first row v in [lo, hi] with pos[v] + v >= target (pos[v] + v rises strictly) */
static inline int64_t {name}(const {t} *pos, int64_t lo, int64_t hi, int64_t target)
{{
    while (lo < hi) {{
        const int64_t m = lo + (hi - lo) / 2;
        if ((int64_t)pos[m] + m < target) lo = m + 1; else hi = m;
    }}
    return lo;
}}"""


def _prelude(kernels: list[Kernel]) -> str:
    lines = ["/* Generated by ust (ust.codegen.emit_c). Do not edit. */", "#include <stdint.h>"]
    balanced = sorted({k.index_dtype for k in kernels if k.info.get("balance") == "rows"})
    if any(_has_atomics(k) for k in kernels):
        lines += ["#include <stdlib.h>"]
    if balanced or any(_has_atomics(k) for k in kernels):
        lines += ["#ifdef _OPENMP", "#include <omp.h>", "#endif"]
    if any(k.value_dtype.startswith("complex") for k in kernels):
        lines.append("#include <complex.h>")
    for idt in balanced:
        lines.append(_SPLIT_SRC.format(name=_SPLIT_FN[idt], t=C_INDEX[idt]))
    return "\n".join(lines) + "\n"


def emit_c(kernels: Kernel | list[Kernel], *, simd: bool = False) -> str:
    """C99 source defining one function per kernel (named ``kernel.name``)."""
    ks = [kernels] if isinstance(kernels, Kernel) else list(kernels)
    parts = [_prelude(ks)]
    for k in ks:
        parts.append(_CEmitter(k, simd).function())
    return "\n".join(parts)
