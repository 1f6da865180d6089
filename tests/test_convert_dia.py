"""DIA -> CSR / CSC by masked compaction (ust.convert.dia), checked buffer for buffer against
scipy's dia.tocsr / dia.tocsc on NumPy; the GPU suite runs the same module on CuPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.convert.dia import dia_to_compressed, is_dia
from ust.convert.routes import explain_route
from ust.formats.library import get


def _dia(m: int, n: int, offsets: list[int], dtype: type = np.float64, seed: int = 0) -> sp.dia_matrix:
    rng = np.random.default_rng(seed)
    data = rng.integers(-2, 3, size=(len(offsets), max(n, 1))).astype(dtype)  # zeros included
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.integers(-1, 2, size=data.shape)
    return sp.dia_matrix((data[:, :n], np.asarray(offsets)), shape=(m, n))


CASES = [
    (4, 4, [0, -1, 2]),
    (5, 3, [-4, 0, 1, 2]),  # tall: an offset whose diagonal is partly outside
    (3, 7, [6, -2, 0, 3]),  # wide, offsets not sorted
    (1, 1, [0]),
    (6, 6, []),  # no diagonals
    (8, 5, [-7, 4]),  # only corner diagonals
]


@pytest.mark.parametrize(("m", "n", "offsets"), CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_matches_scipy_buffers(m: int, n: int, offsets: list[int], dtype: type) -> None:
    A = _dia(m, n, offsets, dtype, seed=m * 7 + n)
    t = ust.asarray(A)
    before = t.values.copy()
    for name, by_column, ref in (("CSR", False, A.tocsr()), ("CSC", True, A.tocsc())):
        ref.sort_indices()
        ref.eliminate_zeros()
        c = dia_to_compressed(t, get(name), by_column)
        assert c.format == get(name)
        np.testing.assert_array_equal(c.pos(1), ref.indptr, err_msg=name)
        np.testing.assert_array_equal(c.crd(1), ref.indices, err_msg=name)
        np.testing.assert_array_equal(c.values, ref.data, err_msg=name)
        assert c.values.dtype == np.dtype(dtype)
        assert c.index_dtype == np.int32
        np.testing.assert_array_equal(c.todense(), A.toarray())
    np.testing.assert_array_equal(t.values, before)  # the source is never modified


def test_all_zero_diagonal_gives_empty_rows() -> None:
    A = sp.dia_matrix((np.zeros((2, 5)), [0, 1]), shape=(5, 5))
    c = dia_to_compressed(ust.asarray(A), get("CSR"), False)
    assert c.nse == 0
    np.testing.assert_array_equal(c.pos(1), np.zeros(6, dtype=np.int32))


def test_is_dia_only_for_dia_layouts() -> None:
    assert is_dia(get("DIA"))
    assert not is_dia(get("CSR"))
    assert not is_dia(get("BSR[2,2]"))


def test_cpu_keeps_scipy_route() -> None:
    t = ust.asarray(_dia(6, 6, [0, 1]))
    assert "masked compaction" not in explain_route(t, "CSC")
