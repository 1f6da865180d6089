"""A small loop IR: what a lowered (format, op) pair looks like before it becomes C or CUDA.

The IR is deliberately tiny and frozen: expressions (constants, variables, loads, binary
and unary operators) and statements (blocks, lets, mutable scalars, loops, conditionals,
stores, accumulations).  Lowering builds it once per (format, op, variant); the emitters
and the reference interpreter only read it.  Every name is a plain string; the kernel's
parameters say which names are buffers and which are scalars, and of which kind.

Kinds: ``"index"`` (the kernel's integer type), ``"value"`` (the value dtype) and
``"bool"`` (conditions).  Integer division ``//`` and ``%`` are only ever applied to
non-negative operands, so C's truncating ``/`` agrees with Python's floor division.
"""

from __future__ import annotations

from collections.abc import Iterator

from ust.codegen.record import Record, field

__all__ = [
    "Accumulate",
    "Assign",
    "Bin",
    "Block",
    "Const",
    "Decl",
    "Expr",
    "ExprPrinter",
    "If",
    "Kernel",
    "Let",
    "Load",
    "Loop",
    "Param",
    "Select",
    "Sort",
    "Stmt",
    "Store",
    "Un",
    "Var",
    "While",
    "block",
    "free_names",
    "to_text",
    "walk",
]

#: Binary operators and their precedence in the printed (C-like) form.
BIN_OPS = {
    "||": 1,
    "&&": 2,
    "==": 3,
    "!=": 3,
    "<": 4,
    "<=": 4,
    ">": 4,
    ">=": 4,
    "+": 5,
    "-": 5,
    "*": 6,
    "//": 6,
    "%": 6,
    "min": 9,
    "max": 9,
}
UN_OPS = ("-", "!")


# ----------------------------------------------------------------------------- expressions


class Const(Record):
    """A literal of kind ``"index"``, ``"value"`` or ``"bool"``."""

    value: int | float | complex | bool
    kind: str = "index"


class Var(Record):
    """A named scalar: a parameter, a loop variable, a let or a declared mutable scalar."""

    name: str


class Load(Record):
    """``buf[index]`` (buffers are flat; the index is in elements)."""

    buf: str
    index: Expr


class Bin(Record):
    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.op not in BIN_OPS:
            raise ValueError(f"unknown binary operator {self.op!r}")


class Un(Record):
    op: str
    a: Expr

    def __post_init__(self) -> None:
        if self.op not in UN_OPS:
            raise ValueError(f"unknown unary operator {self.op!r}")


class Select(Record):
    """``cond ? a : b`` (only the chosen side is evaluated, so it may guard a load)."""

    cond: Expr
    a: Expr
    b: Expr


Expr = Const | Var | Load | Bin | Un | Select


# ----------------------------------------------------------------------------- statements


class Block(Record):
    body: tuple[Stmt, ...] = ()


class Let(Record):
    """Declare an immutable scalar ``name = value`` of ``kind`` for the rest of the block."""

    name: str
    value: Expr
    kind: str = "index"


class Decl(Record):
    """Declare a mutable scalar (an accumulator) initialised to ``value``."""

    name: str
    value: Expr
    kind: str = "value"


class Assign(Record):
    """``name = value`` for a :class:`Decl` scalar."""

    name: str
    value: Expr


class Loop(Record):
    """``for var in [lo, hi)``.

    ``parallel``: iterations are independent (the emitters map them to threads).
    ``tag``: ``"batch"``, ``"rows"`` (the outer parallel loop), ``"cols"`` (the dense
    columns of SpMM) or ``""``.  ``reduce``: the name of a :class:`Decl` scalar that is
    only summed into inside this loop, so the loop may be split across a thread group whose
    partial sums are then added (CUDA group mapping, C ``omp simd reduction``).
    """

    var: str
    lo: Expr
    hi: Expr
    body: Block
    parallel: bool = False
    tag: str = ""
    reduce: str | None = None


class While(Record):
    """``while cond: body`` (co-iteration of sorted levels: the two-pointer merge)."""

    cond: Expr
    body: Block


class Sort(Record):
    """Sort the index buffer slice ``buf[lo:hi]`` ascending (a workspace's touched list)."""

    buf: str
    lo: Expr
    hi: Expr


class If(Record):
    cond: Expr
    then: Block
    orelse: Block | None = None


class Store(Record):
    """``buf[index] = value``."""

    buf: str
    index: Expr
    value: Expr


class Accumulate(Record):
    """``buf[index] += value``; ``atomic`` when other iterations may write the same slot."""

    buf: str
    index: Expr
    value: Expr
    atomic: bool = False
    #: the combining operator: ``"+"`` or a semiring's ``"min"`` / ``"max"`` / ``"or"``
    op: str = "+"


Stmt = Block | Let | Decl | Assign | Loop | While | If | Store | Accumulate | Sort


class Param(Record):
    """A kernel parameter.

    ``kind``: ``"ibuf"`` (an index buffer of dtype ``dtype``), ``"vbuf"`` (a value buffer),
    ``"iscalar"`` (an index-kind scalar) or ``"vscalar"`` (a value-kind scalar).
    """

    name: str
    kind: str
    dtype: str = ""
    const: bool = True


class Kernel(Record):
    """One lowered operation: an optional init pass (fills the output) and the main pass."""

    name: str
    params: tuple[Param, ...]
    body: Block
    init: Block | None = None
    value_dtype: str = "float64"
    index_dtype: str = "int32"
    itype: str = "int64"
    #: Facts the emitters and launchers need (see ``lower.KernelInfo``), as sorted pairs.
    meta: tuple[tuple[str, object], ...] = field(default=(), compare=False)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def info(self) -> dict[str, object]:
        return dict(self.meta)


def block(*stmts: Stmt | None) -> Block:
    """A Block of the given statements, flattening nested Blocks and dropping Nones."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Block):
            out.extend(s.body)
        else:
            out.append(s)
    return Block(tuple(out))


# ----------------------------------------------------------------------------- traversal


def walk(node: object) -> Iterator[object]:
    """Every node below (and including) ``node``, expressions and statements alike."""
    yield node
    if isinstance(node, Load):
        yield from walk(node.index)
    elif isinstance(node, Bin):
        yield from walk(node.a)
        yield from walk(node.b)
    elif isinstance(node, Un):
        yield from walk(node.a)
    elif isinstance(node, Select):
        yield from walk(node.cond)
        yield from walk(node.a)
        yield from walk(node.b)
    elif isinstance(node, While):
        yield from walk(node.cond)
        yield from walk(node.body)
    elif isinstance(node, Sort):
        yield from walk(node.lo)
        yield from walk(node.hi)
    elif isinstance(node, Block):
        for s in node.body:
            yield from walk(s)
    elif isinstance(node, (Let, Decl, Assign)):
        yield from walk(node.value)
    elif isinstance(node, Loop):
        yield from walk(node.lo)
        yield from walk(node.hi)
        yield from walk(node.body)
    elif isinstance(node, If):
        yield from walk(node.cond)
        yield from walk(node.then)
        if node.orelse is not None:
            yield from walk(node.orelse)
    elif isinstance(node, (Store, Accumulate)):
        yield from walk(node.index)
        yield from walk(node.value)


def free_names(node: object) -> set[str]:
    """Variable and buffer names used (read or written) anywhere below ``node``."""
    names: set[str] = set()
    for n in walk(node):
        if isinstance(n, Var):
            names.add(n.name)
        elif isinstance(n, (Load, Store, Accumulate, Sort)):
            names.add(n.buf)
    return names


# ----------------------------------------------------------------------------- printer


class ExprPrinter:
    """C-like text of expressions, parenthesised only where needed.

    The one precedence-driven printer of the IR: :func:`expr_text` uses it as it is, and the
    C-style renderer (:class:`ust.codegen.emit_cstyle.CStyleRenderer`) overrides the hooks
    where a target's text differs (literals, ``min`` / ``max``, operators on its value types).
    """

    def const(self, e: Const) -> str:
        """A literal (hook)."""
        return repr(e.value) if e.kind != "bool" else ("true" if e.value else "false")

    def minmax(self, e: Bin) -> str:
        """``min`` / ``max`` (hook)."""
        return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})"

    def binary(self, e: Bin, parent: int) -> str | None:
        """A target's own rendering of a binary operator, or None for the common one (hook)."""
        return None

    def op_text(self, op: str) -> str:
        """The spelling of an infix operator (hook)."""
        return op

    def expr(self, e: Expr, parent: int = 0) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return f"{e.buf}[{self.expr(e.index)}]"
        if isinstance(e, Un):
            return f"{e.op}{self.expr(e.a, 10)}"
        if isinstance(e, Select):
            return f"({self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)})"
        if isinstance(e, Bin):
            if e.op in ("min", "max"):
                return self.minmax(e)
            own = self.binary(e, parent)
            if own is not None:
                return own
            prec = BIN_OPS[e.op]
            text = f"{self.expr(e.a, prec)} {self.op_text(e.op)} {self.expr(e.b, prec + 1)}"
            return f"({text})" if prec < parent else text
        raise TypeError(f"not an IR expression: {e!r}")


_PRINTER = ExprPrinter()


def expr_text(e: Expr, parent_prec: int = 0) -> str:
    """C-like text of an expression, parenthesised only where needed."""
    return _PRINTER.expr(e, parent_prec)


def _stmt_lines(s: Stmt, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(s, Block):
        return [line for t in s.body for line in _stmt_lines(t, indent)]
    if isinstance(s, Let):
        return [f"{pad}let {s.name}: {s.kind} = {expr_text(s.value)}"]
    if isinstance(s, Decl):
        return [f"{pad}var {s.name}: {s.kind} = {expr_text(s.value)}"]
    if isinstance(s, Assign):
        return [f"{pad}{s.name} = {expr_text(s.value)}"]
    if isinstance(s, Loop):
        flags = [f for f, on in (("parallel", s.parallel), (s.tag, bool(s.tag))) if on]
        if s.reduce:
            flags.append(f"reduce({s.reduce})")
        note = f"  # {', '.join(flags)}" if flags else ""
        head = f"{pad}for {s.var} in [{expr_text(s.lo)}, {expr_text(s.hi)}):{note}"
        return [head, *_stmt_lines(s.body, indent + 1)]
    if isinstance(s, While):
        return [f"{pad}while {expr_text(s.cond)}:", *_stmt_lines(s.body, indent + 1)]
    if isinstance(s, Sort):
        return [f"{pad}sort {s.buf}[{expr_text(s.lo)}:{expr_text(s.hi)}]"]
    if isinstance(s, If):
        lines = [f"{pad}if {expr_text(s.cond)}:", *_stmt_lines(s.then, indent + 1)]
        if s.orelse is not None:
            lines += [f"{pad}else:", *_stmt_lines(s.orelse, indent + 1)]
        return lines
    if isinstance(s, Store):
        return [f"{pad}{s.buf}[{expr_text(s.index)}] = {expr_text(s.value)}"]
    if isinstance(s, Accumulate):
        op = ("+" if s.op == "+" else f" {s.op}") + ("=!" if s.atomic else "=")
        return [f"{pad}{s.buf}[{expr_text(s.index)}] {op} {expr_text(s.value)}"]
    raise TypeError(f"not an IR statement: {s!r}")


def to_text(node: Kernel | Stmt) -> str:
    """Readable text of a kernel or statement (``+=!`` marks an atomic accumulation)."""
    if isinstance(node, Kernel):
        params = ", ".join(f"{p.name}: {p.kind}{'<' + p.dtype + '>' if p.dtype else ''}" for p in node.params)
        lines = [f"kernel {node.name}({params})  # value {node.value_dtype}, index {node.itype}"]
        if node.init is not None:
            lines += ["init:", *_stmt_lines(node.init, 1)]
        lines += ["main:", *_stmt_lines(node.body, 1)]
        return "\n".join(lines) + "\n"
    return "\n".join(_stmt_lines(node, 0)) + "\n"
