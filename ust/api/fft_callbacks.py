"""FFT prologues and epilogues: what the user passed, checked before any transform, and where it runs.

A callback is either **expression text** over the element ``v``, its index (``k`` / ``k0, k1,
...``), signed index (``f`` / ``f0, ...``), the transform's lengths (``n`` / ``n0, ...``, ``N``)
and named parameters (``params={"sigma": 3.0, "h": h}``, arrays read as ``h[k]``; see
:mod:`ust.codegen.fft_callback`), or a **Python function** in nvmath-python's convention:
``prolog(data_in, offset, info, shared) -> element`` and ``epilog(data_out, offset, element,
info, shared)`` storing ``data_out[offset]``; ``offset`` is the element's flat C-order index in
the transform's input (prologue) or output (epilogue) array and ``info`` is ``params`` when
it is an array (or ``params["info"]``).  Any other callable given as ``epilog`` keeps ust's
older meaning: ``epilog(y, *epilog_args)`` on the whole output, one separate pass.

Semantics (every route computes this): the prologue maps the transform's input *as the
transform sees it* -- cropped or zero-padded to ``n`` / ``s``, a real input of fft / fftn
promoted to complex -- and the epilogue maps its output after ``norm``'s scaling.

Where it runs: on the CPU, one array program before / after scipy.fft (a Python function runs
once on the whole flattened array, vectorised); on the GPU, fused into cuFFT as LTO callbacks
when the transformed axes are the trailing ones (at most 3), cuFFT and NVRTC support LTO
callbacks, and -- for Python functions -- numba-cuda is installed; otherwise one generated
elementwise kernel (a Python function: once on the CuPy array) next to a plain cuFFT call, said
in the log and by ``ust.explain``.  ``options={"callbacks": "fused"}`` makes the lack of fusion
an error (BackendUnavailableError naming what is missing) instead.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ust.codegen.fft_callback import (
    COMPLEX,
    REAL,
    CallbackSite,
    FFTCallback,
    compile_fft_callback,
    evaluate,
    param_specs,
)
from ust.runtime.errors import BackendUnavailableError, InvalidTypeError, UnsupportedError
from ust.runtime.log import get_logger

__all__ = [
    "CALLBACK_MODES",
    "Callbacks",
    "Geometry",
    "GpuCallbackFFT",
    "PyFunction",
    "build_callbacks",
    "describe",
    "fit",
    "fusion",
    "geometry",
    "is_whole_array_epilog",
    "norm_scale",
]

_log = get_logger("dense.fft_callbacks")

#: ``FFTOptions.callbacks``: fuse where possible, insist on fusion, or always run a separate pass.
CALLBACK_MODES = ("auto", "fused", "separate")
#: Positional parameters of nvmath-python's callback convention, by phase.
_ARITY = {"prolog": 4, "epilog": 5}
_C2R, _R2C = ("irfft",), ("rfft",)


#: (kind, geometry, device, dtype) -> why cuFFT refused LTO callbacks for it (asked once a process)
_REFUSED: dict[tuple[Any, ...], str] = {}


@dataclass(frozen=True)
class Geometry:
    """The transform as callbacks see it: axes (user order), logical lengths, array shapes, dtypes."""

    kind: str
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    in_dtype: str
    out_dtype: str
    numbered: bool

    @property
    def single(self) -> bool:
        return self.in_dtype in ("float32", "complex64")

    def site(self, phase: str) -> CallbackSite:
        half = (
            (0,)
            if (phase == "epilog" and self.kind in _R2C) or (phase == "prolog" and self.kind in _C2R)
            else ()
        )
        dtype = self.in_dtype if phase == "prolog" else self.out_dtype
        shape = self.in_shape if phase == "prolog" else self.out_shape
        kind = COMPLEX if dtype.startswith("complex") else REAL
        return CallbackSite(phase, shape, self.axes, self.sizes, half, kind, self.numbered)

    def value_dtype(self, phase: str) -> str:
        return self.in_dtype if phase == "prolog" else self.out_dtype


def geometry(
    kind: str, shape: tuple[int, ...], dtype: str, n: Any, axes: Any, nd_kinds: tuple[str, ...]
) -> Geometry:
    """The geometry of a checked transform (``n``/``axes`` as :func:`ust.api.dense._fft_args` returns them)."""
    single = dtype in ("float32", "complex64")
    cplx, real = ("complex64", "float32") if single else ("complex128", "float64")
    numbered = kind in nd_kinds
    ax = tuple(axes) if numbered else (axes,)
    if numbered:
        sizes = tuple(n) if n is not None else tuple(shape[a] for a in ax)
    elif kind in _C2R:
        sizes = (n if n is not None else 2 * (shape[ax[0]] - 1),)
    else:
        sizes = (n if n is not None else shape[ax[0]],)
    in_len = [s // 2 + 1 if kind in _C2R else s for s in sizes]
    out_len = [s // 2 + 1 if kind in _R2C else s for s in sizes]

    def with_lengths(lengths: list[int]) -> tuple[int, ...]:
        out = list(shape)
        for a, m in zip(ax, lengths):
            out[a] = m
        return tuple(out)

    return Geometry(
        kind,
        ax,
        tuple(sizes),
        with_lengths(in_len),
        with_lengths(out_len),
        real if kind in _R2C else cplx,
        real if kind in _C2R else cplx,
        numbered,
    )


@dataclass
class PyFunction:
    """A Python callback in nvmath-python's convention (``info``: its array, or None)."""

    fn: Any
    phase: str
    info: Any = None

    def run(self, xp: Any, a: Any) -> Any:
        """The function applied to the whole C-contiguous array ``a`` at once (vectorised)."""
        flat = xp.ascontiguousarray(a).reshape(-1)
        offsets = xp.arange(flat.size, dtype=xp.int64)
        res = xp.empty_like(flat)
        if self.phase == "prolog":
            res[...] = self.fn(flat, offsets, self.info, None)
        else:
            self.fn(res, offsets, flat, self.info, None)
        return res.reshape(a.shape)

    def trial(self, xp: Any, dtype: str) -> None:
        """Call the function on one element first, so a broken one fails before any transform."""
        try:
            self.run(xp, xp.zeros(1, dtype=dtype))
        except Exception as exc:
            raise UnsupportedError(
                f"the {self.phase} function {getattr(self.fn, '__name__', self.fn)!r} fails on a trial element "
                f"({type(exc).__name__}: {exc}); it must follow nvmath-python's convention "
                + (
                    "prolog(data_in, offset, info, shared) -> element"
                    if self.phase == "prolog"
                    else "epilog(data_out, offset, element, info, shared)"
                )
                + " and work on arrays of offsets (NumPy / CuPy operations only)"
            ) from None


@dataclass
class Callbacks:
    """The checked prologue / epilogue of one transform, with their parameter values."""

    geo: Geometry
    prolog: FFTCallback | PyFunction | None = None
    epilog: FFTCallback | PyFunction | None = None
    legacy: Any = None  # ust's older whole-array epilogue: legacy(y, *legacy_args)
    legacy_args: tuple[Any, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return self.prolog is not None or self.epilog is not None

    def phases(self) -> list[tuple[str, FFTCallback | PyFunction]]:
        return [(p, c) for p, c in (("prolog", self.prolog), ("epilog", self.epilog)) if c is not None]

    def key(self) -> tuple[Any, ...]:
        """What a compiled plan depends on (not the parameter values: those are read at run time)."""
        parts: list[Any] = [self.geo]
        for phase, c in self.phases():
            if isinstance(c, FFTCallback):
                parts.append((phase, c.text, c.params))
            else:
                info = c.info
                parts.append((phase, id(c.fn), c.fn, None if info is None else (_ptr(info), str(info.dtype))))
        return tuple(parts)

    def moved(self, move: Any) -> Callbacks:
        """The same callbacks with every array (parameters, Python ``info``) moved by ``move``."""
        values = {k: _moved_value(v, move) for k, v in self.values.items()}
        out = Callbacks(self.geo, self.prolog, self.epilog, self.legacy, self.legacy_args, values)
        for phase, c in self.phases():
            if isinstance(c, PyFunction) and c.info is not None:
                setattr(out, phase, PyFunction(c.fn, c.phase, move(c.info)))
        out.legacy_args = tuple(move(v) if hasattr(v, "shape") else v for v in self.legacy_args)
        return out

    # -- array programs (CPU; the GPU's unfused route for Python functions) -------------------------
    def apply(self, phase: str, a: Any, xp: Any) -> Any:
        c = self.prolog if phase == "prolog" else self.epilog
        if c is None:
            return a
        if isinstance(c, FFTCallback):
            return evaluate(c, a, self.values, xp)
        return c.run(xp, a)


def _moved_value(v: Any, move: Any) -> Any:
    """Arrays moved to the execution space; scalars (0-d arrays too) as Python numbers, read once."""
    if hasattr(v, "shape") and len(v.shape) > 0:
        return move(v)
    return v.item() if hasattr(v, "item") else v


def _ptr(a: Any) -> int:
    data = getattr(a, "data", None)
    return int(getattr(data, "ptr", 0) or getattr(getattr(a, "ctypes", None), "data", 0) or id(a))


def arity(fn: Any) -> int | None:
    """Positional parameters of ``fn`` (None when Python cannot tell, e.g. a ufunc)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in sig.parameters.values() if p.kind in kinds)


def is_whole_array_epilog(epilog: Any) -> bool:
    """A callable that is no nvmath-style callback: ust's older ``epilog(y, *epilog_args)``."""
    return (
        epilog is not None
        and not isinstance(epilog, str)
        and callable(epilog)
        and arity(epilog) != _ARITY["epilog"]
    )


def _one(value: Any, phase: str, geo: Geometry, params: Any) -> FFTCallback | PyFunction | None:
    if value is None:
        return None
    if isinstance(value, str):
        if params is not None and not isinstance(params, Mapping):
            raise InvalidTypeError(
                f"a {phase} written as text takes params as a dict of name -> scalar or array, "
                f"not {type(params).__name__}"
            )
        return compile_fft_callback(value, geo.site(phase), param_specs(params))
    if callable(value):
        if arity(value) == _ARITY[phase]:
            info = params.get("info") if isinstance(params, Mapping) else params
            if info is not None and not hasattr(info, "shape"):
                raise InvalidTypeError(
                    f"a Python {phase}'s info (params) must be an array, not {type(info).__name__}"
                )
            return PyFunction(value, phase, info)
        if phase == "prolog":
            raise UnsupportedError(
                f"a prolog function must take 4 arguments (data_in, offset, info, shared), as nvmath-python's "
                f"do; {getattr(value, '__name__', value)!r} takes {arity(value)}"
            )
        return None  # the older whole-array epilogue
    raise InvalidTypeError(
        f"a {phase} must be expression text such as 'v * h[k]' or a function, not {type(value).__name__}"
    )


def build_callbacks(geo: Geometry, prolog: Any, epilog: Any, params: Any, epilog_args: Any) -> Callbacks:
    """Check everything about the callbacks before any transform; raise a ust error naming the problem."""
    pro = _one(prolog, "prolog", geo, params)
    epi = _one(epilog, "epilog", geo, params)
    args = tuple(epilog_args or ())
    legacy = epilog if epilog is not None and epi is None else None
    if args and legacy is None:
        raise UnsupportedError(
            "epilog_args go with a whole-array epilogue epilog(y, *epilog_args); expression text takes "
            "params={...} and an nvmath-style function params=info_array"
        )
    values = (
        dict(params)
        if isinstance(params, Mapping) and any(isinstance(c, FFTCallback) for c in (pro, epi))
        else {}
    )
    return Callbacks(geo, pro, epi, legacy, args, values)


def fit(xp: Any, x: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """``x`` cropped / zero-padded to ``shape`` (scipy.fft's ``n`` / ``s``), as a C-contiguous ``dtype`` array."""
    if tuple(x.shape) == shape:
        return xp.ascontiguousarray(x, dtype=dtype)
    out = xp.zeros(shape, dtype=dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape))
    out[common] = x[common]
    return out


def _has_numba() -> bool:
    """numba-cuda is installed (looked up, not imported: importing it costs a second)."""
    import importlib.util

    try:
        return (
            importlib.util.find_spec("numba") is not None
            and importlib.util.find_spec("numba.cuda") is not None
        )
    except (ImportError, ValueError):
        return False


def fusion(cbs: Callbacks, norm_scale: float, mode: str) -> tuple[bool, str]:
    """Whether the GPU fuses ``cbs`` into cuFFT, and why (or why not); ``mode`` from FFTOptions."""
    geo = cbs.geo
    if mode == "separate":
        return False, "options={'callbacks': 'separate'} asks for a separate kernel"
    ndim, rank = len(geo.in_shape), len(geo.axes)
    reasons = []
    if sorted(geo.axes) != list(range(ndim - rank, ndim)):
        reasons.append(f"the transformed axes {geo.axes} are not the trailing axes of the array")
    if rank > 3:
        reasons.append(f"cuFFT plans at most 3 axes, not {rank}")
    pyfns = [c for _, c in cbs.phases() if isinstance(c, PyFunction)]
    if pyfns:
        if not _has_numba():
            reasons.append(
                'a Python callback needs numba-cuda to be compiled (pip install "ust[fft-callbacks]")'
            )
        if isinstance(cbs.epilog, PyFunction) and norm_scale != 1.0:
            reasons.append(
                "the norm's scaling cannot be folded into a Python epilogue (use norm='forward' / 'backward' as fits)"
            )
    if not reasons:
        from ust.backends.cuda.cufft_callbacks import lto_support

        ok, how = lto_support()
        if not ok:
            reasons.append(how)
        else:
            return True, f"fused into cuFFT's kernels as LTO callbacks ({how})"
    why = "; ".join(reasons)
    if mode == "fused":
        raise BackendUnavailableError(
            f"options={{'callbacks': 'fused'}}: the callbacks cannot be fused: {why}",
            pip_command='pip install "ust[cu13,fft-callbacks]"' if pyfns else "",
        )
    return False, why


def norm_scale(kind: str, norm: Any, sizes: tuple[int, ...], inverse_kinds: tuple[str, ...]) -> float:
    """The factor scipy's ``norm`` applies to a transform of ``prod(sizes)`` points."""
    n = math.prod(sizes)
    norm = norm or "backward"
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "backward") == (kind in inverse_kinds) else 1.0


def describe(cbs: Callbacks, space_is_cuda: bool, fused: tuple[bool, str] | None) -> list[str]:
    """``explain`` lines: each callback, and where it runs."""
    lines = []
    for phase, c in cbs.phases():
        what = (
            f"text {c.text!r}"
            if isinstance(c, FFTCallback)
            else f"Python function {getattr(c.fn, '__name__', c.fn)!r}"
        )
        if not space_is_cuda:
            where = (
                "one array pass " + ("before" if phase == "prolog" else "after") + " scipy.fft (not fused)"
            )
        elif fused is not None and fused[0]:
            where = f"fused: {fused[1]}"
        else:
            why = fused[1] if fused is not None else ""
            where = f"not fused ({why}): one separate elementwise pass next to a plain cuFFT call"
        lines.append(f"{phase}: {what}; {where}")
    if cbs.legacy is not None:
        lines.append(
            "epilog: a whole-array callable, applied after the transform in one extra pass (not fused)"
        )
    return lines


# ------------------------------------------------------------------------------------ the GPU runner


def _device_values(values: Mapping[str, Any], single: bool, cp: Any) -> dict[str, Any]:
    """Array parameters as C-contiguous device arrays in the transform's precision (no copy when they are)."""
    out = {}
    for k, v in values.items():
        if hasattr(v, "shape") and len(v.shape) > 0:
            kind = "c" if str(v.dtype).startswith("complex") else "f"
            dtype = {
                ("c", True): "complex64",
                ("c", False): "complex128",
                ("f", True): "float32",
                ("f", False): "float64",
            }
            v = cp.ascontiguousarray(v, dtype=dtype[(kind, single)])
        out[k] = v
    return out


_DIRECTION = {"fft": -1, "fftn": -1, "rfft": -1, "ifft": 1, "ifftn": 1, "irfft": 1}
#: The norm under which scipy / CuPy leave a transform of that direction unscaled.
_UNSCALED = {-1: "backward", 1: "forward"}
_LAYOUT_KIND = {"rfft": "r2c", "irfft": "c2r"}


class GpuCallbackFFT:
    """A transform with callbacks on one device: fused into cuFFT (LTO callbacks) or as separate passes."""

    direct = None

    def __init__(
        self, cbs: Callbacks, kind: str, n: Any, axes: Any, norm: Any, device_id: int, fused: bool, reason: str,
        scale: float, strict: bool = False,
    ) -> None:  # fmt: skip
        from ust.backends.cuda import cufft_callbacks as cbk
        from ust.runtime.xp import import_cupy

        self.cp = import_cupy()
        self.cbs, self.kind, self.n, self.axes, self.norm = cbs, kind, n, axes, norm
        self.device_id, self.fused, self.reason = device_id, fused, reason
        self.route = "cufft.callbacks" if fused else "cufft+kernel"
        geo = cbs.geo
        dtype = geo.out_dtype if geo.out_dtype.startswith("complex") else geo.in_dtype
        self.plan: Any = None
        self.passes: dict[str, Any] = {}
        self.folded: str | None = None  # the separate pass that applies the norm's factor
        refusal_key = (kind, repr(geo), device_id, dtype)
        with self.cp.cuda.Device(device_id):
            if fused and not strict and refusal_key in _REFUSED:
                # cuFFT refused this plan before in this process: do not pay the JIT link again
                self.fused, self.reason, self.route = False, _REFUSED[refusal_key], "cufft+kernel"
            elif fused:
                try:
                    self._plan_fused(cbk, dtype, scale)
                except (cbk.CufftError, BackendUnavailableError) as exc:
                    if strict:
                        raise
                    _log.warning(
                        "cuFFT did not take the LTO callbacks (%s); running them as separate kernels", exc
                    )
                    why = (
                        "cuFFT refused the LTO callbacks"
                        if isinstance(exc, cbk.CufftError)
                        else ("the callbacks could not be built for cuFFT")
                    )
                    self.fused, self.reason, self.route = False, f"{why}: {exc}", "cufft+kernel"
                    _REFUSED[refusal_key] = self.reason
            if not self.fused:
                _log.info("FFT callbacks not fused (%s): separate elementwise passes", self.reason)
                # the norm's factor rides in a generated pass (the epilogue's, else the prologue's)
                # and cuFFT runs unscaled: no separate scaling pass over memory
                texts = [ph for ph, c in cbs.phases() if isinstance(c, FFTCallback)]
                self.folded = (texts[-1] if texts else None) if scale != 1.0 else None
                for phase, c in cbs.phases():
                    if isinstance(c, FFTCallback):
                        c = c.with_scale(scale) if phase == self.folded else c
                        key = ("pass", c.text, c.params, c.site, c.scale, dtype, device_id)
                        self.passes[phase] = cbk.PLANS.get(
                            key, lambda c=c: cbk.SeparatePass(c, dtype, device_id)
                        )
                    else:
                        c.trial(self.cp, geo.value_dtype(phase))

    def _plan_fused(self, cbk: Any, dtype: str, scale: float) -> None:
        cbs, geo = self.cbs, self.cbs.geo
        pro: tuple[Any, str] | None = None
        epi: tuple[Any, str] | None = None
        if cbs.prolog is not None:
            pro = (cbs.prolog, geo.value_dtype("prolog"))
        if isinstance(cbs.epilog, FFTCallback):
            epi = (cbs.epilog.with_scale(scale), geo.value_dtype("epilog"))
        elif cbs.epilog is not None:
            epi = (cbs.epilog, geo.value_dtype("epilog"))
        elif scale != 1.0:  # the norm's scaling, fused too
            epi = (
                compile_fft_callback("v", geo.site("epilog"), ()).with_scale(scale),
                geo.value_dtype("epilog"),
            )
        order = sorted(range(len(geo.axes)), key=lambda i: geo.axes[i])
        layout = cbk.Layout(
            _LAYOUT_KIND.get(self.kind, "c2c"),
            "single" if geo.single else "double",
            _DIRECTION[self.kind],
            tuple(geo.sizes[i] for i in order),
            geo.in_shape,
            geo.out_shape,
            geo.in_dtype,
            geo.out_dtype,
        )
        key = ("fused", cbs.key(), scale, self.device_id)
        self.plan = cbk.PLANS.get(key, lambda: cbk.FusedFFT(layout, self.device_id, pro, epi, dtype))

    def run(self, x: Any, legacy: Any, args: tuple[Any, ...], stream: int | None) -> Any:
        import contextlib

        from ust.backends.cuda import cufft

        cp, cbs, geo = self.cp, self.cbs, self.cbs.geo
        ctx = cp.cuda.ExternalStream(stream) if stream is not None else contextlib.nullcontext()
        with cp.cuda.Device(self.device_id), ctx:
            values = _device_values(cbs.values, geo.single, cp)
            if self.plan is not None:
                xin = fit(cp, x, geo.in_shape, geo.in_dtype)
                if self.kind == "irfft" and xin.data.ptr == getattr(x, "data", xin.data).ptr:
                    xin = xin.copy()  # cuFFT's c2r may overwrite its input; the caller's array stays intact
                y = self.plan.run(xin, {"prolog": values, "epilog": values}, stream)
            else:
                xin = x
                if cbs.prolog is not None:
                    xin = fit(cp, x, geo.in_shape, geo.in_dtype)
                    p = self.passes.get("prolog")
                    xin = (
                        p.run(xin, values, in_place=False) if p is not None else cbs.apply("prolog", xin, cp)
                    )
                norm = self.norm if self.folded is None else _UNSCALED[_DIRECTION[self.kind]]
                y = cufft.one_shot(self.kind, xin, self.n, self.axes, norm)
                if cbs.epilog is not None:
                    p = self.passes.get("epilog")
                    y = p.run(y, values, in_place=True) if p is not None else cbs.apply("epilog", y, cp)
            return y if legacy is None else cufft.apply_epilog(y, legacy, args)

    def payload(self) -> dict[str, Any]:
        return {"direct": False, "fused": self.fused}

    def free(self) -> None:  # the plans belong to the process-wide cache
        self.plan = None
        self.passes = {}
