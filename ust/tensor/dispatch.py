"""Late binding of ``Tensor``'s operators and conversion methods, made explicit.

:class:`~ust.tensor.Tensor` sits below the layers that implement its operators
(:mod:`ust.api.algebra`) and its conversions (:mod:`ust.convert`, :mod:`ust.io`): it looks
them up here, in tables those layers fill when they are imported (``import ust`` imports
them all).  A method whose entry is missing raises a :class:`~ust.runtime.errors.UstError`
naming the module that registers it.

``OPERATORS``: ``add``, ``subtract``, ``multiply``, ``divide``, ``negative``,
``matmul_operator``, ``rmatmul``, ``transpose``, ``sum``, ``max``, ``min``; the scipy.sparse
surface of :mod:`ust.api.surface` (``eliminate_zeros``, ``sum_duplicates``, ``sort_indices``,
``setdiag``, ``absolute``, ``power``, ``conj``, ``real``, ``imag``, ``compare``, ``truth``,
``mean``, ``count_nonzero``, ``diagonal``, ``reshape``, ``multiply_pointwise``, ``dot``) and
``getitem`` (:mod:`ust.api.indexing`).
``CONVERSIONS``: ``convert``, ``to_scipy``, ``to_cupyx``, ``to_torch``, ``todense``,
``to_device``, ``unpack`` (storage order entries of a :class:`~ust.tensor.Buffers`),
``plot`` (a picture, :mod:`ust.io.plot`); ``toarray``, ``asformat``, ``scipy_data``,
``has_canonical_format``, ``repr_html`` and ``array`` (``Tensor.__array__``;
:mod:`ust.convert.surface`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ust.runtime.errors import UstError

__all__ = ["CONVERSIONS", "OPERATORS", "conversion", "operator", "register"]

F = TypeVar("F", bound=Callable[..., Any])

#: Array operators of Tensor, filled by :mod:`ust.api.algebra`.
OPERATORS: dict[str, Callable[..., Any]] = {}
#: Conversions, exports and storage reads of Tensor, filled by :mod:`ust.convert` and :mod:`ust.io`.
CONVERSIONS: dict[str, Callable[..., Any]] = {}

_PROVIDER = {id(OPERATORS): "ust.api.algebra", id(CONVERSIONS): "ust.convert / ust.io"}


def register(table: dict[str, Callable[..., Any]], name: str) -> Callable[[F], F]:
    """Decorator: put the function into ``table`` under ``name`` (the last registration wins)."""

    def deco(fn: F) -> F:
        table[name] = fn
        return fn

    return deco


def _lookup(table: dict[str, Callable[..., Any]], name: str) -> Callable[..., Any]:
    fn = table.get(name)
    if fn is None:
        raise UstError(
            f"Tensor.{name} is not available: nothing registered it (it comes from "
            f"{_PROVIDER[id(table)]}, which `import ust` imports)"
        )
    return fn


def operator(name: str) -> Callable[..., Any]:
    """The registered operator ``name`` (UstError when none is)."""
    return _lookup(OPERATORS, name)


def conversion(name: str) -> Callable[..., Any]:
    """The registered conversion ``name`` (UstError when none is)."""
    return _lookup(CONVERSIONS, name)
