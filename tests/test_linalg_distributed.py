"""CPU side of the distributed solver routes: device lists, row blocks, the MG memory report."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import ust.linalg as L
from hypothesis import given
from hypothesis import strategies as st

import ust.api.linalg_distributed as D
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    InvalidValueError,
    ShapeError,
    UnsupportedError,
)


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ust.runtime.xp.gpu_available", lambda: False)


# ------------------------------------------------------------------ device lists


@pytest.mark.parametrize(
    ("given_", "want"),
    [([0], (0,)), ([1, 0], (1, 0)), ((0, 1, 2, 3), (0, 1, 2, 3)), (np.array([2, 5]), (2, 5))],
)
def test_parse_devices_accepts(given_: object, want: tuple[int, ...]) -> None:
    assert D.parse_devices(given_) == want


@pytest.mark.parametrize("bad", [[], [0, 0], [-1], [0.5], ["0"], [True], "01", 3, None, [0, 1, 0]])
def test_parse_devices_refuses(bad: object) -> None:
    with pytest.raises(InvalidValueError):
        D.parse_devices(bad)


def test_parse_devices_against_available() -> None:
    assert D.parse_devices([0, 1], available=2) == (0, 1)
    with pytest.raises(DeviceError, match="sees 2 CUDA"):
        D.parse_devices([0, 2], available=2)


def test_options_validate_devices() -> None:
    assert L.DirectSolverOptions(devices=[1, 0]).devices == (1, 0)
    assert L.DirectSolverOptions.coerce({"devices": [0]}).devices == (0,)
    assert L.DirectSolverOptions().devices is None
    for bad in ([0, 0], [-2], [], "0"):
        with pytest.raises(InvalidValueError):
            L.DirectSolverOptions.coerce({"devices": bad})


@pytest.mark.parametrize(("execution", "want"), [(None, "cuda:1"), ("cuda", "cuda:1"), ("cuda:1", "cuda:1")])
def test_devices_execution(execution: object, want: str) -> None:
    assert D.devices_execution((1, 0), execution) == want
    assert D.devices_execution(None, execution) == execution


@pytest.mark.parametrize("execution", ["cpu", "cuda:0"])
def test_devices_execution_conflict(execution: str) -> None:
    with pytest.raises(InvalidValueError, match="first listed"):
        D.devices_execution((1, 0), execution)


def test_solver_devices_without_gpu_is_a_device_error() -> None:
    a = sp.csr_matrix(sp.eye(4) * 2.0)
    b = np.ones(4)
    # no CuPy: the error naming the pip extra; CuPy without a device: DeviceError
    with pytest.raises((UnsupportedError, BackendUnavailableError) if _no_cupy() else DeviceError):
        L.DirectSolver(a, b, options={"devices": [0, 1]})
    with pytest.raises(InvalidValueError):
        L.DirectSolver(a, b, options={"devices": [0, 1]}, execution="cpu")
    with pytest.raises(InvalidValueError):
        L.solve(a, b, devices=[1, 1])
    assert b.tolist() == [1.0] * 4


def _no_cupy() -> bool:
    try:
        import cupy  # noqa: F401
    except Exception:
        return True
    return False


def test_batch_refuses_several_devices() -> None:
    a = sp.csr_matrix(sp.eye(3))
    with pytest.raises(UnsupportedError, match="one GPU"):
        L.solve([a, a], [np.ones(3), np.ones(3)], devices=[0, 1])


# ------------------------------------------------------------------ row blocks


def random_csr(n: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=min(1.0, 3.0 / max(n, 1)), random_state=rng, format="csr")
    if n > 2:  # a few heavy rows so that nnz balancing differs from row balancing
        a = a + sp.csr_matrix((np.ones(n), (np.full(n, n // 2), np.arange(n))), shape=(n, n))
    return sp.csr_matrix(a + sp.eye(n))


@given(
    n=st.integers(1, 60), nranks=st.integers(1, 9), seed=st.integers(0, 5), balance=st.sampled_from(D.BALANCE)
)
def test_split_merge_round_trip(n: int, nranks: int, seed: int, balance: str) -> None:
    a = random_csr(n, seed)
    before = [x.copy() for x in (a.indptr, a.indices, a.data)]
    off = D.row_offsets(a.indptr, nranks, balance)
    assert off[0] == 0 and off[-1] == n and off.size == nranks + 1 and np.all(np.diff(off) >= 0)
    blocks = D.split_csr(a.indptr, a.indices, a.data, off)
    for blk in blocks:  # each block is exactly SciPy's row slice
        ref = a[blk.first_row : blk.last_row + 1]
        assert blk.indptr[0] == 0
        np.testing.assert_array_equal(blk.indptr, ref.indptr)
        np.testing.assert_array_equal(blk.indices, ref.indices)
        np.testing.assert_array_equal(blk.data, ref.data)
        assert blk.nrows == ref.shape[0] and blk.nnz == ref.nnz
    ip, ix, va = D.merge_blocks(blocks)
    np.testing.assert_array_equal(ip, a.indptr)
    np.testing.assert_array_equal(ix, a.indices)
    np.testing.assert_array_equal(va, a.data)
    for x, y in zip(before, (a.indptr, a.indices, a.data)):
        np.testing.assert_array_equal(x, y)  # the caller's arrays are untouched
    np.testing.assert_array_equal(D.validate_row_ranges([(b.first_row, b.last_row) for b in blocks], n), off)
    x = np.random.default_rng(seed).standard_normal((n, 2))
    parts = D.split_rows(x, off)
    np.testing.assert_array_equal(D.gather_rows(parts, off), x)
    # a solution assembled from the blocks' products equals SciPy's product
    y = np.concatenate([sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.nrows, n)) @ x for b in blocks])
    np.testing.assert_allclose(y, a @ x, rtol=1e-13, atol=1e-13)


def test_nnz_balance_is_near_even() -> None:
    a = sp.csr_matrix(sp.random(2000, 2000, density=0.005, random_state=3) + sp.eye(2000))
    for k in (2, 3, 7):
        off = D.row_offsets(a.indptr, k, "nnz")
        per = np.diff(a.indptr[off])
        assert per.max() - per.min() <= a.getnnz(axis=1).max() + a.nnz // k // 20


def test_row_offsets_errors() -> None:
    ip = np.array([0, 1, 2])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidValueError):
            D.row_offsets(ip, bad)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError):
        D.row_offsets(ip, 2, "flops")
    with pytest.raises(ShapeError):
        D.row_offsets(np.zeros((2, 2)), 2)


@pytest.mark.parametrize(
    "ranges", [[(0, 3), (5, 9)], [(0, 5), (5, 9)], [(1, 9)], [(0, 4)], [(0, 4), (5, 10)], [(0, 9), (3, 1)]]
)
def test_validate_row_ranges_refuses(ranges: list[tuple[int, int]]) -> None:
    with pytest.raises(ShapeError):
        D.validate_row_ranges(ranges, 10)


def test_validate_row_ranges_empty_blocks() -> None:
    np.testing.assert_array_equal(D.validate_row_ranges([(0, -1), (0, 9), (10, 9)], 10), [0, 0, 10, 10])


def test_split_and_gather_errors() -> None:
    a = random_csr(10, 0)
    with pytest.raises(ShapeError):
        D.split_csr(a.indptr, a.indices, a.data, [0, 11])
    with pytest.raises(ShapeError):
        D.split_csr(a.indptr, a.indices[:-1], a.data, [0, 10])
    with pytest.raises(ShapeError):
        D.gather_rows([np.zeros(3), np.zeros(3)], [0, 5, 10])
    with pytest.raises(ShapeError):
        D.gather_rows([np.zeros(10)], [0, 5, 10])
    blocks = D.split_csr(a.indptr, a.indices, a.data, [0, 5, 10])
    with pytest.raises(ShapeError):
        D.merge_blocks(blocks[::-1])
    with pytest.raises(ShapeError):
        D.merge_blocks([])


# ------------------------------------------------------------------ MG memory report


def test_spread_report() -> None:
    gib = 2**30
    est = {"peak_device_memory": 10 * gib}
    ok = D.spread_report((0, 1), est, {0: 8 * gib, 1: 8 * gib}, hybrid=False)
    assert ok.fits and ok.per_device_bytes == 5 * gib and "GPUs [0, 1]" in ok.message
    short = D.spread_report((0, 1), est, {0: 8 * gib, 1: 4 * gib}, hybrid=False)
    assert not short.fits and "hybrid_memory=True" in short.message and "[1]" in short.message
    hyb = D.spread_report((0, 1), est, {0: 1, 1: 1}, hybrid=True)
    assert not hyb.fits and "hybrid host/device memory will hold" in hyb.message
    none = D.spread_report((0, 1), None, {0: gib, 1: gib}, hybrid=False)
    assert none.fits and "no memory estimate" in none.message


def test_mgmn_binding_tables() -> None:
    """The MG/MGMN enum values and comm-layer needs as read from the 0.8 / 1.0 headers and readelf."""
    mg = pytest.importorskip("ust.backends.cuda.cudss_mg")
    from ust.backends.cuda.cudss import ABIS

    for abi in ABIS.values():
        assert abi.config["device_count"][0] == mg.CONFIG_DEVICE_COUNT == 21
        assert abi.config["device_indices"][0] == mg.CONFIG_DEVICE_INDICES == 22
    assert mg.DATA_COMM == {"device": 11, "host": 12}
    assert mg.COMM_LAYERS["nccl"][1] == ("libnccl.so.2", "libmpi.so.40")
    assert mg.COMM_LAYERS["openmpi"][1] == ("libmpi.so.40",)
    assert set(mg.MG_SIGNATURES) >= {"cudssCreateMg", "cudssSetCommLayer", "cudssMatrixSetDistributionRow1d"}
