"""Dense fall-through: fused matmul (cuBLASLt / BLAS) and FFT (cuFFT / scipy.fft).

When every operand is dense, the vendor libraries made for dense work are the fastest route, and
ust hands the work to them under the same rules as its sparse operations: the operands'
package and memory decide where the work runs (NumPy -> the CPU, CuPy -> the GPU), ``execution=``
overrides it and moves the data, and the result comes back in the operands' own package.

* :func:`matmul` / :class:`Matmul` compute ``D = epilog(alpha * A @ B + beta * C + bias)`` in one
  cuBLASLt call on the GPU (epilogues none, relu, gelu, bias, relu_bias, gelu_bias; batched
  operands; row- or column-major), and with BLAS / NumPy plus in-place epilogues on the CPU.
* :func:`fft`, :func:`ifft`, :func:`rfft`, :func:`irfft`, :func:`fftn`, :func:`ifftn` and
  :class:`FFT` take scipy.fft's arguments; an optional elementwise epilogue runs on the output.

Every function has a stateful twin (plan once, execute many, ``reset_operands``, ``free``, ``with``,
``save_plan`` / ``load_plan``).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from ust.plan.rules import Problem
from ust.runtime.errors import ShapeError, UnsupportedError, UstError
from ust.runtime.log import get_logger
from ust.runtime.options import option
from ust.runtime.placement import Placement
from ust.runtime.spaces import ExecutionSpace, log_placement, operand_package, operand_space
from ust.runtime.stateful import (
    PlanFileError,
    StatefulOperation,
    check_plan_fields,
    decode_array,
    encode_array,
)
from ust.runtime.xp import import_cupy

__all__ = [
    "EPILOGS",
    "FFT",
    "FFT_DTYPES",
    "GPU_DTYPES",
    "FFTOptions",
    "Matmul",
    "MatmulOptions",
    "fft",
    "fftn",
    "ifft",
    "ifftn",
    "irfft",
    "matmul",
    "rfft",
]

_log = get_logger("dense")

#: Value dtypes of dense matmul on the GPU (cuBLASLt).
GPU_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")
#: Value dtypes of dense matmul on the CPU.
CPU_DTYPES = ("float16", "float32", "float64", "complex64", "complex128")
#: Value dtypes of the FFTs (others are refused: convert with ``x.astype(...)``).
FFT_DTYPES = ("float32", "float64", "complex64", "complex128")
#: The names of the epilogues dense matmul fuses (``epilog=``).
EPILOGS = ("none", "relu", "gelu", "bias", "relu_bias", "gelu_bias")
_EPILOG_BY_PARTS = {
    frozenset(): "none",
    frozenset({"relu"}): "relu",
    frozenset({"gelu"}): "gelu",
    frozenset({"bias"}): "bias",
    frozenset({"relu", "bias"}): "relu_bias",
    frozenset({"gelu", "bias"}): "gelu_bias",
}
_NORMS = (None, "backward", "ortho", "forward")


# ------------------------------------------------------------------------------------------ options


@dataclass(frozen=True)
class MatmulOptions:
    """Options of :class:`ust.dense.Matmul` and :func:`ust.dense.matmul` (a dict with these keys
    works too)."""

    tf32: bool = option(
        False,
        """Let float32 products use TF32 tensor cores (cuBLASLt's compute type 32F_FAST_TF32):
        faster, with a 10-bit mantissa in the products.  GPU only, float32 operands only; the CPU
        logs that it has no effect.""",
    )
    workspace_limit: int = option(
        32 << 20,
        """Bytes of GPU workspace cuBLASLt's algorithms may use (>= 0; 32 MiB by default).""",
    )
    max_algorithms: int = option(
        8,
        """How many candidate algorithms cuBLASLt's heuristic returns (>= 1): ``plan`` runs the
        first, ``autotune`` times them all and keeps the fastest.""",
    )

    def __post_init__(self) -> None:
        if self.workspace_limit < 0 or self.max_algorithms < 1:
            raise UnsupportedError("workspace_limit must be >= 0 and max_algorithms >= 1")


@dataclass(frozen=True)
class FFTOptions:
    """Options of :class:`ust.dense.FFT` and the ``ust.dense`` FFT functions (a dict with these
    keys works too)."""

    workers: int | None = option(
        None,
        """Threads of ``scipy.fft`` on the CPU (its ``workers``); None: all cores.  The GPU
        (cuFFT) ignores it.""",
    )
    callbacks: str = option(
        "auto",
        """Where a ``prolog=`` / ``epilog=`` runs on the GPU: ``"auto"`` fuses it into cuFFT as an LTO
        callback where it can and runs one separate elementwise kernel otherwise (the log and
        ``ust.explain`` say which and why); ``"fused"`` makes the lack of fusion a
        BackendUnavailableError; ``"separate"`` always runs the separate kernel.  The CPU ignores it.""",
        choices=("auto", "fused", "separate"),
    )

    def __post_init__(self) -> None:
        from ust.api.fft_callbacks import CALLBACK_MODES

        if self.callbacks not in CALLBACK_MODES:
            raise UnsupportedError(
                f"unknown callbacks={self.callbacks!r}; supported: {', '.join(CALLBACK_MODES)}"
            )


_O = TypeVar("_O", MatmulOptions, FFTOptions)


def _options(cls: type[_O], value: Any) -> _O:
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in fields(cls)}
        unknown = set(value) - known
        if unknown:
            raise UnsupportedError(f"unknown {cls.__name__} {sorted(unknown)}; supported: {sorted(known)}")
        return cls(**value)
    raise UnsupportedError(f"options must be a {cls.__name__} or a dict, not {type(value).__name__}")


# ---------------------------------------------------------------------------------------- placement


def _arraylike(x: Any) -> Any:
    """Lists and scalars become NumPy arrays; arrays pass through untouched."""
    if x is None or hasattr(x, "shape"):
        return x
    return np.asarray(x)


def _dtype_name(x: Any) -> str:
    return _name_of_dtype(x.dtype)


@functools.lru_cache(maxsize=64)
def _name_of_dtype(dtype: Any) -> str:
    return str(dtype).rpartition(".")[2]  # torch.float32 -> float32 (str(dtype) costs microseconds)


def _placement(operands: Mapping[str, Any], execution: Any) -> Placement:
    """The one placement (:mod:`ust.runtime.placement`) of dense operands: the result comes back
    in the first operand's package and memory."""
    present = {k: v for k, v in operands.items() if v is not None}
    for name, x in present.items():
        if operand_package(x) not in ("numpy", "cupy", "torch"):
            raise UnsupportedError(
                f"operand {name} is a {operand_package(x)} object; dense operations take NumPy, CuPy "
                "or torch arrays (sparse operands go to ust.matmul)"
            )
    place = Placement(present, execution, home=next(iter(present)))
    place.log(_log)
    return place


def _supported_dtypes(space: ExecutionSpace) -> tuple[str, ...]:
    return GPU_DTYPES if space.is_cuda else CPU_DTYPES


# ------------------------------------------------------------------------------------ matmul checks


@dataclass(frozen=True)
class _MatmulShape:
    """The validated problem: D (batch..., M, N) = A (batch..., M, K) @ B (batch..., K, N)."""

    m: int
    n: int
    k: int
    batch: tuple[int, ...]
    out_shape: tuple[int, ...]
    a_vec: bool
    b_vec: bool
    dtype: str

    @property
    def d_shape(self) -> tuple[int, ...]:
        return (*self.batch, self.m, self.n)


def _epilog_name(epilog: Any) -> str:
    """``None``, ``"relu"``, ``"relu+bias"``, ``"BIAS_GELU"``, ... -> one of :data:`EPILOGS`."""
    if epilog is None:
        return "none"
    if isinstance(epilog, str):
        parts = frozenset(p for p in re.split(r"[+_,\s]+", epilog.strip().lower()) if p) - {"none", "default"}
        name = _EPILOG_BY_PARTS.get(parts)
        if name is not None:
            return name
    raise UnsupportedError(f"unknown epilog {epilog!r}; supported: {', '.join(EPILOGS)}")


def _batch_fits(batch: tuple[int, ...], full: tuple[int, ...]) -> bool:
    """An operand's batch shape works with one stride: all ones (broadcast) or exactly the full batch."""
    return math.prod(batch) == 1 or (1,) * (len(full) - len(batch)) + batch == full


def _matmul_shape(a: Any, b: Any, c: Any, space: ExecutionSpace) -> _MatmulShape:
    """Check shapes and dtypes before any work; raise ShapeError / UnsupportedError with the reason."""
    dtypes = {"a": _dtype_name(a), "b": _dtype_name(b)}
    if c is not None:
        dtypes["c"] = _dtype_name(c)
    supported = _supported_dtypes(space)
    if len(set(dtypes.values())) != 1:
        got = ", ".join(f"{k} {v}" for k, v in dtypes.items())
        raise UnsupportedError(
            f"a, b and c must share one dtype (got {got}); supported: one of {', '.join(supported)} for all"
        )
    dtype = dtypes["a"]
    if dtype not in supported:
        where = "the GPU" if space.is_cuda else "the CPU"
        raise UnsupportedError(
            f"dense matmul of {dtype} is not supported on {where}; supported there: {', '.join(supported)}"
            + ("; bfloat16 runs on the GPU (execution='cuda')" if dtype == "bfloat16" else "")
        )
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    if not a_shape or not b_shape:
        raise ShapeError(f"matmul needs operands of at least 1 dimension, got shapes {a_shape} and {b_shape}")
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    pa = (1, *a_shape) if a_vec else a_shape
    pb = (*b_shape, 1) if b_vec else b_shape
    m, k = pa[-2:]
    k2, n = pb[-2:]
    if k != k2:
        raise ShapeError(f"a {a_shape} and b {b_shape} do not fit: a has {k} columns, b has {k2} rows")
    a_batch, b_batch = pa[:-2], pb[:-2]
    try:
        full = tuple(np.broadcast_shapes(a_batch, b_batch))
    except ValueError:
        raise ShapeError(f"the batch dimensions of a {a_shape} and b {b_shape} do not broadcast") from None
    if not (_batch_fits(a_batch, full) and _batch_fits(b_batch, full)):
        raise UnsupportedError(
            f"batch dimensions {a_batch} and {b_batch} broadcast only axis by axis; supported: equal batch "
            "dimensions, or one operand without batch dimensions"
        )
    out_shape = (*full, *(() if a_vec else (m,)), *(() if b_vec else (n,)))
    shape = _MatmulShape(m, n, k, full, out_shape, a_vec, b_vec, dtype)
    if c is not None:
        c_shape = tuple(c.shape)
        matrix = out_shape[len(full) :]
        if (
            c_shape != out_shape
            and c_shape != matrix
            and not (
                c_shape[-len(matrix) :] == matrix and _batch_fits(c_shape[: len(c_shape) - len(matrix)], full)
            )
        ):
            try:
                np.broadcast_shapes(c_shape, out_shape)
            except ValueError:
                raise ShapeError(f"c has shape {c_shape}, but the result has shape {out_shape}") from None
            raise UnsupportedError(
                f"c of shape {c_shape} only broadcasts to the result {out_shape}; c must have the result's "
                f"shape, or its matrix shape {matrix} (shared by the batch); for a vector use epilog 'bias'"
            )
    return shape


def _check_scalars(alpha: Any, beta: Any, c: Any, dtype: str) -> None:
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, (int, float, complex, np.number)) or isinstance(v, bool):
            raise UnsupportedError(f"{name} must be a Python or NumPy scalar, not {type(v).__name__}")
        if np.iscomplexobj(v) and not dtype.startswith("complex") and complex(v).imag != 0:
            raise UnsupportedError(f"complex {name}={v} needs complex operands; got {dtype}")
    if c is None and beta != 0:
        raise ShapeError(f"beta={beta} scales c, but no c was given; pass c (the result's shape) or beta=0")


def _scalar(v: Any, dtype: str) -> Any:
    """alpha / beta as a Python number of the operands' kind (a real ``2+0j`` becomes ``2.0``)."""
    return complex(v) if dtype.startswith("complex") else float(complex(v).real)


def _promote(x: Any, name: str, shape: _MatmulShape) -> Any:
    """Vectors as matrices: a (K,) -> (1, K), b (K,) -> (K, 1); c and bias get the same extra axis."""
    if x is None:
        return None
    if name == "a":
        return x.reshape(1, -1) if shape.a_vec else x
    if name == "b":
        return x.reshape(-1, 1) if shape.b_vec else x
    if shape.b_vec:
        x = x[..., None]
    if shape.a_vec and x.ndim >= 1:
        x = x[..., None, :]
    return x


def _bias_kind(bias: Any, shape: _MatmulShape) -> str:
    """``"row"`` (one value per column of D: shape (N,) or (1, N)) or ``"col"`` (per row: (M, 1)).

    Batch dimensions, when present, must be the result's.  Raises ShapeError when ``bias`` does not
    broadcast to the result, UnsupportedError when it broadcasts but is not a vector.
    """
    bshape = tuple(bias.shape)
    if shape.b_vec:
        p = (*bshape, 1)
    elif len(bshape) == 1 or (shape.a_vec and len(bshape) >= 1):
        p = (*bshape[:-1], 1, bshape[-1])
    else:
        p = bshape
    if len(p) < 2:
        raise UnsupportedError(
            f"a scalar bias is not supported; give a vector of length {shape.n} (or {shape.m}, 1)"
        )
    try:
        ok = tuple(np.broadcast_shapes(p, shape.d_shape)) == shape.d_shape
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"bias of shape {bshape} does not broadcast to the result's shape {shape.out_shape}")
    tail, lead = p[-2:], p[:-2]
    kind = "row" if tail == (1, shape.n) else ("col" if tail == (shape.m, 1) else None)
    if kind is None or not _batch_fits(lead, shape.batch):
        raise UnsupportedError(
            f"bias of shape {bshape} is not supported; supported: ({shape.n},) or (1, {shape.n}) for one value "
            f"per column, ({shape.m}, 1) for one per row, optionally with the batch dimensions {shape.batch}; "
            "add a full matrix through c and beta instead"
        )
    return kind


# -------------------------------------------------------------------------------------- Matmul


class Matmul(StatefulOperation):
    """``D = epilog(alpha * a @ b + beta * c + bias)``, planned once and executed many times.

    >>> mm = Matmul(a, b, c, alpha=1.5, beta=0.5)        # checks shapes, dtypes, devices
    >>> mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias})
    >>> mm.autotune(iterations=10)                      # GPU: time the heuristic's candidates
    >>> d = mm.execute()
    >>> mm.reset_operands(a=a2); d2 = mm.execute()
    >>> mm.save_plan("mm.json")                          # another process: Matmul(...).load_plan("mm.json")

    On the GPU it is one cuBLASLt call; on the CPU a BLAS gemm (2-D) or ``np.matmul`` followed by
    in-place epilogues.  GELU is the tanh form, as cuBLASLt's.  D is row-major unless the bias is
    a column ``(M, 1)`` or c is column-major.
    """

    kind = "dense.matmul"

    def __init__(
        self,
        a: Any,
        b: Any,
        c: Any = None,
        *,
        alpha: Any = 1,
        beta: Any = 0,
        execution: Any = None,
        options: Any = None,
    ) -> None:
        super().__init__()
        self.options = _options(MatmulOptions, options)
        a, b, c = _arraylike(a), _arraylike(b), _arraylike(c)
        self._execution_given = execution is not None
        self._place = _placement({"a": a, "b": b, "c": c}, execution)
        self._shape = _matmul_shape(a, b, c, self._place.space)
        _check_scalars(alpha, beta, c, self._shape.dtype)
        self._alpha, self._beta = _scalar(alpha, self._shape.dtype), _scalar(beta, self._shape.dtype)
        self._user_shapes = {
            "a": tuple(a.shape),
            "b": tuple(b.shape),
            "c": None if c is None else tuple(c.shape),
        }
        self._ops: dict[str, Any] = {
            n: _promote(self._place.move(x, _log), n, self._shape) for n, x in zip("abc", (a, b, c))
        }
        self._runner: Any = None
        self._epilog = "none"
        self._bias_shape: tuple[int, ...] | None = None
        self._bias_kind: str | None = None
        _log.debug(
            "matmul %s: a %s, b %s, c %s -> %s",
            self._shape.dtype,
            a.shape,
            b.shape,
            self._user_shapes["c"],
            self._shape.out_shape,
        )

    # ------------------------------------------------------------------------------------- info

    @property
    def route(self) -> str:
        """``"cublasLt"``, ``"blas.gemm"`` or ``"numpy.matmul"`` once planned; ``"unplanned"`` before."""
        return "unplanned" if self._runner is None else str(self._runner.route)

    @property
    def execution_space(self) -> ExecutionSpace:
        return self._place.space

    # ------------------------------------------------------------------------------------- plan

    def plan(
        self, epilog: Any = None, epilog_inputs: Mapping[str, Any] | None = None, *, _algorithm: Any = None
    ) -> None:
        """Choose the route and, on the GPU, the cuBLASLt algorithm (the heuristic's first)."""
        self._require("plan")
        name = _epilog_name(epilog)
        inputs = dict(epilog_inputs or {})
        if set(inputs) - {"bias"}:
            raise UnsupportedError(
                f"unknown epilog_inputs {sorted(set(inputs) - {'bias'})}; supported: 'bias'"
            )
        bias = _arraylike(inputs.get("bias"))
        if "bias" in name and bias is None:
            raise ShapeError(f"epilog {name!r} needs epilog_inputs={{'bias': vector}}")
        if bias is not None and "bias" not in name:
            raise UnsupportedError(
                f"a bias was given but epilog {name!r} takes none; use '{name}_bias' or 'bias'"
            )
        if name != "none" and self._shape.dtype.startswith("complex"):
            raise UnsupportedError(
                f"epilog {name!r} needs a real dtype, got {self._shape.dtype}; supported: float16, bfloat16, "
                "float32, float64"
            )
        kind = None
        if bias is not None:
            if not self._execution_given:
                self._place.check("bias", bias)
            if _dtype_name(bias) != self._shape.dtype:
                raise UnsupportedError(
                    f"bias is {_dtype_name(bias)} but the operands are {self._shape.dtype}; give it their dtype"
                )
            kind = _bias_kind(bias, self._shape)
            self._ops["bias"] = _promote(self._place.move(bias, _log), "bias", self._shape)
            self._bias_shape = tuple(bias.shape)
        else:
            self._ops["bias"] = None
            self._bias_shape = None
        if self._runner is not None and hasattr(self._runner, "free"):
            self._runner.free()
        self._epilog, self._bias_kind = name, kind
        self._runner = self._make_runner(_algorithm)
        self._mark("plan", invalidates=("autotune",))
        _log.info("dense matmul route: %s (epilog %s)", self._runner.route, name)

    def _make_runner(self, algorithm: Any) -> Any:
        """The runner of the route the planner picks for this device and shape (see _build_*)."""
        from ust.plan.planner import choose
        from ust.plan.routes import lookup

        s = self._shape
        problem = dense_problem("dense_matmul", self._place.space, s.dtype, empty=0 in (s.m, s.n, s.k))
        return lookup("dense_matmul", choose(problem).route).build(self, algorithm)

    def autotune(
        self, iterations: int = 10, *, algorithms: int = 32, search: str = "heuristic", stream: Any = None
    ) -> list[float] | None:
        """GPU: ask cuBLASLt's heuristic for up to ``algorithms`` candidates, time each ``iterations``
        times on the real operands, keep the fastest.

        ``search="exhaustive"`` also tries every configuration cuBLASLt accepts for the problem
        (algorithm ids x tiles x stages x swizzling x custom options), screened with one call
        each; worth its cost for long-running problems, where the heuristic's model can miss
        the fastest tile.  Returns the milliseconds per call of every candidate (None on the
        CPU: one route, nothing to tune).
        """
        from ust.backends.cuda.cublaslt import SEARCHES  # the binding's pure half: loads no library

        self._require("autotune", "plan")
        if iterations < 1:
            raise UnsupportedError(f"iterations must be >= 1, not {iterations}")
        if search not in SEARCHES:
            raise UnsupportedError(f"search must be one of {', '.join(SEARCHES)}, not {search!r}")
        times = None
        if self._runner.route == "cublasLt":
            times = self._runner.autotune(
                self._alpha, self._beta, self._place.stream(stream), iterations, algorithms, search
            )
        else:
            _log.info("autotune: the CPU route (%s) has no algorithm choice", self._runner.route)
        self._mark("autotune")
        return times

    # ---------------------------------------------------------------------------------- execute

    def _execute(self, stream: Any = None) -> Any:  # type: ignore[override]
        if self._runner.route == "cublasLt":
            d = self._runner.execute(self._alpha, self._beta, self._place.stream(stream))
        else:
            ops = self._ops
            d = self._runner.run(ops["a"], ops["b"], ops["c"], self._alpha, self._beta, ops["bias"])
        if d.shape != self._shape.out_shape:
            d = d.reshape(self._shape.out_shape)
        return self._place.back(d)

    # ----------------------------------------------------------------------------- reset operands

    def _reset_operands(  # type: ignore[override]
        self,
        a: Any = None,
        b: Any = None,
        c: Any = None,
        alpha: Any = None,
        beta: Any = None,
        epilog_inputs: Mapping[str, Any] | None = None,
    ) -> None:
        new = {"a": _arraylike(a), "b": _arraylike(b), "c": _arraylike(c)}
        if epilog_inputs:
            if set(epilog_inputs) - {"bias"}:
                raise UnsupportedError("epilog_inputs takes only 'bias'")
            if self._bias_shape is None:
                raise UnsupportedError("the plan has no bias; plan again with a bias epilog")
            new["bias"] = _arraylike(epilog_inputs["bias"])
        shapes = {**self._user_shapes, "bias": self._bias_shape}
        for name, x in new.items():
            if x is None:
                continue
            if shapes[name] is None:
                raise UnsupportedError(f"{name} was not given at construction; create a new Matmul with it")
            if tuple(x.shape) != shapes[name] or _dtype_name(x) != self._shape.dtype:
                raise ShapeError(
                    f"new {name} is {_dtype_name(x)} {tuple(x.shape)}, but the plan is for "
                    f"{self._shape.dtype} {shapes[name]}"
                )
            if operand_package(x) != self._place.package:
                raise UnsupportedError(
                    f"new {name} is a {operand_package(x)} array but the operands were {self._place.package}"
                )
            self._place.check(name, x)
        _check_scalars(
            self._alpha if alpha is None else alpha,
            self._beta if beta is None else beta,
            self._ops["c"],
            self._shape.dtype,
        )
        moved = {
            n: _promote(self._place.move(x, _log), n, self._shape) for n, x in new.items() if x is not None
        }
        if self._runner is not None and self._runner.route == "cublasLt" and moved:
            self._runner.bind(checked=True, **moved)
        self._ops.update(moved)
        if alpha is not None:
            self._alpha = _scalar(alpha, self._shape.dtype)
        if beta is not None:
            self._beta = _scalar(beta, self._shape.dtype)

    def reset_operands_unchecked(
        self,
        a: Any = None,
        b: Any = None,
        c: Any = None,
        alpha: Any = None,
        beta: Any = None,
        epilog_inputs: Mapping[str, Any] | None = None,
    ) -> None:
        """The fast path of :meth:`reset_operands`: no checks, no logging (same shapes, dtypes, layouts)."""
        new = {"a": a, "b": b, "c": c, "bias": None if not epilog_inputs else epilog_inputs.get("bias")}
        place, shape = self._place, self._shape
        moved = {
            n: _promote(place.move(x, _log) if place.moves else x, n, shape)
            for n, x in new.items()
            if x is not None
        }
        if moved:
            if self._runner is not None and self._runner.route == "cublasLt":
                self._runner.bind(checked=False, **moved)
            self._ops.update(moved)
        if alpha is not None:
            self._alpha = _scalar(alpha, self._shape.dtype)
        if beta is not None:
            self._beta = _scalar(beta, self._shape.dtype)

    def _free(self) -> None:
        if self._runner is not None and hasattr(self._runner, "free"):
            self._runner.free()
        self._runner = None
        self._ops = {}

    # ------------------------------------------------------------------------------ saved plans

    def _key(self, epilog: str) -> dict[str, Any]:
        return {
            "dtype": self._shape.dtype,
            "a": list(self._user_shapes["a"] or ()),
            "b": list(self._user_shapes["b"] or ()),
            "c": None if self._user_shapes["c"] is None else list(self._user_shapes["c"]),
            "epilog": epilog,
            "space": self._place.space.kind,
        }

    def _plan_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "route": self._runner.route,
            "epilog": self._epilog,
            "bias": None if self._bias_shape is None else list(self._bias_shape),
            "key": self._key(self._epilog),
        }
        if self._runner.route == "cublasLt":
            payload.update(self._runner.payload())
            payload["algorithm"] = encode_array(self._runner.lt.algorithm_data())
        elif self._runner.route != "empty":
            payload["order"] = self._runner.order
        return payload

    def _plan_space(self) -> ExecutionSpace:
        return self._place.space

    def _plan_libraries(self) -> dict[str, Any]:
        """cuBLASLt beside the stateful base's NumPy / SciPy / CuPy / CUDA runtime versions."""
        if self._place.space.is_cuda:
            from ust.backends.cuda.cublaslt import library_version

            return {"cublasLt": library_version}
        return {}

    def load_plan(self, path: str | os.PathLike[str], epilog_inputs: Mapping[str, Any] | None = None) -> bool:
        """Plan from a file written by :meth:`save_plan`, skipping the algorithm search.

        Returns True when the saved algorithm was used.  Returns False, after a WARNING that says
        why, when the object planned afresh with the saved epilog instead: the file was made
        elsewhere (other device or library version), its contents are damaged (fields of the
        wrong type, missing or extra keys, an unknown route, an algorithm array that does not
        decode), it was made for other operands or bias, or cuBLASLt refuses the saved algorithm
        for these operands.  A file that is no saved dense.matmul plan, or whose epilog cannot be
        read (there is nothing to plan afresh with), raises
        :class:`~ust.runtime.stateful.PlanFileError`.  See :mod:`ust.runtime.stateful`.
        """
        self._require("load a plan")
        where = os.fspath(path)
        epilog = _saved_epilog(self.read_plan_document(path), where)
        bias = None if not epilog_inputs else epilog_inputs.get("bias")
        bias_shape = None if bias is None or not hasattr(bias, "shape") else [int(n) for n in bias.shape]
        saved = self._checked_plan(path, lambda plan, w: self._saved_matmul(plan, w, bias_shape))
        if saved is None:
            self.plan(epilog, epilog_inputs)
            return False
        try:
            self.plan(epilog, epilog_inputs, _algorithm=saved["algorithm"])
        except UstError as exc:
            if saved["algorithm"] is None:
                raise  # nothing of the file was used: the operands themselves are the problem
            _log.warning(
                "the saved plan %s: cuBLASLt refuses its algorithm here (%s); planning afresh", where, exc
            )
            self.plan(epilog, epilog_inputs)
            return False
        if self._runner.route == "cublasLt" and self._runner.problem.to_dict() != saved["problem"]:
            _log.warning(
                "the saved plan %s describes another cuBLASLt problem than these operands' layouts; "
                "planning afresh",
                where,
            )
            self.plan(epilog, epilog_inputs)
            return False
        _log.info("loaded the %s plan (route %s) from %s", self.kind, self.route, where)
        return True

    def _saved_matmul(self, plan: dict[str, Any], where: str, bias_shape: list[int] | None) -> dict[str, Any]:
        """The saved algorithm and cuBLASLt problem, every field checked; PlanFileError if unusable."""
        common: dict[str, Any] = {"route": str, "epilog": str, "bias": (type(None), list), "key": dict}
        route = plan.get("route")
        extra = _MATMUL_PLAN_FIELDS.get(route) if isinstance(route, str) else None
        if extra is None:
            raise PlanFileError(
                f"{where} is damaged: route {_cut(repr(route))} is not one of {', '.join(_MATMUL_PLAN_FIELDS)}"
            )
        plan = check_plan_fields(plan, {**common, **extra}, where=where)
        now = self._key(plan["epilog"])
        if plan["key"] != now:
            raise PlanFileError(
                f"{where} was made for {_cut(repr(plan['key']), 200)}, not for these operands ({now})"
            )
        if plan["bias"] != bias_shape:
            raise PlanFileError(
                f"{where} was made for a bias of shape {_cut(repr(plan['bias']))}, not {bias_shape}"
            )
        if route in ("blas.gemm", "numpy.matmul") and plan["order"] not in ("C", "F"):
            raise PlanFileError(
                f"{where} is damaged: 'order' must be 'C' or 'F', not {_cut(repr(plan['order']))}"
            )
        algorithm = None
        if route == "cublasLt":
            algorithm = decode_array(plan["algorithm"], where=where)
            if algorithm.dtype != np.uint64 or algorithm.shape != (8,):
                raise PlanFileError(
                    f"{where} is damaged: the cuBLASLt algorithm must be 8 uint64, not {algorithm.dtype} "
                    f"{algorithm.shape}"
                )
        return {"algorithm": algorithm, "problem": plan.get("problem")}


#: Route-specific keys of a saved dense.matmul plan (beside route, epilog, bias, key).
_MATMUL_PLAN_FIELDS: dict[str, dict[str, Any]] = {
    "cublasLt": {"problem": dict, "workspace_size": int, "algorithm": dict},
    "blas.gemm": {"order": str},
    "numpy.matmul": {"order": str},
    "empty": {},
}


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _saved_epilog(doc: dict[str, Any], where: str) -> str:
    """The epilog a saved dense.matmul plan names: what planning afresh needs (PlanFileError if unreadable)."""
    plan = doc.get("plan")
    epilog = plan.get("epilog") if isinstance(plan, dict) else None
    name = None
    if isinstance(epilog, str) and len(epilog) <= 40:
        try:
            name = _epilog_name(epilog)
        except UnsupportedError:
            name = None
    if name is None or name != epilog:
        raise PlanFileError(
            f"{where} is damaged: its epilog {_cut(repr(epilog))} is not one of {', '.join(EPILOGS)}, "
            "so there is nothing to plan with"
        )
    return name


class _EmptyMatmul:
    """A GPU matmul with an empty dimension (cuBLASLt takes none): ``beta * C + bias``, epilogue."""

    route = "empty"

    def __init__(self, xp: Any, d_shape: tuple[int, ...], dtype: str, epilog: str) -> None:
        self.xp, self.d_shape, self.dtype, self.epilog = xp, d_shape, dtype, epilog

    def run(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, bias: Any) -> Any:
        from ust.backends.cpu.dense import apply_epilogue

        d = self.xp.zeros(self.d_shape, dtype=self.dtype)
        if c is not None and beta != 0:
            d += beta * c
        if self.epilog != "none" and d.size:
            apply_epilogue(d, self.epilog, bias, self.xp)
        return d


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: Any = 1,
    beta: Any = 0,
    epilog: Any = None,
    epilog_inputs: Mapping[str, Any] | None = None,
    execution: Any = None,
    options: Any = None,
    stream: Any = None,
) -> Any:
    """``epilog(alpha * a @ b + beta * c + bias)`` in one call (see :class:`Matmul`).

    ``epilog``: None, "relu", "gelu", "bias", "relu_bias", "gelu_bias" (also "relu+bias");
    ``epilog_inputs={"bias": v}`` with v of shape (N,) (per column), (M, 1) (per row), or with the
    batch dimensions.  NumPy operands run on the CPU, CuPy on the GPU; ``execution="cuda"`` or
    ``"cpu"`` moves them and the result comes back in the operands' package.
    """
    with Matmul(a, b, c, alpha=alpha, beta=beta, execution=execution, options=options) as mm:
        mm.plan(epilog=epilog, epilog_inputs=epilog_inputs)
        return mm.execute(stream=stream)


# ------------------------------------------------------------------------------------------- FFT

#: The transforms, as scipy.fft names them, with the names of their size and axes arguments:
#: ``n`` / ``axis`` (one axis) or ``s`` / ``axes`` (several).  Drives the one-shot functions
#: (:func:`fft`, :func:`ifft`, ...), :class:`FFT`'s ``kind`` and the argument checks.
_FFT_ARGUMENTS: dict[str, tuple[str, str]] = {
    "fft": ("n", "axis"),
    "ifft": ("n", "axis"),
    "rfft": ("n", "axis"),
    "irfft": ("n", "axis"),
    "fftn": ("s", "axes"),
    "ifftn": ("s", "axes"),
}
FFT_KIND_NAMES = tuple(_FFT_ARGUMENTS)
_FFT_ND = tuple(k for k, (size, _) in _FFT_ARGUMENTS.items() if size == "s")
_FFT_INVERSE = ("ifft", "irfft", "ifftn")


def _fft_args(kind: str, x: Any, n: Any, axes: Any, norm: Any) -> tuple[Any, Any]:
    """Validate a transform's arguments; return ``(n, axes)`` normalised (axes non-negative)."""
    if kind not in FFT_KIND_NAMES:
        raise UnsupportedError(f"unknown FFT kind {kind!r}; supported: {', '.join(FFT_KIND_NAMES)}")
    dtype = _dtype_name(x)
    if dtype not in FFT_DTYPES:
        raise UnsupportedError(
            f"FFT of {dtype} is not supported; supported: {', '.join(FFT_DTYPES)} (convert with x.astype(...))"
        )
    if kind == "rfft" and dtype.startswith("complex"):
        raise UnsupportedError(f"rfft takes real input (float32 or float64), got {dtype}; use fft")
    if norm not in _NORMS:
        raise UnsupportedError(f"unknown norm {norm!r}; supported: 'backward', 'ortho', 'forward'")
    ndim = len(x.shape)
    if ndim == 0:
        raise ShapeError("FFT needs an array of at least 1 dimension, got a scalar")

    def axis_of(ax: Any) -> int:
        if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)) or not -ndim <= ax < ndim:
            raise ShapeError(f"axis {ax!r} is out of range for an array of {ndim} dimension(s)")
        return int(ax) % ndim

    def length(v: Any, what: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ShapeError(f"{what} must be a positive int, not {v!r}")
        return int(v)

    if kind not in _FFT_ND:
        ax = axis_of(-1 if axes is None else axes)
        if n is not None:
            n = length(n, "n")
        elif kind == "irfft" and 2 * (x.shape[ax] - 1) < 1:
            raise ShapeError(f"irfft of {x.shape[ax]} point(s) along axis {ax} has no output; pass n")
        elif x.shape[ax] < 1:
            raise ShapeError(f"axis {ax} has no points to transform")
        return n, ax
    if axes is None:
        axes = tuple(range(ndim)) if n is None else tuple(range(ndim - len(n), ndim))
    axes_t = tuple(axis_of(ax) for ax in (axes if isinstance(axes, (tuple, list)) else (axes,)))
    if len(set(axes_t)) != len(axes_t):
        raise ShapeError(f"axes {axes} repeat an axis")
    if n is not None:
        n = tuple(length(v, "each entry of s") for v in n)
        if len(n) != len(axes_t):
            raise ShapeError(f"s {n} and axes {axes_t} have different lengths")
    elif any(x.shape[ax] < 1 for ax in axes_t):
        raise ShapeError(f"an axis among {axes_t} has no points to transform")
    return n, axes_t


def _cpu_epilog(y: np.ndarray, epilog: Any, args: tuple[Any, ...]) -> Any:
    """A ufunc runs in place on the output (NumPy's twin of a CuPy one); other callables as they are."""
    if type(epilog).__name__ == "ufunc":
        getattr(np, epilog.__name__)(y, *args, out=y)
        return y
    return epilog(y, *args)


def _workers(options: FFTOptions) -> int:
    return -1 if options.workers is None else options.workers


def _one_shot_fft(
    kind: str,
    x: Any,
    n: Any,
    axes: Any,
    norm: Any,
    callbacks: dict[str, Any],
    execution: Any,
    options: Any,
) -> Any:
    x = _arraylike(x)
    n, axes = _fft_args(kind, x, n, axes, norm)
    _options(FFTOptions, options)  # checked before any work, whichever path runs
    if not any(v is not None for k, v in callbacks.items() if k != "epilog_args"):
        if callbacks["epilog_args"]:
            raise UnsupportedError("epilog_args were given without an epilog")
        if execution is None and operand_package(x) == "cupy":
            # the plain GPU call: nothing moves, so skip the placement bookkeeping (one-shot cost is
            # host time before cuFFT starts, and CuPy's own call is the yardstick)
            from ust.backends.cuda import cufft

            space = operand_space(x)
            log_placement(_log, space, space)
            with x.device:
                return cufft.one_shot(kind, x, n, axes, norm)
    elif _whole_array_epilog_only(callbacks):  # ust's older epilog(y, *args): no plan to keep
        return _one_shot_with_array_epilog(kind, x, n, axes, norm, callbacks, execution, options)
    with FFT(x, kind, n=n, axes=axes, norm=norm, execution=execution, options=options) as f:
        f.plan(**callbacks)
        return f.execute()


def _whole_array_epilog_only(callbacks: Mapping[str, Any]) -> bool:
    from ust.api.fft_callbacks import is_whole_array_epilog

    return callbacks["prolog"] is None and is_whole_array_epilog(callbacks["epilog"])


def _one_shot_with_array_epilog(
    kind: str,
    x: Any,
    n: Any,
    axes: Any,
    norm: Any,
    callbacks: Mapping[str, Any],
    execution: Any,
    options: Any,
) -> Any:
    """The transform, then ``epilog(y, *epilog_args)`` on the whole output (a ufunc in place)."""
    epilog, args = callbacks["epilog"], tuple(callbacks["epilog_args"] or ())
    place = _placement({"x": x}, execution)
    xs = place.move(x, _log)
    args = tuple(place.move(v, _log) if hasattr(v, "shape") else v for v in args)
    if place.space.is_cuda:
        from ust.backends.cuda import cufft

        with import_cupy().cuda.Device(place.device_id):
            y = cufft.apply_epilog(cufft.one_shot(kind, xs, n, axes, norm), epilog, args)
    else:
        from ust.backends.cpu import dense as cpu

        y = _cpu_epilog(
            cpu.fft(kind, xs, n, axes, norm, _workers(_options(FFTOptions, options))), epilog, args
        )
    return place.back(y)


def _one_shot(kind: str) -> Callable[..., Any]:
    """The one-shot function of transform ``kind`` (scipy.fft's signature; see :data:`_FFT_ARGUMENTS`)."""
    if _FFT_ARGUMENTS[kind] == ("n", "axis"):

        def transform(
            x: Any,
            n: Any = None,
            axis: int = -1,
            norm: Any = None,
            *,
            prolog: Any = None,
            epilog: Any = None,
            params: Any = None,
            epilog_args: Any = (),
            execution: Any = None,
            options: Any = None,
        ) -> Any:
            cbs = {"prolog": prolog, "epilog": epilog, "params": params, "epilog_args": epilog_args}
            return _one_shot_fft(kind, x, n, axis, norm, cbs, execution, options)

    else:

        def transform(  # type: ignore[misc]
            x: Any,
            s: Any = None,
            axes: Any = None,
            norm: Any = None,
            *,
            prolog: Any = None,
            epilog: Any = None,
            params: Any = None,
            epilog_args: Any = (),
            execution: Any = None,
            options: Any = None,
        ) -> Any:
            cbs = {"prolog": prolog, "epilog": epilog, "params": params, "epilog_args": epilog_args}
            return _one_shot_fft(kind, x, s, axes, norm, cbs, execution, options)

    transform.__name__ = transform.__qualname__ = kind
    transform.__doc__ = (
        f"scipy.fft.{kind} on NumPy input (worker threads: options={{'workers': N}}), cuFFT on CuPy input.\n\n"
        "``prolog=`` / ``epilog=``: expression text over the element ``v``, its index ``k`` (fftn: ``k0, k1,\n"
        "...``), signed index ``f``, lengths ``n`` / ``N`` and ``params`` (scalars by name, arrays as ``h[k]``),\n"
        "e.g. ``epilog='v * exp(-(f * f) / (2 * sigma * sigma))', params={'sigma': 3.0}``; or a Python\n"
        "function in nvmath-python's callback convention (``params``: its info array).  On the GPU they\n"
        "are fused into cuFFT as LTO callbacks where possible (see the user guide).  Any other\n"
        "callable ``epilog(y, *epilog_args)`` runs on the whole output in one extra pass.  ``execution=``\n"
        "moves the data as elsewhere in ust."
    )
    return transform


fft = _one_shot("fft")
ifft = _one_shot("ifft")
rfft = _one_shot("rfft")
irfft = _one_shot("irfft")
fftn = _one_shot("fftn")
ifftn = _one_shot("ifftn")


class _CpuFFT:
    """scipy.fft keeps its own plan cache; the CPU 'plan' is the checked arguments and the thread count."""

    route = "scipy.fft"

    def __init__(self, kind: str, n: Any, axes: Any, norm: Any, workers: int) -> None:
        self.kind, self.n, self.axes, self.norm, self.workers = kind, n, axes, norm, workers

    def execute(self, x: Any) -> Any:
        from ust.backends.cpu import dense as cpu

        return cpu.fft(self.kind, x, self.n, self.axes, self.norm, self.workers)

    def run(self, x: Any, epilog: Any, args: tuple[Any, ...], stream: int | None) -> Any:
        """The transform of ``x`` with ``epilog`` applied (``stream``: unused on the CPU)."""
        y = self.execute(x)
        return y if epilog is None else _cpu_epilog(y, epilog, args)

    def payload(self) -> dict[str, Any]:
        """What a saved plan records of this runner."""
        return {"workers": self.workers}


class _CpuCallbackFFT(_CpuFFT):
    """scipy.fft with the prologue / epilogue as one array program before / after it."""

    route = "scipy.fft+pass"

    def __init__(self, kind: str, n: Any, axes: Any, norm: Any, workers: int, cbs: Any) -> None:
        super().__init__(kind, n, axes, norm, workers)
        self.cbs = cbs
        for phase, c in cbs.phases():
            if hasattr(c, "trial"):
                c.trial(np, cbs.geo.value_dtype(phase))

    def run(self, x: Any, epilog: Any, args: tuple[Any, ...], stream: int | None) -> Any:
        from ust.api.fft_callbacks import fit

        cbs, geo = self.cbs, self.cbs.geo
        if cbs.prolog is not None:
            x = cbs.apply("prolog", fit(np, x, geo.in_shape, geo.in_dtype), np)
        y = self.execute(x)
        if cbs.epilog is not None:
            y = cbs.apply("epilog", y, np)
        return y if epilog is None else _cpu_epilog(y, epilog, args)


class FFT(StatefulOperation):
    """One transform planned once and executed many times: ``FFT(x, "rfft").plan(); y = fft.execute()``.

    ``kind`` is one of fft, ifft, rfft, irfft (``n``: int, ``axes``: one axis, default -1) or fftn,
    ifftn (``n``: scipy's ``s`` tuple, ``axes``: a tuple).  On the GPU the object keeps its cuFFT plan
    (called directly for 1-D transforms of contiguous data); on the CPU scipy.fft runs with
    ``options={"workers": N}`` threads.  ``plan(prolog=..., epilog=..., params={...})`` adds
    callbacks (expression text or nvmath-style Python functions; see the user guide),
    fused into cuFFT as LTO callbacks on the GPU where possible; ``plan(epilog=f,
    epilog_args=(g,))`` with any other callable applies ``f(y, g)`` to the output in one extra pass.
    """

    kind = "dense.fft"

    def __init__(
        self,
        x: Any,
        kind: str = "fft",
        *,
        n: Any = None,
        axes: Any = None,
        norm: Any = None,
        execution: Any = None,
        options: Any = None,
    ) -> None:
        super().__init__()
        self.options = _options(FFTOptions, options)
        x = _arraylike(x)
        self._transform = kind
        self._n, self._axes = _fft_args(kind, x, n, axes, norm)
        self._norm = norm
        self._place = _placement({"x": x}, execution)
        self._shape, self._dtype = tuple(x.shape), _dtype_name(x)
        self._x = self._place.move(x, _log)
        self._runner: Any = None
        self._epilog: Any = None
        self._epilog_args: tuple[Any, ...] = ()
        self._cbs: Any = None
        self._fusion: tuple[bool, str] = (False, "")

    @property
    def route(self) -> str:
        return "unplanned" if self._runner is None else str(self._runner.route)

    def _callbacks(self, prolog: Any, epilog: Any, params: Any, epilog_args: Any) -> Any:
        """The checked callbacks (:func:`ust.api.fft_callbacks.build_callbacks`): errors before any work."""
        from ust.api.fft_callbacks import build_callbacks, geometry

        geo = geometry(self._transform, self._shape, self._dtype, self._n, self._axes, _FFT_ND)
        return build_callbacks(geo, prolog, epilog, params, epilog_args)

    def _problem(self, cbs: Any) -> Any:
        from ust.api.fft_callbacks import fusion, norm_scale

        self._fusion = (False, "")
        if cbs.any and self._place.space.is_cuda:
            scale = norm_scale(self._transform, self._norm, cbs.geo.sizes, _FFT_INVERSE)
            self._fusion = fusion(cbs, scale, self.options.callbacks)
        return fft_problem(self._place.space, self._dtype, callbacks=cbs.any, fusable=self._fusion[0])

    def plan(self, prolog: Any = None, epilog: Any = None, params: Any = None, epilog_args: Any = ()) -> None:
        """Create the cuFFT plan (GPU) or fix the scipy.fft call (CPU) with the callbacks checked and
        compiled (``prolog`` / ``epilog``: text or functions, ``params``: their values)."""
        self._require("plan")
        cbs = self._callbacks(prolog, epilog, params, epilog_args)
        self._cbs = cbs.moved(lambda v: self._place.move(v, _log))
        self._epilog = cbs.legacy
        self._epilog_args = self._cbs.legacy_args
        if self._runner is not None and hasattr(self._runner, "free"):
            self._runner.free()
        from ust.plan.planner import choose
        from ust.plan.routes import lookup

        decision = choose(self._problem(cbs))
        self._runner = lookup("fft", decision.route).build(self)
        self._mark("plan")
        _log.info("FFT %s of %s %s: route %s", self._transform, self._dtype, self._shape, self._runner.route)

    def _execute(self, stream: Any = None) -> Any:  # type: ignore[override]
        ptr = None if stream is None else self._place.stream(stream)
        return self._place.back(self._runner.run(self._x, self._epilog, self._epilog_args, ptr))

    def autotune(self, iterations: int = 5) -> dict[str, float]:
        """Time the fused (LTO callbacks) and the separate-pass routes of a GPU transform with
        callbacks on the real operand and keep the faster; returns seconds per call by route.

        Why: a callback changes which kernels cuFFT runs, and those are not always faster than its
        plain kernels plus one elementwise pass (on the H200 with cuFFT 12.0 even an identity
        callback made large transforms 1.2-3.5x slower; see benchmarks/RESULTS.md).  Elsewhere
        (no callbacks, the CPU, a route that cannot fuse) there is one route and nothing to time.
        """
        self._require("autotune", "plan")
        runner = self._runner
        if not getattr(runner, "fused", False):
            _log.info("FFT autotune: one route (%s), nothing to compare", runner.route)
            return {}
        other = self._separate_runner("autotune measured it")
        timings = {r.route: self._time(r, iterations) for r in (runner, other)}
        keep, drop = (runner, other) if timings[runner.route] <= timings[other.route] else (other, runner)
        drop.free()
        self._runner = keep
        _log.info(
            "FFT autotune: %s; keeping %s",
            ", ".join(f"{k} {1e3 * v:.3f} ms" for k, v in timings.items()), keep.route,
        )  # fmt: skip
        return timings

    def _separate_runner(self, why: str) -> Any:
        """The GPU runner with the callbacks as separate generated passes (no LTO plan)."""
        return _callback_runner(self, False, f"separate passes ({why})")

    def _time(self, runner: Any, iterations: int) -> float:
        from ust.runtime.streams import gpu_seconds_per_call

        def call() -> Any:
            return runner.run(self._x, self._epilog, self._epilog_args, None)

        call()  # warm up
        return gpu_seconds_per_call(call, iterations)

    def _reset_operands(self, x: Any = None) -> None:  # type: ignore[override]
        if x is None:
            return
        x = _arraylike(x)
        if tuple(x.shape) != self._shape or _dtype_name(x) != self._dtype:
            raise ShapeError(
                f"new x is {_dtype_name(x)} {tuple(x.shape)}, but the plan is for {self._dtype} {self._shape}"
            )
        if operand_package(x) != self._place.package:
            raise UnsupportedError(
                f"new x is a {operand_package(x)} array but the plan is for {self._place.package}"
            )
        self._place.check("x", x)
        moved = self._place.move(x, _log)
        direct = self._place.space.is_cuda and self._runner is not None and self._runner.direct is not None
        if direct and not moved.flags.c_contiguous:
            raise ShapeError(
                "new x is not C-contiguous, but the plan calls cuFFT directly on contiguous data"
            )
        self._x = moved

    def reset_operands_unchecked(self, x: Any) -> None:
        """The fast path of :meth:`reset_operands` (same shape, dtype, layout and device; not checked)."""
        self._x = self._place.move(x, _log) if self._place.moves else x

    def _free(self) -> None:
        if self._runner is not None and hasattr(self._runner, "free"):
            self._runner.free()
        self._runner = None
        self._x = None

    def _key(self) -> dict[str, Any]:
        return {
            "kind": self._transform,
            "shape": list(self._shape),
            "dtype": self._dtype,
            "n": self._n if not isinstance(self._n, tuple) else list(self._n),
            "axes": self._axes if not isinstance(self._axes, tuple) else list(self._axes),
            "norm": self._norm,
            "space": self._place.space.kind,
        }

    def _plan_payload(self) -> dict[str, Any]:
        return {"route": self._runner.route, "key": self._key(), **self._runner.payload()}

    def _plan_space(self) -> ExecutionSpace:
        return self._place.space

    def _plan_libraries(self) -> dict[str, Any]:
        """cuFFT beside the stateful base's NumPy / SciPy / CuPy / CUDA runtime versions."""
        if self._place.space.is_cuda:
            return {"cufft": import_cupy("cupy.cuda.cufft").getVersion}
        return {}

    def load_plan(
        self,
        path: str | os.PathLike[str],
        epilog: Any = None,
        epilog_args: Any = (),
        *,
        prolog: Any = None,
        params: Any = None,
    ) -> bool:
        """Check a saved FFT plan against these operands and plan (epilogues are code: pass them again).

        Returns True when the saved plan fits; False, after a WARNING that says why, when the object
        planned afresh: the file was made elsewhere (device, library version), its contents are
        damaged (fields of the wrong type, missing or extra keys), or it was made for another
        input.  A file that is no saved dense.fft plan raises
        :class:`~ust.runtime.stateful.PlanFileError`.  See :mod:`ust.runtime.stateful`.
        """
        self._require("load a plan")
        saved = self._checked_plan(path, self._saved_fft)
        self.plan(prolog=prolog, epilog=epilog, params=params, epilog_args=epilog_args)
        if saved is not None and saved.get("fused") is False and getattr(self._runner, "fused", False):
            self._runner.free()  # autotune chose the separate passes when the plan was saved
            self._runner = self._separate_runner("the saved plan's choice")
        return saved is not None

    def _saved_fft(self, plan: dict[str, Any], where: str) -> dict[str, Any]:
        """The saved FFT plan, every field checked against these operands; PlanFileError if unusable."""
        fields: dict[str, Any] = {"route": str, "key": dict}
        fields.update({"direct": bool} if self._place.space.is_cuda else {"workers": (int, type(None))})
        if plan.get("fused") is not None:
            fields["fused"] = bool
        plan = check_plan_fields(plan, fields, where=where)
        if plan["key"] != self._key():
            raise PlanFileError(
                f"{where} was made for {_cut(repr(plan['key']), 200)}, not for this input ({self._key()})"
            )
        return plan


# ----------------------------------------------------------------------------- the planner's rules
# The "dense_matmul" and "fft" rules (ust.plan.rules) name these routes; Matmul._make_runner and
# FFT.plan ask the planner for the route and call its build.


def dense_problem(op: str, space: ExecutionSpace, dtype: Any, *, empty: bool = False) -> Any:
    """The planner's view of a dense op (``"dense_matmul"`` / ``"fft"``): the device and dtype
    (``empty``: m, n or k is 0)."""
    from ust.plan.rules import Problem

    return Problem(
        op=op,
        device=space.kind,
        format_class="DENSE",
        format_params=(),
        canonical=True,
        dtype=str(dtype),
        index_dtype="int64",
        plain=True,
        max_extent=0 if empty else 1,
    )


@dataclass(frozen=True)
class FFTProblem(Problem):
    """The planner's view of an FFT: a :class:`~ust.plan.rules.Problem` (``epilog``: any prologue or
    epilogue callback) plus whether the GPU can fuse the callbacks into cuFFT."""

    fusable: bool = False


def fft_problem(space: ExecutionSpace, dtype: Any, *, callbacks: bool, fusable: bool) -> FFTProblem:
    return FFTProblem(
        op="fft",
        device=space.kind,
        format_class="DENSE",
        format_params=(),
        canonical=True,
        dtype=str(dtype),
        index_dtype="int64",
        plain=not callbacks,
        max_extent=1,
        epilog=callbacks,
        fusable=fusable,
    )


def fft_explanation(
    x: Any, space: ExecutionSpace, kind: str = "fft", **kwargs: Any
) -> tuple[FFTProblem, list[str]]:
    """The planner's problem and the callback lines of ``ust.explain("fft", x, prolog=..., epilog=...)``
    (``kwargs``: n / s, axis / axes, norm, prolog, epilog, params, epilog_args, options); nothing runs."""
    from ust.api.fft_callbacks import build_callbacks, describe, fusion, geometry, norm_scale

    size_name, axes_name = _FFT_ARGUMENTS.get(kind, ("n", "axis"))
    norm = kwargs.get("norm")
    n, axes = _fft_args(kind, x, kwargs.get(size_name), kwargs.get(axes_name), norm)
    dtype = _dtype_name(x)
    geo = geometry(kind, tuple(x.shape), dtype, n, axes, _FFT_ND)
    cbs = build_callbacks(
        geo, kwargs.get("prolog"), kwargs.get("epilog"), kwargs.get("params"), kwargs.get("epilog_args", ())
    )
    fused: tuple[bool, str] | None = None
    if cbs.any and space.is_cuda:
        mode = _options(FFTOptions, kwargs.get("options")).callbacks
        fused = fusion(cbs, norm_scale(kind, norm, geo.sizes, _FFT_INVERSE), mode)
    problem = fft_problem(space, dtype, callbacks=cbs.any, fusable=bool(fused and fused[0]))
    return problem, describe(cbs, space.is_cuda, fused)


def _build_empty(m: Matmul, algorithm: Any = None) -> Any:
    """GPU, m, n or k is 0: D is C scaled by beta, or zeros (cuBLASLt refuses empty shapes)."""
    return _EmptyMatmul(import_cupy(), m._shape.d_shape, m._shape.dtype, m._epilog)


def _build_cublaslt(m: Matmul, algorithm: Any = None) -> Any:
    """GPU: a cuBLASLt matmul descriptor with the epilogue fused (``algorithm``: a saved one)."""
    from ust.backends.cuda.cublaslt import GpuMatmul

    s, ops = m._shape, m._ops
    return GpuMatmul(
        a=ops["a"],
        b=ops["b"],
        c=ops["c"],
        bias=ops["bias"],
        bias_kind=m._bias_kind,
        mnk=(s.m, s.n, s.k),
        batch=s.batch,
        epilog=m._epilog,
        device_id=m._place.device_id,
        tf32=m.options.tf32,
        workspace_limit=m.options.workspace_limit,
        max_algorithms=m.options.max_algorithms,
        algorithm=algorithm,
    )


def _build_numpy(m: Matmul, algorithm: Any = None) -> Any:
    """CPU: BLAS gemm through SciPy (NumPy's matmul for other dtypes), D in the order the bias wants."""
    from ust.backends.cpu.dense import CpuMatmul
    from ust.backends.cuda.cublaslt import choose_d_order  # pure layout logic; loads no library

    if m.options.tf32:
        _log.info("tf32 has no effect on the CPU")
    s = m._shape
    return CpuMatmul(
        dtype=s.dtype,
        out_shape=s.d_shape,
        k=s.k,
        epilog=m._epilog,
        order=choose_d_order(m._bias_kind, m._ops["c"]),
    )


def _build_cufft(f: FFT) -> Any:
    """GPU: a cuFFT plan for this shape, dtype and axes (called directly for contiguous 1-D data)."""
    from ust.backends.cuda.cufft import GpuFFT

    return GpuFFT(f._transform, f._x, f._n, f._axes, f._norm, f._place.device_id)


def _build_cufft_callbacks(f: FFT) -> Any:
    """GPU: cuFFT with the callbacks linked into its kernels (LTO callbacks), or, where they cannot
    be fused, with one generated elementwise kernel before / after a plain cuFFT call."""
    return _callback_runner(f, *f._fusion)


def _callback_runner(f: FFT, fused: bool, reason: str) -> Any:
    from ust.api.fft_callbacks import GpuCallbackFFT, norm_scale

    scale = norm_scale(f._transform, f._norm, f._cbs.geo.sizes, _FFT_INVERSE)
    return GpuCallbackFFT(
        f._cbs, f._transform, f._n, f._axes, f._norm, f._place.device_id, fused, reason, scale
    )


def _build_scipy_fft_pass(f: FFT) -> Any:
    """CPU: scipy.fft with the callbacks as one array program before / after it."""
    return _CpuCallbackFFT(f._transform, f._n, f._axes, f._norm, _workers(f.options), f._cbs)


def _build_scipy_fft(f: FFT) -> Any:
    """CPU: scipy.fft with the configured worker threads (it keeps its own plan cache)."""
    return _CpuFFT(f._transform, f._n, f._axes, f._norm, _workers(f.options))


def _register_routes() -> None:
    from ust.plan.routes import Route, register

    builds: tuple[tuple[str, str, Callable[..., Any]], ...] = (
        ("dense_matmul", "cublasLt", _build_cublaslt),
        ("dense_matmul", "empty", _build_empty),
        ("dense_matmul", "numpy", _build_numpy),
        ("fft", "cufft", _build_cufft),
        ("fft", "cufft.callbacks", _build_cufft_callbacks),
        ("fft", "cufft+kernel", _build_cufft_callbacks),
        ("fft", "scipy.fft", _build_scipy_fft),
        ("fft", "scipy.fft+pass", _build_scipy_fft_pass),
    )
    for op, name, build in builds:
        register(Route(op, name, build, doc=build.__doc__ or ""))


_register_routes()
