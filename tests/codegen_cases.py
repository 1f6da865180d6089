"""Test inputs for the code generator: a reference packer for any Format, and the format table.

``pack(dense, fmt)`` stores a small dense array in any format following docs/storage.md,
independently of ``ust.asarray`` (it is a second, deliberately naive implementation: plain
Python over the nonzeros, fine for the tiny arrays of the tests).  Slots that a kernel must
never read as data -- DIA padding outside the matrix, holes of loose_compressed levels --
hold NaN, so a kernel that reads them produces NaN and fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ust.formats as F
from tests.support import BLOCKED_2D, DENSE_2D, SPARSE_2D
from ust.formats.model import Format, LevelFormat

# (name, format, 2-D shape or None for the default, density) -- the standard formats first
STANDARD_2D = [*SPARSE_2D, *BLOCKED_2D, "NM[2,4]", *DENSE_2D]
USER_2D = {
    "COO-dups": "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))",
    "CSR-blocked-cols": "(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)",
    "loose-CSR": "(i, j) -> (i : dense, j : loose_compressed)",
    "DBSR": "(i, j) -> (i floordiv 2 : compressed, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
    "BSR-colmajor-blocks": "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, j mod 2 : dense, i mod 2 : dense)",
    "anti-DIA": "(i, j) -> (i + j : compressed, i : range)",
    "COO-colmajor": "(i, j) -> (j : compressed(nonunique), i : singleton)",
}
STANDARD_3D = ["CSF", "COO3", "Dense3"]
USER_3D = {
    "mode-CSF": "(i, j, k) -> (i : dense, j : compressed, k : compressed)",
    "COO3-loose": "(i, j, k) -> (i : dense, j : loose_compressed(nonunique), k : singleton)",
}
BATCHED = ["BatchedCSR"]
USER_BATCHED = {
    "BatchedCOO": "(b, i, j) -> (b : batch, i : compressed(nonunique), j : singleton)",
    "BatchedDIA": "(b, i, j) -> (b : batch, j - i : compressed, j : range)",
}


def get_format(name: str) -> Format:
    for table in (USER_2D, USER_3D, USER_BATCHED):
        if name in table:
            return F.format(table[name])
    return F.get(name)


ALL_2D = STANDARD_2D + list(USER_2D)
ALL_3D = STANDARD_3D + list(USER_3D)
ALL_BATCHED = BATCHED + list(USER_BATCHED)


@dataclass
class Packed:
    """A minimal tensor: exactly the protocol the kernels read (see docs/storage.md)."""

    format: Format
    shape: tuple[int, ...]
    values: Any
    index_dtype: Any
    _pos: dict[int, Any] = field(default_factory=dict)
    _crd: dict[int, Any] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def pos(self, k: int) -> Any:
        return self._pos.get(k)

    def crd(self, k: int) -> Any:
        return self._crd.get(k)

    def to(self, xp: Any) -> Packed:
        """A copy with every buffer moved to the array module ``xp`` (e.g. CuPy)."""
        return Packed(
            self.format,
            self.shape,
            xp.asarray(self.values),
            self.index_dtype,
            {k: xp.asarray(v) for k, v in self._pos.items()},
            {k: xp.asarray(v) for k, v in self._crd.items()},
        )


def _build(
    fmt: Format,
    shape: tuple[int, ...],
    entries: list[tuple[tuple[int, ...], Any]],
    first: int,
    loose_gap: bool,
):
    """Buffers of levels ``first..`` for entries (dims, value) under one root position."""
    bounds = fmt.lvl_bounds(shape)
    lvl = [(fmt.dim_to_lvl(d), v) for d, v in entries]
    nodes: list[tuple[tuple[int, ...], list[int] | None]] = [
        ((), list(range(len(lvl))))
    ]  # (prefix, entry ids | None=hole)
    pos: dict[int, list[int]] = {}
    crd: dict[int, list[int]] = {}
    for k in range(first, fmt.nlevels):
        lt = fmt.levels[k].type
        lo, hi = bounds[k]
        new: list[tuple[tuple[int, ...], list[int] | None]] = []
        if lt.format in (LevelFormat.DENSE, LevelFormat.RANGE, LevelFormat.BATCH):
            for pre, ids in nodes:
                for c in range(lo, hi):
                    sub = None if ids is None else [e for e in ids if lvl[e][0][k] == c]
                    new.append(((*pre, c), sub))
        elif lt.format in (LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED):
            p, cr = [0] if lt.format is LevelFormat.COMPRESSED else [], []
            for pre, ids in nodes:
                start = len(cr)
                children: list[tuple[int, list[int]]] = []
                if ids:
                    if lt.unique:
                        for c in sorted({lvl[e][0][k] for e in ids}):
                            children.append((c, [e for e in ids if lvl[e][0][k] == c]))
                    else:
                        order = ids if not lt.ordered else sorted(ids, key=lambda e: lvl[e][0][k:])
                        children = [(lvl[e][0][k], [e]) for e in order]
                for c, sub in children:
                    cr.append(c)
                    new.append(((*pre, c), sub))
                if lt.format is LevelFormat.COMPRESSED:
                    p.append(len(cr))
                else:
                    p += [start, len(cr)]
                    if loose_gap:  # a hole no segment covers: its coordinate and value are junk
                        cr.append(lo)
                        new.append(((*pre, lo), None))
            pos[k], crd[k] = p, cr
        elif lt.format is LevelFormat.SINGLETON:
            cr = []
            for pre, ids in nodes:
                c = lvl[ids[0]][0][k] if ids else lo
                cr.append(c)
                new.append(((*pre, c), ids))
            crd[k] = cr
        elif lt.format is LevelFormat.STRUCTURED:
            cr = []
            for pre, ids in nodes:
                used = sorted({lvl[e][0][k] for e in ids or []})
                assert len(used) <= lt.n, "too many nonzeros in a structured block"
                pad = [c for c in range(lt.m) if c not in used][: lt.n - len(used)]
                for c in sorted(used + pad):
                    cr.append(c)
                    new.append(((*pre, c), [e for e in ids or [] if lvl[e][0][k] == c]))
            crd[k] = cr
        nodes = new
    vals = []
    for _pre, ids in nodes:
        if ids is None:
            vals.append(np.nan)
        elif ids:
            vals.append(sum(lvl[e][1] for e in ids) if len(ids) > 1 and fmt.is_unique else lvl[ids[0]][1])
        else:
            vals.append(None)  # a stored slot with no entry: zero inside the bounds, NaN (padding) outside
    out_vals = []
    for (pre, _ids), v in zip(nodes, vals, strict=True):
        if v is None:
            full = pre
            if first:
                full = (0,) * first + pre  # batch coordinates do not matter for the bounds check
            dims = fmt.lvl_to_dim(full)
            inside = all(0 <= d < s for d, s in zip(dims, shape, strict=True))
            out_vals.append(0.0 if inside else np.nan)
        else:
            out_vals.append(v)
    return pos, crd, out_vals


def pack(
    dense: np.ndarray,
    fmt: Format,
    *,
    index_dtype: str = "int32",
    entries: list[tuple[tuple[int, ...], Any]] | None = None,
    loose_gap: bool = True,
) -> Packed:
    """Store ``dense`` in ``fmt`` (or explicit ``entries`` (dims, value), duplicates allowed)."""
    shape = tuple(int(s) for s in dense.shape)
    nb = fmt.nbatch
    if entries is None:
        entries = [(tuple(int(c) for c in ix), dense[tuple(ix)]) for ix in np.argwhere(dense != 0)]
    idt = np.dtype(index_dtype)
    if nb == 0:
        pos, crd, vals = _build(fmt, shape, entries, 0, loose_gap)
        return Packed(
            fmt,
            shape,
            np.array(vals, dtype=dense.dtype),
            idt,
            {k: np.array(v, dtype=idt) for k, v in pos.items()},
            {k: np.array(v, dtype=idt) for k, v in crd.items()},
        )
    bdims = [fmt.levels[k].expr.dims[0] for k in range(nb)]
    members = list(np.ndindex(*[shape[d] for d in bdims]))
    per = []
    for m in members:
        sub = [(d, v) for d, v in entries if tuple(d[b] for b in bdims) == m]
        per.append(_build(fmt, shape, sub, nb, loose_gap))

    def stack(parts: list[list[Any]], dtype: Any, fill_last: bool) -> np.ndarray:
        cap = max([len(p) for p in parts] + [0])
        out = np.zeros((len(parts), cap), dtype=dtype)
        for t, p in enumerate(parts):
            out[t, : len(p)] = p
            if fill_last and p and len(p) < cap:
                out[t, len(p) :] = p[-1]
            elif not fill_last and len(p) < cap and np.dtype(dtype).kind in "fc":
                out[t, len(p) :] = np.nan  # capacity padding: never read
        return out

    pos = {k: stack([p[0][k] for p in per], idt, True) for k in per[0][0]} if per else {}
    crd = {k: stack([p[1][k] for p in per], idt, False) for k in per[0][1]} if per else {}
    vals = stack([p[2] for p in per], dense.dtype, False)
    return Packed(fmt, shape, vals, idt, pos, crd)


def random_dense(
    shape: tuple[int, ...], dtype: str, rng: np.random.Generator, density: float = 0.35
) -> np.ndarray:
    """A random array with an empty first row, an empty last column, and some exact zeros."""
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    a = np.where(rng.random(shape) < density, a, 0).astype(dtype)
    if a.ndim >= 2 and a.size:
        a[..., 0, :] = 0  # an empty row (per batch member / per slice)
        a[..., :, -1] = 0  # an empty column
    return a


def prune_nm(a: np.ndarray, n: int, m: int) -> np.ndarray:
    """Keep at most ``n`` nonzeros in every block of ``m`` along the last axis."""
    a = a.copy()
    blocks = a.reshape(*a.shape[:-1], a.shape[-1] // m, m)
    for ix in np.ndindex(*blocks.shape[:-1]):
        nz = np.flatnonzero(blocks[ix])
        blocks[ix][nz[n:]] = 0
    return a


def default_shape(name: str) -> tuple[int, ...]:
    if name in ALL_3D:
        return (4, 6, 8)
    if name in ALL_BATCHED:
        return (3, 6, 8)
    return (6, 12)


def make_case(
    name: str, dtype: str, shape: tuple[int, ...] | None = None, seed: int = 0, index_dtype: str = "int32"
):
    """(packed tensor, dense reference) for format ``name``."""
    fmt = get_format(name)
    shape = shape or default_shape(name)
    rng = np.random.default_rng(seed)
    dense = random_dense(shape, dtype, rng)
    std = fmt.standard_name or ""
    if std.startswith("NM"):
        dense = prune_nm(dense, 2, 4)
    if name == "COO-dups" and dense.size:
        nz = [(tuple(int(c) for c in ix), dense[tuple(ix)]) for ix in np.argwhere(dense != 0)]
        entries = []
        for d, v in nz:  # split every value into two duplicates, then shuffle
            entries += [(d, v * 0.25), (d, v * 0.75)]
        order = rng.permutation(len(entries))
        entries = [entries[i] for i in order]
        return pack(dense, fmt, entries=entries, index_dtype=index_dtype), dense
    return pack(dense, fmt, index_dtype=index_dtype), dense


def reference(
    dense: np.ndarray, x: np.ndarray, c: np.ndarray | None, alpha: complex, beta: complex, batched: bool
) -> np.ndarray:
    """alpha * A @ x + beta * c from the dense array, in the widest precision."""
    d = dense.astype(np.complex128 if np.iscomplexobj(dense) or np.iscomplexobj(x) else np.float64)
    if batched:
        y = np.einsum("bij,bj...->bi...", d, x)
    else:
        y = np.tensordot(d, x, axes=([d.ndim - 1], [0]))
    y = alpha * y
    if c is not None and beta != 0:
        y = y + beta * c
    return y


# ----------------------------------------------------------------------------- op cases

#: (op, layout, ncols) variants every format is run with
OP_VARIANTS = [("mv", "row", None), ("mm", "row", 3), ("mm", "col", 3)]
DTYPES = ["float64", "float32", "complex128"]
TOLERANCE = {"float64": 1e-12, "complex128": 1e-12, "float32": 2e-5, "complex64": 2e-5}


def is_batched(name: str) -> bool:
    return name in ALL_BATCHED


def scalars(dtype: str) -> tuple[complex, complex]:
    """(alpha, beta) exercising both: complex ones for complex dtypes."""
    if np.dtype(dtype).kind == "c":
        return 1.5 - 0.5j, -0.75 + 0.25j
    return 1.5, -0.75


def inputs(
    name: str,
    dtype: str,
    op: str,
    layout: str,
    ncols: int | None,
    *,
    shape: tuple[int, ...] | None = None,
    seed: int = 0,
):
    """(A packed, dense, x, c) for one case; x and c laid out as ``layout`` asks."""
    a, dense = make_case(name, dtype, shape=shape, seed=seed)
    rng = np.random.default_rng(seed + 1)
    lead = dense.shape[:1] if is_batched(name) else ()
    kdim = dense.shape[-1]
    xshape = (*lead, kdim) if op == "mv" else (*lead, kdim, ncols)
    cshape = dense.shape[:-1] if op == "mv" else (*dense.shape[:-1], ncols)

    def rand(s: tuple[int, ...]) -> np.ndarray:
        v = rng.standard_normal(s)
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(s)
        v = v.astype(dtype)
        if layout == "col" and v.ndim >= 2:
            v = np.ascontiguousarray(v.swapaxes(-1, -2)).swapaxes(-1, -2)
        return v

    return a, dense, rand(xshape), rand(cshape)


def check(y: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    assert y.shape == ref.shape
    assert y.dtype == np.dtype(dtype)
    tol = TOLERANCE[dtype]
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * scale)


def requests(
    names: list[str], dtypes: list[str], variants=OP_VARIANTS, order: str = "auto", itype: str = "int32"
):
    """c_kernel request tuples for a table of cases (for one pre-build)."""
    return [
        (get_format(n), op, layout, order, dt, "int32", itype)
        for n in names
        for dt in dtypes
        for op, layout, _ in variants
    ]


def gpu_suite() -> list[tuple[str, str, str, str, str, str, int, str]]:
    """Every (format, op, layout, dtype, index dtype, itype, group, order) the GPU tests run."""
    out = []
    for name in ALL_2D + ALL_3D + ALL_BATCHED:
        for op, layout, _ in OP_VARIANTS:
            for dt in DTYPES:
                if dt != "float64" and layout == "col":
                    continue
                for g in (1, 4, 32) if dt == "float64" else (1,):
                    out.append((name, op, layout, dt, "int32", "int32", g, "auto"))
        out.append((name, "mv", "row", "float64", "int64", "int64", 1, "auto"))
    for name in ("DIA", "DIAI", "DenseColMajor", "CCOL"):
        out.append((name, "mv", "row", "float64", "int32", "int32", 1, "storage"))
    from ust.codegen.schedule import cuda_order  # the GPU's default where it differs from "auto"

    for name in ALL_2D + ALL_3D + ALL_BATCHED:
        for op, layout, _ in OP_VARIANTS:
            order = cuda_order(get_format(name), op)
            if order != plan_order(name, op):
                for g in (1, 4):
                    out.append((name, op, layout, "float64", "int32", "int32", g, order))
    return out


def plan_order(name: str, op: str) -> str:
    from ust.codegen.lower import plan

    return plan(get_format(name), op, "auto").order
