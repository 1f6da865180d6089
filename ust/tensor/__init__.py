"""Tensors: the :class:`Tensor` holder, its frozen :class:`Buffers` record, validation.

:class:`Tensor` dispatches its operators and conversion methods through the tables of
:mod:`ust.tensor.dispatch`, which the layers above fill at import.
"""

from __future__ import annotations

from ust.tensor.buffers import Buffers
from ust.tensor.core import Tensor

__all__ = ["Buffers", "Tensor"]
