"""Sparse direct solve: ust (cuDSS) end to end and per phase, side by side with its baselines.

    python -m benchmarks.bench_solve --sizes 30,60,100 [--advection 700] [--timeout 120]

Matrices: 3-D 7-point Poisson ``m^3`` for each size, and a 2-D advection-diffusion matrix
(unsymmetric values) on an ``m x m`` grid.  For each, in this process after one small warm-up
solve (CUDA context and libraries loaded):

* ust end to end: ``ust.linalg.solve(A, b, execution="cuda")`` from SciPy operands to the NumPy
  result (check included), then the phases of a ``DirectSolver``: analysis, factorisation,
  solve, a re-solve with a new right-hand side, refactorisation with new values, and the
  analysis of a second process that loads the saved plan (vs the same process planning afresh).

Baselines, each in its own process (warmed up the same way) with a timeout, reported as
``> T s`` when they run out of it (and not started again on a larger matrix of the same kind): ``scipy.sparse.linalg.spsolve`` (SuperLU),
``cupyx.scipy.sparse.linalg.spsolve`` and nvmath-python's ``direct_solver`` (as shipped, and
with cuDSS's threading layer).  Writes ``bench_solve.json`` and ``bench_solve.md`` to
``--out`` (default ``$OUT`` or ``benchmarks/results``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

GOALS = {
    "e2e_100": 5.0,  # s, 100^3 end to end (nvmath-python 1.0 as shipped: 13.4 s)
    "resolve": 0.010,  # s, a re-solve with a new right-hand side
    "refactorize": 1.0,  # s, refactorisation with new values
    "loaded_plan_ratio": 0.5,  # analysis with a loaded plan / analysis afresh, second process
}


# ----------------------------------------------------------------------------- matrices


def poisson3d(m: int) -> sp.csr_matrix:
    """The shared 7-point Poisson matrix, as the matrix class the baselines take."""
    from benchmarks.common import poisson3d as make

    return sp.csr_matrix(make(m))


def advection2d(m: int, peclet: float = 0.6) -> sp.csr_matrix:
    """Upwind 2-D advection-diffusion: symmetric pattern, unsymmetric values."""
    t = sp.diags([-1.0 - peclet, 2.0, -1.0 + peclet], [-1, 0, 1], shape=(m, m), format="csr")
    s = sp.diags([-1.0 - 0.5 * peclet, 2.0, -1.0 + 0.5 * peclet], [-1, 0, 1], shape=(m, m), format="csr")
    i = sp.identity(m, format="csr")
    return sp.csr_matrix(sp.kron(i, t) + sp.kron(s, i))


def make(spec: str) -> tuple[sp.csr_matrix, str]:
    """``poisson3d:M`` or ``advection2d:M`` -> (matrix, ust matrix_type)."""
    kind, m = spec.split(":")
    return (poisson3d(int(m)), "spd") if kind == "poisson3d" else (advection2d(int(m)), "general")


def rhs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def rel_residual(a: sp.csr_matrix, x: Any, b: np.ndarray) -> float:
    x = np.asarray(x).reshape(b.shape)
    return float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))


# ----------------------------------------------------------------------------- baselines (workers)


def _warm_scipy() -> None:
    import scipy.sparse.linalg as sla

    sla.spsolve(poisson3d(4).tocsc(), np.ones(64))


def _run_scipy(a: sp.csr_matrix, b: np.ndarray, mtype: str) -> Any:
    import scipy.sparse.linalg as sla

    return sla.spsolve(a.tocsc(), b)


def _warm_cupyx() -> None:
    _run_cupyx(poisson3d(4), np.ones(64), "general")


def _run_cupyx(a: sp.csr_matrix, b: np.ndarray, mtype: str) -> Any:
    import cupy
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as csla

    return cupy.asnumpy(csla.spsolve(csp.csr_matrix(a), cupy.asarray(b)))


def _nvmath(threading: bool) -> Callable[[sp.csr_matrix, np.ndarray, str], Any]:
    def run(a: sp.csr_matrix, b: np.ndarray, mtype: str) -> Any:
        from nvmath.sparse.advanced import DirectSolverOptions, direct_solver

        opts = {}
        if threading:
            from ust.backends.cuda.cudss import get_library

            opts["multithreading_lib"] = get_library().threading_layer
        return direct_solver(a, b, options=DirectSolverOptions(**opts))

    return run


BASELINES: dict[str, tuple[Callable[[], None], Callable[[sp.csr_matrix, np.ndarray, str], Any]]] = {
    "scipy.spsolve": (_warm_scipy, _run_scipy),
    "cupyx.spsolve": (_warm_cupyx, _run_cupyx),
    "nvmath": (lambda: _nvmath(False)(poisson3d(4), np.ones(64), "general"), _nvmath(False)),
    "nvmath+threads": (lambda: _nvmath(True)(poisson3d(4), np.ones(64), "general"), _nvmath(True)),
}


def worker(name: str, spec: str) -> None:
    """Child process: warm up, build the matrix, time one end-to-end solve, print a JSON line."""
    warm, run = BASELINES[name]
    warm()
    a, mtype = make(spec)
    b = rhs(a.shape[0])
    t0 = time.perf_counter()
    x = run(a, b, mtype)
    secs = time.perf_counter() - t0
    print(json.dumps({"seconds": secs, "residual": rel_residual(a, x, b)}))


def baseline(name: str, spec: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_solve", "--worker", name, "--matrix", spec]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "text": f"> {timeout:g} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        why = (out.stderr.strip().splitlines() or ["failed"])[-1][:120]
        return {"seconds": None, "text": f"error: {why}"}
    res = json.loads(lines[-1])
    return {**res, "text": f"{res['seconds']:.3f} s"}


# ----------------------------------------------------------------------------- ust


def _loaded_plan_child(spec: str, path: str, mtype: str, execution: str = "cuda") -> None:
    """Second process: analysis with the saved plan, then afresh, same process and matrix."""
    import ust.linalg as L

    L.solve(poisson3d(4), np.ones(64), execution=execution)
    a, _ = make(spec)
    b = rhs(a.shape[0])
    opts = {"matrix_type": mtype}
    with L.DirectSolver.load_plan(path, a, b, options=opts, execution=execution) as s:
        loaded = s.plan()
        fl = s.factorize()
    with L.DirectSolver(a, b, options=opts, execution=execution) as s:
        fresh = s.plan()
        ff = s.factorize()
    print(
        json.dumps(
            {
                "loaded": loaded.seconds,
                "fresh": fresh.seconds,
                "used_saved": loaded.from_saved_plan,
                "lu_nnz_loaded": fl.lu_nnz,
                "lu_nnz_fresh": ff.lu_nnz,
            }
        )
    )


def bench_ust(
    spec: str, out_dir: str, timeout: float, repeat: int, execution: str = "cuda"
) -> dict[str, Any]:
    """One matrix through ust on ``execution`` ("cuda": cuDSS; "cpu": SuperLU, for the suite's CPU run)."""
    import ust.linalg as L

    a, mtype = make(spec)
    n = a.shape[0]
    b = rhs(n)
    row: dict[str, Any] = {"matrix": spec, "n": n, "nnz": int(a.nnz), "matrix_type": mtype}
    t0 = time.perf_counter()
    x = L.solve(a, b, execution=execution, matrix_type=mtype)
    row["e2e"] = time.perf_counter() - t0
    row["e2e_residual"] = rel_residual(a, x, b)
    t0 = time.perf_counter()
    x = L.solve(a, b, execution=execution)  # general, as nvmath-python by default
    row["e2e_general"] = time.perf_counter() - t0
    with L.DirectSolver(a, b, options={"matrix_type": mtype}, execution=execution) as s:
        row["analysis"] = s.plan().seconds
        f = s.factorize()
        row["factorization"], row["fill"] = f.seconds, f.fill
        s.solve()
        row["solve"] = s.timings["solve"]
        new_bs = [rhs(n, seed=k + 1) for k in range(repeat)]  # made before the clock starts
        resolves = []
        for new_b in new_bs:
            t0 = time.perf_counter()
            s.reset_operands(b=new_b)
            s.solve()
            resolves.append(time.perf_counter() - t0)
        row["resolve"] = statistics.median(resolves)
        if execution == "cuda":  # the same with b already in GPU memory (no transfers either way)
            import cupy

            s_gpu = []
            for new_b in new_bs[: max(3, repeat // 2)]:
                gb = cupy.asarray(new_b)
                cupy.cuda.get_current_stream().synchronize()
                t0 = time.perf_counter()
                s.reset_operands(b=gb)
                s.solve()
                s_gpu.append(time.perf_counter() - t0)
            row["resolve_gpu"] = statistics.median(s_gpu)
        row["backward_error"] = s.backward_error
        a2 = sp.csr_matrix((a.data * 1.01, a.indices, a.indptr), shape=a.shape)
        t0 = time.perf_counter()
        s.reset_operands(a=a2)
        row["refactorize"] = s.refactorize().seconds
        row["reset_a"] = time.perf_counter() - t0 - row["refactorize"]
        path = os.path.join(out_dir, f"plan_{spec.replace(':', '_')}.json")
        s.save_plan(path)
    code = f"from benchmarks.bench_solve import _loaded_plan_child; _loaded_plan_child({spec!r}, {path!r}, {mtype!r}, {execution!r})"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        row["second_process"] = json.loads(line[-1]) if line else {"error": out.stderr.strip()[-300:]}
    except subprocess.TimeoutExpired:
        row["second_process"] = {"error": f"> {timeout:g} s"}
    return row


# ----------------------------------------------------------------------------- report


def _fmt(v: Any, unit: str = "s") -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{1e3 * v:.2f} ms"
    return f"{v:.3f} s"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| matrix | n | nnz | ust e2e | ust e2e (general) | analysis | factor | solve | re-solve | re-solve (GPU b) "
        "| refactor "
        "| 2nd-process analysis (loaded / fresh) | scipy.spsolve | cupyx.spsolve | nvmath | nvmath+threads |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        sp2 = r.get("second_process", {})
        loaded = (
            f"{sp2['loaded']:.3f} / {sp2['fresh']:.3f} s" if "loaded" in sp2 else sp2.get("error", "-")[:40]
        )
        base = r.get("baselines", {})
        cells = [
            r["matrix"],
            str(r["n"]),
            str(r["nnz"]),
            _fmt(r["e2e"]),
            _fmt(r["e2e_general"]),
            _fmt(r["analysis"]),
            _fmt(r["factorization"]),
            _fmt(r["solve"], "ms"),
            _fmt(r["resolve"], "ms"),
            _fmt(r.get("resolve_gpu"), "ms"),
            _fmt(r["refactorize"]),
            loaded,
            *[
                base.get(k, {}).get("text", "-")
                + (f" ({base[k]['seconds'] / r['e2e']:.1f}x)" if base.get(k, {}).get("seconds") else "")
                for k in BASELINES
            ],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        if r["matrix"] == "poisson3d:100":
            out.append(f"100^3 end to end {r['e2e']:.2f} s (goal < {GOALS['e2e_100']:g} s)")
        gpu_b = f"; {1e3 * r['resolve_gpu']:.2f} ms with b on the GPU" if r.get("resolve_gpu") else ""
        out.append(f"{r['matrix']}: re-solve {1e3 * r['resolve']:.2f} ms (goal < 10 ms){gpu_b}")
        out.append(f"{r['matrix']}: refactorisation {r['refactorize']:.3f} s (goal < 1 s)")
        sp2 = r.get("second_process", {})
        if "loaded" in sp2 and sp2["fresh"]:
            out.append(
                f"{r['matrix']}: loaded plan analysis {sp2['loaded']:.3f} s vs fresh {sp2['fresh']:.3f} s "
                f"= {sp2['loaded'] / sp2['fresh']:.2f} (goal <= 0.5); fill {sp2['lu_nnz_loaded']} vs {sp2['lu_nnz_fresh']}"
            )
    return out


def run(
    specs: list[str], out_dir: str, timeout: float, repeat: int, skip: set[str], execution: str = "cuda"
) -> list[dict[str, Any]]:
    """One row per matrix spec: ust's phases, then each baseline not in ``skip`` in its own process."""
    import ust.linalg as L

    L.solve(poisson3d(4), np.ones(64), execution=execution)  # warm-up: CUDA context, cuDSS, kernels
    timed_out: dict[str, str] = {}  # a baseline that ran out of time is not started on larger matrices
    rows = []
    for spec in specs:
        print(f"== {spec}", flush=True)
        row = bench_ust(spec, out_dir, timeout, repeat, execution)
        row["baselines"] = {}
        for name in BASELINES:
            if name in skip:
                continue
            if name in timed_out and spec.split(":")[0] == timed_out[name].split(":")[0]:
                row["baselines"][name] = {"seconds": None, "text": f"> {timeout:g} s (at {timed_out[name]})"}
                continue
            row["baselines"][name] = baseline(name, spec, timeout)
            if row["baselines"][name]["text"].startswith(">"):
                timed_out[name] = spec
            print(f"   {name}: {row['baselines'][name]['text']}", flush=True)
        print(f"   ust e2e {row['e2e']:.3f} s, analysis {row['analysis']:.3f} s", flush=True)
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], execution: str = "cuda") -> tuple[dict[str, Any], str]:
    """(meta, markdown text: the table, the goals and the solver library)."""
    meta: dict[str, Any] = {"host_threads": os.cpu_count(), "execution": execution}
    if execution != "cpu":
        from ust.backends.cuda.cudss import get_library

        lib = get_library()
        meta.update(cudss=lib.version_text, threading_layer=lib.threading_layer)
    text = table(rows) + "\n\n" + "\n".join(f"- {g}" for g in goals(rows)) + f"\n\n{meta}\n"
    return meta, text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_solve", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="30,60,100", help="3-D Poisson grid sizes m (n = m^3)")
    p.add_argument("--advection", type=int, default=700, help="2-D advection-diffusion grid size (0: skip)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per baseline process")
    p.add_argument("--repeat", type=int, default=10, help="re-solves timed (median)")
    p.add_argument("--skip", default="", help="comma-separated baselines to skip: " + ", ".join(BASELINES))
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("benchmarks", "results"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--matrix", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.matrix)
        return 0
    specs = [f"poisson3d:{int(s)}" for s in args.sizes.split(",") if s]
    if args.advection:
        specs.append(f"advection2d:{args.advection}")
    skip = {s for s in args.skip.split(",") if s}
    os.makedirs(args.out, exist_ok=True)
    rows = run(specs, args.out, args.timeout, args.repeat, skip)
    meta, text = report(rows)
    with open(os.path.join(args.out, "bench_solve.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    with open(os.path.join(args.out, "bench_solve.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
