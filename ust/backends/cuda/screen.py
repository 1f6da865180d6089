"""A direct solve's screening of its matrix on the GPU in one kernel and one host sync.

Before factorising, ``DirectSolver`` refuses NaN / Inf values and empty rows or columns (a
singular matrix, named) and computes ``||A||_inf`` for its checks.  Through CuPy that is a
reduction and a transfer per question, and ``||A||_inf`` a cuSPARSE SpMV of ``|A|``; here one
thread per row answers all of them for its row (its absolute row sum in storage order from 0,
as the CPU's check sums it; float32 values are summed in float64, as ``||A||`` is used) and the
four answers come back together.  Where an answer is bad the
solver's own host-side check runs to name the culprit.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["matrix_screen"]


@functools.cache
def _row_screen_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "raw I indptr, raw J indices, raw T data, int64 n",
        "raw float64 stat, raw int32 colhas",
        """
        double s = 0;
        int nz = 0, nf = 0;
        for (I k = indptr[i]; k < indptr[i + 1]; ++k) {
            const T v = data[k];
            const double m = (double)abs(v);
            if (!isfinite(m)) ++nf;
            if (v != T(0)) { ++nz; colhas[indices[k]] = 1; }
            s += m;
        }
        stat[i] = nf ? 1.0 : 0.0;   // a non-finite value in the row
        stat[n + i] = nz ? 0.0 : 1.0;  // the row is empty
        stat[2 * n + i] = s;           // its absolute sum
        """,
        "ust_solve_row_screen",
    )


def matrix_screen(indptr: Any, indices: Any, data: Any, n: int) -> tuple[bool, bool, bool, float]:
    """``(any non-finite value, any empty row, any empty column, ||A||_inf)`` of an n x n CSR
    matrix whose column indices are in range (its intake checked them)."""
    import cupy

    if n == 0:
        return False, False, False, 0.0
    stat = cupy.empty((3, n), dtype=np.float64)
    colhas = cupy.zeros(n, dtype=np.int32)
    _row_screen_kernel()(indptr, indices, data, n, stat, colhas, size=n)
    got = cupy.concatenate([stat.max(axis=1), (colhas.min(keepdims=True) == 0).astype(np.float64)]).get()
    return bool(got[0]), bool(got[1]), bool(got[3]), float(got[2])
