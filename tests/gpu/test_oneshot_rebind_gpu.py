"""One-shot matmul on the GPU through a generated kernel: a call on new operands laid out like the
last ones only rebinds their pointers (issue 18, per-call cost), and every call returns its own
result -- also two calls on the same operand object."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

import ust  # noqa: E402
from ust.backends.generated import executors  # noqa: E402

#: Formats whose GPU SpMV / SpMM only a generated kernel runs (no cuSPARSE route for them).
FORMATS = ["DIA", "DIAI"]


def _matrix(fmt: str) -> tuple[sp.csr_array, Any]:
    a = sp.random_array((64, 64), density=0.1, format="csr", rng=0) + sp.eye_array(64)
    return a.tocsr(), ust.asarray(a.tocsr(), format=fmt).to("cuda")


def _rebinds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = executors._rebound

    def counted(*args: Any) -> Any:
        got = real(*args)
        seen.append(got is not None)
        return got

    monkeypatch.setattr(executors, "_rebound", counted)
    return seen


@pytest.mark.parametrize("k", [None, 4])
@pytest.mark.parametrize("fmt", FORMATS)
def test_one_shot_on_new_operands_is_exact_and_fresh(
    monkeypatch: pytest.MonkeyPatch, fmt: str, k: Any
) -> None:
    a, t = _matrix(fmt)
    rng = np.random.default_rng(1)
    shape = (64,) if k is None else (64, k)
    xs = [cp.asarray(rng.standard_normal(shape)) for _ in range(4)]
    seen = _rebinds(monkeypatch)
    got = [ust.matmul(t, x) for x in xs]
    got.append(ust.matmul(t, xs[0]))  # the same x object again
    for g, x in zip(got, [*xs, xs[0]], strict=True):
        np.testing.assert_allclose(cp.asnumpy(g), a @ cp.asnumpy(x), rtol=1e-12, atol=1e-12)
    assert len({id(g) for g in got}) == len(got)  # every call its own result
    assert len({g.data.ptr for g in got}) == len(got)
    assert any(seen)  # the pointer rebind ran (the one-shot cache's plan, new operands)


def test_one_shot_with_c_and_beta(monkeypatch: pytest.MonkeyPatch) -> None:
    a, t = _matrix("DIA")
    rng = np.random.default_rng(2)
    for _ in range(3):
        x, c = (cp.asarray(rng.standard_normal(64)) for _ in range(2))
        keep = c.copy()
        y = ust.matmul(t, x, c, alpha=2.0, beta=-0.5)
        np.testing.assert_allclose(
            cp.asnumpy(y), 2 * (a @ cp.asnumpy(x)) - 0.5 * cp.asnumpy(keep), rtol=1e-12
        )
        assert c.tobytes() == keep.tobytes()  # the caller's c is never written


def test_other_layouts_and_dtypes_take_the_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    a, t = _matrix("DIA")
    rng = np.random.default_rng(3)
    seen = _rebinds(monkeypatch)
    xs = [
        cp.asarray(rng.standard_normal((64, 3))),
        cp.asfortranarray(cp.asarray(rng.standard_normal((64, 3)))),  # another layout
        cp.asarray(rng.standard_normal((64, 3)), dtype=cp.float32),  # another dtype
        cp.asarray(rng.standard_normal((64, 6)))[:, ::2],  # strided
    ]
    for x in xs:
        y = ust.matmul(t, x)
        want = a @ cp.asnumpy(x).astype(np.float64)
        np.testing.assert_allclose(cp.asnumpy(y), want, rtol=1e-5 if x.dtype == cp.float32 else 1e-12)
    assert not any(seen[1:])  # nothing laid out like its predecessor: never rebound


def test_stateful_execute_keeps_its_result_buffer() -> None:
    _, t = _matrix("DIA")
    x = cp.ones(64)
    mm = ust.Matmul(t, x, options={"route": "generated-cuda"})
    mm.plan()
    assert mm.execute() is mm.execute()  # the stateful object's buffer, as before


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("fmt", ["CSR", "CSC", "COO", "DIA", "(i, j) -> (i : dense, j : loose_compressed)"])
def test_cached_one_shot_on_the_device_is_exact_and_fresh_on_every_route(fmt: str, order: str) -> None:
    """The cached one-shot call hands B to the executor as it is (no placement redone): cuSPARSE
    routes get a new result buffer each call, generated ones make their own; never an alias."""
    a, t = _matrix(fmt)
    rng = np.random.default_rng(2)
    xs = [cp.asarray(rng.standard_normal((64, 3)), order=order) for _ in range(3)]
    v = [cp.asarray(rng.standard_normal(64)) for _ in range(3)]
    for batch in (xs, v):
        got = [ust.matmul(t, x) for x in batch] + [ust.matmul(t, batch[0])]
        for g, x in zip(got, [*batch, batch[0]], strict=True):
            np.testing.assert_allclose(cp.asnumpy(g), a @ cp.asnumpy(x), rtol=1e-12, atol=1e-12)
        assert len({g.data.ptr for g in got}) == len(got)
    y0 = cp.asarray(rng.standard_normal(64))
    for _ in range(2):  # C and beta through the cached call too
        got = ust.matmul(t, v[0], y0, alpha=2.0, beta=-1.0)
        want = 2.0 * (a @ cp.asnumpy(v[0])) - cp.asnumpy(y0)
        np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-12, atol=1e-12)
    x32 = v[1].astype(np.float32)  # another dtype: a plan of its own, still exact
    np.testing.assert_allclose(cp.asnumpy(ust.matmul(t, x32)), a @ cp.asnumpy(x32), rtol=1e-5, atol=1e-5)
