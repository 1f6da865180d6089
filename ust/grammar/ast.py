"""Plain frozen syntax trees built by the parser.

They record what was written (names, constants or parameter names, source positions)
and nothing more; meaning and validation belong to :mod:`ust.formats.model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

#: A divisor or structured argument: an integer, or the name of a declaration parameter.
Operand = int | str

#: The largest integer the format language takes (int64): a block size or ``structured[n, m]``
#: beyond it is meaningless.  The parser checks the digits before converting them.
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class DimExpr:
    """A level expression that is one dimension: ``i``."""

    dim: str


@dataclass(frozen=True)
class _BlockedExpr:
    """A dimension and a divisor (the two block expressions below)."""

    dim: str
    divisor: Operand


class FloorDivExpr(_BlockedExpr):
    """``d floordiv c`` (also written ``d // c``)."""


class ModExpr(_BlockedExpr):
    """``d mod c`` (also written ``d % c``)."""


@dataclass(frozen=True)
class _PairExpr:
    """Two dimensions (the diagonal expressions below)."""

    left: str
    right: str


class AddExpr(_PairExpr):
    """``d1 + d2`` (anti-diagonals)."""


class SubExpr(_PairExpr):
    """``d1 - d2`` (diagonals)."""


LevelExprAST = DimExpr | FloorDivExpr | ModExpr | AddExpr | SubExpr


@dataclass(frozen=True)
class LevelAST:
    """One ``expr : level_type(props)`` entry of a map."""

    expr: LevelExprAST
    type_name: str
    properties: tuple[str, ...] = ()
    structured: tuple[Operand, Operand] | None = None
    line: int = 0
    column: int = 0


@dataclass(frozen=True)
class MapAST:
    """``(dims) -> (levels)``."""

    dims: tuple[str, ...]
    levels: tuple[LevelAST, ...]
    line: int = 0
    column: int = 0


@dataclass(frozen=True)
class EncodingAST:
    """``#sparse_tensor.encoding<{ map = ..., key = value, ... }>``."""

    map: MapAST
    attributes: tuple[tuple[str, str], ...] = ()


SpecAST = MapAST | EncodingAST


@dataclass(frozen=True)
class DeclAST:
    """``format NAME[params] = spec``."""

    name: str
    params: tuple[str, ...]
    spec: SpecAST
    line: int = 0
    column: int = 0


@dataclass(frozen=True)
class FileAST:
    """A whole file of declarations."""

    decls: tuple[DeclAST, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------------- epilogue expressions


@dataclass(frozen=True)
class Num:
    """A numeric literal."""

    value: float
    #: Nesting depth of the tree rooted here (a leaf is 1); see :class:`BinOp`.
    depth: ClassVar[int] = 1


@dataclass(frozen=True)
class Var:
    """A name: the op's value (``y``) or a named scalar parameter."""

    name: str
    depth: ClassVar[int] = 1


@dataclass(frozen=True)
class BinOp:
    """``left op right`` for op in + - * / ** and the comparisons.

    ``depth`` (1 + the deepest child's, computed on construction in O(1), not part of
    equality) lets the parser refuse a tree too deep for the recursive walkers that
    consume it before any of them runs.
    """

    op: str
    left: ExprAST
    right: ExprAST
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max(self.left.depth, self.right.depth))


@dataclass(frozen=True)
class Neg:
    """``-operand``."""

    operand: ExprAST
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + self.operand.depth)


@dataclass(frozen=True)
class Call:
    """``fn(args...)``: min, max, abs, exp, log, sqrt, where, ..."""

    fn: str
    args: tuple[ExprAST, ...]
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max((a.depth for a in self.args), default=0))


@dataclass(frozen=True)
class Index:
    """``name[args...]``: an element of an array parameter (FFT callbacks: ``h[k]``)."""

    name: str
    args: tuple[ExprAST, ...]
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max((a.depth for a in self.args), default=0))


ExprAST = Num | Var | BinOp | Neg | Call | Index


# ------------------------------------------------------------------------- index notation


@dataclass(frozen=True)
class AccessAST:
    """``A(i, k)``: an operand indexed by index variables (one per dimension)."""

    name: str
    indices: tuple[str, ...]
    line: int = 0
    column: int = 0
    depth: ClassVar[int] = 1


@dataclass(frozen=True)
class ScalarAST:
    """A named scalar operand (``alpha``)."""

    name: str
    line: int = 0
    column: int = 0
    depth: ClassVar[int] = 1


@dataclass(frozen=True)
class LiteralAST:
    """A numeric literal; an integer literal stays an ``int`` (exact integer arithmetic)."""

    value: int | float
    depth: ClassVar[int] = 1


@dataclass(frozen=True)
class OpAST:
    """``left op right`` for op in ``+ - *``."""

    op: str
    left: TermAST
    right: TermAST
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + max(self.left.depth, self.right.depth))


@dataclass(frozen=True)
class NegAST:
    """``-operand``."""

    operand: TermAST
    depth: int = field(init=False, default=1, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", 1 + self.operand.depth)


TermAST = AccessAST | ScalarAST | LiteralAST | OpAST | NegAST


@dataclass(frozen=True)
class ComputeAST:
    """``lhs = rhs``: the output access (no indices for a scalar result) and the expression."""

    lhs: AccessAST
    rhs: TermAST
