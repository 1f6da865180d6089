"""Shared inputs of the algebra tests (CPU and GPU): formats, matrices with the awkward cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

import ust

#: Every standard matrix format, and two user formats that are no standard one.
STANDARD = ["CSR", "CSC", "COO", "DCSR", "DCSC", "CROW", "CCOL", "DIA", "BSR[2,2]", "BSC[2,2]"]
USER = {
    "rowpairs": "(i, j) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : dense)",
    "loose": "(i, j) -> (i : dense, j : loose_compressed)",
}
FORMATS = STANDARD + list(USER)
SHAPE = (10, 8)


def fmt(name: str) -> ust.Format:
    return ust.format(USER.get(name, name))


def matrix(seed: int, dtype: Any = np.float64, shape: tuple[int, int] = SHAPE, density: float = 0.3) -> Any:
    """A canonical scipy CSR array with an empty row, an empty column and an explicit zero."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    mask[3, :] = False  # an empty row
    mask[:, 5] = False  # an empty column
    vals = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.standard_normal(shape)
    elif np.dtype(dtype).kind in "iu":
        vals = rng.integers(1, 9, size=shape) * (
            1 if np.dtype(dtype).kind == "u" else rng.choice([-1, 1], shape)
        )
    dense = np.where(mask, vals, 0).astype(dtype)
    r, c = np.nonzero(dense)
    free = np.flatnonzero(~mask[0])
    r = np.append(r, 0)  # an explicit zero stored in row 0
    c = np.append(c, free[free != 5][0] if (free != 5).any() else 5)
    data = np.append(dense[np.nonzero(dense)], np.zeros(1, dtype))
    B = sp.csr_array((data, (r, c)), shape=shape)
    B.sum_duplicates()
    return B


def coo_with_duplicates(seed: int, dtype: Any = np.float64, shape: tuple[int, int] = SHAPE) -> Any:
    """A scipy COO array holding duplicate coordinates, unsorted."""
    rng = np.random.default_rng(seed)
    n = 18
    r = rng.integers(0, shape[0], n)
    c = rng.integers(0, shape[1], n)
    r[:3], c[:3] = 1, 2  # the same position three times
    v = rng.standard_normal(n).astype(dtype)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(n)
    return sp.coo_array((v, (r, c)), shape=shape)


def snapshot(t: Any) -> list[np.ndarray]:
    """Copies of every buffer of a Tensor (to prove an op did not write into its inputs)."""
    from ust.runtime import xp as _xp

    return [_xp.to_host(a).copy() for a in t.buffers().values()]


def unchanged(t: Any, snap: list[np.ndarray]) -> bool:
    from ust.runtime import xp as _xp

    now = [_xp.to_host(a) for a in t.buffers().values()]
    return len(now) == len(snap) and all(np.array_equal(x, y) for x, y in zip(now, snap))
