"""ust: a sparse tensor format compiler for Python.

Formats are declared as text (``ust.format("(i, j) -> (i : dense, j : compressed)")``),
tensors are stored in them (``ust.asarray(scipy_matrix, format="DIA")``), converted between
them and computed on, on the CPU or the GPU (``ust.matmul``, ``ust.solve``).  Importing ust
loads no GPU package, no compiler and builds no parser; those load when a route needs them.
"""

from __future__ import annotations

import sys

from ust import formats, io
from ust._version import __version__
from ust.api import dense, linalg, ops
from ust.api.advise import advise
from ust.api.algebra import sddmm
from ust.api.compute import Compute, Semiring, compute, einsum
from ust.api.explain import explain
from ust.api.linalg import DirectSolver, DirectSolverOptions, solve
from ust.api.matmul import Matmul, matmul
from ust.api.tune import tune
from ust.convert import asarray
from ust.formats import Format, FormatTemplate, format, load_formats, parse_formats  # noqa: A004
from ust.plan.routes import freeze as _freeze_routes
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    FileFormatError,
    FormatError,
    IndexOutOfBoundsError,
    InvalidIndexError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    SingularMatrixError,
    SolverAccuracyError,
    UnsupportedError,
    UstError,
    UstSyntaxError,
)
from ust.tensor import Tensor

_freeze_routes()  # every layer registered its routes as `import ust` imported it: the table is fixed now
del _freeze_routes

# the public module names of the api layer: ``import ust.dense`` / ``from ust.linalg import solve``
# give the very modules of ust.api (one object, so monkeypatching either name patches both)
for _name, _module in (("dense", dense), ("linalg", linalg), ("ops", ops)):
    sys.modules[f"{__name__}.{_name}"] = _module
del _name, _module

__all__ = [
    "BackendUnavailableError",
    "Compute",
    "DeviceError",
    "DirectSolver",
    "DirectSolverOptions",
    "FileFormatError",
    "Format",
    "FormatError",
    "FormatTemplate",
    "IndexOutOfBoundsError",
    "InvalidIndexError",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "Matmul",
    "Semiring",
    "ShapeError",
    "SingularMatrixError",
    "SolverAccuracyError",
    "Tensor",
    "UnsupportedError",
    "UstError",
    "UstSyntaxError",
    "__version__",
    "advise",
    "asarray",
    "compute",
    "dense",
    "einsum",
    "explain",
    "format",
    "formats",
    "io",
    "linalg",
    "load_formats",
    "matmul",
    "ops",
    "parse_formats",
    "sddmm",
    "solve",
    "tune",
]
