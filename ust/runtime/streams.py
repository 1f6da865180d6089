"""CUDA streams for ``stream=`` arguments.

``stream=None`` means the current stream of the operands' package (CuPy or torch), so ust's work
orders itself after the caller's.  Streams are passed to vendor libraries as raw ``cudaStream_t``
integers; :func:`stream_pointer` reads one from any of the accepted objects.
"""

from __future__ import annotations

from typing import Any

from ust.runtime.errors import UnsupportedError

__all__ = ["current_stream", "gpu_seconds_per_call", "stream_pointer"]


def _cupy_current(device_id: int | None) -> Any:
    import cupy

    if device_id is None:
        return cupy.cuda.get_current_stream()
    with cupy.cuda.Device(device_id):
        return cupy.cuda.get_current_stream()


def _torch_current(device_id: int | None) -> Any:
    import torch

    return torch.cuda.current_stream(device_id)


_CURRENT = {"cupy": _cupy_current, "cupyx": _cupy_current, "torch": _torch_current}


def current_stream(package: str = "cupy", device_id: int | None = None) -> Any:
    """The current stream of ``package`` ("cupy" or "torch") on ``device_id`` (None: the current device)."""
    try:
        fn = _CURRENT[package]
    except KeyError:
        raise UnsupportedError(f"no CUDA streams for package {package!r}; supported: cupy, torch") from None
    return fn(device_id)


def stream_pointer(stream: Any) -> int:
    """The ``cudaStream_t`` of ``stream``: an int, a CuPy / torch stream, or a ``__cuda_stream__`` object."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("ptr", "cuda_stream", "handle"):  # CuPy, torch, cuda.core
        value = getattr(stream, attr, None)
        if value is not None:
            return int(value)
    raise UnsupportedError(
        f"cannot read a CUDA stream from {type(stream).__name__}; supported: an int cudaStream_t, "
        "a CuPy or torch stream, or an object with __cuda_stream__"
    )


def gpu_seconds_per_call(fn: Any, iterations: int, stream: Any = None) -> float:
    """Seconds per call of ``fn()`` run ``iterations`` times back to back on ``stream`` (a CuPy
    stream; None: the current one), timed with CUDA events: the work queued, not the launches."""
    from ust.runtime.xp import import_cupy

    cupy = import_cupy()
    s = stream if stream is not None else cupy.cuda.get_current_stream()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(s)
    for _ in range(iterations):
        fn()
    stop.record(s)
    stop.synchronize()
    return float(cupy.cuda.get_elapsed_time(start, stop)) / 1e3 / iterations
