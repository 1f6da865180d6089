"""GPU conversions: the same general path on CuPy arrays, cuSPARSE routes through cupyx,
cupyx/torch-CUDA interop; every result compared with the CPU (SciPy-checked) result."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust.formats as F
from tests.support import STANDARD_2D
from ust.convert import asarray
from ust.convert.routes import convert, explain_route

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

FORMATS_2D = [
    *STANDARD_2D,
    "(i, j) -> (i : loose_compressed, j : compressed)",
    "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))",
    "(i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense)",
]
FORMATS_3D = ["CSF", "COO3", "BatchedCSR", "Dense3", "(b, i, j) -> (b : batch, j : dense, i : compressed)"]


def _matrix(m: int = 12, n: int = 18, density: float = 0.2, seed: int = 0) -> sp.csr_array:
    return sp.random_array((m, n), density=density, rng=seed, format="csr")


def _host_buffers(t) -> dict[str, np.ndarray]:
    return {k: cp.asnumpy(v) if not isinstance(v, np.ndarray) else v for k, v in t.buffers().items()}


def _same(a, b, msg: str = "") -> None:
    ga, gb = _host_buffers(a), _host_buffers(b)
    assert set(ga) == set(gb), msg
    for k in ga:
        np.testing.assert_array_equal(ga[k], gb[k], err_msg=f"{msg} {k}")


@pytest.mark.parametrize("fmt", FORMATS_2D)
def test_intake_matches_cpu(fmt: str) -> None:
    A = _matrix()
    cpu = asarray(A, fmt)
    gpu = asarray(A, fmt, device="cuda")
    assert gpu.device.startswith("cuda")
    assert isinstance(gpu.values, cp.ndarray)
    _same(gpu, cpu, fmt)
    dense = gpu.todense()
    assert isinstance(dense, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(dense), A.toarray())


@pytest.mark.parametrize("src", FORMATS_2D)
def test_every_pair_matches_cpu(src: str) -> None:
    A = _matrix(seed=1)
    cpu = asarray(A, src)
    gpu = cpu.to("cuda")
    for dst in FORMATS_2D:
        c = cpu.convert(dst)
        g = gpu.convert(dst)
        assert g.format == F.format(dst)
        np.testing.assert_array_equal(cp.asnumpy(g.todense()), A.toarray(), err_msg=f"{src} -> {dst}")
        if F.format(dst).levels[-1].type.unique:
            _same(g, c, f"{src} -> {dst}")
        gen = convert(gpu, F.format(dst), route="general")
        np.testing.assert_array_equal(
            cp.asnumpy(gen.todense()), A.toarray(), err_msg=f"{src} -> {dst} general"
        )


def test_cusparse_routes_are_used() -> None:
    t = asarray(_matrix(), "CSR", device="cuda")
    assert "cupyx csr.tocsc" in explain_route(t, "CSC")
    assert "general path" in explain_route(t, "DCSC")


def test_duplicates_and_unsorted_on_gpu() -> None:
    row = np.array([2, 0, 2, 0, 1])
    col = np.array([1, 1, 1, 0, 2])
    vals = np.array([1.0, 2, 3, 0, 5])
    A = sp.coo_array((vals, (row, col)), shape=(3, 3))
    g = asarray(A, device="cuda")
    for dst in ("CSR", "CSC", "COO", "DCSC", "DIA"):
        c = asarray(A, dst)
        u = g.convert(dst)
        _same(u, c, dst)


@pytest.mark.parametrize("fmt", FORMATS_3D)
def test_3d_on_gpu(fmt: str) -> None:
    rng = np.random.default_rng(2)
    D = rng.integers(1, 9, size=(3, 4, 5)).astype(np.float64)
    D[rng.random(D.shape) < 0.6] = 0
    cpu = asarray(D, fmt)
    gpu = asarray(cp.asarray(D), fmt)
    _same(gpu, cpu, fmt)
    for g in FORMATS_3D:
        np.testing.assert_array_equal(cp.asnumpy(gpu.convert(g).todense()), D, err_msg=f"{fmt} -> {g}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_dtypes_on_gpu(dtype: type, itype: type) -> None:
    A = _matrix(seed=3).astype(dtype)
    g = asarray(A, "CSR", device="cuda", index_dtype=itype)
    assert g.index_dtype == itype and g.dtype == dtype
    for dst in ("CSC", "COO", "DCSC", "BSR[2,3]", "DIA"):
        u = g.convert(dst, index_dtype=itype)
        assert u.index_dtype == itype
        np.testing.assert_array_equal(cp.asnumpy(u.todense()), A.toarray())


def test_structured_prune_on_gpu() -> None:
    X = np.array([[1.0, -5, 2, 0, 0, 0, 0, 3], [0, 0, 0, 0, 4, 5, 6, 0]])
    c = asarray(X, "NM[2,4]", prune=True)
    g = asarray(cp.asarray(X), "NM[2,4]", prune=True)
    _same(g, c)


# ----------------------------------------------------------------------------- cupyx interop


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dia"])
def test_cupyx_zero_copy_intake(fmt: str) -> None:
    A = _matrix()
    G = getattr(csp, f"{fmt}_matrix")(A if fmt != "dia" else A.todia())
    t = asarray(G)
    assert t.values.data.ptr == G.data.data.ptr or fmt == "dia"
    np.testing.assert_array_equal(cp.asnumpy(t.todense()), A.toarray())
    back = t.to_cupyx()
    assert back.format == fmt
    np.testing.assert_array_equal(cp.asnumpy(back.toarray()), A.toarray())


def test_cupyx_noncanonical_labels() -> None:
    data = cp.asarray([2.0, 1, 4])
    G = csp.csr_matrix(
        (data, cp.asarray([2, 0, 1], dtype=np.int32), cp.asarray([0, 2, 2, 3], dtype=np.int32)), shape=(3, 3)
    )
    t = asarray(G)
    assert t.format == F.format("(i, j) -> (i : dense, j : compressed(nonordered))")
    c = t.convert("CSR")
    np.testing.assert_array_equal(cp.asnumpy(c.crd(1)), [0, 2, 1])


def test_to_cupyx_types() -> None:
    A = _matrix()
    for fmt, cls in (
        ("CSR", csp.csr_matrix),
        ("CSC", csp.csc_matrix),
        ("COO", csp.coo_matrix),
        ("DIA", csp.dia_matrix),
        ("DCSC", csp.csr_matrix),
    ):
        M = asarray(A, fmt).to_cupyx()
        assert isinstance(M, cls)
        assert M.indices.dtype == np.int32 if hasattr(M, "indices") else True
        np.testing.assert_array_equal(cp.asnumpy(M.toarray()), A.toarray())


def test_device_moves() -> None:
    A = _matrix()
    t = asarray(A, "DCSC")
    g = t.to("cuda")
    assert g.device == "cuda:0" and all(isinstance(v, cp.ndarray) for v in g.buffers().values())
    h = g.to("cpu")
    _same(h, t)
    np.testing.assert_array_equal(h.to_scipy().toarray(), A.toarray())


def test_torch_cuda_zero_copy() -> None:
    torch = pytest.importorskip("torch")
    A = _matrix()
    x = torch.tensor(A.toarray(), device="cuda").to_sparse_csr()
    t = asarray(x)
    assert t.device == "cuda:0"
    assert t.values.data.ptr == x.values().data_ptr()
    np.testing.assert_array_equal(cp.asnumpy(t.todense()), A.toarray())
    back = t.convert("CSC").to_torch()
    assert back.is_cuda and back.layout == torch.sparse_csc
    np.testing.assert_array_equal(back.to_dense().cpu().numpy(), A.toarray())


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64, np.bool_])
def test_segment_sum_is_exact(dtype: type) -> None:
    """Runs of one value come back bitwise, runs of two as one addition (CuPy's add.reduceat
    differences a cumsum and does neither)."""
    from ust.runtime import xp as _xp

    rng = np.random.default_rng(5)
    v = rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(1000)
    v = (v > 0) if dtype is np.bool_ else v.astype(dtype)
    lens = rng.integers(1, 3, 700)
    starts = np.cumsum(lens) - lens
    starts = starts[starts < v.shape[0]]
    ref = np.add.reduceat(v, starts, dtype=v.dtype)
    got = _xp.segment_sum(cp, cp.asarray(v), cp.asarray(starts))
    assert got.dtype == v.dtype
    np.testing.assert_array_equal(cp.asnumpy(got), ref)
    long = _xp.segment_sum(cp, cp.asarray(v), cp.asarray(np.array([0, 10, 500], dtype=np.int32)))
    ref_long = np.add.reduceat(v, [0, 10, 500], dtype=v.dtype)
    if np.dtype(dtype).kind in "fc":  # long runs: the addition order differs from NumPy's pairwise
        scale = float(np.abs(v).sum()) * (1e-5 if dtype is np.float32 else 1e-13)
        np.testing.assert_allclose(cp.asnumpy(long), ref_long, rtol=0, atol=scale)
    else:
        np.testing.assert_array_equal(cp.asnumpy(long), ref_long)


@pytest.mark.parametrize("dst", ["CSR", "CSC", "COO", "DCSC", "BSR[2,2]"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_dia_source_takes_the_direct_route(dst: str, dtype: type) -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(-2, 3, size=(4, 10)).astype(dtype)  # explicit zeros inside the matrix
    A = sp.dia_matrix((data, [3, -1, 0, -6]), shape=(8, 10))  # offsets unsorted, one partly outside
    cpu = asarray(A)
    gpu = cpu.to("cuda")
    assert "masked compaction" in explain_route(gpu, dst)
    g = gpu.convert(dst)
    _same(g, cpu.convert(dst), f"DIA -> {dst}")
    np.testing.assert_array_equal(cp.asnumpy(g.todense()), A.toarray())


def test_csc_to_column_major_coo_takes_the_twin_route() -> None:
    col_coo = "(i, j) -> (j : compressed(nonunique), i : singleton)"
    A = _matrix(seed=5)
    cpu = asarray(A, "CSC")
    gpu = cpu.to("cuda")
    assert "on the level coordinates" in explain_route(gpu, col_coo)
    g = gpu.convert(col_coo)
    _same(g, cpu.convert(col_coo), "CSC -> column-major COO")
    ref = A.tocsc().tocoo()  # scipy's csc.tocoo lists the entries column by column, as this format does
    np.testing.assert_array_equal(cp.asnumpy(g.crd(0)), ref.col)
    np.testing.assert_array_equal(cp.asnumpy(g.crd(1)), ref.row)


@pytest.mark.parametrize("shape", [(3 * (1 << 17) + 5,), (1001, 700)])
def test_large_transfers_are_staged_exactly(shape: tuple[int, ...]) -> None:
    from ust.runtime.spaces import PINNED_MIN_BYTES, ExecutionSpace, to_package

    x = np.random.default_rng(0).standard_normal(shape)
    assert x.nbytes >= PINNED_MIN_BYTES  # both directions take the pinned path
    before = x.copy()
    up = to_package(x, "cupy", ExecutionSpace("cuda", 0))
    assert up.nbytes == x.nbytes
    np.testing.assert_array_equal(cp.asnumpy(up.array), x)
    down = to_package(up.array, "numpy", ExecutionSpace("cpu"))
    np.testing.assert_array_equal(down.array, x)
    np.testing.assert_array_equal(x, before)  # the caller's array is untouched
    f = cp.asfortranarray(up.array.reshape(shape[0], -1))
    np.testing.assert_array_equal(
        to_package(f, "numpy", ExecutionSpace("cpu")).array, x.reshape(shape[0], -1)
    )
