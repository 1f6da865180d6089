"""The one error hierarchy of ust.

This module is a leaf: it imports nothing from ust, so every layer (the grammar
included) may raise these errors without importing upward.  Each error is also the
matching built-in exception where one fits, so ``except ValueError`` keeps working
for callers who do not know ust.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "DeviceError",
    "FileFormatError",
    "FormatError",
    "IndexOutOfBoundsError",
    "InvalidIndexError",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "ShapeError",
    "SingularMatrixError",
    "SolverAccuracyError",
    "UnsupportedError",
    "UstError",
    "UstSyntaxError",
]


class UstError(Exception):
    """Base class of every error ust raises on purpose."""


class UstSyntaxError(UstError, SyntaxError):
    """Format text that does not parse.

    ``line`` and ``column`` are 1-based; the message shows the offending line with a
    caret under the column and says what the parser expected there.
    """

    def __init__(self, message: str, *, line: int = 0, column: int = 0, text: str = "") -> None:
        UstError.__init__(self, message)
        self.msg = message
        self.line = line
        self.column = column
        self.source_text = text
        self.lineno = line
        self.offset = column

    def __str__(self) -> str:
        return self.msg


class FormatError(UstError, ValueError):
    """A format that parses but breaks a rule (the rule is named in the message)."""

    def __init__(self, message: str, *, rule: str = "", level: int | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.level = level


class FileFormatError(FormatError):
    """A file that cannot be read: corrupt, truncated, or breaking its format's rules.

    ``path`` is the file and ``line`` the 1-based line of a text file (0 where no line
    applies); the message starts with the path and names the line.
    """

    def __init__(self, message: str, *, path: str = "", line: int = 0, rule: str = "") -> None:
        super().__init__(message, rule=rule)
        self.path = path
        self.line = line


class UnsupportedError(UstError, NotImplementedError):
    """A combination ust does not support; the message lists what is supported."""


class ShapeError(UstError, ValueError):
    """Shapes, extents or indices that do not fit."""


class DeviceError(UstError, ValueError):
    """Operands on different devices, or a device that cannot be used."""


class InvalidValueError(UstError, ValueError):
    """Values an operation cannot use: NaN or Inf in a matrix or right-hand side, a bad option value."""


class InvalidTypeError(UstError, TypeError):
    """An argument of the wrong Python type: ``ust.format(b"...")``, ``asarray(x, format=123)``."""


class IndexOutOfBoundsError(ShapeError, IndexError):
    """An index outside a tensor's extent (``A[4]`` of a 4-row matrix): an IndexError too, as
    NumPy and scipy.sparse raise."""


class InvalidIndexError(InvalidTypeError, IndexError):
    """A key a tensor cannot be indexed with (a float, a sparse mask, a mask of the wrong shape,
    index arrays that do not broadcast, too many indices): an IndexError too, as scipy.sparse
    raises."""


class InvalidStateError(UstError, RuntimeError):
    """A stateful operation used out of order (e.g. executed before plan() or after free())."""


class SingularMatrixError(UstError, ArithmeticError):
    """A (structurally or numerically) singular matrix met by a direct solver."""

    def __init__(self, message: str, *, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


class SolverAccuracyError(UstError, ArithmeticError):
    """A solution whose backward error is above the tolerance for its dtype."""

    def __init__(self, message: str, *, backward_error: float = float("nan")) -> None:
        super().__init__(message)
        self.backward_error = backward_error


class BackendUnavailableError(UstError, ImportError):
    """An optional package or vendor library is missing; ``pip_command`` fixes it."""

    def __init__(self, message: str, *, pip_command: str = "") -> None:
        full = f"{message} (install it with: {pip_command})" if pip_command else message
        super().__init__(full)
        self.pip_command = pip_command
