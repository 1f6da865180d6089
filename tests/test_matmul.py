"""ust.matmul / ust.Matmul on the CPU: routes, results against SciPy, logging, plans, errors."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ust

FORMATS_SCIPY = ["CSR", "CSC", "COO", "BSR[2,2]", "DIA"]


def _matrix(m: int = 12, n: int = 10, seed: int = 0, dtype: str = "float64") -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = sp.random_array((m, n), density=0.3, format="csr", rng=rng, dtype=np.float64)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * sp.random_array((m, n), density=0.3, format="csr", rng=rng)
    return sp.csr_array(a.astype(dtype))


@pytest.mark.parametrize("fmt", FORMATS_SCIPY)
@pytest.mark.parametrize("k", [None, 1, 3])
def test_scipy_route_matches_scipy(fmt: str, k: int | None) -> None:
    a = _matrix()
    t = ust.asarray(a, format=fmt)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10) if k is None else rng.standard_normal((10, k))
    mm = ust.Matmul(t, x)
    assert mm.decision.route == "scipy"
    mm.plan()
    np.testing.assert_allclose(mm.execute(), a @ x, rtol=1e-12, atol=1e-12)


def test_user_spelling_of_csr_takes_the_csr_route() -> None:
    t = ust.asarray(_matrix(), format="(r, c) -> (r : dense, c : compressed)")
    assert ust.Matmul(t, np.ones(10)).decision.route == "scipy"


def test_inputs_not_modified_and_result_is_numpy() -> None:
    a = _matrix()
    x = np.arange(10.0)
    c = np.ones(12)
    keep = (a.data.copy(), x.copy(), c.copy())
    y = ust.matmul(a, x, c, alpha=1.0, beta=0.0)
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(a.data, keep[0])
    np.testing.assert_array_equal(x, keep[1])
    np.testing.assert_array_equal(c, keep[2])


def test_logging_says_placement_and_route(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ust"):
        ust.matmul(_matrix(), np.ones(10))
    text = caplog.text
    assert "operands are in cpu memory; the execution space is cpu" in text
    assert "route for spmv: scipy" in text


def test_explain_lists_route_reason_and_candidates() -> None:
    text = ust.Matmul(_matrix(), np.ones(10)).explain()
    assert "route: scipy" in text and "reason:" in text and "execution space: cpu" in text


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("a", np.ones(9)), ust.ShapeError),
        (("a", np.ones((9, 2))), ust.ShapeError),
        (("a", np.ones(10), np.ones(11)), ust.ShapeError),
    ],
)
def test_shape_errors_before_any_work(args: tuple, error: type) -> None:
    a = _matrix()
    with pytest.raises(error, match="shape"):
        ust.Matmul(a, *args[1:])


def test_execute_before_plan_and_after_free() -> None:
    mm = ust.Matmul(_matrix(), np.ones(10))
    with pytest.raises(ust.InvalidStateError, match="plan"):
        mm.execute()
    mm.plan()
    mm.free()
    with pytest.raises(ust.InvalidStateError, match="freed"):
        mm.execute()


def test_reset_operands_checked_and_unchecked() -> None:
    a = _matrix()
    mm = ust.Matmul(a, np.ones(10))
    mm.plan()
    x2 = np.arange(10.0)
    mm.reset_operands(b=x2)
    np.testing.assert_allclose(mm.execute(), a @ x2)
    with pytest.raises(ust.ShapeError):
        mm.reset_operands(b=np.ones(3))
    mm.reset_operands_unchecked(b=2 * x2)
    np.testing.assert_allclose(mm.execute(), a @ (2 * x2))


def test_autotune_times_candidates_and_keeps_a_working_route() -> None:
    a = _matrix()
    mm = ust.Matmul(a, np.ones(10))
    mm.plan()
    timings = mm.autotune(iterations=2)
    assert timings and all(t > 0 for t in timings.values())
    np.testing.assert_allclose(mm.execute(), a @ np.ones(10))


def test_autotuned_and_loaded_reasons_keep_the_block_size(tmp_path) -> None:
    """The reason names the full format class ("BSR[2, 2]"), however the route was chosen."""
    a = sp.bsr_array(_matrix(12, 10).toarray(), blocksize=(2, 2))
    x = np.ones(10)
    mm = ust.Matmul(a, x)
    assert mm.problem.format_text == "BSR[2, 2]" and "BSR[2, 2]" in mm.decision.reason
    mm.plan()
    mm.autotune(iterations=1)
    rule = mm.decision.rule
    assert mm.decision.reason == rule.reason_for(mm.problem) + " (fastest when autotuned)"
    if "{fmt}" in rule.reason:
        assert "BSR[2, 2]" in mm.decision.reason
    mm.save_plan(tmp_path / "plan.json")
    loaded = ust.Matmul.load_plan(tmp_path / "plan.json", a, x)
    assert loaded.from_saved_plan
    assert loaded.decision.reason == rule.reason_for(loaded.problem) + " (from a saved plan)"
    if "{fmt}" in rule.reason:
        assert "BSR[2, 2]" in loaded.decision.reason
    np.testing.assert_allclose(loaded.execute(), a @ x)


def test_saved_plan_loads_in_a_fresh_process(tmp_path) -> None:
    a = _matrix()
    sp.save_npz(tmp_path / "a.npz", a)
    mm = ust.Matmul(a, np.ones(10))
    mm.plan()
    path = tmp_path / "plan.json"
    mm.save_plan(path)
    doc = json.loads(path.read_text())
    assert doc["kind"] == "matmul" and doc["plan"]["route"] == "scipy"
    code = (
        "import numpy as np, scipy.sparse as sp, ust\n"
        f"a = sp.load_npz({str(tmp_path / 'a.npz')!r})\n"
        f"mm = ust.Matmul.load_plan({str(path)!r}, a, np.ones(10))\n"
        "print(mm.decision.route, float(np.abs(mm.execute() - a @ np.ones(10)).max()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "scipy" and float(out[1]) < 1e-12


def test_execution_cuda_without_a_device_is_a_clear_error() -> None:
    pytest.importorskip("cupy")
    from ust.backends.cuda.arrays import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ust.UstError):
        ust.matmul(_matrix(), np.ones(10), execution="cuda")
