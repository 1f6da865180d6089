"""Krylov solvers on any format: ``ust.linalg.cg / minres / gmres / bicgstab`` and
:class:`IterativeSolver`.

SciPy's signatures and return convention (``x, info = cg(A, b, x0=None, *, rtol=1e-5,
atol=0.0, maxiter=None, M=None, callback=None)``), with one meaning of convergence for every
method: the true residual ``||b - A x|| <= max(rtol * ||b||, atol)`` (SciPy's minres stops on
its own, weaker estimate).  ``info`` is 0 on convergence, the iteration limit when it was
reached (and a :class:`IterativeSolverWarning` naming the residual reached), negative on a
breakdown (the last finite iterate comes back, with a warning).

``A`` is any ust Tensor, scipy / cupyx / torch sparse matrix or a ``LinearOperator``; the SpMV
runs through the planner's route for A's own format (a DIA matrix runs the generated DIA
kernel).  The space follows the operands as everywhere in ust (``execution=`` moves them);
x comes back in b's package.  ``M`` is a preconditioner name of
``ust.api.precond.PRECONDITIONERS`` or an operator approximating A^-1 (SciPy's convention).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from ust.api.krylov import METHODS, run
from ust.runtime.errors import InvalidValueError, ShapeError, UnsupportedError
from ust.runtime.log import get_logger
from ust.runtime.options import option
from ust.runtime.placement import Placement
from ust.runtime.stateful import StatefulOperation

__all__ = [
    "IterativeOptions",
    "IterativeResult",
    "IterativeSolver",
    "IterativeSolverWarning",
    "bicgstab",
    "cg",
    "gmres",
    "minres",
]

_log = get_logger("linalg.iterative")


class IterativeSolverWarning(UserWarning):
    """An iterative solve stopped without converging (the iteration limit or a breakdown)."""


@dataclass(frozen=True)
class IterativeOptions:
    """Options of :class:`IterativeSolver` and the one-shot functions (a dict of these names works)."""

    check_every: int | None = option(
        None,
        "Iterations between convergence tests, the only host synchronisations of a GPU iteration "
        "(None: 1 on the CPU, 8 on a GPU). A test may see convergence up to ``check_every - 1`` "
        "iterations late: x is then more accurate, never less.",
    )
    restart: int = option(20, "GMRES: the Krylov dimension between restarts (SciPy's default 20).")
    shift: float = option(0.0, "MINRES: solve ``(A - shift I) x = b``.")
    preconditioner: Mapping[str, Any] | None = option(
        None,
        "Options of the preconditioner (``block_size``, ``degree``, ``max_coarse``, ...; see "
        "the preconditioner table of ``ust.api.precond``).",
    )

    def __post_init__(self) -> None:
        if self.check_every is not None and (not isinstance(self.check_every, int) or self.check_every < 1):
            raise UnsupportedError(f"check_every must be a positive integer, not {self.check_every!r}")
        if not isinstance(self.restart, int) or self.restart < 1:
            raise UnsupportedError(f"restart must be a positive integer, not {self.restart!r}")
        if self.preconditioner is not None and not isinstance(self.preconditioner, Mapping):
            raise UnsupportedError("options['preconditioner'] must be a mapping of preconditioner options")

    @classmethod
    def coerce(cls, options: Any = None) -> IterativeOptions:
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        if not isinstance(options, Mapping):
            raise UnsupportedError(
                f"options must be an IterativeOptions or a dict, not {type(options).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UnsupportedError(f"unknown iterative-solver options {unknown}; known: {sorted(known)}")
        return cls(**options)


@dataclass(frozen=True)
class IterativeResult:
    """How one solve went: iterations, the final relative residual ``||b - A x|| / ||b||`` (the
    true one), whether it converged, SciPy's ``info``, the seconds of the solve and of the setup
    (operator, preconditioner), and what ran."""

    method: str
    iterations: int
    residual: float
    converged: bool
    info: int
    seconds: float
    setup_seconds: float
    preconditioner: str
    spmv_route: str
    device: str
    breakdown: str | None = None


# ---------------------------------------------------------------------------------- operands


def _is_linear_operator(a: Any) -> bool:
    return (
        hasattr(a, "matvec") and hasattr(a, "shape") and not hasattr(a, "indptr") and not hasattr(a, "format")
    )


def _operator_shape(a: Any) -> tuple[int, ...]:
    shape = getattr(a, "shape", None)
    if shape is None:
        raise UnsupportedError(
            f"A must be a ust Tensor, a sparse matrix or a LinearOperator, not {type(a).__name__}"
        )
    return tuple(int(s) for s in shape)


def _solve_dtype(a_dtype: Any, b_dtype: Any) -> np.dtype:
    dt = np.result_type(np.dtype(a_dtype), np.dtype(b_dtype))
    if dt.kind == "b":
        raise UnsupportedError("a boolean system has no iterative solve; give A and b a floating dtype")
    if dt.kind in "iu" or dt == np.float16:
        dt = np.dtype(np.float64)
    if dt.kind not in "fc":
        raise UnsupportedError(f"no iterative solve for dtype {dt}")
    return dt


class _Operator:
    """A on the execution device as a matvec: the planner's SpMV for a matrix (one planned Matmul,
    reused), the user's matvec for a LinearOperator."""

    def __init__(self, a: Any, place: Placement, dtype: np.dtype) -> None:
        self.shape = _operator_shape(a)
        self.tensor: Any = None
        if _is_linear_operator(a):
            self.matvec: Callable[[Any], Any] = a.matvec
            self.route = "user LinearOperator"
            return
        from ust.api.linop import _Product
        from ust.convert import asarray
        from ust.tensor import Tensor

        t = a if isinstance(a, Tensor) else asarray(a)
        t = place.tensor(t)
        if t.dtype != dtype:
            t = t.astype(dtype)
        values = t.values
        if values.size and not bool(t.xp.isfinite(values).all()):
            raise InvalidValueError("A contains NaN or Inf values; an iterative solve needs finite values")
        self.tensor = t
        product = _Product(t)
        probe = t.xp.zeros(self.shape[1], dtype=dtype)
        product(probe)  # plans the SpMV once, now (setup time, not the first iteration's)
        self.route = _route_of(product)
        self.matvec = product


def _route_of(product: Any) -> str:
    plans = getattr(product, "_plans", {})
    for mm in plans.values():
        return str(mm.decision.route)
    return "unknown"


def _vector(b: Any, n: int, what: str) -> None:
    shape = tuple(getattr(b, "shape", ()))
    if shape not in ((n,), (n, 1)):
        raise ShapeError(f"{what} must have shape ({n},) or ({n}, 1) for an {n} x {n} system, got {shape}")


def _check_finite(xp: Any, v: Any, what: str) -> None:
    if v.size and not bool(xp.isfinite(v).all()):
        raise InvalidValueError(f"{what} contains NaN or Inf values; an iterative solve needs finite values")


def _tolerance(rtol: float, atol: float) -> tuple[float, float]:
    try:
        r, a = float(rtol), float(atol)
    except (TypeError, ValueError):
        raise UnsupportedError(f"rtol and atol must be numbers, got {rtol!r} and {atol!r}") from None
    if not (r >= 0 and a >= 0 and math.isfinite(r) and math.isfinite(a)):
        raise UnsupportedError(f"rtol and atol must be finite and non-negative, got {rtol!r} and {atol!r}")
    return r, a


# ---------------------------------------------------------------------------------- the solver


class IterativeSolver(StatefulOperation):
    """``A x = b`` by a Krylov method, planned once and solved many times.

    ``plan()`` builds the operator (the SpMV route for A's format), the preconditioner and the
    workspace once; ``solve(b, x0=None)`` returns x (in b's package), as often as wanted;
    ``reset_operands(a=...)`` takes new values of A (the operator and preconditioner are rebuilt
    at the next solve); ``.result`` is the :class:`IterativeResult` of the last solve.
    """

    kind: ClassVar[str] = "iterative_solver"

    def __init__(
        self,
        a: Any,
        *,
        method: str = "cg",
        M: Any = None,
        rtol: float = 1e-5,
        atol: float = 0.0,
        maxiter: int | None = None,
        options: Any = None,
        execution: Any = None,
    ) -> None:
        super().__init__()
        if method not in METHODS:
            raise UnsupportedError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.method = method
        self.options = IterativeOptions.coerce(options)
        self.rtol, self.atol = _tolerance(rtol, atol)
        if maxiter is not None and (not isinstance(maxiter, (int, np.integer)) or maxiter < 1):
            raise UnsupportedError(f"maxiter must be a positive integer or None, not {maxiter!r}")
        self.maxiter = None if maxiter is None else int(maxiter)
        shape = _operator_shape(a)
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ShapeError(f"the matrix must be square (n x n); got shape {shape}")
        self.n = shape[0]
        self._a = a
        self._M = M
        self._execution = execution
        operands = {} if _is_linear_operator(a) else {"a": a}
        self._place = Placement(operands, execution)
        self.space = self._place.space
        self._op: _Operator | None = None
        self._pre: Any = None
        self._setup_seconds = 0.0
        self._warn_depth = 4  # warnings point at the caller of solve(); the one-shot adds a frame
        self.result: IterativeResult | None = None

    # ---------------------------------------------------------------------------- lifecycle

    def _plan(self) -> None:
        t0 = time.perf_counter()
        a_dtype = getattr(self._a, "dtype", np.float64) or np.float64
        self.dtype = _solve_dtype(a_dtype, a_dtype)
        self._place.require_device()
        self._place.log(_log)
        from ust.plan.planner import choose
        from ust.plan.routes import lookup

        self.decision = choose(iterative_problem(self.space, self.dtype, self._a))
        self._op, self._pre = lookup("iterative_solve", self.decision.route).build(self)
        self._setup_seconds = time.perf_counter() - t0
        _log.info(
            "%s on %s: SpMV route %s, preconditioner %s (setup %.3f s)",
            self.method,
            self.space.describe(),
            self._op.route,
            self._describe_pre(),
            self._setup_seconds,
        )

    def _build_preconditioner(self) -> Any:
        if self._M is None:
            return None
        from ust.api.precond import build_preconditioner

        assert self._op is not None
        if isinstance(self._M, str) and self._op.tensor is None:
            raise UnsupportedError(
                f"preconditioner {self._M!r} needs the matrix's entries, but A is a LinearOperator; "
                "give A as a sparse matrix or Tensor, or M as an operator"
            )
        target = self._op.tensor
        if target is None:  # a LinearOperator system with a user M: only its shape matters
            return build_preconditioner(
                self._M, _ShapeOnly(self.n, self.dtype), options=self.options.preconditioner or {}
            )
        return build_preconditioner(self._M, target, options=self.options.preconditioner or {})

    def _describe_pre(self) -> str:
        return "none" if self._pre is None else str(self._pre.describe())

    def solve(self, b: Any, x0: Any = None, *, callback: Any = None, callback_type: str | None = None) -> Any:
        """x for this b (and start x0), in b's package; ``.result`` says how it went."""
        self._require("solve", "plan")
        return self._solve(b, x0, callback, callback_type)

    def _execute(self, **kwargs: Any) -> Any:
        b = kwargs.pop("b", None)
        if b is None:
            raise UnsupportedError("execute(b=...) needs the right-hand side")
        return self._solve(b, kwargs.pop("x0", None), kwargs.pop("callback", None), None)

    def _solve(self, b: Any, x0: Any, callback: Any, callback_type: str | None) -> Any:
        assert self._op is not None
        _vector(b, self.n, "b")
        if x0 is not None:
            _vector(x0, self.n, "x0")
        place = Placement({"b": b}, self.space, home="b")
        dtype = _solve_dtype(self.dtype, getattr(b, "dtype", np.float64))
        if dtype != self.dtype:
            raise UnsupportedError(
                f"b is {np.dtype(b.dtype)} but the solver was planned for {self.dtype}; give A that dtype"
            )
        xp = self._xp()
        bb = xp.array(
            place.move(np.asarray(b) if place.package == "numpy" else b, _log, "b"), dtype=dtype
        ).reshape(-1)
        _check_finite(xp, bb, "b")
        xx = None
        if x0 is not None:
            xx = xp.array(place.move(x0, _log, "x0"), dtype=dtype).reshape(-1)
            _check_finite(xp, xx, "x0")
        if callback_type is not None and callback_type not in ("x", "pr_norm", "legacy"):
            raise UnsupportedError(
                f"unknown callback_type {callback_type!r}; choose 'x', 'pr_norm' or 'legacy'"
            )
        if self.method == "gmres" and callback is not None and callback_type is None:
            callback_type = "legacy"  # SciPy's default when a callback is given
        if self.method != "gmres" and callback_type not in (None, "x"):
            raise UnsupportedError(f"callback_type is a gmres option; {self.method} calls back with x")
        t0 = time.perf_counter()
        bnorm = float(xp.linalg.norm(bb))
        tol = max(self.rtol * bnorm, self.atol)
        if bnorm == 0.0 and self.atol == 0.0:
            x = xp.zeros_like(bb)
            self._record(0, 0.0, 0, time.perf_counter() - t0, None)
            return place.back(x)
        maxiter = self.maxiter if self.maxiter is not None else 10 * self.n
        out = run(
            self.method,
            self._op.matvec,
            bb,
            xx,
            xp=xp,
            tol=tol,
            maxiter=maxiter,
            psolve=None if self._pre is None else self._pre.apply,
            check_every=self._check_every(),
            callback=callback,
            restart=self.options.restart,
            callback_type=callback_type,
            shift=self.options.shift,
        )
        seconds = time.perf_counter() - t0
        rel = out.residual_norm / bnorm if bnorm else out.residual_norm
        self._record(out.iterations, rel, out.info, seconds, out.breakdown)
        return place.back(out.x)

    def _xp(self) -> Any:
        if self.space.is_cuda:
            from ust.runtime.xp import import_cupy

            return import_cupy()
        return np

    def _check_every(self) -> int:
        if self.options.check_every is not None:
            return self.options.check_every
        return 8 if self.space.is_cuda else 1

    def _record(self, iterations: int, rel: float, info: int, seconds: float, breakdown: str | None) -> None:
        assert self._op is not None
        self.result = IterativeResult(
            method=self.method,
            iterations=iterations,
            residual=rel,
            converged=info == 0,
            info=info,
            seconds=seconds,
            setup_seconds=self._setup_seconds,
            preconditioner=self._describe_pre(),
            spmv_route=self._op.route,
            device=self._place.device,
            breakdown=breakdown,
        )
        _log.info(
            "%s: %d iterations, relative residual %.3g, %s, %.4f s",
            self.method,
            iterations,
            rel,
            "converged" if info == 0 else f"not converged (info={info})",
            seconds,
        )
        if info > 0:
            warnings.warn(
                f"{self.method} did not converge in {info} iterations: relative residual {rel:.3g} "
                f"(asked for rtol={self.rtol:g}, atol={self.atol:g})",
                IterativeSolverWarning,
                stacklevel=self._warn_depth,
            )
        elif info < 0:
            warnings.warn(
                f"{self.method} broke down after {iterations} iterations ({breakdown}); the last finite "
                f"iterate is returned, relative residual {rel:.3g}",
                IterativeSolverWarning,
                stacklevel=self._warn_depth,
            )

    def _reset_operands(self, **operands: Any) -> None:
        unknown = set(operands) - {"a"}
        if unknown:
            raise UnsupportedError(f"reset_operands takes a=...; not {sorted(unknown)}")
        a = operands.get("a")
        if a is None:
            return
        shape = _operator_shape(a)
        if shape != (self.n, self.n):
            raise ShapeError(f"new A is {shape}, but the solver is for {(self.n, self.n)}")
        self._a = a
        if "plan" in self._done:
            self._plan()

    def _free(self) -> None:
        self._op = None
        self._pre = None


def iterative_problem(space: Any, dtype: Any, a: Any) -> Any:
    """The planner's view of an iterative solve: the device, the dtype and A's format class."""
    from ust.plan.classify import classify
    from ust.plan.rules import Problem
    from ust.tensor import Tensor

    if isinstance(a, Tensor):
        fc = classify(a.format)
        cls, params = fc.name, fc.params
    else:
        cls, params = ("operator" if _is_linear_operator(a) else "CSR"), ()
    return Problem(
        op="iterative_solve",
        device=space.kind,
        format_class=cls,
        format_params=params,
        canonical=True,
        dtype=str(np.dtype(dtype)),
        index_dtype="int64",
        plain=True,
    )


def _build_krylov(solver: IterativeSolver) -> tuple[_Operator, Any]:
    """The "krylov" route: A as the planner's SpMV on the execution device, and the preconditioner."""
    solver._op = _Operator(solver._a, solver._place, solver.dtype)
    return solver._op, solver._build_preconditioner()


def _register_routes() -> None:
    from ust.plan.routes import Route, register

    register(Route("iterative_solve", "krylov", _build_krylov, doc=_build_krylov.__doc__ or ""))


_register_routes()


class _ShapeOnly:
    """What a user preconditioner of a LinearOperator system is checked against."""

    def __init__(self, n: int, dtype: np.dtype) -> None:
        self.shape = (n, n)
        self.dtype = dtype
        self.xp = np


# ---------------------------------------------------------------------------------- one-shot


def _one_shot(method: str) -> Callable[..., Any]:
    def solve(
        A: Any,
        b: Any,
        x0: Any = None,
        *,
        rtol: float = 1e-5,
        atol: float = 0.0,
        maxiter: int | None = None,
        M: Any = None,
        callback: Any = None,
        execution: Any = None,
        options: Any = None,
        return_result: bool = False,
        **extra: Any,
    ) -> Any:
        opts = dict(IterativeOptions.coerce(options).__dict__)
        callback_type = extra.pop("callback_type", None) if method == "gmres" else None
        for name in ("restart",) if method == "gmres" else ("shift",) if method == "minres" else ():
            if name in extra:
                value = extra.pop(name)
                if value is not None:
                    opts[name] = value
        if extra:
            raise UnsupportedError(f"{method}() got unexpected keyword arguments {sorted(extra)}")
        # where it runs: the operands' common space (DeviceError naming each when they differ), a
        # LinearOperator's being b's, or execution=
        operands = {"b": b} if _is_linear_operator(A) else {"a": A, "b": b}
        space = Placement(operands, execution).space
        solver = IterativeSolver(
            A, method=method, M=M, rtol=rtol, atol=atol, maxiter=maxiter, options=opts, execution=space
        )
        _vector(b, solver.n, "b")
        solver._warn_depth = 5
        solver.plan()
        x = solver.solve(b, x0, callback=callback, callback_type=callback_type)
        assert solver.result is not None
        info = solver.result.info
        return (x, info, solver.result) if return_result else (x, info)

    solve.__name__ = solve.__qualname__ = method
    solve.__doc__ = (
        f"``x, info = {method}(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, "
        "callback=None)``, SciPy's signature; converged means ``||b - A x|| <= max(rtol ||b||, atol)``. "
        "``execution=`` moves the operands; ``options`` are :class:`IterativeOptions`; "
        "``return_result=True`` also returns the :class:`IterativeResult`."
    )
    return solve


cg = _one_shot("cg")
minres = _one_shot("minres")
gmres = _one_shot("gmres")
bicgstab = _one_shot("bicgstab")
