"""User epilogues written as text: ``max(y, 0)``, ``y * scale``, ``where(y > t, y, 0)``.

One parsed, validated expression serves every target: C and CUDA source text for fusion
into a generated kernel, and an in-place NumPy/CuPy evaluation for routes where a library
call (SciPy, cuSPARSE) produced ``y`` and no kernel is generated.  nvmath-python needs
numba-compiled Python callables for this; text keeps it portable across CPU and GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ust.grammar import ast
from ust.runtime.errors import InvalidTypeError, InvalidValueError, UnsupportedError, UstSyntaxError
from ust.runtime.xp import namespace

__all__ = ["BINARY_OPS", "COMPARISONS", "Epilog", "compile_epilog"]

#: name -> (arity, C / CUDA function for double; an "f" suffix gives the float one).
_FUNCTIONS: dict[str, tuple[int, str]] = {
    "min": (2, "fmin"),
    "max": (2, "fmax"),
    "abs": (1, "fabs"),
    "exp": (1, "exp"),
    "log": (1, "log"),
    "sqrt": (1, "sqrt"),
    "tanh": (1, "tanh"),
    "where": (3, ""),
}
_XP_NAMES = {
    "min": "minimum",
    "max": "maximum",
    "abs": "abs",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "tanh": "tanh",
}
#: The comparisons among them (real values only).
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_ARITH = frozenset({"+", "-", "*", "/", "**"})
_REAL_ONLY = frozenset({"min", "max", "where"}) | COMPARISONS


@dataclass(frozen=True)
class Epilog:
    """A validated epilogue: its source text, tree, value variable and parameter names."""

    text: str
    tree: ast.ExprAST
    value: str
    params: tuple[str, ...]

    # -- source emission ----------------------------------------------------------------------
    def to_c(
        self, *, real_type: str = "double", value_expr: str | None = None, param_prefix: str = ""
    ) -> str:
        """C / CUDA expression text (real types). ``value_expr`` replaces the value variable."""
        suffix = "f" if real_type == "float" else ""

        def emit(e: ast.ExprAST) -> str:
            if isinstance(e, ast.Num):
                return f"(({real_type}){e.value!r})"
            if isinstance(e, ast.Var):
                if e.name == self.value:
                    return value_expr or e.name
                return f"{param_prefix}{e.name}"
            if isinstance(e, ast.Neg):
                return f"(-{emit(e.operand)})"
            if isinstance(e, ast.BinOp):
                if e.op == "**":
                    return f"pow{suffix}({emit(e.left)}, {emit(e.right)})"
                if e.op in COMPARISONS:
                    return f"(({real_type})({emit(e.left)} {e.op} {emit(e.right)}))"
                return f"({emit(e.left)} {e.op} {emit(e.right)})"
            assert isinstance(e, ast.Call)  # compile_epilog refuses subscripts
            args = [emit(a) for a in e.args]
            if e.fn == "where":
                return f"(({args[0]}) != 0 ? ({args[1]}) : ({args[2]}))"
            return f"{_FUNCTIONS[e.fn][1]}{suffix}({', '.join(args)})"

        return emit(self.tree)

    # -- array evaluation -----------------------------------------------------------------------
    def apply(
        self, y: Any, params: Mapping[str, Any] | None = None, *, out: Any = None, xp: Any = None
    ) -> Any:
        """Evaluate on an array, writing into ``out`` (default: ``y``, in place).

        ``xp`` is the array namespace (NumPy, CuPy); by default the one ``y`` belongs to.
        """
        xp = xp if xp is not None else namespace(y)
        values = dict(params or {})
        self.check_params(values)
        if xp.iscomplexobj(y) and self.uses_real_only():
            raise UnsupportedError(
                f"epilogue {self.text!r} uses comparisons or min/max/where, which are defined for "
                "real dtypes only; supported for complex: + - * / ** abs exp log sqrt tanh"
            )

        def ev(e: ast.ExprAST) -> Any:
            if isinstance(e, ast.Num):
                return e.value
            if isinstance(e, ast.Var):
                return y if e.name == self.value else values[e.name]
            if isinstance(e, ast.Neg):
                return -ev(e.operand)
            if isinstance(e, ast.BinOp):
                a, b = ev(e.left), ev(e.right)
                return BINARY_OPS[e.op](a, b)
            assert isinstance(e, ast.Call)  # compile_epilog refuses subscripts
            args = [ev(a) for a in e.args]
            if e.fn == "where":
                return xp.where(args[0], args[1], args[2])
            return getattr(xp, _XP_NAMES[e.fn])(*args)

        try:
            result = ev(self.tree)
        except (ZeroDivisionError, OverflowError) as exc:  # scalar-only subexpressions (Python floats)
            raise InvalidValueError(
                f"epilogue {self.text!r}: a subexpression of constants and parameters fails ({exc})"
            ) from None
        target = y if out is None else out
        target[...] = result
        return target

    def check_params(self, values: Mapping[str, Any]) -> None:
        missing = [p for p in self.params if p not in values]
        if missing:
            raise UnsupportedError(
                f"epilogue {self.text!r} needs values for parameter(s) {', '.join(missing)} "
                "(pass them as epilog_params={...})"
            )

    def uses_real_only(self) -> bool:
        def walk(e: ast.ExprAST) -> bool:
            if isinstance(e, ast.BinOp):
                return e.op in _REAL_ONLY or walk(e.left) or walk(e.right)
            if isinstance(e, ast.Neg):
                return walk(e.operand)
            if isinstance(e, ast.Call):
                return e.fn in _REAL_ONLY or any(walk(a) for a in e.args)
            return False

        return walk(self.tree)


#: The binary operators of the expression language on array values (epilogues, FFT callbacks).
BINARY_OPS: dict[str, Any] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def compile_epilog(text: str, value: str = "y") -> Epilog:
    """Parse and validate an epilogue; ``value`` names the op's result variable.

    The text is bounded before it is parsed (:mod:`ust.grammar.parser`: at most
    ``MAX_EPILOG_LENGTH`` characters, nested at most ``MAX_DEPTH`` deep), so the recursive
    walkers here and in the emitters never run out of stack; a text that is no ``str`` is an
    :class:`~ust.runtime.errors.InvalidTypeError`.
    """
    if not isinstance(text, str):
        raise InvalidTypeError(f"an epilogue must be a str such as 'max(y, 0)', not {type(text).__name__}")
    if not isinstance(value, str):
        raise InvalidTypeError(f"the epilogue's value name must be a str, not {type(value).__name__}")
    return _compile_epilog(text, value)


@functools.lru_cache(maxsize=256)
def _compile_epilog(text: str, value: str) -> Epilog:
    from ust.grammar.parser import parse_epilog

    tree = parse_epilog(text)
    params: list[str] = []

    def check(e: ast.ExprAST) -> None:
        if isinstance(e, ast.Var):
            if e.name in _FUNCTIONS:
                raise UstSyntaxError(f"epilogue {text!r}: '{e.name}' is a function; call it as {e.name}(...)")
            if e.name != value and e.name not in params:
                params.append(e.name)
        elif isinstance(e, ast.Neg):
            check(e.operand)
        elif isinstance(e, ast.BinOp):
            check(e.left)
            check(e.right)
        elif isinstance(e, ast.Index):
            raise UnsupportedError(
                f"epilogue {text!r}: subscripts such as {e.name}[...] are supported in FFT callbacks only "
                "(ust.dense.fft(..., epilog=...)); pass scalars here"
            )
        elif isinstance(e, ast.Call):
            if e.fn not in _FUNCTIONS:
                raise UnsupportedError(
                    f"epilogue {text!r}: unknown function '{e.fn}'; supported: {', '.join(sorted(_FUNCTIONS))}"
                )
            arity = _FUNCTIONS[e.fn][0]
            if len(e.args) != arity:
                raise UnsupportedError(
                    f"epilogue {text!r}: {e.fn} takes {arity} argument(s), got {len(e.args)}"
                )
            for a in e.args:
                check(a)

    check(tree)
    if value not in _names(tree):
        raise UnsupportedError(f"epilogue {text!r} does not use the value '{value}'")
    return Epilog(text, tree, value, tuple(params))


def _names(e: ast.ExprAST) -> set[str]:
    if isinstance(e, ast.Var):
        return {e.name}
    if isinstance(e, ast.Neg):
        return _names(e.operand)
    if isinstance(e, ast.BinOp):
        return _names(e.left) | _names(e.right)
    if isinstance(e, ast.Call):
        return set().union(*(_names(a) for a in e.args)) if e.args else set()
    return set()
