"""The options of a direct solve (:class:`DirectSolverOptions`): every field documented, checked
when the options are made, shared as one frozen instance when they are the defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ust.runtime.errors import InvalidValueError, UnsupportedError
from ust.runtime.options import option

__all__ = ["MATRIX_TYPES", "MATRIX_VIEWS", "PIVOTING", "PRECISIONS", "REORDERINGS", "DirectSolverOptions"]

PRECISIONS = ("double", "mixed")
MATRIX_TYPES = ("general", "symmetric", "spd", "hermitian", "hpd")
MATRIX_VIEWS = ("full", "lower", "upper")
PIVOTING = ("auto", "none", "global_col", "global_row", "diagonal", "local_block", "bunch_kaufman")
REORDERINGS = (
    "default",
    "nested_dissection",
    "amd",
    "colamd",
    "btf_colamd",
    "mmd_ata",
    "mmd_at_plus_a",
    "natural",
    "none",
)


def _one_of(name: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise UnsupportedError(f"{name}={value!r} is not supported; supported: {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class DirectSolverOptions:
    """Options of :class:`DirectSolver` and :func:`solve` (a dict with these keys works too, and
    :func:`solve` takes them as keywords).

    cuDSS (the GPU) reads every option; SuperLU (the CPU) reads ``matrix_type``, ``matrix_view``,
    ``reordering``, ``pivoting="none"``, ``pivot_threshold``, ``refinement_steps`` and ``check``
    (the others apply to cuDSS only).  The dense LU of small one-shot solves reads
    ``matrix_type`` (for the inertia), ``matrix_view``, ``refinement_steps`` and ``check``; any
    other option set away from its default keeps a one-shot solve on the sparse library.
    """

    matrix_type: str = option(
        "general",
        """What A is: ``general`` (LU with pivoting), ``symmetric`` (LDLᵀ), ``spd``
        (symmetric positive definite: Cholesky), ``hermitian`` (LDLᴴ) or ``hpd``
        (Hermitian positive definite).  cuDSS picks its factorisation from it; SuperLU, which
        always factors LU, picks a symmetric ordering for the four symmetric types.""",
        choices=MATRIX_TYPES,
    )
    matrix_view: str = option(
        "full",
        """Which stored entries of A are read: ``full`` (all of them), or only the ``lower`` or
        ``upper`` triangle, mirrored across the diagonal (conjugated for ``hermitian`` and
        ``hpd``): a symmetric matrix may be stored as one triangle.""",
        choices=MATRIX_VIEWS,
    )
    reordering: str = option(
        "default",
        """The fill-reducing ordering.  ``default``: cuDSS's own; for SuperLU, minimum degree on
        Aᵀ + A for a symmetric type or a symmetric pattern, else COLAMD (the log says
        which and why).  Both libraries: ``amd``, ``colamd``, ``none`` (the natural order).  cuDSS
        only: ``nested_dissection``, ``btf_colamd``.  SuperLU only: ``mmd_ata``,
        ``mmd_at_plus_a``, ``natural``.  A value the chosen library lacks raises
        :class:`~ust.UnsupportedError`.""",
        choices=REORDERINGS,
    )
    host_threads: int | None = option(
        None,
        """Host threads of cuDSS's reordering and host-side phases (its threading layer, when
        found beside libcudss).  None: the cores this process may use.""",
    )
    pivoting: str = option(
        "auto",
        """The pivoting strategy.  ``auto``: the library's default for the matrix type;
        ``none``: no pivoting (SuperLU: diagonal pivots only); cuDSS also takes ``global_col``,
        ``global_row``, ``diagonal``, ``local_block`` and ``bunch_kaufman``.""",
        choices=PIVOTING,
    )
    pivot_threshold: float | None = option(
        None,
        """The pivoting threshold: cuDSS's pivot threshold, SuperLU's ``diag_pivot_thresh``
        (0 keeps the diagonal pivot, 1 is partial pivoting).  None: the library's default
        (SuperLU: 0.01 with a symmetric ordering, else 1).""",
    )
    pivot_epsilon: float | None = option(
        None,
        """cuDSS only: pivots smaller than this are replaced by it (counted in
        ``small_pivots`` of :class:`~ust.linalg.FactorizationInfo`).  None: cuDSS's default for the dtype.""",
    )
    refinement_steps: int = option(
        0,
        """Steps of iterative refinement after each solve (cuDSS refines inside its solve phase;
        for SuperLU ust refines).  0: none beyond what a factorisation with small pivots needs.""",
    )
    hybrid_memory: bool = option(
        False,
        """cuDSS only: hybrid memory mode, which keeps part of the factors in host memory so that a
        factorisation larger than the GPU's memory runs.  Set it before the analysis.""",
    )
    hybrid_device_memory_limit: int | None = option(
        None,
        """cuDSS only, with ``hybrid_memory``: bytes of GPU memory the factors may use.  None:
        cuDSS's choice.""",
    )
    check: bool | float = option(
        True,
        """Check each solution's backward error and raise :class:`~ust.SolverAccuracyError` above
        the tolerance: True (the dtype's ``eps ** (2/3)``: 3.7e-11 for float64, 2.4e-5 for
        float32), a positive float (that tolerance), or False (no check).""",
    )
    devices: tuple[int, ...] | None = option(
        None,
        """GPU indices to solve on: one index runs on that GPU, two or more run cuDSS's multi-GPU
        (MG) mode over them.  None: the GPU of the operands or of ``execution``.""",
    )
    route: str | None = option(
        None,
        """The factorisation route, as the planner names it: ``superlu`` (CPU), ``cudss`` (GPU) or
        ``dense-lu`` (LAPACK / cuSOLVER dense LU, n up to 8192).  None: the planner's choice --
        a one-shot :func:`solve` of a small system (n <= 128 on the CPU, 2048 on a GPU) with the
        default pivoting and ordering options runs the dense LU, everything else the sparse
        library.  A route that cannot run this system raises :class:`~ust.UnsupportedError`
        naming the candidates.""",
    )
    precision: str = option(
        "double",
        """``double``: factor in the solve dtype.  ``mixed`` (float64 / complex128 systems): factor
        a float32 (complex64) copy of A, with cuDSS or SuperLU, and refine each solution to
        float64 accuracy by GMRES preconditioned with that factorisation (GMRES-based iterative
        refinement); :class:`~ust.SolverAccuracyError` when the refinement does not reach a
        backward error of 1e-14, never a silent fall-back.""",
        choices=PRECISIONS,
    )

    def __post_init__(self) -> None:
        if self.devices is not None:  # [0, 1, ...]: one GPU -> that GPU; several -> cuDSS MG mode
            from ust.api.linalg_distributed import parse_devices

            object.__setattr__(self, "devices", parse_devices(self.devices))
        _one_of("matrix_type", self.matrix_type, MATRIX_TYPES)
        _one_of("matrix_view", self.matrix_view, MATRIX_VIEWS)
        _one_of("reordering", self.reordering, REORDERINGS)
        _one_of("pivoting", self.pivoting, PIVOTING)
        _one_of("precision", self.precision, PRECISIONS)
        if self.route is not None and not isinstance(self.route, str):
            raise InvalidValueError(f"route must be a route name or None, not {self.route!r}")
        if self.host_threads is not None and (
            not isinstance(self.host_threads, int) or self.host_threads < 1
        ):
            raise InvalidValueError(f"host_threads must be a positive int, not {self.host_threads!r}")
        if not isinstance(self.refinement_steps, int) or self.refinement_steps < 0:
            raise InvalidValueError(
                f"refinement_steps must be a non-negative int, not {self.refinement_steps!r}"
            )
        if not isinstance(self.check, (bool, int, float)) or (
            not isinstance(self.check, bool) and self.check <= 0
        ):
            raise InvalidValueError(f"check must be True, False or a positive tolerance, not {self.check!r}")

    @classmethod
    def coerce(cls, options: Any = None, **overrides: Any) -> DirectSolverOptions:
        """Options from None, a dict or an instance, with keyword overrides."""
        if type(options) is cls and not overrides:  # frozen: an instance is shared as it is
            return options
        if options is None and not overrides and cls is DirectSolverOptions:
            return _DEFAULT_OPTIONS
        names = {f.name for f in fields(cls)}
        if options is None:
            values: dict[str, Any] = {}
        elif isinstance(options, cls):
            values = {n: getattr(options, n) for n in names}
        elif isinstance(options, Mapping):
            values = dict(options)
        else:
            raise UnsupportedError(
                f"options must be a DirectSolverOptions or a dict, not {type(options).__name__}"
            )
        values.update(overrides)
        unknown = sorted(set(values) - names)
        if unknown:
            raise UnsupportedError(
                f"unknown solver option(s) {', '.join(unknown)}; supported: {', '.join(sorted(names))}"
            )
        return cls(**values)

    def tolerance(self, dtype: np.dtype) -> float | None:
        """The backward-error bound for ``dtype`` (None: no check)."""
        if self.check is False:
            return None
        if self.check is True:
            return float(np.finfo(dtype).eps ** (2.0 / 3.0))
        return float(self.check)


_DEFAULT_OPTIONS = DirectSolverOptions()


def _library_defaults(o: DirectSolverOptions) -> bool:
    """The options leave pivoting, ordering and precision to the library, on one device: a dense
    LU (partial pivoting, no ordering) honours them as SuperLU and cuDSS would."""
    return (
        o.pivoting == "auto"
        and o.pivot_threshold is None
        and o.pivot_epsilon is None
        and o.reordering == "default"
        and not o.hybrid_memory
        and (o.devices is None or len(o.devices) == 1)
        and o.precision == "double"
    )
