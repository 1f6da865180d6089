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

from ust.runtime.errors import DeviceError, InvalidTypeError

__all__ = ["apply_epilog", "check_epilog_params", "epilog_inputs"]


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
    check_epilog_params(params)
    params = epilog_inputs(params, result.values if isinstance(result, Tensor) else result)
    if not isinstance(result, Tensor):
        return ep.apply(result, params)
    from ust.formats.analysis import drops_zeros

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


def check_epilog_params(params: Any) -> None:
    """Refuse, before any work, parameters the epilogue could not compute with: a non-mapping,
    a name that is no string, or a value that is neither a number nor a numeric array(-like)."""
    import numbers

    import numpy as np

    if params is None:
        return
    if not isinstance(params, Mapping):
        raise InvalidTypeError(f"epilog_params must be a dict of name -> value, not {type(params).__name__}")
    for name, v in params.items():
        if not isinstance(name, str):
            raise InvalidTypeError(f"epilog_params names must be str, not {type(name).__name__}")
        if isinstance(v, numbers.Number):
            continue
        kind = getattr(getattr(v, "dtype", None), "kind", None)
        if kind is None and isinstance(v, (list, tuple)):
            try:
                kind = np.asarray(v).dtype.kind
            except (ValueError, TypeError):
                kind = None
        if kind not in tuple("biufc"):
            raise InvalidTypeError(
                f"epilogue parameter {name!r} must be a number or a numeric array, not {type(v).__name__}"
                + (f" of dtype {v.dtype}" if hasattr(v, "dtype") else "")
            )


def epilog_inputs(params: Mapping[str, Any] | None, like: Any) -> dict[str, Any]:
    """Epilogue parameters as arrays of ``like``'s package: scalars as they are, lists and
    tuples as arrays (as NumPy reads them), an array in the other memory a DeviceError.

    Arrays keep their strides: the epilogue runs as array expressions, which read any layout.
    """
    import numpy as np

    on_gpu = type(like).__module__.split(".")[0] == "cupy"
    out: dict[str, Any] = {}
    for name, v in (params or {}).items():
        if isinstance(v, (list, tuple)):
            if on_gpu:
                from ust.runtime.xp import import_cupy

                v = import_cupy().asarray(np.asarray(v))
            else:
                v = np.asarray(v)
        elif (
            hasattr(v, "shape")
            and getattr(v, "ndim", 0) > 0
            and (type(v).__module__.split(".")[0] == "cupy") != on_gpu
        ):
            where = "GPU (CuPy)" if on_gpu else "host (NumPy)"
            raise DeviceError(f"epilogue parameter {name!r} is not in the result's memory ({where})")
        out[name] = v
    return out
