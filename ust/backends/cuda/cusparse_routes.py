"""SpMV / SpMM on CuPy-resident Tensors through the ctypes cuSPARSE binding.

Descriptors, dense-vector descriptors and the workspace are made once (at plan time); a run
is a copy of ``c`` into the output when beta != 0, then one cuSPARSE call.
"""

from __future__ import annotations

from typing import Any

from ust.backends.cuda import cusparse
from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = ["CusparseMatmul", "descriptor_for"]

_log = get_logger("backends.cuda.cusparse")


def descriptor_for(a: Any, klass: str, params: tuple[int, ...]) -> cusparse.SparseDescriptor:
    """A cuSPARSE descriptor over the Tensor's own buffers (no copies)."""
    shape = tuple(int(s) for s in a.shape)
    if klass in ("CSR", "CSC"):
        arrays = {"pos": a.pos(1), "crd": a.crd(1), "values": a.values}
    elif klass == "COO":
        arrays = {"row": a.crd(0), "col": a.crd(1), "values": a.values}
    elif klass == "BSR":
        arrays = {"pos": a.pos(1), "crd": a.crd(1), "values": a.values}
    else:
        raise UnsupportedError(f"no cuSPARSE layout for {klass}; supported: CSR, CSC, COO, BSR")
    return cusparse.SparseDescriptor.create(
        klass, (shape[0], shape[1]), arrays, block=(params[0], params[1]) if len(params) >= 2 else (1, 1)
    )


class CusparseMatmul:
    """``out = alpha * A @ b + beta * c`` through one cuSPARSE SpMV / SpMM call.

    Dense operands reach cuSPARSE through a bare pointer (a vector) or a pointer with a
    leading dimension (a row- or column-major matrix), so ``b`` is normalised by
    :func:`ust.backends.generated.launch.dense_operand` (a no-op for the contiguous arrays ``Matmul``
    passes), a strided ``out`` gets a contiguous temporary copied back, and the dense
    descriptors are rebuilt when a layout changes.  Should cuSPARSE refuse column-major
    operands for an algorithm, row-major copies are used instead.

    cuSPARSE's BSR kernels multiply the zero fill of every block, so ``0 * inf`` would put a
    NaN where SciPy's CSR has none: for a format with padding each run first checks that
    ``b`` is finite (one reduction and a synchronisation) and otherwise runs the generated
    kernel, which skips padding.  cuSPARSE's SpMM kernels (CSR and COO too) do the same with
    a non-finite ``B``: on an H200 with CUDA 13, ``[[4, 0, 0, 5]] @ B`` gave NaN where ``B``'s
    first row held inf (a zero product of its own, as a padded tile would make), so every SpMM
    takes that check as well.
    """

    route = "cusparse"

    def __init__(
        self, a: Any, klass: str, params: tuple[int, ...], b: Any, out: Any, alpha: complex, beta: complex,
        algorithm: int | None, device_id: int,
    ) -> None:  # fmt: skip
        from ust.codegen.lower import has_padding

        self.a = a
        self.descriptor = descriptor_for(a, klass, params)
        table = cusparse.SPMV_ALGORITHMS if b.ndim == 1 else cusparse.SPMM_ALGORITHMS
        self.algorithms = table[klass]
        self.algorithm = self.algorithms[0] if algorithm is None else algorithm
        self.alpha, self.beta, self.device_id = alpha, beta, device_id
        # padded formats, and SpMM of any format, must not meet a non-finite B (see above)
        self.guard_nonfinite = has_padding(a.format) or b.ndim != 1
        self._guarded: Any = None
        self._row_only = False
        self._layouts: tuple[str | None, str | None] = (None, None)
        self.plan: Any = None
        self._with_fallback(lambda: self._make_plan(*self._operands(b, out)), b, out)
        self.out = out

    def _with_fallback(self, step: Any, b: Any, out: Any) -> Any:
        """Run ``step``; if cuSPARSE refuses column-major operands, again with row-major copies."""
        from ust.backends.generated.launch import array_layout

        try:
            return step()
        except cusparse.CusparseError:
            if self._row_only or "col" not in (array_layout(b), array_layout(out)):
                raise
            _log.info("cuSPARSE refused column-major dense operands; using row-major copies")
            self._row_only = True
            return step()

    def _operands(self, b: Any, out: Any) -> tuple[Any, Any]:
        """(b, the array cuSPARSE writes) in layouts this plan takes (copies only where needed)."""
        import cupy

        from ust.backends.generated.launch import array_layout, dense_operand

        layouts = ("row",) if self._row_only else ("row", "col")
        b = dense_operand(cupy, b, out.dtype, layouts)
        if array_layout(out) in layouts:
            return b, out
        return b, cupy.empty(out.shape, dtype=out.dtype)

    def _make_plan(self, b: Any, target: Any) -> None:
        from ust.backends.generated.launch import array_layout

        if self.plan is not None:
            self.plan.destroy()
            self.plan = None
        plan_cls = cusparse.SpMVPlan if b.ndim == 1 else cusparse.SpMMPlan
        self.plan = plan_cls(
            self.descriptor, b, target, self.alpha, self.beta, self.algorithm, self.device_id
        )
        self._layouts = (array_layout(b), array_layout(target))

    def _finite(self, b: Any, stream: int) -> bool:
        import cupy

        with cupy.cuda.Device(self.device_id):
            s = cupy.cuda.ExternalStream(stream) if stream else cupy.cuda.get_current_stream()
            with s:
                return bool(cupy.isfinite(b).all())

    def _guarded_run(self, b: Any, c: Any, out: Any, stream: int) -> Any:
        from ust.backends.generated.executors import GeneratedMatmul

        if self._guarded is None:
            self._guarded = GeneratedMatmul(self.a, self.alpha, self.beta, str(out.dtype), "cuda")
        return self._guarded.run(b, c, out, stream)

    def run(self, b: Any, c: Any, out: Any, stream: int) -> Any:
        if self.guard_nonfinite and not self._finite(b, stream):
            return self._guarded_run(b, c, out, stream)
        return self._with_fallback(lambda: self._run(b, c, out, stream), b, out)

    def _run(self, b: Any, c: Any, out: Any, stream: int) -> Any:
        import cupy

        from ust.backends.generated.launch import array_layout

        b, target = self._operands(b, out)
        if self.plan is None or (array_layout(b), array_layout(target)) != self._layouts:
            self._make_plan(b, target)
        if b is not self.plan.x:
            self.plan.set_x(b)
        if target is not self.plan.y:
            self.plan.set_y(target)
        with cupy.cuda.ExternalStream(stream) if stream else cupy.cuda.get_current_stream():
            if self.beta != 0 and c is not None:
                target[...] = c
            self.plan.run(stream)
            if target is not out:
                out[...] = target
        return out

    def free(self) -> None:
        if self.plan is not None:
            self.plan.destroy()
        self.descriptor.destroy()
