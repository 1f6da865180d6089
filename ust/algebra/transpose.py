"""Transposition as a relabelling of dimensions: the same buffers under a permuted map.

A format maps dimensions to levels.  Transposing a tensor permutes its dimensions, so the
transposed tensor is stored by exactly the same buffers under the map whose level
expressions name the permuted dimensions: CSR ``(i, j) -> (i : dense, j : compressed)``
becomes ``(i, j) -> (j : dense, i : compressed)``, which *is* CSC; COO becomes
``(i, j) -> (j : compressed(nonunique), i : singleton)``; ``BSR[r, c]`` becomes a block-sparse
column format with column-major blocks.  Every validation rule of a format is structural,
so the permuted map is always valid: no data moves, ever.  A caller who wants another
layout asks for it (``format=``) and pays one conversion.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ust.formats.model import Format
from ust.runtime.errors import ShapeError

__all__ = ["normalise_axes", "permuted_format", "transpose"]


def normalise_axes(ndim: int, axes: Sequence[int] | None) -> tuple[int, ...]:
    """NumPy's ``axes`` argument: None reverses the dimensions; otherwise a permutation."""
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    try:
        ax = tuple(int(a) + ndim if int(a) < 0 else int(a) for a in axes)
    except TypeError:
        raise ShapeError(f"axes must be a sequence of integers, got {axes!r}") from None
    if sorted(ax) != list(range(ndim)):
        raise ShapeError(f"axes {tuple(axes)} are not a permutation of the {ndim} dimensions")
    return ax


@functools.lru_cache(maxsize=1024)
def permuted_format(fmt: Format, axes: tuple[int, ...]) -> Format:
    """The format storing ``transpose(T, axes)`` in ``T``'s buffers.

    New dimension ``d`` is old dimension ``axes[d]``; dimension names stay in place, so the
    text reads like the original with the names swapped in the level expressions.
    """
    from ust.formats.library import format as parse_format

    names = fmt._names
    inverse = {old: new for new, old in enumerate(axes)}
    renamed = [names[inverse[old]] for old in range(fmt.ndim)]  # old dim -> its new name
    levels = ", ".join(f"{lv.expr.to_text(renamed)} : {lv.type.to_text()}" for lv in fmt.levels)
    return parse_format(f"({', '.join(names)}) -> ({levels})")


def transpose(t: Any, axes: Sequence[int] | None = None) -> Any:
    """``t`` with its dimensions permuted, sharing every buffer (a view)."""
    from ust.tensor import Tensor

    ax = normalise_axes(t.ndim, axes)
    if ax == tuple(range(t.ndim)):
        return t
    fmt = permuted_format(t.format, ax)
    shape = tuple(t.shape[a] for a in ax)
    nl = t.format.nlevels
    out = Tensor(
        shape,
        fmt,
        t.values,
        pos=[t.pos(k) for k in range(nl)],
        crd=[t.crd(k) for k in range(nl)],
        index_dtype=t.index_dtype,
        check=False,
    )
    return out
