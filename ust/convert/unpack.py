"""Unpack a tensor's levels into coordinates: the first half of the general conversion.

Written once against the array namespace ``xp`` (NumPy or CuPy).  Levels are expanded top
down, all positions of a level at once: a dense level multiplies every live position by its
extent, a compressed level expands each live parent into its ``pos`` segment (segment ids
from one repeat / prefix sum), a singleton keeps the position.  Coordinates of dense levels
are never materialised until needed: they are affine functions of the position
(``(p // div) % mod + lo``), so CSR's row index costs one segment expansion and nothing else.
Batched tensors are read through a flat view in which member ``t``'s level-``k`` positions are
``t * cap_k + local``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.formats.analysis import drops_zeros, entries_unique, lex_sorted
from ust.formats.model import Format, LevelFormat
from ust.runtime import xp as _xp
from ust.tensor.buffers import Buffers, as_buffers

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["Entries", "flat_buffers", "unpack"]

_DENSE_LIKE = (LevelFormat.DENSE, LevelFormat.BATCH, LevelFormat.RANGE)


@dataclass
class Entries:
    """Stored entries as coordinate arrays plus values.

    ``lvl`` holds level coordinates (absolute: a diagonal level's may be negative) of the
    format ``fmt``; ``sorted_by`` is the format whose level order the entries follow
    lexicographically (``None``: no known order); ``unique``: no coordinates repeat.
    """

    xp: ModuleType
    fmt: Format
    shape: tuple[int, ...]
    lvl: list[Any]
    values: Any
    sorted_by: Format | None
    unique: bool

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    def dims(self) -> tuple[Any, ...]:
        """Dimension coordinates (``fmt.lvl_to_dim``)."""
        return self.fmt.lvl_to_dim(self.lvl)


@dataclass
class _Affine:
    """A coordinate that is a function of the position ``p``: ``(p // div) % mod + lo``."""

    div: int
    mod: int | None
    lo: int

    def of(self, p: Any) -> Any:
        c = p // self.div if self.div != 1 else p
        if self.mod is not None:
            c = c % self.mod
        return c + self.lo if self.lo else c

    def of_all(self, xp: ModuleType, total: int, dtype: Any) -> Any:
        """The coordinate of every position 0..total-1 (no division: a repeat/tile pattern)."""
        return _xp.periodic(xp, total, self.div, self.mod, self.lo, dtype)


@dataclass
class FlatLevel:
    """One level's buffers in flat (unbatched) numbering: segment bounds and coordinates."""

    lo: Any = None  # compressed / loose: first child position of each parent position
    hi: Any = None  # one past the last child
    crd: Any = None
    contiguous: bool = False  # lo/hi come from one pos array with no holes (plain compressed)
    pos: Any = None  # the pos array itself when contiguous


def flat_buffers(t: Tensor | Buffers) -> tuple[list[FlatLevel], Any]:
    """Per-level buffers in flat numbering, and the flat values array."""
    t = as_buffers(t)
    fmt = t.format
    nb = fmt.nbatch
    out: list[FlatLevel] = []
    if nb == 0:
        for k, lv in enumerate(fmt.levels):
            fl = FlatLevel(crd=t.crd[k])
            pos = t.pos[k]
            if lv.format is LevelFormat.COMPRESSED:
                fl.lo, fl.hi, fl.contiguous, fl.pos = pos[:-1], pos[1:], True, pos
            elif lv.format is LevelFormat.LOOSE_COMPRESSED:
                fl.lo, fl.hi = pos[0::2], pos[1::2]
            out.append(fl)
        return out, t.values
    xp = t.xp
    B = int(np.prod([t.shape[lv.expr.dim] for lv in fmt.levels[:nb]], dtype=np.int64))  # type: ignore[union-attr]
    caps = t.caps()
    for k, lv in enumerate(fmt.levels):
        if k < nb:
            out.append(FlatLevel())
            continue
        crd = t.crd[k]
        pos = t.pos[k]
        fl = FlatLevel(crd=None if crd is None else crd.reshape(-1))
        if pos is not None:
            off = (xp.arange(B, dtype=pos.dtype) * caps[k])[:, None]
            if lv.format is LevelFormat.COMPRESSED:
                fl.lo = (pos[:, :-1] + off).reshape(-1)
                fl.hi = (pos[:, 1:] + off).reshape(-1)
            else:
                fl.lo = (pos[:, 0::2] + off).reshape(-1)
                fl.hi = (pos[:, 1::2] + off).reshape(-1)
        out.append(fl)
    return out, t.values.reshape(-1)


def unpack(t: Tensor | Buffers, *, keep_zeros: bool | None = None, keep_padding: bool = False) -> Entries:
    """All stored entries of ``t`` as level coordinates and values, in storage order.

    Slots outside the tensor (DIA padding) are dropped unless ``keep_padding``; zero values
    are dropped where the format cannot tell stored zeros from fill (:func:`drops_zeros`)
    unless ``keep_zeros`` says otherwise.
    """
    t = as_buffers(t)
    xp = t.xp
    fmt = t.format
    bounds = fmt.lvl_bounds(t.shape)
    if keep_zeros is None:
        keep_zeros = not drops_zeros(fmt)
    if fmt.is_dense and not keep_zeros:
        return _unpack_dense(t, bounds)
    levels, vals = flat_buffers(t)
    wdt = _xp.work_dtype(t.nse, *t.shape, *(hi - lo for lo, hi in bounds))
    # the dtype an upper level's coordinates are gathered in (one per entry below it): int32
    # where every level coordinate fits, so an int64 source (DCSC, DCSR, CSF) gathers half the
    # bytes, and the int32 keys of a counting pass after it need no cast
    cdt = _xp.work_dtype(*(max(abs(lo), abs(hi)) for lo, hi in bounds))

    live: Any = None  # explicit live positions of the current level, or None: 0..P-1 all live
    P = 1
    coords: list[Any] = []  # per level: an array aligned with live positions, or an _Affine
    for k, lv in enumerate(fmt.levels):
        lo_k, hi_k = bounds[k]
        S = hi_k - lo_k
        f = lv.format
        fl = levels[k]
        if f in _DENSE_LIKE or f is LevelFormat.STRUCTURED:
            width = lv.type.n if f is LevelFormat.STRUCTURED else S
            coords = [
                _Affine(c.div * width, c.mod, c.lo) if isinstance(c, _Affine) else xp.repeat(c, width)
                for c in coords
            ]
            if live is not None:
                live = (live[:, None] * width + xp.arange(width, dtype=live.dtype)[None, :]).reshape(-1)
            P *= width
            if f is LevelFormat.STRUCTURED:
                coords.append(fl.crd[live] if live is not None else fl.crd[:P])
            else:
                coords.append(_Affine(1, S if P != S else None, lo_k))
        elif f is LevelFormat.SINGLETON:
            coords.append(fl.crd[live] if live is not None else fl.crd[:P])
        else:  # compressed / loose_compressed
            if live is None and fl.contiguous:
                counts = xp.diff(fl.pos)
                total = int(fl.pos[-1]) if fl.pos.shape[0] else 0
                seg = _xp.expand_segments(xp, counts, total, wdt)
                child = None
            else:
                lo = fl.lo if live is None else fl.lo[live]
                hi = fl.hi if live is None else fl.hi[live]
                counts = (hi - lo).astype(wdt)
                total = int(counts.sum()) if counts.shape[0] else 0
                seg = _xp.expand_segments(xp, counts, total, wdt)
                starts = xp.cumsum(counts, dtype=wdt) - counts
                child = lo[seg].astype(wdt) + (xp.arange(total, dtype=wdt) - starts[seg])
            parent = seg if live is None else live[seg]
            coords = [c.of(parent) if isinstance(c, _Affine) else _xp.as_index(c, cdt)[seg] for c in coords]
            if child is None:
                coords.append(fl.crd[:total])
            else:
                coords.append(fl.crd[child])
            live = child
            P = total if child is None else int(fl.crd.shape[0])
    lvl = [
        (c.of_all(xp, P, wdt) if live is None else c.of(live)) if isinstance(c, _Affine) else c
        for c in coords
    ]
    values = vals[:P] if live is None else vals[live]
    ent = Entries(
        xp,
        fmt,
        t.shape,
        lvl,
        values,
        fmt if lex_sorted(fmt) else None,
        entries_unique(fmt),
    )
    return _filter(ent, keep_zeros=keep_zeros, keep_padding=keep_padding)


def _filter(ent: Entries, *, keep_zeros: bool, keep_padding: bool) -> Entries:
    """Drop padding slots outside the tensor and (optionally) zero values, keeping order."""
    xp = ent.xp
    mask = None
    if not keep_padding and any(lv.format is LevelFormat.RANGE for lv in ent.fmt.levels):
        dims = ent.dims()
        for d, (c, s) in enumerate(zip(dims, ent.shape)):
            if any(lv.expr.dims == (d,) for lv in ent.fmt.levels if lv.format is LevelFormat.RANGE):
                continue  # the range level's own dimension always lies inside
            m = (c >= 0) & (c < s)
            mask = m if mask is None else mask & m
    if not keep_zeros:
        m = ent.values != 0
        mask = m if mask is None else mask & m
    if mask is None:
        return ent
    idx = xp.flatnonzero(mask)
    if int(idx.shape[0]) == ent.n:
        return ent
    ent.lvl = [c[idx] for c in ent.lvl]
    ent.values = ent.values[idx]
    return ent


def _unpack_dense(t: Buffers, bounds: tuple[tuple[int, int], ...]) -> Entries:
    """All-dense formats: the nonzeros of the values read as a level-shaped array."""
    xp = t.xp
    fmt = t.format
    lvl_shape = tuple(hi - lo for lo, hi in bounds)
    arr = t.values.reshape(lvl_shape)
    nz = xp.nonzero(arr)
    values = arr[nz]
    lvl = [c + lo if lo else c for c, (lo, _) in zip(nz, bounds)]
    return Entries(xp, fmt, t.shape, list(lvl), values, fmt, True)
