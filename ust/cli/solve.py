"""``ust solve A.mtx [--rhs B.mtx] [--format F] [--execution cpu|cuda]``: one direct solve, phase by phase.

Prints the time of each phase (read, convert, setup, analysis, factorisation, solve), the
relative residual and the backward error.  Without ``--rhs`` the right-hand side is
``A @ ones``, so the error of ``x`` against the exact solution is printed too.  ``configure``
adds the arguments to an argparse parser; ``solve_command(args)`` runs (the ``ust`` CLI
registers both).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ust.runtime.errors import InvalidValueError, ShapeError, UnsupportedError

__all__ = ["configure", "solve_command"]


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


def main(argv: list[str] | None = None) -> int:
    """``python -m ust.cli.solve A.mtx ...`` until the ``ust`` CLI registers the subcommand."""
    p = argparse.ArgumentParser(prog="ust solve", description=__doc__.splitlines()[0] if __doc__ else None)
    configure(p)
    return solve_command(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
