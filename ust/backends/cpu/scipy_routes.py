"""SpMV / SpMM through SciPy's compiled kernels on zero-copy views of a Tensor's buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ScipyMatmul"]


class ScipyMatmul:
    """``out = alpha * A @ b + beta * c`` with SciPy computing ``A @ b``.

    The planner sends only alpha=1, beta=0 here when a C compiler exists (then SciPy's one
    pass is the whole job); without a compiler alpha/beta are applied in place afterwards.
    """

    route = "scipy"

    def __init__(self, a: Any, alpha: complex, beta: complex) -> None:
        self.matrix = a.to_scipy()
        self.alpha = alpha
        self.beta = beta

    def run(self, b: np.ndarray, c: np.ndarray | None, out: np.ndarray) -> np.ndarray:
        """SciPy allocates its result; it is returned as is (copying it into ``out`` costs a pass)."""
        result = self.matrix @ b
        if self.alpha != 1:
            result *= self.alpha
        if c is not None and self.beta != 0:
            result += self.beta * c
        return np.asarray(result, dtype=out.dtype)
