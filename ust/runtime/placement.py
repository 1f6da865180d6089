"""One placement for every operation: where the operands live, where the work runs, moving the
data there and handing the result back.

Operands decide the execution space (NumPy / SciPy -> the CPU, CuPy / cupyx / torch-CUDA -> their
GPU); ``execution=`` overrides it and moves the data.  The result comes back in the operands'
package and memory: those of the operand named ``home`` (dense matmul: ``a``; sparse matmul and
solve: ``b``), or, without one, the memory the operands share (the package following the memory:
NumPy <-> CuPy, torch stays torch; a Tensor comes back on that device).  ``ust.algebra``,
``ust.dense``, ``ust.matmul`` / ``ust.Matmul`` and ``ust.solve`` / ``ust.DirectSolver`` all place
their operands through :class:`Placement`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ust.runtime.errors import DeviceError
from ust.runtime.spaces import (
    ExecutionSpace,
    log_placement,
    operand_package,
    operand_space,
    parse_execution,
    resolve_space,
    to_package,
    to_space,
)

__all__ = ["Placement", "device_name", "is_planning_only", "planning_only"]

#: True inside :func:`planning_only`: placements plan but neither check a GPU nor move data.
_PLANNING_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("ust_planning_only", default=False)


@contextlib.contextmanager
def planning_only() -> Iterator[None]:
    """Within this block, placements only plan (``ust.explain``): a GPU execution space need
    not answer and nothing moves, because the planner's rules depend on the execution space's
    kind, never on the machine.  Tensors are seen "as if" on the execution device
    (:class:`_OnDevice`); dense arrays stay where they are."""
    token = _PLANNING_ONLY.set(True)
    try:
        yield
    finally:
        _PLANNING_ONLY.reset(token)


def is_planning_only() -> bool:
    """Whether the caller runs inside :func:`planning_only`."""
    return _PLANNING_ONLY.get()


class _OnDevice:
    """A Tensor as planning sees it on another device: the tensor's attributes, that device's name
    (its buffers stay where they are; nothing may run on them)."""

    __slots__ = ("_device", "_tensor")

    def __init__(self, tensor: Any, device: str) -> None:
        self._tensor = tensor
        self._device = device

    @property
    def device(self) -> str:
        return self._device

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tensor, name)


#: The dense package a result of each home package comes back in (sparse homes: their dense twin).
_DENSE_PACKAGE = {"numpy": "numpy", "scipy": "numpy", "cupy": "cupy", "cupyx": "cupy", "torch": "torch"}


def device_name(space: ExecutionSpace) -> str:
    """``"cpu"`` or ``"cuda:N"`` (a Tensor's ``device``) for a space."""
    return "cpu" if not space.is_cuda else f"cuda:{space.device_id or 0}"


class Placement:
    """Where an op's operands live (``home``, ``package``) and where it runs (``space``).

    ``operands`` maps names to operands (None entries are ignored; callers leave scalars out).
    All operands must share one space unless ``execution`` is given (else DeviceError naming
    each).  Nothing is moved or checked on a device at construction: :meth:`move` /
    :meth:`tensor` move data, :meth:`back` returns a result, :meth:`require_device` checks a
    GPU answers before work starts, :meth:`log` writes the INFO placement line.
    """

    __slots__ = ("home", "moves", "package", "space", "xp_name")

    def __init__(
        self, operands: Mapping[str, Any], execution: Any = None, *, home: str | None = None
    ) -> None:
        parse_execution(execution)  # a bad value fails first
        live = {k: v for k, v in operands.items() if v is not None}
        try:
            common: ExecutionSpace | None = resolve_space(live)
        except DeviceError:
            if execution is None:
                raise
            common = None
        space = resolve_space(live, execution) if execution is not None else common
        assert space is not None
        self.space: ExecutionSpace = space
        ref = live.get(home) if home is not None else None
        if ref is not None:
            self.home: ExecutionSpace = operand_space(ref)
            self.package: str | None = operand_package(ref)
        else:
            self.home = common if common is not None else space
            self.package = None
        #: "cupy" or "numpy": the array package of the execution space
        self.xp_name = "cupy" if space.is_cuda else "numpy"
        #: whether anything moves: data to the execution space, or the result back
        self.moves = self.space != self.home or (
            self.package is not None and _DENSE_PACKAGE.get(self.package) != self.xp_name
        )

    # ----------------------------------------------------------------------------------- facts

    @property
    def device(self) -> str:
        """The execution space as a Tensor's ``device``: ``"cpu"`` or ``"cuda:N"``."""
        return device_name(self.space)

    @property
    def device_id(self) -> int:
        return self.space.device_id or 0

    def log(self, logger: logging.Logger) -> None:
        """The INFO line: "operands are in cpu memory; the execution space is cuda device 0"."""
        log_placement(logger, self.home, self.space)

    def require_device(self) -> None:
        """A GPU execution space the operands are not on must answer (DeviceError /
        BackendUnavailableError naming the pip extra, before any work)."""
        if self.space.is_cuda and self.space != self.home and not _PLANNING_ONLY.get():
            from ust.runtime.xp import require_device

            require_device(self.space.device_id)

    def check(self, name: str, x: Any) -> None:
        """A later operand (a bias, a reset one) must live where the others did."""
        if x is None:
            return
        space = operand_space(x)
        if space != self.home:
            raise DeviceError(
                f"operand {name} is on {space}, but the other operands are on {self.home}; move it, or "
                "pass execution= to choose where to run"
            )

    # ----------------------------------------------------------------------------------- moving

    def move(self, x: Any, logger: logging.Logger | None = None, what: str = "") -> Any:
        """A dense array as a NumPy (CPU) or CuPy (GPU) array in the execution space (no copy
        when it already is one there); ``logger`` gets an INFO line for bytes that crossed a bus."""
        if x is None:
            return None
        moved = to_package(x, self.xp_name, self.space)
        _log_transfer(logger, moved, what, "to", self.space)
        return moved.array

    def tensor(self, t: Any) -> Any:
        """A Tensor on the execution space's device (inside :func:`planning_only`: seen there, not moved)."""
        if t.device == self.device:
            return t
        return _OnDevice(t, self.device) if _PLANNING_ONLY.get() else t.to(self.device)

    def back(self, result: Any, logger: logging.Logger | None = None, what: str = "") -> Any:
        """The result in the operands' package and memory (no copy when it already is there);
        ``logger`` gets an INFO line for bytes that crossed a bus."""
        if not self.moves:
            return result
        if isinstance(result, (numbers.Number, np.generic)):
            return result
        if operand_package(result) == "ust":
            return result.to(device_name(self.home))
        if self.package is None:
            moved = to_space(result, self.home)
        else:
            moved = to_package(result, _DENSE_PACKAGE.get(self.package, self.package), self.home)
        _log_transfer(logger, moved, what, "back to", self.home)
        return moved.array

    def stream(self, stream: Any = None) -> int:
        """The ``cudaStream_t`` to run on: ``stream`` if given, else CuPy's current stream on the
        execution device (0 on the CPU)."""
        if not self.space.is_cuda:
            return 0
        from ust.runtime.streams import current_stream, stream_pointer

        if stream is not None:
            return stream_pointer(stream)
        from ust.runtime.xp import import_cupy

        cupy = import_cupy()
        if self.device_id == cupy.cuda.runtime.getDevice():  # the common case: no device switch
            return int(cupy.cuda.get_current_stream().ptr)
        return int(current_stream("cupy", self.device_id).ptr)


def _log_transfer(logger: logging.Logger | None, moved: Any, what: str, direction: str, space: Any) -> None:
    """The INFO line for bytes that crossed a bus (nothing when none did or no logger is given)."""
    if moved.nbytes and logger is not None:
        logger.info(
            "moved %d bytes%s %s %s in %.3f ms",
            moved.nbytes,
            f" of {what}" if what else "",
            direction,
            space.describe(),
            1e3 * moved.seconds,
        )
