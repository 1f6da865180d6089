"""The shared C-style renderer under the C and CUDA emitters (tinygrad's ``CStyleLanguage``).

:class:`CStyleRenderer` turns the loop IR into C-family text: expressions with minimal
parentheses (the IR's own printer, :class:`ust.codegen.ir.ExprPrinter`, with C hooks), lets,
accumulators, conditionals and plain loops.  A target (:mod:`ust.codegen.emit_c`,
:mod:`ust.codegen.emit_cuda`) is a subclass holding its tables
(value and index type names, the type of a boolean let) and overriding the hooks where it
differs: constants, binary operators on its value types, parallel loops, stores and
accumulations.  It returns text only; compiling and running live in :mod:`ust.backends`.
"""

from __future__ import annotations

from typing import ClassVar

from ust.codegen.ir import (
    Accumulate,
    Assign,
    Bin,
    Block,
    Const,
    Decl,
    ExprPrinter,
    If,
    Kernel,
    Let,
    Loop,
    Sort,
    Stmt,
    Store,
    While,
)

__all__ = ["CStyleRenderer"]


class CStyleRenderer(ExprPrinter):
    """Renders one kernel; subclasses set the tables and override the hooks."""

    #: value dtype -> the target's type name
    value_types: ClassVar[dict[str, str]] = {}
    #: index dtype -> the target's type name
    index_types: ClassVar[dict[str, str]] = {}
    #: the type of a ``bool`` let
    bool_type: ClassVar[str] = "int"

    def __init__(self, kernel: Kernel) -> None:
        self.k = kernel
        self.vt = self.value_types[kernel.value_dtype]
        self.it = self.index_types[kernel.itype]
        self.lines: list[str] = []

    # -- expressions ----------------------------------------------------------------------------
    def const(self, e: Const) -> str:
        """A literal (hook: value and boolean literals differ between targets)."""
        return str(int(e.value))  # type: ignore[arg-type]

    def minmax(self, e: Bin) -> str:
        cmp = "<" if e.op == "min" else ">"
        a, b = self.expr(e.a), self.expr(e.b)
        return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"

    def op_text(self, op: str) -> str:
        return "/" if op == "//" else op

    # -- statements -----------------------------------------------------------------------------
    def out(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def block(self, b: Block, depth: int) -> None:
        for s in b.body:
            self.stmt(s, depth)

    def scalar_type(self, kind: str) -> str:
        return self.vt if kind == "value" else (self.bool_type if kind == "bool" else self.it)

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, Block):
            self.out(depth, "{")
            self.block(s, depth + 1)
            self.out(depth, "}")
        elif isinstance(s, Let):
            self.out(depth, f"const {self.scalar_type(s.kind)} {s.name} = {self.expr(s.value)};")
        elif isinstance(s, Decl):
            t = self.scalar_type(s.kind)
            self.out(depth, f"{t} {s.name} = {self.expr(s.value)};")
        elif isinstance(s, Assign):
            self.out(depth, f"{s.name} = {self.expr(s.value)};")
        elif isinstance(s, Loop):
            self.loop(s, depth)
        elif isinstance(s, While):
            self.out(depth, f"while ({self.expr(s.cond)}) {{")
            self.block(s.body, depth + 1)
            self.out(depth, "}")
        elif isinstance(s, Sort):
            self.out(
                depth,
                f"ust_sort_index({s.buf} + ({self.expr(s.lo)}), ({self.expr(s.hi)}) - ({self.expr(s.lo)}));",
            )
        elif isinstance(s, If):
            self.out(depth, f"if ({self.expr(s.cond)}) {{")
            self.block(s.then, depth + 1)
            if s.orelse is not None:
                self.out(depth, "} else {")
                self.block(s.orelse, depth + 1)
            self.out(depth, "}")
        elif isinstance(s, Store):
            self.store(s, depth)
        elif isinstance(s, Accumulate):
            self.accumulate(s, depth)
        else:
            raise TypeError(f"not an IR statement: {s!r}")

    def for_head(self, s: Loop) -> str:
        return f"for ({self.it} {s.var} = {self.expr(s.lo)}; {s.var} < {self.expr(s.hi)}; ++{s.var}) {{"

    def serial_loop(self, s: Loop, depth: int) -> None:
        self.out(depth, self.for_head(s))
        self.block(s.body, depth + 1)
        self.out(depth, "}")

    def loop(self, s: Loop, depth: int) -> None:
        """A loop (hook: targets map parallel and reduction loops)."""
        self.serial_loop(s, depth)

    def store(self, s: Store, depth: int) -> None:
        self.out(depth, f"{s.buf}[{self.expr(s.index)}] = {self.expr(s.value)};")

    def accumulate(self, s: Accumulate, depth: int) -> None:
        """``buf[index] += value`` (hook: atomics are the target's)."""
        self.out(depth, f"{s.buf}[{self.expr(s.index)}] += {self.expr(s.value)};")

    @staticmethod
    def rows_chain(s: Loop, tags: tuple[str, ...] = ("rows",)) -> list[Loop]:
        """``s`` and the parallel loops perfectly nested in it whose tag is one of ``tags``."""
        chain = [s]
        while (
            len(chain[-1].body.body) == 1
            and isinstance(chain[-1].body.body[0], Loop)
            and chain[-1].body.body[0].parallel
            and chain[-1].body.body[0].tag in tags
        ):
            chain.append(chain[-1].body.body[0])
            if chain[-1].tag == "cols":
                break
        return chain
