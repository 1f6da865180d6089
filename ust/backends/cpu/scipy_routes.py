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


def _direct_kernels(matrix: Any) -> tuple[Any, Any, np.dtype] | None:
    """SciPy's own ``<fmt>_matvec`` / ``<fmt>_matvecs`` for a CSR / CSC matrix whose buffers they
    take as they are (contiguous, one index dtype), with the value dtype; else None."""
    from ust.runtime.xp import _sparsetools

    st = _sparsetools()
    fmt = getattr(matrix, "format", None)
    if st is None or fmt not in ("csr", "csc"):
        return None
    ptr, idx, data = matrix.indptr, matrix.indices, matrix.data
    if ptr.dtype != idx.dtype or not all(x.flags.c_contiguous for x in (ptr, idx, data)):
        return None
    vec, vecs = getattr(st, f"{fmt}_matvec", None), getattr(st, f"{fmt}_matvecs", None)
    return None if vec is None or vecs is None else (vec, vecs, data.dtype)


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
        self._kernels = _direct_kernels(self.matrix)

    def _product(self, b: np.ndarray) -> np.ndarray:
        """``A @ b``: SciPy's compiled kernel called directly where ``A @ b`` would call it with
        the same arguments (CSR / CSC, ``b`` C-contiguous of A's dtype), else ``A @ b``.  Its
        dispatch (shape and scalar checks ust has made at plan time) is most of a small call."""
        k = self._kernels
        if k is not None and b.dtype == k[2] and b.flags.c_contiguous and 1 <= b.ndim <= 2:
            m = self.matrix
            rows, cols = m.shape
            if b.ndim == 1:
                y = np.zeros(rows, dtype=b.dtype)
                k[0](rows, cols, m.indptr, m.indices, m.data, b, y)
            else:
                y = np.zeros((rows, b.shape[1]), dtype=b.dtype)
                k[1](rows, cols, b.shape[1], m.indptr, m.indices, m.data, b.ravel(), y.ravel())
            return y
        return self._matrix_for(b) @ b

    def _matrix_for(self, b: np.ndarray) -> Any:
        if not self.padded or np.isfinite(b).all():
            return self.matrix
        if self._pruned is None:
            self._pruned = without_padding(self.matrix)
        return self._pruned

    def run(self, b: np.ndarray, c: np.ndarray | None, out: np.ndarray | None) -> np.ndarray:
        """SciPy allocates its result; it is returned as is (copying it into ``out`` costs a pass;
        ``out`` only gives the dtype, and may be None)."""
        result = self._product(b)
        if self.alpha != 1:
            result *= self.alpha
        if c is not None and self.beta != 0:
            result += self.beta * c
        return result if out is None else np.asarray(result, dtype=out.dtype)
