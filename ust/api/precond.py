"""Preconditioners for ust's Krylov solvers: ``z = M^-1 r`` on the device of the matrix.

:func:`build_preconditioner` turns ``M=`` of ``ust.linalg.cg / minres / gmres / bicgstab`` (a
name from :data:`PRECONDITIONERS`, or a user operator) into a :class:`Preconditioner`.
Everything that depends only on the matrix (diagonal, block inverses, incomplete factors,
eigenvalue bounds, the AMG hierarchy) is computed once, at build time; ``apply`` then runs
whole-array NumPy / CuPy operations and the planner's SpMV, with no Python loop over rows
or entries, so the CPU and the GPU give the same result up to rounding.

* ``jacobi``: ``r / diag(A)``.
* ``block_jacobi``: the inverted diagonal blocks (a BSR operand's own blocks, or
  ``block_size``), applied as one batched matrix-vector product.
* ``ilu0`` / ``ic0``: the exact ILU(0) / IC(0) factors (not SciPy's threshold ``spilu``) on
  A's nonzero pattern plus the diagonal, whatever A's format stores (BSR block fill and DIA
  padding are not part of it), computed on the host by a level-scheduled array program (one
  step per dependency level, all entries of a level at once); triangular solves by SuperLU's
  compiled substitution (CPU) or cuSPARSE SpSM through cupyx (GPU: factors computed on the
  host, triangular solves on the device; cuSPARSE's own ILU0/IC0 are deprecated).
* ``chebyshev``: the Chebyshev polynomial of pyamg's smoother (interval
  ``[lambda_max/30, 1.1 lambda_max]``, lambda_max from Lanczos with a fixed seed), applied by
  the Chebyshev three-term recurrence: ``degree - 1`` SpMVs.
* ``amg``: a smoothed-aggregation hierarchy, built on the matrix's device by ust's array
  programs (``options["setup"] = "device"``, :mod:`ust.algebra.aggregation`) or on the host by
  pyamg (``"pyamg"``; ``"auto"``, the default, is the device setup on a GPU or without pyamg),
  whose V-cycle runs on the matrix's device with ust SpMVs: weighted-Jacobi (or Chebyshev)
  smoothing, the coarsest level solved directly.
* a user operator (LinearOperator, Tensor, sparse or dense matrix, callable): ``M @ r``, M
  approximating ``A^-1`` (SciPy's convention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ust.api.linop import _Product
from ust.runtime import xp as _xp
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    SingularMatrixError,
    UnsupportedError,
)

__all__ = ["PRECONDITIONERS", "Preconditioner", "build_preconditioner"]

#: The preconditioners :func:`build_preconditioner` builds by name.
PRECONDITIONERS: tuple[str, ...] = ("jacobi", "block_jacobi", "ilu0", "ic0", "chebyshev", "amg")

#: Largest coarsest level the GPU V-cycle solves by a dense inverse (one GEMV per cycle).
DENSE_COARSE_LIMIT = 2000


@runtime_checkable
class Preconditioner(Protocol):
    """What the Krylov solvers call: ``apply(r)`` is ``z = M^-1 r``.

    ``r`` is a 1-D NumPy / CuPy array on the execution device; ``apply`` returns a new 1-D array
    of r's dtype (complex when A is complex and r real) and never writes ``r``.  A preconditioner
    whose ``apply(r)`` is ``r * d`` may also have ``diagonal_inverse(dtype)`` returning ``d``
    (Jacobi does): the GPU CG then applies it inside its fused update.
    """

    name: str

    def apply(self, r: Any) -> Any: ...

    def describe(self) -> str: ...


# ----------------------------------------------------------------------------- the system matrix


@dataclass
class _Csr:
    """A's canonical CSR on its device (sorted, unique), with the row of every entry."""

    xp: ModuleType
    n: int
    dtype: np.dtype
    indptr: Any
    indices: Any
    values: Any
    rows: Any
    tensor: Any

    def host(self) -> Any:
        """A scipy ``csr_array`` of A's nonzeros on the host: a copy, so no caller buffer is ever
        reached, and the same pattern whatever A's format stores."""
        import scipy.sparse as sp

        out = sp.csr_array(
            (
                _xp.to_host(self.values).copy(),
                _xp.to_host(self.indices).astype(np.int64),
                _xp.to_host(self.indptr).astype(np.int64),
            ),
            shape=(self.n, self.n),
        )
        out.eliminate_zeros()  # the nonzero pattern: stored zeros (BSR block fill, ...) are format detail
        return out


def _work_dtype(dt: np.dtype) -> np.dtype:
    """The value dtype the build computes in: A's own when inexact, float64 for integers."""
    dt = np.dtype(dt)
    if dt in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128)):
        return dt
    return np.dtype(np.complex128 if dt.kind == "c" else np.float64)


def _system(a: Any) -> tuple[Any, _Csr]:
    """``a`` as a Tensor and its canonical CSR, after the checks that come before any work."""
    from ust.algebra.operands import as_tensor, require_2d
    from ust.formats.library import get

    t = as_tensor(a)
    require_2d(t, "a preconditioner")
    if t.shape[0] != t.shape[1]:
        raise ShapeError(f"a preconditioner needs a square matrix, got shape {t.shape}")
    csr = t.convert(get("CSR"))
    dt = _work_dtype(csr.dtype)
    if dt != csr.dtype:
        csr = csr.astype(dt)
    xp = csr.xp
    values = csr.values
    if values.shape[0] and not bool(xp.isfinite(values).all()):
        raise InvalidValueError("the matrix holds NaN or Inf values: no preconditioner can be built from it")
    n = int(t.shape[0])
    indptr, indices = csr.pos(1), csr.crd(1)
    counts = indptr[1:] - indptr[:-1]
    rows = _xp.expand_segments(xp, counts, int(values.shape[0]), dtype=indices.dtype)
    return t, _Csr(xp, n, dt, indptr, indices, values, rows, csr)


def _diagonal(c: _Csr) -> Any:
    xp = c.xp
    d = xp.zeros(c.n, dtype=c.dtype)
    on = c.rows == c.indices
    d[c.rows[on]] = c.values[on]
    return d


def _hermitian_defect(c: _Csr) -> float:
    """``max |A - A^H| / max |A|`` by an array program: A's entries and A^H's, summed by key."""
    xp = c.xp
    if c.values.shape[0] == 0:
        return 0.0
    n = np.int64(c.n)
    rows, cols = c.rows.astype(np.int64), c.indices.astype(np.int64)
    keys = xp.concatenate((rows * n + cols, cols * n + rows))
    vals = xp.concatenate((c.values, -xp.conj(c.values)))
    order = xp.argsort(keys)
    keys, vals = keys[order], vals[order]
    first = xp.ones(keys.shape[0], dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    sums = _xp.segment_sum(xp, vals, xp.flatnonzero(first))
    scale = float(xp.abs(c.values).max())
    return float(xp.abs(sums).max()) / scale if scale > 0 else 0.0


def _require_hermitian(c: _Csr, what: str, rtol: float | None) -> None:
    eps = float(np.finfo(np.empty(0, dtype=c.dtype).real.dtype).eps)
    tol = 100 * eps if rtol is None else float(rtol)
    defect = _hermitian_defect(c)
    if defect > tol:
        kind = "Hermitian" if c.dtype.kind == "c" else "symmetric"
        raise UnsupportedError(
            f"{what} needs a {kind} matrix: max |A - A^H| is {defect:.3g} of max |A| (tolerance {tol:.3g}; "
            "set options['symmetry_rtol'] to accept more); for a general matrix use 'ilu0', 'jacobi', "
            "'block_jacobi' or 'amg'"
        )


def _out_dtype(r_dtype: Any, a_dtype: np.dtype) -> np.dtype:
    """r's dtype, made inexact, and complex when A is."""
    dt = np.dtype(r_dtype)
    if dt.kind not in "fc":
        dt = np.dtype(np.float64)
    if a_dtype.kind == "c" and dt.kind != "c":
        dt = np.result_type(dt, np.complex64)
    return dt


def _finish(z: Any, dt: np.dtype) -> Any:
    return z if z.dtype == dt else z.astype(dt)


def _contiguous(x: Any, dt: np.dtype) -> Any:
    """``x`` in dtype ``dt``, C-contiguous (cuSPARSE SpSM and SuperLU want dense strides)."""
    x = x if x.dtype == dt else x.astype(dt)
    return x if x.flags.c_contiguous else x.copy()


class _Base:
    """What every built preconditioner shares: the size, the device and the checks of ``r``."""

    name = "?"

    def __init__(self, c: _Csr) -> None:
        self.n = c.n
        self.xp = c.xp
        self.dtype = c.dtype
        self.device = c.tensor.device

    def _check(self, r: Any) -> np.dtype:
        if _xp.is_cupy(r) != (self.xp is not np):
            raise DeviceError(
                f"the {self.name} preconditioner was built on {self.device} but r is a "
                f"{type(r).__module__.split('.')[0]} array"
            )
        if r.ndim != 1 or int(r.shape[0]) != self.n:
            raise ShapeError(
                f"the {self.name} preconditioner takes a vector of length {self.n}, got shape {r.shape}"
            )
        return _out_dtype(r.dtype, self.dtype)

    def _in_own_dtype(self, r: Any, fn: Callable[[Any], Any]) -> Any:
        """``fn(r)`` computed in A's dtype, so every SpMV and solve sees one dtype: a complex ``r``
        on a real A as its real and imaginary parts, a lower-precision ``r`` widened."""
        if r.dtype.kind == "c" and self.dtype.kind != "c":
            return fn(_contiguous(r.real, self.dtype)) + 1j * fn(_contiguous(r.imag, self.dtype))
        return fn(_contiguous(r, self.dtype))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.describe()}>"

    def describe(self) -> str:  # pragma: no cover - every subclass says itself
        raise NotImplementedError


# ----------------------------------------------------------------------------- Jacobi


class _Jacobi(_Base):
    """``z = r / diag(A)``: the inverse diagonal is kept, one multiply per apply."""

    name = "jacobi"

    def __init__(self, c: _Csr) -> None:
        super().__init__(c)
        d = _diagonal(c)
        bad = c.xp.flatnonzero(d == 0)
        if bad.shape[0]:
            row = int(bad[0])
            raise InvalidValueError(
                f"the Jacobi preconditioner needs a nonzero diagonal, but A[{row}, {row}] is zero "
                f"({int(bad.shape[0])} zero diagonal entries); try 'ilu0' or 'amg'"
            )
        self._inv = {c.dtype: 1 / d}

    def _inverse(self, dt: np.dtype) -> Any:
        inv = self._inv.get(dt)
        if inv is None:
            # r's precision: complex when A is, the real type under r's dtype when A is real
            inv = self._inv[self.dtype].astype(dt if self.dtype.kind == "c" else np.empty(0, dt).real.dtype)
            self._inv[dt] = inv
        return inv

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        return _finish(r * self._inverse(dt), dt)

    def diagonal_inverse(self, dtype: Any) -> Any:
        """The vector ``d`` with ``apply(r) == r * d`` for an ``r`` of ``dtype``, in that dtype, on the
        preconditioner's device: what a solver fuses into its own kernels (the GPU CG step does);
        None where ``apply`` would change r's dtype (a complex r on a real A, an integer r)."""
        dt = np.dtype(dtype)
        if _out_dtype(dt, self.dtype) != dt:
            return None
        inv = self._inverse(dt)
        return inv if inv.dtype == dt else None

    def describe(self) -> str:
        return f"Jacobi (inverse diagonal), {self.n} rows"


# ----------------------------------------------------------------------------- block Jacobi


def _block_size_of(t: Any) -> int | None:
    """The square block size of a BSR / BSC operand, None for other formats."""
    from ust.convert.layouts import library_layout

    lay = library_layout(t.format)
    if lay is not None and lay.blocksize is not None and lay.blocksize[0] == lay.blocksize[1]:
        return int(lay.blocksize[0])
    return None


class _BlockJacobi(_Base):
    """The diagonal ``b x b`` blocks of A inverted once (batched), applied as one batched GEMV.

    A trailing partial block (``n % b`` rows) is padded with the identity.  Block size: the
    ``block_size`` option, else a BSR / BSC operand's square blocks, else 1 (point Jacobi).
    """

    name = "block_jacobi"

    def __init__(self, c: _Csr, t: Any, block_size: Any) -> None:
        super().__init__(c)
        xp = c.xp
        source = "option block_size"
        if block_size is None:
            block_size = _block_size_of(t)
            source = (
                f"the {t.format.standard_name or 'BSR'} blocks" if block_size else "default (point Jacobi)"
            )
            block_size = block_size or 1
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
            raise InvalidValueError(f"block_size must be a positive integer, got {block_size!r}")
        b = int(min(block_size, max(c.n, 1)))
        nb = -(-c.n // b)
        self.b, self.nb, self.source = b, nb, source
        on = (c.rows // b) == (c.indices // b)
        rows, cols = c.rows[on], c.indices[on]
        blocks = xp.zeros((nb, b, b), dtype=c.dtype)
        blocks[rows // b, rows % b, cols % b] = c.values[on]
        tail = nb * b - c.n
        if tail:
            pad = xp.arange(b - tail, b)
            blocks[nb - 1, pad, pad] = 1
        self._inv = self._invert(blocks)

    def _invert(self, blocks: Any) -> Any:
        """``inv`` of every block; a singular or numerically singular block is an error naming it."""
        xp = self.xp
        try:
            inv = xp.linalg.inv(blocks)
        except np.linalg.LinAlgError:
            inv = None
        eps = float(np.finfo(np.empty(0, dtype=self.dtype).real.dtype).eps)
        if inv is not None:
            norm = xp.abs(blocks).sum(axis=1).max(axis=1)
            norm_inv = xp.abs(inv).sum(axis=1).max(axis=1)
            cond = norm * norm_inv
            bad = xp.flatnonzero(~xp.isfinite(cond) | (cond * eps >= 1))
            if bad.shape[0] == 0:
                return inv
            first = int(bad[0])
        else:
            host = _xp.to_host(blocks)
            sv = np.linalg.svd(host, compute_uv=False)
            ratio = sv[:, -1] / np.maximum(sv[:, 0], np.finfo(sv.dtype).tiny)
            hits = np.flatnonzero(ratio <= eps * self.b)
            first = int(hits[0]) if hits.shape[0] else int(np.argmin(ratio))
        row = first * self.b
        raise SingularMatrixError(
            f"the block-Jacobi preconditioner found diagonal block {first} (rows {row} .. "
            f"{min(row + self.b, self.n) - 1}) singular; try another block_size, 'ilu0' or 'amg'",
            row=row,
        )

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        xp, b, nb = self.xp, self.b, self.nb
        if b == 1:
            return _finish(r * self._inv[:, 0, 0], dt)
        if nb * b != self.n:
            rp = xp.zeros(nb * b, dtype=r.dtype)
            rp[: self.n] = r
        else:
            rp = r
        z = xp.matmul(self._inv, rp.reshape(nb, b, 1)).reshape(nb * b)
        return _finish(z[: self.n] if nb * b != self.n else z, dt)

    def describe(self) -> str:
        tail = self.nb * self.b - self.n
        part = f", the last one {self.b - tail}x{self.b - tail} (identity-padded)" if tail else ""
        return f"block Jacobi, {self.nb} diagonal blocks of {self.b}x{self.b}{part} inverted once ({self.source})"


# ----------------------------------------------------------------------------- ILU(0) / IC(0)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(segment, index)`` of the concatenated ranges ``starts[s] .. starts[s] + counts[s]``."""
    seg = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    return seg, starts[seg] + (np.arange(seg.shape[0], dtype=np.int64) - first[seg])


@dataclass
class _Pattern:
    """A host CSR pattern (int64), sorted, with every diagonal entry present."""

    n: int
    indptr: np.ndarray
    cols: np.ndarray
    rows: np.ndarray
    values: np.ndarray
    keys: np.ndarray
    diag: np.ndarray

    @classmethod
    def of(cls, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int) -> _Pattern:
        """The pattern of the entries plus the missing diagonal (as stored zeros)."""
        keys = rows * n + cols
        dkeys = np.arange(n, dtype=np.int64) * (n + 1)
        missing = dkeys[~np.isin(dkeys, keys)]
        if missing.shape[0]:
            keys = np.concatenate((keys, missing))
            values = np.concatenate((values, np.zeros(missing.shape[0], dtype=values.dtype)))
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        rows, cols = keys // n, keys % n
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(n, indptr, cols, rows, values, keys, np.searchsorted(keys, dkeys))

    def lookup(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the keys ``cand`` and the mask of those that are in the pattern."""
        pos = np.minimum(np.searchsorted(self.keys, cand), self.keys.shape[0] - 1)
        return pos, self.keys[pos] == cand


def _level_solve(
    a: np.ndarray,
    target: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    *,
    conj: bool,
    pivot: np.ndarray,
    root: np.ndarray | None,
) -> tuple[np.ndarray, int]:
    """``f[t] = finish(a[t] - sum f[left] * f[right])`` over the triples of each target ``t``,
    in dependency order: ``finish`` divides by ``f[pivot[t]]`` (where >= 0) or takes the square
    root (where ``root``).  The entries whose dependencies are all final form one level and are
    computed at once (Kahn's algorithm, one step per level); returns ``(f, levels)``.
    """
    nnz = a.shape[0]
    order = np.argsort(target, kind="stable")
    target, left, right = target[order], left[order], right[order]
    tcount = np.bincount(target, minlength=nnz)
    tptr = np.cumsum(tcount) - tcount
    has_pivot = pivot >= 0
    src = np.concatenate((left, right, pivot[has_pivot]))
    dst = np.concatenate((target, target, np.flatnonzero(has_pivot)))
    indeg = np.bincount(dst, minlength=nnz)
    dst = dst[np.argsort(src, kind="stable")]
    ecount = np.bincount(src, minlength=nnz)
    eptr = np.cumsum(ecount) - ecount
    f = np.zeros(nnz, dtype=a.dtype)
    front = np.flatnonzero(indeg == 0)
    levels = done = 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while front.shape[0]:
            levels += 1
            done += front.shape[0]
            counts = tcount[front]
            _, idx = _ranges(tptr[front], counts)
            s = np.zeros(front.shape[0], dtype=a.dtype)
            if idx.shape[0]:
                prod = f[left[idx]] * (np.conj(f[right[idx]]) if conj else f[right[idx]])
                live = counts > 0
                s[live] = np.add.reduceat(prod, (np.cumsum(counts) - counts)[live])
            v = a[front] - s
            if root is not None:
                sq = root[front]
                v[sq] = np.sqrt(v[sq].real)
            p = pivot[front]
            div = p >= 0
            v[div] = v[div] / f[p[div]]
            f[front] = v
            _, cidx = _ranges(eptr[front], ecount[front])
            child, times = np.unique(dst[cidx], return_counts=True)
            indeg[child] -= times
            front = child[indeg[child] == 0]
    if done != nnz:  # pragma: no cover - the dependencies are acyclic by construction
        raise AssertionError("incomplete factorization: dependency cycle")
    return f, levels


def ilu0_factors(csr: Any) -> tuple[Any, Any, int]:
    """The ILU(0) factors of a scipy CSR matrix: ``(L, U, levels)``, L unit lower (its unit
    diagonal stored), U upper, both on A's pattern (plus the diagonal), with ``(L U)_ij = a_ij``
    wherever A stores an entry.  SingularMatrixError at a zero pivot."""
    import scipy.sparse as sp

    A = _canonical_csr(csr)
    n = A.shape[0]
    indptr = A.indptr.astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    pat = _Pattern.of(rows, A.indices.astype(np.int64), A.data, n)
    rows, cols = pat.rows, pat.cols
    # l_ij (i > j) and u_ij (i <= j) satisfy  a_ij = sum_{k < min(i,j)} l_ik u_kj + (l_ij u_jj | u_ij):
    # the triples (i,k) lower x (k,j) strictly upper, kept where (i, j) is in the pattern
    low = np.flatnonzero(rows > cols)
    k = cols[low]
    seg, q = _ranges(pat.diag[k] + 1, pat.indptr[k + 1] - pat.diag[k] - 1)
    p = low[seg]
    pos, hit = pat.lookup(rows[p] * n + cols[q])
    pivot = np.where(rows > cols, pat.diag[cols], -1)
    f, levels = _level_solve(pat.values, pos[hit], p[hit], q[hit], conj=False, pivot=pivot, root=None)
    piv = f[pat.diag]
    bad = np.flatnonzero((piv == 0) | ~np.isfinite(piv))
    if bad.shape[0]:
        row = int(bad[0])
        raise SingularMatrixError(
            f"ILU(0) breaks down: the pivot of row {row} is zero (A has no ILU(0) factorization in this "
            "ordering); try 'jacobi', 'block_jacobi' or 'amg'",
            row=row,
        )
    lower = rows > cols
    upper = ~lower
    lvals = np.where(lower, f, 0).astype(f.dtype)
    lvals[pat.diag] = 1
    keep_l = lower.copy()
    keep_l[pat.diag] = True
    L = sp.csr_array((lvals[keep_l], cols[keep_l], _indptr(rows[keep_l], n)), shape=(n, n))
    U = sp.csr_array((f[upper], cols[upper], _indptr(rows[upper], n)), shape=(n, n))
    return L, U, levels


def ic0_factor(csr: Any) -> tuple[Any, int]:
    """The IC(0) factor of a Hermitian scipy CSR matrix: ``(L, levels)``, L lower on the pattern
    of A's lower triangle (plus the diagonal), ``(L L^H)_ij = a_ij`` wherever that triangle stores
    an entry.  InvalidValueError at a pivot that is not positive."""
    import scipy.sparse as sp

    A = _canonical_csr(csr)
    n = A.shape[0]
    indptr = A.indptr.astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    cols = A.indices.astype(np.int64)
    lower = rows >= cols
    pat = _Pattern.of(rows[lower], cols[lower], A.data[lower], n)
    rows, cols = pat.rows, pat.cols
    # l_ij (j <= i) satisfies  a_ij = sum_{k < j} l_ik conj(l_jk) + l_ij l_jj: the pairs of strictly
    # lower entries (i,k), (j,k) of one column k with j <= i, kept where (i, j) is in the pattern
    strict = np.flatnonzero(rows > cols)
    by_col = strict[np.lexsort((rows[strict], cols[strict]))]
    ccount = np.bincount(cols[by_col], minlength=n)
    cstart = np.cumsum(ccount) - ccount
    rank = np.arange(by_col.shape[0], dtype=np.int64) - cstart[cols[by_col]]
    seg, qi = _ranges(cstart[cols[by_col]], rank + 1)
    p, q = by_col[seg], by_col[qi]
    pos, hit = pat.lookup(rows[p] * n + rows[q])
    diag = rows == cols
    pivot = np.where(diag, -1, pat.diag[cols])
    with np.errstate(invalid="ignore"):
        f, levels = _level_solve(pat.values, pos[hit], p[hit], q[hit], conj=True, pivot=pivot, root=diag)
    piv = f[pat.diag]
    bad = np.flatnonzero(~(piv.real > 0) | ~np.isfinite(piv))
    if bad.shape[0]:
        row = int(bad[0])
        raise InvalidValueError(
            f"IC(0) breaks down: the pivot of row {row} is not positive (A is not positive definite, or "
            "has no IC(0) factorization); try 'ilu0', 'jacobi' or 'amg'"
        )
    return sp.csr_array((f, cols, pat.indptr), shape=(n, n)), levels


def _canonical_csr(m: Any) -> Any:
    """A scipy CSR with sorted, unique entries (a copy where ``m`` is not one already)."""
    import scipy.sparse as sp

    A = sp.csr_array(m)
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"an incomplete factorization needs a square matrix, got shape {A.shape}")
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    return A


def _indptr(rows: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=out[1:])
    return out


class _Triangular:
    """``T^-1 x`` for one sparse triangular factor: CPU SuperLU, GPU cuSPARSE SpSM (cupyx).

    CPU: SuperLU factors a triangular matrix with the natural ordering and no pivoting into the
    matrix itself (no fill), and its compiled solve is the substitution (SciPy's
    ``spsolve_triangular`` costs ~10x more per call); where SuperLU would permute or fill,
    ``spsolve_triangular`` is used instead.
    """

    def __init__(self, T: Any, lower: bool, device: str) -> None:
        self.lower = lower
        self.dtype = np.dtype(T.dtype)
        if device == "cpu":
            import scipy.sparse.linalg as sla

            self._lu: Any = None
            try:
                lu = sla.splu(T.tocsc(), permc_spec="NATURAL", diag_pivot_thresh=0.0)
                ident = np.arange(T.shape[0])
                if (
                    np.array_equal(lu.perm_r, ident)
                    and np.array_equal(lu.perm_c, ident)
                    and lu.L.nnz + lu.U.nnz <= T.nnz + T.shape[0]
                ):
                    self._lu = lu
            except RuntimeError:  # pragma: no cover - SuperLU refuses: the substitution below
                pass
            self._T = T.tocsr()
            self._gpu = None
        else:
            from ust.convert import asarray

            self._gpu = asarray(T).to(device).to_cupyx()
            self._solve = _xp.import_cupy("cupyx.scipy.sparse.linalg").spsolve_triangular

    def __call__(self, x: Any) -> Any:
        if x.dtype.kind == "c" and self.dtype.kind != "c":  # a real factor: real and imaginary parts
            return self(x.real) + 1j * self(x.imag)
        x = _contiguous(x, self.dtype)
        if self._gpu is not None:
            return _finish(self._solve(self._gpu, x, lower=self.lower), self.dtype)
        if self._lu is not None:
            return self._lu.solve(x)
        import scipy.sparse.linalg as sla

        return sla.spsolve_triangular(self._T, x, lower=self.lower)


class _Incomplete(_Base):
    """ILU(0) (``z = U^-1 L^-1 r``) or IC(0) (``z = L^-H L^-1 r``) with exact incomplete factors."""

    def __init__(self, c: _Csr, name: str, symmetry_rtol: Any) -> None:
        super().__init__(c)
        self.name = name
        host = c.host()
        where = (
            "the host" if self.device == "cpu" else f"the host, triangular solves on {self.device} (cuSPARSE)"
        )
        if name == "ilu0":
            L, U, self.levels = ilu0_factors(host)
            self._solves = (_Triangular(L, True, self.device), _Triangular(U, False, self.device))
            self.nnz = int(L.nnz + U.nnz - c.n)
            self.what = (
                f"ILU(0) on A's nonzero pattern ({self.nnz} factor entries, {self.levels} levels), "
                f"factors computed on {where}"
            )
        else:
            _require_hermitian(c, "IC(0)", symmetry_rtol)
            L, self.levels = ic0_factor(host)
            LH = _sorted_csr(L.conj().T)
            self._solves = (_Triangular(L, True, self.device), _Triangular(LH, False, self.device))
            self.nnz = int(L.nnz)
            self.what = (
                f"IC(0) on A's lower triangle ({self.nnz} factor entries, {self.levels} levels), factors "
                f"computed on {where}"
            )

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        first, second = self._solves
        return _finish(self._in_own_dtype(r, lambda v: second(first(v))), dt)

    def describe(self) -> str:
        return self.what


def _sorted_csr(m: Any) -> Any:
    import scipy.sparse as sp

    out = sp.csr_array(m)
    out.sort_indices()
    return out


# ----------------------------------------------------------------------------- spectral bounds


def _spectral_estimate(
    matvec: Callable[[Any], Any],
    n: int,
    dtype: np.dtype,
    xp: ModuleType,
    *,
    steps: int,
    seed: int,
    hermitian: bool,
) -> float:
    """The largest eigenvalue (Hermitian: Lanczos) or the spectral radius (else: Arnoldi) of the
    operator, from ``steps`` Krylov steps with full reorthogonalisation from a fixed-seed start
    (drawn on the host, so the CPU and the GPU start from the same vector)."""
    k = max(1, min(int(steps), n))
    start = np.random.RandomState(seed).standard_normal(n)
    v = xp.asarray(start.astype(dtype))
    V = xp.zeros((k + 1, n), dtype=dtype)
    V[0] = v / xp.linalg.norm(v)
    H = np.zeros((k + 1, k), dtype=dtype)
    used = k
    for j in range(k):
        w = matvec(V[j])
        w = w if w.dtype == dtype else w.astype(dtype)
        h = V[: j + 1].conj() @ w
        w = w - V[: j + 1].T @ h
        h2 = V[: j + 1].conj() @ w  # the second Gram-Schmidt pass: orthogonal to rounding
        w = w - V[: j + 1].T @ h2
        H[: j + 1, j] = _xp.to_host(h + h2)
        beta = float(xp.linalg.norm(w))
        H[j + 1, j] = beta
        if beta <= 1e-12 * max(float(np.abs(H[: j + 2, j]).max()), 1e-300):
            used = j + 1
            break
        if j + 1 < k:
            V[j + 1] = w / beta
    Hk = H[:used, :used]
    if hermitian:
        return float(np.linalg.eigvalsh((Hk + Hk.conj().T) / 2).max())
    return float(np.abs(np.linalg.eigvals(Hk)).max())


def chebyshev_coefficients(lo: float, hi: float, degree: int) -> np.ndarray:
    """Coefficients (highest power first) of p with ``1 - x p(x)`` the degree-``degree``
    Chebyshev polynomial of ``[lo, hi]`` normalised to 1 at 0: pyamg's smoother polynomial,
    here for the dense references of the tests."""
    roots = 0.5 * (hi - lo) * (1 + np.cos(np.pi * (np.arange(degree) + 0.5) / degree)) + lo
    c = np.poly(roots)
    c = c / np.polyval(c, 0)
    return -c[:-1]


def _chebyshev_apply(A: Callable[[Any], Any], r: Any, lo: float, hi: float, degree: int) -> Any:
    """``p(A) r`` by the Chebyshev iteration from zero (Saad, Alg. 12.1): ``degree - 1`` SpMVs,
    stable at any degree (unlike Horner on the monomial coefficients)."""
    theta, delta = (hi + lo) / 2, (hi - lo) / 2
    sigma = theta / delta
    rho = 1 / sigma
    d = r / theta
    x = d
    res = r
    for _ in range(degree - 1):
        res = res - A(d)
        rho_next = 1 / (2 * sigma - rho)
        d = (rho_next * rho) * d + (2 * rho_next / delta) * res
        x = x + d
        rho = rho_next
    return x


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(value: Any, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidValueError(f"{name} must be a positive number, got {value!r}") from None
    if not (np.isfinite(out) and out > 0):
        raise InvalidValueError(f"{name} must be a positive number, got {value!r}")
    return out


class _Chebyshev(_Base):
    """``z = p(A) r``, p the Chebyshev polynomial of pyamg's smoother, for Hermitian positive
    definite A: degree ``d`` means ``1 - x p(x)`` has degree d (``d - 1`` SpMVs per apply)."""

    name = "chebyshev"

    def __init__(self, c: _Csr, t: Any, o: Mapping[str, Any]) -> None:
        super().__init__(c)
        _require_hermitian(c, "the Chebyshev preconditioner", o.get("symmetry_rtol"))
        self.degree = _positive_int(o.get("degree", 3), "degree")
        lower = _positive_float(o.get("lower_bound", 1.0 / 30.0), "lower_bound")
        upper = _positive_float(o.get("upper_bound", 1.1), "upper_bound")
        if lower >= upper:
            raise InvalidValueError(f"lower_bound {lower} must be below upper_bound {upper}")
        self._A = _Product(t)
        if o.get("lambda_max") is not None:
            self.lambda_max = _positive_float(o["lambda_max"], "lambda_max")
            self.source = "given"
        else:
            steps = _positive_int(o.get("steps", 20), "steps")
            lam = _spectral_estimate(
                self._A, c.n, c.dtype, c.xp, steps=steps, seed=int(o.get("seed", 0)), hermitian=True
            )
            if not (np.isfinite(lam) and lam > 0):
                raise InvalidValueError(
                    f"the Chebyshev preconditioner needs a positive definite matrix, but its largest "
                    f"eigenvalue estimate is {lam:.3g}"
                )
            self.lambda_max = lam
            self.source = f"{min(steps, c.n)} Lanczos steps"
        self.bounds = (lower * self.lambda_max, upper * self.lambda_max)

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        return _finish(
            self._in_own_dtype(r, lambda v: _chebyshev_apply(self._A, v, *self.bounds, self.degree)), dt
        )

    def describe(self) -> str:
        lo, hi = self.bounds
        return (
            f"Chebyshev polynomial, degree {self.degree} on [{lo:.4g}, {hi:.4g}] (lambda_max {self.lambda_max:.4g}, "
            f"{self.source}), {self.degree - 1} SpMVs per apply"
        )


# ----------------------------------------------------------------------------- AMG


@dataclass
class _Level:
    """One level of the V-cycle: A, P, R as device SpMVs (None on the coarsest level)."""

    A: Callable[[Any], Any] | None
    P: Callable[[Any], Any] | None
    R: Callable[[Any], Any] | None
    invd: Any
    omega: float
    cheb: tuple[float, float] | None
    rows: int
    nnz: int


def _rho_dinv_a(A: Any, d: np.ndarray, hermitian: bool, steps: int, seed: int) -> float:
    """``rho(D^-1 A)`` on the host: Lanczos on the similar ``D^-1/2 A D^-1/2`` where that is
    Hermitian (a positive real diagonal), Arnoldi on ``D^-1 A`` otherwise."""
    n = A.shape[0]
    if hermitian and np.all(d.imag == 0) and np.all(d.real > 0):
        s = 1 / np.sqrt(d.real)
        return _spectral_estimate(
            lambda x: s * (A @ (s * x)), n, A.dtype, np, steps=steps, seed=seed, hermitian=True
        )
    inv = 1 / d
    return _spectral_estimate(
        lambda x: inv * (A @ x), n, A.dtype, np, steps=steps, seed=seed, hermitian=False
    )


def _host_csr(M: Any) -> Any:
    """A scipy ``csr_array`` copy on the host of a scipy or cupyx CSR matrix."""
    import scipy.sparse as sp

    return sp.csr_array(M.get() if _xp.is_cupy(M.data) else M)


def _import_pyamg() -> Any:
    try:
        import pyamg
    except ImportError:
        raise BackendUnavailableError(
            "the 'amg' preconditioner builds its hierarchy with pyamg, which is not installed",
            pip_command='pip install "ust[amg]"',
        ) from None
    return pyamg


@dataclass
class _Built:
    """One level of a built hierarchy, before the V-cycle's operators are made: A, P, R as CSR
    matrices (scipy on the host for pyamg; scipy or cupyx on A's device for the device setup)
    and, where the setup estimated it, ``rho(D^-1 A)``."""

    A: Any
    P: Any | None
    R: Any | None
    rho: float | None


#: ``options["setup"]``: who builds the hierarchy.
AMG_SETUPS: tuple[str, ...] = ("auto", "device", "pyamg")


def _has_pyamg() -> bool:
    try:
        _import_pyamg()
    except BackendUnavailableError:
        return False
    return True


def _amg_setup(o: Mapping[str, Any], device: str) -> str:
    """``"device"`` or ``"pyamg"`` from ``options["setup"]``: "auto" is pyamg where pyamg's own
    options are given, the device setup on a GPU or without pyamg, pyamg otherwise."""
    mode = o.get("setup", "auto")
    if mode not in AMG_SETUPS:
        raise InvalidValueError(f"setup must be one of {', '.join(map(repr, AMG_SETUPS))}, got {mode!r}")
    if mode == "device" and o.get("pyamg"):
        raise InvalidValueError("options['pyamg'] configures setup='pyamg' only, not the device setup")
    if mode != "auto":
        return str(mode)
    if o.get("pyamg"):
        return "pyamg"
    return "device" if device != "cpu" or not _has_pyamg() else "pyamg"


class _AMG(_Base):
    """Smoothed-aggregation AMG: the hierarchy is built by ust's array programs on A's device
    (:mod:`ust.algebra.aggregation`: MIS-2 aggregation, SpGEMM Galerkin products) or by pyamg
    on the host (``options["setup"]``); the V-cycle runs on A's device with ust SpMVs (A, P, R
    of every level as CSR Tensors, each planned once).

    Smoothing: weighted Jacobi, ``omega`` (default ``4/3 / rho(D^-1 A)`` per level, rho from a
    fixed-seed Lanczos estimate), ``sweeps`` before and after; or ``smoother="chebyshev"``
    (pyamg's polynomial on ``[rho/30, 1.1 rho]``).  The coarsest level is solved directly:
    SuperLU on the CPU; on a GPU a dense inverse up to ``dense_limit`` rows (one GEMV; the
    default max_coarse keeps it far below), else cupyx's splu (host factor, device solves).
    """

    name = "amg"

    def __init__(self, c: _Csr, t: Any, o: Mapping[str, Any]) -> None:
        import time

        super().__init__(c)
        self.smoother = o.get("smoother", "jacobi")
        if self.smoother not in ("jacobi", "chebyshev"):
            raise InvalidValueError(f"smoother must be 'jacobi' or 'chebyshev', got {self.smoother!r}")
        self.sweeps = _positive_int(o.get("sweeps", 1), "sweeps")
        self.degree = _positive_int(o.get("degree", 3), "degree")
        omega = o.get("omega")
        omega = None if omega is None else _positive_float(omega, "omega")
        steps = _positive_int(o.get("steps", 20), "steps")
        seed = int(o.get("seed", 0))
        self.setup = _amg_setup(o, self.device)
        t0 = time.perf_counter()
        built, hermitian = (self._pyamg_levels if self.setup == "pyamg" else self._device_levels)(
            c, o, steps, seed
        )
        self.setup_seconds = time.perf_counter() - t0
        self.operator_complexity = sum(int(b.A.nnz) for b in built) / max(int(built[0].A.nnz), 1)
        self.levels: list[_Level] = []
        for k, b in enumerate(built):
            if k == len(built) - 1:  # the coarsest level (the whole matrix, for a one-level hierarchy)
                Ah = _host_csr(b.A) if k else c.host()
                self._coarse_setup(Ah.astype(self.dtype), o)
                self.levels.append(_Level(None, None, None, None, 0.0, None, Ah.shape[0], int(b.A.nnz)))
                break
            A_op = _Product(t) if k == 0 else self._device_op(b.A)
            invd, w, cheb = self._smoother_setup(k, b, omega, hermitian, steps, seed)
            self.levels.append(
                _Level(
                    A_op, self._device_op(b.P), self._device_op(b.R), invd, w, cheb, int(b.A.shape[0]),
                    int(b.A.nnz),
                )
            )  # fmt: skip

    def _pyamg_levels(
        self, c: _Csr, o: Mapping[str, Any], steps: int, seed: int
    ) -> tuple[list[_Built], bool]:
        """pyamg's hierarchy, built on the host from A's nonzeros (its levels in A's dtype)."""
        pyamg = _import_pyamg()
        import scipy.sparse as sp

        extra = dict(o.get("pyamg") or {})
        clash = sorted({"max_coarse", "max_levels", "presmoother", "postsmoother"} & set(extra))
        if clash:
            raise InvalidValueError(
                f"options['pyamg'] may not set {clash}: use the preconditioner's own options"
            )
        kwargs: dict[str, Any] = {"max_coarse": _positive_int(o.get("max_coarse", 500), "max_coarse")}
        if o.get("max_levels") is not None:
            kwargs["max_levels"] = _positive_int(o["max_levels"], "max_levels")
        host = c.host()
        # pyamg draws its spectral-radius start vectors from NumPy's global generator: seeded here
        # (and restored after), the hierarchy is the same on every build, CPU or GPU
        state = np.random.get_state()
        try:
            np.random.seed(seed)
            ml = pyamg.smoothed_aggregation_solver(
                sp.csr_matrix(host), presmoother=None, postsmoother=None, **kwargs, **extra
            )
        finally:
            np.random.set_state(state)
        self.hierarchy = ml
        hermitian = extra.get("symmetry", "hermitian") != "nonsymmetric"
        built = []
        for k, lvl in enumerate(ml.levels):
            A = host if k == 0 else sp.csr_array(lvl.A.tocsr()).astype(self.dtype)
            last = k == len(ml.levels) - 1
            P = None if last else sp.csr_array(lvl.P.tocsr())
            R = None if last else sp.csr_array(lvl.R.tocsr())
            built.append(_Built(A, P, R, None))
        return built, hermitian

    def _device_levels(
        self, c: _Csr, o: Mapping[str, Any], steps: int, seed: int
    ) -> tuple[list[_Built], bool]:
        """ust's SA hierarchy, built by array programs on A's device (NumPy / SciPy on the CPU,
        CuPy / cuSPARSE on a GPU): no level goes through the host."""
        from ust.algebra import aggregation

        A = aggregation.without_zeros(aggregation.as_csr(c.xp, c.values, c.indices, c.indptr, (c.n, c.n)))
        max_levels = o.get("max_levels")
        h = aggregation.smoothed_aggregation(
            A,
            max_coarse=_positive_int(o.get("max_coarse", 500), "max_coarse"),
            max_levels=10 if max_levels is None else _positive_int(max_levels, "max_levels"),
            seed=seed,
            steps=steps,
        )
        self.hierarchy = h
        return [_Built(lv.A, lv.P, lv.R, lv.rho) for lv in h.levels], h.hermitian

    def _smoother_setup(
        self, k: int, b: _Built, omega: float | None, hermitian: bool, steps: int, seed: int
    ) -> tuple[Any, float, tuple[float, float] | None]:
        """``(1/diag, omega, None)`` for Jacobi, ``(None, 0, bounds)`` for Chebyshev, on level k."""
        xp = _xp.namespace(b.A.data)
        if self.smoother == "chebyshev":
            rho = _spectral_estimate(
                b.A.__matmul__, int(b.A.shape[0]), np.dtype(b.A.dtype), xp, steps=steps, seed=seed,
                hermitian=hermitian,
            )  # fmt: skip
            return None, 0.0, (rho / 30.0, 1.1 * rho)
        d = b.A.diagonal()
        if bool((d == 0).any()):
            raise InvalidValueError(
                f"AMG level {k} has a zero diagonal entry: Jacobi smoothing cannot be used there "
                "(try options['smoother'] = 'chebyshev', or 'ilu0')"
            )
        if omega is None:
            rho = b.rho if b.rho is not None else _rho_dinv_a(b.A, d, hermitian, steps, seed)
            omega = (4.0 / 3.0) / rho
        return self.xp.asarray(1 / d), omega, None

    def _device_op(self, M: Any) -> Callable[[Any], Any]:
        """``M @ x`` through the planner's SpMV, on A's device (planned once, reused)."""
        from ust.convert import asarray

        T = asarray(M if M.dtype == self.dtype else M.astype(self.dtype))  # every level in A's dtype
        if T.device != self.device:
            T = T.to(self.device)
        return _Product(T)

    def _coarse_setup(self, Ac: Any, o: Mapping[str, Any]) -> None:
        mode = o.get("coarse_solver", "auto")
        if mode not in ("auto", "splu", "inv", "pinv"):
            raise InvalidValueError(f"coarse_solver must be 'auto', 'splu', 'inv' or 'pinv', got {mode!r}")
        limit = _positive_int(o.get("dense_limit", DENSE_COARSE_LIMIT), "dense_limit")
        nc = Ac.shape[0]
        if mode == "auto":
            mode = "splu" if self.device == "cpu" or nc > limit else "inv"
        if mode in ("inv", "pinv"):
            if nc > limit:
                raise InvalidValueError(f"a dense coarse solve of {nc} rows is above dense_limit {limit}")
            dense = Ac.toarray()
            try:
                inv = np.linalg.inv(dense) if mode == "inv" else np.linalg.pinv(dense)
            except np.linalg.LinAlgError:
                raise SingularMatrixError(
                    f"the coarsest AMG level ({nc} rows) is singular; set options['coarse_solver'] = 'pinv'"
                ) from None
            inv_dev = self.xp.asarray(inv)
            self._coarse: Callable[[Any], Any] = lambda b: inv_dev @ b
            self.coarse_text = (
                f"coarsest {nc} rows solved directly (dense {'pseudo-' if mode == 'pinv' else ''}inverse)"
            )
            return
        import scipy.sparse.linalg as sla

        try:
            if self.device == "cpu":
                lu = sla.splu(Ac.tocsc())
                where = "SuperLU"
            else:
                from ust.convert import asarray

                dev = asarray(Ac).to(self.device).to_cupyx()
                lu = _xp.import_cupy("cupyx.scipy.sparse.linalg").splu(dev)
                where = "SuperLU factor on the host, triangular solves on the device"
        except RuntimeError as exc:
            raise SingularMatrixError(
                f"the coarsest AMG level ({nc} rows) cannot be factorized ({exc}); "
                "set options['coarse_solver'] = 'pinv'"
            ) from None
        dtype = np.dtype(Ac.dtype)

        def solve(b: Any) -> Any:
            if b.dtype.kind == "c" and dtype.kind != "c":
                return solve(b.real) + 1j * solve(b.imag)
            return lu.solve(b if b.dtype == dtype else b.astype(dtype))

        self._coarse = solve
        self.coarse_text = f"coarsest {nc} rows solved directly ({where})"

    def _smooth(self, lv: _Level, x: Any, b: Any) -> Any:
        """``sweeps`` smoothing steps on ``A x = b`` (x None: from zero, one SpMV saved)."""
        assert lv.A is not None
        for _ in range(self.sweeps):
            res = b if x is None else b - lv.A(x)
            if lv.cheb is None:
                step = lv.omega * (lv.invd * res)
            else:
                step = _chebyshev_apply(lv.A, res, *lv.cheb, self.degree)
            x = step if x is None else x + step
        return x

    def _cycle(self, k: int, b: Any) -> Any:
        lv = self.levels[k]
        if lv.A is None or lv.P is None or lv.R is None:
            return self._coarse(b)
        x = self._smooth(lv, None, b)
        coarse = self._cycle(k + 1, lv.R(b - lv.A(x)))
        x = x + lv.P(coarse)
        return self._smooth(lv, x, b)

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        return _finish(self._in_own_dtype(r, lambda b: self._cycle(0, b)), dt)

    def describe(self) -> str:
        if self.smoother == "jacobi":
            smooth = f"weighted-Jacobi smoothing, {self.sweeps} sweep(s) before and after"
        else:
            smooth = f"Chebyshev smoothing (degree {self.degree}), {self.sweeps} sweep(s) before and after"
        built = (
            "hierarchy built by pyamg on the host"
            if self.setup == "pyamg"
            else f"hierarchy built on {self.device} by ust's array programs (MIS-2 aggregation)"
        )
        return (
            f"smoothed-aggregation AMG, {built}, {len(self.levels)} levels, operator complexity "
            f"{self.operator_complexity:.2f}, {self.coarse_text}; {smooth}"
        )


# ----------------------------------------------------------------------------- user operators


class _User:
    """A user's approximation of ``A^-1``: ``apply(r) = M @ r``."""

    name = "user"

    def __init__(self, M: Any, n: int, xp: ModuleType, device: str, dtype: np.dtype) -> None:
        from ust.tensor import Tensor

        self.n = n
        self.xp = xp
        self.device = device
        self.dtype = _work_dtype(dtype)
        mod = type(M).__module__.split(".", 1)[0]
        self._copy = False
        linear_operator = hasattr(M, "matvec") and hasattr(M, "shape")
        if isinstance(M, Tensor) or (mod in ("scipy", "cupyx", "torch") and not linear_operator):
            from ust.algebra.operands import as_tensor

            T = as_tensor(M)
            self._shape(T.shape)
            if T.device != self.device:
                T = T.to(self.device)
            self._op: Callable[[Any], Any] = _Product(T)
            self.what = f"user matrix ({T.format.standard_name or 'custom format'}) used as M^-1"
        elif isinstance(M, np.ndarray) or _xp.is_cupy(M):
            self._shape(M.shape)
            dense = _xp.to_host(M) if self.device == "cpu" else self.xp.asarray(M)
            self._op = lambda r: dense @ r
            self.what = "user dense matrix used as M^-1"
        elif linear_operator:
            self._shape(tuple(M.shape))
            self._op = M.matvec
            self._copy = True
            self.what = f"user operator {type(M).__name__} (matvec)"
        elif callable(M):
            self._op = M
            self._copy = True
            self.what = f"user callable {getattr(M, '__name__', type(M).__name__)}"
        else:
            raise InvalidTypeError(
                f"M must be None, one of {PRECONDITIONERS}, a LinearOperator, a ust Tensor, a sparse or dense "
                f"matrix or a callable r -> z; got {type(M).__module__}.{type(M).__name__}"
            )

    def _shape(self, shape: tuple[int, ...]) -> None:
        if tuple(int(s) for s in shape) != (self.n, self.n):
            raise ShapeError(f"the preconditioner M has shape {tuple(shape)} but A is {self.n} x {self.n}")

    def apply(self, r: Any) -> Any:
        dt = _out_dtype(r.dtype, self.dtype)
        z = self._op(r.copy() if self._copy else r)
        z = self.xp.asarray(z).reshape(-1)
        if int(z.shape[0]) != self.n:
            raise ShapeError(
                f"the preconditioner M returned {int(z.shape[0])} values for a vector of length {self.n}"
            )
        return _finish(z, dt)

    def describe(self) -> str:
        return self.what

    def __repr__(self) -> str:
        return f"<user preconditioner: {self.what}>"


class _Identity(_Base):
    """An empty (0 x 0) system: every preconditioner is the identity there."""

    def __init__(self, c: _Csr, name: str) -> None:
        super().__init__(c)
        self.name = name

    def apply(self, r: Any) -> Any:
        dt = self._check(r)
        return r.astype(dt, copy=True)

    def describe(self) -> str:
        return f"{self.name} (empty system: identity)"


# ----------------------------------------------------------------------------- entry point

_AMG_OPTIONS = (
    "max_coarse", "max_levels", "smoother", "sweeps", "omega", "degree", "steps", "seed", "coarse_solver",
    "dense_limit", "pyamg", "setup",
)  # fmt: skip
_OPTIONS: dict[str, frozenset[str]] = {
    "jacobi": frozenset(),
    "block_jacobi": frozenset({"block_size"}),
    "ilu0": frozenset(),
    "ic0": frozenset({"symmetry_rtol"}),
    "chebyshev": frozenset(
        {"degree", "lower_bound", "upper_bound", "lambda_max", "steps", "seed", "symmetry_rtol"}
    ),
    "amg": frozenset(_AMG_OPTIONS),
}


def _checked_options(name: str, options: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidTypeError(f"preconditioner options must be a mapping, got {type(options).__name__}")
    unknown = sorted(set(options) - _OPTIONS[name])
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[name])) or "none"
        raise InvalidValueError(
            f"unknown option(s) {unknown} for the {name!r} preconditioner; it takes: {allowed}"
        )
    return options


def build_preconditioner(
    M: Any, a: Any, *, options: Mapping[str, Any] | None = None
) -> Preconditioner | None:
    """The preconditioner ``M`` for the system matrix ``a``, built once (see the module text).

    ``M`` is None (-> None), one of :data:`PRECONDITIONERS`, an object already following the
    :class:`Preconditioner` protocol (returned as is), or a user operator approximating
    ``A^-1``: a scipy / cupyx LinearOperator, a ust Tensor, a sparse or dense matrix, a callable
    ``r -> z``.  ``a`` is a square ust Tensor (or sparse matrix) on the execution device, in any
    format.  ``options`` tune the named preconditioners (unknown keys are an error).

    >>> import numpy as np, scipy.sparse as sp
    >>> import ust
    >>> A = ust.asarray(sp.diags_array([4.0, -1.0, -1.0], offsets=[0, 1, -1], shape=(6, 6)), "DIA")
    >>> p = build_preconditioner("jacobi", A)
    >>> p.apply(np.ones(6))
    array([0.25, 0.25, 0.25, 0.25, 0.25, 0.25])
    >>> build_preconditioner("ilu", A)
    Traceback (most recent call last):
    ...
    ust.runtime.errors.UnsupportedError: unknown preconditioner 'ilu'; choose one of jacobi, block_jacobi, ilu0, ...
    """
    if M is None:
        return None
    if isinstance(M, str):
        if M not in PRECONDITIONERS:
            raise UnsupportedError(
                f"unknown preconditioner {M!r}; choose one of {', '.join(PRECONDITIONERS)}, or pass an operator "
                "(LinearOperator, Tensor, sparse matrix, callable)"
            )
        o = _checked_options(M, options)
        t, c = _system(a)
        if c.n == 0:
            return _Identity(c, M)
        if M == "jacobi":
            return _Jacobi(c)
        if M == "block_jacobi":
            return _BlockJacobi(c, t, o.get("block_size"))
        if M in ("ilu0", "ic0"):
            return _Incomplete(c, M, o.get("symmetry_rtol"))
        if M == "chebyshev":
            return _Chebyshev(c, t, o)
        return _AMG(c, t, o)
    if options:
        raise InvalidValueError("options apply to the named preconditioners only, not to a user operator M")
    if hasattr(M, "apply") and hasattr(M, "describe") and callable(M.apply):
        return M
    return _User(M, *_user_target(a))


def _user_target(a: Any) -> tuple[int, ModuleType, str, np.dtype]:
    """``(n, xp, device, dtype)`` of the system a user M is checked against: a Tensor or sparse
    matrix, or any object with ``shape`` and ``dtype`` (a LinearOperator system: only its shape
    matters; ``xp`` / ``device`` attributes where it has them, else the CPU)."""
    from ust.algebra.operands import as_tensor, require_2d

    try:
        t = as_tensor(a)
    except UnsupportedError:
        t = None
    if t is not None:
        require_2d(t, "a preconditioner")
        shape, xp, device, dtype = t.shape, t.xp, t.device, t.dtype
    elif hasattr(a, "shape") and hasattr(a, "dtype"):
        shape, xp = tuple(int(s) for s in a.shape), getattr(a, "xp", np)
        device = getattr(a, "device", None)
        device = device if isinstance(device, str) else ("cpu" if xp is np else "cuda")
        dtype = np.dtype(a.dtype)
    else:
        raise InvalidTypeError(
            f"the system matrix must be a ust Tensor or sparse matrix, got {type(a).__name__}"
        )
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ShapeError(f"a preconditioner needs a square matrix, got shape {shape}")
    return int(shape[0]), xp, device, dtype
