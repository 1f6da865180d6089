"""Compiled fast paths of conversions, registered from above.

``KERNELS`` maps a name to a function: :mod:`ust.api` registers the C kernels of
:mod:`ust.backends.cpu` (``csr_to_bsr``: :mod:`ust.backends.cpu.bsr_c`).  A missing entry, or
one that returns None, means the portable route (SciPy, or the xp-generic pack/unpack).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["KERNELS"]

KERNELS: dict[str, Callable[..., Any]] = {}
