"""Operations on sparse tensors, each planned like every other op (``ust.explain`` says how).

``matmul`` / ``Matmul`` (sparse @ dense, fused ``alpha * A @ B + beta * C``; sparse @ sparse
goes to SpGEMM; an all-dense A falls through to cuBLASLt / NumPy), ``sddmm``, ``add``,
``subtract``, ``multiply``, ``divide``, ``negative``, ``transpose``, ``sum``, ``max``,
``min``, ``astype``, ``aslinearoperator`` and ``apply_epilog``.  ``sum``/``max``/``min`` live
here (not on ``ust``) so that they never shadow the built-ins.
"""

from __future__ import annotations

from ust.api.algebra import (
    add,
    apply_epilog,
    astype,
    divide,
    matmul_sparse,
    max,  # noqa: A004 - ust.ops.max, as numpy.max
    min,  # noqa: A004
    multiply,
    negative,
    sddmm,
    subtract,
    sum,  # noqa: A004
    transpose,
)
from ust.api.explain import explain
from ust.api.linop import aslinearoperator
from ust.api.matmul import Matmul, matmul

__all__ = [
    "Matmul",
    "add",
    "apply_epilog",
    "aslinearoperator",
    "astype",
    "divide",
    "explain",
    "matmul",
    "matmul_sparse",
    "max",
    "min",
    "multiply",
    "negative",
    "sddmm",
    "subtract",
    "sum",
    "transpose",
]
