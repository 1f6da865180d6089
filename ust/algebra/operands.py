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
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.runtime.placement import Placement as _Placement
from ust.runtime.placement import is_planning_only
from ust.runtime.spaces import ExecutionSpace, operand_space, to_package

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
    arr = to_package(
        x, "cupy" if space.is_cuda else "numpy", space
    ).array  # torch: viewed through NumPy / CuPy
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


class Placement(_Placement):
    """Where an op runs (``space``) and where its result goes back to (``home``): the one
    :class:`ust.runtime.placement.Placement`, with scalars left out and dense operands checked."""

    __slots__ = ()

    def __init__(self, operands: Mapping[str, Any], execution: Any = None) -> None:
        live = {k: v for k, v in operands.items() if v is not None and kind(v) != SCALAR}
        super().__init__(live, execution)
        self.require_device()

    def dense(self, x: Any) -> Any:
        if is_planning_only():  # ust.explain: the array stays where it is (nothing runs on it)
            return as_dense(x, operand_space(np.asarray(x) if isinstance(x, (list, tuple)) else x))
        return as_dense(x, self.space)


def place(operands: Mapping[str, Any], execution: Any = None) -> Placement:
    """The placement of an op on ``operands`` (DeviceError when they are on different devices)."""
    return Placement(operands, execution)
