"""The GPU twin of tests/test_multiply_nonfinite.py: the CuPy array program (and every route the
planner offers, the compiled CUDA route among them) keeps a NaN / inf stored in one operand as
``v * 0`` (NaN), as SciPy does; broadcast products follow SciPy as on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust.api.algebra as ops
from tests.test_multiply_nonfinite import (
    DTYPES,
    USER,
    as_sparse,
    assert_same,
    broadcast_operands,
    fixed_pair,
    random_pair,
    scipy_broadcast,
)
from ust.convert import asarray

pytestmark = pytest.mark.gpu

FORMATS = ["COO", "DCSR", "(i, j) -> (j : compressed, i : compressed)"]


def check_gpu(op, A, B, name, route_list=None):
    from ust.runtime import xp as _xp

    a, b = sp.csr_array(A), sp.csr_array(B)
    ref = {"multiply": lambda: a.multiply(b), "add": lambda: a + b, "subtract": lambda: a - b}[op]()
    ref = sp.csr_array(ref)
    ref.eliminate_zeros()
    ta, tb = asarray(a, name).to("cuda"), asarray(b, name).to("cuda")
    d = ops.plan(op, ta, tb)
    for route in route_list or sorted({d.route, "array-program"}):
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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["CSR", "COO", USER])
def test_multiply_nonfinite_compiled_gpu(name, dtype):
    # route="compiled" on the GPU (a generated CUDA kernel for the intersection, completed to
    # SciPy's rule by the co-iteration's CuPy program)
    A, B = fixed_pair(dtype)
    check_gpu("multiply", A, B, name, ["compiled"])
    check_gpu("multiply", np.zeros_like(A), B, name, ["compiled"])
    for seed in range(2):
        check_gpu("multiply", *random_pair(seed, dtype), name, ["compiled"])


@pytest.mark.parametrize("name", ["CSR", "COO", USER])
def test_multiply_nonfinite_broadcast_gpu(name):
    from ust.runtime import xp as _xp

    M, R, C, r1 = broadcast_operands()
    for X, Y in [(M, R), (R, M), (M, C), (C, M), (C, R), (M, r1), (R, r1)]:
        ref = scipy_broadcast(X, Y)
        tx, ty = as_sparse(X, name).to("cuda"), as_sparse(Y, "COO").to("cuda")
        out = tx.multiply(ty)
        assert out.device.startswith("cuda")
        dense = _xp.to_host(out.todense())
        assert_same(dense, ref.toarray().reshape(dense.shape), f"{X.shape} * {Y.shape} in {name}")
        s = out.to("cpu").to_scipy()
        assert s.nnz == ref.nnz and np.all(s.data != 0), (X.shape, Y.shape, name)
