"""Pack coordinates into a target format: the second half of the general conversion.

Written once against the array namespace ``xp``.  The entries are mapped to the target's
level coordinates (``dim_to_lvl``), put in the target's lexicographic level order (no sort
when the source order already is it, otherwise a stable sort by as few leading levels as
:func:`~ust.formats.analysis.sort_prefix` allows), duplicates are summed where the target is
unique, and each level is built from the sorted coordinates: a new position starts where
the coordinates of the level (and of its singleton chain) change, ``pos`` comes from a
bincount of the parents, dense levels compute positions arithmetically and leave explicit
zeros in the value slots nobody filled.  No Python loop over entries, rows or blocks.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ust.convert.unpack import Entries
from ust.formats.analysis import per_entry_start, sort_prefix
from ust.formats.model import Format, LevelFormat
from ust.runtime import xp as _xp
from ust.runtime.errors import FormatError
from ust.runtime.log import get_logger
from ust.tensor.limits import check_bytes, check_index_dtype, default_index_dtype

__all__ = ["DEFAULT_MIN_PADDING", "pack", "padding_limit"]

log = get_logger("convert")

#: Padding (value slots that hold no entry) always allowed, whatever the entry count.
DEFAULT_MIN_PADDING = 1 << 22
#: Padding allowed per stored entry by default.
DEFAULT_PADDING_FACTOR = 16


def padding_limit(n_entries: int, max_padding: int | None) -> int:
    """The padding a conversion may add: ``max_padding`` or the default
    ``max(16 * entries, 4 Mi)`` value slots."""
    if max_padding is not None:
        return int(max_padding)
    return max(DEFAULT_PADDING_FACTOR * n_entries, DEFAULT_MIN_PADDING)


def _check_padding(fmt: Format, shape: tuple[int, ...], slots: int, n: int, max_padding: int | None) -> None:
    limit = padding_limit(n, max_padding)
    if slots - n > limit:
        name = fmt.standard_name or fmt.map_text()
        raise FormatError(
            f"[padding-limit] storing {n} entries of a {shape} tensor as {name} needs {slots} value "
            f"slots ({slots - n} of them padding), more than the limit of {limit}; pass "
            f"max_padding={slots - n} (or more) to allow it",
            rule="padding-limit",
        )


def choose_index_dtype(
    fmt: Format, shape: tuple[int, ...], counts: list[int], source: Any = np.int32
) -> np.dtype:
    """int32 when every coordinate bound and position count fits (and the ``source`` index
    dtype is int32), else int64: :func:`ust.tensor.limits.default_index_dtype`."""
    return default_index_dtype(source, fmt, shape, max([0, *counts]))


def _result_index_dtype(
    index_dtype: Any, source: Any, fmt: Format, shape: tuple[int, ...], counts: list[int], nse: int
) -> np.dtype:
    """The asked-for index dtype (checked: ShapeError where int32 cannot hold the result) or
    the default rule's."""
    if index_dtype is None:
        return choose_index_dtype(fmt, shape, counts, source)
    itype = np.dtype(index_dtype)
    check_index_dtype(itype, fmt, shape, nse)  # every position is at most nse
    return itype


def _changes(xp: ModuleType, c: Any) -> Any:
    """Boolean of length n: entry e's coordinate differs from entry e-1's (entry 0: True)."""
    out = xp.empty(c.shape[0], dtype=bool)
    if c.shape[0]:
        out[0] = True
        xp.not_equal(c[1:], c[:-1], out=out[1:])
    return out


def order_and_merge(ent: Entries, fmt: Format, *, merge: bool) -> tuple[list[Any], Any, list[Any], Any]:
    """Target level coordinates (0-based per level), sorted and merged, the change masks
    computed on the way, and -- when one counting pass by level 0 did the sort and nothing
    merged -- its bucket pointers (level 0's histogram, prefix-summed)."""
    xp = ent.xp
    shape = ent.shape
    bounds = fmt.lvl_bounds(shape)
    extents = [hi - lo for lo, hi in bounds]
    if ent.fmt == fmt:
        lvl = list(ent.lvl)
    else:
        lvl = list(fmt.dim_to_lvl(ent.dims()))
    c = [x - lo if lo else x for x, (lo, _) in zip(lvl, bounds)]
    values = ent.values
    p = fmt.nlevels if ent.sorted_by is None else sort_prefix(ent.sorted_by, fmt)
    ptr0 = None
    if p and ent.n > 1:
        done = None
        dense0 = fmt.levels[0].format is LevelFormat.DENSE
        if p == 1 and fmt.nlevels == 2 and (dense0 or extents[0] <= _xp.bucket_limit(ent.n)):
            # one compiled counting pass moves the other coordinate and the values along (not
            # for a compressed level 0 much wider than the entries: its buckets would cost
            # O(extent) memory where the target stores O(nnz))
            done = _xp.bucket_sort(xp, c[0], extents[0], c[1], values)
        if done is not None:
            ptr0, c1, values = done
            # level 0's sorted coordinates are the bucket ids: built only when needed
            c = [None if ent.unique else _xp.expand_segments(xp, xp.diff(ptr0), ent.n, c1.dtype), c1]
        else:
            perm = _xp.stable_order(xp, c[:p], extents[:p])
            c = [x[perm] for x in c]
            values = values[perm]
    log.debug("general path: sorted by %d of %d target levels", p, fmt.nlevels)
    chg: list[Any] = [None] * fmt.nlevels
    if merge and not ent.unique and ent.n > 1:
        chg = [_changes(xp, x) for x in c]
        starts_mask = chg[0]
        for m in chg[1:]:
            starts_mask = starts_mask | m
        starts = xp.flatnonzero(starts_mask)
        if int(starts.shape[0]) < ent.n:
            values = _xp.segment_sum(xp, values, starts)
            c = [x[starts] for x in c]
            chg = [None] * fmt.nlevels
            ptr0 = None
    return c, values, chg, ptr0


def pack(
    ent: Entries,
    fmt: Format,
    *,
    index_dtype: Any = None,
    prune: bool = False,
    max_padding: int | None = None,
    source_index_dtype: Any = np.int32,
) -> Any:
    """Build a :class:`~ust.tensor.Tensor` in ``fmt`` holding the entries ``ent``.

    ``index_dtype`` (checked against the result: a ShapeError where int32 cannot hold it) or,
    without it, ``source_index_dtype`` widened where the result needs int64."""
    from ust.tensor import Tensor

    xp = ent.xp
    shape = ent.shape
    L = fmt.nlevels
    bounds = fmt.lvl_bounds(shape)
    extents = [hi - lo for lo, hi in bounds]
    keep_dups = not fmt.levels[-1].type.unique
    structured = fmt.levels[-1].format is LevelFormat.STRUCTURED
    if structured and ent.n:
        nz = xp.flatnonzero(ent.values != 0)
        if int(nz.shape[0]) < ent.n:
            ent = Entries(
                xp, ent.fmt, shape, [x[nz] for x in ent.lvl], ent.values[nz], ent.sorted_by, ent.unique
            )
    c, values, chg, ptr0 = order_and_merge(ent, fmt, merge=not keep_dups)
    n = int(values.shape[0])
    wdt = _xp.work_dtype(n)
    if ptr0 is not None and not keep_dups:
        # COO-like targets: level 0's coordinates are built straight in the result's dtype (an
        # int64 result: no int32 array and cast)
        itype_coo = _result_index_dtype(index_dtype, source_index_dtype, fmt, shape, [n], n)
        quick = _two_levels_from_buckets(xp, fmt, shape, ptr0, c[1], values, max_padding, itype_coo)
        if quick is not None:
            pos_q, crd_q, values, counts_q = quick
            itype = _result_index_dtype(
                index_dtype, source_index_dtype, fmt, shape, counts_q, int(values.shape[0])
            )
            pos_q = [None if a is None else _xp.as_index(a, itype) for a in pos_q]
            crd_q = [None if a is None else _xp.as_index(a, itype) for a in crd_q]
            return Tensor(shape, fmt, values, pos=pos_q, crd=crd_q, index_dtype=itype, check=False)
    if c[0] is None:
        c[0] = _xp.expand_segments(xp, xp.diff(ptr0), n, c[1].dtype)
    unique = not keep_dups  # merged (or the source was unique)
    first_per_entry = per_entry_start(fmt) if keep_dups else L

    def change(k: int) -> Any:
        if chg[k] is None:
            chg[k] = _changes(xp, c[k])
        return chg[k]

    pos: list[Any] = [None] * L
    crd: list[Any] = [None] * L
    P = 1  # positions of the previous level
    pe: Any = None  # per-entry position at the previous level (None: the root, all 0)
    bnd: Any = None  # per-entry "starts a new position at the previous level" (None: root)
    # after a compressed level where every entry got its own position, ``pe`` is 0..n-1 and
    # ``bnd`` all True: both are built only if a later level reads them (a COO or CSR target
    # never does)
    pe_ident = bnd_all = False

    def cur_pe() -> Any:
        nonlocal pe, pe_ident
        if pe_ident:
            pe, pe_ident = xp.arange(n, dtype=wdt), False
        return pe

    def cur_bnd() -> Any:
        nonlocal bnd, bnd_all
        if bnd_all:
            bnd, bnd_all = xp.ones(n, dtype=bool), False
        return bnd

    first: Any = None  # first entry of each position at the previous level (None: identity)
    counts_per_level: list[int] = []
    for k, lv in enumerate(fmt.levels):
        f = lv.format
        S = extents[k]
        lo = bounds[k][0]
        if f in (LevelFormat.DENSE, LevelFormat.BATCH, LevelFormat.RANGE):
            if P * max(S, 1) > 2**62:
                _check_padding(fmt, shape, P * S, n, max_padding)
            pdt = _xp.work_dtype(max(P, 1) * max(S, 1))  # S itself must fit (P = 0: no entries)
            at_root = pe is None and not pe_ident
            pe = c[k].astype(pdt, copy=False) if at_root else cur_pe().astype(pdt, copy=False) * S + c[k]
            P *= S
            if k + 1 < L and n and not bnd_all:  # all True stays all True
                bnd = change(k) if bnd is None else bnd | change(k)
                first = None  # recomputed lazily by a sparse child
            counts_per_level.append(P)
            continue
        if f is LevelFormat.STRUCTURED:
            crd[k], values, P = _structured(
                xp, lv.type.n, lv.type.m, cur_pe(), P, c[k], values, prune, fmt, shape, max_padding
            )
            pe = None
            counts_per_level.append(P)
            break
        if f is LevelFormat.SINGLETON:
            crd[k] = _shift(c[k] if first is None else c[k][first], lo)
            counts_per_level.append(P)
            continue
        # compressed / loose_compressed: a position per distinct (parent, coords of the chain)
        end = k
        while end + 1 < L and fmt.levels[end + 1].format is LevelFormat.SINGLETON:
            end += 1
        all_new = k >= first_per_entry or (unique and end == L - 1)
        if all_new or n == 0:
            new_first = None
            Pk = n
            pe_k = None
        else:
            b = change(k) if bnd is None and not bnd_all else cur_bnd() | change(k)
            for j in range(k + 1, end + 1):
                b = b | change(j)
            new_first = xp.flatnonzero(b)
            Pk = int(new_first.shape[0])
            pe_k = xp.cumsum(b, dtype=wdt) - 1
            bnd = b
        crd[k] = _shift(c[k] if new_first is None else c[k][new_first], lo)
        if pe is None and not pe_ident:
            ptr = xp.asarray(np.array([0, Pk], dtype=np.int64))
        elif ptr0 is not None and k == 1 and new_first is None:
            # level 0's counting pass already counted the children of every level-0 position
            if fmt.levels[0].format is LevelFormat.DENSE:
                ptr = ptr0
            else:
                ptr = xp.concatenate([ptr0[:1], ptr0[1:][xp.diff(ptr0) > 0]])
        else:
            parents = cur_pe() if new_first is None else cur_pe()[new_first]
            if P > (1 << 27):  # the parents' pointers: O(P) inherent (a dense level above)
                check_bytes(xp, 8 * (P + 1), f"pos({k}) of a {shape} tensor as {_name(fmt)}")
            ptr = _pointers(xp, parents, P, Pk)
        if f is LevelFormat.LOOSE_COMPRESSED:
            lohi = xp.empty(2 * P, dtype=np.int64)
            lohi[0::2] = ptr[:-1]
            lohi[1::2] = ptr[1:]
            ptr = lohi
        pos[k] = ptr
        pe_ident = pe_k is None and new_first is None
        pe = None if pe_ident else pe_k
        if new_first is None and k + 1 < L:
            bnd, bnd_all = None, True
        first = new_first
        P = Pk
        counts_per_level.append(P)
    if not structured:
        _check_padding(fmt, shape, P, n, max_padding)
        if not pe_ident and pe is not None and not (n == P and _is_identity(xp, pe, n)):
            out = xp.zeros(P, dtype=values.dtype)
            out[pe] = values
            values = out
    itype = _result_index_dtype(
        index_dtype, source_index_dtype, fmt, shape, counts_per_level, int(values.size)
    )
    pos = [None if a is None else _xp.as_index(a, itype) for a in pos]
    crd = [None if a is None else _xp.as_index(a, itype) for a in crd]
    nb = fmt.nbatch
    if nb:
        pos, crd, values = _batchify(xp, fmt, shape, nb, pos, crd, values, itype)
    return Tensor(shape, fmt, values, pos=pos, crd=crd, index_dtype=itype, check=False)


def _two_levels_from_buckets(
    xp: ModuleType,
    fmt: Format,
    shape: tuple[int, ...],
    ptr0: Any,
    c1: Any,
    values: Any,
    max_padding: int | None,
    coo_dtype: Any,
) -> tuple[list[Any], list[Any], Any, list[int]] | None:
    """Two-level targets built straight from level 0's counting pass (its bucket pointers):
    CSC/CSR (dense, compressed), DCSC/DCSR (compressed, compressed), COO-like
    (compressed(nonunique), singleton) and DIA-like (compressed, range/dense).  None when the
    target is another shape."""
    f0, f1 = fmt.levels[0].format, fmt.levels[1].format
    (lo0, hi0), (lo1, hi1) = fmt.lvl_bounds(shape)
    n = int(values.shape[0])
    counts = xp.diff(ptr0)
    wdt = _xp.work_dtype(n, hi0 - lo0)
    if f0 is LevelFormat.DENSE and f1 is LevelFormat.COMPRESSED:
        return [None, ptr0], [None, _shift(c1, lo1)], values, [hi0 - lo0, n]
    if f0 is not LevelFormat.COMPRESSED:
        return None
    root = xp.asarray(np.array([0, 0], dtype=np.int64))
    if f1 is LevelFormat.SINGLETON:  # COO: one level-0 position per entry
        root[1] = n
        c0 = _xp.expand_segments(xp, counts, n, coo_dtype)
        return [root, None], [_shift(c0, lo0), _shift(c1, lo1)], values, [n, n]
    if not fmt.levels[0].type.unique:
        return None
    nonempty = xp.flatnonzero(counts)
    P0 = int(nonempty.shape[0])
    root[1] = P0
    crd0 = _shift(nonempty.astype(wdt, copy=False), lo0)
    if f1 is LevelFormat.COMPRESSED:
        ptr1 = xp.concatenate([ptr0[:1], ptr0[1:][nonempty]])
        return [root, ptr1], [crd0, _shift(c1, lo1)], values, [P0, n]
    if f1 in (LevelFormat.DENSE, LevelFormat.RANGE):
        S1 = hi1 - lo1
        _check_padding(fmt, shape, P0 * S1, n, max_padding)
        pdt = _xp.work_dtype(P0 * S1)
        pe = _xp.expand_segments(xp, counts[nonempty], n, pdt) * S1 + c1
        out = xp.zeros(P0 * S1, dtype=values.dtype)
        out[pe] = values
        return [root, None], [crd0, None], out, [P0, P0 * S1]
    return None


def _pointers(xp: ModuleType, parents: Any, P: int, n: int) -> Any:
    """``pos`` of a compressed level: ``P + 1`` pointers from the (non-decreasing) parent
    position of each of its ``n`` positions.  Few positions under many parents (a hypersparse
    dense level above): the run lengths are scattered, so only the pointers cost O(P)."""
    ptr = xp.zeros(P + 1, dtype=np.int64)
    if not n:
        return ptr
    if 8 * n >= P:
        xp.cumsum(xp.bincount(parents, minlength=P), out=ptr[1:])
        return ptr
    starts = xp.flatnonzero(_changes(xp, parents))
    run_end = xp.empty(starts.shape[0], dtype=np.int64)
    run_end[:-1] = starts[1:]
    run_end[-1] = n
    ptr[parents[starts].astype(np.int64) + 1] = run_end - starts
    xp.cumsum(ptr, out=ptr)
    return ptr


def _name(fmt: Format) -> str:
    return fmt.standard_name or fmt.map_text()


def _shift(a: Any, lo: int) -> Any:
    return a + lo if lo else a


def _is_identity(xp: ModuleType, pe: Any, n: int) -> bool:
    return n == 0 or (int(pe[0]) == 0 and int(pe[-1]) == n - 1)  # pe strictly increasing


def _structured(
    xp: ModuleType,
    n_keep: int,
    m: int,
    parent: Any,
    Q: int,
    off: Any,
    values: Any,
    prune: bool,
    fmt: Format,
    shape: tuple[int, ...],
    max_padding: int | None,
) -> tuple[Any, Any, int]:
    """structured[n, m]: per block of m, the n kept offsets ascending (padding: smallest unused)."""
    nent = int(values.shape[0])
    parent = xp.zeros(nent, dtype=np.int64) if parent is None else parent
    if nent:
        worst = int(xp.bincount(parent, minlength=Q).max())
        if worst > n_keep and not prune:
            raise FormatError(
                f"[structured-overflow] a block of {m} holds {worst} nonzeros but "
                f"structured[{n_keep}, {m}] keeps {n_keep}; pass prune=True to keep the "
                f"{n_keep} largest magnitudes of each block",
                rule="structured-overflow",
            )
    _check_padding(fmt, shape, Q * n_keep, min(nent, Q * n_keep), max_padding)
    blk = xp.zeros((Q, m), dtype=values.dtype)
    score = xp.full((Q, m), -1.0)
    nan_blk: Any = None
    if nent:
        blk[parent, off] = values
        # a NaN is the largest magnitude (then inf): a stored NaN never loses its slot to
        # padding (a NaN score would sort after it)
        nan = xp.isnan(values)
        score[parent, off] = xp.where(nan, np.inf, xp.abs(values))
        if bool(nan.any()):
            nan_blk = xp.zeros((Q, m), dtype=bool)
            nan_blk[parent, off] = nan
    # used offsets first (NaN, then largest magnitude first), then unused ones ascending
    order = _xp.argsort_stable(xp, -score, axis=1)
    if nan_blk is not None:  # NaN before inf: a second stable pass by "is NaN"
        then = _xp.argsort_stable(xp, ~xp.take_along_axis(nan_blk, order, axis=1), axis=1)
        order = xp.take_along_axis(order, then, axis=1)
    sel = order[:, :n_keep]
    sel = xp.sort(sel, axis=1)
    vals = xp.take_along_axis(blk, sel, axis=1).reshape(-1)
    return sel.reshape(-1), vals, Q * n_keep


def _batchify(
    xp: ModuleType,
    fmt: Format,
    shape: tuple[int, ...],
    nb: int,
    pos: list[Any],
    crd: list[Any],
    values: Any,
    itype: np.dtype,
) -> tuple[list[Any], list[Any], Any]:
    """Flat buffers -> ``(B, cap)`` buffers, one row per batch member (positions local)."""
    bounds = fmt.lvl_bounds(shape)
    extents = [hi - lo for lo, hi in bounds]
    B = int(np.prod(extents[:nb], dtype=np.int64))
    cnt = xp.ones(B, dtype=np.int64)
    start = xp.arange(B, dtype=np.int64)
    out_pos: list[Any] = [None] * fmt.nlevels
    out_crd: list[Any] = [None] * fmt.nlevels
    cap_prev = 1
    for k in range(nb, fmt.nlevels):
        f = fmt.levels[k].format
        if f in (LevelFormat.DENSE, LevelFormat.RANGE):
            S = extents[k]
            new_cnt, new_start, cap = cnt * S, start * S, cap_prev * S
        elif f is LevelFormat.SINGLETON:
            new_cnt, new_start, cap = cnt, start, cap_prev
        else:
            ptr = pos[k] if f is LevelFormat.COMPRESSED else _ptr_of_loose(xp, pos[k])
            # positions of member t: from ptr at its first parent to ptr at its end
            first_parent = start
            end_parent = start + cnt
            lo = ptr[first_parent].astype(np.int64)
            hi = ptr[end_parent].astype(np.int64)
            new_cnt, new_start = hi - lo, lo
            cap = int(new_cnt.max()) if B else 0
            # pos rows: local pointers, padded with the member's last value
            q = xp.minimum(xp.arange(cap_prev + 1, dtype=np.int64)[None, :], cnt[:, None])
            rows = ptr[(start[:, None] + q)].astype(np.int64) - new_start[:, None]
            if f is LevelFormat.COMPRESSED:
                out_pos[k] = rows.astype(itype)
            else:
                lohi = xp.empty((B, 2 * cap_prev), dtype=itype)
                lohi[:, 0::2] = rows[:, :-1]
                lohi[:, 1::2] = rows[:, 1:]
                out_pos[k] = lohi
        if crd[k] is not None:
            out_crd[k] = _rows(xp, crd[k], new_cnt, new_start, cap, B)
        cnt, start, cap_prev = new_cnt, new_start, cap
    vals = _rows(xp, values, cnt, start, cap_prev, B)
    return out_pos, out_crd, vals


def _ptr_of_loose(xp: ModuleType, lohi: Any) -> Any:
    ptr = xp.empty(lohi.shape[0] // 2 + 1, dtype=lohi.dtype)
    ptr[:-1] = lohi[0::2]
    ptr[-1] = lohi[-1] if lohi.shape[0] else 0
    return ptr


def _rows(xp: ModuleType, flat: Any, cnt: Any, start: Any, cap: int, B: int) -> Any:
    """Scatter member ``t``'s contiguous flat range into row ``t`` of a ``(B, cap)`` array."""
    out = xp.zeros((B, cap), dtype=flat.dtype)
    total = int(flat.shape[0])
    if total:
        t = _xp.expand_segments(xp, cnt, total)
        local = xp.arange(total, dtype=np.int64) - start[t]
        out[t, local] = flat
    return out
