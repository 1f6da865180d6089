"""The CUDA nnz-split kernels (balance="nnz") on the GPU against SciPy (issue 18).

The same matrices as tests/test_balance.py (skewed R-MAT, empty rows, one huge row, all
empty), every op and layout, int32 and int64 indices, real and complex values; the
planner's choice from the row lengths on a skewed matrix.  The sources compile in CI without
a GPU (tests/test_codegen_nvrtc.py::test_every_nnz_split_kernel_compiles).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_balance import DCSR_USER, FORMATS, MATRICES, _cast, one_huge_row, rmat

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

import ust  # noqa: E402
from ust.backends.cuda import kernels  # noqa: E402
from ust.codegen.emit_cuda import NNZ_CHUNK  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("UST_CACHE_DIR", str(tmp_path_factory.mktemp("ust-cache")))
    yield
    mp.undo()


_TOL = {
    "float32": (2e-5, 1e-5),
    "complex64": (2e-5, 1e-5),
    "float64": (1e-12, 1e-13),
    "complex128": (1e-12, 1e-13),
}


@pytest.mark.parametrize("matrix", sorted(MATRICES))
@pytest.mark.parametrize("fmt", FORMATS, ids=["csr", "dcsr"])
@pytest.mark.parametrize(
    ("dtype", "index"),
    [
        ("float64", "int32"),
        ("float64", "int64"),
        ("complex128", "int32"),
        ("float32", "int32"),
        ("complex64", "int64"),
    ],
)
def test_nnz_split_equals_scipy(matrix: str, fmt: str, dtype: str, index: str) -> None:
    a = _cast(MATRICES[matrix](), dtype, index)
    t = ust.asarray(a).convert(ust.format(fmt)).to("cuda")
    rng = np.random.default_rng(3)
    n, m = a.shape[1], a.shape[0]
    rtol, atol = _TOL[dtype]
    x = rng.random(n).astype(dtype)
    y = kernels.matmul_cuda(t, cp.asarray(x), balance="nnz")
    np.testing.assert_allclose(cp.asnumpy(y), a @ x, rtol=rtol, atol=atol)
    xs = rng.random((n, 5)).astype(dtype)
    c = rng.random((m, 5)).astype(dtype)
    for gx in (cp.asarray(xs), cp.asfortranarray(cp.asarray(xs))):
        y = kernels.matmul_cuda(t, gx, cp.asarray(c), alpha=2.0, beta=-0.5, balance="nnz")
        np.testing.assert_allclose(cp.asnumpy(y), 2.0 * (a @ xs) - 0.5 * c, rtol=rtol, atol=10 * atol)


def test_rows_longer_than_many_chunks() -> None:
    """A row of 20 warps' chunks and rows shorter than a lane step, side by side."""
    a = one_huge_row(20 * NNZ_CHUNK)
    t = ust.asarray(a).convert(ust.format(DCSR_USER)).to("cuda")
    x = np.random.default_rng(0).random(a.shape[1])
    y = kernels.matmul_cuda(t, cp.asarray(x), balance="nnz")
    np.testing.assert_allclose(cp.asnumpy(y), a @ x, rtol=1e-12, atol=1e-13)


def test_matmul_picks_the_nnz_split_on_skewed_rows_and_autotune_times_it() -> None:
    a = rmat(14)
    t = ust.asarray(a).convert(ust.format(DCSR_USER)).to("cuda")
    x = cp.asarray(np.random.default_rng(1).random(a.shape[1]))
    with ust.Matmul(t, x) as mm:
        mm.plan()
        assert mm.decision.route == "generated-cuda"
        assert mm.executor._kernel_balance("mv") == "nnz"
        np.testing.assert_allclose(cp.asnumpy(mm.execute()), a @ cp.asnumpy(x), rtol=1e-12)
        timings = mm.autotune(iterations=3)
        assert any(k.endswith(":nnz") for k in timings)
        np.testing.assert_allclose(cp.asnumpy(mm.execute()), a @ cp.asnumpy(x), rtol=1e-12)


def test_uniform_rows_keep_the_group_kernel() -> None:
    import scipy.sparse as sp

    a = sp.random(4096, 4096, density=0.004, format="csr", random_state=0)
    t = ust.asarray(a).convert(ust.format(DCSR_USER)).to("cuda")
    with ust.Matmul(t, cp.ones(4096)) as mm:
        mm.plan()
        assert mm.executor._kernel_balance("mv") == "none"
