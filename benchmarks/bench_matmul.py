"""SpMV / SpMM through the planner, side by side with CuPy (cuSPARSE) and nvmath-python.

GPU (default when a device answers): CSR Poisson n^3 with k = 1 and 8 columns:
``ust.matmul`` one-shot and ``ust.Matmul.execute`` vs CuPy ``A @ x`` (and nvmath-python's
sparse Matmul where it imports); the route the planner picks for DIA vs cuSPARSE CSR; the
Python overhead of one ``execute()`` on a tiny matrix.  CPU: the same against SciPy.

    python -m benchmarks.bench_matmul [--device cpu|cuda] [--n 160] [--write]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import scipy.sparse as sp

import ust
from benchmarks.common import append_results, markdown, poisson3d, time_cpu, time_gpu, time_host


def _gpu(n: int) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    a = poisson3d(n)
    rows: list[dict[str, Any]] = []
    ga = csp.csr_matrix(a)
    ta = ust.asarray(a, device="cuda")
    tdia = ust.asarray(a, format="DIA", device="cuda")
    nbytes_csr = a.data.nbytes + a.indices.nbytes + a.indptr.nbytes
    for k in (1, 8):
        x = cp.random.default_rng(0).standard_normal(a.shape[1] if k == 1 else (a.shape[1], k))
        t_cupy = time_gpu(lambda x=x: ga @ x)
        t_one = time_gpu(lambda x=x: ust.matmul(ta, x))
        mm = ust.Matmul(ta, x)
        mm.plan()
        mm.autotune(iterations=10)
        t_exec = time_gpu(mm.execute)
        dia = ust.Matmul(tdia, x)
        dia.plan()
        t_dia = time_gpu(dia.execute)
        moved = nbytes_csr + 8 * (a.shape[0] + a.shape[1]) * k
        nv = _nvmath(a, x, k)
        rows += [
            {"case": f"CSR {n}^3 k={k}", "impl": "CuPy A @ x", "ms": 1e3 * t_cupy, "vs CuPy": 1.0, "GB/s": moved / t_cupy / 1e9},
            {"case": f"CSR {n}^3 k={k}", "impl": "ust.matmul (one-shot)", "ms": 1e3 * t_one, "vs CuPy": t_cupy / t_one},
            {"case": f"CSR {n}^3 k={k}", "impl": f"ust.Matmul.execute ({mm.decision.route}:{mm.variant})", "ms": 1e3 * t_exec, "vs CuPy": t_cupy / t_exec, "GB/s": moved / t_exec / 1e9},
            {"case": f"CSR {n}^3 k={k}", "impl": f"planner on DIA -> {dia.decision.route}", "ms": 1e3 * t_dia, "vs CuPy": t_cupy / t_dia},
        ]  # fmt: skip
        if nv is not None:
            rows.append(
                {
                    "case": f"CSR {n}^3 k={k}",
                    "impl": "nvmath-python Matmul.execute",
                    "ms": 1e3 * nv,
                    "vs CuPy": t_cupy / nv,
                }
            )
        mm.free()
        dia.free()
    tiny = ust.Matmul(
        ust.asarray(sp.random_array((8, 8), density=0.5, format="csr", random_state=0), device="cuda"),
        cp.ones(8),
    )
    tiny.plan()
    rows.append(
        {"case": "8x8 CSR", "impl": "Python overhead of execute()", "ms": 1e3 * time_host(tiny.execute)}
    )
    return rows


def _nvmath(a: sp.csr_array, x: Any, k: int) -> float | None:
    """nvmath-python 1.0's stateful sparse Matmul (c is required and updated in place)."""
    try:
        import cupy as cp
        import cupyx.scipy.sparse as csp
        import nvmath

        ga = csp.csr_matrix(a)
        c = cp.zeros(a.shape[0] if k == 1 else (a.shape[0], k))
        mm = nvmath.sparse.Matmul(ga, x, c, alpha=1.0, beta=0.0)
        mm.plan()
        t = time_gpu(mm.execute)
        mm.free()
        return t
    except Exception as exc:  # not installed, or an API difference: reported, not fatal
        print(f"nvmath-python skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _cpu(n: int) -> list[dict[str, Any]]:
    a = poisson3d(n)
    rows: list[dict[str, Any]] = []
    ta = ust.asarray(a)
    for k in (1, 8):
        x = np.random.default_rng(0).standard_normal(a.shape[1] if k == 1 else (a.shape[1], k))
        t_scipy = time_cpu(lambda x=x: a @ x)
        mm = ust.Matmul(ta, x)
        mm.plan()
        t_exec = time_cpu(mm.execute)
        fused = ust.Matmul(ta, x, x[: a.shape[0]] if k == 1 else x, alpha=2.0, beta=0.5)
        fused.plan()
        t_fused = time_cpu(fused.execute)
        t_sep = time_cpu(lambda x=x: 2.0 * (a @ x) + 0.5 * x)
        rows += [
            {"case": f"CSR {n}^3 k={k}", "impl": "SciPy A @ x", "ms": 1e3 * t_scipy, "vs baseline": 1.0},
            {"case": f"CSR {n}^3 k={k}", "impl": f"ust.Matmul.execute ({mm.decision.route})", "ms": 1e3 * t_exec, "vs baseline": t_scipy / t_exec},
            {"case": f"CSR {n}^3 k={k} fused", "impl": "SciPy 2*(A@x)+0.5*c", "ms": 1e3 * t_sep, "vs baseline": 1.0},
            {"case": f"CSR {n}^3 k={k} fused", "impl": f"ust.Matmul.execute ({fused.decision.route})", "ms": 1e3 * t_fused, "vs baseline": t_sep / t_fused},
        ]  # fmt: skip
    tiny = ust.Matmul(sp.random_array((8, 8), density=0.5, format="csr", random_state=0), np.ones(8))
    tiny.plan()
    rows.append(
        {"case": "8x8 CSR", "impl": "Python overhead of execute()", "ms": 1e3 * time_host(tiny.execute)}
    )
    return rows


def run(device: str, n: int) -> list[dict[str, Any]]:
    """The table's rows for Poisson ``n^3`` on ``device`` ("cpu" or "cuda")."""
    return _gpu(n) if device == "cuda" else _cpu(n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument(
        "--n", type=int, default=None, help="Poisson grid side (default 160 on the GPU, 60 on the CPU)"
    )
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    from ust.backends.cuda.arrays import gpu_available

    device = args.device or ("cuda" if gpu_available() else "cpu")
    n = args.n or (160 if device == "cuda" else 60)
    rows = run(device, n)
    cols = ["case", "impl", "ms", "vs CuPy" if device == "cuda" else "vs baseline", "GB/s"]
    table = markdown(rows, cols)
    print(table)
    if args.write:
        append_results(
            f"Matmul through the planner ({device})",
            "python -m benchmarks.bench_matmul " + " ".join(argv or sys.argv[1:]),
            table,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
