"""Choose a route for a :class:`~ust.plan.rules.Problem`, say why, and explain it as text."""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass, field

from ust.plan.rules import RULES, Problem, Rule
from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = ["Decision", "c_compiler_available", "candidates", "decide", "supported_summary"]

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


def supported_summary(op: str) -> str:
    rows = {
        (r.device, ", ".join(sorted(r.formats)) if r.formats != frozenset({"*"}) else "any format")
        for r in RULES
        if r.op == op
    }
    return "; ".join(f"{dev}: {fmts}" for dev, fmts in sorted(rows))


@functools.lru_cache(maxsize=4096)
def decide(problem: Problem) -> Decision:
    """The first matching rule, or UnsupportedError naming the combination and what is supported."""
    found = candidates(problem)
    if not found:
        raise UnsupportedError(
            f"no route for {problem.op} on {problem.device} with a {problem.format_class} operand of "
            f"{problem.dtype} values and {problem.index_dtype} indices; supported for {problem.op}: "
            f"{supported_summary(problem.op)} (value dtypes float32, float64, complex64, complex128; "
            "index dtypes int32, int64)"
        )
    rule = found[0]
    fmt = problem.format_class + (
        f"[{', '.join(map(str, problem.format_params))}]" if problem.format_params else ""
    )
    reason = rule.reason.format(fmt=fmt, dtype=problem.dtype)
    return Decision(problem, rule, reason, found[1:])
