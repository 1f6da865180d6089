"""Generated-kernel routes for ``ust.Matmul``: executors and a direct entry point.

The planner (:mod:`ust.ops_matmul`) calls :func:`generated_matmul` with a planned ``Matmul``
and a target (``"c"`` or ``"cuda"``); the executor compiles (or loads) its kernel at plan
time and runs it with ``run(b, c, out, stream)``.  The variants it takes (loop orders,
threads per row) are :mod:`ust.codegen.schedule`'s.  Backends are imported lazily: importing
this module loads no compiler and no GPU package.
"""

from __future__ import annotations

from typing import Any

from ust.backends.generated.launch import prepare
from ust.codegen.lower import has_padding
from ust.codegen.schedule import (
    balance_choice,
    cuda_order,
    default_group,
    nbatch,
    parse_balance,
    parse_variant,
)
from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = ["GeneratedMatmul", "ScipyFallback", "generated_matmul", "matmul_generated"]

_log = get_logger(__name__)


class GeneratedMatmul:
    """``out = alpha * A @ b + beta * c`` through a kernel generated for A's format."""

    #: ``run(b, c, None, stream)`` makes the result itself (a one-shot call passes no ``out``)
    allocates_result = True

    def __init__(
        self, a: Any, alpha: complex, beta: complex, dtype: str, target: str, variant: Any = None
    ) -> None:
        if target not in ("c", "cuda"):
            raise UnsupportedError(f"target must be 'c' or 'cuda', got {target!r}")
        if complex(alpha).imag or complex(beta).imag:
            import numpy as np

            if np.dtype(dtype).kind != "c":
                raise UnsupportedError(
                    "complex alpha/beta need complex operands (cast A or B to a complex dtype)"
                )
        self.a = a if str(a.dtype) == dtype else a.astype(dtype)
        self.alpha, self.beta, self.dtype = alpha, beta, dtype
        self.target = target
        self.order, self.group = parse_variant(variant)
        self.balance = parse_balance(variant)  # None: chosen from the row lengths per op
        self.route = f"generated-{target}"
        self._orders: dict[str, str] = {}
        self._groups: dict[str, int] = {}
        self._balances: dict[str, str] = {}
        #: the last (b, c, out, bound launch, rebindable, detached): see :func:`_rebound`
        self._bound: tuple[Any, Any, Any, Any, bool, bool] | None = None

    def prepare(self, b: Any, out: Any) -> None:
        """Compile (or load) the kernel now, so that the first ``run`` costs no compilation."""
        launch = prepare(self.a, b, None, alpha=self.alpha, beta=0, out=out, dtype=self.dtype)
        if self.target == "c":
            from ust.backends.cpu.ckernels import c_kernel

            c_kernel(
                self.a.format,
                launch.op,
                launch.layout,
                self.order,
                launch.dtype,
                launch.index_dtype,
                launch.itype(),
                balance=self._kernel_balance(launch.op),
            )
        else:
            from ust.backends.cuda.kernels import cuda_kernel

            g = self._group(launch.op)
            cuda_kernel(
                self.a.format,
                launch.op,
                launch.layout,
                self._order(launch.op),
                launch.dtype,
                launch.index_dtype,
                launch.itype(g),
                g,
                balance=self._kernel_balance(launch.op),
            )

    def _order(self, op: str) -> str:
        """The loop order: the variant's, else the target's default for this op."""
        if self.order != "auto" or self.target != "cuda":
            return self.order
        if op not in self._orders:
            self._orders[op] = cuda_order(self.a.format, op)
        return self._orders[op]

    def _kernel_balance(self, op: str) -> str:
        """The lowering's ``balance`` for this op: the variant's, else chosen from A's row
        lengths (:func:`ust.codegen.schedule.balance_choice`, once per op); ``"rows"`` for
        C (whole rows per thread), ``"nnz"`` for CUDA (rows split between warps)."""
        if op not in self._balances:
            choice = self.balance
            if choice is None:
                from ust.runtime.cpu_threads import usable_cores

                cores = usable_cores() if self.target == "c" else 1
                choice = balance_choice(self.a, op, self._order(op), self.target, cores)
                if choice != "none":
                    _log.info("rows of A are skewed: the load-balanced %s kernel is used", self.target)
            self._balances[op] = choice
        b = self._balances[op]
        return "none" if b == "none" else ("rows" if self.target == "c" else "nnz")

    def _group(self, op: str) -> int:
        if self.group is not None:
            return self.group
        if op not in self._groups:
            self._groups[op] = default_group(self.a, op, self._order(op))
        return self._groups[op]

    def bind_dot(self, b: Any, out: Any, part: Any) -> tuple[Any, int] | None:
        """``out = A @ b`` with block partial sums of ``b^H out`` in ``part``, as one bound
        launch of the SpMV's ``dot`` kernel (a CG iteration's ``p^H A p`` without a pass of its
        own): ``(bound, partials)``, or None where that kernel does not apply (the C target, a
        thread group or nnz split chosen for A, a kernel that writes rows more than once)."""
        if self.target != "cuda" or b.ndim != 1 or self.a.shape[0] != self.a.shape[1]:
            return None
        if self._group("mv") != 1 or self._kernel_balance("mv") != "none":
            return None
        from ust.backends.cuda.kernels import bind_spmv_dot, cuda_kernel
        from ust.codegen.emit_cuda import supports_dot

        launch = prepare(self.a, b, None, alpha=self.alpha, beta=0, out=out, dtype=self.dtype)
        order = self._order("mv")
        plain = cuda_kernel(
            self.a.format, "mv", "row", order, launch.dtype, launch.index_dtype, launch.itype(1), 1
        )
        if not supports_dot(plain.kernel):
            return None
        return bind_spmv_dot(self.a.format, launch, out, order, part)

    def detach(self) -> None:
        """The last result now belongs to the caller (a one-shot call): the next run writes a
        new one, even on the same operands (the launch itself is kept, rebound)."""
        if self._bound is not None:
            self._bound = (*self._bound[:5], True)

    def run(self, b: Any, c: Any, out: Any, stream: int = 0) -> Any:
        """Run on the operands; the same (b, c, out) objects as last time reuse the bound
        launch (every argument already marshalled), as ``Matmul.execute`` does."""
        last = self._bound
        if last is not None and not last[5] and last[0] is b and last[1] is c and last[2] is out:
            bound = last[3]
        elif last is not None and (fast := _rebound(last, b, c, out)) is not None:
            bound = fast  # new operands like the last ones: only their pointers change
            self._bound = (b, c, out, bound, True, False)
        else:
            launch = prepare(self.a, b, c, alpha=self.alpha, beta=self.beta, out=out, dtype=self.dtype)
            if self.target == "c":
                from ust.backends.cpu.ckernels import bind_launch

                call, target = bind_launch(
                    self.a.format, launch, out, self.order, self._kernel_balance(launch.op)
                )
                bound = lambda stream=0: (call(), target)[1]  # noqa: E731
            else:
                from ust.backends.cuda.kernels import bind_launch_cuda

                bound = bind_launch_cuda(
                    self.a.format,
                    launch,
                    out,
                    self._order(launch.op),
                    self._group(launch.op),
                    balance=self._kernel_balance(launch.op),
                )
            # the kernel read b and c themselves and wrote out itself (nothing converted): a
            # later call on operands of the same shape, dtype, layout and device may rebind it
            as_is = (
                self.target == "cuda"
                and launch.buffers["x"] is b
                and (c is None or launch.buffers["y0"] is c)
                and (out is None or bound.target is out)
            )
            self._bound = (b, c, out, bound, as_is, False)
        target = bound(stream)
        if out is not None and target is not out:
            out[...] = target
            return out
        return target


def _alike(a: Any, b: Any) -> bool:
    """Whether a kernel reads ``a`` exactly as it read ``b``: same package, shape, dtype,
    strides (so layout) and device."""
    return (
        type(a) is type(b)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.strides == b.strides
        and getattr(a, "device", None) == getattr(b, "device", None)
    )


def _rebound(last: tuple[Any, Any, Any, Any, bool, bool], b: Any, c: Any, out: Any) -> Any:
    """The last CUDA launch rebound to new operands (:meth:`BoundLaunch.rebound`) when they are
    laid out like the last ones, which the kernel read in place; else None (the full path
    checks and prepares them).  A new result is allocated like the last one."""
    lb, lc, _, bound, as_is, _ = last
    if not as_is or not _alike(b, lb) or (c is None) != (lc is None):
        return None
    if c is not None and not _alike(c, lc):
        return None
    target = bound.target
    if out is None:
        if not target.flags.c_contiguous:
            return None
    elif not _alike(out, target) or out is b or out is c:
        return None
    return bound.rebound(b, b if c is None else c, out)


_warned_no_compiler = False


class ScipyFallback:
    """``alpha * A @ b + beta * c`` through SciPy after converting A to CSR (no usable C compiler)."""

    route = "convert-scipy"

    def __init__(self, a: Any, alpha: complex, beta: complex) -> None:
        global _warned_no_compiler
        from ust.runtime.errors import BackendUnavailableError

        if a.ndim != 2 or nbatch(a.format):
            raise BackendUnavailableError(
                f"no working C compiler, and SciPy has no {a.ndim}-D or batched sparse format to fall back on; "
                "install a C compiler (cc, gcc or clang) or set UST_CC"
            )
        if not _warned_no_compiler:
            _log.warning("no working C compiler: converting %s to CSR and using SciPy instead", a.format)
            _warned_no_compiler = True
        self.matrix = a.convert("CSR").to_scipy()
        if has_padding(a.format):  # block fill / DIA slots are not entries: they never meet x
            from ust.backends.cpu.scipy_routes import without_padding

            self.matrix = without_padding(self.matrix)
        self.alpha, self.beta = alpha, beta

    def run(self, b: Any, c: Any, out: Any, stream: int = 0) -> Any:
        result = self.matrix @ b
        if self.alpha != 1:
            result = self.alpha * result
        if c is not None and self.beta != 0:
            result = result + self.beta * c
        if out is None:
            return result
        out[...] = result
        return out


def _no_compiler() -> bool:
    from ust.backends.generated.compile_c import toolchain

    return toolchain() is None


def generated_matmul(m: Any, target: str, variant: Any = None) -> GeneratedMatmul | ScipyFallback:
    """The executor of the ``generated-c`` / ``generated-cuda`` route for a planned ``Matmul``.

    Without a working C compiler the ``generated-c`` route converts A to CSR and uses SciPy
    (one warning in the log); the interpreter is never a user route.
    """
    if target == "c" and _no_compiler():
        return ScipyFallback(m.a, m.alpha, m.beta)
    ex = GeneratedMatmul(m.a, m.alpha, m.beta, m.dtype, target, variant)
    ex.prepare(m.b, m.out)
    return ex


def matmul_generated(
    a: Any,
    x: Any,
    c: Any = None,
    *,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    out: Any = None,
    target: str | None = None,
    variant: Any = None,
) -> Any:
    """``alpha * a @ x + beta * c`` through the generated kernel, bypassing the planner.

    ``target`` defaults to where ``a``'s buffers live (CuPy -> ``"cuda"``, else ``"c"``).
    """
    if target is None:
        target = "cuda" if type(a.values).__module__.split(".")[0] == "cupy" else "c"
    launch = prepare(a, x, c, alpha=alpha, beta=beta, out=out)
    if target == "c" and _no_compiler():
        return ScipyFallback(a, alpha, beta).run(x, c if beta != 0 else None, out)
    ex = GeneratedMatmul(a, alpha, beta, launch.dtype, target, variant)
    return ex.run(x, c if beta != 0 else None, out, 0)
