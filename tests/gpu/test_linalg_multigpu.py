"""cuDSS MG mode (one process, two GPUs) against the single-GPU solution on a 3-D Poisson matrix.

Run on a 2-GPU machine: ``python -m pytest -q -p no:cacheprovider -m multigpu tests/gpu/test_linalg_multigpu.py``.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp
import ust.linalg as L

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

cupy = pytest.importorskip("cupy")


def poisson3d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    i = sp.eye(m)
    return sp.csr_matrix(sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t))


@pytest.mark.parametrize("matrix_type", ["general", "spd"])
def test_mg_matches_single_gpu(matrix_type: str, caplog: pytest.LogCaptureFixture) -> None:
    a = poisson3d(24)
    b = np.random.default_rng(0).standard_normal((a.shape[0], 2))
    b0 = b.copy()
    one = L.solve(a, b, execution="cuda:0", matrix_type=matrix_type)
    opts = {"devices": [0, 1], "matrix_type": matrix_type}
    with caplog.at_level(logging.INFO, logger="ust"), L.DirectSolver(a, b, options=opts) as s:
        s.plan()
        s.factorize()
        two = s.solve()
    text = caplog.text
    assert "MG mode over GPUs [0, 1]" in text and "per GPU" in text
    assert s.backward_error is not None and s.backward_error < 1e-12
    np.testing.assert_allclose(two, one, rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(b, b0)


def test_one_device_is_the_single_gpu_path(caplog: pytest.LogCaptureFixture) -> None:
    a = poisson3d(10)
    b = np.ones(a.shape[0])
    with caplog.at_level(logging.INFO, logger="ust"):
        x = L.solve(a, b, devices=[1])
    assert "MG mode" not in caplog.text
    np.testing.assert_allclose(a @ x, b, rtol=1e-9, atol=1e-9)


def test_mg_refactorize_and_new_rhs() -> None:
    a = poisson3d(16)
    n = a.shape[0]
    rng = np.random.default_rng(1)
    with L.DirectSolver(a, rng.standard_normal(n), options={"devices": [0, 1]}) as s:
        s.execute()
        a2 = sp.csr_matrix(a * 2.0)
        s.reset_operands(a=a2, b=np.ones(n))
        s.refactorize()
        x = s.solve()
    np.testing.assert_allclose(a2 @ x, np.ones(n), rtol=1e-9, atol=1e-9)


def test_device_out_of_range() -> None:
    from ust.runtime.errors import DeviceError

    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(DeviceError):
        L.DirectSolver(poisson3d(4), np.ones(64), options={"devices": [0, count]})
