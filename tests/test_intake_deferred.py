"""The deferred checks of the trusted SciPy intake (issue 18: zero-copy intake in O(1)).

A csr/csc whose SciPy flags say canonical is taken without a pass over its buffers; the
checks SciPy does not guarantee (``indptr`` non-decreasing, every index inside the matrix)
are owed and run by the first read of the index buffers.  Every route of ust that reads them
must raise ust's error before any work -- never read out of bounds -- and ``check=`` must still
check at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.runtime.errors import FormatError, ShapeError

N = 8


def _canonical(kind: str = "csr", seed: int = 0) -> Any:
    """A well-conditioned csr/csc array whose SciPy flags say canonical (the deferred path)."""
    A = sp.random_array((N, N), density=0.4, format="csr", rng=seed) + N * sp.eye_array(N, format="csr")
    A = sp.csr_array(A) if kind == "csr" else sp.csc_array(A)
    A.sum_duplicates()
    assert A.has_canonical_format
    return A


def _spoil(A: Any, how: str) -> Any:
    """Reassign what SciPy checked when it built ``A`` (its flags still say canonical)."""
    if how == "index-too-large":
        A.indices[1] = 1 << 20
    elif how == "index-negative":
        A.indices[1] = -3
    elif how == "index-at-extent":
        A.indices[-1] = N
    elif how == "indptr-decreasing":
        A.indptr = A.indptr.copy()
        A.indptr[2] = A.indptr[4]
    return A


BAD = ["index-too-large", "index-negative", "index-at-extent", "indptr-decreasing"]
x = np.ones(N)

#: every route of ust that reads the index buffers of an intake
ROUTES: dict[str, Callable[[Any], Any]] = {
    "todense": lambda A: ust.asarray(A).todense(),
    "toarray": lambda A: ust.asarray(A).toarray(),
    "to_scipy": lambda A: ust.asarray(A).to_scipy(),
    "convert CSR <-> CSC": lambda A: ust.asarray(A).convert("CSC" if A.format == "csr" else "CSR"),
    "convert COO": lambda A: ust.asarray(A).convert("COO"),
    "convert DCSR": lambda A: ust.asarray(A).convert("DCSR"),
    "convert BSR": lambda A: ust.asarray(A).convert("BSR[2,2]"),
    "convert DIA": lambda A: ust.asarray(A).convert("DIA"),
    "convert custom": lambda A: ust.asarray(A).convert("(i, j) -> (i : compressed, j : compressed)"),
    "asarray format=": lambda A: ust.asarray(A, "COO"),
    "asarray index_dtype=": lambda A: ust.asarray(A, index_dtype=np.int64),
    "matmul(A, x)": lambda A: ust.matmul(A, x),
    "matmul(t, x)": lambda A: ust.matmul(ust.asarray(A), x),
    "Matmul.plan": lambda A: ust.Matmul(A, x).plan(),
    "t @ x": lambda A: ust.asarray(A) @ x,
    "t @ t": lambda A: ust.asarray(A) @ ust.asarray(A),
    "t + t": lambda A: ust.asarray(A) + ust.asarray(A),
    "ops.add(A, A)": lambda A: ust.ops.add(A, A),
    "ops.subtract(A, A)": lambda A: ust.ops.subtract(A, A),
    "ops.multiply(A, A)": lambda A: ust.ops.multiply(A, A),
    "t * t": lambda A: ust.asarray(A) * ust.asarray(A),
    "(t * 2).todense": lambda A: (ust.asarray(A) * 2).todense(),
    "sum(axis=0)": lambda A: ust.asarray(A).sum(axis=0),
    "T.todense": lambda A: ust.asarray(A).T.todense(),
    "getitem": lambda A: ust.asarray(A)[1],
    "diagonal": lambda A: ust.asarray(A).diagonal(),
    "astype.todense": lambda A: ust.asarray(A).astype(np.float32).todense(),
    "copy.todense": lambda A: ust.asarray(A).copy().todense(),
    "solve(t, b)": lambda A: ust.solve(ust.asarray(A), x),
    "solve(A, b)": lambda A: ust.solve(A, x),
    "cg(A, b)": lambda A: ust.linalg.cg(A, x),
    "einsum": lambda A: ust.einsum("ij,j->i", A, x),
    "compute": lambda A: ust.compute("C(i,j) = A(i,j) * A(i,j)", A=A),
    "bufs": lambda A: ust.asarray(A).bufs,
    "pos": lambda A: ust.asarray(A).pos(1),
    "crd": lambda A: ust.asarray(A).crd(1),
    "buffers": lambda A: ust.asarray(A).buffers(),
    "check=bounds": lambda A: ust.asarray(A, check="bounds"),
    "check=full": lambda A: ust.asarray(A, check="full"),
    "check=True": lambda A: ust.asarray(A, check=True),
}


@pytest.mark.parametrize("kind", ["csr", "csc"])
@pytest.mark.parametrize("how", BAD)
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_raises_ust_error_on_a_spoiled_intake(route: str, how: str, kind: str) -> None:
    A = _spoil(_canonical(kind), how)
    with pytest.raises((ShapeError, FormatError)):
        ROUTES[route](A)


@pytest.mark.parametrize("how", BAD)
def test_intake_itself_defers_and_the_check_raises_every_time(how: str) -> None:
    A = _spoil(_canonical(), how)
    t = ust.asarray(A)  # O(1): nothing read yet
    assert t.shape == (N, N) and t.values is A.data and t.nse == A.data.shape[0]
    assert "ust.Tensor" in repr(t) and t.nbytes > 0  # printing reads no index it follows
    for _ in range(2):  # a failed check is not remembered as passed
        with pytest.raises((ShapeError, FormatError)):
            t.todense()


def test_derived_tensors_inherit_the_owed_check() -> None:
    t = ust.asarray(_spoil(_canonical(), "index-too-large"))
    for derived in (t._with_fill_value(0.0), t.astype(np.float32, copy=False), t.copy()):
        with pytest.raises(ShapeError):
            derived.crd(1)
    other = ust.asarray(_canonical(seed=3))
    other._adopt(t)
    with pytest.raises(ShapeError):
        other.todense()


@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_sound_intake_is_exact_and_zero_copy(kind: str) -> None:
    A = _canonical(kind)
    t = ust.asarray(A)
    assert t.pos(1) is A.indptr and t.crd(1) is A.indices and t.values is A.data
    assert t.format == ust.format(kind.upper())
    np.testing.assert_array_equal(t.todense(), A.toarray())
    np.testing.assert_array_equal(t.convert("CSC" if kind == "csr" else "CSR").todense(), A.toarray())
    np.testing.assert_allclose(ust.matmul(A, x), A @ x, rtol=1e-14)


def test_flags_not_canonical_are_checked_at_once() -> None:
    A = sp.csr_array(
        (np.ones(3), np.array([2, 0, 9], dtype=np.int32), np.array([0, 2, 3], dtype=np.int32)), shape=(2, 3)
    )
    with pytest.raises(ShapeError):
        ust.asarray(A)  # unsorted: SciPy's own probes of the flags need checked buffers first


def test_an_owed_check_that_trims_settles_on_values_and_nse_too() -> None:
    """The protocol a GPU intake uses (cupyx counts ``data.size`` as nnz, SciPy ``indptr[-1]``):
    an owed check with a true ``trims`` attribute may return trimmed buffers, and reads of
    ``values`` / ``nse`` run it first, so no caller sees the untrimmed arrays; a check without
    ``trims`` leaves ``values`` O(1)."""
    from ust.tensor import Tensor

    A = _canonical()
    nnz = int(A.indptr[-1])
    data = np.concatenate([A.data, [7.0, 9.0]])  # two slots past the last entry
    idx = np.concatenate([A.indices, np.array([0, 1], dtype=A.indices.dtype)])
    calls: list[int] = []

    class Trim:
        trims = True

        def __call__(self, shape: Any, fmt: Any, pos: Any, crd: Any, values: Any) -> Any:
            calls.append(1)
            end = int(pos[1][-1])
            return pos, (None, crd[1][:end]), values[:end]

    t = Tensor._trusted((N, N), ust.format("CSR"), data, (None, A.indptr), (None, idx), Trim())
    assert t.nse == nnz and t.values.shape == (nnz,) and t.crd(1).shape == (nnz,)
    assert len(calls) == 1  # run once
    np.testing.assert_array_equal(t.todense(), A.toarray())

    class Plain:
        def __call__(self, *args: Any) -> None:
            calls.append(2)

    u = Tensor._trusted((N, N), ust.format("CSR"), A.data, (None, A.indptr), (None, A.indices), Plain())
    assert u.values is A.data and u.nse == nnz and 2 not in calls  # values / nse read nothing
    u.crd(1)
    assert calls.count(2) == 1
