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


def _check_common(args: argparse.Namespace) -> Any:
    """The arguments both commands share, before any work; the target Format (or None)."""
    from ust.cli import checks
    from ust.formats.library import resolve

    checks.input_file(args.matrix)
    checks.execution(args.execution)
    checks.dtype(args.dtype)
    checks.int_range(args.k, "--k", 1, why="the columns of the dense operand; 1 is a vector")
    return resolve(args.format) if args.format else None


def _load(args: argparse.Namespace, fmt: Any) -> Any:
    from ust import io

    t = io.read(args.matrix)
    if args.dtype:
        t = t.astype(args.dtype)
    if fmt is not None:
        from ust.cli.progress import progress

        with progress(f"converting to {args.format}"):
            t = t.convert(fmt)
    return t


def configure_spmv(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--k", type=int, default=1, help="columns of the dense operand (1: a vector)")
    p.add_argument("--repeat", type=int, default=10, help="executions to time (median printed)")
    p.add_argument("--autotune", action="store_true", help="time every candidate route first")


def run_spmv(args: argparse.Namespace) -> int:
    import ust
    from ust.cli import checks
    from ust.tensor.limits import check_dense

    fmt = _check_common(args)
    checks.int_range(args.repeat, "--repeat", 1)
    t = _load(args, fmt)
    if t.ndim != 2:
        raise ust.ShapeError(f"ust spmv multiplies a matrix; {args.matrix} holds a {t.ndim}-D tensor")
    shape = (t.shape[1],) if args.k == 1 else (t.shape[1], args.k)
    check_dense(np, shape, t.dtype, f"--k {args.k}: the dense operand of shape {shape}", "use a smaller --k")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(t.dtype)
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
    for _ in range(args.repeat):
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
    from ust.cli.solve import METHODS, PRECONDS

    p.add_argument(
        "--method",
        choices=METHODS,
        help="explain solve: direct (the default) or the Krylov method an iterative solve would run",
    )
    p.add_argument(
        "--precond", choices=PRECONDS, help="explain solve: the preconditioner of an iterative --method"
    )


#: The explain operations that take ``--execution`` (a conversion and a transpose run where the tensor is).
_PLACED = ("matmul", "solve", "sum", "add", "multiply")


def run_explain(args: argparse.Namespace) -> int:
    """Explains on any machine: ``--execution cuda`` without a GPU says what would run there
    and what is missing (``ust.explain``); nothing is computed, so the dense operand of matmul
    is a broadcast view of one value whatever ``--k``."""
    import ust
    from ust.formats.library import resolve
    from ust.runtime.errors import InvalidValueError

    fmt = _check_common(args)
    if args.op == "convert" and not args.to:
        raise InvalidValueError("explain convert needs --to FORMAT")
    if args.to and args.op != "convert":
        raise InvalidValueError(f"--to applies to explain convert, not to explain {args.op}")
    if args.k != 1 and args.op != "matmul":
        raise InvalidValueError(f"--k applies to explain matmul, not to explain {args.op}")
    if args.execution and args.op not in _PLACED:
        raise InvalidValueError(
            f"--execution applies to explain {', '.join(_PLACED)}; {args.op} runs where the tensor is"
        )
    method = getattr(args, "method", None)
    precond = getattr(args, "precond", None)
    for flag, value in (("--method", method), ("--precond", precond)):
        if value is not None and args.op != "solve":
            raise InvalidValueError(f"{flag} applies to explain solve, not to explain {args.op}")
    if precond not in (None, "none") and method in (None, "direct"):
        raise InvalidValueError(
            f"--precond {precond} needs an iterative --method (cg, minres, gmres or bicgstab); "
            "the direct solver takes no preconditioner"
        )
    target = resolve(args.to) if args.to else None
    t = _load(args, fmt)
    n = t.shape[-1]
    where = {"execution": args.execution} if args.execution else {}
    if args.op == "matmul":
        b = np.broadcast_to(np.ones(1, dtype=t.dtype), (n,) if args.k == 1 else (n, args.k))
        print(ust.explain("matmul", t, b, **where))
    elif args.op == "convert":
        print(ust.explain("convert", t, target))
    elif args.op == "solve":
        iterative: dict[str, Any] = {}
        if method not in (None, "direct"):  # explain_iterative: method, preconditioner, SpMV route
            iterative = {"method": method, "M": None if precond in (None, "none") else precond}
        print(ust.explain("solve", t, np.ones(t.shape[0], dtype=t.dtype), **where, **iterative))
    elif args.op in ("add", "multiply"):
        print(ust.explain(args.op, t, t, **where))
    elif args.op == "sum":
        print(ust.explain(args.op, t, **where))
    else:
        print(ust.explain(args.op, t))
    return 0
