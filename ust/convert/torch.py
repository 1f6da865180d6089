"""PyTorch interop: sparse and strided torch tensors in (their buffers), torch tensors out.

CPU tensors are read through ``Tensor.numpy()`` and CUDA tensors through DLPack into CuPy,
both without a copy.  torch's CSR/CSC/BSR/BSC/COO layouts map 1:1 to ust's standard formats
(batched CSR to ``BatchedCSR``); their order is checked on intake rather than trusted, and an
unsorted or duplicated source is labelled ``nonordered`` / ``nonunique``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ust.convert.layouts import coo_format, library_layout, relabel
from ust.formats.library import get
from ust.formats.model import Format
from ust.runtime import xp as _xp
from ust.runtime.errors import UnsupportedError
from ust.tensor.validate import check_value_dtype

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["from_torch", "to_torch"]

_LAYOUTS = "strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc"


def _arr(x: Any) -> Any:
    """A NumPy (CPU) or CuPy (CUDA) view of a torch tensor."""
    x = x.detach()
    if x.is_conj():
        x = x.resolve_conj()
    if x.is_cuda:
        import cupy

        return cupy.from_dlpack(x)
    try:
        return x.numpy()
    except TypeError as exc:  # bfloat16 and friends
        raise UnsupportedError(f"torch dtype {x.dtype} has no NumPy equivalent ({exc})") from None


def _compressed_label(base: Format, level: int, ptr: Any, crd: Any, ncols: int) -> Format:
    """The standard format when ``crd`` is strictly increasing within each segment of
    ``ptr``; otherwise an honest nonordered / nonunique variant."""
    xp = _xp.namespace(crd)
    n = int(crd.shape[-1])
    if n < 2:
        return base
    flat = crd.reshape(-1).astype(np.int64)
    # segment id of every entry, made comparable across segments: seg * ncols + crd is
    # increasing overall exactly when every segment is strictly increasing
    counts = xp.diff(ptr.reshape(-1, ptr.shape[-1]), axis=1).reshape(-1)
    seg = _xp.expand_segments(xp, counts, int(flat.shape[0]))
    key = seg * max(ncols, 1) + flat
    d = key[1:] - key[:-1]
    if bool((d > 0).all()):
        return base
    if bool((d >= 0).all()):
        return relabel(base, level, unique=False, ordered=True)
    srt = xp.sort(key)
    dups = bool((srt[1:] == srt[:-1]).any())
    return relabel(base, level, unique=not dups, ordered=False)


def from_torch(x: Any) -> Tensor:
    """A Tensor around a torch tensor (its buffers, no copy)."""
    import torch

    from ust.convert.dense import from_dense
    from ust.tensor import Tensor

    layout = x.layout
    shape = tuple(int(s) for s in x.shape)
    if layout == torch.strided:
        return from_dense(_arr(x))
    if layout == torch.sparse_coo:
        if x.dense_dim() != 0:
            raise UnsupportedError("hybrid torch COO tensors (dense dimensions) are not supported")
        idx = _arr(x._indices())
        vals = _arr(x._values())
        check_value_dtype(vals.dtype)
        n = int(vals.shape[0])
        xp = _xp.namespace(vals)
        fmt = coo_format(len(shape), canonical=bool(x.is_coalesced()))
        pos0 = xp.asarray(np.array([0, n], dtype=idx.dtype))
        return Tensor(
            shape, fmt, vals, pos={0: pos0}, crd={k: idx[k] for k in range(len(shape))}, check="bounds"
        )
    compressed = {
        torch.sparse_csr: ("CSR", "crow_indices", "col_indices"),
        torch.sparse_csc: ("CSC", "ccol_indices", "row_indices"),
        torch.sparse_bsr: ("BSR", "crow_indices", "col_indices"),
        torch.sparse_bsc: ("BSC", "ccol_indices", "row_indices"),
    }
    if layout not in compressed:
        raise UnsupportedError(f"torch layout {layout}; supported: {_LAYOUTS}")
    name, ptr_name, crd_name = compressed[layout]
    ptr = _arr(getattr(x, ptr_name)())
    crd = _arr(getattr(x, crd_name)())
    vals = _arr(x.values())
    check_value_dtype(vals.dtype)
    if x.dense_dim() != 0:
        raise UnsupportedError("hybrid torch compressed tensors (dense dimensions) are not supported")
    nbatch = ptr.ndim - 1
    if name in ("BSR", "BSC"):
        if nbatch:
            raise UnsupportedError("batched torch BSR/BSC tensors are not supported; use batched CSR")
        r, c = (int(s) for s in vals.shape[-2:])
        base = get(f"{name}[{r},{c}]")
        ncols = shape[1] // c if name == "BSR" else shape[0] // r
        fmt = _compressed_label(base, 1, ptr, crd, ncols)
        xp = _xp.namespace(vals)
        return Tensor(
            shape, fmt, xp.ascontiguousarray(vals).reshape(-1), pos={1: ptr}, crd={1: crd}, check="bounds"
        )
    if nbatch == 0:
        ncols = shape[1] if name == "CSR" else shape[0]
        fmt = _compressed_label(get(name), 1, ptr, crd, ncols)
        return Tensor(shape, fmt, vals, pos={1: ptr}, crd={1: crd}, check="bounds")
    if name != "CSR" or nbatch != 1:
        raise UnsupportedError("batched torch compressed tensors: only batched CSR (3-D) is supported")
    fmt = _compressed_label(get("BatchedCSR"), 2, ptr, crd, shape[2])
    return Tensor(shape, fmt, vals, pos={2: ptr}, crd={2: crd}, check="bounds")


def _to_torch_array(a: Any) -> Any:
    import torch

    if _xp.is_cupy(a):
        return torch.from_dlpack(a)
    return torch.from_numpy(np.ascontiguousarray(a))


def to_torch(t: Tensor) -> Any:
    """A torch tensor: CSR/CSC/BSR/BSC/batched-CSR/COO layouts where ``t``'s format is one
    (canonicalised first), strided for dense formats, COO otherwise (int64 indices)."""
    import torch

    fmt = t.format
    if fmt.is_dense:
        return _to_torch_array(t.todense())
    lay = library_layout(fmt)
    size = t.shape
    T = _to_torch_array
    if lay is not None and lay.name in ("csr", "csc", "bsr", "bsc"):
        if not lay.canonical:
            from ust.convert.routes import convert

            std = {"csr": "CSR", "csc": "CSC"}.get(
                lay.name
            ) or f"{lay.name.upper()}[{lay.blocksize[0]},{lay.blocksize[1]}]"  # type: ignore[index]
            t = convert(t, get(std))
        ptr, crd = T(t.pos(1)), T(t.crd(1))
        if lay.name == "csr":
            return torch.sparse_csr_tensor(ptr, crd, T(t.values), size=size)
        if lay.name == "csc":
            return torch.sparse_csc_tensor(ptr, crd, T(t.values), size=size)
        r, c = lay.blocksize  # type: ignore[misc]
        vals = T(t.values.reshape(-1, r, c))
        if lay.name == "bsr":
            return torch.sparse_bsr_tensor(ptr, crd, vals, size=size)
        return torch.sparse_bsc_tensor(ptr, crd, vals, size=size)
    if fmt == get("BatchedCSR"):
        full = t.values.shape[1]
        if bool((t.pos(2)[:, -1] == full).all()):
            return torch.sparse_csr_tensor(T(t.pos(2)), T(t.crd(2)), T(t.values), size=size)
    from ust.convert.routes import convert

    coo = convert(t, coo_format(t.ndim))
    xp = coo.xp
    idx = xp.stack([coo.crd(k).astype(np.int64) for k in range(t.ndim)])
    vals = T(coo.values)
    try:
        return torch.sparse_coo_tensor(T(idx), vals, size=size, is_coalesced=True)
    except TypeError:  # torch < 2.2: no is_coalesced argument
        return torch.sparse_coo_tensor(T(idx), vals, size=size)._coalesced_(True)
