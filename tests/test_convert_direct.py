"""The direct CPU conversions (ust.convert.hypersparse) give the general path's buffers exactly."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.formats as F
from ust.convert import asarray
from ust.convert.routes import convert, explain_route

PAIRS = [("CSR", "DCSR"), ("DCSR", "CSR"), ("CSC", "DCSC"), ("DCSC", "CSC"), ("COO", "CSR")]


def _matrix(kind: str) -> sp.csr_array:
    rng = np.random.default_rng(7)
    if kind == "random":
        return sp.random_array((40, 30), density=0.15, rng=rng, format="csr")
    if kind == "hypersparse":  # most rows and columns empty
        return sp.random_array((200, 150), density=0.002, rng=rng, format="csr")
    if kind == "empty":  # every row empty
        return sp.csr_array((9, 7))
    if kind == "0xn":
        return sp.csr_array((0, 5))
    if kind == "nx0":
        return sp.csr_array((6, 0))
    if kind == "zeros":  # explicit zeros are entries on both paths
        M = sp.random_array((20, 25), density=0.2, rng=rng, format="csr")
        M.data[::3] = 0.0
        return M
    raise AssertionError(kind)


KINDS = ["random", "hypersparse", "empty", "0xn", "nx0", "zeros"]


def _source(kind: str, src: str, itype: type, dtype: type = np.float64) -> ust.Tensor:
    t = asarray(_matrix(kind)).astype(dtype)
    return convert(t, F.get(src), route="general", index_dtype=itype)


def _assert_same(a: ust.Tensor, b: ust.Tensor, what: str) -> None:
    assert a.format == b.format and a.shape == b.shape and a.index_dtype == b.index_dtype, what
    ga, gb = a.buffers(), b.buffers()
    assert set(ga) == set(gb), what
    for k in ga:
        assert ga[k].dtype == gb[k].dtype, f"{what} {k}"
        assert np.array_equal(ga[k], gb[k]), f"{what} {k}"


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_direct_route_matches_general_path(src: str, dst: str, kind: str, itype: type) -> None:
    s = _source(kind, src, itype)
    assert s.index_dtype == np.dtype(itype)
    assert "direct route" in explain_route(s, dst)
    got = s.convert(dst)
    want = convert(s, F.get(dst), route="general")
    _assert_same(got, want, f"{kind} {src}->{dst} {np.dtype(itype)}")
    np.testing.assert_array_equal(got.todense(), _matrix(kind).toarray())


@pytest.mark.parametrize(("src", "dst"), PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int64, np.uint8])
def test_direct_route_value_dtypes(src: str, dst: str, dtype: type) -> None:
    s = _source("random", src, np.int32, dtype)
    got = s.convert(dst)
    _assert_same(got, convert(s, F.get(dst), route="general"), f"{src}->{dst} {np.dtype(dtype)}")


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_direct_route_asked_index_dtype(src: str, dst: str) -> None:
    s = _source("random", src, np.int32)
    for itype in (np.int32, np.int64):
        got = s.convert(dst, index_dtype=itype)
        assert got.index_dtype == np.dtype(itype)
        _assert_same(got, convert(s, F.get(dst), route="general", index_dtype=itype), f"{src}->{dst}")


def test_explain_names_the_direct_route() -> None:
    t = asarray(_matrix("hypersparse"))
    text = ust.explain("convert", t, "DCSR")
    assert "route: direct" in text and "CSR -> DCSR" in text
    assert "route: direct" in ust.explain("convert", t.convert("CSC"), "DCSC")
    d = t.convert("DCSR")
    assert "route: direct" in ust.explain("convert", d, "CSR")
    assert "COO -> CSR" in explain_route(t.convert("COO"), "CSR")
    # pairs without a direct route keep theirs
    assert "general path" in explain_route(t, "DCSC")
    assert "scipy csr.tocsc" in explain_route(t, "CSC")


def test_direct_routes_share_entries_like_tocoo() -> None:
    """CSR <-> DCSR keep the source's crd1 and values, as the CSR -> COO library route does."""
    t = asarray(_matrix("hypersparse"))
    d = t.convert("DCSR")
    assert np.shares_memory(d.values, t.values) and np.shares_memory(d.crd(1), t.crd(1))
    c = d.convert("CSR")
    assert np.shares_memory(c.values, d.values)
    assert not np.shares_memory(c.pos(1), d.pos(1))
    coo = t.convert("COO")
    r = coo.convert("CSR")
    assert np.shares_memory(r.values, coo.values) and np.shares_memory(r.crd(1), coo.crd(1))


def test_coo_rows_outside_the_shape_are_refused() -> None:
    """A tensor built with check=False and rows past the shape: an error, never a wild write."""
    rows = np.array([0, 1, 9], dtype=np.int32)
    cols = np.array([0, 1, 2], dtype=np.int32)
    t = ust.Tensor(
        (3, 3),
        "COO",
        np.ones(3),
        pos={0: np.array([0, 3], dtype=np.int32)},
        crd={0: rows, 1: cols},
        check=False,
    )
    with pytest.raises(ust.ShapeError):
        t.convert("CSR")
