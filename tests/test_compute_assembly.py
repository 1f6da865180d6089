"""How the compiler assembles a sparse result on the CPU: one numeric pass (bound, fill blocks,
close the gaps) and its fallback to two passes; both give SciPy's canonical buffers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.backends.generated.compute_exec as compute_exec
import ust.runtime.cpu_threads as cpu_threads

SPGEMM = "C(i,j) = A(i,k) * B(k,j)"


def _canonical(m: sp.csr_array) -> sp.csr_array:
    m = sp.csr_array(m)
    m.sum_duplicates()
    m.sort_indices()
    return m


def _same(t: ust.Tensor, ref: sp.csr_array) -> None:
    assert np.array_equal(t.pos(1), ref.indptr)
    assert np.array_equal(t.crd(1), ref.indices)
    np.testing.assert_allclose(t.values, ref.data, rtol=1e-12, atol=0)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_one_pass_assembly_equals_scipy(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    monkeypatch.setattr(cpu_threads, "THREADS", threads)
    A = sp.random_array((400, 300), density=0.05, random_state=3, format="csr")
    B = sp.random_array((300, 350), density=0.05, random_state=4, format="csr")
    c = ust.Compute(SPGEMM, A=A, B=B)
    c.plan()
    assert c._plan_obj is not None and c._plan_obj.ck.assembly == "blocks"
    assert "one numeric pass" in c.explain()
    ref = _canonical(A @ B)
    for _ in range(2):  # the blocks' gaps are closed in place, every call
        _same(c.execute(), ref)


def test_bound_too_large_falls_back_to_two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute_exec, "BOUND_LIMIT", 16)
    A = sp.random_array((60, 50), density=0.1, random_state=5, format="csr")
    _same(ust.compute(SPGEMM, A=A, B=A.T.tocsr()), _canonical(A @ A.T))


def test_union_of_three_rows_bounded_by_their_lengths() -> None:
    A = sp.random_array((80, 90), density=0.1, random_state=6, format="csr")
    B = sp.random_array((80, 90), density=0.1, random_state=7, format="csr")
    D = sp.random_array((80, 90), density=0.1, random_state=8, format="csr")
    c = ust.Compute("C(i,j) = A(i,j) + B(i,j) + D(i,j)", A=A, B=B, D=D)
    assert "cnt = cnt + (hi" in c.source("ir")  # the bound pass walks no merge
    _same(c.execute() if c.plan() is None else None, _canonical(A + B + D))  # type: ignore[arg-type]


def test_summed_index_walks_each_term_alone() -> None:
    A = sp.random_array((70, 60), density=0.1, random_state=9, format="csr")
    B = sp.random_array((70, 60), density=0.1, random_state=10, format="csr")
    x, z = np.arange(60.0), np.ones(60)
    c = ust.Compute("y(i) = A(i,j) * x(j) + B(i,j) * z(j)", A=A, B=B, x=x, z=z)
    assert "two-pointer merge" not in c.explain()
    c.plan()
    np.testing.assert_allclose(c.execute(), A @ x + B @ z, rtol=1e-12)
