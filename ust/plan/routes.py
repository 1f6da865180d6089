"""Routes as objects: what a rule's route name stands for.

A :class:`~ust.plan.rules.Rule` names its route (``"cusparse"``, ``"generated-c"``, ...); the
name is what saved plans, ``route=`` overrides and ``explain`` text carry.  The object behind
the name is a :class:`Route`: how to ``build`` the executor, which ``variants`` autotuning may
time, and whether the route is ``available`` here.  The layer that owns a route's
implementation registers it (``register`` / the ``route`` decorator) when it is imported;
``import ust`` imports every one of them and then :func:`freeze` closes the registry, so the
table of routes is fixed for the life of the process, as the rule table is.

Names are per op: ``("spgemm", "cusparse")`` and ``("spmv", "cusparse")`` are two routes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ust.runtime.errors import UnsupportedError, UstError

if TYPE_CHECKING:
    from ust.plan.rules import Rule

__all__ = ["ROUTES", "Route", "freeze", "is_frozen", "lookup", "register", "route", "route_of"]


def _one_variant(*_args: Any) -> tuple[Any, ...]:
    return (None,)


def _always(*_args: Any) -> bool:
    return True


@dataclass(frozen=True)
class Route:
    """One way to run an op: ``build(*args)`` returns the executor (or the result) the op's caller
    runs; ``variants(*args)`` the variants autotuning times (``(None,)``: one); ``available()``
    whether what the route needs is present here (a library, a compiler)."""

    op: str
    name: str
    build: Callable[..., Any]
    variants: Callable[..., tuple[Any, ...]] = _one_variant
    available: Callable[..., bool] = _always
    doc: str = ""


_REGISTRY: dict[tuple[str, str], Route] = {}
#: The registered routes by (op, name), read-only.
ROUTES: Mapping[tuple[str, str], Route] = MappingProxyType(_REGISTRY)
_FROZEN = [False]


def register(r: Route) -> Route:
    """Add ``r`` (UstError once frozen, or when (op, name) is taken by another route)."""
    if _FROZEN[0]:
        raise UstError(f"the route registry is frozen after import; cannot register {r.op}/{r.name}")
    key = (r.op, r.name)
    old = _REGISTRY.get(key)
    if old is not None and old != r:
        raise UstError(f"route {r.op}/{r.name} is already registered")
    _REGISTRY[key] = r
    return r


def route(
    ops: str | Iterable[str],
    name: str,
    *,
    variants: Callable[..., tuple[Any, ...]] | None = None,
    available: Callable[..., bool] | None = None,
    doc: str = "",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the function as the ``build`` of route ``name`` for each op in ``ops``."""
    names = (ops,) if isinstance(ops, str) else tuple(ops)

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in names:
            register(
                Route(op, name, fn, variants or _one_variant, available or _always, doc or (fn.__doc__ or ""))
            )
        return fn

    return deco


def lookup(op: str, name: str) -> Route:
    """The route ``name`` of ``op`` (UnsupportedError naming the registered ones when missing)."""
    try:
        return _REGISTRY[(op, name)]
    except KeyError:
        known = ", ".join(sorted(n for o, n in _REGISTRY if o == op)) or "none"
        raise UnsupportedError(f"route {name!r} is not available for {op}; registered: {known}") from None


def route_of(rule: Rule) -> Route:
    """The Route object behind a rule's route name."""
    return lookup(rule.op, rule.route)


def freeze() -> None:
    """Close the registry (``import ust`` calls it once every layer has registered its routes)."""
    _FROZEN[0] = True


def is_frozen() -> bool:
    return _FROZEN[0]
