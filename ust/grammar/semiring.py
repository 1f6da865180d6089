"""Semirings: the (add, multiply, identity) an index expression computes with.

GraphBLAS's built-ins by name, or a user's :class:`Semiring` with DSL expressions over ``a``
and ``b`` (``add="min(a, b)"``), checked by the one grammar.  This module is what a semiring
*is*: its text, identity, the dtypes it takes and its NumPy meaning (the host combines partial
results with it, the tests use it as the reference); :mod:`ust.codegen.semiring` turns it
into IR.  Positions not stored are the additive identity.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ust.grammar import ast
from ust.runtime.errors import InvalidTypeError, InvalidValueError, UnsupportedError

__all__ = ["BUILTIN", "Semiring", "resolve_semiring"]

#: The binary operators and calls a semiring expression may use.
_BINARY = ("+", "-", "*")
_CALLS = ("min", "max")
_NP_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
}
_NP_CALL: dict[str, Callable[[Any, Any], Any]] = {"min": np.minimum, "max": np.maximum}


@dataclass(frozen=True)
class Semiring:
    """``Semiring(add="min(a, b)", multiply="a + b", identity=float("inf"))``.

    ``add`` must be associative and commutative with ``identity`` as its neutral element (ust
    reorders and splits reductions across threads).  Expressions use ``a``, ``b``, numbers,
    ``+ - *``, ``min`` and ``max``.
    """

    add: str
    multiply: str
    identity: float | int = 0
    name: str = ""
    #: the additive operator a target may apply atomically ("+", "min", "max", "or"; "" if none)
    atomic: str = field(default="", compare=False)
    #: whether ``-`` (a subtraction in the expression) means anything: only for plus_times
    ring: bool = field(default=False, compare=False)
    #: value kinds it takes: "any", "real" (no complex) or "logical" (bool / integers)
    takes: str = field(default="real", compare=False)

    def __post_init__(self) -> None:
        for what in ("add", "multiply"):
            text = getattr(self, what)
            if not isinstance(text, str):
                raise InvalidTypeError(
                    f"Semiring {what} must be DSL text over a and b, not {type(text).__name__}"
                )
            _check(_parse(text), what)
        if not isinstance(self.identity, (int, float)) or isinstance(self.identity, bool):
            raise InvalidTypeError(f"Semiring identity must be a number, not {type(self.identity).__name__}")

    @property
    def label(self) -> str:
        return (
            self.name or f"Semiring(add={self.add!r}, multiply={self.multiply!r}, identity={self.identity!r})"
        )

    def identity_for(self, dtype: Any) -> Any:
        """The additive identity as a value of ``dtype`` (+-inf become the integer limits)."""
        dt = np.dtype(dtype)
        v = self.identity
        if dt.kind in "iu" and isinstance(v, float) and math.isinf(v):
            info = np.iinfo(dt)
            return dt.type(info.max if v > 0 else info.min)
        return dt.type(v)

    # -- NumPy --------------------------------------------------------------------------------
    def add_np(self, a: Any, b: Any) -> Any:
        """Combine two arrays of partial results elementwise."""
        if self.name == "or_and":
            return ((a != 0) | (b != 0)).astype(np.result_type(a, b))
        return _np(_parse(self.add), a, b)

    def mul_np(self, a: Any, b: Any) -> Any:
        if self.name == "or_and":
            return ((a != 0) & (b != 0)).astype(np.result_type(a, b))
        if self.name == "plus_pair":
            return np.ones_like(np.asarray(a) + np.asarray(b))
        return _np(_parse(self.multiply), a, b)

    def check_dtype(self, dtype: Any) -> None:
        """Refuse a value dtype the semiring cannot take (before any work)."""
        dt = np.dtype(dtype)
        if self.takes == "logical" and dt.kind not in "biu":
            raise UnsupportedError(f"semiring {self.label} takes bool or integer values, not {dt}")
        if self.takes in ("real", "logical") and dt.kind == "c":
            raise UnsupportedError(
                f"semiring {self.label} is not defined for complex values ({dt}): min and max need an order"
            )


def _parse(text: str) -> ast.ExprAST:
    from ust.grammar.parser import parse_epilog  # Lark is loaded when a semiring is first used

    return parse_epilog(text)


def _check(e: ast.ExprAST, what: str) -> None:
    if isinstance(e, ast.Num):
        return
    if isinstance(e, ast.Var):
        if e.name not in ("a", "b"):
            raise InvalidValueError(f"Semiring {what}: unknown name {e.name!r}; use a and b")
        return
    if isinstance(e, ast.Neg):
        _check(e.operand, what)
        return
    if isinstance(e, ast.BinOp) and e.op in _BINARY:
        _check(e.left, what)
        _check(e.right, what)
        return
    if isinstance(e, ast.Call) and e.fn in _CALLS and len(e.args) == 2:
        for x in e.args:
            _check(x, what)
        return
    raise InvalidValueError(
        f"Semiring {what}: only a, b, numbers, + - *, min(x, y) and max(x, y) are allowed"
    )


def _np(e: ast.ExprAST, a: Any, b: Any) -> Any:
    if isinstance(e, ast.Num):
        return e.value
    if isinstance(e, ast.Var):
        return a if e.name == "a" else b
    if isinstance(e, ast.Neg):
        return -_np(e.operand, a, b)
    if isinstance(e, ast.BinOp):
        return _NP_BIN[e.op](_np(e.left, a, b), _np(e.right, a, b))
    assert isinstance(e, ast.Call)
    return _NP_CALL[e.fn](_np(e.args[0], a, b), _np(e.args[1], a, b))


_INF = float("inf")


class _Builtins(Mapping[str, Semiring]):
    """GraphBLAS's built-in semirings by name, made (and their text checked, which loads the
    parser) on first use, not when ``ust`` is imported."""

    @functools.cached_property
    def _table(self) -> dict[str, Semiring]:
        return {
            s.name: s
            for s in (
                Semiring("a + b", "a * b", 0, "plus_times", atomic="+", ring=True, takes="any"),
                Semiring("min(a, b)", "a + b", _INF, "min_plus", atomic="min"),
                Semiring("max(a, b)", "a + b", -_INF, "max_plus", atomic="max"),
                Semiring("max(a, b)", "a * b", -_INF, "max_times", atomic="max"),
                Semiring("max(a, b)", "a * b", 0, "or_and", atomic="max", takes="logical"),
                Semiring("a + b", "1", 0, "plus_pair", atomic="+", takes="any"),
            )
        }

    def __getitem__(self, name: str) -> Semiring:
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


#: GraphBLAS's built-in semirings by name.
BUILTIN: Mapping[str, Semiring] = _Builtins()


def resolve_semiring(s: Any) -> Semiring:
    """A built-in by name (``None`` is ``plus_times``) or a :class:`Semiring` as it is."""
    if s is None:
        return BUILTIN["plus_times"]
    if isinstance(s, Semiring):
        return s
    if isinstance(s, str):
        if s in BUILTIN:
            return BUILTIN[s]
        raise UnsupportedError(
            f"unknown semiring {s!r}; supported: {', '.join(BUILTIN)} or ust.Semiring(...)"
        )
    raise InvalidTypeError(f"semiring must be a name or a ust.Semiring, not {type(s).__name__}")
