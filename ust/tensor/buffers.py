"""``Buffers``: the frozen record of a tensor's storage (docs/storage.md).

Storage routines (validation, unpacking, packing) work on this record, not on a
:class:`~ust.tensor.Tensor`: shape, Format, one ``pos`` and one ``crd`` entry per level
(``None`` where the level stores none) and ``values``.  A Tensor hands out its record with
:attr:`Tensor.bufs <ust.tensor.Tensor.bufs>`; nothing here copies an array.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ust.formats.model import Format, LevelFormat
from ust.runtime import xp as _xp

__all__ = ["Buffers", "as_buffers"]


@dataclass(frozen=True, eq=False)
class Buffers:
    """Shape, format and the buffers of one tensor (arrays shared, never copied)."""

    shape: tuple[int, ...]
    format: Format
    pos: tuple[Any, ...]
    crd: tuple[Any, ...]
    values: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def xp(self) -> ModuleType:
        """The array namespace of the buffers (numpy or cupy)."""
        return _xp.namespace(self.values)

    @property
    def nse(self) -> int:
        """Stored value slots (``values.size``), padding included."""
        return int(self.values.size)

    def caps(self) -> list[int]:
        """Per-member position capacity of every level of a batched tensor."""
        fmt = self.format
        bounds = fmt.lvl_bounds(self.shape)
        caps: list[int] = []
        cap = 1
        for k, lv in enumerate(fmt.levels):
            if lv.format is LevelFormat.BATCH:
                caps.append(1)
                continue
            if lv.format in (LevelFormat.DENSE, LevelFormat.RANGE):
                cap *= bounds[k][1] - bounds[k][0]
            elif self.crd[k] is not None:
                cap = int(self.crd[k].shape[-1])
            caps.append(cap)
        return caps


def as_buffers(t: Any) -> Buffers:
    """``t`` itself when it is a Buffers record, else its record (``t.bufs``, a Tensor's)."""
    return t if isinstance(t, Buffers) else t.bufs
