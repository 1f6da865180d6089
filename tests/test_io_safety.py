"""ust.io on hostile and edge-case files: one regression test per reported defect.

5. NUL bytes and 0-row array files (a segfault and a SIGFPE in SciPy's native reader);
   empty tensors round-trip; every malformed body is a ust error naming the line.
7. Headers declaring absurd sizes are refused before anything is allocated per the header.
8. Non-UTF-8 ``.ust`` files, corrupt / truncated ``.mtx.gz``, ``.npz`` and HDF5 files are one
   ust error naming the file; a missing file stays ``FileNotFoundError``.
9. ``-0.0``, ``inf`` and ``nan`` survive mmwrite / mmread bit-exactly.
"""

from __future__ import annotations

import gzip
import io as _io
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ust
from ust import io
from ust.convert import asarray
from ust.runtime.errors import (
    FileFormatError,
    InvalidValueError,
    ShapeError,
    UnsupportedError,
    UstError,
    UstSyntaxError,
)
from ust.tensor import Tensor

HEAD = b"%%MatrixMarket matrix coordinate real general\n"


def _file(tmp_path: Path, data: bytes, name: str = "m.mtx") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _coo(shape: tuple[int, int], rows: list[int], cols: list[int], vals: np.ndarray) -> Tensor:
    """A COO tensor storing exactly these entries (explicit zeros and -0.0 kept)."""
    return Tensor(
        shape,
        "COO",
        np.asarray(vals),
        pos=[np.array([0, len(rows)]), None],
        crd=[np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)],
    )


def _bits(a: np.ndarray) -> np.ndarray:
    """The float64 bit patterns (so -0.0 != 0.0 and nan == nan)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


# ----------------------------------------------------------------------------- 5: NUL, empty files


def test_nul_bytes_are_an_error_not_a_segfault(tmp_path: Path) -> None:
    p = _file(tmp_path, HEAD + b"2 2 1\n1 1 1\0\0\n")
    with pytest.raises(FileFormatError, match=r"line 3: NUL byte") as info:
        io.mmread(p)
    assert info.value.line == 3 and info.value.path == str(p)
    assert isinstance(info.value, ValueError)


def test_cli_convert_of_bad_files_is_one_line(tmp_path: Path) -> None:
    """In a subprocess: a crash of the reader would show as a signal, not exit code 1."""
    bad = [
        _file(tmp_path, HEAD + b"2 2 1\n1 1 1\0\0\n", "nul.mtx"),
        _file(tmp_path, b"%%MatrixMarket matrix array real general\n0 3\n1\n", "zero.mtx"),
        _file(tmp_path, HEAD + b"2 2 99999999999999\n1 1 1\n", "huge.mtx"),
        _file(tmp_path, gzip.compress(HEAD + b"2 2 1\n1 1 1\n")[:-6], "cut.mtx.gz"),
        _file(tmp_path, b"PK\x03\x04junk", "junk.npz"),
    ]
    for p in bad:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ust",
                "convert",
                str(p),
                "--format",
                "CSR",
                "-o",
                str(tmp_path / "o.npz"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1, (p, proc.returncode, proc.stderr)
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ust convert: error: ") and p.name in err[0], proc.stderr


def test_zero_row_array_file(tmp_path: Path) -> None:
    """What mmwrite writes for an empty dense tensor (SciPy's reader died of SIGFPE on it)."""
    io.mmwrite(tmp_path / "e.mtx", asarray(np.zeros((0, 5)), "DenseRowMajor"))
    assert (tmp_path / "e.mtx").read_bytes() == b"%%MatrixMarket matrix array real general\n0 5\n"
    t = io.mmread(tmp_path / "e.mtx")
    assert t.shape == (0, 5) and t.format == ust.formats.DenseRowMajor and t.values.shape == (0,)


FIELD_DTYPES = {"real": np.float64, "integer": np.int64, "complex": np.complex128, "pattern": np.float64}


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0)])
@pytest.mark.parametrize("layout", ["coordinate", "array"])
@pytest.mark.parametrize("field", ["real", "integer", "complex", "pattern"])
def test_empty_round_trip(tmp_path: Path, shape: tuple[int, int], layout: str, field: str) -> None:
    if layout == "array" and field == "pattern":
        pytest.skip("an array file has no pattern field")
    dtype = FIELD_DTYPES[field]
    name = "COO" if layout == "coordinate" else "DenseRowMajor"
    t = asarray(np.zeros(shape, dtype=dtype), name)
    io.mmwrite(tmp_path / "e.mtx", t, field=field)
    text = (tmp_path / "e.mtx").read_text()
    assert text.splitlines()[0] == f"%%MatrixMarket matrix {layout} {field} general"
    u = io.mmread(tmp_path / "e.mtx")
    assert u.shape == shape and u.nse == 0 and u.format == t.format and u.dtype == dtype
    symmetries = ["general", "symmetric", "skew-symmetric", "hermitian"] if shape == (0, 0) else ["general"]
    for sym in symmetries:
        if sym == "skew-symmetric" and field == "pattern":
            continue
        banner = f"%%MatrixMarket matrix {layout} {field} {sym}\n"
        size = "0 0 0\n" if layout == "coordinate" else "0 0\n"
        p = _file(tmp_path, (banner + size).encode(), "s.mtx")
        u = io.mmread(p)
        assert u.shape == (0, 0) and u.nse == 0 and u.dtype == dtype


@pytest.mark.parametrize(
    ("banner", "body"),
    [
        ("coordinate real symmetric", "4 4 4\n1 1 1.5\n3 1 -2\n4 2 3e-3\n4 4 -0.0\n"),
        ("coordinate integer skew-symmetric", "3 3 2\n2 1 4\n3 2 -7\n"),
        ("coordinate complex hermitian", "3 3 3\n1 1 1 0\n2 1 2 3\n3 2 -1.5 0.25\n"),
        ("coordinate pattern symmetric", "3 3 3\n1 1\n3 1\n3 2\n"),
        ("coordinate pattern general", "2 3 2\n1 3\n2 1\n"),
        ("array real symmetric", "3 3\n1\n2\n3\n4\n5\n6\n"),
        ("array integer skew-symmetric", "3 3\n1\n2\n3\n"),
        ("array complex hermitian", "2 2\n1 0\n2 3\n4 0\n"),
        ("array complex general", "2 2\n1 -0.0\n2 3\n4 0\n5 5\n"),
    ],
)
def test_symmetry_expanded_as_scipy_does(tmp_path: Path, banner: str, body: str) -> None:
    p = _file(tmp_path, f"%%MatrixMarket matrix {banner}\n% comment\n{body}".encode())
    ref = scipy.io.mmread(p)  # a valid file: SciPy's reader is the reference
    ref = ref.toarray() if sp.issparse(ref) else ref
    t = io.mmread(p)
    got = t.todense()
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)
    assert t.format == (ust.formats.COO if "coordinate" in banner else ust.formats.DenseRowMajor)


@pytest.mark.parametrize(
    ("body", "error", "line", "match"),
    [
        ("2 2 2\n1 1 1\n3 1 1\n", ShapeError, 4, r"row index 3 is outside 1\.\.2"),
        ("2 2 2\n1 1 1\n1 0 1\n", ShapeError, 4, r"column index 0 is outside 1\.\.2"),
        ("2 2 2\n1 1 1\n-1 1 1\n", ShapeError, 4, "row index -1"),
        ("2 2 3\n1 1 1\n2 1 1\n", FileFormatError, 5, "ends after 2 entries; the header declares 3"),
        ("2 2 1\n1 1 1\n2 1 1\n", FileFormatError, 4, "more entries than the 1"),
        ("2 2 2\n1 1 1\n2 1 abc\n", FileFormatError, 4, r"'abc' is not a valid number"),
        ("2 2 2\n1 1 1\n2 x 1\n", FileFormatError, 4, r"'x' is not a valid number"),
        ("2 2 2\n1 1 1\n2 1.0 1\n", FileFormatError, 4, r"'1\.0' is not a valid number"),
        ("2 2 1\n1 1 0x10\n", FileFormatError, 3, "not a valid number"),
        ("2 2 1\n1 1 1_0\n", FileFormatError, 3, "not a valid number"),
        ("2 2 1\n1 1 \xc3\xa9\n", FileFormatError, 3, "not a valid number"),
        ("2 2 1\n99999999999999999999999 1 1\n", FileFormatError, 3, "not a valid number"),
        ("2 2 2\n1 1 1\n2 1\n", FileFormatError, 4, "expected 3 fields, found 2"),
        ("2 2 2\n1 1 1\n\n% a comment\n2 1 1 7\n", FileFormatError, 6, "expected 3 fields, found 4"),
        ("2 2\n1 1 1\n", FileFormatError, 2, "size line needs 3 integers"),
        ("2 -2 1\n1 1 1\n", FileFormatError, 2, "size '-2' is not a non-negative integer"),
        ("", FileFormatError, 2, "ends before the size line"),
    ],
)
def test_malformed_bodies_name_the_line(
    tmp_path: Path, body: str, error: type[Exception], line: int, match: str
) -> None:
    p = _file(tmp_path, HEAD + body.encode("latin-1"))
    with pytest.raises(error, match=match) as info:
        io.mmread(p)
    assert f"line {line}:" in str(info.value) and str(p) in str(info.value)
    if isinstance(info.value, FileFormatError):
        assert info.value.line == line


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"hello\n", FileFormatError, "must start with %%MatrixMarket"),
        (b"%%MatrixMarket matrix coordinate real\n1 1 0\n", FileFormatError, "needs 4 words"),
        (b"%%MatrixMarket vector coordinate real general\n1 0\n", UnsupportedError, "'vector'"),
        (b"%%MatrixMarket matrix sparse real general\n1 1 0\n", FileFormatError, "layout 'sparse'"),
        (b"%%MatrixMarket matrix coordinate quaternion general\n1 1 0\n", FileFormatError, "field"),
        (b"%%MatrixMarket matrix coordinate real upper\n1 1 0\n", FileFormatError, "symmetry 'upper'"),
        (b"%%MatrixMarket matrix array pattern general\n1 1\n", FileFormatError, "pattern"),
        (b"%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n", ShapeError, "must be square"),
        (b"%%MatrixMarket matrix coordinate pattern skew-symmetric\n2 2 0\n", FileFormatError, "skew"),
        (
            b"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n",
            FileFormatError,
            "ends after 3 entries",
        ),
        (
            b"%%MatrixMarket matrix array real general\n1 2\n1 2\n",
            FileFormatError,
            "expected 1 fields, found 2",
        ),
    ],
)
def test_malformed_headers(tmp_path: Path, data: bytes, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        io.mmread(_file(tmp_path, data))


def test_crlf_comments_and_blank_lines_are_read(tmp_path: Path) -> None:
    p = _file(
        tmp_path,
        b"%%MatrixMarket Matrix Coordinate Real General\r\n%c\r\n\r\n2 2 2\r\n\r\n1 1 1.5\r\n% mid\r\n2 2 -2\r\n",
    )
    np.testing.assert_array_equal(io.mmread(p).todense(), [[1.5, 0], [0, -2]])


def test_read_arguments_are_checked_before_reading(tmp_path: Path) -> None:
    absent = tmp_path / "absent.mtx"
    with pytest.raises(UnsupportedError, match="index_dtype"):
        io.mmread(absent, index_dtype="int16")
    with pytest.raises(UnsupportedError, match="float16"):
        io.mmread(absent, dtype="float16")
    with pytest.raises(UstError):
        io.mmread(absent, "(i, j) -> (i : dens)")
    with pytest.raises(FileNotFoundError):
        io.mmread(absent)


# ----------------------------------------------------------------------------- 7: absurd sizes


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (HEAD + b"2 2 99999999999999\n1 1 1\n", FileFormatError, "declares 99999999999999 entries"),
        (
            b"%%MatrixMarket matrix array real general\n4611686018427387904 4611686018427387904\n1\n",
            ShapeError,
            "4611686018427387904 x 4611686018427387904 array is too large",
        ),
        (b"%%MatrixMarket matrix array real general\n3037000499 3037000499\n1\n", ShapeError, "too large"),
        (b"%%MatrixMarket matrix array real general\n100000 100000\n1\n", FileFormatError, "10000000000"),
        (b"%%MatrixMarket matrix array real symmetric\n100000 100000\n1\n", FileFormatError, "5000050000"),
        (
            HEAD + b"9223372036854775808 2 1\n1 1 1\n",
            ShapeError,
            "9223372036854775808 is larger than 2\\*\\*63",
        ),
    ],
)
def test_absurd_header_sizes_are_refused_without_allocating(
    tmp_path: Path, data: bytes, error: type[Exception], match: str
) -> None:
    p = _file(tmp_path, data)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(error, match=match):
            io.mmread(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and time.perf_counter() - t0 < 5


def test_huge_sparse_shape_reads_in_file_memory(tmp_path: Path) -> None:
    n = 2**62
    p = _file(tmp_path, HEAD + f"{n} {n} 2\n{n} 3 -0.0\n1 {n} 2.5\n".encode())
    tracemalloc.start()
    try:
        t = io.mmread(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert t.shape == (n, n) and t.format == ust.formats.COO and t.index_dtype == np.int64
    np.testing.assert_array_equal(t.crd(0), [0, n - 1])
    np.testing.assert_array_equal(t.crd(1), [n - 1, 2])
    assert _bits(t.values).tolist() == _bits(np.array([2.5, -0.0])).tolist()


# ----------------------------------------------------------------------------- 8: bad containers


def test_load_formats_non_utf8(tmp_path: Path) -> None:
    p = tmp_path / "f.ust"
    p.write_bytes(b"format A = (i) -> (i : dense)\n# caf\xe9\n")
    with pytest.raises(UstSyntaxError, match=r"f\.ust: line 2, column 6: not UTF-8") as info:
        ust.load_formats(p)
    assert (info.value.line, info.value.column) == (2, 6)
    p.write_bytes(b"\xef\xbb\xbfformat A = (i) -> (i : dense)\n")  # a byte-order mark is fine
    assert list(ust.load_formats(p)) == ["A"]
    with pytest.raises(FileNotFoundError):
        ust.load_formats(tmp_path / "absent.ust")


def _gz_cases() -> list[tuple[str, bytes]]:
    good = gzip.compress(HEAD + b"3 3 2\n1 1 1\n3 2 2\n")
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    return [
        ("truncated", good[: len(good) - 9]),
        ("cut in the header", good[:5]),
        ("flipped", bytes(flipped)),
        ("bad crc", good[:-8] + b"\0\0\0\0" + good[-4:]),
        ("not gzip", b"hello world"),
    ]


@pytest.mark.parametrize(("what", "data"), _gz_cases())
def test_corrupt_mtx_gz(tmp_path: Path, what: str, data: bytes) -> None:
    p = _file(tmp_path, data, "m.mtx.gz")
    with pytest.raises(FileFormatError, match=r"m\.mtx\.gz") as info:
        io.read(p)
    assert info.value.path == str(p)


def test_good_mtx_gz_and_bz2(tmp_path: Path) -> None:
    t = asarray(np.array([[1.0, 0], [-2.5, 3]]), "COO")
    for ext in ("mtx.gz", "mtx.bz2", "mtx.xz"):
        io.mmwrite(tmp_path / f"m.{ext}", t)
        np.testing.assert_array_equal(io.read(tmp_path / f"m.{ext}").todense(), t.todense())


def _npz_bytes(t: Tensor) -> bytes:
    import json

    buf = _io.BytesIO()

    from ust.io.binsparse import _array_names

    arrays = {
        name: (t.pos(k) if kind == "pos" else t.crd(k)) for (kind, k), name in _array_names(t.format).items()
    }
    desc = {
        "binsparse": {
            "version": "0.1",
            "format": "CSR",
            "shape": list(t.shape),
            "number_of_stored_values": t.nse,
            "data_types": {**{n: str(a.dtype) for n, a in arrays.items()}, "values": "float64"},
        }
    }
    np.savez(buf, binsparse=np.asarray(json.dumps(desc)), values=t.values, **arrays)
    return buf.getvalue()


def _with_member(data: bytes, name: str, edit: object) -> bytes:
    out = _io.BytesIO()
    with zipfile.ZipFile(_io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
        for n in zin.namelist():
            member = zin.read(n)
            zout.writestr(n, edit(member) if n == name else member)  # type: ignore[operator]
    return out.getvalue()


def test_corrupt_npz(tmp_path: Path) -> None:
    t = asarray(np.array([[1.0, 0, 2], [0, 0, 3]]), "CSR")
    good = _npz_bytes(t)
    np.testing.assert_array_equal(io.load(_file(tmp_path, good, "g.npz")).todense(), t.todense())
    flipped = bytearray(good)
    info = zipfile.ZipFile(_io.BytesIO(good)).getinfo("values.npy")
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 4
    flipped[at] ^= 0x55  # inside the stored values: the CRC no longer matches
    cases = {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "crc": bytes(flipped),
        "huge shape": _with_member(
            good, "values.npy", lambda m: m.replace(b"'shape': (3,)", b"'shape': (99999999999999,)")
        ),
        "pickle": _with_member(good, "values.npy", lambda m: m.replace(b"'<f8'", b"'|O' ")),
        "bad header": _with_member(good, "values.npy", lambda m: b"\x93NUMPY\x01\x00\xff\xff" + m[10:]),
        "short data": _with_member(good, "values.npy", lambda m: m[:-8]),
        "not npy": _with_member(good, "values.npy", lambda m: b"hello"),
    }
    for what, data in cases.items():
        p = _file(tmp_path, data, f"{what.replace(' ', '_')}.npz")
        tracemalloc.start()
        try:
            with pytest.raises(FileFormatError, match=str(p.name)) as info:
                io.load(p)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert info.value.path == str(p), what
        assert peak < 16 << 20, what
    with pytest.raises(FileFormatError, match=r"declares shape \(99999999999999,\)"):
        io.load(tmp_path / "huge_shape.npz")
    with pytest.raises(FileFormatError, match="Python objects"):
        io.load(tmp_path / "pickle.npz")
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "absent.npz")


def test_binsparse_descriptors_of_odd_types(tmp_path: Path) -> None:
    """Values of the wrong JSON type are ust errors (they used to raise TypeError)."""
    import json

    t = asarray(np.array([[1.0, 0, 2], [0, 0, 3]]), "CSR")
    io.save(tmp_path / "g.npz", t)
    with np.load(tmp_path / "g.npz") as z:
        arrays = {k: z[k] for k in z.files}
    base = json.loads(str(arrays.pop("binsparse")))
    edits = [
        ("structure", ["symmetric_lower"]),
        ("fill", "yes"),
        ("index_base", True),
        ("shape", [2**63, 3]),
        ("shape", [True, 3]),
        ("number_of_stored_values", 10**30),
    ]
    for key, value in edits:
        d = json.loads(json.dumps(base))
        d["binsparse"][key] = value
        np.savez(tmp_path / "b.npz", binsparse=np.asarray(json.dumps(d)), **arrays)
        with pytest.raises(UstError):
            io.load(tmp_path / "b.npz")
    d = json.loads(json.dumps(base))
    d["binsparse"]["format"] = "custom"
    d.pop("ust")
    d["binsparse"]["custom"] = {"transpose": [[0], 1], "level": {"level_desc": "element"}}
    np.savez(tmp_path / "c.npz", binsparse=np.asarray(json.dumps(d)), **arrays)
    with pytest.raises(UstError, match="transpose"):
        io.load(tmp_path / "c.npz")


def test_iso_values_with_a_huge_count_allocate_nothing(tmp_path: Path) -> None:
    import json

    desc = {
        "binsparse": {
            "version": "0.1",
            "format": "DVEC",
            "shape": [10**15],
            "number_of_stored_values": 10**15,
            "data_types": {"values": "iso[float64]"},
        }
    }
    np.savez(tmp_path / "iso.npz", binsparse=np.asarray(json.dumps(desc)), values=np.array([1.0]))
    tracemalloc.start()
    try:
        with pytest.raises(UstError):
            io.load(tmp_path / "iso.npz")  # a dense tensor of 10**15 values cannot be stored
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_corrupt_hdf5(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    io.save(tmp_path / "g.h5", asarray(np.eye(3), "CSR"))
    good = (tmp_path / "g.h5").read_bytes()
    for what, data in {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "junk": b"\x89HDF\r\n\x1a\n" + b"x" * 100,
    }.items():
        p = _file(tmp_path, data, f"{what}.h5")
        with pytest.raises(FileFormatError, match=p.name):
            io.load(p)
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "absent.h5")


# ----------------------------------------------------------------------------- 9: bit-exact values

SPECIAL = np.array(
    [-0.0, 0.0, np.inf, -np.inf, np.nan, 5e-324, -2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3]
)


def test_signed_zero_inf_nan_round_trip_coordinate(tmp_path: Path) -> None:
    n = SPECIAL.size
    t = _coo((n, n), list(range(n)), list(range(n))[::-1], SPECIAL)
    before = {k: v.copy() for k, v in t.buffers().items()}
    io.mmwrite(tmp_path / "s.mtx", t)
    for k, v in t.buffers().items():  # the caller's tensor is untouched
        assert np.array_equal(v, before[k], equal_nan=True)
    u = io.mmread(tmp_path / "s.mtx")
    order = np.argsort(np.arange(n))  # COO of distinct rows: row order = file order
    assert _bits(u.values).tolist() == _bits(SPECIAL[order]).tolist()
    text = (tmp_path / "s.mtx").read_text()
    assert "1 10 -0.0\n" in text and " nan\n" in text and " -inf\n" in text
    ref = scipy.io.mmread(tmp_path / "s.mtx")  # SciPy reads these spellings too
    np.testing.assert_array_equal(ref.toarray(), u.todense())


def test_signed_zero_inf_nan_round_trip_dense_and_complex(tmp_path: Path) -> None:
    d = SPECIAL.reshape(2, 5)
    io.mmwrite(tmp_path / "d.mtx", asarray(d, "DenseRowMajor"))
    u = io.mmread(tmp_path / "d.mtx")
    assert _bits(u.todense()).tolist() == _bits(d).tolist()
    z = np.empty(SPECIAL.size, np.complex128)
    z.real, z.imag = SPECIAL, SPECIAL[::-1]
    io.mmwrite(tmp_path / "z.mtx", asarray(z.reshape(5, 2), "DenseRowMajor"))
    back = io.mmread(tmp_path / "z.mtx").todense().reshape(-1)
    assert _bits(back.real).tolist() == _bits(z.real).tolist()
    assert _bits(back.imag).tolist() == _bits(z.imag).tolist()


def test_random_floats_round_trip_bit_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    vals = rng.standard_normal(2000) * 10.0 ** rng.integers(-300, 300, 2000)
    t = _coo((2000, 3), list(range(2000)), [1] * 2000, vals)
    io.mmwrite(tmp_path / "r.mtx", t)
    assert _bits(io.mmread(tmp_path / "r.mtx").values).tolist() == _bits(vals).tolist()
    f32 = (rng.standard_normal(2000) * 10.0 ** rng.integers(-40, 38, 2000)).astype(np.float32)
    io.mmwrite(tmp_path / "f.mtx", _coo((2000, 3), list(range(2000)), [1] * 2000, f32))
    back = io.mmread(tmp_path / "f.mtx", dtype="float32").values
    assert np.array_equal(back.view(np.uint32), f32.view(np.uint32))


def test_integers_and_precision(tmp_path: Path) -> None:
    ints = np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max])
    t = _coo((4, 1), [0, 1, 2, 3], [0, 0, 0, 0], ints)
    io.mmwrite(tmp_path / "i.mtx", t)
    u = io.mmread(tmp_path / "i.mtx")
    assert u.dtype == np.int64 and u.values.tolist() == ints.tolist()
    io.mmwrite(tmp_path / "p.mtx", _coo((1, 1), [0], [0], np.array([1 / 3])), precision=4)
    assert (tmp_path / "p.mtx").read_text().splitlines()[-1] == "1 1 0.3333"


def test_write_options_are_checked(tmp_path: Path) -> None:
    t = asarray(np.array([[1.0, 2], [0, 1]]), "CSR")
    with pytest.raises(InvalidValueError, match="not symmetric"):
        io.mmwrite(tmp_path / "w.mtx", t, symmetry="symmetric")
    with pytest.raises(InvalidValueError, match="field"):
        io.mmwrite(tmp_path / "w.mtx", t, field="quaternion")
    with pytest.raises(InvalidValueError, match="whole numbers"):
        io.mmwrite(tmp_path / "w.mtx", asarray(np.array([[1.5]]), "CSR"), field="integer")
    with pytest.raises(InvalidValueError, match="pattern"):
        io.mmwrite(tmp_path / "w.mtx", asarray(np.eye(2), "DenseRowMajor"), field="pattern")
    with pytest.raises(ShapeError, match="square"):
        io.mmwrite(tmp_path / "w.mtx", asarray(np.ones((2, 3)), "CSR"), symmetry="symmetric")
    assert not (tmp_path / "w.mtx").exists()
    h = asarray(np.array([[1, 2 - 1j], [2 + 1j, 3]]), "DenseRowMajor")
    io.mmwrite(tmp_path / "h.mtx", h, symmetry="hermitian")
    np.testing.assert_array_equal(scipy.io.mmread(tmp_path / "h.mtx"), h.todense())
    np.testing.assert_array_equal(io.mmread(tmp_path / "h.mtx").todense(), h.todense())


@pytest.mark.parametrize("symmetry", ["general", "symmetric", "skew-symmetric", "hermitian"])
@pytest.mark.parametrize("dense", [False, True])
def test_scipy_reads_what_ust_writes(tmp_path: Path, symmetry: str, dense: bool) -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 4, size=(5, 5)).astype(np.complex128 if symmetry == "hermitian" else np.float64)
    a[rng.random(a.shape) < 0.5] = 0
    if symmetry == "hermitian":
        a = a + 1j * np.triu(a, 1)
    a = {
        "general": a,
        "symmetric": a + a.T,
        "skew-symmetric": a - a.T,
        "hermitian": np.triu(a) + np.triu(a, 1).conj().T + 0 * a,
    }[symmetry]
    if symmetry == "hermitian":
        a = a - 1j * np.diag(np.diag(a).imag)
    t = asarray(a, "DenseRowMajor" if dense else "CSR")
    io.mmwrite(tmp_path / "w.mtx", t, symmetry=symmetry)
    ref = scipy.io.mmread(tmp_path / "w.mtx")
    np.testing.assert_array_equal(ref.toarray() if sp.issparse(ref) else ref, a)
    np.testing.assert_array_equal(io.mmread(tmp_path / "w.mtx").todense(), a)


def test_matches_scipy_on_a_large_random_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many body chunks (made small here); sorted row-major, as SciPy reads it."""
    from ust.io import _mmio

    monkeypatch.setattr(_mmio, "_CHUNK", 4096)
    a = sp.random_array((3000, 2000), density=0.02, rng=np.random.default_rng(2), format="coo")
    scipy.io.mmwrite(tmp_path / "r.mtx", a)
    ref = sp.coo_array(scipy.io.mmread(tmp_path / "r.mtx"))
    ref.sum_duplicates()
    t = io.mmread(tmp_path / "r.mtx")
    assert np.array_equal(t.crd(0), ref.coords[0]) and np.array_equal(t.crd(1), ref.coords[1])
    assert _bits(t.values).tolist() == _bits(ref.data).tolist()


def test_cli_solve_of_a_bad_file_is_one_line(tmp_path: Path) -> None:
    """``ust solve`` reads with ust's reader too (it used SciPy's, which segfaults on NULs)."""
    for p in (
        _file(tmp_path, HEAD + b"2 2 1\n1 1 1\0\0\n", "nul.mtx"),
        _file(tmp_path, HEAD + b"2 2 99999999999999\n1 1 1\n", "huge.mtx"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "ust", "solve", str(p)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 1, (p, proc.returncode, proc.stderr)
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ust solve: error: ") and p.name in err[0], proc.stderr
