"""ust.io: Matrix Market and Binsparse files, exact round trips, foreign files, bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ust.formats as F
from tests.support import DENSE_2D, SPARSE_2D
from ust import io
from ust.convert import asarray
from ust.runtime.errors import FormatError, ShapeError, UnsupportedError
from ust.tensor import Tensor

# 6 x 8: an empty row (3), an empty column (5), values that show where they went.
M = np.array(
    [
        [1.0, 0, 2, 0, 0, 0, 0, 3],
        [0, 4, 0, 0, 5, 0, 0, 0],
        [6, 0, 7, 0, 0, 0, 8, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [0, 9, 0, 10, 0, 0, 0, 11],
        [12, 0, 0, 0, 13, 0, 14, 0],
    ]
)

STANDARD_2D = [*SPARSE_2D, "BSR[2,2]", "BSR[3,2]", "BSC[2,2]", "NM[2,4]", *DENSE_2D]
USER_FORMATS = [
    "(i, j) -> (i : dense, j : loose_compressed)",
    "(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)",
    "(i, j) -> (i floordiv 2 : compressed, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)",
    "(i, j) -> (j : compressed(nonunique), i : singleton)",
    "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonordered))",
]
CONTAINERS = ["npz", "h5"]


def _containers(ext: str) -> None:
    if ext == "h5":
        pytest.importorskip("h5py")


def _assert_same(t: Tensor, u: Tensor) -> None:
    """Equal format, shape and every buffer (dtype included)."""
    assert u.format == t.format
    assert u.shape == t.shape
    assert u.index_dtype == t.index_dtype
    for k in range(t.format.nlevels):
        for a, b in ((t.pos(k), u.pos(k)), (t.crd(k), u.crd(k))):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == b.dtype and a.shape == b.shape
                assert np.array_equal(a, b)
    assert u.values.dtype == t.values.dtype and u.values.shape == t.values.shape
    assert np.array_equal(u.values, t.values)


def _snapshot(t: Tensor) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in t.buffers().items()}


def _descriptor(path: Path) -> dict[str, Any]:
    if path.suffix == ".npz":
        with np.load(path) as z:
            return json.loads(str(z["binsparse"]))
    import h5py

    with h5py.File(path) as f:
        return json.loads(f.attrs["binsparse"])


# ----------------------------------------------------------------------------- exact round trips


@pytest.mark.parametrize("ext", CONTAINERS)
@pytest.mark.parametrize("name", STANDARD_2D)
@pytest.mark.parametrize(
    ("dtype", "itype"), [("float64", "int32"), ("complex128", "int64"), ("float32", "int64")]
)
def test_round_trip_standard(tmp_path: Path, ext: str, name: str, dtype: str, itype: str) -> None:
    _containers(ext)
    src = M.astype(dtype)
    if dtype.startswith("complex"):
        src = src + 1j * (src != 0)
    t = asarray(src, name, index_dtype=itype)
    before = _snapshot(t)
    path = tmp_path / f"m.{ext}"
    io.save(path, t)
    u = io.load(path)
    _assert_same(t, u)
    np.testing.assert_array_equal(u.todense(), src)
    for k, v in t.buffers().items():  # the caller's tensor is untouched
        assert np.array_equal(v, before[k])


@pytest.mark.parametrize("ext", CONTAINERS)
@pytest.mark.parametrize("text", USER_FORMATS)
def test_round_trip_user_formats(tmp_path: Path, ext: str, text: str) -> None:
    _containers(ext)
    t = asarray(M, text)
    path = tmp_path / f"u.{ext}"
    io.save(path, t, compress=True)
    u = io.load(path)
    _assert_same(t, u)
    np.testing.assert_array_equal(u.todense(), M)


def _dense3() -> np.ndarray:
    rng = np.random.default_rng(3)
    D = rng.integers(1, 9, size=(3, 4, 5)).astype(float)
    D[rng.random(D.shape) < 0.6] = 0
    D[1] = 0
    return D


@pytest.mark.parametrize("ext", CONTAINERS)
@pytest.mark.parametrize("name", ["CSF", "COO3", "Dense3", "BatchedCSR"])
def test_round_trip_3d(tmp_path: Path, ext: str, name: str) -> None:
    _containers(ext)
    D = _dense3()
    t = asarray(D, name)
    path = tmp_path / f"t.{ext}"
    io.save(path, t)
    u = io.load(path)
    _assert_same(t, u)
    np.testing.assert_array_equal(u.todense(), D)


@pytest.mark.parametrize("name", ["SparseVector", "DenseVector"])
def test_round_trip_vectors(tmp_path: Path, name: str) -> None:
    v = np.array([0.0, 1.5, 0, 0, -2, 0, 3])
    t = asarray(v, name)
    io.save(tmp_path / "v.npz", t)
    _assert_same(t, io.load(tmp_path / "v.npz"))
    assert _descriptor(tmp_path / "v.npz")["binsparse"]["format"] == {"SparseVector": "CVEC"}.get(
        name, "DVEC"
    )


def test_round_trip_empty_and_integer_values(tmp_path: Path) -> None:
    for src in (np.zeros((0, 4)), np.zeros((3, 5)), np.arange(12, dtype=np.int64).reshape(3, 4)):
        for name in ("CSR", "COO", "DCSC", "DIA"):
            t = asarray(src, name)
            io.save(tmp_path / "e.npz", t)
            _assert_same(t, io.load(tmp_path / "e.npz"))


def test_load_converts_on_request(tmp_path: Path) -> None:
    io.save(tmp_path / "m.npz", asarray(M, "CSR"))
    u = io.load(tmp_path / "m.npz", "BSR[2,2]")
    _assert_same(asarray(M, "BSR[2,2]"), u)


# ----------------------------------------------------------------------------- descriptors


def test_descriptor_of_csr_is_standard(tmp_path: Path) -> None:
    t = asarray(M, "CSR")
    io.save(tmp_path / "m.npz", t)
    d = _descriptor(tmp_path / "m.npz")
    bs = d["binsparse"]
    assert bs == {
        "version": "0.1",
        "format": "CSR",
        "shape": [6, 8],
        "number_of_stored_values": 14,
        "data_types": {"pointers_to_1": "int32", "indices_1": "int32", "values": "float64"},
    }
    assert d["ust"]["format"] == F.CSR.to_text() and d["ust"]["name"] == "CSR"
    with np.load(tmp_path / "m.npz") as z:
        assert sorted(z.files) == ["binsparse", "indices_1", "pointers_to_1", "values"]
        assert np.array_equal(z["pointers_to_1"], t.pos(1)) and np.array_equal(z["indices_1"], t.crd(1))


@pytest.mark.parametrize(
    ("name", "bs_format", "arrays"),
    [
        ("CSC", "CSC", ["indices_1", "pointers_to_1", "values"]),
        ("COO", "COOR", ["indices_0", "indices_1", "values"]),
        ("DCSR", "DCSR", ["indices_0", "indices_1", "pointers_to_1", "values"]),
        ("DCSC", "DCSC", ["indices_0", "indices_1", "pointers_to_1", "values"]),
        ("DenseRowMajor", "DMATR", ["values"]),
        ("DenseColMajor", "DMATC", ["values"]),
        (
            "(i, j) -> (j : compressed(nonunique), i : singleton)",
            "COOC",
            ["indices_0", "indices_1", "values"],
        ),
    ],
)
def test_predefined_names(tmp_path: Path, name: str, bs_format: str, arrays: list[str]) -> None:
    io.save(tmp_path / "m.npz", asarray(M, name))
    assert _descriptor(tmp_path / "m.npz")["binsparse"]["format"] == bs_format
    with np.load(tmp_path / "m.npz") as z:
        assert sorted(z.files) == ["binsparse", *arrays]


def test_custom_tree_where_binsparse_can_express_it(tmp_path: Path) -> None:
    io.save(
        tmp_path / "t.npz", asarray(_dense3(), "(i, j, k) -> (k : dense, i : compressed, j : compressed)")
    )
    bs = _descriptor(tmp_path / "t.npz")["binsparse"]
    assert bs["format"] == "custom"
    assert bs["custom"] == {
        "transpose": [2, 0, 1],
        "level": {
            "level_desc": "dense",
            "rank": 1,
            "level": {
                "level_desc": "sparse",
                "rank": 1,
                "level": {"level_desc": "sparse", "rank": 1, "level": {"level_desc": "element"}},
            },
        },
    }
    assert sorted(bs["data_types"]) == ["indices_1", "indices_2", "pointers_to_1", "pointers_to_2", "values"]


def test_custom_levels_of_ust_only_formats(tmp_path: Path) -> None:
    io.save(tmp_path / "d.npz", asarray(M, "DIA"))
    d = _descriptor(tmp_path / "d.npz")
    lv = d["binsparse"]["custom"]["level"]
    assert (lv["level_desc"], lv["expression"]) == ("ust:compressed", "j - i")
    assert (lv["level"]["level_desc"], lv["level"]["level"]) == ("ust:range", {"level_desc": "element"})
    assert d["ust"]["name"] == "DIA"
    # without the "ust" key such a file cannot be read, and says why
    d.pop("ust")
    with np.load(tmp_path / "d.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "binsparse"}
    np.savez(tmp_path / "bare.npz", binsparse=np.asarray(json.dumps(d)), **arrays)
    with pytest.raises(UnsupportedError, match=r"'ust:compressed'.*'ust' key"):
        io.load(tmp_path / "bare.npz")


# ----------------------------------------------------------------------------- foreign files


def _write_npz(path: Path, descriptor: dict[str, Any], **arrays: Any) -> Path:
    np.savez(
        path, binsparse=np.asarray(json.dumps(descriptor)), **{k: np.asarray(v) for k, v in arrays.items()}
    )
    return path


def _bs(fmt: str, shape: list[int], nse: int, **data_types: str) -> dict[str, Any]:
    return {
        "binsparse": {
            "version": "0.1",
            "format": fmt,
            "shape": shape,
            "number_of_stored_values": nse,
            "data_types": data_types,
        }
    }


def test_spec_iso_example(tmp_path: Path) -> None:
    d = _bs("CSR", [5, 5], 6, pointers_to_1="uint64", indices_1="uint64", values="iso[int8]")
    p = _write_npz(
        tmp_path / "iso.npz",
        d,
        pointers_to_1=np.array([0, 1, 3, 3, 5, 6], np.uint64),
        indices_1=np.array([3, 1, 4, 1, 2, 3], np.uint64),
        values=np.array([7], np.int8),
    )
    t = io.load(p)
    assert t.format == F.CSR and t.index_dtype == np.int64 and t.dtype == np.int8
    expected = np.zeros((5, 5), np.int8)
    expected[[0, 1, 1, 3, 3, 4], [3, 1, 4, 1, 2, 3]] = 7
    np.testing.assert_array_equal(t.todense(), expected)


def test_spec_symmetric_example(tmp_path: Path) -> None:
    d = _bs("CSR", [5, 5], 9, pointers_to_1="uint64", indices_1="uint64", values="int8")
    d["binsparse"]["structure"] = "symmetric_lower"
    p = _write_npz(
        tmp_path / "sym.npz",
        d,
        pointers_to_1=np.array([0, 1, 3, 5, 7, 9], np.uint64),
        indices_1=np.array([0, 0, 1, 0, 2, 1, 3, 2, 4], np.uint64),
        values=np.array([1, 2, 9, 7, 2, 2, 3, 3, 7], np.int8),
    )
    lower = np.array(
        [[1, 0, 0, 0, 0], [2, 9, 0, 0, 0], [7, 0, 2, 0, 0], [0, 2, 0, 3, 0], [0, 0, 3, 0, 7]], np.int8
    )
    t = io.load(p)
    assert t.format == F.CSR
    np.testing.assert_array_equal(t.todense(), lower + np.tril(lower, -1).T)
    ref = sp.csr_array(lower + np.tril(lower, -1).T)
    assert np.array_equal(t.pos(1), ref.indptr) and np.array_equal(t.crd(1), ref.indices)


@pytest.mark.parametrize(
    ("structure", "mirror"),
    [("skew_symmetric_upper", lambda v: -v), ("hermitian_upper", np.conj)],
)
def test_structures_upper(tmp_path: Path, structure: str, mirror: Any) -> None:
    upper = np.array([[0, 1 + 2j, 0], [0, 0, 3 - 1j], [0, 0, 0]])
    t = asarray(upper, "COO")
    d = _bs("COOR", [3, 3], t.nse, indices_0="int32", indices_1="int32", values="complex[float64]")
    d["binsparse"]["structure"] = structure
    p = _write_npz(
        tmp_path / "s.npz", d, indices_0=t.crd(0), indices_1=t.crd(1), values=t.values.view(np.float64)
    )
    np.testing.assert_array_equal(io.load(p).todense(), upper + mirror(upper).T)


def test_flat_descriptor_one_based_and_cooc(tmp_path: Path) -> None:
    c = sp.coo_array(M.T)  # COOC stores (column, row) pairs sorted by column
    c.sum_duplicates()
    flat = _bs("COOC", [6, 8], c.nnz, indices_0="uint32", indices_1="uint32", values="float64")["binsparse"]
    flat["index_base"] = 1
    p = _write_npz(
        tmp_path / "c.npz",
        flat,
        indices_0=(c.coords[0] + 1).astype(np.uint32),
        indices_1=(c.coords[1] + 1).astype(np.uint32),
        values=c.data,
    )
    t = io.load(p)
    assert t.format == F.format("(i, j) -> (j : compressed(nonunique), i : singleton)")
    np.testing.assert_array_equal(t.todense(), M)


def test_foreign_custom_tree(tmp_path: Path) -> None:
    """A custom tree without ust's key: CSC through ``transpose`` and COO as a rank-2 sparse level."""
    csc = sp.csc_array(M)
    d = _bs("custom", [6, 8], csc.nnz, pointers_to_1="int32", indices_1="int32", values="float64")
    d["binsparse"]["custom"] = {
        "transpose": [1, 0],
        "level": {
            "level_desc": "dense",
            "rank": 1,
            "level": {"level_desc": "sparse", "rank": 1, "level": {"level_desc": "element"}},
        },
    }
    p = _write_npz(tmp_path / "c.npz", d, pointers_to_1=csc.indptr, indices_1=csc.indices, values=csc.data)
    t = io.load(p)
    assert t.format == F.CSC
    np.testing.assert_array_equal(t.todense(), M)
    coo = asarray(M, "COO")
    d = _bs("custom", [6, 8], coo.nse, indices_0="int32", indices_1="int32", values="float64")
    d["binsparse"]["custom"] = {
        "level": {"level_desc": "sparse", "rank": 2, "level": {"level_desc": "element"}}
    }
    p = _write_npz(tmp_path / "o.npz", d, indices_0=coo.crd(0), indices_1=coo.crd(1), values=coo.values)
    _assert_same(coo, io.load(p))


def test_reference_implementation_interop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Binsparse reference package reads ust's files and ust reads its files."""
    bsp = pytest.importorskip("binsparse")
    a = sp.csr_array(M)
    ref = bsp.CSRMatrix(
        shape=(6, 8),
        number_of_stored_values=a.nnz,
        pointers_to_1=a.indptr.astype(np.uint64),
        indices_1=a.indices.astype(np.uint64),
        values=a.data,
    )
    bsp.save_binsparse(ref, tmp_path / "ref.npz")
    np.testing.assert_array_equal(io.load(tmp_path / "ref.npz").todense(), M)
    # the reference parses versions as SemVer ("0.1.0"); the spec writes "0.1"
    monkeypatch.setattr(io.binsparse, "BINSPARSE_VERSION", "0.1.0")
    D = _dense3()
    for name, expected in [("CSC", "CSC"), ("COO", "COOR"), ("DCSR", "DCSR"), ("CSF", "custom")]:
        io.save(tmp_path / "u.npz", asarray(D if name == "CSF" else M, name))
        back = bsp.load_binsparse(tmp_path / "u.npz")
        assert back.format == expected
        bsp.save_binsparse(back, tmp_path / "again.npz")
        np.testing.assert_array_equal(io.load(tmp_path / "again.npz").todense(), D if name == "CSF" else M)


# ----------------------------------------------------------------------------- bad files


def _good(tmp_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    t = asarray(M, "CSR")
    io.save(tmp_path / "g.npz", t)
    with np.load(tmp_path / "g.npz") as z:
        return json.loads(str(z["binsparse"])), {k: z[k] for k in z.files if k != "binsparse"}


def _edit(d: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *head, last = path.split(".")
    node = d
    for k in head:
        node = node[k]
    if value is _DROP:
        node.pop(last)
    else:
        node[last] = value
    return d


_DROP = object()


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (("binsparse.version", "2.0"), FormatError, "unsupported Binsparse version '2.0'"),
        (("binsparse.version", 1), FormatError, "unsupported Binsparse version 1"),
        (("binsparse.shape", _DROP), FormatError, "lacks 'shape'"),
        (("binsparse.data_types", _DROP), FormatError, "lacks 'data_types'"),
        (("binsparse.shape", [6, -8]), ShapeError, "non-negative"),
        (("binsparse.shape", [6, 8, 2]), ShapeError, "2 dimensions but the shape has 3"),
        (("binsparse.format", "ELLPACK"), UnsupportedError, "unknown Binsparse format 'ELLPACK'"),
        (("binsparse.number_of_stored_values", 13), ShapeError, "'values' has 14 elements"),
        (("binsparse.data_types.values", "float128"), FormatError, "unknown Binsparse data type"),
        (("binsparse.data_types.indices_1", "float64"), FormatError, "stored as int32"),
        (("binsparse.data_types.pointers_to_1", _DROP), FormatError, "no entry for 'pointers_to_1'"),
        (("binsparse.index_base", 2), FormatError, "index_base"),
        (("binsparse.structure", "triangular"), UnsupportedError, "unknown structure"),
        (("binsparse", [1]), FormatError, "must be a JSON object"),
        (("ust.format", "(i, j) -> (j : dense, i : compressed)"), FormatError, "disagrees"),
        (("binsparse.shape", [6, 7]), ShapeError, "inconsistent arrays.*outside the level's range"),
    ],
)
def test_bad_descriptors(tmp_path: Path, edit: tuple[str, Any], error: type, match: str) -> None:
    d, arrays = _good(tmp_path)
    p = _write_npz(tmp_path / "bad.npz", _edit(d, *edit), **arrays)
    with pytest.raises(error, match=match):
        io.load(p)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"pointers_to_1": np.array([0, 3, 5], np.int32)}, ShapeError, "inconsistent arrays.*pos has 3"),
        ({"pointers_to_1": np.array([0, 3, 2, 5, 5, 9, 14], np.int32)}, FormatError, "inconsistent arrays"),
        (
            {"indices_1": np.array([0, 2, 7, 1, 4, 0, 2, 6, 1, 3, 7, 0, 4, 9], np.int32)},
            ShapeError,
            "outside",
        ),
        ({"indices_1": np.array([0, 2, 7, 1, 4, 0, 2, 6, 1, 3, 7, 4, 0, 6], np.int32)}, FormatError, "order"),
        ({"values": np.ones(3)}, ShapeError, "'values' has 3 elements"),
    ],
)
def test_inconsistent_arrays(tmp_path: Path, change: dict[str, np.ndarray], error: type, match: str) -> None:
    d, arrays = _good(tmp_path)
    arrays.update(change)
    with pytest.raises(error, match=match):
        io.load(_write_npz(tmp_path / "bad.npz", d, **arrays))


def test_missing_array_and_not_binsparse(tmp_path: Path) -> None:
    d, arrays = _good(tmp_path)
    arrays.pop("indices_1")
    with pytest.raises(FormatError, match="array 'indices_1' is missing"):
        io.load(_write_npz(tmp_path / "bad.npz", d, **arrays))
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(FormatError, match="no 'binsparse' entry"):
        io.load(tmp_path / "plain.npz")
    np.savez(tmp_path / "json.npz", binsparse=np.asarray("{not json"))
    with pytest.raises(FormatError, match="not valid JSON"):
        io.load(tmp_path / "json.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(FormatError, match=r"not a readable \.npz"):
        io.load(tmp_path / "junk.npz")


def test_nonzero_fill_is_unsupported(tmp_path: Path) -> None:
    d, arrays = _good(tmp_path)
    d["binsparse"]["fill"] = True
    d["binsparse"]["data_types"]["fill_value"] = "float64"
    with pytest.raises(UnsupportedError, match="fill value"):
        io.load(_write_npz(tmp_path / "f.npz", d, fill_value=np.array([1.0]), **arrays))
    t = io.load(_write_npz(tmp_path / "z.npz", d, fill_value=np.array([0.0]), **arrays))
    np.testing.assert_array_equal(t.todense(), M)


def test_extensions_and_missing_files(tmp_path: Path) -> None:
    t = asarray(M, "CSR")
    with pytest.raises(UnsupportedError, match=r"unknown Binsparse container extension '\.zarr'"):
        io.save(tmp_path / "m.zarr", t)
    assert not (tmp_path / "m.zarr").exists()
    with pytest.raises(UnsupportedError, match="extension"):
        io.load(tmp_path / "m.bin")
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "absent.npz")
    with pytest.raises(FileNotFoundError):
        io.mmread(tmp_path / "absent.mtx")
    with pytest.raises(UnsupportedError, match="unknown file type"):
        io.read(tmp_path / "m.txt")


def test_hdf5_bad_files(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f.create_dataset("values", data=np.ones(3))
    with pytest.raises(FormatError, match="no 'binsparse' attribute"):
        io.load(tmp_path / "plain.h5")
    (tmp_path / "junk.h5").write_bytes(b"junk")
    with pytest.raises(FormatError, match="not a readable HDF5"):
        io.load(tmp_path / "junk.h5")


def test_unsupported_value_dtype(tmp_path: Path) -> None:
    # float16 values never become a Tensor, so no file can hold them: the error comes first
    with pytest.raises(UnsupportedError, match="float16"):
        io.save(tmp_path / "h.npz", asarray(M.astype(np.float16), "CSR"))
    assert not (tmp_path / "h.npz").exists()


# ----------------------------------------------------------------------------- Matrix Market


def _mm(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.mtx"
    p.write_text(text)
    return p


def test_mmread_matches_scipy(tmp_path: Path) -> None:
    a = sp.random_array((9, 7), density=0.3, rng=np.random.default_rng(5), format="coo")
    scipy.io.mmwrite(tmp_path / "r.mtx", a)
    ref = sp.csr_array(scipy.io.mmread(tmp_path / "r.mtx"))
    t = io.mmread(tmp_path / "r.mtx")
    assert t.format == F.COO
    c = ref.tocoo()
    assert np.array_equal(t.crd(0), c.coords[0]) and np.array_equal(t.crd(1), c.coords[1])
    assert np.array_equal(t.values, c.data)
    u = io.mmread(tmp_path / "r.mtx", "CSR", index_dtype="int64", dtype="float32")
    assert u.index_dtype == np.int64 and u.dtype == np.float32
    assert np.array_equal(u.pos(1), ref.indptr) and np.array_equal(u.crd(1), ref.indices)
    _assert_same(asarray(ref.toarray(), "DIA"), io.mmread(tmp_path / "r.mtx", "DIA"))


def test_mmread_symmetric_pattern_duplicates_zeros(tmp_path: Path) -> None:
    p = _mm(
        tmp_path,
        "%%MatrixMarket matrix coordinate pattern symmetric\n% a comment\n4 4 3\n1 1\n3 1\n4 2\n",
    )
    expected = np.zeros((4, 4))
    expected[[0, 2, 0, 3, 1], [0, 0, 2, 1, 3]] = 1.0
    np.testing.assert_array_equal(io.mmread(p).todense(), expected)
    p = _mm(tmp_path, "%%MatrixMarket matrix coordinate real general\n2 3 4\n1 1 1.5\n2 3 0\n1 1 2\n1 2 -1\n")
    t = io.mmread(p, "CSR")
    assert t.nse == 3  # duplicates summed, the explicit zero kept
    np.testing.assert_array_equal(t.values, [3.5, -1.0, 0.0])
    p = _mm(tmp_path, "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 1 0\n2 1 2 3\n")
    np.testing.assert_array_equal(io.mmread(p).todense(), [[1, 2 - 3j], [2 + 3j, 0]])
    p = _mm(tmp_path, "%%MatrixMarket matrix coordinate integer skew-symmetric\n2 2 1\n2 1 4\n")
    np.testing.assert_array_equal(io.mmread(p).todense(), [[0, -4], [4, 0]])


def test_mmread_array_file(tmp_path: Path) -> None:
    p = _mm(tmp_path, "%%MatrixMarket matrix array real general\n2 3\n1\n4\n2\n5\n3\n6\n")
    t = io.mmread(p)
    assert t.format == F.DenseRowMajor
    np.testing.assert_array_equal(t.todense(), [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(io.mmread(p, "CSC").todense(), [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize(
    "name", ["CSR", "COO", "DIA", "BSR[2,2]", "NM[2,4]", "DenseColMajor", USER_FORMATS[1]]
)
def test_mmwrite_any_format(tmp_path: Path, name: str) -> None:
    t = asarray(M, name)
    io.mmwrite(tmp_path / "w.mtx", t, comment="written by ust")
    back = scipy.io.mmread(tmp_path / "w.mtx")
    np.testing.assert_array_equal(back.toarray() if sp.issparse(back) else back, M)
    np.testing.assert_array_equal(io.mmread(tmp_path / "w.mtx").todense(), M)
    assert "written by ust" in (tmp_path / "w.mtx").read_text()


def test_mmwrite_symmetry_and_errors(tmp_path: Path) -> None:
    S = M[:, :6] + M[:, :6].T
    io.mmwrite(tmp_path / "s.mtx", asarray(S, "CSR"), symmetry="symmetric")
    assert "symmetric" in (tmp_path / "s.mtx").read_text().splitlines()[0]
    np.testing.assert_array_equal(io.mmread(tmp_path / "s.mtx").todense(), S)
    with pytest.raises(ShapeError, match="hold matrices"):
        io.mmwrite(tmp_path / "t.mtx", asarray(_dense3(), "CSF"))
    p = _mm(tmp_path, "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n")
    with pytest.raises(FormatError, match="not a valid Matrix Market file"):
        io.mmread(p)
    p = _mm(tmp_path, "hello\n")
    with pytest.raises(FormatError, match="not a valid Matrix Market file"):
        io.mmread(p)


def test_read_write_by_extension(tmp_path: Path) -> None:
    t = asarray(M, "DCSR")
    for ext in ("mtx", "npz"):
        io.write(tmp_path / f"a.{ext}", t)
        np.testing.assert_array_equal(io.read(tmp_path / f"a.{ext}", "CSR").todense(), M)
    _assert_same(t, io.read(tmp_path / "a.npz"))
