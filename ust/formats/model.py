"""The Format model: level types, level expressions and the validated Format value.

A :class:`Format` is frozen, hashable and compared structurally: dimension names,
declaration names and MLIR attributes such as ``posWidth`` do not take part, so a user's
``(r, c) -> (r : dense, c : compressed)`` equals the standard CSR.  Validation happens once,
when the value is built from a syntax tree (:func:`build_format`); every rule it enforces
has a short name that appears in the :class:`~ust.runtime.errors.FormatError` message.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ust.grammar import ast
from ust.runtime.errors import FormatError, ShapeError
from ust.runtime.suggest import did_you_mean

__all__ = [
    "MAX_DIMS",
    "MAX_LEVELS",
    "Add",
    "Dim",
    "FloorDiv",
    "Format",
    "Level",
    "LevelExpr",
    "LevelFormat",
    "LevelType",
    "Mod",
    "Sub",
    "build_format",
]

#: ``standard_name_of`` of :mod:`ust.formats.library`, registered there at import (the library sits
#: above this module: it builds Formats), so that :attr:`Format.standard_name` needs no upward import.
STANDARD_NAMER: dict[str, Callable[[Format], str | None]] = {}


class LevelFormat(enum.Enum):
    """How one level stores its coordinates."""

    DENSE = "dense"
    BATCH = "batch"
    COMPRESSED = "compressed"
    LOOSE_COMPRESSED = "loose_compressed"
    SINGLETON = "singleton"
    RANGE = "range"
    STRUCTURED = "structured"


#: Level formats that keep a ``pos`` buffer / a ``crd`` buffer.
STORES_POS = frozenset({LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED})
STORES_CRD = frozenset(
    {
        LevelFormat.COMPRESSED,
        LevelFormat.LOOSE_COMPRESSED,
        LevelFormat.SINGLETON,
        LevelFormat.STRUCTURED,
    }
)
#: Level formats that accept the nonunique / nonordered properties.
_TAKES_PROPERTIES = frozenset({LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED, LevelFormat.SINGLETON})
_KNOWN_PROPERTIES = ("nonunique", "nonordered", "soa")


@dataclass(frozen=True)
class LevelType:
    """A level format plus its properties (and n, m for ``structured[n, m]``)."""

    format: LevelFormat
    unique: bool = True
    ordered: bool = True
    n: int = 0
    m: int = 0
    #: MLIR's ``soa`` flag: accepted and kept for printing; ust always stores
    #: coordinate arrays separately, so it takes no part in equality.
    soa: bool = field(default=False, compare=False)

    @property
    def stores_pos(self) -> bool:
        """The level keeps a ``pos`` buffer (segment bounds per parent position)."""
        return self.format in STORES_POS

    @property
    def stores_crd(self) -> bool:
        """The level keeps a ``crd`` buffer (one coordinate per stored entry)."""
        return self.format in STORES_CRD

    def to_text(self) -> str:
        """The type as written in a map: ``compressed(nonunique)``, ``structured[2, 4]``."""
        if self.format is LevelFormat.STRUCTURED:
            return f"structured[{self.n}, {self.m}]"
        props = [
            p
            for p, on in (("nonunique", not self.unique), ("nonordered", not self.ordered), ("soa", self.soa))
            if on
        ]
        return self.format.value + (f"({', '.join(props)})" if props else "")


# ----------------------------------------------------------------------------- level expressions


@dataclass(frozen=True)
class Dim:
    """The level coordinate is dimension ``dim`` itself."""

    dim: int

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.dim,)

    def evaluate(self, coords: Sequence[Any]) -> Any:
        return coords[self.dim]

    def to_text(self, names: Sequence[str]) -> str:
        return names[self.dim]


@dataclass(frozen=True)
class _Blocked:
    """``dim <word> divisor``: one dimension cut into blocks of ``divisor``."""

    dim: int
    divisor: int
    word: ClassVar[str]

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.dim,)

    def to_text(self, names: Sequence[str]) -> str:
        return f"{names[self.dim]} {self.word} {self.divisor}"


@dataclass(frozen=True)
class FloorDiv(_Blocked):
    """``dim floordiv divisor``: the block number."""

    word = "floordiv"

    def evaluate(self, coords: Sequence[Any]) -> Any:
        return coords[self.dim] // self.divisor


@dataclass(frozen=True)
class Mod(_Blocked):
    """``dim mod divisor``: the offset inside a block."""

    word = "mod"

    def evaluate(self, coords: Sequence[Any]) -> Any:
        return coords[self.dim] % self.divisor


@dataclass(frozen=True)
class _Pair:
    """``left <symbol> right``: two dimensions combined."""

    left: int
    right: int
    symbol: ClassVar[str]

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.left, self.right)

    def to_text(self, names: Sequence[str]) -> str:
        return f"{names[self.left]} {self.symbol} {names[self.right]}"


@dataclass(frozen=True)
class Add(_Pair):
    """``left + right``: anti-diagonal number."""

    symbol = "+"

    def evaluate(self, coords: Sequence[Any]) -> Any:
        return coords[self.left] + coords[self.right]


@dataclass(frozen=True)
class Sub(_Pair):
    """``left - right``: diagonal offset (``j - i`` is scipy's dia offset)."""

    symbol = "-"

    def evaluate(self, coords: Sequence[Any]) -> Any:
        return coords[self.left] - coords[self.right]


LevelExpr = Dim | FloorDiv | Mod | Add | Sub


@dataclass(frozen=True)
class Level:
    """One level: the expression it indexes and how it stores it."""

    expr: LevelExpr
    type: LevelType

    @property
    def format(self) -> LevelFormat:
        return self.type.format


# How each dimension is recovered from level coordinates, in resolution order.
# ("level", l) d = L[l];  ("block", lq, lr, c) d = c*L[lq] + L[lr];
# ("sub_left", l, o) d = L[l] + D[o];  ("sub_right", l, o) d = D[o] - L[l];
# ("add", l, o) d = L[l] - D[o]
_Recipe = tuple[Any, ...]


@dataclass(frozen=True)
class Format:
    """A validated sparse storage format (build one with :func:`ust.format`)."""

    #: Number of dimensions of the tensors stored in this format.
    ndim: int
    #: The levels, outermost first.
    levels: tuple[Level, ...]
    #: Dimension names as written (not part of equality).
    dim_names: tuple[str, ...] = field(default=(), compare=False)
    #: Declaration name, e.g. ``"CSR"`` or ``"BSR[2, 3]"`` (not part of equality).
    name: str | None = field(default=None, compare=False)
    #: Other MLIR attribute keys, e.g. ``(("posWidth", "32"),)`` (not part of equality).
    attributes: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    _inverse: tuple[tuple[int, _Recipe], ...] = field(default=(), compare=False, repr=False)

    # -- basic facts -------------------------------------------------------------------------
    @property
    def nlevels(self) -> int:
        """Number of levels (more than ``ndim`` for blocked formats)."""
        return len(self.levels)

    @property
    def nbatch(self) -> int:
        """Number of leading batch levels (batch levels always lead: the format rules say so)."""
        n = 0
        for lv in self.levels:
            if lv.format is not LevelFormat.BATCH:
                break
            n += 1
        return n

    @property
    def is_ordered(self) -> bool:
        """Coordinates are stored in lexicographic level order."""
        return all(lv.type.ordered for lv in self.levels)

    @property
    def is_unique(self) -> bool:
        """No coordinate is stored twice (the innermost level is unique)."""
        return self.levels[-1].type.unique

    @property
    def is_identity(self) -> bool:
        """Levels are the dimensions in order, with no blocking or diagonals."""
        return all(isinstance(lv.expr, Dim) and lv.expr.dim == k for k, lv in enumerate(self.levels))

    @property
    def is_dense(self) -> bool:
        """Every level is dense (or batch): storage is a plain strided array."""
        return all(lv.format in (LevelFormat.DENSE, LevelFormat.BATCH) for lv in self.levels)

    def __hash__(self) -> int:
        """The dataclass hash of the compared fields, computed once: formats key every planner
        and kernel cache, and hashing the levels anew cost a microsecond per lookup."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.ndim, self.levels))
            self.__dict__["_hash"] = h  # a frozen dataclass: written past __setattr__
        return int(h)

    def __eq__(self, other: object) -> bool:
        """The dataclass equality of the compared fields, after the cached hashes: formats are
        compared on every conversion and plan, and two different formats almost never share a
        hash, so most comparisons end there instead of walking the levels."""
        if self is other:
            return True
        if not isinstance(other, Format):
            return NotImplemented
        if hash(self) != hash(other):
            return False
        return self.ndim == other.ndim and self.levels == other.levels

    def __getstate__(self) -> dict[str, Any]:
        """Pickled state without the caches (string hashes differ between processes)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_bounds")}

    @functools.cached_property
    def standard_name(self) -> str | None:
        """The standard library name this format equals structurally, e.g. ``"CSR"``."""
        namer = STANDARD_NAMER.get("standard_name_of")
        return None if namer is None else namer(self)

    # -- coordinate maps ---------------------------------------------------------------------
    def dim_to_lvl(self, coords: Sequence[Any]) -> tuple[Any, ...]:
        """Map dimension coordinates (one int or array per dimension) to level coordinates.

        Works on ints, NumPy arrays and CuPy arrays alike (only arithmetic operators).
        """
        if len(coords) != self.ndim:
            raise ShapeError(f"expected {self.ndim} dimension coordinates, got {len(coords)}")
        return tuple(lv.expr.evaluate(coords) for lv in self.levels)

    def lvl_to_dim(self, lvl_coords: Sequence[Any]) -> tuple[Any, ...]:
        """Map level coordinates back to dimension coordinates (inverse of :meth:`dim_to_lvl`)."""
        if len(lvl_coords) != self.nlevels:
            raise ShapeError(f"expected {self.nlevels} level coordinates, got {len(lvl_coords)}")
        dims: list[Any] = [None] * self.ndim
        for d, recipe in self._inverse:
            kind = recipe[0]
            if kind == "level":
                dims[d] = lvl_coords[recipe[1]]
            elif kind == "block":
                dims[d] = recipe[3] * lvl_coords[recipe[1]] + lvl_coords[recipe[2]]
            elif kind == "sub_left":
                dims[d] = lvl_coords[recipe[1]] + dims[recipe[2]]
            elif kind == "sub_right":
                dims[d] = dims[recipe[2]] - lvl_coords[recipe[1]]
            else:  # "add"
                dims[d] = lvl_coords[recipe[1]] - dims[recipe[2]]
        return tuple(dims)

    def lvl_bounds(self, shape: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """Half-open coordinate interval ``[lo, hi)`` of each level for a tensor ``shape``.

        ``lo`` is 0 except for a diagonal level ``j - i``, whose offsets start at
        ``-(rows - 1)``.  A block size that does not divide its extent is a FormatError.
        Results are kept per shape (a few dozen): every conversion and kernel launch asks.
        """
        memo = self.__dict__.get("_bounds")
        if memo is None:
            memo = self.__dict__["_bounds"] = {}
        try:
            hit = memo.get(shape if type(shape) is tuple else tuple(shape))
        except TypeError:  # an unhashable shape: computed (and checked) below
            hit = None
        if hit is not None:
            return hit
        out = self._lvl_bounds(shape)
        if len(memo) < 64:
            memo[tuple(int(s) for s in shape)] = out
        return out

    def _lvl_bounds(self, shape: Sequence[int]) -> tuple[tuple[int, int], ...]:
        shape = tuple(int(s) for s in shape)
        if len(shape) != self.ndim:
            raise ShapeError(f"format has {self.ndim} dimensions but the shape {shape} has {len(shape)}")
        if any(s < 0 for s in shape):
            raise ShapeError(f"negative extent in shape {shape}")
        out: list[tuple[int, int]] = []
        for k, lv in enumerate(self.levels):
            e = lv.expr
            if isinstance(e, (FloorDiv, Mod)):
                if shape[e.dim] % e.divisor:
                    raise FormatError(
                        f"[block-divides-shape] level {k} ({e.to_text(self._names)}): block size "
                        f"{e.divisor} does not divide extent {shape[e.dim]} of dimension "
                        f"{self._names[e.dim]}",
                        rule="block-divides-shape",
                        level=k,
                    )
                out.append((0, shape[e.dim] // e.divisor if isinstance(e, FloorDiv) else e.divisor))
            elif isinstance(e, Dim):
                out.append((0, shape[e.dim]))
            else:
                a, b = shape[e.left], shape[e.right]
                if a == 0 or b == 0:
                    out.append((0, 0))
                elif isinstance(e, Sub):
                    out.append((-(b - 1), a))
                else:
                    out.append((0, a + b - 1))
        return tuple(out)

    def lvl_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Number of coordinate values of each level for a tensor ``shape``."""
        return tuple(hi - lo for lo, hi in self.lvl_bounds(shape))

    # -- text --------------------------------------------------------------------------------
    @property
    def _names(self) -> tuple[str, ...]:
        return self.dim_names or tuple(f"d{k}" for k in range(self.ndim))

    def map_text(self) -> str:
        """The ``(dims) -> (levels)`` map alone."""
        names = self._names
        levels = ", ".join(f"{lv.expr.to_text(names)} : {lv.type.to_text()}" for lv in self.levels)
        return f"({', '.join(names)}) -> ({levels})"

    def to_text(self) -> str:
        """Canonical text that parses back to an equal Format (MLIR attribute if it has extras)."""
        if not self.attributes:
            return self.map_text()
        extras = "".join(f", {k} = {v}" for k, v in self.attributes)
        return f"#sparse_tensor.encoding<{{ map = {self.map_text()}{extras} }}>"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        label = f"{self.name}: " if self.name else ""
        return f"Format<{label}{self.map_text()}>"


# ----------------------------------------------------------------------------- building + validation


def _fail(rule: str, message: str, level: int | None = None, where: Any = None) -> FormatError:
    loc = ""
    if where is not None and getattr(where, "line", None):
        loc = f" (line {where.line}, column {where.column})"
    lvl = f"level {level}: " if level is not None else ""
    return FormatError(f"[{rule}] {lvl}{message}{loc}", rule=rule, level=level)


def _operand(value: ast.Operand, params: Mapping[str, int], k: int, where: Any) -> int:
    if isinstance(value, str):
        if value not in params:
            raise _fail(
                "unbound-parameter", f"'{value}' is neither a number nor a declared parameter", k, where
            )
        value = params[value]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail("bad-parameter", f"parameter value {type(value).__name__} is not an integer", k, where)
    if not -ast.MAX_INT - 1 <= value <= ast.MAX_INT:
        raise _fail(
            "integer-range",
            f"parameter value of {value.bit_length()} bits is out of range; integers in the format "
            f"language are at most 2**63 - 1 = {ast.MAX_INT} (a block size beyond int64 is meaningless)",
            k,
            where,
        )
    return value


def _build_expr(
    e: ast.LevelExprAST, index: Mapping[str, int], params: Mapping[str, int], k: int, where: Any
) -> LevelExpr:
    names = [e.dim] if isinstance(e, (ast.DimExpr, ast.FloorDivExpr, ast.ModExpr)) else [e.left, e.right]
    for nm in names:
        if nm not in index:
            raise _fail(
                "unknown-dimension", f"'{nm}' is not one of the dimensions ({', '.join(index)})", k, where
            )
    if isinstance(e, ast.DimExpr):
        return Dim(index[e.dim])
    if isinstance(e, (ast.FloorDivExpr, ast.ModExpr)):
        c = _operand(e.divisor, params, k, where)
        if c <= 0:
            raise _fail("positive-divisor", f"divisor must be a positive integer, got {c}", k, where)
        cls = FloorDiv if isinstance(e, ast.FloorDivExpr) else Mod
        return cls(index[e.dim], c)
    if e.left == e.right:
        raise _fail("diagonal-distinct", f"'{e.left}' appears on both sides of the +/- expression", k, where)
    cls2 = Add if isinstance(e, ast.AddExpr) else Sub
    return cls2(index[e.left], index[e.right])


def _build_type(lv: ast.LevelAST, params: Mapping[str, int], k: int) -> LevelType:
    try:
        fmt = LevelFormat(lv.type_name)
    except ValueError:
        known = [f.value for f in LevelFormat]
        hint = did_you_mean(lv.type_name, known)
        raise _fail(
            "unknown-level-type",
            f"unknown level type '{lv.type_name}'; {hint + ' ' if hint else ''}expected one of {', '.join(known)}",
            k,
            lv,
        ) from None
    props = lv.properties
    for p in props:
        if p not in _KNOWN_PROPERTIES:
            hint = did_you_mean(p, _KNOWN_PROPERTIES)
            raise _fail(
                "unknown-property",
                f"unknown property '{p}'; {hint + ' ' if hint else ''}expected one of {', '.join(_KNOWN_PROPERTIES)}",
                k,
                lv,
            )
    if len(set(props)) != len(props):
        raise _fail("duplicate-property", f"a property is repeated in ({', '.join(props)})", k, lv)
    if props and fmt not in _TAKES_PROPERTIES:
        raise _fail("properties-not-allowed", f"level type '{fmt.value}' takes no properties", k, lv)
    if "soa" in props and fmt is not LevelFormat.SINGLETON:
        raise _fail("soa-singleton-only", "the 'soa' property applies to singleton levels only", k, lv)
    n = m = 0
    if fmt is LevelFormat.STRUCTURED:
        assert lv.structured is not None
        n, m = (_operand(x, params, k, lv) for x in lv.structured)
        if not 0 < n < m:
            raise _fail("structured-arguments", f"structured[n, m] needs 0 < n < m, got [{n}, {m}]", k, lv)
    return LevelType(
        fmt, unique="nonunique" not in props, ordered="nonordered" not in props, n=n, m=m, soa="soa" in props
    )


def _check_structure(levels: Sequence[Level], lv_ast: Sequence[ast.LevelAST], names: Sequence[str]) -> None:
    fmts = [lv.format for lv in levels]
    # batch levels lead, and index a plain dimension
    seen_other = False
    for k, lv in enumerate(levels):
        if lv.format is LevelFormat.BATCH:
            if seen_other:
                raise _fail("batch-leading", "batch levels must come before every other level", k, lv_ast[k])
            if not isinstance(lv.expr, Dim):
                raise _fail("batch-dimension", "a batch level must index a plain dimension", k, lv_ast[k])
        else:
            seen_other = True
    # singleton: under a nonunique compressed / loose_compressed level, or another singleton
    singles = [k for k, f in enumerate(fmts) if f is LevelFormat.SINGLETON]
    for k in singles:
        parent = levels[k - 1] if k > 0 else None
        ok = parent is not None and (
            parent.format is LevelFormat.SINGLETON or (parent.format in STORES_POS and not parent.type.unique)
        )
        if not ok:
            raise _fail(
                "singleton-parent",
                "a singleton level must follow a compressed(nonunique) or loose_compressed(nonunique) "
                "level, or another singleton",
                k,
                lv_ast[k],
            )
    if singles and len({levels[k].type.soa for k in singles}) > 1:
        raise _fail(
            "singleton-layout", "all singleton levels must agree on 'soa'", singles[-1], lv_ast[singles[-1]]
        )
    # structured[n, m]: the last level, under dense levels only, applied to d mod m
    for k, lv in enumerate(levels):
        if lv.format is not LevelFormat.STRUCTURED:
            continue
        if k != len(levels) - 1:
            raise _fail("structured-last", "a structured level must be the last level", k, lv_ast[k])
        if not all(f is LevelFormat.DENSE for f in fmts[:k]):
            raise _fail(
                "structured-parents-dense",
                "every level before a structured level must be dense",
                k,
                lv_ast[k],
            )
        if not (isinstance(lv.expr, Mod) and lv.expr.divisor == lv.type.m):
            raise _fail(
                "structured-mod",
                f"a structured[{lv.type.n}, {lv.type.m}] level must index 'd mod {lv.type.m}'",
                k,
                lv_ast[k],
            )
    # range closes an earlier d1 - d2 / d1 + d2 level on one of its dimensions
    diag_levels = [k for k, lv in enumerate(levels) if isinstance(lv.expr, (Add, Sub))]
    for k, lv in enumerate(levels):
        if lv.format is not LevelFormat.RANGE:
            continue
        if not isinstance(lv.expr, Dim) or not any(
            j < k and lv.expr.dim in levels[j].expr.dims for j in diag_levels
        ):
            raise _fail(
                "range-closes-pair",
                "a range level must index a plain dimension of an earlier 'd1 - d2' or 'd1 + d2' level",
                k,
                lv_ast[k],
            )
    for k in diag_levels:
        pair = levels[k].expr.dims
        if not any(
            j > k and levels[j].format is LevelFormat.RANGE and levels[j].expr.dims[0] in pair
            for j in range(len(levels))
        ):
            raise _fail(
                "diagonal-needs-range",
                f"'{levels[k].expr.to_text(names)}' must be closed by a later range level on "
                f"{names[pair[0]]} or {names[pair[1]]}",
                k,
                lv_ast[k],
            )


def _invert(
    levels: Sequence[Level], names: Sequence[str], lv_ast: Sequence[ast.LevelAST]
) -> tuple[tuple[int, _Recipe], ...]:
    ndim = len(names)
    recipes: dict[int, _Recipe] = {}
    owner: dict[int, int] = {}  # dim -> level that first stored it

    def claim(d: int, k: int, recipe: _Recipe) -> None:
        if d in recipes:
            raise _fail(
                "dimension-stored-twice",
                f"dimension '{names[d]}' is already stored by level {owner[d]}",
                k,
                lv_ast[k],
            )
        recipes[d] = recipe
        owner[d] = k

    for k, lv in enumerate(levels):
        if isinstance(lv.expr, Dim):
            claim(lv.expr.dim, k, ("level", k))
    for k, lv in enumerate(levels):
        e = lv.expr
        if isinstance(e, FloorDiv):
            mods = [j for j, o in enumerate(levels) if isinstance(o.expr, Mod) and o.expr.dim == e.dim]
            match = [j for j in mods if levels[j].expr.divisor == e.divisor]  # type: ignore[union-attr]
            if len(match) != 1 or len(mods) != 1:
                raise _fail(
                    "block-pairing",
                    f"'{e.to_text(names)}' needs exactly one matching '{names[e.dim]} mod {e.divisor}'",
                    k,
                    lv_ast[k],
                )
            claim(e.dim, k, ("block", k, match[0], e.divisor))
        elif isinstance(e, Mod):
            divs = [j for j, o in enumerate(levels) if isinstance(o.expr, FloorDiv) and o.expr.dim == e.dim]
            if not any(levels[j].expr.divisor == e.divisor for j in divs):  # type: ignore[union-attr]
                raise _fail(
                    "block-pairing",
                    f"'{e.to_text(names)}' needs a matching '{names[e.dim]} floordiv {e.divisor}'",
                    k,
                    lv_ast[k],
                )
    order: list[int] = list(recipes)
    for k, lv in enumerate(levels):
        e = lv.expr
        if not isinstance(e, (Add, Sub)):
            continue
        a, b = e.left, e.right
        if a in recipes and b in recipes:
            raise _fail(
                "dimension-stored-twice",
                f"both dimensions of '{e.to_text(names)}' are stored elsewhere",
                k,
                lv_ast[k],
            )
        if a not in recipes and b not in recipes:
            raise _fail(
                "not-invertible",
                f"'{e.to_text(names)}' cannot be inverted: neither dimension is stored on its own",
                k,
                lv_ast[k],
            )
        if isinstance(e, Sub):
            rec: _Recipe = ("sub_left", k, b) if a not in recipes else ("sub_right", k, a)
            target = a if a not in recipes else b
        else:
            target = a if a not in recipes else b
            rec = ("add", k, b if target == a else a)
        claim(target, k, rec)
        order.append(target)
    for d in range(ndim):
        if d not in recipes:
            raise _fail("unused-dimension", f"dimension '{names[d]}' is not stored by any level")
    return tuple((d, recipes[d]) for d in order)


#: The most dimensions / levels a format may have (NumPy arrays have at most 64 dimensions;
#: a blocked format has up to two levels per dimension).
MAX_DIMS = 64
MAX_LEVELS = 128

#: The other keys of MLIR's ``#sparse_tensor.encoding`` (kept in ``Format.attributes``) and
#: the bit widths MLIR accepts for positions and coordinates (0 = the index width).
_ATTRIBUTE_KEYS = ("posWidth", "crdWidth", "explicitVal", "implicitVal")
_BITWIDTHS = ("0", "8", "16", "32", "64")


def _check_attributes(attributes: Sequence[tuple[str, str]], where: Any) -> None:
    """MLIR's rules for the attribute keys: a misspelt key must not be silently ignored."""
    seen: set[str] = set()
    for key, value in attributes:
        if key not in _ATTRIBUTE_KEYS:
            raise _fail(
                "unknown-attribute",
                f"unknown #sparse_tensor.encoding key '{key}'; expected map, {', '.join(_ATTRIBUTE_KEYS)}",
                where=where,
            )
        if key in seen:
            raise _fail("duplicate-attribute", f"'{key}' is given twice", where=where)
        seen.add(key)
        if key in ("posWidth", "crdWidth") and value not in _BITWIDTHS:
            raise _fail("bitwidth", f"{key} must be one of {', '.join(_BITWIDTHS)}, got {value}", where=where)


def build_format(
    spec: ast.SpecAST,
    params: Mapping[str, int] | None = None,
    *,
    name: str | None = None,
) -> Format:
    """Validate a parsed map (or MLIR attribute) and build its :class:`Format`."""
    params = dict(params or {})
    attributes: tuple[tuple[str, str], ...] = ()
    if isinstance(spec, ast.EncodingAST):
        attributes = spec.attributes
        spec = spec.map
        _check_attributes(attributes, spec)
    names = spec.dims
    if len(names) > MAX_DIMS or len(spec.levels) > MAX_LEVELS:
        raise _fail(
            "too-many-levels",
            f"a format has at most {MAX_DIMS} dimensions and {MAX_LEVELS} levels "
            f"(ust.formats.model.MAX_DIMS / MAX_LEVELS), got {len(names)} and {len(spec.levels)}",
            where=spec,
        )
    seen: set[str] = set()
    for nm in names:
        if nm in seen:
            raise _fail("duplicate-dimension", f"dimension '{nm}' is named twice", where=spec)
        seen.add(nm)
    if not spec.levels:
        raise _fail("no-levels", "a format needs at least one level", where=spec)
    index = {nm: d for d, nm in enumerate(names)}
    levels = tuple(
        Level(_build_expr(lv.expr, index, params, k, lv), _build_type(lv, params, k))
        for k, lv in enumerate(spec.levels)
    )
    _check_structure(levels, spec.levels, names)
    inverse = _invert(levels, names, spec.levels)
    return Format(len(names), levels, names, name, attributes, inverse)
