"""SpMV / SpMM on CuPy-resident Tensors through the ctypes cuSPARSE binding.

Descriptors, dense-vector descriptors and the workspace are made once (at plan time); a run
is a copy of ``c`` into the output when beta != 0, then one cuSPARSE call.
"""

from __future__ import annotations

from typing import Any

from ust.backends.cuda import cusparse
from ust.runtime.errors import UnsupportedError

__all__ = ["CusparseMatmul", "descriptor_for"]


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
    route = "cusparse"

    def __init__(
        self, a: Any, klass: str, params: tuple[int, ...], b: Any, out: Any, alpha: complex, beta: complex,
        algorithm: int | None, device_id: int,
    ) -> None:  # fmt: skip
        self.descriptor = descriptor_for(a, klass, params)
        table = cusparse.SPMV_ALGORITHMS if b.ndim == 1 else cusparse.SPMM_ALGORITHMS
        self.algorithms = table[klass]
        self.algorithm = self.algorithms[0] if algorithm is None else algorithm
        plan_cls = cusparse.SpMVPlan if b.ndim == 1 else cusparse.SpMMPlan
        self.plan = plan_cls(self.descriptor, b, out, alpha, beta, self.algorithm, device_id)
        self.beta = beta
        self.out = out

    def run(self, b: Any, c: Any, out: Any, stream: int) -> Any:
        if b is not self.plan.x:
            self.plan.set_x(b)
        if out is not self.plan.y:
            self.plan.set_y(out)
        if self.beta != 0 and c is not None:
            out[...] = c
        self.plan.run(stream)
        return out

    def free(self) -> None:
        self.plan.destroy()
        self.descriptor.destroy()
