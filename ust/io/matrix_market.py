"""Matrix Market files: ``mmread`` / ``mmwrite`` (the parser itself is :mod:`ust.io._mmio`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.formats.library import resolve
from ust.formats.model import Format
from ust.runtime.errors import (
    InvalidValueError,
    ShapeError,
    UnsupportedError,
)
from ust.runtime.log import get_logger

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["from_scipy", "mmread", "mmwrite"]

log = get_logger("io")

_MM_SUFFIXES = (".mtx", ".mm")
_INDEX_MAX = 2**63 - 1

# ----------------------------------------------------------------------------- Matrix Market


def _require_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(2, "no such file", str(p))
    return p


def _coo_tensor(
    shape: tuple[int, int],
    rows: np.ndarray,
    cols: np.ndarray,
    values: np.ndarray,
    *,
    index_dtype: Any = None,
) -> Tensor:
    """A COO Tensor of coordinates in any order: sorted row-major, duplicates summed, explicit
    zeros kept.  Memory is O(entries), never O(shape)."""
    from ust.tensor import Tensor

    n = rows.shape[0]
    if shape[0] * shape[1] < 2**63:  # one int64 key per entry: sorting it beats a lexsort
        key = rows * np.int64(shape[1]) + cols
        if n > 1 and not bool(np.all(key[1:] >= key[:-1])):
            order = np.argsort(key, kind="stable")
            rows, cols, values = rows[order], cols[order], values[order]
    else:
        order = np.lexsort((cols, rows))
        rows, cols, values = rows[order], cols[order], values[order]
    if n:
        new = np.ones(n, dtype=bool)
        new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        starts = np.flatnonzero(new)
        if starts.shape[0] != n:
            values = np.add.reduceat(values, starts)
            rows, cols = rows[starts], cols[starts]
            n = starts.shape[0]
    itype = np.dtype(np.int32 if max(*shape, n) < 2**31 else np.int64)
    pos0 = np.array([0, n], dtype=itype)
    return Tensor(
        shape,
        "COO",
        values,
        pos=[pos0, None],
        crd=[rows.astype(itype), cols.astype(itype)],
        index_dtype=index_dtype,
    )


def from_scipy(a: Any, format: Format | str | None = None, *, index_dtype: Any = None) -> Tensor:  # noqa: A002
    """A Tensor of a scipy.sparse matrix/array (canonicalised on a copy) or a 2-D NumPy array.

    ``format=None`` keeps the layout of a coordinate source (COO, sorted row-major,
    duplicates summed, explicit zeros kept) and stores a dense array row-major.
    """
    import scipy.sparse as sp

    from ust.tensor import Tensor

    fmt = None if format is None else resolve(format)
    if not sp.issparse(a):
        dense = np.ascontiguousarray(a)
        if dense.ndim != 2:
            raise ShapeError(f"expected a matrix, got an array of shape {dense.shape}")
        t = Tensor(dense.shape, "DenseRowMajor", dense.reshape(-1), index_dtype=index_dtype)
        return t if fmt is None or fmt == t.format else t.convert(fmt, index_dtype=index_dtype)
    if a.format == "coo":  # canonicalised without a CSR (whose row pointers are O(rows))
        r, c = (np.asarray(x, dtype=np.int64) for x in a.coords)
        t = _coo_tensor(a.shape, r, c, np.array(a.data, copy=True), index_dtype=index_dtype)
        return t if fmt is None or fmt == t.format else t.convert(fmt, index_dtype=index_dtype)
    csr = sp.csr_array(a, copy=True)
    csr.sum_duplicates()  # sorts indices, sums duplicates, keeps explicit zeros
    t = Tensor(
        csr.shape, "CSR", csr.data, pos=[None, csr.indptr], crd=[None, csr.indices], index_dtype=index_dtype
    )
    return t if fmt is None or fmt == t.format else t.convert(fmt, index_dtype=index_dtype)


def _check_index_dtype(index_dtype: Any) -> None:
    if index_dtype is None:
        return
    try:
        itype = np.dtype(index_dtype)
    except TypeError:
        itype = None
    if itype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise UnsupportedError(f"index_dtype must be int32 or int64, not {index_dtype!r}")


def mmread(
    path: str | Path,
    format: Format | str | None = None,  # noqa: A002 - the natural name
    *,
    dtype: Any = None,
    index_dtype: Any = None,
) -> Tensor:
    """Read a Matrix Market file (plain, ``.gz``, ``.bz2`` or ``.xz``) into a Tensor.

    Symmetric, skew-symmetric and Hermitian files are expanded to both triangles; pattern
    files get values 1.0; duplicates are summed and explicit zeros kept.  ``format=None``
    stores a coordinate file as COO (sorted row-major) and an array file as DenseRowMajor;
    otherwise the tensor is converted to ``format``.

    The reader is ust's own NumPy program: a file that breaks the format (a bad banner or
    size line, a wrong number of fields or entries, an index out of range, a token that is
    not a number, NUL bytes, a corrupt archive) raises
    :class:`~ust.runtime.errors.FileFormatError` naming the file and the line, and the
    header's sizes are only trusted once the file holds that many entries.  A missing file
    raises ``FileNotFoundError``.
    """
    from ust.io import _mmio

    fmt = None if format is None else resolve(format)  # bad arguments: fail before reading
    dt = None
    if dtype is not None:
        from ust.tensor.validate import check_value_dtype

        try:
            dt = check_value_dtype(dtype)
        except TypeError:
            raise UnsupportedError(f"dtype {dtype!r} is not a NumPy dtype") from None
    _check_index_dtype(index_dtype)
    p = _require_file(path)
    mm = _mmio.read_mm(p)
    values = mm.values if dt is None else mm.values.astype(dt)
    if mm.layout == "coordinate":
        assert mm.rows is not None and mm.cols is not None
        t = _coo_tensor(mm.shape, mm.rows, mm.cols, values, index_dtype=index_dtype)
    else:
        from ust.tensor import Tensor

        t = Tensor(mm.shape, "DenseRowMajor", values.reshape(-1), index_dtype=index_dtype)
    if fmt is not None and fmt != t.format:
        t = t.convert(fmt, index_dtype=index_dtype)
    log.info(
        "read %s: shape %s, %d stored entries -> %s", p, t.shape, t.nse, t.format.standard_name or "custom"
    )
    return t


def _mm_values(values: np.ndarray, field: str) -> np.ndarray:
    """The values as the field holds them (InvalidValueError where they do not fit)."""
    kind = values.dtype.kind
    if field == "complex":
        return values if kind == "c" else values.astype(np.complex128)
    if kind == "c":
        if np.any(values.imag != 0):
            raise InvalidValueError(
                f"complex values with nonzero imaginary parts cannot be written as {field}"
            )
        values = values.real
    if field == "real":
        return values if values.dtype.kind == "f" else values.astype(np.float64)
    if field in ("integer", "unsigned-integer"):
        if values.dtype.kind == "f" and (
            not np.all(np.isfinite(values)) or np.any(values != np.round(values))
        ):
            raise InvalidValueError(f"values that are not whole numbers cannot be written as {field}")
        if field == "unsigned-integer":
            if np.any(values < 0):
                raise InvalidValueError("negative values cannot be written as unsigned-integer")
            return values.astype(np.uint64)
        return values if values.dtype.kind == "i" else values.astype(np.int64)
    return values


def mmwrite(
    path: str | Path,
    tensor: Tensor,
    *,
    comment: str = "",
    field: str | None = None,
    precision: int | None = None,
    symmetry: str | None = None,
) -> None:
    """Write a matrix in any format to a Matrix Market file (``.gz`` / ``.bz2`` / ``.xz``
    are compressed).

    Dense formats are written as ``array`` files, every other format as ``coordinate``.
    ``field`` (default: from the dtype: real, integer, unsigned-integer or complex; or
    ``pattern``), ``symmetry`` (default ``general``; ``symmetric``, ``skew-symmetric`` or
    ``hermitian`` write one triangle and need a matrix that has that symmetry).  Numbers are
    written in the shortest text that reads back to the same bits (``-0.0``, ``inf`` and
    ``nan`` included) unless ``precision`` asks for that many significant digits.
    """
    from ust.io import _mmio

    if tensor.ndim != 2:
        raise ShapeError(f"Matrix Market files hold matrices; this tensor has shape {tensor.shape}")
    _mmio.check_write_options(field, symmetry, precision, comment)
    sym = symmetry or "general"
    m, n = tensor.shape
    if sym != "general" and m != n:
        raise ShapeError(f"a {sym} matrix must be square; this one is {m} x {n}")
    t = tensor if tensor.device == "cpu" else tensor.to("cpu")
    dense_file = t.format.is_dense
    if dense_file and field == "pattern":
        raise InvalidValueError("an array (dense) file cannot have field pattern; convert to a sparse format")
    vkind = np.dtype(t.dtype).kind
    # unsigned values are written as "integer" (what every reader knows) unless they do not fit
    fld = (
        _mmio.FIELDS[field] if field else {"c": "complex", "i": "integer", "u": "integer"}.get(vkind, "real")
    )
    if not field and np.dtype(t.dtype) == np.uint64 and t.nse and int(np.asarray(t.values).max()) > 2**63 - 1:
        fld = "unsigned-integer"
    if sym == "hermitian" and fld != "complex":
        sym_check = "symmetric"  # a real Hermitian matrix is a symmetric one
    else:
        sym_check = sym
    if fld == "pattern" and sym == "skew-symmetric":
        raise InvalidValueError("a skew-symmetric matrix cannot have field pattern")
    if dense_file:
        a = np.asarray(t.todense())
        if sym != "general":
            mirrored = _mmio.mirror(a.T, sym_check)
            if not np.array_equal(a, mirrored, equal_nan=vkind in "fc"):
                raise InvalidValueError(f"the matrix is not {sym}; write it with symmetry='general'")
            r, c = np.triu_indices(n, k=1 if sym == "skew-symmetric" else 0)
            vals = a[c, r]  # the lower triangle, column by column
        else:
            vals = a.T.reshape(-1)  # column-major
        vals = _mm_values(vals, fld)
        columns: list[np.ndarray] = [vals.real, vals.imag] if fld == "complex" else [vals]
    else:
        import scipy.sparse as sp

        coo = sp.coo_array(t.to_scipy())
        coo.sum_duplicates()
        rows, cols = (np.asarray(x, dtype=np.int64) for x in coo.coords)
        vals = np.asarray(coo.data)
        if sym != "general":
            o1 = np.lexsort((cols, rows))
            o2 = np.lexsort((rows, cols))
            same = (
                np.array_equal(rows[o1], cols[o2])
                and np.array_equal(cols[o1], rows[o2])
                and (
                    fld == "pattern"
                    or np.array_equal(vals[o1], _mmio.mirror(vals[o2], sym_check), equal_nan=vkind in "fc")
                )
            )
            if not same:
                raise InvalidValueError(f"the matrix is not {sym}; write it with symmetry='general'")
            keep = rows > cols if sym == "skew-symmetric" else rows >= cols
            rows, cols, vals = rows[keep], cols[keep], vals[keep]
        columns = [rows + 1, cols + 1]
        if fld != "pattern":
            vals = _mm_values(vals, fld)
            columns += [vals.real, vals.imag] if fld == "complex" else [vals]
    _mmio.write_mm(
        Path(path), (m, n), "array" if dense_file else "coordinate", fld, sym, columns, comment, precision
    )
    log.info("wrote %s: %s x %s %s %s %s", path, m, n, "array" if dense_file else "coordinate", fld, sym)
