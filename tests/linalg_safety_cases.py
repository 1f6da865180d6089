"""Seeded families of regular, near-singular and singular systems for the solve-check tests.

Shared by tests/test_linalg_safety.py (the CPU route) and tests/gpu/test_linalg_safety_gpu.py
(the CPU against cuDSS).  Every matrix has entries of order one, so a pivot below ``1e-13``
means the matrix is singular to working precision, on both devices.  The near-singular
family has condition number about 1e17 (beyond ``1 / eps``): both routes must raise
SingularMatrixError for it.  Matrices between ``1e13`` and ``1e16`` are left out on purpose:
there, whether a pivot counts as small depends on the pivoting order, which differs between
SuperLU and cuDSS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from ust.runtime.errors import UstError

#: The 3 x 3 matrix of the issue: singular (row 1 = 2 * row 0), no empty row or column.
ISSUE_MATRIX = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]])


def _orthogonal(rng: np.random.Generator, n: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def with_singular_values(seed: int, smallest: float, n: int = 8) -> sp.csr_matrix:
    """``U diag(s) V^T`` with ``s`` from 1 down to 1e-3 and then ``smallest`` (0: singular)."""
    rng = np.random.default_rng(seed)
    s = np.logspace(0, -3, n)
    s[-1] = smallest
    return sp.csr_matrix(_orthogonal(rng, n) @ np.diag(s) @ _orthogonal(rng, n).T)


def dependent_row(seed: int, n: int = 10) -> sp.csr_matrix:
    """A sparse matrix whose row k is a combination of rows i and j: singular, full structure."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.5, random_state=seed).toarray() + np.eye(n)
    i, j, k = rng.choice(n, 3, replace=False)
    a[k] = a[i] * rng.uniform(0.3, 3.0) + a[j] * rng.uniform(0.3, 3.0)
    return sp.csr_matrix(a)


def regular(seed: int, n: int = 40) -> sp.csr_matrix:
    """A sparse, unsymmetric, diagonally dominant matrix (condition number of order 10)."""
    a = sp.random(n, n, density=min(1.0, 4.0 / n), random_state=seed, format="csr")
    return sp.csr_matrix(a + sp.diags(np.full(n, 3.0)) + sp.diags(np.ones(n - 2), 2))


def ill_conditioned(seed: int) -> sp.csr_matrix:
    """Condition number about 1e8: badly conditioned, yet solved to tolerance on both devices."""
    return with_singular_values(seed, 1e-8)


#: family name -> (builder of a seeded matrix, the outcome class both devices must give).
FAMILIES: dict[str, tuple[Callable[[int], sp.csr_matrix], str]] = {
    "regular": (regular, "ok"),
    "ill_conditioned_1e8": (ill_conditioned, "ok"),
    "near_singular_1e17": (lambda seed: with_singular_values(seed, 1e-17), "SingularMatrixError"),
    "singular_value_0": (lambda seed: with_singular_values(seed, 0.0), "SingularMatrixError"),
    "dependent_row": (dependent_row, "SingularMatrixError"),
}
SEEDS = range(12)


def rhs_for(a: Any, seed: int) -> np.ndarray:
    """A right-hand side in general position (so a singular system has no solution)."""
    return np.random.default_rng(1000 + seed).standard_normal(a.shape[0])


def outcome(solve: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", x) or (the name of the ust error, the error)."""
    try:
        return "ok", solve()
    except UstError as exc:
        return type(exc).__name__, exc


def reference(a: Any, b: np.ndarray) -> np.ndarray:
    return np.asarray(sla.spsolve(sp.csc_matrix(a), b)).reshape(b.shape)


def assert_solves(a: Any, x: Any, b: np.ndarray, bound: float = 1e-14) -> None:
    """``x`` solves ``A x = b`` backward stably: normwise backward error within ``bound`` (for
    ill-conditioned matrices comparing ``x`` to SciPy's would measure only the conditioning)."""
    from ust.linalg import backward_error

    x2, b2 = np.asarray(x).reshape(b.shape[0], -1), b.reshape(b.shape[0], -1)
    be = backward_error(sp.csr_matrix(a), x2, b2)
    assert be <= bound, f"backward error {be:.2e}"
