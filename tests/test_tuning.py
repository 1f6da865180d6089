"""Tuning records, the cost model, forced routes and ``ust.tune`` on the CPU.

Records are data: every test that damages one checks that ust ignores it (with a log line),
never crashes and never runs what the record names unless it is a candidate, and that the
result still equals SciPy's.  Each test has its own record store (tests/conftest.py).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.backends.generated import tuning_store
from ust.backends.generated.disk_cache import ArtifactCache
from ust.plan.cost import SMALL_WORK, choose_by_cost
from ust.plan.planner import candidates
from ust.plan.rules import Problem
from ust.plan.stats import MatrixStats, matrix_stats
from ust.plan.tuning import make_record

N = 3000  # big enough that the cost model, not the "too small to matter" rule, decides


def _uniform(n: int = N, seed: int = 0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=(n, 8))
    a = sp.coo_array((rng.standard_normal(8 * n), (np.repeat(np.arange(n), 8), cols.ravel())), shape=(n, n))
    return sp.csr_array(a.tocsr())


def _rmat(scale: int = 12, ef: int = 16, seed: int = 0) -> sp.csr_array:
    """R-MAT (a=0.57, b=c=0.19): a power-law graph, rows of very unequal length."""
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, ef << scale
    r = np.zeros(m, np.int64)
    c = np.zeros(m, np.int64)
    for bit in range(scale):
        u = rng.random(m)
        r |= (u >= 0.76).astype(np.int64) << bit
        c |= (((u >= 0.57) & (u < 0.76)) | (u >= 0.95)).astype(np.int64) << bit
    a = sp.coo_array((np.ones(m), (r, c)), shape=(n, n)).tocsr()
    a.sum_duplicates()
    return sp.csr_array(a)


def _mm(a: object, k: int = 1, **kw: object) -> ust.Matmul:
    x = np.ones(N) if k == 1 else np.ones((N, k))
    return ust.Matmul(a, x, **kw)


def _record_file(mm: ust.Matmul) -> Path:
    assert mm._tuning.key is not None
    return Path(os.environ["UST_TUNING_DIR"]) / "tune" / f"{mm._tuning.key.digest}.json"


def _write(mm: ust.Matmul, **changes: object) -> dict:
    """Write a record for ``mm``'s problem (generated-c, variant storage unless changed)."""
    from ust.runtime.stateful import plan_versions, ust_version

    key = mm._tuning.key
    assert key is not None
    doc = make_record(
        key, "generated-c", "storage", {"generated-c:storage": 1e-4}, ust_version(), plan_versions(mm.space)
    )
    doc.update(changes)
    tuning_store.write_record(key.digest, doc)
    tuning_store.clear_memo()
    return doc


# ------------------------------------------------------------------------------------ records


def test_tune_writes_a_record_that_plans_and_one_shot_calls_follow(caplog: pytest.LogCaptureFixture) -> None:
    a = _uniform()
    x = np.random.default_rng(1).standard_normal(N)
    res = ust.tune("matmul", a, x, iterations=2)
    assert res.record is not None and res.record.is_file() and res.timings
    assert res.route in {name.split(":")[0] for name in res.timings}
    doc = json.loads(res.record.read_bytes()[len(b"ust-cache-hmac-v1\n") + 32 :])
    assert doc["route"] == res.route and doc["variant"] == res.variant and doc["device"] == "cpu"
    tuning_store.clear_memo()  # read back from disk, not from the memo
    # a similar matrix (same size buckets, another seed) follows the record
    b = _uniform(seed=5)
    mm = ust.Matmul(b, x)
    assert mm.choice.startswith("from a tuning record of 20") and mm.decision.route == res.route
    assert mm.variant == res.variant
    assert "chosen: from a tuning record of" in ust.explain("matmul", b, x)
    with caplog.at_level(logging.INFO, logger="ust"):
        y = ust.matmul(b, x)
    np.testing.assert_allclose(y, b @ x, rtol=1e-12)
    assert f"route for spmv: {res.route}" in caplog.text and "from a tuning record of" in caplog.text


def test_a_record_overrides_the_cost_model() -> None:
    a = _uniform()
    mm = _mm(a)
    assert mm.choice.startswith("cost model:")
    _write(mm, route="generated-c", variant="outer")
    mm2 = _mm(a)
    assert mm2.decision.route == "generated-c" and mm2.variant == "outer", mm2.explain()
    mm2.plan()
    np.testing.assert_allclose(mm2.execute(), a @ np.ones(N), rtol=1e-12)


def test_autotune_record_false_writes_nothing() -> None:
    mm = _mm(_uniform())
    mm.plan()
    mm.autotune(iterations=1, record=False)
    assert mm.record_path is None and not _record_file(mm).exists()


def test_records_are_keyed_by_op_k_and_size() -> None:
    a = _uniform()
    mm1, mm8 = _mm(a), _mm(a, k=8)
    big = _mm(ust.asarray(sp.random_array((N, N), density=0.05, random_state=0, format="csr")))
    keys = {m._tuning.key.digest for m in (mm1, mm8, big)}  # type: ignore[union-attr]
    assert len(keys) == 3


@pytest.mark.parametrize(
    "change, log",
    [
        ({"ust_version": "0.0.1"}, "stale tuning record"),
        ({"versions": {"numpy": "1.0", "scipy": "1.0"}}, "stale tuning record"),
        ({"schema": 99}, "stale tuning record"),
        ({"device": "cuda:0 NVIDIA H200 sm_90"}, "another device"),
    ],
)
def test_stale_and_foreign_records_are_ignored(
    change: dict, log: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = _uniform()
    fresh = _mm(a)
    _write(fresh, **change)
    with caplog.at_level(logging.INFO, logger="ust"):
        mm = _mm(a)
    assert log in caplog.text
    assert mm.choice == fresh.choice and mm.decision.route == fresh.decision.route


BAD = [
    {"route": "cusparse"},  # a route of another device
    {"route": "rm -rf /"},
    {"route": "convert-scipy"},  # a route that is no candidate here
    {"variant": "outer; rm -rf /"},
    {"variant": "../../../etc/passwd"},
    {"variant": 10**30},
    {"variant": True},
    {"variant": [1, 2]},
    {"timings": {"x": -1.0}},
    {"timings": {"x": "fast"}},
    {"created": "yesterday"},
    {"key": {"op": "spmv"}},
    {"extra": 1},
    {"route": "x" * 10_000},
]


@pytest.mark.parametrize("change", BAD, ids=range(len(BAD)))
def test_damaged_records_are_ignored_and_never_run(change: dict, caplog: pytest.LogCaptureFixture) -> None:
    a = _uniform()
    fresh = _mm(a)
    _write(fresh, **change)
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = _mm(a)
        mm.plan()
    assert "damaged tuning record" in caplog.text
    assert mm.decision.route == fresh.decision.route and mm.choice == fresh.choice
    np.testing.assert_allclose(mm.execute(), a @ np.ones(N), rtol=1e-12)
    np.testing.assert_allclose(ust.matmul(a, np.ones(N)), a @ np.ones(N), rtol=1e-12)


def test_a_variant_the_route_does_not_offer_falls_back_to_its_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = _uniform()
    _write(_mm(a), variant="outer:g32")  # well-formed, but the C route has no threads per row
    mm = _mm(a)
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm.plan()
    assert "not one route generated-c offers" in caplog.text and mm.variant is None
    np.testing.assert_allclose(mm.execute(), a @ np.ones(N), rtol=1e-12)


@pytest.mark.parametrize(
    "payload",
    [b"not json at all", b"\xff\xfe", b"[" * 60_000, b"[" * 100_000, b"{}" * 40_000, b"null", b"[1, 2]"],
)
def test_authenticated_garbage_is_ignored(payload: bytes, caplog: pytest.LogCaptureFixture) -> None:
    a = _uniform()
    fresh = _mm(a)
    key = fresh._tuning.key
    assert key is not None
    ArtifactCache("tune", tuning_store.store_root()).store(key.digest, ".json", payload)
    tuning_store.clear_memo()
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = _mm(a)
    assert "tuning record" in caplog.text and mm.choice == fresh.choice


def test_a_planted_or_swapped_record_fails_its_hmac_and_is_removed(caplog: pytest.LogCaptureFixture) -> None:
    a = _uniform()
    fresh = _mm(a)
    doc = _write(fresh, route="generated-c", variant="outer")
    path = _record_file(fresh)
    # planted: the right name, plain JSON without the user's HMAC
    path.write_bytes(json.dumps(doc).encode())
    tuning_store.clear_memo()
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = _mm(a)
    assert "HMAC" in caplog.text or "not an authenticated" in caplog.text
    assert mm.choice == fresh.choice and not path.exists()
    # swapped: a genuine record of another key copied under this key's name
    other = _mm(a, k=8)
    _write(other)
    path.write_bytes(_record_file(other).read_bytes())
    tuning_store.clear_memo()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = _mm(a)
    assert "HMAC" in caplog.text and mm.choice == fresh.choice


def test_an_unwritable_store_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "file"
    bad.write_text("not a directory")
    monkeypatch.setenv("UST_TUNING_DIR", str(bad))
    a = _uniform()
    res = ust.tune("matmul", a, np.ones(N), iterations=1)
    assert res.timings
    np.testing.assert_allclose(ust.matmul(a, np.ones(N)), a @ np.ones(N), rtol=1e-12)


def test_cache_clear_removes_records(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    from ust.cli.main import main

    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("UST_TUNING_DIR")
    res = ust.tune("matmul", _uniform(), np.ones(N), iterations=1)
    assert res.record is not None and res.record.parent == tmp_path / "cache" / "tune"
    assert main(["cache", "clear"]) == 0
    assert not res.record.exists()


def test_tune_rejects_bad_arguments() -> None:
    with pytest.raises(ust.UnsupportedError, match="tunes"):
        ust.tune("solve", _uniform(), np.ones(N))
    with pytest.raises(ust.InvalidValueError, match="iterations"):
        ust.tune("matmul", _uniform(), np.ones(N), iterations=0)
    with pytest.raises(ust.InvalidValueError, match="operands"):
        ust.tune("matmul", _uniform())


# ------------------------------------------------------------------------------ forced routes


def test_forced_route_and_variant_run() -> None:
    a = _uniform()
    for route, variant in (("generated-c", None), ("generated-c", "outer"), ("scipy", None)):
        mm = _mm(a, options={"route": route, "variant": variant})
        assert (
            mm.decision.route == route
            and mm.choice.startswith("forced")
            and "(forced by route=)" in mm.decision.reason
        )
        mm.plan()
        assert mm.variant == variant
        np.testing.assert_allclose(mm.execute(), a @ np.ones(N), rtol=1e-12)


def test_forced_route_ignores_records() -> None:
    a = _uniform()
    _write(_mm(a), route="generated-c", variant="outer")
    mm = _mm(a, options={"route": "scipy"})
    assert mm.decision.route == "scipy"


@pytest.mark.parametrize(
    "options, error, text",
    [
        ({"route": "cusparse"}, ust.UnsupportedError, "candidates: scipy, generated-c"),
        ({"route": "nope"}, ust.UnsupportedError, "candidates: scipy, generated-c"),
        ({"route": 3}, ust.InvalidTypeError, "route"),
        ({"variant": 1.5}, ust.InvalidTypeError, "variant"),
        ({"route": "scipy", "variant": "outer"}, ust.UnsupportedError, "not a variant of route scipy"),
        ({"route": "generated-c", "variant": "sideways"}, ust.UnsupportedError, "not a variant"),
    ],
)
def test_forced_routes_that_cannot_run_name_the_candidates(options: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        _mm(_uniform(), options=options)


def test_forced_route_for_tensor_times_vector() -> None:
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((6, 5, 4)) * (rng.random((6, 5, 4)) < 0.3)
    t = ust.asarray(dense, format="CSF")
    v = rng.standard_normal(4)
    mm = ust.Matmul(t, v, options={"route": "generated-c", "variant": "storage"})
    assert mm.problem.op == "ttv" and mm.choice.startswith("forced")
    mm.plan()
    np.testing.assert_allclose(mm.execute(), dense @ v, rtol=1e-12, atol=1e-12)
    with pytest.raises(ust.UnsupportedError, match="candidates: generated-c"):
        ust.Matmul(t, v, options={"route": "scipy"})


def test_forced_route_not_a_candidate_for_a_fused_product() -> None:
    with pytest.raises(ust.UnsupportedError, match="candidates: generated-c"):
        _mm(_uniform(), alpha=2.0, options={"route": "scipy"})


def test_forced_variant_the_route_does_not_offer_names_the_offered_ones() -> None:
    mm = _mm(_uniform(), options={"route": "generated-c", "variant": "outer:g4"})
    with pytest.raises(ust.UnsupportedError, match=r"candidates: '(storage|outer)', '(storage|outer)'"):
        mm.plan()


# ------------------------------------------------------------------------------- cost model


def _stats(**kw: object) -> MatrixStats:
    base = {
        "rows": 1 << 20,
        "cols": 1 << 20,
        "nnz": 8 << 20,
        "row_mean": 8.0,
        "row_max": 12,
        "row_cv": 0.3,
        "empty_rows": 0.0,
    }
    base.update(kw)
    return MatrixStats(**base)  # type: ignore[arg-type]


def _problem(
    op: str, device: str, fmt: str = "CSR", params: tuple[int, ...] = (), plain: bool = True
) -> Problem:
    return Problem(op, device, fmt, params, True, "float64", "int32", plain)


@pytest.mark.parametrize(
    "problem, stats, k, route, group",
    [
        # H200 measurements (benchmarks/RESULTS.md): uniform short rows, k = 8: one thread per row, 4-7x cuSPARSE
        (_problem("spmm", "cuda"), _stats(), 8, "generated-cuda", 1),
        (_problem("spmv", "cuda"), _stats(), 1, "generated-cuda", 1),
        # power-law rows: cuSPARSE's balanced algorithm
        (_problem("spmv", "cuda"), _stats(row_max=50_000, row_cv=4.0), 1, "cusparse", None),
        (_problem("spmm", "cuda", "COO"), _stats(row_max=50_000, row_cv=4.0), 8, "cusparse", None),
        # the only GPU route of DIA / DCSR / user formats: threads per row from the same rows
        (_problem("spmv", "cuda", "DIA"), _stats(ndiag=7), 1, "generated-cuda", 1),
        (_problem("spmm", "cuda", "DCSR"), _stats(), 8, "generated-cuda", 1),
        # BSR: the generated kernel beats cuSPARSE's bsrmv / bsrmm on uniform and power-law rows
        (_problem("spmv", "cuda", "BSR", (2, 2)), _stats(block=(2, 2)), 1, "generated-cuda", 1),
        (
            _problem("spmv", "cuda", "BSR", (2, 2)),
            _stats(row_max=50_000, row_cv=4.0),
            1,
            "generated-cuda",
            32,
        ),
        (_problem("spmm", "cuda", "BSR", (2, 2)), _stats(row_max=50_000, row_cv=4.0), 8, "generated-cuda", 4),
        # a user format (loose_compressed) on power-law rows: a warp per row at k = 1, the default at k = 8
        (_problem("spmv", "cuda", "OTHER"), _stats(row_max=50_000, row_cv=4.0), 1, "generated-cuda", 32),
        (_problem("spmm", "cuda", "OTHER"), _stats(row_max=50_000, row_cv=4.0), 8, "generated-cuda", None),
        # CPU: BSR at k > 1 (3-5x SciPy), skewed rows stay on SciPy, small work keeps the default
        (
            _problem("spmm", "cpu", "BSR", (2, 2)),
            _stats(block=(2, 2), block_fill=0.8),
            8,
            "generated-c",
            None,
        ),
        (_problem("spmm", "cpu", "DIA"), _stats(ndiag=7), 8, "generated-c", None),
        (_problem("spmv", "cpu", "DIA"), _stats(ndiag=7), 1, "scipy", None),
        (_problem("spmm", "cpu"), _stats(), 8, "generated-c", None),
        (_problem("spmm", "cpu", "COO"), _stats(row_max=50_000, row_cv=4.0), 8, "generated-c", None),
        (_problem("spmv", "cpu"), _stats(nnz=SMALL_WORK // 2), 1, "scipy", None),
        (_problem("spmv", "cpu", plain=False), _stats(row_max=50_000, row_cv=4.0), 1, "generated-c", None),
    ],
)
def test_cost_model_choices(
    problem: Problem, stats: MatrixStats, k: int, route: str, group: int | None
) -> None:
    choice = choose_by_cost(problem, stats, k, candidates(problem))
    assert choice.rule.route == route and choice.group == group, choice.reason
    assert "row length mean" in choice.reason


def test_cost_model_on_real_matrices_explained_for_the_gpu() -> None:
    """Explained on any machine: Poisson-like rows take the generated kernel at k = 8, R-MAT's
    power-law rows cuSPARSE; explain names the cost model and the statistics it read."""
    rmat = _rmat()
    n = rmat.shape[0]
    text = ust.explain("matmul", rmat, np.ones(n), execution="cuda")
    assert "route: cusparse" in text and "chosen: cost model: rows of very unequal length" in text
    uni = _uniform(n)
    text = ust.explain("matmul", uni, np.ones((n, 8)), execution="cuda")
    assert "route: generated-cuda" in text and "chosen: cost model: k > 1" in text


def test_cost_model_uses_every_core_only_where_there_are_several(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.plan import cost

    p = _problem("spmv", "cpu")
    for s in (_stats(), _stats(row_max=50_000, row_cv=4.0)):  # uniform and power-law rows
        monkeypatch.setattr(cost, "usable_cores", lambda: 2)
        assert choose_by_cost(p, s, 1, candidates(p)).rule.route == "generated-c"
        monkeypatch.setattr(cost, "usable_cores", lambda: 1)
        assert choose_by_cost(p, s, 1, candidates(p)).rule.route == "scipy"


def test_cost_model_on_real_matrices_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.plan import cost

    rmat = _rmat()
    monkeypatch.setattr(cost, "usable_cores", lambda: 1)
    mm = ust.Matmul(rmat, np.ones(rmat.shape[0]))
    assert mm.decision.route == "scipy" and mm.choice.startswith("cost model: rows of very unequal")
    big = _rmat(15)  # enough work for two cores
    monkeypatch.setattr(cost, "usable_cores", lambda: 2)  # two cores: the balanced C kernel
    mm = ust.Matmul(big, np.ones(big.shape[0]))
    assert mm.decision.route == "generated-c" and mm.choice.startswith("cost model: rows of very unequal")
    mm.plan()
    np.testing.assert_allclose(mm.execute(), big @ np.ones(big.shape[0]), rtol=1e-12)
    mm = ust.Matmul(rmat, np.ones((rmat.shape[0], 8)))
    assert mm.decision.route == "generated-c" and mm.choice.startswith("cost model: k > 1")
    bsr = ust.asarray(sp.bsr_array(_uniform(), blocksize=(2, 2)))
    mm = _mm(bsr, k=8)
    assert mm.decision.route == "generated-c"
    mm.plan()
    np.testing.assert_allclose(mm.execute(), _uniform() @ np.ones((N, 8)), rtol=1e-12)


@pytest.mark.parametrize(
    "fmt",
    ["CSR", "CSC", "COO", "DCSR", "DCSC", "BSR[2, 2]", "DIA", "(i, j) -> (i : dense, j : loose_compressed)"],
)
def test_stats_match_numpy(fmt: str) -> None:
    a = _rmat(10)
    t = ust.asarray(a, format=fmt)
    s = matrix_stats(t)
    ref = a if fmt not in ("CSC", "DCSC") else sp.csc_array(a)
    lengths = np.diff(ref.indptr)
    if fmt == "DIA":
        assert s.ndiag == np.unique(a.tocoo().col - a.tocoo().row).size and not s.exact
        return
    if fmt.startswith("BSR"):
        assert s.block == (2, 2) and 0 < s.block_fill <= 1
        return
    assert s.exact and s.nnz == a.nnz
    assert s.row_mean == pytest.approx(lengths.mean()) and s.row_max == lengths.max()
    assert s.row_cv == pytest.approx(lengths.std() / lengths.mean())
    assert s.empty_rows == pytest.approx(np.mean(lengths == 0))


@pytest.mark.parametrize("route", ["scipy", "generated-c"])
def test_one_shot_results_following_a_record_are_never_reused(route: str) -> None:
    """The one-shot path keeps the result buffer a route left unused (SciPy returns its own
    array) for the next call; a result handed to the caller is never written again."""
    a = _uniform()
    _write(_mm(a, k=8), route=route, variant=None)
    t = ust.asarray(a)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((N, 8)) for _ in range(3)]
    ys = [ust.matmul(t, x) for x in xs]
    assert len({id(y) for y in ys}) == 3
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, a @ x, rtol=1e-12)
    from ust.api.matmul import _ONE_SHOT

    mm = next(m for m in _ONE_SHOT.values() if m.a is t)
    assert mm.decision.route == route and mm.choice.startswith("from a tuning record")


def test_gpu_autotune_times_the_default_mapping_too() -> None:
    """The default kernel (default_group's threads, the balance the rows call for) is none of the
    fixed variants; autotune times it first, so a record never loses to a one-shot default (H200:
    a loose_compressed format on R-MAT at k = 8 ran 2.4 ms by default, 3.9 ms as autotune's best
    fixed variant)."""
    import types

    from ust.codegen.schedule import parse_balance, parse_variant, variants

    t = ust.asarray(_uniform(), format="(i, j) -> (i : dense, j : loose_compressed)")
    m = types.SimpleNamespace(a=t, b=np.ones((N, 8)))
    found = variants(m, "generated-cuda")
    assert found[0] == "auto" and len(found) == len(set(found)) > 1
    assert parse_variant("auto") == parse_variant(None) and parse_balance("auto") is None
    assert "auto" not in variants(m, "generated-c")
