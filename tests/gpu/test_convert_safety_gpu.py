"""GPU side of tests/test_convert_safety.py: the same refusals and O(nnz) conversions on CuPy
arrays (the convert code is written once against ``xp``), compared with the CPU results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from tests.support import STANDARD_2D
from ust.convert import asarray
from ust.runtime.errors import ShapeError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

HYPERSPARSE_2D = ["COO", "DCSR", "DCSC"]
EXTENT_2D = [f for f in STANDARD_2D if f not in HYPERSPARSE_2D]
W = 6 * 2**31
N = 3 * 2**40  # divisible by every block size of the table
_BY_ROWS = {"CSC", "BSC[2,2]"}
_MiB = 1 << 20


def _wide(fmt: str) -> Any:
    r = np.array([0, 1], dtype=np.int64)
    c = np.array([0, W - 1], dtype=np.int64)
    if fmt in _BY_ROWS:
        return sp.coo_array((np.array([1.0, 2.0]), (c, r)), shape=(W, 2))
    return sp.coo_array((np.array([1.0, 2.0]), (r, c)), shape=(2, W))


def _hyper(n: int = N) -> Any:
    r = np.array([5, n // 2, 5, 7, n - 1, 0, n // 3, 7, n // 2, 3], dtype=np.int64)
    c = np.array([3, 1, 3, n - 1, 0, n // 5, 2, 8, n // 7, n - 2], dtype=np.int64)
    return sp.coo_array((np.arange(1.0, 11.0), (r, c)), shape=(n, n))


def _host(t: Any) -> dict[str, np.ndarray]:
    return {k: cp.asnumpy(v) for k, v in t.buffers().items()}


def _same(gpu: Any, cpu: Any) -> None:
    g, c = _host(gpu), {k: np.asarray(v) for k, v in cpu.buffers().items()}
    assert set(g) == set(c)
    for k in g:
        np.testing.assert_array_equal(g[k], c[k], err_msg=k)
        assert g[k].dtype == c[k].dtype, k


def _pool_bytes_during(fn: Any) -> tuple[Any, int]:
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    before = pool.total_bytes()
    out = fn()
    cp.cuda.Device().synchronize()
    return out, pool.total_bytes() - before  # freed blocks stay cached: about the peak


@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_int32_that_cannot_hold_the_result_is_refused(fmt: str) -> None:
    g = asarray(_wide(fmt), device="cuda")  # a ust COO on the GPU (int64)
    assert g.device.startswith("cuda")
    with pytest.raises(ShapeError, match="int64"):
        g.convert(fmt, index_dtype=np.int32)
    with pytest.raises(ShapeError, match="int64"):
        asarray(_wide(fmt), fmt, index_dtype=np.int32, device="cuda")


@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_targets_convert_in_o_nnz(fmt: str) -> None:
    A = _hyper()
    cpu = asarray(A, fmt)
    src = asarray(A, device="cuda")
    gpu, used = _pool_bytes_during(lambda: src.convert(fmt))
    assert used < 64 * _MiB, used
    _same(gpu, cpu)
    # from the GPU tensor's own layouts, and through .T
    for other in HYPERSPARSE_2D:
        _same(gpu.convert(other), cpu.convert(other))
    _same(gpu.T.convert("COO"), cpu.T.convert("COO"))


@pytest.mark.parametrize("fmt", EXTENT_2D)
def test_extent_sized_targets_refuse_with_the_bytes(fmt: str) -> None:
    g = asarray(_hyper(), device="cuda")
    with pytest.raises(ShapeError, match="bytes") as info:
        g.convert(fmt)
    assert "GPU memory" in str(info.value) and "DCSR" in str(info.value)


@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_matmul_and_dense_refuse(fmt: str) -> None:
    g = asarray(_hyper(), fmt, device="cuda")
    with pytest.raises(ShapeError, match="bytes"):
        g @ g
    with pytest.raises(ShapeError, match="bytes"):
        g.todense()


@pytest.mark.parametrize("fmt", HYPERSPARSE_2D)
def test_hypersparse_2_26_takes_no_per_row_memory(fmt: str) -> None:
    A = _hyper(2**26)
    src = asarray(A, device="cuda")
    gpu, used = _pool_bytes_during(lambda: src.convert(fmt))
    assert used < 64 * _MiB, used  # 2**26 rows of int64 would be 512 MiB
    _same(gpu, asarray(A, fmt))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_default_index_dtype_is_the_sources(fmt: str, itype: Any) -> None:
    A = sp.random_array((12, 18), density=0.3, rng=0, format="csr")
    A.indices = A.indices.astype(itype)
    A.indptr = A.indptr.astype(itype)
    g = asarray(A, fmt, device="cuda")
    assert g.index_dtype == np.dtype(itype)
    _same(g, asarray(A, fmt))
    for other in ("CSR", "CSC", "COO", "DCSR"):  # cuSPARSE routes included
        assert g.convert(other).index_dtype == np.dtype(itype)


@pytest.mark.parametrize("fmt", STANDARD_2D)
def test_cupyx_and_dense_sources(fmt: str) -> None:
    A = sp.random_array((12, 18), density=0.3, rng=1, format="csr")
    G = csp.csr_matrix(A)  # cupyx holds int32 indices
    g = asarray(G, fmt)
    assert g.index_dtype == np.int32
    _same(g, asarray(A.astype(np.float64), fmt))
    assert asarray(G, fmt, index_dtype=np.int64).index_dtype == np.int64
    d = asarray(cp.asarray(A.toarray()), fmt)
    assert d.index_dtype == np.int32
    np.testing.assert_array_equal(cp.asnumpy(d.todense()), A.toarray())
