"""Kernel variants of a generated matmul: loop orders, threads per row, variant strings.

Pure planning over :func:`ust.codegen.lower.plan` / :func:`~ust.codegen.lower.lower`: what
``autotune`` may time and what the GPU takes by default.  Variants are short strings (saved
plans store them): ``"auto"``, ``"storage"``, ``"outer"``, and for CUDA ``"<order>:g<threads>"``.
"""

from __future__ import annotations

import math
from typing import Any

from ust.codegen.emit_cuda import supports_group
from ust.codegen.lower import lower, plan
from ust.formats.model import Format
from ust.runtime.errors import UnsupportedError

__all__ = ["cuda_order", "default_group", "nbatch", "orders", "parse_variant", "variants"]


def parse_variant(variant: Any) -> tuple[str, int | None]:
    """(loop order, threads per row or None for the default) of a variant string."""
    if variant in (None, "", "auto"):
        return "auto", None
    text = str(variant)
    order, _, group = text.partition(":")
    g = int(group[1:]) if group.startswith("g") else None
    return order or "auto", g


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
    if route == "generated-cuda":
        gv: list[str] = []
        for o in outs:
            groups = (1, 4, 32) if supports_group(lower(m.a.format, op, order=o)) else (1,)
            gv += [f"{o}:g{g}" for g in groups]
        return gv
    return outs


def nbatch(fmt: Format) -> int:
    n = 0
    while n < fmt.nlevels and fmt.levels[n].format.value == "batch":
        n += 1
    return n
