"""Lowering: (Format, op) -> loop IR, by walking the format's levels.

The op contracts the last dimension of the sparse operand ``A`` (shape ``D0 .. D{r-1}``)
with a dense operand:

========  ==================  ==============================================  ==============
op        dense operand       result                                          e.g.
========  ==================  ==============================================  ==============
``mv``    ``x[j]``            ``y[o...] = sum_j A[o..., j] x[j]``             SpMV, TTV
``mm``    ``X[j, c]``         ``y[o..., c] = sum_j A[o..., j] X[j, c]``       SpMM
========  ==================  ==============================================  ==============

always as ``y = alpha * (...) + beta * y0`` (``y0`` read only when ``has_y0``).  For a format
with batch levels the dense operand has the batch dimensions in front too (``x[b, j]``,
``X[b, j, c]``: one vector or matrix per member).  ``mm`` takes a ``layout``: ``"row"``
(the last axis of ``X`` and ``y`` contiguous) or ``"col"`` (the last two axes swapped in
memory: Fortran order for a matrix).

A *plan* is a list of steps: a flattened batch loop, synthetic loops over output dimensions
(``"outer"`` order only), and per level either *iterate* (dense / range -> counted loop,
compressed -> ``pos[q] .. pos[q+1]``, loose_compressed -> ``pos[2q] .. pos[2q+1]``,
singleton -> ``crd[q]``, structured[n, m] -> ``n`` entries per block) or *locate* (a dense
or range level whose coordinate is already known: ``q * S + c - lo``).  After each step a
small solver turns level coordinates into dimension indices (``i = j - (j - i)`` for a
diagonal, ``i = r * (i floordiv r) + i mod r`` for blocks); a dimension found through a
diagonal is bounds-checked, which is what makes a ``range`` level skip its padding.

``"storage"`` order walks the levels as stored; ``"outer"`` puts loops over the output
dimensions first and locates the levels that index them, which turns DIA, DIAI, CCOL and
column-major dense into row-owned loops.  ``"auto"`` takes storage order when its outer
loop owns its outputs, else outer order when the format allows it, else storage order with
atomic accumulation.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ust.codegen.ir import (
    Accumulate,
    Assign,
    Bin,
    Block,
    Const,
    Decl,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Param,
    Select,
    Stmt,
    Store,
    Var,
    block,
    free_names,
)
from ust.codegen.levels import _add, _c, _mul, _sub, walker, walkers
from ust.codegen.record import Record, replace
from ust.formats.model import Add, Dim, FloorDiv, Format, LevelFormat, Mod, Sub
from ust.runtime.errors import UnsupportedError

__all__ = [
    "BALANCES",
    "INDEX_DTYPES",
    "LAYOUTS",
    "OPS",
    "ORDERS",
    "VALUE_DTYPES",
    "KernelInfo",
    "Plan",
    "balance_level",
    "format_tag",
    "has_padding",
    "kernel_name",
    "lower",
    "plan",
]

OPS = ("mv", "mm")
LAYOUTS = ("row", "col")
ORDERS = ("auto", "storage", "outer")
#: Work splits of the parallel row loop: ``"none"`` (equal row counts), ``"rows"`` (whole rows,
#: contiguous ranges of equal rows + entries: the C target) and ``"nnz"`` (equal runs of entries,
#: a row may be split between workers: the CUDA target).  See :func:`balance_level`.
BALANCES = ("none", "rows", "nnz")
_BALANCE_TAG = {"none": "", "rows": "_rb", "nnz": "_nz"}
VALUE_DTYPES = ("float32", "float64", "complex64", "complex128")
INDEX_DTYPES = ("int32", "int64")

_DTYPE_TAG = {
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
    "int32": "i32",
    "int64": "i64",
}


# ----------------------------------------------------------------------------- small expression helpers


# _c, _add, _sub, _mul: the simplifying constructors shared with the level walkers


def _and(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else Bin("&&", a, b)


def _in_range(v: Expr, hi: Expr) -> Expr:
    return Bin("&&", Bin("<=", _c(0), v), Bin("<", v, hi))


# ----------------------------------------------------------------------------- padding


@functools.lru_cache(maxsize=1024)
def has_padding(fmt: Format) -> bool:
    """Whether ``fmt`` stores value slots that are padding, not entries: a range level (DIA's
    empty and out-of-matrix slots), a structured level (its zero fill) or a dense level under
    a sparse one (the zero fill of BSR / BSC / CROW blocks).

    Kernels for such formats skip a zero value instead of multiplying it, so padding never
    meets x (``0 * inf`` would make a NaN that SciPy's CSR never computes).  All-dense
    formats and formats without padding (CSR, COO, DCSR, ...) multiply every stored value,
    explicit zeros included, as SciPy does.
    """
    sparse_above = False
    for w in walkers(fmt):
        if w.pads or (w.pads_under_sparse and sparse_above):
            return True
        sparse_above |= w.sparse
    return False


@functools.lru_cache(maxsize=1024)
def loads_under_padding(fmt: Format) -> bool:
    """Whether a kernel may read x at a padding slot before testing its value: every padding
    coordinate is computed or range-checked (DIA, BSR), never a stored one (structured).
    Then the value and x are loaded together and the zero skipped by a select: on an H200 the
    DIA SpMV runs 15 % faster than when the load of x waits behind a branch on the value."""
    return all(w.pad_coord_computed for w in walkers(fmt))


# ----------------------------------------------------------------------------- plans


class Step(Record):
    """``kind``: ``"batch"`` (all batch levels, one flattened loop), ``"dim"`` (a synthetic
    loop over output dimension ``arg``), ``"iter"`` / ``"locate"`` (level ``arg``)."""

    kind: str
    arg: int = -1


class Plan(Record):
    """How a format is walked for an op (see the module docstring)."""

    order: str  # "storage" | "outer"
    steps: tuple[Step, ...]
    npar: int  # the first npar steps are parallel loops
    acc_step: int  # index of the step after which every output dimension is known
    owned: bool  # distinct parallel iterations never write the same output
    store: bool  # every output is written exactly once: no init pass, plain stores
    reduce_ok: bool  # the accumulator lives at the parallel level (CUDA group mapping applies)

    @property
    def atomic(self) -> bool:
        return not self.owned


class Solved(Record):
    """What :func:`solve_dims` derived: every known dimension's index, the lets that bind
    the new ones, and the new ones found through a diagonal (in order), which need a check."""

    dims: dict[int, Expr]
    lets: tuple[Stmt, ...]
    checked: tuple[int, ...]


def solve_dims(fmt: Format, coords: Mapping[int, Expr], dims: Mapping[int, Expr]) -> Solved:
    """The one dimension solver: dimension indices derivable from level coordinates.

    ``coords`` maps bound levels to their coordinate, ``dims`` known dimensions to their
    index; a level ``d`` gives ``i_d = c``, a pair ``d floordiv r`` / ``d mod r`` gives
    ``i_d = r * c_div + c_mod``, a diagonal ``a - b`` / ``a + b`` with one side known gives
    the other (bounds-checked: it may fall outside the shape).  The planner runs it on
    placeholders to learn which dimensions are known after each step; the lowering on the
    real coordinates to bind them.
    """
    known = dict(dims)
    lets: list[Stmt] = []
    checked: list[int] = []
    changed = True
    while changed:
        changed = False
        for k in sorted(coords):
            e = fmt.levels[k].expr
            v = coords[k]
            new: int | None = None
            val: Expr | None = None
            check = False
            if isinstance(e, Dim) and e.dim not in known:
                new, val = e.dim, v
            elif isinstance(e, FloorDiv) and e.dim not in known:
                for j, lj in coords.items():
                    ej = fmt.levels[j].expr
                    if isinstance(ej, Mod) and ej.dim == e.dim:
                        new, val = e.dim, _add(_mul(_c(e.divisor), v), lj)
            elif isinstance(e, Sub):
                a, b = e.left, e.right
                if a in known and b not in known:
                    new, val, check = b, _sub(known[a], v), True
                elif b in known and a not in known:
                    new, val, check = a, _add(v, known[b]), True
            elif isinstance(e, Add):
                a, b = e.left, e.right
                if (a in known) != (b in known):
                    known_d = a if a in known else b
                    new, val, check = (b if a in known else a), _sub(v, known[known_d]), True
            if new is not None and val is not None:
                if isinstance(val, Var):
                    known[new] = val
                else:
                    lets.append(Let(f"i{new}", val))
                    known[new] = Var(f"i{new}")
                if check:
                    checked.append(new)
                changed = True
    return Solved(known, tuple(lets), tuple(checked))


def _known_after(fmt: Format, have: set[int], known: set[int]) -> Solved:
    """:func:`solve_dims` on placeholders: which dimensions the levels in ``have`` give."""
    return solve_dims(fmt, {k: Var(f"c{k}") for k in sorted(have)}, {d: Var(f"i{d}") for d in known})


def _first_nonbatch(fmt: Format) -> int:
    k = 0
    while k < fmt.nlevels and fmt.levels[k].format is LevelFormat.BATCH:
        k += 1
    return k


def _build_steps(fmt: Format, order: str, out_dims: Sequence[int]) -> tuple[list[Step], int] | None:
    """Steps for ``order``, or None when the format cannot be walked that way."""
    nb = _first_nonbatch(fmt)
    steps: list[Step] = [Step("batch")] if nb else []
    known: set[int] = {fmt.levels[k].expr.dims[0] for k in range(nb)}
    if order == "outer":
        steps += [Step("dim", d) for d in out_dims if d not in known]
        known |= set(out_dims)
    npar = len(steps) if order == "outer" else len(steps) + 1
    have: set[int] = set(range(nb))
    for w in walkers(fmt)[nb:]:
        if set(w.level.expr.dims) <= known:
            if not w.locatable:
                return None
            steps.append(Step("locate", w.k))
        else:
            steps.append(Step("iter", w.k))
        have.add(w.k)
        known = set(_known_after(fmt, have, known).dims)
    return steps, npar


def _analyse(fmt: Format, order: str, out_dims: Sequence[int]) -> Plan | None:
    built = _build_steps(fmt, order, out_dims)
    if built is None:
        return None
    steps, npar = built
    outs = set(out_dims)
    nb = _first_nonbatch(fmt)
    known: set[int] = {fmt.levels[k].expr.dims[0] for k in range(nb)}
    checked_any = False
    have: set[int] = set(range(nb))
    acc_step = -1
    store = True
    for s, st in enumerate(steps):
        if st.kind == "dim":
            known.add(st.arg)
        elif st.kind in ("iter", "locate"):
            w = walker(fmt, st.arg)
            have.add(st.arg)
            solved = _known_after(fmt, have, known)
            known = set(solved.dims)
            checked_any |= bool(solved.checked)
            if st.kind == "iter" and not (w.full() and set(w.level.expr.dims) <= outs):
                store = False
        if acc_step < 0 and outs <= known:
            acc_step = s
            break
    if acc_step < 0:  # pragma: no cover - every output dimension is stored by some level
        raise UnsupportedError(f"cannot find the output dimensions of {fmt.map_text()}")
    if checked_any:
        store = False
    first = steps[npar - 1]
    if first.kind == "dim" or first.kind == "batch":
        owned = True
    else:
        w = walker(fmt, first.arg)
        e = w.level.expr
        owned = w.unique and isinstance(e, (Dim, FloorDiv)) and e.dims[0] in outs
    store = store and owned
    reduce_ok = acc_step == npar - 1
    return Plan(order, tuple(steps), npar, acc_step, owned, store, reduce_ok)


def plan(fmt: Format, op: str = "mv", order: str = "auto") -> Plan:
    """The loop plan for ``op`` on ``fmt`` (``order``: ``"auto"``, ``"storage"`` or ``"outer"``)."""
    _check_request(fmt, op, "row", order)
    out_dims = tuple(range(fmt.ndim - 1))
    if order != "auto":
        p = _analyse(fmt, order, out_dims)
        if p is None:
            raise UnsupportedError(
                f"order 'outer' needs every level that indexes an output dimension to be dense or range; "
                f"{fmt.map_text()} is walked in 'storage' order only"
            )
        return p
    storage = _analyse(fmt, "storage", out_dims)
    assert storage is not None
    if storage.owned:
        return storage
    outer = _analyse(fmt, "outer", out_dims)
    return outer if outer is not None and outer.owned else storage


def balance_level(fmt: Format, op: str = "mv", order: str = "auto") -> int | None:
    """The compressed level whose ``pos`` weighs the rows of a load-balanced kernel, or None
    when the format's loop nest has no such split.

    A load-balanced kernel splits the parallel loop by entries, not by rows, so one long row
    (R-MAT's hubs, a dense row) no longer leaves the other workers idle.  That needs: no batch
    levels, one parallel loop whose iteration index is the position itself (a dense level
    from 0, or a compressed level), a compressed level right under it (its ``pos`` gives
    every row's entries as a prefix sum) and the accumulator at the row level (each row one
    output: CSR, DCSR, BSR's block rows walked in storage order ...).
    """
    try:
        p = plan(fmt, op, order)
    except UnsupportedError:
        return None
    if _first_nonbatch(fmt) or p.npar != 1 or not p.reduce_ok or len(p.steps) < 2:
        return None
    row, child = p.steps[0], p.steps[1]
    if row.kind != "iter" or child.kind != "iter":
        return None
    w_row, w_child = walker(fmt, row.arg), walker(fmt, child.arg)
    if w_row.counted and not (w_row.static_lo and isinstance(w_row.level.expr, Dim)):
        return None
    if w_row.type_name not in (LevelFormat.DENSE, LevelFormat.COMPRESSED):
        return None
    if w_child.type_name is not LevelFormat.COMPRESSED:
        return None
    return child.arg


def _check_request(fmt: Format, op: str, layout: str, order: str) -> None:
    if op not in OPS:
        raise UnsupportedError(f"unknown op {op!r}; supported: {', '.join(OPS)}")
    if layout not in LAYOUTS:
        raise UnsupportedError(f"unknown layout {layout!r}; supported: {', '.join(LAYOUTS)}")
    if order not in ORDERS:
        raise UnsupportedError(f"unknown loop order {order!r}; supported: {', '.join(ORDERS)}")
    if fmt.ndim < 2:
        raise UnsupportedError(f"matmul needs a sparse operand of 2 or more dimensions, got {fmt.ndim}")
    nb = _first_nonbatch(fmt)
    if any(fmt.levels[k].expr.dims[0] == fmt.ndim - 1 for k in range(nb)):
        raise UnsupportedError("a batch level on the contracted (last) dimension is not supported")


# ----------------------------------------------------------------------------- naming


def format_tag(fmt: Format) -> str:
    """A C identifier for a format: its standard name, or a short hash of its map."""
    std = fmt.standard_name
    if std:
        return re.sub(r"[^0-9A-Za-z]+", "_", std).strip("_")
    return "f" + hashlib.sha1(fmt.map_text().encode()).hexdigest()[:10]


def kernel_name(
    fmt: Format, op: str, layout: str, order: str, value_dtype: str, index_dtype: str, itype: str
) -> str:
    lay = "" if op == "mv" else "_" + layout
    return (
        f"ust_{op}{lay}_{format_tag(fmt)}_{order}_{_DTYPE_TAG[value_dtype]}"
        f"_{_DTYPE_TAG[index_dtype]}_{_DTYPE_TAG[itype]}"
    )


# ----------------------------------------------------------------------------- kernel info


class KernelInfo(Record):
    """What launchers need to know about a lowered kernel (stored in ``Kernel.meta``)."""

    op: str
    layout: str
    order: str
    owned: bool
    atomic: bool
    init: bool
    batch: bool
    reduce_ok: bool
    col_par: bool
    #: extents of the non-batch parallel loops: ("D", d) dimension size, ("S", k) level
    #: extent, ("crd", k) length of level k's crd buffer (per batch member)
    par_extents: tuple[tuple[str, int], ...]
    #: level walked by the reduction loop (-1: none); a level right under the root (DIA's
    #: diagonals) is shared by every row, so splitting it across a thread group gains nothing
    reduce_level: int = -1
    #: first level after the batch levels
    first_level: int = 0
    #: work split of the parallel row loop (one of :data:`BALANCES`)
    balance: str = "none"
    #: the compressed level under the row loop whose ``pos`` weighs the rows (-1: none)
    balance_level: int = -1


# ----------------------------------------------------------------------------- the lowering proper


@dataclass
class _Ctx:
    """What the lowering knows at one point of the loop nest.

    ``dims``: dimension -> its index expression; ``coords``: bound level -> its coordinate;
    ``q``: the position in the last bound level (the parent of the next); ``nocheck``:
    dimensions whose range a narrowed loop already guarantees; ``reduce_here``: the next
    loop is the accumulator's reduction loop.
    """

    dims: dict[int, Expr] = field(default_factory=dict)
    coords: dict[int, Expr] = field(default_factory=dict)
    q: Expr = field(default_factory=lambda: _c(0))
    nocheck: frozenset[int] = frozenset()
    reduce_here: bool = False

    def child(self) -> _Ctx:
        """A copy whose dims and coords a nested step may extend."""
        return replace(self, dims=dict(self.dims), coords=dict(self.coords))


class _Gen:
    """Generates the statements of one plan (recursively, one step at a time)."""

    def __init__(self, fmt: Format, op: str, layout: str, p: Plan, cols_inner: bool = False) -> None:
        self.fmt = fmt
        self.op = op
        self.layout = layout
        self.plan = p
        self.r = fmt.ndim
        self.outs = tuple(range(self.r - 1))
        self.levels = walkers(fmt)
        self.nb = _first_nonbatch(fmt)
        self.cols = op == "mm"
        self.batch_dims = sorted(fmt.levels[k].expr.dims[0] for k in range(self.nb))
        self.cols_inner = self.cols and cols_inner
        self.col_par = self.cols and not self.cols_inner and p.acc_step == p.npar - 1
        self.padded = has_padding(fmt)

    def load(self, buf: str, idx: Expr) -> Load:
        if self.nb and buf != "x":
            idx = _add(Var(f"ob_{buf}"), idx)
        return Load(buf, idx)

    # -- dimensions --------------------------------------------------------------------------
    def solve(self, cx: _Ctx) -> tuple[list[Stmt], Expr | None]:
        """Lets for newly derivable dimensions and the bounds check they need (or None)."""
        solved = solve_dims(self.fmt, cx.coords, cx.dims)
        cx.dims.update(solved.dims)
        cond: Expr | None = None
        for d in solved.checked:
            if d not in cx.nocheck:
                cond = _and(cond, _in_range(cx.dims[d], Var(f"D{d}")))
        return list(solved.lets), cond

    def narrow(self, k: int, cx: _Ctx, lo: Expr, hi: Expr) -> tuple[Expr, Expr]:
        """Bounds of a counted level that keep the dimension paired with it by an already
        iterated diagonal inside the shape (DIA: column range ``max(0, o) .. min(n, m + o)``);
        the paired dimension then needs no per-entry check."""
        e = self.fmt.levels[k].expr
        if not isinstance(e, Dim) or e.dim in cx.dims:
            return lo, hi
        d = e.dim
        for kd, v in cx.coords.items():
            ed = self.fmt.levels[kd].expr
            if not isinstance(ed, (Sub, Add)) or d not in ed.dims:
                continue
            other = ed.right if d == ed.left else ed.left
            if other in cx.dims:
                continue
            size = Var(f"D{other}")
            if isinstance(ed, Sub) and d == ed.left:  # other = d - v
                a, b = v, _add(v, size)
            elif isinstance(ed, Sub):  # other = v + d
                a, b = Bin("-", _c(0), v), _sub(size, v)
            else:  # other = v - d
                a, b = _add(_sub(v, size), _c(1)), _add(v, _c(1))
            cx.nocheck = frozenset({*cx.nocheck, other})
            return Bin("max", lo, a), Bin("min", hi, b)
        return lo, hi

    def level_coord(self, k: int, dims: dict[int, Expr]) -> Expr:
        e = self.fmt.levels[k].expr
        if isinstance(e, Dim):
            return dims[e.dim]
        if isinstance(e, FloorDiv):
            return Bin("//", dims[e.dim], _c(e.divisor))
        if isinstance(e, Mod):
            return Bin("%", dims[e.dim], _c(e.divisor))
        if isinstance(e, Sub):
            return Bin("-", dims[e.left], dims[e.right])
        return Bin("+", dims[e.left], dims[e.right])

    # -- output / operand indexing -------------------------------------------------------------
    def y_index(self, dims: dict[int, Expr], col: Expr | None) -> Expr:
        outs = self.outs
        lin: Expr = _c(0)
        if col is None or self.layout == "row":
            for d in outs:
                lin = _add(_mul(lin, Var(f"D{d}")), dims[d])
            return lin if col is None else _add(_mul(lin, Var("NC")), col)
        for d in outs[:-1]:
            lin = _add(_mul(lin, Var(f"D{d}")), dims[d])
        last = outs[-1]
        return _add(_mul(_add(_mul(lin, Var("NC")), col), Var(f"D{last}")), dims[last])

    def x_index(self, dims: dict[int, Expr], col: Expr | None) -> Expr:
        j = dims[self.r - 1]
        kdim = Var(f"D{self.r - 1}")
        if col is None:
            idx = j
        else:
            idx = _add(_mul(j, Var("NC")), col) if self.layout == "row" else _add(_mul(col, kdim), j)
        if self.batch_dims:
            member: Expr = _c(0)
            for d in self.batch_dims:
                member = _add(_mul(member, Var(f"D{d}")), dims[d])
            idx = _add(_mul(member, kdim if col is None else _mul(kdim, Var("NC"))), idx)
        return idx

    # -- generation --------------------------------------------------------------------------
    def run(self) -> Block:
        return block(*self.gen(0, _Ctx()))

    def gen(self, s: int, cx: _Ctx) -> list[Stmt]:
        steps = self.plan.steps
        if s == len(steps):
            return self.leaf(cx)
        st = steps[s]
        par = s < self.plan.npar
        cx = cx.child()
        wrap_cols = self.col_par and s == self.plan.npar - 1
        tag = "rows" if par else ""
        if st.kind == "batch":
            return self.gen_batch(s, cx, par)
        if st.kind == "dim":
            d = st.arg
            var = f"i{d}"
            cx.dims[d] = Var(var)
            body = self.after_bind(s, cx, [], wrap_cols)
            return [Loop(var, _c(0), Var(f"D{d}"), body, parallel=par, tag=tag)]
        w = self.levels[st.arg]
        k = w.k
        if st.kind == "locate":
            pre: list[Stmt] = [Let(f"c{k}", self.level_coord(k, cx.dims))]
            pre.append(Let(f"p{k}", w.locate(cx.q, Var(f"c{k}"))))
            cx.coords[k] = Var(f"c{k}")
            cx.q = Var(f"p{k}")
            return list(self.after_bind(s, cx, pre, False).body)
        it = w.iterate(cx.q, self.load)
        cx.coords[k] = it.coord
        cx.q = it.pos
        if it.var is None:  # one entry per parent: no loop
            return list(self.after_bind(s, cx, list(it.pre), False).body)
        lo, hi = self.narrow(k, cx, it.lo, it.hi) if w.counted else (it.lo, it.hi)
        body = self.after_bind(s, cx, list(it.pre), wrap_cols)
        loop = Loop(it.var, lo, hi, body, parallel=par, tag=tag)
        return [*it.heads, self.mark_reduce(loop, cx)]

    def mark_reduce(self, loop: Loop, cx: _Ctx) -> Loop:
        """Mark the first loop inside the accumulator's region as its reduction loop."""
        if cx.reduce_here:
            return Loop(loop.var, loop.lo, loop.hi, loop.body, loop.parallel, loop.tag, reduce="acc")
        return loop

    def gen_batch(self, s: int, cx: _Ctx, par: bool) -> list[Stmt]:
        nb = self.nb
        lets: list[Stmt] = []
        rest: Expr = Var("t")
        for k in reversed(range(nb)):
            d = self.fmt.levels[k].expr.dims[0]
            size = Var(f"D{d}")
            if k == 0:
                lets.insert(0, Let(f"i{d}", rest))
            else:
                lets.insert(0, Let(f"i{d}", Bin("%", rest, size)))
                rest = Bin("//", rest, size)
            cx.dims[d] = Var(f"i{d}")
            cx.coords[k] = Var(f"i{d}")
        offs: list[Stmt] = []
        for w in self.levels[nb:]:
            for name, kind in w.buffers():
                stride = f"BP{w.k}" if kind == "pos" else f"BC{w.k}"
                offs.append(Let(f"ob_{name}", _mul(Var("t"), Var(stride))))
        offs.append(Let("ob_val", _mul(Var("t"), Var("BV"))))
        cx.q = _c(0)
        body = self.after_bind(s, cx, lets + offs, self.col_par and s == self.plan.npar - 1)
        return [Loop("t", _c(0), Var("NB"), body, parallel=par, tag="batch" if par else "")]

    def after_bind(self, s: int, cx: _Ctx, pre: list[Stmt], wrap_cols: bool) -> Block:
        """Statements after step ``s`` bound its coordinate: derived dims, checks, the rest."""
        lets, cond = self.solve(cx)
        inner: list[Stmt]
        if s == self.plan.acc_step:
            inner = self.acc_region(s, cx, wrap_cols)
        else:
            inner = self.gen(s + 1, cx)
        body: list[Stmt] = [*lets, *inner] if cond is None else [*lets, If(cond, block(*inner))]
        if wrap_cols:
            return block(Loop("col", _c(0), Var("NC"), block(*pre, *body), parallel=True, tag="cols"))
        return block(*pre, *body)

    def acc_region(self, s: int, cx: _Ctx, cols_outside: bool) -> list[Stmt]:
        """Accumulator, the contracting loops below, and the write of one output."""
        col: Expr | None = Var("col") if self.cols else None
        if self.cols_inner:
            return self.acc_region_inner(s, cx)
        cx = replace(cx, reduce_here=self.plan.reduce_ok)
        inner = self.gen(s + 1, cx)
        yi = self.y_index(cx.dims, col)
        contrib = Bin("*", Var("alpha"), Var("acc"))
        if self.plan.store:
            write: Stmt = If(
                Bin("!=", Var("has_y0"), _c(0)),
                block(Store("y", yi, Bin("+", contrib, Bin("*", Var("beta"), Load("y0", yi))))),
                block(Store("y", yi, contrib)),
            )
        else:
            write = Accumulate("y", yi, contrib, atomic=self.plan.atomic)
        region: list[Stmt] = [Decl("acc", Const(0.0, "value")), *inner, write]
        if self.cols and not cols_outside:
            return [Loop("col", _c(0), Var("NC"), block(*region))]
        return region

    def acc_region_inner(self, s: int, cx: _Ctx) -> list[Stmt]:
        """SpMM with the column loop innermost: accumulate straight into the output row."""
        cx = replace(cx, reduce_here=False)
        inner = self.gen(s + 1, cx)
        if not self.plan.store:
            return inner
        yi = self.y_index(cx.dims, Var("col"))
        init = If(
            Bin("!=", Var("has_y0"), _c(0)),
            block(Store("y", yi, Bin("*", Var("beta"), Load("y0", yi)))),
            block(Store("y", yi, Const(0.0, "value"))),
        )
        return [Loop("col", _c(0), Var("NC"), block(init)), *inner]

    def leaf(self, cx: _Ctx) -> list[Stmt]:
        col: Expr | None = Var("col") if self.cols else None
        p = cx.q
        if self.cols_inner:
            yi = self.y_index(cx.dims, Var("col"))
            xv = Load("x", self.x_index(cx.dims, Var("col")))
            write = Accumulate("y", yi, Bin("*", Var("a"), xv), atomic=self.plan.atomic)
            body: list[Stmt] = [
                Let("a", Bin("*", Var("alpha"), self.load("val", p)), "value"),
                Loop("col", _c(0), Var("NC"), block(write)),
            ]
        else:
            xv = Load("x", self.x_index(cx.dims, col))
            body = [Assign("acc", Bin("+", Var("acc"), Bin("*", self.load("val", p), xv)))]
        if not self.padded:
            return body
        # a zero in a padding slot is absent: it never meets x (see has_padding)
        nonzero = Bin("!=", self.load("val", p), Const(0.0, "value"))
        if self.cols_inner or not loads_under_padding(self.fmt):
            return [If(nonzero, block(*body))]
        v, xs = Var("ust_v"), Var("ust_xv")
        summed = Bin("+", Var("acc"), Bin("*", v, xs))
        return [
            Let(v.name, self.load("val", p), "value"),
            Let(xs.name, xv, "value"),
            Assign("acc", Select(Bin("!=", v, Const(0.0, "value")), summed, Var("acc"))),
        ]


def _keep_first_reduce(node: Block) -> Block:
    """Keep ``reduce`` on the first (outermost) marked loop of each region only."""

    def fix(s: Stmt, seen: bool) -> tuple[Stmt, bool]:
        if isinstance(s, Loop):
            mark = s.reduce if (s.reduce and not seen) else None
            body, _ = fix_block(s.body, seen or mark is not None)
            return Loop(s.var, s.lo, s.hi, body, s.parallel, s.tag, mark), seen
        if isinstance(s, If):
            then, _ = fix_block(s.then, seen)
            orelse = fix_block(s.orelse, seen)[0] if s.orelse is not None else None
            return If(s.cond, then, orelse), seen
        if isinstance(s, Block):
            return fix_block(s, seen)
        return s, seen

    def fix_block(b: Block, seen: bool) -> tuple[Block, bool]:
        out = []
        for s in b.body:
            t, _ = fix(s, seen)
            out.append(t)
        return Block(tuple(out)), seen

    return fix_block(node, False)[0]


def _all_params(fmt: Format, value_dtype: str, index_dtype: str) -> list[Param]:
    r = fmt.ndim
    ps: list[Param] = [Param(f"D{d}", "iscalar") for d in range(r)]
    ps += [Param(n, "iscalar") for n in ("NC", "NB", "NY")]
    ps += [Param(f"S{k}", "iscalar") for k in range(fmt.nlevels)]
    ps += [Param(f"L{k}", "iscalar") for k in range(fmt.nlevels)]
    ps += [Param(f"BP{k}", "iscalar") for k in range(fmt.nlevels)]
    ps += [Param(f"BC{k}", "iscalar") for k in range(fmt.nlevels)]
    ps += [Param("BV", "iscalar"), Param("has_y0", "iscalar")]
    ps += [Param("alpha", "vscalar", value_dtype), Param("beta", "vscalar", value_dtype)]
    ps += [Param(name, "ibuf", index_dtype) for w in walkers(fmt) for name, _ in w.buffers()]
    ps += [
        Param("val", "vbuf", value_dtype),
        Param("x", "vbuf", value_dtype),
        Param("y0", "vbuf", value_dtype),
    ]
    ps.append(Param("y", "vbuf", value_dtype, const=False))
    return ps


@functools.lru_cache(maxsize=2048)
def lower(
    fmt: Format,
    op: str = "mv",
    *,
    layout: str = "row",
    order: str = "auto",
    value_dtype: str = "float64",
    index_dtype: str = "int32",
    itype: str = "int64",
    cols: str = "outer",
    balance: str = "none",
) -> Kernel:
    """Lower ``op`` on a tensor stored in ``fmt`` to a :class:`~ust.codegen.ir.Kernel`.

    ``cols`` (SpMM only): ``"outer"`` puts the column loop at the accumulator (one scalar sum
    per output; one GPU thread per (row, column)), ``"inner"`` innermost, accumulating into
    the output row (contiguous and vectorisable on the CPU for row-major operands).

    The kernel's scalar parameters: ``D{d}`` dimension sizes, ``NC`` dense columns, ``NB``
    batch members, ``NY`` output size, ``S{k}`` / ``L{k}`` level extent / lower bound,
    ``BP{k}`` / ``BC{k}`` / ``BV`` per-member strides of batched buffers, ``has_y0``,
    ``alpha``, ``beta``; buffers ``pos{k}``, ``crd{k}``, ``val``, ``x``, ``y0``, ``y``.
    Only the parameters the kernel uses are listed.

    ``balance`` splits the parallel row loop by work (:data:`BALANCES`, :func:`balance_level`):
    ``"rows"`` keeps whole rows per worker (the loop nest is unchanged; the C emitter
    partitions it), ``"nnz"`` may split a row between workers, so its output is accumulated
    after an init pass (the CUDA emitter's segmented reduction).
    """
    _check_request(fmt, op, layout, order)
    if balance not in BALANCES:
        raise UnsupportedError(f"unknown balance {balance!r}; supported: {', '.join(BALANCES)}")
    blevel = -1
    if balance != "none":
        found = balance_level(fmt, op, order)
        if found is None:
            raise UnsupportedError(
                f"a load-balanced kernel needs a row loop over a dense or compressed level with a "
                f"compressed level under it (CSR, DCSR, BSR ...); {fmt.map_text()} has none for {op}"
            )
        blevel = found
    if value_dtype not in VALUE_DTYPES:
        raise UnsupportedError(
            f"value dtype {value_dtype} is not supported; supported: {', '.join(VALUE_DTYPES)}"
        )
    if index_dtype not in INDEX_DTYPES or itype not in INDEX_DTYPES:
        raise UnsupportedError(f"index dtypes must be one of {', '.join(INDEX_DTYPES)}")
    p = plan(fmt, op, order)
    if balance == "nnz":  # a row may be split between workers: accumulate after an init pass
        p = replace(p, store=False)
    if op == "mv":
        layout = "row"
    if cols not in ("outer", "inner"):
        raise UnsupportedError(f"cols must be 'outer' or 'inner', got {cols!r}")
    gen = _Gen(fmt, op, layout, p, cols_inner=cols == "inner")
    body = _keep_first_reduce(gen.run())
    init: Block | None = None
    if not p.store:
        init = block(
            Loop(
                "f",
                _c(0),
                Var("NY"),
                block(
                    If(
                        Bin("!=", Var("has_y0"), _c(0)),
                        block(Store("y", Var("f"), Bin("*", Var("beta"), Load("y0", Var("f"))))),
                        block(Store("y", Var("f"), Const(0.0, "value"))),
                    )
                ),
                parallel=True,
                tag="rows",
            )
        )
    used = free_names(body) | (free_names(init) if init is not None else set())
    params = tuple(q for q in _all_params(fmt, value_dtype, index_dtype) if q.name in used)
    par_extents: list[tuple[str, int]] = []
    for st in p.steps[: p.npar]:
        if st.kind == "dim":
            par_extents.append(("D", st.arg))
        elif st.kind == "iter":
            par_extents.append(("S", st.arg) if walker(fmt, st.arg).counted else ("crd", st.arg))
    info = KernelInfo(
        op=op,
        layout=layout,
        order=p.order,
        owned=p.owned,
        atomic=p.atomic,
        init=init is not None,
        batch=gen.nb > 0,
        reduce_ok=p.reduce_ok and any(isinstance(n, Loop) and n.reduce for n in _loops(body)),
        col_par=gen.col_par,
        par_extents=tuple(par_extents),
        reduce_level=next((int(n.var[1:]) for n in _loops(body) if n.reduce), -1),
        first_level=gen.nb,
        balance=balance,
        balance_level=blevel,
    )
    name = kernel_name(fmt, op, layout, p.order, value_dtype, index_dtype, itype)
    if gen.cols_inner:
        name += "_ci"
    name += _BALANCE_TAG[balance]
    meta = tuple(sorted(vars(info).items()))
    return Kernel(name, params, body, init, value_dtype, index_dtype, itype, meta)


def _loops(node: Block) -> list[Loop]:
    from ust.codegen.ir import walk

    return [n for n in walk(node) if isinstance(n, Loop)]


def kernel_info(kernel: Kernel) -> KernelInfo:
    """The :class:`KernelInfo` a kernel was lowered with."""
    return KernelInfo(**kernel.info)  # type: ignore[arg-type]
