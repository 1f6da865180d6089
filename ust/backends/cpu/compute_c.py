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
        self.seconds = time.perf_counter() - t0

    def launch(self, k: Kernel, args: Mapping[str, Any]) -> None:
        vt = np.dtype(k.value_dtype)
        keep: list[Any] = []
        cargs: list[Any] = []
        for name, kind in c_abi(k):
            if kind == "iscalar":
                cargs.append(ctypes.c_int64(int(args[name])))
            elif kind == "vscal":
                vs = np.array(
                    [kernel_scalar(k.value_dtype, args[p.name]) for p in k.params if p.kind == "vscalar"],
                    dtype=vt,
                )
                keep.append(vs)
                cargs.append(ctypes.c_void_p(vs.ctypes.data))
            else:
                p = k.param(name)
                want = np.dtype(p.dtype) if p.kind == "ibuf" else vt
                arr = args[name]
                if not p.const:
                    if not (isinstance(arr, np.ndarray) and arr.dtype == want and arr.flags.c_contiguous):
                        raise ShapeError(f"output buffer {name} must be a C-contiguous {want} array")
                else:
                    arr = np.ascontiguousarray(arr, dtype=want)
                keep.append(arr)
                cargs.append(ctypes.c_void_p(arr.ctypes.data))
        self.fns[k.name](*cargs)
