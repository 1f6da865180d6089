"""The compiler's kernels as C: emitted, compiled once (authenticated disk cache), called by ctypes."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ust.backends.generated.compile_c import load_library
from ust.backends.generated.launch import kernel_scalar
from ust.codegen.compute_lower import ComputeKernels
from ust.codegen.emit_c import c_abi
from ust.codegen.emit_compute_c import emit_compute_c
from ust.codegen.ir import Kernel
from ust.runtime.errors import ShapeError
from ust.runtime.log import get_logger

__all__ = ["CComputeLibrary"]

_log = get_logger(__name__)


class CComputeLibrary:
    """The compiled functions of one lowered expression; ``launch(kernel, args)`` calls one."""

    def __init__(self, ck: ComputeKernels, name: str) -> None:
        t0 = time.perf_counter()
        self.source = emit_compute_c(list(ck.kernels))
        lib = load_library(self.source, name=name)
        self.fns: dict[str, Any] = {}
        for k in ck.kernels:
            fn = getattr(lib, k.name)
            fn.restype = None
            fn.argtypes = [ctypes.c_int64 if kind == "iscalar" else ctypes.c_void_p for _, kind in c_abi(k)]
            self.fns[k.name] = fn
        self.lib = lib
        self._binders: dict[str, Any] = {}
        #: id -> (array, data pointer) of read-only buffers seen before (their pointer is fixed)
        self._pointers: dict[int, tuple[Any, int]] = {}
        self.seconds = time.perf_counter() - t0

    def launch(self, k: Kernel, args: Mapping[str, Any]) -> None:
        """Call ``k`` with ``args`` by parameter name (buffers checked, scalars converted)."""
        binder = self._binders.get(k.name)
        if binder is None:
            binder = self._binders[k.name] = _binder(k)
        specs, vnames, vt = binder
        keep: list[Any] = []
        cargs: list[Any] = []
        for name, kind, want, const in specs:
            if kind == "iscalar":
                cargs.append(int(args[name]))
            elif kind == "vscal":
                vs = np.array([kernel_scalar(k.value_dtype, args[n]) for n in vnames], dtype=vt)
                keep.append(vs)
                cargs.append(vs.ctypes.data)
            else:
                arr = args[name]
                hit = self._pointers.get(id(arr))
                if hit is not None and hit[0] is arr and const:
                    cargs.append(hit[1])
                    continue
                if not (isinstance(arr, np.ndarray) and arr.dtype == want and arr.flags.c_contiguous):
                    if not const:
                        raise ShapeError(f"output buffer {name} must be a C-contiguous {want} array")
                    arr = np.ascontiguousarray(arr, dtype=want)
                    keep.append(arr)
                    cargs.append(arr.ctypes.data)
                    continue
                ptr = arr.ctypes.data
                if const:  # an operand's buffer: the same array next call (kept alive here)
                    if len(self._pointers) > 256:
                        self._pointers.clear()
                    self._pointers[id(args[name])] = (args[name], ptr)
                cargs.append(ptr)
        self.fns[k.name](*cargs)


def _binder(k: Kernel) -> tuple[list[tuple[str, str, np.dtype, bool]], list[str], np.dtype]:
    """How to marshal ``k``'s arguments: (name, kind, dtype, read-only) in ABI order."""
    vt = np.dtype(k.value_dtype)
    specs = []
    for name, kind in c_abi(k):
        if kind in ("iscalar", "vscal"):
            specs.append((name, kind, vt, True))
        else:
            p = k.param(name)
            specs.append((name, kind, np.dtype(p.dtype) if p.kind == "ibuf" else vt, p.const))
    return specs, [p.name for p in k.params if p.kind == "vscalar"], vt
