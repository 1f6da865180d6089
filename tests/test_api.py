"""The public surface: Tensor operators, ust.explain for every op, ust.matmul's dispatch,
and the one-shot plan cache (results are the caller's; changed operands are noticed)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust


def _a(seed: int = 0, shape: tuple[int, int] = (12, 10)) -> sp.csr_array:
    return sp.random_array(shape, density=0.3, format="csr", random_state=seed)


def test_operators_match_scipy() -> None:
    a, b = _a(0), _a(1)
    ta, tb = ust.asarray(a), ust.asarray(b)
    x = np.arange(10.0)
    np.testing.assert_allclose(ta @ x, a @ x)
    np.testing.assert_allclose(np.arange(12.0) @ ta, np.arange(12.0) @ a)
    np.testing.assert_allclose((ta + tb).todense(), (a + b).toarray())
    np.testing.assert_allclose((ta - tb).todense(), (a - b).toarray())
    np.testing.assert_allclose((ta * tb).todense(), a.multiply(b).toarray())
    np.testing.assert_allclose((3 * ta).todense(), 3 * a.toarray())
    np.testing.assert_allclose((ta / 2).todense(), a.toarray() / 2)
    np.testing.assert_allclose((-ta).todense(), -a.toarray())
    np.testing.assert_allclose((ta @ tb.T).todense(), (a @ b.T).toarray())
    assert ta.T.format.standard_name == "CSC"
    assert np.shares_memory(ta.T.values, ta.values)
    assert np.isclose(ta.sum(), a.sum())
    np.testing.assert_allclose(ta.sum(axis=1), a.sum(axis=1))
    np.testing.assert_allclose(ta.max(axis=0), a.max(axis=0).toarray())
    np.testing.assert_allclose(ta.min(), a.min())


def test_ndarray_on_the_left_reaches_the_reflected_operators() -> None:
    a = _a()
    t = ust.asarray(a)
    np.testing.assert_allclose(np.ones(12) @ t, np.ones(12) @ a)
    np.testing.assert_allclose((np.float64(2.0) * t).todense(), 2 * a.toarray())


@pytest.mark.parametrize(
    ("op", "operands", "kwargs", "needle"),
    [
        ("matmul", lambda t: (t, np.ones(10)), {}, "route: scipy"),
        ("matmul", lambda t: (t, t.T), {}, "spgemm"),
        ("convert", lambda t: (t, "DIA"), {}, "DIA"),
        ("solve", lambda t: (sp.eye_array(6, format="csr"), np.ones(6)), {}, "dense LU"),
        ("add", lambda t: (t, t), {}, "route:"),
        ("multiply", lambda t: (t, t), {}, "route:"),
        ("subtract", lambda t: (t, t), {}, "route:"),
        ("sddmm", lambda t: (t, np.ones((12, 3)), np.ones((3, 10))), {}, "route:"),
        ("transpose", lambda t: (t,), {}, "route:"),
        ("sum", lambda t: (t,), {"axis": 0}, "route:"),
        ("max", lambda t: (t,), {}, "route:"),
        ("min", lambda t: (t,), {}, "route:"),
    ],
)
def test_explain_covers_every_op(op, operands, kwargs, needle) -> None:
    text = ust.explain(op, *operands(ust.asarray(_a())), **kwargs)
    assert needle in text


def test_explain_unknown_op() -> None:
    with pytest.raises(ust.UnsupportedError, match="supported"):
        ust.explain("frobnicate", ust.asarray(_a()))


def test_matmul_dispatch_sparse_sparse_and_dense_tensor() -> None:
    a = _a()
    c = ust.matmul(ust.asarray(a), ust.asarray(a.T.tocsr()), format="CSR")
    assert isinstance(c, ust.Tensor) and c.format.standard_name == "CSR"
    np.testing.assert_allclose(c.todense(), (a @ a.T).toarray())
    d = np.random.default_rng(0).standard_normal((4, 5))
    np.testing.assert_allclose(ust.matmul(ust.asarray(d), np.ones(5), alpha=2.0), 2 * d @ np.ones(5))


def test_matmul_epilog_text() -> None:
    a = _a()
    x = np.random.default_rng(1).standard_normal(10)
    np.testing.assert_allclose(ust.matmul(a, x, epilog="max(y, 0)"), np.maximum(a @ x, 0))
    np.testing.assert_allclose(
        ust.matmul(a, x, epilog="y * s", epilog_params={"s": 3.0}), 3 * (a @ x), rtol=1e-14
    )


@pytest.mark.parametrize("fmt", ["CSR", "DCSR"])  # a library route and a generated one
def test_one_shot_cache_hands_back_fresh_results(fmt: str) -> None:
    a = _a()
    t = ust.asarray(a, format=fmt)
    x1, x2 = np.ones(10), np.arange(10.0)
    y1 = ust.matmul(t, x1, alpha=2.0, beta=0.0)
    y2 = ust.matmul(t, x2, alpha=2.0, beta=0.0)
    np.testing.assert_allclose(y1, 2 * (a @ x1))  # not overwritten by the second call
    np.testing.assert_allclose(y2, 2 * (a @ x2))
    assert y1 is not y2


def test_one_shot_cache_notices_replaced_scipy_buffers() -> None:
    a = _a()
    x = np.ones(10)
    y1 = ust.matmul(a, x)
    a.data = a.data * 2.0  # a new array: the cached plan must not be reused
    np.testing.assert_allclose(ust.matmul(a, x), 2 * y1)
    a.data[:] = 0.0  # in place: same buffer, the plan sees it
    np.testing.assert_allclose(ust.matmul(a, x), 0.0)
