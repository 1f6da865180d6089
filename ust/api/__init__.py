"""The public operations: what ``ust.*``, ``ust.ops``, ``ust.dense`` and ``ust.linalg`` name.

:mod:`~ust.api.matmul` (``Matmul`` / ``matmul``; the ``@`` operators), :mod:`~ust.api.algebra`
(SpGEMM, SDDMM, elementwise, transpose, reductions; Tensor's other operators),
:mod:`~ust.api.linalg` (direct and iterative solvers) and :mod:`~ust.api.linalg_distributed`
(its multi-GPU modes), :mod:`~ust.api.dense` (dense matmul and FFT), :mod:`~ust.api.linop`
(a Tensor as a LinearOperator), :mod:`~ust.api.explain` (``explain`` for every op) and
:mod:`~ust.api.ops` (the ``ust.ops`` namespace).

Importing this package fills the operator table of :class:`ust.Tensor`
(:mod:`ust.tensor.dispatch`): :mod:`~ust.api.algebra` and :mod:`~ust.api.matmul` register there;
and the compiled conversion kernels of the backends into :data:`ust.convert.kernels.KERNELS`.
"""

from __future__ import annotations

from typing import Any

from ust.api import algebra, dense, explain, indexing, linalg, matmul, ops, surface
from ust.convert.kernels import KERNELS
from ust.tensor.dispatch import register

__all__ = ["algebra", "dense", "explain", "indexing", "linalg", "matmul", "ops", "surface"]


@register(KERNELS, "csr_to_bsr")
def _csr_to_bsr(*args: Any) -> Any:
    """CSR -> canonical BSR in C (:mod:`ust.backends.cpu.bsr_c`, loaded when first called)."""
    from ust.backends.cpu.bsr_c import csr_to_bsr

    return csr_to_bsr(*args)
