"""CUDA C++ source of the compiler's kernels (:mod:`ust.codegen.compute_lower`), for NVRTC.

Thread-per-outer-coordinate: the outer parallel loop becomes one grid-stride loop over
``blockIdx.x * blockDim.x + threadIdx.x``; top-level work that cannot be shared out (the
two-pointer merge of several segments at the outer level, a term group over a reduction
index) runs on the grid's first thread.  Outputs that several threads write (a reduction
index outermost, a scalar result) are combined atomically with the semiring's add:
``atomicAdd``, ``atomicMin`` / ``atomicMax`` for integers, a compare-and-swap loop on the bit
pattern for real min / max.  Sparse results use the lowering's ``expand`` mode (entries
written at each row's offset, combined by the host after a sort), so no kernel needs a
per-thread workspace.  No headers; ``+-inf`` are bit patterns.

A row summed in a register whose rows are too few to fill the GPU (MTTKRP's 200 rows of 5000
entries, a short wide SpMV) has a ``_split`` variant: each row's reduction loop is cut into S
equal ranges of positions, one thread (with its output columns) per range, and the partial sums
are combined with the semiring's atomic add.  S is the grid's threads over the rows' work items,
so the launcher chooses it by the grid it launches.

Owned dense rows summed in a register (the lowering's ``acc`` with a ``reduce`` loop) may be
shared by a group of G lanes (G = 1 thread-per-row, 32 warp-per-row): the reduction loop is
strided across the lanes, the partial sums combined with ``__shfl_down_sync`` and the
semiring's add, and lane 0 writes.  Groups never straddle a warp, and all lanes of a group
take the same row, so every lane named in a shuffle's mask reaches it.
"""

from __future__ import annotations

import math

from ust.codegen.emit_cstyle import CStyleRenderer
from ust.codegen.emit_cuda import CUDA_INDEX, PRELUDE, cuda_signature
from ust.codegen.ir import (
    Accumulate,
    Assign,
    Block,
    Const,
    Expr,
    Kernel,
    Let,
    Loop,
    Param,
    Stmt,
    Store,
    While,
    walk,
)
from ust.runtime.errors import UnsupportedError

__all__ = [
    "COMPUTE_CUDA_VALUE",
    "GROUPS",
    "SPLIT",
    "emit_compute_cuda",
    "kernel_name",
    "split_loop",
    "supports_groups",
    "supports_split",
    "variants",
]

#: Lanes per row the emitter offers for row-reduction kernels.
GROUPS = (1, 8, 32)
#: The pseudo group size naming a kernel's split-row variant (:func:`kernel_name`).
SPLIT = -1

COMPUTE_CUDA_VALUE = {
    "float32": "float",
    "float64": "double",
    "complex64": "ust_c64",
    "complex128": "ust_c128",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
}
#: value dtypes with an atomic add / min / max here
_ATOMIC = {
    "+": ("float32", "float64", "complex64", "complex128", "int32", "int64", "uint32", "uint64"),
    "min": ("float32", "float64", "int32", "int64", "uint32", "uint64"),
    "max": ("float32", "float64", "int32", "int64", "uint32", "uint64"),
}

EXTRA = r"""
__device__ __forceinline__ ust_c128 operator-(ust_c128 a) { return ust_c128{-a.re, -a.im}; }
__device__ __forceinline__ ust_c64 operator-(ust_c64 a) { return ust_c64{-a.re, -a.im}; }
__device__ __forceinline__ ust_c128 operator-(ust_c128 a, ust_c128 b) { return ust_c128{a.re - b.re, a.im - b.im}; }
__device__ __forceinline__ ust_c64 operator-(ust_c64 a, ust_c64 b) { return ust_c64{a.re - b.re, a.im - b.im}; }
__device__ __forceinline__ int ust_shfl_down(int v, int off, unsigned mask, int w) { return __shfl_down_sync(mask, v, off, w); }
__device__ __forceinline__ unsigned int ust_shfl_down(unsigned int v, int off, unsigned mask, int w) { return __shfl_down_sync(mask, v, off, w); }
__device__ __forceinline__ long long ust_shfl_down(long long v, int off, unsigned mask, int w) { return __shfl_down_sync(mask, v, off, w); }
__device__ __forceinline__ unsigned long long ust_shfl_down(unsigned long long v, int off, unsigned mask, int w) { return __shfl_down_sync(mask, v, off, w); }
__device__ __forceinline__ void ust_atomic_add(int *p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void ust_atomic_add(unsigned int *p, unsigned int v) { atomicAdd(p, v); }
__device__ __forceinline__ void ust_atomic_add(long long *p, long long v) {
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
__device__ __forceinline__ void ust_atomic_add(unsigned long long *p, unsigned long long v) { atomicAdd(p, v); }
__device__ __forceinline__ void ust_atomic_min(int *p, int v) { atomicMin(p, v); }
__device__ __forceinline__ void ust_atomic_max(int *p, int v) { atomicMax(p, v); }
__device__ __forceinline__ void ust_atomic_min(unsigned int *p, unsigned int v) { atomicMin(p, v); }
__device__ __forceinline__ void ust_atomic_max(unsigned int *p, unsigned int v) { atomicMax(p, v); }
__device__ __forceinline__ void ust_atomic_min(long long *p, long long v) { atomicMin(p, v); }
__device__ __forceinline__ void ust_atomic_max(long long *p, long long v) { atomicMax(p, v); }
__device__ __forceinline__ void ust_atomic_min(unsigned long long *p, unsigned long long v) { atomicMin(p, v); }
__device__ __forceinline__ void ust_atomic_max(unsigned long long *p, unsigned long long v) { atomicMax(p, v); }
__device__ __forceinline__ void ust_atomic_min(double *p, double v) {
    unsigned long long *a = (unsigned long long *)p, old = *a, assumed;
    do { assumed = old; if (!(v < __longlong_as_double((long long)assumed))) break;
         old = atomicCAS(a, assumed, (unsigned long long)__double_as_longlong(v)); } while (assumed != old);
}
__device__ __forceinline__ void ust_atomic_max(double *p, double v) {
    unsigned long long *a = (unsigned long long *)p, old = *a, assumed;
    do { assumed = old; if (!(v > __longlong_as_double((long long)assumed))) break;
         old = atomicCAS(a, assumed, (unsigned long long)__double_as_longlong(v)); } while (assumed != old);
}
__device__ __forceinline__ void ust_atomic_min(float *p, float v) {
    unsigned int *a = (unsigned int *)p, old = *a, assumed;
    do { assumed = old; if (!(v < __int_as_float((int)assumed))) break;
         old = atomicCAS(a, assumed, (unsigned int)__float_as_int(v)); } while (assumed != old);
}
__device__ __forceinline__ void ust_atomic_max(float *p, float v) {
    unsigned int *a = (unsigned int *)p, old = *a, assumed;
    do { assumed = old; if (!(v > __int_as_float((int)assumed))) break;
         old = atomicCAS(a, assumed, (unsigned int)__float_as_int(v)); } while (assumed != old);
}
"""


_ATOMIC_FN = {"+": "ust_atomic_add", "min": "ust_atomic_min", "max": "ust_atomic_max"}


class _ComputeCuda(CStyleRenderer):
    value_types = COMPUTE_CUDA_VALUE
    index_types = CUDA_INDEX
    bool_type = "bool"

    def __init__(self, kernel: Kernel, group: int = 1) -> None:
        super().__init__(kernel)
        self.complex = kernel.value_dtype.startswith("complex")
        self.integer = kernel.value_dtype.startswith(("int", "uint"))
        self.split = group == SPLIT
        self.split_loop = split_loop(kernel) if self.split else None
        self.g = 1 if self.split else group
        self.in_group = False
        self.pending_shuffle = False

    def const(self, e: Const) -> str:
        if e.kind == "bool":
            return "true" if e.value else "false"
        if e.kind == "value":
            if self.complex:
                c = complex(e.value)
                return f"{self.vt}{{{c.real!r}, {c.imag!r}}}"
            if self.integer:
                return f"(({self.vt}){int(e.value)}LL)"  # type: ignore[arg-type]
            f = float(e.value)  # type: ignore[arg-type]
            if math.isinf(f):
                bits = (
                    "__longlong_as_double(0x7ff0000000000000LL)"
                    if self.vt == "double"
                    else "__int_as_float(0x7f800000)"
                )
                return bits if f > 0 else f"(-{bits})"
            return f"(({self.vt}){f!r})"
        return super().const(e)

    def accumulate(self, s: Accumulate, depth: int) -> None:
        if not s.atomic:  # pragma: no cover - the lowering writes shared outputs atomically only
            raise UnsupportedError("a non-atomic Accumulate is not emitted for the GPU")
        if self.k.value_dtype not in _ATOMIC.get(s.op, ()):
            raise UnsupportedError(
                f"no atomic {s.op} for {self.k.value_dtype} values on the GPU; this expression's output is "
                "shared between threads: compute it on the CPU (execution='cpu') or in a wider dtype"
            )
        fn = _ATOMIC_FN[s.op]
        self.out(depth, f"{fn}(&{s.buf}[{self.expr(s.index)}], {self.expr(s.value)});")

    def store(self, s: Store, depth: int) -> None:
        if self.split and s.buf == "out":  # out = out (+) acc, by several threads of one row
            fn = _ATOMIC_FN[str(self.k.info["split_op"])]
            self.out(depth, f"{fn}(&out[{self.expr(s.index)}], acc);")
            return
        text = f"{s.buf}[{self.expr(s.index)}] = {self.expr(s.value)};"
        if self.in_group and self.pending_shuffle:
            self.shuffle(depth)
        self.out(depth, f"if (ust_lane == 0) {text}" if self.in_group else text)

    def shuffle(self, depth: int) -> None:
        """Combine the lanes' partial ``acc`` (once, after the row's last reduction loop)."""
        g = self.g
        combine: Expr = self.k.info["reduce_add"]  # type: ignore[assignment]
        self.out(depth, f"for (int ust_o = {g // 2}; ust_o > 0; ust_o >>= 1) {{")
        self.out(depth + 1, f"const {self.vt} ust_ra = acc;")
        self.out(depth + 1, f"const {self.vt} ust_rb = ust_shfl_down(acc, ust_o, ust_mask, {g});")
        self.out(depth + 1, f"acc = {self.expr(combine)};")
        self.out(depth, "}")
        self.pending_shuffle = False

    def loop(self, s: Loop, depth: int) -> None:
        if s.reduce and self.in_group:
            self.group_reduce(s, depth)
            return
        if self.split and s is self.split_loop:
            self.split_reduce(s, depth)
            return
        if not s.parallel:
            self.serial_loop(s, depth)
            return
        if self.g > 1:
            self.group_rows(s, depth)
            return
        chain = _flat_chain(s)
        if self.split or len(chain) > 1:
            self.flat_loops(chain, depth)
            return
        it = self.it
        self.out(depth, "{")
        d = depth + 1
        self.out(d, f"const {it} ust_lo = {self.expr(s.lo)};")
        self.out(d, f"const {it} ust_hi = {self.expr(s.hi)};")
        self.out(
            d,
            f"for ({it} {s.var} = ust_lo + ({it})blockIdx.x * blockDim.x + threadIdx.x; {s.var} < ust_hi; "
            f"{s.var} += ({it})gridDim.x * blockDim.x) {{",
        )
        self.block(s.body, d + 1)
        self.out(d, "}")
        self.out(depth, "}")

    def flat_loops(self, chain: list[Loop], depth: int) -> None:
        """The outer loop and the output loops nested in it as one grid-stride index (the last
        fastest, so neighbouring threads touch neighbouring output and dense-operand slots)."""
        it = self.it
        self.out(depth, "{")
        d = depth + 1
        for n, lp in enumerate(chain):
            self.out(d, f"const {it} ust_lo{n} = {self.expr(lp.lo)};")
            self.out(d, f"const {it} ust_e{n} = {self.expr(lp.hi)} - ust_lo{n};")
        total = " * ".join(f"ust_e{n}" for n in range(len(chain)))
        if self.split:  # S parts per row: the grid's threads over the rows' items (at least 1)
            self.out(d, f"const {it} ust_items = {total};")
            self.out(d, f"const {it} ust_threads = ({it})gridDim.x * blockDim.x;")
            self.out(
                d,
                f"const {it} ust_S = ust_threads > ust_items && ust_items > 0 ? ust_threads / ust_items : 1;",
            )
            total = "ust_items * ust_S"
        self.out(
            d,
            f"for ({it} ust_f = ({it})blockIdx.x * blockDim.x + threadIdx.x; ust_f < {total}; "
            f"ust_f += ({it})gridDim.x * blockDim.x) {{",
        )
        self.out(d + 1, f"{it} ust_r = ust_f;")
        # fastest first: the last output column, then (split) the part of the row, then the rest
        items: list[int | str] = list(reversed(range(len(chain))))
        if self.split:
            items.insert(1 if len(chain) > 1 else 0, "s")
        for m, item in enumerate(items):
            last = m == len(items) - 1
            if item == "s":
                self.out(d + 1, "const " + it + (" ust_s = ust_r;" if last else " ust_s = ust_r % ust_S;"))
                if not last:
                    self.out(d + 1, "ust_r /= ust_S;")
                continue
            var = chain[int(item)].var
            if last:
                self.out(d + 1, f"const {it} {var} = ust_lo{item} + ust_r;")
            else:
                self.out(d + 1, f"const {it} {var} = ust_lo{item} + ust_r % ust_e{item};")
                self.out(d + 1, f"ust_r /= ust_e{item};")
        for lp in chain[:-1]:  # each level's lets (its coordinate, the segment below it)
            for x in lp.body.body[:-1]:
                self.stmt(x, d + 1)
        self.block(chain[-1].body, d + 1)
        self.out(d, "}")
        self.out(depth, "}")

    def group_rows(self, s: Loop, depth: int) -> None:
        """The outer loop with G lanes per iteration (groups aligned to warps)."""
        it, g = self.it, self.g
        mask = "0xffffffffu" if g == 32 else f"(((1u << {g}) - 1u) << (threadIdx.x & 31u & ~{g - 1}u))"
        self.out(depth, "{")
        d = depth + 1
        self.out(d, f"const {it} ust_lo = {self.expr(s.lo)};")
        self.out(d, f"const {it} ust_hi = {self.expr(s.hi)};")
        self.out(d, f"const int ust_lane = (int)(threadIdx.x % {g}u);")
        self.out(d, f"const unsigned ust_mask = {mask};")
        self.out(
            d,
            f"for ({it} ust_f = ({it})blockIdx.x * blockDim.x + threadIdx.x; ust_lo + ust_f / {g} < ust_hi; "
            f"ust_f += ({it})gridDim.x * blockDim.x) {{",
        )
        self.out(d + 1, f"const {it} {s.var} = ust_lo + ust_f / {g};")
        self.in_group = True
        self.block(s.body, d + 1)
        self.in_group = False
        self.out(d, "}")
        self.out(depth, "}")

    def split_reduce(self, s: Loop, depth: int) -> None:
        """A row's reduction loop over this thread's part ``ust_s`` of ``ust_S`` of its positions."""
        it = self.it
        self.out(depth, "{")
        d = depth + 1
        self.out(d, f"const {it} ust_c0 = {self.expr(s.lo)};")
        self.out(d, f"const {it} ust_cn = {self.expr(s.hi)} - ust_c0;")
        self.out(
            d,
            f"for ({it} {s.var} = ust_c0 + ust_cn * ust_s / ust_S; {s.var} < ust_c0 + ust_cn * (ust_s + 1) / ust_S; "
            f"++{s.var}) {{",
        )
        self.block(s.body, d + 1)
        self.out(d, "}")
        self.out(depth, "}")

    def group_reduce(self, s: Loop, depth: int) -> None:
        """A row's reduction loop strided across the group (the shuffle follows the last one)."""
        g, it = self.g, self.it
        self.out(
            depth,
            f"for ({it} {s.var} = {self.expr(s.lo)} + ust_lane; {s.var} < {self.expr(s.hi)}; {s.var} += {g}) {{",
        )
        self.in_group = False  # nothing inside a reduction loop stores
        self.block(s.body, depth + 1)
        self.in_group = True
        self.out(depth, "}")
        self.pending_shuffle = True

    def signature(self, params: tuple[Param, ...]) -> str:
        return cuda_signature(self, kernel_name(self.k, SPLIT if self.split else self.g), params)

    def kernel(self) -> str:
        k = self.k
        self.out(0, self.signature(k.params))
        self.out(0, "{")
        self.out(1, "const ust_i64 ust_tid = 0; (void)ust_tid;")
        self.out(1, "const bool ust_first = blockIdx.x == 0 && threadIdx.x == 0; (void)ust_first;")
        # lets are computed by every thread; other top-level statements that are not the shared-out
        # outer loop run on the first thread
        serial: list[Stmt] = []
        for s in k.body.body:
            if isinstance(s, Let) or (isinstance(s, Loop) and s.parallel):
                self._flush(serial)
                self.stmt(s, 1)
            else:
                serial.append(s)
        self._flush(serial)
        self.out(0, "}")
        return "\n".join(self.lines) + "\n"

    def _flush(self, serial: list[Stmt]) -> None:
        if not serial:
            return
        self.out(1, "if (ust_first) {")
        self.block(Block(tuple(serial)), 2)
        self.out(1, "}")
        serial.clear()


def supports_groups(k: Kernel) -> bool:
    """Whether ``k`` has a row reduction loop that a group of lanes may share."""
    return (
        any(isinstance(n, Loop) and n.reduce for n in walk(k.body))
        and bool(k.info.get("parallel"))
        and not k.info.get("flat")
    )


def _flat_chain(s: Loop) -> list[Loop]:
    """``s`` and the output-column loops perfectly nested in it (flattened into one grid index)."""
    chain = [s]
    while (
        chain[-1].body.body
        and isinstance(chain[-1].body.body[-1], Loop)
        and chain[-1].body.body[-1].parallel
        and chain[-1].body.body[-1].tag == "cols"
        and all(isinstance(x, Let) for x in chain[-1].body.body[:-1])
    ):
        chain.append(chain[-1].body.body[-1])
    return chain


def split_loop(k: Kernel) -> Loop | None:
    """The loop whose positions ``k``'s split variant cuts into parts, or None: the one parallel
    loop (with its output columns) must hold a row summed in ``acc`` by a single loop (nested
    loops inside it are fine: each part runs them whole), stored once into ``out`` with an add
    this dtype has an atomic for."""
    op = str(k.info.get("split_op") or "")
    if not op or not k.info.get("parallel") or k.value_dtype not in _ATOMIC.get(op, ()):
        return None
    outer = [s for s in k.body.body if isinstance(s, Loop) and s.parallel]
    if len(outer) != 1 or outer[0].reduce:
        return None
    body = _flat_chain(outer[0])[-1].body.body
    loops = [s for s in body if isinstance(s, (Loop, While))]
    writes = [s for s in walk(outer[0].body) if isinstance(s, (Store, Accumulate))]
    summed_outside = any(
        isinstance(x, Assign) and x.name == "acc" for st in body if st not in loops for x in walk(st)
    )
    ok = (
        len(loops) == 1
        and isinstance(loops[0], Loop)
        and not summed_outside
        and len(writes) == 1
        and writes[0] is body[-1]
        and isinstance(writes[0], Store)
        and writes[0].buf == "out"
    )
    return loops[0] if ok and isinstance(loops[0], Loop) else None


def supports_split(k: Kernel) -> bool:
    """Whether ``k`` has a split-row variant (:func:`split_loop`)."""
    return split_loop(k) is not None


def variants(k: Kernel) -> tuple[int, ...]:
    """The group sizes (and :data:`SPLIT`) ``k`` is emitted for."""
    return (*(GROUPS if supports_groups(k) else (1,)), *((SPLIT,) if supports_split(k) else ()))


def kernel_name(k: Kernel, group: int) -> str:
    """The ``extern "C"`` name of ``k`` emitted for ``group`` lanes per row (or its split variant)."""
    if group == SPLIT:
        return f"{k.name}_split"
    return k.name if group == 1 else f"{k.name}_g{group}"


def emit_compute_cuda(kernels: list[Kernel]) -> str:
    """CUDA source defining one ``extern "C"`` kernel per IR kernel and variant of :func:`variants`
    (named by :func:`kernel_name`)."""
    parts = [PRELUDE.replace("ust.codegen.emit_cuda", "ust.codegen.emit_compute_cuda"), EXTRA]
    for k in kernels:
        for g in variants(k):
            parts.append(_ComputeCuda(k, g).kernel())
    return "\n".join(parts)
