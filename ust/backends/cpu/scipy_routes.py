"""SpMV / SpMM through SciPy's compiled kernels on zero-copy views of a Tensor's buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ScipyMatmul", "without_padding"]


def without_padding(matrix: Any) -> Any:
    """A SciPy CSR copy of ``matrix`` without its zero slots (DIA's empty slots, BSR's fill).

    SciPy's DIA and BSR kernels multiply every slot, so ``0 * inf`` turns padding into NaN;
    ust treats a zero in a padding slot as absent (see :func:`ust.codegen.lower.has_padding`).
    The copy leaves the Tensor's own buffers untouched.
    """
    csr = matrix.tocsr(copy=True)
    csr.eliminate_zeros()
    return csr


class ScipyMatmul:
    """``out = alpha * A @ b + beta * c`` with SciPy computing ``A @ b``.

    The planner sends only alpha=1, beta=0 here when a C compiler exists (then SciPy's one
    pass is the whole job); without a compiler alpha/beta are applied in place afterwards.
    For a format with padding (DIA, BSR) a ``b`` with inf or NaN goes through a CSR copy
    without the padding (made once, on first need), so results agree with SciPy's CSR.
    ``padded`` (default: A's format has padding) says whether that check applies; ``prune``
    drops the zero slots once, up front (A converted from a padded format).
    """

    route = "scipy"

    def __init__(
        self, a: Any, alpha: complex, beta: complex, padded: bool | None = None, prune: bool = False
    ) -> None:
        from ust.codegen.lower import has_padding

        self.matrix = a.to_scipy()
        if prune:
            self.matrix = without_padding(self.matrix)
        self.padded = (has_padding(a.format) if padded is None else padded) and not prune
        self._pruned: Any = None
        self.alpha = alpha
        self.beta = beta

    def _matrix_for(self, b: np.ndarray) -> Any:
        if not self.padded or np.isfinite(b).all():
            return self.matrix
        if self._pruned is None:
            self._pruned = without_padding(self.matrix)
        return self._pruned

    def run(self, b: np.ndarray, c: np.ndarray | None, out: np.ndarray | None) -> np.ndarray:
        """SciPy allocates its result; it is returned as is (copying it into ``out`` costs a pass;
        ``out`` only gives the dtype, and may be None)."""
        result = self._matrix_for(b) @ b
        if self.alpha != 1:
            result *= self.alpha
        if c is not None and self.beta != 0:
            result += self.beta * c
        return result if out is None else np.asarray(result, dtype=out.dtype)
