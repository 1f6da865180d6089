"""cuDSS as a :class:`~ust.backends.engines.FactorizationEngine` (the GPU's ``"solve"`` route).

Wraps :class:`~ust.backends.cuda.cudss.CudssFactorization` (or the multi-GPU
:class:`~ust.backends.cuda.cudss_mg.CudssMgFactorization`): the dense b / x wrappers, the
stream, the info checks after each phase and the data values cuDSS reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ust.backends.cuda.cudss import MEMORY_ESTIMATE_FIELDS
from ust.backends.engines import Analysis
from ust.runtime.errors import SingularMatrixError
from ust.runtime.log import get_logger

__all__ = ["CudssEngine"]

_log = get_logger("linalg")


class CudssEngine:
    """One cuDSS factorisation of a CSR matrix on one GPU (or several, ``devices``)."""

    name = "cudss"
    refines_in_solve = True  # cuDSS applies ir_n_steps inside its SOLVE phase
    perturbs_pivots = True  # small pivots become cuDSS's pivot epsilon

    def __init__(
        self,
        indptr: Any,
        indices: Any,
        data: Any,
        n: int,
        b: Any,
        *,
        matrix_type: str,
        matrix_view: str,
        reordering: str,
        config: dict[str, Any],
        device_id: int,
        stream: int,
        devices: tuple[int, ...] | None = None,
        diagnose: Callable[[], str] = lambda: "",
    ) -> None:
        import cupy

        from ust.backends.cuda.cudss import CudssFactorization

        self._cupy = cupy
        cls: Any = CudssFactorization
        extra: dict[str, Any] = {}
        if devices:
            from ust.backends.cuda.cudss_mg import CudssMgFactorization

            cls, extra = CudssMgFactorization, {"devices": devices}
        self.inner: Any = cls(
            indptr,
            indices,
            data,
            n,
            matrix_type=matrix_type,
            matrix_view=matrix_view,
            config=config,
            device_id=device_id,
            stream=stream,
            **extra,
        )
        self.device_id, self.stream, self.dtype = device_id, stream, np.dtype(data.dtype)
        self.matrix_type, self.reordering = matrix_type, reordering
        self._diagnose = diagnose
        self.bind_rhs(b)

    # ------------------------------------------------------------------ helpers

    def _new_x(self, shape: tuple[int, ...]) -> Any:
        with self._cupy.cuda.Device(self.device_id):
            return self._cupy.empty(shape, dtype=self.dtype, order="F")

    def optional(self, name: str) -> np.ndarray | None:
        """A cuDSS data value that some matrix types do not define (None, logged, when refused)."""
        from ust.backends.cuda.cudss import CudssError

        try:
            return self.inner.get(name)
        except CudssError as exc:
            _log.debug("cuDSS did not report %s: %s", name, exc)
            return None

    def run_phase(self, phase: str) -> None:
        """One cuDSS phase as is (no info check): the solver's retry without perturbation."""
        self.inner.execute(phase)

    def info(self) -> int:
        return int(self.inner.info())

    # ------------------------------------------------------------------ phases

    def analyse(self, user_perm: Any = None, user_tree: Any = None) -> Analysis:
        e = self.inner
        if user_perm is not None:
            e.set_user_permutation(user_perm)
            if user_tree is not None and hasattr(e, "set_user_partition_tree"):
                e.set_user_partition_tree(user_tree)
        e.execute("analysis")
        self.sync()  # the phase has finished before its info is read (as before the engine protocol)
        info = e.info()
        if info != 0:
            raise SingularMatrixError(
                f"cuDSS analysis reports info = {info}: the matrix is structurally singular{self._diagnose()}"
            )
        row, col = self.optional("perm_reorder_row"), self.optional("perm_reorder_col")
        tree_of = getattr(e, "nd_partition_tree", None)
        est = self.optional("memory_estimates")
        estimates = None if est is None else dict(zip(MEMORY_ESTIMATE_FIELDS, (int(v) for v in est)))
        ordering = ("saved plan" if user_perm is not None else self.reordering) + " (cuDSS)"
        return Analysis(ordering, row, col, estimates, tree_of() if tree_of is not None else None)

    def factorize(self, phase: str = "factorization") -> dict[str, Any]:
        e = self.inner
        e.execute(phase)
        self.sync()
        info = e.info()
        if info != 0:
            raise SingularMatrixError(
                f"cuDSS {phase} reports info = {info}: a zero pivot (or, for spd/hpd, a non-positive one) "
                f"at position {info} of the reordered matrix{self._diagnose()}"
            )
        lu_nnz = self.optional("lu_nnz")
        inertia = self.optional("inertia") if self.matrix_type in ("symmetric", "hermitian") else None
        npivots = None if (p := self.optional("npivots")) is None else int(p[0])
        if npivots:
            _log.info("cuDSS %s perturbed %d small pivot(s) to its pivot epsilon", phase, npivots)
        return {
            "lu_nnz": None if lu_nnz is None else int(lu_nnz[0]),
            "npivots": npivots,
            "inertia": None if inertia is None else (int(inertia[0]), int(inertia[1])),
            "small_pivots": npivots,  # CUDSS_DATA_NPIVOTS counts the pivots cuDSS perturbed
        }

    def refactorize(self) -> dict[str, Any]:
        return self.factorize("refactorization")

    def solve(self, rhs: Any) -> Any:
        """One cuDSS SOLVE of a 2-D column-major right-hand side (cuDSS refines inside it when asked)."""
        x = self._new_x(tuple(rhs.shape))
        self.inner.set_rhs(rhs, x)
        self.inner.execute("solve")
        return x

    def correction(self, residual: Any) -> Any:
        xp = self._cupy
        r = xp.asfortranarray(residual.astype(self.dtype, copy=False))
        xp.cuda.get_current_stream().synchronize()  # r is ready before cuDSS's stream reads it
        dx = self.solve(r)
        self.sync()
        return dx

    def bind_rhs(self, rhs: Any) -> None:
        """The dense wrappers point at ``rhs`` (and a fresh x) for the next solve."""
        self.inner.set_rhs(rhs, self._new_x(tuple(rhs.shape)))

    def set_values(self, data: Any, full_matrix: Callable[[], Any]) -> None:
        self.inner.set_values(data)

    def sync(self) -> None:
        with self._cupy.cuda.Device(self.device_id):
            self._cupy.cuda.runtime.streamSynchronize(self.stream)

    def free(self) -> None:
        self.inner.free()
