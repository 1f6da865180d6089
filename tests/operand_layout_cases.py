"""Operand views for the layout tests, shared by the CPU file and the GPU file: each view holds
the given values in another memory layout (strided, reversed, offset, Fortran order), written
once against an array namespace ``xp`` (NumPy or CuPy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

LOOSE = "(i, j) -> (i : dense, j : loose_compressed)"
DCSR_CUSTOM = "(i, j) -> (i : compressed, j : compressed)"
GAP = np.nan  # what lies between the elements of a strided view: read, it shows up as NaN

VECTOR_VIEWS = ["contiguous", "column", "step2", "reversed", "offset"]
MATRIX_VIEWS = ["C", "F", "transposed", "rows2", "cols2", "reversed", "offset"]


def vector_view(v: np.ndarray, how: str, xp: Any = np) -> Any:
    """A view (in ``xp``'s memory) whose values equal ``v`` but whose layout is ``how``."""
    n = v.shape[0]
    g = xp.asarray(v)
    if how == "contiguous":
        return g.copy()
    if how == "column":  # X[:, 0]
        buf = xp.full((n, 3), GAP, dtype=g.dtype)
        buf[:, 0] = g
        return buf[:, 0]
    if how == "step2":  # x[::2]
        buf = xp.full(2 * n, GAP, dtype=g.dtype)
        buf[::2] = g
        return buf[::2]
    if how == "reversed":  # x[::-1]
        return g[::-1].copy()[::-1]
    if how == "offset":  # a contiguous view that starts inside its buffer
        buf = xp.full(n + 3, GAP, dtype=g.dtype)
        buf[3:] = g
        return buf[3:]
    raise AssertionError(how)


def matrix_view(b: np.ndarray, how: str, xp: Any = np) -> Any:
    """A view (in ``xp``'s memory) whose values equal the 2-D ``b`` but whose layout is ``how``."""
    n, k = b.shape
    g = xp.asarray(b)
    if how == "C":
        return xp.ascontiguousarray(g).copy()
    if how == "F":
        return xp.asfortranarray(g)
    if how == "transposed":  # B = Y.T of a C-order Y: Fortran order as a view
        return g.T.copy().T
    if how == "rows2":  # B[::2]
        buf = xp.full((2 * n, k), GAP, dtype=g.dtype)
        buf[::2] = g
        return buf[::2]
    if how == "cols2":  # B[:, ::2]
        buf = xp.full((n, 2 * k), GAP, dtype=g.dtype)
        buf[:, ::2] = g
        return buf[:, ::2]
    if how == "reversed":
        return g[::-1, ::-1].copy()[::-1, ::-1]
    if how == "offset":  # an inner block of a larger array
        buf = xp.full((n + 1, k + 2), GAP, dtype=g.dtype)
        buf[1:, 2:] = g
        return buf[1:, 2:]
    raise AssertionError(how)


def special_vectors(n: int) -> list[np.ndarray]:
    """1..n with one entry replaced by inf, -inf or NaN, at every position."""
    out = []
    for pos in range(n):
        for v in (np.inf, -np.inf, np.nan):
            x = np.arange(1.0, n + 1)
            x[pos] = v
            out.append(x)
    return out


@st.composite
def layout_case(draw: Callable[..., Any]) -> dict[str, Any]:
    """A 6 x 6 matrix, x (1-D or 2-D, maybe with inf/NaN), C, the views and the call style."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (6, 6)).astype(float) * (rng.random((6, 6)) < draw(st.sampled_from([0.2, 0.5])))
    k = draw(st.sampled_from([None, 1, 3]))
    shape = (6,) if k is None else (6, k)
    x0 = rng.integers(-4, 5, shape).astype(float)
    for _ in range(draw(st.integers(0, 2))):
        idx = tuple(int(rng.integers(0, s)) for s in shape)
        x0[idx] = draw(st.sampled_from([np.inf, -np.inf, np.nan]))
    views = VECTOR_VIEWS if k is None else MATRIX_VIEWS
    style = draw(st.sampled_from(["matmul", "operator", "stateful"]))
    fused = style != "operator" and draw(st.booleans())
    return {
        "a": a,
        "x0": x0,
        "xview": draw(st.sampled_from(views)),
        "cview": draw(st.sampled_from(views)),
        "style": style,
        "alpha": draw(st.sampled_from([1.0, -0.5, 2.0])) if fused else 1.0,
        "beta": draw(st.sampled_from([0.0, 1.0, -3.0])) if fused else 0.0,
        "c0": rng.integers(-4, 5, shape).astype(float),
    }
