"""cuFFT through CuPy: one-shot transforms and a plan kept by a stateful object.

One-shot calls go to ``cupy.fft`` (its plan cache makes repeats cheap), so they cost what CuPy
costs.  A stateful :class:`GpuFFT` owns its plan: for the common case (a 1-D transform along the
last axis of a C-contiguous array, no padding) it holds a ``cupy.cuda.cufft.Plan1d`` and calls
its ``fft`` directly, skipping CuPy's per-call argument handling and cache look-up; otherwise it
hands a ``cupyx.scipy.fftpack.get_fft_plan`` plan to ``cupyx.scipy.fft``.

An elementwise epilogue on the output runs as one extra kernel: a ufunc in place
(``ufunc(y, *args, out=y)``), any other callable compiled by ``cupy.fuse``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

from ust.runtime.log import get_logger

__all__ = ["GpuFFT", "apply_epilog", "one_shot"]

_log = get_logger("backends.cuda.cufft")

_ND = {"fftn", "ifftn"}
_INVERSE = {"ifft", "irfft", "ifftn"}
_VALUE_TYPE = {"fft": "C2C", "ifft": "C2C", "fftn": "C2C", "ifftn": "C2C", "rfft": "R2C", "irfft": "C2R"}


def one_shot(kind: str, x: Any, n: Any, axes: Any, norm: str | None) -> Any:
    """``cupy.fft.<kind>`` (cuFFT with CuPy's plan cache)."""
    import cupy

    fn = getattr(cupy.fft, kind)
    if kind in _ND:
        return fn(x, s=n, axes=axes, norm=norm)
    return fn(x, n=n, axis=axes, norm=norm)


@functools.lru_cache(maxsize=64)
def _fused(fn: Any) -> Any:
    import cupy

    return cupy.fuse(fn)


def apply_epilog(y: Any, epilog: Any, args: tuple[Any, ...]) -> Any:
    """``epilog`` applied to the transform's output ``y`` on the GPU (one kernel)."""
    import cupy

    if type(epilog).__name__ == "ufunc":  # NumPy or CuPy ufunc: CuPy's twin, in place
        getattr(cupy, epilog.__name__)(y, *args, out=y)
        return y
    try:
        fused = _fused(epilog)
    except TypeError:  # unhashable callable: no cache
        fused = cupy.fuse(epilog)
    try:
        return fused(y, *args)
    except Exception as exc:  # not expressible as one elementwise kernel
        _log.info("epilogue %r does not fuse into one kernel (%s); calling it as is", epilog, exc)
        return epilog(y, *args)


def _scale(kind: str, norm: str | None, n: int) -> float:
    """The factor scipy's ``norm`` applies to a transform of ``n`` points."""
    norm = norm or "backward"
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    inverse = kind in _INVERSE
    return 1.0 / n if (norm == "backward") == inverse else 1.0


class GpuFFT:
    """One planned transform on one device; ``execute(x)`` returns a fresh output array."""

    route = "cufft"

    def __init__(self, kind: str, x: Any, n: Any, axes: Any, norm: str | None, device_id: int) -> None:
        import cupy
        from cupy.cuda import cufft

        self.cp = cupy
        self.kind, self.n, self.axes, self.norm, self.device_id = kind, n, axes, norm, device_id
        self.direct: Any = None
        self.plan: Any = None
        with cupy.cuda.Device(device_id):
            types = {
                ("fft", "complex64"): cufft.CUFFT_C2C,
                ("fft", "complex128"): cufft.CUFFT_Z2Z,
                ("ifft", "complex64"): cufft.CUFFT_C2C,
                ("ifft", "complex128"): cufft.CUFFT_Z2Z,
                ("rfft", "float32"): cufft.CUFFT_R2C,
                ("rfft", "float64"): cufft.CUFFT_D2Z,
            }
            fft_type = types.get((kind, str(x.dtype)))
            last = x.shape[-1] if x.ndim else 0
            if (
                fft_type is not None
                and axes % x.ndim == x.ndim - 1
                and (n is None or n == last)
                and x.flags.c_contiguous
                and x.size > 0
            ):
                self.direct = cufft.Plan1d(last, fft_type, x.size // last)
                self.direction = cufft.CUFFT_INVERSE if kind == "ifft" else cufft.CUFFT_FORWARD
                self.out_last = last // 2 + 1 if kind == "rfft" else last
                self.out_dtype = cupy.result_type(x.dtype, cupy.complex64)
                self.factor = _scale(kind, norm, last)
                _log.info("cuFFT plan: Plan1d of %d points x %d, called directly", last, x.size // last)
                return
            try:
                from cupyx.scipy.fftpack import get_fft_plan

                shape = (n,) if isinstance(n, int) else n
                plan = get_fft_plan(x, shape=shape, axes=axes, value_type=_VALUE_TYPE[kind])
                if type(plan).__name__ == ("PlanNd" if kind in _ND else "Plan1d"):
                    self.plan = plan
                    _log.info("cuFFT plan: %s kept for cupyx.scipy.fft.%s", type(plan).__name__, kind)
            except Exception as exc:  # layouts cuFFT plans do not cover: CuPy's own path per call
                _log.info("no reusable cuFFT plan for this %s (%s); CuPy plans per call", kind, exc)

    def run(self, x: Any, epilog: Any, args: tuple[Any, ...], stream: int | None) -> Any:
        """The transform of ``x`` with ``epilog`` applied, on ``stream`` (a pointer) or the current one."""
        cp = self.cp
        with cp.cuda.ExternalStream(stream) if stream is not None else contextlib.nullcontext():
            y = self.execute(x)
            return y if epilog is None else apply_epilog(y, epilog, args)

    def payload(self) -> dict[str, Any]:
        """What a saved plan records of this runner."""
        return {"direct": self.direct is not None}

    def execute(self, x: Any) -> Any:
        cp = self.cp
        with cp.cuda.Device(self.device_id):
            if self.direct is not None:
                out = cp.empty((*x.shape[:-1], self.out_last), dtype=self.out_dtype)
                self.direct.fft(x, out, self.direction)
                if self.factor != 1.0:
                    out *= self.factor
                return out
            if self.plan is not None:
                import cupyx.scipy.fft as sfft

                fn = getattr(sfft, self.kind)
                try:
                    if self.kind in _ND:
                        return fn(x, s=self.n, axes=self.axes, norm=self.norm, plan=self.plan)
                    return fn(x, n=self.n, axis=self.axes, norm=self.norm, plan=self.plan)
                except Exception as exc:  # the plan does not fit after all
                    _log.info("the kept cuFFT plan does not fit (%s); CuPy plans per call from now on", exc)
                    self.plan = None
            return one_shot(self.kind, x, self.n, self.axes, self.norm)

    def free(self) -> None:
        self.direct = None
        self.plan = None
