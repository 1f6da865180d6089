"""How a direct solve judges its solution: ``||A||_inf``, the normwise backward error, the
relative residual, and the pure rule that turns them (and the factorisation's small pivots)
into ``SingularMatrixError`` / ``SolverAccuracyError`` -- one rule for every route and device
(:class:`~ust.api.linalg.DirectSolver` applies it after each solve)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ust.runtime.errors import SingularMatrixError, SolverAccuracyError

__all__ = ["backward_error", "relative_residual", "solution_error"]


def _norm_inf(a: Any, xp: Any) -> float:
    """``||A||_inf``, the largest row sum of magnitudes."""
    if not a.nnz:
        return 0.0
    if xp is np and a.format == "csr" and a.dtype in _F64 and a.has_canonical_format:
        return _row_sums_max(a)
    mag = abs(a)
    return float((mag @ xp.ones(a.shape[1], dtype=mag.dtype)).max())


#: value dtypes whose magnitudes are float64: their row sums by ``bincount`` are SciPy's exactly
_F64 = frozenset({np.dtype(np.float64), np.dtype(np.complex128)})


def _row_sums_max(a: Any) -> float:
    """``max_i sum_j |a_ij|`` of a canonical float64 / complex128 SciPy CSR: SciPy's own product
    kernel (``csr_matvec``, each row summed from 0.0 in storage order) on the magnitudes and a
    vector of ones -- the same float as ``abs(a) @ ones``, without its two sparse constructions
    and dispatch (``bincount`` where this SciPy has no such kernel)."""
    n_row, n_col = a.shape
    nnz = int(a.indptr[-1])
    mags = np.abs(a.data[:nnz])
    matvec = _csr_matvec()
    if matvec is None:  # pragma: no cover - another SciPy layout
        rows = np.repeat(np.arange(n_row), np.diff(a.indptr))
        return float(np.bincount(rows, weights=mags, minlength=n_row).max())
    sums = np.zeros(n_row, dtype=mags.dtype)
    matvec(n_row, n_col, a.indptr, a.indices[:nnz], mags, np.ones(n_col, dtype=mags.dtype), sums)
    return float(sums.max())


def _product(a: Any, v: np.ndarray) -> np.ndarray:
    """``a @ v`` of a SciPy CSR and a vector of its value dtype by the kernel SciPy's product
    calls (``csr_matvec``, the same float), without SciPy's operator dispatch; SciPy's ``@``
    for anything else."""
    matvec = _csr_matvec()
    if (
        matvec is None
        or a.format != "csr"
        or v.dtype != a.data.dtype
        or a.indices.dtype != a.indptr.dtype
        or not v.flags.c_contiguous
    ):
        return a @ v
    y = np.zeros(a.shape[0], dtype=v.dtype)
    matvec(a.shape[0], a.shape[1], a.indptr, a.indices, a.data, v, y)
    return y


@functools.cache
def _csr_matvec() -> Any:
    """SciPy's compiled CSR product ``y += A x`` (``csr_matvec``), or None where it has none;
    looked up on first use, so ``import ust`` does not import ``scipy.sparse``."""
    try:
        from scipy.sparse._sparsetools import csr_matvec
    except ImportError:  # pragma: no cover - another SciPy layout
        return None
    return csr_matvec


def backward_error(a: Any, x: Any, b: Any, xp: Any = np, norm_a: float | None = None) -> float:
    """Normwise backward error ``max_j ||b_j - A x_j||_inf / (||A||_inf ||x_j||_inf + ||b_j||_inf)``.

    ``a`` is a SciPy or cupyx sparse matrix, ``x`` and ``b`` 2-D arrays of ``xp``.  NaN in ``x``
    gives NaN.
    """
    if norm_a is None:
        norm_a = _norm_inf(a, xp)
    if x.shape[1] == 1 and x.size and (xp is np or a.format == "csr"):  # one right-hand side: three maxima
        if xp is np:
            xv, bv = x[:, 0], b[:, 0]
            r_max, x_max, b_max = (float(np.abs(v).max()) for v in (bv - _product(a, xv), xv, bv))
        else:  # two kernels, one transfer
            from ust.backends.cuda.residual import residual_maxima

            r_max, x_max, b_max = residual_maxima(a.indptr, a.indices, a.data, x[:, 0], b[:, 0])
        den1 = norm_a * x_max + b_max
        if r_max != r_max:
            return float("nan")
        return r_max / den1 if den1 > 0 else (float("inf") if r_max > 0 else 0.0)
    if not x.size:
        return 0.0
    r = b - a @ x
    num = abs(r).max(axis=0)
    den = norm_a * abs(x).max(axis=0) + abs(b).max(axis=0)
    ratio = xp.where(den > 0, num / xp.where(den > 0, den, 1), xp.where(num > 0, np.inf, 0.0))
    return float(ratio.max()) if ratio.size else 0.0


def relative_residual(a: Any, x: Any, b: Any, xp: Any = np) -> float:
    """Relative residual ``max_j ||b_j - A x_j||_inf / ||b_j||_inf`` (a zero ``b_j`` counts 0 or inf).

    ``a`` is a SciPy or cupyx sparse matrix, ``x`` and ``b`` 2-D arrays of ``xp``.  NaN in ``x``
    gives NaN.
    """
    if not x.size:
        return 0.0
    num = abs(b - a @ x).max(axis=0)
    den = abs(b).max(axis=0)
    ratio = xp.where(den > 0, num / xp.where(den > 0, den, 1), xp.where(num > 0, np.inf, 0.0))
    return float(ratio.max())


def solution_error(
    *,
    backend: str,
    dtype: Any,
    tolerance: float | None,
    backward_error: float,
    relative_residual: float,
    small_pivots: int | None,
    pivoting: bool = True,
) -> SingularMatrixError | SolverAccuracyError | None:
    """The error a solution's check raises, or None when it passes (pure: numbers in, verdict out).

    ``tolerance`` None: no check.  ``small_pivots``: pivots the factorisation perturbed
    (cuDSS) or found below the small-pivot threshold (SuperLU); ``relative_residual`` is the
    one after any refinement; ``pivoting`` False when the factorisation was asked not to pivot.
    The rule, the same on every device:

    1. small pivots, a relative residual above the tolerance and pivoting allowed:
       ``SingularMatrixError`` -- with partial pivoting a pivot that small means the matrix is
       singular to working precision, and refinement could not make ``x`` solve the system;
    2. a backward error above the tolerance (or NaN): ``SolverAccuracyError``;
    3. small pivots and a relative residual above the tolerance although the backward error
       is small, without pivoting: ``SolverAccuracyError`` (the factorisation, not the
       matrix, is to blame: pivoting='auto' may solve it);
    4. otherwise None.
    """
    if tolerance is None:
        return None
    dt = np.dtype(dtype)
    lib = {"cudss": "cuDSS", "superlu": "SuperLU"}.get(backend, backend)
    small = int(small_pivots or 0)
    pivots = ""
    res_bad = not relative_residual <= tolerance
    res_text = "NaN" if relative_residual != relative_residual else f"{relative_residual:.3e}"
    from ust.backends.engines import small_pivot_threshold

    eps = small_pivot_threshold(dt)
    if small and backend == "cudss":
        pivots = f"cuDSS perturbed {small} small pivot(s) to its pivot epsilon (CUDSS_DATA_NPIVOTS)"
    elif small and backend == "dense-lu":
        pivots = (
            f"the dense LU's factor has a pivot of magnitude at most {eps:.0e} ||A||_inf or a reciprocal "
            "condition number estimate below machine epsilon"
        )
    elif small:
        pivots = f"{lib}'s factor has {small} pivot(s) of magnitude at most {eps:.0e} ||A||_inf"
    if small and res_bad and pivoting:
        return SingularMatrixError(
            f"the matrix is singular to working precision: {pivots}, and the refined relative residual "
            f"||b - Ax||_inf / ||b||_inf is {res_text}, above the tolerance {tolerance:.1e} for {dt}"
        )
    if not backward_error <= tolerance:
        what = "NaN" if backward_error != backward_error else f"{backward_error:.3e}"
        extra = f"; {pivots}" if small else ""
        return SolverAccuracyError(
            f"the {backend} solution has normwise backward error {what}, above the tolerance {tolerance:.1e} for "
            f"{dt}: the matrix is probably singular or too ill-conditioned for this factorisation "
            f"(try pivoting='auto', refinement_steps=2, another reordering, or check=False to accept it){extra}",
            backward_error=backward_error,
        )
    if small and res_bad:
        return SolverAccuracyError(
            f"the {backend} solution has relative residual {res_text}, above the tolerance {tolerance:.1e} for "
            f"{dt}, after refinement: {pivots} without pivoting (try pivoting='auto', or check=False to "
            "accept it)",
            backward_error=backward_error,
        )
    return None
