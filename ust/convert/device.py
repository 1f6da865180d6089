"""Moving a tensor's buffers between the host and a GPU (``Tensor.to``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ust.runtime import xp as _xp
from ust.runtime.errors import DeviceError

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["cupy_module", "parse_device", "to_device"]


def cupy_module() -> Any:
    """CuPy, or a BackendUnavailableError that says how to install it."""
    return _xp.import_cupy()


def parse_device(device: str | int | None) -> str:
    """Normalise ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"gpu"`` or an int to ``cpu``/``cuda:N``."""
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    if not isinstance(device, str):
        dev_type = getattr(device, "type", None)  # torch.device
        if dev_type is not None:
            idx = getattr(device, "index", None)
            return parse_device(dev_type if idx is None else f"{dev_type}:{idx}")
        raise DeviceError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")
    d = device.strip().lower()
    if d == "cpu":
        return "cpu"
    if d in ("cuda", "gpu"):
        return f"cuda:{cupy_module().cuda.runtime.getDevice()}"
    for prefix in ("cuda:", "gpu:"):
        if d.startswith(prefix) and d[len(prefix) :].isdigit():
            return f"cuda:{int(d[len(prefix) :])}"
    raise DeviceError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")


def move_array(a: Any, device: str) -> Any:
    """One array on ``device`` (no copy when it is already there)."""
    if a is None:
        return None
    if device == "cpu":
        return _xp.to_host(a)
    cp = cupy_module()
    n = int(device.split(":")[1])
    if n >= cp.cuda.runtime.getDeviceCount():
        raise DeviceError(f"device {device} does not exist ({cp.cuda.runtime.getDeviceCount()} CUDA devices)")
    if _xp.is_cupy(a) and a.device.id == n:
        return a
    with cp.cuda.Device(n):
        return cp.asarray(a)


def to_device(t: Tensor, device: str | int) -> Tensor:
    dev = parse_device(device)
    if dev == t.device:
        return t
    nl = t.format.nlevels
    return t._replace(
        [move_array(t.pos(k), dev) for k in range(nl)],
        [move_array(t.crd(k), dev) for k in range(nl)],
        move_array(t.values, dev),
    )
