"""CSR <-> CSC on the CPU: SciPy's ``csr_tocsc`` kernel on ust's buffers (issue 18's per-call
cost) must give exactly SciPy's ``tocsc()`` / ``tocsr()`` buffers, index dtype and all."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.convert.scipy import compressed_transpose


def _canonical(shape: tuple[int, int], dtype: Any, itype: Any, seed: int = 0) -> sp.csr_array:
    a = sp.random_array(shape, density=0.2, format="csr", rng=seed).astype(dtype)
    a = sp.csr_array((a.data, a.indices.astype(itype), a.indptr.astype(itype)), shape=shape)
    a.sum_duplicates()
    return a


def _same(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    for g, w in ((got.indptr, want.indptr), (got.indices, want.indices), (got.data, want.data)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int8, np.uint16])
@pytest.mark.parametrize("shape", [(37, 53), (53, 37), (0, 4), (4, 0), (0, 0), (1, 1)])
def test_transpose_matches_scipy_exactly(shape: tuple[int, int], dtype: Any, itype: Any) -> None:
    a = _canonical(shape, dtype, itype)
    for src in (a, a.tocsc()):
        want = src.tocsc() if src.format == "csr" else src.tocsr()
        _same(compressed_transpose(src), want)
        got = ust.asarray(src).convert("CSC" if src.format == "csr" else "CSR")
        assert got.index_dtype == np.dtype(itype)
        _same(got.to_scipy(), want)


def test_csr_given_as_text_converts_like_the_library_format() -> None:
    a = _canonical((7, 11), np.float64, np.int32)
    csr_text = ust.format("(i, j) -> (i : dense, j : compressed)")
    t = ust.Tensor(a.shape, csr_text, a.data, pos={1: a.indptr}, crd={1: a.indices})
    np.testing.assert_array_equal(t.convert("CSC").todense(), a.toarray())
    np.testing.assert_array_equal(t.convert("CSC").convert(csr_text).todense(), a.toarray())
