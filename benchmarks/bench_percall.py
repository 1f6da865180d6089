"""Per-call cost of the one-shot API on small matrices, side by side with SciPy (issue 18).

    python -m benchmarks.bench_percall [--device cpu|cuda] [--sizes 100 1000] [--density 0.05]
        [--profile DIR] [--write]

For an n x n CSR matrix of density 5 % (plus n on the diagonal, so that ``solve`` has a
well-conditioned system): ``ust.asarray`` (SciPy: the ``csr_array`` constructor on it),
one-shot ``ust.matmul(A, x)`` (``A @ x``), ``ust.ops.add`` (``A + B``), ``ust.ops.multiply``
(``A.multiply(B)``), a conversion ``ust.asarray(A).convert("CSC")`` (``A.tocsc()``) and
``ust.solve(A, b)`` (``scipy.sparse.linalg.spsolve``), with SciPy objects in and out, and
the Python overhead of a planned ``Matmul.execute`` (its time less the bare kernel's).

``--device cuda``: the same calls on CuPy operands (``cupyx.scipy.sparse.csr_matrix`` and
``cupy`` vectors) against CuPy's own (``cupyx.scipy.sparse.linalg.spsolve`` for the solve); a
batch ends with a stream synchronisation, so queued work is paid for.

Each contender is timed in turns with the baseline's (one batch of calls each per round, so
load on a shared machine hits both alike); reported: the best batch's microseconds per call
and the ratio (ust / baseline, goal <= 1.5).  ``--profile DIR`` writes a cProfile listing of
each of ust's calls (a batch of them) there: where the per-call time goes.
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
COLUMNS = ["n", "call", "ust us", "baseline us", "ust / baseline", "goal"]


def _no_sync() -> None:
    return None


def per_call(
    fns: dict[str, Callable[[], Any]], rounds: int, budget: float = 2e-3, sync: Callable[[], None] = _no_sync
) -> dict[str, float]:
    """Best microseconds per call of each function: batches of about ``budget`` seconds, in
    turns, each batch closed by ``sync`` (the GPU stream's synchronisation)."""
    sizes = {}
    for k, f in fns.items():
        f()
        sync()
        t0 = time.perf_counter()
        f()
        sync()
        sizes[k] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for k, f in fns.items():
            n = sizes[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            sync()
            best[k] = min(best[k], (time.perf_counter() - t0) / n)
    return {k: 1e6 * v for k, v in best.items()}


def _profile(fn: Callable[[], Any], calls: int, path: str) -> None:
    """Where ``calls`` calls of ``fn`` spend their time (cProfile), in microseconds per call of
    ``fn``: own and cumulative time of the 40 most expensive functions, written to ``path``."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:40]
    lines = [f"{'own us':>9} {'cum us':>9} {'calls':>7}  function (per call of the timed function)"]
    for (file, line, func), (_, ncalls, own, cum, _) in top:
        lines.append(
            f"{1e6 * own / calls:9.2f} {1e6 * cum / calls:9.2f} {ncalls / calls:7.2f}  {file}:{line}({func})"
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def operands(n: int, density: float) -> tuple[sp.csr_array, sp.csr_array, np.ndarray]:
    a = sp.random_array((n, n), density=density, format="csr", rng=0) + n * sp.eye_array(n, format="csr")
    b = sp.random_array((n, n), density=density, format="csr", rng=1)
    return sp.csr_array(a), sp.csr_array(b), np.random.default_rng(2).random(n)


def _cases(a: Any, b: Any, x: Any, device: str) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """(ust's call, the baseline's) for each one-shot operation: SciPy's on the CPU, CuPy's on
    the GPU (its sparse constructor and ``spsolve`` in place of SciPy's)."""
    import ust

    if device == "cuda":
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cspl

        make, spsolve = csp.csr_matrix, cspl.spsolve
    else:
        make, spsolve = sp.csr_array, spl.spsolve
    return {
        "asarray(A)": (lambda: ust.asarray(a), lambda: make(a)),
        "matmul(A, x)": (lambda: ust.matmul(a, x), lambda: a @ x),
        "ops.add(A, B)": (lambda: ust.ops.add(a, b), lambda: a + b),
        "ops.multiply(A, B)": (lambda: ust.ops.multiply(a, b), lambda: a.multiply(b)),
        "asarray(A).convert('CSC')": (lambda: ust.asarray(a).convert("CSC"), lambda: a.tocsc()),
        "solve(A, b)": (lambda: ust.solve(a, x), lambda: spsolve(a, x)),
    }


def _execute(a: Any, x: Any, rounds: int, sync: Callable[[], None]) -> dict[str, float]:
    """A planned Matmul's execute, its executor's run alone, and the baseline's ``A @ x``."""
    import ust

    mm = ust.Matmul(a, x)
    mm.plan()
    kernel = mm.executor
    stream = mm._stream()
    return per_call(
        {
            "execute": mm.execute,
            "kernel": lambda: kernel.run(mm.b, mm.c, mm.out, stream),
            "scipy": lambda: a @ x,
        },
        rounds,
        sync=sync,
    )


def _to_host(y: Any) -> Any:
    y = y.toarray() if hasattr(y, "toarray") else y
    return y.get() if hasattr(y, "get") else y


def _on_device(a: Any, b: Any, x: Any, device: str) -> tuple[Any, Any, Any, Callable[[], None]]:
    """The operands in ``device``'s package, and the call that closes a timed batch there."""
    if device != "cuda":
        return a, b, x, _no_sync
    import cupy as cp
    import cupyx.scipy.sparse as csp

    return (
        csp.csr_matrix(sp.csr_matrix(a)),
        csp.csr_matrix(sp.csr_matrix(b)),
        cp.asarray(x),
        cp.cuda.get_current_stream().synchronize,
    )


def rows(
    sizes: list[int], density: float, rounds: int, device: str = "cpu", profile: str | None = None
) -> list[dict[str, Any]]:
    import ust

    out: list[dict[str, Any]] = []
    for n in sizes:
        ha, hb, hx = operands(n, density)
        a, b, x, sync = _on_device(ha, hb, hx, device)
        np.testing.assert_allclose(_to_host(ust.matmul(a, x)), ha @ hx, rtol=1e-12)
        np.testing.assert_allclose(_to_host(ust.solve(a, x)), spl.spsolve(ha, hx), rtol=1e-10)
        np.testing.assert_allclose(_to_host(ust.ops.add(a, b)), (ha + hb).toarray(), rtol=1e-12)
        for name, (ours, theirs) in _cases(a, b, x, device).items():
            t = per_call(
                {"ust": ours, "scipy": theirs},
                rounds if "solve" not in name else max(3, rounds // 3),
                sync=sync,
            )
            out.append({"n": n, "call": name, "ust us": t["ust"], "baseline us": t["scipy"],
                        "ust / baseline": t["ust"] / t["scipy"], "goal": f"<= {GOALS['vs_scipy']}"})  # fmt: skip
            if profile:
                import os
                import re

                os.makedirs(profile, exist_ok=True)
                slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
                _profile(
                    ours, 20 if "solve" in name else 200, os.path.join(profile, f"{device}-{n}-{slug}.txt")
                )
        t = _execute(a, x, rounds, sync)
        out.append({"n": n, "call": "Matmul.execute (planned)", "ust us": t["execute"], "baseline us": t["scipy"],
                    "ust / baseline": t["execute"] / t["scipy"], "goal": f"<= {GOALS['vs_scipy']}"})  # fmt: skip
        out.append({"n": n, "call": "Matmul.execute less its executor's run (Python overhead)",
                    "ust us": t["execute"] - t["kernel"], "goal": f"< {GOALS['execute_overhead_us']} us"})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--density", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--profile", default=None, help="write a cProfile listing of each ust call into this folder"
    )
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    body = markdown(rows(args.sizes, args.density, args.rounds, args.device, args.profile), COLUMNS)
    print(body)
    if args.write:
        append_results(
            "Per-call cost of one-shot calls vs "
            + ("CuPy (GPU)" if args.device == "cuda" else "SciPy (CPU)"),
            "python -m benchmarks.bench_percall " + " ".join(argv or sys.argv[1:]),
            body,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
