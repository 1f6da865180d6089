"""``ust check FILE.ust``: canonical text and level summary on success, exit 1 with a
one-line error (never a traceback) on bad input."""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import pytest

import ust
from ust.cli import main

# A file left open is an error here (``ust check`` once leaked one handle per file).
pytestmark = pytest.mark.filterwarnings("error::ResourceWarning")

GOOD = """\
# two formats and a template
format Mine = (r, c) -> (r : dense, c : compressed)
format Blocks[b] = (i, j) -> (i : compressed, j floordiv b : compressed, j mod b : dense)
format Diag = (i, j) -> (j - i : compressed, j : range)
"""


def _write(tmp_path: Path, text: str, name: str = "f.ust") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_good_file_prints_canonical_text_and_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, GOOD)
    assert main(["check", path]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"{path}: 3 format(s) OK"
    assert "  Mine = (r, c) -> (r : dense, c : compressed)  (= CSR)" in lines
    assert "  Blocks[b]  (template)" in lines
    assert "  Diag = (i, j) -> (j - i : compressed, j : range)  (= DIA)" in lines
    level_lines = [ln.split() for ln in lines if ln.startswith("    level ")]
    assert level_lines[0] == ["level", "0:", "r", "dense", "buffers:", "-"]
    assert level_lines[1] == ["level", "1:", "c", "compressed", "buffers:", "pos,", "crd"]
    assert level_lines[2] == ["level", "0:", "j", "-", "i", "compressed", "buffers:", "pos,", "crd"]
    assert level_lines[3] == ["level", "1:", "j", "range", "buffers:", "-"]


def test_the_printed_text_parses_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", _write(tmp_path, GOOD)]) == 0
    out = capsys.readouterr().out
    for line in out.splitlines():
        if line.startswith("  ") and " = " in line and not line.startswith("    "):
            name, text = line.strip().split(" = ", 1)
            text = text.split("  (= ")[0]
            assert ust.format(text) == ust.parse_formats(GOOD)[name]


def test_standard_library_checks(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(resources.files("ust.formats").joinpath("standard.ust"))
    assert main(["check", path]) == 0
    out = capsys.readouterr().out
    assert "  CSR = (i, j) -> (i : dense, j : compressed)" in out.splitlines()
    assert "  BSR[r, c]  (template)" in out.splitlines()


def test_several_files_and_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("format S = (i) -> (i : compressed)\n"))
    first = _write(tmp_path, GOOD)
    assert main(["check", first, "-"]) == 0
    out = capsys.readouterr().out
    assert f"{first}: 3 format(s) OK" in out
    assert "-: 1 format(s) OK" in out
    assert "  S = (i) -> (i : compressed)  (= SparseVector)" in out


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("format A = (i, j) -> (i : dense j : compressed)\n", "line 1, column 33: unexpected 'j'"),
        ("format A = (i, j) -> (i : dense)\n", "[unused-dimension]"),
        ("format A = (i, j) -> (i : dense, j : foo)\n", "[unknown-level-type]"),
        ("#sparse_tensor.encoding<{ map = (i) -> (i : dense) }>\n", "line 1, column 1:"),
        ("format A = (i) -> (i : dense)\nformat A = (i) -> (i : dense)\n", "[duplicate-declaration]"),
        ("format T[r] = (i) -> (i floordiv c : dense, i mod c : dense)\n", "[unbound-parameter]"),
    ],
)
def test_bad_file_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str
) -> None:
    assert main(["check", _write(tmp_path, text)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err  # exactly one line
    assert err.startswith("ust check: error: ")
    assert fragment in err
    assert "Traceback" not in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing.ust")
    assert main(["check", missing]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ust check: error: ") and "missing.ust" in err


def test_directory_and_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path)]) == 1
    binary = tmp_path / "b.ust"
    binary.write_bytes(b"\xff\xfe\x00format")
    assert main(["check", str(binary)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def test_check_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check"])
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err
