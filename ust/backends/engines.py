"""The factorisation-engine protocol a direct solver runs over: one object per factorised matrix.

:class:`~ust.api.linalg.DirectSolver` holds one engine, chosen by the planner (the ``"solve"``
rules: ``superlu`` on the CPU, ``cudss`` on a GPU), and drives its phases -- ``analyse``,
``factorize`` / ``refactorize``, ``solve``, ``set_values``, ``free`` -- without knowing which
library is behind it.  The adapters: :class:`ust.backends.cpu.superlu_engine.SuperLUEngine`,
:class:`ust.backends.cuda.cudss_engine.CudssEngine` and the dense LU of small systems,
:class:`ust.backends.dense_lu.DenseLUEngine` (imported when the route is built).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "SMALL_PIVOT",
    "Analysis",
    "FactorizationEngine",
    "count_small_pivots",
    "lu_pivot_facts",
    "small_pivot_threshold",
]

#: A pivot ``|U_ii| <= SMALL_PIVOT[itemsize of the real type] * ||A||_inf`` counts as small:
#: the CPU's counterpart of the pivots cuDSS perturbs (its default pivot epsilon is 1e-13
#: for double precision), reported as ``small_pivots`` and used by the solution check.
SMALL_PIVOT = {8: 1e-13, 4: 1e-5}


def small_pivot_threshold(dtype: Any) -> float:
    """:data:`SMALL_PIVOT` for a (real or complex) value dtype: by the precision of its real part."""
    return SMALL_PIVOT[8 if np.finfo(dtype).bits >= 64 else 4]


def count_small_pivots(u_diagonal: Any, norm: float, xp: Any) -> int:
    """How many entries of ``diag(U)`` (host or device) are at or below ``SMALL_PIVOT * ||A||_inf``."""
    if not u_diagonal.size:
        return 0
    return int(xp.count_nonzero(xp.abs(u_diagonal) <= small_pivot_threshold(u_diagonal.dtype) * norm))


def lu_pivot_facts(u_diagonal: Any, swaps: int, symmetric: bool) -> dict[str, Any]:
    """``npivots`` and ``inertia`` of ``P A = L U`` with ``swaps`` row interchanges: for a symmetric
    type without interchanges, Sylvester's law makes the signs of ``diag(U)`` A's inertia."""
    facts: dict[str, Any] = {"npivots": swaps if symmetric else None, "inertia": None}
    if symmetric and swaps == 0:
        d = u_diagonal.real
        facts["inertia"] = (int((d > 0).sum()), int((d < 0).sum()))
    return facts


@dataclass
class Analysis:
    """What an analysis found: the ordering's name, the row / column permutations, the memory
    estimates (cuDSS) and the nested-dissection partition tree (cuDSS, saved with the plan)."""

    ordering: str
    row_permutation: Any = None
    col_permutation: Any = None
    estimates: dict[str, int] | None = None
    nd_tree: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class FactorizationEngine(Protocol):
    """One library factorisation of one square CSR matrix (values replaceable, pattern fixed).

    ``name``: the backend (``"superlu"``, ``"cudss"``); ``refines_in_solve``: the library applies
    the requested refinement steps inside ``solve``; ``perturbs_pivots``: small pivots are
    perturbed rather than kept (the solver may retry without perturbation).
    """

    name: str
    refines_in_solve: bool
    perturbs_pivots: bool

    def analyse(self, user_perm: Any = None, user_tree: Any = None) -> Analysis:
        """Reordering and symbolic factorisation (a saved permutation / tree taken as is)."""
        ...

    def factorize(self, phase: str = "factorization") -> dict[str, Any]:
        """Numerical factorisation; facts: lu_nnz, npivots, inertia, small_pivots."""
        ...

    def refactorize(self) -> dict[str, Any]:
        """Factorise the new values of the same pattern, reusing the analysis."""
        ...

    def solve(self, rhs: Any) -> Any:
        """x for a 2-D column-major right-hand side in the engine's memory space (not modified)."""
        ...

    def correction(self, residual: Any) -> Any:
        """A refinement correction: the solve of a residual computed by the caller."""
        ...

    def bind_rhs(self, rhs: Any) -> None:
        """Point the engine at the solver's right-hand side again (after corrections)."""
        ...

    def set_values(self, data: Any, full_matrix: Callable[[], Any]) -> None:
        """New values of the same pattern: the CSR values, or (lazily) the full matrix."""
        ...

    def sync(self) -> None:
        """Wait until the engine's queued work is done (timings measure finished work)."""
        ...

    def free(self) -> None:
        """Release the factors and library handles."""
        ...
