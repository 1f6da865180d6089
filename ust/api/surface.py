"""The elementwise and structural half of :class:`ust.Tensor`'s scipy.sparse array surface.

Registered into :data:`ust.tensor.dispatch.OPERATORS` (``import ust`` imports this module),
each with the semantics of SciPy's sparse *array* classes (``csr_array`` & co.), which the
tests compare against on the same data:

* ``eliminate_zeros``, ``sum_duplicates``, ``sort_indices``, ``setdiag(values, k)``: a NEW
  tensor; the Tensor methods of the same names adopt its buffers (in place, as scipy's), and
  the input's arrays -- perhaps shared zero-copy with the caller -- are never written.  The
  format is kept (DIA gains a diagonal, BSR a block, where ``setdiag`` needs one);
  ``sum_duplicates`` / ``sort_indices`` relabel it sorted (and duplicate-free): CSR with
  duplicates becomes CSR, an unsorted COO the canonical COO.
* ``absolute``, ``power``, ``conj``, ``real``, ``imag``: the stored values mapped, the format
  and structure kept; index buffers are copies (``conj(copy=False)`` shares them, as scipy's).
  ``absolute`` and ``power`` sum duplicates first (they are not linear), as scipy does.
* ``compare(t, other, op)`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``): a bool tensor in
  ``t``'s format holding the True positions; a dense operand gives a dense bool array; where
  the result is True at the implicit zeros (``A == 0``, ``A < 1``, ``A != nan``, ``A == B``)
  it is stored all the same and SciPy's ``SparseEfficiencyWarning`` is issued.
* ``truth`` (``bool(A)``), ``mean``, ``count_nonzero``, ``diagonal``, ``reshape``,
  ``multiply_pointwise`` (scipy's ``multiply``, broadcasting as scipy's), ``dot``.

Everything is an array program written once against ``xp`` (NumPy on the CPU, CuPy on a GPU)
over the general unpack / pack of :mod:`ust.convert` -- no Python loop over entries or rows --
and bad input is an error of ust's hierarchy before any work.  Where ust departs from SciPy
it is on purpose, and docs/guide.rst ("scipy.sparse compatibility") lists each case: stored
NaN under the comparisons SciPy computes by negation, padding slots of DIA / BSR under a
negative power, ``setdiag`` with complex values into a real tensor, results that keep the
input's format where SciPy converts to CSR or COO.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator as _operator
import warnings
from typing import Any

import numpy as np

from ust.algebra.coiterate import Keyed, keyed, may_hold_nonfinite, nonfinite_unmatched
from ust.algebra.operands import DENSE, SCALAR, SPARSE, as_tensor, kind, place
from ust.algebra.reduce import _merged, check_axis, check_result
from ust.api import algebra as _algebra
from ust.api.matmul import matmul_operator
from ust.convert.dense import dense_format
from ust.convert.layouts import coo_format
from ust.convert.pack import pack, padding_limit
from ust.convert.surface import unshared
from ust.convert.unpack import Entries, unpack
from ust.formats.analysis import entries_unique, sort_prefix
from ust.formats.model import Format, LevelFormat, Mod
from ust.runtime import xp as _xp
from ust.runtime.errors import (
    FormatError,
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    UnsupportedError,
)
from ust.runtime.spaces import to_package
from ust.tensor import Tensor
from ust.tensor.dispatch import OPERATORS, register
from ust.tensor.limits import check_dense
from ust.tensor.validate import check_value_dtype

__all__ = [
    "COMPARISONS",
    "absolute",
    "compare",
    "conj",
    "count_nonzero",
    "diagonal",
    "dot",
    "eliminate_zeros",
    "imag",
    "mean",
    "multiply_pointwise",
    "power",
    "real",
    "reshape",
    "setdiag",
    "sort_indices",
    "sum_duplicates",
    "truth",
]

#: The comparison names ``compare`` takes, with their ufunc and symbol.
COMPARISONS: dict[str, tuple[str, str]] = {
    "eq": ("equal", "=="),
    "ne": ("not_equal", "!="),
    "lt": ("less", "<"),
    "le": ("less_equal", "<="),
    "gt": ("greater", ">"),
    "ge": ("greater_equal", ">="),
}
_NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_SPARSE_LEVELS = (LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED, LevelFormat.SINGLETON)


# ----------------------------------------------------------------------------- shared helpers


def _tensor(t: Any) -> Tensor:
    """``t`` as a Tensor (scipy / cupyx / torch sparse operands are taken in, buffers shared)."""
    if kind(t) != SPARSE:
        raise InvalidTypeError(f"expected a sparse tensor, got {type(t).__module__}.{type(t).__qualname__}")
    return as_tensor(t)


def _has_fill(fmt: Format) -> bool:
    """Value slots that are not entries exist: all-dense formats, DIA's range levels, blocks and
    structured levels below a sparse level (BSR, CROW, NM).  A zero in such a slot is absent."""
    if fmt.is_dense:
        return True
    sparse_above = False
    for lv in fmt.levels:
        f = lv.format
        if f in _SPARSE_LEVELS:
            sparse_above = True
        elif f in (LevelFormat.RANGE, LevelFormat.STRUCTURED) or (f is LevelFormat.DENSE and sparse_above):
            return True
    return False


def _relabeled(fmt: Format, *, canonical: bool) -> Format:
    """``fmt`` with every level ordered and -- ``canonical`` -- unique, except the heads of a
    singleton chain (COO's first level), which are nonunique by structure.  ``fmt`` itself
    when nothing changes."""
    levels = list(fmt.levels)
    changed = False
    for k, lv in enumerate(levels):
        unique = lv.type.unique
        if canonical:
            unique = not (k + 1 < len(levels) and levels[k + 1].format is LevelFormat.SINGLETON)
        if lv.type.ordered and lv.type.unique == unique:
            continue
        levels[k] = dataclasses.replace(lv, type=dataclasses.replace(lv.type, unique=unique, ordered=True))
        changed = True
    return dataclasses.replace(fmt, levels=tuple(levels), name=None) if changed else fmt


def _entries(t: Tensor) -> Entries:
    """``t``'s entries for a result in another layout: explicit zeros kept where they are
    entries (CSR, COO, ...), padding zeros of DIA / BSR / dense formats left out."""
    return unpack(t, keep_zeros=not _has_fill(t.format))


def _pack(ent: Entries, fmt: Format, t: Tensor, *, extra_slots: int = 0) -> Tensor:
    """``ent`` packed into ``fmt``: ``t``'s index dtype kept where it fits, and as much padding
    allowed as ``t`` already stores (plus ``extra_slots``), so that a tensor built with a raised
    ``max_padding`` stays buildable."""
    limit = max(padding_limit(ent.n, None), t.nse + extra_slots)
    return pack(ent, fmt, source_index_dtype=t.index_dtype, max_padding=limit)


def _pack_keys(like: Keyed, keys: Any, values: Any, fmt: Format, t: Tensor) -> Tensor:
    """Sorted unique keys of ``like``'s key space (and their values) as a tensor of ``fmt``
    (:func:`ust.algebra.coiterate.to_tensor`, with :func:`_pack`'s dtype and padding rules)."""
    rem = keys
    coords: list[Any] = []
    for e in reversed(like.extents[1:]):
        coords.append(rem % e)
        rem = rem // e
    coords.append(rem)
    coords.reverse()
    lvl = [c + lo if lo else c for c, lo in zip(coords, like.lows)]
    src = like.fmt if like.mode == "level" else dense_format(len(like.shape))
    return _pack(Entries(like.xp, src, like.shape, lvl, values, src, True), fmt, t)


def _with_values(t: Tensor, values: Any, *, share_index: bool = False) -> Tensor:
    """``t``'s structure with new ``values`` (a fresh array): index buffers copied, or shared."""
    nl = t.format.nlevels
    cp = (lambda a: a) if share_index else (lambda a: None if a is None else a.copy())
    out = Tensor(
        t.shape,
        t.format,
        values,
        pos=[cp(t.pos(k)) for k in range(nl)],
        crd=[cp(t.crd(k)) for k in range(nl)],
        index_dtype=t.index_dtype,
        check=False,
    )
    out._nnz = t._nnz
    return out


def _own_values(t: Tensor, v: Any) -> Any:
    """``v`` as an array that shares no memory with ``t``'s values."""
    return v.copy() if t.xp.may_share_memory(v, t.values) else v


def _int_arg(x: Any, what: str) -> int:
    if isinstance(x, (bool, np.bool_)):
        raise InvalidTypeError(f"{what} must be an integer, not {x!r}")
    try:
        return _operator.index(x)
    except TypeError:
        raise InvalidTypeError(f"{what} must be an integer, not {type(x).__name__} {x!r}") from None


def _require_matrix(t: Tensor, op: str) -> None:
    if t.ndim != 2 or t.is_batched:
        raise ShapeError(f"{op} needs a 2-D (matrix) tensor, got a {t.ndim}-D tensor of shape {t.shape}")


def _scalar(x: Any) -> Any:
    """A scalar operand as NumPy reads it: numpy scalars kept, 0-d arrays (CuPy too) as their item."""
    if isinstance(x, np.generic) or not hasattr(x, "ndim"):
        return x
    return x.item()


def _dense_operand(pl: Any, x: Any) -> Any:
    """A dense operand in the placement's space; bool arrays too (``as_dense`` refuses them)."""
    arr = np.asarray(x) if isinstance(x, (list, tuple)) else x
    if np.dtype(getattr(arr, "dtype", np.float64)) == np.bool_:
        return to_package(arr, "cupy" if pl.space.is_cuda else "numpy", pl.space).array
    return pl.dense(arr)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"inconsistent shapes {a} and {b}: they do not broadcast") from None


def _result_format(t: Tensor, shape: tuple[int, ...], *, unique: bool) -> Format:
    """The format of a result of ``shape`` made from ``t``'s entries: ``t``'s own where it has
    that many dimensions, stores no padding (padding could grow without bound under a new
    shape) and admits the shape; otherwise COO of ``len(shape)`` dimensions, as SciPy returns."""
    fmt = t.format
    if len(shape) == t.ndim and fmt.nbatch == 0 and not _has_fill(fmt):
        try:
            fmt.lvl_bounds(shape)
        except (FormatError, ShapeError):
            pass
        else:
            return fmt
    return coo_format(len(shape), canonical=unique)


def _row_major_sorted(ent: Entries) -> bool:
    return ent.sorted_by is not None and sort_prefix(ent.sorted_by, dense_format(len(ent.shape))) == 0


def _unravel(xp: Any, flat: Any, shape: tuple[int, ...], order: str) -> list[Any]:
    """The coordinates of flat (row-major ``"C"`` / column-major ``"F"``) positions."""
    dims = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    out: list[Any] = [None] * len(shape)
    rem = flat
    for d in dims:
        s = max(shape[d], 1)
        out[d] = rem % s
        rem = rem // s
    return out


def _ravel(coords: tuple[Any, ...], shape: tuple[int, ...], order: str) -> Any:
    dims = range(len(shape)) if order == "C" else range(len(shape) - 1, -1, -1)
    flat: Any = None
    for d in dims:
        c = coords[d].astype(np.int64, copy=False)
        flat = c if flat is None else flat * shape[d] + c
    return flat


# ----------------------------------------------------------------------------- structure (in place)


@register(OPERATORS, "eliminate_zeros")
def eliminate_zeros(t: Any) -> Tensor:
    """``t`` without its explicitly stored zeros, in ``t``'s format: scipy's ``eliminate_zeros``
    (a BSR block goes when all of it is zero, a DIA diagonal likewise)."""
    t = _tensor(t)
    if not _has_fill(t.format) and not bool((t.values == 0).any()):
        return t.copy()
    ent = unpack(t, keep_zeros=False)
    return unshared(_pack(ent, t.format, t), t)


@register(OPERATORS, "sum_duplicates")
def sum_duplicates(t: Any) -> Tensor:
    """``t`` with duplicate entries summed and sorted in its level order (CSR by row, CSC by
    column, COO row-major, BSR by block): scipy's ``sum_duplicates``.  Summed zeros stay stored,
    as scipy's do; the format is relabelled canonical (an unsorted COO becomes COO)."""
    t = _tensor(t)
    fmt = _relabeled(t.format, canonical=True)
    if fmt == t.format:
        return t.copy()
    ent = unpack(t, keep_zeros=True)
    return unshared(_pack(ent, fmt, t), t)


@register(OPERATORS, "sort_indices")
def sort_indices(t: Any) -> Tensor:
    """``t`` with its entries sorted in its level order (duplicates kept, not summed): scipy's
    ``sort_indices``; the format is relabelled ordered."""
    t = _tensor(t)
    fmt = _relabeled(t.format, canonical=False)
    if fmt == t.format:
        return t.copy()
    ent = unpack(t, keep_zeros=True)
    return unshared(_pack(ent, fmt, t), t)


def _diag_values(t: Tensor, values: Any) -> Any:
    """``values`` (a scalar or a 1-D sequence) as an array on ``t``'s device, of ``t``'s dtype."""
    xp = t.xp
    if _xp.is_cupy(values):
        arr = values if xp is not np else _xp.to_host(values)
    else:
        try:
            arr = np.asarray(values)
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(f"setdiag: values must be a scalar or a 1-D sequence ({exc})") from None
        if xp is not np:
            arr = xp.asarray(arr) if arr.dtype.kind in "biufc" else arr
    dt = np.dtype(arr.dtype)
    if dt.kind not in "biufc":
        raise InvalidTypeError(f"setdiag: values of dtype {dt} are not numbers")
    if arr.ndim > 1:
        raise ShapeError(f"setdiag: values must be a scalar or a 1-D sequence, got shape {arr.shape}")
    if dt.kind == "c" and t.dtype.kind != "c":
        raise InvalidValueError(
            f"setdiag: complex values into a {t.dtype} tensor would drop their imaginary parts; "
            "convert the tensor first (t.astype(complex))"
        )
    return arr.astype(t.dtype, copy=False)


@register(OPERATORS, "setdiag")
def setdiag(t: Any, values: Any, k: Any = 0) -> Tensor:
    """``t`` with diagonal ``k`` (entries ``[i, i + k]``) set to ``values``: scipy's ``setdiag``.

    A scalar sets the whole diagonal; a sequence sets its first ``len(values)`` entries (a longer
    one is cut to the diagonal).  Positions it sets are stored even when the value is 0 (explicit
    zeros, as scipy's); the format is kept (DIA gains a diagonal, BSR the blocks it needs).
    """
    t = _tensor(t)
    _require_matrix(t, "setdiag")
    k = _int_arg(k, "setdiag: k")
    M, N = t.shape
    if (k > 0 and k >= N) or (k < 0 and -k >= M):
        raise ShapeError(f"k exceeds array dimensions: diagonal {k} of a {t.shape} matrix")
    vals = _diag_values(t, values)
    if 0 in t.shape or (vals.ndim == 1 and vals.shape[0] == 0):
        return t.copy()
    xp = t.xp
    length = min(M + k, N) if k < 0 else min(M, N - k)
    if vals.ndim == 1:
        length = min(length, int(vals.shape[0]))
        new_vals = vals[:length]
    else:
        new_vals = xp.repeat(vals.reshape(1), length)
    first_row, first_col = (-k, 0) if k < 0 else (0, k)
    ent = unpack(t, keep_zeros=True)
    rows, cols = ent.dims()
    along = rows - first_row  # position along the diagonal
    hit = ((cols - rows) == k) & (along < length)
    keep = xp.flatnonzero(~hit)
    idt = np.int64
    r = xp.concatenate([rows[keep].astype(idt), xp.arange(first_row, first_row + length, dtype=idt)])
    c = xp.concatenate([cols[keep].astype(idt), xp.arange(first_col, first_col + length, dtype=idt)])
    v = xp.concatenate([ent.values[keep], new_vals])
    dense = dense_format(2)
    out = Entries(xp, dense, t.shape, [r, c], v, None, ent.unique)
    return unshared(_pack(out, t.format, t, extra_slots=_diag_slots(t, length)), t)


def _diag_slots(t: Tensor, length: int) -> int:
    """Value slots a new diagonal may add beyond what ``t`` stores: a DIA row of the full
    width, or a block (of every ``mod`` level's extent) per entry."""
    block = math.prod(getattr(lv.expr, "divisor", 1) for lv in t.format.levels if isinstance(lv.expr, Mod))
    return max(t.shape) + length * block


# ----------------------------------------------------------------------------- values mapped


def _deduped(t: Tensor) -> tuple[Tensor, bool]:
    """``t`` with duplicates summed (and whether that made new buffers), for nonlinear maps."""
    if entries_unique(t.format):
        return t, False
    return sum_duplicates(t), True


@register(OPERATORS, "absolute")
def absolute(t: Any) -> Tensor:
    """``abs(t)``: magnitudes of the stored values (duplicates summed first), format kept."""
    t, fresh = _deduped(_tensor(t))
    return _with_values(t, _own_values(t, t.xp.abs(t.values)), share_index=fresh)


def _check_exponent(n: Any) -> Any:
    if isinstance(n, (numbers.Number, np.generic)) and not isinstance(n, (str, bytes)):
        return n
    if (isinstance(n, np.ndarray) or _xp.is_cupy(n)) and n.ndim == 0:
        return n.item() if _xp.is_cupy(n) else n[()]
    raise UnsupportedError(
        f"power: the exponent must be a scalar (input is not scalar), got {type(n).__name__}"
    )


@register(OPERATORS, "power")
def power(t: Any, n: Any, dtype: Any = None) -> Tensor:
    """``t ** n`` / ``t.power(n, dtype)``: the stored values to the power ``n`` (elementwise, as
    scipy's sparse arrays; duplicates summed first), in ``dtype`` when given.

    ``n`` must be a nonzero scalar (``n == 0`` would fill every implicit zero with 1: an
    UnsupportedError, as scipy's NotImplementedError); integer values to a negative integer
    power are an InvalidValueError (NumPy's ValueError).  ``0 ** n`` of a negative ``n`` is
    ``inf`` at explicitly stored zeros (they are entries, as in scipy's CSR), while the padding
    slots of DIA, BSR and other blocked formats stay 0 (they are not entries).
    """
    t = _tensor(t)
    n = _check_exponent(n)
    if not n:
        raise UnsupportedError(
            "zero power is not supported as it would densify the matrix; use "
            "np.ones(A.shape, dtype=A.dtype) for this case"
        )
    src = t.dtype if dtype is None else check_value_dtype(dtype, "power: dtype")
    try:
        with np.errstate(all="ignore"):
            probe = np.ones(1, dtype=src) ** n
            zero = np.zeros(1, dtype=src) ** n
    except ValueError as exc:
        raise InvalidValueError(f"power: {exc}") from None
    except TypeError as exc:
        raise InvalidTypeError(f"power: {exc}") from None
    res_dt = check_value_dtype(probe.dtype, "power: the result")
    t, fresh = _deduped(t)
    xp = t.xp
    vals = t.values.astype(src, copy=False).astype(res_dt, copy=False)  # scipy: dtype first, then ** n
    py_n = n.item() if isinstance(n, np.generic) else n
    if _has_fill(t.format) and not bool(zero[0] == 0):
        out = xp.zeros(vals.shape, dtype=res_dt)
        nz = vals != 0
        out[nz] = vals[nz] ** py_n
    else:
        out = _own_values(t, vals**py_n)
    return _with_values(t, out.astype(res_dt, copy=False), share_index=fresh)


@register(OPERATORS, "conj")
def conj(t: Any, copy: bool = True) -> Tensor:
    """Complex conjugate of the values.  Real values: a copy, or ``t`` itself with
    ``copy=False``; complex values with ``copy=False`` share ``t``'s index buffers (scipy's)."""
    t = _tensor(t)
    if t.dtype.kind != "c":
        return t.copy() if copy else t
    return _with_values(t, t.xp.conj(t.values), share_index=not copy)


@register(OPERATORS, "real")
def real(t: Any) -> Tensor:
    """The real parts of the stored values (a copy, also for real values), format kept."""
    t = _tensor(t)
    return _with_values(t, t.values.real.copy())


@register(OPERATORS, "imag")
def imag(t: Any) -> Tensor:
    """The imaginary parts of the stored values, format kept (real values: zeros stored at every
    stored position, as scipy's)."""
    t = _tensor(t)
    xp = t.xp
    vals = t.values.imag.copy() if t.dtype.kind == "c" else xp.zeros_like(t.values)
    return _with_values(t, vals)


# ----------------------------------------------------------------------------- comparisons


def _warn_dense(what: str, op: str) -> None:
    from scipy.sparse import SparseEfficiencyWarning

    warnings.warn(
        f"Comparing {what} using {COMPARISONS[op][1]} is inefficient (the result stores every "
        f"implicit zero). Try using {COMPARISONS[_NEGATED[op]][1]} instead.",
        SparseEfficiencyWarning,
        stacklevel=4,
    )


def _all_true_but(t: Tensor, fmt: Format, keys: Any, hits: Any) -> Tensor:
    """The bool tensor True everywhere except at the row-major positions ``keys`` where
    ``hits`` is False: a result that stores every implicit zero."""
    xp = t.xp
    shape = tuple(t.shape)
    check_dense(xp, shape, np.bool_, f"the result of comparing a {shape} tensor (True at its implicit zeros)")
    size = math.prod(shape)
    full = xp.ones(size, dtype=bool)
    if int(keys.shape[0]):
        full[keys] = hits
    flat = xp.flatnonzero(full)
    coords = _unravel(xp, flat, shape, "C") if shape else []
    dense = dense_format(len(shape))
    ent = Entries(xp, dense, shape, coords, xp.ones(flat.shape[0], dtype=bool), dense, True)
    return _pack(ent, fmt, t)


def _union_values(a: Keyed, b: Keyed) -> tuple[Any, Any, Any]:
    """Keys of the union of two keyed operands (one key space), and each one's value there."""
    xp = a.xp
    keys = xp.unique(xp.concatenate([a.keys, b.keys]))
    va = xp.zeros(keys.shape[0], dtype=a.values.dtype)
    vb = xp.zeros(keys.shape[0], dtype=b.values.dtype)
    if a.n:
        va[xp.searchsorted(keys, a.keys)] = a.values
    if b.n:
        vb[xp.searchsorted(keys, b.keys)] = b.values
    return keys, va, vb


@register(OPERATORS, "compare")
def compare(t: Any, other: Any, op: str) -> Any:
    """``t <op> other`` elementwise, ``op`` one of ``eq ne lt le gt ge``, as scipy's arrays:

    * a scalar or another sparse operand: a bool tensor in ``t``'s format storing the True
      positions (SciPy returns CSR / CSC); where ``op(0, other)`` is True (``A == 0``,
      ``A < 1``, ``A != nan``; ``A == B``, ``A <= B``) every implicit zero is stored too and a
      ``scipy.sparse.SparseEfficiencyWarning`` says so, as SciPy's does;
    * a dense array: the dense bool array ``t.todense() <op> other`` (NumPy broadcasting);
    * a sparse operand of another shape: ``False`` for ``==``, ``True`` for ``!=`` (scipy's
      answer), a ShapeError for the orderings;
    * anything else: ``NotImplemented`` (so ``t == None`` is False, ``t < None`` a TypeError).

    Values follow NumPy exactly -- duplicates summed first, a stored NaN compares False except
    under ``!=`` -- also where SciPy computes ``<=`` / ``>=`` (and ``<`` / ``>`` against a
    scalar of the other sign) by negating the opposite comparison and so answers True at a
    stored NaN.
    """
    if op not in COMPARISONS:
        raise InvalidValueError(f"compare: op must be one of {', '.join(COMPARISONS)}, not {op!r}")
    t = _tensor(t)
    try:
        k_other = kind(other)
    except UnsupportedError:
        return NotImplemented
    ufunc_name = COMPARISONS[op][0]
    if k_other == SCALAR:
        s = _scalar(other)
        if isinstance(s, (str, bytes)) or np.dtype(np.result_type(s)).kind not in "biufc":
            return NotImplemented
        xp = t.xp
        ufunc = getattr(xp, ufunc_name)
        fmt = t.format
        if bool(getattr(np, ufunc_name)(np.zeros((), dtype=t.dtype), s)):
            _warn_dense(f"a sparse array with {s!r}", op)
            kd = keyed(t, fmt, mode="dims")
            return _all_true_but(t, fmt, kd.keys, ufunc(kd.values, s))
        kl = keyed(t, fmt)
        hit = xp.flatnonzero(ufunc(kl.values, s))
        return _pack_keys(kl, kl.keys[hit], xp.ones(hit.shape[0], dtype=bool), fmt, t)
    pl = place({"a": t, "b": other})
    t = pl.tensor(t)
    xp = t.xp
    ufunc = getattr(xp, ufunc_name)
    if k_other == DENSE:
        d = _dense_operand(pl, other)
        shape = _broadcast(tuple(t.shape), tuple(d.shape))
        check_dense(
            xp, shape, np.bool_, f"the dense result of comparing a {t.shape} tensor with a dense array"
        )
        return pl.back(ufunc(t.todense(), d))
    b = pl.tensor(as_tensor(other))
    if tuple(b.shape) != tuple(t.shape):
        if op in ("eq", "ne"):
            return op == "ne"
        raise ShapeError(f"inconsistent shape: comparing {t.shape} with {tuple(b.shape)}")
    fmt = t.format
    if bool(getattr(np, ufunc_name)(np.zeros((), dtype=t.dtype), np.zeros((), dtype=b.dtype))):
        _warn_dense("two sparse arrays", op)
        keys, va, vb = _union_values(keyed(t, fmt, mode="dims"), keyed(b, fmt, mode="dims"))
        return pl.back(_all_true_but(t, fmt, keys, ufunc(va, vb)))
    kt = keyed(t, fmt)
    keys, va, vb = _union_values(kt, keyed(b, fmt))
    hit = xp.flatnonzero(ufunc(va, vb))
    return pl.back(_pack_keys(kt, keys[hit], xp.ones(hit.shape[0], dtype=bool), fmt, t))


@register(OPERATORS, "truth")
def truth(t: Any) -> bool:
    """``bool(A)``, as scipy's: for a (1, 1) tensor whether it stores an entry (an explicit
    zero counts, as scipy's ``nnz != 0``); any other shape is ambiguous, a ShapeError (a
    ValueError, as scipy's)."""
    t = _tensor(t)
    if tuple(t.shape) == (1, 1):
        return t.nnz != 0
    raise ShapeError(
        "The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()."
    )


# ----------------------------------------------------------------------------- reductions


@register(OPERATORS, "mean")
def mean(t: Any, axis: Any = None, dtype: Any = None) -> Any:
    """The mean over every element (a scalar) or along ``axis`` (a dense array), implicit zeros
    counted, as scipy's: integer and bool values average in float64, others in their own dtype
    (each value times ``1 / count``, then summed), the result cast to ``dtype`` when given."""
    t = _tensor(t)
    ax = check_axis(t.ndim, axis)
    out_dt = None
    if dtype is not None:
        try:
            out_dt = np.dtype(dtype)
        except TypeError:
            raise InvalidTypeError(f"mean: dtype {dtype!r} is not a NumPy dtype") from None
    inter = np.dtype(np.float64) if t.dtype.kind in "biu" else t.dtype
    denom = math.prod(t.shape) if ax is None else t.shape[ax]
    if denom == 0:
        where = "" if ax is None else f" along axis {ax}"
        raise ShapeError(f"mean of a {t.shape} tensor{where}: there are no elements to average")
    res = _algebra.sum(_algebra.multiply(t.astype(inter, copy=False), 1.0 / denom), ax)
    return res if out_dt is None else res.astype(out_dt)


def _groups(xp: Any, dims: tuple[Any, ...], shape: tuple[int, ...], axis: int) -> tuple[Any, tuple[int, ...]]:
    keep = [d for d in range(len(shape)) if d != axis]
    g: Any = None
    for d in keep:
        g = dims[d].astype(np.int64) if g is None else g * shape[d] + dims[d]
    return g, tuple(shape[d] for d in keep)


@register(OPERATORS, "count_nonzero")
def count_nonzero(t: Any, axis: Any = None) -> Any:
    """Entries that are not zero after duplicates are summed (NaN counts), over everything (an
    int) or along ``axis`` (a dense int64 array): ``np.count_nonzero(t.todense(), axis)``, as
    scipy's.  Every format takes an axis (scipy's DIA and BSR do not)."""
    t = _tensor(t)
    ax = check_axis(t.ndim, axis)
    xp = t.xp
    if ax is not None:
        check_result(xp, tuple(t.shape), ax, np.int64, "count_nonzero")
    dims, vals = _merged(t)
    nz = vals != 0
    if ax is None or t.ndim == 1:
        return int(xp.count_nonzero(nz))
    g, out_shape = _groups(xp, dims, tuple(t.shape), ax)
    G = math.prod(out_shape)
    sel = g[nz]
    if int(sel.shape[0]) == 0:
        return xp.zeros(out_shape, dtype=np.int64)
    return xp.bincount(sel, minlength=G).astype(np.int64, copy=False).reshape(out_shape)


@register(OPERATORS, "diagonal")
def diagonal(t: Any, k: Any = 0) -> Any:
    """Diagonal ``k`` (entries ``[i, i + k]``) as a dense 1-D array, duplicates summed; empty
    where ``k`` lies outside the matrix, as scipy's."""
    t = _tensor(t)
    _require_matrix(t, "diagonal")
    k = _int_arg(k, "diagonal: k")
    M, N = t.shape
    xp = t.xp
    if k <= -M or k >= N:
        return xp.empty(0, dtype=t.dtype)
    out = xp.zeros(min(M + min(k, 0), N - max(k, 0)), dtype=t.dtype)
    (rows, cols), vals = _merged(t)
    on = xp.flatnonzero((cols - rows) == k)
    if int(on.shape[0]):
        out[(rows if k >= 0 else cols)[on]] = vals[on]
    return out


# ----------------------------------------------------------------------------- reshape


def _new_shape(args: Any, size: int) -> tuple[int, ...]:
    """scipy's ``check_shape``: ints or one sequence, one negative extent inferred."""
    if isinstance(args, tuple) and len(args) == 1:
        args = args[0]
    try:
        items = list(args) if not isinstance(args, (numbers.Integral, np.integer)) else [args]
    except TypeError:
        items = [args]
    if not items:
        raise ShapeError("reshape: the new shape needs at least one dimension")
    shape = [_int_arg(s, "reshape: an extent") for s in items]
    unknown = [i for i, s in enumerate(shape) if s < 0]
    if len(unknown) > 1:
        raise ShapeError("can only specify one unknown dimension")
    if unknown:
        known = math.prod(s for i, s in enumerate(shape) if i != unknown[0])
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
        shape[unknown[0]] = size // known
    if math.prod(shape) != size:
        raise ShapeError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
    return tuple(shape)


@register(OPERATORS, "reshape")
def reshape(t: Any, shape: Any, order: str = "C", copy: bool = False) -> Tensor:
    """The same entries in ``shape`` (ints or one tuple, one ``-1`` inferred), read and written
    row-major (``order="C"``) or column-major (``"F"``), as scipy's ``reshape``.

    The shape unchanged: ``t`` itself (a copy with ``copy=True``).  Otherwise the result keeps
    ``t``'s format when it has as many dimensions and no padding slots (CSR, CSC, COO, DCSR,
    ...) and is COO of the new dimensions otherwise (DIA, BSR, a new ndim), as scipy returns
    COO.  Explicit zeros and duplicates are kept (the zero fill of DIA / BSR blocks is not an
    entry: it stays behind); ``copy=True`` guarantees no buffer is shared with ``t``.
    """
    t = _tensor(t)
    if order not in ("C", "F"):
        raise InvalidValueError(f"'order' must be 'C' or 'F', not {order!r}")
    size = math.prod(t.shape)
    new = _new_shape(shape, size)
    if new == tuple(t.shape):
        return t.copy() if copy else t
    if size >= 2**63:
        raise UnsupportedError(
            f"reshape of a {t.shape} tensor: supported are tensors of fewer than 2**63 elements"
        )
    xp = t.xp
    ent = _entries(t)
    coords = _unravel(xp, _ravel(ent.dims(), tuple(t.shape), order), new, order)
    dense = dense_format(len(new))
    in_order = order == "C" and _row_major_sorted(ent)
    moved = Entries(xp, dense, new, coords, ent.values, dense if in_order else None, ent.unique)
    res = _pack(moved, _result_format(t, new, unique=ent.unique), t)
    return unshared(res, t) if copy else res


# ----------------------------------------------------------------------------- multiply / dot


def _single_value(b: Tensor) -> Any:
    """The value of a tensor of one element, a NumPy scalar of its dtype."""
    v = _xp.to_host(b.todense()).reshape(-1)
    return v[0] if v.shape[0] else b.dtype.type(0)


def _scaled(t: Tensor, s: Any, shape: tuple[int, ...]) -> Tensor:
    out = _algebra.multiply(t, s)
    return out if tuple(out.shape) == shape else reshape(out, shape)


def _padded_dims(dims: tuple[Any, ...], nd: int, xp: Any, n: int) -> list[Any]:
    zero = xp.zeros(n, dtype=np.int64)
    return [zero] * (nd - len(dims)) + list(dims)


def _grown(t: Tensor, dense: Any, shape: tuple[int, ...]) -> Tensor:
    """``t * dense`` where ``dense`` broadcasts ``t`` to the larger ``shape``: every entry
    repeated along the dimensions ``t`` has extent 1 in (explicit zeros and duplicates kept)."""
    xp = t.xp
    nd = len(shape)
    ts = (1,) * (nd - t.ndim) + tuple(t.shape)
    grow = [d for d in range(nd) if ts[d] == 1 and shape[d] != 1]
    reps = math.prod(shape[d] for d in grow)
    ent = _entries(t)
    n = ent.n
    dims = _padded_dims(tuple(ent.dims()), nd, xp, n)
    e = xp.tile(xp.arange(n, dtype=np.int64), reps)
    g = xp.repeat(xp.arange(reps, dtype=np.int64), n)
    grown = _unravel(xp, g, tuple(shape[d] for d in grow), "C") if grow else []
    coords = [d_[e] for d_ in dims]
    for d, c in zip(grow, grown):
        coords[d] = c
    dt = np.result_type(t.dtype, dense.dtype)
    w = xp.broadcast_to(dense, shape)[tuple(coords)]
    vals = ent.values[e].astype(dt) * w.astype(dt)
    out = Entries(xp, dense_format(nd), shape, coords, vals, None, ent.unique)
    return _pack(out, _result_format(t, shape, unique=ent.unique), t)


def _joined(a: Tensor, b: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``a * b`` of two sparse operands broadcast to ``shape`` (NumPy's rule): a join of the
    summed entries on the dimensions both span, each coordinate of a broadcast dimension taken
    from the operand that spans it, plus SciPy's NaN entries of the operand of the full shape
    (below); exact zeros dropped, as scipy's products drop them."""
    xp = a.xp
    nd = len(shape)
    sa = (1,) * (nd - a.ndim) + tuple(a.shape)
    sb = (1,) * (nd - b.ndim) + tuple(b.shape)
    shared = [d for d in range(nd) if sa[d] == sb[d]]
    # stored zeros kept: a stored 0 times a NaN / inf is a stored NaN (SciPy's products, NumPy)
    da_, va = _merged(a, keep_zeros=None)
    db_, vb = _merged(b, keep_zeros=None)
    na, nb = int(va.shape[0]), int(vb.shape[0])
    da = _padded_dims(da_, nd, xp, na)
    db = _padded_dims(db_, nd, xp, nb)
    if math.prod(max(shape[d], 1) for d in shared) >= 2**63:
        raise UnsupportedError(
            f"multiply of {a.shape} and {b.shape}: the shared dimensions need a 63-bit key"
        )
    ka = _ravel(tuple(da[d] for d in shared), tuple(shape[d] for d in shared), "C") if shared else None
    kb = _ravel(tuple(db[d] for d in shared), tuple(shape[d] for d in shared), "C") if shared else None
    ka = xp.zeros(na, dtype=np.int64) if ka is None else ka
    kb = xp.zeros(nb, dtype=np.int64) if kb is None else kb
    perm = _xp.argsort_stable(xp, kb) if nb else xp.zeros(0, dtype=np.int64)
    kbs = kb[perm]
    lo = xp.searchsorted(kbs, ka, side="left")
    counts = xp.searchsorted(kbs, ka, side="right") - lo
    total = int(counts.sum()) if na else 0
    seg = _xp.expand_segments(xp, counts, total, np.int64)
    starts = xp.cumsum(counts) - counts
    jb = perm[lo[seg] + (xp.arange(total, dtype=np.int64) - starts[seg])]
    coords = [db[d][jb] if sa[d] == 1 and sb[d] != 1 else da[d][seg] for d in range(nd)]
    dt = np.result_type(a.dtype, b.dtype)
    vals = va[seg].astype(dt) * vb[jb].astype(dt)
    nz = xp.flatnonzero(vals != 0)
    coords, vals = [c[nz] for c in coords], vals[nz]
    # NaN / inf against an implicit zero, as SciPy computes a broadcast product (checked on
    # SciPy 1.17): ``A @ diag(v)`` (``diag(v) @ A``) for a matrix times a sparse row (column),
    # ``v`` densified, so every entry of the operand of the full shape meets the other's value
    # at its position, an implicit zero included: a NaN / inf there gives a stored NaN (as in
    # NumPy's dense ``a * b``).  SciPy drops the rest and ust follows it, where NumPy has NaN:
    # a NaN / inf of the broadcast operand against the full one's implicit zeros (NumPy: NaN
    # along the whole broadcast line), and any NaN / inf of a column times a row (SciPy's
    # outer product multiplies stored pairs only; neither operand has the full shape).  Where
    # both have the full shape after padding ((1, n) and (n,)), SciPy densifies the second:
    # the first one's values are kept.  The same rule for any ndim (SciPy broadcasts 2-D only).
    full = 0 if sa == shape else 1 if sb == shape else None
    if full is not None:
        kf, vf, df = (ka, va, da) if full == 0 else (kb, vb, db)
        if may_hold_nonfinite(xp, vf):
            ko = kbs if full == 0 else xp.sort(ka)
            pos, extra = nonfinite_unmatched(xp, kf, vf, ko, dt)
            coords = [xp.concatenate([c, d[pos]]) for c, d in zip(coords, df)]
            vals = xp.concatenate([vals, extra])
    out = Entries(xp, dense_format(nd), shape, coords, vals, None, True)
    return _pack(out, _result_format(a, shape, unique=True), a)


@register(OPERATORS, "multiply_pointwise")
def multiply_pointwise(t: Any, other: Any) -> Any:
    """``t.multiply(other)``: the elementwise product, broadcasting as scipy's ``multiply``.

    A scalar or a dense array that broadcasts to ``t``'s shape: ``t``'s format and structure
    (explicit zeros kept).  A dense array of more dimensions, or ``t`` of one element: the dense
    product.  A dense array that grows ``t`` (a sparse row times a dense matrix): ``t``'s
    entries repeated, in ``t``'s format where it admits the shape, else COO.  Two sparse
    operands: their intersection (broadcast when the shapes differ, e.g. a matrix times a
    sparse row, a column times a row), exact zeros dropped, in ``t``'s format where it admits
    the shape, else COO; a NaN / inf against an implicit zero is a stored NaN where SciPy
    stores one (see :func:`_joined` for the broadcast cases).  Shapes that do not broadcast
    are a ShapeError.
    """
    a = _tensor(t)
    k_other = kind(other)
    if k_other == SCALAR:
        return _algebra.multiply(a, other)
    pl = place({"a": a, "b": other})
    a = pl.tensor(a)
    if k_other == DENSE:
        d = _dense_operand(pl, other)
        if d.dtype == np.bool_:
            d = d.astype(np.result_type(a.dtype, np.bool_))
        shape = _broadcast(tuple(a.shape), tuple(d.shape))
        if d.ndim > max(a.ndim, 2) or tuple(a.shape) in ((1,), (1, 1)):
            check_dense(
                a.xp, shape, np.result_type(a.dtype, d.dtype), f"the dense product of a {a.shape} tensor"
            )
            return pl.back(a.todense() * d)
        if d.size == 1:
            return pl.back(_scaled(a, _scalar(d.reshape(())), shape))
        if shape == tuple(a.shape):
            return pl.back(_algebra.multiply(a, d))
        return pl.back(_grown(a, d, shape))
    b = pl.tensor(as_tensor(other))
    if tuple(a.shape) == tuple(b.shape):
        return pl.back(_algebra.multiply(a, b))
    shape = _broadcast(tuple(a.shape), tuple(b.shape))
    if tuple(b.shape) in ((1,), (1, 1)):
        return pl.back(_scaled(a, _single_value(b), shape))
    if tuple(a.shape) in ((1,), (1, 1)):
        return pl.back(_scaled(b, _single_value(a), shape))
    return pl.back(_joined(a, b, shape))


@register(OPERATORS, "dot")
def dot(t: Any, other: Any) -> Any:
    """``t.dot(other)``: ``t * other`` for a scalar, else the matrix product ``t @ other`` (SpMV /
    SpMM with a dense operand, SpGEMM with a sparse one), as scipy's ``dot``."""
    t = _tensor(t)
    if kind(other) == SCALAR:
        return _algebra.multiply(t, other)
    return matmul_operator(t, other)
