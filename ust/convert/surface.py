"""The conversion and storage half of :class:`ust.Tensor`'s scipy.sparse array surface.

Registered into :data:`ust.tensor.dispatch.CONVERSIONS` (``import ust`` imports this module):

* ``toarray(t, order, out)``: scipy's ``toarray`` (NumPy on the CPU, CuPy on a GPU);
* ``asformat(t, format, copy, blocksize)``: scipy's ``asformat`` / ``tocsr`` / ... / ``tobsr``;
* ``scipy_data(t)``: scipy's ``data`` array of the same storage (a view where the layouts agree);
* ``has_canonical_format(t)``: sorted and duplicate-free, scipy's meaning;
* ``repr_html(t)``: the Jupyter view (format, shape, dtype, nnz, bytes, a sparsity picture);
* ``array(t, dtype, copy)``: ``Tensor.__array__``, NumPy's hook, which SciPy functions handed a
  Tensor (``spsolve``, ``csr_array(t)``) take: the dense array up to
  :data:`ARRAY_ELEMENT_LIMIT` elements, a ShapeError naming ``t.to_scipy()`` above it.

Everything is an array program over the buffers (no Python loop over entries or rows), and no
buffer the caller shares with a tensor is ever written.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.convert.layouts import coo_format, library_layout
from ust.formats.library import get, resolve
from ust.formats.model import Dim, Format, LevelFormat
from ust.runtime import xp as _xp
from ust.runtime.errors import DeviceError, InvalidTypeError, InvalidValueError, ShapeError, UnsupportedError
from ust.tensor.dispatch import CONVERSIONS, register

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = [
    "ARRAY_ELEMENT_LIMIT",
    "PICTURE_ENTRY_LIMIT",
    "SCIPY_NAMES",
    "asformat",
    "dense_array",
    "estimate_blocksize",
    "has_canonical_format",
    "repr_html",
    "scipy_data",
    "toarray",
    "unshared",
]

#: ``np.asarray(t)`` (``Tensor.__array__``) densifies tensors of at most this many elements
#: (2**24: a 4096 x 4096 matrix, 128 MiB of float64); above it, a ShapeError names
#: ``t.to_scipy()``.  Module-level so that a session may raise it.
ARRAY_ELEMENT_LIMIT = 1 << 24

#: ``_repr_html_`` reads every stored entry up to this many value slots; above it the picture
#: is drawn from an evenly spaced sample of the entries (CSR, CSC and COO layouts) or left out.
PICTURE_ENTRY_LIMIT = 1 << 21

#: SciPy's format names accepted by :func:`asformat` (case-insensitively).
SCIPY_NAMES = ("csr", "csc", "coo", "bsr", "dia")
_NO_ARRAYS = ("dok", "lil")
_STANDARD = {"csr": "CSR", "csc": "CSC", "dia": "DIA"}

_GRID = 32  # the sparsity picture has at most _GRID x _GRID cells


# ----------------------------------------------------------------------------- toarray


def _natural_order(fmt: Format) -> str:
    """``"F"`` where the storage is column-major (the first level walks columns: CSC, DCSC,
    CCOL, BSC, DenseColMajor; scipy's ``csc.toarray()`` is F-ordered too), else ``"C"``."""
    if fmt.ndim == 2 and fmt.levels and fmt.levels[0].expr.dims == (1,):
        return "F"
    return "C"


def _dense_view(t: Tensor) -> Any:
    """The values of an all-dense tensor read as an array of ``shape`` (a view), else None."""
    fmt = t.format
    if not (fmt.is_dense and fmt.nbatch == 0 and all(isinstance(lv.expr, Dim) for lv in fmt.levels)):
        return None
    order = [lv.expr.dim for lv in fmt.levels]  # type: ignore[union-attr]
    return t.values.reshape(fmt.lvl_shape(t.shape)).transpose([order.index(d) for d in range(t.ndim)])


def toarray(t: Tensor, order: Any = None, out: Any = None) -> Any:
    """A dense array of ``t`` (duplicates summed), as scipy's ``toarray(order=None, out=None)``.

    ``order`` is ``"C"`` or ``"F"`` (None: the storage's own order, F for column-major formats
    such as CSC, as scipy).  ``out``, an array of ``t``'s shape, dtype and device, is filled
    and returned (scipy's rule: not together with ``order``).
    """
    if order is not None:
        if not isinstance(order, str) or order.upper() not in ("C", "F"):
            raise InvalidValueError(f"order must be 'C', 'F' or None, not {order!r}")
        order = order.upper()
    xp = t.xp
    if out is not None:
        if order is not None:
            raise InvalidValueError("order cannot be specified if out is not None")
        if not (isinstance(out, np.ndarray) or _xp.is_cupy(out)):
            raise InvalidTypeError(f"out must be a NumPy or CuPy array, not {type(out).__name__}")
        if _xp.namespace(out) is not xp:
            raise DeviceError(
                f"out must be a {xp.__name__} array on {t.device} (the tensor's device), "
                f"not {type(out).__module__}.{type(out).__name__}"
            )
        if tuple(out.shape) != t.shape or np.dtype(out.dtype) != t.dtype:
            raise InvalidValueError(
                f"out array must be same dtype and shape as the tensor: got {out.dtype} {tuple(out.shape)}, "
                f"need {t.dtype} {t.shape}"
            )
        if _xp.is_cupy(out) and _xp.device_of(out) != t.device:
            raise DeviceError(f"out is on {_xp.device_of(out)}, the tensor on {t.device}")
    want = order or _natural_order(t.format)
    view = _dense_view(t)
    if view is not None:  # all-dense storage: one copy, straight into the wanted order
        from ust.tensor.limits import check_dense

        check_dense(xp, t.shape, t.dtype, f"a dense array of shape {t.shape} and dtype {t.dtype}")
        if out is not None:
            out[...] = view
            return out
        return xp.array(view, order=want, copy=True)
    from ust.convert.dense import todense

    dense = todense(t)
    if out is not None:
        out[...] = dense
        return out
    if want == "F" and not dense.flags.f_contiguous:
        return xp.asfortranarray(dense)
    if want == "C" and not dense.flags.c_contiguous:
        return xp.ascontiguousarray(dense)
    return dense


# ----------------------------------------------------------------------------- __array__


def dense_array(t: Tensor, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """``Tensor.__array__``: a NumPy array of a CPU tensor of at most :data:`ARRAY_ELEMENT_LIMIT`
    elements.  ``copy=False`` (NumPy 2's "never copy") is honoured only by all-dense formats,
    whose values *are* the array; a sparse tensor has no dense array to share (ValueError)."""
    if t.device != "cpu":
        raise DeviceError(
            f"a tensor on {t.device} does not become a NumPy array implicitly; use t.to('cpu'), "
            "t.toarray() (a CuPy array), or t.to_scipy() / t.to_cupyx() for SciPy / cupyx functions"
        )
    n = math.prod(t.shape)
    if n > ARRAY_ELEMENT_LIMIT:
        raise ShapeError(
            f"np.asarray of a {t.shape} ust.Tensor would build a dense array of {n} elements, above "
            f"ust.convert.surface.ARRAY_ELEMENT_LIMIT ({ARRAY_ELEMENT_LIMIT}); hand SciPy "
            "t.to_scipy() instead (scipy.sparse.linalg.spsolve(t.to_scipy(), b), "
            "scipy.sparse.csr_array(t.to_scipy())), or call t.toarray() to densify on purpose"
        )
    dt = None if dtype is None else np.dtype(dtype)
    if copy is False:
        view = _dense_view(t)
        if view is None or (dt is not None and dt != t.dtype):
            raise InvalidValueError(
                f"np.asarray(t, copy=False): a {t.format.standard_name or 'sparse'} tensor has no dense "
                "array to share without a copy (use copy=None or t.toarray())"
            )
        return view
    arr = toarray(t, "C")
    return arr if dt is None or dt == arr.dtype else arr.astype(dt)


# ----------------------------------------------------------------------------- asformat


def _scipy_layout(fmt: Format) -> tuple[str, tuple[int, int] | None] | None:
    """The scipy layout ``fmt`` stores (properties aside: an unsorted CSR is still csr), as
    ``(name, blocksize)``; COO of any order; None where scipy has no such layout."""
    lay = library_layout(fmt)
    if lay is not None:
        return None if lay.name == "bsc" else (lay.name, lay.blocksize)
    lv = fmt.levels
    if (
        fmt.nbatch == 0
        and len(lv) == fmt.ndim
        and lv[0].format is LevelFormat.COMPRESSED
        and all(x.format is LevelFormat.SINGLETON for x in lv[1:])
        and all(isinstance(x.expr, Dim) and x.expr.dim == k for k, x in enumerate(lv))
    ):
        return ("coo", None)
    return None


def _distinct_pairs(xp: Any, a: Any, b: Any, na: int, nb: int) -> int:
    """How many distinct ``(a, b)`` pairs (``0 <= a < na``, ``0 <= b < nb``) there are."""
    if na * nb < 2**62:  # one int64 key
        return int(xp.unique(a * nb + b).shape[0])
    order = xp.lexsort(xp.stack([b, a]))
    a, b = a[order], b[order]
    return 1 + int(xp.count_nonzero((a[1:] != a[:-1]) | (b[1:] != b[:-1])))


def estimate_blocksize(t: Tensor, efficiency: float = 0.7) -> tuple[int, int]:
    """SciPy's ``estimate_blocksize`` (what ``tobsr()`` uses without ``blocksize``): the
    largest of 6x6, 4x4, 3x3, 2x2 whose blocks would be at least ``efficiency`` full
    (``(1, 1)`` otherwise), counted over the entries scipy's ``tocsr()`` would keep."""
    from ust.convert.unpack import unpack

    M, N = t.shape
    ent = unpack(t)  # DIA drops its zero slots, as scipy's dia.tocsr
    if ent.n == 0:
        return (1, 1)
    xp = ent.xp
    i, j = (c.astype(np.int64) for c in ent.dims())
    lay = _scipy_layout(t.format)
    nnz = ent.n
    if not ent.unique and (lay is None or lay[0] not in ("csr", "csc")):
        nnz = _distinct_pairs(xp, i, j, M, N)  # scipy's tocsr sums these duplicates

    def blocks(r: int, c: int) -> int:
        return _distinct_pairs(xp, i // r, j // c, M // r, N // c)

    def eff(r: int) -> float:
        return nnz / (r * r * blocks(r, r)) if M % r == 0 and N % r == 0 else 0.0

    high = (1.0 + efficiency) / 2.0
    e22, e33 = eff(2), eff(3)
    if e22 > high and e33 > high:
        return (6, 6) if eff(6) > efficiency else (3, 3)
    e44 = eff(4)
    if e44 > efficiency:
        return (4, 4)
    if e33 > efficiency:
        return (3, 3)
    if e22 > efficiency:
        return (2, 2)
    return (1, 1)


def _blocksize(blocksize: Any) -> tuple[int, int]:
    try:
        r, c = blocksize
        if isinstance(r, bool) or isinstance(c, bool):
            raise TypeError
        rc = (int(r.__index__()), int(c.__index__()))
    except (TypeError, ValueError, AttributeError):
        raise InvalidValueError(
            f"blocksize must be a pair (r, c) of positive integers, not {blocksize!r}"
        ) from None
    if rc[0] < 1 or rc[1] < 1:
        raise InvalidValueError(f"invalid blocksize {rc}: both sizes must be positive")
    return rc


def unshared(res: Tensor, *sources: Tensor) -> Tensor:
    """``res`` with a private copy of every buffer that may share memory with a source's (``res``
    itself when none does): what a result the caller may write must not alias its operands."""
    xp = res.xp
    theirs = [a for src in sources for a in src.buffers().values()]

    def own(a: Any) -> Any:
        if a is None or not any(xp.may_share_memory(a, b) for b in theirs):
            return a
        return a.copy()

    nl = res.format.nlevels
    pos = [own(res.pos(k)) for k in range(nl)]
    crd = [own(res.crd(k)) for k in range(nl)]
    vals = own(res.values)
    if vals is res.values and all(
        p is res.pos(k) and c is res.crd(k) for k, (p, c) in enumerate(zip(pos, crd))
    ):
        return res
    return res._replace(pos, crd, vals)


def _same(t: Tensor, copy: bool) -> Tensor:
    return t.copy() if copy else t


def asformat(t: Tensor, format: Any, copy: bool = False, blocksize: Any = None) -> Tensor:  # noqa: A002
    """``t`` in ``format``, as scipy's ``asformat`` (``tocsr``, ``tocsc``, ``tocoo``,
    ``todia``, ``tobsr`` call it).

    ``format``: a scipy name, case-insensitively (``"csr"``, ``"csc"``, ``"coo"``, ``"dia"``,
    ``"bsr"`` with ``blocksize=(r, c)``; without one, SciPy's ``estimate_blocksize``), or any
    ust format (a Format, a standard name, DSL text); None keeps the format.  A scipy name
    matches a layout as scipy does (an unsorted CSR is already ``"csr"``: no sort), a ust
    format matches exactly.  When ``t`` is already in the format, ``t`` itself is returned
    (``copy=False``) or a copy; otherwise the converted tensor, which ``copy=True`` guarantees
    shares no buffer with ``t``.  ``"dok"`` and ``"lil"`` are UnsupportedError.
    """
    if format is None:
        if blocksize is not None:
            raise InvalidValueError("blocksize= goes with format='bsr'")
        return _same(t, copy)
    target: Format | None = None
    if isinstance(format, str):
        key = format.strip().casefold()
        if key in _NO_ARRAYS:
            raise UnsupportedError(
                f"scipy's {key!r} format has no array buffers and no ust equivalent; supported scipy "
                f"names: {', '.join(SCIPY_NAMES)} (any case), or any ust format (a Format, a standard "
                "name such as 'DCSR' or 'BSR[2, 2]', or DSL text); t.to_scipy().asformat("
                f"{key!r}) gives SciPy's"
            )
        if key in SCIPY_NAMES:
            have = _scipy_layout(t.format)
            if key == "bsr":
                if t.ndim != 2:
                    raise ShapeError(f"cannot convert a {t.ndim}-D tensor to bsr (2-D only)")
                if blocksize is not None:
                    bs = _blocksize(blocksize)
                elif have is not None and have[0] == "bsr" and have[1] is not None:
                    bs = have[1]
                else:
                    bs = estimate_blocksize(t)
                if have == ("bsr", bs):
                    return _same(t, copy)
                target = get(f"BSR[{bs[0]}, {bs[1]}]")
            else:
                if blocksize is not None:
                    raise InvalidValueError(f"blocksize= goes with format='bsr', not {format!r}")
                if have is not None and have[0] == key:
                    return _same(t, copy)
                target = coo_format(t.ndim) if key == "coo" else get(_STANDARD[key])
    if target is None:
        target = resolve(format, blocksize=blocksize)
        if target == t.format:
            return _same(t, copy)
    res = t.convert(target)
    return unshared(res, t) if copy and res is not t else res


# ----------------------------------------------------------------------------- storage facts


def scipy_data(t: Tensor) -> Any:
    """scipy's ``data`` of the same storage, without a copy: the values of CSR, CSC and COO;
    BSR's as ``(nblocks, r, c)``; DIA's as ``(ndiag, ncols)`` (ust stores scipy's full-width
    diagonals, padding included); ``values`` for every other format."""
    lay = _scipy_layout(t.format)
    vals = t.values
    if lay is None or t.is_batched:
        return vals
    name, bs = lay
    if name == "bsr":
        assert bs is not None
        return vals.reshape(-1, bs[0], bs[1])
    if name == "dia":
        nd = int(t.crd(0).shape[0])
        return vals.reshape(nd, t.shape[1])
    return vals


def has_canonical_format(t: Tensor) -> bool:
    """Stored entries sorted (in the format's level order, as scipy's for its layouts: CSR by
    row then column, CSC by column then row, COO row-major, BSR by block) with no duplicates.

    The format decides where it can (sorted, unique levels: True; the constructor validated
    that unless ``check=False``); otherwise the buffers are read: strictly increasing level
    coordinates in storage order, one comparison per level over all entries."""
    from ust.formats.analysis import entries_unique, lex_sorted

    fmt = t.format
    if fmt.is_dense or (lex_sorted(fmt) and entries_unique(fmt)):
        return True
    from ust.convert.unpack import unpack

    ent = unpack(t, keep_zeros=True)
    if ent.n < 2:
        return True
    xp = ent.xp
    greater = xp.zeros(ent.n - 1, dtype=bool)
    equal = xp.ones(ent.n - 1, dtype=bool)
    for c in ent.lvl:  # one pass per level, over every entry at once
        a, b = c[:-1], c[1:]
        greater |= equal & (b > a)
        equal &= b == a
    return bool(greater.all())


# ----------------------------------------------------------------------------- _repr_html_


def _picture_coords(t: Tensor) -> tuple[Any, Any, int, int, str] | None:
    """Row / column of (a bounded sample of) the stored entries, for the picture, as float64:
    a tensor is drawn as the matrix of its leading dimensions (rows) by its last (columns)."""
    shape = t.shape
    M = math.prod(shape[:-1]) if t.ndim > 1 else 1
    N = shape[-1] if shape else 1
    note = ""
    if t.nse <= PICTURE_ENTRY_LIMIT:
        from ust.convert.unpack import unpack

        ent = unpack(t, keep_zeros=True)
        dims = list(ent.dims())
    else:
        lay = _scipy_layout(t.format)
        if lay is None or lay[0] not in ("csr", "csc", "coo") or t.is_batched:
            return None
        xp = t.xp
        n = t.nse
        p = xp.linspace(0, n - 1, PICTURE_ENTRY_LIMIT).astype(np.int64)
        if lay[0] == "coo":
            dims = [t.crd(k)[p] for k in range(t.ndim)]
        else:
            outer = xp.searchsorted(t.pos(1), p, side="right") - 1
            inner = t.crd(1)[p]
            dims = [outer, inner] if lay[0] == "csr" else [inner, outer]
        note = f" (picture from {PICTURE_ENTRY_LIMIT} of {n} entries, evenly spaced)"
    xp = t.xp
    if t.ndim == 1:
        rows = xp.zeros(dims[0].shape[0], dtype=np.float64)
    else:
        rows = xp.zeros(dims[0].shape[0], dtype=np.float64)
        stride = 1.0
        for c, s in zip(reversed(dims[:-1]), reversed(shape[:-1])):
            rows += c.astype(np.float64) * stride
            stride *= s
    cols = dims[-1].astype(np.float64)
    return rows, cols, M, N, note


def _bin_sizes(extent: int, bins: int) -> np.ndarray:
    """How many rows (columns) fall in each of ``bins`` equal bins of ``extent``."""
    edges = np.ceil(np.arange(bins + 1, dtype=np.float64) * (extent / bins))
    edges[-1] = extent
    return np.maximum(np.diff(edges), 1)


def _picture(t: Tensor) -> str:
    if 0 in t.shape:
        return "<p><i>empty: no picture</i></p>"
    got = _picture_coords(t)
    if got is None:
        return (
            f"<p><i>picture left out: {t.nse} stored slots, above "
            f"ust.convert.surface.PICTURE_ENTRY_LIMIT ({PICTURE_ENTRY_LIMIT})</i></p>"
        )
    rows, cols, M, N, note = got
    xp = t.xp
    R, C = min(_GRID, M), min(_GRID, N)
    br = xp.minimum((rows * (R / M)).astype(np.int64), R - 1)
    bc = xp.minimum((cols * (C / N)).astype(np.int64), C - 1)
    counts = _xp.to_host(xp.bincount(br * C + bc, minlength=R * C)).reshape(R, C).astype(np.float64)
    area = _bin_sizes(M, R)[:, None] * _bin_sizes(N, C)[None, :]
    dens = np.minimum(counts / area, 1.0)
    cell = max(4, min(24, 256 // max(R, C)))
    top = float(dens.max()) if dens.size else 0.0
    ii, jj = np.nonzero(counts)
    opac = 0.25 + 0.75 * (dens[ii, jj] / top) if top > 0 else np.zeros(0)
    rects = "".join(
        f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#1f4e79" fill-opacity="{o:.2f}"/>'
        for x, y, o in zip((jj * cell).tolist(), (ii * cell).tolist(), opac.tolist())
    )
    w, h = C * cell, R * cell
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'role="img" aria-label="sparsity pattern, {R} x {C} cells">'
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="white" stroke="#888"/>{rects}</svg>'
        + (f"<p><small>{html.escape(note.strip())}</small></p>" if note else "")
    )


def _nnz_text(t: Tensor) -> str:
    fmt = t.format
    simple = fmt.nbatch == 0 and not any(
        lv.format in (LevelFormat.RANGE, LevelFormat.LOOSE_COMPRESSED) for lv in fmt.levels
    )
    if simple or t.nse <= PICTURE_ENTRY_LIMIT:
        return str(t.nnz)
    return f"at most {t.nse} (not counted: above {PICTURE_ENTRY_LIMIT} slots)"


def repr_html(t: Tensor) -> str:
    """The Jupyter view of ``t``: format (standard name or DSL text), shape, dtype, index
    dtype, device, nnz, stored slots, storage bytes and a sparsity picture of at most 32 x 32
    cells (shaded by how full each cell is).  The cost is bounded: above
    :data:`PICTURE_ENTRY_LIMIT` slots the picture comes from a sample, or is left out."""
    fmt = t.format
    name = fmt.standard_name
    rows = [
        ("format", html.escape(name) if name else f"<code>{html.escape(fmt.map_text())}</code>"),
        ("shape", html.escape(" x ".join(str(s) for s in t.shape) or "()")),
        ("dtype", html.escape(str(t.dtype))),
        ("index dtype", html.escape(str(t.index_dtype))),
        ("device", html.escape(t.device)),
        ("nnz", html.escape(_nnz_text(t))),
        ("stored slots", str(t.nse)),
        ("storage", f"{t.nbytes} bytes"),
    ]
    if name:
        rows.insert(1, ("map", f"<code>{html.escape(fmt.map_text())}</code>"))
    body = "".join(f'<tr><th style="text-align:left">{k}</th><td>{v}</td></tr>' for k, v in rows)
    return f"<div><b>ust.Tensor</b><table>{body}</table>{_picture(t)}</div>"


# ----------------------------------------------------------------------------- registration


@register(CONVERSIONS, "toarray")
def _toarray(t: Tensor, order: Any = None, out: Any = None) -> Any:
    return toarray(t, order, out)


@register(CONVERSIONS, "asformat")
def _asformat(t: Tensor, format: Any, copy: bool = False, blocksize: Any = None) -> Tensor:  # noqa: A002
    return asformat(t, format, copy=copy, blocksize=blocksize)


@register(CONVERSIONS, "scipy_data")
def _scipy_data(t: Tensor) -> Any:
    return scipy_data(t)


@register(CONVERSIONS, "has_canonical_format")
def _has_canonical_format(t: Tensor) -> bool:
    return has_canonical_format(t)


@register(CONVERSIONS, "repr_html")
def _repr_html(t: Tensor) -> str:
    return repr_html(t)


@register(CONVERSIONS, "array")
def _array(t: Tensor, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    return dense_array(t, dtype, copy)
