"""``ust demo``: what ust does, end to end, in well under 30 seconds on a small CPU.

A custom format is declared as text, a 3-D Poisson matrix (or a Matrix Market file) is
stored in several formats, SpMV runs through the planner with its explanation, and a linear
system is solved with the residual checked.  On a machine with a usable GPU every step runs
there; the first line says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

DEMO_FORMATS = """\
# Formats declared as text, one level format per dimension (MLIR sparse_tensor syntax).
# Rows compressed, each stored row cut into blocks of 4 columns: a format no library ships.
format RowBlocks4 = (i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)
# scipy's DIA layout, written out: one row of values per stored diagonal j - i.
format MyDIA = (i, j) -> (j - i : compressed, j : range)
"""


def poisson3d(n: int) -> Any:
    """The 7-point Laplacian on an n x n x n grid (n^3 rows), as a SciPy CSR array."""
    import scipy.sparse as sp

    one = sp.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    lap = sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye) + sp.kron(sp.kron(eye, eye), one)
    return sp.csr_array(lap)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _nbytes(t: Any) -> int:
    return int(sum(int(a.nbytes) for a in t.buffers().values()))


def run(matrix: str | None = None, n: int = 24, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the demo; returns the figures it printed (tests read them)."""
    import ust
    from ust.backends.cuda.arrays import gpu_available

    device = "cuda" if gpu_available() else "cpu"
    out(
        f"ust {ust.__version__} demo: running on the {'GPU (cuda:0)' if device == 'cuda' else 'CPU (no usable GPU found)'}"
    )
    out("")
    out(DEMO_FORMATS.rstrip())
    decls = ust.parse_formats(DEMO_FORMATS)
    for name, fmt in decls.items():
        out(f"  {name}: parsed; structurally {getattr(fmt, 'standard_name', None) or 'a custom format'}")
    out("")

    if matrix:
        a = ust.io.mmread(matrix, format="CSR")
        label = matrix
    else:
        a = ust.asarray(poisson3d(n))
        label = f"3-D Poisson {n}^3"
    if device == "cuda":
        a = a.to("cuda")
    out(f"matrix: {label}, shape {a.shape}, {a.nnz} nonzeros, {a.dtype}")
    out(f"{'format':<12} {'stored values':>14} {'bytes':>12} {'convert ms':>11}")
    results: dict[str, Any] = {"device": device, "formats": {}}
    targets: dict[str, Any] = {
        "CSR": "CSR",
        "COO": "COO",
        "CSC": "CSC",
        "BSR[2,2]": "BSR[2,2]",
        "RowBlocks4": decls["RowBlocks4"],
        "MyDIA": decls["MyDIA"],
    }
    tensors = {}
    for name, target in targets.items():
        if a.shape[0] % 2 and name.startswith("BSR"):
            continue
        try:
            t0 = time.perf_counter()
            t = a.convert(target)  # a Format or a standard name (no templates here)
            secs = time.perf_counter() - t0
        except ust.FormatError as exc:  # e.g. DIA of a matrix with too many diagonals
            out(f"{name:<12} skipped: {str(exc).splitlines()[0][:70]}")
            continue
        tensors[name] = t
        results["formats"][name] = {"nse": t.nse, "bytes": _nbytes(t), "ms": 1e3 * secs}
        out(f"{name:<12} {t.nse:>14,} {_nbytes(t):>12,} {1e3 * secs:>11.2f}")
    out("")

    xp = a.xp
    x = xp.ones(a.shape[1], dtype=a.dtype)
    for name in ("MyDIA", "RowBlocks4", "CSR"):
        if name not in tensors:
            continue
        mm = ust.Matmul(tensors[name], x)
        out(f"SpMV with A in {name}:")
        out("  " + mm.explain().replace("\n", "\n  "))
        mm.plan()
        y, secs = _timed(mm.execute)
        ref = tensors["CSR"].to_scipy() @ np.ones(a.shape[1]) if device == "cpu" else None
        if ref is not None:
            err = float(np.abs(np.asarray(y) - ref).max())
            out(f"  executed in {1e3 * secs:.2f} ms; max |y - scipy| = {err:.1e}")
            results.setdefault("spmv_error", {})[name] = err
        else:
            out(f"  executed in {1e3 * secs:.2f} ms")
        mm.free()
        out("")

    b = xp.ones(a.shape[0], dtype=a.dtype)
    solver_in = tensors.get("CSR", a)
    (xsol, secs) = _timed(lambda: ust.solve(solver_in, b, matrix_type="spd"))
    r = solver_in.to_scipy() @ (xsol.get() if hasattr(xsol, "get") else xsol) if device == "cpu" else None
    if r is None:
        from ust.runtime.xp import import_cupy

        csp = import_cupy("cupyx.scipy.sparse")
        r = (csp.csr_matrix(solver_in.to_cupyx()) @ xsol).get()
    res = float(np.linalg.norm(r - np.ones(a.shape[0])) / np.linalg.norm(np.ones(a.shape[0])))
    route = "cuDSS" if device == "cuda" else "SuperLU"
    out(f"solve A x = 1 ({route}, matrix_type='spd'): {1e3 * secs:.1f} ms, relative residual {res:.2e}")
    results["residual"] = res
    return results
