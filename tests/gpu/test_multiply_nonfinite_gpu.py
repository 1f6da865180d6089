"""The GPU twin of tests/test_multiply_nonfinite.py: the CuPy array program (and every route the
planner offers) keeps a NaN / inf stored in one operand as ``v * 0`` (NaN), as SciPy does."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust.api.algebra as ops
from tests.test_multiply_nonfinite import DTYPES, assert_same, fixed_pair, random_pair
from ust.convert import asarray

pytestmark = pytest.mark.gpu

FORMATS = ["COO", "DCSR", "(i, j) -> (j : compressed, i : compressed)"]


def check_gpu(op, A, B, name):
    from ust.runtime import xp as _xp

    a, b = sp.csr_array(A), sp.csr_array(B)
    ref = {"multiply": lambda: a.multiply(b), "add": lambda: a + b, "subtract": lambda: a - b}[op]()
    ref = sp.csr_array(ref)
    ref.eliminate_zeros()
    ta, tb = asarray(a, name).to("cuda"), asarray(b, name).to("cuda")
    d = ops.plan(op, ta, tb)
    for route in sorted({d.route, "array-program"}):
        out = getattr(ops, op)(ta, tb, route=route)
        assert out.device.startswith("cuda") and out.format == ta.format
        assert_same(_xp.to_host(out.todense()), ref.toarray(), f"{op} {name} route={route}")
        s = out.to("cpu").to_scipy()
        assert s.nnz == ref.nnz, (op, name, route)
        assert np.all(s.data != 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORMATS)
def test_multiply_nonfinite_gpu(name, dtype):
    A, B = fixed_pair(dtype)
    check_gpu("multiply", A, B, name)
    check_gpu("multiply", np.zeros_like(A), B, name)  # an empty operand
    for seed in range(3):
        check_gpu("multiply", *random_pair(seed, dtype), name)


@pytest.mark.parametrize("name", ["COO", "DCSR"])
@pytest.mark.parametrize("op", ["add", "subtract"])
def test_add_subtract_nonfinite_gpu(op, name):
    check_gpu(op, *fixed_pair(np.complex128), name)
    check_gpu(op, *random_pair(5, np.float64), name)
