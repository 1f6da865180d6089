"""The pieces of a solve's backward error on the GPU in two kernels and one host sync.

``DirectSolver`` checks every solution (``max |b - A x| / (||A|| max |x| + max |b|)``).  Through
cupyx that check is a cuSPARSE SpMV with its own buffer set-up, then half a dozen elementwise
kernels, each a launch; here one thread per row forms its residual and writes its magnitude
beside those of its x and b entries, and one reduction brings the three maxima back together.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["residual_maxima"]


@functools.cache
def _row_residual_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "raw I indptr, raw J indices, raw T data, raw T x, raw T b, int64 n",
        "raw R out",
        """
        T s = b[i];
        for (I k = indptr[i]; k < indptr[i + 1]; ++k) s -= data[k] * x[indices[k]];
        out[i] = abs(s);
        out[n + i] = abs(x[i]);
        out[2 * n + i] = abs(b[i]);
        """,
        "ust_csr_row_residual",
    )


def residual_maxima(indptr: Any, indices: Any, data: Any, x: Any, b: Any) -> tuple[float, float, float]:
    """``(max_i |b - A x|_i, max |x|, max |b|)`` for CSR ``A`` and 1-D ``x``, ``b`` on one device
    (NaN anywhere gives NaN in the first entry)."""
    import cupy

    n = int(b.shape[0])
    if n == 0:
        return 0.0, 0.0, 0.0
    real = cupy.empty(0, dtype=b.dtype).real.dtype
    out = cupy.empty((3, n), dtype=real)
    _row_residual_kernel()(indptr, indices, data, x, b, n, out, size=n)
    both = out.max(axis=1).get()  # max propagates NaN
    return float(both[0]), float(both[1]), float(both[2])
