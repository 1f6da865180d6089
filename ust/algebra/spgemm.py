"""SpGEMM ``C = A @ B`` with both operands sparse, the result in a requested format (default CSR).

Routes (chosen by the rule table): SciPy's compiled SpGEMM on zero-copy views of any pair of
SciPy layouts (CPU); CSR conversion first for other formats; cuSPARSE's generic SpGEMM for
canonical CSR x CSR with 32-bit indices (GPU), again after a conversion for other formats; and
an expand-sort-compress array program written once against ``xp`` for everything a library
does not take (integer values on the GPU, and as a candidate everywhere): every stored
``A[i, k]`` meets the row ``k`` of ``B`` (one segment expansion), the products are sorted by
``(i, j)`` and summed.  Exact zeros of the sum are dropped on the SciPy and array-program
routes (SciPy's rule); cuSPARSE keeps structural zeros, as CuPy's ``@`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ust.algebra.coiterate import Keyed, _starts, to_tensor
from ust.algebra.problem import choose, problem
from ust.formats.library import get
from ust.formats.model import Format
from ust.plan.planner import c_compiler_available
from ust.plan.routes import Route, register, route_of
from ust.runtime import xp as _xp
from ust.runtime.errors import ShapeError, UnsupportedError

__all__ = ["spgemm"]


def _scipy(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    from ust.algebra.library import from_library

    return from_library(a.to_scipy() @ b.to_scipy(), fmt)


def _generated_c(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    from ust.algebra.spgemm_c import spgemm_csr_c
    from ust.tensor import Tensor

    csr = get("CSR")
    itype = np.promote_types(a.index_dtype, b.index_dtype)
    if max(a.shape[0], b.shape[1]) >= 2**31 - 1:
        itype = np.dtype(np.int64)
    ops = []
    for t in (a, b):
        if t.format != csr or t.index_dtype != itype:
            t = t.convert(csr, index_dtype=itype)
        ops.append(t.astype(dtype, copy=False))
    ca, cb = ops
    pos, crd, val = spgemm_csr_c(
        ca.shape, (ca.pos(1), ca.crd(1), ca.values), cb.shape, (cb.pos(1), cb.crd(1), cb.values)
    )
    c = Tensor(
        (a.shape[0], b.shape[1]), csr, val, pos=[None, pos], crd=[None, crd], index_dtype=itype, check=False
    )
    return c if fmt == csr else c.convert(fmt)


def _convert_scipy(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    csr = get("CSR")
    return _scipy(a.convert(csr), b.convert(csr), fmt, dtype)


def _csr32(t: Any, dtype: Any) -> Any:
    """``t`` as canonical CSR with int32 indices and ``dtype`` values (no copy when it is one)."""
    csr = get("CSR")
    if max(t.nse, *t.shape) >= 2**31 - 1:
        raise UnsupportedError(
            f"cuSPARSE SpGEMM needs int32 indices but a {t.shape} operand with {t.nse} entries does not "
            "fit them; use route='array-program'"
        )
    if t.format != csr or t.index_dtype != np.int32:
        t = t.convert(csr, index_dtype=np.int32)
    return t.astype(dtype, copy=False)


def _cusparse(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    from ust.backends.cuda.cusparse_algebra import csr_rows_sorted, spgemm_csr
    from ust.tensor import Tensor

    a, b = _csr32(a, dtype), _csr32(b, dtype)
    dev = int(a.device.split(":")[1])
    bufs = {"pos": a.pos(1), "crd": a.crd(1), "values": a.values}
    bufs_b = {"pos": b.pos(1), "crd": b.crd(1), "values": b.values}
    pos, crd, val = spgemm_csr(a.shape, bufs, b.shape, bufs_b, dev)
    if not csr_rows_sorted(pos, crd):  # cuSPARSE does not promise sorted rows for every algorithm
        pos, crd, val = _sort_rows(a.xp, pos, crd, val, b.shape[1])
    c = Tensor((a.shape[0], b.shape[1]), get("CSR"), val, pos=[None, pos], crd=[None, crd], check=False)
    return c if fmt == c.format else c.convert(fmt)


def _sort_rows(xp: Any, pos: Any, crd: Any, val: Any, n: int) -> tuple[Any, Any, Any]:
    """Column indices ascending within each row (cuSPARSE does not promise it for every algorithm)."""
    nnz = int(crd.shape[0])
    if nnz < 2:
        return pos, crd, val
    rows = _xp.expand_segments(xp, xp.diff(pos), nnz)
    same_row = rows[1:] == rows[:-1]
    if not bool(xp.any(same_row & (crd[1:] <= crd[:-1]))):
        return pos, crd, val
    perm = xp.argsort(rows * n + crd)
    return pos, crd[perm], val[perm]


def _array_program(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    """Expand-sort-compress: every stored A[i, k] times row k of B, summed by (i, j)."""
    from ust.convert.unpack import unpack

    xp = a.xp
    m, n = a.shape[0], b.shape[1]
    csr = get("CSR")
    bc = b if b.format == csr else b.convert(csr)
    ent = unpack(a)
    i, kk = (c.astype(np.int64, copy=False) for c in ent.dims())
    bp = bc.pos(1).astype(np.int64, copy=False)
    first = bp[kk]
    counts = bp[kk + 1] - first
    total = int(counts.sum()) if ent.n else 0
    seg = _xp.expand_segments(xp, counts, total)
    starts = xp.cumsum(counts) - counts
    bidx = first[seg] + (xp.arange(total, dtype=np.int64) - starts[seg])
    rows = i[seg]
    cols = bc.crd(1)[bidx].astype(np.int64, copy=False)
    vals = ent.values[seg].astype(dtype) * bc.values[bidx].astype(dtype)
    keys = rows * n + cols
    if total > 1:
        perm = _xp.stable_order(xp, [rows, cols], [m, n]) if xp is np else xp.argsort(keys)
        keys, vals = keys[perm], vals[perm]
        st = _starts(xp, keys)
        if int(st.shape[0]) < total:
            vals = _xp.segment_sum(xp, vals, st)
            keys = keys[st]
    nz = xp.flatnonzero(vals != 0)
    keys, vals = keys[nz], vals[nz]
    like = Keyed(xp, csr, (m, n), "dims", (max(m, 1), max(n, 1)), (0, 0), keys, vals)
    return to_tensor(like, keys, vals, fmt)


# the routes of the "spgemm" rules: build(a, b, fmt, dtype) -> the product
for _name, _build in (
    ("scipy", _scipy),
    ("convert-scipy", _convert_scipy),
    ("array-program", _array_program),
    ("cusparse", _cusparse),
    ("convert-cusparse", _cusparse),
):
    register(Route("spgemm", _name, _build))
del _name, _build
register(Route("spgemm", "generated-c", _generated_c, available=c_compiler_available))


def spgemm(a: Any, b: Any, fmt: Format, route: str | None = None, *, dry: bool = False) -> tuple[Any, Any]:
    """``a @ b`` for two sparse matrices on one device; returns (result, decision) (``dry``: the
    checks and the decision only, result None)."""
    for name, t in (("A", a), ("B", b)):
        if t.ndim != 2 or t.is_batched:
            raise UnsupportedError(
                f"sparse @ sparse takes 2-D operands; {name} has shape {t.shape} in {t.format.map_text()}"
            )
    if a.shape[1] != b.shape[0]:
        raise ShapeError(
            f"cannot multiply A of shape {a.shape} by B of shape {b.shape}: inner extents differ"
        )
    if fmt.ndim != 2:
        raise ShapeError(f"result format {fmt.map_text()} is not a matrix format")
    fmt.lvl_bounds((a.shape[0], b.shape[1]))
    # every route works on row pointers (CSR) of A and B and builds the result's: O(rows),
    # refused before any work where no memory holds them (hypersparse shapes)
    need = 8 * (2 * a.shape[0] + b.shape[0] + 3)
    if need > (1 << 30):
        from ust.tensor.limits import check_bytes

        check_bytes(
            a.xp, need, f"sparse @ sparse of {a.shape} by {b.shape} (row pointers of A, B and the result)"
        )
    dtype = np.result_type(a.dtype, b.dtype)
    d = choose(problem("spgemm", a, device=a.device, dtype=dtype, other=b), route)
    if dry:
        return None, d
    return route_of(d.rule).build(a, b, fmt, dtype), d
