"""One walker per level type: how the lowering iterates, locates and marshals a level.

Modelled on MLIR's ``SparseTensorLevel`` and finch's level modules: every question the
lowering (:mod:`ust.codegen.lower`) and the launch marshalling ask about a level goes to the
walker of its type, so a new level type is one class here and one row of :data:`WALKERS`.

=================  ================================  ==================  =================
level type         loop range under parent ``q``     coordinate          locate ``c``
=================  ================================  ==================  =================
dense / batch      ``lo .. lo + S`` (counted)        the loop variable   ``q * S + c - lo``
range              ``lo .. lo + S`` (counted)        the loop variable   ``q * S + c - lo``
compressed         ``pos[q] .. pos[q + 1]``          ``crd[p]``          --
loose_compressed   ``pos[2q] .. pos[2q + 1]``        ``crd[p]``          --
singleton          no loop: ``p = q``                ``crd[q]``          --
structured[n, m]   ``q * n .. q * n + n``            ``crd[p]``          --
=================  ================================  ==================  =================

``S`` is the level's extent (``D{d}`` for a plain dimension, the divisor for ``d mod r``,
else the ``S{k}`` parameter) and ``lo`` its lower bound (0, or ``L{k}`` for a diagonal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ust.codegen.ir import Bin, Const, Expr, Let, Load, Stmt, Var
from ust.codegen.record import Record
from ust.formats.model import Dim, FloorDiv, Format, Level, LevelFormat, Mod, Sub
from ust.runtime.errors import UnsupportedError

__all__ = [
    "WALKERS",
    "Iteration",
    "LevelWalker",
    "index_add",
    "index_const",
    "index_mul",
    "walker",
    "walkers",
]

#: ``load(buffer, index)``: a load of a level buffer (the lowering adds batch offsets).
Loader = Callable[[str, Expr], Load]


def index_const(v: int) -> Const:
    """An index-kind literal."""
    return Const(v, "index")


def index_add(a: Expr, b: Expr) -> Expr:
    """``a + b`` on indices, folding a zero."""
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    return Bin("+", a, b)


_c, _add = index_const, index_add


def _sub(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    return Bin("-", a, b)


def index_mul(a: Expr, b: Expr) -> Expr:
    """``a * b`` on indices, folding zero and one."""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const) and x.value == 0:
            return _c(0)
        if isinstance(x, Const) and x.value == 1:
            return y
    return Bin("*", a, b)


_mul = index_mul


class Iteration(Record):
    """How a level is walked under its parent position.

    ``var`` is the loop variable over ``[lo, hi)`` (None: no loop, the level is one entry per
    parent, as a singleton), ``heads`` go before the loop, ``pre`` first into its body;
    inside, the level's coordinate is ``coord`` and its position (the parent of the next
    level) ``pos``.
    """

    var: str | None
    lo: Expr
    hi: Expr
    heads: tuple[Stmt, ...]
    pre: tuple[Stmt, ...]
    coord: Expr
    pos: Expr


class LevelWalker:
    """The walker of level ``k`` of a format (subclasses: one per level type)."""

    type_name: ClassVar[LevelFormat]
    #: iterated by a counted loop over its coordinates (dense, batch, range)
    counted: ClassVar[bool] = False
    #: the position of a known coordinate is computable (see :meth:`locate`)
    locatable: ClassVar[bool] = False
    #: stores only some coordinates (its entries are a sparse subset)
    sparse: ClassVar[bool] = False
    #: stores value slots that are padding, not entries (range, structured)
    pads: ClassVar[bool] = False
    #: under a sparse level its slots are a block's zero fill (dense: BSR, BSC, CROW)
    pads_under_sparse: ClassVar[bool] = False
    #: a padding slot's coordinate is computed or range-checked, never read from storage, so a
    #: kernel may load the dense operand there before it knows the slot's value is zero
    pad_coord_computed: ClassVar[bool] = True

    def __init__(self, k: int, level: Level) -> None:
        self.k = k
        self.level = level

    # -- buffers ------------------------------------------------------------------------------
    def buffers(self) -> tuple[tuple[str, str], ...]:
        """(parameter name, ``"pos"`` | ``"crd"``) of every buffer this level owns."""
        out: list[tuple[str, str]] = []
        if self.level.type.stores_pos:
            out.append((f"pos{self.k}", "pos"))
        if self.level.type.stores_crd:
            out.append((f"crd{self.k}", "crd"))
        return tuple(out)

    # -- facts --------------------------------------------------------------------------------
    @property
    def unique(self) -> bool:
        """Distinct positions under one parent hold distinct coordinates."""
        return False

    @property
    def static_lo(self) -> bool:
        """The coordinate range starts at 0 (a diagonal's starts at the ``L{k}`` parameter)."""
        return not isinstance(self.level.expr, Sub)

    def extent(self) -> Expr:
        e = self.level.expr
        if isinstance(e, Dim):
            return Var(f"D{e.dim}")
        if isinstance(e, Mod):
            return _c(e.divisor)
        return Var(f"S{self.k}")

    def lo(self) -> Expr:
        return _c(0) if self.static_lo else Var(f"L{self.k}")

    def full(self) -> bool:
        """A counted loop over every coordinate of one dimension's (block) index."""
        return self.counted and isinstance(self.level.expr, (Dim, FloorDiv, Mod))

    # -- walking ------------------------------------------------------------------------------
    def iterate(self, q: Expr, load: Loader) -> Iteration:
        """The loop over this level's entries under parent position ``q``."""
        raise NotImplementedError

    def locate(self, q: Expr, c: Expr) -> Expr:
        """The position of coordinate ``c`` under parent position ``q``."""
        raise UnsupportedError(f"a {self.type_name.value} level cannot locate a coordinate")

    def _segment(self, lo: Expr, hi: Expr, heads: tuple[Stmt, ...], load: Loader) -> Iteration:
        k = self.k
        p, c = Var(f"p{k}"), Var(f"c{k}")
        return Iteration(f"p{k}", lo, hi, heads, (Let(c.name, load(f"crd{k}", p)),), c, p)


class _Counted(LevelWalker):
    counted = True
    locatable = True

    @property
    def unique(self) -> bool:
        return True

    def locate(self, q: Expr, c: Expr) -> Expr:
        return _add(_mul(q, self.extent()), _sub(c, self.lo()))

    def iterate(self, q: Expr, load: Loader) -> Iteration:
        k = self.k
        c = Var(f"c{k}")
        lo = self.lo()
        if isinstance(q, Const) and q.value == 0 and self.static_lo:  # the position is the coordinate
            pre: tuple[Stmt, ...] = ()
            pos: Expr = c
        else:
            pre = (Let(f"p{k}", self.locate(q, c)),)
            pos = Var(f"p{k}")
        return Iteration(c.name, lo, _add(lo, self.extent()), (), pre, c, pos)


class DenseWalker(_Counted):
    type_name = LevelFormat.DENSE
    pads_under_sparse = True


class BatchWalker(_Counted):
    type_name = LevelFormat.BATCH


class RangeWalker(_Counted):
    type_name = LevelFormat.RANGE
    pads = True


class CompressedWalker(LevelWalker):
    type_name = LevelFormat.COMPRESSED
    sparse = True
    #: pos entries per parent position: ``pos[stride * q] .. pos[stride * q + 1]``
    pos_stride: ClassVar[int] = 1

    @property
    def unique(self) -> bool:
        return bool(self.level.type.unique)

    def iterate(self, q: Expr, load: Loader) -> Iteration:
        k = self.k
        at = _mul(q, _c(self.pos_stride))
        heads = (
            Let(f"p{k}_lo", load(f"pos{k}", at)),
            Let(f"p{k}_hi", load(f"pos{k}", _add(at, _c(1)))),
        )
        return self._segment(Var(f"p{k}_lo"), Var(f"p{k}_hi"), heads, load)


class LooseCompressedWalker(CompressedWalker):
    type_name = LevelFormat.LOOSE_COMPRESSED
    pos_stride = 2


class SingletonWalker(LevelWalker):
    type_name = LevelFormat.SINGLETON
    sparse = True

    def iterate(self, q: Expr, load: Loader) -> Iteration:
        c = Var(f"c{self.k}")
        return Iteration(None, q, q, (), (Let(c.name, load(f"crd{self.k}", q)),), c, q)


class StructuredWalker(LevelWalker):
    type_name = LevelFormat.STRUCTURED
    pads = True
    pad_coord_computed = False  # a fill slot's coordinate is whatever its crd holds

    def iterate(self, q: Expr, load: Loader) -> Iteration:
        n = self.level.type.n
        lo = _mul(q, _c(n))
        return self._segment(lo, _add(lo, _c(n)), (), load)


#: Level type -> walker class: the one table to extend with a new level type.
WALKERS: dict[LevelFormat, type[LevelWalker]] = {
    w.type_name: w
    for w in (
        DenseWalker,
        BatchWalker,
        RangeWalker,
        CompressedWalker,
        LooseCompressedWalker,
        SingletonWalker,
        StructuredWalker,
    )
}


def walker(fmt: Format, k: int) -> LevelWalker:
    """The walker of level ``k`` of ``fmt``."""
    lv = fmt.levels[k]
    return WALKERS[lv.format](k, lv)


def walkers(fmt: Format) -> tuple[LevelWalker, ...]:
    """The walkers of every level of ``fmt``, outermost first."""
    return tuple(walker(fmt, k) for k in range(fmt.nlevels))
