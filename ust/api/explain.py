"""``ust.explain``: how ust would run any op -- route, reason, conversions, transfers -- without running it.

One entry for every op, and one source for what it says: the planner's rule table.  The route
and its reason come from the rule that won, the other candidates from the rules that also
matched (:mod:`ust.plan.rules`).  ``matmul`` (:class:`~ust.api.matmul.Matmul`'s plan, SpGEMM
for a sparse B, the dense route for an all-dense A), ``convert`` (the steps of
:func:`ust.convert.routes.plan_route`), ``solve`` (the engine :class:`~ust.api.linalg.DirectSolver`
would hold), ``dense_matmul`` / ``fft`` and the algebra ops (:func:`ust.api.algebra.explain`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ust.api.algebra import explain as explain_algebra
from ust.api.indexing import explain as explain_getitem
from ust.api.matmul import Matmul, _is_dense_tensor, _is_sparse_operand
from ust.plan.planner import Decision, choose, decide
from ust.runtime.placement import planning_only

__all__ = [
    "decision_lines",
    "explain",
    "explain_convert",
    "explain_dense",
    "explain_iterative",
    "explain_matmul",
    "explain_solve",
]


def decision_lines(d: Decision) -> list[str]:
    """``route:``, ``reason:`` and ``other candidates:`` lines of a decision (from its rules)."""
    lines = [f"route: {d.route}", f"reason: {d.reason}"]
    if d.rule.convert_to:
        lines.append(f"conversion: operands -> {d.rule.convert_to} first")
    if d.alternatives:
        lines.append("other candidates: " + ", ".join(dict.fromkeys(r.route for r in d.alternatives)))
    return lines


def explain(op: str, *operands: Any, **kwargs: Any) -> str:
    """How ust would run ``op`` on ``operands`` -- route, reason, conversions, transfers -- without running it.

    ``op`` is ``"compute"`` (an index expression, operands by name), ``"einsum"``
    (subscripts, operands), ``"matmul"``, ``"convert"`` (operands: tensor, target format), ``"solve"`` (with
    ``method=`` / ``M=``: the iterative solve), ``"dense_matmul"`` (operands: a, b), ``"fft"``
    (operand: x), ``"getitem"`` (operands: tensor, key: which route serves ``t[key]``), or one of
    the algebra ops
    (``"sddmm"``, ``"add"``, ``"subtract"``, ``"multiply"``, ``"transpose"``, ``"sum"``,
    ``"max"``, ``"min"``, ``"spgemm"``, ...).

    ``execution="cuda"`` is explained on any machine: the planner's rules depend on the kind of
    execution space, not on the hardware, so nothing is checked on a device and no data moves.
    Where this machine could not run it (no CuPy, no CUDA device), a last line says what is missing.
    """
    with planning_only():
        text = _explain(op, *operands, **kwargs)
    missing = _missing_device(kwargs.get("execution")) if op not in _UNPLACED else ""
    return f"{text}\n{missing}" if missing else text


#: Ops that run where their operand is (``execution=`` does not apply to them).
_UNPLACED = ("convert", "transpose", "divide", "negative")


def _missing_device(execution: Any) -> str:
    """What this machine lacks to run on the GPU ``execution`` names ("" when nothing is missing)."""
    from ust.runtime.errors import BackendUnavailableError, DeviceError
    from ust.runtime.spaces import parse_execution
    from ust.runtime.xp import require_device

    space = parse_execution(execution)
    if space is None or not space.is_cuda:
        return ""
    try:
        require_device(space.device_id)
    except BackendUnavailableError as exc:
        text = str(exc)
        cause = text.split("(", 1)[1].split(")", 1)[0] if "(" in text else "it cannot be imported"
        fix = exc.pip_command or 'pip install "ust[cu13]"'
        reason, hint = f"no CuPy ({cause})", f' ({fix}, or "ust[cu12]" for CUDA 12)'
    except DeviceError as exc:
        reason = "no usable CUDA device" if "no usable" in str(exc) else str(exc)
        hint = ""
    else:
        return ""
    where = f"cuda device {space.device_id or 0}"
    return f"not runnable on this machine: {reason}; the plan above is what would run on {where}{hint}"


def _explain(op: str, *operands: Any, **kwargs: Any) -> str:
    if op == "compute":
        from ust.api.compute import explain_compute

        expression, *rest = operands
        if rest:
            raise TypeError("explain('compute', expression, **operands): operands go by name")
        return explain_compute(expression, **kwargs)
    if op == "einsum":
        from ust.api.compute import explain_einsum

        subscripts, *arrays = operands
        return explain_einsum(subscripts, *arrays, **kwargs)
    if op == "matmul":
        a, b, *rest = operands
        if _is_sparse_operand(b):
            return explain_algebra(
                "spgemm", a, b, **{k: v for k, v in kwargs.items() if k in ("format", "execution")}
            )
        if _is_dense_tensor(a):
            return explain_dense("dense_matmul", a.todense(), b, execution=kwargs.get("execution"))
        return Matmul(a, b, *rest, **kwargs).explain()
    if op == "convert":
        t, fmt = operands
        return explain_convert(t, fmt, **kwargs)
    if op == "solve" and ("method" in kwargs or "M" in kwargs):
        return explain_iterative(*operands, **kwargs)
    if op == "solve":
        return explain_solve(*operands, **kwargs)
    if op in ("dense_matmul", "fft"):
        return explain_dense(op, *operands, **kwargs)
    if op == "getitem":
        t, key = operands
        return explain_getitem(t, key, **kwargs)
    return explain_algebra(op, *operands, **kwargs)


def explain_matmul(a: Any, b: Any, c: Any = None, **kwargs: Any) -> str:
    return Matmul(a, b, c, **kwargs).explain()


def explain_convert(t: Any, fmt: Any, *, route: str | None = None) -> str:
    """The steps of ``t.convert(fmt)`` and the rule behind them."""
    from ust.convert import asarray
    from ust.convert.routes import explain_route
    from ust.formats.library import resolve
    from ust.plan.convert import plan_convert

    t = asarray(t)
    fmt = resolve(fmt)
    summary = explain_route(t, fmt, route=route)
    if fmt == t.format:
        return summary
    steps, d = plan_convert(t, fmt, route)
    lines = [
        f"operation: convert ({t.format.standard_name or 'custom'} -> {fmt.standard_name or 'custom'})",
        summary,
        *decision_lines(d),
        "steps: " + " then ".join(s.description for s in steps),
    ]
    return "\n".join(lines)


def explain_solve(a: Any, b: Any, *, execution: Any = None, **options: Any) -> str:
    """How :func:`ust.solve` would run (route, reason, conversions, transfers), without doing it."""
    from ust.api.linalg import DirectSolverOptions, _default_space, _np_dtype, _solve_dtype, solve_problem

    ops, space, why = _default_space(a, b, execution)
    opts = DirectSolverOptions(**options) if options else DirectSolverOptions()
    try:
        dtype = _solve_dtype(_np_dtype(a), _np_dtype(b))
    except Exception:  # explain names the route even where the dtypes would be refused
        dtype = np.dtype(np.float64)
    n = int(a.shape[0]) if len(getattr(a, "shape", ())) == 2 else 0
    d = choose(solve_problem(space, dtype, n, opts, one_shot=True), opts.route)
    fmt = getattr(getattr(a, "format", None), "standard_name", None) or type(a).__name__
    lines = [
        f"operation: solve (A x = b, matrix_type={opts.matrix_type!r}, matrix_view={opts.matrix_view!r})",
        f"operands in {ops.describe()} memory; execution space: {space.describe()} ({why})",
        *decision_lines(d),
        f"conversion: A ({fmt}) -> CSR"
        + (" (already CSR)" if fmt in ("CSR", "csr_array", "csr_matrix") else ""),
        f"check: backward error, and the relative residual after small pivots, after every solve "
        f"({'on' if opts.check else 'off'})",
    ]
    if ops != space:
        lines.append(f"transfers: A and b to {space.describe()}, x back to {ops.describe()} memory")
    return "\n".join(lines)


def explain_iterative(
    a: Any,
    b: Any = None,
    *,
    method: str = "cg",
    M: Any = None,
    execution: Any = None,
    options: Any = None,
) -> str:
    """How an iterative solve would run: the method, the preconditioner, the SpMV route for A's
    format and the convergence test, without building the preconditioner or iterating."""
    from ust.api.iterative import IterativeOptions, IterativeSolver, iterative_problem
    from ust.api.precond import PRECONDITIONERS
    from ust.convert import asarray
    from ust.runtime.errors import UnsupportedError

    opts = IterativeOptions.coerce(options)
    solver = IterativeSolver(a, method=method, M=M, execution=execution, options=opts)
    if isinstance(M, str) and M not in PRECONDITIONERS:
        raise UnsupportedError(f"unknown preconditioner {M!r}; choose one of {', '.join(PRECONDITIONERS)}")
    dtype = np.dtype(getattr(a, "dtype", np.float64))
    d = decide(iterative_problem(solver.space, dtype if dtype.kind in "fc" else np.float64, a))
    every = opts.check_every if opts.check_every is not None else (8 if solver.space.is_cuda else 1)
    lines = [
        f"operation: iterative solve (A x = b by {method})",
        f"execution space: {solver.space.describe()}",
        *decision_lines(d),
        "preconditioner: "
        + ("none" if M is None else M if isinstance(M, str) else f"user operator ({type(M).__name__})"),
        f"convergence: ||b - A x|| <= max(rtol * ||b||, atol), tested every {every} iteration(s), "
        "confirmed on the true residual",
    ]
    if hasattr(a, "matvec") and not hasattr(a, "format") and not hasattr(a, "indptr"):
        lines.append("SpMV: the LinearOperator's own matvec")
    else:
        t = asarray(a)
        probe = t.xp.zeros(t.shape[1], dtype=t.dtype if t.dtype.kind in "fc" else np.float64)
        spmv = Matmul(t, probe, execution=execution)
        lines.append(f"SpMV: route {spmv.decision.route} ({spmv.decision.reason})")
    return "\n".join(lines)


def explain_dense(op: str, *operands: Any, execution: Any = None, **kwargs: Any) -> str:
    """The dense route (cuBLASLt / BLAS for ``dense_matmul``, cuFFT / scipy.fft for ``fft``; with
    ``prolog=`` / ``epilog=``, whether cuFFT fuses them)."""
    from ust.api.dense import dense_problem, fft_explanation
    from ust.runtime.spaces import resolve_space

    names = ("a", "b") if op == "dense_matmul" else ("x",)
    arrays = dict(zip(names, operands))
    space = resolve_space(arrays, execution)
    dtype = np.result_type(*(np.dtype(str(x.dtype).replace("torch.", "")) for x in arrays.values()))
    empty = op == "dense_matmul" and any(0 in tuple(x.shape) for x in arrays.values())
    extra: list[str] = []
    if op == "fft":
        problem, extra = fft_explanation(arrays["x"], space, **kwargs)
        d = decide(problem)
    else:
        d = decide(dense_problem(op, space, dtype, empty=empty))
    what = "A @ B with every operand dense" if op == "dense_matmul" else "FFT of a dense array"
    lines = [f"operation: {op} ({what})", f"execution space: {space.describe()}", *decision_lines(d), *extra]
    return "\n".join(lines)
