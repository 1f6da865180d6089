"""``ust.compute`` / ``ust.einsum`` / ``ust.Compute``: index expressions over any formats, compiled.

``compute("C(i,j) = A(i,k) * B(k,j) + D(i,j)", A=..., B=..., D=...)`` parses the index notation
(the one Lark grammar), checks names, ranks, extents and dtypes before any work, chooses a loop
order in which every sparse operand is walked in its level order (converting once an operand
that no order fits), lowers the expression to the loop IR with merge-lattice co-iteration and
workspaces (:mod:`ust.codegen.compute_lower`), emits C (CPU) or CUDA (GPU), compiles it once
(authenticated disk cache), runs it, and assembles the result.  ``einsum`` is a front end that
builds the same expression from NumPy's subscripts.

Result kind (where ``out_format`` does not say): **sparse** when every term is a product of
sparse operands (scalars aside), or when in every term a sparse operand has exactly the
output's indices (its pattern bounds the result's); **dense** otherwise.  A sparse result
takes that operand's format (its levels permuted to the output's index order), else CSR
(2-D), ``(i) -> (i : compressed)`` (1-D) or COO (higher ranks).  A result with no index is a
0-d array.  Dense results come back in the operands' package and memory space.

Semirings: ``semiring="min_plus"`` etc. (GraphBLAS's built-ins) or :class:`Semiring`.  Every
stored slot is an entry (explicit zeros included); positions not stored are the additive
identity, which a sparse result records as its ``fill_value``.  Duplicates of a non-canonical
operand are summed first, as SciPy does.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.algebra.operands import DENSE, SCALAR, SPARSE, as_tensor, kind
from ust.formats.library import resolve
from ust.formats.model import Dim, Format, LevelFormat
from ust.grammar.semiring import BUILTIN, Semiring, resolve_semiring
from ust.plan import Decision
from ust.plan.planner import c_compiler_available
from ust.plan.planner import choose as plan_choose
from ust.plan.routes import Route, register, route_of
from ust.plan.rules import Problem
from ust.runtime.errors import (
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    UnsupportedError,
    UstSyntaxError,
)
from ust.runtime.log import get_logger
from ust.runtime.placement import Placement, is_planning_only
from ust.runtime.stateful import PlanFileError, StatefulOperation, ust_version
from ust.tensor import Tensor

if TYPE_CHECKING:  # the compiler itself is imported when an expression is first compiled
    from ust.codegen.compute_lower import ComputeKernels, LevelSpec, OperandSpec
    from ust.codegen.notation import IndexExpr

__all__ = ["Compute", "Semiring", "compute", "einsum", "explain_compute", "explain_einsum", "semirings"]

_log = get_logger(__name__)

#: Value dtypes the compiler computes in.
VALUE_DTYPES = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
_LEVEL_KIND = {
    LevelFormat.DENSE: "dense",
    LevelFormat.COMPRESSED: "compressed",
    LevelFormat.LOOSE_COMPRESSED: "loose_compressed",
    LevelFormat.SINGLETON: "singleton",
}
#: How a kernel handles outputs that rows share (see :func:`ust.codegen.compute_lower.lower_compute`).
MODES = ("workspace", "expand", "partials")
#: Most dimensions an operand or the result may have.
MAX_RANK = 8


def semirings() -> tuple[str, ...]:
    """The names of the built-in semirings."""
    return tuple(BUILTIN)


# ----------------------------------------------------------------------------- front ends


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> IndexExpr:
    from ust.codegen.notation import parse_index_expr

    return parse_index_expr(text)


def _einsum_text(subscripts: Any, n: int) -> tuple[str, tuple[str, ...]]:
    """NumPy subscripts -> index notation over operands ``T0``, ``T1``, ... (and their names)."""
    if not isinstance(subscripts, str):
        raise InvalidTypeError(f"einsum subscripts must be a str, not {type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    if "." in s:
        raise UnsupportedError("einsum: '...' (broadcast dimensions) is not supported; name every index")
    if s.count("->") > 1:
        raise InvalidValueError(f"einsum subscripts {subscripts!r} have more than one '->'")
    lhs, arrow, out = s.partition("->")
    inputs = lhs.split(",")
    for part in [*inputs, out]:
        bad = [ch for ch in part if not ch.isalpha()]
        if bad:
            raise InvalidValueError(f"einsum subscripts {subscripts!r}: {bad[0]!r} is not an index letter")
    for pos, ch in enumerate(out):
        if ch in out[:pos]:
            col = len(lhs) + len(arrow) + pos + 1
            raise UstSyntaxError(
                f"einsum subscripts {subscripts!r}: the output repeats the index {ch!r} (column {col}); "
                "each output index must be distinct",
                line=1,
                column=col,
                text=s,
            )
    if len(inputs) != n:
        raise InvalidValueError(
            f"einsum subscripts {subscripts!r} name {len(inputs)} operand(s) but {n} were given"
        )
    if not arrow:
        counts: dict[str, int] = {}
        for part in inputs:
            for ch in part:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(ch for ch, c in counts.items() if c == 1))
    names = tuple(f"T{k}" for k in range(n))
    rhs = " * ".join(f"{nm}({', '.join(part)})" if part else nm for nm, part in zip(names, inputs))
    lhs_text = f"out({', '.join(out)})" if out else "out"
    return f"{lhs_text} = {rhs or '1'}", names


def einsum(
    subscripts: str,
    *operands: Any,
    out_format: Any = None,
    semiring: Any = None,
    execution: Any = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """NumPy's ``einsum`` over any mix of sparse and dense operands (compiled; see :func:`compute`).

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((4, 5), density=0.5, random_state=0, format="csr")
    >>> x = np.arange(5.0)
    >>> bool(np.allclose(ust.einsum("ij,j->i", A, x), A @ x))
    True
    """
    text, names = _einsum_text(subscripts, len(operands))
    return compute(
        text,
        out_format=out_format,
        semiring=semiring,
        execution=execution,
        options=options,
        **dict(zip(names, operands)),
    )


def compute(
    expression: str,
    *,
    out_format: Any = None,
    semiring: Any = None,
    execution: Any = None,
    options: Mapping[str, Any] | None = None,
    **operands: Any,
) -> Any:
    """Evaluate index notation such as ``"C(i,j) = A(i,k) * B(k,j) + D(i,j)"`` on the operands.

    ``out_format``: a format (name, text or Format) for a sparse result, ``"dense"`` for an
    array, None for the rule in the module docstring.  ``semiring``: a built-in name or a
    :class:`Semiring`.  ``options``: ``{"order": "ikj"}`` fixes the loop order.

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((4, 4), density=0.5, random_state=1, format="csr")
    >>> C = ust.compute("C(i,j) = A(i,k) * A(k,j) + A(i,j)", A=A)
    >>> bool(np.allclose(C.todense(), (A @ A + A).toarray()))
    True
    """
    with Compute(
        expression, out_format=out_format, semiring=semiring, execution=execution, options=options, **operands
    ) as c:
        c.plan()
        return c.execute()


def explain_compute(
    expression: str,
    *,
    out_format: Any = None,
    semiring: Any = None,
    execution: Any = None,
    options: Mapping[str, Any] | None = None,
    **operands: Any,
) -> str:
    """What :func:`compute` would do: route, concrete index notation, loop order, co-iteration, workspace."""
    c = Compute(
        expression, out_format=out_format, semiring=semiring, execution=execution, options=options, **operands
    )
    return c.explain()


def explain_einsum(
    subscripts: str,
    *operands: Any,
    out_format: Any = None,
    semiring: Any = None,
    execution: Any = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    text, names = _einsum_text(subscripts, len(operands))
    return explain_compute(
        text,
        out_format=out_format,
        semiring=semiring,
        execution=execution,
        options=options,
        **dict(zip(names, operands)),
    )


# ----------------------------------------------------------------------------- analysis


@dataclass
class _Operand:
    name: str
    kind: str
    value: Any  # Tensor (sparse), array (dense) or a Python / NumPy scalar


def _check_names(expr: IndexExpr, given: Mapping[str, Any]) -> None:
    accessed, scalars = set(expr.operands), set(expr.scalars)
    both = accessed & scalars
    if both:
        raise InvalidValueError(
            f"{', '.join(sorted(both))} is used both as an indexed operand and as a scalar"
        )
    if expr.output in accessed | scalars:
        raise InvalidValueError(f"the output {expr.output} also appears on the right-hand side")
    missing = sorted((accessed | scalars) - set(given))
    if missing:
        raise InvalidValueError(f"operand(s) {', '.join(missing)} named in the expression but not given")
    extra = sorted(set(given) - accessed - scalars)
    if extra:
        raise InvalidValueError(
            f"operand(s) {', '.join(extra)} given but not named in the expression ({expr.text()})"
        )
    on_right = {i for t in expr.terms for f in t.factors for i in f.indices}
    lost = [i for i in expr.out_indices if i not in on_right]
    if lost:
        raise InvalidValueError(
            f"output index {', '.join(lost)} does not appear on the right-hand side of {expr.text()}"
        )


def _classify(expr: IndexExpr, given: Mapping[str, Any]) -> dict[str, _Operand]:
    out: dict[str, _Operand] = {}
    for name, x in given.items():
        k = kind(x)
        if name in expr.scalars:
            if k != SCALAR:
                raise ShapeError(f"{name} is a scalar in the expression but a {k} operand was given")
            out[name] = _Operand(name, SCALAR, x.item() if hasattr(x, "item") else x)
        else:
            if k == SCALAR:
                raise ShapeError(f"{name} is indexed in the expression but a scalar was given")
            if k == SPARSE:
                out[name] = _Operand(name, k, as_tensor(x))
            else:
                out[name] = _Operand(name, k, np.asarray(x) if isinstance(x, (list, tuple)) else x)
    return out


def _shape(op: _Operand) -> tuple[int, ...]:
    v = op.value
    return tuple(int(s) for s in (v.shape if hasattr(v, "shape") else np.shape(v)))


def _extents(expr: IndexExpr, ops: Mapping[str, _Operand]) -> dict[str, int]:
    ext: dict[str, tuple[int, str]] = {}
    for t in expr.terms:
        for f in t.factors:
            shp = _shape(ops[f.operand])
            if len(shp) != len(f.indices):
                raise ShapeError(
                    f"{f.text()} has {len(f.indices)} index(es) but {f.operand} has {len(shp)} dimension(s) {shp}"
                )
            if len(shp) > MAX_RANK:
                raise UnsupportedError(
                    f"{f.operand} has {len(shp)} dimensions; at most {MAX_RANK} are supported"
                )
            for i, n in zip(f.indices, shp):
                if i in ext and ext[i][0] != n:
                    raise ShapeError(
                        f"index {i} has extent {ext[i][0]} in {ext[i][1]} but {n} in {f.operand}"
                    )
                ext.setdefault(i, (n, f.operand))
    return {i: e for i, (e, _) in ext.items()}


def _np_dtype(x: Any) -> np.dtype:
    """The NumPy dtype of an array of any package (a torch dtype by its name)."""
    dt = x.dtype
    if type(x).__module__.partition(".")[0] == "torch":
        return np.dtype(str(dt).rpartition(".")[2])
    return np.dtype(dt)


def _value_dtype(expr: IndexExpr, ops: Mapping[str, _Operand], sr: Semiring) -> np.dtype:
    arrays = [_np_dtype(o.value) for o in ops.values() if o.kind != SCALAR]
    scalars = [o.value for o in ops.values() if o.kind == SCALAR]
    lits = [t.literal for t in expr.terms if t.literal not in (1, -1)]
    try:
        dt = np.result_type(*arrays, *scalars, *lits) if (arrays or scalars or lits) else np.dtype(np.float64)
    except TypeError as exc:
        raise InvalidTypeError(f"operands of these types cannot be combined: {exc}") from None
    if dt == np.bool_:
        if sr.name != "or_and":
            raise UnsupportedError("bool operands take the or_and semiring; cast them for arithmetic")
        dt = np.dtype(np.uint8)
    if str(dt) not in VALUE_DTYPES:
        raise UnsupportedError(
            f"values of dtype {dt} are not supported; supported: {', '.join(VALUE_DTYPES)}"
        )
    sr.check_dtype(dt)
    if expr.has_subtraction and not sr.ring:
        raise UnsupportedError(f"'-' needs a semiring with an additive inverse (plus_times), not {sr.label}")
    return dt


def _diagonals(expr: IndexExpr, ops: dict[str, _Operand]) -> IndexExpr:
    """Accesses that repeat an index (``A(i,i)``) read a diagonal: made a new operand of lower rank."""
    from ust.codegen.notation import Factor, IndexExpr, Term

    terms: list[Term] = []
    made: dict[tuple[str, tuple[str, ...]], str] = {}
    for t in expr.terms:
        factors: list[Factor] = []
        for f in t.factors:
            if len(set(f.indices)) == len(f.indices):
                factors.append(f)
                continue
            key = (f.operand, f.indices)
            if key not in made:
                uniq = tuple(dict.fromkeys(f.indices))
                name = f"{f.operand}#diag{len(made)}"
                ops[name] = _diagonal_operand(ops[f.operand], f.indices, uniq, name)
                made[key] = name
            factors.append(Factor(made[key], tuple(dict.fromkeys(f.indices))))
        terms.append(Term(t.literal, t.scalars, tuple(factors)))
    return IndexExpr(expr.output, expr.out_indices, tuple(terms))


def _diagonal_operand(op: _Operand, indices: tuple[str, ...], uniq: tuple[str, ...], name: str) -> _Operand:
    shp = _shape(op)
    for i in uniq:
        same = [d for d, j in enumerate(indices) if j == i]
        if len({shp[d] for d in same}) > 1:
            raise ShapeError(
                f"index {i} is repeated in {op.name} over dimensions of different extents {[shp[d] for d in same]}"
            )
    if op.kind == DENSE:
        from ust.runtime import xp as _xp

        arr = op.value
        xp = _xp.namespace(arr) if hasattr(arr, "dtype") else np
        letters = {i: chr(ord("a") + n) for n, i in enumerate(uniq)}
        sub = "".join(letters[i] for i in indices) + "->" + "".join(letters[i] for i in uniq)
        return _Operand(name, DENSE, xp.ascontiguousarray(xp.einsum(sub, xp.asarray(arr))))
    from ust.convert.unpack import unpack

    t: Tensor = op.value
    ent = unpack(t, keep_zeros=True)
    xp = ent.xp
    dims = ent.dims()
    keep = xp.ones(int(ent.values.shape[0]), dtype=bool)
    for i in uniq:
        ds = [d for d, j in enumerate(indices) if j == i]
        for d in ds[1:]:
            keep &= dims[d] == dims[ds[0]]
    lead = [indices.index(i) for i in uniq]
    coords = [dims[d][keep] for d in lead]
    new_shape = tuple(shp[d] for d in lead)
    from ust.convert.pack import pack
    from ust.convert.unpack import Entries

    fmt = fitting_format(
        len(uniq), tuple(range(len(uniq))), new_shape, int(coords[0].shape[0]) if coords else 0
    )
    ent2 = Entries(xp, fmt, new_shape, coords, ent.values[keep], None, False)
    return _Operand(name, SPARSE, pack(ent2, fmt, source_index_dtype=t.index_dtype))


def _split_aliases(expr: IndexExpr, ops: dict[str, _Operand]) -> IndexExpr:
    """An operand read with two index patterns becomes two operands (each walked in its own order)."""
    from ust.codegen.notation import Factor, IndexExpr, Term

    seen: dict[str, tuple[str, ...]] = {}
    alias: dict[tuple[str, tuple[str, ...]], str] = {}
    terms: list[Term] = []
    for t in expr.terms:
        factors: list[Factor] = []
        for f in t.factors:
            first = seen.setdefault(f.operand, f.indices)
            if first == f.indices or ops[f.operand].kind != SPARSE:
                factors.append(f)
                continue
            key = (f.operand, f.indices)
            if key not in alias:
                alias[key] = f"{f.operand}#{len(alias) + 1}"
                ops[alias[key]] = _Operand(alias[key], SPARSE, ops[f.operand].value)
            factors.append(Factor(alias[key], f.indices))
        terms.append(Term(t.literal, t.scalars, tuple(factors)))
    return IndexExpr(expr.output, expr.out_indices, tuple(terms))


def walk_levels(t: Tensor) -> tuple[LevelSpec, ...] | None:
    """The levels of ``t`` as the compiler walks them, or None when its format must be converted
    (affine or range levels, batches, unordered levels, duplicates)."""
    if t.is_batched or not t.has_canonical_format:
        return None
    return format_levels(t.format)


def format_levels(fmt: Format) -> tuple[LevelSpec, ...] | None:
    """The levels of ``fmt`` as the compiler walks them, or None (see :func:`walk_levels`)."""
    from ust.codegen.compute_lower import LevelSpec

    out: list[LevelSpec] = []
    for _k, lv in enumerate(fmt.levels):
        if not isinstance(lv.expr, Dim) or lv.format not in _LEVEL_KIND:
            return None
        if not lv.type.ordered:
            return None
        out.append(LevelSpec(lv.expr.dim, _LEVEL_KIND[lv.format], bool(lv.type.unique)))
    if out and not out[-1].unique:
        return None
    if out and not out[0].unique:
        # a first level with duplicates (COO) is walked run by run, one thread at a time: a
        # format with a unique first level lets the outer loop run in parallel
        return None
    for a, b in itertools.pairwise(out):
        if not a.unique and b.kind != "singleton":
            return None
    if any(x.kind == "singleton" and (k == 0 or out[k - 1].kind == "dense") for k, x in enumerate(out)):
        return None
    return tuple(out)


def _why_convert(t: Tensor) -> str:
    """Why the compiler cannot walk ``t`` as it is stored."""
    if t.is_batched:
        return "batched formats are walked member by member only through a format without batches"
    lv = format_levels(t.format)
    if lv is None:
        if any(not isinstance(x.expr, Dim) for x in t.format.levels):
            return (
                "its levels store expressions of the indices (diagonals, blocks), not the indices themselves"
            )
        first = t.format.levels[0]
        if first.format is LevelFormat.COMPRESSED and not first.type.unique:
            return "its first level stores duplicates (COO): walked as it is, the outer loop would run on one thread"
        return "its level types (range, structured, unordered) are not walked level by level"
    return "it is not canonical (unsorted or duplicate entries): duplicates are summed"


def _convert_keeping_slots(t: Tensor, target: Format) -> Tensor:
    """``t`` in ``target`` with every stored in-bounds slot kept as an entry (explicit zeros,
    DIA's in-matrix diagonal slots, BSR's block fill; a semiring sees them all), duplicates
    summed."""
    from ust.convert.pack import pack
    from ust.convert.unpack import unpack

    return pack(unpack(t, keep_zeros=True), target, source_index_dtype=t.index_dtype)


def fitting_format(rank: int, dim_order: Sequence[int], shape: Sequence[int], nse: int) -> Format:
    """A format whose levels store the dimensions in ``dim_order``: the first dense where its
    extent is modest against the entries (CSR-like), compressed below (CSF)."""
    names = [f"d{d}" for d in range(rank)]
    first = dim_order[0]
    levels = []
    for n, d in enumerate(dim_order):
        # the last level is always compressed: the format stores exactly the entries
        kind_ = "dense" if (n == 0 and rank > 1 and shape[first] <= 4 * nse + 1024) else "compressed"
        levels.append(f"{names[d]} : {kind_}")
    return resolve(f"({', '.join(names)}) -> ({', '.join(levels)})")


def _result_kind(expr: IndexExpr, ops: Mapping[str, _Operand], out_format: Any) -> tuple[str, str | None]:
    """("dense" | "sparse" | "scalar", the operand whose format a sparse result takes)."""
    if not expr.out_indices:
        return "scalar", None
    if isinstance(out_format, str) and out_format.strip().lower() == "dense":
        return "dense", None
    all_sparse = all(t.factors and all(ops[f.operand].kind == SPARSE for f in t.factors) for t in expr.terms)
    pattern_from: str | None = None
    bounded = True
    for t in expr.terms:
        match = [
            f.operand
            for f in t.factors
            if ops[f.operand].kind == SPARSE
            and len(f.indices) == len(expr.out_indices)
            and set(f.indices) == set(expr.out_indices)
        ]
        if not match:
            bounded = False
            break
        pattern_from = pattern_from or match[0]
    if out_format is not None:
        return "sparse", pattern_from
    if all_sparse or bounded:
        return "sparse", pattern_from if (bounded and not all_sparse) else None
    return "dense", None


def _default_format(expr: IndexExpr, ops: Mapping[str, _Operand], pattern_from: str | None) -> Format:
    r = len(expr.out_indices)
    if pattern_from is not None:
        t: Tensor = ops[pattern_from].value
        f = next(f for tm in expr.terms for f in tm.factors if f.operand == pattern_from)
        if not t.is_batched:
            perm = [f.indices.index(i) for i in expr.out_indices]  # result dim d is operand dim perm[d]
            return _permuted(t.format, perm)
    if r == 1:
        return resolve("(i) -> (i : compressed)")
    if r == 2:
        return resolve("CSR")
    names = ", ".join(f"d{d}" for d in range(r))
    levels = [
        "d0 : compressed(nonunique)",
        *(f"d{d} : singleton(nonunique)" for d in range(1, r - 1)),
        f"d{r - 1} : singleton",
    ]
    return resolve(f"({names}) -> ({', '.join(levels)})")


def _permuted(fmt: Format, perm: Sequence[int]) -> Format:
    """``fmt`` over dimensions renumbered so that result dimension d is ``fmt``'s ``perm[d]``."""
    text = fmt.map_text()
    dims_part, _, levels_part = text.partition("->")
    names = [n.strip() for n in dims_part.strip().strip("()").split(",")]
    new_names = [names[p] for p in perm]
    return resolve(f"({', '.join(new_names)}) ->{levels_part}")


# ----------------------------------------------------------------------------- the plan


@dataclass
class _Plan:
    expr: IndexExpr
    output: str
    order: tuple[str, ...]
    order_reason: str
    conversions: dict[str, tuple[int, ...]]
    out_format: Format | None
    value_dtype: np.dtype
    extents: dict[str, int]
    ck: ComputeKernels
    specs: tuple[OperandSpec, ...]
    device: str
    route: str
    reason: str
    library: Any = None
    notes: list[str] = field(default_factory=list)
    #: the operands as the kernels read them (moved, converted, diagonals taken)
    ops: dict[str, _Operand] = field(default_factory=dict)
    #: stored entries the kernels walk (the thread-count rule's measure of the work)
    work: int = 0


class Compute(StatefulOperation):
    """``compute`` as a stateful object: ``plan()`` once (order, lowering, compilation),
    ``execute()`` many times, ``reset_operands(**new)`` for operands of the same shape,
    format and dtype, ``autotune()`` to time the candidate loop orders, and saved plans.

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((5, 5), density=0.4, random_state=2, format="csr")
    >>> with ust.Compute("y(i) = A(i,j) * x(j)", A=A, x=np.ones(5)) as c:
    ...     c.plan()
    ...     bool(np.allclose(c.execute(), A @ np.ones(5)))
    True
    """

    kind = "compute"

    def __init__(
        self,
        expression: str,
        *,
        out_format: Any = None,
        semiring: Any = None,
        execution: Any = None,
        options: Mapping[str, Any] | None = None,
        **operands: Any,
    ) -> None:
        super().__init__()
        if not isinstance(expression, str):
            raise InvalidTypeError(f"the expression must be a str, not {type(expression).__name__}")
        self.expression = expression
        self.semiring = resolve_semiring(semiring)
        opts = dict(options or {})
        unknown = set(opts) - {"order", "mode", "split"}
        if unknown:
            raise InvalidValueError(
                f"unknown compute options {sorted(unknown)}; supported: order, mode, split"
            )
        split = opts.get("split", 0)
        if isinstance(split, bool) or not isinstance(split, int) or split < 0:
            raise InvalidValueError(
                f"options['split'] must be a non-negative int (GPU parts per row; 0 chooses), not {split!r}"
            )
        if opts.get("mode") is not None and opts["mode"] not in MODES:
            raise InvalidValueError(
                f"options['mode'] must be one of {', '.join(MODES)}, not {opts['mode']!r}"
            )
        order_opt = opts.get("order")
        if order_opt is not None and (
            not isinstance(order_opt, (str, list, tuple)) or not all(isinstance(v, str) for v in order_opt)
        ):
            raise InvalidTypeError(
                f"options['order'] must be a string such as 'ikj' or a sequence of index names, not {order_opt!r}"
            )
        self.options = opts
        self.execution = execution
        self.requested_format = out_format
        expr = _parse(expression)
        _check_names(expr, operands)
        self._given = dict(operands)
        ops = _classify(expr, operands)
        self._extents = _extents(expr, ops)
        self._dtype = _value_dtype(expr, ops, self.semiring)
        # dense results come back in the package of the first dense operand (torch stays torch)
        home = next((n for n, o in ops.items() if o.kind == DENSE), None)
        self._placement = Placement(
            {n: o.value for n, o in ops.items() if o.kind != SCALAR}, execution, home=home
        )
        self._placement.require_device()
        self._expr0 = expr
        self._ops = ops
        self._result_kind, self._pattern_from = _result_kind(expr, ops, out_format)
        self._out_format = self._resolve_out_format(expr, ops)
        self._plan_obj: _Plan | None = None
        self._group = 0  # GPU lanes per row fixed by autotune (0: from the row lengths)
        self._split = split  # GPU parts per row of a split row reduction (0: from the shape)
        self._args_cache: tuple[_Plan, dict[str, Any]] | None = None

    # -- planning -------------------------------------------------------------------------------
    def _resolve_out_format(self, expr: IndexExpr, ops: Mapping[str, _Operand]) -> Format | None:
        if self._result_kind != "sparse":
            return None
        fmt = self.requested_format
        if fmt is None:
            return _default_format(expr, ops, self._pattern_from)
        out = resolve(fmt)
        if out.ndim != len(expr.out_indices):
            raise ShapeError(
                f"out_format {out.map_text()} has {out.ndim} dimension(s) but the result "
                f"{expr.output}({', '.join(expr.out_indices)}) has {len(expr.out_indices)}"
            )
        return out

    @property
    def device(self) -> str:
        return self._placement.device

    def _problem(self) -> Problem:
        on_gpu = self.device.startswith("cuda")
        return Problem(
            op="compute",
            device="cuda" if on_gpu else "cpu",
            format_class="EXPRESSION",
            format_params=(),
            canonical=True,
            dtype=str(self._dtype),
            index_dtype="int64",
            plain=True,
            has_compiler=True if on_gpu else c_compiler_available(),
        )

    def decision(self) -> Decision:
        return plan_choose(self._problem(), None)

    def _build(
        self, order: Sequence[str] | None = None, mode: str | None = None, gpu: bool | None = None
    ) -> _Plan:
        """Order, conversions, lowering and (for this device, ``gpu`` None) the compiled library."""
        from ust.codegen.compute_lower import OperandSpec
        from ust.codegen.loop_order import AccessLayout, choose_order

        expr = self._expr0
        ops = dict(self._ops)
        pl = self._placement
        planning = is_planning_only()  # ust.explain: nothing moves, converts or compiles
        for n, o in list(ops.items()):
            if o.kind == SPARSE:
                ops[n] = _Operand(n, SPARSE, pl.tensor(o.value))
            elif o.kind == DENSE and not planning:
                ops[n] = _Operand(n, DENSE, pl.move(o.value))
        expr = _diagonals(expr, ops)
        expr = _split_aliases(expr, ops)
        extents = dict(self._extents)
        layouts = []
        walk: dict[str, tuple[LevelSpec, ...] | None] = {}
        for name in expr.operands:
            o = ops[name]
            if o.kind == SPARSE:
                lv = walk_levels(o.value)
                walk[name] = lv
                layouts.append(
                    AccessLayout(
                        name, True, tuple(x.dim for x in lv) if lv else None, lv is not None, int(o.value.nse)
                    )
                )
            else:
                layouts.append(AccessLayout(name, False, None))
        sparse_out = self._result_kind == "sparse"
        here = self.device.startswith("cuda")
        on_gpu = here if gpu is None else gpu
        user_order = order if order is not None else self.options.get("order")
        lo = choose_order(expr, layouts, sparse_out=sparse_out, user_order=user_order, gpu=on_gpu)
        notes: list[str] = []
        conversions = dict(lo.conversions)
        for name, dims in conversions.items():
            t: Tensor = ops[name].value
            target = fitting_format(t.ndim, dims, t.shape, t.nse)
            why = _why_convert(t) if walk.get(name) is None else "its level order does not fit the loop order"
            notes.append(
                f"{name.split('#')[0]} ({t.format.map_text()}) converted once to {target.map_text()}: {why}"
            )
            if planning:
                walk[name] = format_levels(target)
                continue
            ops[name] = _Operand(name, SPARSE, _convert_keeping_slots(t, target))
            walk[name] = walk_levels(ops[name].value)
            if walk[name] is None:  # pragma: no cover - a fitting format is always walkable
                raise UnsupportedError(f"cannot walk {name} even after converting it to {target.map_text()}")
        specs = []
        for name in expr.operands:
            o = ops[name]
            if o.kind == SPARSE:
                specs.append(OperandSpec(name, o.value.ndim, walk[name], str(o.value.index_dtype)))
            else:
                specs.append(OperandSpec(name, len(_shape(o)), None))
        output = self._result_kind
        vdt = self._dtype
        mode = mode or self.options.get("mode")
        ck = self._lower(expr, tuple(specs), lo.order, output, str(vdt), mode, on_gpu, extents)
        d = self.decision()
        plan = _Plan(
            expr,
            output,
            lo.order,
            lo.reason,
            conversions,
            self._out_format,
            vdt,
            extents,
            ck,
            tuple(specs),
            self.device,
            d.route,
            d.reason,
            notes=notes,
            ops=ops,
            work=sum(int(ops[s.name].value.nse) for s in specs if s.levels is not None),
        )
        if on_gpu == here and not planning:  # (source() for the other device and explain lower only)
            plan.library = route_of(d.rule).build(plan)
        return plan

    def _check_memory(self) -> None:
        """A dense result (or the rows of a sparse one) that cannot exist: ShapeError before any work."""
        from ust.tensor.limits import check_bytes, check_dense

        xp = _xp_of(self.device) if self.device.startswith("cuda") and not self._placement.moves else np
        expr = self._expr0
        shape = tuple(self._extents[i] for i in expr.out_indices)
        if self._result_kind == "dense":
            check_dense(
                xp,
                shape,
                self._dtype,
                f"the dense result {expr.output}{shape}",
                "ask for a sparse out_format",
            )
        elif self._result_kind == "sparse" and shape:
            check_bytes(
                xp, 16 * (shape[0] + 1), f"the row pointers of the sparse result {expr.output}{shape}"
            )

    def _lower(
        self,
        expr: IndexExpr,
        specs: tuple[OperandSpec, ...],
        order: tuple[str, ...],
        output: str,
        vdt: str,
        mode: str | None,
        on_gpu: bool,
        extents: Mapping[str, int],
        one_pass: bool = True,
    ) -> ComputeKernels:
        from ust.backends.generated.compute_exec import WORKSPACE_LIMIT
        from ust.runtime.cpu_threads import usable_cores

        outs = expr.out_indices
        lead = _leading_outputs(order, outs)
        itemsize = np.dtype(vdt).itemsize
        if output == "sparse":
            if on_gpu:
                mode = "expand"  # no per-thread row workspace on the GPU
            elif mode is None:
                w = math.prod(extents[v] for v in order if v in outs and v not in lead)
                mode = "workspace" if usable_cores() * w * (16 + itemsize) <= WORKSPACE_LIMIT else "expand"
            elif mode == "partials":
                mode = "workspace"  # private copies are a dense output's: a sparse one has a workspace
        elif mode is None:
            nout = math.prod(extents[v] for v in outs)
            fits = usable_cores() * nout * itemsize <= WORKSPACE_LIMIT
            mode = "workspace" if on_gpu or not fits else "partials"
        elif mode == "expand":
            mode = "partials"  # expanded entries are a sparse output's
        outer = math.prod(extents[v] for v in lead)
        mark = "int32" if outer < 2**31 - 1 else "int64"
        crd = str(self._index_dtype(tuple(extents[i] for i in expr.out_indices), 0))
        blocks = one_pass and not on_gpu and output == "sparse" and mode == "workspace"
        return _lowered(expr, specs, order, output, self.semiring, vdt, mode, on_gpu, mark, blocks, crd)

    def _plan(self) -> None:
        t0 = time.perf_counter()
        self._check_memory()
        self._plan_obj = self._build()
        p = self._plan_obj
        _log.info("compute %s: route %s on %s, %s", p.expr.text(), p.route, p.device, p.order_reason)
        _log.debug("compute planned in %.1f ms", 1e3 * (time.perf_counter() - t0))

    def autotune(self, repeats: int = 3) -> Compute:
        """Time the best few loop orders (by the order chooser's score) and keep the fastest."""
        if self._plan_obj is None:
            self.plan()
        assert self._plan_obj is not None
        expr = self._plan_obj.expr
        candidates: list[tuple[str, ...]] = [self._plan_obj.order]
        for perm in itertools.permutations(expr.indices):
            if len(candidates) >= 4 or len(expr.indices) > 6:
                break
            if perm in candidates:
                continue
            if self._result_kind == "sparse" and perm[0] not in expr.out_indices:
                continue
            candidates.append(perm)
        best: tuple[float, _Plan] | None = None
        for order in candidates:
            try:
                p = self._build(order)
            except UnsupportedError:
                continue
            self._plan_obj = p
            times = []
            sync = _synchronizer(p.device)
            for _ in range(repeats):
                t0 = time.perf_counter()
                self._run(p)
                sync()  # a GPU launch returns before the kernel ends: time the kernel, not the launch
                times.append(time.perf_counter() - t0)
            tm = min(times)
            _log.debug("compute autotune: order %s: %.3f ms", "".join(order), 1e3 * tm)
            if best is None or tm < best[0]:
                best = (tm, p)
        assert best is not None
        self._plan_obj = best[1]
        _log.info("compute autotune chose loop order %s", " -> ".join(best[1].order))
        return self

    # -- running --------------------------------------------------------------------------------
    def _args(self, p: _Plan) -> dict[str, Any]:
        """The operands' buffers by kernel parameter name (made once per plan and operands)."""
        cached = self._args_cache
        if cached is not None and cached[0] is p:
            return dict(cached[1])
        args = self._make_args(p)
        self._args_cache = (p, args)
        return dict(args)

    def _make_args(self, p: _Plan) -> dict[str, Any]:
        ops = p.ops
        args: dict[str, Any] = {}
        vdt = p.value_dtype
        xp = _xp_of(p.device)
        for n, spec in enumerate(p.specs):
            o = ops[spec.name]
            if spec.levels is None:
                args[f"t{n}_val"] = xp.ascontiguousarray(xp.asarray(o.value), dtype=vdt)
                continue
            t: Tensor = o.value
            for k, lv in enumerate(spec.levels):
                if lv.kind in ("compressed", "loose_compressed"):
                    args[f"t{n}_pos{k}"] = t.pos(k)
                if lv.kind != "dense":
                    args[f"t{n}_crd{k}"] = t.crd(k)
            vals = t.values
            args[f"t{n}_val"] = vals if vals.dtype == vdt else vals.astype(vdt)
        for name in p.expr.scalars:
            args[f"s_{name}"] = ops[name].value
        return args

    def _run(self, p: _Plan) -> Any:
        from ust.backends.generated.compute_exec import BoundTooLarge, run_compute
        from ust.runtime.cpu_threads import threads

        xp = _xp_of(p.device)
        on_gpu = p.device.startswith("cuda")
        work = p.work
        nthreads = 1 if on_gpu else threads(max(work, 1), 1 << 13)
        out_ext = tuple(p.extents[i] for i in p.expr.out_indices)
        args = self._args(p)
        if on_gpu:
            outer = p.extents[p.order[0]] if p.order else 1
            args["ust_group"] = self._group or lanes_per_row(work / max(outer, 1))
            args["ust_work"], args["ust_split"] = work, self._split
        vdt = str(p.value_dtype)
        try:
            return run_compute(
                p.ck, p.library.launch, xp, args, p.extents, out_ext, self.semiring, vdt, nthreads
            )
        except BoundTooLarge:
            # the one-pass bound does not fit: count the entries first (two passes), compiled once
            _log.info("compute: the one-pass bound is too large to reserve; counting entries first")
            ck = self._lower(
                p.expr, p.specs, p.order, p.output, vdt, p.ck.mode, False, p.extents, one_pass=False
            )
            lib = _c_library(ck)
            return run_compute(ck, lib.launch, xp, args, p.extents, out_ext, self.semiring, vdt, nthreads)

    def _execute(self, **kwargs: Any) -> Any:
        if kwargs:
            raise InvalidValueError(f"Compute.execute takes no arguments, got {sorted(kwargs)}")
        assert self._plan_obj is not None
        p = self._plan_obj
        res = self._run(p)
        return self._assemble(p, res)

    def _assemble(self, p: _Plan, res: Any) -> Any:
        expr = p.expr
        if p.output in ("dense", "scalar"):
            out = res.dense
            if self._given_bool():
                out = out.astype(bool)
            if p.output == "scalar":
                val = out.reshape(())
                return self._placement.back(val, _log, "the result") if self._placement.moves else val
            return self._placement.back(out, _log, "the result")
        emit = p.ck.prefix + p.ck.rest
        r = len(expr.out_indices)
        shape = tuple(p.extents[i] for i in expr.out_indices)
        xp = _xp_of(p.device)
        itype = self._index_dtype(shape, int(res.values.shape[0]))
        names = [f"d{d}" for d in range(r)]
        dim_of = {v: names[expr.out_indices.index(v)] for v in emit}
        if r == 1:
            counts = xp.diff(res.pos)
            crd = xp.flatnonzero(counts).astype(itype)
            pos = xp.asarray([0, int(crd.shape[0])], dtype=itype)
            t = Tensor(shape, "(d0) -> (d0 : compressed)", res.values, pos=[pos], crd=[crd], check=False)
        else:
            kinds = ["dense"] + (
                ["compressed"]
                if r == 2
                else ["compressed(nonunique)"] + ["singleton(nonunique)"] * (r - 3) + ["singleton"]
            )
            text = f"({', '.join(names)}) -> ({', '.join(f'{dim_of[v]} : {k}' for v, k in zip(emit, kinds))})"
            pos_l: list[Any] = [None, res.pos.astype(itype, copy=False)] + [None] * (r - 2)
            crd_l: list[Any] = [None, *(c.astype(itype, copy=False) for c in res.crd)]
            t = Tensor(shape, text, res.values, pos=pos_l, crd=crd_l, check=False)
        target = p.out_format
        if target is not None and target != t.format:
            t = t.convert(target)
        elif target is not None:  # the same storage: keep the target's name
            t = Tensor.from_buffers(t.shape, target, t.values, pos=t.bufs.pos, crd=t.bufs.crd, check=False)
        t = self._placement.back(t, _log, "the result")
        if self.semiring.identity != 0:
            t = t._with_fill_value(self.semiring.identity_for(p.value_dtype).item())
        return t

    def _given_bool(self) -> bool:
        return any(o.kind != SCALAR and _np_dtype(o.value) == np.bool_ for o in self._ops.values())

    def _index_dtype(self, shape: tuple[int, ...], nnz: int) -> np.dtype:
        dts = [np.dtype(o.value.index_dtype) for o in self._ops.values() if o.kind == SPARSE]
        want = np.dtype(np.int64) if any(d == np.int64 for d in dts) or not dts else np.dtype(np.int32)
        if want == np.int32 and max((*shape, nnz), default=0) >= 2**31 - 1:
            want = np.dtype(np.int64)
        return want

    def _reset_operands(self, **operands: Any) -> None:
        unknown = set(operands) - set(self._given)
        if unknown:
            raise InvalidValueError(
                f"reset_operands: {sorted(unknown)} are not operands of {self.expression!r}"
            )
        new = {**self._given, **operands}
        ops = _classify(self._expr0, new)
        for n in operands:
            old, cur = self._ops[n], ops[n]
            if old.kind != cur.kind:
                raise ShapeError(f"reset_operands: {n} was a {old.kind} operand, now a {cur.kind} one")
            if cur.kind != SCALAR:
                if _shape(old) != _shape(cur) or _np_dtype(old.value) != _np_dtype(cur.value):
                    raise ShapeError(
                        f"reset_operands: {n} must keep shape {_shape(old)} and dtype {old.value.dtype}"
                    )
                if cur.kind == SPARSE and cur.value.format != old.value.format:
                    raise ShapeError(f"reset_operands: {n} must keep format {old.value.format.map_text()}")
            self._placement.check(n, cur.value) if cur.kind != SCALAR else None
        self._given = new
        self._ops = ops
        if self._plan_obj is not None:
            p = self._plan_obj
            self._plan_obj = self._build(p.order, p.ck.mode)

    def _free(self) -> None:
        self._plan_obj = None

    # -- explain and saved plans ------------------------------------------------------------------
    def source(self, target: str = "c") -> str:
        """The generated source for these operands: ``"c"``, ``"cuda"`` (what the GPU route
        compiles, also on a machine without a GPU) or ``"ir"`` (the loop IR)."""
        from ust.codegen.emit_compute_c import emit_compute_c
        from ust.codegen.emit_compute_cuda import emit_compute_cuda
        from ust.codegen.ir import to_text

        if target not in ("c", "cuda", "ir"):
            raise InvalidValueError(f"target must be 'c', 'cuda' or 'ir', not {target!r}")
        here = self.device.startswith("cuda")
        on_gpu = target == "cuda" or (target == "ir" and here)
        if on_gpu == here:
            p = self._plan_obj if self._plan_obj is not None else self._build()
        else:
            p = self._build(gpu=on_gpu)
        ck = p.ck
        if target == "ir":
            return "".join(to_text(k) for k in ck.kernels)
        return emit_compute_cuda(list(ck.kernels)) if on_gpu else emit_compute_c(list(ck.kernels))

    def explain(self) -> str:
        if self._plan_obj is None:
            p = self._build()
        else:
            p = self._plan_obj
        lines = [
            f"op: compute ({self.semiring.label} semiring)",
            f"expression: {self.expression.strip()}",
            f"concrete index notation: {_concrete(p)}",
            f"execution space: {p.device}",
            f"route: {p.route}",
            f"reason: {p.reason}",
            f"{p.order_reason}",
        ]
        lines += [f"conversion: {n}" for n in p.notes]
        for v, how in p.ck.strategies:
            lines.append(f"loop {v}: {how}")
        lines.append(f"result: {_result_text(p)}")
        if p.output == "sparse":
            if p.ck.rest:
                ws = (
                    "a dense row workspace over "
                    + ", ".join(p.ck.rest)
                    + " with a touched list, sorted per row"
                    if p.ck.mode == "workspace"
                    else "entries written as they come, then sorted and combined (expand-sort-compress)"
                )
                lines.append(f"workspace: {ws}")
            else:
                lines.append("workspace: none (each outer coordinate's entries come out in order)")
            lines.append(
                "assembly: a bound pass counts each row's products, threads fill blocks of rows in order, each "
                "written at its place when known, else kept in the thread's arena until it is (one numeric pass)"
                if p.ck.assembly == "blocks"
                else "assembly: a symbolic pass counts each row's entries, a prefix sum, a numeric pass fills crd "
                "and values"
            )
        elif p.output == "dense" and not p.ck.owned:
            lines.append(
                "workspace: "
                + (
                    "one private copy of the output per thread, combined after"
                    if p.ck.mode == "partials"
                    else "atomic updates of the shared output"
                    if p.device.startswith("cuda")
                    else "the outer loop runs on one thread"
                )
            )
        lines.append(
            "parallel: "
            + ("the outer loop" if p.ck.parallel else "none (the outer loop merges several segments)")
        )
        return "\n".join(lines)

    def _plan_payload(self) -> dict[str, Any]:
        assert self._plan_obj is not None
        p = self._plan_obj
        return {
            "expression": self.expression,
            "order": list(p.order),
            "mode": p.ck.mode,
            "semiring": self.semiring.label,
        }

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the chosen loop order and mode (JSON) for :meth:`load_plan` in another process."""
        self._require("save a plan", "plan")
        data = {"ust_compute_plan": 1, "ust": ust_version(), **self._plan_payload()}
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    @classmethod
    def load_plan(cls, path: str | os.PathLike[str], expression: str, **operands: Any) -> Compute:
        """A planned Compute for ``expression`` with the loop order and mode saved in ``path``
        (a file that is not such a plan, or one for another expression: PlanFileError)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlanFileError(f"{os.fspath(path)} is not a saved compute plan: {exc}") from None
        if not isinstance(data, dict) or data.get("ust_compute_plan") != 1:
            raise PlanFileError(f"{os.fspath(path)} is not a saved compute plan")
        if data.get("expression") != expression:
            raise PlanFileError(
                f"{os.fspath(path)} was saved for {data.get('expression')!r}, not {expression!r}"
            )
        order, mode = data.get("order"), data.get("mode")
        if not (isinstance(order, list) and all(isinstance(v, str) for v in order)) or mode not in (
            "workspace",
            "expand",
            "partials",
        ):
            raise PlanFileError(f"{os.fspath(path)}: a damaged compute plan (order / mode)")
        semiring = operands.pop("semiring", None)
        c = cls(expression, semiring=semiring, options={"order": order, "mode": mode}, **operands)
        c.plan()
        return c


def _concrete(p: _Plan) -> str:
    """TACO-style concrete index notation: the foralls in loop order around the assignment."""
    loops = "".join(f"forall({v}, " for v in p.order)
    close = ")" * len(p.order)
    op = "+=" if p.output != "sparse" or p.ck.rest else "="
    lhs = f"{p.expr.output}({', '.join(p.expr.out_indices)})" if p.expr.out_indices else p.expr.output
    rhs = p.expr.text().split(" = ", 1)[1]
    return f"{loops}{lhs} {op} {rhs}{close}"


def _result_text(p: _Plan) -> str:
    if p.output == "scalar":
        return "a 0-d array"
    if p.output == "dense":
        return "a dense array in the operands' package"
    assert p.out_format is not None
    return f"a sparse Tensor in {p.out_format.map_text()}"


def _leading_outputs(order: Sequence[str], outs: Sequence[str]) -> tuple[str, ...]:
    """The output indices the loop order starts with (their loops own the result's rows)."""
    lead: list[str] = []
    for v in order:
        if v not in outs:
            break
        lead.append(v)
    return tuple(lead)


def lanes_per_row(mean_entries: float) -> int:
    """GPU lanes sharing one row of a row reduction, from the mean stored entries per row
    (cuSPARSE's CSR vector kernels choose the same way)."""
    if mean_entries < 6:
        return 1
    return 8 if mean_entries < 48 else 32


def _synchronizer(device: str) -> Any:
    """A call that waits for ``device``'s queued work (nothing to wait for on the CPU)."""
    if device.startswith("cuda"):
        from ust.runtime.xp import import_cupy

        return import_cupy().cuda.Device(int(device.partition(":")[2] or 0)).synchronize
    return lambda: None


def _xp_of(device: str) -> Any:
    if device.startswith("cuda"):
        from ust.runtime.xp import import_cupy

        return import_cupy()
    return np


@functools.lru_cache(maxsize=128)
def _lowered(
    expr: IndexExpr,
    specs: tuple[OperandSpec, ...],
    order: tuple[str, ...],
    output: str,
    sr: Semiring,
    vdt: str,
    mode: str,
    on_gpu: bool,
    mark_dtype: str,
    blocks: bool = False,
    crd_dtype: str = "int64",
) -> ComputeKernels:
    from ust.codegen.compute_lower import lower_compute

    return lower_compute(
        expr,
        specs,
        order,
        output=output,
        semiring=sr,
        value_dtype=vdt,
        mode=mode,
        atomic=on_gpu,
        mark_dtype=mark_dtype,
        blocks=blocks,
        crd_dtype=crd_dtype,
    )


# ----------------------------------------------------------------------------- routes


@functools.lru_cache(maxsize=128)
def _c_library(ck: ComputeKernels) -> Any:
    from ust.backends.cpu.compute_c import CComputeLibrary

    return CComputeLibrary(ck, "ust_compute")


def _build_c(plan: _Plan) -> Any:
    from ust.runtime.errors import BackendUnavailableError

    if not c_compiler_available():
        raise BackendUnavailableError(
            "ust.compute on the CPU needs a C compiler (cc, gcc or clang; or set UST_CC)"
        )
    return _c_library(plan.ck)


def _build_cuda(plan: _Plan) -> Any:
    from ust.backends.cuda.compute_cuda import cuda_library

    return cuda_library(plan.ck, plan.device)


register(Route("compute", "generated-c", _build_c, doc="a C kernel generated for the expression"))
register(Route("compute", "generated-cuda", _build_cuda, doc="a CUDA kernel generated for the expression"))


# the compiler as a route of existing ops (a candidate beside their library routes; exact zeros
# dropped after, as those routes do)
_ALGEBRA_TEXT = {
    "add": "C(i,j) = A(i,j) + B(i,j)",
    "subtract": "C(i,j) = A(i,j) - B(i,j)",
    "multiply": "C(i,j) = A(i,j) * B(i,j)",
}


def _without_zeros(t: Tensor) -> Tensor:
    t.eliminate_zeros()
    return t


def _compiled_spgemm(a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    return _without_zeros(compute("C(i,j) = A(i,k) * B(k,j)", A=a, B=b, out_format=fmt))


def _compiled_binary(op: str, a: Any, b: Any, fmt: Format, dtype: Any) -> Any:
    out = _without_zeros(compute(_ALGEBRA_TEXT[op], A=a, B=b, out_format=fmt))
    if op == "multiply":
        # the compiled A(i,j) * B(i,j) is the intersection (TACO's semantics, which compute()
        # keeps for the user's own expressions); the multiply op is SciPy's: a NaN / inf stored
        # in one operand only meets the other's implicit zero and gives a stored NaN
        from ust.algebra.coiterate import with_nonfinite_alone

        out = with_nonfinite_alone(out, a, b, dtype)
    return out


register(Route("spgemm", "compiled", _compiled_spgemm, doc="the tensor-algebra compiler"))
for _op in ("add", "multiply"):
    register(Route(_op, "compiled", _compiled_binary, doc="the tensor-algebra compiler"))
del _op
