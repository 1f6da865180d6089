"""Static facts about formats that the general conversion path plans with.

All of these look at the Format only (never at data), so they are cheap and cached:
whether a tensor's entries come out of its levels in lexicographic level order, whether they
can repeat, and how much of a target's level order a source's order already provides (so the
general path sorts by as few levels as possible, or not at all).
"""

from __future__ import annotations

import functools

from ust.formats.model import Add, Dim, FloorDiv, Format, LevelExpr, LevelFormat, Mod, Sub

__all__ = [
    "drops_zeros",
    "entries_unique",
    "lex_sorted",
    "per_entry_start",
    "sort_prefix",
]

_DENSE_LIKE = frozenset({LevelFormat.DENSE, LevelFormat.BATCH, LevelFormat.RANGE})


def _chains_closed(fmt: Format) -> tuple[bool, bool]:
    """(every nonunique level is followed only by singletons up to a unique singleton or the
    end; every nonunique level is closed by a unique singleton)."""
    ok, closed = True, True
    levels = fmt.levels
    for k, lv in enumerate(levels):
        if lv.type.unique:
            continue
        j = k + 1
        shut = False
        while j < len(levels) and levels[j].format is LevelFormat.SINGLETON:
            if levels[j].type.unique:
                shut = True
                break
            j += 1
        if not shut:
            closed = False
            if j < len(levels):
                ok = False
    return ok, closed


@functools.lru_cache(maxsize=1024)
def lex_sorted(fmt: Format) -> bool:
    """Stored entries, read in position order, are sorted lexicographically by level
    coordinates (non-strictly when the format allows duplicates)."""
    return all(lv.type.ordered for lv in fmt.levels) and _chains_closed(fmt)[0]


@functools.lru_cache(maxsize=1024)
def entries_unique(fmt: Format) -> bool:
    """No two stored entries can have the same coordinates."""
    return _chains_closed(fmt)[1]


@functools.lru_cache(maxsize=1024)
def drops_zeros(fmt: Format) -> bool:
    """Stored zeros of this format are fill, not entries: all-dense formats and formats with
    a range level (DIA) cannot tell an explicit zero from an absent one (scipy's ``dia``
    conversions drop them too).  Zeros inside sparse structure (BSR blocks) are kept."""
    return fmt.is_dense or any(lv.format is LevelFormat.RANGE for lv in fmt.levels)


@functools.lru_cache(maxsize=1024)
def per_entry_start(fmt: Format) -> int:
    """First level of the trailing ``compressed(nonunique) singleton...`` chain (or the last
    level): with duplicates kept, these levels get one position per entry."""
    k = fmt.nlevels - 1
    while k > 0 and fmt.levels[k].format is LevelFormat.SINGLETON:
        k -= 1
    return k


# ----------------------------------------------------------------------------- order analysis


def _determined(e: LevelExpr, prefix: frozenset[LevelExpr]) -> bool:
    """``e`` is constant among entries that agree on the ``prefix`` level coordinates."""
    if e in prefix:
        return True
    if isinstance(e, Dim):
        d = e.dim
        return any(isinstance(p, FloorDiv) and p.dim == d and Mod(d, p.divisor) in prefix for p in prefix)
    if isinstance(e, (FloorDiv, Mod)):
        return Dim(e.dim) in prefix
    return _determined(Dim(e.left), prefix) and _determined(Dim(e.right), prefix)


def _normal(e: LevelExpr, prefix: frozenset[LevelExpr]) -> LevelExpr:
    """An expression that orders entries the same way as ``e`` among entries agreeing on the
    prefix (e.g. ``i`` orders like ``i mod r`` once ``i floordiv r`` is fixed)."""
    if isinstance(e, Dim):
        for p in prefix:
            if isinstance(p, FloorDiv) and p.dim == e.dim:
                return Mod(e.dim, p.divisor)
            if isinstance(p, Sub) and e.dim in (p.left, p.right):
                return Dim(min(p.left, p.right))  # j - i fixed: i and j increase together
    if isinstance(e, Sub) and _determined(Dim(e.right), prefix):
        return _normal(Dim(e.left), prefix)
    if isinstance(e, Add) and _determined(Dim(e.right), prefix):
        return _normal(Dim(e.left), prefix)
    if isinstance(e, Add) and _determined(Dim(e.left), prefix):
        return _normal(Dim(e.right), prefix)
    return e


def _collapse(seq: list[LevelExpr]) -> list[LevelExpr]:
    """``d floordiv c`` directly followed by ``d mod c`` orders like ``d``."""
    out: list[LevelExpr] = []
    for e in seq:
        if out and isinstance(e, Mod) and out[-1] == FloorDiv(e.dim, e.divisor):
            out[-1] = Dim(e.dim)
        else:
            out.append(e)
    return out


@functools.lru_cache(maxsize=4096)
def sort_prefix(src: Format, dst: Format) -> int:
    """Smallest ``p`` such that sorting ``src``'s entries (in their stored order) stably by
    ``dst``'s first ``p`` level coordinates sorts them by all of ``dst``'s levels.

    0 means the stored order already is ``dst``'s order; ``dst.nlevels`` means a full sort.
    Only exact, structural reasoning is used; anything unrecognised costs a longer sort.
    """
    m = dst.nlevels
    if not lex_sorted(src):
        return m
    src_exprs = [lv.expr for lv in src.levels]
    dst_exprs = [lv.expr for lv in dst.levels]
    for p in range(m + 1):
        prefix = frozenset(dst_exprs[:p])
        rem_src = _collapse([_normal(e, prefix) for e in src_exprs if not _determined(e, prefix)])
        rem_dst = _collapse([_normal(e, prefix) for e in dst_exprs[p:] if not _determined(e, prefix)])
        if rem_src[: len(rem_dst)] == rem_dst:
            return p
    return m
