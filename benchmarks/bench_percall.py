"""Per-call cost of the one-shot API on small matrices, side by side with SciPy (issue 18).

    python -m benchmarks.bench_percall [--sizes 100 1000] [--density 0.05] [--write]

For an n x n CSR matrix of density 5 % (plus n on the diagonal, so that ``solve`` has a
well-conditioned system): ``ust.asarray`` (SciPy: the ``csr_array`` constructor on it),
one-shot ``ust.matmul(A, x)`` (``A @ x``), ``ust.ops.add`` (``A + B``), ``ust.ops.multiply``
(``A.multiply(B)``), a conversion ``ust.asarray(A).convert("CSC")`` (``A.tocsc()``) and
``ust.solve(A, b)`` (``scipy.sparse.linalg.spsolve``), with SciPy objects in and out, and
the Python overhead of a planned ``Matmul.execute`` (its time less the bare kernel's).

Each contender is timed in turns with SciPy's (one batch of calls each per round, so load
on a shared machine hits both alike); reported: the best batch's microseconds per call and
the ratio (ust / SciPy, goal <= 1.5).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from benchmarks.common import append_results, markdown

GOALS = {"vs_scipy": 1.5, "execute_overhead_us": 10.0}
COLUMNS = ["n", "call", "ust us", "SciPy us", "ust / SciPy", "goal"]


def per_call(fns: dict[str, Callable[[], Any]], rounds: int, budget: float = 2e-3) -> dict[str, float]:
    """Best microseconds per call of each function: batches of about ``budget`` seconds, in turns."""
    sizes = {}
    for k, f in fns.items():
        f()
        t0 = time.perf_counter()
        f()
        sizes[k] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, f in fns.items():
            n = sizes[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            best[k] = min(best[k], (time.perf_counter() - t0) / n)
    return {k: 1e6 * v for k, v in best.items()}


def operands(n: int, density: float) -> tuple[sp.csr_array, sp.csr_array, np.ndarray]:
    a = sp.random_array((n, n), density=density, format="csr", rng=0) + n * sp.eye_array(n, format="csr")
    b = sp.random_array((n, n), density=density, format="csr", rng=1)
    return sp.csr_array(a), sp.csr_array(b), np.random.default_rng(2).random(n)


def _cases(a: Any, b: Any, x: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """(ust's call, SciPy's) for each one-shot operation."""
    import ust

    return {
        "asarray(A)": (lambda: ust.asarray(a), lambda: sp.csr_array(a)),
        "matmul(A, x)": (lambda: ust.matmul(a, x), lambda: a @ x),
        "ops.add(A, B)": (lambda: ust.ops.add(a, b), lambda: a + b),
        "ops.multiply(A, B)": (lambda: ust.ops.multiply(a, b), lambda: a.multiply(b)),
        "asarray(A).convert('CSC')": (lambda: ust.asarray(a).convert("CSC"), lambda: a.tocsc()),
        "solve(A, b)": (lambda: ust.solve(a, x), lambda: spl.spsolve(a, x)),
    }


def _execute(a: Any, x: Any, rounds: int) -> dict[str, float]:
    """A planned Matmul's execute, its executor's run alone, and SciPy's ``A @ x``."""
    import ust

    mm = ust.Matmul(a, x)
    mm.plan()
    kernel = mm.executor
    return per_call(
        {"execute": mm.execute, "kernel": lambda: kernel.run(mm.b, mm.c, mm.out, 0), "scipy": lambda: a @ x},
        rounds,
    )


def rows(sizes: list[int], density: float, rounds: int) -> list[dict[str, Any]]:
    import ust

    out: list[dict[str, Any]] = []
    for n in sizes:
        a, b, x = operands(n, density)
        np.testing.assert_allclose(ust.matmul(a, x), a @ x, rtol=1e-12)
        np.testing.assert_allclose(ust.solve(a, x), spl.spsolve(a, x), rtol=1e-10)
        np.testing.assert_allclose(ust.ops.add(a, b).toarray(), (a + b).toarray(), rtol=1e-12)
        for name, (ours, theirs) in _cases(a, b, x).items():
            t = per_call(
                {"ust": ours, "scipy": theirs}, rounds if "solve" not in name else max(3, rounds // 3)
            )
            out.append({"n": n, "call": name, "ust us": t["ust"], "SciPy us": t["scipy"],
                        "ust / SciPy": t["ust"] / t["scipy"], "goal": f"<= {GOALS['vs_scipy']}"})  # fmt: skip
        t = _execute(a, x, rounds)
        out.append({"n": n, "call": "Matmul.execute (planned)", "ust us": t["execute"], "SciPy us": t["scipy"],
                    "ust / SciPy": t["execute"] / t["scipy"], "goal": f"<= {GOALS['vs_scipy']}"})  # fmt: skip
        out.append({"n": n, "call": "Matmul.execute less its executor's run (Python overhead)",
                    "ust us": t["execute"] - t["kernel"], "goal": f"< {GOALS['execute_overhead_us']} us"})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--density", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    body = markdown(rows(args.sizes, args.density, args.rounds), COLUMNS)
    print(body)
    if args.write:
        append_results(
            "Per-call cost of one-shot calls vs SciPy (CPU)",
            "python -m benchmarks.bench_percall " + " ".join(argv or sys.argv[1:]),
            body,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
