"""LAPACK's ``getrf`` / ``getrs`` (through SciPy) for the CPU's dense LU route
(:class:`ust.backends.dense_lu.DenseLUEngine`)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import scipy
from scipy.linalg import lapack

from ust.runtime.errors import UstError

__all__ = ["HostLapack"]


@functools.cache
def _lapack(name: str, dtype: np.dtype) -> Any:
    """SciPy's LAPACK routine ``name`` for ``dtype``, looked up once (SciPy's lookup inspects the
    arrays each call: a tenth of a small solve)."""
    return lapack.get_lapack_funcs(name, dtype=dtype)


class HostLapack:
    """The dense LU's library calls in host memory."""

    xp = np
    version = f"LAPACK through SciPy {scipy.__version__}"

    def densify(self, full: Any) -> Any:
        """``Aᵀ`` column-major: the row-major dense ``A`` SciPy writes straight from CSR, seen
        transposed (SciPy's column-major ``toarray`` would convert to CSC first); :meth:`getrs`
        solves with the transposed factors."""
        return full.toarray().T

    def getrf(self, a: Any, count_swaps: bool) -> tuple[Any, Any, int, int, float]:
        getrf = _lapack("getrf", a.dtype)
        lu, piv, info = getrf(a, overwrite_a=True)
        if info < 0:
            raise UstError(f"LAPACK {getrf.typecode}getrf rejected argument {-info}")
        swaps = int(np.count_nonzero(piv != np.arange(piv.size, dtype=piv.dtype))) if count_swaps else 0
        smallest = float(np.abs(lu.diagonal()).min()) if lu.size else 0.0
        return lu, piv, int(info), swaps, smallest

    def getrs(self, lu: Any, piv: Any, b: Any) -> Any:
        getrs = _lapack("getrs", lu.dtype)
        x, info = getrs(lu, piv, b, trans=1, overwrite_b=False)  # (Aᵀ)ᵀ x = b
        if info != 0:
            raise UstError(f"LAPACK {getrs.typecode}getrs rejected argument {-info}")
        return x

    def rcond(self, lu: Any, piv: Any, norm_inf: float) -> float:
        """LAPACK's ``gecon`` in the 1-norm of the factored ``Aᵀ``: the infinity norm of ``A``."""
        gecon = _lapack("gecon", lu.dtype)
        rcond, info = gecon(lu, norm_inf, norm="1")
        if info != 0:
            raise UstError(f"LAPACK {gecon.typecode}gecon rejected argument {-info}")
        return float(rcond)
