"""Sparse algebra beyond SpMV/SpMM: SpGEMM, SDDMM, elementwise arithmetic, reductions, transpose.

Every function takes ust Tensors (or anything :func:`ust.asarray` takes: scipy / cupyx / torch
sparse) in any format, on the CPU or a GPU, and returns a Tensor (or a dense array where SciPy
returns one: ``sparse + dense``, ``sum``, axis reductions).  Each op asks the planner for a
route (:mod:`ust.plan.rules`): a SciPy / CuPy / cuSPARSE call where one exists for the format,
otherwise an array program written once against ``xp`` or a generated kernel.  ``plan_<op>``
returns the planner's :class:`~ust.plan.Decision` without running anything and
``explain_<op>`` its text (what ``ust.explain`` prints); ``route=`` forces one of the
candidate routes the table lists (tests and benchmarks compare them).

Operands decide where an op runs; ``execution="cpu" | "cuda" | "cuda:N"`` overrides that,
moves the operands, and the result comes back to the operands' memory space.  Shapes,
formats, devices and dtypes are checked before any work; inputs are never modified.

>>> import numpy as np, scipy.sparse as sp
>>> from ust.convert import asarray
>>> A = asarray(sp.random_array((4, 5), density=0.5, random_state=0, format="csr"))
>>> C = add(A, multiply(A, 2.0), format="COO")
>>> bool(np.allclose(C.todense(), 3 * A.todense())), C.format.standard_name
(True, 'COO')
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ust.algebra import elementwise as _elementwise_routes  # noqa: F401 - registers the add/multiply routes
from ust.algebra import sddmm as _sddmm_routes  # noqa: F401 - registers the sddmm routes
from ust.algebra import spgemm as _spgemm_routes  # noqa: F401 - registers the spgemm routes
from ust.algebra.epilogue import apply_epilog
from ust.algebra.operands import DENSE, SCALAR, SPARSE, Placement, as_tensor, kind, place
from ust.algebra.problem import choose, explain_text, problem
from ust.formats.library import get, resolve
from ust.formats.model import Format
from ust.plan import Decision
from ust.plan.routes import Route, register, route_of
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.runtime.log import get_logger
from ust.runtime.placement import device_name
from ust.runtime.spaces import parse_execution
from ust.tensor.dispatch import OPERATORS

__all__ = [
    "add",
    "apply_epilog",
    "astype",
    "divide",
    "explain",
    "explain_add",
    "explain_divide",
    "explain_matmul_sparse",
    "explain_max",
    "explain_min",
    "explain_multiply",
    "explain_negative",
    "explain_sddmm",
    "explain_spgemm",
    "explain_subtract",
    "explain_sum",
    "explain_transpose",
    "matmul_sparse",
    "max",
    "min",
    "multiply",
    "negative",
    "plan",
    "plan_add",
    "plan_divide",
    "plan_matmul_sparse",
    "plan_max",
    "plan_min",
    "plan_multiply",
    "plan_negative",
    "plan_sddmm",
    "plan_spgemm",
    "plan_subtract",
    "plan_sum",
    "plan_transpose",
    "sddmm",
    "subtract",
    "sum",
    "transpose",
]

_Result = tuple[Any, Decision]

_log = get_logger("ops.algebra")

#: The ops that take ``execution=`` (and so place their operands).
_PLACED = ("spgemm", "matmul_sparse", "sddmm", "add", "subtract", "multiply", "sum", "max", "min")


def _log_route(op: str, d: Decision) -> None:
    """The INFO line of the route and why, after the placement line (``Placement.log``), as
    :class:`~ust.api.matmul.Matmul` writes them."""
    _log.info("route for %s: %s (%s)", op, d.route, d.reason)


def _fmt(format: Any, default: Format) -> Format:  # noqa: A002
    return default if format is None else resolve(format)


# ----------------------------------------------------------------------------- SpGEMM


def _matmul_sparse(a: Any, b: Any, *, format: Any = "CSR", execution: Any = None, route: str | None = None,  # noqa: A002
                   dry: bool = False) -> _Result:  # fmt: skip
    from ust.algebra.spgemm import spgemm

    pl = place({"a": a, "b": b}, execution)
    ta, tb = pl.tensor(as_tensor(a)), pl.tensor(as_tensor(b))
    fmt = _fmt(format, get("CSR"))
    if dry:
        return spgemm(ta, tb, fmt, route, dry=True)
    pl.log(_log)
    out, d = spgemm(ta, tb, fmt, route)
    _log_route("spgemm", d)
    return pl.back(out), d


def matmul_sparse(
    a: Any,
    b: Any,
    *,
    format: Any = "CSR",  # noqa: A002 - the public name, as in ust.asarray
    execution: Any = None,
    route: str | None = None,
) -> Any:
    """SpGEMM ``A @ B`` with both operands sparse; the result in ``format`` (default CSR).

    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.random_array((6, 6), density=0.4, random_state=1, format="csr")
    >>> C = matmul_sparse(A, A)
    >>> C.format.standard_name, bool(np.allclose(C.todense(), (A @ A).toarray()))
    ('CSR', True)
    """
    return _matmul_sparse(a, b, format=format, execution=execution, route=route)[0]


# ----------------------------------------------------------------------------- SDDMM


def _sddmm(s: Any, a: Any, b: Any, *, alpha: complex = 1, beta: complex = 0, epilog: str | None = None,
           epilog_params: Mapping[str, Any] | None = None, execution: Any = None, route: str | None = None,
           dry: bool = False) -> _Result:  # fmt: skip
    from ust.algebra import sddmm as mod

    for name, x in (("A", a), ("B", b)):
        if kind(x) != DENSE:
            raise UnsupportedError(f"sddmm: {name} must be a dense array, got {kind(x)} {type(x).__name__}")
    pl = place({"S": s, "A": a, "B": b}, execution)
    ts = pl.tensor(as_tensor(s))
    da, db = pl.dense(a), pl.dense(b)
    if not dry:
        pl.log(_log)
    out, d = mod.sddmm(ts, da, db, alpha=alpha, beta=beta, epilog=epilog, epilog_params=epilog_params,
                       route=route, dry=dry)  # fmt: skip
    if dry:
        return out, d
    _log_route("sddmm", d)
    return pl.back(out), d


def sddmm(
    s: Any,
    a: Any,
    b: Any,
    *,
    alpha: complex = 1,
    beta: complex = 0,
    epilog: str | None = None,
    epilog_params: Mapping[str, Any] | None = None,
    execution: Any = None,
    route: str | None = None,
) -> Any:
    """Sampled dense-dense product: ``alpha * (A @ B)`` at S's stored positions ``+ beta * S``.

    The result is a Tensor in S's format with S's structure.  ``epilog`` (text in ust's
    epilogue language, value ``y``, parameters from ``epilog_params``) is applied to every
    stored value: fused into the generated kernel, or in place after a library call.

    >>> import numpy as np, scipy.sparse as sp
    >>> S = sp.random_array((5, 4), density=0.5, random_state=2, format="csr")
    >>> A, B = np.ones((5, 3)), np.ones((3, 4))
    >>> R = sddmm(S, A, B, epilog="y * scale", epilog_params={"scale": 2})
    >>> bool(np.allclose(R.todense(), 6.0 * (S.toarray() != 0)))
    True
    """
    return _sddmm(s, a, b, alpha=alpha, beta=beta, epilog=epilog, epilog_params=epilog_params,
                  execution=execution, route=route)[0]  # fmt: skip


# ----------------------------------------------------------------------------- elementwise


def _scalar_value(x: Any) -> Any:
    return (
        x.item() if hasattr(x, "item") and getattr(x, "ndim", 0) == 0 and not isinstance(x, np.generic) else x
    )


def _is_zero(x: Any) -> bool:
    return bool(x == 0)


def _scale(t: Any, fn: Callable[[Any], Any], fmt: Format | None, other: str, route: str | None,
           dry: bool) -> _Result:  # fmt: skip
    probe = fn(t.values[:0])
    d = choose(problem("scale", t, device=t.device, dtype=probe.dtype, other_kind=other), route)
    if dry:
        return None, d
    out = route_of(d.rule).build(t, fn)
    return (out if fmt is None or fmt == out.format else out.convert(fmt)), d


def _map_values(t: Any, fn: Callable[[Any], Any]) -> Any:
    from ust.algebra.elementwise import map_values

    return map_values(t, fn)


# the route of the "scale" rules (sparse x scalar and sparse x dense keep the structure)
register(Route("scale", "values", _map_values))


def _elementwise(op: str, a: Any, b: Any, format: Any, execution: Any, route: str | None,  # noqa: A002
                 dry: bool) -> _Result:  # fmt: skip
    from ust.algebra.elementwise import binary_sparse, cupyx_pair, dense_plus, sampled_dense, scipy_pair

    if format is None and execution is None and route is None and not dry:
        # two canonical SciPy (CuPy) operands: straight to SciPy's kernel (ust's merge kernel)
        hit = scipy_pair(op, a, b) or cupyx_pair(op, a, b)
        if hit is not None:
            _log_route(op, hit[1])
            return hit
    ka, kb = kind(a), kind(b)
    if SPARSE not in (ka, kb):
        raise UnsupportedError(f"{op}: at least one operand must be sparse (got {ka} and {kb})")
    pl = place({"a": a, "b": b}, execution)
    ta = pl.tensor(as_tensor(a)) if ka == SPARSE else None
    tb = pl.tensor(as_tensor(b)) if kb == SPARSE else None
    fmt = None if format is None else resolve(format)
    if ta is not None and tb is not None:
        if not dry:
            pl.log(_log)
        out, d = binary_sparse(op, ta, tb, fmt or ta.format, route, dry=dry)
        if dry:
            return out, d
        _log_route(op, d)
        return pl.back(out), d
    sparse = ta if ta is not None else tb
    other = b if ta is not None else a
    okind = kb if ta is not None else ka
    assert sparse is not None
    if okind == SCALAR:
        s = _scalar_value(other)
        if op == "multiply":
            out, d = _scale(sparse, lambda v: v * s, fmt, "scalar", route, dry)
        elif _is_zero(s) and (op != "subtract" or ta is not None):
            out, d = _scale(sparse, lambda v: v + v.dtype.type(0) * s, fmt, "scalar", route, dry)
        elif _is_zero(s):  # 0 - A
            out, d = _scale(sparse, lambda v: -v, fmt, "scalar", route, dry)
        else:
            raise UnsupportedError(
                f"{op} of a sparse tensor and the nonzero scalar {s!r} would be dense; supported: scalar 0, "
                "or use A.todense() first"
            )
        return (out if dry else pl.back(out)), d
    dense = pl.dense(other)
    d = choose(problem("scale", sparse, device=sparse.device, dtype=np.result_type(sparse.dtype, dense.dtype),
                       other_kind="dense"), route)  # fmt: skip
    if dry:
        return None, d
    if op == "multiply":
        out = sampled_dense(sparse, dense, lambda v, w: v * w)
        out = out if fmt is None or fmt == out.format else out.convert(fmt)
    elif op == "add":
        out = dense_plus(sparse, dense)
    else:
        out = dense_plus(sparse, dense, negate_dense=ta is not None, negate_sparse=ta is None)
    return pl.back(out), d


def add(a: Any, b: Any, *, format: Any = None, execution: Any = None, route: str | None = None) -> Any:  # noqa: A002
    """``A + B``: union of two sparse operands (result in ``format``, default A's format, exact
    zeros dropped as SciPy drops them); sparse + dense gives a dense array; a scalar must be 0."""
    return _elementwise("add", a, b, format, execution, route, False)[0]


def subtract(a: Any, b: Any, *, format: Any = None, execution: Any = None, route: str | None = None) -> Any:  # noqa: A002
    """``A - B`` (see :func:`add`)."""
    return _elementwise("subtract", a, b, format, execution, route, False)[0]


def multiply(a: Any, b: Any, *, format: Any = None, execution: Any = None, route: str | None = None) -> Any:  # noqa: A002
    """Elementwise ``A * B``: intersection of two sparse operands; with a scalar or a dense array
    (broadcast to A's shape) the result keeps A's format and structure."""
    return _elementwise("multiply", a, b, format, execution, route, False)[0]


def _divide(a: Any, b: Any, format: Any, route: str | None, dry: bool) -> _Result:  # noqa: A002
    if kind(a) != SPARSE or kind(b) != SCALAR:
        raise UnsupportedError(
            f"divide: supported is sparse / scalar (got {kind(a)} / {kind(b)}); sparse / sparse would be "
            "dense (0 / 0)"
        )
    t = as_tensor(a)
    s = _scalar_value(b)
    fmt = None if format is None else resolve(format)
    return _scale(t, lambda v: v / s, fmt, "scalar", route, dry)


def divide(a: Any, b: Any, *, format: Any = None, route: str | None = None) -> Any:  # noqa: A002
    """``A / s`` for a scalar ``s`` (true division: integer values become float64)."""
    return _divide(a, b, format, route, False)[0]


def negative(a: Any, *, route: str | None = None) -> Any:
    """``-A`` (same format and structure)."""
    t = as_tensor(a)
    return _scale(t, lambda v: -v, None, "", route, False)[0]


def astype(a: Any, dtype: Any, *, copy: bool = True) -> Any:
    """Values cast to ``dtype`` (same format and structure; ``copy=False`` shares what it can)."""
    return as_tensor(a).astype(dtype, copy=copy)


# ----------------------------------------------------------------------------- transpose


def _transpose(a: Any, axes: Sequence[int] | None, format: Any, route: str | None, dry: bool) -> _Result:  # noqa: A002
    t = as_tensor(a)
    d = choose(problem("transpose", t, device=t.device, dtype=t.dtype), route)
    if dry:
        return None, d
    out = route_of(d.rule).build(t, axes)
    return (out if format is None else out.convert(resolve(format))), d


def _relabel(t: Any, axes: Sequence[int] | None) -> Any:
    from ust.algebra.transpose import transpose as view

    return view(t, axes)


register(Route("transpose", "relabel", _relabel))


def transpose(a: Any, axes: Sequence[int] | None = None, *, format: Any = None) -> Any:  # noqa: A002
    """``A.T`` (or NumPy-style ``axes``): the same buffers under the permuted map, no copy.

    CSR.T is CSC, CSC.T is CSR, COO.T is ``(i, j) -> (j : compressed(nonunique), i : singleton)``;
    ``format=`` converts the view once into another format.
    """
    return _transpose(a, axes, format, None, False)[0]


# ----------------------------------------------------------------------------- reductions


def _reduce(op: str, a: Any, axis: Any, execution: Any, route: str | None, dry: bool) -> _Result:
    from ust.algebra.reduce import check_axis, check_result, sum_dtype

    pl: Placement = place({"a": a}, execution)
    t = pl.tensor(as_tensor(a))
    ax = check_axis(t.ndim, axis)
    if op != "sum" and 0 in t.shape:
        raise ShapeError(f"{op} of a zero-size tensor of shape {t.shape}: the reduction has no identity")
    # a dense axis result that cannot be stored: before any route (SciPy's would allocate it too)
    check_result(t.xp, t.shape, ax, sum_dtype(t.dtype) if op == "sum" else t.dtype, op)
    d = choose(problem(op, t, device=t.device, dtype=t.dtype), route)
    if dry:
        return None, d
    pl.log(_log)
    _log_route(op, d)
    return pl.back(route_of(d.rule).build(op, t, ax)), d


def _reduce_scipy(op: str, t: Any, ax: Any) -> Any:
    r = getattr(t.to_scipy(), op)(axis=ax)
    return r.toarray() if hasattr(r, "toarray") else r


def _reduce_cupyx(op: str, t: Any, ax: Any) -> Any:
    r = getattr(t.to_cupyx(), op)(axis=ax)
    return r if ax is None else r.ravel()  # cupyx is matrix-shaped: (m, 1) / (1, n) where SciPy's are 1-D


def _reduce_array(op: str, t: Any, ax: Any) -> Any:
    from ust.algebra.reduce import extreme_array, sum_array

    return sum_array(t, ax) if op == "sum" else extreme_array(t, ax, "maximum" if op == "max" else "minimum")


# the routes of the reduction rules: build(op, t, axis) -> the reduced value
for _op in ("sum", "max", "min"):
    for _name, _build in (
        ("scipy", _reduce_scipy),
        ("cupyx", _reduce_cupyx),
        ("array-program", _reduce_array),
    ):
        if _name != "cupyx" or _op == "sum":  # CuPy's sum is the one library reduction on the GPU
            register(Route(_op, _name, _build))
del _op, _name, _build


def sum(a: Any, axis: Any = None, *, execution: Any = None, route: str | None = None) -> Any:  # noqa: A001
    """Sum of all entries (a scalar) or along ``axis`` (a dense array), in NumPy's sum dtype."""
    return _reduce("sum", a, axis, execution, route, False)[0]


def max(a: Any, axis: Any = None, *, execution: Any = None, route: str | None = None) -> Any:  # noqa: A001
    """Maximum with implicit zeros counted (SciPy's semantics; axis results as a dense array)."""
    return _reduce("max", a, axis, execution, route, False)[0]


def min(a: Any, axis: Any = None, *, execution: Any = None, route: str | None = None) -> Any:  # noqa: A001
    """Minimum with implicit zeros counted (SciPy's semantics; axis results as a dense array)."""
    return _reduce("min", a, axis, execution, route, False)[0]


# ----------------------------------------------------------------------------- plan / explain


_PLANNERS: dict[str, Callable[..., _Result]] = {
    "spgemm": lambda a, b, **kw: _matmul_sparse(a, b, dry=True, **kw),
    "matmul_sparse": lambda a, b, **kw: _matmul_sparse(a, b, dry=True, **kw),
    "sddmm": lambda s, a, b, **kw: _sddmm(s, a, b, dry=True, **kw),
    "add": lambda a, b, **kw: _elementwise("add", a, b, kw.get("format"), kw.get("execution"), kw.get("route"), True),
    "subtract": lambda a, b, **kw: _elementwise("subtract", a, b, kw.get("format"), kw.get("execution"),
                                                kw.get("route"), True),
    "multiply": lambda a, b, **kw: _elementwise("multiply", a, b, kw.get("format"), kw.get("execution"),
                                                kw.get("route"), True),
    "divide": lambda a, b, **kw: _divide(a, b, kw.get("format"), kw.get("route"), True),
    "negative": lambda a, **kw: _scale(as_tensor(a), lambda v: -v, None, "", kw.get("route"), True),
    "transpose": lambda a, axes=None, **kw: _transpose(a, axes, kw.get("format"), kw.get("route"), True),
    "sum": lambda a, axis=None, **kw: _reduce("sum", a, axis, kw.get("execution"), kw.get("route"), True),
    "max": lambda a, axis=None, **kw: _reduce("max", a, axis, kw.get("execution"), kw.get("route"), True),
    "min": lambda a, axis=None, **kw: _reduce("min", a, axis, kw.get("execution"), kw.get("route"), True),
}  # fmt: skip


def plan(op: str, *operands: Any, **kwargs: Any) -> Decision:
    """The planner's decision for ``op`` on ``operands`` (checks run, no work done).

    ``op`` is one of: spgemm (matmul_sparse), sddmm, add, subtract, multiply, divide, negative,
    transpose, sum, max, min; ``kwargs`` are the op's own keyword arguments.
    """
    try:
        planner = _PLANNERS[op]
    except KeyError:
        raise UnsupportedError(f"no algebra op {op!r}; supported: {', '.join(_PLANNERS)}") from None
    return planner(*operands, **kwargs)[1]


def explain(op: str, *operands: Any, **kwargs: Any) -> str:
    """The plan of ``op`` on ``operands`` as text: route, reason, candidates (``ust.explain``)."""
    d = plan(op, *operands, **kwargs)
    first = next((x for x in operands if kind(x) == SPARSE), None)
    t = as_tensor(first) if first is not None else None
    fmt = kwargs.get("format")
    result_format = None
    if op in ("spgemm", "matmul_sparse"):
        result_format = resolve(fmt) if fmt is not None else get("CSR")
    elif op in ("add", "subtract", "multiply") and fmt is not None:
        result_format = resolve(fmt)
    space = parse_execution(kwargs.get("execution"))
    device = device_name(space) if space is not None and op in _PLACED else None
    return explain_text(d, t, result_format=result_format, device=device)


# one plan_<op> / explain_<op> per op, for the lead's ust.explain wiring
def _bind(op: str) -> tuple[Callable[..., Decision], Callable[..., str]]:
    def plan_op(*operands: Any, **kwargs: Any) -> Decision:
        return plan(op, *operands, **kwargs)

    def explain_op(*operands: Any, **kwargs: Any) -> str:
        return explain(op, *operands, **kwargs)

    plan_op.__name__, explain_op.__name__ = f"plan_{op}", f"explain_{op}"
    plan_op.__doc__ = f"The planner's Decision for {op} (no work done)."
    explain_op.__doc__ = f"The plan of {op} as text."
    return plan_op, explain_op


plan_matmul_sparse, explain_matmul_sparse = _bind("matmul_sparse")
plan_spgemm, explain_spgemm = _bind("spgemm")
plan_sddmm, explain_sddmm = _bind("sddmm")
plan_add, explain_add = _bind("add")
plan_subtract, explain_subtract = _bind("subtract")
plan_multiply, explain_multiply = _bind("multiply")
plan_divide, explain_divide = _bind("divide")
plan_negative, explain_negative = _bind("negative")
plan_transpose, explain_transpose = _bind("transpose")
plan_sum, explain_sum = _bind("sum")
plan_max, explain_max = _bind("max")
plan_min, explain_min = _bind("min")

# Tensor's operators (ust.tensor.dispatch); ``@`` / reflected ``@`` are registered by ust.api.matmul
OPERATORS.update(
    add=add,
    subtract=subtract,
    multiply=multiply,
    divide=divide,
    negative=negative,
    transpose=transpose,
    sum=sum,
    max=max,
    min=min,
)

_ = builtins  # the builtins sum/max/min stay reachable as builtins.* inside this module
