"""A direct solve's screening of its matrix on the GPU in one kernel and one host sync.

Before factorising, ``DirectSolver`` refuses NaN / Inf values and empty rows or columns (a
singular matrix, named) and computes ``||A||_inf`` for its checks.  Through CuPy that is a
reduction and a transfer per question, and ``||A||_inf`` a cuSPARSE SpMV of ``|A|``; here one
thread per row answers all of them for its row (its absolute row sum in storage order from 0,
as the CPU's check sums it) and the four numbers come back together.  Where an answer is bad the
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
        "raw I indptr, raw J indices, raw T data",
        "R rowsum, int32 nonzero, int32 bad, raw int32 colhas",
        """
        R s = 0;
        int nz = 0, nf = 0;
        for (I k = indptr[i]; k < indptr[i + 1]; ++k) {
            const T v = data[k];
            const R m = abs(v);
            if (!isfinite(m)) ++nf;
            if (v != T(0)) { ++nz; colhas[indices[k]] = 1; }
            s += m;
        }
        rowsum = s; nonzero = nz; bad = nf;
        """,
        "ust_solve_row_screen",
    )


def matrix_screen(indptr: Any, indices: Any, data: Any, n: int) -> tuple[int, int, int, float]:
    """``(non-finite values, empty rows, empty columns, ||A||_inf)`` of an n x n CSR matrix whose
    column indices are in range (its intake checked them)."""
    import cupy

    if n == 0:
        return 0, 0, 0, 0.0
    real = cupy.empty(0, dtype=data.dtype).real.dtype
    rowsum = cupy.empty(n, dtype=real)
    nonzero = cupy.empty(n, dtype=np.int32)
    bad = cupy.empty(n, dtype=np.int32)
    colhas = cupy.zeros(n, dtype=np.int32)
    _row_screen_kernel()(indptr, indices, data, rowsum, nonzero, bad, colhas)
    got = cupy.stack(
        [
            bad.sum(dtype=np.float64),
            cupy.count_nonzero(nonzero == 0).astype(np.float64),
            cupy.count_nonzero(colhas == 0).astype(np.float64),
            rowsum.max().astype(np.float64),
        ]
    ).get()
    return int(got[0]), int(got[1]), int(got[2]), float(got[3])
