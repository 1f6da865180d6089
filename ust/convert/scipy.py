"""SciPy interop: scipy.sparse arrays/matrices in, canonical scipy.sparse arrays out.

Intake keeps scipy's own buffers (no copy) where the layout maps 1:1 -- csr, csc, coo, bsr,
dia -- and labels them honestly: unsorted indices become ``compressed(nonordered)``,
duplicates ``nonunique``, a coo without ``has_canonical_format`` the unordered, nonunique
COO.  lil and dok are converted by scipy first (they have no array buffers).  Out-of-range
indices, non-integer index arrays and unsupported value dtypes are errors before any work.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ust.convert.layouts import coo_format, library_layout, relabel
from ust.formats.library import get
from ust.formats.model import Format
from ust.runtime.errors import ShapeError
from ust.tensor.buffers import Buffers
from ust.tensor.core import Tensor
from ust.tensor.validate import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    check_buffers,
    check_index_array,
    check_value_dtype,
)

#: SciPy's compressed format names -> ust's standard formats (looked up once)
_CSR_CSC = {"csr": get("CSR"), "csc": get("CSC")}

__all__ = [
    "check_scipy",
    "compressed_array",
    "csr_tobsr_sorted",
    "from_scipy",
    "from_scipy_trusted",
    "is_scipy_sparse",
    "sort_bsr_blocks",
    "to_scipy",
]


def is_scipy_sparse(obj: Any) -> bool:
    mod = type(obj).__module__
    if not mod.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp

    return bool(sp.issparse(obj))


#: scipy.sparse classes already seen (``issparse`` asked once per class, not once per call)
_SPARSE_TYPES: set[type] = set()


def from_scipy_object(obj: Any) -> Tensor | None:
    """:func:`from_scipy` for a scipy.sparse object, None for anything else."""
    cls = type(obj)
    if cls not in _SPARSE_TYPES:
        if not is_scipy_sparse(obj):
            return None
        _SPARSE_TYPES.add(cls)
    return from_scipy(obj)


def _index_pair(*arrays: Any) -> list[np.ndarray]:
    """Index arrays in one int32/int64 dtype (no copy when scipy already has that)."""
    arrays = tuple(np.asarray(a) for a in arrays)
    for k, a in enumerate(arrays):
        if a.dtype.kind not in "iu":
            check_index_array(a, f"index array {k}")  # raises: floats, NaN, objects
    dts = {np.dtype(a.dtype) for a in arrays}
    if len(dts) == 1 and next(iter(dts)) in INDEX_DTYPES:
        return list(arrays)
    big = max((int(a.max()) for a in arrays if a.size), default=0)
    itype = np.int32 if big < 2**31 and all(np.dtype(a.dtype).itemsize <= 4 for a in arrays) else np.int64
    return [a.astype(itype) for a in arrays]


def _values(data: Any, n: int) -> np.ndarray:
    check_value_dtype(data.dtype)
    return data if data.shape[0] == n else data[:n]


_UNSIGNED: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.int32): np.dtype(np.uint32),
    np.dtype(np.int64): np.dtype(np.uint64),
}


def _below(c: Any, hi: int) -> bool:
    """Every entry of the int32/int64 array ``c`` lies in ``[0, hi)``: one NumPy pass, no Python
    loop (read as unsigned, a negative index is a huge one)."""
    return not c.shape[0] or int(np.maximum.reduce(c.view(_UNSIGNED[c.dtype]))) < hi


def _plain(*arrays: Any) -> np.dtype | None:
    """The one index dtype of these 1-D NumPy arrays, or None (anything else: the checked path)."""
    dt = None
    for a in arrays:
        if type(a) is not np.ndarray or a.ndim != 1:
            return None
        if dt is None:
            dt = a.dtype
            if dt not in INDEX_DTYPES:
                return None
        elif a.dtype != dt:
            return None
    return dt


def _owed_compressed(shape: tuple[int, ...], fmt: Format, pos: tuple, crd: tuple, values: Any) -> None:
    """The checks :func:`_trusted_compressed` defers to the first read of a csr/csc intake's
    index buffers (:meth:`ust.Tensor._settle`): ``indptr`` non-decreasing (O(M)) and every index
    in ``[0, N)`` (one unsigned ``max``).  A failure is worded by the checked path's
    :func:`~ust.tensor.validate.check_buffers`."""
    if not _sound(pos[1], crd[1], shape[1] if fmt == _CSR_CSC["csr"] else shape[0]):
        check_buffers(Buffers(shape, fmt, pos, crd, values), "bounds")
        raise ShapeError("csr/csc indptr decreases or an index lies outside the matrix")  # pragma: no cover


def _sound(indptr: np.ndarray, crd: np.ndarray, n: int) -> bool:
    """``indptr`` non-decreasing and every index in ``[0, n)``: one NumPy reduction each."""
    decreasing = indptr.shape[0] > 2 and bool(np.logical_or.reduce(indptr[1:] < indptr[:-1]))
    return not decreasing and _below(crd, n)


def _trusted_compressed(A: Any, shape: tuple[int, ...]) -> Tensor | None:
    """A 2-D csr/csc array as a Tensor on its own buffers after the O(1) checks, or None when
    one fails (the checked path then words the error).

    What SciPy's constructor guarantees (``check_format(full_check=False)``: 1-D arrays,
    ``len(indptr) == M + 1``, ``indptr[0] == 0``, ``indptr[-1] <= len(indices)``) is checked
    again in O(1), since the attributes may have been reassigned since.  What it does not --
    ``indptr`` non-decreasing and every index in ``[0, N)`` -- is owed
    (:func:`_owed_compressed`): run by the first read of the index buffers, so that a bare
    intake costs no pass over them.  Order and uniqueness come from SciPy's own flags, as on
    the checked path (``asarray(..., check="full")`` verifies them); where the flags do not
    say canonical, SciPy's own probes of them need ``indptr`` checked, so the owed checks run
    at once.
    """
    indptr, indices, data = A.indptr, A.indices, A.data
    if type(indptr) is not np.ndarray or type(indices) is not np.ndarray or type(data) is not np.ndarray:
        return None
    dt = indptr.dtype
    if indices.dtype != dt or dt not in INDEX_DTYPES:
        return None
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        return None
    if data.dtype not in VALUE_DTYPES:
        return None
    fmt = _CSR_CSC[A.format]
    M = shape[0] if fmt is _CSR_CSC["csr"] else shape[1]
    if indptr.shape[0] != M + 1 or indptr[0] != 0:
        return None
    nnz = int(indptr[-1])
    if nnz > indices.shape[0] or nnz > data.shape[0]:
        return None
    crd = indices if indices.shape[0] == nnz else indices[:nnz]
    vals = data if data.shape[0] == nnz else data[:nnz]
    pos = (None, indptr)
    crds = (None, crd)
    if nnz and not (getattr(A, "_has_canonical_format", False) and getattr(A, "_has_sorted_indices", True)):
        if not _sound(indptr, crd, shape[1] if fmt is _CSR_CSC["csr"] else shape[0]):
            return None
        fmt = _compressed_label(A, fmt, level=1, nnz=nnz, checked=True)
        return Tensor._trusted(shape, fmt, vals, pos, crds)
    return Tensor._trusted(shape, fmt, vals, pos, crds, _owed_compressed)


def _trusted_coo(A: Any, shape: tuple[int, ...]) -> Tensor | None:
    """A coo array as a Tensor on its own buffers after the cheap checks, or None (see
    :func:`_trusted_compressed`): SciPy checks the bounds when it builds one, but ``coords`` may
    have been reassigned since, so each coordinate array gets one unsigned ``max``."""
    coords, data = tuple(A.coords), A.data
    if len(coords) != len(shape) or _plain(*coords) is None:
        return None
    if type(data) is not np.ndarray or data.ndim != 1 or data.dtype not in VALUE_DTYPES:
        return None
    n = int(data.shape[0])
    if any(c.shape[0] != n or not _below(c, s) for c, s in zip(coords, shape, strict=True)):
        return None
    fmt = coo_format(len(shape), canonical=bool(A.has_canonical_format))
    pos0 = np.array([0, n], dtype=coords[0].dtype)
    return Tensor._trusted(shape, fmt, data, (pos0, *([None] * (len(shape) - 1))), coords)


def from_scipy(A: Any) -> Tensor:
    """A Tensor around a scipy.sparse array or matrix (its buffers, where they map 1:1).

    csr, csc and coo in int32/int64 take the trusted path (:func:`_trusted_compressed`): O(1)
    checks of what SciPy keeps, the bounds owed to the first read of the index buffers (csr /
    csc flagged canonical) or one NumPy pass at once (coo), no Python per entry.  Anything
    that fails those checks, and the other formats, go through the fully checked path below,
    which raises ust's error naming the problem.
    """
    fmt_name = A.format
    if fmt_name in _CSR_CSC and A.ndim == 2:
        t = _trusted_compressed(A, tuple(map(int, A.shape)))
        if t is not None:
            return t
    elif fmt_name == "coo":
        t = _trusted_coo(A, tuple(int(s) for s in A.shape))
        if t is not None:
            return t
    check_value_dtype(A.dtype)
    if fmt_name in ("lil", "dok") or (fmt_name in ("csr", "csc") and A.ndim != 2):
        B = A.tocoo() if (fmt_name == "dok" or A.ndim != 2) else A.tocsr()
        B.sum_duplicates()  # our own copy: canonicalise it
        return from_scipy(B)
    shape = tuple(int(s) for s in A.shape)
    if fmt_name in ("csr", "csc"):
        indptr, indices = _index_pair(A.indptr, A.indices)
        nnz = int(indptr[-1]) if indptr.shape[0] else 0
        if indices.shape[0] < nnz:
            raise ShapeError(f"{fmt_name} indices hold {indices.shape[0]} entries but indptr ends at {nnz}")
        base = get(fmt_name.upper())
        fmt = _compressed_label(A, base, level=1, nnz=nnz)
        return Tensor(
            shape,
            fmt,
            _values(A.data, nnz),
            pos={1: indptr},
            crd={1: indices[:nnz]},
            check="bounds",
        )
    if fmt_name == "coo":
        coords = _index_pair(*A.coords)
        n = int(A.data.shape[0])
        if any(c.shape[0] != n for c in coords):
            raise ShapeError("coo coordinate arrays and data differ in length")
        fmt = coo_format(len(shape), canonical=bool(A.has_canonical_format))
        itype = coords[0].dtype
        return Tensor(
            shape,
            fmt,
            _values(A.data, n),
            pos={0: np.array([0, n], dtype=itype)},
            crd=dict(enumerate(coords)),
            check="bounds",
        )
    if fmt_name == "bsr":
        r, c = (int(x) for x in A.blocksize)
        if shape[0] % r or shape[1] % c:
            from ust.runtime.errors import FormatError

            raise FormatError(
                f"[block-divides-shape] blocksize {(r, c)} does not divide the shape {shape}",
                rule="block-divides-shape",
            )
        indptr, indices = _index_pair(A.indptr, A.indices)
        nblk = int(indptr[-1]) if indptr.shape[0] else 0
        fmt = _compressed_label(A, get(f"BSR[{r},{c}]"), level=1, nnz=nblk)
        data = A.data[:nblk]
        check_value_dtype(data.dtype)
        return Tensor(
            shape,
            fmt,
            np.ascontiguousarray(data).reshape(-1),
            pos={1: indptr},
            crd={1: indices[:nblk]},
            check="bounds",
        )
    if fmt_name == "dia":
        return _from_dia(A, shape)
    from ust.runtime.errors import UnsupportedError

    raise UnsupportedError(f"scipy format {fmt_name!r}; supported: csr, csc, coo, bsr, dia, lil, dok")


def check_scipy(A: Any) -> None:
    """Every check of :func:`from_scipy` on ``A`` at once, the deferred ones included: for routes
    that hand ``A`` itself to SciPy's compiled code, which reads out of bounds where they fail."""
    from_scipy(A)._settle()


def _compressed_label(A: Any, base: Format, *, level: int, nnz: int, checked: bool = False) -> Format:
    """csr/csc/bsr: the standard format, or its nonordered / nonunique variant (``checked``:
    the caller has verified ``indptr`` already, as the trusted intake does)."""
    if nnz == 0:
        return base
    if checked and getattr(A, "_has_canonical_format", False) and getattr(A, "_has_sorted_indices", True):
        return base  # SciPy's cached flags, read without its property machinery
    indptr = np.asarray(A.indptr)
    if not checked and (
        indptr.size == 0
        or indptr[0] != 0
        or indptr[-1] > A.indices.shape[0]
        or bool(np.any(indptr[1:] < indptr[:-1]))
    ):
        # malformed: SciPy's canonical-format checks and sort would read (and the sort write)
        # out of bounds; the Tensor's bounds check then names the problem as ust's error
        return base
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        canonical = bool(A.has_canonical_format)
        if canonical:
            return base
        ordered = bool(A.has_sorted_indices)
    if ordered:  # sorted but not canonical: duplicates
        return relabel(base, level, unique=False, ordered=True)
    probe = A.copy()
    probe.sum_duplicates()
    dups = int(probe.nnz if probe.format != "bsr" else probe.indptr[-1]) < nnz
    return relabel(base, level, unique=not dups, ordered=False)


def _from_dia(A: Any, shape: tuple[int, ...]) -> Tensor:
    (offsets,) = _index_pair(A.offsets)
    data = A.data
    check_value_dtype(data.dtype)
    nd = int(offsets.shape[0])
    N = shape[1]
    if data.ndim != 2 or data.shape[0] != nd:
        raise ShapeError(f"dia data has shape {data.shape}, expected ({nd}, width)")
    if data.shape[1] != N or not data.flags.c_contiguous:
        if nd * N * data.dtype.itemsize > (1 << 30):
            from ust.tensor.limits import check_bytes

            check_bytes(np, nd * N * data.dtype.itemsize, f"a {shape} dia matrix's {nd} full diagonals")
        full = np.zeros((nd, N), dtype=data.dtype)
        w = min(N, data.shape[1])
        full[:, :w] = data[:, :w]
        data = full
    ordered = bool(nd < 2 or np.all(offsets[1:] > offsets[:-1]))
    if not ordered and np.unique(offsets).shape[0] != nd:
        raise ShapeError("dia offsets contain duplicates")
    fmt = get("DIA") if ordered else relabel(get("DIA"), 0, ordered=False)
    return Tensor(
        shape,
        fmt,
        data.reshape(-1),
        pos={0: np.array([0, nd], dtype=offsets.dtype)},
        crd={0: offsets},
        check="bounds",
    )


def from_scipy_trusted(A: Any, fmt: Format) -> Tensor:
    """A library route's result (canonical by construction) in ``fmt``, without checks."""
    shape = tuple(map(int, A.shape))
    name = A.format
    if name in _CSR_CSC and _plain(A.indptr, A.indices) is not None and fmt == _CSR_CSC[name]:
        nnz = int(A.indptr[-1])  # the common result: wrapped as it is, nothing to resolve
        crd = A.indices if A.indices.shape[0] == nnz else A.indices[:nnz]
        vals = A.data if A.data.shape[0] == nnz else A.data[:nnz]
        return Tensor._trusted(shape, fmt, vals, (None, A.indptr), (None, crd))
    if name in ("csr", "csc", "bsr"):
        indptr, indices = _index_pair(A.indptr, A.indices)
        nnz = int(indptr[-1])
        data = A.data[:nnz]
        vals = data.reshape(-1) if name == "bsr" else data
        return Tensor(shape, fmt, vals, pos={1: indptr}, crd={1: indices[:nnz]}, check=False)
    if name == "coo":
        coords = _index_pair(*A.coords)
        n = int(A.data.shape[0])
        return Tensor(
            shape,
            fmt,
            A.data,
            pos={0: np.array([0, n], dtype=coords[0].dtype)},
            crd=dict(enumerate(coords)),
            check=False,
        )
    return _from_dia(A, shape)


# ----------------------------------------------------------------------------- CSR <-> CSC


def _sparsetools_transpose() -> Any:
    """SciPy's compiled CSR -> CSC transpose (``csr_tocsc``), or None where this SciPy has none."""
    try:
        from scipy.sparse._sparsetools import csr_tocsc
    except ImportError:  # pragma: no cover - another SciPy layout
        return None
    return csr_tocsc


_CSR_TOCSC: Any = _sparsetools_transpose()


def transpose_tensor(t: Tensor, fmt: Format) -> Tensor | None:
    """A canonical CPU CSR tensor as CSC (or CSC as CSR) by SciPy's ``csr_tocsc`` on its buffers,
    no SciPy object built around them on either side; None where the kernel is missing or the
    buffers are not plain NumPy in one index dtype (the caller then takes SciPy's method)."""
    indptr, indices, data = t.pos(1), t.crd(1), t.values
    dt = indptr.dtype
    if _CSR_TOCSC is None or type(indptr) is not np.ndarray or type(data) is not np.ndarray:
        return None
    if indices.dtype != dt or dt not in INDEX_DTYPES:
        return None
    m, n = t.shape if t.format == _CSR_CSC["csr"] else t.shape[::-1]
    nnz = int(indptr[-1])
    out_ptr = np.empty(n + 1, dtype=dt)
    out_idx = np.empty(nnz, dtype=dt)
    out_val = np.empty(nnz, dtype=data.dtype)
    _CSR_TOCSC(m, n, indptr, indices, data, out_ptr, out_idx, out_val)
    return Tensor._trusted(t.shape, fmt, out_val, (None, out_ptr), (None, out_idx))


def compressed_transpose(a: Any) -> Any:
    """``a.tocsc()`` of a canonical csr / ``a.tocsr()`` of a canonical csc, built by the kernel
    SciPy's methods call (``csr_tocsc``), so the buffers are the same; what is left out is their
    Python around it (index-dtype probes, the constructor's checks of buffers ust has checked:
    two thirds of the call on a 100 x 100 matrix).  The index dtype is the source's."""
    import scipy.sparse as sp

    indptr, indices, data = a.indptr, a.indices, a.data
    dt = indptr.dtype
    if _CSR_TOCSC is None or indices.dtype != dt or dt not in INDEX_DTYPES or a.ndim != 2:
        return a.tocsc() if a.format == "csr" else a.tocsr()
    m, n = a.shape if a.format == "csr" else a.shape[::-1]
    nnz = int(indptr[-1])
    out_ptr = np.empty(n + 1, dtype=dt)
    out_idx = np.empty(nnz, dtype=dt)
    out_val = np.empty(nnz, dtype=data.dtype)
    _CSR_TOCSC(m, n, indptr, indices, data, out_ptr, out_idx, out_val)
    cls = sp.csc_array if a.format == "csr" else sp.csr_array
    out = compressed_array(cls, out_val, out_idx, out_ptr, a.shape)
    out.has_sorted_indices = True
    return out


# ----------------------------------------------------------------------------- CSR -> BSR


def sort_bsr_blocks(a: Any) -> Any:
    """scipy's ``tobsr`` leaves each block row in first-appearance order: sort the blocks by
    (block row, block column) with one stable sort of a 64-bit key (block rows are already
    grouped, so the sort is nearly a merge) -- cheaper than ``sort_indices``' per-row sorts and
    block swaps.  ``a`` is a fresh result of ours, never the caller's."""
    if a.has_sorted_indices:
        return a
    nbr = a.indptr.shape[0] - 1
    nbc = a.shape[1] // a.blocksize[1]
    rows = np.repeat(np.arange(nbr, dtype=np.int64), np.diff(a.indptr))
    order = np.argsort(rows * nbc + a.indices, kind="stable")
    a.indices = a.indices[order]
    data = np.ascontiguousarray(a.data)
    block = np.dtype((np.void, data.itemsize * int(np.prod(a.blocksize))))
    # one whole block per element: a 1-D take moves blocks far faster than fancy indexing
    a.data = (
        data.reshape(data.shape[0], -1).view(block)[:, 0].take(order).view(data.dtype).reshape(data.shape)
    )
    a.has_sorted_indices = True
    return a


def csr_tobsr_sorted(a: Any, blocksize: tuple[int, int]) -> Any:
    """Canonical BSR (blocks sorted by block column) of a scipy CSR whose rows are sorted: the
    buffers of ``a.tobsr(blocksize)`` followed by ``sort_indices()``, explicit zeros kept.

    One C pass per block row merges its rows by block column
    (:func:`ust.backends.cpu.bsr_c.csr_to_bsr`, registered as ``KERNELS["csr_to_bsr"]``); without a C compiler (or for rows out of
    order) scipy's ``tobsr`` runs and its blocks are sorted afterwards.  A blocksize that does
    not divide the shape is a FormatError.
    """
    import scipy.sparse as sp

    from ust.convert.kernels import KERNELS

    r, c = (int(b) for b in blocksize)
    fast = KERNELS.get("csr_to_bsr")
    res = None if fast is None else fast(a.shape, a.indptr, a.indices, a.data, (r, c))
    if res is None:
        return sort_bsr_blocks(a.tobsr((r, c)))
    indptr, indices, data = res
    out = _share(sp.bsr_array((data, indices, indptr), shape=a.shape), indices=indices, indptr=indptr)
    out.has_sorted_indices = True
    return out


# ----------------------------------------------------------------------------- export


def _share(A: Any, **arrays: np.ndarray) -> Any:
    """Put our index arrays back when scipy's constructor cast them (int64 with small values)."""
    for name, a in arrays.items():
        if getattr(A, name).dtype != a.dtype:
            setattr(A, name, a)
    return A


#: per csr/csc class: the instance attributes its constructor sets besides the arrays and the
#: shape (``maxprint``), or None where they are not the expected ones (another SciPy version:
#: the constructor is used)
_ATTRS: dict[type, dict[str, Any] | None] = {}
_BUFFERS = frozenset({"_shape", "indices", "indptr", "data"})


def compressed_array(cls: Any, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: Any) -> Any:
    """``cls((data, indices, indptr), shape=shape)`` for buffers ust has already checked, without
    the constructor's checks (an O(nnz) scan of int64 indices for a cast, the format check):
    that cost 20-50 us per call on small matrices, several times SciPy's own operation.  The
    instance gets exactly the attributes SciPy's constructor gives one (learnt once per class
    from a 1 x 1 array); an unexpected set (another SciPy) falls back to the constructor."""
    if cls not in _ATTRS:
        probe = cls((np.zeros(0), np.zeros(0, np.int32), np.zeros(2, np.int32)), shape=(1, 1))
        extra = {k: v for k, v in vars(probe).items() if k not in _BUFFERS}
        _ATTRS[cls] = extra if set(vars(probe)) == _BUFFERS | {"maxprint"} else None
    attrs = _ATTRS[cls]
    if attrs is None or indices.dtype != indptr.dtype or indices.dtype not in INDEX_DTYPES:
        return _share(cls((data, indices, indptr), shape=shape), indices=indices, indptr=indptr)
    out = cls.__new__(cls)
    vars(out).update(attrs)
    out._shape, out.indices, out.indptr, out.data = tuple(shape), indices, indptr, data
    return out


def to_scipy(t: Tensor) -> Any:
    """A canonical scipy.sparse *array*: csr/csc/coo/bsr/dia where ``t``'s format is one
    (sharing its buffers when it is canonical), otherwise COO."""
    import scipy.sparse as sp

    if t.device != "cpu":
        t = t.to("cpu")
    lay = library_layout(t.format)
    if lay is None or lay.name == "bsc":
        if t.format.is_dense and t.ndim == 2:
            return sp.coo_array(t.todense())
        coo = coo_format(t.ndim)
        t = t.convert(coo)
        lay = library_layout(coo) if t.ndim == 2 else None
        if lay is None:
            return sp.coo_array((t.values, tuple(t.crd(k) for k in range(t.ndim))), shape=t.shape)
    canonical = lay.canonical
    if not canonical:
        t = t.copy()  # scipy canonicalises in place: never on the caller's buffers
    shape = t.shape
    if lay.name in ("csr", "csc"):
        cls = sp.csr_array if lay.name == "csr" else sp.csc_array
        A = compressed_array(cls, t.values, t.crd(1), t.pos(1), shape)
    elif lay.name == "bsr":
        r, c = lay.blocksize  # type: ignore[misc]
        data = t.values.reshape(-1, r, c)
        A = _share(sp.bsr_array((data, t.crd(1), t.pos(1)), shape=shape), indices=t.crd(1), indptr=t.pos(1))
    elif lay.name == "coo":
        A = sp.coo_array((t.values, (t.crd(0), t.crd(1))), shape=shape)
        if canonical:
            A.has_canonical_format = True
        else:
            A.sum_duplicates()
        return A
    else:  # dia
        nd = int(t.crd(0).shape[0])
        from ust.tensor.limits import check_dense

        # SciPy's DIA holds (diagonals, columns) as one NumPy array, even an empty one
        check_dense(
            np,
            (nd, shape[1]),
            t.dtype,
            f"SciPy's dia_array of a {shape} tensor",
            "convert to COO first: t.convert('COO').to_scipy()",
        )
        A = sp.dia_array((t.values.reshape(nd, shape[1]), t.crd(0)), shape=shape)
        if not canonical:
            order = np.argsort(A.offsets, kind="stable")
            A = sp.dia_array((A.data[order], A.offsets[order]), shape=shape)
        return A
    if canonical:
        A.has_sorted_indices = True
        A.has_canonical_format = True
    else:
        A.sum_duplicates()
    return A
