"""Generated SpMV / SpMM kernels (DIA and CSR) side by side with the library baselines.

    python -m benchmarks.bench_spmv [--device cpu|cuda] [--n 160] [--write]

GPU (``--device cuda``, the default when a device answers): a 7-point 3-D Poisson matrix of
``n^3`` rows (fp64) and a random matrix with 8 nonzeros per row of as many rows, with 1 and 8
dense columns: the generated DIA kernel (Poisson only) and the generated CSR kernel (every
threads-per-row mapping; the default one is marked) against CuPy's ``A @ x`` (cuSPARSE CSR).
Then the first-use cost of a kernel: NVRTC compile into an empty cache, and the load of the
cached cubin (memo cleared, as in a new process).

CPU (``--device cpu``): the generated C CSR and DIA kernels against SciPy's ``csr_array`` and
``dia_array`` ``@``, and the first-use C compile / cached load.  CPU timings alternate the
contenders call by call and report the best and the median of the samples (robust on a
shared machine).

Reported: ms, effective GB/s (the bytes the format must move once: values, indices, x and y),
the ratio to the baseline (> 1: ust faster) and the issue's goals.  ``--write`` appends the
table to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.common import append_results, has_gpu, markdown, poisson3d, random_rows, time_gpu

GOALS = {
    "dia_spmv_ms": 0.1,  # GPU, 160^3 Poisson, one column
    "dia_spmm8_vs_cupy": 2.0,  # GPU, 8 columns: at least 2x faster than CuPy CSR SpMM
    "csr_vs_cusparse": 0.8,  # GPU, generated CSR at least 0.8x cuSPARSE
    "cpu_csr_vs_scipy": 1 / 1.5,  # CPU, generated C CSR within 1.5x of SciPy
    "cpu_dia_vs_scipy": 1.0,  # CPU, generated C DIA at least as fast as SciPy's dia_array
    "nvrtc_compile_s": 1.0,
    "cached_load_ms": 10.0,
}
COLUMNS = ["matrix", "k", "impl", "ms", "GB/s", "vs baseline", "goal"]


def model_bytes(kind: str, a: sp.csr_array, k: int, ndiag: int = 0) -> int:
    """Bytes an ideal kernel moves once: values + indices, x and y (fp64, int32 indices)."""
    n, m = a.shape
    dense = 8 * (n + m) * k
    if kind == "DIA":
        return 8 * ndiag * m + 4 * ndiag + dense
    return 12 * a.nnz + 4 * (n + 1) + dense


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, tuple[float, float]]:
    """(best, median) seconds of each function, calling them in turn every round."""
    for f in fns.values():
        f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            samples[name].append(time.perf_counter() - t0)
    return {k: (min(v), statistics.median(v)) for k, v in samples.items()}


def time_gpu_stream(fn: Callable[[], Any], calls: int = 20, repeat: int = 10) -> float:
    """Median seconds per call of ``calls`` back-to-back calls between two CUDA events.

    Back to back, the queue stays full, so a kernel's device time is measured rather than
    the host's launch latency (the same for every contender, baseline included)."""
    import cupy as cp

    for _ in range(3):
        fn()
    cp.cuda.get_current_stream().synchronize()
    samples = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / calls)
    return statistics.median(samples)


def matrices(n: int) -> list[tuple[str, sp.csr_array]]:
    """The two test matrices, int32-indexed (as cuSPARSE and the byte model assume)."""
    out = []
    for label, a in (("Poisson", poisson3d(n)), ("random 8/row", random_rows(n**3, 8))):
        a = sp.csr_array((a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)), shape=a.shape)
        out.append((label, a))
    return out


def dia_tensor(a: sp.csr_array, device: str | None = None) -> Any:
    import ust

    return ust.asarray(a, format="DIA", device=device, max_padding=10**10)


# ----------------------------------------------------------------------------- CPU


def cpu_rows(n: int, rounds: int) -> list[dict[str, Any]]:
    import ust
    from ust.backends.cpu import ckernels
    from ust.backends.generated.launch import prepare

    rows: list[dict[str, Any]] = []
    for label, a in matrices(n):
        matrix = f"{label} {n}^3 ({a.shape[0]:,} rows, {a.nnz:,} nnz)"
        t_csr = ust.asarray(a, format="CSR")
        dia = a.todia() if label == "Poisson" else None
        t_dia = dia_tensor(a) if dia is not None else None
        for k in (1, 8):
            rng = np.random.default_rng(0)
            x = rng.standard_normal(a.shape[1] if k == 1 else (a.shape[1], k))
            y = np.empty(a.shape[0] if k == 1 else (a.shape[0], k))

            def kernel_call(t: Any, x: np.ndarray = x, y: np.ndarray = y) -> Callable[[], Any]:
                launch = prepare(t, x, out=y)
                kern = ckernels.c_kernel(
                    t.format,
                    launch.op,
                    launch.layout,
                    "auto",
                    launch.dtype,
                    launch.index_dtype,
                    launch.itype(),
                )
                args = launch.args(kern.kernel, y)
                return lambda: kern(args)

            fns: dict[str, Callable[[], Any]] = {
                "scipy csr": lambda x=x, a=a: a @ x,
                "ust C CSR": kernel_call(t_csr),
                "ust.matmul CSR (planner)": lambda x=x, t=t_csr: ust.matmul(t, x),
            }
            if dia is not None and t_dia is not None:
                fns["scipy dia"] = lambda x=x, d=dia: d @ x
                fns["ust C DIA"] = kernel_call(t_dia)
            res = interleaved(fns, rounds)
            np.testing.assert_allclose(ckernels.matmul_c(t_csr, x), a @ x, rtol=1e-10, atol=1e-10)
            base_csr = res["scipy csr"][0]
            b_csr = model_bytes("CSR", a, k)
            for impl in ("scipy csr", "ust C CSR", "ust.matmul CSR (planner)"):
                best, med = res[impl]
                goal = f">= {GOALS['cpu_csr_vs_scipy']:.2f}x" if impl == "ust C CSR" else ""
                rows.append(_row(matrix, k, impl, best, med, b_csr, base_csr, goal))
            if dia is not None and t_dia is not None:
                np.testing.assert_allclose(ckernels.matmul_c(t_dia, x), a @ x, rtol=1e-10, atol=1e-10)
                base = res["scipy dia"][0]
                b_dia = model_bytes("DIA", a, k, ndiag=dia.data.shape[0])
                for impl in ("scipy dia", "ust C DIA"):
                    best, med = res[impl]
                    goal = ">= 1.00x" if impl == "ust C DIA" else ""
                    rows.append(_row(matrix, k, impl, best, med, b_dia, base, goal))
    rows += cpu_compile_rows()
    return rows


def _row(
    matrix: str, k: int, impl: str, best: float, med: float, nbytes: int, base: float, goal: str
) -> dict[str, Any]:
    return {
        "matrix": matrix,
        "k": k,
        "impl": impl,
        "ms": f"{1e3 * best:.3f} (median {1e3 * med:.3f})",
        "GB/s": nbytes / best / 1e9,
        "vs baseline": base / best,
        "goal": goal,
    }


def cpu_compile_rows() -> list[dict[str, Any]]:
    import ust.formats as F
    from ust.backends.cpu import ckernels
    from ust.codegen.cache import Memo

    rows = []
    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("UST_CACHE_DIR")
        os.environ["UST_CACHE_DIR"] = d
        try:
            for fmt in ("CSR", "DIA"):
                ckernels._memo = Memo()
                t0 = time.perf_counter()
                ckernels.c_kernel(F.get(fmt), "mv", "row", "auto", "float64", "int32", "int32")
                first = time.perf_counter() - t0
                ckernels._memo = Memo()
                t0 = time.perf_counter()
                ckernels.c_kernel(F.get(fmt), "mv", "row", "auto", "float64", "int32", "int32")
                cached = time.perf_counter() - t0
                rows.append(
                    {
                        "matrix": f"{fmt} SpMV kernel",
                        "impl": "first use: generate + cc -O3 + dlopen",
                        "ms": 1e3 * first,
                    }
                )
                rows.append(
                    {
                        "matrix": f"{fmt} SpMV kernel",
                        "impl": "cached: generate + hash + dlopen",
                        "ms": 1e3 * cached,
                        "goal": "< 10 ms",
                    }
                )
        finally:
            if old is None:
                os.environ.pop("UST_CACHE_DIR", None)
            else:
                os.environ["UST_CACHE_DIR"] = old
    return rows


# ----------------------------------------------------------------------------- GPU


def gpu_rows(n: int) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    import ust
    from ust.backends.cuda import kernels
    from ust.backends.generated.launch import prepare
    from ust.codegen.schedule import default_group

    rows: list[dict[str, Any]] = []
    for label, a in matrices(n):
        matrix = f"{label} {n}^3 ({a.shape[0]:,} rows, {a.nnz:,} nnz)"
        ga = csp.csr_matrix(a)
        t_csr = ust.asarray(a, format="CSR", device="cuda")
        t_dia = dia_tensor(a, "cuda") if label == "Poisson" else None
        ndiag = int(t_dia.crd(0).size) if t_dia is not None else 0
        for k in (1, 8):
            x = cp.random.default_rng(0).standard_normal(a.shape[1] if k == 1 else (a.shape[1], k))
            y = cp.empty(a.shape[0] if k == 1 else (a.shape[0], k))
            ref = ga @ x
            t_cupy = time_gpu_stream(lambda x=x, ga=ga: ga @ x)
            b_csr = model_bytes("CSR", a, k)
            rows.append({"matrix": matrix, "k": k, "impl": "CuPy A @ x (cuSPARSE CSR)", "ms": 1e3 * t_cupy,
                         "GB/s": b_csr / t_cupy / 1e9, "vs baseline": 1.0})  # fmt: skip
            launch = prepare(t_csr, x, out=y)
            default = default_group(t_csr, launch.op)
            for g in (1, 2, 4, 8, 16, 32):
                bound = kernels.bind_launch_cuda(t_csr.format, launch, y, "auto", g)
                bound()
                cp.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)
                t = time_gpu_stream(bound)
                rows.append({"matrix": matrix, "k": k, "impl": f"ust CSR, {g} threads/row" + (" (default)" if g == default else ""),
                             "ms": 1e3 * t, "GB/s": b_csr / t / 1e9, "vs baseline": t_cupy / t,
                             "goal": f">= {GOALS['csr_vs_cusparse']}x" if g == default else ""})  # fmt: skip
            if t_dia is not None:
                bound = kernels.bind_launch_cuda(t_dia.format, prepare(t_dia, x, out=y), y, "auto", 1)
                bound()
                cp.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)
                t = time_gpu_stream(bound)
                b = model_bytes("DIA", a, k, ndiag)
                goal = f"<= {GOALS['dia_spmv_ms']} ms" if k == 1 else f">= {GOALS['dia_spmm8_vs_cupy']}x"
                rows.append({"matrix": matrix, "k": k, "impl": "ust DIA (generated kernel)", "ms": 1e3 * t,
                             "GB/s": b / t / 1e9, "vs baseline": t_cupy / t, "goal": goal})  # fmt: skip
                with ust.Matmul(t_dia, x) as mm:
                    mm.plan()
                    t_exec = time_gpu_stream(mm.execute)
                    rows.append({"matrix": matrix, "k": k, "impl": f"ust.Matmul(DIA).execute ({mm.decision.route})",
                                 "ms": 1e3 * t_exec, "GB/s": b / t_exec / 1e9, "vs baseline": t_cupy / t_exec})  # fmt: skip
                t_one = time_gpu(lambda x=x, t=t_dia: ust.matmul(t, x))
                rows.append({"matrix": matrix, "k": k, "impl": "ust.matmul(DIA) one-shot, single call (host latency included)",
                             "ms": 1e3 * t_one, "vs baseline": t_cupy / t_one})  # fmt: skip
    rows += gpu_compile_rows()
    return rows


def gpu_compile_rows() -> list[dict[str, Any]]:
    import ust.formats as F
    from ust.backends.cuda import kernels
    from ust.codegen.cache import Memo

    rows = []
    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("UST_CACHE_DIR")
        os.environ["UST_CACHE_DIR"] = d
        try:
            for fmt in ("CSR", "DIA"):
                kernels._memo = Memo()
                ck = kernels.cuda_kernel(F.get(fmt), "mv", "row", "auto", "float64", "int32", "int32", 1)
                rows.append({"matrix": f"{fmt} SpMV kernel", "impl": f"first use: generate + NVRTC + load ({ck.how})",
                             "ms": 1e3 * ck.load_seconds, "goal": "< 1000 ms"})  # fmt: skip
                kernels._memo = Memo()
                t0 = time.perf_counter()
                ck = kernels.cuda_kernel(F.get(fmt), "mv", "row", "auto", "float64", "int32", "int32", 1)
                rows.append({"matrix": f"{fmt} SpMV kernel", "impl": f"cached: generate + hash + cubin load ({ck.how})",
                             "ms": 1e3 * (time.perf_counter() - t0), "goal": "< 10 ms"})  # fmt: skip
        finally:
            if old is None:
                os.environ.pop("UST_CACHE_DIR", None)
            else:
                os.environ["UST_CACHE_DIR"] = old
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None)
    p.add_argument(
        "--n", type=int, default=None, help="grid size: n^3 rows (default 160 on the GPU, 60 on the CPU)"
    )
    p.add_argument("--rounds", type=int, default=30, help="CPU: timed calls per contender")
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    device = args.device or ("cuda" if has_gpu() else "cpu")
    n = args.n or (160 if device == "cuda" else 60)
    rows = gpu_rows(n) if device == "cuda" else cpu_rows(n, args.rounds)
    table = markdown(rows, COLUMNS)
    print(table)
    if args.write:
        note = (
            "CPU rows: best of the interleaved samples (median in brackets); GB/s from the bytes the format must move once. "
            f"OpenMP threads: {os.environ.get('OMP_NUM_THREADS', 'all cores')}."
            if device == "cpu"
            else "GPU rows: median per call of 20 back-to-back calls between CUDA events (baseline timed the same way); "
            "GB/s from the bytes the format must move once."
        )
        title = "SpMV (CPU)" if device == "cpu" else "SpMV (GPU)"
        append_results(
            title,
            "python -m benchmarks.bench_spmv " + " ".join(sys.argv[1:] if argv is None else argv),
            table + "\n" + note + "\n",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
