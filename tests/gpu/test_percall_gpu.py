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
