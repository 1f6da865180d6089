"""Sparse direct solvers: :func:`solve` and :class:`DirectSolver`.

GPU route: cuDSS (``ust.backends.cuda.cudss``) on CSR arrays in device memory.  CPU route:
SciPy's SuperLU (``ust.backends.cpu.superlu``) with an ordering chosen for the matrix.  A
one-shot :func:`solve` of a small system takes the ``dense-lu`` route instead (LAPACK or
cuSOLVER ``getrf`` on the densified matrix, ``ust.backends.dense_lu``): nothing is kept for a
later call, and at that size a sparse analysis costs more than the dense flops.  All of them
sit behind the same phases -- ``plan()`` (analysis: reordering, symbolic factorisation),
``factorize()``, ``refactorize()`` (same pattern, new values), ``solve()`` -- so a loop that
changes values or right-hand sides pays only for what changed.

Where it runs: ``execution="cpu" | "cuda" | "cuda:N"`` decides when given.  Otherwise CuPy /
torch-CUDA operands run on their GPU, and NumPy / SciPy operands run on the CPU, as everywhere
in ust (pass ``execution="cuda"`` to move them to cuDSS); the log says which and why.  The solution comes back in the package, memory space and shape of
``b``.

Every solution is checked (``options.check``, see :func:`solution_error` in
:mod:`ust.api.solve_checks`): the normwise
backward error ``max_j ||b_j - A x_j||_inf / (||A||_inf ||x_j||_inf + ||b_j||_inf)`` must stay
under a tolerance scaled to the dtype, and a factorisation with small pivots (perturbed by
cuDSS, ``CUDSS_DATA_NPIVOTS``; at most ``1e-13 ||A||_inf`` in SuperLU's ``U`` for float64)
must give a relative residual ``max_j ||b_j - A x_j||_inf / ||b_j||_inf`` under it too, after
up to :data:`SMALL_PIVOT_REFINEMENT_STEPS` steps of iterative refinement.  Otherwise a
singular matrix could come back as a huge ``x`` that passes the backward-error test only
because ``||x||`` is huge.  Both devices apply the same rule, so an input gets the same
outcome on the CPU and the GPU: a solution within tolerance, ``SingularMatrixError`` or
``SolverAccuracyError``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ust.api.solve_checks import _norm_inf, backward_error, relative_residual, solution_error
from ust.api.solve_options import (
    DirectSolverOptions,
    _library_defaults,
    _one_of,
)
from ust.plan.planner import choose
from ust.plan.routes import route as register_route
from ust.plan.routes import route_of
from ust.plan.rules import Problem
from ust.runtime.errors import (
    InvalidStateError,
    InvalidValueError,
    ShapeError,
    SingularMatrixError,
    SolverAccuracyError,
    UnsupportedError,
)
from ust.runtime.log import get_logger
from ust.runtime.placement import Placement
from ust.runtime.spaces import (
    ExecutionSpace,
    operand_package,
    operand_space,
    parse_execution,
    resolve_space,
    to_package,
)
from ust.runtime.stateful import PlanFileError, StatefulOperation, decode_array, encode_array
from ust.runtime.xp import import_cupy, require_device

__all__ = [
    "DirectSolver",
    "DirectSolverOptions",
    "FactorizationInfo",
    "IterativeOptions",
    "IterativeResult",
    "IterativeSolver",
    "IterativeSolverWarning",
    "MixedPrecisionSolver",
    "PlanInfo",
    "backward_error",
    "bicgstab",
    "cg",
    "gmres",
    "minres",
    "relative_residual",
    "solution_error",
    "solve",
]

# the Krylov solvers live in their own module; ``ust.linalg.cg`` is where users look for them
from ust.api.iterative import (
    IterativeOptions,
    IterativeResult,
    IterativeSolver,
    IterativeSolverWarning,
    bicgstab,
    cg,
    gmres,
    minres,
)

_log = get_logger("linalg")

#: precision="mixed": the backward error the refinement must reach, its GMRES restart length and
#: the restart cycles it may take (each step costs one SpMV and one low-precision solve)
MIXED_TARGET_BACKWARD_ERROR = 1e-14
MIXED_RESTART = 20
MIXED_MAX_CYCLES = 5
SOLVE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))
#: Refinement steps tried, at most, when a factorisation with small pivots leaves a relative
#: residual above the tolerance (they stop early once the residual stops halving).
SMALL_PIVOT_REFINEMENT_STEPS = 10


def _host_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class PlanInfo:
    """What the analysis found: backend, ordering, permutations, memory estimates (cuDSS)."""

    backend: str
    ordering: str
    seconds: float
    n: int
    nnz: int
    from_saved_plan: bool = False
    row_permutation: np.ndarray | None = field(default=None, repr=False)
    col_permutation: np.ndarray | None = field(default=None, repr=False)
    memory_estimates: dict[str, int] | None = None


@dataclass(frozen=True)
class FactorizationInfo:
    """What a factorisation reported: fill, pivots, inertia where defined, the library's info code.

    ``small_pivots``: pivots cuDSS perturbed to its pivot epsilon (``CUDSS_DATA_NPIVOTS``), or,
    for SuperLU, pivots ``|U_ii| <= eps ||A||_inf`` (eps from
    ``ust.backends.cpu.superlu.SMALL_PIVOT``); None where the library does not say.
    """

    phase: str
    seconds: float
    lu_nnz: int | None
    fill: float | None
    npivots: int | None = None
    inertia: tuple[int, int] | None = None
    info: int = 0
    small_pivots: int | None = None


# ------------------------------------------------------------------------------------- operands


def _np_dtype(x: Any) -> np.dtype:
    dt = x.dtype
    if operand_package(x) == "torch":
        try:
            return np.dtype(str(dt).removeprefix("torch."))
        except TypeError:
            raise UnsupportedError(
                f"dtype {dt} is not supported; supported: {', '.join(d.name for d in SOLVE_DTYPES)}"
            ) from None
    return np.dtype(dt)


def _refuse_bool(dtype: np.dtype, what: str) -> None:
    """ust refuses bool values everywhere: the UnsupportedError of ``ust.asarray``, word for word."""
    if dtype.kind == "b":
        from ust.tensor.validate import check_value_dtype

        check_value_dtype(dtype, what)
        raise UnsupportedError(f"{what} of dtype bool are not supported")  # in case the table allows it


def _solve_dtype(a_dtype: np.dtype, b_dtype: np.dtype) -> np.dtype:
    """The dtype the solve runs in: NumPy's promotion, integers to float64, float16 to float32 (bool: refused)."""
    _refuse_bool(a_dtype, "values")
    _refuse_bool(b_dtype, "b values")
    common = np.result_type(a_dtype, b_dtype)
    if common.kind in "iu":
        _log.info("integer operands (%s, %s) are solved in float64", a_dtype, b_dtype)
        return np.dtype(np.float64)
    if common == np.float16:
        _log.info("float16 operands are solved in float32")
        return np.dtype(np.float32)
    if common not in SOLVE_DTYPES:
        raise UnsupportedError(
            f"dtype {common} (from {a_dtype} and {b_dtype}) is not supported; "
            f"supported: {', '.join(d.name for d in SOLVE_DTYPES)} (integers are converted to float64)"
        )
    return common


def _sparse_shape(a: Any) -> tuple[int, ...]:
    pkg = operand_package(a)
    if pkg in ("numpy", "cupy") or (pkg == "torch" and str(a.layout) == "torch.strided"):
        raise UnsupportedError(
            f"the matrix must be sparse, not a dense {pkg} array; supported: SciPy sparse, cupyx sparse, "
            "torch sparse (CSR/COO) or a ust Tensor (scipy.sparse.csr_array(a) converts a dense array)"
        )
    if pkg == "scipy":
        import scipy.sparse as sp

        if not sp.issparse(a):
            raise UnsupportedError(f"{type(a).__name__} is not a SciPy sparse matrix or array")
    return tuple(int(s) for s in a.shape)


def _format_name(a: Any) -> str:
    """A's storage as ``explain`` names it: a ust Tensor's standard name (``custom`` for others),
    SciPy's / cupyx's format in capitals (``COO``), torch's layout (``sparse_csr``)."""
    fmt = getattr(a, "format", None)
    if isinstance(fmt, str):
        return fmt.upper()
    if fmt is not None:
        return str(getattr(fmt, "standard_name", None) or "custom")
    layout = getattr(a, "layout", None)
    return str(layout).replace("torch.", "") if layout is not None else type(a).__name__


#: SciPy formats whose buffers ust's intake checks (lil and dok hold none a kernel could misread)
_CHECKED_SCIPY = frozenset({"csr", "csc", "coo", "bsr", "dia"})


def _to_scipy_csr(a: Any) -> Any:
    """``a`` as a SciPy CSR matrix in host memory (shares arrays when it already is one).

    SciPy's own conversion for SciPy input; everything else (cupyx, torch, ust Tensors) goes
    through :func:`ust.convert.asarray`, which shares the buffers that map 1:1."""
    import scipy.sparse as sp

    from ust.convert import asarray
    from ust.tensor import Tensor

    if operand_package(a) == "scipy":
        if a.format in _CHECKED_SCIPY:  # ust's checks, before SciPy's conversion reads the indices
            from ust.convert.scipy import check_scipy, compressed_array

            check_scipy(a)
            if a.format == "csr" and a.ndim == 2 and a.has_canonical_format:
                # checked just now: the same buffers without a second check by SciPy's constructor
                m = compressed_array(sp.csr_matrix, a.data, a.indices, a.indptr, a.shape)
                m.has_canonical_format = True
                return m
        return sp.csr_matrix(a)
    if not isinstance(a, Tensor) and hasattr(a, "to_scipy"):  # a Tensor-like of another ust object
        return sp.csr_matrix(a.to_scipy())
    return sp.csr_matrix(asarray(a, "CSR", device="cpu").to_scipy())


def _to_cupyx_csr(a: Any, device_id: int, dtype: np.dtype) -> Any:
    """``a`` as a cupyx CSR matrix of ``dtype`` on ``device_id`` (shares arrays when it already is one).

    Values are cast before cupyx sees them (it holds only float / complex / bool values), on the
    host when the matrix comes from the host (:func:`ust.convert.asarray` casts before it moves).
    """
    from ust.convert import asarray
    from ust.tensor import Tensor

    pkg = operand_package(a)
    on_host = pkg == "scipy" or (pkg == "ust" and not isinstance(a, Tensor))  # a Tensor-like: to_scipy
    from ust.convert.cupyx import to_cupyx

    src = _to_scipy_csr(a) if on_host else a  # SciPy's conversion, on the host
    with import_cupy().cuda.Device(device_id):
        # a checked cupyx csr of the caller comes back as it is (read, never written)
        return to_cupyx(asarray(src, "CSR", dtype=dtype, device=f"cuda:{device_id}"), reuse_source=True)


@dataclass
class _Csr:
    """A canonical CSR matrix in the execution space (``xp`` is numpy or cupy)."""

    indptr: Any
    indices: Any
    data: Any
    n: int
    xp: Any
    #: a SciPy / cupyx CSR holding exactly these arrays, where there is one (the full matrix then)
    matrix: Any = None

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def _canonical(m: Any, dtype: np.dtype, space: ExecutionSpace) -> _Csr:
    """Sorted, duplicate-free arrays of the right dtypes; copies instead of touching the caller's."""
    if not m.has_canonical_format:
        m = m.copy()
        m.sum_duplicates()
    data = m.data if m.data.dtype == dtype else m.data.astype(dtype)
    if space.is_cuda:
        xp = import_cupy()
        # cuDSS: int32 column indices; row offsets int32 unless nnz needs int64.
        off = np.int32 if m.indices.size < 2**31 - 1 else np.int64
        c = _Csr(
            m.indptr.astype(off, copy=False), m.indices.astype(np.int32, copy=False), data, m.shape[0], xp
        )
        if c.indptr is m.indptr and c.indices is m.indices and c.data is m.data:
            c.matrix = m
        return c
    c = _Csr(m.indptr, m.indices, data, m.shape[0], np)
    if data is m.data:  # the full matrix is ``m`` itself: no second SciPy object around the arrays
        c.matrix = m
    return c


def _row_ids(c: _Csr) -> Any:
    xp = c.xp
    return xp.searchsorted(c.indptr, xp.arange(c.nnz, dtype=c.indptr.dtype), side="right") - 1


def _sparse_module(xp: Any) -> Any:
    if xp is np:
        import scipy.sparse as sp

        return sp
    return import_cupy("cupyx.scipy.sparse")


def _full_matrix(c: _Csr, view: str, hermitian: bool) -> Any:
    """The whole matrix as a SciPy / cupyx CSR: the stored one, or a triangle mirrored across the diagonal."""
    sparse = _sparse_module(c.xp)
    if view == "full":
        if c.matrix is not None:
            return c.matrix
        if c.xp is np:  # buffers the intake has checked: no second check by SciPy's constructor
            from ust.convert.scipy import compressed_array

            return compressed_array(sparse.csr_matrix, c.data, c.indices, c.indptr, (c.n, c.n))
        return sparse.csr_matrix((c.data, c.indices, c.indptr), shape=(c.n, c.n))
    xp = c.xp
    rows = _row_ids(c)
    cols = c.indices.astype(rows.dtype)
    keep = cols <= rows if view == "lower" else cols >= rows
    strict = keep & (cols != rows)
    mirrored = c.data[strict].conj() if hermitian else c.data[strict]
    idx = c.indices.dtype  # the matrix's own index width (int32 for cuDSS and cupyx)
    r = xp.concatenate([rows[keep], cols[strict]]).astype(idx, copy=False)
    k = xp.concatenate([cols[keep], rows[strict]]).astype(idx, copy=False)
    v = xp.concatenate([c.data[keep], mirrored])
    return sparse.coo_matrix((v, (r, k)), shape=(c.n, c.n)).tocsr()


def _line_counts(full: Any, xp: Any) -> tuple[Any, Any]:
    """Nonzero values in each row and in each column of ``full``."""
    nz = full.data != 0
    indptr, indices = full.indptr, full.indices
    if xp is np and int(np.count_nonzero(nz)) == nz.size:  # no stored zeros: the row pointer says it
        rows = indptr[1:] - indptr[:-1]
    else:
        counts = xp.concatenate([xp.zeros(1, dtype=np.int64), xp.cumsum(nz, dtype=np.int64)])
        rows = counts[indptr[1:]] - counts[indptr[:-1]]
        indices = indices[nz]
    return rows, xp.bincount(indices, minlength=full.shape[0])


def _check_nonsingular_structure(full: Any, xp: Any) -> None:
    """SingularMatrixError naming the first empty row / column, before any factorisation; the
    lines are looked for only where a count is 0 (the usual case is two counts)."""
    rows, cols = _line_counts(full, xp)
    for what, counts in (("row", rows), ("column", cols)):
        if int(xp.count_nonzero(counts)) == counts.size:
            continue
        lines = xp.flatnonzero(counts == 0)
        first = int(lines[0])
        more = f" ({int(lines.size)} such {what}s in all)" if int(lines.size) > 1 else ""
        raise SingularMatrixError(
            f"the matrix is singular: {what} {first} has no nonzero entry{more}",
            row=first if what == "row" else None,
        )


def _structural_diagnosis(full: Any) -> str:
    """A clause on the structural rank, for singular-matrix messages (host only, small enough matrices)."""
    if operand_package(full) == "cupyx":
        if full.nnz > 20_000_000:
            return ""
        full = full.get()
    from scipy.sparse.csgraph import structural_rank

    r = int(structural_rank(full.tocsr()))
    n = full.shape[0]
    if r < n:
        return f"; it is structurally singular (structural rank {r} < {n})"
    return "; its structure allows a nonsingular matrix, so it is numerically singular"


def _dense_rhs(b: Any, n: int) -> tuple[str, ExecutionSpace, tuple[int, ...], np.dtype]:
    """Package, space, shape and dtype of a right-hand side, checked against ``n``."""
    pkg = operand_package(b)
    if pkg not in ("numpy", "cupy", "torch"):
        raise UnsupportedError(f"b must be a NumPy, CuPy or torch array, not {type(b).__name__}")
    if pkg == "numpy":
        b = np.asarray(b)
    if pkg == "torch" and str(b.layout) != "torch.strided":
        raise UnsupportedError("b must be a dense torch tensor, not a sparse one")
    shape = tuple(int(s) for s in b.shape)
    if len(shape) not in (1, 2) or shape[0] != n or (len(shape) == 2 and shape[1] == 0):
        raise ShapeError(
            f"b has shape {shape}; for a {n} x {n} matrix it must be ({n},) or ({n}, k) with k >= 1 right-hand sides"
        )
    return pkg, operand_space(b), shape, _np_dtype(b)


def _rhs_in_space(b: Any, place: Placement, dtype: np.dtype) -> Any:
    """A 2-D column-major copy of ``b`` in the execution space with ``dtype`` (the caller's array
    is never used)."""
    arr = place.move(np.asarray(b) if operand_package(b) == "numpy" else b, _log, "b")
    shape2 = (arr.shape[0], arr.shape[1] if arr.ndim == 2 else 1)  # not reshape(n, -1): n may be 0
    if place.space.is_cuda:
        cupy = import_cupy()
        with cupy.cuda.Device(place.device_id):
            return cupy.array(arr.reshape(shape2), dtype=dtype, order="F", copy=True)
    return np.array(arr.reshape(shape2), dtype=dtype, order="F", copy=True)


def _placement(a: Any, b: Any, execution: Any) -> tuple[Placement, str]:
    """The one placement (:mod:`ust.runtime.placement`; x comes back in b's package and memory)
    and why it runs there -- see the module docstring."""
    place = Placement({"a": a, "b": b}, execution, home="b")
    if execution is not None:
        return place, f"execution={execution!r}"
    if place.space.is_cuda:
        return place, "the operands are in GPU memory"
    return place, "the operands are in CPU memory (pass execution='cuda' to solve with cuDSS)"


def _default_space(a: Any, b: Any, execution: Any) -> tuple[ExecutionSpace, ExecutionSpace, str]:
    """(operands' space, execution space, why) -- see the module docstring."""
    place, why = _placement(a, b, execution)
    return place.home, place.space, why


def _cudss_config(o: DirectSolverOptions, device_id: int) -> dict[str, Any]:
    """cuDSS configuration values for the options (names of ust.backends.cuda.cudss's table)."""
    from ust.backends.cuda import cudss

    lib = cudss.get_library()
    cudss.get_handle(device_id)  # creating the handle settles whether the threading layer loads
    _one_of("reordering (cuDSS)", o.reordering, tuple(cudss.REORDERING))
    config: dict[str, Any] = {"reordering_alg": cudss.REORDERING[o.reordering]}
    if o.pivoting != "auto":
        config["pivot_type"] = cudss.PIVOT[o.pivoting]
    if o.pivot_threshold is not None:
        config["pivot_threshold"] = float(o.pivot_threshold)
    if o.pivot_epsilon is not None:
        config["pivot_epsilon"] = float(o.pivot_epsilon)
    if o.refinement_steps:
        config["ir_n_steps"] = int(o.refinement_steps)
    if lib.threading_layer:
        config["host_nthreads"] = int(o.host_threads or _host_threads())
    if o.hybrid_memory:
        config["hybrid_memory_mode"] = 1
        if o.hybrid_device_memory_limit is not None:
            config["hybrid_device_memory_limit"] = int(o.hybrid_device_memory_limit)
    return config


def solve_problem(
    space: ExecutionSpace, dtype: Any, n: int, options: DirectSolverOptions, one_shot: bool
) -> Problem:
    """The planner's view of a direct solve: the device, the value dtype, n (any format: A is
    CSR), whether the options are the libraries' defaults and whether it is a one-shot call."""
    return Problem(
        op="solve",
        device=space.kind,
        format_class="CSR",
        format_params=(),
        canonical=True,
        dtype=np.dtype(dtype).name,
        index_dtype="int32",
        plain=_library_defaults(options),
        max_extent=int(n),
        one_shot=one_shot,
    )


def _require_cudss(solver: DirectSolver) -> bool:
    """The cuDSS route is available: CuPy, a usable GPU (each listed device) and libcudss, or the
    error that names the fix."""
    from ust.backends.cuda.cudss import get_library

    cupy = require_device(solver.space.device_id)
    if solver.options.devices is not None:
        from ust.api.linalg_distributed import parse_devices

        parse_devices(solver.options.devices, cupy.cuda.runtime.getDeviceCount())
    get_library()
    return True


def _diagnosis(solver: DirectSolver) -> Any:
    return lambda: _structural_diagnosis(solver._full_matrix())


@register_route("solve", "cudss", available=_require_cudss)
def _cudss_engine(solver: DirectSolver, pivot_epsilon: float | None = None) -> Any:
    """cuDSS behind the engine protocol (MG mode over two or more GPUs)."""
    from ust.backends.cuda.cudss import get_library
    from ust.backends.cuda.cudss_engine import CudssEngine

    o, space = solver.options, solver.space
    config = _cudss_config(o, space.device_id or 0)
    if pivot_epsilon is not None:
        config["pivot_epsilon"] = float(pivot_epsilon)
    c = solver._csr
    mg = solver._mg_devices()
    engine = CudssEngine(
        c.indptr,
        c.indices,
        c.data,
        c.n,
        solver._b,
        matrix_type=o.matrix_type,
        matrix_view=o.matrix_view,
        reordering=o.reordering,
        config=config,
        device_id=space.device_id or 0,
        stream=solver._stream,
        devices=mg,
        diagnose=_diagnosis(solver),
    )
    if mg:
        _log.info("route: cuDSS MG mode over GPUs %s, matrix and right-hand sides on GPU %d", list(mg), mg[0])
    _log.info(
        "route: cuDSS %s (matrix_type %s, view %s, reordering %s, %s host threads)",
        get_library().version_text,
        o.matrix_type,
        o.matrix_view,
        o.reordering,
        config.get("host_nthreads", "1 (no threading layer)"),
    )
    return engine


@register_route("solve", "superlu")
def _superlu_engine(solver: DirectSolver, pivot_epsilon: float | None = None) -> Any:
    """SciPy's SuperLU behind the engine protocol, with an ordering chosen for the matrix."""
    from ust.backends.cpu.superlu_engine import SuperLUEngine

    o = solver.options
    for name in ("pivot_epsilon", "hybrid_device_memory_limit"):
        if getattr(o, name) is not None:
            _log.info("option %s applies to cuDSS only; SuperLU ignores it", name)
    engine = SuperLUEngine(
        solver._full_matrix(),
        matrix_type=o.matrix_type,
        reordering=o.reordering,
        pivoting=o.pivoting,
        pivot_threshold=o.pivot_threshold,
        diagnose=_diagnosis(solver),
        norm=solver._norm,
    )
    _log.info(
        "route: SuperLU (SciPy %s), ordering %s because %s",
        engine.version,
        engine.ordering_spec,
        engine.ordering_reason,
    )
    return engine


def _require_dense_lu(solver: DirectSolver) -> bool:
    """The dense LU route needs CuPy and a usable GPU on a GPU, nothing beyond SciPy on the CPU."""
    if solver.space.is_cuda:
        require_device(solver.space.device_id)
    return True


@register_route("solve", "dense-lu", available=_require_dense_lu)
def _dense_lu_engine(solver: DirectSolver, pivot_epsilon: float | None = None) -> Any:
    """A dense LU with partial pivoting (LAPACK on the CPU, cuSOLVER on a GPU) of the full matrix."""
    from ust.backends.dense_lu import DenseLUEngine

    o, space = solver.options, solver.space
    lapack: Any
    if space.is_cuda:
        from ust.backends.cuda.dense_lu import DeviceLapack

        lapack = DeviceLapack(space.device_id or 0, solver._stream)
    else:
        from ust.backends.cpu.dense_lu import HostLapack

        lapack = HostLapack()
    engine = DenseLUEngine(
        solver._full_matrix(),
        lapack=lapack,
        symmetric=o.matrix_type != "general",
        norm=solver._norm,
        diagnose=_diagnosis(solver),
    )
    _log.info("route: dense LU (%s), %d x %d, partial pivoting", lapack.version, solver.n, solver.n)
    return engine


def _device(space: ExecutionSpace) -> Any:
    """``with`` the CUDA device of ``space`` current (nothing for the CPU)."""
    if not space.is_cuda:
        import contextlib

        return contextlib.nullcontext()
    return import_cupy().cuda.Device(space.device_id or 0)


class _EmptySystem:
    """The engine of a 0 x 0 system: nothing to analyse, factorise or solve."""

    perm = np.zeros(0, dtype=np.int64)

    refines_in_solve = True
    perturbs_pivots = False

    def set_values(self, data: Any, full_matrix: Any = None) -> None:
        """A 0 x 0 matrix has no values to replace."""

    def bind_rhs(self, rhs: Any) -> None:
        """Nothing solves."""

    def sync(self) -> None:
        """Nothing runs."""

    def free(self) -> None:
        """Nothing to release."""


def _pattern_digest(c: _Csr) -> str:
    h = hashlib.sha256()
    for arr in (c.indptr, c.indices):
        host = arr.get() if c.xp is not np else arr
        h.update(np.ascontiguousarray(host, dtype=np.int64).tobytes())
    return h.hexdigest()


def _plan_int(value: Any, key: str, where: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanFileError(f"{where} is damaged: {key!r} must be a non-negative integer, not {value!r}")
    return value


def _plan_array(value: Any, key: str, where: str) -> np.ndarray | None:
    """A saved integer array (see encode_array), decoded and checked, or None."""
    if value is None:
        return None
    bad = f"{where} is damaged: {key!r}"
    if not isinstance(value, Mapping) or not {"dtype", "shape", "base64"} <= set(value):
        raise PlanFileError(f"{bad} is not a saved array (dtype, shape, base64)")
    shape, dt = value["shape"], value["dtype"]
    if (
        not isinstance(shape, list)
        or len(shape) != 1
        or isinstance(shape[0], bool)
        or not isinstance(shape[0], int)
        or shape[0] < 0
    ):
        raise PlanFileError(f"{bad} must be one-dimensional; its shape is {shape!r}")
    try:
        dtype = np.dtype(dt) if isinstance(dt, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "iu" or dtype.itemsize > 8:
        raise PlanFileError(f"{bad} must hold integers; its dtype is {dt!r}")
    if not isinstance(value["base64"], str):
        raise PlanFileError(f"{bad}: its data is not base64 text")
    try:
        arr = decode_array(dict(value))
    except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
        raise PlanFileError(f"{bad} cannot be decoded ({exc})") from None
    return arr.astype(np.int64)


def _validated_plan(plan: Any, n: int, where: str) -> tuple[np.ndarray | None, np.ndarray | None, int | None]:
    """(permutation, partition tree, lu_nnz) of a saved solver plan, every field checked.

    The permutation must permute ``range(n)`` for the matrix at hand (whatever the plan's own
    ``n`` says); the tree has ``2**levels - 1`` int32 entries.  PlanFileError otherwise.
    """
    perm, tree, lu_nnz = _typed_plan(plan, where)
    perm, tree = _fitted_arrays(perm, tree, n, where)
    return perm, tree, lu_nnz


def _typed_plan(plan: Any, where: str) -> tuple[np.ndarray | None, np.ndarray | None, int | None]:
    """The fields of a saved solver plan checked for type, its arrays decoded (PlanFileError otherwise)."""
    if not isinstance(plan, Mapping):
        raise PlanFileError(f"{where} is damaged: its plan is a {type(plan).__name__}, not a mapping")
    for key in ("backend", "pattern_sha256", "matrix_type", "matrix_view"):
        if not isinstance(plan.get(key), str):
            raise PlanFileError(f"{where} is damaged: {key!r} must be a string, not {plan.get(key)!r}")
    _plan_int(plan.get("n"), "n", where)
    _plan_int(plan.get("nnz"), "nnz", where)
    lu_nnz = _plan_int(plan.get("lu_nnz"), "lu_nnz", where, optional=True)
    perm = _plan_array(plan.get("permutation"), "permutation", where)
    tree = _plan_array(plan.get("nd_partition_tree"), "nd_partition_tree", where)
    return perm, tree, lu_nnz


def _fitted_arrays(
    perm: np.ndarray | None, tree: np.ndarray | None, n: int, where: str
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The saved permutation and partition tree checked against the ``n x n`` matrix at hand."""
    from ust.backends.cpu.superlu import check_permutation

    if perm is not None:
        try:
            perm = check_permutation(perm, n, f"the saved permutation (for this {n} x {n} matrix)")
        except ShapeError as exc:
            raise PlanFileError(f"{where} is damaged: {exc}") from None
    if tree is not None:
        size = int(tree.shape[0])
        if size < 1 or size & (size + 1):
            raise PlanFileError(f"{where} is damaged: a partition tree has 2**levels - 1 entries, not {size}")
        if int(tree.min()) < -(2**31) or int(tree.max()) >= 2**31:
            raise PlanFileError(f"{where} is damaged: the partition tree holds values beyond int32")
        tree = tree.astype(np.int32)
    return perm, tree


# ------------------------------------------------------------------------------------- the solver


class DirectSolver(StatefulOperation):
    """Solve ``A X = B`` for a square sparse ``A``, reusing the analysis and factorisation.

    ``a``: SciPy sparse (any format), cupyx sparse, torch sparse (CSR/COO) or a ust Tensor
    (anything with ``to_scipy()``); converted to CSR.  ``b``: a vector ``(n,)`` or matrix
    ``(n, k)`` of NumPy, CuPy or torch.  ``options``: :class:`DirectSolverOptions` or a dict.
    ``execution``: None, "cpu", "cuda", "cuda:N".  ``stream`` (GPU): a CuPy/torch stream or a
    ``cudaStream_t``; default the current CuPy stream.

    Phases: ``plan()`` -> ``factorize()`` -> ``solve()`` (repeat), ``refactorize()`` after
    ``reset_operands(a=...)`` with new values; ``execute()`` runs whatever is missing and solves.
    The operands are read, never written.
    """

    kind: ClassVar[str] = "direct_solver"
    #: A one-shot solve (:func:`solve`): nothing is kept for later calls, so a small system may
    #: take the dense LU route.
    one_shot: ClassVar[bool] = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``options={"precision": "mixed"}`` makes the mixed-precision solver (a subclass)."""
        if cls is DirectSolver and DirectSolverOptions.coerce(kwargs.get("options")).precision == "mixed":
            return super().__new__(MixedPrecisionSolver)
        return super().__new__(cls)

    def __init__(
        self, a: Any, b: Any, *, options: Any = None, execution: Any = None, stream: Any = None
    ) -> None:
        super().__init__()
        self.options = DirectSolverOptions.coerce(options)
        if self.options.devices is not None:
            from ust.api.linalg_distributed import devices_execution

            execution = devices_execution(self.options.devices, execution)
        parse_execution(execution)  # bad values fail here, before anything else
        # --- checks that need no data movement
        shape = _sparse_shape(a)
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ShapeError(f"the matrix must be square (n x n); got shape {shape}")
        self.n = shape[0]
        _, _, b_shape, b_dtype = _dense_rhs(b, self.n)
        self.dtype = _solve_dtype(_np_dtype(a), b_dtype)
        self._b_shape = b_shape
        self._place, why = _placement(a, b, execution)
        self.space = self._place.space
        self._place.log(_log)
        _log.info("direct solve on %s because %s", self.space.describe(), why)
        #: the planner's choice (the "solve" rules): the engine's route and why
        problem = solve_problem(self.space, self.dtype, self.n, self.options, self.one_shot)
        self.decision = choose(problem, self.options.route)
        route_of(self.decision.rule).available(self)  # a missing CuPy / GPU / cuDSS is reported now
        # --- operands into the execution space
        self._csr = self._load_matrix(a) if self.n else self._empty_matrix()
        self._full: Any = None
        self._norm_a: float | None = None
        if self.n and self.space.is_cuda:
            self._screen_on_device()
        else:
            self._validate_values(self._csr, "the matrix")
            if self.n:
                self._check_structure()
        self._b = _rhs_in_space(b, self._place, self.dtype)
        self._validate_values(self._b, "b")
        self._stream = self._stream_pointer(stream)
        self._engine: Any = self._make_engine()
        self._user_perm: np.ndarray | None = None
        self._user_tree: np.ndarray | None = None  # cuDSS's ND partition tree, saved with the permutation
        self._nd_tree: np.ndarray | None = None
        self._saved_lu_nnz: int | None = None
        self._perturbed_engine: Any = None  # the first cuDSS engine while a retry engine solves
        self._retry_refused = False  # cuDSS refused to factorise without perturbation
        self._stale = False
        self.plan_info: PlanInfo | None = None
        self.factorization_info: FactorizationInfo | None = None
        self.timings: dict[str, float] = {}
        self.backward_error: float | None = None

    # ------------------------------------------------------------------ setup helpers

    @property
    def backend(self) -> str:
        """The engine's backend: the route the planner chose (``"superlu"``, ``"cudss"``)."""
        return self.decision.route

    def _load_matrix(self, a: Any) -> _Csr:
        t0 = time.perf_counter()
        src = operand_space(a)
        m = (
            _to_cupyx_csr(a, self.space.device_id or 0, self.dtype)
            if self.space.is_cuda
            else _to_scipy_csr(a)
        )
        c = _canonical(m, self.dtype, self.space)
        fmt = _format_name(a)
        if fmt != "CSR":  # the one conversion of a solve: logged as explain() names it
            _log.info("converted A (%s) to CSR in %.3f ms", fmt, 1e3 * (time.perf_counter() - t0))
        if src != self.space:
            nbytes = sum(int(x.nbytes) for x in (c.indptr, c.indices, c.data))
            _log.info(
                "moved the matrix (%d bytes) to %s in %.3f ms",
                nbytes,
                self.space,
                1e3 * (time.perf_counter() - t0),
            )
        return c

    def _empty_matrix(self) -> _Csr:
        """The 0 x 0 matrix in the execution space (no sparse library is asked to build one)."""
        xp: Any = import_cupy() if self.space.is_cuda else np
        with _device(self.space):
            return _Csr(xp.zeros(1, np.int32), xp.zeros(0, np.int32), xp.zeros(0, self.dtype), 0, xp)

    def _validate_values(self, c: Any, what: str) -> None:
        data = c.data if isinstance(c, _Csr) else c
        xp = np if isinstance(data, np.ndarray) else import_cupy()
        if data.size and not bool(xp.isfinite(data).all()):
            bad = int(xp.count_nonzero(~xp.isfinite(data)))
            raise InvalidValueError(
                f"{what} contains {bad} NaN or Inf value(s); a direct solve needs finite values"
            )

    def _screen_on_device(self) -> None:
        """Values, empty lines and ``||A||_inf`` in one device pass; the host-side checks run only
        to name what the pass found wrong (or, for a one-triangle view, the values it skips)."""
        from ust.backends.cuda.screen import matrix_screen

        full = self._full_matrix()
        bad, empty_rows, empty_cols, norm = matrix_screen(full.indptr, full.indices, full.data, self.n)
        if bad or self.options.matrix_view != "full":
            self._validate_values(self._csr, "the matrix")
        if empty_rows or empty_cols:
            self._check_structure()
        if norm == norm:
            self._norm_a = norm

    def _full_matrix(self) -> Any:
        if self._full is None:
            hermitian = self.options.matrix_type in ("hermitian", "hpd")
            self._full = _full_matrix(self._csr, self.options.matrix_view, hermitian)
        return self._full

    def _norm(self) -> float:
        """``||A||_inf``, computed once per matrix values (the solution check and SuperLU's
        small-pivot count both read it)."""
        if self._norm_a is None:
            self._norm_a = _norm_inf(self._full_matrix(), self._csr.xp)
        return self._norm_a

    def _check_structure(self) -> None:
        _check_nonsingular_structure(self._full_matrix(), self._csr.xp)

    def _stream_pointer(self, stream: Any) -> int:
        return self._place.stream(stream)

    def _make_engine(self, pivot_epsilon: float | None = None) -> Any:
        """The engine of the planned route (``pivot_epsilon``: a cuDSS engine with that pivot epsilon)."""
        if self.n == 0:  # nothing for a library to do: no cuDSS / SuperLU call at all
            _log.info("route: none (a 0 x 0 system: x is empty)")
            return _EmptySystem()
        return route_of(self.decision.rule).build(self, pivot_epsilon)

    def _mg_devices(self) -> tuple[int, ...] | None:
        """The device list when cuDSS's MG mode runs (two or more GPUs), else None."""
        devs = self.options.devices
        return devs if self.space.is_cuda and devs is not None and len(devs) > 1 else None

    def _sync(self) -> None:
        self._engine.sync()

    def _timed(self, phase: str, fn: Any) -> tuple[Any, float]:
        t0 = time.perf_counter()
        out = fn()
        self._sync()
        secs = time.perf_counter() - t0
        self.timings[phase] = secs
        _log.info("%s %s took %.3f ms", self.backend, phase, 1e3 * secs)
        return out, secs

    # ------------------------------------------------------------------ phases

    def _plan(self) -> PlanInfo:
        e = self._engine
        from_saved = self._user_perm is not None
        if self.n == 0:
            empty = np.zeros(0, dtype=np.int64)
            self.plan_info = PlanInfo(
                self.backend, "none (empty system)", 0.0, 0, 0, from_saved, empty, empty
            )
            return self.plan_info
        analysis, secs = self._timed("analysis", lambda: e.analyse(self._user_perm, self._user_tree))
        row, col, estimates, ordering = (
            analysis.row_permutation,
            analysis.col_permutation,
            analysis.estimates,
            analysis.ordering,
        )
        self._nd_tree = analysis.nd_tree
        if self._mg_devices():
            self._log_spread(estimates)
        self.plan_info = PlanInfo(
            self.backend, ordering, secs, self.n, self._csr.nnz, from_saved, row, col, estimates
        )
        return self.plan_info

    def _log_spread(self, estimates: dict[str, int] | None) -> None:
        """MG mode: say how the estimated device memory lands on the GPUs (WARNING when short)."""
        from ust.api.linalg_distributed import spread_report

        cupy = import_cupy()

        devs = self._mg_devices() or ()
        free = {}
        for d in devs:
            with cupy.cuda.Device(d):
                free[d] = int(cupy.cuda.runtime.memGetInfo()[0])
        report = spread_report(devs, estimates, free, self.options.hybrid_memory)
        (_log.info if report.fits else _log.warning)("%s", report.message)

    def _factor(self, phase: str) -> FactorizationInfo:
        self._restore_engine()
        e = self._engine
        if self.n == 0:
            facts: dict[str, Any] = {"lu_nnz": 0, "npivots": 0, "inertia": (0, 0), "small_pivots": 0}
            secs, info = 0.0, 0
        else:
            facts, secs = self._timed(phase, lambda: e.factorize(phase))
            info = 0
        lu = facts["lu_nnz"]
        if self._saved_lu_nnz and lu and abs(lu - self._saved_lu_nnz) > 0.01 * self._saved_lu_nnz:
            _log.warning(
                "the factor has %d nonzeros, the saved plan's had %d: the saved reordering may not fit",
                lu,
                self._saved_lu_nnz,
            )
        self.factorization_info = FactorizationInfo(
            phase,
            secs,
            lu,
            lu / max(self._csr.nnz, 1) if lu else None,
            facts["npivots"],
            facts["inertia"],
            info,
            facts.get("small_pivots"),
        )
        self._stale = False
        return self.factorization_info

    def factorize(self) -> FactorizationInfo:
        """Numerical factorisation (after :meth:`plan`); returns :class:`~ust.linalg.FactorizationInfo`."""
        self._require("factorize", "plan")
        out = self._factor("factorization")
        self._mark("factorize")
        return out

    def refactorize(self) -> FactorizationInfo:
        """Factorise new values of the same pattern (set by ``reset_operands(a=...)``), reusing the analysis."""
        self._require("refactorize", "plan")
        if "factorize" not in self._done and not self._stale:
            raise InvalidStateError("cannot refactorize before factorize(): call factorize() first")
        out = self._factor("refactorization")
        self._mark("factorize")
        return out

    def solve(self) -> Any:
        """The solution, in the package, memory space and shape of ``b`` (checked unless check=False)."""
        if self._stale and not self._freed:
            raise InvalidStateError(
                "the matrix values changed (reset_operands(a=...)); call refactorize() or factorize() before solve()"
            )
        self._require("solve", "plan", "factorize")
        e = self._engine
        if self.n == 0:
            x = self._csr.xp.zeros(self._b.shape, dtype=self.dtype, order="F")
        else:
            x, _ = self._timed("solve", lambda: self._refined(e.solve(self._b)))
        x, rel = self._refine_small_pivots(x)
        if self._should_retry_unperturbed(rel) and (retried := self._retry_unperturbed()) is not None:
            x, rel = self._refine_small_pivots(retried)
        self._check(x)
        return self._deliver(x)

    def _should_retry_unperturbed(self, rel: float) -> bool:
        """cuDSS perturbed pivots, refinement did not reach the tolerance, and the pivot epsilon is
        cuDSS's default: factorise again without perturbing, as SuperLU does, before judging."""
        o = self.options
        f = self.factorization_info
        tol = o.tolerance(self.dtype)
        return bool(
            self.n
            and self._engine.perturbs_pivots
            and self._perturbed_engine is None
            and not self._retry_refused
            and o.pivot_epsilon is None
            and o.pivoting != "none"
            and o.pivot_threshold != 0
            and f is not None
            and f.small_pivots
            and tol is not None
            and not rel <= tol
        )

    def _retry_unperturbed(self) -> Any | None:
        """Analyse and factorise again in a second cuDSS engine whose pivot epsilon is the dtype's
        smallest normal number (only exact zeros get perturbed), then solve with it.

        This is what makes a near-singular matrix that LU without perturbation solves (as SuperLU
        does) come out solved on the GPU too, and a singular one come out singular.  The second
        engine serves the solves of this factorisation; the next factorisation (or new matrix
        values) goes back to the first, with cuDSS's own pivot epsilon.
        """
        tiny = float(np.finfo(self.dtype).tiny)
        f = self.factorization_info
        _log.info(
            "cuDSS perturbed %s pivot(s) and refinement left a large residual: factorising again with "
            "pivot epsilon %.1e",
            f.small_pivots if f is not None else "some",
            tiny,
        )
        from ust.backends.cuda.cudss import CudssError

        retry: Any = None
        try:
            retry = self._make_engine(pivot_epsilon=tiny)
            self._timed("analysis", lambda: retry.run_phase("analysis"))
            self._timed("factorization", lambda: retry.run_phase("factorization"))
            info = retry.info()
        except CudssError as exc:  # this cuDSS refuses the setting: judge the perturbed factorisation
            _log.warning("cuDSS could not factorise without pivot perturbation (%s); checking as is", exc)
            if retry is not None:
                retry.free()
            self._retry_refused = True
            return None
        except BaseException:
            if retry is not None:
                retry.free()
            raise
        if info != 0:
            retry.free()
            raise SingularMatrixError(
                f"cuDSS factorization without pivot perturbation reports info = {info}: a zero pivot at "
                f"position {info} of the reordered matrix{_structural_diagnosis(self._full_matrix())}"
            )
        self._perturbed_engine, self._engine = self._engine, retry
        x, _ = self._timed("solve", lambda: retry.solve(self._b))
        return x

    def _restore_engine(self) -> None:
        """Back to the first cuDSS engine (before a new factorisation or new values)."""
        if getattr(self, "_perturbed_engine", None) is not None:
            retry, self._engine, self._perturbed_engine = self._engine, self._perturbed_engine, None
            retry.free()

    def _refined(self, x: Any) -> Any:
        """Iterative refinement where the engine does not refine inside its solve (SuperLU; cuDSS does)."""
        if self._engine.refines_in_solve:
            return x
        full = self._full_matrix()
        for _ in range(self.options.refinement_steps):
            x = x + self._engine.solve(self._b - full @ x)
        return x

    def _refine_small_pivots(self, x: Any) -> tuple[Any, float]:
        """After a factorisation with small pivots: refine while the relative residual is above the
        tolerance and keeps halving (at most SMALL_PIVOT_REFINEMENT_STEPS steps), on either device.

        A perturbed pivot of a nonsingular matrix is a small change that refinement undoes; for a
        singular one the residual stays put, and :func:`solution_error` names the matrix singular.
        """
        tol = self.options.tolerance(self.dtype)
        f = self.factorization_info
        if tol is None or self.n == 0 or f is None or not f.small_pivots:
            return x, 0.0
        full, xp = self._full_matrix(), self._csr.xp
        best = relative_residual(full, x, self._b, xp)
        steps = 0
        try:
            while steps < SMALL_PIVOT_REFINEMENT_STEPS and best == best and best > tol:
                dx = self._engine.correction(self._b - full @ x)
                candidate = x + dx
                now = relative_residual(full, candidate, self._b, xp)
                steps += 1
                if not now < best:
                    break
                x, halved, best = candidate, now <= 0.5 * best, now
                if not halved:
                    break
        finally:  # the engine points at b again for the next solve()
            self._engine.bind_rhs(self._b)
        _log.info(
            "%d small pivot(s): %d refinement step(s), relative residual %.3e (tolerance %.1e)",
            f.small_pivots,
            steps,
            best,
            tol,
        )
        return x, best

    def _check(self, x: Any) -> None:
        tol = self.options.tolerance(self.dtype)
        if tol is None:
            return
        if self.n == 0:  # the empty x solves the empty system exactly
            self.backward_error = 0.0
            return
        full = self._full_matrix()
        xp = self._csr.xp
        t0 = time.perf_counter()
        be = backward_error(full, x, self._b, xp, self._norm())
        f = self.factorization_info
        small = f.small_pivots if f is not None else None
        rel = relative_residual(full, x, self._b, xp) if small else 0.0
        self.backward_error = be
        _log.info(
            "backward error %.3e (tolerance %.1e), checked in %.3f ms",
            be,
            tol,
            1e3 * (time.perf_counter() - t0),
        )
        o = self.options
        error = solution_error(
            backend=self.backend,
            dtype=self.dtype,
            tolerance=tol,
            backward_error=be,
            relative_residual=rel,
            small_pivots=small,
            pivoting=not (o.pivoting == "none" or o.pivot_threshold == 0),
        )
        if error is not None:
            raise error

    def _deliver(self, x: Any) -> Any:
        out = x.reshape(self._b_shape) if len(self._b_shape) == 1 else x
        return self._place.back(out, _log, "x")

    def execute(self, **kwargs: Any) -> Any:
        """Run the phases not yet run (plan, factorize or refactorize) and solve."""
        self._require("execute")
        if "plan" not in self._done:
            self.plan()
        if self._stale:
            self.refactorize()
        elif "factorize" not in self._done:
            self.factorize()
        return self.solve()

    # ------------------------------------------------------------------ operands

    def _reset_operands(self, **operands: Any) -> None:
        unknown = sorted(set(operands) - {"a", "b"})
        if unknown:
            raise UnsupportedError(f"reset_operands takes a= and b=, not {', '.join(unknown)}")
        a, b = operands.get("a"), operands.get("b")
        if a is not None:
            self._restore_engine()
            shape = _sparse_shape(a)
            if shape != (self.n, self.n):
                raise ShapeError(
                    f"the new matrix has shape {shape}; this solver was planned for ({self.n}, {self.n})"
                )
            dt = _np_dtype(a)
            _refuse_bool(dt, "values")
            if np.result_type(dt, self.dtype) != self.dtype:
                raise UnsupportedError(f"the new matrix has dtype {dt}; this solver runs in {self.dtype}")
            new = self._load_matrix(a) if self.n else self._empty_matrix()
            xp = new.xp
            same = new.nnz == self._csr.nnz and bool(
                xp.array_equal(new.indptr, self._csr.indptr)
                and xp.array_equal(new.indices, self._csr.indices)
            )
            if not same:
                raise ShapeError(
                    "the new matrix has another sparsity pattern (nnz "
                    f"{new.nnz} vs {self._csr.nnz}); reset_operands keeps the analysis, so create a new DirectSolver"
                )
            self._validate_values(new, "the new matrix")
            old = self._csr
            self._csr = _Csr(old.indptr, old.indices, new.data, old.n, old.xp)
            self._full, self._norm_a = None, None
            if self.n:
                self._check_structure()
            self._engine.set_values(new.data, self._full_matrix)
            if "factorize" in self._done:
                self._stale = True
                self._done.discard("factorize")
        if b is not None:
            _, _, b_shape, b_dtype = _dense_rhs(b, self.n)
            _refuse_bool(b_dtype, "b values")
            if np.result_type(b_dtype, self.dtype) != self.dtype and b_dtype.kind not in "iu":
                raise UnsupportedError(f"the new b has dtype {b_dtype}; this solver runs in {self.dtype}")
            place = Placement({"b": b}, self.space, home="b")  # x goes back where the new b lives
            new_b = _rhs_in_space(b, place, self.dtype)
            self._validate_values(new_b, "b")
            self._b, self._place, self._b_shape = new_b, place, b_shape

    def reset_operands(self, **operands: Any) -> None:
        """``a=``: new values, same pattern (then call refactorize()); ``b=``: a new right-hand side (same n)."""
        super().reset_operands(**operands)

    def _free(self) -> None:
        self._restore_engine()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.free()
        self._full = None

    # ------------------------------------------------------------------ saved plans

    def _plan_libraries(self) -> dict[str, Any]:
        """cuDSS beside the stateful base's NumPy / SciPy / CuPy / CUDA runtime versions."""
        if self.backend == "cudss":
            from ust.backends.cuda.cudss import get_library

            return {"cudss": lambda: get_library().version_text}
        return {}

    def _plan_payload(self) -> dict[str, Any]:
        assert self.plan_info is not None
        perm = self.plan_info.row_permutation
        return {
            "backend": self.backend,
            "n": self.n,
            "nnz": self._csr.nnz,
            "pattern_sha256": _pattern_digest(self._csr),
            "matrix_type": self.options.matrix_type,
            "matrix_view": self.options.matrix_view,
            "permutation": encode_array(np.asarray(perm)) if perm is not None else None,
            "nd_partition_tree": encode_array(self._nd_tree) if self._nd_tree is not None else None,
            "lu_nnz": self.factorization_info.lu_nnz if self.factorization_info else None,
        }

    @classmethod
    def load_plan(
        cls,
        path: str | os.PathLike[str],
        a: Any,
        b: Any,
        *,
        options: Any = None,
        execution: Any = None,
        stream: Any = None,
    ) -> DirectSolver:
        """A solver whose ``plan()`` reuses the reordering saved by :meth:`save_plan`.

        A plan from another device, library version or sparsity pattern is not used: a WARNING
        says why and ``plan()`` analyses afresh.  So is a damaged one: every field is checked
        before use (types, a permutation of ``range(n)`` for *this* matrix, a partition tree of
        ``2**levels - 1`` entries, ...), and what is wrong is reported as a
        :class:`~ust.runtime.stateful.PlanFileError` in the WARNING -- nothing of it reaches
        SuperLU or cuDSS.  A file that is no saved ust plan at all raises PlanFileError.
        """
        solver = cls(a, b, options=options, execution=execution, stream=stream)
        where = os.fspath(path)
        plan = cls.read_plan(path, device=solver._plan_device(), versions=solver._plan_versions())
        if plan is None:
            return solver
        try:
            perm, tree, lu_nnz = _typed_plan(plan, where)
        except PlanFileError as exc:
            _log.warning("%s; planning afresh", exc)
            return solver
        problems = [
            f"{key} {plan.get(key)!r} (now {now!r})"
            for key, now in (
                ("backend", solver.backend),
                ("n", solver.n),
                ("nnz", solver._csr.nnz),
                ("matrix_type", solver.options.matrix_type),
                ("matrix_view", solver.options.matrix_view),
            )
            if plan.get(key) != now
        ]
        if not problems and plan.get("pattern_sha256") != _pattern_digest(solver._csr):
            problems.append("another sparsity pattern")
        if not problems and perm is None and solver.backend == "dense-lu":
            _log.info("the saved plan %s is a dense LU's: it holds no ordering to reuse", where)
            return solver
        if problems or perm is None:
            _log.warning(
                "the saved plan %s does not fit (%s); planning afresh",
                where,
                ", ".join(problems) or "no permutation",
            )
            return solver
        try:  # the plan says it fits: its arrays must fit this matrix too, or the file lies
            perm, tree = _fitted_arrays(perm, tree, solver.n, where)
        except PlanFileError as exc:
            _log.warning("%s; planning afresh", exc)
            return solver
        solver._user_perm = perm
        solver._user_tree = tree
        solver._saved_lu_nnz = lu_nnz
        _log.info("plan() will reuse the reordering saved in %s", where)
        return solver

    def __del__(self) -> None:
        """Factors can be large: release them when the solver is dropped without free()."""
        try:
            if not self._freed:
                self.free()
        except Exception:  # half-constructed object, or interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "freed" if self._freed else ", ".join(sorted(self._done)) or "specified"
        return f"<DirectSolver n={self.n} dtype={self.dtype} on {self.space} via {self.backend}: {state}>"


# ------------------------------------------------------------------------------------- one-shot


def _low_precision(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.complex64 if dtype.kind == "c" else np.float32)


class _LowPrecisionEngine:
    """A factorisation engine of the float32 copy: new float64 values are cast on the way in."""

    def __init__(self, engine: Any, low: np.dtype) -> None:
        self.engine, self.low = engine, low

    def set_values(self, data: Any, full_matrix: Any) -> None:
        self.engine.set_values(data.astype(self.low), lambda: full_matrix().astype(self.low))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class MixedPrecisionSolver(DirectSolver):
    """``DirectSolver(..., options={"precision": "mixed"})``: the factorisation of a float32
    (complex64) copy of A -- half the bytes, the library's faster single-precision kernels --
    and, for each solve, GMRES in float64 preconditioned by it until the backward error is
    ``MIXED_TARGET_BACKWARD_ERROR`` (1e-14; GMRES-IR).  The analysis, plan files, ``reset_operands``
    and the checks are those of :class:`DirectSolver`; a refinement that does not get there is a
    :class:`~ust.SolverAccuracyError` suggesting ``precision="double"``.
    """

    def __init__(
        self, a: Any, b: Any, *, options: Any = None, execution: Any = None, stream: Any = None
    ) -> None:
        opts = DirectSolverOptions.coerce(options)
        shape = _sparse_shape(a)
        # a non-square A is refused by DirectSolver's own checks below; the dtype needs b's only then
        b_dtype = _dense_rhs(b, shape[0])[3] if len(shape) == 2 else np.dtype(np.float64)
        dtype = _solve_dtype(_np_dtype(a), np.dtype(b_dtype))
        if dtype not in (np.dtype(np.float64), np.dtype(np.complex128)):
            raise UnsupportedError(
                f"precision='mixed' factors a float64 or complex128 system in single precision; this "
                f"system is {dtype}: use precision='double'"
            )
        self._low = _low_precision(dtype)
        self._b_low: Any = None
        super().__init__(a, b, options=opts, execution=execution, stream=stream)
        _log.info("mixed precision: %s factorisation, %s refinement by GMRES", self._low, self.dtype)

    def _make_engine(self, pivot_epsilon: float | None = None) -> Any:
        """The planned route's engine, built on the float32 copy of A and b."""
        if self.n == 0:
            return super()._make_engine(pivot_epsilon)
        csr, b, full, dtype = self._csr, self._b, self._full, self.dtype
        low = self._low
        self._b_low = b.astype(low, order="F")
        self._csr = _Csr(csr.indptr, csr.indices, csr.data.astype(low), csr.n, csr.xp)
        self._full = None if full is None else full.astype(low)
        self._b, self.dtype = self._b_low, low
        try:
            engine = super()._make_engine(pivot_epsilon)
        finally:
            self._csr, self._b, self._full, self.dtype = csr, b, full, dtype
        return _LowPrecisionEngine(engine, low)

    def solve(self) -> Any:
        """x to float64 accuracy: the single-precision solve, refined by GMRES (checked unless check=False)."""
        if self._stale and not self._freed:
            raise InvalidStateError(
                "the matrix values changed (reset_operands(a=...)); call refactorize() or factorize() before solve()"
            )
        self._require("solve", "plan", "factorize")
        if self.n == 0:
            return super().solve()
        x, _ = self._timed("solve", self._refine)
        self._check(x)
        return self._deliver(x)

    def _refine(self) -> Any:
        from ust.api.krylov import run

        e = self._engine
        xp = self._csr.xp
        full = self._full_matrix()
        norm_a = self._norm()
        low, dtype = self._low, self.dtype
        e.bind_rhs(self._b_low)
        x = e.solve(self._b_low).astype(dtype, order="F")
        steps = 0
        for j in range(self._b.shape[1]):  # one refinement per right-hand side column
            b = self._b[:, j]
            x0 = x[:, j].copy()
            target = MIXED_TARGET_BACKWARD_ERROR * (norm_a * float(abs(x0).max()) + float(abs(b).max()))

            def low_solve(r: Any) -> Any:
                return e.correction(r.astype(low).reshape(-1, 1)).reshape(-1).astype(dtype)

            out = run(
                "gmres", lambda v: full @ v, b, x0, xp=xp, tol=target, maxiter=MIXED_MAX_CYCLES,
                psolve=low_solve, restart=MIXED_RESTART,
            )  # fmt: skip
            steps += out.iterations
            if out.info != 0:
                raise SolverAccuracyError(
                    f"precision='mixed': GMRES refinement of the {low} factorisation did not reach a "
                    f"backward error of {MIXED_TARGET_BACKWARD_ERROR:g} in {out.iterations} steps (residual "
                    f"{out.residual_norm:.3e}); the matrix is too ill-conditioned for single-precision "
                    "factors: use precision='double'",
                )
            x[:, j] = out.x
        e.bind_rhs(self._b_low)
        _log.info("mixed precision: %d GMRES refinement steps over %d right-hand side(s)", steps, x.shape[1])
        return x

    def _reset_operands(self, **operands: Any) -> None:
        super()._reset_operands(**operands)
        if operands.get("b") is not None and self.n:
            self._b_low = self._b.astype(self._low, order="F")
            self._engine.bind_rhs(self._b_low)


def solve(
    a: Any, b: Any, *, options: Any = None, execution: Any = None, stream: Any = None, **option_fields: Any
) -> Any:
    """Solve ``A x = b`` once: ``DirectSolver(a, b, ...).execute()``, freed afterwards.

    Option fields may be given as keywords (``solve(a, b, matrix_type="spd")``).  A sequence of
    matrices with a sequence of right-hand sides solves each system and returns a list.

    A 0 x 0 system (``b`` of shape ``(0,)`` or ``(0, k)``) is solved by the empty ``x`` of
    ``b``'s shape, in the solve dtype and ``b``'s package, as ``scipy.sparse.linalg.spsolve``
    does; no library is called.  Bool values (in ``a`` or ``b``) are refused with the
    ``UnsupportedError`` of ``ust.asarray``: ust takes no bool values anywhere.  Errors:
    ``ShapeError`` (not square, ``b`` not ``(n,)`` / ``(n, k)``), ``UnsupportedError``,
    ``InvalidValueError`` (NaN / Inf), ``SingularMatrixError`` and ``SolverAccuracyError``
    (see :func:`~ust.linalg.solution_error`), all before any work where the input alone shows them.
    """
    opts = DirectSolverOptions.coerce(options, **option_fields)
    if isinstance(a, (list, tuple)):
        return _solve_batch(list(a), b, opts, execution, stream)
    cls = DirectSolver if opts.precision == "mixed" else _OneShotSolver
    with cls(a, b, options=opts, execution=execution, stream=stream) as solver:
        return solver.execute()


class _OneShotSolver(DirectSolver):
    """The solver behind :func:`solve`: freed after one solve, so the planner may pick the dense LU."""

    one_shot = True


def _solve_batch(
    mats: list[Any], rhss: Any, opts: DirectSolverOptions, execution: Any, stream: Any
) -> list[Any]:
    """A list of systems: one cuDSS batch on the GPU, one SuperLU factorisation after another on the CPU."""
    if not isinstance(rhss, (list, tuple)) or len(mats) != len(rhss):
        raise ShapeError("a batch of matrices needs a sequence of right-hand sides of the same length")
    if not mats:
        return []
    if opts.devices is not None and len(opts.devices) > 1:
        raise UnsupportedError(
            "a batch of systems runs on one GPU; pass devices=[d] or solve each system alone"
        )
    if opts.devices is not None and execution is None:
        execution = f"cuda:{opts.devices[0]}"
    named = {**{f"a[{i}]": m for i, m in enumerate(mats)}, **{f"b[{i}]": r for i, r in enumerate(rhss)}}
    if execution is None:
        resolve_space(named)  # operands on different devices: DeviceError naming each
        _, space, why = _default_space(mats[0], rhss[0], None)
    else:
        space, why = resolve_space(named, execution), f"execution={execution!r}"
    if not space.is_cuda:
        return [solve(m, r, options=opts, execution="cpu") for m, r in zip(mats, rhss)]
    if any(_sparse_shape(m)[:1] == (0,) for m in mats):  # cuDSS batches need n >= 1 per member
        return [solve(m, r, options=opts, execution=space, stream=stream) for m, r in zip(mats, rhss)]
    _log.info("batch of %d systems on %s because %s", len(mats), space.describe(), why)
    return _CudssBatch(mats, list(rhss), opts, space, stream).run()


class _CudssBatch:
    """Validate every member, then analyse, factorise and solve them in one cuDSS batch."""

    def __init__(
        self, mats: list[Any], rhss: list[Any], opts: DirectSolverOptions, space: ExecutionSpace, stream: Any
    ):
        self.cupy = import_cupy()
        self.opts, self.space = opts, space
        self.place = Placement({}, space)
        self.mats, self.rhss, self.stream_arg = mats, rhss, stream
        shapes = []
        dtypes = []
        for i, (m, r) in enumerate(zip(mats, rhss)):
            shape = _sparse_shape(m)
            if len(shape) != 2 or shape[0] != shape[1]:
                raise ShapeError(f"batch member {i}: the matrix must be square; got shape {shape}")
            info = _dense_rhs(r, shape[0])
            shapes.append(info)
            dtypes.append(_solve_dtype(_np_dtype(m), info[3]))
        self.dtype = np.result_type(*dtypes)
        self.rhs_info = shapes
        self.members: list[_Csr] = []
        self.fulls: list[Any] = []
        self.bs: list[Any] = []
        hermitian = opts.matrix_type in ("hermitian", "hpd")
        for i, (m, r) in enumerate(zip(mats, rhss)):
            c = _canonical(_to_cupyx_csr(m, space.device_id or 0, self.dtype), self.dtype, space)
            if c.indptr.dtype != np.int32:
                raise UnsupportedError(f"batch member {i} has more than 2^31 nonzeros; solve it on its own")
            full = _full_matrix(c, opts.matrix_view, hermitian)
            try:
                if c.data.size and not bool(self.cupy.isfinite(c.data).all()):
                    raise InvalidValueError("the matrix contains NaN or Inf values")
                _check_nonsingular_structure(full, self.cupy)
            except (InvalidValueError, SingularMatrixError) as exc:
                raise type(exc)(f"batch member {i}: {exc}") from None
            b2 = _rhs_in_space(r, self.place, self.dtype)
            if not bool(self.cupy.isfinite(b2).all()):
                raise InvalidValueError(f"batch member {i}: b contains NaN or Inf values")
            self.members.append(c)
            self.fulls.append(full)
            self.bs.append(b2)
        self.stream = self.place.stream(stream)

    def run(self) -> list[Any]:
        from ust.backends.cuda.cudss import CudssBatchFactorization

        cp = self.cupy
        o = self.opts
        with cp.cuda.Device(self.space.device_id):
            xs = [cp.empty(b.shape, dtype=self.dtype, order="F") for b in self.bs]
            engine = CudssBatchFactorization(
                [(c.indptr, c.indices, c.data) for c in self.members],
                matrix_type=o.matrix_type,
                matrix_view=o.matrix_view,
                config=_cudss_config(o, self.space.device_id or 0),
                device_id=self.space.device_id or 0,
                stream=self.stream,
            )
            try:
                engine.set_rhs(self.bs, xs)
                for phase in ("analysis", "factorization", "solve"):
                    t0 = time.perf_counter()
                    engine.execute(phase)
                    cp.cuda.runtime.streamSynchronize(self.stream)
                    _log.info("cudss batch %s took %.3f ms", phase, 1e3 * (time.perf_counter() - t0))
                    info = engine.info()
                    if info != 0:
                        raise SingularMatrixError(
                            f"cuDSS batch {phase} reports info = {info}: a member is singular"
                        )
                try:
                    perturbed = engine.npivots()
                except Exception as exc:  # CudssError: this release does not report it for batches
                    _log.debug("cuDSS did not report npivots for the batch: %s", exc)
                    perturbed = 0
            finally:
                engine.free()
        tol = o.tolerance(self.dtype)
        out = []
        for i, (full, x, b, (pkg, space, shape, _)) in enumerate(zip(self.fulls, xs, self.bs, self.rhs_info)):
            if tol is not None and perturbed and not relative_residual(full, x, b, cp) <= tol:
                # perturbed pivots somewhere in the batch and this member misses: solve it alone,
                # where refinement and the check of solution_error() apply as for any solve
                _log.info("batch member %d: perturbed pivots and a large residual; solving it alone", i)
                try:
                    out.append(
                        solve(
                            self.mats[i],
                            self.rhss[i],
                            options=o,
                            execution=self.space,
                            stream=self.stream_arg,
                        )
                    )
                except (SingularMatrixError, SolverAccuracyError) as exc:
                    exc.args = (f"batch member {i}: {exc}",)
                    raise
                continue
            if tol is not None:
                be = backward_error(full, x, b, cp)
                if not be <= tol:
                    raise SolverAccuracyError(
                        f"batch member {i}: backward error {be:.3e} is above the tolerance {tol:.1e} for {self.dtype}",
                        backward_error=be,
                    )
            out.append(to_package(x.reshape(shape) if len(shape) == 1 else x, pkg, space).array)
        return out
