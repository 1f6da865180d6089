"""How a matmul's route and variant are chosen before planning: forced, recorded, or modelled.

In order: ``options={"route": ..., "variant": ...}`` forces them (UnsupportedError naming the
candidates when they cannot run); else a tuning record for this kind of problem on this device
(:mod:`ust.plan.tuning`, stored by :mod:`ust.backends.generated.tuning_store`) gives the route
autotuning found fastest; else the cost model (:mod:`ust.plan.cost`) chooses from the matrix's
cheap statistics; where none applies (tensor-times-vector, batched operands) the rule table's
first candidate stands.  ``Matmul.choice`` keeps which, for ``explain``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ust.plan.cost import choose_by_cost
from ust.plan.planner import Decision, choose
from ust.plan.routes import route_of
from ust.plan.rules import Rule
from ust.plan.stats import MatrixStats, matrix_stats
from ust.plan.tuning import RecordKey, check_record, make_record, record_key
from ust.runtime.errors import InvalidTypeError, UnsupportedError
from ust.runtime.log import get_logger
from ust.runtime.spaces import ExecutionSpace
from ust.runtime.stateful import plan_device, plan_versions, ust_version

__all__ = ["RouteChoice", "choose_route", "known_variant"]

_log = get_logger("ops.matmul")

#: Variant names saved plans and records may hold for the generated routes (see ust.codegen.schedule.variants).
_GENERATED_VARIANT = re.compile(r"(auto|storage|outer)(:g(1|2|4|8|16|32)|:nnz)?")


def known_variant(route: str, variant: Any) -> bool:
    """Whether ``variant`` is a well-formed variant of ``route`` (checked before anything parses it)."""
    if variant is None:
        return True
    if route.startswith("generated"):
        return isinstance(variant, str) and _GENERATED_VARIANT.fullmatch(variant) is not None
    if route == "cusparse":  # a cuSPARSE algorithm enum
        return isinstance(variant, int) and not isinstance(variant, bool) and 0 <= variant < 64
    return False


def device_text(space: ExecutionSpace) -> str | None:
    """The device records are kept for ("cpu", "cuda:0 NVIDIA H200 sm_90"); None where it cannot
    be asked (``explain`` of a GPU plan on a machine without one)."""
    try:
        return plan_device(space)
    except Exception:
        return None


@dataclass
class RouteChoice:
    """What :func:`choose_route` decided beyond the Decision: whether it was forced, the record
    key (None: no records for this problem), how to check the variant, the cost model's GPU
    threads per row."""

    forced: bool = False
    key: RecordKey | None = None
    stats: MatrixStats | None = None
    check: str = ""  # "forced" | "record" | ""
    group: int | None = None

    def variant_for(self, mm: Any) -> Any:
        """The variant to build, checked against the route's own variants (operands moved)."""
        v = mm.variant
        rule = mm.decision.rule
        if v is None and self.group is not None and rule.route == "generated-cuda":
            offered = _variants(mm, rule)
            v = next((x for x in offered if isinstance(x, str) and x.endswith(f":g{self.group}")), None)
        if self.check and v is not None:
            offered = _variants(mm, rule)
            if v not in offered:
                names = ", ".join(map(repr, offered)) or "none"
                if self.check == "forced":
                    raise UnsupportedError(
                        f"variant {v!r} is not a variant of route {rule.route} for these operands; "
                        f"candidates: {names}"
                    )
                _log.warning(
                    "the tuning record's variant %r is not one route %s offers here (%s); using its default",
                    v,
                    rule.route,
                    names,
                )
                v = None
        return v

    def store(self, mm: Any, timings: dict[str, float]) -> Path | None:
        """Write what autotune measured as the record of this problem (None: nothing written)."""
        if self.key is None or not timings:
            return None
        from ust.backends.generated.tuning_store import write_record

        doc = make_record(
            self.key, mm.decision.route, mm.variant, timings, ust_version(), plan_versions(mm.space)
        )
        path = write_record(self.key.digest, doc)
        if path is not None:
            _log.info("tuning record for %s written to %s", mm.problem.op, path)
        return path


def _variants(mm: Any, rule: Rule) -> tuple[Any, ...]:
    return tuple(route_of(rule).variants(mm, rule))


def _check_options(options: dict[str, Any]) -> tuple[str | None, Any]:
    route, variant = options.get("route"), options.get("variant")
    if route is not None and not isinstance(route, str):
        raise InvalidTypeError(
            f"options['route'] must be a route name (a string), not {type(route).__name__}"
        )
    if variant is not None and (isinstance(variant, bool) or not isinstance(variant, (str, int))):
        raise InvalidTypeError(
            f"options['variant'] must be a variant name or a cuSPARSE algorithm number, not {type(variant).__name__}"
        )
    return route, variant


def _k_and_layout(b: Any, a_ndim: int) -> tuple[int, str | None]:
    shape = tuple(int(s) for s in b.shape)
    k = 1 if len(shape) == 1 else shape[-1]
    try:
        from ust.backends.generated.launch import array_layout

        layout = array_layout(b) if len(shape) > 1 else "-"
    except AttributeError:  # torch tensors, array-likes: no flags
        layout = None
    return k, layout


def choose_route(mm: Any, b: Any) -> RouteChoice:
    """Set ``mm.decision`` / ``mm.variant`` / ``mm.choice`` from the options, a record or the cost
    model; the returned RouteChoice finishes the choice at plan time."""
    route, variant = _check_options(mm.options)
    problem = mm.problem
    cands = (mm.decision.rule, *mm.decision.alternatives)
    if route is not None:
        d = choose(problem, route)
        mm.decision = Decision(
            problem, d.rule, d.rule.reason_for(problem) + " (forced by route=)", d.alternatives
        )
        mm.choice = "forced by options['route']"
    if variant is not None and not known_variant(mm.decision.route, variant):
        raise UnsupportedError(
            f"variant {variant!r} is not a variant of route {mm.decision.route} (generated routes: auto, "
            "storage or outer, optionally ':g1' ... ':g32'; cuSPARSE: an algorithm number; others: none)"
        )
    forced = route is not None or variant is not None
    if variant is not None and route is None:
        mm.choice = "rule table (variant forced by options['variant'])"
    if problem.op not in ("spmv", "spmm") or mm.a.ndim != 2:
        return RouteChoice(forced=forced, check="forced" if variant is not None else "")
    stats = matrix_stats(mm.a)
    k, layout = _k_and_layout(b, mm.a.ndim)
    device = device_text(mm.space)
    key = None if device is None else record_key(problem, mm.a.format, stats, k, layout, device)
    if forced:
        return RouteChoice(True, key, stats, "forced" if variant is not None else "")
    if key is not None:
        from ust.backends.generated.tuning_store import read_record

        doc = read_record(key.digest)
        tuned = None
        if doc is not None:
            tuned = check_record(doc, key, ust_version(), plan_versions(mm.space), cands)
        if tuned is not None and known_variant(tuned.rule.route, tuned.variant):
            mm.decision = Decision(
                problem,
                tuned.rule,
                tuned.rule.reason_for(problem) + f" (from a tuning record of {tuned.date})",
                tuple(r for r in cands if r is not tuned.rule),
            )
            mm.variant = tuned.variant
            mm.choice = f"from a tuning record of {tuned.date}"
            return RouteChoice(False, key, stats, "record")
        if tuned is not None:
            _log.warning(
                "ignoring a damaged tuning record: variant %r is not a variant of %s",
                tuned.variant,
                tuned.rule.route,
            )
    cost = choose_by_cost(problem, stats, k, cands)
    if len(cands) < 2:  # one route: the cost model still picks its GPU threads per row
        group = cost.group if cost.rule is cands[0] else None
        if group is not None:
            mm.choice = f"rule table; threads per row from the cost model: {cost.reason}"
        return RouteChoice(False, key, stats, "", group)
    mm.decision = Decision(
        problem, cost.rule, cost.rule.reason_for(problem), tuple(r for r in cands if r is not cost.rule)
    )
    mm.choice = f"cost model: {cost.reason}"
    return RouteChoice(False, key, stats, "", cost.group)
