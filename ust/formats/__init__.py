"""Sparse storage formats: the model, the declaration library and the standard formats.

``ust.formats.CSR`` and friends are loaded on first access (module ``__getattr__``), so
importing ust parses nothing.  Templates (``BSR``, ``BSC``, ``NM``) are callables:
``ust.formats.BSR(2, 3)`` and ``ust.formats.BSR[2, 3]`` give the same Format.
"""

from __future__ import annotations

from typing import Any

from ust.formats.library import (
    FormatTemplate,
    format,  # noqa: A004 - the public name is ust.formats.format
    get,
    load_formats,
    names,
    parse_formats,
    resolve,
    standard_formats,
    standard_name_of,
    template,
)
from ust.formats.model import Format, Level, LevelFormat, LevelType

__all__ = [
    "Format",
    "FormatTemplate",
    "Level",
    "LevelFormat",
    "LevelType",
    "format",
    "get",
    "load_formats",
    "names",
    "parse_formats",
    "resolve",
    "standard_formats",
    "standard_name_of",
    "template",
]


def __getattr__(name: str) -> Any:
    lib = standard_formats()
    if name in lib:
        return lib[name]
    raise AttributeError(f"module 'ust.formats' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(standard_formats()))
