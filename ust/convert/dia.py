"""DIA straight to CSR or CSC: one masked compaction of the slot grid, no sort.

A DIA tensor keeps diagonal ``d`` (offset ``o = j - i``) as the row ``values[d, :]`` of an
``(ndiag, ncols)`` grid, ``values[d, j] = A[j - o, j]``.  Visiting the diagonals in ascending
offset lists a row's columns ``i + o`` in ascending order; in descending offset, a column's rows
``j - o`` in ascending order.  So both compressed layouts are the slot grid read row by row
(CSR) or column by column (CSC), with slots outside the matrix and explicit zeros dropped (the
rule of scipy's ``dia.tocsr`` / ``tocsc`` and of ust's general path): a handful of elementwise
passes and one compaction, written once against ``xp``.  The general path would build a key
per entry and order them, which on the GPU costs several times as much.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ust.convert.layouts import library_layout
from ust.runtime import xp as _xp

if TYPE_CHECKING:
    from ust.formats.model import Format
    from ust.tensor import Tensor

__all__ = ["dia_to_compressed", "is_dia"]


def is_dia(fmt: Format) -> bool:
    """``fmt`` is DIA's layout with one slot row per distinct offset (in any order)."""
    layout = library_layout(fmt)
    return layout is not None and layout.name == "dia" and fmt.levels[0].type.unique


def dia_to_compressed(t: Tensor, target: Format, by_column: bool) -> Tensor:
    """``t`` (a DIA tensor, see :func:`is_dia`) as ``target``: CSR, or CSC when ``by_column``."""
    from ust.convert.pack import choose_index_dtype
    from ust.tensor import Tensor

    xp = t.xp
    nrows, ncols = t.shape
    offsets = t.crd(0)
    ndiag = int(offsets.shape[0])
    lines = ncols if by_column else nrows  # the compressed dimension's extent
    wdt = _xp.work_dtype(ndiag * max(ncols, 1) + 1, nrows + ncols + 1, lines * ndiag + 1)
    order = xp.argsort(-offsets if by_column else offsets)
    off = offsets[order].astype(wdt)
    line = xp.arange(lines, dtype=wdt)[:, None]
    # the other coordinate of slot (line, k): row j - o of column j, or column i + o of row i
    other = line - off[None, :] if by_column else line + off[None, :]
    inside = (other >= 0) & (other < (nrows if by_column else ncols))
    column = line if by_column else xp.clip(other, 0, max(ncols - 1, 0))
    slot = order.astype(wdt)[None, :] * ncols + column
    vals = t.values[slot] if ndiag and ncols else xp.zeros((lines, ndiag), dtype=t.dtype)
    keep = inside & (vals != 0)
    counts = keep.sum(axis=1, dtype=wdt)
    picked = xp.flatnonzero(keep)
    nnz = int(picked.shape[0])
    itype = choose_index_dtype(target, t.shape, [nnz])
    indptr = xp.zeros(lines + 1, dtype=itype)
    indptr[1:] = xp.cumsum(counts, dtype=itype)
    indices = _xp.as_index(other.ravel()[picked], itype)
    values = vals.ravel()[picked]
    return Tensor(
        t.shape, target, values, pos=[None, indptr], crd=[None, indices], index_dtype=itype, check=False
    )
