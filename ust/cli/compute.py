"""``ust spmv`` and ``ust explain``: run or explain an operation on a matrix file.

Each is a ``configure_*`` / ``run_*`` pair registered in :mod:`ust.cli`'s table; errors are
ust's own and become one-line messages there.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

__all__ = ["configure_explain", "configure_spmv", "run_explain", "run_spmv"]

SPMV_HELP = (
    "multiply a matrix file by a vector (or k columns) through the planner; print route, time and error"
)
SPMV_EXAMPLE = "ust spmv A.mtx --format DIA --execution cuda --k 8"
EXPLAIN_HELP = "say how ust would run an operation on a matrix file (route, reason, conversions, transfers)"
EXPLAIN_EXAMPLE = 'ust explain matmul A.mtx --format "BSR[2,2]"'


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrix", help="a Matrix Market (.mtx) or Binsparse (.npz, .h5) file")
    p.add_argument("--format", help="store A in this format first: a standard name or DSL text")
    p.add_argument("--execution", help="cpu, cuda or cuda:N (default: where the operands are, the CPU)")
    p.add_argument("--dtype", help="value dtype (float32, float64, complex128, ...)")


def _load(args: argparse.Namespace) -> Any:
    from ust import io

    t = io.read(args.matrix)
    if args.dtype:
        t = t.astype(args.dtype)
    if args.format:
        from ust.cli.progress import progress

        with progress(f"converting to {args.format}"):
            t = t.convert(args.format)
    return t


def configure_spmv(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--k", type=int, default=1, help="columns of the dense operand (1: a vector)")
    p.add_argument("--repeat", type=int, default=10, help="executions to time (median printed)")
    p.add_argument("--autotune", action="store_true", help="time every candidate route first")


def run_spmv(args: argparse.Namespace) -> int:
    import ust

    t = _load(args)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(t.shape[1] if args.k == 1 else (t.shape[1], args.k)).astype(t.dtype)
    mm = ust.Matmul(t, x, execution=args.execution)
    print(mm.explain())
    t0 = time.perf_counter()
    mm.plan()
    print(f"plan: {1e3 * (time.perf_counter() - t0):.2f} ms")
    if args.autotune:
        for name, secs in sorted(mm.autotune().items(), key=lambda kv: kv[1]):
            print(f"  autotune {name:<28} {1e3 * secs:.4f} ms")
    times = []
    y: Any = None
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        y = mm.execute()
        if type(y).__module__.startswith("cupy"):  # wait for the kernel so the time is real
            from ust.runtime.xp import import_cupy

            import_cupy().cuda.get_current_stream().synchronize()
        times.append(time.perf_counter() - t0)
    ref = t.to("cpu").to_scipy() @ x
    err = float(
        np.abs(np.asarray(y.get() if hasattr(y, "get") else y) - ref).max() / max(np.abs(ref).max(), 1e-300)
    )
    print(
        f"execute: median {1e3 * float(np.median(times)):.4f} ms over {len(times)} runs; max relative error vs SciPy {err:.2e}"
    )
    mm.free()
    return 0


def configure_explain(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "op",
        choices=["matmul", "convert", "solve", "transpose", "sum", "add", "multiply"],
        help="the operation",
    )
    _common(p)
    p.add_argument("--to", help="target format (for convert)")
    p.add_argument("--k", type=int, default=1, help="columns of the dense operand of matmul")


def run_explain(args: argparse.Namespace) -> int:
    import ust

    t = _load(args)
    n = t.shape[-1]
    if args.op == "matmul":
        b = np.ones(n if args.k == 1 else (n, args.k), dtype=t.dtype)
        print(ust.explain("matmul", t, b, execution=args.execution))
    elif args.op == "convert":
        if not args.to:
            raise ust.InvalidValueError("explain convert needs --to FORMAT")
        print(ust.explain("convert", t, args.to))
    elif args.op == "solve":
        print(ust.explain("solve", t, np.ones(t.shape[0], dtype=t.dtype), execution=args.execution))
    elif args.op in ("add", "multiply"):
        print(ust.explain(args.op, t, t))
    else:
        print(ust.explain(args.op, t))
    return 0
