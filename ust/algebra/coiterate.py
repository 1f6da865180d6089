"""Co-iteration of two sparse operands: union (add, subtract) and intersection (multiply).

TACO lowers a union to a merge of two sorted coordinate streams and an intersection to a
search of one stream in the other.  Here the same is written once against ``xp`` (NumPy on the
CPU, CuPy on the GPU), with no loop over entries:

1. each operand's entries are mapped to the *result format's* level coordinates and
   linearised into one int64 key per entry (``key = ((c0 * S1) + c1) * S2 + ...``), so that
   key order is the result's storage order; operands already stored in that order are not
   sorted, others are sorted once; duplicates are summed;
2. union: ``searchsorted`` gives every entry of each stream its slot in the merged stream
   (``i + #{b < a_i}`` and ``j + #{a <= b_j}``), equal neighbours are summed;
   intersection: ``searchsorted`` finds each key of one stream in the other, and the NaN or
   infinite values stored in one operand only (``v * 0`` is NaN, SciPy's rule) are merged in;
3. results that are exactly zero are dropped (SciPy's rule for sparse-sparse arithmetic),
   the keys are split back into level coordinates and :func:`~ust.convert.pack.pack` builds
   the result's levels directly from the sorted, unique stream.

When the result format's level space does not fit 63-bit keys, dimension coordinates
(row-major) are used instead and the packer sorts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ust.formats.analysis import sort_prefix
from ust.formats.model import Format
from ust.runtime import xp as _xp
from ust.runtime.errors import UnsupportedError

__all__ = [
    "Keyed",
    "canonical",
    "intersection",
    "keyed",
    "may_hold_nonfinite",
    "nonfinite_unmatched",
    "to_tensor",
    "union",
    "with_nonfinite_alone",
]

_KEY_LIMIT = 2**63 - 1


@dataclass
class Keyed:
    """Entries of one operand as sorted, unique int64 keys in a key space, plus values."""

    xp: ModuleType
    fmt: Format  # the format whose level space the keys linearise ("level" mode)
    shape: tuple[int, ...]
    mode: str  # "level": keys linearise fmt's level coordinates; "dims": row-major dimensions
    extents: tuple[int, ...]
    lows: tuple[int, ...]
    keys: Any
    values: Any

    @property
    def n(self) -> int:
        return int(self.keys.shape[0])


def key_space(
    fmt: Format, shape: tuple[int, ...], mode: str | None = None
) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """("level" | "dims", extents, lows) for keys of a tensor of ``shape`` stored in ``fmt``
    (``mode="dims"`` asks for row-major dimension keys)."""
    bounds = fmt.lvl_bounds(shape)
    ext = tuple(max(hi - lo, 1) for lo, hi in bounds)
    if mode != "dims" and math.prod(ext) <= _KEY_LIMIT:
        return "level", ext, tuple(lo for lo, _ in bounds)
    dims = tuple(max(int(s), 1) for s in shape)
    if math.prod(dims) <= _KEY_LIMIT:
        return "dims", dims, (0,) * len(dims)
    raise UnsupportedError(
        f"co-iteration needs one 63-bit key per entry; a {shape} tensor has more positions than "
        f"2**63 (supported: tensors with fewer than 2**63 elements)"
    )


def _linearise(xp: ModuleType, coords: list[Any], extents: tuple[int, ...]) -> Any:
    key: Any = None
    for c, e in zip(coords, extents):
        key = c.astype(np.int64) if key is None else key * e + c
    return key if key is not None else xp.zeros(0, dtype=np.int64)


def _starts(xp: ModuleType, keys: Any) -> Any:
    """Index of the first entry of every run of equal keys (keys sorted)."""
    mask = xp.empty(keys.shape[0], dtype=bool)
    if keys.shape[0]:
        mask[0] = True
        xp.not_equal(keys[1:], keys[:-1], out=mask[1:])
    return xp.flatnonzero(mask)


def keyed(t: Any, fmt: Format, *, keep_zeros: bool = False, mode: str | None = None) -> Keyed:
    """``t``'s entries as sorted unique keys of ``fmt``'s level space (duplicates summed);
    ``mode="dims"``: row-major dimension keys instead."""
    from ust.convert.unpack import unpack

    xp = t.xp
    mode, ext, lows = key_space(fmt, t.shape, mode)
    ent = unpack(t, keep_zeros=keep_zeros)
    if mode == "level":
        lvl = list(ent.lvl) if ent.fmt == fmt else list(fmt.dim_to_lvl(ent.dims()))
        coords = [c - lo if lo else c for c, lo in zip(lvl, lows)]
        in_order = ent.sorted_by is not None and sort_prefix(ent.sorted_by, fmt) == 0
    else:
        from ust.convert.dense import dense_format

        coords = list(ent.dims())
        in_order = ent.sorted_by is not None and sort_prefix(ent.sorted_by, dense_format(len(ext))) == 0
    keys = _linearise(xp, coords, ext)
    values = ent.values
    if not in_order and ent.n > 1:
        if xp is np:
            perm = _xp.stable_order(xp, coords, list(ext))
        else:
            perm = xp.argsort(keys)
        keys, values = keys[perm], values[perm]
    if not ent.unique and ent.n > 1:
        st = _starts(xp, keys)
        if int(st.shape[0]) < ent.n:
            values = _xp.segment_sum(xp, values, st)
            keys = keys[st]
    return Keyed(xp, fmt, tuple(t.shape), mode, ext, lows, keys, values)


def _nonzero(xp: ModuleType, keys: Any, values: Any) -> tuple[Any, Any]:
    nz = xp.flatnonzero(values != 0)
    if int(nz.shape[0]) == int(values.shape[0]):
        return keys, values
    return keys[nz], values[nz]


def _merge_order(xp: ModuleType, ka: Any, kb: Any, cat: Any) -> Any:
    """The permutation that sorts ``cat = concatenate([ka, kb])`` (both sorted; ties: ``ka`` first).

    NumPy's stable sort finds the two sorted runs and merges them in one pass; on the GPU each
    element's merged slot comes from a parallel ``searchsorted`` in the other stream.
    """
    if xp is np:
        return np.argsort(cat, kind="stable")
    na, nb = int(ka.shape[0]), int(kb.shape[0])
    order = xp.empty(na + nb, dtype=np.int64)
    order[xp.arange(na, dtype=np.int64) + xp.searchsorted(kb, ka, side="left")] = xp.arange(
        na, dtype=np.int64
    )
    order[xp.arange(nb, dtype=np.int64) + xp.searchsorted(ka, kb, side="right")] = xp.arange(
        na, na + nb, dtype=np.int64
    )
    return order


def _merge(xp: ModuleType, ka: Any, va: Any, kb: Any, vb: Any) -> tuple[Any, Any]:
    """Two sorted key streams with their values as one sorted stream, equal keys summed (one
    stream returned as it is, not copied, when the other is empty)."""
    if int(kb.shape[0]) == 0:
        return ka, va
    if int(ka.shape[0]) == 0:
        return kb, vb
    n = int(ka.shape[0]) + int(kb.shape[0])
    cat = xp.concatenate([ka, kb])
    order = _merge_order(xp, ka, kb, cat)
    keys = cat[order]
    vals = xp.concatenate([va, vb])[order]
    st = _starts(xp, keys)
    if int(st.shape[0]) < n:
        vals = _xp.segment_sum(xp, vals, st)
        keys = keys[st]
    return keys, vals


def union(a: Keyed, b: Keyed, dtype: Any, *, negate_b: bool = False) -> tuple[Any, Any]:
    """Keys and values of ``a + b`` (``a - b`` with ``negate_b``), zeros dropped."""
    xp = a.xp
    va = a.values.astype(dtype, copy=False)
    vb = b.values.astype(dtype, copy=False)
    if negate_b:
        vb = xp.negative(vb)
    if b.n == 0:
        return _nonzero(xp, a.keys, va.copy())
    if a.n == 0:
        return _nonzero(xp, b.keys, vb.copy())
    return _nonzero(xp, *_merge(xp, a.keys, va, b.keys, vb))


def _found(xp: ModuleType, keys: Any, sorted_keys: Any) -> tuple[Any, Any]:
    """Indices into ``sorted_keys`` and the positions of ``keys`` that hold one of them."""
    n = int(sorted_keys.shape[0])
    if n == 0 or int(keys.shape[0]) == 0:
        return xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    idx = xp.minimum(xp.searchsorted(sorted_keys, keys), n - 1)
    hit = xp.flatnonzero(sorted_keys[idx] == keys)
    return idx[hit], hit


def may_hold_nonfinite(xp: ModuleType, *values: Any) -> bool:
    """False when no array of ``values`` holds a NaN or an infinity: one reduction per array
    and one read of the answer (a sum is finite only when every term is; one that overflows
    is looked at again, entry by entry, by the caller)."""
    ok: Any = True
    for v in values:
        if int(v.size) and v.dtype.kind in "fc":
            with np.errstate(over="ignore", invalid="ignore"):
                ok = ok & xp.isfinite(v.sum())
    return not bool(ok)


def nonfinite_unmatched(
    xp: ModuleType, keys: Any, values: Any, other_keys: Any, dtype: Any
) -> tuple[Any, Any]:
    """SciPy's rule for an entry of a product that meets the other operand's implicit zero:
    the positions of the entries (``keys`` in any order, ``values``) whose value is NaN or
    infinite and whose key ``other_keys`` (sorted) does not hold, and their value ``v * 0``
    in ``dtype`` (NaN).  Only the non-finite entries are searched in ``other_keys``."""
    empty = xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=dtype)
    if int(values.shape[0]) == 0 or values.dtype.kind not in "fc":
        return empty
    bad = xp.flatnonzero(~xp.isfinite(values))
    if int(bad.shape[0]) == 0:
        return empty
    alone = xp.ones(int(bad.shape[0]), dtype=bool)
    alone[_found(xp, keys[bad], other_keys)[1]] = False
    pos = bad[xp.flatnonzero(alone)]
    with np.errstate(invalid="ignore"):
        vals = values[pos].astype(dtype) * xp.zeros((), dtype=dtype)
    return _nonzero(xp, pos, vals)


def _nonfinite_alone(x: Keyed, y: Keyed, dtype: Any) -> tuple[Any, Any]:
    """The entries of ``x`` that ``y`` does not store and whose value is not finite, with
    value ``v * 0`` in ``dtype`` (NaN: the implicit zero of ``y`` met), zeros dropped."""
    pos, vals = nonfinite_unmatched(x.xp, x.keys, x.values, y.keys, dtype)
    return x.keys[pos], vals


def intersection(a: Keyed, b: Keyed, dtype: Any) -> tuple[Any, Any]:
    """Keys and values of the elementwise product ``a * b``, zeros dropped.

    An entry stored in one operand only meets the other's implicit zero (SciPy's rule, and
    NumPy's for dense ``a * b``): a finite value gives 0 and is dropped; a NaN or an infinity
    gives ``v * 0`` (NaN), stored.  Those entries are merged into the intersection's keys; when
    no value is non-finite (checked by one reduction per operand) nothing more is done."""
    xp = a.xp
    small, large = (a, b) if a.n <= b.n else (b, a)
    idx, hit = _found(xp, small.keys, large.keys)
    keys = small.keys[hit]
    vals = small.values[hit].astype(dtype) * large.values[idx].astype(dtype)
    keys, vals = _nonzero(xp, keys, vals)
    if may_hold_nonfinite(xp, a.values, b.values):
        for x, y in ((a, b), (b, a)):
            keys, vals = _merge(xp, keys, vals, *_nonfinite_alone(x, y, dtype))
    return keys, vals


def with_nonfinite_alone(product: Any, a: Any, b: Any, dtype: Any) -> Any:
    """``product``, the intersection ``a * b`` computed elsewhere (the compiled route: TACO's
    semantics of ``A(i,j) * B(i,j)``) in its own format, completed to SciPy's rule as
    :func:`intersection` applies it: the NaN or infinite values stored in one operand only are
    merged in as ``v * 0`` (NaN).  When no value is non-finite (one reduction per operand) it
    is ``product`` itself; otherwise a new tensor in ``product``'s format and index dtype."""
    xp = product.xp
    if not may_hold_nonfinite(xp, a.values, b.values):
        return product
    fmt = product.format
    ka, kb = keyed(a, fmt), keyed(b, fmt)
    extra = [_nonfinite_alone(x, y, dtype) for x, y in ((ka, kb), (kb, ka))]
    if not any(int(k.shape[0]) for k, _ in extra):
        return product  # finite values whose sum overflowed, or none alone
    kp = keyed(product, fmt)
    keys, vals = kp.keys, kp.values.astype(dtype, copy=False)
    # a key of both: ``y`` stores an explicit or padding zero there, the product a NaN already
    for k, v in extra:
        keys, vals = _merge(xp, keys, vals, k, v)
    return to_tensor(kp, keys, vals, fmt, index_dtype=product.index_dtype)


def to_tensor(like: Keyed, keys: Any, values: Any, fmt: Format, *, index_dtype: Any = None) -> Any:
    """Pack sorted unique keys of ``like``'s key space into a Tensor of ``fmt``."""
    from ust.convert.dense import dense_format
    from ust.convert.pack import pack
    from ust.convert.unpack import Entries

    xp = like.xp
    coords: list[Any] = []
    rem = keys
    for e in reversed(like.extents[1:]):
        coords.append(rem % e)
        rem = rem // e
    coords.append(rem)
    coords.reverse()
    lvl = [c + lo if lo else c for c, lo in zip(coords, like.lows)]
    if like.mode == "level":
        ent = Entries(xp, like.fmt, like.shape, lvl, values, like.fmt, True)
    else:
        ident = dense_format(len(like.shape))
        ent = Entries(xp, ident, like.shape, lvl, values, ident, True)
    return pack(ent, fmt, index_dtype=index_dtype)


def canonical(t: Any, fmt: Format | None = None) -> Any:
    """``t`` with duplicates summed and entries in storage order, in ``fmt`` (default: its own)."""
    fmt = t.format if fmt is None else fmt
    k = keyed(t, fmt, keep_zeros=True)
    return to_tensor(k, k.keys, k.values, fmt)
