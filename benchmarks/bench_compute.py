"""The tensor-algebra compiler (issue 17) side by side with hand-written kernels and the libraries.

CPU (``--device cpu``, the default):

* SpGEMM ``C(i,j) = A(i,k) * B(k,j)`` through the compiler (``ust.Compute`` planned once, execute
  timed) vs ust's hand-written C Gustavson (``ust.asarray(A) @ ust.asarray(A)``, route
  "generated-c" as ``ust.explain("matmul", t, t)`` says) vs SciPy ``A @ A``, on the 3-D Poisson
  matrix (60^3) and on R-MAT graphs (edge factor 16, a=0.57, b=c=0.19; scales 13 and 16).
  Goals: compiler / hand-written <= 1.3, compiler / SciPy <= 1.
* 3-operand add ``C(i,j) = A(i,j) + B(i,j) + D(i,j)`` (Poisson 60^3 and two random patterns of
  as many entries) vs SciPy's chained ``A + B + D``.  Goal: faster (one pass instead of two).
* MTTKRP ``"ijk,jr,kr->ir"`` on a synthetic 3-D tensor (200^3, 1 M nonzeros, rank 16) stored in
  COO3 and in CSF vs the unfolding baseline (the mode-1 matricisation as a SciPy CSR of shape
  I x JK, built once, times the Khatri-Rao product JK x R, built every call) and vs pydata/sparse
  ``sparse.einsum`` (skipped with a note when the package is missing).  Goal: faster than both.
* The two GPU kernels below on the CPU too (fused ``y = A x + B z`` vs two SciPy SpMVs and an
  add; min-plus SpMV vs a NumPy segment-min), for reference.
* Compile time of a first call (a fresh subprocess with an empty ``UST_CACHE_DIR``) and the
  cached load (a second fresh subprocess, same cache); one-shot ``ust.compute`` vs a planned
  ``execute`` on a small case (per-call overhead).

GPU (``--device cuda``): MTTKRP rank 32 vs CuPy unfolding + cuSPARSE SpMM (goal: 2x faster);
fused ``y(i) = A(i,j) * x(j) + B(i,j) * z(j)`` vs two cuSPARSE SpMVs and an add (goal: faster);
min-plus SpMV vs a CuPy array program (``A.data + x[A.indices]``, segment min per row); NVRTC
compile of a first call and the cached load, in fresh subprocesses.

``ust / baseline`` is a time ratio (below 1: ust is faster); ``met`` compares it with the goal.
CPU times are the best of a few runs with the contenders of a case timed in turns
(``time_round_robin``: the machine is shared, and every contender runs once untimed first);
the R-MAT scale-16 SpGEMM (400 M products, 163 M result entries) is timed best of 2, warm (on
a VM, memory the process never touched costs several times more to fault in than memory it
freed, so a cold call would time the machine, not the kernel).  GPU times are medians of CUDA-event timings.

    python -m benchmarks.bench_compute [--device cpu|cuda] [--n 60] [--rmat-scales 13,16]
        [--mttkrp-shape 200,200,200] [--mttkrp-nnz 1000000] [--rank 16] [--out DIR] [--append-results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.common import (
    machine,
    markdown,
    poisson3d,
    random_rows,
    time_gpu,
    time_host,
    time_round_robin,
    with_threads,
)

COLUMNS = ["case", "ust", "ust ms", "baseline", "baseline ms", "ust / baseline", "goal", "met"]

SPGEMM = "C(i,j) = A(i,k) * B(k,j)"
ADD3 = "C(i,j) = A(i,j) + B(i,j) + D(i,j)"
MTTKRP = "M(i,r) = X(i,j,k) * B(j,r) * C(k,r)"
FUSED = "y(i) = A(i,j) * x(j) + B(i,j) * z(j)"
SPMV = "y(i) = A(i,j) * x(j)"
#: Products of A @ A above which a SpGEMM case is timed best of 2 (after one warm-up call each).
BIG_PRODUCTS = 10**8


def _row(
    case: str, ust: str, t_ust: float, base: str, t_base: float, goal: float | None = None
) -> dict[str, Any]:
    ratio = t_ust / t_base
    return {
        "case": case,
        "ust": ust,
        "ust ms": 1e3 * t_ust,
        "baseline": base,
        "baseline ms": 1e3 * t_base,
        "ust / baseline": ratio,
        "goal": "" if goal is None else f"<= {goal:g}",
        "met": "" if goal is None else ("yes" if ratio <= goal else "NO"),
    }


def _int32(a: sp.csr_array) -> sp.csr_array:
    """``a`` with int32 indices (what SciPy picks for these sizes; every contender reads the same)."""
    return sp.csr_array((a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)), shape=a.shape)


# ----------------------------------------------------------------------------- test data


def rmat(
    scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19, seed: int = 0
) -> sp.csr_array:
    """An R-MAT graph (Chakrabarti et al.; Graph500's parameters by default) as an int32 CSR:
    2^scale vertices, edge_factor * 2^scale edges drawn by choosing one quadrant per bit
    (vectorised over the edges: the only loop is over the ``scale`` bits), vertices relabelled
    by a random permutation, duplicate edges summed, uniform random weights."""
    n = 1 << scale
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        down = r >= a + b  # quadrants c and d set the row bit
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b and d set the column bit
        rows |= down.astype(np.int64) << bit
        cols |= right.astype(np.int64) << bit
    perm = rng.permutation(n)
    g = sp.coo_array((rng.random(m), (perm[rows], perm[cols])), shape=(n, n)).tocsr()
    g.sum_duplicates()
    return _int32(g)


def tensor3(shape: tuple[int, int, int], nnz: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """``nnz`` distinct random coordinates of a 3-D tensor, sorted lexicographically, and values."""
    rng = np.random.default_rng(seed)
    total = int(np.prod(shape, dtype=np.int64))
    lin = np.unique(rng.integers(0, total, size=int(nnz * 1.1) + 16))
    lin = np.sort(rng.choice(lin, size=min(nnz, lin.size), replace=False))
    i, j, k = np.unravel_index(lin, shape)
    return i, j, k, rng.standard_normal(lin.size)


def coo3(shape: tuple[int, int, int], i: Any, j: Any, k: Any, v: Any) -> Any:
    """A ust Tensor in COO3 around sorted, distinct coordinates (int32 indices)."""
    import ust

    n = int(v.shape[0])
    return ust.Tensor(
        shape,
        "COO3",
        v,
        pos={0: np.array([0, n], dtype=np.int32)},
        crd={0: i.astype(np.int32), 1: j.astype(np.int32), 2: k.astype(np.int32)},
    )


def _matmul_route(t: Any) -> str:
    import ust

    text = ust.explain("matmul", t, t)
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("route:")), "?")


# ----------------------------------------------------------------------------- CPU


def _planned(expr: str, **operands: Any) -> Any:
    import ust

    c = ust.Compute(expr, **operands)
    c.plan()
    return c


def _check_spgemm(got: Any, ref: sp.csr_array) -> None:
    err = float(abs(got.to_scipy() - ref).max()) if ref.nnz else 0.0
    assert got.nnz == ref.nnz and err <= 1e-9 * max(1.0, float(abs(ref).max())), (got.nnz, ref.nnz, err)


def cpu_spgemm(label: str, A: sp.csr_array) -> list[dict[str, Any]]:
    import ust

    t = ust.asarray(A)
    route = _matmul_route(t)
    c = _planned(SPGEMM, A=A, B=A)
    products = int(np.diff(A.indptr)[A.indices].sum())
    case = f"SpGEMM A@A, {label} ({A.shape[0]:,} rows, {A.nnz:,} nnz, {products:,} products)"
    big = products > BIG_PRODUCTS
    got, ref = c.execute(), A @ A
    _check_spgemm(got, ref)
    del got, ref
    fns = {
        "compiler": c.execute,
        "hand": lambda: t @ t,
        "scipy": lambda: A @ A,
        "compiler-1": with_threads(1, c.execute),
        "hand-1": with_threads(1, lambda: t @ t),
    }
    # every contender warm (one untimed call each: memory the process never touched costs far
    # more to fault in than memory it freed, so a cold first call would measure the machine)
    tm = time_round_robin(fns, repeat=2 if big else (5 if products < 15_000_000 else 3))
    note = ", warm, best of 2" if big else ""
    comp = f"Compute.execute (compiler, {c._plan_obj.route}){note}"
    hand = f"ust.asarray(A) @ ust.asarray(A) ({route}, hand-written)"
    return [
        _row(case, comp, tm["compiler"], hand, tm["hand"], 1.3),
        _row(case, comp, tm["compiler"], "scipy A @ A", tm["scipy"], 1.0),
        _row(case, hand, tm["hand"], "scipy A @ A", tm["scipy"]),
        _row(case, "compiler, 1 thread", tm["compiler-1"], "hand-written, 1 thread", tm["hand-1"], 1.3),
        _row(case, "compiler, 1 thread", tm["compiler-1"], "scipy A @ A", tm["scipy"], 1.0),
    ]


def cpu_add3(n: int) -> list[dict[str, Any]]:
    import ust

    A = _int32(poisson3d(n))
    rows = A.shape[0]
    per = max(1, round(A.nnz / rows))
    B, D = _int32(random_rows(rows, per, seed=1)), _int32(random_rows(rows, per, seed=2))
    c = _planned(ADD3, A=A, B=B, D=D)
    ref = A + B + D
    assert abs(c.execute().to_scipy() - ref).max() <= 1e-12
    ta, tb, td = ust.asarray(A), ust.asarray(B), ust.asarray(D)
    tm = time_round_robin({
        "compiler": c.execute,
        "oneshot": lambda: ust.compute(ADD3, A=A, B=B, D=D),
        "ops": lambda: ust.ops.add(ust.ops.add(ta, tb), td),
        "scipy": lambda: A + B + D,
    })  # fmt: skip
    case = f"add A+B+D, Poisson {n}^3 + 2 random ({rows:,} rows, {A.nnz + B.nnz + D.nnz:,} nnz in)"
    base = "scipy A + B + D (two passes)"
    return [
        _row(case, "Compute.execute (compiler, 3-way merge)", tm["compiler"], base, tm["scipy"], 1.0),
        _row(case, "ust.compute one-shot", tm["oneshot"], base, tm["scipy"]),
        _row(case, "ust.ops.add(ust.ops.add(A, B), D) (planner routes)", tm["ops"], base, tm["scipy"]),
    ]


def _unfold(shape: tuple[int, int, int], i: Any, j: Any, k: Any, v: Any) -> sp.csr_array:
    """The mode-1 matricisation (I x JK, column j*K + k) as a SciPy CSR."""
    ni, nj, nk = shape
    return sp.csr_array((v, (i, j * nk + k)), shape=(ni, nj * nk))


def cpu_mttkrp(shape: tuple[int, int, int], nnz: int, rank: int) -> list[dict[str, Any]]:
    i, j, k, v = tensor3(shape, nnz)
    ni, nj, nk = shape
    rng = np.random.default_rng(5)
    Bf, Cf = rng.standard_normal((nj, rank)), rng.standard_normal((nk, rank))
    U = _unfold(shape, i, j, k, v)

    def unfold_kr() -> Any:
        kr = (Bf[:, None, :] * Cf[None, :, :]).reshape(nj * nk, rank)
        return U @ kr

    ref = unfold_kr()
    T = coo3(shape, i, j, k, v)
    Tc = T.convert("CSF")
    fns: dict[str, Callable[[], Any]] = {"unfold": unfold_kr}
    labels: dict[str, str] = {}
    for name, tt in (("COO3", T), ("CSF", Tc)):
        c = _planned(MTTKRP, X=tt, B=Bf, C=Cf)
        assert np.allclose(c.execute(), ref)
        order = "".join(c._plan_obj.order) if getattr(c, "_plan_obj", None) is not None else "?"
        fns[name] = c.execute
        labels[name] = f"Compute.execute, X in {name} (order {order})"
        c2 = _planned(MTTKRP, X=tt, B=Bf, C=Cf)
        c2.autotune()
        order2 = "".join(c2._plan_obj.order) if getattr(c2, "_plan_obj", None) is not None else "?"
        fns[name + "-tuned"] = c2.execute
        labels[name + "-tuned"] = f"Compute autotuned, X in {name} (order {order2})"
    tm = time_round_robin(fns, repeat=5)
    case = f"MTTKRP ijk,jr,kr->ir, {ni}x{nj}x{nk}, {v.size:,} nnz, rank {rank}"
    base = "SciPy unfold (I x JK CSR) @ Khatri-Rao (JK x R, built per call)"
    out = [_row(case, labels[n], tm[n], base, tm["unfold"], 1.0) for n in labels]
    try:
        import sparse  # pydata/sparse
    except ImportError:
        out.append({"case": case, "ust": "(pydata/sparse not installed: sparse.einsum skipped)"})
        return out
    X = sparse.COO(np.stack([i, j, k]), v, shape=shape)
    small = sparse.COO(np.stack([i[:1000], j[:1000], k[:1000]]), v[:1000], shape=shape)
    sparse.einsum("ijk,jr,kr->ir", small, Bf, Cf)  # numba compiles here, on a small tensor
    t0 = time.perf_counter()
    got = sparse.einsum("ijk,jr,kr->ir", X, Bf, Cf)
    t_pydata = time.perf_counter() - t0
    got = got.todense() if hasattr(got, "todense") else np.asarray(got)
    assert np.allclose(got, ref)
    tp = {"CSF": time_round_robin({"CSF": fns["CSF-tuned"]}, repeat=5)["CSF"], "pydata": t_pydata}
    pbase = f"pydata/sparse {sparse.__version__} sparse.einsum (COO, one run)"
    out.append(_row(case, labels["CSF-tuned"], tp["CSF"], pbase, tp["pydata"], 1.0))
    return out


def _segment_min(indptr: Any, indices: Any, data: Any, x: Any, xp: Any) -> Callable[[], Any]:
    """min-plus SpMV as an array program: ``data + x[indices]``, then a segment min per row
    (``minimum.reduceat`` over the non-empty rows; empty rows keep +inf)."""
    n = int(indptr.shape[0]) - 1
    counts = xp.diff(indptr)
    nonempty = xp.flatnonzero(counts > 0)
    starts = indptr[:-1][nonempty]

    def run() -> Any:
        y = xp.full(n, xp.inf, dtype=data.dtype)
        y[nonempty] = xp.minimum.reduceat(data + x[indices], starts)
        return y

    return run


def _segment_min_padded(indptr: Any, indices: Any, data: Any, x: Any, xp: Any) -> Callable[[], Any]:
    """The same without ``reduceat``, for rows of bounded length: the sums scattered into an
    n x (longest row) array of +inf (slots precomputed from the pattern), then a row min."""
    n = int(indptr.shape[0]) - 1
    nnz = int(data.shape[0])
    counts = xp.diff(indptr)
    width = max(1, int(counts.max())) if n else 1
    rows = xp.searchsorted(indptr[1:], xp.arange(nnz), side="right")
    flat = rows * width + (xp.arange(nnz) - indptr[rows])

    def run() -> Any:
        pad = xp.full(n * width, xp.inf, dtype=data.dtype)
        pad[flat] = data + x[indices]
        return pad.reshape(n, width).min(axis=1)

    return run


def _segment_min_sorted(indptr: Any, indices: Any, data: Any, x: Any, xp: Any) -> Callable[[], Any]:
    """The same without ``reduceat``: sort the sums by (row, value), keep the first of each row."""
    n = int(indptr.shape[0]) - 1
    nnz = int(data.shape[0])
    rows = xp.searchsorted(indptr[1:], xp.arange(nnz), side="right")

    def run() -> Any:
        vals = data + x[indices]
        order = xp.lexsort(xp.stack([vals, rows]))
        r = rows[order]
        first = xp.ones(nnz, dtype=bool)
        first[1:] = r[1:] != r[:-1]
        y = xp.full(n, xp.inf, dtype=data.dtype)
        y[r[first]] = vals[order][first]
        return y

    return run


def cpu_spmv_kernels(n: int) -> list[dict[str, Any]]:
    """The GPU cases' kernels, on the CPU: fused two-SpMV sum, min-plus SpMV."""
    A = _int32(poisson3d(n))
    rows = A.shape[0]
    B = _int32(random_rows(rows, 7, seed=4))
    rng = np.random.default_rng(1)
    x, z = rng.standard_normal(rows), rng.standard_normal(rows)
    c = _planned(FUSED, A=A, B=B, x=x, z=z)
    assert np.allclose(c.execute(), A @ x + B @ z)
    W = A.copy()
    W.data = np.abs(W.data)
    xs = np.abs(x)
    import ust

    m = ust.Compute(SPMV, A=W, x=xs, semiring="min_plus")
    m.plan()
    seg = _segment_min(W.indptr, W.indices, W.data, xs, np)
    assert np.allclose(m.execute(), seg())
    tm = time_round_robin({
        "fused": c.execute,
        "two": lambda: A @ x + B @ z,
        "minplus": m.execute,
        "segmin": seg,
    })  # fmt: skip
    case = f"Poisson {n}^3 + random 7/row ({rows:,} rows)"
    return [
        _row(f"fused y = A x + B z, {case}", "Compute.execute (one kernel)", tm["fused"],
             "scipy A @ x + B @ z", tm["two"], 1.0),
        _row(f"min-plus SpMV, Poisson {n}^3", "Compute.execute semiring=min_plus", tm["minplus"],
             "NumPy data + x[indices], minimum.reduceat", tm["segmin"], 1.0),
    ]  # fmt: skip


def cpu_overhead() -> list[dict[str, Any]]:
    """Per-call cost on a small case: one-shot compute (parse, plan, compiled-kernel lookup) vs
    a planned execute vs SciPy."""
    import ust

    A = _int32(random_rows(1000, 8, seed=9))
    x = np.ones(1000)
    c = _planned(SPMV, A=A, x=x)
    t_plan = time_host(c.execute, repeat=500)
    t_one = time_host(lambda: ust.compute(SPMV, A=A, x=x), repeat=200)
    t_sp = time_host(lambda: A @ x, repeat=2000)
    case = "per-call overhead, SpMV 1,000 rows x 8/row"
    return [
        _row(case, "ust.compute one-shot", t_one, "Compute.execute (planned)", t_plan),
        _row(case, "Compute.execute (planned)", t_plan, "scipy A @ x", t_sp),
    ]


# ----------------------------------------------------------------------------- compile time

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, scipy.sparse as sp
import ust
t_import = time.perf_counter() - t0
device = sys.argv[1]
rng = np.random.default_rng(0)
n = 2000
A = sp.random_array((n, n), density=0.004, random_state=1, format="csr")
B = sp.random_array((n, n), density=0.004, random_state=2, format="csr")
x, z = rng.standard_normal(n), rng.standard_normal(n)
ops = {"A": A, "B": B, "x": x, "z": z}
sync = lambda: None
if device == "cuda":
    import cupy as cp
    ops = {"A": ust.asarray(A).to("cuda"), "B": ust.asarray(B).to("cuda"), "x": cp.asarray(x), "z": cp.asarray(z)}
    sync = cp.cuda.Device().synchronize
    sync()
expr = sys.argv[2]
ops = {k: v for k, v in ops.items() if f"{k}(" in expr}
t0 = time.perf_counter()
c = ust.Compute(expr, **ops)
t_construct = time.perf_counter() - t0
t0 = time.perf_counter()
c.plan()
t_plan = time.perf_counter() - t0
t0 = time.perf_counter()
y = c.execute()
sync()
t_exec = time.perf_counter() - t0
t0 = time.perf_counter()
y = ust.compute(expr, **ops)
sync()
t_again = time.perf_counter() - t0
lib = c._plan_obj.library
print(json.dumps({"import": t_import, "construct": t_construct, "plan": t_plan, "execute": t_exec,
                  "oneshot_again": t_again, "library": getattr(lib, "seconds", None)}))
"""


def _child(device: str, expr: str, cache: str) -> dict[str, Any]:
    env = {**os.environ, "UST_CACHE_DIR": cache}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, device, expr], env=env, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RuntimeError(f"compile-time child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compile_rows(device: str) -> list[dict[str, Any]]:
    """First call of a new expression in a fresh process with an empty cache (parse, lower,
    emit, compile, load, run) vs the same in a second fresh process that finds the cache.  The
    first call also pays the import of the compiler's modules (lazy: ``import ust`` loads no
    codegen), byte-compiled every time where ``PYTHONDONTWRITEBYTECODE`` is set."""
    out = []
    tool = "NVRTC" if device == "cuda" else "C compiler"
    for expr in (FUSED, SPGEMM.replace("B(k,j)", "B(k,j) + A(i,j)")):
        with tempfile.TemporaryDirectory(prefix="ust-bench-cache-") as d:
            fresh = _child(device, expr, d)
            cached = _child(device, expr, d)
        case = f"first call, {device}: {expr}"

        def first(r: dict[str, Any]) -> float:
            return r["construct"] + r["plan"] + r["execute"]

        out.append(
            _row(case, f"Compute + plan + execute, fresh process, empty cache ({tool})", first(fresh),
                 "the same, fresh process, cached", first(cached))
        )  # fmt: skip
        out.append(
            _row(case, "Compute(...) in a fresh process: parse (builds the Lark parser and the semiring table)",
                 cached["construct"], "plan() in a fresh process, cached", cached["plan"])
        )  # fmt: skip
        if fresh.get("library") is not None and cached.get("library") is not None:
            out.append(
                _row(case, f"kernel library: emit + {tool} + load", fresh["library"],
                     "kernel library: emit + load from the disk cache", cached["library"])
            )  # fmt: skip
        out.append(
            _row(case, "ust.compute one-shot, second call in the process (in-memory hit + run)",
                 cached["oneshot_again"], "first call, cached", first(cached))
        )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- GPU


def gpu_mttkrp(shape: tuple[int, int, int], nnz: int, rank: int) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    import ust

    i, j, k, v = tensor3(shape, nnz)
    ni, nj, nk = shape
    rng = np.random.default_rng(5)
    Bf, Cf = cp.asarray(rng.standard_normal((nj, rank))), cp.asarray(rng.standard_normal((nk, rank)))
    U = csp.csr_matrix(_unfold(shape, i, j, k, v))

    def unfold_kr() -> Any:
        kr = (Bf[:, None, :] * Cf[None, :, :]).reshape(nj * nk, rank)
        return U @ kr

    ref = cp.asnumpy(unfold_kr())
    t_base = time_gpu(unfold_kr)
    T = coo3(shape, i, j, k, v)
    case = f"MTTKRP ijk,jr,kr->ir, {ni}x{nj}x{nk}, {v.size:,} nnz, rank {rank}"
    base = "CuPy unfold (I x JK CSR) @ Khatri-Rao (cuSPARSE SpMM)"
    out = []
    for name, tt in (("COO3", T), ("CSF", T.convert("CSF"))):
        g = tt.to("cuda")
        c = ust.Compute(MTTKRP, X=g, B=Bf, C=Cf)
        c.plan()
        assert np.allclose(cp.asnumpy(c.execute()), ref)
        order = "".join(c._plan_obj.order)
        out.append(_row(case, f"Compute.execute, X in {name} (order {order})", time_gpu(c.execute), base,
                        t_base, 0.5))  # fmt: skip
        c.autotune()
        order = "".join(c._plan_obj.order)
        out.append(_row(case, f"Compute autotuned, X in {name} (order {order})", time_gpu(c.execute), base,
                        t_base, 0.5))  # fmt: skip
        cp.get_default_memory_pool().free_all_blocks()
    return out


def gpu_spmv_kernels(n: int) -> list[dict[str, Any]]:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    import ust

    out = []
    A = _int32(poisson3d(n))
    rows = A.shape[0]
    R = _int32(random_rows(rows, 8, seed=4))
    rng = np.random.default_rng(1)
    x, z = cp.asarray(rng.standard_normal(rows)), cp.asarray(rng.standard_normal(rows))
    ga, gr = csp.csr_matrix(A), csp.csr_matrix(R)
    ta, tr = ust.asarray(A).to("cuda"), ust.asarray(R).to("cuda")
    for label, (p, q, tp, tq) in {
        f"Poisson {n}^3 + random 8/row": (ga, gr, ta, tr),
        f"Poisson {n}^3 + Poisson {n}^3": (ga, ga, ta, ta),
    }.items():
        c = ust.Compute(FUSED, A=tp, B=tq, x=x, z=z)
        c.plan()
        assert cp.allclose(c.execute(), p @ x + q @ z)
        t_ust = time_gpu(c.execute)
        t_base = time_gpu(lambda p=p, q=q: p @ x + q @ z)
        out.append(_row(f"fused y = A x + B z, {label} ({rows:,} rows)", "Compute.execute (one kernel)", t_ust,
                        "CuPy A @ x + B @ z (two cuSPARSE SpMVs + add)", t_base, 1.0))  # fmt: skip
    for label, M in {f"Poisson {n}^3": A, "random 8/row": R}.items():
        W = csp.csr_matrix(M)
        W.data = cp.abs(W.data)
        tw = ust.asarray(abs(M)).to("cuda")
        xs = cp.abs(x)
        m = ust.Compute(SPMV, A=tw, x=xs, semiring="min_plus")
        m.plan()
        try:
            seg = _segment_min(W.indptr, W.indices, W.data, xs, cp)
            want = seg()
            how = "CuPy data + x[indices], minimum.reduceat"
        except Exception as exc:  # a CuPy without minimum.reduceat
            print(f"bench_compute: cupy.minimum.reduceat unavailable ({type(exc).__name__}: {exc})")
            seg = _segment_min_padded(W.indptr, W.indices, W.data, xs, cp)
            want = seg()
            how = "CuPy data + x[indices] scattered into n x maxrow (+inf pad), min(axis=1)"
            alt = _segment_min_sorted(W.indptr, W.indices, W.data, xs, cp)
            assert cp.allclose(alt(), want)
        assert cp.allclose(m.execute(), want)
        out.append(_row(f"min-plus SpMV, {label} ({rows:,} rows)", "Compute.execute semiring=min_plus",
                        time_gpu(m.execute), how, time_gpu(seg), 1.0))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- main


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.replace("x", ",").split(",") if s.strip()]


def _has_cupy() -> bool:
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda", "gpu"), default="cpu")
    p.add_argument("--n", type=int, default=None, help="Poisson grid n (default 60 CPU, 100 GPU)")
    p.add_argument("--rmat-scales", default="13,16", help="R-MAT scales for SpGEMM (CPU)")
    p.add_argument("--mttkrp-shape", default="200,200,200")
    p.add_argument("--mttkrp-nnz", type=int, default=1_000_000)
    p.add_argument("--rank", type=int, default=None, help="MTTKRP rank (default 16 CPU, 32 GPU)")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: spgemm,add,mttkrp,spmv,compile")
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("benchmarks", "results"))
    p.add_argument("--append-results", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    gpu = args.device in ("cuda", "gpu")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    shape = tuple(_ints(args.mttkrp_shape))
    assert len(shape) == 3, "--mttkrp-shape takes three extents"
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    if gpu:
        if not _has_cupy():
            print("bench_compute: --device cuda needs CuPy and a GPU; none found, nothing run")
            return 0
        import cupy as cp

        n = args.n or 100
        if "mttkrp" not in skip:
            rows += gpu_mttkrp(shape, args.mttkrp_nnz, args.rank or 32)  # type: ignore[arg-type]
            cp.get_default_memory_pool().free_all_blocks()
        if "spmv" not in skip:
            rows += gpu_spmv_kernels(n)
        if "compile" not in skip:
            rows += compile_rows("cuda")
    else:
        n = args.n or 60
        if "spgemm" not in skip:
            rows += cpu_spgemm(f"Poisson {n}^3", _int32(poisson3d(n)))
            for s in _ints(args.rmat_scales):
                rows += cpu_spgemm(f"R-MAT scale {s}, edge factor 16", rmat(s))
        if "add" not in skip:
            rows += cpu_add3(n)
        if "mttkrp" not in skip:
            rows += cpu_mttkrp(shape, args.mttkrp_nnz, args.rank or 16)  # type: ignore[arg-type]
        if "spmv" not in skip:
            rows += cpu_spmv_kernels(n)
            rows += cpu_overhead()
        if "compile" not in skip:
            rows += compile_rows("cpu")
    elapsed = time.perf_counter() - t_start
    table = markdown(rows, COLUMNS)
    print(table)
    print(f"({elapsed:.0f} s)")
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "seconds": elapsed,
        "command": "python -m benchmarks.bench_compute "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "notes": notes,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_compute.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "rows": rows}, f, indent=1, default=str)
    with open(os.path.join(args.out, "bench_compute.md"), "w", encoding="utf-8") as f:
        f.write(table)
    if args.append_results:
        from benchmarks.common import append_results

        title = "Tensor-algebra compiler (issue 17), " + ("GPU" if gpu else "CPU")
        load = meta["load_average"]
        body = table + (
            f"\nLoad average at the end: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min); {elapsed:.0f} s in all.\n"
            if load
            else ""
        )
        append_results(title, meta["command"].strip(), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
