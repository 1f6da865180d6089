"""ust: a sparse tensor format compiler for Python.

Formats are declared as text (``ust.format("(i, j) -> (i : dense, j : compressed)")``),
tensors are stored in them, converted between them and computed on, on the CPU or the GPU.
Importing ust loads no GPU package, no compiler and builds no parser.
"""

from __future__ import annotations

from ust.formats import Format, FormatTemplate, format, load_formats, parse_formats
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    FormatError,
    ShapeError,
    SingularMatrixError,
    SolverAccuracyError,
    UnsupportedError,
    UstError,
    UstSyntaxError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "DeviceError",
    "Format",
    "FormatError",
    "FormatTemplate",
    "ShapeError",
    "SingularMatrixError",
    "SolverAccuracyError",
    "UnsupportedError",
    "UstError",
    "UstSyntaxError",
    "__version__",
    "format",
    "load_formats",
    "parse_formats",
]
