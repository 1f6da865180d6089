"""Parse format text into :mod:`ust.grammar.ast` trees.

The LALR parser is built once per process, on first use (building it costs a few
milliseconds; importing ust must not).  Lark's exceptions are turned into
:class:`~ust.runtime.errors.UstSyntaxError` with a caret excerpt and the expected tokens.

Limits (checked before anything walks a tree recursively; the LALR parser itself keeps an
explicit stack and never recurses):

* text length: :data:`MAX_EPILOG_LENGTH` characters for an epilogue, :data:`MAX_SPEC_LENGTH`
  for one format, :data:`MAX_FILE_LENGTH` for a file of declarations -- a UstSyntaxError;
* nesting: :data:`MAX_DEPTH` levels of parentheses (counted on the text) and of operators
  and calls (a chain ``y + y + ... + y`` of N operators nests N deep; counted while the
  parser builds the tree, one integer per node) -- a UstSyntaxError;
* integers (block sizes, ``structured[n, m]``): at most :data:`MAX_INT` = 2**63 - 1, checked
  on the digits before they are converted -- a :class:`~ust.runtime.errors.FormatError`
  (rule ``integer-range``) naming the line and column;
* epilogue numbers: finite as a double (``1e999`` is refused) -- a UstSyntaxError;
* the text must be a ``str``: anything else is an :class:`~ust.runtime.errors.InvalidTypeError`
  (also a ``TypeError``).
"""

from __future__ import annotations

import functools
import math
import re
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

from ust.grammar import ast
from ust.grammar.lexer import install_fast_lexer
from ust.runtime.errors import FormatError, InvalidTypeError, UstSyntaxError

__all__ = [
    "MAX_DEPTH",
    "MAX_EPILOG_LENGTH",
    "MAX_FILE_LENGTH",
    "MAX_INT",
    "MAX_SPEC_LENGTH",
    "parse_compute",
    "parse_epilog",
    "parse_file",
    "parse_spec",
]

#: The deepest an expression may nest: parentheses, and operators and calls in the tree.
MAX_DEPTH = 100
#: The longest epilogue text, in characters.
MAX_EPILOG_LENGTH = 10_000
#: The longest single format text (a map or a ``#sparse_tensor.encoding``), in characters.
MAX_SPEC_LENGTH = 100_000
#: The longest file of declarations, in characters.
MAX_FILE_LENGTH = 10_000_000
MAX_INT = ast.MAX_INT
_MAX_INT_DIGITS = len(str(MAX_INT))
_LIMITS = {
    "epilog": MAX_EPILOG_LENGTH,
    "compute": MAX_EPILOG_LENGTH,
    "single": MAX_SPEC_LENGTH,
    "file": MAX_FILE_LENGTH,
}
_WHAT = {
    "epilog": "an epilogue",
    "compute": "an index expression",
    "single": "a format",
    "file": "a file of declarations",
}
_PARENS = re.compile(r"[()]")
_EXCERPT_WIDTH = 100  # characters of the offending line shown in an error

# Friendly names for the grammar's terminals in "expected ..." messages.
_TOKEN_NAMES = {
    "NAME": "a name",
    "INT": "an integer",
    "SIGNED_NUMBER": "a number",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LESSTHAN": "'<'",
    "MORETHAN": "'>'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "PLUS": "'+'",
    "MINUS": "'-'",
    "FLOORDIV": "'floordiv'",
    "MOD": "'mod'",
    "ENCODING_OPEN": "'#sparse_tensor.encoding'",
    "FORMAT": "'format'",
    "MAP": "'map'",
    "STRUCTURED": "'structured'",
    "ARROW": "'->'",
    "NUMBER": "a number",
    "COMPARE": "a comparison",
    "STAR": "'*'",
    "SLASH": "'/'",
    "$END": "end of input",
}


@functools.cache
def _parser() -> Lark:
    # The transformer runs inside the LALR parser: no parse tree is built and no second
    # pass walks it (three times faster than ``transform(parse(text))``).
    grammar = resources.files("ust.grammar").joinpath("ust.lark").read_text(encoding="utf-8")
    parser = Lark(
        grammar,
        parser="lalr",
        start=["file", "single", "epilog", "compute"],
        transformer=_ToAst(),
        maybe_placeholders=False,
    )
    install_fast_lexer(parser)  # same language, a third less time per declaration
    return parser


def _pos(tok: Any) -> tuple[int, int]:
    return int(getattr(tok, "line", 0) or 0), int(getattr(tok, "column", 0) or 0)


class _Positioned(Exception):
    """Raised inside the parser (which does not see the text); :func:`_parse` adds the excerpt."""

    def __init__(self, message: str, line: int, column: int, *, rule: str = "") -> None:
        super().__init__(message)
        self.message, self.line, self.column, self.rule = message, line, column, rule


def _deep(node: Any) -> Any:
    if node.depth > MAX_DEPTH:
        raise _Positioned(
            f"the expression is nested too deeply: more than {MAX_DEPTH} levels of operators or "
            f"calls (a chain of N operators nests N deep); the limit is "
            f"ust.grammar.parser.MAX_DEPTH = {MAX_DEPTH}",
            0,
            0,
        )
    return node


@v_args(inline=True)
class _ToAst(Transformer):
    """Lark tree -> frozen dataclasses; no semantics here."""

    def int_operand(self, tok: Token) -> int:
        digits = str(tok).lstrip("0") or "0"
        if len(digits) > _MAX_INT_DIGITS or int(digits) > MAX_INT:
            line, col = _pos(tok)
            shown = digits if len(digits) <= 24 else f"{digits[:10]}...{digits[-10:]} ({len(digits)} digits)"
            raise _Positioned(
                f"[integer-range] line {line}, column {col}: the integer {shown} is out of range; "
                f"integers in the format language are at most 2**63 - 1 = {MAX_INT} (a block size or "
                "structured[n, m] beyond int64 is meaningless)",
                line,
                col,
                rule="integer-range",
            )
        return int(digits)

    def param_operand(self, tok: Token) -> str:
        return str(tok)

    def dim_expr(self, name: Token) -> tuple[ast.LevelExprAST, Token]:
        return ast.DimExpr(str(name)), name

    def floordiv_expr(self, name: Token, _op: Token, c: ast.Operand) -> tuple[ast.LevelExprAST, Token]:
        return ast.FloorDivExpr(str(name), c), name

    def mod_expr(self, name: Token, _op: Token, c: ast.Operand) -> tuple[ast.LevelExprAST, Token]:
        return ast.ModExpr(str(name), c), name

    def add_expr(self, a: Token, b: Token) -> tuple[ast.LevelExprAST, Token]:
        return ast.AddExpr(str(a), str(b)), a

    def sub_expr(self, a: Token, b: Token) -> tuple[ast.LevelExprAST, Token]:
        return ast.SubExpr(str(a), str(b)), a

    def props(self, *names: Token) -> tuple[str, ...]:
        return tuple(str(n) for n in names)

    def level_type(self, name: Token, props: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"type_name": str(name), "properties": props}

    def structured_type(self, n: ast.Operand, m: ast.Operand) -> dict[str, Any]:
        return {"type_name": "structured", "structured": (n, m)}

    def level(self, expr: tuple[ast.LevelExprAST, Token], lt: dict[str, Any]) -> ast.LevelAST:
        line, col = _pos(expr[1])
        return ast.LevelAST(expr=expr[0], line=line, column=col, **lt)

    def dims(self, *names: Token) -> tuple[Token, ...]:
        return names  # tokens, so that ``map`` can report where the map starts

    def map(self, dims: tuple[Token, ...], _arrow: Token, *levels: ast.LevelAST) -> ast.MapAST:
        line, col = _pos(dims[0])
        return ast.MapAST(tuple(str(d) for d in dims), levels, line, col)

    def map_entry(self, m: ast.MapAST) -> ast.MapAST:
        return m

    def attr_value(self, *toks: Token) -> str:
        return " : ".join(str(t) for t in toks)

    def attr_entry(self, key: Token, value: str) -> tuple[str, str]:
        return str(key), value

    def encoding(self, _open: Token, *entries: Any) -> ast.EncodingAST:
        maps = [e for e in entries if isinstance(e, ast.MapAST)]
        attrs = tuple(e for e in entries if isinstance(e, tuple))
        if len(maps) != 1:
            line, col = _pos(_open)
            raise UstSyntaxError(
                f"line {line}, column {col}: a #sparse_tensor.encoding needs exactly one "
                f"'map = ...' entry, found {len(maps)}",
                line=line,
                column=col,
            )
        return ast.EncodingAST(maps[0], attrs)

    def params(self, *names: Token) -> tuple[str, ...]:
        return tuple(str(n) for n in names)

    def decl(self, name: Token, *rest: Any) -> ast.DeclAST:
        params: tuple[str, ...] = rest[0] if len(rest) == 2 else ()
        line, col = _pos(name)
        return ast.DeclAST(str(name), params, rest[-1], line, col)

    # -- epilogue expressions
    def number_e(self, tok: Token) -> ast.ExprAST:
        value = float(tok)  # no digit limit for floats; overflow gives inf, refused here
        if not math.isfinite(value):
            line, col = _pos(tok)
            text = str(tok)
            shown = text if len(text) <= 24 else f"{text[:10]}...{text[-10:]} ({len(text)} characters)"
            raise _Positioned(
                f"line {line}, column {col}: the number {shown} is out of range of a double "
                f"(at most about 1.8e308)",
                line,
                col,
            )
        return ast.Num(value)

    def name_e(self, tok: Token) -> ast.ExprAST:
        return ast.Var(str(tok))

    def call_e(self, name: Token, *args: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.Call(str(name), tuple(args)))

    def index_e(self, name: Token, *args: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.Index(str(name), tuple(args)))

    def compare_e(self, a: ast.ExprAST, op: Token, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp(str(op), a, b))

    def add_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp("+", a, b))

    def sub_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp("-", a, b))

    def mul_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp("*", a, b))

    def div_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp("/", a, b))

    def pow_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.BinOp("**", a, b))

    def neg_e(self, a: ast.ExprAST) -> ast.ExprAST:
        return _deep(ast.Neg(a))

    def epilog(self, e: ast.ExprAST) -> ast.ExprAST:
        return e

    # -- index notation
    def lhs_scalar_c(self, name: Token) -> ast.AccessAST:
        return ast.AccessAST(str(name), (), *_pos(name))

    def lhs_access_c(self, name: Token, *indices: Token) -> ast.AccessAST:
        seen: set[str] = set()
        for tok in indices:
            if str(tok) in seen:
                line, col = _pos(tok)
                raise _Positioned(
                    f"line {line}, column {col}: the output {name} repeats the index {tok}; each output "
                    "index must be distinct",
                    line,
                    col,
                )
            seen.add(str(tok))
        return ast.AccessAST(str(name), tuple(str(t) for t in indices), *_pos(name))

    def access_c(self, name: Token, *indices: Token) -> ast.TermAST:
        return ast.AccessAST(str(name), tuple(str(t) for t in indices), *_pos(name))

    def scalar_c(self, name: Token) -> ast.TermAST:
        return ast.ScalarAST(str(name), *_pos(name))

    def number_c(self, tok: Token) -> ast.TermAST:
        text = str(tok)
        if text.isdigit():
            if len(text) > _MAX_INT_DIGITS or int(text) > MAX_INT:
                line, col = _pos(tok)
                raise _Positioned(
                    f"line {line}, column {col}: the integer {text[:24]} is out of range (at most 2**63 - 1)",
                    line,
                    col,
                )
            return ast.LiteralAST(int(text))
        num = self.number_e(tok)
        assert isinstance(num, ast.Num)
        return ast.LiteralAST(num.value)

    def add_c(self, a: ast.TermAST, b: ast.TermAST) -> ast.TermAST:
        return _deep(ast.OpAST("+", a, b))

    def sub_c(self, a: ast.TermAST, b: ast.TermAST) -> ast.TermAST:
        return _deep(ast.OpAST("-", a, b))

    def mul_c(self, a: ast.TermAST, b: ast.TermAST) -> ast.TermAST:
        return _deep(ast.OpAST("*", a, b))

    def neg_c(self, a: ast.TermAST) -> ast.TermAST:
        return _deep(ast.NegAST(a))

    def compute(self, lhs: ast.AccessAST, rhs: ast.TermAST) -> ast.ComputeAST:
        return ast.ComputeAST(lhs, rhs)

    def file(self, *decls: ast.DeclAST) -> ast.FileAST:
        return ast.FileAST(tuple(decls))

    def single(self, spec: ast.SpecAST) -> ast.SpecAST:
        return spec


def _describe_expected(expected: set[str] | frozenset[str]) -> str:
    names = sorted({_TOKEN_NAMES.get(e, repr(e.lower()) if e.isupper() else e) for e in expected})
    if not names:
        return "nothing more"
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _syntax_error(text: str, err: UnexpectedInput) -> UstSyntaxError:
    line = int(getattr(err, "line", 0) or 0)
    column = int(getattr(err, "column", 0) or 0)
    at_end = isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END")
    if at_end or line <= 0:
        lines = text.split("\n") or [""]
        line = len(lines)
        column = len(lines[-1]) + 1
        found = "end of input"
    elif isinstance(err, UnexpectedToken):
        tok = err.token
        found = repr(str(tok))
    elif isinstance(err, UnexpectedCharacters):
        at = err.pos_in_stream if err.pos_in_stream is not None else -1
        found = repr(text[at]) if 0 <= at < len(text) else "?"
    else:  # pragma: no cover - lark has no other subclasses today
        found = "?"
    msg = f"line {line}, column {column}: unexpected {found}; expected {_describe_expected(_expected(err))}"
    return UstSyntaxError(f"{msg}\n{_excerpt(text, line, column)}", line=line, column=column, text=text)


def _expected(err: UnexpectedInput) -> set[str]:
    """Terminals the parser would take here.

    LALR states are shared between contexts, so a state's table (``expected``) can list
    tokens that only fit elsewhere ('format' after a lone map); ``accepts`` asks the
    parser itself, with the whole stack, and is exact.
    """
    if isinstance(err, UnexpectedToken):
        try:
            accepts = set(err.accepts or ())
        except Exception:  # accepts replays reductions; any failure there -> the table
            accepts = set()
        if accepts:
            return accepts
    return set(getattr(err, "expected", None) or getattr(err, "allowed", None) or ())


def _excerpt(text: str, line: int, column: int) -> str:
    """The offending source line and a caret under ``column`` (both 1-based)."""
    lines = text.split("\n")
    src_line = lines[line - 1] if 0 < line <= len(lines) else ""
    col = max(column - 1, 0)
    if len(src_line) > _EXCERPT_WIDTH:  # a window around the column, never a 5000-digit line
        lo = max(col - _EXCERPT_WIDTH // 2, 0)
        hi = min(lo + _EXCERPT_WIDTH, len(src_line))
        head, tail = ("..." if lo > 0 else ""), ("..." if hi < len(src_line) else "")
        src_line, col = f"{head}{src_line[lo:hi]}{tail}", col - lo + len(head)
    return f"    {src_line}\n    {' ' * col}^"


def _line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _check_limits(text: str, start: str) -> None:
    """Length and parenthesis depth, on the text, before the parser runs."""
    limit = _LIMITS[start]
    if len(text) > limit:
        raise UstSyntaxError(
            f"{_WHAT[start]} of {len(text)} characters is too long; the limit is {limit} characters",
            line=1,
            column=1,
        )
    if text.count("(") <= MAX_DEPTH:
        return
    depth = 0
    for m in _PARENS.finditer(text):
        depth = depth + 1 if m.group() == "(" else max(depth - 1, 0)
        if depth > MAX_DEPTH:
            line, col = _line_col(text, m.start())
            raise UstSyntaxError(
                f"line {line}, column {col}: the expression is nested too deeply: more than "
                f"{MAX_DEPTH} levels of parentheses; the limit is ust.grammar.parser.MAX_DEPTH = "
                f"{MAX_DEPTH}\n{_excerpt(text, line, col)}",
                line=line,
                column=col,
                text=text,
            )


def _parse(text: str, start: str) -> Any:
    if not isinstance(text, str):
        what = {"epilog": "an epilogue", "compute": "an index expression"}.get(start, "format text")
        raise InvalidTypeError(f"{what} must be a str, not {type(text).__name__}")
    _check_limits(text, start)
    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as err:
        raise _syntax_error(text, err) from None
    except _Positioned as err:
        msg = err.message if err.line <= 0 else f"{err.message}\n{_excerpt(text, err.line, err.column)}"
        if err.rule:
            raise FormatError(msg, rule=err.rule) from None
        raise UstSyntaxError(msg, line=err.line, column=err.column, text=text) from None
    except UstSyntaxError as err:
        if err.source_text:
            raise
        # raised by a transformer callback, which does not see the text: add the excerpt
        raise UstSyntaxError(
            f"{err.msg}\n{_excerpt(text, err.line, err.column)}", line=err.line, column=err.column, text=text
        ) from None


def parse_spec(text: str) -> ast.SpecAST:
    """Parse one map or one ``#sparse_tensor.encoding`` attribute."""
    return _parse(text, "single")


def parse_file(text: str) -> ast.FileAST:
    """Parse a file of ``format NAME = ...`` declarations."""
    return _parse(text, "file")


def parse_epilog(text: str) -> ast.ExprAST:
    """Parse an epilogue expression such as ``max(y, 0)`` or ``y * scale``."""
    return _parse(text, "epilog")


def parse_compute(text: str) -> ast.ComputeAST:
    """Parse index notation such as ``C(i,j) = A(i,k) * B(k,j) + D(i,j)``."""
    return _parse(text, "compute")
