"""What a conversion checks before any work: the index width and the size of the storage.

Two rules, each in one place (docs/storage.md, "Index dtype" and "Storage size"):

* **Index dtype.**  An int32 tensor needs every level coordinate that an index buffer stores
  (the bounds of each level with a ``crd`` buffer) and every stored value slot (``nse``, which
  bounds every position) to fit int32.  An explicit ``index_dtype=np.int32`` that cannot hold
  the result is a :class:`~ust.ShapeError` naming int64, never a silent wrap.  Without
  ``index_dtype`` a result keeps its source's index dtype (int64 sources stay int64, as scipy's
  conversions keep theirs), widened to int64 where int32 cannot hold it; a source without
  index buffers (a dense array) has the smallest dtype that fits its shape, as scipy picks for
  new index arrays: int32 when every extent and count fits, else int64.
* **Storage size.**  Formats whose levels are all compressed / singleton (COO, DCSR, DCSC,
  CSF) store O(nnz) and convert in O(nnz) memory at any shape.  A dense, batch or range level
  stores (or indexes) one slot per coordinate of its extent: CSR's ``pos`` has ``rows + 1``
  entries, DIA a row of ``cols`` values per diagonal.  Before converting, the bytes such a
  target needs at the least (:func:`min_storage_bytes`) are compared with the memory of the
  device that would hold them (:func:`memory_limit`: the host's physical memory, or the GPU's
  total memory); above it, a ShapeError names the bytes and suggests a hypersparse format.
  A dense *result* (``todense``, a reduction along an axis) is checked the same way
  (:func:`check_dense`), and first against what NumPy can represent at all: the product of
  its nonzero extents times the itemsize must fit a signed 64-bit byte count, even when the
  array is empty (NumPy refuses ``np.zeros((0, 2**62))``).
"""

from __future__ import annotations

import functools
import math
import os
from types import ModuleType
from typing import Any

import numpy as np

from ust.formats.model import Format, LevelFormat
from ust.runtime.errors import ShapeError

__all__ = [
    "I32_MAX",
    "check_bytes",
    "check_dense",
    "check_index_dtype",
    "check_storage",
    "default_index_dtype",
    "int32_holds",
    "memory_limit",
    "min_storage_bytes",
    "min_value_slots",
]

I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_DENSE_LIKE = (LevelFormat.DENSE, LevelFormat.BATCH, LevelFormat.RANGE)


def _coordinate_bound(fmt: Format, shape: tuple[int, ...]) -> tuple[int, int]:
    """(largest absolute level coordinate an index buffer may store, the level holding it)."""
    big, where = 0, -1
    for k, (lv, (lo, hi)) in enumerate(zip(fmt.levels, fmt.lvl_bounds(shape))):
        if not lv.type.stores_crd or hi <= lo:
            continue
        b = max(abs(lo), abs(hi - 1))
        if b > big:
            big, where = b, k
    return big, where


def int32_holds(fmt: Format, shape: tuple[int, ...], nse: int = 0) -> bool:
    """int32 index buffers can hold a tensor of ``fmt`` and ``shape`` with ``nse`` value slots."""
    return _coordinate_bound(fmt, shape)[0] <= I32_MAX and nse <= I32_MAX


def check_index_dtype(itype: Any, fmt: Format, shape: tuple[int, ...], nse: int = 0) -> None:
    """ShapeError unless ``itype`` (int32 or int64) can hold the tensor (int64 always can)."""
    if np.dtype(itype) != _I32:
        return
    big, k = _coordinate_bound(fmt, shape)
    name = fmt.standard_name or fmt.map_text()
    if big > I32_MAX:
        raise ShapeError(
            f"index_dtype int32 cannot hold a {shape} tensor as {name}: level {k} stores coordinates "
            f"up to {big}, beyond int32's {I32_MAX}; use index_dtype=np.int64 (int64 needed)"
        )
    if nse > I32_MAX:
        raise ShapeError(
            f"index_dtype int32 cannot hold a {shape} tensor as {name}: it stores {nse} value slots "
            f"and positions up to {nse}, beyond int32's {I32_MAX}; use index_dtype=np.int64 "
            "(int64 needed)"
        )


def default_index_dtype(source: Any, fmt: Format, shape: tuple[int, ...], nse: int) -> np.dtype:
    """The index dtype of a conversion's result when none is asked for: the source's
    (``source``), widened to int64 where int32 cannot hold the result.  The extents of every
    level count here (scipy's rule for new index arrays), not only those an index buffer
    stores, so that a kernel's position arithmetic in the index dtype never overflows."""
    if np.dtype(source) == _I64:
        return _I64
    return _I32 if max(nse, _level_bound(fmt, tuple(shape))) <= I32_MAX else _I64


@functools.lru_cache(maxsize=1024)
def _level_bound(fmt: Format, shape: tuple[int, ...]) -> int:
    """The largest magnitude of a level bound of ``fmt`` for ``shape`` (kept: every conversion asks)."""
    return max([0, *(max(abs(lo), abs(hi)) for lo, hi in fmt.lvl_bounds(shape))])


# ----------------------------------------------------------------------------- storage size


def min_value_slots(fmt: Format, shape: tuple[int, ...], n_entries: int) -> int:
    """The fewest value slots (``nse``) ``fmt`` stores for ``n_entries`` entries of ``shape``."""
    return _min_storage(fmt, tuple(shape), n_entries, 0, 1)[2]


def min_storage_bytes(
    fmt: Format, shape: tuple[int, ...], n_entries: int, index_itemsize: int, value_itemsize: int
) -> tuple[int, str]:
    """The fewest bytes ``fmt`` needs for ``n_entries`` entries of a ``shape`` tensor,
    whatever the entries: the ``pos`` arrays under dense levels and the value slots that dense
    and range levels multiply (a compressed level is counted with one position), and which
    buffer dominates.  Coordinates are not counted (they are O(nnz))."""
    total, what, _ = _min_storage(fmt, tuple(shape), n_entries, index_itemsize, value_itemsize)
    return total, what


@functools.lru_cache(maxsize=1024)
def _min_storage(
    fmt: Format, shape: tuple[int, ...], n_entries: int, index_itemsize: int, value_itemsize: int
) -> tuple[int, str, int]:
    total, what, biggest = 0, "values", 0
    P = 1
    for k, (lv, (lo, hi)) in enumerate(zip(fmt.levels, fmt.lvl_bounds(shape))):
        S = max(hi - lo, 0)
        f = lv.format
        if f in _DENSE_LIKE:
            P *= S
        elif f is LevelFormat.STRUCTURED:
            P *= lv.type.n
        elif f in (LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED):
            nb = (P + 1 if f is LevelFormat.COMPRESSED else 2 * P) * index_itemsize
            total += nb
            if nb > biggest:
                biggest, what = nb, f"pos({k})"
            P = min(P * S, 1 if n_entries > 0 else 0)
    vb = P * value_itemsize
    total += vb
    if vb > biggest:
        what = "values"
    return total, what, P


@functools.cache
def _host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 40


def memory_limit(xp: ModuleType) -> int:
    """Bytes a conversion may ask for on the device of ``xp``: the host's physical memory
    (NumPy) or the current GPU's total memory (CuPy)."""
    if xp is np:
        return _host_memory()
    return int(xp.cuda.runtime.memGetInfo()[1])


def _human(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if x < 1024 or unit == "EiB":
            return f"{x:.1f} {unit}" if unit != "B" else f"{n} B"
        x /= 1024
    return f"{n} B"  # pragma: no cover


_HYPERSPARSE_HINT = "a hypersparse format (DCSR, DCSC or COO) stores it in O(nnz)"


def check_bytes(xp: ModuleType, nbytes: int, what: str, hint: str = _HYPERSPARSE_HINT) -> None:
    """ShapeError when ``nbytes`` exceed :func:`memory_limit` (``what`` says what needs them,
    ``hint`` what to do instead)."""
    limit = memory_limit(xp)
    if nbytes > limit:
        where = "host memory" if xp is np else "GPU memory"
        raise ShapeError(
            f"{what} needs {nbytes} bytes ({_human(nbytes)}), more than the {_human(limit)} of "
            f"{where}; {hint}"
        )


def check_dense(
    xp: ModuleType, shape: tuple[int, ...], dtype: Any, what: str, hint: str = _HYPERSPARSE_HINT
) -> None:
    """ShapeError, before any work, where a new dense array of ``shape`` and ``dtype`` cannot
    exist: NumPy (and CuPy) need the product of its nonzero extents times the itemsize to fit
    a signed 64-bit byte count (even for an empty array), and its bytes must fit the device
    (:func:`check_bytes`; below 1 GiB the device is not queried)."""
    itemsize = np.dtype(dtype).itemsize
    span = math.prod(max(int(s), 1) for s in shape) * itemsize
    if span > I64_MAX:
        raise ShapeError(
            f"{what} cannot be represented: its nonzero extents times the itemsize span {span} "
            f"bytes ({_human(span)}), beyond the 2**63 - 1 bytes a NumPy array can address "
            f"(even an empty one); {hint}"
        )
    nbytes = math.prod(int(s) for s in shape) * itemsize
    if nbytes > (1 << 30):
        check_bytes(xp, nbytes, what, hint)


def check_storage(
    xp: ModuleType,
    fmt: Format,
    shape: tuple[int, ...],
    n_entries: int,
    index_dtype: Any,
    value_dtype: Any,
) -> None:
    """ShapeError when storing ``n_entries`` entries of ``shape`` in ``fmt`` needs more bytes
    than the device has (:func:`min_storage_bytes`, :func:`memory_limit`), before any work."""
    nbytes, what = min_storage_bytes(
        fmt, shape, n_entries, np.dtype(index_dtype).itemsize, np.dtype(value_dtype).itemsize
    )
    if nbytes > (1 << 30):  # below 1 GiB: never absurd, and no query of the device
        name = fmt.standard_name or fmt.map_text()
        check_bytes(xp, nbytes, f"storing a {shape} tensor as {name} ({what} dominating)")
