"""What every benchmark shares: test matrices, timers (medians after warm-up), the machine
line and the markdown table written into RESULTS.md."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

RESULTS = Path(__file__).with_name("RESULTS.md")


def poisson3d(n: int, dtype: Any = np.float64) -> sp.csr_array:
    """The 7-point 3-D Poisson matrix on an n^3 grid (n^3 rows, DIA-friendly: 7 diagonals)."""
    from ust.cli.demo import poisson3d as make

    return sp.csr_array(make(n), dtype=dtype)


def random_rows(n: int, per_row: int = 8, seed: int = 0, dtype: Any = np.float64) -> sp.csr_array:
    """n x n with exactly ``per_row`` random columns per row (duplicates summed)."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=(n, per_row))
    rows = np.repeat(np.arange(n), per_row)
    vals = rng.standard_normal(n * per_row).astype(dtype)
    a = sp.coo_array((vals, (rows, cols.ravel())), shape=(n, n)).tocsr()
    a.sum_duplicates()
    return a


def rmat(
    scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19, seed: int = 0
) -> sp.csr_array:
    """An R-MAT graph (Graph500's generator): ``2**scale`` vertices, ``edge_factor`` edges per
    vertex drawn quadrant by quadrant with probabilities a, b, c, 1 - a - b - c, duplicates
    summed, int32 indices.  Rows are not permuted, so the hub rows come first (a static split of
    equal row counts gives thread 0 most of the entries)."""
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    i = np.zeros(m, np.int64)
    j = np.zeros(m, np.int64)
    for _ in range(scale):
        r = rng.random(m)
        i = 2 * i + (r >= a + b)
        j = 2 * j + (((r >= a) & (r < a + b)) | (r >= a + b + c))
    out = sp.csr_array((rng.random(m), (i, j)), shape=(n, n))
    out.sum_duplicates()
    return sp.csr_array((out.data, out.indices.astype(np.int32), out.indptr.astype(np.int32)), shape=(n, n))


def with_threads(nt: int, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with every ust C kernel held at ``nt`` OpenMP threads."""

    def run() -> Any:
        from ust.runtime import cpu_threads

        cpu_threads.THREADS = nt
        try:
            return fn()
        finally:
            cpu_threads.THREADS = None

    return run


def has_gpu() -> bool:
    """Whether CuPy imports and sees a CUDA device."""
    try:
        import cupy as cp

        return bool(cp.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


def time_cpu(fn: Callable[[], Any], repeat: int = 7, warmup: int = 1) -> float:
    """Median seconds of ``fn()`` on the CPU."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def time_round_robin(fns: dict[str, Callable[[], Any]], repeat: int = 7, warmup: int = 1) -> dict[str, float]:
    """Best-of-``repeat`` seconds of each contender on the CPU, timed in turns (one run of each
    per round) after a warm-up, so that a burst of load on the shared machine hits every
    contender alike; the minimum is the least disturbed run."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def time_gpu(fn: Callable[[], Any], repeat: int = 20, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` on the current CuPy stream, timed with CUDA events."""
    import cupy as cp

    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(samples)


def time_host(fn: Callable[[], Any], repeat: int = 2000) -> float:
    """Mean wall seconds per call over many calls (for per-call Python overhead)."""
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def machine() -> str:
    """One line naming the machine: CPU, cores and, where CuPy sees one, the GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = ""
    try:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        gpu = f"; GPU {name}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, CuPy {cp.__version__}"
    except Exception:
        pass
    return f"{cpu}, {os.cpu_count()} cores{gpu}"


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(cell(r.get(c)) for c in columns) + " |\n" for r in rows)


def append_results(title: str, command: str, body: str) -> None:
    """Append a dated section to benchmarks/RESULTS.md."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"\n## {title}\n\n{stamp}, commit {commit}, {machine()}\n\nCommand: `{command}`\n\n{body}\n"
    with open(RESULTS, "a", encoding="utf-8") as f:
        f.write(text)
