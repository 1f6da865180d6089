"""The loop order of a compiled expression: every sparse operand walked in its level order.

MLIR's sparsifier sorts the loops topologically under each operand's level constraints
(``i`` before ``k`` for ``A(i,k)`` stored row-major); where no order satisfies every operand,
the operand that breaks it is converted once to a format that fits (the ``conversions`` of
the result, which ``ust.explain`` reports).  Among the orders that fit, the choice prefers:
fewer converted entries; an output index outermost (the outer parallel loop then owns its
output, and a sparse output is assembled row by row); counted loops (indices no sparse level
stores) inside the sparse ones, so that sparse levels are walked once (MTTKRP's rank index
innermost); for a sparse result, a longer run of output indices in front (less workspace);
dense operands walked along their contiguous last dimension.  On the GPU, where each thread
takes one output slot, output indices go in front instead (threads walk the sparse levels
side by side, and the leading output loops are flattened into the grid).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ust.codegen.notation import IndexExpr
from ust.runtime.errors import InvalidValueError, UnsupportedError

__all__ = ["AccessLayout", "LoopOrder", "choose_order"]

#: Beyond this many index variables the orders are not enumerated: a greedy order is taken.
MAX_ENUMERATED = 8


@dataclass(frozen=True)
class AccessLayout:
    """What the order chooser needs of one operand.

    ``level_dims``: the operand's dimensions in level order when its format is walkable as it
    is (one plain dimension per level), None for a dense array (random access: any order) or
    for a format that must be converted anyway (``fits`` False).  ``weight``: stored entries,
    the cost of converting it.
    """

    name: str
    sparse: bool
    level_dims: tuple[int, ...] | None
    fits: bool = True
    weight: int = 0


@dataclass(frozen=True)
class LoopOrder:
    order: tuple[str, ...]
    #: operand name -> the dimension order its levels must have (converted once before the run)
    conversions: tuple[tuple[str, tuple[int, ...]], ...]
    reason: str


def _level_vars(expr: IndexExpr, layouts: dict[str, AccessLayout]) -> dict[str, list[tuple[str, ...]]]:
    """Operand -> the index sequences (in level order) its accesses impose."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for t in expr.terms:
        for f in t.factors:
            lay = layouts[f.operand]
            if not lay.sparse:
                continue
            dims = lay.level_dims if lay.level_dims is not None else tuple(range(len(f.indices)))
            out.setdefault(f.operand, []).append(tuple(f.indices[d] for d in dims))
    return out


def _fits(seq: tuple[str, ...], pos: dict[str, int]) -> bool:
    return all(pos[a] < pos[b] for a, b in itertools.pairwise(seq))


def _score(
    order: tuple[str, ...],
    expr: IndexExpr,
    layouts: dict[str, AccessLayout],
    seqs: dict[str, list[tuple[str, ...]]],
    sparse_out: bool,
    gpu: bool = False,
) -> tuple[int, ...] | None:
    pos = {v: n for n, v in enumerate(order)}
    outs = set(expr.out_indices)
    if sparse_out and expr.out_indices and order[0] not in outs:
        return None
    cost = 0
    for name, lst in seqs.items():
        lay = layouts[name]
        if not lay.fits or not all(_fits(s, pos) for s in lst):
            cost += max(lay.weight, 1)
    prefix = 0
    for v in order:
        if v not in outs:
            break
        prefix += 1
    dense_inversions = 0
    for t in expr.terms:
        for f in t.factors:
            if not layouts[f.operand].sparse:
                dense_inversions += sum(1 for a, b in itertools.combinations(f.indices, 2) if pos[a] > pos[b])
    out_inversions = sum(1 for a, b in itertools.combinations(expr.out_indices, 2) if pos[a] > pos[b])
    owned = 0 if (not expr.out_indices or order[0] in outs) else 1
    # a counted loop (an index no sparse level stores) outside a sparse loop walks the sparse
    # levels once per coordinate: MTTKRP's rank index belongs innermost
    stored = {v for lst in seqs.values() for seq in lst for v in seq}
    rewalks = sum(1 for a, b in itertools.combinations(order, 2) if a not in stored and b in stored)
    if gpu:  # other GPU threads walk them again, at the same time: output indices in front instead
        rewalks = 0
    prefer_prefix = -prefix if (sparse_out or gpu) else 0
    return (cost, owned, rewalks, prefer_prefix, dense_inversions, out_inversions)


def _describe(order: tuple[str, ...], conversions: dict[str, tuple[int, ...]], user: bool) -> str:
    how = "the order given in options['order']" if user else "every sparse operand walked in its level order"
    if conversions:
        names = ", ".join(sorted(conversions))
        how += f"; {names} converted once to a format whose levels follow it"
    return f"loop order {' -> '.join(order)} ({how})"


def _parse_order(order: Sequence[str] | str) -> tuple[str, ...]:
    """``"ikj"`` (one letter per index), ``"i, k, j"`` / ``"i k j"``, or a sequence of names."""
    if not isinstance(order, str):
        return tuple(str(v) for v in order)
    if "," in order or " " in order:
        return tuple(order.replace(",", " ").split())
    return tuple(order)


def choose_order(
    expr: IndexExpr,
    layouts: Sequence[AccessLayout],
    *,
    sparse_out: bool,
    user_order: Sequence[str] | str | None = None,
    gpu: bool = False,
) -> LoopOrder:
    """The loop order and the operands to convert so that it walks every operand in order."""
    lay = {x.name: x for x in layouts}
    seqs = _level_vars(expr, lay)
    indices = expr.indices
    if user_order is not None:
        order = _parse_order(user_order)
        if sorted(order) != sorted(indices):
            raise InvalidValueError(
                f"options['order'] {''.join(order) if all(len(v) == 1 for v in order) else order} must name every index "
                f"variable once: {', '.join(indices)}"
            )
        if sparse_out and expr.out_indices and order[0] not in expr.out_indices:
            raise UnsupportedError(
                f"a sparse result is assembled row by row: the first loop must be an output index "
                f"({', '.join(expr.out_indices)}), not {order[0]}"
            )
        candidates = [order]
    elif len(indices) <= MAX_ENUMERATED:
        candidates = list(itertools.permutations(indices))
    else:
        candidates = [indices]
    best: tuple[tuple[int, ...], tuple[str, ...]] | None = None
    for order in candidates:
        s = _score(order, expr, lay, seqs, sparse_out, gpu)
        if s is not None and (best is None or s < best[0]):
            best = (s, order)
    if best is None:  # only a user order can fail the sparse-output rule, and it raised above
        raise UnsupportedError("no loop order fits")  # pragma: no cover
    order = best[1]
    pos = {v: n for n, v in enumerate(order)}
    conversions: dict[str, tuple[int, ...]] = {}
    for t in expr.terms:
        for f in t.factors:
            name = f.operand
            x = lay[name]
            if not x.sparse or name in conversions:
                continue
            if not x.fits or not all(_fits(s, pos) for s in seqs[name]):
                conversions[name] = tuple(sorted(range(len(f.indices)), key=lambda d: pos[f.indices[d]]))
    return LoopOrder(
        order, tuple(sorted(conversions.items())), _describe(order, conversions, user_order is not None)
    )
