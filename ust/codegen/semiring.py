"""The IR of a semiring's add and multiply (:class:`ust.grammar.semiring.Semiring`)."""

from __future__ import annotations

from collections.abc import Callable

from ust.codegen.ir import Bin, Const, Expr, Select, Un
from ust.grammar import ast
from ust.grammar.parser import parse_epilog
from ust.grammar.semiring import BUILTIN, Semiring, resolve_semiring

__all__ = ["BUILTIN", "Semiring", "add_ir", "mul_ir", "resolve_semiring"]

_IR_BIN: dict[str, Callable[[Expr, Expr], Expr]] = {
    "+": lambda a, b: Bin("+", a, b),
    "-": lambda a, b: Bin("-", a, b),
    "*": lambda a, b: Bin("*", a, b),
}
_IR_CALL: dict[str, Callable[[Expr, Expr], Expr]] = {
    "min": lambda a, b: Bin("min", a, b),
    "max": lambda a, b: Bin("max", a, b),
}


def _logical(op: str, a: Expr, b: Expr) -> Expr:
    """1 or 0 from ``(a != 0) op (b != 0)``."""
    zero, one = Const(0, "value"), Const(1, "value")
    return Select(Bin(op, Bin("!=", a, zero), Bin("!=", b, zero)), one, zero)


def _ir(e: ast.ExprAST, a: Expr, b: Expr) -> Expr:
    if isinstance(e, ast.Num):
        return Const(e.value, "value")
    if isinstance(e, ast.Var):
        return a if e.name == "a" else b
    if isinstance(e, ast.Neg):
        return Un("-", _ir(e.operand, a, b))
    if isinstance(e, ast.BinOp):
        return _IR_BIN[e.op](_ir(e.left, a, b), _ir(e.right, a, b))
    assert isinstance(e, ast.Call)
    return _IR_CALL[e.fn](_ir(e.args[0], a, b), _ir(e.args[1], a, b))


def add_ir(sr: Semiring, a: Expr, b: Expr) -> Expr:
    """``sr``'s add of two IR values."""
    if sr.name == "or_and":
        return _logical("||", a, b)
    return _ir(parse_epilog(sr.add), a, b)


def mul_ir(sr: Semiring, a: Expr, b: Expr) -> Expr:
    """``sr``'s multiply of two IR values."""
    if sr.name == "or_and":
        return _logical("&&", a, b)
    if sr.name == "plus_pair":
        return Const(1, "value")
    return _ir(parse_epilog(sr.multiply), a, b)
