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
from ust.codegen.emit_compute_cuda import (
    GROUPS,
    SPLIT,
    emit_compute_cuda,
    kernel_name,
    supports_groups,
    supports_split,
    variants,
)
from ust.codegen.emit_cuda import BLOCK
from ust.codegen.ir import Kernel
from ust.runtime.errors import DeviceError
from ust.runtime.log import get_logger

__all__ = ["CudaComputeLibrary", "cuda_library"]

_log = get_logger(__name__)
#: Most blocks of one launch (the kernels are grid-stride loops).
MAX_BLOCKS = 1 << 16
#: Rows (times output columns) below which a splittable row reduction is split across threads,
#: the threads a split launch aims for (a few waves of an H200's 132 SMs x 2048), the most parts
#: per row, and the fewest row entries per part.
SPLIT_BELOW = 1 << 16
SPLIT_THREADS = 1 << 20
MAX_PARTS = 1024
PART_ENTRIES = 16


def split_parts(items: int, work: int, rows: int, forced: int = 0) -> int:
    """How many parts each row of a splittable reduction is cut into (1: not split).

    ``items``: rows times flattened output columns; ``work``: the stored entries the rows hold;
    ``forced``: ``options={"split": S}`` (0: choose).  Few rows with long reductions are split so
    the grid has about :data:`SPLIT_THREADS` threads and each part at least :data:`PART_ENTRIES`
    entries; a large row count already fills the GPU.
    """
    if forced:
        return max(1, min(int(forced), MAX_PARTS))
    if items <= 0 or items >= SPLIT_BELOW:
        return 1
    per_row = work / max(rows, 1)
    return max(1, min(SPLIT_THREADS // items, int(per_row // PART_ENTRIES), MAX_PARTS))


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
                for g in variants(k)
            }
        self._specs: dict[str, Any] = {}
        self._grouped = {k.name for k in ck.kernels if supports_groups(k)}
        self._splittable = {k.name for k in ck.kernels if supports_split(k)}
        self._outer = f"E_{ck.order[0]}" if ck.order else ""
        self._flat: dict[str, tuple[str, ...]] = {k.name: tuple(k.info.get("flat", ())) for k in ck.kernels}  # type: ignore[arg-type]
        self.seconds = time.perf_counter() - t0
        _log.info("compute CUDA kernels: %s in %.1f ms", self.how, 1e3 * self.seconds)

    def launch(self, k: Kernel, args: Mapping[str, Any]) -> None:
        """Launch ``k``; ``args["ust_group"]`` (lanes per row: 1, 8 or 32) picks the variant of a
        row-reduction kernel, and few long rows take the split variant (:func:`split_parts`, from
        ``args["ust_work"]`` entries, or ``args["ust_split"]`` parts when forced)."""
        cp = _cupy()
        specs = self._specs.get(k.name)
        if specs is None:
            specs = self._specs[k.name] = [
                (p.name, p.kind, np.dtype(p.dtype) if p.kind == "ibuf" else np.dtype(k.value_dtype), p.const)
                for p in k.params
            ]
        vt = np.dtype(k.value_dtype)
        cargs: list[Any] = []
        for name, kind, want, const in specs:
            v = args[name]
            if kind == "iscalar":
                cargs.append(np.int64(v))
            elif kind == "vscalar":
                cargs.append(kernel_scalar(k.value_dtype, v) if vt.kind in "fc" else vt.type(v))
            else:
                if not isinstance(v, cp.ndarray):
                    raise DeviceError(
                        f"buffer {name} is not a CuPy array: every operand of a CUDA kernel must be on the GPU"
                    )
                if v.dtype != want or not v.flags.c_contiguous:
                    if not const:
                        raise DeviceError(f"output buffer {name} must be a C-contiguous {want} CuPy array")
                    v = cp.ascontiguousarray(v, dtype=want)
                cargs.append(v)
        group = int(args.get("ust_group", 1)) if k.name in self._grouped else 1
        if group not in GROUPS:
            group = 1
        rows = outer = int(args.get(self._outer, 1)) if self._outer else 1
        for v in self._flat.get(k.name, ()):
            outer *= int(args[f"E_{v}"])
        if k.name in self._splittable:
            parts = split_parts(outer, int(args.get("ust_work", 0)), rows, int(args.get("ust_split", 0)))
            if parts > 1:
                group, outer = SPLIT, outer * parts
        width = 1 if group == SPLIT else group
        blocks = max(1, min((outer * width + BLOCK - 1) // BLOCK, MAX_BLOCKS)) if self.ck.parallel else 1
        fn = self.fns[kernel_name(k, group)]
        if cp.cuda.runtime.getDevice() == self.device_id:
            fn((blocks,), (BLOCK,), tuple(cargs))
        else:
            with cp.cuda.Device(self.device_id):
                fn((blocks,), (BLOCK,), tuple(cargs))


@functools.lru_cache(maxsize=128)
def cuda_library(ck: ComputeKernels, device: str) -> CudaComputeLibrary:
    """The loaded kernels of ``ck`` on ``device`` ("cuda:N"), memoised."""
    dev = int(device.split(":", 1)[1]) if ":" in device else 0
    return CudaComputeLibrary(ck, dev)
