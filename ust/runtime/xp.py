"""Array-namespace helpers: which package an array lives in, and the few primitives whose
fastest form differs between NumPy and CuPy.

Everything else in :mod:`ust.convert` is written once against ``xp`` (NumPy on the CPU, CuPy
on the GPU).  The primitives here keep the *same contract* on both: a stable counting sort, a
segment expansion, a segmented sum.  On the CPU the counting sort runs in SciPy's compiled
``coo_tocsr`` (a stable bucket pass, O(n + buckets)); on the GPU it is CuPy's radix argsort.
Nothing here imports CuPy unless it is handed a CuPy array, or a route asks for it through
:func:`import_cupy` (the one place outside ``ust.backends.cuda`` and the interop modules that
imports CuPy: every other module goes through it, so a missing CuPy is always reported with the
pip extra that installs it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from types import ModuleType
from typing import Any

import numpy as np

from ust.runtime.errors import BackendUnavailableError, DeviceError
from ust.runtime.log import get_logger
from ust.runtime.versions import minimum, parse_version, requirement

__all__ = [
    "as_index",
    "bucket_limit",
    "counting_sort",
    "device_of",
    "expand_segments",
    "gpu_available",
    "import_cupy",
    "is_cupy",
    "namespace",
    "on_device",
    "require_device",
    "scatter_max",
    "segment_sum",
    "sparse_module",
    "stable_order",
    "to_host",
]

#: Largest number of buckets one counting pass may use (memory: one index per bucket).
_MAX_BUCKETS = 1 << 26
#: Buckets a counting pass may always use, however few the keys.
_MIN_BUCKETS = 1 << 16
#: Buckets allowed per key: more would make a counting pass cost more than the keys' O(n) memory.
_BUCKETS_PER_KEY = 4


def bucket_limit(n: int) -> int:
    """Most buckets a counting pass over ``n`` keys uses: its memory stays O(n) (a hypersparse
    extent is sorted by comparison instead) and below ``_MAX_BUCKETS``."""
    return min(_MAX_BUCKETS, max(_MIN_BUCKETS, _BUCKETS_PER_KEY * n))


# ----------------------------------------------------------------------------- CuPy, on demand


def import_cupy(module: str = "cupy", extra: str = "cu13") -> ModuleType:
    """The ``cupy`` module (or a CuPy submodule such as ``"cupyx.scipy.sparse"``), or
    BackendUnavailableError naming the pip extra that installs it.

    Not cached: the import system already is, and tests may stand a fake CuPy in.
    """
    if module != "cupy" and module.partition(".")[0] not in ("cupy", "cupyx"):
        raise ValueError(f"import_cupy imports CuPy modules only, not {module!r}")
    found = sys.modules.get(module)  # already imported (the per-call case): no import machinery
    root = found if module == "cupy" else sys.modules.get("cupy")
    if found is not None and root is not None and id(root) in _VERSION_CHECKED:
        return found  # a submodule of the CuPy whose version was checked: as imported
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"CuPy is needed to run on the GPU but cannot be imported ({exc})",
            pip_command=f'pip install "ust[{extra}]", or "ust[cu12]" for CUDA 12',
        ) from None
    root = found if module == "cupy" else sys.modules.get("cupy")
    if root is not None and id(root) not in _VERSION_CHECKED:  # once per CuPy module, not per call
        _check_cupy_version(str(getattr(root, "__version__", "")), _cupy_cuda_major(root))
        _VERSION_CHECKED.add(id(root))
    return found


_VERSION_CHECKED: set[int] = set()


def _cupy_cuda_major(cupy: Any) -> int:
    """The CUDA major CuPy runs (its runtime's version), 12 where it cannot say."""
    try:
        return int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:  # a CuPy without a usable CUDA runtime, or a stand-in
        return 12


@functools.cache
def _check_cupy_version(version: str, cuda_major: int) -> None:
    """Warn, once per version, about a CuPy older than :mod:`ust.runtime.versions` asks for."""
    found = parse_version(version)
    floor = minimum("cupy", cuda_major)
    if found is not None and found < floor:
        get_logger("runtime.xp").warning(
            "CuPy %s is older than ust supports with CUDA %d (%s); GPU routes may fail",
            version,
            cuda_major,
            requirement("cupy", cuda_major),
        )


@functools.cache
def gpu_available() -> bool:
    """True when CuPy imports and at least one CUDA device answers (checked once per process)."""
    try:
        cupy = importlib.import_module("cupy")
        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # ImportError, or CUDA driver errors of any kind
        return False


def require_device(device_id: int | None = None) -> ModuleType:
    """CuPy, after checking a CUDA device answers; else a clear error before any work."""
    cupy = import_cupy()
    if not gpu_available():
        raise DeviceError("a GPU execution space was asked for, but CuPy sees no usable CUDA device")
    count = int(cupy.cuda.runtime.getDeviceCount())
    if device_id is not None and device_id >= count:
        raise DeviceError(f"CUDA device {device_id} does not exist; this machine has {count} device(s)")
    return cupy


def is_cupy(a: Any) -> bool:
    """True for a CuPy ndarray (checked by module name: CuPy is never imported here)."""
    return type(a).__module__.split(".", 1)[0] == "cupy"


def namespace(a: Any) -> ModuleType:
    """NumPy or CuPy, whichever ``a`` belongs to."""
    if is_cupy(a):
        return import_cupy()
    return np


def device_of(a: Any) -> str:
    """``"cpu"`` or ``"cuda:N"`` for an array."""
    if is_cupy(a):
        return f"cuda:{a.device.id}"
    return "cpu"


def on_device(a: Any) -> contextlib.AbstractContextManager[Any]:
    """A context in which CuPy works on ``a``'s device: no context at all where that device is
    already the current one (entering one costs a few microseconds, a small call's budget)."""
    cupy = import_cupy()
    dev = a.device.id
    return contextlib.nullcontext() if dev == cupy.cuda.get_device_id() else cupy.cuda.Device(dev)


def to_host(a: Any) -> np.ndarray:
    """A NumPy array (a device-to-host copy for CuPy arrays, no copy for NumPy ones)."""
    return a.get() if is_cupy(a) else np.asarray(a)


def sparse_module(xp: ModuleType) -> ModuleType:
    """``scipy.sparse`` for NumPy, ``cupyx.scipy.sparse`` for CuPy: the sparse module whose CSR
    matrices (construction, ``@``, ``.T``, ``.tocsr()``, ``.diagonal()``) live beside ``xp``'s arrays."""
    if xp is np:
        import scipy.sparse

        return scipy.sparse
    return import_cupy("cupyx.scipy.sparse")


def scatter_max(xp: ModuleType, target: Any, index: Any, values: Any) -> None:
    """``target[index] = max(target[index], values)`` in place, repeated indices combined:
    ``np.maximum.at`` on NumPy, ``cupyx.scatter_max`` (atomic max) on CuPy, which takes int32,
    uint32, uint64, float32 and float64 values."""
    if xp is np:
        np.maximum.at(target, index, values)
    else:
        import_cupy("cupyx").scatter_max(target, index, values)


def as_index(a: Any, dtype: Any) -> Any:
    """``a`` in the index dtype, without a copy when it already is."""
    return a if a.dtype == dtype else a.astype(dtype)


# ----------------------------------------------------------------------------- segment expansion


def work_dtype(*sizes: int) -> np.dtype:
    """int32 when every size fits (half the memory traffic of int64), else int64."""
    return np.dtype(np.int32 if max((0, *sizes)) < 2**31 - 1 else np.int64)


def expand_segments(xp: ModuleType, counts: Any, total: int | None = None, dtype: Any = None) -> Any:
    """Segment id of every element: ``repeat(arange(len(counts)), counts)``.

    NumPy has it compiled; on CuPy the same array comes from marking where each non-empty
    segment starts and a prefix sum (no host round trip per segment).  The dtype is int32
    when the segment count allows.
    """
    nseg = int(counts.shape[0])
    dtype = work_dtype(nseg) if dtype is None else np.dtype(dtype)
    if xp is np:
        return np.repeat(np.arange(nseg, dtype=dtype), counts)
    if total is None:
        total = int(counts.sum())
    out = xp.zeros(total, dtype=dtype)
    if total == 0:
        return out
    nonempty = xp.flatnonzero(counts)
    starts = xp.cumsum(counts) - counts
    # each non-empty segment start gets the jump in segment id from the previous non-empty one
    jumps = xp.empty(nonempty.shape[0], dtype=dtype)
    jumps[0] = nonempty[0]
    jumps[1:] = nonempty[1:] - nonempty[:-1]
    out[starts[nonempty]] = jumps
    return xp.cumsum(out, dtype=dtype)


def periodic(xp: ModuleType, total: int, div: int, mod: int | None, lo: int, dtype: Any) -> Any:
    """``(arange(total) // div) % mod + lo`` without a division: repeat + tile."""
    if total == 0:
        return xp.zeros(0, dtype=dtype)
    period = total // div if mod is None else mod
    base = xp.arange(lo, lo + period, dtype=dtype)
    if div > 1:
        base = xp.repeat(base, div)
    reps = total // max(int(base.shape[0]), 1)
    return base if reps == 1 else xp.tile(base, reps)


# ----------------------------------------------------------------------------- sorting


def argsort_stable(xp: ModuleType, a: Any, axis: int = -1) -> Any:
    """Stable argsort (CuPy's argsort is always stable and takes no ``kind``)."""
    if xp is np:
        return np.argsort(a, axis=axis, kind="stable")
    return xp.argsort(a, axis=axis)


@functools.cache
def _sparsetools() -> Any:
    try:
        from scipy.sparse import _sparsetools
    except ImportError:  # pragma: no cover - private module moved
        return None
    return _sparsetools


#: Value dtypes SciPy's compiled routines carry (what ``coo_tocsr`` can move as payload).
_CARRY_KINDS = "iufc"


def bucket_sort(xp: ModuleType, key: Any, nbuckets: int, idx: Any, vals: Any) -> tuple[Any, Any, Any] | None:
    """One stable pass by ``key`` in ``[0, nbuckets)`` carrying one index array and the values.

    Returns ``(ptr, idx_sorted, vals_sorted)`` (``ptr``: bucket boundaries, nbuckets + 1), or
    None where no such pass applies (the caller sorts through a permutation instead).  CPU:
    SciPy's compiled counting pass moves both payloads itself.  GPU: a radix argsort, two
    gathers and a histogram.
    """
    n = int(key.shape[0])
    if nbuckets > _MAX_BUCKETS:
        return None
    if xp is not np:
        perm = argsort_stable(xp, key)
        ptr = xp.zeros(nbuckets + 1, dtype=work_dtype(n))
        if n:
            xp.cumsum(xp.bincount(key, minlength=nbuckets), out=ptr[1:])
        return ptr, idx[perm], vals[perm]
    st = _sparsetools()
    if st is None or np.dtype(vals.dtype).kind not in _CARRY_KINDS or np.dtype(vals.dtype).itemsize < 4:
        return None
    itype = work_dtype(n, nbuckets)
    k = np.ascontiguousarray(key, dtype=itype)
    j = np.ascontiguousarray(idx, dtype=itype)
    if n and (int(k.min()) < 0 or int(k.max()) >= nbuckets):  # memory safety of the C pass
        raise ValueError("bucket_sort: key out of range")
    ptr = np.empty(nbuckets + 1, dtype=itype)
    j_out = np.empty(n, dtype=itype)
    v_out = np.empty(n, dtype=vals.dtype)
    st.coo_tocsr(nbuckets, 1, n, k, j, np.ascontiguousarray(vals), ptr, j_out, v_out)
    return ptr, j_out, v_out


def counting_sort(xp: ModuleType, key: Any, nbuckets: int) -> tuple[Any, Any]:
    """Stable sort by a small integer key in ``[0, nbuckets)``.

    Returns ``(perm, ptr)``: ``key[perm]`` is sorted (ties keep their order) and bucket ``b``
    holds ``perm[ptr[b]:ptr[b+1]]`` (``ptr`` has ``nbuckets + 1`` entries, int64).
    """
    n = int(key.shape[0])
    st = _sparsetools() if xp is np else None
    if st is not None and nbuckets <= _MAX_BUCKETS:
        itype = np.int32 if max(n, nbuckets) < 2**31 - 1 else np.int64
        k = np.ascontiguousarray(key, dtype=itype)
        if n and (int(k.min()) < 0 or int(k.max()) >= nbuckets):  # memory safety of the C pass
            raise ValueError("counting_sort: key out of range")
        ptr = np.empty(nbuckets + 1, dtype=itype)
        sorted_key = np.empty(n, dtype=itype)
        perm = np.empty(n, dtype=itype)
        st.coo_tocsr(nbuckets, 1, n, k, k, np.arange(n, dtype=itype), ptr, sorted_key, perm)
        return perm, ptr
    perm = argsort_stable(xp, key)
    ptr = xp.zeros(nbuckets + 1, dtype=np.int64)
    if n:
        xp.cumsum(xp.bincount(key, minlength=nbuckets), out=ptr[1:])
    return perm, ptr


def _fuse(keys: list[Any], extents: list[int], limit: int) -> list[tuple[Any, int]]:
    """Adjacent keys fused (most significant first) while the product of extents stays in limit."""
    groups: list[tuple[Any, int]] = []
    cur, cur_ext = None, 1
    for k, ext in zip(keys, extents):
        ext = max(int(ext), 1)
        if cur is not None and cur_ext * ext <= limit:
            cur_ext *= ext
            cur = cur.astype(work_dtype(cur_ext), copy=False) * ext + k
        else:
            if cur is not None:
                groups.append((cur, cur_ext))
            cur, cur_ext = k, ext
    groups.append((cur, cur_ext))
    return groups


def stable_order(xp: ModuleType, keys: list[Any], extents: list[int]) -> Any:
    """Permutation that sorts entries lexicographically by ``keys`` (most significant first).

    Stable (ties keep their order).  ``keys[k]`` lies in ``[0, extents[k])``.  Levels are
    fused into as few keys as fit one counting pass (CPU) or one 64-bit radix sort (GPU), then
    sorted least significant first.  A counting pass uses at most :func:`bucket_limit` buckets
    (O(n) memory); keys of a wider extent (hypersparse shapes) are fused into 64-bit keys and
    sorted by comparison, so the memory stays O(n) at any extent.
    """
    n = int(keys[0].shape[0]) if keys else 0
    if not keys or n <= 1:
        return None
    if xp is np:
        climit = bucket_limit(n)
        groups = _fuse(keys, extents, climit)
        if any(ext > climit for _, ext in groups):
            groups = _fuse(keys, extents, 2**62)
    else:
        climit = 0
        groups = _fuse(keys, extents, 2**62)
    if len(groups) == 1 and (xp is not np or groups[0][1] > climit):
        return argsort_stable(xp, groups[0][0])
    perm = None
    for g, ext in reversed(groups):
        gk = g if perm is None else g[perm]
        if ext <= climit:
            p, _ = counting_sort(xp, gk, ext)
        else:
            p = argsort_stable(xp, gk)
        perm = p if perm is None else perm[p]
    return perm


# ----------------------------------------------------------------------------- reductions


def segment_sum(xp: ModuleType, values: Any, starts: Any) -> Any:
    """Sum of each run ``values[starts[g]:starts[g+1]]`` (the last run ends at the end).

    ``starts`` is ascending, starts at 0 and has no empty runs; the sum keeps the dtype.
    """
    if values.shape[0] == 0:
        return values[:0]
    if not is_cupy(values):
        return xp.add.reduceat(values, starts, dtype=values.dtype)
    # not CuPy's add.reduceat: it differences a running cumsum, which is not exact (a run of one
    # value comes back rounded, a cancelled run as 1e-16 instead of 0).  One thread per run adds
    # its values left to right instead: a run of one or two is exact, every run deterministic.
    nseg = int(starts.shape[0])
    out = xp.empty(nseg, dtype=values.dtype)
    _segment_sum_kernel()(values, starts, int(values.shape[0]), nseg, out)
    return out


@functools.cache
def _segment_sum_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "raw T v, raw I starts, int64 n, int64 nseg",
        "T s",
        """
        long long b = (long long)starts[i];
        long long e = i + 1 < nseg ? (long long)starts[i + 1] : n;
        T acc = v[b];
        for (long long k = b + 1; k < e; ++k) acc += v[k];
        s = acc;
        """,
        "ust_segment_sum",
    )
