"""A dense LU with partial pivoting behind the factorisation-engine protocol: the ``"dense-lu"``
solve route of small systems, on either device.

For a small system a sparse factorisation is all overhead -- SuperLU's ordering and supernode
bookkeeping, cuDSS's analysis phase (about 10 ms on the H200 whatever the size) -- while the
``(2/3) n^3`` flops of a dense LU take microseconds (0.7 MFLOP at n = 100).  The matrix is
densified once per factorisation and factored by LAPACK (CPU) or cuSOLVER (GPU) ``getrf``;
the facts (small pivots, row interchanges, inertia) follow SuperLU's rules
(:func:`~ust.backends.engines.count_small_pivots`, :func:`~ust.backends.engines.lu_pivot_facts`),
so the solver's solution check judges every route alike.  Partial pivoting may leave no pivot
that small in a matrix singular to working precision, so the factor's reciprocal condition
number (infinity norm: LAPACK's ``gecon`` on the CPU, Hager's estimator over cuSOLVER solves on
a GPU) is read where the smallest pivot is under ``sqrt(eps) ||A||_inf``: below the dtype's
machine epsilon it counts as a small pivot, and the
solver's residual test then tells a singular system from a merely ill-conditioned one as it
does for SuperLU's and cuDSS's small pivots.  The library calls are a
:class:`DenseLapack`: :class:`ust.backends.cpu.dense_lu.HostLapack`,
:class:`ust.backends.cuda.dense_lu.DeviceLapack`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ust.backends.engines import Analysis, count_small_pivots, lu_pivot_facts, small_pivot_threshold
from ust.runtime.errors import SingularMatrixError

__all__ = ["ORDERING", "DenseLUEngine", "DenseLapack", "hager_inverse_norm", "np_eps"]


def np_eps(dtype: Any) -> float:
    """Machine epsilon of a (real or complex) floating dtype."""
    return float(np.finfo(np.dtype(dtype)).eps)


def hager_inverse_norm(n: int, solve: Callable[[Any, int], Any], xp: Any, dtype: Any) -> float:
    """Hager's estimate of ``||A^-1||_inf`` (LAPACK's ``xLACON`` idea) from solves with the factors:
    ``solve(v, 0)`` is ``A^-1 v``, ``solve(v, 2)`` is ``A^-H v``.  ``||A^-1||_inf = ||A^-H||_1``,
    so the 1-norm iteration runs on ``B = A^-H`` (applied by ``solve(., 2)``, ``B^H`` by ``solve(., 0)``)."""
    x = xp.full((n, 1), 1.0 / n, dtype=dtype)
    est = 0.0
    for k in range(5):
        y = solve(x, 2)
        mag = xp.abs(y)
        now = float(mag.sum())
        if now != now:  # NaN: the factor is singular to working precision
            return float("inf")
        if k and now <= est:
            break
        est = now
        xi = xp.where(mag > 0, y / xp.where(mag > 0, mag, 1), 1).astype(dtype)
        z = solve(xi, 0)
        j = int(xp.argmax(xp.abs(z)))
        if k and float(xp.abs(z[j, 0])) <= float(xp.real(xp.vdot(z, x))):
            break
        x = xp.zeros((n, 1), dtype=dtype)
        x[j, 0] = 1
    return est


#: What the analysis reports as its ordering: a dense LU has no fill to reduce.
ORDERING = "none (dense LU with partial pivoting)"


class DenseLapack(Protocol):
    """The three library calls of a dense LU in one memory space (``xp``: numpy or cupy)."""

    xp: Any
    version: str

    def densify(self, full: Any) -> Any:
        """The SciPy / cupyx CSR ``full`` as the column-major dense array to factor (``A`` or,
        where that is cheaper to write, ``Aᵀ``: :meth:`getrs` knows which)."""
        ...

    def getrf(self, a: Any, count_swaps: bool) -> tuple[Any, Any, int, int, float]:
        """Factor ``a`` in place: ``(lu, pivots, info, row interchanges, smallest |U_ii|)`` with
        LAPACK's ``info`` (the interchanges counted only when asked, else 0)."""
        ...

    def getrs(self, lu: Any, piv: Any, b: Any) -> Any:
        """``x`` of ``A x = b`` for a column-major ``b`` (not modified)."""
        ...

    def rcond(self, lu: Any, piv: Any, norm_inf: float) -> float:
        """An estimate of ``1 / (||A||_inf ||A^-1||_inf)`` from the factors (``norm_inf``: ``||A||_inf``)."""
        ...


class DenseLUEngine:
    """One dense LU of the full matrix, factorised again whenever its values change."""

    name = "dense-lu"
    refines_in_solve = False  # the solver refines
    perturbs_pivots = False

    def __init__(
        self,
        full: Any,
        *,
        lapack: DenseLapack,
        symmetric: bool,
        norm: Callable[[], float],
        diagnose: Callable[[], str] = lambda: "",
    ) -> None:
        self.full = full
        self.n = int(full.shape[0])
        self.lapack = lapack
        self.symmetric = symmetric
        self._norm = norm
        self._diagnose = diagnose
        self._lu: Any = None
        self._piv: Any = None

    @property
    def version(self) -> str:
        return self.lapack.version

    def analyse(self, user_perm: Any = None, user_tree: Any = None) -> Analysis:
        """Nothing to analyse (a saved ordering is not needed either)."""
        return Analysis(ORDERING)

    def factorize(self, phase: str = "factorization") -> dict[str, Any]:
        lu, piv, info, swaps, smallest = self.lapack.getrf(self.lapack.densify(self.full), self.symmetric)
        if info > 0:
            raise SingularMatrixError(
                f"dense LU: the matrix is exactly singular (pivot {info} of {self.n} is zero){self._diagnose()}"
            )
        self._lu, self._piv = lu, piv
        diag = lu.diagonal()
        norm = self._norm()
        xp, eps = self.lapack.xp, np_eps(lu.dtype)
        small = 0
        if smallest <= small_pivot_threshold(lu.dtype) * norm:
            small = count_small_pivots(diag, norm, xp)
        elif smallest <= eps**0.5 * norm and not self.lapack.rcond(lu, piv, norm) >= eps:  # NaN: singular
            # pivots this small may hide a matrix singular to working precision: the condition
            # estimate (O(n^2), run only here) decides
            small = 1
        facts: dict[str, Any] = {"lu_nnz": self.n * self.n, "small_pivots": small}
        facts.update(lu_pivot_facts(diag, swaps, self.symmetric))
        return facts

    def refactorize(self) -> dict[str, Any]:
        return self.factorize("refactorization")

    def solve(self, rhs: Any) -> Any:
        return self.lapack.getrs(self._lu, self._piv, rhs)

    def correction(self, residual: Any) -> Any:
        return self.solve(self.lapack.xp.asfortranarray(residual))

    def bind_rhs(self, rhs: Any) -> None:
        """The right-hand side comes with each solve: nothing to point at."""

    def set_values(self, data: Any, full_matrix: Callable[[], Any]) -> None:
        self.full = full_matrix()
        self._lu = self._piv = None

    def sync(self) -> None:
        """The facts of each phase were read back: the work is done."""

    def free(self) -> None:
        self._lu = self._piv = self.full = None
