"""Running the compiler's kernels: output allocation, the two passes, combining partials.

One host program, written once against ``xp`` (NumPy on the CPU, CuPy on the GPU), drives the
kernels of :mod:`ust.codegen.compute_lower` through a target's ``launch(kernel, args)``:

* dense / scalar outputs: the output filled with the semiring's identity, one pass; where every
  thread accumulated into its own copy (``partials``), the copies are combined with the
  semiring's add;
* sparse outputs: the count pass, a prefix sum, the fill pass; in ``expand`` mode the entries of
  a row are then sorted and runs of one coordinate combined with the semiring's add;
* sparse outputs on the CPU (``blocks``): the bound pass, the outputs reserved at the bound, the
  rows cut into blocks, one fill pass that places the blocks back to back, a trim in place.

The result is plain buffers (:class:`ComputeResult`); the API layer makes the Tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.codegen.compute_lower import ComputeKernels
from ust.codegen.ir import Kernel
from ust.codegen.semiring import Semiring
from ust.runtime.errors import ShapeError
from ust.runtime.xp import expand_segments

__all__ = ["WORKSPACE_LIMIT", "BoundTooLarge", "ComputeResult", "run_compute"]

#: The most bytes the row workspaces of all threads may take before ``expand`` is used instead.
WORKSPACE_LIMIT = 1 << 28
#: The most bytes a one-pass assembly reserves for its upper bound of the result's entries
#: (None: half of the memory :func:`ust.tensor.limits.memory_limit` sees; the pages past the
#: entries actually written are never touched).
BOUND_LIMIT: int | None = None
#: Products per block of rows of a one-pass assembly on several threads (the hand-written
#: SpGEMM's chunk: a block's entries fit in a core's cache until they are copied to their place).
BLOCK_WORK = 1 << 15


def bound_limit(xp: Any) -> int:
    if BOUND_LIMIT is not None:
        return BOUND_LIMIT
    from ust.tensor.limits import memory_limit

    return memory_limit(xp) // 2


Launch = Callable[[Kernel, Mapping[str, Any]], None]


class BoundTooLarge(Exception):
    """The one-pass assembly's upper bound does not fit: run the two-pass kernels instead."""


@dataclass(frozen=True)
class ComputeResult:
    """``dense``: the output array (C order over the output indices), or for a sparse output the
    row pointers over the outer index, one coordinate array per further output index (in the
    kernels' emission order: ``prefix[1:] + rest``) and the values."""

    dense: Any = None
    pos: Any = None
    crd: tuple[Any, ...] = ()
    values: Any = None


def _combine_sorted(
    xp: Any, pos: Any, crd: list[Any], vals: Any, outer: int, sr: Semiring
) -> tuple[Any, list[Any], Any]:
    """Sort the entries of every row by their coordinates and combine runs of one coordinate."""
    n = int(vals.shape[0])
    if n == 0:
        return pos, crd, vals
    row = expand_segments(xp, xp.diff(pos), n, np.int64)
    keys = [*reversed(crd), row]
    perm = xp.lexsort(xp.stack(keys)) if keys else xp.arange(n)
    crd = [c[perm] for c in crd]
    vals = vals[perm]
    row = row[perm]
    change = xp.zeros(n, dtype=bool)
    change[0] = True
    if n > 1:
        diff = row[1:] != row[:-1]
        for c in crd:
            diff |= c[1:] != c[:-1]
        change[1:] = diff
    starts = xp.flatnonzero(change)
    if int(starts.shape[0]) == n:
        return pos, crd, vals
    combined = _segment_reduce(xp, vals, starts, sr)
    counts = xp.bincount(row[starts], minlength=outer)
    new_pos = xp.zeros(outer + 1, dtype=np.int64)
    xp.cumsum(counts, out=new_pos[1:])
    return new_pos, [c[starts] for c in crd], combined


def _segment_reduce(xp: Any, vals: Any, starts: Any, sr: Semiring) -> Any:
    """``sr.add`` over each run ``vals[starts[r]:starts[r+1]]`` (log-step doubling, an array program)."""
    n = int(vals.shape[0])
    seg = xp.zeros(n, dtype=np.int64)
    seg[starts] = 1
    seg = xp.cumsum(seg) - 1
    out = vals.copy()
    step = 1
    # after the pass with step s, out[p] combines vals[p : p + 2s] within p's run
    while step < n:
        nxt = out.copy()
        ok = xp.zeros(n, dtype=bool)
        ok[: n - step] = seg[step:] == seg[: n - step]
        idx = xp.flatnonzero(ok)
        if int(idx.shape[0]) == 0:
            break
        nxt[idx] = sr.add_np(out[idx], out[idx + step]).astype(out.dtype, copy=False)
        out = nxt
        step *= 2
    return out[starts]


def run_compute(
    ck: ComputeKernels,
    launch: Launch,
    xp: Any,
    args: Mapping[str, Any],
    extents: Mapping[str, int],
    out_extents: tuple[int, ...],
    sr: Semiring,
    value_dtype: str,
    nthreads: int = 1,
) -> ComputeResult:
    """Run ``ck`` on ``args`` (operand buffers, scalars) and return the output's buffers."""
    vdt = np.dtype(value_dtype)
    ident = sr.identity_for(vdt)
    base: dict[str, Any] = dict(args)
    base["NT"] = nthreads
    for v, e in extents.items():
        base[f"E_{v}"] = e
    if ck.output in ("dense", "scalar"):
        nout = int(np.prod(out_extents, dtype=np.int64)) if out_extents else 1
        copies = nthreads if (ck.mode == "partials" and not ck.owned and ck.parallel) else 1
        out = xp.full(copies * nout, ident, dtype=vdt)
        launch(ck.kernels[0], {**base, "out": out, "NOUT": nout})
        if copies > 1:
            parts = out.reshape(copies, nout)
            acc = parts[0]
            for r in range(1, copies):
                acc = sr.add_np(acc, parts[r]).astype(vdt, copy=False)
            out = acc
        return ComputeResult(dense=out.reshape(out_extents) if out_extents else out.reshape(()))
    outer = extents[ck.order[0]]
    if ck.assembly == "blocks":
        res = _run_blocks(ck, launch, xp, base, extents, sr, vdt, nthreads, outer)
        if res is None:
            raise BoundTooLarge(f"the one-pass assembly would reserve more than {bound_limit(xp)} bytes")
        return res
    count_k, fill_k = ck.kernels
    nlev = len(ck.prefix) + len(ck.rest)
    ws = _workspace(ck, count_k, xp, extents, nthreads, vdt)
    cnt = xp.zeros(outer, dtype=np.int64)
    launch(count_k, {**base, **ws, "o_cnt": cnt})
    pos = xp.zeros(outer + 1, dtype=np.int64)
    xp.cumsum(cnt, out=pos[1:])
    nnz = int(pos[-1])
    if nnz < 0:  # pragma: no cover - an int64 overflow of the counts
        raise ShapeError("the result has more entries than int64 can count")
    crd = [xp.empty(nnz, dtype=fill_k.param(f"o_crd{n + 1}").dtype) for n in range(nlev - 1)]
    vals = xp.empty(nnz, dtype=vdt)
    if ws:
        ws["ws_mark"].fill(-1)  # the count pass's markers
    launch(
        fill_k, {**base, **ws, "o_pos": pos, **{f"o_crd{n + 1}": c for n, c in enumerate(crd)}, "o_val": vals}
    )
    if ck.mode == "expand" and ck.rest:
        pos, crd, vals = _combine_sorted(xp, pos, crd, vals, outer, sr)
    return ComputeResult(pos=pos, crd=tuple(crd), values=vals)


def _workspace(
    ck: ComputeKernels, kernel: Kernel, xp: Any, extents: Mapping[str, int], nthreads: int, vdt: np.dtype
) -> dict[str, Any]:
    if not (ck.rest and ck.mode == "workspace"):
        return {}
    w = int(np.prod([extents[r] for r in ck.rest], dtype=np.int64))
    return {
        "W": w,
        "ws_mark": xp.full(nthreads * w, -1, dtype=kernel.param("ws_mark").dtype),
        "ws_list": xp.empty(nthreads * w, dtype=np.int64),
        "ws_val": xp.empty(nthreads * w, dtype=vdt),
    }


def _blocks(xp: Any, bpos: Any, outer: int, nthreads: int) -> Any:
    """The first row of every block (and ``outer`` last): one block on one thread, otherwise
    blocks of about :data:`BLOCK_WORK` products (fewer for a small product, at least 8 a thread)
    -- taken in order by the threads, a block's entries stay in cache until its place is known."""
    total = int(bpos[-1])
    if nthreads <= 1 or total == 0:
        return xp.asarray([0, outer], dtype=np.int64)
    work = min(BLOCK_WORK, max(BLOCK_WORK >> 3, total // (8 * nthreads)))
    nb = max(1, min(outer, -(-total // work)))
    targets = xp.linspace(0, total, nb + 1)
    blk = xp.searchsorted(bpos[1:], targets, side="left").astype(np.int64)
    blk[0], blk[-1] = 0, outer
    return xp.unique(xp.minimum(blk, outer))  # increasing; empty blocks dropped


def _run_blocks(
    ck: ComputeKernels,
    launch: Launch,
    xp: Any,
    base: dict[str, Any],
    extents: Mapping[str, int],
    sr: Semiring,
    vdt: np.dtype,
    nthreads: int,
    outer: int,
) -> ComputeResult | None:
    """One numeric pass: products counted per row (an upper bound), the outputs reserved at
    the bound (pages past the written entries are never touched), rows cut into blocks that
    the kernel places back to back in order, the arrays trimmed in place.  None where the
    bound is too large to reserve, or a thread ran out of memory for its arena (the caller
    runs the two-pass kernels)."""
    bound_k, fill_k = ck.kernels
    cnt = xp.zeros(outer, dtype=np.int64)
    launch(bound_k, {**base, "o_cnt": cnt})
    bpos = xp.zeros(outer + 1, dtype=np.int64)
    xp.cumsum(cnt, out=bpos[1:])
    total = int(bpos[-1])
    nlev = len(ck.prefix) + len(ck.rest)
    cdts = [np.dtype(fill_k.param(f"o_crd{n + 1}").dtype) for n in range(nlev - 1)]
    if total * (sum(d.itemsize for d in cdts) + vdt.itemsize) > bound_limit(xp):
        return None
    blk = _blocks(xp, bpos, outer, nthreads)
    nb = int(blk.shape[0]) - 1
    sched = xp.full(4 + 2 * nb, -1, dtype=np.int64)
    sched[:4] = 0
    crd = [xp.empty(max(total, 1), dtype=d) for d in cdts]
    vals = xp.empty(max(total, 1), dtype=vdt)
    ws = _workspace(ck, fill_k, xp, extents, nthreads, vdt)
    launch(
        fill_k,
        {
            **base,
            **ws,
            "NB": nb,
            "o_blk": blk,
            "o_bound": bpos[blk],
            "o_sched": sched,
            "o_cnt": cnt,
            **{f"o_crd{n + 1}": c for n, c in enumerate(crd)},
            "o_val": vals,
        },
    )
    if int(sched[3]):
        return None  # a thread's arena did not fit
    pos = bpos  # the bounds are spent: their prefix sums become the row pointers
    xp.cumsum(cnt, out=pos[1:])
    nnz = int(pos[-1])
    if xp is np:
        for arr in (*crd, vals):
            arr.resize(nnz, refcheck=False)  # in place: no copy of the entries
    else:
        crd, vals = [c[:nnz].copy() for c in crd], vals[:nnz].copy()
    return ComputeResult(pos=pos, crd=tuple(crd), values=vals)
