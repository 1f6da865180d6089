"""Random index expressions for ``ust.compute`` (issue 17), against a NumPy reference.

Expressions of 1-3 terms of 1-3 factors over 1-4 index variables, each factor a random dense
array or a sparse operand in a random standard or user format (explicit zeros stored in the 2-D
ones), random output indices (a subset in random order, or none), random coefficients (literals,
a named scalar, a minus) and a random ``out_format``.  The reference evaluates each term on the
grid of its own and the output's indices with NumPy, reduces the term's other indices, and
broadcasts along the output indices it lacks; min_plus / max_plus use the same reference with
"every stored slot is an entry, everything else the additive identity".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ust
from tests.test_compute import assert_no_duplicates
from ust.convert.unpack import unpack

pytestmark = pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")

LETTERS = "ijkl"
FORMATS = {
    1: ["SparseVector", "(i) -> (i : dense)"],
    2: [
        "CSR",
        "CSC",
        "COO",
        "DCSR",
        "DCSC",
        "CROW",
        "DIA",
        "BSR",
        "(i, j) -> (j : dense, i : compressed)",
        "(i, j) -> (i : dense, j : loose_compressed)",
        "(i, j) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : dense)",
    ],
    3: [
        "COO3",
        "CSF",
        "(i, j, k) -> (k : dense, i : compressed, j : compressed)",
        "(i, j, k) -> (j : compressed, k : dense, i : compressed)",
    ],
}
OUT_FORMATS = {
    1: ["SparseVector"],
    2: ["CSC", "COO", "(i, j) -> (i : compressed, j : compressed)"],
    3: ["CSF"],
}


def blocks_fit(fmt: str, shape: tuple[int, ...]) -> bool:
    """Whether the blocks of ``fmt`` (BSR 2x2, rows in pairs) divide ``shape``."""
    if fmt == "BSR":
        return all(s % 2 == 0 for s in shape)
    if "floordiv 2" in fmt:
        return shape[0] % 2 == 0
    return True


@dataclass
class Operand:
    shape: tuple[int, ...]
    values: np.ndarray  # dense values
    mask: np.ndarray  # stored slots (all True for a dense operand)
    value: Any  # what is passed to ust
    label: str


Factor = tuple[str, tuple[str, ...]]  # an operand name and the indices it is read with


@dataclass
class Problem:
    text: str
    out: tuple[str, ...]
    terms: list[tuple[Any, list[Factor]]]  # (coefficient, factors)
    ops: dict[str, Operand]
    scalars: dict[str, Any]
    ext: dict[str, int]
    dtype: Any
    out_format: Any

    def kwargs(self) -> dict[str, Any]:
        return {**{n: o.value for n, o in self.ops.items()}, **self.scalars}

    def describe(self) -> str:
        ops = ", ".join(f"{n}{o.shape}:{o.label}" for n, o in self.ops.items())
        return f"{self.text}  {ops} out_format={self.out_format} dtype={np.dtype(self.dtype)}"


def make_operand(
    seed: int,
    shape: tuple[int, ...],
    dtype: Any,
    fmt: str | None,
    density: float,
    with_zeros: bool,
    index_dtype: Any = None,
    duplicates: bool = False,
) -> tuple[np.ndarray, np.ndarray, Any]:
    rng = np.random.default_rng(seed)
    vals = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
    if np.dtype(dtype).kind in "iu":
        vals = vals.astype(dtype)
    elif np.dtype(dtype).kind == "c":
        vals = (vals + 1j * rng.integers(-3, 4, size=shape)).astype(dtype)
    else:
        vals = (vals + rng.random(shape).round(3)).astype(dtype)
    if fmt is None:
        return vals, np.ones(shape, bool), vals
    mask = rng.random(shape) < density
    if len(shape) == 2 and with_zeros and mask.any():
        # one stored slot holds an explicit zero
        r, c = np.nonzero(mask)
        vals[r[0], c[0]] = 0
    vals = np.where(mask, vals, 0).astype(dtype)
    if len(shape) == 2:
        r, c = np.nonzero(mask)
        v = vals[r, c]
        if duplicates and r.size:  # a non-canonical COO: the first entry split in two, appended last
            half = v[:1] // 2 if np.dtype(dtype).kind in "iu" else v[:1] / 2
            r, c, v = np.append(r, r[0]), np.append(c, c[0]), np.concatenate([v, half])
            v[0] = v[0] - half[0]
            t = ust.asarray(sp.coo_array((v, (r, c)), shape=shape), index_dtype=index_dtype)
            assert np.array_equal(np.asarray(t.todense()), vals)
            mask = np.zeros(shape, bool)
            mask[r, c] = True
            return vals, mask, t
        coo = sp.coo_array((v, (r, c)), shape=shape)
        t = ust.asarray(coo, index_dtype=index_dtype) if index_dtype is not None else ust.asarray(coo)
        t = t.convert("bsr", blocksize=(2, 2)) if fmt == "BSR" else t.convert(fmt)
    else:
        t = ust.asarray(vals, format=fmt)
    # the stored slots (explicit zeros, dense levels and block padding included): the entries
    ent = unpack(t, keep_zeros=True)
    mask = np.zeros(shape, bool)
    mask[tuple(np.asarray(d) for d in ent.dims())] = True
    assert np.array_equal(np.asarray(t.todense()), vals)
    return vals, mask, t


@st.composite
def problems(draw: Any, semiring: str = "plus_times") -> Problem:
    plus = semiring == "plus_times"
    n_idx = draw(st.integers(1, 4))
    idx = LETTERS[:n_idx]
    ext = {i: draw(st.integers(1, 4)) for i in idx}
    dtypes = [np.float64, np.int64, np.complex128] if plus else [np.float64, np.int64]
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**16))
    ops: dict[str, Operand] = {}
    terms: list[tuple[Any, list[Factor]]] = []
    scalars: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        factors: list[Factor] = []
        for _ in range(draw(st.integers(1, 3))):
            if ops and draw(st.integers(0, 4)) == 0:
                # reuse an operand, read with any indices of fitting extents (maybe a diagonal)
                name = draw(st.sampled_from(sorted(ops)))
                shape = ops[name].shape
                ids = tuple(draw(st.sampled_from([i for i in idx if ext[i] == n] or [None])) for n in shape)
                if None not in ids:
                    factors.append((name, ids))  # type: ignore[arg-type]
                    continue
            rank = draw(st.integers(1, min(3, n_idx)))
            ids = tuple(draw(st.permutations(idx))[:rank])
            if rank == 2 and draw(st.integers(0, 7)) == 0:
                ids = (ids[0], ids[0])  # a diagonal: A(i, i)
            shape = tuple(ext[i] for i in ids)
            fmts = [f for f in FORMATS[rank] if blocks_fit(f, shape)]
            if not plus:  # DIA's padding: see test_compute.py::test_padding_slots_are_entries
                fmts = [f for f in fmts if f != "DIA"]
            fmt = draw(st.one_of(st.none(), st.sampled_from(fmts)))
            density = draw(st.sampled_from([0.0, 0.3, 0.7]))
            index_dtype = draw(st.sampled_from([None, np.int32, np.int64])) if rank == 2 else None
            duplicates = plus and rank == 2 and fmt == "COO" and draw(st.integers(0, 3)) == 0
            name = f"T{len(ops)}"
            vals, mask, value = make_operand(
                seed + len(ops), shape, dtype, fmt, density, draw(st.booleans()), index_dtype, duplicates
            )
            label = (fmt or "dense") + (" +duplicates" if duplicates else "")
            ops[name] = Operand(shape, vals, mask, value, label)
            factors.append((name, ids))
        coeff: Any = 1
        if plus:
            coeff = draw(st.sampled_from([1, 1, -1, 2, "alpha"]))
            if coeff == "alpha":
                scalars["alpha"] = 3 if dtype == np.int64 else 0.5
        terms.append((coeff, factors))
    used = list(dict.fromkeys(i for _, fs in terms for _, ids in fs for i in ids))
    k = draw(st.integers(0, min(3, len(used))))
    out = tuple(draw(st.permutations(used))[:k])
    parts = []
    for coeff, fs in terms:
        body = " * ".join(f"{n}({', '.join(ids)})" for n, ids in fs)
        if coeff == 1:
            parts.append(("+", body))
        elif coeff == -1:
            parts.append(("-", body))
        else:
            parts.append(("+", f"{coeff} * {body}"))
    rhs = ""
    for n, (sign, body) in enumerate(parts):
        rhs += (f" {sign} " if n else ("-" if sign == "-" else "")) + body
    lhs = f"C({', '.join(out)})" if out else "C"
    out_format = None
    if out and draw(st.integers(0, 3)) == 0:
        out_format = draw(st.sampled_from(["dense", *OUT_FORMATS.get(len(out), [])]))
    return Problem(f"{lhs} = {rhs}", out, terms, ops, scalars, ext, dtype, out_format)


def expand(
    op: Operand, ids: tuple[str, ...], grid: tuple[str, ...], ext: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """``op`` read as ``op(ids)`` on ``grid``: a repeated index takes the diagonal, the indices
    are transposed into place and broadcast along the grid's others."""
    uniq = tuple(dict.fromkeys(ids))
    letters = {i: chr(ord("a") + n) for n, i in enumerate(uniq)}
    sub = "".join(letters[i] for i in ids) + "->" + "".join(letters[i] for i in uniq)
    v = np.einsum(sub, op.values)
    m = np.einsum(sub, op.mask.astype(np.int8)).astype(bool)
    perm = [uniq.index(i) for i in grid if i in uniq]
    v, m = np.transpose(v, perm), np.transpose(m, perm)
    shape = [ext[i] if i in uniq else 1 for i in grid]
    full = [ext[i] for i in grid]
    return np.broadcast_to(v.reshape(shape), full), np.broadcast_to(m.reshape(shape), full)


def identity(dtype: Any, semiring: str) -> Any:
    """The additive identity (+-inf become the integer limits)."""
    dt = np.dtype(dtype)
    if semiring == "plus_times":
        return dt.type(0)
    big = np.inf if dt.kind == "f" else np.iinfo(dt).max
    small = -np.inf if dt.kind == "f" else np.iinfo(dt).min
    return dt.type(big if semiring == "min_plus" else small)


def reference(p: Problem, semiring: str) -> np.ndarray:
    out_shape = tuple(p.ext[i] for i in p.out)
    dt = np.dtype(p.dtype)
    ident = identity(dt, semiring)
    result = np.full(out_shape, ident, dtype=dt)
    for coeff, factors in p.terms:
        own = list(dict.fromkeys(i for _, ids in factors for i in ids))
        grid = tuple(p.out) + tuple(i for i in own if i not in p.out)
        gshape = [p.ext[i] for i in grid]
        val = np.full(gshape, 1 if semiring == "plus_times" else 0, dtype=dt)
        mask = np.ones(gshape, bool)
        for n, ids in factors:
            v, m = expand(p.ops[n], ids, grid, p.ext)
            val = val * v if semiring == "plus_times" else val + v
            mask = mask & m
        red = tuple(range(len(p.out), len(grid)))
        if semiring == "plus_times":
            c = p.scalars["alpha"] if coeff == "alpha" else coeff
            term = np.where(mask, val, 0).sum(axis=red, dtype=dt) * c
            result = result + term
        else:
            fn = np.min if semiring == "min_plus" else np.max
            masked = np.where(mask, val, ident)
            term = fn(masked, axis=red) if red else masked
            result = np.minimum(result, term) if semiring == "min_plus" else np.maximum(result, term)
    return result.astype(np.result_type(dt, *(type(s) for s in p.scalars.values())))


def check(got: Any, want: np.ndarray) -> None:
    g = np.asarray(got.todense()) if isinstance(got, ust.Tensor) else np.asarray(got)
    assert g.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(g, want)
    else:
        scale = float(np.max(np.abs(want[np.isfinite(want)]))) if np.isfinite(want).any() else 0.0
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12 * scale)


def run(p: Problem, semiring: str) -> Any:
    return ust.compute(
        p.text, out_format=p.out_format, semiring=None if semiring == "plus_times" else semiring, **p.kwargs()
    )


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(problems())
def test_random_expressions(p: Problem) -> None:
    snaps = {
        n: (o.value.buffers() if isinstance(o.value, ust.Tensor) else {"v": o.value})
        for n, o in p.ops.items()
    }
    copies = {n: {k: np.array(a, copy=True) for k, a in s.items()} for n, s in snaps.items()}
    got = run(p, "plus_times")
    want = reference(p, "plus_times")
    try:
        check(got, want)
        assert np.dtype(got.dtype) == want.dtype, (got.dtype, want.dtype)
        if isinstance(got, ust.Tensor):
            assert_no_duplicates(got)
    except AssertionError as exc:
        raise AssertionError(p.describe()) from exc
    if not p.out:
        assert np.ndim(got) == 0
    elif p.out_format == "dense":
        assert isinstance(got, np.ndarray)
    elif p.out_format is not None:
        assert isinstance(got, ust.Tensor) and got.format == ust.format(p.out_format)
    for n, s in snaps.items():  # operands never modified
        assert all(np.array_equal(s[k], copies[n][k]) for k in s)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems("min_plus"), st.sampled_from(["min_plus", "max_plus"]))
def test_random_expressions_min_max_plus(p: Problem, semiring: str) -> None:
    got = run(p, semiring)
    try:
        check(got, reference(p, semiring))
    except AssertionError as exc:
        raise AssertionError(f"{semiring}: {p.describe()}") from exc
    if isinstance(got, ust.Tensor):
        assert got.fill_value == identity(p.dtype, semiring)
