"""Smoothed-aggregation AMG setup as array programs: one code for NumPy / scipy.sparse (CPU)
and CuPy / cupyx.scipy.sparse (GPU), so the hierarchy is built where the matrix lives.

The model is Bell, Dalton & Olson (2012), "Exposing fine-grained parallelism in algebraic
multigrid methods" (SIAM J. Sci. Comput. 34(4)); the reference semantics are pyamg's
``smoothed_aggregation_solver`` with its defaults.  Per level:

* **strength** (:func:`strength`): pyamg's symmetric measure, ``a_ij`` strong when
  ``|a_ij| >= theta sqrt(|a_ii a_jj|)`` (theta 0 by default), the diagonal dropped;
* **aggregation** (:func:`aggregate`): a distance-2 maximal independent set of the strength
  graph (priorities from an integer hash of the node and the seed, each round two
  max-propagation passes over the edges), then every node joins the aggregate of its nearest
  root (two more passes); a node without strong neighbours joins no aggregate (its row of T is
  empty: pyamg's handling of isolated nodes, e.g. Dirichlet rows);
* **tentative prolongator** (:func:`tentative`): one entry per aggregated row, the near-null
  space vector B restricted to each aggregate and normalised (``1/sqrt(size)`` for the
  constant B of the first level), and the coarse B (the aggregates' norms of B);
* **smoothing** (:func:`smooth_prolongator`): ``P = (I - omega D^-1 A) T``, ``omega = 4/3 /
  rho(D^-1 A)``, rho from :func:`spectral_radius` (Lanczos, or Arnoldi for a non-Hermitian A,
  a fixed hashed start vector);
* **Galerkin product** (:func:`galerkin`): ``R = P^H``, ``A_c = R (A P)`` by the sparse module's
  SpGEMM (SciPy's on the CPU, cuSPARSE's through cupyx on the GPU).

Every step is whole-array O(nnz) work; Python loops run only over MIS rounds, Krylov steps and
levels.  The same seed gives the same aggregates on the CPU and the GPU (the priorities are an
integer hash computed identically in both packages, and entries below ``DROP`` times
``sqrt(|a_ii a_jj|)``, such as rounding residue of a Galerkin product that one SpGEMM keeps and
the other drops, are never strong).

Where this differs from pyamg: aggregates are MIS-2 aggregates (root plus all within distance
two: larger than pyamg's greedy standard aggregation, hence a lower operator complexity and
often a few more iterations); R is always ``P^H`` (pyamg smooths R separately for
``symmetry="nonsymmetric"``); explicit zeros are never strong.

Array functions relied on (all present in NumPy and CuPy): ``arange``, ``zeros``,
``zeros_like``, ``ones``, ``where``, ``abs``, ``sqrt``, ``cumsum``, ``bincount`` (with
``weights`` and ``minlength``), ``stack``, ``vdot``, ``linalg.norm``, ``array_equal``, dense
``@`` (Arnoldi's Gram-Schmidt), boolean-mask indexing, integer gathers, scatter assignment
(``a[idx] = True``, ``a[1:] = ...``), ``astype``, ``copy``, ``.real``, ``.conj()``, ``.all()``,
``.any()``, ``.sum()``, ``.max()``, and bitwise ``>>`` / ``<<`` / ``&`` / ``|`` / ``^`` on uint32 /
uint64 (with a wrapping uint32 multiply); from :mod:`ust.runtime.xp`: ``scatter_max``
(``np.maximum.at`` / ``cupyx.scatter_max`` on uint64), ``expand_segments``, ``sparse_module``,
``as_index``, ``to_host``.  Sparse-module calls: ``csr_matrix((data, indices, indptr),
shape=)``, ``A @ B`` (SpGEMM), ``A @ x`` (SpMV), ``A - B``, ``.T``, ``.tocsr()``, ``.conj()``,
``.diagonal()``, ``.sort_indices()``, ``.nnz``, ``.shape``, ``.dtype``, ``.data``,
``.indices``, ``.indptr``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from ust.runtime import xp as _xp
from ust.runtime.errors import InvalidValueError, ShapeError

__all__ = [
    "Hierarchy",
    "Level",
    "aggregate",
    "as_csr",
    "galerkin",
    "is_hermitian",
    "priorities",
    "smooth_prolongator",
    "smoothed_aggregation",
    "spectral_radius",
    "strength",
    "tentative",
    "without_zeros",
]

#: Entries at most this fraction of ``sqrt(|a_ii a_jj|)`` are never strong (explicit zeros,
#: rounding residue): the CPU's and the GPU's SpGEMM then give the same strength graph.
DROP = 1e-12
#: MIS rounds before the nodes still undecided become roots themselves (aggregates stay valid,
#: only smaller); a random-priority MIS-2 needs O(log n) rounds, far below this.
MAX_ROUNDS = 32
#: Node states in the high 32 bits of an MIS key (the priority is the low 32 bits).
_OUT, _UNDECIDED, _ROOT = 0, 1, 2
_LOW = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


@dataclass(frozen=True)
class Level:
    """One level: its operator A (CSR of the sparse module), and unless coarsest, P, R, the
    aggregate of every row (-1: none), the ``rho(D^-1 A)`` estimate used to smooth P, the MIS
    rounds and the seconds of each phase that built P, R and the next A (see :class:`_Clock`)."""

    A: Any
    P: Any | None = None
    R: Any | None = None
    aggregates: Any | None = None
    rho: float | None = None
    rounds: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Hierarchy:
    """The levels, finest first, and whether A was taken as Hermitian."""

    levels: tuple[Level, ...]
    hermitian: bool

    def operator_complexity(self) -> float:
        """``sum nnz(A_k) / nnz(A_0)``, pyamg's definition."""
        first = max(int(self.levels[0].A.nnz), 1)
        return sum(int(lv.A.nnz) for lv in self.levels) / first

    def grid_complexity(self) -> float:
        """``sum rows(A_k) / rows(A_0)``."""
        first = max(int(self.levels[0].A.shape[0]), 1)
        return sum(int(lv.A.shape[0]) for lv in self.levels) / first


# ----------------------------------------------------------------------------- CSR helpers


def as_csr(xp: ModuleType, data: Any, indices: Any, indptr: Any, shape: tuple[int, int]) -> Any:
    """A CSR matrix of xp's sparse module on these buffers, int32 indices where they fit (cupyx
    takes no other)."""
    idx = np.dtype(np.int32) if int(data.shape[0]) < 2**31 - 1 else np.dtype(np.int64)
    return _xp.sparse_module(xp).csr_matrix(
        (data, _xp.as_index(indices, idx), _xp.as_index(indptr, idx)), shape=shape
    )


def without_zeros(A: Any) -> Any:
    """A without its stored zeros (a new matrix where it has any; A's buffers are never written)."""
    xp = _xp.namespace(A.data)
    keep = A.data != 0
    if bool(keep.all()):
        return A
    n = int(A.shape[0])
    indptr = xp.zeros(n + 1, dtype=np.int64)
    indptr[1:] = xp.cumsum(xp.bincount(_rows(A)[keep], minlength=n)[:n])
    return as_csr(xp, A.data[keep], A.indices[keep], indptr, A.shape)


def _rows(A: Any) -> Any:
    """The row of every stored entry of a CSR matrix."""
    xp = _xp.namespace(A.data)
    return _xp.expand_segments(xp, A.indptr[1:] - A.indptr[:-1], int(A.data.shape[0]))


def _scale_rows(A: Any, s: Any) -> Any:
    """``diag(s) A`` on A's pattern (no SpGEMM: one gather and multiply)."""
    xp = _xp.namespace(A.data)
    return as_csr(xp, A.data * s[_rows(A)], A.indices, A.indptr, A.shape)


def _sorted(A: Any) -> Any:
    """A with sorted column indices (SpGEMM output need not be), in place."""
    A.sort_indices()
    return A


def _real_dtype(dtype: Any) -> np.dtype:
    return np.empty(0, dtype=dtype).real.dtype


def is_hermitian(A: Any, rtol: float | None = None) -> bool:
    """Whether the canonical CSR ``A`` equals its conjugate transpose: same pattern, values
    within ``rtol`` (default 100 eps) of ``max |a_ij|``.  One transpose (a counting sort)."""
    xp = _xp.namespace(A.data)
    if A.shape[0] != A.shape[1]:
        return False
    if int(A.data.shape[0]) == 0:
        return True
    H = _sorted((A.conj() if A.dtype.kind == "c" else A).T.tocsr())
    if not (bool(xp.array_equal(A.indptr, H.indptr)) and bool(xp.array_equal(A.indices, H.indices))):
        return False
    tol = 100 * float(np.finfo(_real_dtype(A.dtype)).eps) if rtol is None else float(rtol)
    scale = float(xp.abs(A.data).max())
    return float(xp.abs(A.data - H.data).max()) <= tol * scale


# ----------------------------------------------------------------------------- strength


def strength(A: Any, theta: float = 0.0) -> tuple[Any, Any]:
    """``(src, dst)``: the strong off-diagonal entries ``(i, j)`` of A, ``|a_ij| >= theta
    sqrt(|a_ii a_jj|)`` and ``|a_ij| > DROP sqrt(|a_ii a_jj|)`` (pyamg's symmetric measure)."""
    if not 0.0 <= float(theta) < 1.0:
        raise InvalidValueError(f"the strength threshold theta must be in [0, 1), got {theta!r}")
    xp = _xp.namespace(A.data)
    rows, cols = _rows(A), A.indices
    root = xp.sqrt(xp.abs(A.diagonal()))
    scale = root[rows] * root[cols]
    mag = xp.abs(A.data)
    keep = (rows != cols) & (mag >= float(theta) * scale) & (mag > DROP * scale)
    return rows[keep], cols[keep]


# ----------------------------------------------------------------------------- aggregation


def _hash32(xp: ModuleType, x: Any) -> Any:
    """A bijection of uint32 (Wellons' lowbias32): scrambled but reproducible on any device."""
    u = np.uint32
    x = x ^ (x >> u(16))
    x = x * u(0x7FEB352D)
    x = x ^ (x >> u(15))
    x = x * u(0x846CA68B)
    return x ^ (x >> u(16))


def priorities(xp: ModuleType, n: int, seed: int) -> Any:
    """Distinct uint32 pseudo-random priorities of nodes ``0 .. n-1`` (n < 2^32), a function of
    the seed alone: the same on NumPy and CuPy."""
    if n >= 2**32:
        raise ShapeError(f"the aggregation handles fewer than 2^32 rows, got {n}")
    offset = np.uint32((int(seed) * _GOLDEN) & _LOW)
    return _hash32(xp, xp.arange(n, dtype=np.uint32) + offset)


def _spread(xp: ModuleType, key: Any, src: Any, dst: Any) -> Any:
    """``m[i] = max(key[i], key[j] for every edge (i, j))``: one O(edges) pass."""
    m = key.copy()
    _xp.scatter_max(xp, m, src, key[dst])
    return m


def mis2(
    xp: ModuleType, n: int, src: Any, dst: Any, prio: Any, max_rounds: int = MAX_ROUNDS
) -> tuple[Any, int]:
    """Roots of a distance-2 maximal independent set of the graph ``(src, dst)`` and the rounds
    used.  Key = (state, priority); per round the largest key within distance two (two
    :func:`_spread` passes) decides: an undecided node holding it becomes a root, one that sees
    a root goes out.  Nodes without edges never take part; nodes still undecided after
    ``max_rounds`` become roots.  Whenever the undecided nodes have halved, the passes drop
    the edges no undecided node reads (:func:`_live_edges`): the later rounds, which decide few
    nodes, then cost little."""
    u64 = np.uint64
    isolated = xp.bincount(src, minlength=n)[:n] == 0
    state = xp.where(isolated, u64(_OUT), u64(_UNDECIDED)).astype(u64)
    key = (state << u64(32)) | prio.astype(u64)
    near = far = (src, dst)
    rounds, last = 0, n
    for _ in range(max_rounds):
        undecided = (key >> u64(32)) == u64(_UNDECIDED)
        count = int(undecided.sum())
        if count == 0:
            break
        if 2 * count <= last:
            near, far = _live_edges(xp, undecided, *far)
            last = count
        rounds += 1
        top = _spread(xp, _spread(xp, key, *far), *near)
        root = undecided & (top == key)
        out = undecided & ((top >> u64(32)) == u64(_ROOT))
        key = xp.where(root, key + u64(1 << 32), xp.where(out, key & u64(_LOW), key))
    state = key >> u64(32)
    return (state == u64(_ROOT)) | (state == u64(_UNDECIDED)), rounds


def _live_edges(
    xp: ModuleType, undecided: Any, src: Any, dst: Any
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """The edges a round still reads: ``(near, far)``.  The second pass needs the edges leaving
    undecided nodes (near); the first pass must be right at those nodes and their neighbours,
    so it needs the edges leaving either (far).  The undecided set only shrinks, so edges
    dropped now are never needed again."""
    leaving = undecided[src]
    reached = undecided.copy()
    reached[dst[leaving]] = True
    keep = reached[src]
    fsrc, fdst = src[keep], dst[keep]
    inner = undecided[fsrc]
    return (fsrc[inner], fdst[inner]), (fsrc, fdst)


def aggregate(
    xp: ModuleType, n: int, src: Any, dst: Any, *, seed: int = 0, max_rounds: int = MAX_ROUNDS
) -> tuple[Any, int, int]:
    """``(aggregate of every node (-1: none), number of aggregates, MIS rounds)``.

    The roots of :func:`mis2` number the aggregates in node order; a node next to a root joins
    the root of highest priority among its neighbours, a node two steps away the aggregate of
    a neighbour that joined one (so every aggregate is connected through strong edges)."""
    u64 = np.uint64
    prio = priorities(xp, n, seed)
    roots, rounds = mis2(xp, n, src, dst, prio, max_rounds)
    ids = xp.cumsum(roots.astype(np.int64))
    nagg = int(ids[-1]) if n else 0
    akey = xp.where(roots, (prio.astype(u64) << u64(32)) | ids.astype(u64), u64(0))
    near = xp.where(roots, akey, _spread(xp, akey, src, dst))
    near = xp.where(near > u64(0), near, _spread(xp, near, src, dst))
    agg = (near & u64(_LOW)).astype(np.int64) - 1
    return agg, nagg, rounds


def tentative(agg: Any, nagg: int, B: Any, dtype: Any) -> tuple[Any, Any]:
    """``(T, B_c)``: T (n x nagg, one entry per aggregated row) with orthonormal columns spanning
    B restricted to each aggregate, and the coarse near-null-space vector ``B = T B_c``."""
    xp = _xp.namespace(agg)
    n = int(agg.shape[0])
    assigned = agg >= 0
    cols = agg[assigned]
    b = B[assigned]
    norms = xp.sqrt(xp.bincount(cols, weights=xp.abs(b) ** 2, minlength=nagg)[:nagg])
    safe = xp.where(norms > 0, norms, 1)
    vals = (b / safe[cols]).astype(dtype)
    indptr = xp.zeros(n + 1, dtype=np.int64)
    indptr[1:] = xp.cumsum(assigned.astype(np.int64))
    return as_csr(xp, vals, cols, indptr, (n, nagg)), norms.astype(_real_dtype(dtype))


def smooth_prolongator(A: Any, T: Any, dinv: Any, omega: float) -> Any:
    """``P = T - omega D^-1 A T`` (one SpGEMM, a row scaling, a sparse subtraction)."""
    return _sorted(T - _scale_rows(A @ T, omega * dinv))


def galerkin(A: Any, P: Any) -> tuple[Any, Any]:
    """``(R, A_c)``: ``R = P^H`` and ``A_c = R (A P)`` (two SpGEMMs)."""
    R = _sorted((P.conj() if P.dtype.kind == "c" else P).T.tocsr())
    return R, _sorted(R @ (A @ P))


# ----------------------------------------------------------------------------- spectral radius


def _start_vector(xp: ModuleType, n: int, seed: int, dtype: Any) -> Any:
    """A fixed pseudo-random vector in [-1/2, 1/2), the same on NumPy and CuPy."""
    h = priorities(xp, n, seed + 0x5EED)
    return (h.astype(np.float64) / 2.0**32 - 0.5).astype(dtype)


def _breakdown(sub: np.ndarray, scale: float, dtype: Any) -> int:
    """Steps before the first subdiagonal that is rounding (an invariant subspace was found)."""
    tol = 100 * float(np.finfo(_real_dtype(dtype)).eps) * max(scale, np.finfo(np.float64).tiny)
    small = np.flatnonzero(np.abs(sub) <= tol)
    return int(small[0]) + 1 if small.shape[0] else int(sub.shape[0])


def _lanczos(matvec: Callable[[Any], Any], v: Any, steps: int) -> float:
    """Largest Ritz value of a Hermitian operator from ``steps`` Lanczos steps (three-term
    recurrence; the scalars stay on the device until the end: one transfer)."""
    xp = _xp.namespace(v)
    v = v / xp.linalg.norm(v)
    prev = xp.zeros_like(v)
    beta: Any = 0.0
    alphas, betas = [], []
    for _ in range(steps):
        w = matvec(v)
        alpha = xp.vdot(v, w).real
        w = w - alpha * v - beta * prev
        beta = xp.linalg.norm(w)
        alphas.append(alpha)
        betas.append(beta)
        prev, v = v, w / xp.where(beta > 0, beta, 1)
    a = _xp.to_host(xp.stack(alphas)).astype(np.float64)
    b = _xp.to_host(xp.stack(betas)).astype(np.float64)
    k = _breakdown(b, float(np.abs(a).max() + np.abs(b).max()), v.dtype)
    tri = np.diag(a[:k]) + np.diag(b[: k - 1], 1) + np.diag(b[: k - 1], -1)
    return float(np.linalg.eigvalsh(tri).max())


def _arnoldi(matvec: Callable[[Any], Any], v: Any, steps: int) -> float:
    """Spectral radius estimate of a general operator: ``steps`` Arnoldi steps (two Gram-Schmidt
    passes), the Hessenberg matrix moved to the host once."""
    xp = _xp.namespace(v)
    n = int(v.shape[0])
    V = xp.zeros((steps + 1, n), dtype=v.dtype)
    H = xp.zeros((steps + 1, steps), dtype=v.dtype)
    V[0] = v / xp.linalg.norm(v)
    for j in range(steps):
        w = matvec(V[j])
        h = V[: j + 1].conj() @ w
        w = w - V[: j + 1].T @ h
        h2 = V[: j + 1].conj() @ w
        w = w - V[: j + 1].T @ h2
        beta = xp.linalg.norm(w)
        H[: j + 1, j] = h + h2
        H[j + 1, j] = beta
        V[j + 1] = w / xp.where(beta > 0, beta, 1)
    Hh = _xp.to_host(H)
    k = _breakdown(np.diagonal(Hh, -1), float(np.abs(Hh).max()), v.dtype)
    return float(np.abs(np.linalg.eigvals(Hh[:k, :k])).max())


def spectral_radius(A: Any, *, hermitian: bool, steps: int = 20, seed: int = 0) -> float:
    """``rho(D^-1 A)``: Lanczos on the similar Hermitian ``D^-1/2 A D^-1/2`` where A is Hermitian
    with a positive diagonal, Arnoldi on ``D^-1 A`` otherwise (as in pyamg, ``D^-1`` is zero where
    the diagonal is)."""
    xp = _xp.namespace(A.data)
    n = int(A.shape[0])
    k = max(1, min(int(steps), n))
    d = A.diagonal()
    v = _start_vector(xp, n, seed, A.dtype)
    if hermitian and bool((d.real > 0).all()):
        s = (1 / xp.sqrt(d.real)).astype(_real_dtype(A.dtype))
        return _lanczos(lambda x: s * (A @ (s * x)), v, k)
    dinv = _inverse_diagonal(d)
    return _arnoldi(lambda x: dinv * (A @ x), v, k)


def _inverse_diagonal(d: Any) -> Any:
    """``1 / d`` with zero where ``d`` is zero (those rows are not smoothed)."""
    xp = _xp.namespace(d)
    nonzero = d != 0
    return xp.where(nonzero, 1 / xp.where(nonzero, d, 1), 0).astype(d.dtype)


# ----------------------------------------------------------------------------- the hierarchy


def _coarsen(
    A: Any, B: Any, *, theta: float, seed: int, steps: int, omega: float, hermitian: bool, max_rounds: int
) -> tuple[Level, Any, Any] | None:
    """One level below ``A``: ``(level, A_c, B_c)``, or None where aggregation does not coarsen."""
    xp = _xp.namespace(A.data)
    n = int(A.shape[0])
    clock = _Clock()
    src, dst = strength(A, theta)
    clock.lap("strength")
    agg, nagg, rounds = aggregate(xp, n, src, dst, seed=seed, max_rounds=max_rounds)
    clock.lap("aggregation")
    if nagg == 0 or nagg >= n:
        return None
    rho = spectral_radius(A, hermitian=hermitian, steps=steps, seed=seed)
    clock.lap("spectral radius")
    T, Bc = tentative(agg, nagg, B, A.dtype)
    weight = omega / rho if np.isfinite(rho) and rho > 0 else 0.0
    P = smooth_prolongator(A, T, _inverse_diagonal(A.diagonal()), weight)
    clock.lap("prolongator")
    R, Ac = galerkin(A, P)
    clock.lap("galerkin")
    return Level(A, P, R, agg, rho, rounds, clock.seconds), Ac, Bc


class _Clock:
    """Seconds per phase of one level.  Each phase ends where the host already waits for the
    device (a count, a size or a scalar read back: mask compaction, ``int(nagg)``, the Lanczos
    scalars, SpGEMM's output size), so on a GPU too the split says where the time went."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = now - self.start
        self.start = now


def smoothed_aggregation(
    A: Any,
    *,
    theta: float = 0.0,
    max_coarse: int = 500,
    max_levels: int = 10,
    seed: int = 0,
    steps: int = 20,
    omega: float = 4.0 / 3.0,
    hermitian: bool | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> Hierarchy:
    """The SA hierarchy of the square CSR matrix ``A`` (scipy.sparse or cupyx.scipy.sparse,
    sorted indices), built with A's own array package (see the module text).

    Levels are added until one has at most ``max_coarse`` rows, there are ``max_levels``, or
    aggregation stops reducing the size.  ``hermitian`` None checks A (one transpose); the
    coarse levels inherit it (``R = P^H`` keeps A_c Hermitian).  The near-null-space vector is
    the constant.

    >>> import scipy.sparse as sp
    >>> A = sp.csr_matrix(sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(100, 100)))
    >>> h = smoothed_aggregation(A, max_coarse=10)
    >>> [lv.A.shape[0] for lv in h.levels]
    [100, 28, 8]
    """
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"smoothed aggregation needs a square matrix, got shape {A.shape}")
    xp = _xp.namespace(A.data)
    herm = is_hermitian(A) if hermitian is None else bool(hermitian)
    B = xp.ones(int(A.shape[0]), dtype=_real_dtype(A.dtype))
    levels: list[Level] = []
    while int(A.shape[0]) > max_coarse and len(levels) + 1 < max_levels:
        step = _coarsen(
            A, B, theta=theta, seed=seed + len(levels), steps=steps, omega=omega,
            hermitian=herm, max_rounds=max_rounds,
        )  # fmt: skip
        if step is None:
            break
        level, A, B = step
        levels.append(level)
    levels.append(Level(A))
    return Hierarchy(tuple(levels), herm)
