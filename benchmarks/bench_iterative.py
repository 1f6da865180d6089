"""Krylov solves through ust.linalg, side by side with SciPy / CuPy / pyamg in the same run.

CPU (the CI machine's job): 3-D Poisson m^3 (default 60^3), rtol 1e-8: ust CG (CSR and DIA,
no preconditioner, Jacobi, AMG with the pyamg and the device setup) and GMRES against SciPy's
cg / gmres and pyamg's own solver.  GPU: Poisson 200^3 (8 M rows): ust CG + AMG (hierarchy
built on the GPU; pyamg's host setup with ``--pyamg-setup``) against cupyx's cg (plain and
Jacobi), and the time per CG + Jacobi iteration with the matrix in DIA vs CSR vs cupyx.  Every
row has the iterations, the final true relative residual and the seconds (setup included, the
setup alone, and the solve phase alone).

    python -m benchmarks.bench_iterative [--device cpu|cuda] [--m 60] [--write] [--pyamg-setup]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

import ust
from benchmarks.common import append_results, markdown, poisson3d

RTOL = 1e-8


#: What a run returns: x, iterations, solve seconds, info, setup seconds (None: not separate).
Run = Callable[[], tuple[Any, int, float, int, float | None]]


def _row(name: str, a: Any, b: Any, run: Run, xp: Any) -> dict[str, Any]:
    """Run ``run`` twice: the first call as a user meets it (kernels compiled, libraries loaded)
    and a second one; the totals include the setup ``run`` does (its preconditioner, its
    operator), which ust's and pyamg's rows also report alone."""
    totals = []
    for _ in range(2):
        t0 = time.perf_counter()
        x, iters, solve_s, info, setup_s = run()
        if xp is not np:
            xp.cuda.Device().synchronize()
        totals.append(time.perf_counter() - t0)
    first, total = totals
    r = b - a @ x
    rel = float(xp.linalg.norm(r) / xp.linalg.norm(b))
    return {
        "solver": name,
        "iterations": iters,
        "relative residual": rel,
        "converged": info == 0 and rel <= RTOL * 1.0001,
        "first call s": first,
        "total s": total,
        "setup s": setup_s,
        "solve s": solve_s,
        "per iteration ms": 1e3 * solve_s / max(iters, 1),
    }


def _ust(a: Any, b: Any, method: str, M: Any = None, setup: str | None = None, **kw: Any) -> Run:
    """A ust solve; ``setup`` picks the AMG setup ("device" / "pyamg"; None: the default)."""
    if setup is not None:
        kw["options"] = {"preconditioner": {"setup": setup}}

    def run() -> tuple[Any, int, float, int, float | None]:
        s = ust.linalg.IterativeSolver(a, method=method, M=M, rtol=RTOL, **kw)
        s.plan()
        x = s.solve(b)
        assert s.result is not None
        return x, s.result.iterations, s.result.seconds, s.result.info, s.result.setup_seconds

    return run


def _scipy_like(fn: Any, a: Any, b: Any, xp: Any, M: Any = None, **kw: Any) -> Run:
    def run() -> tuple[Any, int, float, int, float | None]:
        count = [0]

        def cb(_x: Any) -> None:
            count[0] += 1

        t0 = time.perf_counter()
        x, info = fn(a, b, rtol=RTOL, M=M, callback=cb, **kw)
        if xp is not np:
            xp.cuda.Device().synchronize()
        return x, count[0], time.perf_counter() - t0, info, None

    return run


def _jacobi_operator(a: Any, lo: Any) -> Any:
    d = 1.0 / a.diagonal()
    return lo(a.shape, matvec=lambda r: d * r, dtype=a.dtype)


def cpu(m: int) -> list[dict[str, Any]]:
    import scipy.sparse.linalg as spla

    a = poisson3d(m)
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    dia = ust.asarray(a, format="DIA")
    rows = [
        _row("scipy cg", a, b, _scipy_like(spla.cg, a, b, np), np),
        _row(
            "scipy cg + Jacobi",
            a,
            b,
            _scipy_like(spla.cg, a, b, np, M=_jacobi_operator(a, spla.LinearOperator)),
            np,
        ),
        _row("scipy gmres(20)", a, b, _scipy_like(spla.gmres, a, b, np, callback_type="pr_norm"), np),
        _row("ust cg (CSR)", a, b, _ust(a, b, "cg"), np),
        _row("ust cg (DIA)", a, b, _ust(dia, b, "cg"), np),
        _row("ust cg + jacobi (DIA)", a, b, _ust(dia, b, "cg", "jacobi"), np),
        _row("ust gmres(20) (CSR)", a, b, _ust(a, b, "gmres"), np),
        _row("ust cg + amg (device setup)", a, b, _ust(a, b, "cg", "amg", setup="device"), np),
    ]
    try:
        import pyamg
    except ImportError:
        return rows
    rows.append(_row("ust cg + amg (CSR)", a, b, _ust(a, b, "cg", "amg"), np))

    def pyamg_run() -> tuple[Any, int, float, int, float | None]:
        t0 = time.perf_counter()
        ml = pyamg.smoothed_aggregation_solver(sp.csr_matrix(a), max_coarse=500)
        setup_s = time.perf_counter() - t0
        res: list[float] = []
        t0 = time.perf_counter()
        x = ml.solve(b, tol=RTOL, accel="cg", residuals=res, maxiter=500)
        return x, len(res) - 1, time.perf_counter() - t0, 0, setup_s

    rows.append(_row("pyamg SA + cg (its own solve)", a, b, pyamg_run, np))
    return rows


def gpu(m: int, amg: bool = True, pyamg_setup: bool = False) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cspla

    a = poisson3d(m)
    ga = csp.csr_matrix(a)
    b = cp.asarray(np.random.default_rng(0).standard_normal(a.shape[0]))
    dia = ust.asarray(a, format="DIA", device="cuda")
    csr = ust.asarray(a, device="cuda")
    rows = [
        _row("cupyx cg", ga, b, _scipy_like(cspla.cg, ga, b, cp, maxiter=20000), cp),
        _row(
            "cupyx cg + Jacobi",
            ga,
            b,
            _scipy_like(cspla.cg, ga, b, cp, M=_jacobi_operator(ga, cspla.LinearOperator), maxiter=20000),
            cp,
        ),
        _row("ust cg + jacobi (CSR)", ga, b, _ust(csr, b, "cg", "jacobi", maxiter=20000), cp),
        _row("ust cg + jacobi (DIA)", ga, b, _ust(dia, b, "cg", "jacobi", maxiter=20000), cp),
    ]
    if amg:  # setup "auto" on a GPU: the hierarchy is built on the device
        rows += [
            _row("ust cg + amg (DIA)", ga, b, _ust(dia, b, "cg", "amg"), cp),
            _row("ust cg + amg (CSR)", ga, b, _ust(csr, b, "cg", "amg"), cp),
            _row("ust cg + amg (device setup)", ga, b, _ust(csr, b, "cg", "amg", setup="device"), cp),
        ]
    if amg and pyamg_setup:
        rows.append(_row("ust cg + amg (pyamg setup)", ga, b, _ust(csr, b, "cg", "amg", setup="pyamg"), cp))
    return rows


def mixed(m: int, device: str) -> list[dict[str, Any]]:
    """The direct solve of Poisson m^3 in float64 vs precision="mixed" (float32 factors, GMRES-IR):
    phases and the final backward error, each run twice (the second timed)."""
    a = poisson3d(m)
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    rows = []
    for precision in ("double", "mixed"):
        for _ in range(2):
            t0 = time.perf_counter()
            with ust.DirectSolver(a, b, options={"precision": precision}, execution=device) as s:
                s.execute()
                total = time.perf_counter() - t0
                tm = dict(s.timings)
                err = s.backward_error
        rows.append(
            {
                "solver": f"ust direct, precision={precision}",
                "end to end s": total,
                "analysis s": tm.get("analysis"),
                "factorization s": tm.get("factorization"),
                "solve s": tm.get("solve"),
                "factor + solve s": (tm.get("factorization") or 0.0) + (tm.get("solve") or 0.0),
                "backward error": err,
            }
        )
    base = rows[0]
    for r in rows:
        r["factor + solve vs double"] = base["factor + solve s"] / r["factor + solve s"]
        r["end to end vs double"] = base["end to end s"] / r["end to end s"]
    return rows


MIXED_COLUMNS = [
    "solver",
    "end to end s",
    "analysis s",
    "factorization s",
    "solve s",
    "factor + solve s",
    "backward error",
    "factor + solve vs double",
    "end to end vs double",
]

COLUMNS = [
    "solver",
    "iterations",
    "relative residual",
    "converged",
    "first call s",
    "total s",
    "setup s",
    "solve s",
    "per iteration ms",
]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--m", type=int, default=None, help="Poisson grid side (default 60 CPU, 200 GPU)")
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    p.add_argument(
        "--mixed", type=int, default=0, help="also the mixed-precision direct solve of m^3 (0: skip)"
    )
    p.add_argument("--only-mixed", action="store_true", help="only the mixed-precision comparison")
    p.add_argument("--skip-amg", action="store_true", help="GPU: leave out the AMG rows")
    p.add_argument(
        "--pyamg-setup",
        action="store_true",
        help="GPU: also an AMG row with pyamg's host setup (tens of seconds at 200^3)",
    )
    args = p.parse_args(argv)
    if args.mixed:
        table = markdown(mixed(args.mixed, args.device), MIXED_COLUMNS)
        print(f"Direct solve of Poisson 3-D {args.mixed}^3 on {args.device}: float64 vs precision='mixed'\n")
        print(table)
        if args.write:
            cmd = f"python -m benchmarks.bench_iterative --device {args.device} --mixed {args.mixed} --only-mixed"
            append_results(f"Mixed-precision direct solve ({args.device})", cmd, table)
        if args.only_mixed:
            return
    m = args.m or (200 if args.device == "cuda" else 60)
    rows = gpu(m, amg=not args.skip_amg, pyamg_setup=args.pyamg_setup) if args.device == "cuda" else cpu(m)
    base = next(r for r in rows if r["solver"].startswith(("scipy cg", "cupyx cg")))
    for r in rows:
        r["vs baseline"] = base["total s"] / r["total s"]
    table = markdown(rows, [*COLUMNS, "vs baseline"])
    print(f"Poisson 3-D {m}^3 ({m**3} rows), rtol {RTOL:g}; baseline: {base['solver']} (total time)\n")
    print(table)
    if args.write:
        cmd = f"python -m benchmarks.bench_iterative --device {args.device} --m {m}"
        append_results(f"Iterative solvers ({args.device})", cmd, table)


if __name__ == "__main__":
    main()
