"""Structural format classes for routing: which library layout a format *is*.

A rule names format classes ("CSR", "BSR", "DIA", ...), not spellings: a user's
``(r, c) -> (r : dense, c : compressed)`` is CSR.  Properties (ordered / unique) are looked
at separately, since a library may need canonical storage while a generated kernel does not.
"""

from __future__ import annotations

import dataclasses
import functools

from ust.formats.library import instance_name
from ust.formats.model import Format, LevelFormat, LevelType

__all__ = ["FormatClass", "classify"]


@dataclasses.dataclass(frozen=True)
class FormatClass:
    """``name`` is a standard name without parameters ("BSR"), or "OTHER"."""

    name: str
    params: tuple[int, ...] = ()
    canonical: bool = True  # ordered and unique storage

    def __str__(self) -> str:
        return instance_name(self.name, self.params)


def _normalised(fmt: Format) -> Format:
    """The same levels with default properties (COO's nonunique parent kept: it is structural)."""
    levels = []
    for k, lv in enumerate(fmt.levels):
        parent_of_singleton = k + 1 < fmt.nlevels and fmt.levels[k + 1].format is LevelFormat.SINGLETON
        lt = LevelType(lv.type.format, unique=not parent_of_singleton, ordered=True, n=lv.type.n, m=lv.type.m)
        levels.append(dataclasses.replace(lv, type=lt))
    return dataclasses.replace(fmt, levels=tuple(levels), name=None, attributes=())


@functools.lru_cache(maxsize=1024)
def classify(fmt: Format) -> FormatClass:
    """The format class of ``fmt`` (cached: formats are hashable values)."""
    from ust.formats.library import standard_name_of

    std = standard_name_of(_normalised(fmt))
    canonical = fmt.is_ordered and all(
        lv.type.unique or (k + 1 < fmt.nlevels and fmt.levels[k + 1].format is LevelFormat.SINGLETON)
        for k, lv in enumerate(fmt.levels)
    )
    if std is None:
        return FormatClass("OTHER", (), canonical)
    name, _, rest = std.partition("[")
    params = tuple(int(p) for p in rest.rstrip("]").split(",")) if rest else ()
    return FormatClass(name, params, canonical)
