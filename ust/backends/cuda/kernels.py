"""Generated CUDA kernels: NVRTC compile (cubin cached on disk), CuPy load, launch.

The first request for a (format, op, layout, order, dtypes, threads-per-row, architecture)
lowers the op, emits CUDA, compiles it with NVRTC through ctypes (the same call and options
CI uses, :mod:`ust.backends.cuda.nvrtc`), stores the cubin in ust's authenticated artefact
cache and loads it with ``cupy.RawModule(path=...)`` from a private copy of the verified bytes.
Where ust's own NVRTC binding cannot find the library, or the cubin does not load on this
driver, ``cupy.RawModule(code=..., options=...)`` (CuPy's NVRTC and cache) is used instead.  Later requests are an in-process dict look-up.
CuPy is imported only inside these functions.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ust.backends.generated.disk_cache import ArtifactCache, private_copy
from ust.backends.generated.launch import Launch, array_layout, kernel_scalar, prepare
from ust.codegen.cache import Memo, content_key
from ust.codegen.emit_cuda import (
    BLOCK,
    NNZ_CHUNK,
    NVRTC_OPTIONS,
    cuda_kernel_name,
    emit_cuda,
    init_params,
    supports_group,
)
from ust.codegen.ir import Kernel
from ust.codegen.lower import kernel_info, lower
from ust.formats.model import Format
from ust.runtime.errors import BackendUnavailableError, DeviceError
from ust.runtime.log import get_logger

__all__ = [
    "DOT_MAX_BLOCKS",
    "BoundLaunch",
    "CudaKernel",
    "bind_launch_cuda",
    "bind_spmv_dot",
    "cuda_kernel",
    "matmul_cuda",
    "nvrtc_options",
    "run_launch_cuda",
]

_log = get_logger("backends.cuda.kernels")
_log.addHandler(logging.NullHandler())
_memo = Memo()
_MAX_GRID_X = 1 << 22
_MAX_GRID_Y = 65535


def _cupy() -> Any:
    try:
        import cupy
    except Exception as exc:  # pragma: no cover - depends on the machine
        raise BackendUnavailableError(
            f"CuPy is needed for generated CUDA kernels ({exc})", pip_command="pip install cupy-cuda13x"
        ) from exc
    return cupy


def nvrtc_options(arch: str) -> tuple[str, ...]:
    """The NVRTC options of a run-time compile for compute capability ``arch`` (e.g. "90")."""
    return (*NVRTC_OPTIONS, f"--gpu-architecture=sm_{arch}")


class CudaKernel:
    """A loaded generated kernel (and its init kernel) with timing facts."""

    def __init__(
        self, kernel: Kernel, group: int, module: Any, seconds: float, how: str, dot: bool = False
    ) -> None:
        self.kernel = kernel
        self.group = group
        self.module = module
        self.dot = dot
        self.name = cuda_kernel_name(kernel, group, dot)
        self.main = module.get_function(self.name)
        self.init = module.get_function(self.name + "_init") if kernel.init is not None else None
        self.load_seconds = seconds
        self.how = how  # "compiled", "cache", "cupy"


def _load_module(source: str, arch: str, name: str) -> tuple[Any, str]:
    cp = _cupy()
    try:
        from ust.backends.cuda.nvrtc import compile_cuda, nvrtc_version

        opts = nvrtc_options(arch)
        key = content_key(source, "nvrtc", repr(nvrtc_version()), opts)
        art = ArtifactCache("cuda").get_or_build(
            key, ".cubin", lambda: compile_cuda(source, opts, name=f"{name}.cu")
        )
        # load the verified bytes from a private copy, never the cache file (it could be swapped)
        mod = cp.RawModule(path=str(private_copy(art.data, f"{key}.cubin")))
        mod.get_function(name)  # loads the module now: a driver that rejects the cubin fails here
        return mod, "compiled" if art.built else "cache"
    except BackendUnavailableError as exc:
        _log.info("ust's NVRTC binding is unavailable (%s); compiling through CuPy", exc)
    except cp.cuda.driver.CUDADriverError as exc:
        _log.warning("the driver rejected the NVRTC cubin (%s); compiling through CuPy instead", exc)
    return cp.RawModule(code=source, options=NVRTC_OPTIONS), "cupy"


def _arch(device_id: int) -> str:
    cp = _cupy()
    return str(cp.cuda.Device(device_id).compute_capability)


def cuda_kernel(
    fmt: Format,
    op: str,
    layout: str,
    order: str,
    value_dtype: str,
    index_dtype: str,
    itype: str,
    group: int = 1,
    device_id: int | None = None,
    balance: str = "none",
    dot: bool = False,
) -> CudaKernel:
    """The loaded kernel for a request (memoised per device architecture); ``balance="nnz"``
    is the nnz split with a segmented reduction, ``dot`` the SpMV that also writes the block
    partial sums of ``x^H y`` (:mod:`ust.codegen.emit_cuda`)."""
    cp = _cupy()
    dev = cp.cuda.Device().id if device_id is None else device_id
    layout = layout if op == "mm" else "row"
    key = ("cuda", fmt, op, layout, order, value_dtype, index_dtype, itype, group, dev, balance, dot)

    def build() -> CudaKernel:
        t0 = time.perf_counter()
        k = lower(
            fmt,
            op,
            layout=layout,
            order=order,
            value_dtype=value_dtype,
            index_dtype=index_dtype,
            itype=itype,
            balance=balance,
        )
        g = group if supports_group(k) and not dot else 1
        src = emit_cuda(k, group=g, dot=dot)
        with cp.cuda.Device(dev):
            mod, how = _load_module(src, _arch(dev), cuda_kernel_name(k, g, dot))
            ck = CudaKernel(k, g, mod, time.perf_counter() - t0, how, dot)
        _log.info("CUDA kernel %s: %s in %.1f ms", ck.name, how, 1e3 * ck.load_seconds)
        return ck

    return _memo.get(key, build)


def _empty(cp: Any, shape: tuple[int, ...], dtype: str, layout: str) -> Any:
    if layout == "col" and len(shape) >= 2:
        return cp.empty((*shape[:-2], shape[-1], shape[-2]), dtype=dtype).swapaxes(-1, -2)
    return cp.empty(shape, dtype=dtype)


def _extent(fmt: Format, launch: Launch, kind: str, arg: int) -> int:
    if kind == "D":
        return launch.scalars[f"D{arg}"]
    if kind == "S":
        return launch.scalars[f"S{arg}"]
    return launch.scalars[f"BC{arg}"]


def _args(ck: CudaKernel, launch: Launch, y: Any, params: tuple[Any, ...]) -> list[Any]:
    cp = _cupy()
    k = ck.kernel
    itype = np.dtype(k.itype).type
    vals = launch.args(k, y)
    out: list[Any] = []
    for p in params:
        v = vals[p.name]
        if p.kind == "iscalar":
            out.append(itype(v))
        elif p.kind == "vscalar":
            out.append(kernel_scalar(k.value_dtype, v))
        else:
            if not isinstance(v, cp.ndarray):
                raise DeviceError(
                    f"buffer {p.name} is not a CuPy array: every operand of a CUDA kernel must be on the GPU"
                )
            want = np.dtype(p.dtype) if p.kind == "ibuf" else np.dtype(k.value_dtype)
            if p.name not in ("x", "y0", "y"):
                v = cp.ascontiguousarray(v, dtype=want)
            elif v.dtype != want:
                raise DeviceError(f"buffer {p.name} has dtype {v.dtype}, expected {want}")
            elif array_layout(v) is None:  # launch.prepare lays x / y0 out; y is chosen to fit
                raise DeviceError(f"buffer {p.name} is strided: the kernel reads it contiguously")
            out.append(v)
    return out


class BoundLaunch:
    """A launch with every argument and grid computed once: calling it only enqueues kernels.

    ``target`` is the array the kernel writes (``out`` itself when it fits).
    """

    def __init__(
        self,
        steps: list[tuple[Any, tuple[int, int, int], list[Any]]],
        target: Any,
        device: int,
        slots: list[dict[str, int]] | None = None,
    ) -> None:
        self.steps = steps
        self.target = target
        self.device = device
        #: per step, the argument positions of the dense operands ``x``, ``y0`` and ``y``
        self.slots = slots if slots is not None else [{} for _ in steps]

    def rebound(self, x: Any, y0: Any, target: Any = None) -> BoundLaunch:
        """The same launch on other dense operands of the same shape, dtype, layout and device
        (only their pointers change: no re-planning, no re-marshalled format buffers), as a
        one-shot call on new operands needs it; ``target`` None: a new result like the last
        (C-contiguous results only)."""
        if target is None:
            if not self.target.flags.c_contiguous:
                raise ValueError("a new result is made for C-contiguous results only")
            cp = _cupy()
            with cp.cuda.Device(self.device):
                target = cp.empty(self.target.shape, dtype=self.target.dtype)
        steps = []
        for (fn, grid, args), slots in zip(self.steps, self.slots, strict=True):
            new = list(args)
            for name, arr in (("x", x), ("y0", y0), ("y", target)):
                at = slots.get(name)
                if at is not None:
                    new[at] = arr
            steps.append((fn, grid, new))
        return BoundLaunch(steps, target, self.device, self.slots)

    def __call__(self, stream: int = 0) -> Any:
        cp = _cupy()
        with cp.cuda.Device(self.device):
            s = cp.cuda.ExternalStream(stream) if stream else cp.cuda.get_current_stream()
            with s:
                for fn, grid, args in self.steps:
                    fn(grid, (BLOCK,), args)
        return self.target


def bind_launch_cuda(
    fmt: Format,
    launch: Launch,
    out: Any = None,
    order: str = "auto",
    group: int = 1,
    itype: str | None = None,
    balance: str = "none",
) -> BoundLaunch:
    """Compile (or fetch) the kernel and fix its arguments and grid for ``launch``."""
    cp = _cupy()
    dev = launch.buffers["val"].device.id
    with cp.cuda.Device(dev):
        ck = cuda_kernel(
            fmt,
            launch.op,
            launch.layout,
            order,
            launch.dtype,
            launch.index_dtype,
            itype or launch.itype(group),
            group,
            dev,
            balance,
        )
        target = out
        if (
            target is None
            or not isinstance(target, cp.ndarray)
            or target.dtype != np.dtype(launch.dtype)
            or array_layout(target) != launch.layout
        ):
            target = _empty(cp, launch.out_shape, launch.dtype, launch.layout)
        steps: list[tuple[Any, tuple[int, int, int], list[Any]]] = []
        slots: list[dict[str, int]] = []
        if target.size:
            info = kernel_info(ck.kernel)
            if ck.init is not None:
                ny = launch.scalars["NY"]
                grid = (max(1, min(-(-ny // BLOCK), _MAX_GRID_X)), 1, 1)
                steps.append((ck.init, grid, _args(ck, launch, target, init_params(ck.kernel))))
                slots.append(_operand_slots(init_params(ck.kernel)))
            total = ck.group
            for kind, arg in info.par_extents:
                total *= _extent(fmt, launch, kind, arg)
            if info.balance == "nnz":  # one warp per NNZ_CHUNK entries of the weighing level
                total = 32 * -(-launch.scalars[f"BC{info.balance_level}"] // NNZ_CHUNK)
            if info.col_par:
                total *= launch.ncols
            nb = launch.scalars["NB"] if info.batch else 1
            if total > 0 and nb > 0:
                grid = (max(1, min(-(-total // BLOCK), _MAX_GRID_X)), max(1, min(nb, _MAX_GRID_Y)), 1)
                steps.append((ck.main, grid, _args(ck, launch, target, ck.kernel.params)))
                slots.append(_operand_slots(ck.kernel.params))
    return BoundLaunch(steps, target, dev, slots)


def _operand_slots(params: tuple[Any, ...]) -> dict[str, int]:
    """Where the dense operands sit among a kernel's arguments (see :meth:`BoundLaunch.rebound`)."""
    return {p.name: i for i, p in enumerate(params) if p.name in ("x", "y0", "y")}


#: Blocks of an SpMV-with-dot launch at most (grid-stride beyond): its partial sums fit the
#: Krylov workspace (:data:`ust.backends.cuda.krylov_kernels.MAX_BLOCKS`).
DOT_MAX_BLOCKS = 1024


def bind_spmv_dot(fmt: Format, launch: Launch, out: Any, order: str, part: Any) -> tuple[BoundLaunch, int]:
    """``out = A @ x`` through the ``dot`` kernel (:func:`ust.codegen.emit_cuda.supports_dot`),
    which also writes block ``b``'s partial sum of ``conj(x) out`` to ``part[b]``: the bound
    launch and the number of partials.  ``A`` must be square; ``out`` a C-contiguous vector
    of the launch's dtype; ``part`` one of at least :data:`DOT_MAX_BLOCKS` entries."""
    cp = _cupy()
    dev = launch.buffers["val"].device.id
    if launch.op != "mv" or launch.scalars.get("D0") != launch.scalars.get("D1"):
        raise DeviceError("an SpMV with a dot product needs a square A and a vector x")
    with cp.cuda.Device(dev):
        ck = cuda_kernel(
            fmt, "mv", "row", order, launch.dtype, launch.index_dtype, launch.itype(1), 1, dev, "none", True
        )
        if not (
            isinstance(out, cp.ndarray) and out.dtype == np.dtype(launch.dtype) and out.flags.c_contiguous
        ):
            raise DeviceError("the SpMV-with-dot output must be a C-contiguous vector of the launch's dtype")
        info = kernel_info(ck.kernel)
        total = 1
        for kind, arg in info.par_extents:
            total *= _extent(fmt, launch, kind, arg)
        nb = max(1, min(-(-total // BLOCK), DOT_MAX_BLOCKS))
        if part.size < nb or part.dtype != out.dtype:
            raise DeviceError(f"the partial-sum buffer needs {nb} entries of {out.dtype}")
        args = [*_args(ck, launch, out, ck.kernel.params), part]
        return BoundLaunch([(ck.main, (nb, 1, 1), args)], out, dev), nb


def run_launch_cuda(
    fmt: Format,
    launch: Launch,
    out: Any = None,
    order: str = "auto",
    group: int = 1,
    stream: int = 0,
    itype: str | None = None,
    balance: str = "none",
) -> Any:
    """Run a prepared launch through the generated CUDA kernel (on ``stream``, a raw pointer).

    ``itype`` forces the kernel's index arithmetic type (default: int32 where sizes allow).
    """
    bound = bind_launch_cuda(fmt, launch, out, order, group, itype, balance)
    target = bound(stream)
    if out is not None and target is not out:
        out[...] = target
        return out
    return target


def matmul_cuda(
    a: Any,
    x: Any,
    c: Any = None,
    *,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    out: Any = None,
    order: str = "auto",
    group: int | None = None,
    stream: int = 0,
    balance: str = "none",
) -> Any:
    """``alpha * a @ x + beta * c`` through the generated CUDA kernel (every operand on the GPU).

    ``order="auto"`` takes the GPU's default loop order (:func:`ust.codegen.schedule.cuda_order`);
    ``balance="nnz"`` the nnz-split kernel."""
    from ust.codegen.schedule import cuda_order, default_group

    launch = prepare(a, x, c, alpha=alpha, beta=beta, out=out)
    if order == "auto":
        order = cuda_order(a.format, launch.op)
    g = 1 if balance == "nnz" else (group if group is not None else default_group(a, launch.op, order))
    return run_launch_cuda(a.format, launch, out, order, g, stream, balance=balance)
