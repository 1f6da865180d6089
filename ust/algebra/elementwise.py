"""Elementwise arithmetic: sparse with sparse (union / intersection), with dense, with scalars.

* sparse + sparse, sparse - sparse: union co-iteration; sparse * sparse: intersection.  Routes:
  SciPy's compiled kernels for two canonical CSR / CSC / BSR operands on the CPU, cuSPARSE
  ``csrgeam2`` through CuPy for two canonical CSR operands on the GPU, and everywhere else the
  co-iteration array program of :mod:`ust.algebra.coiterate`.  Exact zeros of the result are
  dropped, as SciPy drops them.
* sparse * scalar, sparse / scalar, -sparse, sparse * dense (broadcast to the sparse shape):
  the structure is kept (index buffers copied, never shared with the input) and only the
  stored values are computed.
* sparse + dense: a dense array (as SciPy returns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ust.algebra.coiterate import intersection, keyed, to_tensor, union
from ust.algebra.problem import choose, problem, problem_of
from ust.formats.model import Format
from ust.plan.routes import Route, register, route_of
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.tensor.validate import INDEX_DTYPES, VALUE_DTYPES

__all__ = ["binary_sparse", "dense_plus", "map_values", "sampled_dense", "scipy_pair"]

# (op, negate_b) -> the SciPy / cupyx expression on two library objects
_LIBRARY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x.multiply(y),
}


#: op -> the infix of SciPy's compiled kernel (``csr_plus_csr``, ``csc_elmul_csc``, ...)
_KERNEL_OPS = {"add": "_plus_", "subtract": "_minus_", "multiply": "_elmul_"}


def _kernel_binop(op: str, name: str, shape: tuple[int, ...], a: tuple, b: tuple, fmt: Format) -> Any:
    """``a op b`` for two canonical csr (or csc) operands given as ``(indptr, indices, data)``,
    by the compiled kernel SciPy's ``a + b`` / ``a.multiply(b)`` calls, with the arguments it
    would pass, its result taken as the Tensor (no SciPy object on either side: their
    constructors and dispatch were most of a small call); None where SciPy would cast first
    (another index or value dtype on either side: then SciPy itself runs)."""
    from ust.runtime.xp import _sparsetools
    from ust.tensor import Tensor

    st = _sparsetools()
    (ap, ai, ad), (bp, bi, bd) = a, b
    itype = ap.dtype
    if st is None or not (ai.dtype == bp.dtype == bi.dtype == itype) or ad.dtype != bd.dtype:
        return None
    nnz_a, nnz_b = int(ap[-1]), int(bp[-1])
    maxnnz = nnz_a + nnz_b
    if itype != np.int64 and maxnnz > np.iinfo(np.int32).max:  # SciPy would widen the indices
        return None
    fn = getattr(st, f"{name}{_KERNEL_OPS[op]}{name}", None)
    if fn is None:
        return None
    indptr = np.empty(ap.shape[0], dtype=itype)
    indices = np.empty(maxnnz, dtype=itype)
    data = np.empty(maxnnz, dtype=ad.dtype)
    fn(shape[0], shape[1], ap, ai[:nnz_a], ad[:nnz_a], bp, bi[:nnz_b], bd[:nnz_b], indptr, indices, data)
    nnz = int(indptr[-1])
    indices, data = indices[:nnz], data[:nnz]
    if nnz < maxnnz // 2:  # as SciPy's prune: do not keep the unused tail alive
        indices, data = indices.copy(), data.copy()
    return Tensor._trusted(shape, fmt, data, (None, indptr), (None, indices))


def _scipy(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    from ust.algebra.library import from_library
    from ust.convert.scipy import _CSR_CSC

    name = next((n for n, f in _CSR_CSC.items() if f == a.format), None)
    if name is not None and b.format == a.format and fmt == a.format:
        bufs = [(t.pos(1), t.crd(1), t.values) for t in (a, b)]
        out = _kernel_binop(op, name, tuple(map(int, a.shape)), bufs[0], bufs[1], fmt)
        if out is not None:
            return out
    return from_library(_LIBRARY_OPS[op](a.to_scipy(), b.to_scipy()), fmt, canonical=True)


def _cupyx(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    from ust.algebra.library import from_library
    from ust.backends.cuda.cusparse_algebra import csr_without_zeros
    from ust.convert.cupyx import to_cupyx

    res = _LIBRARY_OPS[op](to_cupyx(a, reuse_source=True), to_cupyx(b, reuse_source=True))
    # exact zeros dropped: SciPy's rule, which csrgeam2 and CuPy's product kernel do not apply
    return from_library(csr_without_zeros(res), fmt)


def _array(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    ka, kb = keyed(a, fmt), keyed(b, fmt)
    if op == "multiply":
        keys, vals = intersection(ka, kb, dtype)
    else:
        keys, vals = union(ka, kb, dtype, negate_b=op == "subtract")
    return to_tensor(ka, keys, vals, fmt)


# the routes of the "add" / "multiply" rules: build(op, a, b, fmt, dtype) -> the result
for _op in ("add", "multiply"):
    for _name, _build in (("scipy", _scipy), ("cupyx", _cupyx), ("array-program", _array)):
        register(Route(_op, _name, _build))
del _op, _name, _build


def scipy_pair(op: str, a: Any, b: Any) -> tuple[Any, Any] | None:
    """``a op b`` for two canonical SciPy csr (or two csc) objects of one shape and supported
    dtypes, when the planner routes that problem to SciPy: (result Tensor, decision); else None
    (the general path then plans, checks and words any error).

    The operands' buffers go to SciPy's compiled kernel as they are (:func:`_kernel_binop`),
    after ust's checks of what SciPy does not check (``indptr`` order, every index inside the
    matrix: ShapeError before any work); no Tensor or SciPy object is built around them.  The
    planner is asked as always (its problem and decision are cached), so the route is the
    table's, and the result is the same Tensor the SciPy route returns."""
    ta, tb = type(a), type(b)
    if not (ta.__module__.startswith("scipy.sparse") and tb.__module__.startswith("scipy.sparse")):
        return None
    name = getattr(a, "format", None)
    if name not in ("csr", "csc") or getattr(b, "format", None) != name or a.ndim != 2 or a.shape != b.shape:
        return None
    if a.data.dtype not in VALUE_DTYPES or b.data.dtype not in VALUE_DTYPES:
        return None
    index_dtype = a.indices.dtype
    if index_dtype not in INDEX_DTYPES or not (a.has_canonical_format and b.has_canonical_format):
        return None
    from ust.convert.scipy import _CSR_CSC

    fmt = _CSR_CSC[name]
    shape = tuple(map(int, a.shape))
    p = problem_of("multiply" if op == "multiply" else "add", fmt, "cpu", np.result_type(a.dtype, b.dtype),
                   index_dtype, 2, max(shape), other=fmt)  # fmt: skip
    d = choose(p)
    if d.route != "scipy":
        return None
    from ust.convert.scipy import check_scipy

    check_scipy(a)  # the bounds SciPy's kernels do not check: ust's error before any work
    check_scipy(b)
    out = _kernel_binop(op, name, shape, (a.indptr, a.indices, a.data), (b.indptr, b.indices, b.data), fmt)
    if out is not None:
        return out, d
    from ust.algebra.library import from_library

    return from_library(_LIBRARY_OPS[op](a, b), fmt, canonical=True), d


def binary_sparse(
    op: str, a: Any, b: Any, fmt: Format, route: str | None = None, *, dry: bool = False
) -> tuple[Any, Any]:
    """``a op b`` for two sparse tensors on one device; returns (result, decision) (``dry``: the
    checks and the decision only, result None)."""
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"{op}: operand shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    if fmt.ndim != a.ndim:
        raise ShapeError(
            f"{op}: result format {fmt.map_text()} has {fmt.ndim} dimensions, the operands {a.ndim}"
        )
    fmt.lvl_bounds(a.shape)  # block sizes must divide the shape: FormatError before any work
    dtype = np.result_type(a.dtype, b.dtype)
    p = problem("multiply" if op == "multiply" else "add", a, device=a.device, dtype=dtype, other=b)
    d = choose(p, route)
    if dry:
        return None, d
    return route_of(d.rule).build(op, a, b, fmt, dtype), d


# ----------------------------------------------------------------------------- structure kept


def _copy_structure(t: Any, values: Any) -> Any:
    """A tensor with ``t``'s structure (index buffers copied) and new ``values``."""
    from ust.tensor import Tensor

    nl = t.format.nlevels
    return Tensor(
        t.shape,
        t.format,
        values,
        pos=[None if t.pos(k) is None else t.pos(k).copy() for k in range(nl)],
        crd=[None if t.crd(k) is None else t.crd(k).copy() for k in range(nl)],
        index_dtype=t.index_dtype,
        check=False,
    )


def map_values(t: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to every stored value (scalar products, negation, division)."""
    vals = fn(t.values)
    if vals is t.values:
        vals = vals.copy()
    return _copy_structure(t, vals)


def sampled_dense(t: Any, dense: Any, fn: Callable[[Any, Any], Any]) -> Any:
    """``fn(values, dense[coords])`` on ``t``'s stored slots (dense broadcast to ``t.shape``)."""
    from ust.algebra.slots import slots

    xp = t.xp
    try:
        target = np.broadcast_shapes(tuple(dense.shape), tuple(t.shape))
    except ValueError:
        raise ShapeError(
            f"a dense operand of shape {tuple(dense.shape)} does not broadcast to {t.shape}"
        ) from None
    if target != tuple(t.shape):
        raise UnsupportedError(
            f"a dense operand of shape {tuple(dense.shape)} would grow the sparse result beyond {t.shape}; "
            "supported: dense operands that broadcast to the sparse operand's shape"
        )
    full = xp.broadcast_to(dense, t.shape)
    sl = slots(t)
    dtype = np.result_type(t.dtype, dense.dtype)
    out = xp.zeros(t.values.shape, dtype=dtype)
    flat = out.reshape(-1)
    src = t.values.reshape(-1)
    flat[sl.slot] = fn(src[sl.slot].astype(dtype), full[sl.dims].astype(dtype))
    return _copy_structure(t, out)


def dense_plus(t: Any, dense: Any, *, negate_sparse: bool = False, negate_dense: bool = False) -> Any:
    """``t + dense`` (signs optional) as a dense array, broadcasting like NumPy."""
    xp = t.xp
    d = t.todense()
    if negate_sparse:
        d = xp.negative(d)
    return d - dense if negate_dense else d + dense
