"""CuPy, imported only when a GPU route needs it, with a clear error when it is missing."""

from __future__ import annotations

import functools
from types import ModuleType

from ust.runtime.errors import BackendUnavailableError

__all__ = ["gpu_available", "import_cupy"]


def import_cupy(extra: str = "cu13") -> ModuleType:
    """The ``cupy`` module, or BackendUnavailableError naming the pip extra that installs it."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(
            f"CuPy is needed to run on the GPU but cannot be imported ({exc}); "
            'for CUDA 12 use pip install "ust[cu12]"',
            pip_command=f'pip install "ust[{extra}]"',
        ) from None
    return cupy


@functools.cache
def gpu_available() -> bool:
    """True when CuPy imports and at least one CUDA device answers (checked once per process)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # ImportError, or CUDA driver errors of any kind
        return False


def require_device(device_id: int | None = None) -> ModuleType:
    """CuPy, after checking a CUDA device answers; else a clear error before any work."""
    from ust.runtime.errors import DeviceError

    cupy = import_cupy()
    if not gpu_available():
        raise DeviceError("a GPU execution space was asked for, but CuPy sees no usable CUDA device")
    count = int(cupy.cuda.runtime.getDeviceCount())
    if device_id is not None and device_id >= count:
        raise DeviceError(f"CUDA device {device_id} does not exist; this machine has {count} device(s)")
    return cupy
