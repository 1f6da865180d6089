"""The conversion / storage half of Tensor's scipy.sparse surface on CuPy buffers:
``toarray``, ``asformat`` / ``tocsr`` ..., ``data``, ``size``, ``nbytes``,
``has_canonical_format`` and ``_repr_html_``, compared with cupyx where cupyx has the
operation and with the CPU (SciPy-checked, tests/test_surface_convert.py) result otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.runtime.errors import DeviceError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

SCIPY = ["csr", "csc", "coo", "bsr", "dia"]
USER = ["DCSR", "(i, j) -> (i : dense, j : loose_compressed)"]


def _matrix() -> sp.csr_array:
    A = sp.random_array((6, 8), density=0.35, rng=0, format="csr")
    A.data[::3] = 0.0  # explicit zeros
    return A


def _host(t: ust.Tensor) -> dict[str, np.ndarray]:
    return {k: cp.asnumpy(v) for k, v in t.buffers().items()}


def _same(gpu: ust.Tensor, cpu: ust.Tensor) -> None:
    assert gpu.device.startswith("cuda")
    assert gpu.format == cpu.format
    g, c = _host(gpu), cpu.buffers()
    assert set(g) == set(c)
    for k in g:
        np.testing.assert_array_equal(g[k], c[k], err_msg=k)


def _pair(name: str) -> tuple[ust.Tensor, ust.Tensor]:
    A = _matrix()
    if name in SCIPY:
        S = A.tobsr((2, 2)) if name == "bsr" else A.asformat(name)
        cpu = ust.asarray(S)
    else:
        cpu = ust.asarray(A, name)
    return cpu.to("cuda"), cpu


@pytest.mark.parametrize("name", SCIPY + USER)
def test_toarray_on_the_gpu(name: str) -> None:
    gpu, cpu = _pair(name)
    for order in (None, "C", "F"):
        got = gpu.toarray(order=order)
        want = cpu.toarray(order=order)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), want)
        assert got.flags.c_contiguous == want.flags.c_contiguous
        assert got.flags.f_contiguous == want.flags.f_contiguous
    out = cp.full(gpu.shape, 7.0)
    assert gpu.toarray(out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), cpu.toarray())
    with pytest.raises(DeviceError):
        gpu.toarray(out=np.zeros(gpu.shape))
    with pytest.raises(DeviceError):
        cpu.toarray(out=cp.zeros(cpu.shape))


@pytest.mark.parametrize("name", ["csr", "csc", "coo"])
def test_toarray_matches_cupyx(name: str) -> None:
    gpu, _ = _pair(name)
    X = gpu.to_cupyx()
    for order in ("C", "F"):
        np.testing.assert_array_equal(
            cp.asnumpy(gpu.toarray(order=order)), cp.asnumpy(X.toarray(order=order))
        )


@pytest.mark.parametrize("src", SCIPY + USER)
@pytest.mark.parametrize("dst", SCIPY)
def test_asformat_on_the_gpu(src: str, dst: str) -> None:
    gpu, cpu = _pair(src)
    kw = {"blocksize": (2, 2)} if dst == "bsr" else {}
    got = gpu.asformat(dst, **kw)
    _same(got, cpu.asformat(dst, **kw))
    if src == dst:
        assert got is gpu
    fresh = getattr(gpu, f"to{dst}")(copy=True, **kw)
    assert fresh is not gpu
    for a in fresh.buffers().values():
        for b in gpu.buffers().values():
            assert not cp.shares_memory(a, b)
    _same(fresh, cpu.asformat(dst, **kw))


@pytest.mark.parametrize("src", ["csr", "csc", "coo"])
@pytest.mark.parametrize("dst", ["csr", "csc", "coo"])
def test_asformat_matches_cupyx(src: str, dst: str) -> None:
    gpu, _ = _pair(src)
    got = gpu.asformat(dst)
    X = gpu.to_cupyx().asformat(dst)
    X.sum_duplicates()
    np.testing.assert_array_equal(cp.asnumpy(got.toarray()), cp.asnumpy(X.toarray()))
    if dst != "coo":  # canonical CSR / CSC buffers are unique (cupyx's COO order may differ)
        np.testing.assert_array_equal(cp.asnumpy(got.crd(1)), cp.asnumpy(X.indices))
        np.testing.assert_array_equal(cp.asnumpy(got.data), cp.asnumpy(X.data))


def test_tobsr_default_blocksize_on_the_gpu() -> None:
    pattern = sp.random_array((3, 3), density=0.5, rng=1, format="csr")
    A = sp.csr_array(sp.kron(pattern, np.ones((3, 3))))
    gpu = ust.asarray(A, device="cuda")
    assert gpu.tobsr().format == ust.formats.BSR(*A.tobsr().blocksize)


@pytest.mark.parametrize("name", SCIPY + USER)
def test_storage_facts_on_the_gpu(name: str) -> None:
    gpu, cpu = _pair(name)
    d = gpu.data
    assert isinstance(d, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(d), cpu.data)
    assert d.data.ptr == gpu.values.data.ptr  # a view, no copy
    assert gpu.size == cpu.size
    assert gpu.nbytes == cpu.nbytes
    # scipy's tobsr leaves block columns unsorted: a BSR made by it is not canonical, on both
    assert gpu.has_canonical_format is cpu.has_canonical_format is (name != "bsr")
    if name in ("csr", "csc", "coo"):
        assert gpu.size == gpu.to_cupyx().nnz


def test_has_canonical_format_on_the_gpu() -> None:
    row = np.array([1, 0, 1], dtype=np.int32)
    col = np.array([2, 0, 2], dtype=np.int32)
    S = sp.coo_array((np.ones(3), (row, col)), shape=(2, 3))
    gpu = ust.asarray(S, device="cuda")
    assert gpu.has_canonical_format is False
    X = csp.coo_matrix((cp.ones(3), (cp.asarray(row), cp.asarray(col))), shape=(2, 3))
    assert X.has_canonical_format is False
    fmt = "(i, j) -> (i : dense, j : compressed(nonordered))"
    pos, crd = cp.asarray([0, 2, 3], dtype=cp.int32), cp.asarray([0, 2, 1], dtype=cp.int32)
    assert ust.Tensor((2, 3), fmt, cp.ones(3), pos={1: pos}, crd={1: crd}).has_canonical_format is True
    crd2 = cp.asarray([2, 0, 1], dtype=cp.int32)
    assert ust.Tensor((2, 3), fmt, cp.ones(3), pos={1: pos}, crd={1: crd2}).has_canonical_format is False


@pytest.mark.parametrize("name", SCIPY + USER)
def test_repr_html_on_the_gpu(name: str) -> None:
    gpu, cpu = _pair(name)
    text = gpu._repr_html_()
    assert "cuda:" in text and "<svg" in text
    assert text.replace(gpu.device, "cpu") == cpu._repr_html_()


def test_no_implicit_numpy_array_of_a_gpu_tensor() -> None:
    gpu, _ = _pair("csr")
    with pytest.raises(DeviceError, match="to_scipy"):
        np.asarray(gpu)
