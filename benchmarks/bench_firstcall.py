"""The first custom-format matmul in a new process with a warm kernel cache (issue 18).

    python -m benchmarks.bench_firstcall [--processes 9] [--n 200] [--no-bytecode] [--compare DIR] [--write]

Each sample is a fresh ``python -c`` process that imports NumPy and SciPy, then times, with
``time.perf_counter``: ``import ust``; ``ust.asarray(A, format=TEXT)`` on a SciPy CSR
(n x n, density 5 %) with ``TEXT`` = DCSR written as format text (the first format text of
the process: the parser is made here); the first ``ust.matmul(t, x)`` (plan: route choice,
lowering, the kernel loaded from the on-disk cache, run); and a second ``ust.matmul`` (the
steady state, for scale).  One untimed process first fills the kernel cache (and the
bytecode cache), so every sample finds both warm, as a user's second run would.

Bytecode: an installed package has its ``.pyc`` files (pip compiles them), so by default
the children may write and read bytecode, under a private ``PYTHONPYCACHEPREFIX`` (the
checkout is not written).  ``--no-bytecode`` sets ``PYTHONDONTWRITEBYTECODE=1`` with an
empty prefix instead: every module is compiled from source in every process.

Reported per quantity: the median over the processes, and the min and max.  ``--compare DIR``
times another checkout (``git archive COMMIT | tar -x -C DIR``) in turns with this one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import append_results, markdown

GOAL_MS = 30.0  # issue 18: the first custom-format matmul, new process, warm cache
TEXT = "(i, j) -> (i : compressed, j : compressed)"
COLUMNS = ["tree", "quantity", "median ms", "min ms", "max ms", "goal"]

CHILD = r"""
import json, sys, time
T = time.perf_counter
import numpy as np, scipy.sparse as sp
n = int(sys.argv[1])
A = sp.random_array((n, n), density=0.05, format="csr", rng=0)
x = np.ones(n)
t0 = T(); import ust; t1 = T()
t = ust.asarray(A, format=sys.argv[2]); t2 = T()
y = ust.matmul(t, x); t3 = T()
ust.matmul(t, x); t4 = T()
assert np.allclose(y, A @ x)
print(json.dumps({"import ust": t1 - t0, "asarray(A, format=TEXT)": t2 - t1,
                  "first ust.matmul(t, x)": t3 - t2, "second ust.matmul(t, x)": t4 - t3}))
"""


def _env(pycache: str, bytecode: bool) -> dict[str, str]:
    """The children's environment: bytecode on under a private prefix, or off."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = pycache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def samples(processes: int, n: int, bytecode: bool, trees: list[str]) -> list[list[dict[str, float]]]:
    """Per tree, one dict of seconds per fresh process (``import ust`` from that checkout), the
    trees taking turns process by process, so load on a shared machine hits them alike; one
    untimed process per tree first warms the caches."""
    with tempfile.TemporaryDirectory(prefix="ust-pyc-") as pycache:
        env = _env(pycache, bytecode)
        cmd = [sys.executable, "-c", CHILD, str(n), TEXT]
        out: list[list[dict[str, float]]] = [[] for _ in trees]
        for k in range(processes + 1):
            for runs, tree in zip(out, trees):
                r = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
                if k:
                    runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        return out


def rows(runs: list[dict[str, float]], tree: str = "") -> list[dict[str, object]]:
    """Median, min and max of each quantity, in ms; the goal next to the first matmul."""
    table = []
    for name in runs[0]:
        ms = [1e3 * r[name] for r in runs]
        goal = f"<= {GOAL_MS:g}" if name.startswith("first") else ""
        table.append(
            {
                "tree": tree,
                "quantity": name,
                "median ms": f"{statistics.median(ms):.3g}",
                "min ms": f"{min(ms):.3g}",
                "max ms": f"{max(ms):.3g}",
                "goal": goal,
            }
        )
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=9)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--no-bytecode", action="store_true", help="compile every module from source")
    p.add_argument(
        "--compare", metavar="DIR", help="another checkout, timed in turns (e.g. the commit before)"
    )
    p.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    here = str(Path(__file__).resolve().parents[1])
    trees = [here] + ([args.compare] if args.compare else [])
    runs = samples(args.processes, args.n, not args.no_bytecode, trees)
    names = ["this", args.compare or ""]
    body = markdown([row for name, r in zip(names, runs) for row in rows(r, name)], COLUMNS)
    print(body)
    if args.write:
        append_results(
            "First custom-format matmul in a new process, warm cache (CPU)",
            "python -m benchmarks.bench_firstcall " + " ".join(argv or sys.argv[1:]),
            body,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
