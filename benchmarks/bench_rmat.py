"""R-MAT SpMV / SpMM in user formats: the load-balanced generated kernels against SciPy (CPU)
and cuSPARSE CSR (GPU), and every C kernel under a competing busy process (issue 18).

    python -m benchmarks.bench_rmat [--device cpu|cuda] [--scale 18] [--load] [--write]

The matrix is Graph500's R-MAT (edge factor 16, a = 0.57, b = c = 0.19, rows not permuted:
the hubs come first), stored in two user formats, ``(i, j) -> (i : dense, j : compressed)``
and ``(i, j) -> (i : compressed, j : compressed)``.  For each, with 1 and 8 dense columns:
the generated kernel with the static split of equal row counts (variant ``storage``), the
load-balanced one (``storage:nnz``), what ``ust.Matmul`` plans (``auto``: chosen from the
row lengths) and what its ``autotune`` picks, against SciPy's ``csr_array @`` (one thread)
or CuPy's (cuSPARSE CSR).  CPU rows alternate the contenders call by call and report the
median (best in brackets); the thread count is the load-aware rule's
(:func:`ust.runtime.cpu_threads.threads`).  GPU rows: median of 20 back-to-back calls
between CUDA events.

``--load`` (CPU): a second process spins on one core while every C kernel (generated SpMV
and SpMM, static and balanced; the SpGEMM and CSR -> BSR kernels) runs on one thread and on
the rule's count, interleaved: the goal is at most 1.3x the one-thread time.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks.common import append_results, has_gpu, markdown, rmat

FORMATS = {
    "user (i : dense, j : compressed)": "(i, j) -> (i : dense, j : compressed)",
    "user (i : compressed, j : compressed)": "(i, j) -> (i : compressed, j : compressed)",
}
GOALS = {"cpu_vs_scipy": 1.6, "gpu_vs_cusparse": 0.9, "load_vs_one_thread": 1.3}
COLUMNS = ["matrix", "k", "impl", "threads", "ms", "vs baseline", "goal"]
LOAD_COLUMNS = [
    "kernel",
    "1 thread ms",
    "rule ms",
    "rule threads",
    "rule / 1 thread",
    "best rule / best 1",
    "goal",
]


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, tuple[float, float]]:
    """(median, best) seconds of each function, calling them in turn every round."""
    for f in fns.values():
        f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            samples[name].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), min(v)) for k, v in samples.items()}


def _executor(t: Any, x: Any, variant: str, target: str = "c") -> Callable[[], Any]:
    """A bound call of the generated kernel with ``variant`` (bypassing the route choice)."""
    from ust.backends.generated.executors import GeneratedMatmul

    ex = GeneratedMatmul(t, 1.0, 0.0, "float64", target, variant)
    ex.prepare(x, None)
    return lambda: ex.run(x, None, None)


def _static_share(a: Any, threads: int) -> float:
    """Thread 0's share of the entries under the static split of equal row counts."""
    n = a.shape[0]
    return float(a.indptr[n // threads] - a.indptr[0]) / max(a.nnz, 1)


def cpu_rows(scale: int, rounds: int, nthreads: int | None = None) -> list[dict[str, Any]]:
    import ust
    import ust.runtime.cpu_threads as cpu_threads
    from ust.backends.cpu.ckernels import SMALL
    from ust.runtime.cpu_threads import threads

    cpu_threads.THREADS = nthreads  # None: the load-aware rule

    a = rmat(scale)
    matrix = (
        f"R-MAT scale {scale} ({a.shape[0]:,} rows, {a.nnz:,} nnz, longest row {np.diff(a.indptr).max():,})"
    )
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for k in (1, 8):
        x = rng.random(a.shape[1]) if k == 1 else rng.random((a.shape[1], k))
        ref = a @ x
        fns: dict[str, Callable[[], Any]] = {"SciPy csr_array @ (baseline)": lambda x=x: a @ x}
        labels: dict[str, str] = {}
        for label, text in FORMATS.items():
            t = ust.asarray(a).convert(ust.format(text))
            for variant, what in (("storage", "static split"), ("storage:nnz", "balanced split")):
                fns[f"{label}: generated C, {what}"] = _executor(t, x, variant)
            planned = ust.Matmul(t, x)
            planned.plan()
            fns[f"{label}: Matmul planned ({planned.decision.route})"] = planned.execute
            tuned = ust.Matmul(t, x)
            tuned.plan()
            tuned.autotune(iterations=5)
            labels[f"{label}: Matmul autotuned"] = f"{tuned.decision.route}:{tuned.variant}"
            fns[f"{label}: Matmul autotuned"] = tuned.execute
            for f in (planned.execute, tuned.execute):
                np.testing.assert_allclose(f(), ref, rtol=1e-12)
        for name, f in fns.items():
            if name.endswith("split"):
                np.testing.assert_allclose(f(), ref, rtol=1e-12)
        res = interleaved(fns, rounds)
        base = res["SciPy csr_array @ (baseline)"][0]
        nt = threads(a.nnz * k, SMALL)
        for name, (med, best) in res.items():
            impl = name + (f" ({labels[name]})" if name in labels else "")
            if name.endswith("static split"):
                impl += f" (thread 0 gets {100 * _static_share(a, max(nt, 2)):.0f} % of the entries)"
            rows.append({
                "matrix": matrix, "k": k, "impl": impl, "threads": 1 if name.startswith("SciPy") else (nthreads or nt),
                "ms": f"{1e3 * med:.2f} ({1e3 * best:.2f})", "vs baseline": base / med,
                "goal": f">= {GOALS['cpu_vs_scipy']}x" if "Matmul" in name else "",
            })  # fmt: skip
    return rows


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """A second process spinning on one core for the duration."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)  # long enough for the load estimate to see it
        yield
    finally:
        proc.kill()
        proc.wait()


def load_rows(scale: int, rounds: int) -> list[dict[str, Any]]:
    """Every C kernel on one thread and on the load-aware count, with a busy process beside."""
    import ust
    import ust.runtime.cpu_threads as cpu_threads
    from ust.algebra.spgemm_c import spgemm_csr_c
    from ust.backends.cpu.bsr_c import csr_to_bsr
    from ust.backends.cpu.ckernels import SMALL

    a = rmat(scale)
    small = rmat(max(scale - 4, 8))
    rng = np.random.default_rng(0)
    x, xs = rng.random(a.shape[1]), rng.random((a.shape[1], 8))
    kernels: dict[str, tuple[Callable[[], Any], int]] = {}
    for label, text in FORMATS.items():
        t = ust.asarray(a).convert(ust.format(text))
        for variant in ("storage", "storage:nnz"):
            kernels[f"SpMV {label} {variant}"] = (_executor(t, x, variant), a.nnz)
            kernels[f"SpMM k=8 {label} {variant}"] = (_executor(t, xs, variant), 8 * a.nnz)
    s = (small.indptr, small.indices, small.data)
    kernels[f"SpGEMM C (A @ A, R-MAT scale {max(scale - 4, 8)})"] = (
        lambda: spgemm_csr_c(small.shape, s, small.shape, s),
        0,
    )
    kernels["CSR -> BSR[2,2] C"] = (lambda: csr_to_bsr(a.shape, a.indptr, a.indices, a.data, (2, 2)), a.nnz)
    rows: list[dict[str, Any]] = []
    old = cpu_threads.THREADS
    with busy_process():
        for name, (fn, work) in kernels.items():

            def one(fn: Callable[[], Any] = fn) -> None:
                cpu_threads.THREADS = 1
                fn()

            def rule(fn: Callable[[], Any] = fn) -> None:
                cpu_threads.THREADS = old
                fn()

            res = interleaved({"1": one, "rule": rule}, rounds)
            cpu_threads.THREADS = old
            nt = cpu_threads.threads(work, SMALL) if work else "rule"
            ratio = res["rule"][0] / res["1"][0]
            rows.append({
                "kernel": name, "1 thread ms": 1e3 * res["1"][0], "rule ms": 1e3 * res["rule"][0],
                "rule threads": nt, "rule / 1 thread": ratio, "best rule / best 1": res["rule"][1] / res["1"][1],
                "goal": f"<= {GOALS['load_vs_one_thread']}x",
            })  # fmt: skip
    return rows


def gpu_rows(scale: int) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    import ust
    from benchmarks.bench_spmv import time_gpu_stream

    a = rmat(scale)
    matrix = (
        f"R-MAT scale {scale} ({a.shape[0]:,} rows, {a.nnz:,} nnz, longest row {np.diff(a.indptr).max():,})"
    )
    ga = csp.csr_matrix(a)
    rows: list[dict[str, Any]] = []
    for k in (1, 8):
        x = cp.random.default_rng(0).random(a.shape[1] if k == 1 else (a.shape[1], k))
        ref = ga @ x
        base = time_gpu_stream(lambda x=x: ga @ x)
        rows.append({"matrix": matrix, "k": k, "impl": "CuPy A @ x (cuSPARSE CSR, baseline)", "ms": 1e3 * base,
                     "vs baseline": 1.0})  # fmt: skip
        for label, text in FORMATS.items():
            t = ust.asarray(a).convert(ust.format(text)).to("cuda")
            for variant in ("storage:nnz", "auto:g1", "auto:g4", "auto:g32"):
                f = _executor(t, x, variant, "cuda")
                cp.testing.assert_allclose(f(), ref, rtol=1e-10, atol=1e-10)
                tv = time_gpu_stream(f)
                rows.append({"matrix": matrix, "k": k, "impl": f"{label}: generated CUDA {variant}", "ms": 1e3 * tv,
                             "vs baseline": base / tv})  # fmt: skip
            with ust.Matmul(t, x) as mm:
                mm.plan()
                cp.testing.assert_allclose(mm.execute(), ref, rtol=1e-10, atol=1e-10)
                tp = time_gpu_stream(mm.execute)
                balance = getattr(mm.executor, "_kernel_balance", None)  # a library route has none
                chosen = balance("mv" if k == 1 else "mm") if balance is not None else "library"
                rows.append({"matrix": matrix, "k": k, "impl": f"{label}: Matmul planned ({mm.decision.route}, balance {chosen})",
                             "ms": 1e3 * tp, "vs baseline": base / tp, "goal": f">= {GOALS['gpu_vs_cusparse']}x"})  # fmt: skip
                mm.autotune(iterations=5)
                cp.testing.assert_allclose(mm.execute(), ref, rtol=1e-10, atol=1e-10)
                tt = time_gpu_stream(mm.execute)
                rows.append({"matrix": matrix, "k": k, "impl": f"{label}: Matmul autotuned ({mm.decision.route}:{mm.variant})",
                             "ms": 1e3 * tt, "vs baseline": base / tt, "goal": f">= {GOALS['gpu_vs_cusparse']}x"})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None)
    p.add_argument(
        "--scale", type=int, default=None, help="R-MAT scale (default 18 on the CPU, 21 on the GPU)"
    )
    p.add_argument("--rounds", type=int, default=15, help="CPU: timed calls per contender")
    p.add_argument("--load", action="store_true", help="CPU: every C kernel beside a busy process")
    p.add_argument(
        "--threads", type=int, default=None, help="CPU rows: force this many threads (default: the rule)"
    )
    p.add_argument("--write", action="store_true", help="append the tables to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    device = args.device or ("cuda" if has_gpu() else "cpu")
    scale = args.scale or (21 if device == "cuda" else 18)
    rows = gpu_rows(scale) if device == "cuda" else cpu_rows(scale, args.rounds, args.threads)
    body = markdown(rows, COLUMNS)
    if args.load and device == "cpu":
        import ust.runtime.cpu_threads as cpu_threads

        cpu_threads.THREADS = None
        body += "\nWith a competing busy process (one core spinning):\n\n" + markdown(
            load_rows(scale, args.rounds), LOAD_COLUMNS
        )
    print(body)
    if args.write:
        title = f"R-MAT SpMV / SpMM in user formats, load-balanced generated kernels ({device.upper()})"
        append_results(title, "python -m benchmarks.bench_rmat " + " ".join(argv or sys.argv[1:]), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
