"""``ust show`` and ``ust convert``: output on good input, exit 1 with one line on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from ust import cli, io
from ust.cli.tensor import (
    configure_convert,
    configure_show,
    run_convert,
    run_show,
    sample_tensor,
    text_picture,
)
from ust.convert import asarray
from ust.formats import resolve
from ust.runtime.errors import UstError

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


def _main(argv: list[str]) -> int:
    """``ust.cli.main`` once show/convert are registered there; until then the same contract
    (errors of ust's hierarchy, OSError and ValueError -> one line on stderr, exit 1)."""
    if "show" in getattr(cli, "_COMMANDS", {}):
        return cli.main(argv)
    parser = argparse.ArgumentParser(prog="ust")
    sub = parser.add_subparsers(dest="command")
    configure_show(sub.add_parser("show"))
    configure_convert(sub.add_parser("convert"))
    args = parser.parse_args(argv)
    try:
        return {"show": run_show, "convert": run_convert}[args.command](args)
    except (UstError, OSError, ValueError) as exc:
        print(f"ust {args.command}: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1


def _mtx(tmp_path: Path, a: object = None) -> str:
    path = tmp_path / "m.mtx"
    scipy.io.mmwrite(path, sp.coo_array(M) if a is None else a)
    return str(path)


# ----------------------------------------------------------------------------- show


def test_show_format_prints_buffers_and_picture(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["show", "CSR"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    t = sample_tensor(resolve("CSR"))
    assert t.shape == (6, 8)
    lines = out.splitlines()
    assert lines[0] == "CSR = (i, j) -> (i : dense, j : compressed)"
    assert "    pos(1) = " + np.array2string(t.pos(1), separator=" ") in lines
    assert "  level 0: i : dense       extent 6  (no buffers)" in lines
    picture = lines[-7:]
    assert picture[0].strip() == "01234567"
    assert picture[4] == "  3 " + "." * 8  # the sample's empty row
    dense = t.todense()
    assert [row[4:] for row in picture[1:]] == ["".join("#" if v else "." for v in r) for r in dense]


def test_show_block_format_marks_stored_zeros(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["show", "BSR[3,3]"]) == 0  # 6 x 8 rounded up to 6 x 9
    out = capsys.readouterr().out
    assert "shape (6, 9)" in out
    assert "o" in out.split("sparsity")[1]


@pytest.mark.parametrize(
    ("target", "shape", "expect"),
    [
        ("NM[2,4]", None, "pruned to the 2 largest of every 4"),
        ("SparseVector", None, "a length-8 sample"),
        ("BatchedCSR", "2,3,4", "rows are dims 0..1 flattened"),
        ("(i, j) -> (j - i : compressed, i : range)", "4,5", "= (i, j) -> (j - i : compressed, i : range)"),
        ("(r, c) -> (c floordiv 2 : compressed, r : dense, c mod 2 : dense)", "3x4", "custom format"),
    ],
)
def test_show_other_formats(
    capsys: pytest.CaptureFixture[str], target: str, shape: str | None, expect: str
) -> None:
    assert _main(["show", target] + (["--shape", shape] if shape else [])) == 0
    assert expect in capsys.readouterr().out


def test_show_file_and_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _mtx(tmp_path)
    assert _main(["show", path, "--format", "DIA"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{path}: COO = ")
    assert "converted to DIA = (i, j) -> (j - i : compressed, j : range)" in out
    d = asarray(M, "DIA")
    assert "    crd(0) = " + np.array2string(d.crd(0), separator=" ") in out
    io.save(tmp_path / "m.npz", asarray(M, "DCSC"))
    assert _main(["show", str(tmp_path / "m.npz")]) == 0
    assert "DCSC = " in capsys.readouterr().out


def test_show_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "s.png"
    assert _main(["show", "BSR[2,2]", "--png", str(png)]) == 0
    assert f"picture: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_picture_of_a_large_matrix() -> None:
    n = 2000
    a = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1], format="csr")
    lines = text_picture(asarray(a), max_rows=10, max_cols=20)
    assert lines[0].startswith("(2000 x 2000 in 10 x 20 cells")
    body = lines[1:]
    assert len(body) == 10 and all(len(row) == 22 for row in body)
    # the band: every row of cells has its stored entries on the diagonal cells
    for r, row in enumerate(body):
        assert row[1 + 2 * r] != " " and row[1 + 2 * r + 1] != " "
        assert row[1:].replace(" ", "").replace("|", "") != ""
    assert text_picture(asarray(np.zeros((0, 3)), "CSR")) == ["(empty)"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "BSR[2,"], "ust show: error: "),
        (["show", "(i, j) -> (i : dense)"], "ust show: error: "),
        (["show", "BSR[4,4]", "--shape", "6,8"], "does not divide"),
        (["show", "CSR", "--shape", "6,x"], "--shape must be"),
        (["show", "CSR", "--shape", "2,3,4"], "--shape 2,3,4 has 3 dimensions but the format has 2"),
        (["show", "missing.mtx"], "ust show: error: "),
        (["show", "CSR", "--format", "NOPE"], "ust show: error: "),
    ],
)
def test_show_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert _main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_show_shape_with_a_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["show", _mtx(tmp_path), "--shape", "3,3"]) == 1
    assert "--shape sets the sample of a FORMAT" in capsys.readouterr().err


# ----------------------------------------------------------------------------- convert


@pytest.mark.parametrize("out_ext", ["npz", "h5", "mtx"])
def test_convert_writes_each_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out_ext: str
) -> None:
    if out_ext == "h5":
        pytest.importorskip("h5py")
    out = tmp_path / f"o.{out_ext}"
    assert _main(["convert", _mtx(tmp_path), "--format", "BSR[2,2]", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "convert -> BSR[2, 2] = " in text and f"wrote   {out}: " in text and " in 0." in text
    back = io.read(out)
    np.testing.assert_array_equal(back.todense(), M)
    if out_ext != "mtx":
        assert back.format == resolve("BSR[2,2]")
        np.testing.assert_array_equal(back.values, asarray(M, "BSR[2,2]").values)


def test_convert_binsparse_to_binsparse_with_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    io.save(tmp_path / "in.npz", asarray(M, "CSR"))
    argv = ["convert", str(tmp_path / "in.npz"), "--format", "DIA", "-o", str(tmp_path / "o.npz")]
    assert _main([*argv, "--index-dtype", "int64", "--dtype", "float32", "--compress"]) == 0
    t = io.load(tmp_path / "o.npz")
    assert t.index_dtype == np.int64 and t.dtype == np.float32 and t.format == resolve("DIA")
    np.testing.assert_array_equal(t.todense(), M.astype(np.float32))
    assert "read    " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "CSR", "-o", "{tmp}/o.txt"], "must end in .mtx, .npz, .h5 or .hdf5"),
        (["--format", "CSF", "-o", "{tmp}/o.mtx"], "Matrix Market holds matrices"),
        (["--format", "(i, j) -> (i : dense, j : bogus)", "-o", "{tmp}/o.npz"], "ust convert: error: "),
        (["--format", "BSR[4,4]", "-o", "{tmp}/o.npz"], "does not divide"),
    ],
)
def test_convert_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = ["convert", _mtx(tmp_path), *[a.format(tmp=tmp_path) for a in args]]
    assert _main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_convert_missing_and_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "o.npz")
    assert _main(["convert", str(tmp_path / "absent.mtx"), "--format", "CSR", "-o", out]) == 1
    assert "absent.mtx" in capsys.readouterr().err
    (tmp_path / "bad.mtx").write_text("not a matrix\n")
    assert _main(["convert", str(tmp_path / "bad.mtx"), "--format", "CSR", "-o", out]) == 1
    assert "not a valid Matrix Market file" in capsys.readouterr().err
    (tmp_path / "in.txt").write_text("")
    assert _main(["convert", str(tmp_path / "in.txt"), "--format", "CSR", "-o", out]) == 1
    assert "unknown file type" in capsys.readouterr().err
    assert not Path(out).exists()
