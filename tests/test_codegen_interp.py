"""The reference interpreter runs every lowering against NumPy (the second opinion on the IR).

It executes exactly the IR the C and CUDA emitters translate, with every load and store
bounds-checked, so a lowering that reads padding or past a buffer fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

import ust.formats
from tests.codegen_cases import (
    ALL_2D,
    ALL_3D,
    ALL_BATCHED,
    DTYPES,
    OP_VARIANTS,
    check,
    inputs,
    is_batched,
    reference,
    scalars,
)
from ust.backends.cpu.ckernels import _empty
from ust.backends.generated.launch import prepare
from ust.codegen import interpret
from ust.codegen.lower import lower, plan
from ust.runtime.errors import ShapeError, UnsupportedError

ALL = ALL_2D + ALL_3D + ALL_BATCHED


def run_interp(a, x, c, alpha, beta, order="auto", cols="outer"):
    launch = prepare(a, x, c, alpha=alpha, beta=beta)
    k = lower(
        a.format,
        launch.op,
        layout=launch.layout,
        order=order,
        value_dtype=launch.dtype,
        index_dtype=launch.index_dtype,
        itype=launch.itype(),
        cols=cols,
    )
    y = _empty(launch.out_shape, launch.dtype, launch.layout)
    y[...] = np.nan  # every output slot must be written
    interpret.run(k, launch.args(k, y))
    return y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("op", "layout", "ncols"), OP_VARIANTS)
@pytest.mark.parametrize("name", ALL)
def test_every_format_op_and_dtype(name: str, op: str, layout: str, ncols: int | None, dtype: str) -> None:
    a, dense, x, c = inputs(name, dtype, op, layout, ncols)
    alpha, beta = scalars(dtype)
    y = run_interp(a, x, c, alpha, beta)
    check(y, reference(dense, x, c, alpha, beta, is_batched(name)), dtype)


@pytest.mark.parametrize("cols", ["outer", "inner"])
@pytest.mark.parametrize("order", ["storage", "outer"])
@pytest.mark.parametrize("name", ALL)
def test_every_loop_order_and_column_placement(name: str, order: str, cols: str) -> None:
    a, dense, x, c = inputs(name, "float64", "mm", "row", 2)
    try:
        plan(a.format, "mm", order)
    except UnsupportedError:
        pytest.skip(f"{name} cannot be walked in {order} order")
    y = run_interp(a, x, c, 2.0, -1.0, order=order, cols=cols)
    check(y, reference(dense, x, c, 2.0, -1.0, is_batched(name)), "float64")
    a, dense, x, c = inputs(name, "float64", "mv", "row", None)
    y = run_interp(a, x, None, 0.5, 0.0, order=order)
    check(y, reference(dense, x, None, 0.5, 0.0, is_batched(name)), "float64")


@pytest.mark.parametrize("shape", [(0, 12), (6, 0), (0, 0)])
@pytest.mark.parametrize("name", ["CSR", "COO", "DIA", "BSR[2,3]", "NM[2,4]", "CSC", "DCSR"])
def test_zero_size_shapes(name: str, shape: tuple[int, int]) -> None:
    a, dense, x, c = inputs(name, "float64", "mm", "row", 3, shape=shape)
    check(run_interp(a, x, c, 1.0, 2.0), reference(dense, x, c, 1.0, 2.0, False), "float64")


def test_out_of_bounds_reads_are_caught() -> None:
    a, _dense, x, _c = inputs("CSR", "float64", "mv", "row", None)
    a._crd[1] = a._crd[1].copy()
    a._crd[1][0] = 12  # a column index past the end of x
    with pytest.raises(IndexError, match="out of bounds"):
        run_interp(a, x, None, 1.0, 0.0)


def test_missing_argument_is_a_shape_error() -> None:
    k = lower(ust.formats.CSR, "mv")
    with pytest.raises(ShapeError, match="needs argument"):
        interpret.run(k, {})
