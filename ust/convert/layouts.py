"""Library layouts (scipy / cupyx / torch): which ust formats they are, and honest labels.

A format *is* a library layout when its level expressions and level types match one
structurally (properties aside); it is *canonical* when it also claims the library's
canonical state (sorted, no duplicates), i.e. equals the standard format.  Sources that are
not canonical get a label that says so (``compressed(nonordered)``, ``nonunique``): never a
claim the data does not keep.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from ust.formats.library import format as parse_format
from ust.formats.library import get
from ust.formats.model import FloorDiv, Format, LevelFormat, Mod

__all__ = ["Layout", "coo_format", "library_layout", "relabel"]


class Layout(NamedTuple):
    name: str  # "csr", "csc", "coo", "bsr", "bsc", "dia"
    canonical: bool
    blocksize: tuple[int, int] | None = None


def _shape_of(fmt: Format) -> tuple[tuple[object, LevelFormat], ...]:
    return tuple((lv.expr, lv.format) for lv in fmt.levels)


@functools.cache
def _plain() -> dict[tuple[tuple[object, LevelFormat], ...], tuple[str, Format]]:
    out = {}
    for name, std in (("csr", "CSR"), ("csc", "CSC"), ("coo", "COO"), ("dia", "DIA")):
        f = get(std)
        out[_shape_of(f)] = (name, f)
    return out


@functools.lru_cache(maxsize=1024)
def library_layout(fmt: Format) -> Layout | None:
    """The library layout ``fmt`` matches structurally, or None."""
    hit = _plain().get(_shape_of(fmt))
    if hit is not None:
        return Layout(hit[0], fmt == hit[1])
    if fmt.ndim == 2 and fmt.nlevels == 4:
        e = [lv.expr for lv in fmt.levels]
        if all(isinstance(x, FloorDiv) for x in e[:2]) and all(isinstance(x, Mod) for x in e[2:]):
            r = e[2].divisor if e[2].dim == 0 else None  # type: ignore[union-attr]
            c = e[3].divisor if e[3].dim == 1 else None  # type: ignore[union-attr]
            if r is not None and c is not None:
                for name, std in (("bsr", get(f"BSR[{r},{c}]")), ("bsc", get(f"BSC[{r},{c}]"))):
                    if _shape_of(fmt) == _shape_of(std):
                        return Layout(name, fmt == std, (r, c))
    return None


def relabel(fmt: Format, level: int, *, unique: bool = True, ordered: bool = True) -> Format:
    """``fmt`` with level ``level``'s properties replaced (an honest label for a source)."""
    lv = fmt.levels[level]
    t = dataclasses.replace(lv.type, unique=unique, ordered=ordered)
    levels = list(fmt.levels)
    levels[level] = dataclasses.replace(lv, type=t)
    return dataclasses.replace(fmt, levels=tuple(levels), name=None)


@functools.lru_cache(maxsize=64)
def coo_format(ndim: int, canonical: bool = True) -> Format:
    """COO of any order: ``compressed(nonunique)`` then singletons (all unordered and
    nonunique when ``canonical`` is False).  One dimension: ``compressed`` (a sparse vector)."""
    names = [f"d{k}" for k in range(ndim)]
    if ndim == 1:
        props = "" if canonical else "(nonunique, nonordered)"
        return parse_format(f"(d0) -> (d0 : compressed{props})")
    if canonical:
        kinds = ["compressed(nonunique)"] + ["singleton(nonunique)"] * (ndim - 2) + ["singleton"]
    else:
        kinds = ["compressed(nonunique, nonordered)"] + ["singleton(nonunique, nonordered)"] * (ndim - 1)
    levels = ", ".join(f"{n} : {k}" for n, k in zip(names, kinds))
    return parse_format(f"({', '.join(names)}) -> ({levels})")


@functools.lru_cache(maxsize=256)
def coordinate_twin(fmt: Format) -> Format | None:
    """For ``(a : dense, b : compressed)`` (CSR, CSC, ...): ``(a : compressed(nonunique), b :
    singleton)``, the COO that lists the same entries in the same order; else None."""
    csr, coo = get("CSR"), get("COO")
    if fmt.nlevels != 2 or fmt.ndim != 2 or [lv.type for lv in fmt.levels] != [lv.type for lv in csr.levels]:
        return None
    levels = tuple(dataclasses.replace(c, expr=f.expr) for c, f in zip(coo.levels, fmt.levels))
    return dataclasses.replace(coo, levels=levels, name=None)
