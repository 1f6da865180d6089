"""The safety of ust.solve on cuDSS: singular systems raise, the CPU and the GPU agree on the outcome.

The families are those of tests/test_linalg_safety.py (tests/linalg_safety_cases.py); for each
input the GPU must give the outcome class the CPU gives (a solution within tolerance, or the
same error), and never a silent wrong answer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import ust.linalg as L

from tests.linalg_safety_cases import (
    FAMILIES,
    ISSUE_MATRIX,
    SEEDS,
    assert_solves,
    outcome,
    reference,
    regular,
    rhs_for,
)
from ust.runtime.errors import SingularMatrixError, SolverAccuracyError, UnsupportedError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

TOL = L.DirectSolverOptions().tolerance(np.dtype(np.float64))


def test_the_issue_matrix_is_singular_on_the_gpu() -> None:
    a = sp.csr_matrix(ISSUE_MATRIX)
    with pytest.raises(SingularMatrixError, match="singular"):
        L.solve(a, np.ones(3), execution="cuda")
    with pytest.raises(SingularMatrixError, match="singular"):
        L.solve(csp.csr_matrix(a), cp.ones(3))


def test_the_issue_matrix_reports_its_perturbed_pivots() -> None:
    a = sp.csr_matrix(ISSUE_MATRIX)
    with L.DirectSolver(a, np.ones(3), options={"check": False}, execution="cuda") as s:
        s.plan()
        try:
            f = s.factorize()
        except SingularMatrixError:  # this cuDSS reports the zero pivot itself (INFO > 0)
            return
        assert f.npivots is not None, "cuDSS did not report CUDSS_DATA_NPIVOTS"
        assert f.small_pivots == f.npivots


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", list(SEEDS))
def test_cpu_and_gpu_give_the_same_outcome(family: str, seed: int) -> None:
    build, expected = FAMILIES[family]
    a = build(seed)
    b = rhs_for(a, seed)
    cpu, cpu_value = outcome(lambda: L.solve(a, b, execution="cpu"))
    gpu, gpu_value = outcome(lambda: L.solve(a, b, execution="cuda"))
    assert cpu == expected, f"{family}[{seed}] on the CPU: {cpu}: {cpu_value}"
    assert gpu == cpu, f"{family}[{seed}]: CPU {cpu}, GPU {gpu}: {gpu_value}"
    if gpu == "ok":
        assert isinstance(gpu_value, np.ndarray)
        assert_solves(a, gpu_value, b)
        if family == "regular":
            np.testing.assert_allclose(gpu_value, reference(a, b), rtol=0, atol=1e-10)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_same_outcome_with_device_operands_and_several_columns(family: str) -> None:
    build, expected = FAMILIES[family]
    a = build(0)
    b = np.random.default_rng(5).standard_normal((a.shape[0], 3))
    cls, value = outcome(lambda: L.solve(csp.csr_matrix(a), cp.asarray(b)))
    assert cls == expected, f"{family}: {cls}: {value}"
    if cls == "ok":
        assert isinstance(value, cp.ndarray)
        assert_solves(a, cp.asnumpy(value), b)


@pytest.mark.parametrize("e", [1e-10, 1e-12, 1e-13, 3e-14, 1e-14, 1e-15, 2.3e-16, 1e-16, 0.0])
def test_never_a_silent_wrong_answer(e: float) -> None:
    """[[1, 2], [2, 4 (1 + e)]] (+ a 1 x 1 block): from regular to exactly singular.

    Whatever cuDSS perturbs, an answer that comes back solves the system to the tolerance in
    the backward sense and, after small pivots, in the relative residual too; otherwise the
    error is SingularMatrixError (or SolverAccuracyError), as on the CPU.
    """
    a = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [2.0, 4.0 * (1.0 + e), 0.0], [0.0, 0.0, 1.0]]))
    b = np.ones(3)
    try:
        with L.DirectSolver(a, b, execution="cuda") as s:
            x = s.execute()
            f = s.factorization_info
    except (SingularMatrixError, SolverAccuracyError):
        cpu, _ = outcome(lambda: L.solve(a, b, execution="cpu"))
        if e == 0.0:
            assert cpu == "SingularMatrixError"
        return
    x2, b2 = x.reshape(-1, 1), b.reshape(-1, 1)
    assert L.backward_error(a, x2, b2) <= TOL
    if f is not None and f.small_pivots:
        assert L.relative_residual(a, x2, b2) <= TOL
    assert e != 0.0, "an exactly singular system was 'solved'"


def test_near_singular_member_of_a_batch_is_singular() -> None:
    from tests.linalg_safety_cases import with_singular_values

    mats = [regular(1), with_singular_values(2, 1e-17), regular(3)]
    bs = [rhs_for(m, i) for i, m in enumerate(mats)]
    with pytest.raises(SingularMatrixError, match=r"batch member 1|singular"):
        L.solve(mats, bs, execution="cuda")
    good = [regular(1), regular(3)]
    for a, b, x in zip(good, [bs[0], bs[2]], L.solve(good, [bs[0], bs[2]], execution="cuda")):
        np.testing.assert_allclose(x, reference(a, b), atol=1e-10)


# ------------------------------------------------------------------ 0 x 0 systems and bool values


def test_empty_system_on_the_gpu() -> None:
    x = L.solve(sp.csr_matrix((0, 0)), np.ones(0), execution="cuda")
    assert isinstance(x, np.ndarray) and x.shape == (0,) and x.dtype == np.float64
    x2 = L.solve(sp.csr_matrix((0, 0)), cp.ones((0, 2)), execution="cuda")
    assert isinstance(x2, cp.ndarray) and x2.shape == (0, 2)


def test_bool_values_are_refused_on_the_gpu() -> None:
    a = sp.csr_matrix(np.eye(4, dtype=bool))
    with pytest.raises(UnsupportedError, match="values of dtype bool are not supported"):
        L.solve(a, np.ones(4), execution="cuda")
    with pytest.raises(UnsupportedError, match="b values of dtype bool"):
        L.solve(csp.csr_matrix(sp.csr_matrix(np.eye(4))), cp.ones(4, dtype=bool))
    try:
        da = csp.csr_matrix(a)
    except Exception:  # this cupyx holds no bool matrices: nothing more to refuse
        return
    with pytest.raises(UnsupportedError, match="values of dtype bool are not supported"):
        L.solve(da, cp.ones(4))


# ------------------------------------------------------------------ damaged saved plans


def _gpu_plan(tmp_path: Path, a: Any) -> dict[str, Any]:
    path = tmp_path / "gpu_plan.json"
    with L.DirectSolver(a, np.ones(a.shape[0]), options={"matrix_type": "spd"}, execution="cuda") as s:
        s.plan()
        s.factorize()
        s.save_plan(path)
    return dict(json.loads(path.read_text()))


def _poisson2d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return sp.csr_matrix(sp.kron(sp.eye(m), t) + sp.kron(t, sp.eye(m)))


@pytest.mark.parametrize("damage", ["perm_repeats", "perm_out_of_range", "perm_short", "tree_length"])
def test_a_damaged_gpu_plan_is_planned_afresh(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ust.runtime.stateful import encode_array

    a = _poisson2d(8)
    n = a.shape[0]
    doc = _gpu_plan(tmp_path, a)
    bad = {
        "perm_repeats": {"permutation": encode_array(np.zeros(n, dtype=np.int32))},
        "perm_out_of_range": {"permutation": encode_array(np.arange(n, dtype=np.int32) + 1)},
        "perm_short": {"permutation": encode_array(np.arange(n - 1, dtype=np.int32))},
        "tree_length": {"nd_partition_tree": encode_array(np.ones(2, dtype=np.int32))},
    }[damage]
    doc["plan"].update(bad)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(doc))
    b = np.arange(float(n))
    with caplog.at_level(logging.WARNING, logger="ust"):
        s = L.DirectSolver.load_plan(path, a, b, options={"matrix_type": "spd"}, execution="cuda")
    assert "is damaged" in caplog.text and "planning afresh" in caplog.text
    with s:
        assert not s.plan().from_saved_plan
        s.factorize()
        np.testing.assert_allclose(s.solve(), reference(a, b), atol=1e-9)


def test_the_cudss_engine_refuses_a_bad_permutation() -> None:
    from ust.backends.cuda.cudss import CudssError

    a = _poisson2d(4)
    with L.DirectSolver(a, np.ones(16), execution="cuda") as s:
        for perm in (np.zeros(16, dtype=np.int32), np.arange(15, dtype=np.int32), np.arange(16) + 3):
            with pytest.raises(CudssError, match="not a permutation"):
                s._engine.inner.set_user_permutation(perm)  # the cuDSS adapter wraps the factorisation
        with pytest.raises(CudssError, match="2\\*\\*levels - 1"):
            s._engine.inner.set_user_partition_tree(np.ones(2, dtype=np.int32))
        np.testing.assert_allclose(s.execute(), reference(a, np.ones(16)), atol=1e-10)
