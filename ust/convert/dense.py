"""Dense arrays in and out: NumPy on the CPU, CuPy on a GPU, any number of dimensions.

A dense array becomes a tensor of the all-dense identity format without a copy (C order);
``todense`` writes a tensor's entries into a new array (duplicates summed, DIA padding and
fill dropped), through scipy's compiled routines where the format is a scipy layout.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.convert.layouts import library_layout
from ust.formats.analysis import drops_zeros
from ust.formats.library import format as parse_format
from ust.formats.model import Dim, Format
from ust.runtime import xp as _xp
from ust.runtime.errors import ShapeError
from ust.tensor.limits import check_dense
from ust.tensor.validate import check_value_dtype

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["dense_format", "from_dense", "todense"]


@functools.lru_cache(maxsize=32)
def dense_format(ndim: int) -> Format:
    """``(d0, ..., dn) -> (d0 : dense, ..., dn : dense)``: a C-ordered dense array."""
    names = [f"d{k}" for k in range(ndim)]
    return parse_format(f"({', '.join(names)}) -> ({', '.join(f'{n} : dense' for n in names)})")


def from_dense(arr: Any) -> Tensor:
    """A dense-format tensor whose values are ``arr`` in C order (a view when contiguous)."""
    from ust.tensor import Tensor

    if arr.ndim == 0:
        raise ShapeError("a 0-dimensional array is not a tensor ust can store; reshape it to (1,)")
    check_value_dtype(arr.dtype, "dense arrays")
    xp = _xp.namespace(arr)
    vals = xp.ascontiguousarray(arr).reshape(-1)
    return Tensor(arr.shape, dense_format(arr.ndim), vals, check=False)


def todense(t: Tensor) -> Any:
    """A new dense array of ``t.shape`` holding ``t``'s entries (a ShapeError, before any
    work, where NumPy cannot represent the array or it would not fit the device's memory).

    The values of stored entries are copied bit for bit (a stored ``-0.0`` entry stays
    ``-0.0``, NaN payloads are kept); only duplicates are added."""
    xp = t.xp
    fmt = t.format
    check_dense(xp, t.shape, t.dtype, f"a dense array of shape {t.shape} and dtype {t.dtype}")
    if 0 in t.shape:  # no entries: nothing to read (a library's toarray may take O(extent) first)
        return xp.zeros(t.shape, dtype=t.dtype)
    if fmt.is_dense and all(isinstance(lv.expr, Dim) for lv in fmt.levels):
        lvl_shape = fmt.lvl_shape(t.shape)
        order = [lv.expr.dim for lv in fmt.levels]  # type: ignore[union-attr]
        arr = t.values.reshape(lvl_shape).transpose([order.index(d) for d in range(t.ndim)])
        return xp.ascontiguousarray(arr).copy() if arr.base is t.values.base else xp.ascontiguousarray(arr)
    lay = library_layout(fmt)
    if xp is np and t.ndim == 2 and lay is not None and lay.name != "bsc" and not _stored_negative_zero(t):
        from ust.convert.scipy import to_scipy

        return to_scipy(t).toarray()
    from ust.convert.unpack import unpack

    ent = unpack(t, keep_zeros=True)
    out = xp.zeros(t.shape, dtype=t.dtype)
    if ent.n == 0:
        return out
    lin: Any = None
    for c, s in zip(ent.dims(), t.shape):
        lin = c.astype(np.int64) if lin is None else lin * s + c
    flat = out.reshape(-1)
    if ent.unique:
        flat[lin] = ent.values
        return out
    order = _xp.argsort_stable(xp, lin)
    lin = lin[order]
    starts_mask = xp.empty(lin.shape[0], dtype=bool)
    starts_mask[0] = True
    xp.not_equal(lin[1:], lin[:-1], out=starts_mask[1:])
    starts = xp.flatnonzero(starts_mask)
    if int(starts.shape[0]) == int(lin.shape[0]):  # no duplicates stored after all: no sums
        flat[lin] = ent.values[order]
        return out
    flat[lin[starts]] = _xp.segment_sum(xp, ent.values[order], starts)
    return out


def _stored_negative_zero(t: Tensor) -> bool:
    """``t`` stores an entry whose value is a negative zero (in its real or imaginary part):
    scipy's ``toarray`` adds each entry into zeros, and ``0.0 + -0.0`` is ``0.0``.  Formats
    whose zeros are fill (DIA) hold no zero entries."""
    return not drops_zeros(t.format) and _negative_zeros(t.values)


def _negative_zeros(values: Any) -> bool:
    kind = np.dtype(values.dtype).kind
    if kind == "f":
        return bool(np.any(np.signbit(values) & (values == 0)))
    if kind == "c":
        return _negative_zeros(values.real) or _negative_zeros(values.imag)
    return False
