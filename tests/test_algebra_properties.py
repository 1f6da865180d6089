"""Property tests: random shapes, patterns, duplicates and format pairs against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ust.api.algebra as ops
from tests.algebra_cases import FORMATS, fmt
from ust.convert import asarray

#: Formats that store no padding slots: every stored value is an entry.
NO_PADDING = {"CSR", "CSC", "COO", "DCSR", "DCSC"}


@st.composite
def matrices(draw, shape=None):
    m = draw(st.sampled_from([2, 4, 6])) if shape is None else shape[0]
    n = draw(st.sampled_from([2, 4, 6])) if shape is None else shape[1]
    nnz = draw(st.integers(0, m * n + 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, m, nnz)
    cols = rng.integers(0, n, nnz)
    vals = rng.integers(-3, 4, nnz).astype(np.float64)  # small integers: exact sums, cancellations
    coo = sp.coo_array((vals, (rows, cols)), shape=(m, n))  # duplicates and explicit zeros possible
    name = draw(st.sampled_from(FORMATS))
    return coo, name


def _tensor(coo, name):
    if name == "COO-dups":
        return asarray(coo)
    return asarray(coo.tocsr(), fmt(name))


@settings(max_examples=40, deadline=None)
@given(matrices(), st.data())
def test_union_and_intersection(a, data):
    A, fa = a
    B, fb = data.draw(matrices(shape=A.shape))
    ta, tb = _tensor(A, fa), _tensor(B, data.draw(st.sampled_from([fb, "COO-dups"])))
    for op, ref in (("add", A + B), ("subtract", A - B), ("multiply", A.tocsr().multiply(B.tocsr()))):
        for route in (None, "array-program"):
            try:
                out = getattr(ops, op)(ta, tb, route=route)
            except NotImplementedError:  # the forced route is not a candidate for this pair
                continue
            np.testing.assert_array_equal(out.todense(), ref.toarray())
            if out.format.standard_name in NO_PADDING:  # exact zeros dropped, as SciPy drops them
                assert np.all(out.values != 0)


@settings(max_examples=40, deadline=None)
@given(matrices(), st.data())
def test_spgemm_and_reductions(a, data):
    A, fa = a
    B, fb = data.draw(matrices(shape=(A.shape[1], data.draw(st.sampled_from([2, 4, 6])))))
    ta, tb = _tensor(A, fa), _tensor(B, fb)
    for route in ("array-program", None):
        np.testing.assert_array_equal(ops.matmul_sparse(ta, tb, route=route).todense(), (A @ B).toarray())
    Ac = A.tocsr()
    for op in ("sum", "max", "min"):
        for axis in (None, 0, 1):
            ref = getattr(Ac, op)(axis=axis)
            ref = ref.toarray() if hasattr(ref, "toarray") else ref
            np.testing.assert_array_equal(getattr(ops, op)(ta, axis, route="array-program"), ref)


@pytest.mark.parametrize("name", FORMATS)
def test_transpose_twice_is_identity(name):
    A = sp.random_array((6, 4), density=0.4, random_state=1, format="csr")
    t = asarray(A, fmt(name))
    tt = ops.transpose(ops.transpose(t))
    assert tt.format == t.format and tt.shape == t.shape
