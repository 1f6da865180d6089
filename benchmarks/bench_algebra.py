"""Sparse algebra side by side with the libraries: SpGEMM, SDDMM, elementwise add, reductions.

CPU (vs SciPy): SpGEMM ``A @ A`` on the 3-D Poisson matrix (60^3 by default); SDDMM on a random
pattern with 8 entries per row and rank-64 factors (vs a NumPy gather baseline); elementwise
add / multiply of two random matrices; sum / max along an axis.  GPU (vs CuPy): SpGEMM on
Poisson 100^3 (vs CuPy's cuSPARSE-backed ``@``); SDDMM on a 1M x 1M pattern, 8 per row,
rank 64 (vs gathering rows of A and columns of B with CuPy and a row-wise dot); add of two
random matrices (vs CuPy ``A + B``).  Every row names the route ust took; ``ust / baseline``
is a time ratio (below 1: ust is faster).  CPU times are the best of 7 runs with the
contenders of a case timed in turns (the machine is shared: medians there move by tens of
percent between runs); GPU times are medians of CUDA-event timings.

    python -m benchmarks.bench_algebra [--device cpu|cuda] [--n 60] [--rows 200000] [--append-results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

import numpy as np

from benchmarks.common import markdown, poisson3d, random_rows, time_gpu, time_round_robin, with_threads

COLUMNS = ["case", "ust", "ust ms", "baseline", "baseline ms", "ust / baseline", "goal"]


def _row(case: str, ust: str, t_ust: float, base: str, t_base: float, goal: str = "") -> dict[str, Any]:
    return {
        "case": case,
        "ust": ust,
        "ust ms": 1e3 * t_ust,
        "baseline": base,
        "baseline ms": 1e3 * t_base,
        "ust / baseline": t_ust / t_base,
        "goal": goal,
    }


def _factors(m: int, n: int, k: int, dtype: Any, xp: Any) -> tuple[Any, Any]:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return xp.asarray(a), xp.asarray(b)


# ----------------------------------------------------------------------------- CPU


def _spgemm_threads(a: Any) -> int:
    """The threads the C SpGEMM kernel picks for ``a @ a`` now."""
    from ust.algebra.spgemm_c import SMALL_PRODUCTS
    from ust.runtime.cpu_threads import threads

    return threads(int(np.diff(a.indptr)[a.indices].sum()), SMALL_PRODUCTS)


def cpu_cases(n: int, rows: int, sddmm_rows: int) -> list[dict[str, Any]]:
    import ust.api.algebra as ops
    from ust.convert import asarray

    out: list[dict[str, Any]] = []

    # SpGEMM A @ A, Poisson n^3 (and (n/2)^3)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    A = poisson3d(n)
    ta, tdia = asarray(A), asarray(A, "DIA")
    case = f"SpGEMM A@A, Poisson {n}^3 ({A.shape[0]:,} rows, {A.nnz:,} nnz)"
    route = ops.plan("spgemm", ta, ta).route

    def sorted_product() -> Any:
        c = A @ A
        c.sort_indices()
        return c

    t = time_round_robin({
        "ust": lambda: ops.matmul_sparse(ta, ta),
        "one": with_threads(1, lambda: ops.matmul_sparse(ta, ta, route="generated-c")),
        "all": with_threads(cores, lambda: ops.matmul_sparse(ta, ta, route="generated-c")),
        "scipy-route": lambda: ops.matmul_sparse(ta, ta, route="scipy"),
        "dia": lambda: ops.matmul_sparse(tdia, tdia),
        "scipy": lambda: A @ A,
        "scipy-sorted": sorted_product,
    })  # fmt: skip
    ours = f"matmul_sparse ({route}, sorted CSR; picks {_spgemm_threads(A)} of {cores} threads now)"
    base = "scipy A @ A (unsorted rows)"
    out += [
        _row(case, ours, t["ust"], base, t["scipy"], "<= 1.2"),
        _row(case, "matmul_sparse (generated-c, 1 thread)", t["one"], base, t["scipy"]),
        _row(case, f"matmul_sparse (generated-c, {cores} threads)", t["all"], base, t["scipy"]),
        _row(case, "matmul_sparse (scipy route: SciPy + sort)", t["scipy-route"], base, t["scipy"]),
        _row(case, ours, t["ust"], "scipy A @ A + sort_indices", t["scipy-sorted"]),
        _row(case, f"DIA @ DIA ({ops.plan('spgemm', tdia, tdia).route})", t["dia"], base, t["scipy"]),
    ]
    m = max(n // 2, 4)
    small = poisson3d(m)
    ts = asarray(small)
    case = f"SpGEMM A@A, Poisson {m}^3 ({small.shape[0]:,} rows, {small.nnz:,} nnz)"
    t = time_round_robin({
        "ust": lambda: ops.matmul_sparse(ts, ts),
        "one": with_threads(1, lambda: ops.matmul_sparse(ts, ts, route="generated-c")),
        "all": with_threads(cores, lambda: ops.matmul_sparse(ts, ts, route="generated-c")),
        "scipy": lambda: small @ small,
    })  # fmt: skip
    route = ops.plan("spgemm", ts, ts).route
    ours = f"matmul_sparse ({route}, sorted CSR; picks {_spgemm_threads(small)} of {cores} threads now)"
    out += [
        _row(case, ours, t["ust"], base, t["scipy"], "<= 1.2"),
        _row(case, "matmul_sparse (generated-c, 1 thread)", t["one"], base, t["scipy"]),
        _row(case, f"matmul_sparse (generated-c, {cores} threads)", t["all"], base, t["scipy"]),
    ]
    t = time_round_robin({"esc": lambda: ops.matmul_sparse(ts, ts, route="array-program"), "scipy": lambda: small @ small},
                     repeat=3)  # fmt: skip
    out.append(_row(case, "array-program (expand-sort-compress)", t["esc"], base, t["scipy"]))

    # SDDMM
    S = random_rows(sddmm_rows, 8, seed=3)
    tsd = asarray(S)
    a, b = _factors(sddmm_rows, sddmm_rows, 64, np.float64, np)
    rows_, cols_ = np.repeat(np.arange(sddmm_rows), np.diff(S.indptr)), S.indices
    bt = np.ascontiguousarray(b.T)
    case = f"SDDMM {sddmm_rows:,}^2, 8/row, rank 64, f64"
    base = "NumPy gathers + row dot (rows precomputed)"
    t = time_round_robin({
        "ust": lambda: ops.sddmm(tsd, a, b),
        "epilog": lambda: ops.sddmm(tsd, a, b, epilog="max(y, 0) * s", epilog_params={"s": 0.5}),
        "base": lambda: np.einsum("ij,ij->i", a[rows_], bt[cols_]),
    }, repeat=5)  # fmt: skip
    out += [
        _row(case, f"sddmm ({ops.plan('sddmm', tsd, a, b).route})", t["ust"], base, t["base"], "<= 1.2"),
        _row(case + ", epilogue max(y,0)*s", "sddmm + in-place epilogue", t["epilog"], base, t["base"]),
    ]

    # elementwise, reductions, transpose
    X, Y = random_rows(rows, 8, seed=0), random_rows(rows, 8, seed=1)
    tx, ty = asarray(X), asarray(Y)
    dx, dy = asarray(X, "DCSR"), asarray(Y, "DCSR")
    t = time_round_robin({
        "add": lambda: ops.add(tx, ty),
        "add-array": lambda: ops.add(tx, ty, route="array-program"),
        "add-dcsr": lambda: ops.add(dx, dy),
        "scipy-add": lambda: X + Y,
        "mul": lambda: ops.multiply(tx, ty),
        "mul-array": lambda: ops.multiply(tx, ty, route="array-program"),
        "scipy-mul": lambda: X.multiply(Y),
        "sum": lambda: ops.sum(tx, 1),
        "sum-array": lambda: ops.sum(tx, 1, route="array-program"),
        "scipy-sum": lambda: X.sum(axis=1),
        "max-array": lambda: ops.max(tx, 0, route="array-program"),
        "scipy-max": lambda: X.max(axis=0),
        "transpose": lambda: ops.transpose(tx),
        "scipy-transpose": lambda: X.T,
    })  # fmt: skip
    add_case, mul_case = f"add, random {rows:,}^2, 8/row", f"multiply, random {rows:,}^2, 8/row"
    out += [
        _row(add_case, f"add ({ops.plan('add', tx, ty).route})", t["add"], "scipy X + Y", t["scipy-add"], "<= 1.2"),
        _row(add_case, "add (array-program, forced)", t["add-array"], "scipy X + Y", t["scipy-add"]),
        _row(add_case + " as DCSR", f"add ({ops.plan('add', dx, dy).route})", t["add-dcsr"], "scipy X + Y (CSR)",
             t["scipy-add"]),
        _row(mul_case, f"multiply ({ops.plan('multiply', tx, ty).route})", t["mul"], "scipy X.multiply(Y)",
             t["scipy-mul"], "<= 1.2"),
        _row(mul_case, "multiply (array-program, forced)", t["mul-array"], "scipy X.multiply(Y)", t["scipy-mul"]),
        _row(f"sum(axis=1), {rows:,}^2", "sum (scipy)", t["sum"], "scipy X.sum(1)", t["scipy-sum"]),
        _row(f"sum(axis=1), {rows:,}^2", "sum (array-program, forced)", t["sum-array"], "scipy X.sum(1)",
             t["scipy-sum"]),
        _row(f"max(axis=0), {rows:,}^2", "max (array-program, forced)", t["max-array"], "scipy X.max(0)",
             t["scipy-max"]),
        _row(f"transpose, {rows:,}^2", "transpose (relabel: a view)", t["transpose"], "scipy X.T (a view)",
             t["scipy-transpose"]),
    ]  # fmt: skip
    return out


# ----------------------------------------------------------------------------- GPU


def _gpu_spgemm(n: int) -> list[dict[str, Any]]:
    import cupyx.scipy.sparse as csp

    import ust.api.algebra as ops
    from ust.convert import asarray

    A = poisson3d(n)
    ga = csp.csr_matrix(A)
    ta = asarray(A).to("cuda")
    tdia = asarray(A, "DIA").to("cuda")
    case = f"SpGEMM A@A, Poisson {n}^3 ({A.shape[0]:,} rows, {A.nnz:,} nnz)"
    base = "CuPy A @ A (cuSPARSE)"
    t_cupy = time_gpu(lambda: ga @ ga, repeat=10)
    return [
        _row(case, f"matmul_sparse ({ops.plan('spgemm', ta, ta).route})",
             time_gpu(lambda: ops.matmul_sparse(ta, ta), repeat=10), base, t_cupy, "<= 1.2"),
        _row(case, "array-program (expand-sort-compress)",
             time_gpu(lambda: ops.matmul_sparse(ta, ta, route="array-program"), repeat=5), base, t_cupy),
        _row(case, f"DIA @ DIA ({ops.plan('spgemm', tdia, tdia).route})",
             time_gpu(lambda: ops.matmul_sparse(tdia, tdia), repeat=5), base, t_cupy),
    ]  # fmt: skip


def _gpu_sddmm(n: int, dtype: Any) -> list[dict[str, Any]]:
    import cupy as cp

    import ust.api.algebra as ops
    from ust.convert import asarray

    S = random_rows(n, 8, seed=3, dtype=dtype)
    ts = asarray(S).to("cuda")
    tcoo = asarray(S, "COO").to("cuda")
    a, b = _factors(n, n, 64, dtype, cp)
    gr = cp.asarray(np.repeat(np.arange(n), np.diff(S.indptr)))
    gc = cp.asarray(S.indices)
    bt = cp.ascontiguousarray(b.T)
    case = f"SDDMM {n:,}^2, 8/row, rank 64, {np.dtype(dtype).name}"
    base = "CuPy gathers + row sum (rows precomputed)"
    t_base = time_gpu(lambda: (a[gr] * bt[gc]).sum(axis=1), repeat=10)
    out = []
    for route in (None, "generated-cuda", "array-program"):
        name = route or ops.plan("sddmm", ts, a, b).route
        t_r = time_gpu(lambda route=route: ops.sddmm(ts, a, b, route=route), repeat=10)
        out.append(_row(case, f"sddmm ({name})", t_r, base, t_base, "<= 1.2" if route is None else ""))
    t_ep = time_gpu(
        lambda: ops.sddmm(ts, a, b, epilog="max(y, 0) * s", epilog_params={"s": 0.5}, route="generated-cuda"),
        repeat=10,
    )
    out.append(_row(case + ", epilogue fused", "sddmm (generated-cuda, max(y,0)*s)", t_ep, base, t_base))
    t_coo = time_gpu(lambda: ops.sddmm(tcoo, a, b), repeat=10)
    out.append(
        _row(case + ", COO pattern", f"sddmm ({ops.plan('sddmm', tcoo, a, b).route})", t_coo, base, t_base)
    )
    return out


def _gpu_elementwise(rows: int) -> list[dict[str, Any]]:
    import cupyx.scipy.sparse as csp

    import ust.api.algebra as ops
    from ust.convert import asarray

    X, Y = random_rows(rows, 8, seed=0), random_rows(rows, 8, seed=1)
    gx, gy = csp.csr_matrix(X), csp.csr_matrix(Y)
    tx, ty = asarray(X).to("cuda"), asarray(Y).to("cuda")
    dx, dy = asarray(X, "DCSR").to("cuda"), asarray(Y, "DCSR").to("cuda")
    case = f"add, random {rows:,}^2, 8/row"
    t_add = time_gpu(lambda: gx + gy, repeat=10)
    t_mul = time_gpu(lambda: gx.multiply(gy), repeat=10)
    t_sum = time_gpu(lambda: gx.sum(axis=1), repeat=10)
    t_max = time_gpu(lambda: gx.max(axis=0), repeat=10)
    return [
        _row(case, f"add ({ops.plan('add', tx, ty).route})", time_gpu(lambda: ops.add(tx, ty), repeat=10),
             "CuPy X + Y (csrgeam2)", t_add, "<= 1.2"),
        _row(case, "add (array-program)", time_gpu(lambda: ops.add(tx, ty, route="array-program"), repeat=10),
             "CuPy X + Y (csrgeam2)", t_add),
        _row(case + " as DCSR", "add (array-program)", time_gpu(lambda: ops.add(dx, dy), repeat=10),
             "CuPy X + Y (CSR)", t_add),
        _row(f"multiply, random {rows:,}^2", f"multiply ({ops.plan('multiply', tx, ty).route})",
             time_gpu(lambda: ops.multiply(tx, ty), repeat=10), "CuPy X.multiply(Y)", t_mul),
        _row(f"sum(axis=1), {rows:,}^2", f"sum ({ops.plan('sum', tx).route})",
             time_gpu(lambda: ops.sum(tx, 1), repeat=10), "CuPy X.sum(1)", t_sum),
        _row(f"max(axis=0), {rows:,}^2", "max (array-program)", time_gpu(lambda: ops.max(tx, 0), repeat=10),
             "CuPy X.max(0)", t_max),
    ]  # fmt: skip


def gpu_cases(n: int, rows: int, sddmm_rows: int) -> list[dict[str, Any]]:
    import cupy as cp

    out = _gpu_spgemm(n)
    cp.get_default_memory_pool().free_all_blocks()
    for dtype in (np.float32, np.float64):
        out += _gpu_sddmm(sddmm_rows, dtype)
        cp.get_default_memory_pool().free_all_blocks()
    return out + _gpu_elementwise(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda", "gpu"), default="cpu")
    p.add_argument("--n", type=int, default=None, help="Poisson grid n for SpGEMM (default 60 CPU, 100 GPU)")
    p.add_argument("--rows", type=int, default=None, help="rows of the random add matrices")
    p.add_argument("--sddmm-rows", type=int, default=None, help="rows (= columns) of the SDDMM pattern")
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("benchmarks", "results"))
    p.add_argument("--append-results", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    gpu = args.device in ("cuda", "gpu")
    if gpu:
        rows = gpu_cases(args.n or 100, args.rows or 1_000_000, args.sddmm_rows or 1_000_000)
    else:
        rows = cpu_cases(args.n or 60, args.rows or 200_000, args.sddmm_rows or 100_000)
    table = markdown(rows, COLUMNS)
    print(table)
    from benchmarks.common import machine

    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "python -m benchmarks.bench_algebra "
        + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_algebra.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "rows": rows}, f, indent=1, default=str)
    with open(os.path.join(args.out, "bench_algebra.md"), "w", encoding="utf-8") as f:
        f.write(table)
    if args.append_results:
        title = "## Sparse algebra (GPU)" if gpu else "## Sparse algebra (CPU)"
        with open(os.path.join("benchmarks", "RESULTS.md"), "a", encoding="utf-8") as f:
            f.write(f"\n{title}\n\n{meta['date']}, {meta['machine']}, `{meta['command'].strip()}`\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
