"""Solve a 3-D Poisson system with ust's direct solver, phase by phase, and reuse the plan.

    python examples/direct_solver.py [m] [cpu|cuda]

On a machine with a GPU and cuDSS the default runs on the GPU; pass ``cpu`` for SuperLU.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

import numpy as np
import scipy.sparse as sp
import ust.linalg as L


def poisson3d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    i = sp.identity(m)
    return sp.csr_matrix(sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    execution = sys.argv[2] if len(sys.argv) > 2 else None
    a = poisson3d(m)
    b = np.ones(a.shape[0])

    # One call: analysis, factorisation, solve, and the backward-error check.
    x = L.solve(a, b, matrix_type="spd", execution=execution)
    print("residual", np.linalg.norm(b - a @ x) / np.linalg.norm(b))

    # The same, phase by phase: new right-hand sides and new values reuse the earlier work.
    plan_file = os.path.join(tempfile.gettempdir(), "ust_poisson_plan.json")
    with L.DirectSolver(a, b, options={"matrix_type": "spd"}, execution=execution) as solver:
        print(solver.plan())
        print(solver.factorize())
        solver.solve()
        solver.reset_operands(b=np.arange(a.shape[0], dtype=float))
        solver.solve()
        solver.reset_operands(a=sp.csr_matrix(a * 2.0))
        print(solver.refactorize())
        solver.solve()
        solver.save_plan(plan_file)

    # Another process with the same sparsity pattern skips the reordering.
    with L.DirectSolver.load_plan(
        plan_file, a, b, options={"matrix_type": "spd"}, execution=execution
    ) as again:
        print("analysis from the saved plan:", again.plan())
        again.execute()


if __name__ == "__main__":
    main()
