"""User epilogues applied in place after a library call: ``apply_epilog(result, "max(y, 0)")``.

Routes that generate a kernel fuse the epilogue into it (:func:`ust.codegen.epilog.Epilog.to_c`);
routes that call a library (SciPy, cuSPARSE, cuBLASLt) produce ``y`` first and then run the same
expression once over the result, in place, with NumPy or CuPy.  On a sparse result the
expression sees the stored values only (implicit zeros stay zero: an epilogue with
``f(0) != 0`` changes stored entries, never the structure).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["apply_epilog"]


def apply_epilog(result: Any, text: str, params: Mapping[str, Any] | None = None) -> Any:
    """Apply the epilogue ``text`` (value variable ``y``) to ``result`` in place and return it.

    ``result`` is a NumPy / CuPy array (every element) or a ust Tensor (its stored values inside
    the tensor's bounds; DIA padding stays untouched).  In place means in place: a Tensor that
    shares its values with a SciPy / CuPy object (``ust.asarray`` without a copy) changes it too.

    >>> import numpy as np
    >>> y = np.array([-1.0, 2.0])
    >>> apply_epilog(y, "max(y, 0) * s", {"s": 3})
    array([0., 6.])
    """
    from ust.codegen.epilog import compile_epilog
    from ust.tensor import Tensor

    ep = compile_epilog(text)
    if not isinstance(result, Tensor):
        return ep.apply(result, params)
    from ust.convert.analysis import drops_zeros

    vals = result.values.reshape(-1)
    if not drops_zeros(result.format) or result.format.is_dense:
        ep.apply(vals, params)
        return result
    from ust.algebra.slots import slots

    sl = slots(result)
    if sl.all_slots:
        ep.apply(vals, params)
    else:
        picked = vals[sl.slot]
        ep.apply(picked, params)
        vals[sl.slot] = picked
    return result
