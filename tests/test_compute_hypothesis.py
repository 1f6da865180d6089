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
    indices: tuple[str, ...]
    values: np.ndarray  # dense values
    mask: np.ndarray  # stored slots (all True for a dense operand)
    value: Any  # what is passed to ust
    label: str


@dataclass
class Problem:
    text: str
    out: tuple[str, ...]
    terms: list[tuple[Any, list[str]]]  # (coefficient, operand names)
    ops: dict[str, Operand]
    scalars: dict[str, Any]
    ext: dict[str, int]
    dtype: Any
    out_format: Any

    def kwargs(self) -> dict[str, Any]:
        return {**{n: o.value for n, o in self.ops.items()}, **self.scalars}

    def describe(self) -> str:
        return (
            self.text
            + "  "
            + ", ".join(f"{n}{o.indices}:{o.label}" for n, o in self.ops.items())
            + f" out_format={self.out_format}"
        )


def make_operand(
    seed: int, shape: tuple[int, ...], dtype: Any, fmt: str | None, density: float, with_zeros: bool
) -> tuple[np.ndarray, np.ndarray, Any]:
    rng = np.random.default_rng(seed)
    vals = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
    vals = (
        vals.astype(dtype)
        if np.dtype(dtype).kind in "iu"
        else (vals + rng.random(shape).round(3)).astype(dtype)
    )
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
        coo = sp.coo_array((vals[r, c], (r, c)), shape=shape)
        t = ust.asarray(coo)
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
    dtype = draw(st.sampled_from([np.float64, np.int64]))
    seed = draw(st.integers(0, 2**16))
    ops: dict[str, Operand] = {}
    terms: list[tuple[Any, list[str]]] = []
    scalars: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        names = []
        for _ in range(draw(st.integers(1, 3))):
            if ops and draw(st.integers(0, 4)) == 0:  # reuse an operand (maybe with other indices)
                name = draw(st.sampled_from(sorted(ops)))
                names.append(name)
                continue
            rank = draw(st.integers(1, min(3, n_idx)))
            ids = tuple(draw(st.permutations(idx))[:rank])
            shape = tuple(ext[i] for i in ids)
            fmts = [f for f in FORMATS[rank] if blocks_fit(f, shape)]
            if (
                not plus
            ):  # DIA's padding under a semiring: see test_compute.py::test_padding_slots_are_entries
                fmts = [f for f in fmts if f != "DIA"]
            fmt = draw(st.one_of(st.none(), st.sampled_from(fmts)))
            density = draw(st.sampled_from([0.0, 0.3, 0.7]))
            name = f"T{len(ops)}"
            vals, mask, value = make_operand(seed + len(ops), shape, dtype, fmt, density, draw(st.booleans()))
            ops[name] = Operand(ids, vals, mask, value, fmt or "dense")
            names.append(name)
        coeff: Any = 1
        if plus:
            coeff = draw(st.sampled_from([1, 1, -1, 2, "alpha"]))
            if coeff == "alpha":
                scalars["alpha"] = 3 if dtype == np.int64 else 0.5
        terms.append((coeff, names))
    used = list(dict.fromkeys(i for _, names in terms for n in names for i in ops[n].indices))
    k = draw(st.integers(0, min(3, len(used))))
    out = tuple(draw(st.permutations(used))[:k])
    # the text: a reused operand is read with its own indices
    parts = []
    for coeff, names in terms:
        body = " * ".join(f"{n}({', '.join(ops[n].indices)})" for n in names)
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


def expand(op: Operand, grid: tuple[str, ...], ext: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``op``'s values and mask on ``grid`` (its indices transposed into place, broadcast elsewhere)."""
    perm = [op.indices.index(i) for i in grid if i in op.indices]
    v, m = np.transpose(op.values, perm), np.transpose(op.mask, perm)
    shape = [ext[i] if i in op.indices else 1 for i in grid]
    return np.broadcast_to(v.reshape(shape), [ext[i] for i in grid]), np.broadcast_to(
        m.reshape(shape), [ext[i] for i in grid]
    )


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
    for coeff, names in p.terms:
        own = list(dict.fromkeys(i for n in names for i in p.ops[n].indices))
        grid = tuple(p.out) + tuple(i for i in own if i not in p.out)
        gshape = [p.ext[i] for i in grid]
        val = np.full(gshape, 1 if semiring == "plus_times" else 0, dtype=dt)
        mask = np.ones(gshape, bool)
        for n in names:
            v, m = expand(p.ops[n], grid, p.ext)
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
    try:
        check(got, reference(p, "plus_times"))
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
