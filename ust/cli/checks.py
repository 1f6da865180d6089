"""Argument checks every subcommand shares, run before any work.

Each raises a ust error (or ``OSError``) whose first line is the whole message; ``ust.cli.main``
prints it as ``ust COMMAND: error: ...`` and exits 1.  Files are checked by :func:`input_file`,
and every ``OSError`` a command meets later is worded by :func:`os_error_message`, so a missing
file reads the same whichever command, option or library found it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np

from ust.runtime.errors import InvalidValueError

__all__ = ["dtype", "execution", "input_file", "int_range", "os_error_message", "output_file"]


def _not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def input_file(path: str) -> str:
    """``path``, after checking that it names an existing file (not a directory)."""
    p = Path(path)
    if not p.exists():
        raise _not_found(path)
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return path


def output_file(path: str, option: str) -> Path:
    """``path`` as a Path, after checking that its directory exists (the file need not)."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidValueError(f"{option} {path}: the directory {str(parent)!r} does not exist")
    if p.is_dir():
        raise InvalidValueError(f"{option} {path} is a directory; give a file name")
    return p


def os_error_message(exc: OSError) -> str:
    """One wording per kind of file error, whoever raised it: ``no such file: 'x.mtx'``."""
    name = exc.filename
    if name is None:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    shown = repr(os.fsdecode(name))
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {shown}"
    if isinstance(exc, IsADirectoryError):
        return f"{shown} is a directory, not a file"
    if isinstance(exc, PermissionError):
        return f"permission denied: {shown}"
    reason = exc.strerror or type(exc).__name__
    return f"{reason[:1].lower()}{reason[1:]}: {shown}"


def int_range(value: int, option: str, low: int, high: int | None = None, why: str = "") -> int:
    """``value`` when ``low <= value (<= high)``; else InvalidValueError naming the option."""
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidValueError(f"{option} must be {bound}, not {value}" + (f" ({why})" if why else ""))
    return value


def dtype(text: str | None, option: str = "--dtype") -> np.dtype[Any] | None:
    """The NumPy dtype ``text`` names (a number type), or None for None."""
    if text is None:
        return None
    try:
        dt = np.dtype(text)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "iufc":
        raise InvalidValueError(
            f"{option} {text!r} is not a numeric dtype; use e.g. float32, float64, complex128 or int64"
        )
    return dt


def execution(text: str | None) -> None:
    """``--execution``: cpu, cuda or cuda:N (DeviceError otherwise), checked before any work."""
    from ust.runtime.spaces import parse_execution

    parse_execution(text)
