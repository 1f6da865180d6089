"""ust: a sparse tensor format compiler for Python.

Formats are declared as text (``ust.format("(i, j) -> (i : dense, j : compressed)")``),
tensors are stored in them (``ust.asarray(scipy_matrix, format="DIA")``), converted between
them and computed on, on the CPU or the GPU (``ust.matmul``, ``ust.solve``).  Importing ust
loads no GPU package, no compiler and builds no parser; those load when a route needs them.
"""

from __future__ import annotations

from ust import dense, formats, io, ops
from ust.convert import asarray
from ust.formats import Format, FormatTemplate, format, load_formats, parse_formats  # noqa: A004
from ust.linalg import DirectSolver, DirectSolverOptions, solve
from ust.ops_algebra import sddmm
from ust.ops_matmul import Matmul, explain, matmul
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    FileFormatError,
    FormatError,
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

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "DeviceError",
    "DirectSolver",
    "DirectSolverOptions",
    "FileFormatError",
    "Format",
    "FormatError",
    "FormatTemplate",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "Matmul",
    "ShapeError",
    "SingularMatrixError",
    "SolverAccuracyError",
    "Tensor",
    "UnsupportedError",
    "UstError",
    "UstSyntaxError",
    "__version__",
    "asarray",
    "dense",
    "explain",
    "format",
    "formats",
    "io",
    "load_formats",
    "matmul",
    "ops",
    "parse_formats",
    "sddmm",
    "solve",
]
