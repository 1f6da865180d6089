"""The trusted cupyx intake (issue 18, per-call cost): one device reduction and one transfer for a
csr/csc, the caller's own buffers, and every hostile object still turned into ust's error by
the checked path it falls back to."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

import ust  # noqa: E402
from ust.convert import cupyx as cx  # noqa: E402
from ust.runtime.errors import ShapeError, UstError  # noqa: E402


def _gpu(kind: str, itype: type = np.int32) -> tuple[sp.csr_array, object]:
    A = sp.random_array((60, 45), density=0.1, format="csr", rng=0)
    A = A if kind == "csr" else A.tocsc()
    cls = csp.csr_matrix if kind == "csr" else csp.csc_matrix
    G = cls(
        (cp.asarray(A.data), cp.asarray(A.indices.astype(itype)), cp.asarray(A.indptr.astype(itype))),
        shape=A.shape,
    )
    return A, G


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_trusted_intake_shares_the_buffers(kind: str, itype: type) -> None:
    A, G = _gpu(kind, itype)
    t = cx._trusted_compressed(G, tuple(G.shape))
    assert t is not None and t.format == ust.format(kind.upper())
    assert t.pos(1) is G.indptr and t.crd(1) is G.indices and t.values is G.data
    u = ust.asarray(G)
    assert u.values.data.ptr == G.data.data.ptr
    np.testing.assert_array_equal(cp.asnumpy(u.todense()), A.toarray())
    x = cp.asarray(np.random.default_rng(0).random(A.shape[1]))
    np.testing.assert_allclose(cp.asnumpy(ust.matmul(u, x)), A @ cp.asnumpy(x), rtol=1e-12)


def test_out_of_range_index_falls_back_and_fails_as_usts_error() -> None:
    _, G = _gpu("csr")
    G.indices[3] = 10_000
    assert cx._trusted_compressed(G, tuple(G.shape)) is None
    with pytest.raises(ShapeError):
        ust.asarray(G)


def test_negative_index_and_bad_indptr_fall_back() -> None:
    _, G = _gpu("csr")
    G.indices[0] = -1
    assert cx._trusted_compressed(G, tuple(G.shape)) is None
    with pytest.raises(UstError):
        ust.asarray(G)
    _, H = _gpu("csr")
    H.indptr[5] = H.indptr[6] + 1  # decreasing
    assert cx._trusted_compressed(H, tuple(H.shape)) is None
    with pytest.raises(UstError):
        ust.asarray(H)


def test_unsorted_rows_keep_the_checked_label() -> None:
    G = csp.csr_matrix(
        (
            cp.asarray([2.0, 1, 4]),
            cp.asarray([2, 0, 1], dtype=np.int32),
            cp.asarray([0, 2, 2, 3], dtype=np.int32),
        ),
        shape=(3, 3),
    )
    t = ust.asarray(G)
    assert t.format == ust.format("(i, j) -> (i : dense, j : compressed(nonordered))")


def test_one_shot_add_on_the_gpu_matches_cupy() -> None:
    A, G = _gpu("csr")
    B, H = _gpu("csr")
    s = ust.ops.add(G, H)
    np.testing.assert_allclose(cp.asnumpy(s.todense()), (A + B).toarray(), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("kind", ["csr", "csc"])
@pytest.mark.parametrize("shape", [(60, 45), (1, 7), (5, 0), (0, 0)])
def test_csr_csc_transpose_on_the_buffers_is_exact(
    monkeypatch: pytest.MonkeyPatch, kind: str, dtype: type, shape: tuple[int, int]
) -> None:
    """CSR <-> CSC on the GPU runs on the tensor's buffers (ust's bitmap kernels or cuSPARSE, no cupyx object):
    the same buffers as SciPy's conversion, for every value dtype and edge shape."""
    from ust.convert import cupyx as cxmod

    rng = np.random.default_rng(3)
    A = sp.random_array(shape, density=0.2, format=kind, rng=rng).astype(dtype)
    if np.dtype(dtype).kind == "c":
        A = A * (1 + 2j)
    A.sum_duplicates()
    t = ust.asarray(A).to("cuda")
    other = "CSC" if kind == "csr" else "CSR"
    direct = cxmod.transpose_tensor(t, ust.format(other))
    if t.pos(1).dtype == np.int32:
        assert direct is not None

        def no_cupyx(*args: object, **kwargs: object) -> None:
            raise AssertionError("the conversion built a cupyx matrix")

        monkeypatch.setattr(cxmod, "to_cupyx", no_cupyx)  # convert() must take the direct kernel
    got = t.convert(other)
    want = A.tocsc() if kind == "csr" else A.tocsr()
    np.testing.assert_array_equal(cp.asnumpy(got.pos(1)), want.indptr)
    np.testing.assert_array_equal(cp.asnumpy(got.crd(1)), want.indices)
    np.testing.assert_array_equal(cp.asnumpy(got.values), want.data)
    assert got.format == ust.format(other)


def test_int64_indices_take_cupyx_method() -> None:
    from ust.convert import cupyx as cxmod

    A = sp.random_array((30, 20), density=0.2, format="csr", rng=4)
    t = ust.asarray(A, index_dtype=np.int64).to("cuda")
    assert cxmod.transpose_tensor(t, ust.format("CSC")) is None
    np.testing.assert_array_equal(cp.asnumpy(t.convert("CSC").todense()), A.toarray())


def test_library_routes_reuse_the_callers_cupyx_matrix_after_its_checks() -> None:
    """A library route (cupyx's add) gets the caller's own matrix back, not a new one around the
    same buffers -- only once the owed checks passed, and never for a tensor whose buffers changed."""
    from ust.convert import cupyx as cxmod

    A, G = _gpu("csr")
    assert G.has_canonical_format  # cached: the deferred intake
    t = ust.asarray(G)
    assert cxmod.to_cupyx(t, reuse_source=True) is G
    assert cxmod.to_cupyx(t) is not G  # the public conversion builds its own object
    assert cxmod.to_cupyx(t.astype(np.float32), reuse_source=True) is not G
    B, H = _gpu("csr")
    before = (G.data.copy(), G.indices.copy(), G.indptr.copy())
    s = ust.ops.add(G, H)
    np.testing.assert_allclose(cp.asnumpy(s.todense()), (A + B).toarray(), rtol=1e-12)
    for x, y in zip(before, (G.data, G.indices, G.indptr), strict=True):
        cp.testing.assert_array_equal(x, y)  # the caller's matrix is not modified
    G.indices[0] = 10_000  # spoiled after cupyx cached its flags
    bad = ust.asarray(G)
    with pytest.raises(ShapeError):
        cxmod.to_cupyx(bad, reuse_source=True)
