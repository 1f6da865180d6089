"""The conversion / storage half of Tensor's scipy.sparse surface (ust.convert.surface):
``toarray``, ``asformat`` and ``tocsr`` ... ``tobsr``, ``data``, ``size``, ``nbytes``,
``has_canonical_format``, ``_repr_html_``, ``__array__`` and SciPy functions handed a Tensor.

Patterns ported from SciPy's scipy/sparse/tests/test_base.py (test_toarray, test_asformat,
test_tobsr, test_copy, test_size_zero_conversions, test_has_canonical_format, ...), each
compared with SciPy's result on the same data, for CSR, CSC, COO, BSR, DIA and user formats,
with explicit zeros, empty (0 x n) and 1 x 1 matrices.
"""

from __future__ import annotations

import html
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ust
import ust.convert.surface as surface
from ust.runtime.errors import FormatError, ShapeError, UnsupportedError

SCIPY = ["csr", "csc", "coo", "bsr", "dia"]
USER = [
    "DCSR",
    "(i, j) -> (i : dense, j : loose_compressed)",
    "(i, j) -> (j : dense, i : loose_compressed)",
]
BLOCKED_DSL = "(i, j) -> (i : compressed, j floordiv 2 : compressed, j mod 2 : dense)"


def _cases() -> dict[str, sp.csr_array]:
    A = sp.random_array((6, 8), density=0.35, rng=0, format="csr")
    Z = A.copy()
    Z.data[::3] = 0.0  # explicit zeros
    return {
        "random": A,
        "zeros": Z,
        "empty": sp.csr_array((0, 4)),
        "one": sp.csr_array(np.array([[2.5]])),
        "tall": sp.random_array((9, 4), density=0.4, rng=3, format="csr"),
    }


CASES = _cases()


def _bs(A: sp.csr_array) -> tuple[int, int]:
    return (2, 2) if A.shape[0] % 2 == 0 and A.shape[1] % 2 == 0 else (1, 1)


def _scipy(A: sp.csr_array, name: str) -> sp.sparray:
    """A canonical scipy twin of ``A`` in ``name``."""
    S = A.tobsr(_bs(A)) if name == "bsr" else A.asformat(name)
    S = S.copy()
    if name != "dia":
        S.sum_duplicates()
    return S


def _canonical(S: sp.sparray) -> sp.sparray:
    S = S.copy()
    if S.format == "dia":
        order = np.argsort(S.offsets, kind="stable")
        width = S.shape[1]
        data = np.zeros((S.data.shape[0], width), dtype=S.dtype)
        w = min(width, S.data.shape[1])
        data[:, :w] = S.data[:, :w]
        return sp.dia_array((data[order], S.offsets[order]), shape=S.shape)
    S.sum_duplicates()
    if S.format == "coo":  # row-major, as scipy's canonical COO (csc.tocoo is column-major)
        S = sp.coo_array(S.tocsr())
    return S


def _assert_storage(t: ust.Tensor, S: sp.sparray) -> None:
    """``t``'s buffers are exactly scipy's canonical buffers of ``S``."""
    S = _canonical(S)
    np.testing.assert_array_equal(t.toarray(), S.toarray())
    assert t.dtype == S.dtype
    if S.format in ("csr", "csc", "bsr"):
        np.testing.assert_array_equal(t.pos(1), S.indptr)
        np.testing.assert_array_equal(t.crd(1), S.indices)
        np.testing.assert_array_equal(t.data, S.data)
        if S.format == "bsr":
            assert t.data.shape == S.data.shape
    elif S.format == "coo":
        np.testing.assert_array_equal(t.crd(0), S.coords[0])
        np.testing.assert_array_equal(t.crd(1), S.coords[1])
        np.testing.assert_array_equal(t.data, S.data)
    else:
        np.testing.assert_array_equal(t.crd(0), S.offsets)
        np.testing.assert_array_equal(t.data, S.data)


def _layout(t: ust.Tensor) -> str | None:
    name = t.format.standard_name or ""
    for s in SCIPY:
        if name.casefold().startswith(s):
            return s
    return None


def _snapshot(obj) -> list[np.ndarray]:
    if isinstance(obj, ust.Tensor):
        return [a.copy() for a in obj.buffers().values()]
    arrays = [obj.data]
    for name in ("indices", "indptr", "offsets"):
        if hasattr(obj, name):
            arrays.append(getattr(obj, name))
    if obj.format == "coo":
        arrays += list(obj.coords)
    return [np.array(a, copy=True) for a in arrays]


def _same_snapshot(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def _shares(t: ust.Tensor, u: ust.Tensor) -> bool:
    return any(np.shares_memory(a, b) for a in t.buffers().values() for b in u.buffers().values())


# ----------------------------------------------------------------------------- toarray


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", SCIPY + USER)
def test_toarray_matches_scipy(case: str, name: str) -> None:
    A = CASES[case]
    S = _scipy(A, name) if name in SCIPY else A
    t = ust.asarray(S) if name in SCIPY else ust.asarray(A, name)
    before = _snapshot(t)
    want = S.toarray()
    got = t.toarray()
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if name in SCIPY:  # order=None: the storage's own order, as scipy's (csc gives F)
        assert got.flags.f_contiguous == want.flags.f_contiguous
        assert got.flags.c_contiguous == want.flags.c_contiguous
    for order in ("C", "F"):
        arr = t.toarray(order=order)
        np.testing.assert_array_equal(arr, want)
        assert arr.flags.c_contiguous if order == "C" else arr.flags.f_contiguous
        if name in SCIPY:
            ref = S.toarray(order=order)
            assert arr.flags.c_contiguous == ref.flags.c_contiguous
    np.testing.assert_array_equal(t.todense(), want)
    _same_snapshot(before, _snapshot(t))


@pytest.mark.parametrize("name", SCIPY + USER)
@pytest.mark.parametrize("order", ["C", "F"])
def test_toarray_out(name: str, order: str) -> None:
    A = CASES["zeros"]
    S = _scipy(A, name) if name in SCIPY else A
    t = ust.asarray(S) if name in SCIPY else ust.asarray(A, name)
    out = np.full(A.shape, 7.0, order=order)  # garbage is overwritten, as scipy zeroes it
    res = t.toarray(out=out)
    assert res is out
    np.testing.assert_array_equal(out, A.toarray())
    ref = np.full(A.shape, 7.0, order=order)
    S.toarray(out=ref)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("bad", ["dtype", "shape", "order"])
def test_toarray_out_errors_match_scipy(bad: str) -> None:
    A = CASES["random"]
    t = ust.asarray(A)
    out = np.zeros(A.shape, dtype=np.float32 if bad == "dtype" else np.float64)
    if bad == "shape":
        out = np.zeros((A.shape[0] + 1, A.shape[1]))
    kwargs = {"out": out, "order": "C"} if bad == "order" else {"out": out}
    with pytest.raises(ValueError):
        A.toarray(**kwargs)
    with pytest.raises(ValueError):
        t.toarray(**kwargs)
    with pytest.raises(ValueError):
        t.toarray(order="K")
    with pytest.raises(TypeError):
        t.toarray(out=[[0.0] * A.shape[1]] * A.shape[0])


def test_toarray_sums_duplicates_of_coo_built_from_buffers() -> None:
    row = np.array([1, 0, 1, 1, 0])
    col = np.array([2, 0, 2, 0, 0])
    val = np.array([1.0, 2.0, 3.0, 4.0, -2.0])
    S = sp.coo_array((val, (row, col)), shape=(2, 3))
    t = ust.asarray(S)
    np.testing.assert_array_equal(t.toarray(), S.toarray())
    np.testing.assert_array_equal(t.toarray(order="F"), S.toarray(order="F"))
    np.testing.assert_array_equal(S.coords[0], row)  # the caller's arrays are untouched
    np.testing.assert_array_equal(S.data, val)


def test_toarray_dense_formats() -> None:
    x = np.arange(12.0).reshape(3, 4)
    t = ust.asarray(x)
    a = t.toarray()
    np.testing.assert_array_equal(a, x)
    assert not np.shares_memory(a, t.values)
    cm = t.convert("DenseColMajor")
    f = cm.toarray()
    assert f.flags.f_contiguous
    np.testing.assert_array_equal(f, x)
    np.testing.assert_array_equal(cm.toarray(order="C"), x)


# ----------------------------------------------------------------------------- asformat


@pytest.mark.parametrize("case", ["random", "zeros", "empty", "one"])
@pytest.mark.parametrize("src", SCIPY)
@pytest.mark.parametrize("dst", SCIPY)
def test_asformat_every_pair(case: str, src: str, dst: str) -> None:
    """scipy's test_asformat: every format to every format, compared buffer for buffer."""
    A = CASES[case]
    S = _scipy(A, src)
    t = ust.asarray(S)
    before = _snapshot(S)
    bs = _bs(A)
    got = t.asformat(dst, blocksize=bs) if dst == "bsr" else t.asformat(dst)
    want = S.tobsr(blocksize=bs) if dst == "bsr" else S.asformat(dst)
    assert _layout(got) == dst
    if src == dst:
        assert got is t
        assert want is S
    _assert_storage(got, want)
    _same_snapshot(before, _snapshot(S))
    method = getattr(t, f"to{dst}")
    via = method(blocksize=bs) if dst == "bsr" else method()
    _assert_storage(via, want)


@pytest.mark.parametrize("src", SCIPY + USER)
@pytest.mark.parametrize("dst", SCIPY)
def test_to_methods_copy(src: str, dst: str) -> None:
    """scipy's test_copy: copy=True never shares data; copy=False returns self when no change."""
    A = CASES["zeros"]
    t = ust.asarray(_scipy(A, src)) if src in SCIPY else ust.asarray(A, src)
    method = getattr(t, f"to{dst}")
    kw = {"blocksize": (2, 2)} if dst == "bsr" else {}
    same = method(copy=False, **kw)
    fresh = method(copy=True, **kw)
    if src == dst:
        assert same is t
    assert fresh is not t
    assert not _shares(fresh, t)
    np.testing.assert_array_equal(fresh.toarray(), A.toarray())
    np.testing.assert_array_equal(same.toarray(), A.toarray())
    S = _scipy(A, src) if src in SCIPY else A
    R = S.tobsr(blocksize=(2, 2), copy=True) if dst == "bsr" else S.asformat(dst, copy=True)
    assert not np.may_share_memory(R.data, S.data)
    _assert_storage(fresh, R)


@pytest.mark.parametrize("name", USER)
@pytest.mark.parametrize("src", SCIPY)
def test_asformat_user_formats(name: str, src: str) -> None:
    A = CASES["zeros"]
    S = _scipy(A, src)
    t = ust.asarray(S)
    # the entries scipy's tocsr keeps: BSR's block zeros are entries, DIA's zeros are fill
    want = ust.asarray(S.tocsr(), name)
    got = t.asformat(name)
    assert got.format == want.format
    for k, v in want.buffers().items():
        np.testing.assert_array_equal(got.buffers()[k], v)
    assert got.asformat(name) is got
    assert got.asformat(ust.format(name)) is got
    assert got.asformat(name, copy=True) is not got
    assert not _shares(got.asformat(name, copy=True), got)
    back = got.asformat(src, blocksize=(2, 2)) if src == "bsr" else got.asformat(src)
    C = S.tocsr()
    _assert_storage(back, C.tobsr((2, 2)) if src == "bsr" else C.asformat(src))


def test_asformat_none_and_self() -> None:
    t = ust.asarray(CASES["random"])
    assert t.asformat(None) is t
    c = t.asformat(None, copy=True)
    assert c is not t and not _shares(c, t)
    assert t.asformat("CSR") is t
    assert t.asformat(ust.formats.CSR) is t
    assert t.asformat("(i, j) -> (i : dense, j : compressed)") is t


@pytest.mark.parametrize("spelling", ["csr", "CSR", "Csr", " csr "])
def test_scipy_names_are_case_insensitive(spelling: str) -> None:
    A = CASES["random"]
    t = ust.asarray(A.tocoo())
    _assert_storage(t.asformat(spelling), A)
    _assert_storage(ust.asarray(A.tocoo(), format=spelling), A)
    _assert_storage(t.convert(spelling.strip()), A)


def test_lowercase_names_everywhere() -> None:
    A = CASES["random"]
    _assert_storage(ust.asarray(A, format="csc"), A.tocsc())
    _assert_storage(ust.asarray(A, format="coo"), A.tocoo())
    _assert_storage(ust.asarray(A, format="dia"), A.todia())
    _assert_storage(ust.asarray(A, format="bsr", blocksize=(2, 2)), A.tobsr((2, 2)))
    _assert_storage(ust.asarray(A, format="bsr[2, 4]"), A.tobsr((2, 4)))
    t = ust.asarray(A)
    _assert_storage(t.convert("bsr", blocksize=(3, 4)), A.tobsr((3, 4)))
    _assert_storage(t.convert("BSR", blocksize=(2, 1)), A.tobsr((2, 1)))
    assert t.convert("dcsr").format == ust.formats.DCSR
    assert (
        ust.Tensor(t.shape, "csr", t.values, pos={1: t.pos(1)}, crd={1: t.crd(1)}).format == ust.formats.CSR
    )
    # the format language itself stays case-sensitive; DSL text parses as before
    with pytest.raises(FormatError) as exc:
        ust.format("csr")
    assert exc.value.rule == "unknown-format"
    assert ust.formats.resolve("(i, j) -> (i : dense, j : compressed)") == ust.formats.CSR


@pytest.mark.parametrize(
    "call, err",
    [
        (lambda t: t.asformat("dok"), UnsupportedError),
        (lambda t: t.asformat("LIL"), UnsupportedError),
        (lambda t: t.asformat("foo"), FormatError),
        (lambda t: t.asformat("csrx"), FormatError),
        (lambda t: t.convert("bsr"), FormatError),  # a template needs its block size
        (lambda t: t.convert("csr", blocksize=(2, 2)), FormatError),
        (lambda t: t.convert("bsr", blocksize=(0, 2)), FormatError),
        (lambda t: t.convert("bsr", blocksize=(2,)), FormatError),
        (lambda t: t.convert("bsr", blocksize=(2.0, 2)), FormatError),
        (lambda t: t.convert("bsr", blocksize=(4, 4)), ValueError),  # 4 does not divide 6
        (lambda t: t.asformat("csr", blocksize=(2, 2)), ValueError),
        (lambda t: t.asformat(None, blocksize=(2, 2)), ValueError),
        (lambda t: t.tobsr(blocksize=(0, 1)), ValueError),
        (lambda t: t.tobsr(blocksize=(4, 4)), ValueError),
        (lambda t: t.tobsr(blocksize=(True, 1)), ValueError),
        (lambda t: ust.asarray(t, blocksize=(2, 2)), UnsupportedError),
    ],
)
def test_format_errors(call, err) -> None:  # type: ignore[no-untyped-def]
    t = ust.asarray(CASES["random"])
    with pytest.raises(err) as exc:
        call(t)
    if err is UnsupportedError and "asformat" in repr(call.__code__.co_consts):
        assert "csr" in str(exc.value)


def test_unknown_lowercase_name_keeps_the_clear_error() -> None:
    with pytest.raises(FormatError) as exc:
        ust.asarray(CASES["random"], format="nope")
    assert exc.value.rule == "unknown-format"
    assert "known: CSR" in str(exc.value)
    with pytest.raises(UnsupportedError, match="csr, csc, coo, bsr, dia"):
        ust.asarray(CASES["random"]).asformat("dok")
    with pytest.raises(ValueError, match="invalid blocksize"):
        CASES["random"].tobsr(blocksize=(4, 4))  # scipy raises a ValueError too


def _blocky(b: int, nb: int, seed: int) -> sp.csr_array:
    pattern = sp.random_array((nb, nb), density=0.3, rng=seed, format="csr")
    return sp.csr_array(sp.kron(pattern, np.ones((b, b)) * 2.0))


@pytest.mark.parametrize(
    "A",
    [
        CASES["random"],
        CASES["zeros"],
        CASES["empty"],
        CASES["one"],
        _blocky(2, 5, 0),  # 10 x 10: only 2 divides
        _blocky(3, 3, 1),  # 9 x 9
        _blocky(4, 2, 2),  # 8 x 8
        _blocky(6, 3, 3),  # 18 x 18: 6 x 6 blocks
        _blocky(2, 6, 4),  # 12 x 12: 2 x 2 blocks, while 3, 4, 6 divide too
        sp.csr_array(sp.eye_array(12) + sp.eye_array(12, k=1)),
    ],
    ids=["random", "zeros", "empty", "one", "b2", "b3", "b4", "b6", "b2of12", "bidiag"],
)
@pytest.mark.parametrize("src", ["csr", "csc", "coo", "dia"])
def test_tobsr_default_blocksize_is_scipys(A: sp.csr_array, src: str) -> None:
    S = A.asformat(src)
    want = S.tobsr()
    t = ust.asarray(S)
    got = t.tobsr()
    assert got.format == ust.formats.BSR(*want.blocksize)
    assert surface.estimate_blocksize(t) == want.blocksize
    _assert_storage(got, want)
    assert got.tobsr() is got  # a BSR keeps its own block size, as scipy's bsr.tobsr()
    assert got.asformat("bsr") is got


def test_tobsr_default_blocksize_sums_coo_duplicates_as_scipy() -> None:
    # 4 duplicates of (0, 0) and one entry per 2x2 block otherwise: scipy's coo.tocsr() sums
    # the duplicates first, so the blocks are sparse and the estimate is (1, 1)
    row = np.array([0, 0, 0, 0, 2, 4])
    col = np.array([0, 0, 0, 0, 2, 4])
    S = sp.coo_array((np.ones(6), (row, col)), shape=(6, 6))
    t = ust.asarray(S)
    assert t.tobsr().format == ust.formats.BSR(*S.tobsr().blocksize)


def test_tobsr_of_a_bsr_with_another_blocksize() -> None:
    A = CASES["random"]
    t = ust.asarray(A, "bsr", blocksize=(2, 2))
    got = t.tobsr(blocksize=(3, 4))
    _assert_storage(got, A.tobsr((3, 4)))
    assert t.tobsr(blocksize=(2, 2)) is t
    assert t.tobsr(blocksize=np.array([2, 2])) is t


# ----------------------------------------------------------------------------- data, size, nbytes


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", SCIPY)
def test_data_is_scipys_without_a_copy(case: str, name: str) -> None:
    S = _scipy(CASES[case], name)
    t = ust.asarray(S)
    d = t.data
    if name == "dia":  # ust stores every column of a diagonal (scipy may store fewer)
        assert d.shape == (S.data.shape[0], S.shape[1])
        np.testing.assert_array_equal(d[:, : S.data.shape[1]], S.data)
    else:
        np.testing.assert_array_equal(d, S.data)
        assert d.shape == S.data.shape
    assert np.shares_memory(d, t.values) or d.size == 0
    assert np.shares_memory(d, S.data) or d.size == 0  # the buffers scipy handed in
    np.testing.assert_array_equal(d, t.to_scipy().data)
    assert t.data.base is not None or d.size == 0 or d is t.values


def test_data_of_a_narrow_dia_is_full_width() -> None:
    # scipy allows dia data narrower than the matrix; ust stores every column
    S = sp.dia_array((np.array([[1.0, 2.0], [3.0, 4.0]]), [0, 1]), shape=(4, 5))
    t = ust.asarray(S)
    assert t.data.shape == (2, 5)
    np.testing.assert_array_equal(t.data[:, :2], S.data)
    np.testing.assert_array_equal(t.data[:, 2:], 0)
    np.testing.assert_array_equal(t.toarray(), S.toarray())


@pytest.mark.parametrize("name", [*USER, BLOCKED_DSL, "DCSC", "BSC[2,2]", "DIAI", "DenseRowMajor", "CSF"])
def test_data_of_other_formats_is_values(name: str) -> None:
    if name == "CSF":
        x = np.zeros((2, 3, 4))
        x[0, 1, 2] = 1.0
        x[1, 2, 3] = 2.0
        t = ust.asarray(x, name)
    else:
        t = ust.asarray(CASES["random"], name)
    assert t.data is t.values


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", SCIPY + USER)
def test_size_is_scipys(case: str, name: str) -> None:
    A = CASES[case]
    S = _scipy(A, name) if name in SCIPY else A
    t = ust.asarray(S) if name in SCIPY else ust.asarray(A, name)
    assert t.size == S.size == t.nnz
    assert isinstance(t.size, int)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", SCIPY)
def test_nbytes_against_scipys_buffers(case: str, name: str) -> None:
    S = _scipy(CASES[case], name)
    t = ust.asarray(S)
    it = np.dtype(t.index_dtype).itemsize
    if name in ("csr", "csc", "bsr"):
        want = S.data.nbytes + S.indices.nbytes + S.indptr.nbytes
    elif name == "coo":
        want = S.data.nbytes + sum(c.nbytes for c in S.coords) + 2 * it  # ust's pos0 = [0, n]
    else:
        want = S.data.nbytes + S.offsets.nbytes + 2 * it
    assert t.nbytes == want
    assert t.nbytes == sum(a.nbytes for a in t.buffers().values())


@pytest.mark.parametrize("name", USER)
def test_nbytes_of_user_formats(name: str) -> None:
    t = ust.asarray(CASES["zeros"], name)
    assert t.nbytes == sum(a.nbytes for a in t.buffers().values()) > t.values.nbytes


# ----------------------------------------------------------------------------- has_canonical_format


def test_has_canonical_format_csr_built_from_buffers() -> None:
    """scipy's test_has_canonical_format, on a CSR built from buffers."""
    M = sp.csr_array((np.array([2.0]), np.array([0]), np.array([0, 1])))
    t = ust.asarray(M)
    assert t.has_canonical_format is True is M.has_canonical_format
    data, indices, indptr = np.array([1.0, 1.0]), np.array([0, 0]), np.array([0, 2])
    M = sp.csr_array((data, indices, indptr)).copy()
    assert M.has_canonical_format is False
    t = ust.Tensor(
        (1, 1), "(i, j) -> (i : dense, j : compressed(nonunique))", data, pos={1: indptr}, crd={1: indices}
    )
    assert isinstance(t.has_canonical_format, bool)
    assert t.has_canonical_format is False
    assert ust.asarray(M).has_canonical_format is False
    # unsorted, no duplicates
    data, indices, indptr = np.array([1.0, 2.0, 3.0]), np.array([2, 0, 1]), np.array([0, 2, 3])
    M = sp.csr_array((data, indices, indptr), shape=(2, 3))
    t = ust.Tensor(
        (2, 3), "(i, j) -> (i : dense, j : compressed(nonordered))", data, pos={1: indptr}, crd={1: indices}
    )
    assert t.has_canonical_format is M.has_canonical_format is False
    assert ust.asarray(M).has_canonical_format is False
    # a label that allows disorder, on data that is canonical: the buffers decide
    data, indices, indptr = np.array([1.0, 2.0, 3.0]), np.array([0, 2, 1]), np.array([0, 2, 3])
    M = sp.csr_array((data, indices, indptr), shape=(2, 3))
    fmt = "(i, j) -> (i : dense, j : compressed(nonordered, nonunique))"
    t = ust.Tensor((2, 3), fmt, data, pos={1: indptr}, crd={1: indices})
    assert t.has_canonical_format is M.has_canonical_format is True
    np.testing.assert_array_equal(indices, [0, 2, 1])  # nothing sorted in place


def _coo_canonical(S: sp.coo_array) -> bool:
    """scipy's meaning: sum_duplicates (which sorts row-major) changes nothing."""
    C = S.copy()
    C.sum_duplicates()
    return C.nnz == S.nnz and all(np.array_equal(a, b) for a, b in zip(C.coords, S.coords))


@pytest.mark.parametrize(
    "row, col",
    [
        ([0, 0, 1, 2], [0, 3, 1, 2]),  # sorted, unique
        ([0, 1, 0, 2], [0, 1, 3, 2]),  # unsorted rows
        ([0, 0, 1, 2], [3, 0, 1, 2]),  # unsorted within a row
        ([0, 0, 1, 2], [3, 3, 1, 2]),  # a duplicate
        ([1, 0, 1], [2, 0, 2]),  # unsorted with a duplicate
        ([], []),
        ([2], [1]),
    ],
)
def test_has_canonical_format_coo(row: list[int], col: list[int]) -> None:
    r, c = np.array(row, dtype=np.int32), np.array(col, dtype=np.int32)
    S = sp.coo_array((np.arange(1.0, r.size + 1), (r, c)), shape=(3, 4))
    t = ust.asarray(S)
    assert t.has_canonical_format is _coo_canonical(S)
    # the same buffers under the loosest COO label
    fmt = "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))"
    u = ust.Tensor((3, 4), fmt, S.data, pos={0: np.array([0, r.size], dtype=np.int32)}, crd={0: r, 1: c})
    assert u.has_canonical_format is _coo_canonical(S)
    np.testing.assert_array_equal(r, row)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", SCIPY + USER)
def test_canonical_sources_are_canonical(case: str, name: str) -> None:
    A = CASES[case]
    S = _scipy(A, name) if name in SCIPY else A
    t = ust.asarray(S) if name in SCIPY else ust.asarray(A, name)
    assert t.has_canonical_format is True
    if name != "dia":
        assert S.has_canonical_format is True


def _fresh_flag(S: sp.sparray) -> bool:
    """scipy's has_canonical_format computed from the buffers (not a memo of an earlier state)."""
    return bool(type(S)((S.data, S.indices, S.indptr), shape=S.shape).has_canonical_format)


@pytest.mark.parametrize(
    "indices",
    [[0, 1, 0, 2, 1], [1, 0, 0, 2, 1], [0, 0, 0, 2, 1], [0, 1, 1, 0, 2], [0, 1, 0, 2, 2]],
)
@pytest.mark.parametrize("kind", ["csr", "csc", "bsr"])
def test_has_canonical_format_compressed_from_scipy_buffers(kind: str, indices: list[int]) -> None:
    indptr = np.array([0, 2, 4, 5], dtype=np.int32)
    ind = np.array(indices, dtype=np.int32)
    if kind == "bsr":
        data = np.arange(20.0).reshape(5, 2, 2)
        S = sp.bsr_array((data, ind, indptr), shape=(6, 6))
    else:
        data = np.arange(1.0, 6.0)
        S = (sp.csr_array if kind == "csr" else sp.csc_array)((data, ind, indptr), shape=(3, 3))
    want = _fresh_flag(S)
    t = ust.asarray(S)
    assert t.has_canonical_format is want is S.has_canonical_format
    np.testing.assert_array_equal(S.indices, indices)  # scipy's buffers were not sorted


def test_has_canonical_format_bsr_from_tobsr() -> None:
    B = CASES["random"].tobsr((2, 2))  # scipy leaves each block row in first-appearance order
    assert ust.asarray(B).has_canonical_format is _fresh_flag(B) is False
    B.sort_indices()  # scipy's memo of has_canonical_format stays False here; the data are canonical
    assert ust.asarray(B).has_canonical_format is _fresh_flag(B) is True


def test_has_canonical_format_dia_offsets() -> None:
    data = np.arange(1.0, 9.0).reshape(2, 4)
    assert ust.asarray(sp.dia_array((data, [-1, 1]), shape=(4, 4))).has_canonical_format is True
    assert ust.asarray(sp.dia_array((data, [1, -1]), shape=(4, 4))).has_canonical_format is False


def test_has_canonical_format_loose_nonordered() -> None:
    fmt = "(i, j) -> (i : dense, j : loose_compressed(nonordered))"
    pos = np.array([0, 2, 5, 5])  # (lo, hi) per row, a hole between the rows
    crd = np.array([3, 1, 9, 0, 2])
    t = ust.Tensor((2, 4), fmt, np.ones(5), pos={1: pos}, crd={1: crd})
    assert t.has_canonical_format is False  # row 0 is (3, 1)
    crd2 = np.array([1, 3, 9, 0, 2])
    assert ust.Tensor((2, 4), fmt, np.ones(5), pos={1: pos}, crd={1: crd2}).has_canonical_format is True


# ----------------------------------------------------------------------------- _repr_html_


def _cells(text: str) -> int:
    return len(re.findall(r'<rect x="\d+" y="\d+" width="\d+" height="\d+" fill="#1f4e79"', text))


@pytest.mark.parametrize("name", SCIPY + USER)
def test_repr_html_content(name: str) -> None:
    A = CASES["zeros"]
    S = _scipy(A, name) if name in SCIPY else A
    t = ust.asarray(S) if name in SCIPY else ust.asarray(A, name)
    text = t._repr_html_()
    fmt = t.format
    if fmt.standard_name:
        assert f"<td>{html.escape(fmt.standard_name)}</td>" in text
    assert html.escape(fmt.map_text()) in text
    assert "->" not in text  # every piece of format text is escaped
    assert "6 x 8" in text and "float64" in text
    assert f"<td>{S.nnz if name != 'dia' else S.size}</td>" in text
    assert f"{t.nbytes} bytes" in text
    assert "<svg" in text and "</svg>" in text
    # one cell per element of a matrix this small: the occupied cells are the stored slots inside
    # the matrix (explicit zeros, BSR's block fill and DIA's diagonals included: what nnz counts)
    want = S if name in SCIPY else A
    if name == "dia":
        want = sp.dia_array((np.ones_like(S.data), S.offsets), shape=S.shape)
    assert _cells(text) == len({(int(i), int(j)) for i, j in zip(*want.tocoo().coords)})


def test_repr_html_of_a_dsl_format_is_escaped() -> None:
    t = ust.asarray(CASES["random"], BLOCKED_DSL)
    text = t._repr_html_()
    assert t.format.standard_name is None
    assert "<code>(i, j) -&gt; (i : compressed, j floordiv 2 : compressed, j mod 2 : dense)</code>" in text


def test_repr_html_grid_is_bounded() -> None:
    A = sp.random_array((1000, 300), density=0.01, rng=5, format="csr")
    text = ust.asarray(A)._repr_html_()
    m = re.search(r'aria-label="sparsity pattern, (\d+) x (\d+) cells"', text)
    assert m and (int(m.group(1)), int(m.group(2))) == (32, 32)
    assert 0 < _cells(text) <= 32 * 32
    dense = A.toarray() != 0
    rows = np.minimum((np.arange(1000) * 32) // 1000, 31)
    cols = np.minimum((np.arange(300) * 32) // 300, 31)
    grid = np.zeros((32, 32), dtype=bool)
    ii, jj = np.nonzero(dense)
    grid[rows[ii], cols[jj]] = True
    assert _cells(text) == int(grid.sum())


def test_repr_html_above_the_entry_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surface, "PICTURE_ENTRY_LIMIT", 8)
    A = CASES["random"]
    sampled = ust.asarray(A)._repr_html_()
    assert "picture from 8 of" in sampled and _cells(sampled) >= 1
    assert "picture from 8 of" in ust.asarray(A.tocoo())._repr_html_()
    assert "picture from 8 of" in ust.asarray(A.tocsc())._repr_html_()
    left_out = ust.asarray(A, "DCSR")._repr_html_()
    assert "picture left out" in left_out and "<svg" not in left_out
    dia = ust.asarray(A, "DIA")._repr_html_()
    assert "at most" in dia  # nnz not counted: it would read every slot


@pytest.mark.parametrize("case", ["empty", "one"])
def test_repr_html_small_cases(case: str) -> None:
    A = CASES[case]
    text = ust.asarray(A)._repr_html_()
    assert f"<td>{A.nnz}</td>" in text
    if case == "empty":
        assert "empty" in text and "<svg" not in text
    else:
        assert _cells(text) == 1


def test_repr_html_other_orders() -> None:
    v = ust.asarray(np.array([0.0, 1.0, 0.0, 2.0]), "SparseVector")
    assert _cells(v._repr_html_()) == 2
    x = np.zeros((2, 3, 4))
    x[0, 1, 2] = 1.0
    x[1, 2, 3] = 2.0
    assert _cells(ust.asarray(x, "CSF")._repr_html_()) == 2


# ----------------------------------------------------------------------------- __array__ and SciPy


def _system() -> tuple[sp.csr_array, np.ndarray]:
    n = 12
    A = sp.random_array((n, n), density=0.3, rng=7, format="csr") + sp.eye_array(n, format="csr") * 4.0
    return sp.csr_array(A), np.arange(1.0, n + 1)


def test_array_protocol() -> None:
    A = CASES["zeros"]
    t = ust.asarray(A)
    a = np.asarray(t)
    assert isinstance(a, np.ndarray) and a.shape == A.shape
    np.testing.assert_array_equal(a, A.toarray())
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float32), A.toarray().astype(np.float32))
    assert np.array(t).dtype == np.float64
    with pytest.raises(ValueError):
        np.asarray(t, copy=False)  # a sparse tensor has no dense array to share
    d = ust.asarray(A.toarray())
    assert np.shares_memory(np.asarray(d, copy=False), d.values)
    assert not np.shares_memory(np.asarray(d), d.values)


def test_array_protocol_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    A, b = _system()
    t = ust.asarray(A)
    monkeypatch.setattr(surface, "ARRAY_ELEMENT_LIMIT", A.shape[0] * A.shape[1] - 1)
    with pytest.raises(ShapeError, match=r"to_scipy\(\)"):
        np.asarray(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        with pytest.raises(ValueError) as exc:  # scipy wraps what np.asarray raised
            spla.spsolve(t, b)
    cause = exc.value if isinstance(exc.value, ShapeError) else exc.value.__cause__
    assert isinstance(cause, ShapeError) and "to_scipy()" in str(cause)
    np.testing.assert_allclose(spla.spsolve(t.to_scipy(), b), spla.spsolve(A, b))
    assert t.toarray().shape == A.shape  # explicit densification is not limited


@pytest.mark.parametrize("name", ["csr", "csc", "coo", "dia", "DCSR"])
def test_scipy_functions_take_a_tensor(name: str) -> None:
    A, b = _system()
    t = ust.asarray(A, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        x = spla.spsolve(t, b)
    np.testing.assert_allclose(x, spla.spsolve(A, b), rtol=1e-12)
    C = sp.csr_array(t)
    np.testing.assert_array_equal(C.toarray(), A.toarray())
    L = spla.aslinearoperator(t)
    assert L.shape == A.shape and L.dtype == A.dtype
    np.testing.assert_allclose(L @ b, A @ b)
    np.testing.assert_allclose(L.H @ b, A.T @ b)
    X = np.stack([b, 2 * b], axis=1)
    np.testing.assert_allclose(L @ X, A @ X)
    np.testing.assert_allclose(L.H @ X, A.T @ X)
    y, info = spla.gmres(t, b, rtol=1e-12, atol=0.0)
    assert info == 0
    np.testing.assert_allclose(A @ y, b, rtol=1e-8)


def test_aslinearoperator_adjoint_of_complex() -> None:
    A = sp.random_array((5, 4), density=0.5, rng=2, format="csr", dtype=np.complex128)
    A = A + 1j * sp.random_array((5, 4), density=0.5, rng=3, format="csr")
    A = sp.csr_array(A)
    t = ust.asarray(A)
    L = spla.aslinearoperator(t)
    x = np.arange(5.0) + 1j * np.arange(5.0)[::-1]
    np.testing.assert_allclose(L.H @ x, A.conj().T @ x)
    np.testing.assert_allclose(L.rmatvec(x), A.conj().T @ x)
    np.testing.assert_allclose(L @ x[:4], A @ x[:4])


def test_caller_arrays_never_modified() -> None:
    A = CASES["zeros"].copy()
    before = _snapshot(A)
    t = ust.asarray(A)
    t.toarray(out=np.empty(A.shape))
    np.asarray(t)
    for name in SCIPY:
        t.asformat(name, blocksize=(2, 2) if name == "bsr" else None)
        t.asformat(name, copy=True, blocksize=(2, 2) if name == "bsr" else None)
    t.tobsr()
    _ = t.data, t.size, t.nbytes, t.has_canonical_format, t._repr_html_()
    _same_snapshot(before, _snapshot(A))


def test_hypersparse_coo_blocksize_and_picture() -> None:
    """Extents far beyond a dense array: the estimate and the picture never build O(extent) data."""
    n = 2**40
    # two full 2 x 2 blocks, in the first and the last block of the matrix
    row = np.array([0, 0, 1, 1, n - 2, n - 2, n - 1, n - 1], dtype=np.int64)
    col = np.array([0, 1, 0, 1, n - 2, n - 1, n - 2, n - 1], dtype=np.int64)
    fmt = "(i, j) -> (i : compressed(nonunique), j : singleton)"
    t = ust.Tensor((n, n), fmt, np.ones(8), pos={0: np.array([0, 8], dtype=np.int64)}, crd={0: row, 1: col})
    assert surface.estimate_blocksize(t) == (2, 2)  # as scipy's rule: 2 x 2 blocks 100 % full
    small = sp.coo_array((np.ones(8), (row % 8, col % 8)), shape=(8, 8))  # the same pattern, 8 x 8
    assert small.tobsr().blocksize == (2, 2)
    text = t._repr_html_()
    assert "32 x 32 cells" in text and _cells(text) == 2
    with pytest.raises(ShapeError, match=r"to_scipy\(\)"):
        np.asarray(t)
