"""Checks that a set of buffers really is a tensor of a format (docs/storage.md).

Three depths: ``"structure"`` (buffer presence, shapes, dtypes, devices, ``pos`` monotone and
consistent with ``crd``), ``"bounds"`` (plus every coordinate inside its level's interval)
and ``"full"`` (plus the order and uniqueness the format claims, where the format claims a
lexicographic order).  All checks are vectorised; each raises an error of ust's hierarchy
naming the level and what is wrong, before any work is done with the buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ust.formats.analysis import entries_unique, lex_sorted
from ust.formats.model import LevelFormat
from ust.runtime import xp as _xp
from ust.runtime.errors import DeviceError, FormatError, ShapeError, UnsupportedError
from ust.tensor.buffers import Buffers
from ust.tensor.dispatch import conversion

__all__ = ["INDEX_DTYPES", "VALUE_DTYPES", "check_buffers", "check_value_dtype"]

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Value dtypes accepted: what SciPy's compiled sparse routines (and mostly cupyx) handle.
VALUE_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
        np.float32, np.float64, np.complex64, np.complex128,
    )
)  # fmt: skip
_SUPPORTED_VALUES = (
    "float32, float64, complex64, complex128 or an integer dtype (int8 ... int64, uint8 ... uint64)"
)


def check_value_dtype(dtype: Any, what: str = "values") -> np.dtype:
    """The value dtype, or an UnsupportedError naming what is supported."""
    dt = np.dtype(dtype)
    if dt not in VALUE_DTYPES:
        raise UnsupportedError(f"{what} of dtype {dt} are not supported; use {_SUPPORTED_VALUES}")
    return dt


def check_index_array(a: Any, what: str) -> None:
    dt = np.dtype(a.dtype)
    if dt.kind == "f":
        raise UnsupportedError(
            f"{what} has floating-point dtype {dt}: indices must be integers (int32 or int64)"
        )
    if dt not in INDEX_DTYPES:
        raise UnsupportedError(f"{what} has dtype {dt}; index arrays must be int32 or int64")


def _fail(k: int, msg: str, cls: type[Exception] = FormatError) -> Exception:
    if cls is FormatError:
        return FormatError(f"[buffers] level {k}: {msg}", rule="buffers", level=k)
    return cls(f"level {k}: {msg}")


def check_buffers(bufs: Buffers, depth: str = "full") -> None:
    """Raise unless the buffers form a valid tensor of their format and shape."""
    shape, fmt, pos, crd, values = bufs.shape, bufs.format, bufs.pos, bufs.crd, bufs.values
    check_value_dtype(values.dtype)
    arrays = [a for a in (*pos, *crd) if a is not None]
    for k in range(fmt.nlevels):
        if pos[k] is not None:
            check_index_array(pos[k], f"pos({k})")
        if crd[k] is not None:
            check_index_array(crd[k], f"crd({k})")
    if len({np.dtype(a.dtype) for a in arrays}) > 1:
        raise UnsupportedError("all pos/crd arrays of a tensor must share one index dtype (int32 or int64)")
    devs = {_xp.device_of(a) for a in (*arrays, values)}
    if len(devs) > 1:
        raise DeviceError(f"buffers live on different devices: {sorted(devs)}")
    for k, lv in enumerate(fmt.levels):
        if (pos[k] is not None) != lv.type.stores_pos:
            raise _fail(
                k, f"{lv.type.to_text()} {'needs' if lv.type.stores_pos else 'stores no'} a pos buffer"
            )
        if (crd[k] is not None) != lv.type.stores_crd:
            raise _fail(
                k, f"{lv.type.to_text()} {'needs' if lv.type.stores_crd else 'stores no'} a crd buffer"
            )
    xp = _xp.namespace(values)
    bounds = fmt.lvl_bounds(shape)
    nb = fmt.nbatch
    if nb:
        _check_batched(xp, bufs, nb, bounds, depth)
    else:
        _check_flat(xp, bufs, bounds, depth)
    if depth == "full" and lex_sorted(fmt):
        _check_order(bufs)


def _check_range(k: int, c: Any, lo: int, hi: int) -> None:
    """The coordinates ``c`` of level ``k`` (not empty) lie in ``[lo, hi)``."""
    cmin, cmax = int(c.min()), int(c.max())
    if cmin < lo or cmax >= hi:
        bad = cmin if cmin < lo else cmax
        raise _fail(k, f"coordinate {bad} is outside the level's range [{lo}, {hi})", ShapeError)


def _check_loose(xp: Any, k: int, lohi: Any, limit: int, what: str) -> None:
    """The (lo, hi) pairs of a loose_compressed ``pos`` (flat or one row per member) satisfy
    ``0 <= lo <= hi <= limit``."""
    lo, hi = lohi[..., 0::2], lohi[..., 1::2]
    if lo.size and (bool(xp.any(lo > hi)) or int(lo.min()) < 0 or int(hi.max()) > limit):
        raise _fail(k, f"loose pos pairs must satisfy 0 <= lo <= hi <= {what}")


def _check_pos(xp: Any, k: int, ptr: Any, nparents: int, axis_last: bool = False) -> None:
    if ptr.shape[-1] != nparents + 1:
        raise _fail(
            k,
            f"pos has {ptr.shape[-1]} entries per member, expected {nparents + 1} (parents + 1)",
            ShapeError,
        )
    first = ptr[..., 0]
    if bool(xp.any(first != 0)):
        raise _fail(k, "pos must start at 0")
    if ptr.shape[-1] > 1 and bool(xp.any(ptr[..., 1:] < ptr[..., :-1])):
        raise _fail(k, "pos must be non-decreasing")


def _check_flat(xp: Any, bufs: Buffers, bounds: tuple[tuple[int, int], ...], depth: str) -> None:
    fmt, pos, crd, values = bufs.format, bufs.pos, bufs.crd, bufs.values
    P = 1
    for k, lv in enumerate(fmt.levels):
        lo_k, hi_k = bounds[k]
        S = hi_k - lo_k
        f = lv.format
        c = crd[k]
        if c is not None and c.ndim != 1:
            raise _fail(k, f"crd must be 1-D, got shape {c.shape}", ShapeError)
        if pos[k] is not None and pos[k].ndim != 1:
            raise _fail(k, f"pos must be 1-D, got shape {pos[k].shape}", ShapeError)
        live_crd = c
        if f in (LevelFormat.DENSE, LevelFormat.RANGE, LevelFormat.BATCH):
            P *= S
        elif f is LevelFormat.COMPRESSED:
            _check_pos(xp, k, pos[k], P)
            P = int(pos[k][-1])
            if c.shape[0] != P:
                raise _fail(k, f"crd has {c.shape[0]} entries but pos ends at {P}", ShapeError)
        elif f is LevelFormat.LOOSE_COMPRESSED:
            lohi = pos[k]
            if lohi.shape[0] != 2 * P:
                raise _fail(
                    k, f"loose pos has {lohi.shape[0]} entries, expected {2 * P} (lo, hi pairs)", ShapeError
                )
            _check_loose(xp, k, lohi, int(c.shape[0]), "len(crd)")
            P = int(c.shape[0])
            live_crd = None  # holes may hold anything; checked through the live entries below
        elif f is LevelFormat.SINGLETON:
            if c.shape[0] != P:
                raise _fail(
                    k, f"singleton crd has {c.shape[0]} entries, expected {P} (one per parent)", ShapeError
                )
        else:  # structured
            n, m = lv.type.n, lv.type.m
            if c.shape[0] != P * n:
                raise _fail(k, f"structured crd has {c.shape[0]} entries, expected {P * n}", ShapeError)
            if P and n > 1 and bool(xp.any(xp.diff(c.reshape(P, n), axis=1) <= 0)):
                raise _fail(k, "structured offsets must be strictly ascending within each block")
            lo_k, hi_k = 0, m
            P *= n
        if depth != "structure" and live_crd is not None and live_crd.shape[0]:
            _check_range(k, live_crd, lo_k, hi_k)
    if values.ndim != 1 or values.shape[0] != P:
        raise ShapeError(
            f"values must be 1-D of length {P} (the last level's positions), got shape {values.shape}"
        )
    if depth != "structure" and any(lv.format is LevelFormat.LOOSE_COMPRESSED for lv in fmt.levels):
        _check_live_bounds(bufs, bounds)


def _check_batched(xp: Any, bufs: Buffers, nb: int, bounds: tuple[tuple[int, int], ...], depth: str) -> None:
    fmt, pos, crd, values = bufs.format, bufs.pos, bufs.crd, bufs.values
    B = 1
    for k in range(nb):
        B *= bounds[k][1] - bounds[k][0]
    cap = 1
    for k in range(nb, fmt.nlevels):
        lv = fmt.levels[k]
        f = lv.format
        S = bounds[k][1] - bounds[k][0]
        for name, a in (("pos", pos[k]), ("crd", crd[k])):
            if a is not None and (a.ndim != 2 or a.shape[0] != B):
                raise _fail(
                    k,
                    f"{name} of a batched tensor must have shape ({B}, capacity), got {a.shape}",
                    ShapeError,
                )
        if f in (LevelFormat.DENSE, LevelFormat.RANGE):
            cap *= S
        elif f is LevelFormat.COMPRESSED:
            _check_pos(xp, k, pos[k], cap)
            new_cap = int(crd[k].shape[1])
            if B and int(pos[k][:, -1].max()) > new_cap:
                raise _fail(k, f"pos exceeds the member capacity {new_cap} of crd", ShapeError)
            cap = new_cap
        elif f is LevelFormat.LOOSE_COMPRESSED:
            if pos[k].shape[1] != 2 * cap:
                raise _fail(k, f"loose pos needs {2 * cap} entries per member", ShapeError)
            new_cap = int(crd[k].shape[1])
            _check_loose(xp, k, pos[k], new_cap, "capacity")
            cap = new_cap
        elif f is LevelFormat.SINGLETON:
            if crd[k].shape[1] != cap:
                raise _fail(
                    k, f"singleton crd needs {cap} entries per member, got {crd[k].shape[1]}", ShapeError
                )
        else:
            raise _fail(k, f"{lv.type.to_text()} is not supported under batch levels", UnsupportedError)
    if values.ndim != 2 or values.shape != (B, cap):
        raise ShapeError(f"values of a batched tensor must have shape ({B}, {cap}), got {values.shape}")
    if depth != "structure":
        _check_live_bounds(bufs, bounds)


def _check_live_bounds(bufs: Buffers, bounds: tuple[tuple[int, int], ...]) -> None:
    """Bounds of the coordinates actually reachable from the root (capacity padding and
    loose holes excluded)."""
    fmt = bufs.format
    ent = _unpack_raw(bufs)
    for k, (lo_k, hi_k) in enumerate(bounds):
        c = ent.lvl[k]
        if fmt.levels[k].format is LevelFormat.STRUCTURED:
            lo_k, hi_k = 0, fmt.levels[k].type.m
        if c.shape[0]:
            _check_range(k, c, lo_k, hi_k)


def _unpack_raw(bufs: Buffers) -> Any:
    """Every stored entry in storage order (the ``unpack`` of :mod:`ust.convert`, registered)."""
    return conversion("unpack")(bufs, keep_zeros=True, keep_padding=True)


def _check_order(bufs: Buffers) -> None:
    """Entries read in storage order must be lexicographically (strictly, if unique) sorted."""
    fmt = bufs.format
    ent = _unpack_raw(bufs)
    n = ent.n
    if n < 2:
        return
    xp = ent.xp
    gt = xp.zeros(n - 1, dtype=bool)
    eq = xp.ones(n - 1, dtype=bool)
    for k, c in enumerate(ent.lvl):
        a, b = c[:-1], c[1:]
        lt = eq & (b < a)
        if bool(xp.any(lt)):
            e = int(xp.flatnonzero(lt)[0])
            raise FormatError(
                f"[buffers] level {k}: the format declares level {k} ordered but stored entry {e + 1} "
                f"comes before entry {e} in level order; declare it nonordered or sort the buffers",
                rule="buffers",
                level=k,
            )
        gt |= eq & (b > a)
        eq &= b == a
    if entries_unique(fmt) and bool(xp.any(eq)):
        e = int(xp.flatnonzero(eq)[0])
        raise FormatError(
            f"[buffers] entries {e} and {e + 1} have the same coordinates but the format is unique; "
            "declare the level nonunique or sum the duplicates",
            rule="buffers",
        )
