"""Parse format text into :mod:`ust.grammar.ast` trees.

The LALR parser is built once per process, on first use (building it costs a few
milliseconds; importing ust must not).  Lark's exceptions are turned into
:class:`~ust.runtime.errors.UstSyntaxError` with a caret excerpt and the expected tokens.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

from ust.grammar import ast
from ust.grammar.lexer import install_fast_lexer
from ust.runtime.errors import UstSyntaxError

__all__ = ["parse_epilog", "parse_file", "parse_spec"]

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
        start=["file", "single", "epilog"],
        transformer=_ToAst(),
        maybe_placeholders=False,
    )
    install_fast_lexer(parser)  # same language, a third less time per declaration
    return parser


def _pos(tok: Any) -> tuple[int, int]:
    return int(getattr(tok, "line", 0) or 0), int(getattr(tok, "column", 0) or 0)


@v_args(inline=True)
class _ToAst(Transformer):
    """Lark tree -> frozen dataclasses; no semantics here."""

    def int_operand(self, tok: Token) -> int:
        return int(tok)

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
        return ast.Num(float(tok))

    def name_e(self, tok: Token) -> ast.ExprAST:
        return ast.Var(str(tok))

    def call_e(self, name: Token, *args: ast.ExprAST) -> ast.ExprAST:
        return ast.Call(str(name), tuple(args))

    def compare_e(self, a: ast.ExprAST, op: Token, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp(str(op), a, b)

    def add_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp("+", a, b)

    def sub_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp("-", a, b)

    def mul_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp("*", a, b)

    def div_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp("/", a, b)

    def pow_e(self, a: ast.ExprAST, b: ast.ExprAST) -> ast.ExprAST:
        return ast.BinOp("**", a, b)

    def neg_e(self, a: ast.ExprAST) -> ast.ExprAST:
        return ast.Neg(a)

    def epilog(self, e: ast.ExprAST) -> ast.ExprAST:
        return e

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
    return f"    {src_line}\n    {' ' * max(column - 1, 0)}^"


def _parse(text: str, start: str) -> Any:
    if not isinstance(text, str):
        raise UstSyntaxError(f"format text must be a str, not {type(text).__name__}")
    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as err:
        raise _syntax_error(text, err) from None
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
