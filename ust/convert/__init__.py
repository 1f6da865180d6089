"""Conversions: any source into a Tensor (:func:`asarray`), any format into any other.

Routes: a library's own conversion where both formats are canonical library layouts
(SciPy on the CPU, cuSPARSE through CuPy on a GPU), otherwise the general path written once
against ``xp`` (:mod:`ust.convert.unpack`, :mod:`ust.convert.pack`).  Interop modules:
:mod:`~ust.convert.scipy`, :mod:`~ust.convert.cupyx`, :mod:`~ust.convert.torch`,
:mod:`~ust.convert.dense`.  Nothing here imports CuPy or torch until handed their objects.

Importing this package registers the conversion methods of :class:`ust.Tensor`
(``convert``, ``to_scipy``, ``to_cupyx``, ``to_torch``, ``todense``, ``to_device``, and the
storage read ``unpack``) into :data:`ust.tensor.dispatch.CONVERSIONS`; each entry imports
its module when first called.  :mod:`ust.convert.surface` registers the conversion half of
the scipy.sparse surface (``toarray``, ``asformat``, ``scipy_data``, ``has_canonical_format``,
``repr_html``, ``array``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ust.runtime.errors import UnsupportedError
from ust.tensor.dispatch import CONVERSIONS, register

if TYPE_CHECKING:
    from ust.formats.model import Format
    from ust.tensor import Tensor

__all__ = ["asarray"]

_SUPPORTED = (
    "scipy.sparse (csr, csc, coo, bsr, dia, lil, dok), cupyx.scipy.sparse (csr, csc, coo, dia), "
    "torch tensors (strided, sparse_coo, sparse_csr/csc/bsr/bsc), NumPy/CuPy arrays, ust.Tensor"
)


@register(CONVERSIONS, "convert")
def _convert(t: Tensor, fmt: Format, **kwargs: Any) -> Tensor:
    from ust.convert.routes import convert

    CONVERSIONS["convert"] = convert  # imported now: later calls go straight to it
    return convert(t, fmt, **kwargs)


@register(CONVERSIONS, "to_scipy")
def _to_scipy(t: Tensor) -> Any:
    from ust.convert.scipy import to_scipy

    return to_scipy(t)


@register(CONVERSIONS, "to_cupyx")
def _to_cupyx(t: Tensor) -> Any:
    from ust.convert.cupyx import to_cupyx

    return to_cupyx(t)


@register(CONVERSIONS, "to_torch")
def _to_torch(t: Tensor) -> Any:
    from ust.convert.torch import to_torch

    return to_torch(t)


@register(CONVERSIONS, "todense")
def _todense(t: Tensor) -> Any:
    from ust.convert.dense import todense

    return todense(t)


@register(CONVERSIONS, "to_device")
def _to_device(t: Tensor, device: str | int) -> Tensor:
    from ust.convert.device import to_device

    return to_device(t, device)


@register(CONVERSIONS, "unpack")
def _unpack(t: Any, **kwargs: Any) -> Any:
    from ust.convert.unpack import unpack

    return unpack(t, **kwargs)


def _scipy_intake() -> Any:
    """:func:`ust.convert.scipy.from_scipy_object` (imported on first use, then kept: an import
    statement costs a microsecond per call, a tenth of the whole trusted intake)."""
    global _FROM_SCIPY
    if _FROM_SCIPY is None:
        from ust.convert.scipy import from_scipy_object

        _FROM_SCIPY = from_scipy_object
    return _FROM_SCIPY


_FROM_SCIPY: Any = None


def _intake(obj: Any) -> Tensor:
    """``obj`` as a Tensor in its own layout, sharing its buffers where they map 1:1."""
    from ust.tensor import Tensor

    if isinstance(obj, Tensor):
        return obj
    full = type(obj).__module__
    if full.startswith("scipy."):
        t = _scipy_intake()(obj)
        if t is not None:
            return t
    mod = full.split(".", 1)[0]
    if mod == "cupyx":
        from ust.convert.cupyx import from_cupyx

        return from_cupyx(obj)
    if mod == "torch":
        from ust.convert.torch import from_torch

        return from_torch(obj)
    from ust.convert.dense import from_dense
    from ust.runtime import xp as _xp

    if isinstance(obj, np.ndarray) or _xp.is_cupy(obj):
        return from_dense(obj)
    if mod in ("builtins",) and isinstance(obj, (list, tuple)):
        arr = np.asarray(obj)
        if arr.dtype.kind in "iufc":
            return from_dense(arr)
    raise UnsupportedError(
        f"cannot make a ust Tensor from {type(obj).__module__}.{type(obj).__name__}; supported: {_SUPPORTED}"
    )


def asarray(
    obj: Any,
    format: Format | str | None = None,  # noqa: A002 - the public name
    *,
    dtype: Any = None,
    index_dtype: Any = None,
    device: str | int | None = None,
    prune: bool = False,
    max_padding: int | None = None,
    blocksize: Any = None,
    check: bool | str | None = None,
) -> Tensor:
    """A :class:`ust.Tensor` from a sparse matrix/array, a dense array or a Tensor.

    With ``format=None`` the source's own layout is kept, sharing its buffers where the
    layout maps 1:1 (scipy csr/csc/coo/bsr/dia, cupyx, torch; dense arrays become the
    all-dense identity format).  ``format`` (a Format, a standard name such as ``"BSR[2,2]"``,
    SciPy's lowercase names such as ``"csr"``, ``"bsr"`` with ``blocksize=(r, c)``, or DSL
    text) converts; ``dtype`` casts the values, ``index_dtype`` the index buffers
    (int32 / int64), ``device`` moves the buffers (``"cpu"``, ``"cuda"``, ``"cuda:N"``).
    The caller's arrays are never modified.

    Without ``index_dtype`` the result keeps the source's index dtype (widened to int64
    where needed; int32 for small dense sources); an int32 that cannot hold the result's
    coordinates or ``nse`` is a ShapeError naming int64, as is a target whose extent-sized
    buffers (CSR's ``pos``, a dense or range level) would exceed the device's memory
    (docs/storage.md, "Index dtype" and "Storage size").

    ``check`` (default None) decides how far the source's buffers are validated.  By default
    a SciPy csr/csc/coo is trusted for what SciPy keeps (re-checked in O(1): array shapes,
    dtypes, ``indptr[0] == 0``, ``indptr[-1]``) and its order/uniqueness flags.  ``indptr``
    monotonicity and the index bounds of a csr/csc whose flags say canonical, which SciPy does
    not guarantee, are checked (one NumPy reduction each, once) by the first read of its index
    buffers -- every kernel, conversion and export of ust reads them through that check, so a
    bad index is ust's error before any work, never an out-of-bounds read; other sources are
    checked at once.  ``False`` means the same (never less).  ``True`` / ``"full"``,
    ``"bounds"`` or ``"structure"`` run :class:`ust.Tensor`'s check at that depth on the intake
    at once (``"full"`` verifies the order and uniqueness SciPy's flags claim).
    """
    plain = format is None and check is None and dtype is None and device is None
    if plain and index_dtype is None and blocksize is None:
        return _intake(obj)  # the plain intake: nothing to resolve, check, cast or move
    from ust.formats.library import resolve
    from ust.tensor.core import _CHECK_DEPTH
    from ust.tensor.validate import check_buffers

    if check is not None and check is not False and check not in _CHECK_DEPTH:
        raise UnsupportedError(
            f"asarray: check must be None, a bool, 'full', 'bounds' or 'structure', not {check!r}"
        )

    if format is None and blocksize is not None:
        raise UnsupportedError("asarray: blocksize= goes with a format, e.g. format='bsr', blocksize=(2, 2)")
    # bad format text fails before any work
    fmt = None if format is None else resolve(format, blocksize=blocksize)
    t = _intake(obj)
    if check is not None and check is not False:
        check_buffers(t.bufs, _CHECK_DEPTH[check])
    if dtype is not None and np.dtype(dtype) != t.dtype:
        t = t.astype(dtype, copy=False)
    if device is not None:
        t = t.to(device)
    if fmt is not None:
        t = t.convert(fmt, index_dtype=index_dtype, prune=prune, max_padding=max_padding)
    elif index_dtype is not None and np.dtype(index_dtype) != t.index_dtype:
        t = t.convert(t.format, index_dtype=index_dtype)
    return t


# the scipy.sparse surface's conversions and storage facts (toarray, asformat, data, ...)
from ust.convert import surface as _surface  # noqa: E402, F401
