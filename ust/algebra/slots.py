"""The dimension coordinates of every stored value slot of a tensor, and the slot it lives in.

Ops that keep a tensor's structure and only compute new values (SDDMM, sparse times dense,
scalar ops) need, for every value slot, the coordinates it stands for.  The general unpack of
:mod:`ust.convert.unpack` already walks any level format with array programs; run on a twin
tensor whose values are the slot numbers ``0 .. nse-1``, it returns exactly that map.  Padding
slots (DIA outside the matrix) are left out: their values stay zero.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Slots", "slots"]


class Slots(NamedTuple):
    """``dims[d][e]`` is dimension ``d`` of entry ``e``; ``slot[e]`` its flat value slot."""

    dims: tuple[Any, ...]
    slot: Any
    all_slots: bool  # every value slot is an entry, in order (slot == arange(nse))


def slots(t: Any) -> Slots:
    """Coordinates and flat value slot of every in-bounds stored slot of ``t`` (explicit zeros
    and block padding included, DIA padding outside the matrix excluded)."""
    from ust.convert.unpack import unpack
    from ust.tensor import Tensor

    xp = t.xp
    nse = t.nse
    ids = xp.arange(nse, dtype=np.int64).reshape(t.values.shape)
    nl = t.format.nlevels
    twin = Tensor(
        t.shape,
        t.format,
        ids,
        pos=[t.pos(k) for k in range(nl)],
        crd=[t.crd(k) for k in range(nl)],
        index_dtype=t.index_dtype,
        check=False,
    )
    ent = unpack(twin, keep_zeros=True)
    slot = ent.values
    all_slots = int(slot.shape[0]) == nse and (
        nse == 0 or (bool((slot[:1] == 0).all()) and _increasing(xp, slot))
    )
    return Slots(tuple(ent.dims()), slot, all_slots)


def _increasing(xp: Any, a: Any) -> bool:
    return int(a.shape[0]) < 2 or bool(xp.all(a[1:] > a[:-1]))
