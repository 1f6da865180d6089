"""SciPy's SuperLU behind the same phases as cuDSS: analysis, factorisation, refactorisation, solve.

SuperLU has no separate analysis, so ``analyze()`` runs ``splu`` with the chosen column ordering
and keeps that factorisation for the first ``factorize()``.  The ordering it found,
``q = argsort(lu.perm_c)``, is the plan: later factorisations (new values, or a saved plan in
another process) permute the matrix by ``q`` themselves and ask SuperLU for the NATURAL
ordering, which reproduces the same fill without recomputing the ordering.  For a symmetric
pattern the permutation is applied to rows and columns alike (``MMD_AT_PLUS_A`` with
``SymmetricMode``), so the diagonal is preferred as pivot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from ust.backends.engines import SMALL_PIVOT, count_small_pivots, lu_pivot_facts
from ust.runtime.errors import ShapeError, SingularMatrixError, UnsupportedError

__all__ = ["ORDERINGS", "SMALL_PIVOT", "SuperLUFactorization", "check_permutation", "choose_ordering"]

# ust reordering name -> SuperLU permc_spec.  "default" is chosen per matrix (choose_ordering).
ORDERINGS = {
    "colamd": "COLAMD",
    "mmd_ata": "MMD_ATA",
    "mmd_at_plus_a": "MMD_AT_PLUS_A",
    "amd": "MMD_AT_PLUS_A",
    "natural": "NATURAL",
    "none": "NATURAL",
}
_SYMMETRIC_TYPES = frozenset({"symmetric", "spd", "hermitian", "hpd"})


def check_permutation(perm: Any, n: int, what: str = "the permutation") -> np.ndarray:
    """``perm`` as an int64 array if it is a permutation of ``range(n)``, else ShapeError."""
    arr = np.asarray(perm)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ShapeError(f"{what} has shape {arr.shape}; a permutation of {n} rows has shape ({n},)")
    if arr.dtype.kind not in "iu":
        raise ShapeError(f"{what} has dtype {arr.dtype}; it must hold integers")
    out = arr.astype(np.int64)
    if n and (int(out.min()) < 0 or int(out.max()) >= n):
        raise ShapeError(f"{what} holds values outside 0 ... {n - 1}")
    if np.bincount(out, minlength=n).max(initial=1) != 1:
        raise ShapeError(f"{what} repeats a value: it is not a permutation of 0 ... {n - 1}")
    return out


def pattern_is_symmetric(a: sp.csr_matrix, transposed: Any = None) -> bool:
    """True when the nonzero pattern of ``a`` equals that of its transpose (values ignored).

    A canonical CSR (sorted, no duplicates) compares its index arrays with those of its CSC
    copy (SciPy's transpose kernel sorts, :func:`ust.convert.scipy.compressed_transpose`; or
    ``transposed``, that copy made already): one O(nnz) pass, no sparse comparison (three
    constructions and a merge, a third of a one-shot solve of a small matrix)."""
    if a.has_canonical_format:
        c = transposed if transposed is not None else _csc(a)
        return bool(np.array_equal(a.indptr, c.indptr) and np.array_equal(a.indices, c.indices))
    p = a.copy()
    p.data = np.ones_like(p.data, dtype=np.int8)
    return bool((p != p.T).nnz == 0)


def _csc(m: Any) -> sp.csc_matrix:
    """``m`` as a SciPy CSC matrix: a canonical CSR by SciPy's transpose kernel alone (the same
    buffers as ``tocsc``, without its Python), anything else by SciPy's conversion."""
    if m.format == "csr" and m.has_canonical_format:
        from ust.convert.scipy import compressed_array, compressed_transpose

        c = compressed_transpose(m)
        out = compressed_array(sp.csc_matrix, c.data, c.indices, c.indptr, m.shape)
        out.has_canonical_format = True  # the transpose of a canonical matrix is canonical
        return out
    return sp.csc_matrix(m)


def _inf_norm(a: sp.csr_matrix) -> float:
    """``max_i sum_j |a_ij|`` of a CSR matrix in NumPy passes (no sparse temporaries)."""
    if not a.nnz:
        return 0.0
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    return float(np.bincount(rows, weights=np.abs(a.data[: rows.shape[0]]), minlength=n).max())


def choose_ordering(reordering: str, matrix_type: str, symmetric_pattern: bool) -> tuple[str, bool, str]:
    """(permc_spec, symmetric mode, reason) for a matrix: the data behind the log line."""
    if reordering != "default":
        try:
            spec = ORDERINGS[reordering]
        except KeyError:
            raise UnsupportedError(
                f"reordering {reordering!r} is not available with SuperLU; supported: default, {', '.join(ORDERINGS)}"
            ) from None
        return spec, spec == "MMD_AT_PLUS_A", f"reordering={reordering!r} asked for"
    if matrix_type in _SYMMETRIC_TYPES:
        return "MMD_AT_PLUS_A", True, f"matrix_type={matrix_type!r}"
    if symmetric_pattern:
        return "MMD_AT_PLUS_A", True, "the nonzero pattern is symmetric"
    return "COLAMD", False, "the nonzero pattern is not symmetric"


@dataclass
class _Settings:
    spec: str
    symmetric: bool
    diag_pivot_thresh: float


class SuperLUFactorization:
    """SuperLU factorisation of one square CSR matrix, reusable across right-hand sides."""

    backend = "superlu"

    def __init__(
        self,
        a: sp.csr_matrix,
        *,
        matrix_type: str,
        reordering: str,
        pivoting: str,
        pivot_threshold: float | None,
        norm: Callable[[], float] | None = None,
    ) -> None:
        self.a = a
        self.n = a.shape[0]
        #: ``a`` in CSC, SuperLU's input; for a canonical CSR also the symmetry test's transpose
        self._a_csc: Any = _csc(a) if a.format == "csr" and a.has_canonical_format else None
        self.symmetric_pattern = pattern_is_symmetric(a, self._a_csc)
        #: ``||a||_inf`` (the caller's, computed once for its own checks too), for small_pivots
        self._norm = norm if norm is not None else (lambda: _inf_norm(self.a))
        spec, symmetric, self.reason = choose_ordering(reordering, matrix_type, self.symmetric_pattern)
        if pivoting == "none":
            thresh = 0.0
        elif pivot_threshold is not None:
            thresh = float(pivot_threshold)
        else:
            thresh = 0.01 if symmetric else 1.0
        self.settings = _Settings(spec, symmetric, thresh)
        self.version = scipy.__version__
        self.perm: np.ndarray | None = None
        self._lu: Any = None
        self._direct = False  # True: self._lu factors self.a itself; False: the permuted matrix

    # ------------------------------------------------------------------ phases

    def _splu(self, m: sp.spmatrix, spec: str) -> Any:
        s = self.settings
        csc = self._a_csc if m is self.a and self._a_csc is not None else _csc(m)
        try:
            return sla.splu(
                csc,
                permc_spec=spec,
                diag_pivot_thresh=s.diag_pivot_thresh,
                options={"SymmetricMode": s.symmetric},
            )
        except RuntimeError as exc:  # SuperLU's "Factor is exactly singular"
            raise SingularMatrixError(f"SuperLU: {exc}") from None

    def analyze(self, user_perm: np.ndarray | None = None) -> dict[str, Any]:
        """Find the ordering (a saved one is taken as is); returns facts for PlanInfo."""
        if user_perm is not None:
            self.perm = check_permutation(user_perm, self.n, "the saved permutation")
            self._lu, self._direct, self._a_csc = None, False, None
            return {"ordering": f"{self.settings.spec} (saved plan)"}
        self._lu = self._splu(self.a, self.settings.spec)
        self._a_csc = None  # SuperLU holds its factors now: the copy is not kept beside A
        self._direct = True
        self.perm = np.argsort(self._lu.perm_c)
        return {"ordering": self.settings.spec}

    def _permuted(self) -> sp.csr_matrix:
        q = self.perm
        return self.a[q][:, q] if self.settings.symmetric else self.a[:, q]

    def factorize(self) -> dict[str, Any]:
        if self._lu is None or not self._direct:
            self._lu = self._splu(self._permuted(), "NATURAL")
            self._direct = False
        return self.factor_facts()

    def refactorize(self) -> dict[str, Any]:
        self._lu, self._direct = None, False
        return self.factorize()

    def set_values(self, a: sp.csr_matrix) -> None:
        self.a = a
        self._a_csc = None  # the old values' copy
        self._lu = None

    def factor_facts(self) -> dict[str, Any]:
        lu = self._lu
        u = lu.U
        diag = u.diagonal()
        facts: dict[str, Any] = {
            "lu_nnz": int(lu.L.nnz + u.nnz),
            "small_pivots": count_small_pivots(diag, self._norm(), np),
        }
        # With P A P^T = L U and symmetric pivoting only, the swaps are where perm_r leaves perm_c.
        swaps = int((lu.perm_r != lu.perm_c).sum()) if self.settings.symmetric else 0
        facts.update(lu_pivot_facts(diag, swaps, self.settings.symmetric))
        return facts

    def solve(self, b: np.ndarray) -> np.ndarray:
        """x for a 2-D right-hand side ``b`` (not modified)."""
        if self._direct:
            return np.asarray(self._lu.solve(b))
        q = self.perm
        y = self._lu.solve(b[q] if self.settings.symmetric else b)
        x = np.empty_like(y)
        x[q] = y
        return x

    def free(self) -> None:
        self._lu = None
        self.a = None
