"""Execution spaces: where operands live, where an operation runs, and moving dense data between them.

Operands decide the execution space by default (NumPy/SciPy -> the CPU, CuPy/torch-CUDA -> their
GPU); an ``execution=`` argument overrides them.  Packages are recognised by the module name of
an operand's type, so nothing here imports CuPy or torch unless an operand of theirs is present
or a transfer needs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ust.runtime.errors import DeviceError, UnsupportedError

__all__ = [
    "CPU",
    "PACKAGES",
    "ExecutionSpace",
    "Moved",
    "log_placement",
    "operand_package",
    "operand_space",
    "parse_execution",
    "resolve_space",
    "to_package",
    "to_space",
]


@dataclass(frozen=True)
class ExecutionSpace:
    """A place where data lives and work runs: the CPU, or one CUDA device.

    ``device_id`` is None for the CPU, and for ``"cuda"`` given without an index until
    :func:`resolve_space` pins it (to the operands' device, else device 0).
    """

    kind: str = "cpu"
    device_id: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise DeviceError(f"unknown execution space kind {self.kind!r}; supported: 'cpu', 'cuda'")
        if self.kind == "cpu" and self.device_id is not None:
            raise DeviceError("the cpu execution space takes no device id")
        if self.device_id is not None and (not isinstance(self.device_id, int) or self.device_id < 0):
            raise DeviceError(f"CUDA device id must be a non-negative int, not {self.device_id!r}")

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        if self.kind == "cpu":
            return "cpu"
        return "cuda" if self.device_id is None else f"cuda:{self.device_id}"

    def describe(self) -> str:
        """Words for log lines: ``"cpu"`` or ``"cuda device 0"``."""
        if self.kind == "cpu":
            return "cpu"
        return "cuda device" if self.device_id is None else f"cuda device {self.device_id}"


CPU = ExecutionSpace("cpu")


def parse_execution(value: Any) -> ExecutionSpace | None:
    """Read an ``execution=`` argument: None, "cpu", "cuda", "cuda:N", an int N, a dict or a space."""
    if value is None or isinstance(value, ExecutionSpace):
        return value
    if isinstance(value, bool):
        raise DeviceError(f"execution must be 'cpu', 'cuda', 'cuda:N' or a device index, not {value!r}")
    if isinstance(value, int):
        return ExecutionSpace("cuda", value)
    if isinstance(value, Mapping):
        name = value.get("name", value.get("kind"))
        return ExecutionSpace(str(name).lower(), value.get("device_id")) if name else parse_execution(None)
    if isinstance(value, str):
        text = value.strip().lower()
        kind, _, index = text.partition(":")
        if kind in ("cpu", "cuda") and (not index or (kind == "cuda" and index.isdigit())):
            return ExecutionSpace(kind, int(index) if index else None)
    raise DeviceError(f"execution must be 'cpu', 'cuda', 'cuda:N' or a device index, not {value!r}")


# Top-level module of an operand's type -> package name.  Python scalars and sequences are array-likes
# that NumPy takes.
_MODULE_PACKAGE = {
    "numpy": "numpy",
    "builtins": "numpy",
    "scipy": "scipy",
    "cupy": "cupy",
    "cupyx": "cupyx",
    "torch": "torch",
    "ust": "ust",
}
PACKAGES = ("numpy", "scipy", "cupy", "cupyx", "torch", "ust")


def operand_package(x: Any) -> str:
    """The package an operand belongs to, read from its type's module (imports nothing)."""
    top = type(x).__module__.partition(".")[0]
    try:
        return _MODULE_PACKAGE[top]
    except KeyError:
        raise UnsupportedError(
            f"operands of type {type(x).__module__}.{type(x).__qualname__} are not supported; "
            "supported: NumPy arrays, SciPy sparse, CuPy arrays, cupyx sparse, torch tensors, ust Tensors"
        ) from None


def _cupy_space(x: Any) -> ExecutionSpace:
    if type(x).__module__.startswith("cupyx"):  # cupyx sparse: ``.device`` raises NotImplementedError
        dev = x.data.device
    else:
        dev = x.device
    return ExecutionSpace("cuda", int(dev.id))


def _torch_space(x: Any) -> ExecutionSpace:
    dev = x.device
    if dev.type == "cpu":
        return CPU
    if dev.type == "cuda":
        return ExecutionSpace("cuda", 0 if dev.index is None else int(dev.index))
    raise DeviceError(f"torch tensors on {dev} are not supported; supported: cpu and cuda tensors")


def _ust_space(x: Any) -> ExecutionSpace:
    space = parse_execution(getattr(x, "device", "cpu"))
    assert space is not None
    return space if space.kind == "cpu" or space.device_id is not None else ExecutionSpace("cuda", 0)


_SPACE_OF = {
    "numpy": lambda x: CPU,
    "scipy": lambda x: CPU,
    "cupy": _cupy_space,
    "cupyx": _cupy_space,
    "torch": _torch_space,
    "ust": _ust_space,
}


def operand_space(x: Any) -> ExecutionSpace:
    """Where an operand's memory is: the CPU or a CUDA device with its index."""
    return _SPACE_OF[operand_package(x)](x)


def resolve_space(operands: Mapping[str, Any] | Sequence[Any], execution: Any = None) -> ExecutionSpace:
    """The execution space for an operation on ``operands``.

    ``execution`` wins when given (a bare ``"cuda"`` takes the operands' CUDA device, else
    device 0).  Otherwise all operands (None entries ignored) must share one space, or a
    DeviceError names each operand's device.
    """
    named = (
        dict(operands)
        if isinstance(operands, Mapping)
        else {f"operand {i}": x for i, x in enumerate(operands)}
    )
    spaces = {name: operand_space(x) for name, x in named.items() if x is not None}
    wanted = parse_execution(execution)
    distinct = set(spaces.values())
    if wanted is not None:
        if wanted.kind == "cuda" and wanted.device_id is None:
            cuda_ids = sorted({s.device_id for s in distinct if s.is_cuda and s.device_id is not None})
            return ExecutionSpace("cuda", cuda_ids[0] if len(cuda_ids) == 1 else 0)
        return wanted
    if len(distinct) > 1:
        where = ", ".join(f"{name} is on {space}" for name, space in spaces.items())
        raise DeviceError(
            f"operands are on different devices ({where}); move them to one device or pass "
            "execution='cpu' / 'cuda:N' to choose where to run"
        )
    return distinct.pop() if distinct else CPU


def log_placement(
    logger: logging.Logger, operands_space: ExecutionSpace, execution_space: ExecutionSpace
) -> None:
    """The INFO line saying where operands live and where the work runs."""
    if logger.isEnabledFor(logging.INFO):
        memory = (
            "cpu memory" if operands_space.kind == "cpu" else f"the memory of {operands_space.describe()}"
        )
        logger.info("operands are in %s; the execution space is %s", memory, execution_space.describe())


# ----------------------------------------------------------------------------------------- transfers


class Moved(NamedTuple):
    """An array after a move, with the bytes that crossed a bus (0 when nothing moved) and the seconds."""

    array: Any
    nbytes: int
    seconds: float


_DENSE_PACKAGES = ("numpy", "cupy", "torch")


def _nbytes(x: Any) -> int:
    n = getattr(x, "nbytes", None)
    if n is None:  # torch
        n = x.numel() * x.element_size()
    return int(n)


#: Transfers of at least this many bytes go through page-locked (pinned) host memory from
#: CuPy's pinned pool: a pageable 8 MB copy runs at 4-9 GB/s, a pinned one near the PCIe/C2C
#: link's rate.  Smaller ones are not worth a pool block.
PINNED_MIN_BYTES = 1 << 20


def _pinned_like(shape: tuple[int, ...], dtype: Any, order: str = "C") -> Any:
    import cupyx

    return cupyx.empty_pinned(shape, dtype=dtype, order=order)


def _to_numpy(x: Any, pkg: str) -> Any:
    import numpy as np

    if pkg == "cupy":
        if x.nbytes >= PINNED_MIN_BYTES and (x.flags.c_contiguous or x.flags.f_contiguous):
            out = _pinned_like(x.shape, x.dtype, "C" if x.flags.c_contiguous else "F")
            return x.get(out=out)
        return x.get()
    if pkg == "torch":
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _to_cupy(x: Any, pkg: str, device_id: int) -> Any:
    import cupy

    with cupy.cuda.Device(device_id):
        if pkg == "torch":
            t = x.detach()
            if t.device.type == "cuda":
                return cupy.asarray(cupy.from_dlpack(t))  # same device: zero copy; another: copied
            return cupy.asarray(t.numpy())
        if x.nbytes >= PINNED_MIN_BYTES and x.flags.c_contiguous:
            return _staged_upload(cupy, x)
        return cupy.asarray(x)


_STAGE_CHUNK = 1 << 20


def _staged_upload(cupy: Any, x: Any) -> Any:
    """A host -> device copy through two pinned 1 MiB blocks, each block's copy into pinned
    memory overlapping the DMA of the other (a pageable copy does the two one after another)."""
    import ctypes

    import numpy as np

    out = cupy.empty(x.shape, dtype=x.dtype)
    src = x.reshape(-1).view(np.uint8)
    blocks = [_pinned_like((_STAGE_CHUNK,), np.uint8) for _ in range(2)]
    done: list[Any] = [None, None]
    stream = cupy.cuda.get_current_stream()
    for k, start in enumerate(range(0, src.shape[0], _STAGE_CHUNK)):
        block, n = blocks[k % 2], min(_STAGE_CHUNK, src.shape[0] - start)
        if done[k % 2] is not None:
            done[k % 2].synchronize()  # the DMA out of this block has finished
        block[:n] = src[start : start + n]
        (out.data + start).copy_from_host_async(block.ctypes.data_as(ctypes.c_void_p), n, stream)
        done[k % 2] = stream.record()
    stream.synchronize()  # the pinned blocks go back to the pool next
    return out


def _to_torch(x: Any, pkg: str, space: ExecutionSpace) -> Any:
    import torch

    device = "cpu" if space.kind == "cpu" else f"cuda:{space.device_id or 0}"
    if pkg == "cupy":
        t = torch.from_dlpack(x)
        return t.to(device)
    if pkg == "numpy":
        import numpy as np

        return torch.from_numpy(np.asarray(x)).to(device)
    return x.to(device)


def to_package(array: Any, package: str, space: ExecutionSpace) -> Moved:
    """``array`` as a dense array of ``package`` ("numpy" / "cupy" / "torch") in ``space``.

    Returns the array unchanged when it already is there (no copy), else a copy.
    """
    src_pkg = operand_package(array)
    if src_pkg not in _DENSE_PACKAGES or package not in _DENSE_PACKAGES:
        raise UnsupportedError(
            f"dense transfer from {src_pkg} to {package} is not supported; supported packages: numpy, cupy, torch"
        )
    if (package == "numpy" and space.is_cuda) or (package == "cupy" and not space.is_cuda):
        raise DeviceError(f"{package} arrays cannot live in {space.describe()} memory")
    src_space = operand_space(array)
    if src_pkg == package and src_space == space:
        return Moved(array, 0, 0.0)
    t0 = time.perf_counter()
    if package == "numpy":
        out = _to_numpy(array, src_pkg)
    elif package == "cupy":
        out = _to_cupy(array, src_pkg, space.device_id or 0)
    else:
        out = _to_torch(array, src_pkg, space)
    if space.is_cuda or src_space.is_cuda:
        _synchronize(out if space.is_cuda else array)
    moved = _nbytes(array) if src_space != space else 0
    return Moved(out, moved, time.perf_counter() - t0)


def to_space(array: Any, space: ExecutionSpace) -> Moved:
    """``array`` moved to ``space``: torch stays torch, NumPy <-> CuPy switch with the memory."""
    pkg = operand_package(array)
    if pkg == "torch":
        return to_package(array, "torch", space)
    return to_package(array, "cupy" if space.is_cuda else "numpy", space)


def _synchronize(x: Any) -> None:
    """Wait for a transfer so its time is real (CuPy and torch copies may be asynchronous)."""
    pkg = operand_package(x)
    if pkg == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    elif pkg == "torch" and x.device.type == "cuda":
        import torch

        torch.cuda.synchronize(x.device)
