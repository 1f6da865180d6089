"""The compiler's kernels on the GPU: CUDA source compiled by NVRTC (authenticated cache), launched by CuPy."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ust.backends.cuda.kernels import _arch, _cupy, _load_module
from ust.backends.generated.launch import kernel_scalar
from ust.codegen.compute_lower import ComputeKernels
from ust.codegen.emit_compute_cuda import GROUPS, emit_compute_cuda, kernel_name, supports_groups
from ust.codegen.emit_cuda import BLOCK
from ust.codegen.ir import Kernel
from ust.runtime.errors import DeviceError
from ust.runtime.log import get_logger

__all__ = ["CudaComputeLibrary", "cuda_library"]

_log = get_logger(__name__)
#: Most blocks of one launch (the kernels are grid-stride loops).
MAX_BLOCKS = 1 << 16


class CudaComputeLibrary:
    """The loaded kernels of one lowered expression on one device."""

    def __init__(self, ck: ComputeKernels, device_id: int) -> None:
        cp = _cupy()
        t0 = time.perf_counter()
        self.ck = ck
        self.device_id = device_id
        self.source = emit_compute_cuda(list(ck.kernels))
        with cp.cuda.Device(device_id):
            self.module, self.how = _load_module(self.source, _arch(device_id), ck.kernels[0].name)
            self.fns = {
                kernel_name(k, g): self.module.get_function(kernel_name(k, g))
                for k in ck.kernels
                for g in (GROUPS if supports_groups(k) else (1,))
            }
        self.seconds = time.perf_counter() - t0
        _log.info("compute CUDA kernels: %s in %.1f ms", self.how, 1e3 * self.seconds)

    def launch(self, k: Kernel, args: Mapping[str, Any]) -> None:
        """Launch ``k``; ``args["ust_group"]`` (lanes per row: 1, 8 or 32) picks the variant of a
        row-reduction kernel."""
        cp = _cupy()
        vt = np.dtype(k.value_dtype)
        cargs: list[Any] = []
        for p in k.params:
            v = args[p.name]
            if p.kind == "iscalar":
                cargs.append(np.int64(int(v)))
            elif p.kind == "vscalar":
                cargs.append(kernel_scalar(k.value_dtype, v) if vt.kind in "fc" else vt.type(v))
            else:
                if not isinstance(v, cp.ndarray):
                    raise DeviceError(
                        f"buffer {p.name} is not a CuPy array: every operand of a CUDA kernel must be on the GPU"
                    )
                want = np.dtype(p.dtype) if p.kind == "ibuf" else vt
                if not p.const:
                    if v.dtype != want or not v.flags.c_contiguous:
                        raise DeviceError(f"output buffer {p.name} must be a C-contiguous {want} CuPy array")
                else:
                    v = cp.ascontiguousarray(v, dtype=want)
                cargs.append(v)
        group = int(args.get("ust_group", 1)) if supports_groups(k) else 1
        if group not in GROUPS:
            group = 1
        outer = int(args.get(f"E_{self.ck.order[0]}", 1)) if self.ck.order else 1
        blocks = max(1, min((outer * group + BLOCK - 1) // BLOCK, MAX_BLOCKS)) if self.ck.parallel else 1
        with cp.cuda.Device(self.device_id):
            self.fns[kernel_name(k, group)]((blocks,), (BLOCK,), tuple(cargs))


@functools.lru_cache(maxsize=128)
def cuda_library(ck: ComputeKernels, device: str) -> CudaComputeLibrary:
    """The loaded kernels of ``ck`` on ``device`` ("cuda:N"), memoised."""
    dev = int(device.split(":", 1)[1]) if ":" in device else 0
    return CudaComputeLibrary(ck, dev)
