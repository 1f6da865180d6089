"""The oldest versions of the optional GPU packages that ust accepts at run time: one table.

Read by the run-time checks and by ``tests/test_packaging.py``, which asserts that the floors
of the ``cu12`` / ``cu13`` extras in ``pyproject.toml`` are exactly these:

* **cuDSS** (``nvidia-cudss-cu12`` / ``-cu13``): 0.8 on both CUDA majors.  Older releases have
  another C API (``cudssMatrixCreateCsr`` without ``offsetType``, other phase values), so
  :func:`ust.backends.cuda.cudss.abi_for` refuses them with a
  :class:`~ust.runtime.errors.BackendUnavailableError`.
* **CuPy** (``cupy-cuda12x`` / ``cupy-cuda13x``): 13 for CUDA 12, 14 for CUDA 13, the releases ust
  is tested with.  An older CuPy is logged as a warning, once, by
  :func:`ust.runtime.xp.import_cupy`; its routes run.
* **cuda-pathfinder**: 1.3, the first release that knows every library ust loads through it
  (cuDSS included).  An older one is not asked: ust's own search of the NVIDIA wheel
  directories and the toolkit finds the libraries instead (``ust.backends.cuda._lib``).

This module is a leaf: it imports nothing from ust.
"""

from __future__ import annotations

import re

__all__ = [
    "CUDA_MAJORS",
    "MINIMUM_VERSIONS",
    "distribution",
    "minimum",
    "parse_version",
    "requirement",
    "version_text",
]

#: The CUDA majors with a pip extra (``ust[cu12]``, ``ust[cu13]``).
CUDA_MAJORS = (12, 13)

#: component -> CUDA major -> (the PyPI distribution that ships it, the oldest version accepted).
MINIMUM_VERSIONS: dict[str, dict[int, tuple[str, tuple[int, ...]]]] = {
    "cudss": {12: ("nvidia-cudss-cu12", (0, 8)), 13: ("nvidia-cudss-cu13", (0, 8))},
    "cupy": {12: ("cupy-cuda12x", (13,)), 13: ("cupy-cuda13x", (14,))},
    "cuda-pathfinder": {12: ("cuda-pathfinder", (1, 3)), 13: ("cuda-pathfinder", (1, 3))},
}


def _major(cuda_major: int | str) -> int:
    """12 or 13 from ``12``, ``"12"`` or an extra's name (``"cu12"``); anything else: 13."""
    text = str(cuda_major).removeprefix("cu")
    major = int(text) if text.isdigit() else 13
    return major if major in CUDA_MAJORS else 13


def minimum(component: str, cuda_major: int | str = 13) -> tuple[int, ...]:
    """The oldest version of ``component`` accepted with ``cuda_major`` (``13``, or ``"cu13"``)."""
    return MINIMUM_VERSIONS[component][_major(cuda_major)][1]


def distribution(component: str, cuda_major: int | str = 13) -> str:
    """The PyPI distribution that ships ``component`` for ``cuda_major``."""
    return MINIMUM_VERSIONS[component][_major(cuda_major)][0]


def version_text(version: tuple[int, ...]) -> str:
    """``(0, 8)`` -> ``"0.8"``."""
    return ".".join(str(v) for v in version)


def requirement(component: str, cuda_major: int | str = 13) -> str:
    """The pip requirement with its floor, e.g. ``"nvidia-cudss-cu13>=0.8"``."""
    return f"{distribution(component, cuda_major)}>={version_text(minimum(component, cuda_major))}"


def parse_version(text: str) -> tuple[int, ...] | None:
    """The leading release numbers of a version string (``"14.2.0rc1"`` -> ``(14, 2, 0)``), or
    None when it does not start with a number."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(text))
    return tuple(int(p) for p in match.group(1).split(".")) if match else None
