"""SciPy's SuperLU as a :class:`~ust.backends.engines.FactorizationEngine` (the CPU's ``"solve"`` route)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ust.backends.cpu.superlu import SuperLUFactorization
from ust.backends.engines import Analysis
from ust.runtime.errors import SingularMatrixError

__all__ = ["SuperLUEngine"]


class SuperLUEngine:
    """The phases of :class:`~ust.backends.cpu.superlu.SuperLUFactorization` behind the engine
    protocol; a singular matrix's error names its structure (``diagnose()``, appended)."""

    name = "superlu"
    refines_in_solve = False  # the solver refines on the CPU
    perturbs_pivots = False

    def __init__(
        self,
        full: Any,
        *,
        matrix_type: str,
        reordering: str,
        pivoting: str,
        pivot_threshold: float | None,
        diagnose: Callable[[], str] = lambda: "",
        norm: Callable[[], float] | None = None,
    ) -> None:
        self.inner = SuperLUFactorization(
            full,
            matrix_type=matrix_type,
            reordering=reordering,
            pivoting=pivoting,
            pivot_threshold=pivot_threshold,
            norm=norm,
        )
        self._diagnose = diagnose

    @property
    def version(self) -> str:
        return self.inner.version

    @property
    def ordering_spec(self) -> str:
        return self.inner.settings.spec

    @property
    def ordering_reason(self) -> str:
        return self.inner.reason

    @property
    def perm(self) -> np.ndarray | None:
        return self.inner.perm

    def _guard(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except SingularMatrixError as exc:
            raise SingularMatrixError(f"{exc}{self._diagnose()}") from None

    def analyse(self, user_perm: Any = None, user_tree: Any = None) -> Analysis:
        facts = self._guard(lambda: self.inner.analyze(user_perm))
        perm = self.inner.perm
        return Analysis(facts["ordering"], perm, perm)

    def factorize(self, phase: str = "factorization") -> dict[str, Any]:
        run = self.inner.factorize if phase == "factorization" else self.inner.refactorize
        return dict(self._guard(run))

    def refactorize(self) -> dict[str, Any]:
        return self.factorize("refactorization")

    def solve(self, rhs: Any) -> Any:
        return self.inner.solve(rhs)

    def correction(self, residual: Any) -> Any:
        return self.inner.solve(np.asfortranarray(residual))

    def bind_rhs(self, rhs: Any) -> None:
        """SuperLU takes the right-hand side with each solve: nothing to point at."""

    def set_values(self, data: Any, full_matrix: Callable[[], Any]) -> None:
        self.inner.set_values(full_matrix())

    def sync(self) -> None:
        """SuperLU runs synchronously."""

    def free(self) -> None:
        self.inner.free()
