"""``alpha * A @ B + beta * C`` for a sparse A: the stateful ``Matmul`` and the one-shot ``matmul``.

The planner picks the route (:mod:`ust.plan.rules`); this module moves operands to the
execution space, prepares the chosen executor once (``plan``), times the candidates
(``autotune``), runs it (``execute``) and hands the result back in the package and memory
space of ``B``.  The fused form is always one library call or one generated kernel.
"""

from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from ust.algebra.operands import SPARSE, as_tensor, kind
from ust.api.algebra import apply_epilog, matmul_sparse, multiply, transpose
from ust.api.route_choice import RouteChoice, choose_route, known_variant
from ust.plan import Problem, classify, decide
from ust.plan.planner import c_compiler_available
from ust.plan.routes import route as register_route
from ust.plan.routes import route_of
from ust.plan.rules import Rule
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.runtime.log import get_logger
from ust.runtime.placement import Placement
from ust.runtime.spaces import (
    ExecutionSpace,
    operand_package,
    operand_space,
)
from ust.runtime.stateful import PlanFileError, StatefulOperation, check_plan_fields
from ust.runtime.xp import import_cupy
from ust.tensor import Tensor
from ust.tensor.dispatch import OPERATORS, register

__all__ = ["Matmul", "matmul", "matmul_operator", "matmul_problem", "rmatmul"]

_log = get_logger("ops.matmul")


def _as_tensor(a: Any) -> Any:
    from ust.convert import asarray
    from ust.tensor import Tensor

    return a if isinstance(a, Tensor) else asarray(a)


def _dense_shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _array_like(x: Any) -> Any:
    """A dense operand with a shape: lists / nested lists become NumPy arrays, as NumPy reads them."""
    if x is None or hasattr(x, "shape"):
        return x
    return np.asarray(x)


def _dtype_name(x: Any) -> str:
    dt = getattr(x, "dtype", None)
    return str(np.dtype(str(dt).replace("torch.", ""))) if dt is not None else "float64"


def matmul_problem(
    a: Any, b_shape: tuple[int, ...], dtype: str, space: ExecutionSpace, plain: bool
) -> Problem:
    """The planner's view of ``A @ B``: op, device, format class, dtypes."""
    fc = classify(a.format)
    batched = _is_batched(a)
    op = "ttv" if a.ndim == 3 and not batched else ("spmv" if len(b_shape) == 1 else "spmm")
    return Problem(
        op=op,
        device=space.kind,
        format_class=fc.name,
        format_params=fc.params,
        canonical=fc.canonical,
        dtype=dtype,
        index_dtype=str(np.dtype(a.index_dtype)),
        plain=plain,
        has_compiler=c_compiler_available() if space.kind == "cpu" else True,
        ndim=a.ndim,
        batched=batched,
    )


def _is_batched(a: Any) -> bool:
    return bool(a.format.nbatch)


def result_shape(a: Any, bshape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of ``A @ B``, or ShapeError.

    A (m, n) @ B (n,) or (n, k); batched A (B, m, n) @ B (B, n) or (B, n, k); a 3-D A
    (m, n, p) times a vector (p,) on its last mode (tensor-times-vector).
    """
    shape = tuple(int(s) for s in a.shape)
    if a.ndim == 2 and len(bshape) in (1, 2) and bshape[0] == shape[1]:
        return (shape[0], *bshape[1:])
    if a.ndim == 3 and _is_batched(a):
        if len(bshape) in (2, 3) and bshape[0] == shape[0] and bshape[1] == shape[2]:
            return (shape[0], shape[1], *bshape[2:])
    elif a.ndim == 3 and len(bshape) == 1 and bshape[0] == shape[2]:
        return shape[:2]
    raise ShapeError(
        f"cannot multiply A of shape {shape} ({a.ndim}-D) by B of shape {bshape}: extents do not match"
    )


#: The ops a Matmul plans (its routes are registered once for each op whose rules name them).
MATMUL_OPS = ("spmv", "spmm", "ttv")
_LIBRARY_OPS = ("spmv", "spmm")  # tensor-times-vector has generated routes only


def _cusparse_variants(m: Matmul, rule: Rule) -> tuple[Any, ...]:
    from ust.backends.cuda import cusparse

    table = cusparse.SPMV_ALGORITHMS if m.problem.op == "spmv" else cusparse.SPMM_ALGORITHMS
    return tuple(table.get(m.problem.format_class, (None,)))


def _generated_variants(m: Matmul, rule: Rule) -> tuple[Any, ...]:
    from ust.codegen.schedule import variants

    return tuple(variants(m, rule.route))


class _Adapt:
    """Gives a ``run(b, c, out)`` executor the ``run(b, c, out, stream)`` signature."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, b: Any, c: Any, out: Any, stream: int) -> Any:
        return self.inner.run(b, c, out)


@register_route(_LIBRARY_OPS, "scipy")
def _scipy(m: Matmul, rule: Rule, variant: Any) -> Any:
    from ust.backends.cpu.scipy_routes import ScipyMatmul

    return _Adapt(ScipyMatmul(m.a, m.alpha, m.beta))


@register_route(_LIBRARY_OPS, "convert-scipy")
def _convert_scipy(m: Matmul, rule: Rule, variant: Any) -> Any:
    from ust.backends.cpu.scipy_routes import ScipyMatmul
    from ust.codegen.lower import has_padding

    _log.warning("no C compiler found: converting %s to %s and using SciPy", m.a.format, rule.convert_to)
    # a padded format's zero fill survives the conversion as explicit zeros: drop it once
    prune = has_padding(m.a.format)
    return _Adapt(ScipyMatmul(m.a.convert(rule.convert_to), m.alpha, m.beta, prune=prune))


@register_route(_LIBRARY_OPS, "cusparse", variants=_cusparse_variants)
def _cusparse(m: Matmul, rule: Rule, variant: Any) -> Any:
    from ust.backends.cuda.cusparse_routes import CusparseMatmul

    fc = classify(m.a.format)
    return CusparseMatmul(
        m.a, fc.name, fc.params, m.b, m.out, m.alpha, m.beta, variant, m.space.device_id or 0
    )


@register_route(MATMUL_OPS, "generated-c", variants=_generated_variants, available=c_compiler_available)
def _generated_c(m: Matmul, rule: Rule, variant: Any) -> Any:
    from ust.backends.generated.executors import generated_matmul

    return generated_matmul(m, "c", variant)


@register_route(MATMUL_OPS, "generated-cuda", variants=_generated_variants)
def _generated_cuda(m: Matmul, rule: Rule, variant: Any) -> Any:
    from ust.backends.generated.executors import generated_matmul

    return generated_matmul(m, "cuda", variant)


class Matmul(StatefulOperation):
    """Stateful ``alpha * A @ B + beta * C`` (A sparse in any format; B, C dense).

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((50, 40), density=0.1, format="csr", random_state=0)
    >>> x = np.ones(40)
    >>> with ust.Matmul(A, x, alpha=2.0) as mm:
    ...     _ = mm.plan()
    ...     y = mm.execute()
    >>> bool(np.allclose(y, 2.0 * (A @ x)))
    True
    """

    kind = "matmul"
    _b_as_is = False
    #: True when :meth:`load_plan` reused the saved route/variant (False: planned afresh).
    from_saved_plan: bool = False
    _spare_out: Any = None

    def __init__(
        self,
        a: Any,
        b: Any,
        c: Any = None,
        *,
        alpha: complex = 1.0,
        beta: complex = 0.0,
        execution: Any = None,
        options: dict[str, Any] | None = None,
        stream: Any = None,
    ) -> None:
        super().__init__()
        b, c = _array_like(b), _array_like(c)
        self.options = dict(options or {})
        self.alpha, self.beta = alpha, beta
        self._stream_arg = stream
        # the result comes back in B's package and memory
        self._place = Placement({"a": a, "b": b, "c": c}, execution, home="b")
        self._place.require_device()
        self.space = self._place.space
        self._b_space = self._place.home
        self.a = _as_tensor(a)
        self._check(self.a, b, c)
        self._b_in, self._c_in = b, c
        self.dtype = str(
            np.result_type(
                np.dtype(self.a.dtype),
                np.dtype(_dtype_name(b)),
                *([np.dtype(_dtype_name(c))] if c is not None else []),
            )
        )
        if beta == 0:
            self._c_in = None
        plain = alpha == 1 and (beta == 0 or c is None)
        self.problem = matmul_problem(self.a, _dense_shape(b), self.dtype, self.space, plain)
        self.decision = decide(self.problem)
        self.executor: Any = None
        self.variant: Any = self.options.get("variant")
        self._result: Any = None
        #: How the route was chosen: "rule table", "forced by options", "from a tuning record of
        #: <date>", "cost model: <why>", "autotuned" (``explain`` prints it).
        self.choice = "rule table"
        self._tuning: RouteChoice = choose_route(self, b)
        #: Where autotune wrote its tuning record (None: not written).
        self.record_path: Any = None

    # ------------------------------------------------------------------------------ checks
    def _check(self, a: Any, b: Any, c: Any) -> None:
        want = result_shape(a, _dense_shape(b))
        if c is not None and _dense_shape(c) != want:
            raise ShapeError(f"C has shape {_dense_shape(c)} but alpha * A @ B has shape {want}")

    @staticmethod
    def _result_shape(a: Any, bshape: tuple[int, ...]) -> tuple[int, ...]:
        return result_shape(a, bshape)

    # ------------------------------------------------------------------------------ phases
    def _move_operands(self) -> None:
        place = self._place
        place.log(_log)
        self.a = place.tensor(self.a)
        self.b = place.move(self._b_in, _log, "B")
        self.c = place.move(self._c_in)
        xp = self._xp()
        # the one normalisation every route shares (SciPy, cuSPARSE, generated C / CUDA): B in
        # the compute dtype, C-contiguous or (2-D) Fortran order; strided views are copied
        from ust.backends.generated.launch import array_layout, dense_operand

        moved_b = self.b
        self.b = dense_operand(xp, self.b, self.dtype)
        # B needs no copy (its dtype and layout are the kernel's) and was not moved: a one-shot
        # call whose key fixes B's dtype, layout and space may hand its B straight to the executor
        self._b_as_is = self.b is moved_b and moved_b is self._b_in
        if self.c is not None:
            self.c = dense_operand(xp, self.c, self.dtype)
        shape = self._result_shape(self.a, _dense_shape(self.b))
        order = "F" if self.b.ndim == 2 and array_layout(self.b) == "col" else "C"
        self._out_order = order
        spare, self._spare_out = self._spare_out, None  # a one-shot call's unused result buffer
        self.out = (
            spare
            if _fits(spare, shape, self.dtype, order)
            else xp.empty(shape, dtype=self.dtype, order=order)
        )
        self._direct = not place.moves

    def _xp(self) -> Any:
        return import_cupy() if self.space.is_cuda else np

    def _build(self, rule: Rule, variant: Any) -> Any:
        t0 = time.perf_counter()
        ex = route_of(rule).build(self, rule, variant)
        _log.info("route %s prepared in %.3f ms", rule.route, 1e3 * (time.perf_counter() - t0))
        return ex

    def _plan(self) -> Any:
        self._move_operands()
        self.variant = self._tuning.variant_for(self)
        d = self.decision
        _log.info("route for %s: %s (%s; %s)", self.problem.op, d.route, d.reason, self.choice)
        try:
            self.executor = self._build(d.rule, self.variant)
        except Exception as exc:
            if self._tuning.forced:
                raise
            # a record's or the cost model's choice that does not build here: the rule table's does
            _log.warning(
                "route %s (variant %r, %s) cannot run here (%s: %s); using the rule table's choice",
                d.route, self.variant, self.choice, type(exc).__name__, exc,
            )  # fmt: skip
            self.decision, self.variant, self.choice = decide(self.problem), None, "rule table"
            self.executor = self._build(self.decision.rule, self.variant)
        return self

    def _stream(self) -> int:
        """The raw stream: the one given at construction, else CuPy's current one (read each call)."""
        return self._place.stream(self._stream_arg)

    def _execute(self, **kwargs: Any) -> Any:
        # the hot path: one executor call; delivery to another package/space only when needed
        out = self.executor.run(self.b, self.c, self.out, self._stream())
        return out if self._direct else self._deliver(out)

    def _run_cached(self, b: Any, c: Any, stream: Any) -> Any:
        """Run on new dense operands of the planned shape, dtype, layout and space (a hit of
        the one-shot cache).  On the CPU with every operand in place the executor gets them
        directly and allocates its own result (SciPy's ``A @ x`` does anyway): no result buffer
        made for nothing, no placement redone.  Elsewhere: the unchecked reset and execute."""
        if self._direct and not self.space.is_cuda and self.executor is not None:
            if not self._b_as_is:  # the key fixed dtype and layout: as the planned B needed
                b = _dense_operand()(np, b, self.dtype)
            c = None if c is None or self.beta == 0 else _dense_operand()(np, c, self.dtype)
            return self.executor.run(b, c, None, 0)
        if self._direct and self._b_as_is and self.executor is not None and type(b) is type(self.b):
            return self._run_on_device(b, c, stream)  # B is of the planned array type: as it is
        self._stream_arg = stream
        self.reset_operands_unchecked(b=b, c=c) if c is not None else self.reset_operands_unchecked(b=b)
        out = self.execute()
        self.out = None  # the next call allocates a fresh result: this one belongs to the caller
        self._hand_over()
        return out

    def _hand_over(self) -> None:
        """The last result is the caller's: an executor that keeps its result buffer (and
        would write the next result into it) must not reuse it."""
        detach = getattr(self.executor, "detach", None)
        if detach is not None:
            detach()

    def _run_on_device(self, b: Any, c: Any, stream: Any) -> Any:
        """The GPU twin of the CPU branch of :meth:`_run_cached`: B handed to the executor as it
        is (the key fixed its dtype, layout and device, and planning took it without a copy), a
        result made only where the executor does not make its own, no placement redone."""
        xp = self._xp()
        if c is not None and self.beta != 0:
            c = _dense_operand()(xp, c, self.dtype)
        else:
            c = None
        ex = self.executor
        out = None
        if not getattr(ex, "allocates_result", False):
            with xp.cuda.Device(self.space.device_id or 0):
                out = xp.empty(self._result_shape(self.a, b.shape), dtype=self.dtype, order=self._out_order)
        result = ex.run(b, c, out, self._place.stream(stream))
        self._hand_over()
        return result

    def _deliver(self, out: Any) -> Any:
        """The result in B's package and memory space (copied only when spaces differ)."""
        return self._place.back(out)

    def autotune(self, iterations: int = 5, *, record: bool = True) -> dict[str, float]:
        """Time every candidate route (and variant) on the real operands; keep the fastest.

        With ``record`` (the default), what was measured is written as a tuning record
        (:func:`ust.tune`), which later plans and one-shot calls on similar matrices follow."""
        self._require("autotune", "plan")
        timings: dict[str, float] = {}
        best: tuple[float, Any, Rule, Any] | None = None
        for rule in (self.decision.rule, *self.decision.alternatives):
            try:
                variants = self._variants(rule)
            except Exception as exc:  # a route that cannot run here is skipped, not fatal
                _log.info("autotune: %s unavailable (%s)", rule.route, exc)
                continue
            for variant in variants:
                try:
                    ex = self._build(rule, variant)
                    t = self._time(ex, iterations)
                except Exception as exc:
                    _log.info("autotune: %s/%s unavailable (%s)", rule.route, variant, exc)
                    continue
                timings[f"{rule.route}:{variant}"] = t
                if best is None or t < best[0]:
                    best = (t, ex, rule, variant)
                elif hasattr(ex, "free"):
                    ex.free()
        if best is not None:
            if self.executor is not best[1] and hasattr(self.executor, "free"):
                self.executor.free()
            _, self.executor, rule, self.variant = best
            self.decision = type(self.decision)(
                self.problem,
                rule,
                rule.reason_for(self.problem) + " (fastest when autotuned)",
                tuple(r for r in (self.decision.rule, *self.decision.alternatives) if r is not rule),
            )
            self.choice = "autotuned"
            _log.info("autotune chose %s variant %s: %s", rule.route, self.variant, timings)
            if record:
                self.record_path = self._tuning.store(self, timings)
        return timings

    def _variants(self, rule: Rule) -> tuple[Any, ...]:
        return route_of(rule).variants(self, rule)

    def _time(self, ex: Any, iterations: int) -> float:
        stream = self._stream()
        ex.run(self.b, self.c, self.out, stream)  # warm up (and compile)
        if self.space.is_cuda:
            from ust.runtime.streams import gpu_seconds_per_call

            return gpu_seconds_per_call(lambda: ex.run(self.b, self.c, self.out, stream), iterations)
        samples = []
        for _ in range(max(iterations, 3)):  # median: one slow run (thread start, page faults) is noise
            t0 = time.perf_counter()
            ex.run(self.b, self.c, self.out, stream)
            samples.append(time.perf_counter() - t0)
        return float(np.median(samples))

    def _reset_operands(self, **operands: Any) -> None:
        a, b, c = operands.get("a"), _array_like(operands.get("b")), _array_like(operands.get("c"))
        if a is not None:
            new = _as_tensor(a)
            if (
                new.format != self.a.format
                or tuple(new.shape) != tuple(self.a.shape)
                or new.dtype != self.a.dtype
            ):
                raise ShapeError("reset_operands: A must keep its format, shape and dtype")
            self.a = new
        if b is not None:
            if _dense_shape(b) != _dense_shape(self._b_in):
                raise ShapeError(f"reset_operands: B must keep its shape {_dense_shape(self._b_in)}")
            self._b_in = b
        if c is not None:
            if self._c_in is None or _dense_shape(c) != _dense_shape(self._c_in):
                raise ShapeError("reset_operands: C must keep its shape (and was given at construction)")
            self._c_in = c
        if self.is_planned:
            self._unchecked(a is not None)

    def reset_operands_unchecked(self, **operands: Any) -> None:
        """Swap operands without any checks (the caller guarantees shapes, dtypes and spaces)."""
        if "b" in operands:
            self._b_in = _array_like(operands["b"])
        if "c" in operands:
            self._c_in = _array_like(operands["c"])
        if "a" in operands:
            self.a = _as_tensor(operands["a"])
        self._unchecked("a" in operands)

    def _unchecked(self, rebuild: bool) -> None:
        self._move_operands()
        if rebuild:  # executors hold A (descriptors, kernels), never B, C or the result
            if hasattr(self.executor, "free"):
                self.executor.free()
            self.executor = self._build(self.decision.rule, self.variant)

    def _free(self) -> None:
        if self.executor is not None and hasattr(self.executor, "free"):
            self.executor.free()
        self.executor = None

    # ------------------------------------------------------------------------------ saved plans
    def _plan_payload(self) -> dict[str, Any]:
        return {
            "route": self.decision.route,
            "variant": self.variant,
            "format": self.a.format.to_text(),
            "shape": list(self.a.shape),
            "dtype": self.dtype,
            "op": self.problem.op,
        }

    # device and versions of a saved plan: the stateful base's (self.space; NumPy, SciPy, CuPy, CUDA)

    @classmethod
    def load_plan(cls, path: Any, a: Any, b: Any, c: Any = None, **kwargs: Any) -> Matmul:
        """A planned Matmul reusing a saved route/variant choice.

        A file that is no saved matmul plan raises :class:`~ust.runtime.stateful.PlanFileError`.
        A plan made elsewhere (ust / library version, device), one whose contents are damaged
        (fields of the wrong type, missing or extra keys, a route that is no candidate for these
        operands, an unknown variant such as ``"outer:gABC"``), one made for another format or
        op, or a saved choice that fails to build here: a WARNING says why and the Matmul plans
        afresh (``from_saved_plan`` is then False).  See :mod:`ust.runtime.stateful`.
        """
        mm = cls(a, b, c, **kwargs)
        fresh_decision, fresh_variant = mm.decision, mm.variant
        fresh_choice, fresh_tuning = mm.choice, mm._tuning
        choice = mm._checked_plan(path, mm._saved_choice)
        if choice is not None:
            mm.decision = type(mm.decision)(
                mm.problem,
                choice["rule"],
                choice["rule"].reason_for(mm.problem) + " (from a saved plan)",
            )
            mm.variant = choice["variant"]
            mm.choice, mm._tuning = (
                "from a saved plan",
                RouteChoice(key=mm._tuning.key, stats=mm._tuning.stats),
            )
            try:
                mm.plan()
            except Exception as exc:  # the saved choice does not build here: the default does
                _log.warning(
                    "the saved plan %s (route %s, variant %r) cannot be used here (%s: %s); planning afresh",
                    os.fspath(path),
                    choice["rule"].route,
                    choice["variant"],
                    type(exc).__name__,
                    exc,
                )
                mm.decision, mm.variant, mm.choice = fresh_decision, fresh_variant, fresh_choice
                mm._tuning = fresh_tuning
            else:
                mm.from_saved_plan = True
                return mm
        mm.plan()
        mm.from_saved_plan = False
        return mm

    def _saved_choice(self, saved: dict[str, Any], where: str) -> dict[str, Any]:
        """The saved route (a Rule among this problem's candidates) and variant; PlanFileError if unusable."""
        plan = check_plan_fields(
            saved,
            {
                "route": str,
                "variant": (type(None), str, int),
                "format": str,
                "shape": list,
                "dtype": str,
                "op": str,
            },
            where=where,
        )
        fmt = self.a.format.to_text()
        if plan["format"] != fmt or plan["op"] != self.problem.op:
            raise PlanFileError(
                f"{where} was made for {plan['op']} with format {_cut(plan['format'])}, not for "
                f"{self.problem.op} with {fmt}"
            )
        rules = (self.decision.rule, *self.decision.alternatives)
        rule = next((r for r in rules if r.route == plan["route"]), None)
        if rule is None:
            raise PlanFileError(
                f"{where} is damaged or does not fit: route {_cut(plan['route'])} is not a candidate "
                f"here (candidates: {', '.join(r.route for r in rules)})"
            )
        variant = plan["variant"]
        known = known_variant(rule.route, variant)
        if known and rule.route == "cusparse" and variant is not None:
            # this format's algorithms only: no number reaches cuSPARSE unchecked
            known = variant in self._variants(rule)
        if not known:
            raise PlanFileError(
                f"{where} is damaged: variant {_cut(repr(variant))} is not a variant of route {rule.route} "
                f"(generated routes: auto, storage or outer, optionally ':g1' ... ':g32' or ':nnz'; "
                "cuSPARSE: an algorithm number; others: null)"
            )
        return {"rule": rule, "variant": variant}

    def explain(self) -> str:
        """The plan as text: route, reason, how it was chosen, placement and the other candidates."""
        return explain_decision(self.decision, self.space, self._b_space, self.a, self.choice)


def explain_decision(
    decision: Any, space: ExecutionSpace, operands_space: ExecutionSpace, a: Any, choice: str = "rule table"
) -> str:
    p = decision.problem
    lines = [
        f"operation: {p.op} (alpha * A @ B + beta * C)",
        f"A: {a.format.standard_name or 'custom'} {a.format.to_text()}  shape {tuple(a.shape)}  {a.dtype} values, {np.dtype(a.index_dtype)} indices",
        f"operands in {operands_space.describe()} memory; execution space: {space.describe()}",
        f"route: {decision.route}",
        f"reason: {decision.reason}",
        f"chosen: {choice}",
    ]
    if decision.rule.convert_to:
        lines.append(f"conversion: A -> {decision.rule.convert_to} once, at plan time")
    if operands_space != space:
        lines.append(
            f"transfers: operands to {space.describe()} at plan time, the result back after each execute"
        )
    if decision.alternatives:
        lines.append(
            "other candidates (autotune times them): " + ", ".join(r.route for r in decision.alternatives)
        )
    return "\n".join(lines)


def _fits(out: Any, shape: tuple[int, ...], dtype: str, order: str) -> bool:
    """Whether a result buffer no caller holds can serve as ``out`` again."""
    if out is None or tuple(out.shape) != shape or str(out.dtype) != dtype:
        return False
    return bool(out.flags.f_contiguous if order == "F" and out.ndim == 2 else out.flags.c_contiguous)


def _is_sparse_operand(x: Any) -> bool:
    return bool(kind(x) == SPARSE)


def _is_dense_tensor(x: Any) -> bool:
    from ust.tensor import Tensor

    return isinstance(x, Tensor) and x.format.is_dense and x.format.is_identity


# One-shot plans kept for the last few operands, by identity: repeated ``ust.matmul(A, x)``
# calls with the same A skip planning (descriptors, kernels, workspace).  The entry holds
# references to the operands' buffers, so an id cannot be reused while it is cached.
_ONE_SHOT: OrderedDict[tuple[Any, ...], Matmul] = OrderedDict()
_ONE_SHOT_SIZE = 8
_BUFFER_ATTRS = ("data", "indices", "indptr", "row", "col", "coords", "offsets")


def _layout_key(b: Any) -> str | None:
    """B's memory layout as the executors see it: a cached plan's dense descriptors fix it."""
    from ust.backends.generated.launch import array_layout

    return array_layout(b)


_DENSE_OPERAND: Any = None


def _dense_operand() -> Any:
    """:func:`ust.backends.generated.launch.dense_operand`, imported once (``import ust`` loads no
    backend; an import statement per call costs more than the check it imports)."""
    global _DENSE_OPERAND
    if _DENSE_OPERAND is None:
        from ust.backends.generated.launch import dense_operand

        _DENSE_OPERAND = dense_operand
    return _DENSE_OPERAND


def _dense_key(x: Any) -> tuple[Any, ...]:
    """What a cached plan fixes about a dense operand: shape, dtype, layout, package, space
    (a NumPy array's in O(1) without string formatting: it is on every one-shot call)."""
    t = type(x)
    if t is np.ndarray and x.ndim <= 2:  # the flags fix array_layout for 1-D and 2-D
        flags = x.flags
        return (np.ndarray, x.shape, x.dtype, flags.c_contiguous, flags.f_contiguous)
    cupy = sys.modules.get("cupy")
    if cupy is not None and t is getattr(cupy, "ndarray", None) and x.ndim <= 2:  # the same, and its device
        flags = x.flags
        return (t, x.shape, x.dtype, flags.c_contiguous, flags.f_contiguous, x.data.device_id)
    return (tuple(x.shape), str(x.dtype), _layout_key(x), operand_package(x), str(operand_space(x)))


def _one_shot_key(
    a: Any, b: Any, c: Any, alpha: complex, beta: complex, execution: Any, options: Any
) -> tuple[Any, ...] | None:
    if options:
        return None
    try:
        bk = _dense_key(b)
        ck = None if c is None else _dense_key(c)
    except AttributeError:  # torch or array-likes: no cache
        return None
    if isinstance(a, Tensor):  # its storage, not the scipy-style views its properties compute
        bufs = tuple(id(v) for v in a.buffers().values())
    else:
        # plain attributes (SciPy keeps its arrays in the instance dict): no failed getattr per call
        own = getattr(a, "__dict__", None)
        if own is not None:  # _BUFFER_ATTRS spelt out: a generator per call costs a microsecond
            g = own.get
            bufs = (
                id(g("data")), id(g("indices")), id(g("indptr")), id(g("row")), id(g("col")),
                id(g("coords")), id(g("offsets")),
            )  # fmt: skip
        else:
            bufs = tuple(id(getattr(a, attr, None)) for attr in _BUFFER_ATTRS)
    return (id(a), bufs, bk, ck, alpha, beta, execution if execution is None else str(execution))


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    execution: Any = None,
    options: dict[str, Any] | None = None,
    stream: Any = None,
    epilog: str | None = None,
    epilog_params: dict[str, Any] | None = None,
    format: Any = None,  # noqa: A002 - result format of a sparse @ sparse product
) -> Any:
    """One-shot ``alpha * A @ B + beta * C``; the result comes back in B's package and memory space.

    A sparse B makes it a SpGEMM (result in ``format``, default CSR); an all-dense A falls
    through to :func:`ust.dense.matmul` (cuBLASLt / BLAS); ``epilog`` (e.g. ``"max(y, 0)"``)
    is applied to the result in place.

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
    >>> bool(np.allclose(ust.matmul(A, np.ones(20), alpha=0.5), 0.5 * (A @ np.ones(20))))
    True
    """
    if epilog is None and type(b) is np.ndarray and (c is None or type(c) is np.ndarray):
        # the repeated call: a cached plan for these very operands runs at once
        key = _one_shot_key(a, b, c, alpha, beta, execution, options)
        mm = _ONE_SHOT.get(key) if key is not None else None
        if mm is not None and not mm.is_freed:
            _ONE_SHOT.move_to_end(key)  # type: ignore[arg-type]
            return mm._run_cached(b, c, stream)
    if epilog is not None:  # a bad epilogue or parameter fails before the multiplication
        from ust.algebra.epilogue import check_epilog_params
        from ust.codegen.epilog import compile_epilog

        check_epilog_params(epilog_params)
        compile_epilog(epilog).check_params(epilog_params or {})
    b, c = _array_like(b), _array_like(c)
    if _is_sparse_operand(b):
        if c is not None or beta != 0:
            raise UnsupportedError(
                "sparse @ sparse takes no C/beta; supported: ust.matmul(A, B, alpha=..., format=...)"
            )
        out = matmul_sparse(a, b, format=format or "CSR", execution=execution)
        out = out if alpha == 1 else multiply(out, alpha)
    elif _is_dense_tensor(a):
        from ust.api import dense

        _log.info("A is stored all-dense: the dense route (cuBLASLt on the GPU, BLAS on the CPU) runs it")
        out = dense.matmul(a.todense(), b, c, alpha=alpha, beta=beta, execution=execution)
    else:
        key = _one_shot_key(a, b, c, alpha, beta, execution, options)
        mm = _ONE_SHOT.get(key) if key is not None else None
        if mm is not None and not mm.is_freed:
            _ONE_SHOT.move_to_end(key)  # type: ignore[arg-type]
            out = mm._run_cached(b, c, stream)
            if epilog is not None:
                out = apply_epilog(out, epilog, epilog_params or {})
            return out
        else:
            mm = Matmul(a, b, c, alpha=alpha, beta=beta, execution=execution, options=options, stream=stream)
            mm.plan()
            if key is not None:
                _ONE_SHOT[key] = mm
                while len(_ONE_SHOT) > _ONE_SHOT_SIZE:
                    _ONE_SHOT.popitem(last=False)[1].free()
        out = mm.execute()
        if key is not None:
            # the next call allocates a fresh result when this one went to the caller; a buffer the
            # route left unused (SciPy returns its own array) serves again: no page faults for it
            mm._spare_out = None if out is mm.out else mm.out
            mm.out = None
    if epilog is not None:
        out = apply_epilog(out, epilog, epilog_params or {})
    return out


@register(OPERATORS, "matmul_operator")
def matmul_operator(a: Any, b: Any) -> Any:
    """``a @ b`` as the ``@`` operator means it: SpGEMM when both are sparse, else ``ust.matmul``."""
    if kind(a) == SPARSE and kind(b) == SPARSE:
        return matmul_sparse(a, b)
    if kind(a) == SPARSE:
        return matmul(a, b)
    return rmatmul(a, b)


@register(OPERATORS, "rmatmul")
def rmatmul(x: Any, a: Any) -> Any:
    """``x @ A`` for a dense ``x`` (1-D or 2-D) and a sparse ``A``: ``(A.T @ x.T).T``, where ``A.T``
    is a free view (CSR.T is CSC) planned like any other SpMV / SpMM."""
    if kind(x) == SPARSE:
        return matmul_sparse(x, a)
    if isinstance(x, (list, tuple)):  # array-likes as NumPy reads them
        x = np.asarray(x)
    t = as_tensor(a)
    at = transpose(t)
    nd = getattr(x, "ndim", np.ndim(x))
    if nd == 1:
        return matmul(at, x)
    if nd == 2:
        return matmul(at, x.T).T
    raise ShapeError(f"x @ A takes a 1-D or 2-D x, got {nd}-D")


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _unsupported_route(name: str) -> UnsupportedError:
    return UnsupportedError(f"route {name!r} is not available")
