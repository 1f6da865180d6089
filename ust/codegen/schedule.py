"""Kernel variants of a generated matmul: loop orders, threads per row, variant strings.

Pure planning over :func:`ust.codegen.lower.plan` / :func:`~ust.codegen.lower.lower`: what
``autotune`` may time and what the GPU takes by default.  Variants are short strings (saved
plans store them): ``"auto"``, ``"storage"``, ``"outer"``, for CUDA ``"<order>:g<threads>"``,
and ``"<order>:nnz"`` for the load-balanced kernel (C: rows split by rows + entries; CUDA: an
nnz split with a segmented reduction), which ``"auto"`` takes when the row lengths are skewed
(:func:`balance_choice`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ust.codegen.emit_cuda import NNZ_CHUNK, supports_group
from ust.codegen.lower import balance_level, lower, plan
from ust.formats.model import Format
from ust.runtime.errors import UnsupportedError

__all__ = [
    "balance_choice",
    "cuda_order",
    "default_group",
    "nbatch",
    "orders",
    "parse_balance",
    "parse_variant",
    "variants",
]

#: The variant suffix of the load-balanced kernel.
NNZ = "nnz"
#: C: the static split of equal row counts must give some thread this much more than its
#: share of the entries before the balanced split is taken (it costs two binary searches).
C_IMBALANCE = 1.1
#: CUDA: rows this many times longer than the mean (and longer than one warp's chunk) make a
#: row-per-group kernel wait on its longest rows; the nnz split is taken.
CUDA_SKEW = 8.0


def parse_variant(variant: Any) -> tuple[str, int | None]:
    """(loop order, threads per row or None for the default) of a variant string."""
    if variant in (None, "", "auto"):
        return "auto", None
    text = str(variant)
    order, _, group = text.partition(":")
    g = int(group[1:]) if group.startswith("g") else None
    return order or "auto", g


def parse_balance(variant: Any) -> str | None:
    """``"nnz"`` for a load-balanced variant, ``"none"`` for another explicit one, None for
    ``"auto"`` (then :func:`balance_choice` decides from the row lengths)."""
    if variant in (None, "", "auto"):
        return None
    return NNZ if str(variant).endswith(":" + NNZ) else "none"


def balance_choice(a: Any, op: str, order: str, target: str, threads: int = 1) -> str:
    """``"nnz"`` when ``a``'s row lengths make a load-balanced kernel pay, else ``"none"``.

    C (``threads`` workers): when the static split of equal row counts would give one thread
    more than :data:`C_IMBALANCE` times its share of the entries (R-MAT: 75 % of them on
    thread 0 of 2).  CUDA: when the longest row exceeds one warp's chunk and :data:`CUDA_SKEW`
    times the mean.  Reads ``threads + 1`` entries of the rows' ``pos`` (C) or one pass over
    it (CUDA): cheap at plan time.  Works on NumPy and CuPy buffers alike.
    """
    level = balance_level(a.format, op, order)
    if level is None:
        return "none"
    pos = a.pos(level)
    n = int(pos.shape[-1]) - 1
    if n < 1:
        return "none"
    total = int(pos[n]) - int(pos[0])
    if total <= 0:
        return "none"
    if target == "c":
        if threads < 2 or n < threads:
            return "none"
        cuts = [int(pos[n * t // threads]) for t in range(threads + 1)]
        worst = max(b - a_ for a_, b in itertools.pairwise(cuts))
        return NNZ if worst > C_IMBALANCE * total / threads else "none"
    longest = int((pos[1:] - pos[:-1]).max())
    return NNZ if longest > NNZ_CHUNK and longest > CUDA_SKEW * total / n else "none"


def cuda_order(fmt: Format, op: str) -> str:
    """Loop order for the GPU: the outer order when storage order would leave the accumulator
    below the parallel loop (BSR: one thread per block row, output accumulated in memory) and
    the outer order owns its rows (one thread or group per row, a register accumulator)."""
    p = plan(fmt, op, "auto")
    if p.reduce_ok or p.order == "outer":
        return p.order
    try:
        q = plan(fmt, op, "outer")
    except UnsupportedError:
        return p.order
    return "outer" if q.owned and q.reduce_ok else p.order


def orders(fmt: Format, op: str, target: str = "c") -> list[str]:
    """Loop orders that give different kernels for ``fmt`` (the target's default first)."""
    chosen = cuda_order(fmt, op) if target == "cuda" else plan(fmt, op, "auto").order
    out = [chosen]
    for other in ("storage", "outer"):
        if other != chosen:
            try:
                plan(fmt, op, other)
            except UnsupportedError:
                continue
            out.append(other)
    return out


def default_group(a: Any, op: str, order: str = "auto") -> int:
    """Threads per output item on the GPU: the power of two nearest half the entries per row (1 .. 32)."""
    k = lower(a.format, op, order=order)
    if not supports_group(k) or k.info["reduce_level"] == k.info["first_level"]:
        return 1  # no reduction loop, or one over entries every row shares (DIA's diagonals)
    items = 1
    for kind, arg in k.info["par_extents"]:  # type: ignore[attr-defined]
        if kind == "D":
            items *= int(a.shape[arg])
        elif kind == "S":
            items *= int(a.format.lvl_shape(a.shape)[arg])
        else:
            crd = a.crd(arg)
            items *= int(crd.shape[-1]) if crd is not None else 1
    nse = int(a.values.size)
    avg = nse / max(items, 1)
    return int(min(32, 2 ** round(math.log2(max(avg / 2, 1.0)))))


def variants(m: Any, route: str) -> list[str]:
    """Variants ``autotune`` may time for a planned ``Matmul`` on ``route``."""
    op = "mm" if len(m.b.shape) > (1 + nbatch(m.a.format)) else "mv"
    outs: list[str] = list(orders(m.a.format, op, "cuda" if route == "generated-cuda" else "c"))
    balanced = [f"{o}:{NNZ}" for o in outs if balance_level(m.a.format, op, o) is not None]
    if route == "generated-cuda":
        # "auto" first: the default mapping (default_group's threads per row, the balance the
        # row lengths call for) is none of the fixed ones, and autotune must not lose to it
        gv: list[str] = ["auto"]
        for o in outs:
            groups = (1, 4, 32) if supports_group(lower(m.a.format, op, order=o)) else (1,)
            gv += [f"{o}:g{g}" for g in groups]
        return gv + balanced
    return outs + balanced


def nbatch(fmt: Format) -> int:
    n = 0
    while n < fmt.nlevels and fmt.levels[n].format.value == "batch":
        n += 1
    return n
