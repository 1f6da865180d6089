"""Direct CPU conversions that need no unpack: CSR <-> DCSR, CSC <-> DCSC, and COO -> CSR.

DCSR is CSR with its empty rows dropped: ``pos0 = [0, k]``, ``crd0`` the ``k`` nonempty rows,
``pos1`` CSR's ``indptr`` at those rows plus its end, and the same ``crd1`` / values (DCSC is
the same with columns, on CSC's buffers).  Both ways are one pass over the ``indptr`` (or the
nonempty rows): a few array operations, where the general path unpacks and repacks every entry.
The results share the source's ``crd1`` (column coordinates) and values, as the CSR -> COO
library route (SciPy's ``csr.tocoo``) does.

Canonical COO -> canonical CSR is the same kind of pass: canonical COO is row-major with unique
entries, so CSR's indices and values are COO's column coordinates and values, and ``indptr``
comes from the runs of equal rows.  SciPy's ``coo.tocsr`` (the library route) first builds a
``coo_array`` that re-checks every coordinate's bounds, copies every entry, then looks for
duplicates: none of which a Tensor's buffers (validated when it was built) need.

:data:`DIRECT_ROUTES` is the pair table; the planner's ``"direct"`` rule (:mod:`ust.plan.rules`)
takes it where :func:`direct_step` finds the pair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.formats.library import get as get_format

if TYPE_CHECKING:
    from ust.formats.model import Format
    from ust.tensor import Tensor

__all__ = ["DIRECT_ROUTES", "compressed_to_doubly", "coo_to_csr", "direct_step", "doubly_to_compressed"]


def compressed_to_doubly(t: Tensor, fmt: Format) -> Tensor:
    """Canonical CSR (CSC) ``t`` as canonical DCSR (DCSC) ``fmt``: the empty lines dropped."""
    from ust.tensor import Tensor

    indptr = t.pos(1)
    itype = np.dtype(t.index_dtype)
    nnz = int(indptr[-1]) if indptr.size else 0
    lines = np.flatnonzero(np.diff(indptr))  # the nonempty rows (columns), ascending
    k = int(lines.size)
    pos1 = np.empty(k + 1, dtype=itype)
    pos1[:k] = indptr[lines]
    pos1[k] = nnz
    return Tensor(
        t.shape,
        fmt,
        t.values[:nnz],
        pos=[np.array([0, k], dtype=itype), pos1],
        crd=[lines.astype(itype), t.crd(1)[:nnz]],
        index_dtype=itype,
        check=False,
    )


def doubly_to_compressed(t: Tensor, fmt: Format) -> Tensor:
    """Canonical DCSR (DCSC) ``t`` as canonical CSR (CSC) ``fmt``: the empty lines put back."""
    from ust.tensor import Tensor

    by_column = fmt.levels[0].expr.dims == (1,)
    n = t.shape[1 if by_column else 0]
    itype = np.dtype(t.index_dtype)
    pos0, lines, pos1 = t.pos(0), t.crd(0), t.pos(1)
    k = int(pos0[1]) if pos0.size > 1 else 0
    pos1 = pos1[: k + 1]
    nnz = int(pos1[-1]) if pos1.size else 0
    counts = np.zeros(n, dtype=itype)
    counts[lines[:k]] = np.diff(pos1)  # each nonempty line's length (lines are unique)
    indptr = np.empty(n + 1, dtype=itype)
    indptr[0] = 0
    np.cumsum(counts, out=indptr[1:])
    return Tensor(
        t.shape,
        fmt,
        t.values[:nnz],
        pos=[None, indptr],
        crd=[None, t.crd(1)[:nnz]],
        index_dtype=itype,
        check=False,
    )


def coo_to_csr(t: Tensor, fmt: Format) -> Tensor:
    """Canonical COO ``t`` as canonical CSR ``fmt``.  Canonical COO lists the entries row by row,
    columns ascending, as CSR does: CSR's indices and values are COO's column coordinates and
    values as they stand, and only ``indptr`` is new, from the runs of equal rows (one compare
    pass over the rows, then a cumulative sum over the rows)."""
    from ust.runtime.errors import ShapeError
    from ust.tensor import Tensor

    nrows = t.shape[0]
    itype = np.dtype(t.index_dtype)
    n = int(t.pos(0)[1]) if t.pos(0).size > 1 else 0
    row = t.crd(0)[:n]
    if n and not (int(row[0]) >= 0 and int(row[-1]) < nrows):  # sorted rows: their ends bound them
        raise ShapeError(f"COO row coordinates outside [0, {nrows}): the tensor's buffers are invalid")
    counts = np.zeros(nrows, dtype=itype)
    if n:  # where each run of one row begins, and its length (runs are unique rows)
        first = np.flatnonzero(np.concatenate(([True], row[1:] != row[:-1])))
        counts[row[first]] = np.diff(first, append=n)
    indptr = np.empty(nrows + 1, dtype=itype)
    indptr[0] = 0
    np.cumsum(counts, out=indptr[1:])
    return Tensor(
        t.shape,
        fmt,
        t.values[:n],
        pos=[None, indptr],
        crd=[None, t.crd(1)[:n]],
        index_dtype=itype,
        check=False,
    )


#: (source, target) standard format names -> (description, function(tensor, target format)).
DIRECT_ROUTES: dict[tuple[str, str], tuple[str, Callable[[Any, Any], Any]]] = {
    ("CSR", "DCSR"): ("CSR -> DCSR (the empty rows of indptr dropped)", compressed_to_doubly),
    ("CSC", "DCSC"): ("CSC -> DCSC (the empty columns of indptr dropped)", compressed_to_doubly),
    ("DCSR", "CSR"): ("DCSR -> CSR (indptr rebuilt over every row)", doubly_to_compressed),
    ("DCSC", "CSC"): ("DCSC -> CSC (indptr rebuilt over every column)", doubly_to_compressed),
    ("COO", "CSR"): ("COO -> CSR (indptr from the runs of equal rows)", coo_to_csr),
}


def direct_step(src: Format, dst: Format) -> tuple[str, Callable[[Any, Any], Any]] | None:
    """The direct route from ``src`` to ``dst`` (both canonical standard formats), if any."""
    a, b = _standard(src), _standard(dst)
    if a is None or b is None:
        return None
    return DIRECT_ROUTES.get((a, b))


def _standard(fmt: Format) -> str | None:
    for name in ("CSR", "CSC", "DCSR", "DCSC", "COO"):
        if fmt == get_format(name):
            return name
    return None
