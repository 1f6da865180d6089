"""What an operand of an algebra op is (a sparse tensor, a dense array or a scalar) and where it runs.

Operands decide the execution space (NumPy / SciPy on the CPU, CuPy / cupyx on their GPU);
``execution=`` overrides it and moves the data there, and the result comes back to the
operands' own memory space.  Scalars never take part in that decision.  Every check here runs
before any work, and raises an error of ust's hierarchy.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ust.runtime import xp as _xp
from ust.runtime.errors import DeviceError, ShapeError, UnsupportedError
from ust.runtime.spaces import ExecutionSpace, operand_package, parse_execution, resolve_space, to_space

__all__ = [
    "DENSE",
    "SCALAR",
    "SPARSE",
    "Placement",
    "as_dense",
    "as_tensor",
    "check_same_shape",
    "kind",
    "place",
    "require_2d",
]

SPARSE, DENSE, SCALAR = "sparse", "dense", "scalar"

_SUPPORTED = (
    "ust Tensors, scipy.sparse / cupyx.scipy.sparse matrices and arrays, torch sparse tensors, "
    "NumPy / CuPy / torch dense arrays and Python or NumPy scalars"
)


def kind(x: Any) -> str:
    """``"sparse"``, ``"dense"`` or ``"scalar"`` (UnsupportedError for anything else)."""
    from ust.tensor import Tensor

    if isinstance(x, Tensor):
        return SPARSE
    if isinstance(x, (numbers.Number, np.generic)):
        return SCALAR
    if isinstance(x, np.ndarray) or _xp.is_cupy(x):
        return SCALAR if x.ndim == 0 else DENSE
    mod = type(x).__module__.split(".", 1)[0]
    if mod in ("scipy", "cupyx"):
        return SPARSE
    if mod == "torch":
        return DENSE if str(getattr(x, "layout", "")) == "torch.strided" else SPARSE
    if isinstance(x, (list, tuple)):
        return DENSE
    raise UnsupportedError(
        f"operands of type {type(x).__module__}.{type(x).__qualname__} are not supported; supported: {_SUPPORTED}"
    )


def as_tensor(x: Any) -> Any:
    """A sparse operand as a ust Tensor (scipy / cupyx / torch buffers shared where they map 1:1)."""
    from ust.convert import asarray
    from ust.tensor import Tensor

    return x if isinstance(x, Tensor) else asarray(x)


def as_dense(x: Any, space: ExecutionSpace) -> Any:
    """A dense operand as a NumPy (CPU) or CuPy (GPU) array in ``space`` (no copy when it is there)."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    arr = to_space(x, space).array
    if operand_package(arr) == "torch":  # to_space keeps torch as torch: view it through NumPy / CuPy
        from ust.runtime.spaces import to_package

        arr = to_package(arr, "cupy" if space.is_cuda else "numpy", space).array
    if np.dtype(arr.dtype).kind not in "iufc":
        raise UnsupportedError(
            f"dense operand of dtype {arr.dtype}; supported: integer, float or complex dtypes"
        )
    return arr


def require_2d(t: Any, op: str) -> None:
    if t.ndim != 2:
        raise UnsupportedError(
            f"{op} needs a 2-D (matrix) operand, got a {t.ndim}-D tensor of shape {t.shape}"
        )
    if t.is_batched:
        raise UnsupportedError(
            f"{op} does not take batched formats ({t.format.map_text()}); supported: 2-D formats"
        )


def check_same_shape(op: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    if tuple(a_shape) != tuple(b_shape):
        raise ShapeError(f"{op}: operand shapes {tuple(a_shape)} and {tuple(b_shape)} differ")


class Placement:
    """Where an op runs (``space``) and where its result goes back to (``home``)."""

    def __init__(self, operands: Mapping[str, Any], execution: Any = None) -> None:
        live = {k: v for k, v in operands.items() if v is not None and kind(v) != SCALAR}
        try:
            home = resolve_space(live)
        except DeviceError:
            if execution is None:
                raise
            home = None
        self.space: ExecutionSpace = resolve_space(live, execution) if execution is not None else home  # type: ignore[assignment]
        self.home: ExecutionSpace = home if home is not None else self.space
        if self.space.is_cuda and self.space != self.home:
            from ust.backends.cuda.arrays import require_device

            require_device(self.space.device_id)

    @property
    def device(self) -> str:
        return "cpu" if not self.space.is_cuda else f"cuda:{self.space.device_id or 0}"

    def tensor(self, t: Any) -> Any:
        """A Tensor moved to the execution space."""
        return t if t.device == self.device else t.to(self.device)

    def dense(self, x: Any) -> Any:
        return as_dense(x, self.space)

    def back(self, result: Any) -> Any:
        """The result in the operands' memory space (no copy when it already is there)."""
        if self.home == self.space:
            return result
        from ust.tensor import Tensor

        if isinstance(result, Tensor):
            return result.to("cpu" if not self.home.is_cuda else f"cuda:{self.home.device_id or 0}")
        if isinstance(result, (numbers.Number, np.generic)):
            return result
        return to_space(result, self.home).array


def place(operands: Mapping[str, Any], execution: Any = None) -> Placement:
    """The placement of an op on ``operands`` (DeviceError when they are on different devices)."""
    parse_execution(execution)  # a bad value fails first
    return Placement(operands, execution)
