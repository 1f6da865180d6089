"""Lowering of index notation to the loop IR: co-iteration, workspaces, output assembly.

The input is an :class:`~ust.codegen.notation.IndexExpr`, the operands' level structure
(:class:`OperandSpec`) and a loop order (:mod:`ust.codegen.loop_order`).  For each index
variable, in order, the terms that use it share one loop; terms whose next variable differs
get loops of their own, one after another (TACO's sequence of foralls), so a term never runs
inside a loop over a variable it does not use.  Inside the loop over ``v``:

* sparse levels on ``v`` (compressed, loose_compressed, singleton) are *iterated*, dense
  levels *located* (``q * extent + c``), dense arrays indexed once every variable is bound;
* the merge lattice (:mod:`ust.codegen.lattice`) decides the loop: a counted loop when some
  term has no sparse level on ``v`` (it fires at every coordinate), a plain loop over one
  segment, or the two-pointer ``while`` merge of several sorted segments, where a term
  fires only when all of its segments stand on the current coordinate (``*`` intersects,
  ``+`` unites);
* a term that did not fire carries a false *alive* flag down, so its segments below are
  empty and its value is never read.

Outputs: a dense array (the outer loop owns its rows when it runs over an output index,
otherwise every thread accumulates into its own copy, or atomically on the GPU), a scalar, or
a sparse result assembled in two passes -- a symbolic pass counting the entries of every
outer coordinate, then a numeric pass filling ``crd`` / ``values`` at the prefix sums.  The
output indices not bound by the leading run of loops are gathered in a dense workspace with a
touched list (Gustavson's row workspace, TACO's workspace optimisation), sorted per row
(``mode="workspace"``), or written out as they come and combined by a sort afterwards
(``mode="expand"``, the GPU's expand-sort-compress).

Pure: returns IR only.  Parameter names carry prefixes (``t0_crd1``, ``x_i``, ``s_alpha``)
so user names never collide with each other or with C keywords.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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
    Sort,
    Stmt,
    Store,
    Un,
    Var,
    While,
    block,
    free_names,
    walk,
)
from ust.codegen.levels import index_add, index_const, index_mul
from ust.codegen.notation import IndexExpr
from ust.codegen.record import replace
from ust.codegen.semiring import Semiring, add_ir, mul_ir
from ust.runtime.errors import UnsupportedError

__all__ = ["ComputeKernels", "LevelSpec", "OperandSpec", "lower_compute"]

#: Level kinds the lowering walks directly (others are converted by the caller first).
ITERATED = ("compressed", "loose_compressed", "singleton")
WALKABLE = ("dense", *ITERATED)
#: ``cnt = cnt + 1``: a bound pass's whole work per product.
_COUNT_ONE = Assign("cnt", Bin("+", Var("cnt"), Const(1, "index")))
#: A row whose touched list covers more than 1/DENSE_ROW of its workspace is read off the
#: markers in one scan of the workspace instead of sorted (measured here, 65536 slots: the
#: branch-free scan takes 55-70 us, the introsort of 2048 random entries 35-45 us and of 4096
#: 70-100 us; the branch-free scan ran 1.3-3x ahead of a branching one at 1/32-1/2 density).
DENSE_ROW = 16
#: A coordinate larger than any stored one (the exhausted side of a merge).
BIG = Const((1 << 62), "index")


@dataclass(frozen=True)
class LevelSpec:
    """One level of a walkable format: the dimension it stores and how."""

    dim: int
    kind: str
    unique: bool = True


@dataclass(frozen=True)
class OperandSpec:
    """An operand as the kernel sees it: a dense C-order array (``levels`` None) or levels."""

    name: str
    rank: int
    levels: tuple[LevelSpec, ...] | None = None
    index_dtype: str = "int64"

    @property
    def sparse(self) -> bool:
        return self.levels is not None


@dataclass(frozen=True, eq=False)
class ComputeKernels:
    """The lowered kernels and the facts the runner needs to call them and assemble the result.

    Compared and hashed by identity (the lowering is memoised, so one request gives one object):
    hashing the IR trees on every call would cost more than running a small kernel."""

    kernels: tuple[Kernel, ...]
    output: str  # "dense" | "scalar" | "sparse"
    order: tuple[str, ...]
    #: output indices bound by the leading loops (the first is the outer loop) and the rest
    prefix: tuple[str, ...] = ()
    rest: tuple[str, ...] = ()
    #: the outer loop runs in parallel (threads, or GPU threads)
    parallel: bool = False
    #: the outer loop runs over an output index: no two iterations write the same output
    owned: bool = True
    mode: str = "workspace"
    #: "two-pass" (count, then fill at exact offsets) or "blocks" (bound, fill blocks placed in order)
    assembly: str = "two-pass"
    #: per-variable co-iteration strategy, for explain
    strategies: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())


# ----------------------------------------------------------------------------- helpers


# index arithmetic that folds 0 and 1: the level walkers' (one implementation)
_ic, _add, _mul = index_const, index_add, index_mul


def _and(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value is True:
        return b
    if isinstance(b, Const) and b.value is True:
        return a
    return Bin("&&", a, b)


def _or_all(xs: Sequence[Expr]) -> Expr:
    out: Expr | None = None
    for x in xs:
        if isinstance(x, Const) and x.value is True:
            return x
        out = x if out is None else Bin("||", out, x)
    return out if out is not None else Const(False, "bool")


TRUE = Const(True, "bool")


def heads_lets(heads: list[Stmt]) -> list[Stmt]:
    """The segment bounds among a loop's heads (its iterator positions are not needed)."""
    return [h for h in heads if isinstance(h, Let)]


def ext(v: str) -> Var:
    """The extent parameter of index variable ``v``."""
    return Var(f"E_{v}")


def coord(v: str) -> Var:
    return Var(f"x_{v}")


def _linear(indices: Sequence[str], coords: dict[str, Expr] | None = None) -> Expr:
    """Row-major linear index of ``indices`` over their extents."""
    out: Expr = _ic(0)
    for v in indices:
        c = coords[v] if coords is not None else coord(v)
        out = _add(_mul(out, ext(v)), c)
    return out


# ----------------------------------------------------------------------------- the lowering


@dataclass(frozen=True)
class _Access:
    """One factor occurrence: operand number, its indices, which term it belongs to."""

    id: int
    op: int
    indices: tuple[str, ...]
    term: int


@dataclass(frozen=True)
class _State:
    """Where an access stands: the next level and the parent position (or run) above it."""

    level: int = 0
    q: Expr = field(default_factory=lambda: _ic(0))
    run: tuple[Expr, Expr] | None = None


class _Lowerer:
    def __init__(
        self,
        expr: IndexExpr,
        operands: Sequence[OperandSpec],
        order: Sequence[str],
        output: str,
        semiring: Semiring,
        value_dtype: str,
        mode: str,
        pass_: str,
        atomic: bool,
        mark_dtype: str = "int64",
        blocks: bool = False,
        crd_dtype: str = "int64",
    ) -> None:
        self.expr = expr
        self.ops = list(operands)
        self.op_index = {o.name: n for n, o in enumerate(self.ops)}
        self.order = tuple(order)
        self.output = output
        self.sr = semiring
        self.vdt = value_dtype
        self.mode = mode
        self.pass_ = pass_  # "main" (dense / scalar), "count" or "fill"
        self.atomic = atomic
        self.mark_dtype = mark_dtype
        self.crd_dtype = crd_dtype  # the result's coordinates, written in its index dtype
        #: the fill pass writes whole blocks of rows back to back (the CPU's one-pass assembly)
        self.blocks = pass_ == "fill" and blocks
        self.used_blocks = False
        self.flat: list[str] = []  # output indices flattened into the GPU grid after the outer loop
        self.names = 0
        outs = set(expr.out_indices)
        prefix: list[str] = []
        for v in self.order:
            if v not in outs:
                break
            prefix.append(v)
        self.prefix = tuple(prefix) if output == "sparse" else ()
        #: a dense output whose every index is bound by the leading loops: each of its slots is
        #: summed in a register (``acc``) and written once per row (and a GPU group can share the
        #: row, reducing ``acc`` across its lanes)
        self.row_acc = output == "dense" and bool(expr.out_indices) and set(prefix) == outs
        self.rest = (
            tuple(v for v in self.order if v in outs and v not in self.prefix) if output == "sparse" else ()
        )
        self.owned = bool(expr.out_indices) and bool(self.order) and self.order[0] in outs
        self.accesses: list[_Access] = []
        self.term_accesses: list[list[int]] = []
        for t_id, t in enumerate(expr.terms):
            ids = []
            for f in t.factors:
                a = _Access(len(self.accesses), self.op_index[f.operand], f.indices, t_id)
                self.accesses.append(a)
                ids.append(a.id)
            self.term_accesses.append(ids)
        self.term_vars = [set(t.indices) | outs for t in expr.terms]
        self.strategies: dict[str, str] = {}
        self.parallel = False
        self.in_loop = False

    # -- naming -------------------------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        self.names += 1
        return f"{stem}_{self.names}"

    def buf(self, a: _Access, what: str) -> str:
        return f"t{a.op}_{what}"

    # -- levels -------------------------------------------------------------------------------
    def level(self, a: _Access, k: int) -> LevelSpec:
        levels = self.ops[a.op].levels
        assert levels is not None
        return levels[k]

    def next_var(self, a: _Access, st: _State) -> str | None:
        levels = self.ops[a.op].levels
        if levels is None or st.level >= len(levels):
            return None
        return a.indices[levels[st.level].dim]

    # -- the nest -----------------------------------------------------------------------------
    def nest(
        self, rem: tuple[str, ...], terms: list[int], states: dict[int, _State], alive: dict[int, Expr]
    ) -> list[Stmt]:
        out: list[Stmt] = []
        remset = set(rem)
        ready = [t for t in terms if not (self.term_vars[t] & remset)]
        for t in ready:
            out.extend(self.compute(t, states, alive[t]))
        groups: dict[str, list[int]] = {}
        for t in terms:
            if t in ready:
                continue
            v = next(v for v in rem if v in self.term_vars[t])
            groups.setdefault(v, []).append(t)
        for v in rem:
            if v not in groups:
                continue
            after = rem[rem.index(v) + 1 :]
            if v in self.expr.out_indices or len(groups[v]) == 1:
                out.extend(self.loop(v, after, groups[v], states, alive))
                continue
            # a summed index: the terms need not meet on its coordinates (their sum is not
            # written per coordinate), so each walks its own operands -- no union merge
            for t in groups[v]:
                out.extend(self.loop(v, after, [t], states, alive))
        return out

    def loop(
        self,
        v: str,
        rem: tuple[str, ...],
        terms: list[int],
        states: dict[int, _State],
        alive: dict[int, Expr],
    ) -> list[Stmt]:
        top = v == self.order[0] and not self.in_loop
        iters: list[int] = []
        locs: list[int] = []
        for t in terms:
            for aid in self.term_accesses[t]:
                a = self.accesses[aid]
                if self.next_var(a, states[aid]) != v:
                    continue
                kind = self.level(a, states[aid].level).kind
                (locs if kind == "dense" else iters).append(aid)
        full_terms = [t for t in terms if not any(self.accesses[i].term == t for i in iters)]
        c = coord(v)
        heads: list[Stmt] = []
        pre: list[Stmt] = []
        post: list[Stmt] = []
        new_states = dict(states)
        hits: dict[int, Expr] = {}
        # segment bounds of every iterated level, empty where its term is not alive
        bounds: dict[int, tuple[Expr, Expr]] = {}
        for aid in iters:
            a, st = self.accesses[aid], states[aid]
            lv = self.level(a, st.level)
            k = st.level
            if lv.kind == "singleton":
                assert st.run is not None
                lo, hi = st.run
            else:
                stride = 2 if lv.kind == "loose_compressed" else 1
                at = _mul(st.q, _ic(stride))
                pos = self.buf(a, f"pos{k}")
                lo, hi = Load(pos, at), Load(pos, _add(at, _ic(1)))
            # a term that did not fire above walks an empty segment (its parent position may be
            # the end of its level: nothing below it may be read)
            guard = alive[a.term]
            if not (isinstance(guard, Const) and guard.value is True):
                lo, hi = Select(guard, lo, _ic(0)), Select(guard, hi, _ic(0))
            lo_n, hi_n = self.fresh(f"lo{aid}"), self.fresh(f"hi{aid}")
            heads += [Let(lo_n, lo), Let(hi_n, hi)]
            bounds[aid] = (Var(lo_n), Var(hi_n))

        def crd_at(aid: int, p: Expr) -> Expr:
            a = self.accesses[aid]
            return Load(self.buf(a, f"crd{states[aid].level}"), p)

        def advance(aid: int, p: Var, end: Expr, cur: Expr) -> tuple[list[Stmt], Expr]:
            """Statements computing the end of the run at ``p`` and that end (p + 1 if unique)."""
            a = self.accesses[aid]
            if self.level(a, states[aid].level).unique:
                return [], _add(p, _ic(1))
            nx = self.fresh(f"nx{aid}")
            scan = While(
                Bin("&&", Bin("<", Var(nx), end), Bin("==", crd_at(aid, Var(nx)), cur)),
                Block((Assign(nx, _add(Var(nx), _ic(1))),)),
            )
            return [Decl(nx, _add(p, _ic(1)), "index"), scan], Var(nx)

        def child(aid: int, p: Expr, nxt: Expr) -> None:
            a, st = self.accesses[aid], states[aid]
            if self.level(a, st.level).unique:
                new_states[aid] = _State(st.level + 1, p, None)
            else:
                new_states[aid] = _State(st.level + 1, p, (p, nxt))

        for aid in locs:
            a, st = self.accesses[aid], states[aid]
            new_states[aid] = _State(st.level + 1, _add(_mul(st.q, ext(v)), c), None)

        loop_stmt: list[Stmt]
        seg_p = ""
        merge_cond: Expr = TRUE
        body_alive = dict(alive)
        if full_terms or not iters:
            # a counted loop: some term fires at every coordinate
            self.strategies[v] = (
                "dense loop over the full extent"
                + (f", {len(iters)} sparse segment(s) advanced in step" if iters else "")
                + (f", {len(locs)} dense level(s) located" if locs else "")
            )
            for aid in iters:
                lo, hi = bounds[aid]
                p = self.fresh(f"p{aid}")
                heads.append(Decl(p, lo, "index"))
                hit = self.fresh(f"hit{aid}")
                pre.append(
                    Let(hit, Bin("&&", Bin("<", Var(p), hi), Bin("==", crd_at(aid, Var(p)), c)), "bool")
                )
                scan, nxt = advance(aid, Var(p), hi, c)
                pre.extend(If(Var(hit), Block((s,))) if isinstance(s, While) else s for s in scan)
                hits[aid] = Var(hit)
                child(aid, Var(p), nxt)
                post.append(If(Var(hit), Block((Assign(p, nxt),))))
            kind = "counted"
        elif len(iters) == 1 and self.level(self.accesses[iters[0]], states[iters[0]].level).unique:
            aid = iters[0]
            lo, hi = bounds[aid]
            p = seg_p = self.fresh(f"p{aid}")
            pre.append(Let(c.name, crd_at(aid, Var(p))))
            hits[aid] = TRUE
            child(aid, Var(p), _add(Var(p), _ic(1)))
            self.strategies[v] = "iterate one sorted segment" + (
                f", {len(locs)} dense level(s) located" if locs else ""
            )
            kind = "segment"
        else:
            # the two-pointer merge (one iterator with duplicates is a merge of one: runs skipped)
            ps: dict[int, Var] = {}
            for aid in iters:
                lo, hi = bounds[aid]
                p = self.fresh(f"p{aid}")
                heads.append(Decl(p, lo, "index"))
                ps[aid] = Var(p)
            mins: Expr | None = None
            heads_of: dict[int, Var] = {}
            for aid in iters:
                hi = bounds[aid][1]
                cur = self.fresh(f"cur{aid}")  # the segment's head coordinate, read once per step
                pre.append(Let(cur, Select(Bin("<", ps[aid], hi), crd_at(aid, ps[aid]), BIG)))
                heads_of[aid] = Var(cur)
                mins = Var(cur) if mins is None else Bin("min", mins, Var(cur))
            assert mins is not None
            pre.append(Let(c.name, mins))
            for aid in iters:
                hit = self.fresh(f"hit{aid}")
                pre.append(Let(hit, Bin("==", heads_of[aid], c), "bool"))
                scan, nxt = advance(aid, ps[aid], hi, c)
                pre.extend(If(Var(hit), Block((s,))) if isinstance(s, While) else s for s in scan)
                hits[aid] = Var(hit)
                child(aid, ps[aid], nxt)
                post.append(If(Var(hit), Block((Assign(ps[aid].name, nxt),))))
            conds = []
            for t in terms:
                mine = [aid for aid in iters if self.accesses[aid].term == t]
                cond: Expr = TRUE
                for aid in mine:
                    cond = _and(cond, Bin("<", ps[aid], bounds[aid][1]))
                conds.append(cond)
            kind = "merge"
            n_terms = len({self.accesses[a].term for a in iters})
            self.strategies[v] = (
                f"two-pointer merge of {len(iters)} sorted segment(s) "
                + (
                    "(intersection)"
                    if n_terms == 1 and len(iters) > 1
                    else "(union of terms)"
                    if n_terms > 1
                    else "(runs of duplicates)"
                )
                + (f", {len(locs)} dense level(s) located" if locs else "")
            )
            merge_cond = _or_all(conds)
        # term alive flags inside the body
        any_alive: list[Expr] = []
        for t in terms:
            flag = alive[t]
            for aid in iters:
                if self.accesses[aid].term == t:
                    flag = _and(flag, hits[aid])
            if not isinstance(flag, (Const, Var)):
                name = self.fresh(f"alive{t}")
                pre.append(Let(name, flag, "bool"))
                flag = Var(name)
            body_alive[t] = flag
            any_alive.append(flag)
        saved, self.in_loop = self.in_loop, True
        inner = self.nest(rem, terms, new_states, body_alive)
        self.in_loop = saved
        inner = self.wrap_output(v, inner)
        if (
            kind == "merge"
            and self.pass_ == "bound"
            and self.prefix
            and v == self.prefix[-1]
            and not self.rest
        ) and not any(isinstance(x, (Loop, While)) for st in inner for x in walk(st)):
            # one entry at most per merged coordinate: the segments' lengths bound the row
            total: Expr = _ic(0)
            for aid in iters:
                total = _add(total, Bin("-", bounds[aid][1], bounds[aid][0]))
            return [*heads_lets(heads), Assign("cnt", _add(Var("cnt"), total))]
        if kind == "merge":
            guard = _or_all(any_alive)
            guarded: list[Stmt] = inner if isinstance(guard, Const) else [If(guard, Block(tuple(inner)))]
            loop_stmt = [While(merge_cond, block(*pre, *guarded, *post))]
        elif kind == "segment":
            aid = iters[0]
            lo, hi = bounds[aid]
            if self.pass_ == "bound" and inner == [_COUNT_ONE]:
                # the bound pass counts the products of an innermost segment without walking it
                return [*heads, Assign("cnt", _add(Var("cnt"), Bin("-", hi, lo)))]
            par = top and self.can_parallel()
            loop_stmt = [Loop(seg_p, lo, hi, block(*pre, *inner), parallel=par, tag="rows" if par else "")]
            self.parallel = self.parallel or par
        elif top and self.blocks and not iters:
            # rows in blocks: one parallel iteration per block, its rows written back to back
            # from 0 into the block's own window of the outputs (the emitter places the windows
            # one after another in block order; ``wp`` ends as the block's length)
            rows = Loop(
                c.name,
                Load("o_blk", Var("b")),
                Load("o_blk", _add(Var("b"), _ic(1))),
                block(*pre, *inner, *post),
            )
            body = block(Decl("wp", _ic(0), "index"), rows)
            loop_stmt = [Loop("b", _ic(0), Var("NB"), body, parallel=True, tag="blocks")]
            self.parallel = True
            self.used_blocks = True
        else:
            par = top and not iters and self.can_parallel()
            loop_stmt = [
                Loop(
                    c.name,
                    _ic(0),
                    ext(v),
                    block(*pre, *inner, *post),
                    parallel=par,
                    tag="rows" if par else "",
                )
            ]
            self.parallel = self.parallel or par
        return [*heads, *loop_stmt]

    def can_parallel(self) -> bool:
        if self.output == "sparse":
            return True
        return self.owned or self.mode == "partials" or self.atomic

    # -- output -------------------------------------------------------------------------------
    def wrap_output(self, v: str, inner: list[Stmt]) -> list[Stmt]:
        """Per-row bookkeeping of a sparse output (or a row-accumulated dense one) around the
        body of the loop over ``v``."""
        if self.row_acc and v == self.order[len(self.expr.out_indices) - 1]:
            idx = _linear(self.expr.out_indices)
            inner = self.mark_reduce(inner)
            return [
                Decl("acc", self.identity(), "value"),
                *inner,
                Store("out", idx, add_ir(self.sr, Load("out", idx), Var("acc"))),
            ]
        if self.output != "sparse":
            return inner
        out = list(inner)
        if self.prefix and v == self.prefix[-1]:
            out = self.row_open() + out + self.row_close()
        if v == self.order[0]:
            c1 = coord(v)
            if self.pass_ in ("count", "bound"):
                out = [Decl("cnt", _ic(0), "index"), *out, Store("o_cnt", c1, Var("cnt"))]
            elif self.blocks:  # the block's write position carries over; the row's count is kept
                out = [Let("row0", Var("wp")), *out, Store("o_cnt", c1, Bin("-", Var("wp"), Var("row0")))]
            else:
                out = [Decl("wp", Load("o_pos", c1), "index"), *out]
        return out

    def mark_reduce(self, body: list[Stmt]) -> list[Stmt]:
        """Tag the plain loops of a row body as reductions into ``acc`` (a GPU group may split
        them across lanes): only where every update of ``acc`` is inside such a loop and none
        holds a merge or a deeper loop."""
        loops = [n for n, s in enumerate(body) if isinstance(s, (Loop, While))]
        if not loops or not all(isinstance(body[n], Loop) for n in loops):
            return body
        for n in loops:
            lp = body[n]
            assert isinstance(lp, Loop)
            if any(isinstance(x, (Loop, While, Store, Accumulate)) for x in walk(lp.body)):
                return body
        outside = [x for n, st in enumerate(body) if n not in loops for x in walk(st)]
        if any(isinstance(x, Assign) and x.name == "acc" for x in outside):
            return body  # a term summed outside the loops: every lane would add it
        out = list(body)
        for n in loops:
            lp = out[n]
            assert isinstance(lp, Loop)
            out[n] = replace(lp, reduce="acc")
        return out

    def row_open(self) -> list[Stmt]:
        if self.pass_ == "bound":
            return []
        if not self.rest:
            return [Decl("acc", self.identity(), "value"), Decl("hit", _ic(0), "index")]
        if self.mode == "workspace":
            return [Decl("nw", _ic(0), "index"), Let("stamp", _linear(self.prefix), "index")]
        return []

    def row_close(self) -> list[Stmt]:
        if self.pass_ == "bound":
            return []
        if not self.rest:
            if self.pass_ == "count":
                return [If(Bin("!=", Var("hit"), _ic(0)), Block((Assign("cnt", _add(Var("cnt"), _ic(1))),)))]
            return [If(Bin("!=", Var("hit"), _ic(0)), Block(tuple(self.emit(Var("acc"), {}))))]
        if self.mode != "workspace":
            return []
        if self.pass_ == "count":
            return [Assign("cnt", _add(Var("cnt"), Var("nw")))]
        base = Bin("*", Var("ust_tid"), Var("W"))
        w = Var("w")
        coords: dict[str, Expr] = {}
        rem: Expr = w
        for n, r in enumerate(reversed(self.rest)):
            last = n == len(self.rest) - 1
            coords[r] = rem if last else Bin("%", rem, ext(r))  # the outermost needs no modulo
            rem = Bin("//", rem, ext(r))
        lets: list[Stmt] = [Let(f"y_{r}", coords[r]) for r in self.rest]
        value = Load("ws_val", _add(base, w))
        body = block(
            Let("w", Load("ws_list", _add(base, Var("e")))),
            *lets,
            *self.emit(value, {r: Var(f"y_{r}") for r in self.rest}),
        )
        # the touched list in order: sorted, or -- for a row touching more than 1/DENSE_ROW of
        # the workspace -- read off the markers in one sequential scan (no comparisons, no
        # branch: every slot is written at ``ns`` and ``ns`` advances past the touched ones)
        touched = Bin("==", Load("ws_mark", _add(base, Var("w"))), Var("stamp"))
        scan = Block(
            (
                Decl("ns", _ic(0), "index"),
                Loop(
                    "w",
                    _ic(0),
                    Var("W"),
                    Block(
                        (
                            Store("ws_list", _add(base, Var("ns")), Var("w")),
                            Assign("ns", _add(Var("ns"), Select(touched, _ic(1), _ic(0)))),
                        )
                    ),
                ),
            )
        )
        dense_row = Bin(">", Bin("*", Var("nw"), _ic(DENSE_ROW)), Var("W"))
        return [
            If(dense_row, scan, Block((Sort("ws_list", base, _add(base, Var("nw"))),))),
            Loop("e", _ic(0), Var("nw"), body),
        ]

    def emit(self, value: Expr, rest_coords: dict[str, Expr]) -> list[Stmt]:
        """Write one output entry at ``wp`` (fill pass): coordinates of the output indices
        after the outer one, then the value."""
        stmts: list[Stmt] = []
        for n, v in enumerate(self.prefix[1:] + self.rest):
            cv = rest_coords.get(v, coord(v))
            stmts.append(Store(f"o_crd{n + 1}", Var("wp"), cv))
        stmts.append(Store("o_val", Var("wp"), value))
        stmts.append(Assign("wp", _add(Var("wp"), _ic(1))))
        return stmts

    def identity(self) -> Const:
        return Const(self.sr.identity_for(self.vdt).item(), "value")

    # -- a term's contribution ------------------------------------------------------------------
    def term_value(self, t: int, states: dict[int, _State]) -> Expr:
        term = self.expr.terms[t]
        factors: list[Expr] = []
        lit = term.literal
        # a subtracted term is negated, not multiplied by -1: (-1+0j) * (inf+0j) is -inf+nanj, where
        # NumPy's and SciPy's 0 - (inf+0j) is -inf+0j (only rings subtract: their "-" is arithmetic)
        negate = lit == -1 and self.sr.ring and bool(term.scalars or term.factors)
        if (lit != 1 and not negate) or (not term.scalars and not term.factors):
            factors.append(Const(lit, "value"))
        factors += [Var(f"s_{s}") for s in term.scalars]
        for aid in self.term_accesses[t]:
            a = self.accesses[aid]
            op = self.ops[a.op]
            if op.sparse:
                factors.append(Load(self.buf(a, "val"), states[aid].q))
            else:
                factors.append(Load(self.buf(a, "val"), _linear(a.indices)))
        value = factors[0]
        for f in factors[1:]:
            value = mul_ir(self.sr, value, f)
        if len(factors) == 1 and self.sr.name == "plus_pair" and term.factors:
            value = Const(1, "value")
        return Un("-", value) if negate else value

    def compute(self, t: int, states: dict[int, _State], alive: Expr) -> list[Stmt]:
        stmts = self.update(t, states)
        if isinstance(alive, Const) and alive.value is True:
            return stmts
        return [If(alive, Block(tuple(stmts)))]

    def update(self, t: int, states: dict[int, _State]) -> list[Stmt]:
        outs = self.expr.out_indices
        if self.row_acc:
            return [Assign("acc", add_ir(self.sr, Var("acc"), self.term_value(t, states)))]
        if self.output in ("dense", "scalar"):
            value = self.term_value(t, states)
            idx = _linear(outs)
            if self.atomic and not self.owned:
                if not self.sr.atomic:
                    raise UnsupportedError(
                        f"semiring {self.sr.label} has no atomic add: this expression's output is "
                        "shared between GPU threads; use a built-in semiring or the CPU"
                    )
                return [Accumulate("out", idx, value, atomic=True, op=self.sr.atomic)]
            if self.mode == "partials" and not self.owned:
                idx = _add(Bin("*", Var("ust_tid"), Var("NOUT")), idx)
            return [Store("out", idx, add_ir(self.sr, Load("out", idx), value))]
        # sparse output
        if self.pass_ == "bound":
            return [_COUNT_ONE]
        if not self.rest:
            if self.pass_ == "count":
                return [Assign("hit", _ic(1))]
            return [
                Assign("acc", add_ir(self.sr, Var("acc"), self.term_value(t, states))),
                Assign("hit", _ic(1)),
            ]
        if self.mode == "workspace":
            base = Bin("*", Var("ust_tid"), Var("W"))
            w = _linear(self.rest)
            wi = self.fresh("wi")
            first: list[Stmt] = [
                Store("ws_mark", Var(wi), Var("stamp")),
                Store("ws_list", _add(base, Var("nw")), w),
                Assign("nw", _add(Var("nw"), _ic(1))),
            ]
            if self.pass_ == "count":  # the pattern only: a marker and a counter, no list
                mark = (Store("ws_mark", Var(wi), Var("stamp")), Assign("nw", _add(Var("nw"), _ic(1))))
                return [
                    Let(wi, _add(base, w)),
                    If(Bin("!=", Load("ws_mark", Var(wi)), Var("stamp")), Block(mark)),
                ]
            value = self.term_value(t, states)
            vn = self.fresh("v")
            first.append(Store("ws_val", Var(wi), Var(vn)))
            again = Block((Store("ws_val", Var(wi), add_ir(self.sr, Load("ws_val", Var(wi)), Var(vn))),))
            return [
                Let(wi, _add(base, w)),
                Let(vn, value, "value"),
                If(Bin("!=", Load("ws_mark", Var(wi)), Var("stamp")), Block(tuple(first)), again),
            ]
        # expand: every contribution is an entry; duplicates are combined after a sort
        if self.pass_ == "count":
            return [Assign("cnt", _add(Var("cnt"), _ic(1)))]
        return self.emit(self.term_value(t, states), {})

    # -- the kernel ---------------------------------------------------------------------------
    def params(self) -> tuple[Param, ...]:
        ps: list[Param] = [Param("NT", "iscalar"), *(Param(f"E_{v}", "iscalar") for v in self.order)]
        for n, o in enumerate(self.ops):
            if o.levels is not None:
                for k, lv in enumerate(o.levels):
                    if lv.kind in ("compressed", "loose_compressed"):
                        ps.append(Param(f"t{n}_pos{k}", "ibuf", o.index_dtype))
                    if lv.kind in ITERATED:
                        ps.append(Param(f"t{n}_crd{k}", "ibuf", o.index_dtype))
            ps.append(Param(f"t{n}_val", "vbuf"))
        ps += [Param(f"s_{s}", "vscalar") for s in self.expr.scalars]
        if self.output in ("dense", "scalar"):
            if self.mode == "partials":
                ps.append(Param("NOUT", "iscalar"))
            ps.append(Param("out", "vbuf", const=False))
        elif self.pass_ in ("count", "bound"):
            ps.append(Param("o_cnt", "ibuf", "int64", const=False))
        else:
            if self.blocks:
                ps += [
                    Param("NB", "iscalar"),
                    Param("o_blk", "ibuf", "int64"),
                    Param("o_bound", "ibuf", "int64"),
                    Param("o_sched", "ibuf", "int64", const=False),
                    Param("o_cnt", "ibuf", "int64", const=False),
                ]
            else:
                ps.append(Param("o_pos", "ibuf", "int64"))
            for n in range(1, len(self.prefix) + len(self.rest)):
                ps.append(Param(f"o_crd{n}", "ibuf", self.crd_dtype, const=False))
            ps.append(Param("o_val", "vbuf", const=False))
        if self.output == "sparse" and self.rest and self.mode == "workspace" and self.pass_ != "bound":
            ps.append(Param("W", "iscalar"))
            ps.append(Param("ws_mark", "ibuf", self.mark_dtype, const=False))
            ps.append(Param("ws_list", "ibuf", "int64", const=False))
            if self.pass_ == "fill":
                ps.append(Param("ws_val", "vbuf", const=False))
        return tuple(ps)

    def flatten_outputs(self, body: list[Stmt]) -> list[Stmt]:
        """On the GPU: counted loops over output indices perfectly nested in the outer parallel
        loop become parallel too (tag ``cols``); the emitter flattens them into the grid, one
        thread per output slot."""
        if not (self.atomic and self.output == "dense" and self.owned):
            return body
        out = list(body)
        for n, s in enumerate(out):
            if isinstance(s, Loop) and s.parallel:
                out[n] = self._flatten(s)
        return out

    def _flatten(self, lp: Loop) -> Loop:
        inner = lp.body.body
        lets = [x for x in inner if isinstance(x, Let)]
        rest = [x for x in inner if not isinstance(x, Let)]
        if len(rest) != 1 or not isinstance(rest[0], Loop) or inner[-1] is not rest[0]:
            return lp
        il = rest[0]
        v = il.var[2:] if il.var.startswith("x_") else ""
        full = isinstance(il.lo, Const) and il.lo.value == 0 and il.hi == ext(v)
        if not (v in self.expr.out_indices and full and not il.parallel):
            return lp
        if any(x.name in free_names(il.lo) | free_names(il.hi) for x in lets):
            return lp
        self.flat.append(v)
        il = replace(il, parallel=True, tag="cols")
        return replace(lp, body=Block((*lets, self._flatten(il))))

    def kernel(self, name: str) -> Kernel:
        body = self.nest(
            self.order,
            list(range(len(self.expr.terms))),
            {a.id: _State() for a in self.accesses},
            dict.fromkeys(range(len(self.expr.terms)), TRUE),
        )
        body = self.flatten_outputs(body)
        meta = (
            ("compute", True),
            ("flat", tuple(self.flat)),
            ("parallel", self.parallel),
            ("pass", self.pass_),
            ("reduce_add", add_ir(self.sr, Var("ust_ra"), Var("ust_rb"))),
            # a row accumulated in ``acc`` may be split across threads, combined with this atomic
            ("split_op", self.sr.atomic if self.row_acc else ""),
        )
        return Kernel(name, self.params(), Block(tuple(body)), None, self.vdt, "int64", "int64", meta)


def lower_compute(
    expr: IndexExpr,
    operands: Sequence[OperandSpec],
    order: Sequence[str],
    *,
    output: str,
    semiring: Semiring,
    value_dtype: str,
    mode: str = "workspace",
    atomic: bool = False,
    name: str = "ust_compute",
    mark_dtype: str = "int64",
    blocks: bool = False,
    crd_dtype: str = "int64",
) -> ComputeKernels:
    """Lower ``expr`` for the given operands and loop order.

    ``output``: "dense", "scalar" or "sparse".  ``mode``: for sparse outputs "workspace"
    (a dense row workspace, sorted per row) or "expand" (entries as they come, combined by
    the caller after a sort; ``mark_dtype``: the workspace markers' dtype, int32 where the
    outer coordinates fit, halving the randomly accessed bytes; ``blocks``: assemble a sparse
    workspace result in one numeric pass -- a bound pass counts products (an innermost segment
    by its length), every block of rows is filled from 0 into its own window of the outputs and
    the emitter places the windows back to back in block order -- where the outer loop is a
    counted one; ``crd_dtype``: the result's coordinate dtype); for dense outputs "partials" (a
    thread-private output when the outer loop does not own its rows) or "workspace" (owned or serial).  ``atomic``:
    the target combines shared outputs atomically (the GPU).
    """
    for o in operands:
        for lv in o.levels or ():
            if lv.kind not in WALKABLE:
                raise UnsupportedError(f"level kind {lv.kind!r} is not walked by the compiler; convert first")
    assembly = "blocks" if (output == "sparse" and blocks and mode == "workspace") else "two-pass"
    lower = functools.partial(
        _lower_passes, expr, operands, order, output, semiring, value_dtype, mode, atomic, name, mark_dtype
    )
    if assembly == "blocks":
        ck = lower(("bound", "fill"), True, crd_dtype)
        if ck is not None:
            return ck
        assembly = "two-pass"
    passes: tuple[str, ...] = ("count", "fill") if output == "sparse" else ("main",)
    ck = lower(passes, False, crd_dtype)
    assert ck is not None
    return ck


def _lower_passes(
    expr: IndexExpr,
    operands: Sequence[OperandSpec],
    order: Sequence[str],
    output: str,
    semiring: Semiring,
    value_dtype: str,
    mode: str,
    atomic: bool,
    name: str,
    mark_dtype: str,
    passes: tuple[str, ...],
    blocks: bool,
    crd_dtype: str = "int64",
) -> ComputeKernels | None:
    """The kernels of ``passes`` (None when ``blocks`` was asked but the outer loop cannot be
    cut into blocks of rows: it is not a counted loop)."""
    kernels = []
    low: _Lowerer | None = None
    for p in passes:
        low = _Lowerer(
            expr,
            operands,
            order,
            output,
            semiring,
            value_dtype,
            mode,
            p,
            atomic,
            mark_dtype,
            blocks,
            crd_dtype,
        )
        kernels.append(low.kernel(f"{name}_{p}"))
        if low.blocks and not low.used_blocks:
            return None
    assert low is not None
    return ComputeKernels(
        tuple(kernels),
        output,
        tuple(order),
        low.prefix,
        low.rest,
        low.parallel,
        low.owned,
        mode,
        "blocks" if blocks else "two-pass",
        tuple(low.strategies.items()),
    )
