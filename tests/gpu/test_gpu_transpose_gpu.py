"""CSR <-> CSC on the GPU by ust's bitmap kernels (ust.convert.gpu_transpose) and by cuSPARSE.

Both routes must give SciPy's buffers exactly (rows in order inside each column, duplicates
kept in their order), for the checked and the deferred (unchecked cupyx) intake, at the edges
of a bitmap word and of the route's envelope; a spoiled intake raises on either route, and a
row that holds a column twice (cupyx's flags lying) is redone by cuSPARSE.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

import ust  # noqa: E402
from ust.convert import cupyx as cxmod  # noqa: E402
from ust.convert import gpu_transpose as gt  # noqa: E402
from ust.runtime.errors import FormatError, ShapeError  # noqa: E402

SHAPES = [(0, 0), (5, 0), (0, 4), (1, 7), (7, 1), (31, 9), (32, 40), (33, 33), (64, 3), (65, 130), (300, 200)]


def _host(
    shape: tuple[int, int], kind: str, dtype: Any = np.float64, seed: int = 0, density: float = 0.2
) -> Any:
    A = sp.random_array(shape, density=density, format=kind, rng=seed).astype(dtype)
    if np.dtype(dtype).kind == "c":
        A = A * (1 + 2j)
    A.sum_duplicates()
    return A


def _cupyx(H: Any) -> Any:
    cls = csp.csr_matrix if H.format == "csr" else csp.csc_matrix
    G = cls((cp.asarray(H.data), cp.asarray(H.indices), cp.asarray(H.indptr)), shape=H.shape)
    G._has_canonical_format = True  # cached as cupyx caches it: the deferred intake
    return G


def _same(got: Any, want: Any) -> None:
    np.testing.assert_array_equal(cp.asnumpy(got.pos(1)), want.indptr)
    np.testing.assert_array_equal(cp.asnumpy(got.crd(1)), want.indices)
    np.testing.assert_array_equal(cp.asnumpy(got.values), want.data)


def _other(kind: str) -> str:
    return "CSC" if kind == "csr" else "CSR"


def _want(H: Any) -> Any:
    return H.tocsc() if H.format == "csr" else H.tocsr()


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("kind", ["csr", "csc"])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_bitmap_route_gives_scipys_buffers(shape: tuple[int, int], kind: str, deferred: bool) -> None:
    H = _host(shape, kind)
    t = ust.asarray(_cupyx(H)) if deferred else ust.asarray(H).to("cuda")
    assert (t._compressed_level_unchecked() is not None) == deferred
    got = cxmod.transpose_tensor(t, ust.format(_other(kind)))
    assert got is not None
    assert (got._owed is not None) == deferred  # the answer is owed to the first read
    _same(got, _want(H))
    assert got._owed is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("library", [False, True])
def test_both_routes_agree_for_every_value_dtype(dtype: type, library: bool) -> None:
    H = _host((70, 90), "csr", dtype, seed=4)
    t = ust.asarray(_cupyx(H))
    got = cxmod.transpose_tensor(t, ust.format("CSC"), library=library)
    assert got is not None
    _same(got, H.tocsc())


def test_a_dense_matrix_at_the_envelope_is_exact() -> None:
    """Every bit of every word set (a full 256 x 512 matrix: the longest columns the route takes
    at this width), and a matrix just outside the envelope, which cuSPARSE takes."""
    H = sp.csr_array(np.arange(1, 256 * 512 + 1, dtype=np.float64).reshape(256, 512))
    assert gt.fits(256, 512, H.nnz)
    _same(ust.asarray(_cupyx(H)).convert("CSC"), H.tocsc())
    wide = _host((40, gt._MAX_COLUMNS + 1), "csr", density=0.001, seed=2)
    assert not gt.fits(40, wide.shape[1], wide.nnz)
    _same(ust.asarray(_cupyx(wide)).convert("CSC"), wide.tocsc())


def test_a_deferred_intake_outside_the_envelope_still_owes_the_checks() -> None:
    """The cuSPARSE route (sanitized copies) for a matrix too wide for the bitmaps: spoiled, it
    raises at every read; sound, it is exact."""
    H = _host((50, gt._MAX_COLUMNS + 7), "csr", density=0.002, seed=5)
    _same(ust.asarray(_cupyx(H)).convert("CSC"), H.tocsc())
    G = _cupyx(H)
    G.indices[3] = H.shape[1]
    out = ust.asarray(G).convert("CSC")
    for _ in range(2):
        with pytest.raises((ShapeError, FormatError)):
            out.pos(1)
    cp.cuda.Device().synchronize()


@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_a_row_holding_a_column_twice_is_redone_in_scipys_order(kind: str) -> None:
    """cupyx's flags say canonical but a row holds a column twice: the bitmap order cannot place
    both, so the result is redone by cuSPARSE, whose stable order is SciPy's (both kept)."""
    H = _host((20, 30), kind, seed=6)
    data = np.concatenate([H.data[:3], [5.0, 6.0], H.data[3:]])
    idx = np.concatenate([H.indices[:3], [H.indices[2], H.indices[2]], H.indices[3:]]).astype(np.int32)
    ptr = H.indptr.copy()
    row = int(np.searchsorted(ptr, 2, side="right")) - 1  # the line that holds entry 2
    ptr[row + 1 :] += 2
    cls = sp.csr_array if kind == "csr" else sp.csc_array
    D = cls((data, idx, ptr), shape=H.shape)
    G = _cupyx(D)
    out = ust.asarray(G).convert(_other(kind))
    assert out._owed is not None
    want = D.tocsc() if kind == "csr" else D.tocsr()
    assert want.nnz == H.nnz + 2
    _same(out, want)


def test_unsorted_rows_come_out_sorted_by_row() -> None:
    """A row's entries in any order (cupyx's sorted flag lying): each column still lists its rows
    in order, as SciPy's tocsc has it."""
    H = _host((40, 50), "csr", seed=7)
    idx = H.indices.copy()
    for r in range(H.shape[0]):
        lo, hi = H.indptr[r], H.indptr[r + 1]
        idx[lo:hi] = idx[lo:hi][::-1]
    U = sp.csr_array((H.data.copy(), idx, H.indptr.copy()), shape=H.shape)
    for r in range(H.shape[0]):
        lo, hi = H.indptr[r], H.indptr[r + 1]
        U.data[lo:hi] = H.data[lo:hi][::-1]
    _same(ust.asarray(_cupyx(U)).convert("CSC"), H.tocsc())


def test_the_kernels_flag_what_they_cannot_use() -> None:
    """The answer words of the kernels themselves: sound, an index outside, a decreasing indptr,
    a row holding a column twice, entries ending before the arrays."""
    H = _host((40, 60), "csr", seed=8)
    ptr, idx, data = (cp.asarray(a) for a in (H.indptr, H.indices, H.data))

    def answer(p: Any, i: Any) -> tuple[int, int]:
        run = gt.transpose_by_bitmaps(p, i, data[: i.shape[0]], 40, 60)
        assert run is not None
        return run.answer()

    assert answer(ptr, idx) == (0, H.nnz)
    bad = idx.copy()
    bad[5] = 60
    assert answer(ptr, bad)[0] & gt.BAD
    down = ptr.copy()
    down[3] = down[5]
    assert answer(down, idx)[0] & gt.BAD
    twice = idx.copy()
    lo = int(H.indptr[1])
    assert H.indptr[2] - lo >= 2
    twice[lo + 1] = twice[lo]
    assert answer(ptr, twice)[0] == gt.DUPLICATE
    short = ptr.copy()
    short[-1] -= 1
    short[-2] = min(int(short[-2]), int(short[-1]))
    flags, end = answer(short, idx)
    assert flags == 0 and end == H.nnz - 1


def test_strided_value_arrays_are_left_to_cusparse() -> None:
    H = _host((30, 30), "csr", seed=9)
    ptr, idx = cp.asarray(H.indptr), cp.asarray(H.indices)
    wide = cp.zeros(2 * H.nnz)
    wide[::2] = cp.asarray(H.data)
    assert gt.transpose_by_bitmaps(ptr, idx, wide[::2], 30, 30) is None
    assert gt.transpose_by_bitmaps(ptr, idx, cp.asarray(H.data), 30, 30) is not None
