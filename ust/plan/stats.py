"""Cheap statistics of a sparse matrix for the planner: O(rows) NumPy on its index buffers.

The cost model (:mod:`ust.plan.cost`), the tuning records' key (:mod:`ust.plan.tuning`),
``ust.advise`` and the load-balancing choice of the generated kernels read the same numbers,
computed here once: row-length mean, maximum and spread, the share of empty rows, the
diagonal count of a DIA operand and the block fill of a BSR one.  Nothing is converted and
no pass over the entries is made where the row pointer says it (a COO's sorted row
coordinates are searched, O(rows log nnz); a format without row pointers gets the mean only).
On the GPU the reductions run on the device and four numbers come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MatrixStats", "matrix_stats", "row_lengths_stats"]

#: Values read to estimate a BSR operand's block fill (a strided sample: O(1), not O(nnz)).
_FILL_SAMPLE = 1 << 16


@dataclass(frozen=True)
class MatrixStats:
    """What the planner knows of a matrix without touching its entries.

    ``row_mean`` / ``row_max`` / ``row_cv`` (standard deviation over mean) are per row of the
    matrix (per column for a column-major format such as CSC: its own segments), ``exact``
    says whether they come from a row pointer (False: the mean only, max = mean).
    """

    rows: int
    cols: int
    nnz: int
    row_mean: float
    row_max: int
    row_cv: float
    empty_rows: float  # share of rows (segments) with no entry
    ndiag: int = 0  # DIA: stored diagonals (0: not DIA)
    block: tuple[int, ...] = ()  # BSR: (r, c)
    block_fill: float = 1.0  # BSR: share of stored block slots that hold a nonzero
    exact: bool = True

    @property
    def skew(self) -> float:
        """Longest row over the mean row (1: every row alike)."""
        return self.row_max / self.row_mean if self.row_mean > 0 else 1.0

    def describe(self) -> str:
        """One line for ``explain``: the numbers the cost model read."""
        parts = [
            f"{self.rows} rows",
            f"{self.nnz} nnz",
            f"row length mean {self.row_mean:.3g}",
            f"max {self.row_max}",
            f"spread (cv) {self.row_cv:.2f}",
        ]
        if self.empty_rows:
            parts.append(f"{100 * self.empty_rows:.0f}% empty rows")
        if self.ndiag:
            parts.append(f"{self.ndiag} diagonals")
        if self.block:
            parts.append(f"{self.block[0]}x{self.block[1]} blocks {100 * self.block_fill:.0f}% full")
        return ", ".join(parts)


def row_lengths_stats(
    indptr: Any, nseg: int | None = None, *, loose: bool = False
) -> tuple[float, int, float, float]:
    """(mean, max, cv, share empty) of the segment lengths of a row pointer (``nseg`` segments in
    all, more than ``len(indptr) - 1`` when some are absent, as in DCSR; ``loose``: a
    loose_compressed level's interleaved ``lo, hi`` pairs).  NumPy or CuPy: on the GPU the
    reductions run there and only four numbers come back."""
    lengths = indptr[1::2] - indptr[0::2] if loose else indptr[1:] - indptr[:-1]
    n = int(lengths.size)
    total = n if nseg is None else max(int(nseg), n)
    if total == 0:
        return 0.0, 0, 0.0, 0.0
    if n == 0:
        return 0.0, 0, 0.0, 1.0
    lf = lengths.astype("float64")
    mean = float(lf.sum()) / total
    mx = int(lengths.max())
    var = max(float((lf * lf).sum()) / total - mean * mean, 0.0)
    cv = math.sqrt(var) / mean if mean > 0 else 0.0
    empty = (total - n + int((lengths == 0).sum())) / total
    return mean, mx, cv, empty


def _levels(t: Any) -> list[str]:
    return [lv.type.format.value for lv in t.format.levels]


def _host(a: Any) -> np.ndarray:
    """A small array on the host (a CuPy array copied: a sample, never the entries)."""
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) else a)


def matrix_stats(t: Any) -> MatrixStats:
    """The :class:`MatrixStats` of a 2-D ust Tensor, from its index buffers only."""
    from ust.plan.classify import classify

    rows, cols = (int(s) for s in t.shape[-2:])
    nnz = int(t.nnz) if t.ndim == 2 else int(t.values.size)
    fc = classify(t.format)
    lv = _levels(t)
    seg_rows = cols if fc.name in ("CSC", "DCSC") else rows
    extra: dict[str, Any] = {}
    stats: tuple[float, int, float, float] | None = None
    if t.ndim == 2 and lv[:2] == ["dense", "compressed"] and t.pos(1) is not None:  # CSR, CSC, BSR, ...
        stats = row_lengths_stats(t.pos(1))
        if fc.name == "BSR" and len(fc.params) == 2:
            r, c = fc.params
            extra["block"] = (r, c)
            vals = t.values.reshape(-1)
            step = max(1, int(vals.size) // _FILL_SAMPLE)
            sample = _host(vals[::step])
            extra["block_fill"] = float(np.count_nonzero(sample)) / max(int(sample.size), 1)
            m = stats[0] * r * c * extra["block_fill"] / max(c, 1)  # entries per matrix row
            stats = (m, stats[1] * c, stats[2], stats[3])
    elif t.ndim == 2 and lv[:2] == ["compressed", "compressed"] and t.pos(1) is not None:  # DCSR / DCSC
        stats = row_lengths_stats(t.pos(1), seg_rows)
    elif t.ndim == 2 and lv[:2] == ["dense", "loose_compressed"] and t.pos(1) is not None:
        stats = row_lengths_stats(t.pos(1), loose=True)
    elif t.ndim == 2 and fc.name == "COO" and t.crd(0) is not None and t.format.is_ordered:
        crd = t.crd(0)
        xp = t.xp
        stats = row_lengths_stats(xp.searchsorted(crd, xp.arange(rows + 1, dtype=crd.dtype)))
    if fc.name == "DIA" and t.crd(0) is not None:
        extra["ndiag"] = int(t.crd(0).size)
    if stats is None:
        mean = nnz / max(seg_rows, 1)
        return MatrixStats(rows, cols, nnz, mean, math.ceil(mean), 0.0, 0.0, exact=False, **extra)
    mean, mx, cv, empty = stats
    return MatrixStats(rows, cols, nnz, mean, mx, cv, empty, **extra)
