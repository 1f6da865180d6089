"""``t[key]``: indexing any :class:`~ust.Tensor` the way scipy.sparse arrays index (SciPy 1.17).

Keys: integers (negative too), slices (any step), integer arrays and lists (fancy indexing),
boolean masks (1-D along an axis, or one of the whole shape), ``None`` and one ``Ellipsis``.
Values are always those of NumPy's ``t.todense()[key]`` (duplicates summed); the result's
*type* follows SciPy:

* every index an integer: a scalar of the tensor's dtype (a NumPy scalar on the CPU, a 0-d CuPy
  array on the GPU, as cupyx returns), 0 for an implicit zero, duplicates summed;
* CSR / CSC operands (and the formats served through them): a 2-D result whose shape is the
  selection's own (``A[1:3]``, ``A[:, cols]``, ``A[rows[:, None], cols]``, ``A[None, 1]``)
  stays in the operand's format; a 1-D result (``A[1]``, ``A[:, 2]``, ``A[1, cols]``) or one
  reshaped by the key (``A[2-D rows, 1]``) is COO (SparseVector when 1-D), as SciPy returns
  ``coo_array``; pointwise index arrays (``A[rows, cols]``, ``A[mask2d]``) give a dense array
  when 1-D, a CSR / CSC of the sampled values when 2-D; index arrays must be 1- or 2-D and
  results at most 2-D (SciPy's limits for these formats);
* COO operands and tensors that are not matrices (1-D, 3-D, ...): any NumPy-style key, the
  result a COO of the result's dimensions (SparseVector when 1-D), as SciPy's ``coo_array``.

Where SciPy 1.17 is inconsistent with NumPy, ust follows NumPy: ``A[None, rows, cols]``
(SciPy's CSR puts the new axis last), ``A[rows, ::2]`` on CSR and ``A[rows, None]`` on COO
(SciPy raises ValueError).  An index out of range raises
:class:`~ust.runtime.errors.IndexOutOfBoundsError`, a key that cannot index
:class:`~ust.runtime.errors.InvalidIndexError`; both are IndexErrors, as SciPy's.

Routes, chosen by the planner (the ``getitem`` rules of :mod:`ust.plan.rules`): ``direct`` for
CSR, CSC (rows / columns gathered through the positions, then matched against the key) and
COO-like formats (coordinates masked and matched); any other matrix (DIA, BSR, DCSR, batched
and user formats) is converted once, to CSC when the key selects columns (``A[:, j]``,
``A[:, cols]``) and to CSR otherwise (``via-csc`` / ``via-csr``), then indexed as that; any
other tensor, and any other matrix under a key only COO serves (index arrays or a result of
more than two dimensions), has its entries unpacked once into coordinates (``via-coo``).
``ust.explain("getitem", t, key)`` names the route and why.  Everything is an array program
over NumPy or CuPy (segment expansion, searchsorted, gathers): no Python loop over rows or
entries, and the operand's arrays are never written.
"""

from __future__ import annotations

import dataclasses
import math
import operator as _operator
from types import ModuleType
from typing import Any

import numpy as np

from ust.formats.analysis import entries_unique, lex_sorted
from ust.formats.library import format as _parse_format
from ust.formats.library import get as _standard
from ust.formats.model import Dim, Format
from ust.plan import Decision, Problem, classify
from ust.plan.planner import choose
from ust.plan.routes import Route, register, route_of
from ust.runtime import xp as _xp
from ust.runtime.errors import IndexOutOfBoundsError, InvalidIndexError
from ust.tensor.dispatch import OPERATORS

__all__ = ["IndexProblem", "explain", "getitem", "parse_key", "plan"]


@dataclasses.dataclass(frozen=True)
class IndexProblem(Problem):
    """A :class:`~ust.plan.rules.Problem` plus what the key selects (:attr:`Key.selects`):
    ``"rows"``, ``"columns"`` (a matrix key whose row index is the full slice), ``"nd"`` (index
    arrays or a result of more than two dimensions), or ``""`` (not a matrix)."""

    key: str = ""


# ----------------------------------------------------------------------------- the key


@dataclasses.dataclass(frozen=True)
class _Int:
    k: int


@dataclasses.dataclass(frozen=True)
class _Slice:
    start: int
    stop: int
    step: int
    n: int
    full: bool


@dataclasses.dataclass(frozen=True)
class _Arr:
    j: int  # position in Key.arrays


@dataclasses.dataclass
class Key:
    """A validated key: one item per tensor axis, the index arrays (bounds checked, negatives
    wrapped, in the operand's namespace; ``shapes`` as given, before broadcasting), the
    result's axes (``("none",)``, ``("slice", axis)``, ``("adv", d)``: dimension ``d`` of the
    broadcast arrays) and the result's shape."""

    items: list[_Int | _Slice | _Arr]
    arrays: list[Any]
    shapes: list[tuple[int, ...]]
    bshape: tuple[int, ...]
    layout: list[tuple[Any, ...]]
    shape: tuple[int, ...]

    @property
    def has_arrays(self) -> bool:
        return bool(self.arrays)

    @property
    def selects(self) -> str:
        """``"columns"`` for a matrix key that keeps every row and selects columns, ``"nd"`` for one
        with index arrays or a result of more than two dimensions, else ``"rows"``; ``""`` when
        the tensor is not a matrix."""
        if len(self.items) != 2:
            return ""
        if len(self.shape) > 2 or any(len(s) > 2 for s in self.shapes):
            return "nd"
        r, c = self.items
        if isinstance(r, _Slice) and r.full and r.step == 1 and not (isinstance(c, _Slice) and c.full):
            return "columns"
        return "rows"

    def describe(self) -> str:
        parts = []
        for it in self.items:
            if isinstance(it, _Int):
                parts.append(str(it.k))
            elif isinstance(it, _Slice):
                parts.append(":" if it.full else f"{it.start}:{it.stop}:{it.step}")
            else:
                parts.append(f"array{self.shapes[it.j]}")
        return "[" + ", ".join(parts) + "]"


def _is_sparse_key(idx: Any) -> bool:
    if hasattr(idx, "format") and hasattr(idx, "bufs"):  # a ust Tensor
        return True
    mod = type(idx).__module__
    return (mod.startswith(("scipy.sparse", "cupyx.scipy.sparse"))) and hasattr(idx, "tocoo")


def _intlike(x: Any) -> bool:
    """SciPy's ``isintlike``: a 0-d integer (an inexact float such as 1.0 is an error)."""
    if np.ndim(x) != 0:
        return False
    try:
        _operator.index(x)
    except (TypeError, ValueError):
        try:
            loose = bool(int(x) == x)
        except (TypeError, ValueError, OverflowError):
            return False
        if loose:
            raise InvalidIndexError(f"inexact index {x!r}: indices must be integers") from None
        return False
    return True


def _key_array(idx: Any, xp: ModuleType) -> Any:
    """A key element as an array of the operand's namespace (bool or integer dtype)."""
    if _xp.is_cupy(idx):
        arr = idx if xp is not np else _xp.to_host(idx)
    else:
        try:
            host = np.asarray(idx)
        except (ValueError, TypeError) as exc:
            raise InvalidIndexError(f"invalid index {idx!r}: {exc}") from None
        if host.dtype == object:
            raise InvalidIndexError(f"invalid index {idx!r}: not an integer or boolean array")
        # the dtype is checked below on the host array: a string key must fail the same way on
        # both devices (CuPy cannot even hold one)
        arr = host if xp is np or host.dtype.kind not in "biu" else xp.asarray(host)
    kind = np.dtype(arr.dtype).kind
    if kind == "b":
        if arr.ndim == 0:
            raise InvalidIndexError("a 0-d boolean index is not supported (scipy.sparse neither)")
        return arr
    if kind not in "iu":
        if arr.size == 0 and arr.ndim > 0:  # an empty list: float64 to NumPy, an empty int key
            empty = arr.astype(np.int64)
            return empty if xp is np or _xp.is_cupy(empty) else xp.asarray(empty)
        if arr.ndim == 0:
            raise InvalidIndexError(
                f"invalid index {idx!r}: only integers, slices, None, Ellipsis and integer or "
                "boolean arrays are valid indices"
            )
        raise InvalidIndexError(f"arrays used as indices must be of integer or boolean type, not {arr.dtype}")
    return arr


def _oob(idx: int, ax: int, n: int) -> str:
    return f"index ({idx}) out of range: axis {ax} has size {n}"


def parse_key(key: Any, shape: tuple[int, ...], xp: ModuleType = np) -> Key:
    """Validate ``key`` against ``shape`` (SciPy's ``_validate_indices``, NumPy's result axes)."""
    ndim = len(shape)
    if not isinstance(key, tuple):
        key = (key,)
    # pass 1: Ellipsis, masks and arrays; count the axes the key uses
    expanded: list[Any] = []
    ellipsis_at: int | None = None
    used = 0
    for idx in key:
        if idx is Ellipsis:
            if ellipsis_at is not None:
                raise InvalidIndexError("an index can only have a single ellipsis ('...')")
            ellipsis_at = len(expanded)
        elif idx is None:
            expanded.append(None)
        elif isinstance(idx, slice):
            expanded.append(idx)
            used += 1
        elif _is_sparse_key(idx):
            raise InvalidIndexError(
                "indexing with a sparse array is not supported (nor by scipy.sparse arrays); use a "
                "dense boolean mask or integer arrays"
            )
        elif not _xp.is_cupy(idx) and _intlike(idx):
            expanded.append(int(_operator.index(idx)))
            used += 1
        else:
            arr = _key_array(idx, xp)
            if arr.ndim == 0:
                expanded.append(int(arr))
                used += 1
                continue
            expanded.append(arr)
            used += arr.ndim if np.dtype(arr.dtype).kind == "b" else 1
    if used > ndim:
        raise InvalidIndexError(f"too many indices: the key needs {used} dimensions, the tensor has {ndim}")
    fill = [slice(None)] * (ndim - used)
    if ellipsis_at is None:
        expanded += fill
    else:
        expanded[ellipsis_at:ellipsis_at] = fill
    # pass 2: one item per axis; the result's axes
    items: list[_Int | _Slice | _Arr] = []
    arrays: list[Any] = []
    layout: list[tuple[Any, ...]] = []
    adv_pos: list[int] = []
    ax = 0
    for pos, idx in enumerate(expanded):
        if idx is None:
            layout.append(("none",))
        elif isinstance(idx, slice):
            try:
                start, stop, step = idx.indices(shape[ax])
            except (TypeError, ValueError) as exc:
                raise InvalidIndexError(f"invalid slice {idx!r}: {exc}") from None
            n = len(range(start, stop, step))
            full = n == shape[ax] and step == 1
            items.append(_Slice(start, stop, step, n, full))
            layout.append(("slice", ax))
            ax += 1
        elif isinstance(idx, int):
            n = shape[ax]
            if not -n <= idx < n:
                raise IndexOutOfBoundsError(_oob(idx, ax, n))
            items.append(_Int(idx + n if idx < 0 else idx))
            if not adv_pos:
                layout.append(("block",))
            adv_pos.append(pos)
            ax += 1
        elif np.dtype(idx.dtype).kind == "b":
            want = tuple(shape[ax : ax + idx.ndim])
            if tuple(idx.shape) != want:
                raise InvalidIndexError(f"bool index {pos} has shape {tuple(idx.shape)} instead of {want}")
            for nz in xp.nonzero(idx):
                items.append(_Arr(len(arrays)))
                arrays.append(nz)
            if not adv_pos:
                layout.append(("block",))
            adv_pos.append(pos)
            ax += idx.ndim
        else:
            n = shape[ax]
            a = idx.astype(np.int64, copy=False)
            if a.size:
                hi, lo = int(a.max()), int(a.min())
                if hi >= n or lo < -n:
                    raise IndexOutOfBoundsError(_oob(hi if hi >= n else lo, ax, n))
                if lo < 0:
                    a = xp.where(a < 0, a + n, a)  # a new array: the caller's is not written
            items.append(_Arr(len(arrays)))
            arrays.append(a)
            if not adv_pos:
                layout.append(("block",))
            adv_pos.append(pos)
            ax += 1
    shapes = [tuple(int(s) for s in a.shape) for a in arrays]
    bshape: tuple[int, ...] = ()
    if arrays:
        try:
            bshape = tuple(int(s) for s in np.broadcast_shapes(*shapes))
        except ValueError:
            raise InvalidIndexError(
                "shape mismatch: indexing arrays could not be broadcast together with shapes "
                + " ".join(str(s) for s in shapes)
            ) from None
    block = [("adv", d) for d in range(len(bshape))]
    at = layout.index(("block",)) if ("block",) in layout else None
    if at is not None:
        del layout[at]
        positions = sorted(set(adv_pos))
        adjacent = positions == list(range(positions[0], positions[-1] + 1))
        if arrays:
            layout[(at if adjacent else 0) : (at if adjacent else 0)] = block

    def extent(e: tuple[Any, ...]) -> int:
        if e[0] == "none":
            return 1
        if e[0] == "adv":
            return bshape[e[1]]
        it = items[e[1]]
        assert isinstance(it, _Slice)
        return it.n

    out = tuple(extent(e) for e in layout)
    return Key(items, arrays, shapes, bshape, layout, out)


# ----------------------------------------------------------------------------- selection


def _wdt(*sizes: int) -> np.dtype:
    return _xp.work_dtype(*sizes)


def _select(
    xp: ModuleType, k: Key, dims: list[Any], values: Any, shape: tuple[int, ...]
) -> tuple[list[Any], Any, Any]:
    """The entries the key selects, with their result coordinates: ``(coords per result axis,
    values, p)``; ``p`` is each match's flat position in the broadcast arrays (None without)."""
    wdt = _wdt(*shape, int(values.shape[0]))
    dims = [_xp.as_index(c, wdt) for c in dims]
    mask = None
    new: dict[int, Any] = {}
    for ax, it in enumerate(k.items):
        co = dims[ax]
        m = None
        if isinstance(it, _Int):
            m = co == it.k
        elif isinstance(it, _Slice):
            if it.full:
                new[ax] = co
                continue
            if it.step > 0:
                m = (co >= it.start) & (co < it.stop)
            else:
                m = (co <= it.start) & (co > it.stop)
            off = co - it.start
            if it.step != 1:
                m &= off % it.step == 0
                new[ax] = off // it.step
            else:
                new[ax] = off
        if m is not None:
            mask = m if mask is None else mask & m
    if mask is not None:
        keep = xp.flatnonzero(mask)
        if int(keep.shape[0]) < int(values.shape[0]):
            dims = [c[keep] for c in dims]
            new = {a: c[keep] for a, c in new.items()}
            values = values[keep]
    p = None
    if k.arrays:
        arr_axes = [ax for ax, it in enumerate(k.items) if isinstance(it, _Arr)]
        keys = [xp.broadcast_to(k.arrays[k.items[ax].j], k.bshape).reshape(-1) for ax in arr_axes]  # type: ignore[union-attr]
        if len(arr_axes) == 1:
            key_lin = keys[0].astype(np.int64, copy=False)
            ent_lin = dims[arr_axes[0]].astype(np.int64, copy=False)
        else:
            # one key per tuple: each axis' values ranked among the key's distinct ones, so the
            # combined key stays below K ** r whatever the extents
            key_lin = xp.zeros(keys[0].shape[0], dtype=np.int64)
            ent_lin = xp.zeros(int(values.shape[0]), dtype=np.int64)
            valid = None
            for ax, kk in zip(arr_axes, keys):
                u = xp.unique(kk)
                nu = int(u.shape[0])
                key_lin = key_lin * nu + xp.searchsorted(u, kk)
                r = xp.searchsorted(u, dims[ax])
                rc = xp.minimum(r, max(nu - 1, 0))
                ok = (r < nu) & (u[rc] == dims[ax]) if nu else xp.zeros(r.shape[0], dtype=bool)
                valid = ok if valid is None else valid & ok
                ent_lin = ent_lin * nu + rc
            keep = xp.flatnonzero(valid)
            if int(keep.shape[0]) < int(values.shape[0]):
                ent_lin = ent_lin[keep]
                new = {a: c[keep] for a, c in new.items()}
                values = values[keep]
        order = _xp.argsort_stable(xp, key_lin)
        sk = key_lin[order]
        lo = xp.searchsorted(sk, ent_lin, side="left")
        cnt = xp.searchsorted(sk, ent_lin, side="right") - lo
        total = int(cnt.sum()) if cnt.shape[0] else 0
        e = _xp.expand_segments(xp, cnt, total, np.int64)
        starts = xp.cumsum(cnt) - cnt
        p = order[lo[e] + (xp.arange(total, dtype=np.int64) - starts[e])]
        values = values[e]
        new = {a: c[e] for a, c in new.items()}
    n = int(values.shape[0])
    adv = list(xp.unravel_index(p, k.bshape)) if p is not None and k.bshape else []
    coords = []
    for entry in k.layout:
        if entry[0] == "none":
            coords.append(xp.zeros(n, dtype=wdt))
        elif entry[0] == "slice":
            coords.append(new[entry[1]])
        else:
            coords.append(adv[entry[1]])
    return coords, values, p


def _scatter_sum(xp: ModuleType, p: Any, values: Any, size: int, dtype: Any) -> Any:
    """A dense vector of ``size``: the sum of the values matched at each position."""
    out = xp.zeros(size, dtype=dtype)
    if int(p.shape[0]) == 0:
        return out
    order = _xp.argsort_stable(xp, p)
    ps = p[order]
    change = xp.empty(ps.shape[0], dtype=bool)
    change[0] = True
    change[1:] = ps[1:] != ps[:-1]
    starts = xp.flatnonzero(change)
    out[ps[starts]] = _xp.segment_sum(xp, values[order], starts)
    return out


# ----------------------------------------------------------------------------- results


def _coo_format(ndim: int, unique: bool) -> Format:
    """The COO format of ``ndim`` dimensions (SparseVector when 1-D)."""
    if ndim == 2 and unique:
        return _standard("COO")
    if ndim == 1 and unique:
        return _standard("SparseVector")
    names = [f"d{i}" for i in range(ndim)]
    if ndim == 1:
        return _parse_format("(d0) -> (d0 : compressed(nonunique))")
    inner = ", ".join(f"{d} : singleton(nonunique)" for d in names[1:-1])
    last = f"{names[-1]} : singleton" + ("" if unique else "(nonunique)")
    levels = ", ".join(x for x in (f"{names[0]} : compressed(nonunique)", inner, last) if x)
    return _parse_format(f"({', '.join(names)}) -> ({levels})")


def _pack(xp: ModuleType, fmt: Format, shape: tuple[int, ...], coords: list[Any], values: Any, *,
          unique: bool, index_dtype: Any, in_order: bool = False) -> Any:  # fmt: skip
    from ust.convert.pack import pack
    from ust.convert.unpack import Entries

    wdt = _wdt(*shape, int(values.shape[0]))
    coords = [_xp.as_index(c, wdt) for c in coords]
    lvl = list(fmt.dim_to_lvl(tuple(coords)))
    ent = Entries(xp, fmt, shape, lvl, values, fmt if in_order else None, unique)
    return pack(ent, fmt, source_index_dtype=index_dtype)


def _scalar(values: Any, dtype: Any) -> Any:
    return values.sum(dtype=dtype)


def _compressed_kind(k: Key) -> str:
    """What SciPy's CSR / CSC return for this key: ``scalar``, ``dense``, ``sample`` (a
    compressed tensor of pointwise samples), ``same`` (the operand's format) or ``coo``."""
    if k.shape == ():
        return "scalar"
    r, c = k.items
    if isinstance(r, _Int) and isinstance(c, _Int):
        return "dense"
    if isinstance(r, _Arr) and isinstance(c, _Arr):
        rs, cs = k.shapes[r.j], k.shapes[c.j]
        outer = len(rs) == 2 and rs[1] == 1 and (len(cs) == 1 or cs[0] == 1)
        if not outer:
            if math.prod(k.bshape) == 0:
                raw = k.bshape if len(k.bshape) >= 2 else (1, *k.bshape)
                return "same" if tuple(raw) == k.shape else "coo"
            return "dense" if len(k.bshape) == 1 else "sample"
        raw = (rs[0], math.prod(cs))
    else:

        def size(it: Any) -> int:
            return (
                1 if isinstance(it, _Int) else it.n if isinstance(it, _Slice) else math.prod(k.shapes[it.j])
            )

        raw = (size(r), size(c))
    return "same" if raw == k.shape else "coo"


def _check_compressed(k: Key, name: str) -> None:
    for s in k.shapes:
        if len(s) not in (1, 2):
            raise InvalidIndexError(
                f"index arrays of a {name} tensor must be 1- or 2-D, got {len(s)}-D (as scipy.sparse); "
                "a COO tensor takes any (t.tocoo()[key])"
            )
    if len(k.shape) > 2:
        raise InvalidIndexError(
            f"indexing that leads to >2D is not supported for {name} (a {len(k.shape)}-D result, as "
            "scipy.sparse); convert to COO first (t.tocoo()[key])"
        )


def _gather_major(xp: ModuleType, t: Any, k: Key, major: int) -> tuple[list[Any], Any]:
    """The candidate entries of a CSR (major 0) / CSC (major 1) tensor as dimension coordinates
    and values: only the major rows (columns) the key can reach, read through the positions."""
    ptr, crd, vals = t.pos(1), t.crd(1), t.values
    m = t.shape[major]
    it = k.items[major]
    wdt = _wdt(m, int(vals.shape[0]))
    majors = None
    if isinstance(it, _Int):
        majors = xp.asarray([it.k], dtype=wdt)
    elif isinstance(it, _Slice) and not it.full:
        majors = xp.arange(it.start, it.stop, it.step, dtype=wdt) if it.n else xp.zeros(0, dtype=wdt)
    elif isinstance(it, _Arr):
        majors = xp.unique(k.arrays[it.j].reshape(-1)).astype(wdt)
    if majors is None:
        counts = xp.diff(ptr)
        nnz = int(ptr[-1]) if ptr.shape[0] else 0
        mj = _xp.expand_segments(xp, counts, nnz, wdt)
        mn, v = crd[:nnz], vals[:nnz]
    else:
        lo = ptr[majors].astype(wdt)
        counts = ptr[majors + 1].astype(wdt) - lo
        total = int(counts.sum()) if counts.shape[0] else 0
        wdt = _wdt(m, total, int(vals.shape[0]))
        seg = _xp.expand_segments(xp, counts, total, wdt)
        starts = xp.cumsum(counts, dtype=wdt) - counts
        at = lo[seg].astype(wdt) + (xp.arange(total, dtype=wdt) - starts[seg])
        mj, mn, v = majors[seg], crd[at], vals[at]
    return ([mj, mn] if major == 0 else [mn, mj]), v


def _index_compressed(t: Any, k: Key, major: int) -> Any:
    """SciPy's CSR (major 0) / CSC (major 1) indexing of ``t`` (in a CSR / CSC class format)."""
    xp = t.xp
    name = "CSR" if major == 0 else "CSC"
    _check_compressed(k, name)
    kind = _compressed_kind(k)
    if kind == "same" and all(isinstance(it, _Slice) and it.full for it in k.items) and k.shape == t.shape:
        return t.copy()
    dims, vals = _gather_major(xp, t, k, major)
    coords, values, p = _select(xp, k, dims, vals, t.shape)
    unique = entries_unique(t.format)
    if kind == "scalar":
        return _scalar(values, t.dtype)
    if kind == "dense":
        if p is None:  # integers and None only: the scalar in the key's shape
            return xp.reshape(_scalar(values, t.dtype), k.shape)
        return _scatter_sum(xp, p, values, math.prod(k.bshape), t.dtype).reshape(k.shape)
    if kind == "sample":
        dense = _scatter_sum(xp, p, values, math.prod(k.bshape), t.dtype).reshape(k.bshape)
        nz = xp.nonzero(dense)
        return _pack(xp, t.format, k.shape, list(nz), dense[nz], unique=True, index_dtype=t.index_dtype)
    in_order = (
        kind == "same"
        and lex_sorted(t.format)
        and not k.has_arrays
        and k.layout == [("slice", 0), ("slice", 1)]
        and all(isinstance(it, _Slice) and it.step > 0 for it in k.items)
    )
    fmt = t.format if kind == "same" else _coo_format(len(k.shape), unique)
    return _pack(
        xp, fmt, k.shape, coords, values, unique=unique, index_dtype=t.index_dtype, in_order=in_order
    )


def _index_coo(t: Any, k: Key, keep_format: bool) -> Any:
    """SciPy's COO indexing of any tensor, read as its stored entries (coordinates, values)."""
    xp = t.xp
    ent = _unpack(t)
    dims = list(ent.dims())
    values = ent.values
    first = k.items[0] if k.items else None
    if ent.sorted_by is not None and t.format.levels[0].expr == Dim(0):
        # sorted by dimension 0: an integer or slice there bounds the candidates by two searches
        if isinstance(first, _Int):
            lo_c, hi_c = first.k, first.k
        elif isinstance(first, _Slice) and not first.full and first.n:
            lo_c, hi_c = (
                min(first.start, first.start + (first.n - 1) * first.step),
                max(first.start, first.start + (first.n - 1) * first.step),
            )
        else:
            lo_c = hi_c = None  # type: ignore[assignment]
        if lo_c is not None:
            row = dims[0]
            lo = int(xp.searchsorted(row, xp.asarray([lo_c], dtype=row.dtype), side="left")[0])
            hi = int(xp.searchsorted(row, xp.asarray([hi_c], dtype=row.dtype), side="right")[0])
            dims = [c[lo:hi] for c in dims]
            values = values[lo:hi]
    coords, values, _ = _select(xp, k, dims, values, t.shape)
    if k.shape == ():
        return _scalar(values, t.dtype)
    unique = ent.unique
    same = keep_format and len(k.shape) == t.ndim
    fmt = t.format if same else _coo_format(len(k.shape), unique)
    in_order = (
        same
        and ent.sorted_by is not None
        and lex_sorted(t.format)
        and not k.has_arrays
        and k.layout == [("slice", a) for a in range(t.ndim)]
        and all(isinstance(it, _Slice) and it.step > 0 for it in k.items)
        and all(lv.expr == Dim(a) for a, lv in enumerate(t.format.levels))
    )
    return _pack(
        xp, fmt, k.shape, coords, values, unique=unique, index_dtype=t.index_dtype, in_order=in_order
    )


def _unpack(t: Any) -> Any:
    from ust.convert.unpack import unpack

    return unpack(t, keep_zeros=True)


# ----------------------------------------------------------------------------- routes


def _direct(t: Any, k: Key) -> Any:
    fc = classify(t.format).name
    if fc == "CSR":
        return _index_compressed(t, k, 0)
    if fc == "CSC":
        return _index_compressed(t, k, 1)
    return _index_coo(t, k, keep_format=True)


def _via_csr(t: Any, k: Key) -> Any:
    return _index_compressed(t.convert(_standard("CSR")), k, 0)


def _via_csc(t: Any, k: Key) -> Any:
    return _index_compressed(t.convert(_standard("CSC")), k, 1)


def _via_coo(t: Any, k: Key) -> Any:
    return _index_coo(t, k, keep_format=False)


for _name, _build in (
    ("direct", _direct),
    ("via-csr", _via_csr),
    ("via-csc", _via_csc),
    ("via-coo", _via_coo),
):
    register(Route("getitem", _name, _build, doc=_build.__doc__ or ""))
del _name, _build


# ----------------------------------------------------------------------------- plan / run / explain


def _as_tensor(t: Any) -> Any:
    if hasattr(t, "format") and hasattr(t, "bufs"):
        return t
    from ust.convert import asarray

    return asarray(t)


def problem(t: Any, k: Key) -> IndexProblem:
    """The planner's view of ``t[key]``."""
    fc = classify(t.format)
    return IndexProblem(
        op="getitem",
        device="cuda" if t.device.startswith("cuda") else "cpu",
        format_class=fc.name,
        format_params=fc.params,
        canonical=fc.canonical,
        dtype=str(t.dtype),
        index_dtype=str(np.dtype(t.index_dtype)),
        plain=True,
        ndim=t.ndim,
        batched=t.is_batched,
        max_extent=max(t.shape, default=0),
        key=k.selects,
    )


def _plan(t: Any, key: Any, route: str | None) -> tuple[Key, Decision]:
    k = parse_key(key, t.shape, t.xp)
    return k, choose(problem(t, k), route)


def plan(t: Any, key: Any, *, route: str | None = None) -> Decision:
    """The planner's decision for ``t[key]`` (the key validated, no work done)."""
    return _plan(_as_tensor(t), key, route)[1]


def getitem(t: Any, key: Any, *, route: str | None = None) -> Any:
    """``t[key]`` with scipy.sparse semantics (see the module docstring); ``route`` forces one
    of the routes the planner lists for the problem (tests, benchmarks)."""
    t = _as_tensor(t)
    k, d = _plan(t, key, route)
    return route_of(d.rule).build(t, k)


def _result_text(t: Any, k: Key, d: Decision) -> str:
    """What ``t[key]`` returns on route ``d``: a scalar, a dense array, or a tensor's format."""
    fc = classify(t.format).name
    compressed = {"via-csr": "CSR", "via-csc": "CSC"}.get(d.route)
    if d.route == "direct" and fc in ("CSR", "CSC"):
        compressed = fc
    if compressed is not None:
        base = t.format if d.route == "direct" else _standard(compressed)
        try:
            _check_compressed(k, compressed)
        except InvalidIndexError as exc:
            return f"an error ({exc})"
        kind = _compressed_kind(k)
        if kind == "scalar":
            return "a scalar"
        if kind == "dense":
            return f"a dense array of shape {k.shape}"
        fmt = base if kind in ("same", "sample") else _coo_format(len(k.shape), entries_unique(base))
    elif k.shape == ():
        return "a scalar"
    else:
        same = d.route == "direct" and len(k.shape) == t.ndim
        fmt = t.format if same else _coo_format(len(k.shape), entries_unique(t.format))
    return f"{fmt.standard_name or 'custom'} {fmt.to_text()} of shape {k.shape}"


_SELECTS = {"rows": "rows", "columns": "columns", "nd": "more than two dimensions"}


def explain(t: Any, key: Any, *, route: str | None = None) -> str:
    """How ``t[key]`` would run -- route, reason, conversion, result -- without running it."""
    t = _as_tensor(t)
    k, d = _plan(t, key, route)
    lines = [
        "operation: getitem (t[key], indexed as scipy.sparse arrays are)",
        f"A: {t.format.standard_name or 'custom'} {t.format.to_text()}  shape {tuple(t.shape)}  "
        f"{t.dtype} values, {np.dtype(t.index_dtype)} indices",
        f"key: {k.describe()}" + (f" (selects {_SELECTS[k.selects]})" if k.selects else ""),
        f"execution space: {t.device}",
        f"route: {d.route}",
        f"reason: {d.reason}",
    ]
    if d.rule.convert_to:
        lines.append(f"conversion: A -> {d.rule.convert_to} once, first")
    lines.append(f"result: {_result_text(t, k, d)}")
    if d.alternatives:
        lines.append("other candidates: " + ", ".join(dict.fromkeys(r.route for r in d.alternatives)))
    return "\n".join(lines)


OPERATORS["getitem"] = getitem
