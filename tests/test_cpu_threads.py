"""The one thread-count rule of every C kernel (:func:`ust.runtime.cpu_threads.threads`) and
the generated kernels' use of it: ``ust_set_threads`` before each call, results identical on
one thread and on all of them.  No timings here."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.runtime.cpu_threads as cpu_threads
from ust.backends.generated.launch import prepare
from ust.plan.planner import c_compiler_available


@pytest.fixture
def rule(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Set (cores, load) for :func:`cpu_threads.threads`; no forced count from the environment."""
    monkeypatch.setattr(cpu_threads, "THREADS", None)
    monkeypatch.delenv(cpu_threads.ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def set_machine(cores: int, load: float) -> None:
        monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(cpu_threads, "other_load", lambda: load)

    return set_machine


@pytest.mark.parametrize(
    ("cores", "load", "work", "small", "want"),
    [
        (16, 0.0, 100, 1 << 13, 1),  # tiny work: one thread
        (16, 0.0, (1 << 13) - 1, 1 << 13, 1),  # just below the threshold
        (16, 0.0, 1 << 13, 1 << 13, 2),  # at it: one thread per small // 2 entries
        (16, 0.0, 5 * (1 << 12), 1 << 13, 5),
        (16, 0.0, 1 << 30, 1 << 13, 16),  # large work on an idle machine: every core
        (16, 12.0, 1 << 30, 1 << 13, 4),  # 12 cores busy elsewhere: the 4 left
        (16, 15.6, 1 << 30, 1 << 13, 1),
        (16, 40.0, 1 << 30, 1 << 13, 1),  # overloaded: still one
        (16, 12.0, 3 * (1 << 12), 1 << 13, 3),  # the work cap below the free cores
        (1, 0.0, 1 << 30, 1 << 13, 1),  # one usable core
        (64, 0.0, 1 << 18, 1 << 18, 2),  # the default threshold of the hand-written kernels
    ],
)
def test_rule(rule, cores: int, load: float, work: int, small: int, want: int) -> None:  # type: ignore[no-untyped-def]
    rule(cores, load)
    assert cpu_threads.usable_cores() == cores
    assert cpu_threads.threads(work, small) == want


def test_overrides(rule, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rule(8, 0.0)
    monkeypatch.setenv(cpu_threads.ENV, "3")
    assert cpu_threads.threads(1) == 3  # forced even for tiny work
    assert cpu_threads.threads(1 << 30) == 3
    monkeypatch.setenv(cpu_threads.ENV, "not a number")
    assert cpu_threads.threads(1 << 30) == 8
    monkeypatch.setenv(cpu_threads.ENV, "0")
    assert cpu_threads.threads(1 << 30) == 8
    monkeypatch.setattr(cpu_threads, "THREADS", 5)  # the module setting wins over the environment
    monkeypatch.setenv(cpu_threads.ENV, "3")
    assert cpu_threads.threads(1) == 5
    monkeypatch.setattr(cpu_threads, "THREADS", None)
    monkeypatch.delenv(cpu_threads.ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "6")  # OpenMP's own variable: above the threshold, capped by work
    assert cpu_threads.threads(1 << 30) == 6
    assert cpu_threads.threads(1 << 18) == 2
    assert cpu_threads.threads(10) == 1


def test_load_average_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without /proc samples the 1-minute load average, less this thread, is the others' load."""
    monkeypatch.setattr(cpu_threads, "_busy_cpu_seconds", lambda: None)
    monkeypatch.setattr(cpu_threads, "_runnable_elsewhere", lambda: None)
    monkeypatch.setattr(cpu_threads, "_sample", None)
    monkeypatch.setattr(cpu_threads, "_estimate", None)
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: (5.0, 1.0, 1.0))
    assert cpu_threads.other_load() == pytest.approx(4.0)
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: (0.2, 1.0, 1.0))
    monkeypatch.setattr(cpu_threads, "_estimate", None)
    assert cpu_threads.other_load() == 0.0


needs_cc = pytest.mark.skipif(not c_compiler_available(), reason="needs a C compiler")


def _matrix(n: int, per_row: int, seed: int = 0) -> sp.csr_array:
    """Integer-valued float entries: every sum is exact, whatever the order of accumulation."""
    rng = np.random.default_rng(seed)
    nnz = n * per_row
    rows = np.repeat(np.arange(n), per_row)
    a = sp.csr_array((rng.integers(-8, 9, nnz).astype(float), (rows, rng.integers(0, n, nnz))), shape=(n, n))
    a.sum_duplicates()
    return a


@needs_cc
@pytest.mark.parametrize("fmt", ["DCSR", "CSR", "CSC", "COO", "(i, j) -> (i : dense, j : compressed)"])
@pytest.mark.parametrize("ncols", [0, 3])
def test_generated_kernel_same_on_one_and_all_threads(fmt: str, ncols: int) -> None:
    from ust.backends.cpu.ckernels import bind_launch

    a = _matrix(3000, 7)
    t = ust.asarray(a).convert(fmt)
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, (3000, ncols) if ncols else 3000).astype(float)
    launch = prepare(t, x)
    _, target = bind_launch(t.format, launch)
    from ust.backends.cpu.ckernels import c_kernel

    kern = c_kernel(
        t.format, launch.op, launch.layout, "auto", launch.dtype, launch.index_dtype, launch.itype()
    )
    assert kern.set_threads is not None
    results = []
    for nt in (1, cpu_threads.usable_cores(), 4):
        y = np.full_like(target, np.nan)
        kern.bind(launch.args(kern.kernel, y), nthreads=nt)()
        results.append(y)
    ref = a @ x
    for y in results:
        np.testing.assert_array_equal(y, ref)


@needs_cc
def test_generated_kernel_restores_openmp_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call sets its own count and puts the process's OpenMP setting back afterwards."""
    from ust.backends.cpu.ckernels import c_kernel

    a = _matrix(500, 3)
    t = ust.asarray(a).convert("CSR")
    x = np.ones(500)
    launch = prepare(t, x)
    kern = c_kernel(
        t.format, launch.op, launch.layout, "auto", launch.dtype, launch.index_dtype, launch.itype()
    )
    before = kern.set_threads(0)  # 0: only reads the current setting
    seen: list[int] = []
    monkeypatch.setattr("ust.backends.cpu.ckernels.threads", lambda work, small: seen.append(work) or 3)
    y = np.empty(500)
    kern.bind(launch.args(kern.kernel, y))()
    assert seen == [max(a.nnz, 500)]  # the work: stored entries (or rows, if more)
    assert kern.set_threads(0) == before
    np.testing.assert_array_equal(y, a @ x)


@needs_cc
def test_env_override_reaches_generated_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.backends.cpu import ckernels

    monkeypatch.setattr(cpu_threads, "THREADS", None)
    monkeypatch.setenv(cpu_threads.ENV, "2")
    counts: list[int] = []
    a = _matrix(400, 2)
    t = ust.asarray(a).convert("CSR")
    x = np.ones(400)
    launch = prepare(t, x)
    kern = ckernels.c_kernel(
        t.format, launch.op, launch.layout, "auto", launch.dtype, launch.index_dtype, launch.itype()
    )
    real = kern.set_threads
    monkeypatch.setattr(kern, "set_threads", lambda n: (counts.append(n), real(n))[1])
    y = np.empty(400)
    kern.bind(launch.args(kern.kernel, y))()
    assert counts[0] == 2  # forced, though 800 entries alone would run on one thread
    np.testing.assert_array_equal(y, a @ x)
    call = kern.bind(launch.args(kern.kernel, y))
    call()
    monkeypatch.setattr(cpu_threads, "THREADS", 3)  # applies to an already bound call at once
    call()
    assert counts[-4::2] == [2, 3]  # (set, restore) per call
