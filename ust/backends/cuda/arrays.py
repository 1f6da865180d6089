"""CuPy, imported only when a GPU route needs it, with a clear error when it is missing.

The helpers live in :mod:`ust.runtime.xp` (every layer may use them); the CUDA backend's
modules import them from here.
"""

from __future__ import annotations

from ust.runtime.xp import gpu_available, import_cupy, require_device

__all__ = ["gpu_available", "import_cupy", "require_device"]
