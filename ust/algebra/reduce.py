"""Reductions: ``sum``, ``max`` and ``min`` over all entries or along one axis.

Semantics are SciPy's (``scipy.sparse`` arrays): ``sum`` accumulates in NumPy's sum dtype
(small integers widen to int64 / uint64); ``max`` / ``min`` count implicit zeros -- a row
(axis=1) or column (axis=0) that does not store all of its positions takes part with a 0,
an all-empty row gives 0 -- and duplicates are summed first.  Axis results are dense arrays
(SciPy returns them as a 1-D COO array for max/min: the same values).

The array program, written once against ``xp``: the entries' coordinates along the kept
dimensions become a group id; sums are segmented sums over entries sorted by group (not
sorted again when they already are, e.g. CSR rows); extremes use ``maximum.at`` /
``minimum.at`` (on CuPy: atomics for integers, a sort by (group, value) for floating values,
whose 64-bit atomics CuPy rounds), complex values lexicographically as NumPy orders them.

An axis result is a new dense array of the kept extents: one that NumPy cannot represent or
the device cannot hold is a ShapeError naming the bytes, before any work
(:func:`check_result`, the rule of :func:`ust.tensor.limits.check_dense`).  ``axis=None``
takes O(nnz) time and memory at any shape (no key over all positions).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from ust.runtime import xp as _xp
from ust.runtime.errors import ShapeError
from ust.tensor.limits import check_dense

__all__ = [
    "check_axis",
    "check_result",
    "extreme_array",
    "segment_extreme",
    "sorted_extreme",
    "sum_array",
    "sum_dtype",
]


def sum_dtype(dtype: Any) -> np.dtype:
    """NumPy's (and SciPy's) accumulator dtype for a sum of ``dtype`` values."""
    return np.zeros(0, dtype=dtype).sum().dtype


def check_axis(ndim: int, axis: Any) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        if len(axis) == ndim:
            return None
        if len(axis) != 1:
            raise ShapeError(f"axis {axis!r}: supported: None or one axis")
        axis = axis[0]
    try:
        ax = int(axis)
    except (TypeError, ValueError):
        raise ShapeError(f"axis must be None or an integer, not {axis!r}") from None
    if not -ndim <= ax < ndim:
        raise ShapeError(f"axis {axis} is out of range for a {ndim}-D tensor")
    return ax % ndim


def check_result(xp: ModuleType, shape: tuple[int, ...], axis: int | None, dtype: Any, op: str) -> None:
    """ShapeError, before any work, where the dense result of ``op`` along ``axis`` (the
    extents of ``shape`` but ``axis``, of ``dtype``) cannot be stored; ``axis=None`` (a
    scalar) always can."""
    if axis is None:
        return
    out_shape = tuple(s for d, s in enumerate(shape) if d != axis)
    check_dense(
        xp,
        out_shape,
        dtype,
        f"{op}(axis={axis}) of a {shape} tensor, a dense {out_shape} array of {np.dtype(dtype)}",
        hint="reduce with axis=None (a scalar, O(nnz) at any shape) or over a slice of the tensor",
    )


def _groups(
    xp: ModuleType, dims: tuple[Any, ...], shape: tuple[int, ...], axis: int
) -> tuple[Any, tuple[int, ...]]:
    keep = [d for d in range(len(shape)) if d != axis]
    out_shape = tuple(shape[d] for d in keep)
    g: Any = None
    for d in keep:
        g = dims[d].astype(np.int64) if g is None else g * shape[d] + dims[d]
    return g, out_shape


def _sorted(xp: ModuleType, g: Any) -> bool:
    return int(g.shape[0]) < 2 or bool(xp.all(g[1:] >= g[:-1]))


def sum_array(t: Any, axis: int | None) -> Any:
    """``t.sum(axis)`` as an array program (scalar for ``axis=None``)."""
    from ust.convert.unpack import unpack

    xp = t.xp
    sdt = sum_dtype(t.dtype)
    check_result(xp, t.shape, axis, sdt, "sum")
    ent = unpack(t)
    vals = ent.values.astype(sdt, copy=False)
    if axis is None:
        return vals.sum(dtype=sdt)
    g, out_shape = _groups(xp, ent.dims(), t.shape, axis)
    G = math.prod(out_shape)
    out = xp.zeros(G, dtype=sdt)
    if ent.n:
        if not _sorted(xp, g):
            if xp is np:
                perm, _ = (
                    _xp.counting_sort(xp, g, G) if G <= 1 << 26 else (np.argsort(g, kind="stable"), None)
                )
            else:
                perm = xp.argsort(g)
            g, vals = g[perm], vals[perm]
        mask = xp.empty(g.shape[0], dtype=bool)
        mask[0] = True
        xp.not_equal(g[1:], g[:-1], out=mask[1:])
        starts = xp.flatnonzero(mask)
        out[g[starts]] = _xp.segment_sum(xp, vals, starts)
    return out.reshape(out_shape)


# ----------------------------------------------------------------------------- max / min

_WORK = {1: np.int32, 2: np.int32}  # atomics need 32-bit words: small ints widen (exactly)


def _identity(dtype: np.dtype, op: str) -> Any:
    if dtype.kind == "f":
        return -np.inf if op == "maximum" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "maximum" else info.max


def segment_extreme(xp: ModuleType, op: str, values: Any, group: Any, G: int) -> Any:
    """Per-group ``op`` ("maximum" / "minimum") of ``values``; empty groups hold op's identity.

    Complex values compare lexicographically (real part, then imaginary), as NumPy orders them.
    """
    dt = np.dtype(values.dtype)
    if xp is not np and dt.kind in "fc":
        return sorted_extreme(xp, op, values, group, G)
    if dt.kind == "c":
        re = segment_extreme(xp, op, xp.ascontiguousarray(values.real), group, G)
        tie = values.real == re[group]
        fill = -np.inf if op == "maximum" else np.inf
        im = segment_extreme(xp, op, xp.where(tie, values.imag, fill), group, G)
        out = xp.empty(G, dtype=dt)
        out.real = re
        out.imag = im
        return out
    work = dt
    if dt.kind in "iu" and dt.itemsize < 4:
        work = np.dtype(np.int32 if dt.kind == "i" else np.uint32)
    elif dt.kind == "f" and dt.itemsize < 4:
        work = np.dtype(np.float32)
    out = xp.full(G, _identity(work, op), dtype=work)
    getattr(xp, op).at(out, group, values.astype(work, copy=False))
    return out.astype(dt, copy=False)


def sorted_extreme(xp: ModuleType, op: str, values: Any, group: Any, G: int) -> Any:
    """``segment_extreme`` by sorting: entries ordered by (group, value), each group's last
    (maximum) or first (minimum) entry taken.

    The GPU path for floating values: CuPy's ``maximum.at`` / ``minimum.at`` on float64 go
    through a ``fmaxf`` (float32) atomic and round the result.  A sort moves values without
    arithmetic, so the result is one of the stored values exactly.  Complex values sort by
    real part, then imaginary part (NumPy's order); a group holding a NaN gives NaN, as
    ``np.maximum`` / ``np.minimum`` propagate it.
    """
    dt = np.dtype(values.dtype)
    ident = _identity(np.dtype(dt.char.lower()) if dt.kind == "c" else dt, op)
    out = xp.full(G, complex(ident, ident) if dt.kind == "c" else ident, dtype=dt)
    n = int(values.shape[0])
    if n == 0:
        return out
    keys = [values.imag, values.real] if dt.kind == "c" else [values]
    perm: Any = None
    for key in (*keys, group):  # stable sorts, least significant key first
        p = _xp.argsort_stable(xp, key if perm is None else key[perm])
        perm = p if perm is None else perm[p]
    gs = group[perm]
    edge = xp.empty(n, dtype=bool)  # the last (maximum) or first (minimum) entry of each group
    if op == "maximum":
        edge[-1] = True
        xp.not_equal(gs[1:], gs[:-1], out=edge[:-1])
    else:
        edge[0] = True
        xp.not_equal(gs[1:], gs[:-1], out=edge[1:])
    pick = perm[xp.flatnonzero(edge)]
    out[group[pick]] = values[pick]
    nan = xp.flatnonzero(xp.isnan(values))
    if int(nan.shape[0]):
        out[group[nan]] = values[nan]
    return out


def _with_zero(xp: ModuleType, op: str, x: Any) -> Any:
    """``op(x, 0)`` elementwise (complex lexicographically)."""
    if np.dtype(x.dtype).kind != "c":
        return getattr(xp, op)(x, x.dtype.type(0))
    below = (x.real < 0) | ((x.real == 0) & (x.imag < 0))
    pick_zero = below if op == "maximum" else ~below & (x != 0)
    return xp.where(pick_zero, x.dtype.type(0), x)


def _merged(t: Any, *, keep_zeros: bool | None = False) -> tuple[tuple[Any, ...], Any]:
    """``t``'s entries, duplicates summed, as dimension coordinates and values: sorted by
    comparison of the coordinates themselves (no key over all positions, so any shape);
    stored zeros dropped (``keep_zeros=None``: kept where the format tells them from fill)."""
    from ust.convert.unpack import unpack

    xp = t.xp
    ent = unpack(t, keep_zeros=keep_zeros)
    dims, values = tuple(ent.dims()), ent.values
    if ent.unique or ent.n < 2:
        return dims, values
    perm = _xp.stable_order(xp, list(dims), list(t.shape))
    if perm is not None:
        dims, values = tuple(d[perm] for d in dims), values[perm]
    new = xp.zeros(ent.n, dtype=bool)
    new[0] = True
    for d in dims:
        new[1:] |= d[1:] != d[:-1]
    starts = xp.flatnonzero(new)
    if int(starts.shape[0]) < ent.n:
        values = _xp.segment_sum(xp, values, starts)
        dims = tuple(d[starts] for d in dims)
    return dims, values


def extreme_array(t: Any, axis: int | None, op: str) -> Any:
    """``t.max(axis)`` (op "maximum") or ``t.min(axis)`` (op "minimum") as an array program."""
    xp = t.xp
    if 0 in t.shape:
        raise ShapeError(f"zero-size tensor of shape {t.shape}: {op} has no identity")
    check_result(xp, t.shape, axis, t.dtype, "max" if op == "maximum" else "min")
    dims, values = _merged(t)
    n = int(values.shape[0])
    if axis is None:
        total = math.prod(t.shape)
        if n == 0:
            return t.dtype.type(0) if xp is np else xp.zeros((), dtype=t.dtype)
        m = segment_extreme(xp, op, values, xp.zeros(n, dtype=np.int64), 1)
        if n < total:
            m = _with_zero(xp, op, m)
        return m[0] if xp is np else m.reshape(())
    g, out_shape = _groups(xp, dims, t.shape, axis)
    G = math.prod(out_shape)
    counts = xp.bincount(g, minlength=G) if n else xp.zeros(G, dtype=np.int64)
    ext = segment_extreme(xp, op, values, g, G) if n else xp.zeros(G, dtype=t.dtype)
    full = counts == t.shape[axis]
    res = xp.where(full, ext, _with_zero(xp, op, ext))
    res = xp.where(counts == 0, t.dtype.type(0), res)
    return res.astype(t.dtype, copy=False).reshape(out_shape)
