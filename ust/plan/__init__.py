"""The planner: a rule table from (op, format class, device, dtypes) to routes, and explain()."""

from ust.plan import convert as _convert_routes  # noqa: F401 - registers the conversion planner and routes
from ust.plan.classify import FormatClass, classify
from ust.plan.planner import Decision, candidates, decide
from ust.plan.rules import RULES, Problem, Rule

__all__ = ["RULES", "Decision", "FormatClass", "Problem", "Rule", "candidates", "classify", "decide"]
