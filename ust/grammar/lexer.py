"""A faster drop-in for the token loop of Lark's contextual lexer.

Why: lexing was half the time of parsing one declaration (``benchmarks/bench_parse.py``).
Lark's loop matches every whitespace run and comment as a token of its own and keeps a
line counter per token.  This loop skips all ignored text with one regex built from the
grammar's ``%ignore`` terminals, and matches each token with the *same* per-parser-state
regex and keyword callbacks Lark built, so it accepts exactly the same language.  On
anything unusual (no match, an ignored token type) it hands over to Lark's own loop,
which raises Lark's errors with their usual positions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from lark import Lark, Token

__all__ = ["install_fast_lexer"]


class _Tables(dict[int, "tuple[Any, dict[str, Any], frozenset[str]] | None"]):
    """Per-parser-state scanner tables, made on first use of each state.

    Why: compiling the regex of every state up front cost ~10 ms per process, while one
    format text visits a handful of states.
    """

    def __init__(self, lexers: dict[int, Any]) -> None:
        super().__init__()
        self.lexers = lexers

    def __missing__(self, state: int) -> tuple[Any, dict[str, Any], frozenset[str]] | None:
        lexer: Any = self.lexers.get(state)
        try:
            mres: Any = lexer.scanner._mres if lexer is not None else ()
            table = (mres[0], dict(lexer.callback), frozenset(lexer.ignore_types)) if len(mres) == 1 else None
        except (AttributeError, TypeError, KeyError, re.error):  # another Lark's internals: its own loop
            table = None
        self[state] = table
        return table


class _FastContextualLexer:
    """Wraps a built ``lark.lexer.ContextualLexer`` (same scanners, leaner loop)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        root = inner.root_lexer
        ignore = sorted(root.ignore_types)
        patterns = [root.terminals_by_name[n].pattern.to_regexp() for n in ignore]
        self.skip = re.compile("(?:" + "|".join(f"(?:{p})" for p in patterns) + ")*") if patterns else None
        # parser state -> (compiled regex, keyword callbacks, ignored types), None = use Lark
        self.tables = _Tables(inner.lexers)

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        text_obj = lexer_state.text
        text: str = getattr(text_obj, "text", text_obj)
        end = int(getattr(text_obj, "end", len(text)))
        ctr = lexer_state.line_ctr
        pos, line, line_start = ctr.char_pos, ctr.line, ctr.line_start_pos
        tables, skip = self.tables, self.skip
        make_token = getattr(Token, "_future_new", Token)  # Token() minus its deprecation shim
        while True:
            if skip is not None:
                nxt = skip.match(text, pos, end).end()  # type: ignore[union-attr]
                if nxt > pos:
                    if text.find("\n", pos, nxt) >= 0:
                        line += text.count("\n", pos, nxt)
                        line_start = text.rindex("\n", pos, nxt) + 1
                    pos = nxt
            if pos >= end:
                return
            table = tables[parser_state.position]
            m = table[0].match(text, pos, end) if table is not None else None
            if m is None or m.lastgroup in table[2]:  # type: ignore[index]
                # Lark's own loop from here: exact errors, and any case this loop skips
                ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos = (
                    pos,
                    line,
                    pos - line_start + 1,
                    line_start,
                )
                yield from self.inner.lex(lexer_state, parser_state)
                return
            value = m.group(0)
            tok = make_token(m.lastgroup, value, pos, line, pos - line_start + 1)
            callback = table[1].get(tok.type)  # type: ignore[index]
            if callback is not None:
                tok = callback(tok)
            lexer_state.last_token = tok
            if "\n" in value:
                line += value.count("\n")
                line_start = pos + value.rindex("\n") + 1
            pos += len(value)
            yield tok


def install_fast_lexer(parser: Lark) -> bool:
    """Swap the token loop of a LALR parser with a contextual lexer; False if not possible.

    Uses Lark internals (``parser.parser.lexer.lexers``, ``scanner._mres``): when a Lark
    version lacks them, the parser keeps Lark's own lexer and stays correct, only slower.
    """
    try:
        frontend = parser.parser
        fast = _FastContextualLexer(frontend.lexer)
    except (AttributeError, TypeError, KeyError, re.error):
        return False
    frontend.lexer = fast
    return True
