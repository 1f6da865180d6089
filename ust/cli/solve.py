"""``ust solve A.mtx [--rhs B.mtx] [--format F] [--execution cpu|cuda] [--method M --precond P]``: one solve, phase by phase.

Prints the time of each phase (read, convert, setup, analysis, factorisation, solve), the
relative residual and the backward error.  Without ``--rhs`` the right-hand side is
``A @ ones``, so the error of ``x`` against the exact solution is printed too.

``--method cg|minres|gmres|bicgstab`` solves by that Krylov method instead of the direct
solver (:class:`ust.linalg.IterativeSolver`, ``--precond`` one of its preconditioners), on the
same matrix, right-hand side and execution space, and adds one summary line: method,
preconditioner, SpMV route, iterations, final relative residual, time, converged or not.
The tolerances are the library's (SciPy's): ``rtol=1e-5``, ``atol=0``.  A solve that does not
converge prints everything it measured, then fails with one line naming the residual it
reached (exit 1).  ``ust solve`` writes no file: x is never saved, converged or not.

``configure`` adds the arguments to an argparse parser; ``solve_command(args)`` runs (the
``ust`` CLI registers both).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from typing import Any

import numpy as np

from ust.runtime.errors import InvalidValueError, ShapeError, SolverAccuracyError, UnsupportedError

__all__ = ["METHODS", "PRECONDS", "configure", "solve_command"]

#: ``--method``: the direct solver (the default) or a Krylov method of ``ust.linalg``.
METHODS: tuple[str, ...] = ("direct", "cg", "minres", "gmres", "bicgstab")
#: ``--precond``: none (the default) or a preconditioner name of ``ust.api.precond``.
PRECONDS: tuple[str, ...] = ("none", "jacobi", "block_jacobi", "ilu0", "ic0", "chebyshev", "amg")

#: The options that only an iterative ``--method`` takes (dest -> flag).
_ITERATIVE_ONLY = {
    "rtol": "--rtol",
    "atol": "--atol",
    "maxiter": "--maxiter",
    "restart": "--restart",
    "check_every": "--check-every",
}


def configure(p: argparse.ArgumentParser) -> None:
    from ust.api.linalg import DirectSolverOptions
    from ust.runtime.options import cli_help, describe

    declared = {entry.name: entry for entry in describe(DirectSolverOptions)}

    def solver_option(name: str) -> dict[str, Any]:
        """argparse's default, choices and help for a solver option, as the dataclass declares them."""
        entry = declared[name]
        return {
            "default": entry.default,
            "choices": entry.choices,
            "help": cli_help(DirectSolverOptions, name),
        }

    p.add_argument("matrix", help="the matrix A, a Matrix Market file (.mtx, .mtx.gz)")
    p.add_argument(
        "--rhs", help="right-hand side(s) B: .mtx or .npy (default: A @ ones, whose solution is ones)"
    )
    p.add_argument("--format", help="store A in this ust format first (e.g. CSR, 'BSR[2,2]', or DSL text)")
    p.add_argument(
        "--execution",
        help="cpu, cuda or cuda:N (default: where the operands are, i.e. the CPU for a .mtx file)",
    )
    p.add_argument("--matrix-type", **solver_option("matrix_type"))
    p.add_argument("--matrix-view", **solver_option("matrix_view"))
    p.add_argument("--reordering", **solver_option("reordering"))
    p.add_argument("--repeat", type=int, default=1, help="solves to time (the median is printed)")
    p.add_argument(
        "--no-check",
        action="store_true",
        help="accept the solution whatever its backward error (the solver option check=False)",
    )
    iterative = p.add_argument_group(
        "iterative solve",
        "a --method other than direct solves by ust.linalg.IterativeSolver; converged means\n"
        "||b - A x|| <= max(rtol ||b||, atol) for the true residual.  A solve that does not\n"
        "converge prints what it measured and exits 1 naming the residual it reached (ust solve\n"
        "writes no file, so no unconverged x is ever saved).",
    )
    iterative.add_argument(
        "--method",
        default="direct",
        choices=METHODS,
        help="direct (cuDSS / SuperLU, the default) or a Krylov method",
    )
    iterative.add_argument(
        "--precond",
        default="none",
        choices=PRECONDS,
        help="preconditioner of an iterative --method (default none; amg builds its hierarchy with "
        'ust\'s own setup, or with pyamg where it is installed: pip install "ust[amg]")',
    )
    iterative.add_argument(
        "--rtol", type=float, help="relative tolerance, >= 0 (default 1e-5, SciPy's and ust.linalg's)"
    )
    iterative.add_argument("--atol", type=float, help="absolute tolerance, >= 0 (default 0)")
    iterative.add_argument(
        "--maxiter", type=int, help="iteration limit, >= 1 (default 10 n; gmres: restart cycles)"
    )
    iterative.add_argument(
        "--restart", type=int, help="gmres only: the Krylov dimension between restarts, >= 1 (default 20)"
    )
    iterative.add_argument(
        "--check-every",
        type=int,
        help="iterations between convergence tests, >= 1 (default 1 on the CPU, 8 on a GPU)",
    )


def _read_rhs(path: str, n: int) -> np.ndarray:
    """B from a .npy or Matrix Market file; one column becomes a vector.  Its shape is checked
    against A's n here, so a mismatch is ust's ShapeError, never NumPy's reshape error."""
    if path.endswith(".npy"):
        try:
            b = np.load(path, allow_pickle=False)
        except ValueError as exc:  # not a .npy file, or one holding Python objects
            raise InvalidValueError(f"--rhs {path}: not a NumPy array file ({exc})") from None
    else:
        from ust.io import mmread  # ust's own reader: a malformed file is a FileFormatError, never a crash

        b = np.asarray(mmread(path).todense())
    if b.ndim == 2 and b.shape[1] == 1:
        b = b[:, 0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ShapeError(
            f"--rhs {path} has shape {b.shape}; for a {n} x {n} matrix it must be ({n},) or ({n}, k)"
        )
    return b


def _in_format(a: Any, fmt: Any) -> Any:
    try:
        from ust.convert.scipy import from_scipy
    except ImportError:
        raise UnsupportedError(
            "--format needs ust's tensor conversions (ust.convert), which are not installed"
        ) from None
    return from_scipy(a).convert(fmt)


def _row(label: str, seconds: float) -> None:
    print(f"{label:<44}{1e3 * seconds:12.3f} ms")


def _check_method(args: argparse.Namespace) -> None:
    """The --method / --precond options and the tolerances: which apply, and their values."""
    from ust.api.linalg import DirectSolverOptions
    from ust.cli import checks

    method = getattr(args, "method", "direct")
    given = [flag for dest, flag in _ITERATIVE_ONLY.items() if getattr(args, dest, None) is not None]
    if method == "direct":
        if getattr(args, "precond", "none") != "none":
            raise InvalidValueError(
                f"--precond {args.precond} needs an iterative --method (cg, minres, gmres or bicgstab); "
                "the direct solver takes no preconditioner"
            )
        if given:
            raise InvalidValueError(
                f"{given[0]} applies to an iterative --method (cg, minres, gmres or bicgstab), not to direct"
            )
        return
    defaults = DirectSolverOptions()
    for dest, flag in (
        ("matrix_type", "--matrix-type"),
        ("matrix_view", "--matrix-view"),
        ("reordering", "--reordering"),
    ):
        if getattr(args, dest) != getattr(defaults, dest):
            raise InvalidValueError(f"{flag} applies to --method direct, not to {method}")
    if args.no_check:
        raise InvalidValueError(f"--no-check applies to --method direct, not to {method}")
    if args.restart is not None and method != "gmres":
        raise InvalidValueError(f"--restart applies to --method gmres, not to {method}")
    for dest in ("rtol", "atol"):
        value = getattr(args, dest)
        if value is not None and not (value >= 0 and math.isfinite(value)):  # NaN fails too
            raise InvalidValueError(f"--{dest} must be a finite number >= 0, not {value}")
    for dest in ("maxiter", "restart", "check_every"):
        value = getattr(args, dest)
        if value is not None:
            checks.int_range(value, _ITERATIVE_ONLY[dest], 1)


def solve_command(args: argparse.Namespace) -> int:
    import scipy.sparse as sp

    from ust.api.linalg import DirectSolver, DirectSolverOptions, backward_error
    from ust.cli import checks
    from ust.io import mmread

    # every argument before any work: files, numbers, the execution space, the format text
    checks.input_file(args.matrix)
    if args.rhs:
        checks.input_file(args.rhs)
    checks.int_range(args.repeat, "--repeat", 1)
    checks.execution(args.execution)
    _check_method(args)
    fmt = None
    if args.format:
        from ust.formats.library import resolve

        fmt = resolve(args.format)
    t0 = time.perf_counter()
    a = sp.csr_matrix(mmread(args.matrix).to_scipy())
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"{args.matrix} is {a.shape[0]} x {a.shape[1]}; ust solve needs a square matrix")
    n = a.shape[0]
    _row(f"read {a.shape[0]} x {a.shape[1]}, nnz {a.nnz}, {a.dtype}", time.perf_counter() - t0)
    exact = None
    if args.rhs:
        b = _read_rhs(args.rhs, n)
    else:
        exact = np.ones(n, dtype=np.result_type(a.dtype, np.float64))
        b = a @ exact
    operand: Any = a
    if fmt is not None:
        t0 = time.perf_counter()
        operand = _in_format(a, fmt)
        _row(f"store A as {args.format}", time.perf_counter() - t0)
    if getattr(args, "method", "direct") != "direct":
        return _iterative(args, a, operand, b, exact)
    options = DirectSolverOptions(
        matrix_type=args.matrix_type,
        matrix_view=args.matrix_view,
        reordering=args.reordering,
        check=not args.no_check,
    )
    t0 = time.perf_counter()
    with DirectSolver(operand, b, options=options, execution=args.execution) as s:
        _row(f"setup on {s.space} ({s.backend})", time.perf_counter() - t0)
        from ust.cli.progress import progress

        with progress("analysis"):
            plan = s.plan()
        _row(f"analysis ({plan.ordering})", plan.seconds)
        with progress("factorization"):
            f = s.factorize()
        fill = f"fill {f.fill:.2f}x" if f.fill else "fill n/a"
        small = f", {f.small_pivots} small pivot(s)" if f.small_pivots else ""
        _row(f"factorization ({fill}{small})", f.seconds)
        times = []
        for _ in range(args.repeat):
            x = s.solve()
            times.append(s.timings["solve"])
        _row(f"solve (median of {len(times)})", float(np.median(times)))
        be = s.backward_error
    x = np.asarray(x)
    b2, x2 = np.asarray(b).reshape(n, -1), x.reshape(n, -1)
    res = float(np.linalg.norm(b2 - a @ x2) / max(np.linalg.norm(b2), np.finfo(np.float64).tiny))
    if be is None:
        be = backward_error(a, x2, b2)
    print(f"relative residual ||b - Ax|| / ||b|| = {res:.3e}; backward error = {be:.3e}")
    if exact is not None:
        err = float(np.abs(x.reshape(-1) - exact).max()) if n else 0.0  # a 0 x 0 system: x is empty
        print(f"max |x - x_exact| = {err:.3e}")
    return 0


def _iterative(args: argparse.Namespace, a: Any, operand: Any, b: np.ndarray, exact: Any) -> int:
    """The solve by ``ust.linalg.IterativeSolver``: planned once, then each column of B solved."""
    from ust.api.iterative import IterativeSolver, IterativeSolverWarning
    from ust.api.linalg import backward_error
    from ust.cli.progress import progress

    n = a.shape[0]
    columns = np.asarray(b).reshape(n, -1)
    if columns.shape[1] == 0:
        raise ShapeError(f"--rhs {args.rhs} has no columns; give at least one right-hand side")
    dtype = np.result_type(a.dtype, columns.dtype)
    if dtype.kind in "fc" and np.dtype(operand.dtype) != dtype:
        operand = operand.astype(dtype)  # a real A with a complex B: the system is complex
    options: dict[str, Any] = {}
    if args.restart is not None:
        options["restart"] = args.restart
    if args.check_every is not None:
        options["check_every"] = args.check_every
    tolerances = {"rtol": args.rtol, "atol": args.atol}
    t0 = time.perf_counter()
    solver = IterativeSolver(
        operand,
        method=args.method,
        M=None if args.precond == "none" else args.precond,
        maxiter=args.maxiter,
        options=options,
        execution=args.execution,
        **{name: v for name, v in tolerances.items() if v is not None},
    )
    results: list[Any] = []
    times: list[float] = []
    xs: list[np.ndarray] = []
    with solver, warnings.catch_warnings():
        warnings.simplefilter("ignore", IterativeSolverWarning)  # said below, in one line
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's 0/0 of a breakdown: said below too
        with progress("setup"):
            solver.plan()
        _row(f"setup on {solver.space} (SpMV, preconditioner)", time.perf_counter() - t0)
        with progress(f"{args.method} solve"):
            for j in range(columns.shape[1]):
                for _ in range(args.repeat):
                    xj = solver.solve(columns[:, j])
                    assert solver.result is not None
                    times.append(solver.result.seconds)
                xs.append(np.asarray(xj).reshape(-1))
                results.append(solver.result)
        k = columns.shape[1]
        _row(
            f"solve (median of {len(times)}" + (f", {k} columns)" if k > 1 else ")"), float(np.median(times))
        )
    x2 = np.stack(xs, axis=1)
    res = float(np.linalg.norm(columns - a @ x2) / max(np.linalg.norm(columns), np.finfo(np.float64).tiny))
    be = backward_error(a, x2, columns)
    print(f"relative residual ||b - Ax|| / ||b|| = {res:.3e}; backward error = {be:.3e}")
    if exact is not None:
        err = float(np.abs(x2.reshape(-1) - exact).max()) if n else 0.0  # a 0 x 0 system: x is empty
        print(f"max |x - x_exact| = {err:.3e}")
    print(f"preconditioner: {results[0].preconditioner}")
    for j, r in enumerate(results):
        state = "converged" if r.converged else "broke down" if r.info < 0 else "not converged"
        print(
            (f"column {j}: " if k > 1 else "")
            + f"{r.method}, preconditioner {args.precond}, SpMV route {r.spmv_route}: "
            f"{r.iterations} iterations, relative residual {r.residual:.3e}, {1e3 * r.seconds:.3f} ms, {state}"
        )
    failed = [(j, r) for j, r in enumerate(results) if not r.converged]
    if failed:
        j, r = max(failed, key=lambda jr: jr[1].residual)
        if r.info < 0:
            why, hint = f"broke down after {r.iterations} iterations ({r.breakdown})", "try another --method"
        else:
            why, hint = f"did not converge in {r.iterations} iterations", "try a larger --maxiter"
        raise SolverAccuracyError(
            f"{r.method}{f' (column {j})' if k > 1 else ''} {why}: relative residual {r.residual:.3e} "
            f"reached, asked for rtol={solver.rtol:g}, atol={solver.atol:g} ({hint} or a --precond)",
            backward_error=be,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ust.cli.solve A.mtx ...`` until the ``ust`` CLI registers the subcommand."""
    p = argparse.ArgumentParser(prog="ust solve", description=__doc__.splitlines()[0] if __doc__ else None)
    configure(p)
    return solve_command(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
