"""How the compiler assembles a sparse result on the CPU: one numeric pass (bound, blocks of rows
placed back to back in order, through the threads' arenas when a block's place is not known at
its start) and its fallback to two passes; both give SciPy's canonical buffers."""

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


def _exactly(t: ust.Tensor, ref: sp.csr_array) -> None:
    assert np.array_equal(t.pos(1), ref.indptr)
    assert np.array_equal(t.crd(1), ref.indices)
    assert np.array_equal(t.values, ref.data)


@pytest.mark.parametrize("threads", [2, 4])
def test_many_small_blocks_placed_in_order(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """Blocks of a few products each: most are written into an arena and copied to their place
    later; the result is SciPy's, bit for bit (the same order of summation in every row)."""
    monkeypatch.setattr(cpu_threads, "THREADS", threads)
    monkeypatch.setattr(compute_exec, "BLOCK_WORK", 8)
    A = sp.random_array((500, 400), density=0.03, random_state=11, format="csr")
    B = sp.random_array((400, 450), density=0.03, random_state=12, format="lil")
    B[3] = 1.0  # a dense row of B: rows of A that meet it touch the whole workspace
    B = sp.csr_array(B)
    c = ust.Compute(SPGEMM, A=A, B=B)
    c.plan()
    assert c._plan_obj is not None and c._plan_obj.ck.assembly == "blocks"
    ref = _canonical(A @ B)
    for _ in range(3):  # placement state is fresh every call
        _exactly(c.execute(), ref)


@pytest.mark.parametrize("threads", [1, 3])
def test_blocks_under_a_semiring_and_a_rank3_result(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """The placement is the assembly's, not SpGEMM's: min-plus products and a 3-D result (two
    coordinate arrays placed with the values) through many blocks."""
    monkeypatch.setattr(cpu_threads, "THREADS", threads)
    monkeypatch.setattr(compute_exec, "BLOCK_WORK", 4)
    A = sp.random_array((120, 90), density=0.08, random_state=13, format="csr")
    B = sp.random_array((90, 110), density=0.08, random_state=14, format="csr")
    m = ust.Compute(SPGEMM, A=A, B=B, semiring="min_plus")
    m.plan()
    assert m._plan_obj is not None and m._plan_obj.ck.assembly == "blocks"
    Ad, Bd = A.toarray(), B.toarray()
    sa, sb = Ad != 0, Bd != 0
    want = np.where(sa[:, :, None] & sb[None, :, :], Ad[:, :, None] + Bd[None, :, :], np.inf).min(axis=1)
    got = m.execute()
    assert np.array_equal(got.to_scipy().toarray(), np.where(np.isinf(want), 0.0, want))
    assert got.nnz == int(np.isfinite(want).sum())
    rng = np.random.default_rng(15)
    X = np.where(rng.random((30, 20, 10)) < 0.2, rng.integers(-3, 4, (30, 20, 10)), 0).astype(float)
    x = ust.asarray(X, format="(i, j, k) -> (i : dense, j : compressed, k : compressed)")
    Y = np.where(rng.random((10, 12)) < 0.4, rng.integers(-2, 3, (10, 12)), 0).astype(float)
    r = ust.Compute("R(i,j,l) = X(i,j,k) * Y(k,l)", X=x, Y=sp.csr_array(Y))
    r.plan()
    assert r._plan_obj is not None and r._plan_obj.ck.assembly == "blocks"
    assert len(r._plan_obj.ck.prefix) + len(r._plan_obj.ck.rest) == 3  # two coordinate arrays
    assert np.array_equal(r.execute().todense(), np.einsum("ijk,kl->ijl", X, Y))
