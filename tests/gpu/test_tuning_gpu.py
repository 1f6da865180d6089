"""Tuning records, the cost model, forced routes and ``ust.advise`` on the GPU, against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

N = 20_000


def _uniform(n: int = N, per_row: int = 8, seed: int = 0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=(n, per_row))
    rows = np.repeat(np.arange(n), per_row)
    return sp.csr_array(
        sp.coo_array((rng.standard_normal(n * per_row), (rows, cols.ravel())), shape=(n, n)).tocsr()
    )


def _rmat(scale: int = 14, ef: int = 16, seed: int = 0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, ef << scale
    r = np.zeros(m, np.int64)
    c = np.zeros(m, np.int64)
    for bit in range(scale):
        u = rng.random(m)
        r |= (u >= 0.76).astype(np.int64) << bit
        c |= (((u >= 0.57) & (u < 0.76)) | (u >= 0.95)).astype(np.int64) << bit
    a = sp.coo_array((rng.standard_normal(m), (r, c)), shape=(n, n)).tocsr()
    a.sum_duplicates()
    return sp.csr_array(a)


def _check(y: object, want: np.ndarray) -> None:
    np.testing.assert_allclose(cp.asnumpy(y), want, rtol=1e-10, atol=1e-10 * float(np.abs(want).max()))


@pytest.mark.parametrize("k", [1, 8])
def test_tune_on_the_gpu_writes_a_record_one_shot_calls_follow(k: int) -> None:
    a = _uniform()
    t = ust.asarray(a, device="cuda")
    x = np.random.default_rng(1).standard_normal(N if k == 1 else (N, k))
    res = ust.tune("matmul", t, cp.asarray(x), iterations=3)
    assert res.record is not None and res.timings
    from ust.backends.generated import tuning_store

    tuning_store.clear_memo()
    t2 = ust.asarray(_uniform(seed=3), device="cuda")
    mm = ust.Matmul(t2, cp.asarray(x))
    assert mm.choice.startswith("from a tuning record of") and mm.decision.route == res.route
    assert mm.variant == res.variant
    _check(ust.matmul(t2, cp.asarray(x)), _uniform(seed=3) @ x)
    text = ust.explain("matmul", t2, cp.asarray(x))
    assert "chosen: from a tuning record of" in text


def test_a_cpu_record_is_not_used_on_the_gpu() -> None:
    a = _uniform()
    x = np.ones(N)
    ust.tune("matmul", a, x, iterations=1)
    mm = ust.Matmul(ust.asarray(a, device="cuda"), cp.asarray(x))
    assert not mm.choice.startswith("from a tuning record")


def test_cost_model_on_the_gpu_runs_what_it_chose() -> None:
    uni = _uniform()
    x8 = np.random.default_rng(0).standard_normal((N, 8))
    mm = ust.Matmul(ust.asarray(uni, device="cuda"), cp.asarray(x8))
    assert mm.decision.route == "generated-cuda" and mm.choice.startswith("cost model"), mm.explain()
    mm.plan()
    assert isinstance(mm.variant, str) and mm.variant.endswith(":g1")
    _check(mm.execute(), uni @ x8)
    r = _rmat()
    x = np.random.default_rng(0).standard_normal(r.shape[1])
    mm = ust.Matmul(ust.asarray(r, device="cuda"), cp.asarray(x))
    assert mm.decision.route == "cusparse" and mm.choice.startswith("cost model"), mm.explain()
    mm.plan()
    _check(mm.execute(), r @ x)


@pytest.mark.parametrize(
    "fmt, k, group",
    [("BSR[2, 2]", 1, ":g1"), ("BSR[2, 2]", 8, ":g1"), ("DCSR", 8, ":g1"), ("DIA", 1, ":g1")],
)
def test_cost_model_picks_the_generated_kernel_and_its_threads_for_bsr_and_one_route_formats(
    fmt: str, k: int, group: str
) -> None:
    """Measured on the H200 (benchmarks/RESULTS.md): BSR runs the generated kernel, not cuSPARSE's
    bsrmv / bsrmm (2.5-6.7x); formats whose only GPU route is the generated kernel get their threads
    per row from the same statistics (1.3-3x the kernel's default)."""
    a = (
        sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(N, N)).tocsr()
        if fmt == "DIA"
        else _uniform()
    )
    x = np.random.default_rng(2).standard_normal(N if k == 1 else (N, k))
    mm = ust.Matmul(ust.asarray(a, format=fmt).to("cuda"), cp.asarray(x))
    assert mm.decision.route == "generated-cuda", mm.explain()
    mm.plan()
    assert isinstance(mm.variant, str) and mm.variant.endswith(group), (mm.variant, mm.choice)
    _check(mm.execute(), a @ x)


@pytest.mark.parametrize(
    "route, variant",
    [
        ("cusparse", None),
        ("generated-cuda", None),
        ("generated-cuda", "storage:g4"),
        ("generated-cuda", "outer:g1"),
    ],
)
def test_forced_routes_on_the_gpu(route: str, variant: object) -> None:
    a = _uniform()
    x = np.random.default_rng(0).standard_normal(N)
    mm = ust.Matmul(
        ust.asarray(a, device="cuda"), cp.asarray(x), options={"route": route, "variant": variant}
    )
    assert mm.decision.route == route
    try:
        mm.plan()
    except (
        ust.UnsupportedError
    ) as exc:  # a variant this format's kernel does not offer: named with the offered ones
        assert "candidates:" in str(exc)
        return
    _check(mm.execute(), a @ x)


def test_forced_cusparse_algorithm_and_a_refused_one() -> None:
    from ust.backends.cuda import cusparse

    a = _uniform()
    x = np.ones(N)
    alg = cusparse.SPMV_ALGORITHMS["CSR"][-1]
    mm = ust.Matmul(
        ust.asarray(a, device="cuda"), cp.asarray(x), options={"route": "cusparse", "variant": alg}
    )
    mm.plan()
    _check(mm.execute(), a @ x)
    bad = ust.Matmul(
        ust.asarray(a, device="cuda"), cp.asarray(x), options={"route": "cusparse", "variant": 63}
    )
    with pytest.raises(ust.UnsupportedError, match="candidates"):
        bad.plan()
    with pytest.raises(
        ust.UnsupportedError,
        match="candidates: cusparse, generated-cuda",
    ):
        ust.Matmul(ust.asarray(a, device="cuda"), cp.asarray(x), options={"route": "scipy"})


def test_advise_on_the_gpu() -> None:
    a = sp.csr_array(
        sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(50_000, 50_000), format="csr")
    )
    adv = ust.advise(a, device="cuda", repeat=3)
    fmts = [r.format for r in adv.rows]
    assert "DIA" in fmts and adv.device.startswith("cuda")
    assert all(r.call_s > 0 for r in adv.rows)
