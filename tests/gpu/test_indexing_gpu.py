"""``t[key]`` on CuPy buffers: the same results (types, shapes, values) and errors as on the CPU,
and the values of cupyx's own indexing where cupyx indexes (CSR, CSC)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.algebra_cases import snapshot, unchanged
from ust.api.indexing import plan
from ust.runtime.errors import IndexOutOfBoundsError, InvalidIndexError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

FORMATS = [
    "CSR",
    "CSC",
    "COO",
    "DIA",
    "BSR[1,2]",
    "DCSR",
    "(i, j) -> (i : dense, j : loose_compressed)",
    "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))",
]
KEYS = [
    (1, 2),
    (-1, -3),
    1,
    (slice(None), 1),
    slice(1, 3),
    (slice(None, None, -1), slice(1, 9, 3)),
    [2, 0, 0],
    (slice(None), [3, 0, 0]),
    (1, [0, 3]),
    ([1, 2], [0, 3]),
    (np.array([[1], [2]]), [0, 3]),
    (np.array([[1, 2], [0, 1]]), np.array([[0, 1], [2, 3]])),
    (None, 1),
    (1, 2, None),
    (Ellipsis, 2),
    ([], slice(None)),
    np.array([True, False, True, False, True]),
]


def _matrix() -> sp.csr_array:
    B = np.arange(50.0).reshape(5, 10)
    B[B % 3 == 0] = 0
    A = sp.csr_array(B)
    A.data[0] = 0.0  # an explicit zero
    return A


def _host(x):
    if isinstance(x, ust.Tensor):
        assert x.device.startswith("cuda")
        return cp.asnumpy(x.todense())
    assert isinstance(x, cp.ndarray)  # scalars are 0-d CuPy arrays, as cupyx gives
    return cp.asnumpy(x)


def _cpu_dense(x):
    return np.asarray(x.todense()) if isinstance(x, ust.Tensor) else np.asarray(x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_matches_cpu(fmt):
    A = _matrix()
    cpu = ust.asarray(A, format=fmt)
    gpu = cpu.to("cuda")
    snap = snapshot(gpu)
    for key in KEYS:
        want = cpu[key]
        got = gpu[key]
        assert plan(gpu, key).route == plan(cpu, key).route
        np.testing.assert_array_equal(_host(got), _cpu_dense(want), err_msg=repr(key))
        assert np.shape(got) == np.shape(want)
        assert isinstance(got, ust.Tensor) == isinstance(want, ust.Tensor)
        if isinstance(want, ust.Tensor):
            assert got.format == want.format and got.dtype == want.dtype
    assert unchanged(gpu, snap)


@pytest.mark.parametrize("fmt", ["CSR", "COO", "DIA"])
def test_cupy_keys(fmt):
    A = _matrix()
    cpu = ust.asarray(A, format=fmt)
    gpu = cpu.to("cuda")
    rows, cols = np.array([4, 0, 4]), np.array([9, 1])
    mask = np.array([True, False, True, True, False])
    for key in [(rows, slice(None)), (slice(None), cols), (rows[:, None], cols), (mask, slice(2, 8))]:
        gkey = tuple(cp.asarray(k) if isinstance(k, np.ndarray) else k for k in key)
        np.testing.assert_array_equal(_host(gpu[gkey]), _cpu_dense(cpu[key]))
        np.testing.assert_array_equal(_host(gpu[key]), _cpu_dense(cpu[key]))  # host keys too
    assert float(gpu[cp.asarray(2), 4]) == float(cpu[2, 4])


@pytest.mark.parametrize("fmt", ["CSR", "COO", "DIA"])
def test_same_errors(fmt):
    gpu = ust.asarray(_matrix(), format=fmt).to("cuda")
    for key in [(5, 0), (0, -11), ([0, 5], slice(None)), (slice(None), cp.asarray([10]))]:
        with pytest.raises(IndexOutOfBoundsError):
            gpu[key]
    for key in [1.5, "a", (np.array([True, False]), 1), ([0, 1, 2], [0, 1])]:
        with pytest.raises(InvalidIndexError):
            gpu[key]


@pytest.mark.parametrize("fmt", ["CSR", "CSC"])
def test_against_cupyx(fmt):
    A = _matrix()
    gpu = ust.asarray(A, format=fmt).to("cuda")
    X = (csp.csr_matrix if fmt == "CSR" else csp.csc_matrix)(A.asformat(fmt.lower()))
    for key in [(1, 2), slice(1, 3), (slice(None), [1, 3]), ([0, 2], slice(None)), (slice(None, None, 2), slice(1, 8, 3)),
                ([1, 2], [3, 4]), (slice(None), 4)]:  # fmt: skip
        got = gpu[key]
        ref = X[key]
        ref = ref.toarray() if hasattr(ref, "toarray") else ref
        np.testing.assert_array_equal(
            _host(got).ravel(), cp.asnumpy(cp.asarray(ref)).ravel(), err_msg=repr(key)
        )


def test_explain_on_the_gpu():
    gpu = ust.asarray(_matrix(), format="DIA").to("cuda")
    text = ust.explain("getitem", gpu, (slice(None), 3))
    assert "route: via-csc" in text and "execution space: cuda" in text
