"""Conversions: exact buffers of every standard format against SciPy / NumPy, routes, errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp

import ust.formats as F
from tests.support import STANDARD_2D
from ust.convert import asarray
from ust.convert.routes import convert, explain_route
from ust.runtime.errors import FormatError, ShapeError, UnsupportedError
from ust.tensor import Tensor

# 4 x 6, with an empty row (2) and an empty column (4); no explicit zeros
A = np.array(
    [
        [1.0, 0, 2, 0, 0, 3],
        [0, 4, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [5, 0, 6, 7, 0, 8],
    ]
)


def _buffers(t: Tensor) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in t.buffers().items()}


def _assert_buffers(t: Tensor, expected: dict[str, np.ndarray]) -> None:
    got = _buffers(t)
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for k, v in expected.items():
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=k)
        if k != "values":
            assert got[k].dtype == t.index_dtype


def _expected(name: str, M: np.ndarray) -> dict[str, np.ndarray]:
    """Expected buffers, from SciPy where it has the layout, else built entry by entry."""
    m, n = M.shape
    csr = sp.csr_array(M)
    if name == "CSR":
        return {"pos1": csr.indptr, "crd1": csr.indices, "values": csr.data}
    if name == "CSC":
        csc = sp.csc_array(M)
        return {"pos1": csc.indptr, "crd1": csc.indices, "values": csc.data}
    if name == "COO":
        coo = csr.tocoo()
        return {"pos0": [0, coo.nnz], "crd0": coo.row, "crd1": coo.col, "values": coo.data}
    if name.startswith("BSR"):
        r, c = (int(x) for x in name[4:-1].split(","))
        b = csr.tobsr((r, c))
        b.sort_indices()
        return {"pos1": b.indptr, "crd1": b.indices, "values": b.data.ravel()}
    if name.startswith("BSC"):
        r, c = (int(x) for x in name[4:-1].split(","))
        bt = sp.csr_array(M.T).tobsr((c, r))
        bt.sort_indices()
        return {"pos1": bt.indptr, "crd1": bt.indices, "values": bt.data.transpose(0, 2, 1).ravel()}
    if name == "DIA":
        d = csr.todia()
        data = np.zeros((len(d.offsets), n))
        data[:, : d.data.shape[1]] = d.data[:, :n]
        return {"pos0": [0, len(d.offsets)], "crd0": d.offsets, "values": data.ravel()}
    if name == "DIAI":
        offs = np.unique(np.nonzero(M)[1] - np.nonzero(M)[0])
        vals = [M[i, i + k] if 0 <= i + k < n else 0.0 for k in offs for i in range(m)]
        return {"pos0": [0, len(offs)], "crd0": offs, "values": vals}
    if name in ("DCSR", "DCSC"):
        X = M if name == "DCSR" else M.T
        c = sp.csr_array(X)
        rows = np.flatnonzero(np.diff(c.indptr))
        return {
            "pos0": [0, len(rows)],
            "crd0": rows,
            "pos1": np.concatenate([[0], np.cumsum(np.diff(c.indptr)[rows])]),
            "crd1": c.indices,
            "values": c.data,
        }
    if name in ("CROW", "CCOL"):
        X = M if name == "CROW" else M.T
        rows = np.flatnonzero(np.any(X != 0, axis=1))
        return {"pos0": [0, len(rows)], "crd0": rows, "values": X[rows].ravel()}
    if name.startswith("NM"):
        nk, mk = (int(x) for x in name[3:-1].split(","))
        crd, vals = [], []
        for row in M:
            for blk in row.reshape(-1, mk):
                nz = list(np.flatnonzero(blk))
                pad = [o for o in range(mk) if o not in nz][: nk - len(nz)]
                offs = sorted(nz + pad)
                crd += offs
                vals += [blk[o] for o in offs]
        return {"crd2": crd, "values": vals}
    if name in ("DenseRowMajor", "DenseColMajor"):
        return {"values": (M if name == "DenseRowMajor" else M.T).ravel()}
    raise AssertionError(name)


STANDARD_2D = list(STANDARD_2D)


@pytest.mark.parametrize("name", STANDARD_2D)
@pytest.mark.parametrize("source", ["dense", "csr", "coo"])
def test_exact_buffers_standard(name: str, source: str) -> None:
    src = {"dense": A, "csr": sp.csr_array(A), "coo": sp.coo_array(A)}[source]
    t = asarray(src, name)
    assert t.format == F.get(name)
    _assert_buffers(t, _expected(name, A))
    np.testing.assert_array_equal(t.todense(), A)


def test_exact_buffers_nm24() -> None:
    M = np.array([[1.0, 0, 2, 0, 0, 0, 0, 3], [0, 0, 0, 0, 4, 5, 0, 0], [0, 6, 0, 0, 0, 0, 0, 0]])
    t = asarray(M, "NM[2,4]")
    _assert_buffers(t, _expected("NM[2,4]", M))
    assert t.nse == 12 and t.nnz == 12
    np.testing.assert_array_equal(t.todense(), M)


def test_storage_doc_examples() -> None:
    M = np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 0, 0, 5]])
    _assert_buffers(
        asarray(M, "CSR"), {"pos1": [0, 2, 3, 5], "crd1": [0, 2, 2, 0, 3], "values": [1, 2, 3, 4, 5]}
    )
    _assert_buffers(
        asarray(M, "COO"),
        {"pos0": [0, 5], "crd0": [0, 0, 1, 2, 2], "crd1": [0, 2, 2, 0, 3], "values": [1, 2, 3, 4, 5]},
    )
    _assert_buffers(
        asarray(M, "DIA"),
        {
            "pos0": [0, 4],
            "crd0": [-2, 0, 1, 2],
            "values": [4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 5, 0, 0, 2, 0],
        },
    )


def _dense3() -> np.ndarray:
    rng = np.random.default_rng(3)
    D = rng.integers(1, 9, size=(3, 4, 5)).astype(float)
    D[rng.random(D.shape) < 0.65] = 0
    D[1] = 0  # an empty batch member / slice
    return D


def test_exact_buffers_csf_and_coo3() -> None:
    D = _dense3()
    nz = np.nonzero(D)
    coo3 = asarray(D, "COO3")
    _assert_buffers(
        coo3,
        {"pos0": [0, len(nz[0])], "crd0": nz[0], "crd1": nz[1], "crd2": nz[2], "values": D[nz]},
    )
    csf = asarray(D, "CSF")
    i_s = np.unique(nz[0])
    ij = sorted({(i, j) for i, j in zip(nz[0], nz[1])})
    exp = {
        "pos0": [0, len(i_s)],
        "crd0": i_s,
        "pos1": np.concatenate([[0], np.cumsum([sum(1 for a, _ in ij if a == i) for i in i_s])]),
        "crd1": [j for _, j in ij],
        "pos2": np.concatenate([[0], np.cumsum([np.count_nonzero(D[i, j]) for i, j in ij])]),
        "crd2": nz[2],
        "values": D[nz],
    }
    _assert_buffers(csf, exp)
    for t in (coo3, csf):
        np.testing.assert_array_equal(t.todense(), D)


def test_exact_buffers_batched_csr() -> None:
    D = _dense3()
    t = asarray(D, "BatchedCSR")
    cap = max(np.count_nonzero(D[b]) for b in range(D.shape[0]))
    pos = np.zeros((3, 5), dtype=np.int64)
    crd = np.zeros((3, cap), dtype=np.int64)
    vals = np.zeros((3, cap))
    for b in range(3):
        c = sp.csr_array(D[b])
        pos[b] = c.indptr
        crd[b, : c.nnz] = c.indices
        vals[b, : c.nnz] = c.data
    _assert_buffers(t, {"pos2": pos, "crd2": crd, "values": vals})
    assert t.nnz == np.count_nonzero(D)
    assert t.nse == 3 * cap
    np.testing.assert_array_equal(t.todense(), D)
    # back through every 3-D format
    for f in ("CSF", "COO3", "Dense3", "BatchedCSR"):
        np.testing.assert_array_equal(t.convert(f).todense(), D)


# ----------------------------------------------------------------------------- routes


def test_library_route_and_general_path_agree(caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(0)
    M = sp.random_array((12, 18), density=0.25, rng=rng, format="csr")
    t = asarray(M)
    for dst in ("CSC", "COO", "BSR[2,3]", "DIA", "CSR"):
        for src in ("CSR", "CSC", "COO", "BSR[2,3]", "DIA"):
            s = t.convert(src)
            with caplog.at_level(logging.INFO, logger="ust.convert"):
                a = s.convert(dst)
            b = convert(s, F.get(dst), route="general")
            assert a.format == b.format == F.get(dst)
            ga, gb = _buffers(a), _buffers(b)
            assert set(ga) == set(gb)
            for k in ga:
                np.testing.assert_array_equal(ga[k], gb[k], err_msg=f"{src}->{dst} {k}")
    assert any("scipy csr.tocsc" in r.getMessage() for r in caplog.records)
    assert any("general path" in r.getMessage() for r in caplog.records)


def test_explain_route() -> None:
    t = asarray(sp.csr_array(A))
    assert "scipy csr.tocsc" in explain_route(t, "CSC")
    assert "general path" in explain_route(t, "DCSC")
    assert "no conversion" in explain_route(t, "CSR")


def test_convert_same_format_returns_self_and_index_dtype() -> None:
    t = asarray(A, "CSR")
    assert t.convert("CSR") is t
    u = t.convert("CSR", index_dtype=np.int64)
    assert u.index_dtype == np.int64 and u.crd(1).dtype == np.int64 and u.pos(1).dtype == np.int64
    v = t.convert("DCSC", index_dtype="int64")
    assert all(a.dtype == np.int64 for k, a in v.buffers().items() if k != "values")


def test_bsr_blocks_keep_explicit_zeros_like_scipy() -> None:
    t = asarray(A, "BSR[2,2]")
    csr = t.convert("CSR")
    ref = sp.csr_array(A).tobsr((2, 2)).tocsr()
    np.testing.assert_array_equal(csr.pos(1), ref.indptr)
    np.testing.assert_array_equal(csr.crd(1), ref.indices)
    np.testing.assert_array_equal(csr.values, ref.data)
    assert t.nnz == sp.csr_array(A).tobsr((2, 2)).nnz


def test_dia_nnz_excludes_padding() -> None:
    t = asarray(A, "DIA")
    assert t.nnz == sp.csr_array(A).todia().nnz
    assert t.nse == len(t.crd(0)) * A.shape[1]


# ----------------------------------------------------------------------------- errors


def test_padding_limit_names_the_size() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    M = sp.random_array((n, n), density=8 / n, rng=rng, format="csr")
    with pytest.raises(FormatError, match=r"max_padding=\d+") as info:
        asarray(M, "DIA")
    assert info.value.rule == "padding-limit"
    need = int(str(info.value).split("max_padding=")[1].split()[0])
    t = asarray(M, "DIA", max_padding=need)
    np.testing.assert_array_equal(t.todense(), M.toarray())


def test_structured_overflow_and_prune() -> None:
    M = np.array([[1.0, -5, 2, 0, 0, 0, 0, 3], [0, 0, 0, 0, 4, 5, 6, 0]])
    with pytest.raises(FormatError, match="prune=True") as info:
        asarray(M, "NM[2,4]")
    assert info.value.rule == "structured-overflow"
    t = asarray(M, "NM[2,4]", prune=True)
    want = np.array([[0.0, -5, 2, 0, 0, 0, 0, 3], [0, 0, 0, 0, 0, 5, 6, 0]])
    np.testing.assert_array_equal(t.todense(), want)
    np.testing.assert_array_equal(t.crd(2), [1, 2, 0, 3, 0, 1, 1, 2])


def test_block_size_must_divide_shape() -> None:
    with pytest.raises(FormatError, match="does not divide"):
        asarray(np.ones((5, 4)), "BSR[2,2]")


def test_dimension_mismatch() -> None:
    with pytest.raises(ShapeError):
        asarray(A).convert("CSF")
    with pytest.raises(ShapeError):
        asarray(np.ones((2, 2, 2)), "CSR")


def test_bad_index_dtype_argument() -> None:
    with pytest.raises(UnsupportedError, match="int32 or int64"):
        asarray(A, "CSR", index_dtype=np.int16)


def test_bad_format_text_fails_before_work() -> None:
    from ust.runtime.errors import UstError

    with pytest.raises(UstError):
        asarray(A, "(i, j) -> (i : dense, k : compressed)")


# ----------------------------------------------------------------------------- the GPU code path


class _NumpyAsCupy:
    """NumPy behind a namespace that is not ``numpy``: every ``xp is np`` test takes the branch
    written for CuPy (scatter/prefix-sum segment ids, argsort instead of counting passes,
    reduceat without dtype), so that branch's logic is checked here without a GPU."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)

    @staticmethod
    def argsort(a: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.argsort(a, axis=axis, kind="stable")  # CuPy's argsort is always stable


def test_cupy_branches_on_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.runtime import xp as _xp

    rng = np.random.default_rng(4)
    Msp = sp.random_array((12, 18), density=0.3, rng=rng, format="coo")
    Msp = sp.coo_array(
        (np.concatenate([Msp.data, [1.0, 2.0]]), (np.r_[Msp.row, 3, 3], np.r_[Msp.col, 5, 5])), shape=(12, 18)
    )
    fmts = [
        "CSR",
        "CSC",
        "COO",
        "DCSC",
        "DIA",
        "BSR[2,3]",
        "NM[2,3]",
        "(i, j) -> (i : loose_compressed, j : compressed)",
    ]
    expected = {f: _buffers(asarray(Msp, f, prune=True)) for f in fmts}
    D = rng.integers(0, 3, size=(3, 4, 5)).astype(float)
    exp3 = {f: _buffers(asarray(D, f)) for f in ("CSF", "BatchedCSR", "COO3")}
    fake = _NumpyAsCupy()
    monkeypatch.setattr(_xp, "namespace", lambda a: fake)
    src = asarray(Msp)
    assert src.xp is fake
    for f in fmts:
        t = convert(src, F.format(f), route="general", prune=True)
        got = _buffers(t)
        for k, v in expected[f].items():
            np.testing.assert_array_equal(got[k], v, err_msg=f"{f} {k}")
        np.testing.assert_array_equal(t.todense(), Msp.toarray() if f != "NM[2,3]" else t.todense())
        for g in fmts[:5]:
            np.testing.assert_array_equal(
                convert(t, F.format(g), route="general").todense(), t.todense(), err_msg=f"{f} -> {g}"
            )
    for f, exp in exp3.items():
        got = _buffers(asarray(D, f))
        for k, v in exp.items():
            np.testing.assert_array_equal(got[k], v, err_msg=f"{f} {k}")
    counts = np.array([0, 3, 0, 0, 2, 1, 0])
    np.testing.assert_array_equal(_xp.expand_segments(fake, counts), np.repeat(np.arange(7), counts))
