"""ctypes binding of NVIDIA cuDSS (sparse direct solver), versions 0.8 and 1.0.

Everything ABI-dependent is a table keyed by the (major, minor) that ``cudssGetProperty``
reports, taken from the ``cudss.h`` / ``cudss_data_types.h`` shipped in the
``nvidia-cudss-cu13`` 0.8.0.10 and 1.0.0.35 wheels.  Between those two the signatures used
here, the phase / matrix / data-parameter enums and the value-type codes are identical;
1.0 appends four config parameters and ``cudssSetJitCacheDir``.  Releases before 0.8 had a
``cudssMatrixCreateCsr`` without ``offsetType`` and other phase values, so they are refused.

Loading: libcublasLt / libcublas (and libnvrtc, needed by 1.0) of the CUDA major that CuPy
runs are preloaded with RTLD_GLOBAL, because libcudss's RPATH (``$ORIGIN/../../cublas/lib``)
misses the copies that CUDA 13 wheels put in ``nvidia/cu13/lib``.  The threading layer
``libcudss_mtlayer_gomp.so.<major>`` beside libcudss is set on every handle by full path
(``$CUDSS_THREADING_LIB`` wins when set): without it cuDSS's reordering runs on one thread.

Nothing here runs at import; :func:`get_library` loads on first use.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.backends.cuda._lib import declare, find_file, library_path, load_library
from ust.backends.cuda.arrays import import_cupy
from ust.runtime import versions
from ust.runtime.errors import BackendUnavailableError, UstError
from ust.runtime.log import get_logger

__all__ = [
    "DATA_TYPE",
    "MATRIX_TYPE",
    "MATRIX_VIEW",
    "PHASE",
    "PIVOT",
    "REORDERING",
    "CudssError",
    "CudssFactorization",
    "CudssLibrary",
    "get_library",
]

_log = get_logger("backends.cuda.cudss")

_c_void_p = ctypes.c_void_p
_c_int = ctypes.c_int
_c_int64 = ctypes.c_int64
_c_size_t = ctypes.c_size_t

# ----------------------------------------------------------------------------------------- enums
# Values from cudss_data_types.h (0.8.0 and 1.0.0 agree on all of these).

STATUS = {
    0: ("SUCCESS", "success"),
    1: ("NOT_INITIALIZED", "a handle or object was used before it was created"),
    2: ("ALLOC_FAILED", "memory allocation failed (for matrices larger than the GPU try hybrid_memory=True)"),
    3: ("INVALID_VALUE", "an invalid argument or configuration value"),
    4: ("NOT_SUPPORTED", "this combination of options, matrix type and data type is not supported"),
    5: ("EXECUTION_FAILED", "a GPU kernel or host task failed to execute"),
    6: ("INTERNAL_ERROR", "an internal cuDSS error"),
    7: ("IR_FAILED", "iterative refinement failed"),
}

PHASE = {
    "reordering": 1,
    "symbolic_factorization": 2,
    "analysis": 3,
    "factorization": 4,
    "refactorization": 8,
    "solve": 1008,  # FWD_PERM | FWD | DIAG | BWD | BWD_PERM | REFINEMENT
}
MATRIX_TYPE = {"general": 0, "symmetric": 1, "hermitian": 2, "spd": 3, "hpd": 4}
MATRIX_VIEW = {"full": 0, "lower": 1, "upper": 2}
REORDERING = {"default": 0, "btf_colamd": 1, "colamd": 2, "amd": 3, "nested_dissection": 4, "none": 5}
PIVOT = {
    "auto": 0,
    "none": 1,
    "global_col": 2,
    "global_row": 3,
    "diagonal": 4,
    "local_block": 5,
    "bunch_kaufman": 6,
}
LAYOUT_COL_MAJOR = 0
INDEX_BASE_ZERO = 0

# cudaDataType_t codes (0.8's cudssDataType_t uses the same numbers for these types).
DATA_TYPE = {
    np.dtype(np.float32): 0,
    np.dtype(np.float64): 1,
    np.dtype(np.complex64): 4,
    np.dtype(np.complex128): 5,
    np.dtype(np.int32): 10,
    np.dtype(np.int64): 24,
}

# cudssConfigParam_t in enum order, with the C type of each value.
_CONFIG_08: tuple[tuple[str, Any], ...] = (
    ("reordering_alg", _c_int),
    ("factorization_alg", _c_int),
    ("solve_alg", _c_int),
    ("matching_alg", _c_int),
    ("solve_mode", _c_int),
    ("ir_n_steps", _c_int),
    ("ir_tol", ctypes.c_double),
    ("pivot_type", _c_int),
    ("pivot_threshold", ctypes.c_double),
    ("pivot_epsilon", ctypes.c_double),
    ("max_lu_nnz", _c_int64),
    ("hybrid_memory_mode", _c_int),
    ("hybrid_device_memory_limit", _c_int64),
    ("use_cuda_register_memory", _c_int),
    ("host_nthreads", _c_int),
    ("hybrid_execute_mode", _c_int),
    ("pivot_epsilon_alg", _c_int),
    ("nd_nlevels", _c_int),
    ("ubatch_size", _c_int),
    ("ubatch_index", _c_int),
    ("use_superpanels", _c_int),
    ("device_count", _c_int),
    ("device_indices", _c_void_p),
    ("schur_mode", _c_int),
    ("deterministic_mode", _c_int),
    ("nd_ubfactor", _c_int),
)
_CONFIG_10_EXTRA: tuple[tuple[str, Any], ...] = (
    ("emulation_mantissa_bit_count", _c_int),
    ("force_nonsymmetric_matching", _c_int),
    ("downcast_factors", _c_int),
    ("memory_optimization_setting", _c_int),
)

# cudssDataParam_t: name -> (enum value, element C type, element count or None = n).
DATA_PARAM: dict[str, tuple[int, Any, int | None]] = {
    "info": (0, ctypes.c_int32, 1),
    "lu_nnz": (1, ctypes.c_int64, 1),
    "npivots": (2, ctypes.c_int32, 1),
    "inertia": (3, ctypes.c_int32, 2),
    "perm_reorder_row": (4, ctypes.c_int32, None),
    "perm_reorder_col": (5, ctypes.c_int32, None),
    "perm_row": (6, ctypes.c_int32, None),
    "perm_col": (7, ctypes.c_int32, None),
    "user_perm": (9, ctypes.c_int32, None),
    "hybrid_device_memory_min": (10, ctypes.c_int64, 1),
    "memory_estimates": (13, ctypes.c_int64, 16),
    "nsuperpanels": (17, ctypes.c_int32, 1),
    "user_nd_partition_tree": (21, ctypes.c_int32, None),
    "nd_partition_tree": (22, ctypes.c_int32, None),
    "ir_n_steps": (24, ctypes.c_int32, 1),
}
MEMORY_ESTIMATE_FIELDS = (
    "permanent_device_memory",
    "peak_device_memory",
    "permanent_host_memory",
    "peak_host_memory",
    "hybrid_min_device_memory",
    "hybrid_max_device_memory",
)


@dataclass(frozen=True)
class Abi:
    """What differs between supported cuDSS releases."""

    config: dict[str, tuple[int, Any]]
    has_jit_cache_dir: bool
    needs_nvrtc: bool


def _config_table(entries: Iterable[tuple[str, Any]]) -> dict[str, tuple[int, Any]]:
    return {name: (i, ctype) for i, (name, ctype) in enumerate(entries)}


ABIS: dict[tuple[int, int], Abi] = {
    (0, 8): Abi(_config_table(_CONFIG_08), has_jit_cache_dir=False, needs_nvrtc=False),
    (1, 0): Abi(_config_table(_CONFIG_08 + _CONFIG_10_EXTRA), has_jit_cache_dir=True, needs_nvrtc=True),
}
SUPPORTED = ", ".join(f"{a}.{b}" for a, b in ABIS)


def abi_for(version: tuple[int, ...], extra: str = "cu13") -> Abi:
    """The table for a cuDSS version: exact match; for a release between or after the tables, the
    newest older table (with a warning); below ``ust.runtime.versions``' minimum, refused."""
    key = (version[0], version[1])
    text = ".".join(str(v) for v in version)
    if key in ABIS:
        return ABIS[key]
    if key < versions.minimum("cudss", extra):
        raise BackendUnavailableError(
            f"cuDSS {text} is too old (its C API differs); ust supports cuDSS {SUPPORTED}",
            pip_command=f'pip install "{versions.requirement("cudss", extra)}"',
        )
    table = max(k for k in ABIS if k < key)
    _log.warning(
        "cuDSS %s is %s the versions ust was checked with (%s); using the %d.%d tables",
        text,
        "newer than" if key > max(ABIS) else "between",
        SUPPORTED,
        *table,
    )
    return ABIS[table]


class CudssError(UstError, RuntimeError):
    """A cuDSS call that returned a status other than SUCCESS."""

    def __init__(self, call: str, status: int) -> None:
        name, why = STATUS.get(status, (f"UNKNOWN_{status}", "an unknown status"))
        super().__init__(f"{call} failed: CUDSS_STATUS_{name} ({status}): {why}")
        self.status = status


# ----------------------------------------------------------------------------------------- library

_P = ctypes.POINTER
_SIGNATURES: dict[str, list[Any]] = {
    "cudssGetProperty": [_c_int, _P(_c_int)],
    "cudssCreate": [_P(_c_void_p)],
    "cudssDestroy": [_c_void_p],
    "cudssSetStream": [_c_void_p, _c_void_p],
    "cudssSetThreadingLayer": [_c_void_p, ctypes.c_char_p],
    "cudssConfigCreate": [_P(_c_void_p)],
    "cudssConfigDestroy": [_c_void_p],
    "cudssConfigSet": [_c_void_p, _c_int, _c_void_p, _c_size_t],
    "cudssConfigGet": [_c_void_p, _c_int, _c_void_p, _c_size_t, _P(_c_size_t)],
    "cudssDataCreate": [_c_void_p, _P(_c_void_p)],
    "cudssDataDestroy": [_c_void_p, _c_void_p],
    "cudssDataSet": [_c_void_p, _c_void_p, _c_int, _c_void_p, _c_size_t],
    "cudssDataGet": [_c_void_p, _c_void_p, _c_int, _c_void_p, _c_size_t, _P(_c_size_t)],
    "cudssExecute": [_c_void_p, _c_int, _c_void_p, _c_void_p, _c_void_p, _c_void_p, _c_void_p],
    "cudssMatrixCreateDn": [_P(_c_void_p), _c_int64, _c_int64, _c_int64, _c_void_p, _c_int, _c_int],
    "cudssMatrixCreateCsr": [
        _P(_c_void_p),
        _c_int64,
        _c_int64,
        _c_int64,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_int,  # offsetType (0.8+)
        _c_int,  # indexType
        _c_int,  # valueType
        _c_int,  # mtype
        _c_int,  # mview
        _c_int,  # indexBase
    ],
    "cudssMatrixCreateBatchDn": [
        _P(_c_void_p),
        _c_int64,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_int,
        _c_int,
        _c_int,
    ],
    "cudssMatrixCreateBatchCsr": [
        _P(_c_void_p),
        _c_int64,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_void_p,
        _c_int,
        _c_int,
        _c_int,
        _c_int,
        _c_int,
        _c_int,
    ],
    "cudssMatrixDestroy": [_c_void_p],
    "cudssMatrixSetValues": [_c_void_p, _c_void_p],
    "cudssMatrixSetBatchValues": [_c_void_p, _c_void_p],
}


def _cuda_major(cupy: Any) -> int:
    return int(cupy.cuda.runtime.runtimeGetVersion()) // 1000


class CudssLibrary:
    """libcudss loaded and bound, with its version, ABI table and threading layer path."""

    def __init__(self) -> None:
        cupy = import_cupy()
        major = _cuda_major(cupy)
        extra = f"cu{major}" if major in (12, 13) else "cu13"
        self.extra = extra
        for dep in ("cublasLt", "cublas"):
            load_library(dep, extra, major=major)
        try:
            load_library("nvrtc", extra, major=major)
        except BackendUnavailableError as exc:  # only cuDSS 1.0 needs it; it says so when loaded
            _log.debug("libnvrtc not preloaded: %s", exc)
        self.lib = load_library("cudss", extra)
        self.fn = {name: declare(self.lib, name, _c_int, args) for name, args in _SIGNATURES.items()}
        self.version = tuple(self._property(k) for k in (0, 1, 2))
        self.abi = abi_for(self.version, extra)
        if self.abi.has_jit_cache_dir:
            self.fn["cudssSetJitCacheDir"] = declare(
                self.lib, "cudssSetJitCacheDir", _c_int, [_c_void_p, ctypes.c_char_p]
            )
        self.path = library_path(self.lib, "cudssCreate")
        self.threading_layer = self._find_threading_layer()
        _log.info(
            "loaded cuDSS %s from %s (threading layer: %s)",
            self.version_text,
            self.path,
            self.threading_layer or "none found",
        )

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)

    def _property(self, kind: int) -> int:
        out = _c_int()
        self.call("cudssGetProperty", kind, ctypes.byref(out))
        return int(out.value)

    def _find_threading_layer(self) -> str | None:
        env = os.environ.get("CUDSS_THREADING_LIB")
        if env:
            return env
        here = os.path.dirname(self.path)
        dirs = [here] if os.path.isabs(self.path) else []
        found = find_file(f"libcudss_mtlayer_gomp.so.{self.version[0]}*", dirs or None)
        return found or find_file("libcudss_mtlayer_gomp.so*", dirs or None)

    def call(self, name: str, *args: Any, what: str = "") -> None:
        """Call ``name`` and raise :class:`CudssError` unless it returns SUCCESS."""
        status = self.fn[name](*args)
        if status != 0:
            raise CudssError(f"{name}{f'({what})' if what else ''}", int(status))

    def config_set(self, config: int, name: str, value: Any) -> None:
        try:
            index, ctype = self.abi.config[name]
        except KeyError:
            raise BackendUnavailableError(
                f"cuDSS {self.version_text} has no configuration parameter {name!r}"
            ) from None
        cvalue = ctype(value)
        self.call("cudssConfigSet", config, index, ctypes.byref(cvalue), ctypes.sizeof(cvalue), what=name)


@functools.cache
def get_library() -> CudssLibrary:
    """The process's cuDSS (loaded on first call; BackendUnavailableError names the pip command)."""
    return CudssLibrary()


_HANDLES: dict[int, int] = {}


def get_handle(device_id: int) -> int:
    """One cuDSS handle per device, with the threading layer set (cuDSS handles are device-bound)."""
    if device_id in _HANDLES:
        return _HANDLES[device_id]
    lib = get_library()
    cupy = import_cupy()
    handle = _c_void_p()
    with cupy.cuda.Device(device_id):
        lib.call("cudssCreate", ctypes.byref(handle))
        if lib.threading_layer:
            try:
                lib.call(
                    "cudssSetThreadingLayer", handle, lib.threading_layer.encode(), what=lib.threading_layer
                )
            except CudssError as exc:  # e.g. libgomp missing: run on, single-threaded, and say so
                _log.warning(
                    "cuDSS could not load its threading layer (%s); plan() will use one host thread", exc
                )
                lib.threading_layer = None
        else:
            _log.warning(
                "cuDSS's threading layer (libcudss_mtlayer_gomp.so) was not found beside %s: "
                "the reordering in plan() will run on one host thread",
                lib.path,
            )
    _HANDLES[device_id] = int(handle.value or 0)
    return _HANDLES[device_id]


# ----------------------------------------------------------------------------------------- solver


def _ptr(a: Any) -> int:
    return int(a.data.ptr)


class CudssFactorization:
    """One sparse system on one device: config, data, the CSR matrix and dense b / x wrappers.

    ``indptr``, ``indices``, ``data`` are CuPy arrays on ``device_id`` (int32 column indices;
    int32 or int64 row offsets) that this object keeps alive.  Right-hand sides are 2-D
    column-major CuPy arrays.
    """

    def __init__(
        self,
        indptr: Any,
        indices: Any,
        data: Any,
        n: int,
        *,
        matrix_type: str,
        matrix_view: str,
        config: dict[str, Any],
        device_id: int,
        stream: int,
    ) -> None:
        self.lib = get_library()
        self.cupy = import_cupy()
        self.device_id = device_id
        self.stream = stream
        self.n = n
        self.dtype = np.dtype(data.dtype)
        self._arrays = [indptr, indices, data]
        self._config = _c_void_p()
        self._data = _c_void_p()
        self._a = _c_void_p()
        self._b = _c_void_p()
        self._x = _c_void_p()
        self._rhs_shape: tuple[int, int] | None = None
        self._rhs_refs: list[Any] = []
        with self.cupy.cuda.Device(device_id):
            self.handle = self._acquire_handle(device_id)
            self.lib.call("cudssConfigCreate", ctypes.byref(self._config))
            self._configure(config)
            self.lib.call("cudssDataCreate", self.handle, ctypes.byref(self._data))
            self.lib.call(
                "cudssMatrixCreateCsr",
                ctypes.byref(self._a),
                n,
                n,
                int(indices.size),
                _ptr(indptr),
                None,
                _ptr(indices),
                _ptr(data),
                DATA_TYPE[np.dtype(indptr.dtype)],
                DATA_TYPE[np.dtype(indices.dtype)],
                DATA_TYPE[self.dtype],
                MATRIX_TYPE[matrix_type],
                MATRIX_VIEW[matrix_view],
                INDEX_BASE_ZERO,
                what="CSR matrix",
            )

    def _acquire_handle(self, device_id: int) -> int:
        """The handle to use (hook: the multi-GPU binding in cudss_mg returns a cudssCreateMg handle)."""
        return get_handle(device_id)

    def _configure(self, config: dict[str, Any]) -> None:
        """Set the config values (hook: cudss_mg adds the device list)."""
        for name, value in config.items():
            self.lib.config_set(self._config.value or 0, name, value)

    # ------------------------------------------------------------------ operands

    def set_values(self, data: Any) -> None:
        """New values for the same pattern (kept alive here until the next call)."""
        self._arrays[2] = data
        self.lib.call("cudssMatrixSetValues", self._a, _ptr(data))

    def set_rhs(self, b: Any, x: Any) -> None:
        """Point the dense b / x wrappers at 2-D column-major arrays (recreated when the shape changes)."""
        shape = (int(b.shape[0]), int(b.shape[1]))
        if shape != self._rhs_shape:
            for m in (self._b, self._x):
                if m.value:
                    self.lib.call("cudssMatrixDestroy", m)
            code = DATA_TYPE[self.dtype]
            for m, arr in ((self._b, b), (self._x, x)):
                self.lib.call(
                    "cudssMatrixCreateDn",
                    ctypes.byref(m),
                    shape[0],
                    shape[1],
                    shape[0],
                    _ptr(arr),
                    code,
                    LAYOUT_COL_MAJOR,
                    what="dense matrix",
                )
            self._rhs_shape = shape
        else:
            self.lib.call("cudssMatrixSetValues", self._b, _ptr(b))
            self.lib.call("cudssMatrixSetValues", self._x, _ptr(x))
        self._rhs_refs = [b, x]

    # ------------------------------------------------------------------ phases

    def execute(self, phase: str) -> None:
        with self.cupy.cuda.Device(self.device_id):
            self.lib.call("cudssSetStream", self.handle, self.stream)
            self.lib.call(
                "cudssExecute",
                self.handle,
                PHASE[phase],
                self._config,
                self._data,
                self._a,
                self._x,
                self._b,
                what=phase.upper(),
            )

    def _set_int32(self, name: str, values: np.ndarray) -> None:
        """Hand an int32 array to a CUDSS_DATA_* input (cuDSS copies it)."""
        v = np.ascontiguousarray(values, dtype=np.int32)
        self.lib.call(
            "cudssDataSet",
            self.handle,
            self._data,
            DATA_PARAM[name][0],
            v.ctypes.data,
            v.nbytes,
            what=name.upper(),
        )

    def set_user_permutation(self, perm: np.ndarray) -> None:
        """Hand a saved reordering to the next analysis: a permutation of ``range(n)``, checked here
        (cuDSS itself does not check it)."""
        arr = np.asarray(perm)
        n = self.n
        ok = arr.ndim == 1 and arr.shape[0] == n and arr.dtype.kind in "iu"
        if ok and n:
            v = arr.astype(np.int64)
            ok = int(v.min()) >= 0 and int(v.max()) < n and bool((np.bincount(v, minlength=n) == 1).all())
        if not ok:
            raise CudssError(f"the user permutation is not a permutation of 0 ... {n - 1}", 3)
        self._set_int32("user_perm", arr)

    def nd_partition_tree(self) -> np.ndarray | None:
        """The nested-dissection partition tree of the analysis (``2**levels - 1`` int32), or None.

        Saved beside the permutation, it lets a later analysis skip the reordering *and* keep
        the symbolic phase fast: with the permutation alone cuDSS rebuilds the tree the slow way.
        """
        index = DATA_PARAM["nd_partition_tree"][0]
        size = _c_size_t()
        if self.lib.fn["cudssDataGet"](self.handle, self._data, index, None, 0, ctypes.byref(size)) != 0:
            return None
        if size.value < 4:
            return None
        out = np.zeros(size.value // 4, dtype=np.int32)
        status = self.lib.fn["cudssDataGet"](
            self.handle, self._data, index, out.ctypes.data, out.nbytes, ctypes.byref(size)
        )
        return out if status == 0 else None

    def set_user_partition_tree(self, tree: np.ndarray) -> None:
        """Hand a saved partition tree to the next analysis (with :meth:`set_user_permutation`)."""
        arr = np.asarray(tree)
        size = int(arr.shape[0]) if arr.ndim == 1 else 0
        levels = (size + 1).bit_length() - 1
        if size < 1 or size != (1 << levels) - 1:
            raise CudssError(f"a partition tree has 2**levels - 1 entries, not {size}", 3)
        if arr.dtype.kind not in "iu" or int(arr.min()) < -(2**31) or int(arr.max()) >= 2**31:
            raise CudssError("a partition tree holds int32 values", 3)
        self.lib.config_set(self._config.value or 0, "nd_nlevels", levels)
        self._set_int32("user_nd_partition_tree", tree)

    def get(self, name: str) -> np.ndarray:
        """A CUDSS_DATA_* value as a NumPy array (synchronises with the device)."""
        index, ctype, count = DATA_PARAM[name]
        out = np.zeros(self.n if count is None else count, dtype=np.dtype(ctype))
        written = _c_size_t()
        self.lib.call(
            "cudssDataGet",
            self.handle,
            self._data,
            index,
            out.ctypes.data,
            out.nbytes,
            ctypes.byref(written),
            what=name.upper(),
        )
        return out

    def info(self) -> int:
        return int(self.get("info")[0])

    def memory_estimates(self) -> dict[str, int]:
        est = self.get("memory_estimates")
        return {k: int(v) for k, v in zip(MEMORY_ESTIMATE_FIELDS, est)}

    def free(self) -> None:
        lib = self.lib
        for m in (self._a, self._b, self._x):
            if m.value:
                lib.call("cudssMatrixDestroy", m)
                m.value = None
        if self._data.value:
            lib.call("cudssDataDestroy", self.handle, self._data)
            self._data.value = None
        if self._config.value:
            lib.call("cudssConfigDestroy", self._config)
            self._config.value = None
        self._arrays = []
        self._rhs_refs = []


class CudssBatchFactorization(CudssFactorization):
    """A non-uniform batch of sparse systems solved by one set of cuDSS calls (``cudssMatrixCreateBatch*``).

    ``members`` are ``(indptr, indices, data)`` CuPy arrays of square matrices (int32 offsets and
    indices, one value dtype).  Sizes go to cuDSS in host arrays, the members' device pointers
    in device arrays; all of them are kept alive here.
    """

    def __init__(
        self,
        members: list[tuple[Any, Any, Any]],
        *,
        matrix_type: str,
        matrix_view: str,
        config: dict[str, Any],
        device_id: int,
        stream: int,
    ) -> None:
        self.lib = get_library()
        self.cupy = import_cupy()
        cp = self.cupy
        self.device_id, self.stream = device_id, stream
        self.dtype = np.dtype(members[0][2].dtype)
        self.n = 0  # per-member sizes differ; array data values are not read for batches
        self.batch = len(members)
        self._config, self._data = _c_void_p(), _c_void_p()
        self._a, self._b, self._x = _c_void_p(), _c_void_p(), _c_void_p()
        self._rhs_shape = None
        self._rhs_refs = []
        sizes = np.array([int(m[0].size) - 1 for m in members], dtype=np.int32)
        nnz = np.array([int(m[1].size) for m in members], dtype=np.int32)
        with cp.cuda.Device(device_id):
            pointers = [
                cp.asarray(np.array([_ptr(m[k]) for m in members], dtype=np.uint64)) for k in range(3)
            ]
            self._arrays = [members, sizes, nnz, pointers]
            self.handle = get_handle(device_id)
            self.lib.call("cudssConfigCreate", ctypes.byref(self._config))
            self.lib.call("cudssDataCreate", self.handle, ctypes.byref(self._data))
            for name, value in config.items():
                self.lib.config_set(self._config.value or 0, name, value)
            self.lib.call(
                "cudssMatrixCreateBatchCsr",
                ctypes.byref(self._a),
                self.batch,
                sizes.ctypes.data,
                sizes.ctypes.data,
                nnz.ctypes.data,
                _ptr(pointers[0]),
                None,
                _ptr(pointers[1]),
                _ptr(pointers[2]),
                DATA_TYPE[np.dtype(np.int32)],
                DATA_TYPE[np.dtype(np.int32)],
                DATA_TYPE[self.dtype],
                MATRIX_TYPE[matrix_type],
                MATRIX_VIEW[matrix_view],
                INDEX_BASE_ZERO,
                what="batch CSR matrix",
            )

    def set_values(self, data: Any) -> None:
        raise NotImplementedError("new values for a batch: create a new batch")

    def _per_member(self, name: str) -> np.ndarray:
        """An int32 CUDSS_DATA_* value over the batch: one per member, or one for all of them."""
        out = np.zeros(self.batch, dtype=np.int32)
        written = _c_size_t()
        try:
            self.lib.call(
                "cudssDataGet",
                self.handle,
                self._data,
                DATA_PARAM[name][0],
                out.ctypes.data,
                out.nbytes,
                ctypes.byref(written),
                what=name.upper(),
            )
        except CudssError:  # a release that wants exactly one int
            return self.get(name)
        return out[: max(1, int(written.value) // 4)]

    def info(self) -> int:
        """The largest CUDSS_DATA_INFO over the batch (cuDSS may report one value or one per member)."""
        return int(self._per_member("info").max())

    def npivots(self) -> int:
        """The perturbed pivots over the whole batch (CUDSS_DATA_NPIVOTS summed over what cuDSS reports)."""
        return int(self._per_member("npivots").sum())

    def set_rhs(self, b: Any, x: Any) -> None:
        """``b`` and ``x``: lists of 2-D column-major CuPy arrays, one per member."""
        cp = self.cupy
        for m in (self._b, self._x):
            if m.value:
                self.lib.call("cudssMatrixDestroy", m)
                m.value = None
        rows = np.array([int(v.shape[0]) for v in b], dtype=np.int32)
        cols = np.array([int(v.shape[1]) for v in b], dtype=np.int32)
        refs: list[Any] = [b, x, rows, cols]
        with cp.cuda.Device(self.device_id):
            for m, arrays in ((self._b, b), (self._x, x)):
                ptrs = cp.asarray(np.array([_ptr(v) for v in arrays], dtype=np.uint64))
                refs.append(ptrs)
                self.lib.call(
                    "cudssMatrixCreateBatchDn",
                    ctypes.byref(m),
                    self.batch,
                    rows.ctypes.data,
                    cols.ctypes.data,
                    rows.ctypes.data,
                    _ptr(ptrs),
                    DATA_TYPE[np.dtype(np.int32)],
                    DATA_TYPE[self.dtype],
                    LAYOUT_COL_MAJOR,
                    what="batch dense matrix",
                )
        self._rhs_refs = refs
