"""Choose a route for a :class:`~ust.plan.rules.Problem`, say why, and explain it as text."""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass, field

from ust.plan.rules import ANY, RULES, Problem, Rule
from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = [
    "Decision",
    "c_compiler_available",
    "candidates",
    "choose",
    "decide",
    "format_text",
    "rules_for",
    "supported_summary",
]

_log = get_logger("plan")


@functools.cache
def c_compiler_available() -> bool:
    """Whether a system C compiler (``cc``/``gcc``/``clang``) is on the PATH."""
    return any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@dataclass(frozen=True)
class Decision:
    """The chosen rule for a problem, with the reason filled in, and the other candidates."""

    problem: Problem
    rule: Rule
    reason: str
    alternatives: tuple[Rule, ...] = field(default=())

    @property
    def route(self) -> str:
        return self.rule.route


def candidates(problem: Problem) -> tuple[Rule, ...]:
    """Every rule that matches, in table order (the first is the default choice)."""
    return tuple(r for r in RULES if r.matches(problem))


def rules_for(op: str, device: str | None = None) -> tuple[Rule, ...]:
    """The rules of ``op`` (on ``device``), in table order."""
    return tuple(r for r in RULES if r.op == op and (device is None or r.device == device))


def _names(values: frozenset[str], anything: str) -> str:
    return anything if values is ANY else ", ".join(sorted(values))


def supported_summary(op: str) -> str:
    """What the rule table supports for ``op``, per device: the formats of its rules (library
    ones first), the value dtypes and the index dtypes."""
    order = ("float32", "float64", "complex64", "complex128")
    rows = []
    for dev in sorted({r.device for r in rules_for(op)}):
        rules = rules_for(op, dev)
        fmts = " / ".join(dict.fromkeys(_names(r.formats, "any format") for r in rules))
        dts = frozenset().union(*(r.dtypes for r in rules if r.dtypes is not ANY))
        idx = frozenset().union(*(r.index_dtypes for r in rules if r.index_dtypes is not ANY))
        vals = sorted(dts, key=lambda d: (order.index(d) if d in order else len(order), d))
        values = "any" if any(r.dtypes is ANY for r in rules) else ", ".join(vals)
        index = "any" if any(r.index_dtypes is ANY for r in rules) else ", ".join(sorted(idx))
        rows.append(f"{dev}: {fmts} (value dtypes {values}; index dtypes {index})")
    return "; ".join(rows)


def format_text(problem: Problem) -> str:
    """``"CSR"``, ``"BSR[2, 2]"``: the problem's format class with its parameters."""
    return problem.format_text


@functools.lru_cache(maxsize=4096)
def decide(problem: Problem) -> Decision:
    """The first matching rule, or UnsupportedError naming the combination and what is supported."""
    found = candidates(problem)
    if not found:
        raise UnsupportedError(
            f"no route for {problem.op} on {problem.device} with a {problem.format_class} operand of "
            f"{problem.dtype} values and {problem.index_dtype} indices; supported for {problem.op}: "
            f"{supported_summary(problem.op)}"
        )
    rule = found[0]
    reason = rule.reason.format(fmt=format_text(problem), dtype=problem.dtype)
    return Decision(problem, rule, reason, _others(found, rule))


def _others(found: tuple[Rule, ...] | list[Rule], rule: Rule) -> tuple[Rule, ...]:
    """The candidates besides ``rule``, one per route (a route may be listed by several rules)."""
    seen = {rule.route}
    out = []
    for r in found:
        if r.route not in seen:
            seen.add(r.route)
            out.append(r)
    return tuple(out)


def choose(problem: Problem, route: str | None = None) -> Decision:
    """The planner's decision, or the forced ``route`` when the table lists it for ``problem``
    (UnsupportedError naming the candidates when it does not)."""
    d = decide(problem)
    if route is None or route == d.route:
        _log.info("route for %s: %s (%s)", problem.op, d.route, d.reason)
        return d
    found = candidates(problem)
    for rule in found:
        if rule.route == route:
            reason = rule.reason.format(fmt=format_text(problem), dtype=problem.dtype) + " (forced by route=)"
            _log.info("route for %s: %s (%s)", problem.op, rule.route, reason)
            return Decision(problem, rule, reason, _others(found, rule))
    names = ", ".join(dict.fromkeys(r.route for r in found))
    raise UnsupportedError(
        f"route {route!r} does not apply to {problem.op} on {problem.device} with {format_text(problem)}; "
        f"candidates: {names}"
    )
