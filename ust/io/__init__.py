"""Tensors in files and pictures: Matrix Market (``mmread`` / ``mmwrite``,
:mod:`ust.io.matrix_market`), Binsparse (``save`` / ``load``, :mod:`ust.io.binsparse`),
``read`` / ``write`` by extension, and sparsity pictures (:mod:`ust.io.plot`, registered as
:meth:`ust.Tensor.plot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ust.formats.model import Format
from ust.io.binsparse import _HDF5_SUFFIXES, _NPZ_SUFFIXES, BINSPARSE_VERSION, load, save
from ust.io.matrix_market import _MM_SUFFIXES, mmread, mmwrite
from ust.runtime.errors import UnsupportedError
from ust.tensor.dispatch import CONVERSIONS, register

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["BINSPARSE_VERSION", "load", "mmread", "mmwrite", "read", "save", "write"]


@register(CONVERSIONS, "plot")
def _plot(t: Tensor, path: Any = None, **kwargs: Any) -> Any:
    from ust.io.plot import plot

    return plot(t, path, **kwargs)


# ----------------------------------------------------------------------------- by extension


def read(path: str | Path, format: Format | str | None = None, **kwargs: Any) -> Tensor:  # noqa: A002
    """Read a Matrix Market (``.mtx``) or Binsparse (``.npz`` / ``.h5``) file, by extension."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    if p.suffix.lower() in _MM_SUFFIXES or (len(suffixes) > 1 and suffixes[-2] in _MM_SUFFIXES):
        return mmread(p, format, **kwargs)
    if p.suffix.lower() in (*_NPZ_SUFFIXES, *_HDF5_SUFFIXES):
        return load(p, format, **kwargs)
    raise UnsupportedError(
        f"{p}: unknown file type {p.suffix!r}; use .mtx (Matrix Market), .npz or .h5/.hdf5 (Binsparse)"
    )


def write(path: str | Path, tensor: Tensor, **kwargs: Any) -> None:
    """Write a Matrix Market (``.mtx``) or Binsparse (``.npz`` / ``.h5``) file, by extension."""
    p = Path(path)
    if p.suffix.lower() in _MM_SUFFIXES:
        mmwrite(p, tensor, **kwargs)
    elif p.suffix.lower() in (*_NPZ_SUFFIXES, *_HDF5_SUFFIXES):
        save(p, tensor, **kwargs)
    else:
        raise UnsupportedError(f"{p}: unknown file type {p.suffix!r}; use .mtx, .npz or .h5/.hdf5")
