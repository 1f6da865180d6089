"""The planner's view of an algebra op, the route decision, and the text ``ust.explain`` prints.

The rule table (:mod:`ust.plan.rules`) is shared with SpMV/SpMM; algebra ops add one field,
``other``: the second operand's class text (``"CSR"``, ``"BSR[2, 2]"``), ``"DENSE"``,
``"SCALAR"``, or ``""`` for a unary op.  A forced ``route=`` (tests, benchmarks) must be one the
table lists for the problem, else UnsupportedError names the ones it does list.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ust.plan import Decision, Problem, classify
from ust.plan.planner import c_compiler_available, format_text
from ust.plan.planner import choose as plan_choose

__all__ = ["AlgebraProblem", "choose", "class_text", "explain_text", "problem", "problem_of"]


@dataclasses.dataclass(frozen=True)
class AlgebraProblem(Problem):
    """A :class:`~ust.plan.rules.Problem` plus the second operand's class (``""``: none)."""

    other: str = ""


def class_text(t: Any) -> str:
    """``"CSR"``, ``"BSR[2, 2]"``, ``"OTHER"``: the format class of a tensor, with parameters."""
    fc = classify(t.format)
    return str(fc)


def problem(
    op: str, a: Any, *, device: str, dtype: Any, other: Any = None, other_kind: str = ""
) -> AlgebraProblem:
    """The planner's view of ``op`` on tensor ``a`` (and a second operand ``other``); the same
    facts give the same (cached) problem, so a repeated call does no planner work."""
    on_gpu = device.startswith("cuda")
    return _problem(
        op,
        a.format,
        on_gpu,
        np.dtype(dtype),
        np.dtype(a.index_dtype),
        True if on_gpu else c_compiler_available(),
        a.ndim,
        max(a.shape, default=0),
        None if other is None else other.format,
        other_kind,
    )


def problem_of(
    op: str,
    fmt: Any,
    device: str,
    dtype: Any,
    index_dtype: Any,
    ndim: int,
    max_extent: int,
    *,
    other: Any = None,
    other_kind: str = "",
) -> AlgebraProblem:
    """:func:`problem` from the facts themselves (a caller that holds no Tensor yet)."""
    on_gpu = device.startswith("cuda")
    has_compiler = True if on_gpu else c_compiler_available()
    return _problem(
        op,
        fmt,
        on_gpu,
        np.dtype(dtype),
        np.dtype(index_dtype),
        has_compiler,
        ndim,
        max_extent,
        other,
        other_kind,
    )


@functools.lru_cache(maxsize=1024)
def _problem(
    op: str,
    fmt: Any,
    on_gpu: bool,
    dtype: np.dtype[Any],
    index_dtype: np.dtype[Any],
    has_compiler: bool,
    ndim: int,
    max_extent: int,
    other_fmt: Any,
    other_kind: str,
) -> AlgebraProblem:
    fc = classify(fmt)
    canonical = fc.canonical
    other_text = other_kind.upper()
    if other_fmt is not None:
        ofc = classify(other_fmt)
        other_text = str(ofc)
        canonical = canonical and ofc.canonical
    return AlgebraProblem(
        op=op,
        device="cuda" if on_gpu else "cpu",
        format_class=fc.name,
        format_params=fc.params,
        canonical=canonical,
        dtype=str(dtype),
        index_dtype=str(index_dtype),
        plain=True,
        has_compiler=has_compiler,
        ndim=ndim,
        batched=bool(fmt.nbatch),
        max_extent=max_extent,
        other=other_text,
    )


def choose(p: AlgebraProblem, route: str | None = None) -> Decision:
    """The planner's decision, or the forced ``route`` when the table lists it for ``p``."""
    return plan_choose(p, route)


def _fmt(p: Problem) -> str:
    return format_text(p)


_OPS = {
    "spgemm": "A @ B with both operands sparse (SpGEMM)",
    "sddmm": "alpha * (A @ B) at S's stored positions + beta * S (SDDMM)",
    "add": "elementwise A + B / A - B (union)",
    "multiply": "elementwise A * B (intersection)",
    "scale": "A * scalar, A / scalar, -A, A * dense (structure kept)",
    "sum": "sum over all entries or one axis",
    "max": "max with implicit zeros counted",
    "min": "min with implicit zeros counted",
    "transpose": "transpose (a permuted map over the same buffers)",
}


def explain_text(
    d: Decision, a: Any, *, result_format: Any = None, extra: str = "", device: str | None = None
) -> str:
    """The plan as text: operation, operands, route, reason, other candidates (``device``: where
    it runs, ``"cpu"`` / ``"cuda:N"``, when ``execution=`` chose it; else where ``a`` is)."""
    p = d.problem
    lines = [
        f"operation: {p.op} ({_OPS.get(p.op, p.op)})",
        f"A: {a.format.standard_name or 'custom'} {a.format.to_text()}  shape {tuple(a.shape)}  "
        f"{a.dtype} values, {np.dtype(a.index_dtype)} indices",
    ]
    other = getattr(p, "other", "")
    if other:
        lines.append(f"second operand: {other}")
    lines += [
        f"execution space: {device or (a.device if p.device == 'cuda' else 'cpu')}",
        f"route: {d.route}",
        f"reason: {d.reason}",
    ]
    if d.rule.convert_to:
        lines.append(f"conversion: operands -> {d.rule.convert_to} first")
    if result_format is not None:
        lines.append(f"result format: {result_format.standard_name or 'custom'} {result_format.to_text()}")
    if extra:
        lines.append(extra)
    if d.alternatives:
        lines.append("other candidates: " + ", ".join(dict.fromkeys(r.route for r in d.alternatives)))
    return "\n".join(lines)
