"""The C SpGEMM kernel (:mod:`ust.algebra.spgemm_c`): SciPy's ``A @ B`` buffers bit for bit, in
canonical form (rows sorted, exact zeros dropped), on one thread and on several.

Several threads place chunks of rows by a prefix over chunk lengths as they finish; tiny
chunks and more threads than cores make most chunks wait in a thread's arena before their
place is known, so those paths run here as well as the in-place one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust.algebra.spgemm_c as spgemm_c
import ust.runtime.cpu_threads as cpu_threads
from ust.cli.demo import poisson3d
from ust.plan.planner import c_compiler_available

pytestmark = pytest.mark.skipif(not c_compiler_available(), reason="needs a C compiler")

VALUE_DTYPES = ["float64", "float32", "complex128", "complex64", "int32", "int64", "uint8", "int8"]
#: (threads, products per chunk): one thread (in place); several with chunks of 1 to 50
#: products (most chunks go through the arena); the default chunk size
SCHEDULES = [(1, 1 << 15), (2, 1), (3, 7), (4, 50), (2, 1 << 15)]


def _reference(a: Any, b: Any) -> Any:
    c = sp.csr_array(a @ b)
    c.sum_duplicates()
    c.sort_indices()
    c.eliminate_zeros()
    return c


def _run(a: Any, b: Any, nt: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any]:
    monkeypatch.setattr(cpu_threads, "THREADS", nt)
    monkeypatch.setattr(spgemm_c, "CHUNK_WORK", chunk)
    return spgemm_c.spgemm_csr_c(
        a.shape, (a.indptr, a.indices, a.data), b.shape, (b.indptr, b.indices, b.data)
    )


def _same(got: tuple[Any, Any, Any], ref: Any) -> None:
    p, j, x = got
    assert p.dtype == ref.indptr.dtype or p.dtype == np.dtype(np.int64)
    np.testing.assert_array_equal(p, ref.indptr)
    np.testing.assert_array_equal(j, ref.indices)
    assert x.dtype == ref.data.dtype
    assert x.tobytes() == ref.data.tobytes()  # same sums in the same order: bit for bit


def _matrix(rng: Any, m: int, n: int, density: float, dtype: str, index: Any) -> Any:
    a = sp.random_array((m, n), density=density, format="csr", rng=rng)
    a.data = rng.integers(-2, 3, a.nnz).astype(np.float64)  # small integers: sums cancel often
    a = sp.csr_array(a.astype(dtype))
    if np.dtype(dtype).kind == "c":
        a.data = a.data + 1j * rng.integers(-1, 2, a.nnz).astype(dtype)
    a.sum_duplicates()  # canonical operands: sorted, no duplicates (explicit zeros may stay)
    a.indptr = a.indptr.astype(index)
    a.indices = a.indices.astype(index)
    return a


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_random_products_equal_scipy_on_every_schedule(
    dtype: str, index: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    for _ in range(6):
        m, k, n = (int(x) for x in rng.integers(1, 40, 3))
        density = float(rng.uniform(0.02, 0.5))
        a, b = _matrix(rng, m, k, density, dtype, index), _matrix(rng, k, n, density, dtype, index)
        ref = _reference(a, b)
        for nt, chunk in SCHEDULES:
            got = _run(a, b, nt, chunk, monkeypatch)
            assert got[0].dtype == np.dtype(index) and got[1].dtype == np.dtype(index)
            _same(got, ref)


def test_exact_cancellation_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    a = sp.csr_array(np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0], [1.0, -1.0, 3.0]]))
    b = sp.csr_array(np.array([[1.0, 3.0], [-1.0, 0.0], [5.0, 0.0]]))
    ref = _reference(a, b)
    assert ref.nnz == 4  # (0, 0) cancels: 1 * 1 + 1 * (-1)
    for nt, chunk in SCHEDULES:
        _same(_run(a, b, nt, chunk, monkeypatch), ref)


def test_empty_and_degenerate_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    for m, k, n in [(0, 3, 4), (3, 0, 4), (3, 4, 0), (5, 5, 5)]:
        a = sp.csr_array((m, k), dtype=np.float64)
        b = sp.csr_array((k, n), dtype=np.float64)
        for nt, chunk in SCHEDULES:
            p, j, x = _run(a, b, nt, chunk, monkeypatch)
            np.testing.assert_array_equal(p, np.zeros(m + 1))
            assert j.shape == (0,) and x.shape == (0,)
    a = sp.csr_array(np.diag([1.0, 0.0, 2.0, 0.0]))  # empty rows between full ones
    for nt, chunk in SCHEDULES:
        _same(_run(a, a, nt, chunk, monkeypatch), _reference(a, a))


@pytest.mark.parametrize("n", [3, 6, 11])
def test_stencil_rows_reuse_the_sort_and_equal_scipy(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Poisson rows repeat one column pattern, shifted: the kernel reuses the sorting permutation."""
    a = sp.csr_array(poisson3d(n))
    a2 = _reference(a, a)
    for nt, chunk in SCHEDULES:
        _same(_run(a, a, nt, chunk, monkeypatch), a2)
        _same(_run(a2, a, nt, chunk, monkeypatch), _reference(a2, a))


def test_long_rows_sort_without_the_pattern_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of more than 4096 entries: introsort (heapsort below its depth limit)."""
    rng = np.random.default_rng(3)
    a = sp.csr_array(sp.random_array((12, 3000), density=0.9, format="csr", rng=rng))
    b = sp.csr_array(sp.random_array((3000, 9000), density=0.03, format="csr", rng=rng))
    ref = _reference(a, b)
    assert np.diff(ref.indptr).max() > 4096
    for nt, chunk in [(1, 1 << 15), (2, 1000)]:
        _same(_run(a, b, nt, chunk, monkeypatch), ref)
    # reversed columns inside a long row (descending input for the sort)
    c = sp.csr_array(np.ones((1, 6000)))
    d = sp.csr_array(sp.eye_array(6000, format="csr")[:, ::-1])
    d.sort_indices()
    _same(_run(c, d, 1, 1 << 15, monkeypatch), _reference(c, d))


def test_two_pass_route_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A product count too large to reserve (here: any) takes count + fill with exact sizes."""
    rng = np.random.default_rng(11)
    monkeypatch.setattr(spgemm_c, "_ONE_PASS_BYTES", 0)
    for dtype in ["float64", "complex64", "int16"]:
        a, b = _matrix(rng, 30, 25, 0.3, dtype, np.int32), _matrix(rng, 25, 20, 0.3, dtype, np.int32)
        for nt, chunk in [(1, 1 << 15), (2, 1 << 15)]:
            _same(_run(a, b, nt, chunk, monkeypatch), _reference(a, b))


def test_thread_count_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_threads, "THREADS", None)
    assert cpu_threads.threads(spgemm_c.SMALL_PRODUCTS - 1, spgemm_c.SMALL_PRODUCTS) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads.threads(1 << 30, spgemm_c.SMALL_PRODUCTS) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(cpu_threads, "other_load", lambda: 0.0)
    cores = len(cpu_threads.os.sched_getaffinity(0))
    assert cpu_threads.threads(1 << 30, spgemm_c.SMALL_PRODUCTS) == cores
    monkeypatch.setattr(cpu_threads, "other_load", lambda: float(cores))
    assert cpu_threads.threads(1 << 30, spgemm_c.SMALL_PRODUCTS) == 1
    monkeypatch.setattr(cpu_threads, "THREADS", 5)
    assert cpu_threads.threads(1) == 5


def test_other_load_does_not_count_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy time of this process's own threads is subtracted from the machine's."""
    ticks = {"busy": 100.0}
    monkeypatch.setattr(cpu_threads, "_busy_cpu_seconds", lambda: ticks["busy"])
    own = {"t": 10.0}
    monkeypatch.setattr(cpu_threads.time, "process_time", lambda: own["t"])
    clock = {"t": 1000.0}
    monkeypatch.setattr(cpu_threads.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(cpu_threads, "_sample", None)
    monkeypatch.setattr(cpu_threads, "_estimate", None)
    monkeypatch.setattr(cpu_threads, "_runnable_elsewhere", lambda: 0.0)
    assert cpu_threads.other_load() == 0.0  # first sample: what runs elsewhere now
    clock["t"] += 1.0
    ticks["busy"] += 2.0  # two cores busy for a second ...
    own["t"] += 2.0  # ... both by this process
    assert cpu_threads.other_load() == pytest.approx(0.0)
    clock["t"] += 1.0
    ticks["busy"] += 1.5
    own["t"] += 0.5  # another process held one core
    assert cpu_threads.other_load() == pytest.approx(1.0)
    clock["t"] += 0.01  # too soon for a new window: the last estimate
    assert cpu_threads.other_load() == pytest.approx(1.0)


def test_large_poisson_product_on_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    a = sp.csr_array(poisson3d(24))  # 2e5 products: above the one-thread threshold
    ref = _reference(a, a)
    for nt in (1, 2):
        _same(_run(a, a, nt, spgemm_c.CHUNK_WORK, monkeypatch), ref)
    monkeypatch.setattr(cpu_threads, "THREADS", None)
    _same(
        spgemm_c.spgemm_csr_c(a.shape, (a.indptr, a.indices, a.data), a.shape, (a.indptr, a.indices, a.data)),
        ref,
    )
