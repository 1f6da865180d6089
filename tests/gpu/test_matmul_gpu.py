"""ust.matmul / ust.Matmul on the GPU: cuSPARSE routes (CSR, CSC, COO, BSR), generated CUDA
routes, execution spaces, autotune and saved plans, compared with SciPy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ust

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")


def _matrix(m: int = 64, n: int = 48, seed: int = 0, dtype: str = "float64") -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = sp.random_array((m, n), density=0.2, format="csr", rng=rng)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * sp.random_array((m, n), density=0.2, format="csr", rng=rng)
    return sp.csr_array(a.astype(dtype))


@pytest.mark.parametrize("fmt", ["CSR", "CSC", "COO", "BSR[2,2]", "BSR[4,4]"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("k", [None, 1, 8])
def test_cusparse_routes_match_scipy(fmt: str, dtype: str, k: int | None) -> None:
    a = _matrix(dtype=dtype)
    t = ust.asarray(a, format=fmt, device="cuda")
    rng = np.random.default_rng(1)
    x = rng.standard_normal(48 if k is None else (48, k)).astype(dtype)
    c = rng.standard_normal(64 if k is None else (64, k)).astype(dtype)
    # Forced: the cost model sends BSR to the generated kernel once the padded blocks are enough work.
    mm = ust.Matmul(t, cp.asarray(x), cp.asarray(c), alpha=1.5, beta=-0.5, options={"route": "cusparse"})
    assert mm.decision.route == "cusparse", mm.explain()
    mm.plan()
    y = mm.execute()
    assert isinstance(y, cp.ndarray)
    tol = 1e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(cp.asnumpy(y), 1.5 * (a @ x) - 0.5 * c, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "fmt",
    [
        "DIA",
        "DCSR",
        "BSR[2,3]",
        "CROW",
        "(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)",
    ],
)
@pytest.mark.parametrize("k", [None, 8])
def test_generated_routes_match_scipy(fmt: str, k: int | None) -> None:
    a = _matrix(m=60, n=48)
    t = ust.asarray(a, format=fmt, device="cuda", max_padding=10**7)
    x = np.random.default_rng(2).standard_normal(48 if k is None else (48, k))
    mm = ust.Matmul(t, cp.asarray(x))
    assert mm.decision.route == "generated-cuda", mm.explain()
    mm.plan()
    np.testing.assert_allclose(cp.asnumpy(mm.execute()), a @ x, rtol=1e-11, atol=1e-11)


def test_numpy_operands_with_cuda_execution_come_back_as_numpy() -> None:
    a = _matrix()
    x = np.ones(48)
    y = ust.matmul(a, x, execution="cuda")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, a @ x, rtol=1e-12)
    assert "execution space: cuda device 0" in ust.Matmul(a, x, execution="cuda").explain()


def test_cupy_operands_with_cpu_execution_come_back_as_cupy() -> None:
    a = _matrix()
    y = ust.matmul(ust.asarray(a, device="cuda"), cp.ones(48), execution="cpu")
    assert isinstance(y, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(y), a @ np.ones(48), rtol=1e-12)


def test_mixed_devices_without_execution_is_an_error() -> None:
    with pytest.raises(ust.DeviceError, match="different devices"):
        ust.matmul(_matrix(), cp.ones(48))


def test_autotune_and_saved_plan_in_a_fresh_process(tmp_path) -> None:
    a = _matrix(m=512, n=512)
    sp.save_npz(tmp_path / "a.npz", a)
    t = ust.asarray(a, device="cuda")
    mm = ust.Matmul(t, cp.ones(512))
    mm.plan()
    timings = mm.autotune(iterations=3)
    assert any(k.startswith("cusparse") for k in timings)
    np.testing.assert_allclose(cp.asnumpy(mm.execute()), a @ np.ones(512), rtol=1e-12)
    path = tmp_path / "plan.json"
    mm.save_plan(path)
    code = (
        "import cupy as cp, numpy as np, scipy.sparse as sp, ust\n"
        f"a = sp.load_npz({str(tmp_path / 'a.npz')!r})\n"
        f"mm = ust.Matmul.load_plan({str(path)!r}, ust.asarray(a, device='cuda'), cp.ones(512))\n"
        "print(mm.decision.route, mm.variant, float(np.abs(cp.asnumpy(mm.execute()) - a @ np.ones(512)).max()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == mm.decision.route and float(out[-1]) < 1e-10


def test_reset_operands_on_gpu() -> None:
    a = _matrix()
    mm = ust.Matmul(ust.asarray(a, device="cuda"), cp.ones(48))
    mm.plan()
    x2 = cp.arange(48, dtype=cp.float64)
    mm.reset_operands(b=x2)
    np.testing.assert_allclose(cp.asnumpy(mm.execute()), a @ np.arange(48.0), rtol=1e-12)
