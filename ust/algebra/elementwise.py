"""Elementwise arithmetic: sparse with sparse (union / intersection), with dense, with scalars.

* sparse + sparse, sparse - sparse: union co-iteration; sparse * sparse: intersection.  Routes:
  SciPy's compiled kernels for two canonical CSR / CSC / BSR operands on the CPU, ust's merge
  kernel (:mod:`ust.backends.cuda.merge_kernels`, SciPy's arithmetic, the operands' checks in
  its counting pass) for two canonical CSR / CSC operands on the GPU (cuSPARSE ``csrgeam2``
  through CuPy on request, ``route="cupyx"``), and everywhere else the co-iteration array
  program of :mod:`ust.algebra.coiterate`.  Exact zeros of the result are dropped, as SciPy
  drops them.
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

__all__ = ["binary_sparse", "cupyx_pair", "dense_plus", "map_values", "sampled_dense", "scipy_pair"]

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


def _merge_buffers(op: str, shape: tuple[int, ...], fmt: Format, a: tuple, b: tuple, dtype: Any) -> Any:
    """``a op b`` by ust's CUDA merge kernel for two compressed operands in ``fmt`` (CSR or CSC)
    given as ``(indptr, indices, data)`` on one device: the result Tensor, or None where an
    operand failed the kernel's checks (the caller words the error)."""
    from ust.backends.cuda.merge_kernels import merge_compressed
    from ust.convert.scipy import _CSR_CSC
    from ust.runtime.xp import on_device
    from ust.tensor import Tensor

    (ap, ai, ad), (bp, bi, bd) = a, b
    itype = ap.dtype
    if not (ai.dtype == bp.dtype == bi.dtype == itype) or (
        itype != np.int64 and int(ai.shape[0]) + int(bi.shape[0]) > np.iinfo(np.int32).max
    ):  # one index dtype, wide enough for the result (SciPy widens the same way)
        ap, ai, bp, bi = (x.astype(np.int64) for x in (ap, ai, bp, bi))
    ad, bd = (x if x.dtype == dtype else x.astype(dtype) for x in (ad, bd))
    m, n = shape if fmt == _CSR_CSC["csr"] else shape[::-1]  # CSC compresses the columns
    with on_device(ad):
        res = merge_compressed(op, m, n, (ap, ai, ad), (bp, bi, bd))
    if not res.sound:
        return None
    return Tensor._trusted(shape, fmt, res.data, (None, res.indptr), (None, res.indices))


def _raw_compressed(t: Any) -> tuple[Any, Any, Any]:
    """``(indptr, indices, values)`` of a CSR/CSC tensor for the merge kernel: as held where the
    tensor owes only the compressed-bounds check (the kernel makes it as it reads), else read
    the usual way (any other owed check runs first)."""
    held = t._compressed_level_unchecked()
    return held if held is not None else (t.pos(1), t.crd(1), t.values)


def _merge(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    out = _merge_buffers(
        op, tuple(map(int, a.shape)), a.format, _raw_compressed(a), _raw_compressed(b), dtype
    )
    if out is None:
        _word_unsound(op, a, b)
    return out if fmt == out.format else out.convert(fmt)


def _word_unsound(op: str, a: Any, b: Any) -> None:
    """Raise the error the checked path gives for the operand the merge kernel flagged."""
    for t in (a, b):
        t.pos(1)  # runs the owed check, which names the fault
    raise ShapeError(f"{op}: an operand's indptr decreases or an index lies outside the matrix")


def _array(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    ka, kb = keyed(a, fmt), keyed(b, fmt)
    if op == "multiply":
        keys, vals = intersection(ka, kb, dtype)
    else:
        keys, vals = union(ka, kb, dtype, negate_b=op == "subtract")
    return to_tensor(ka, keys, vals, fmt)


# the routes of the "add" / "multiply" rules: build(op, a, b, fmt, dtype) -> the result (CuPy's
# product drops nan * an implicit 0, which SciPy stores: "cupyx" serves the add rule only)
for _op, _name, _build in (
    *((op, "scipy", _scipy) for op in ("add", "multiply")),
    *((op, "merge-kernel", _merge) for op in ("add", "multiply")),
    ("add", "cupyx", _cupyx),
    *((op, "array-program", _array) for op in ("add", "multiply")),
):
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


def cupyx_pair(op: str, a: Any, b: Any) -> tuple[Any, Any] | None:
    """``a op b`` for two canonical cupyx csr (or two csc) matrices of one shape on one device,
    when the planner routes that problem to the merge kernel: (result Tensor, decision); else
    None (the general path then plans, checks and words any error).  The GPU twin of
    :func:`scipy_pair`: the matrices' buffers go to the kernel as they are (it checks them as it
    reads), with no Tensor or cupyx object built around them."""
    ta, tb = type(a), type(b)
    if not (
        ta.__module__.startswith("cupyx.scipy.sparse") and tb.__module__.startswith("cupyx.scipy.sparse")
    ):
        return None
    name = getattr(a, "format", None)
    if name not in ("csr", "csc") or getattr(b, "format", None) != name or a.ndim != 2 or a.shape != b.shape:
        return None
    if (
        a.__dict__.get("_has_canonical_format") is not True
        or b.__dict__.get("_has_canonical_format") is not True
    ):
        return None  # unknown (cupyx would probe) or not canonical: the general path labels it
    if a.data.dtype not in VALUE_DTYPES or b.data.dtype not in VALUE_DTYPES or a.data.device != b.data.device:
        return None
    index_dtype = a.indices.dtype
    if (
        index_dtype not in INDEX_DTYPES
        or a.data.shape[0] < a.indices.shape[0]
        or b.data.shape[0] < b.indices.shape[0]
    ):
        return None
    from ust.convert.scipy import _CSR_CSC

    fmt = _CSR_CSC[name]
    shape = (int(a.shape[0]), int(a.shape[1]))
    major = shape[0] if name == "csr" else shape[1]
    if any(x.indptr.ndim != 1 or x.indptr.shape[0] != major + 1 for x in (a, b)):
        return None  # the kernel reads major + 1 positions: the general path words the fault
    dtype = np.result_type(a.dtype, b.dtype)
    p = problem_of("multiply" if op == "multiply" else "add", fmt, "cuda", dtype, index_dtype, 2, max(shape),
                   other=fmt)  # fmt: skip
    d = choose(p)
    if d.route != "merge-kernel":
        return None
    bufs = [(x.indptr, x.indices, x.data) for x in (a, b)]
    out = _merge_buffers(op, shape, fmt, bufs[0], bufs[1], dtype)
    if out is None:
        from ust.convert.cupyx import from_cupyx

        _word_unsound(op, from_cupyx(a), from_cupyx(b))
    return out, d


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
