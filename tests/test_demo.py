"""`ust demo` and the CLI's bad-input contract (exit 1, one line, no traceback)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from ust.cli import main
from ust.cli.demo import poisson3d, run


def test_demo_runs_and_checks_its_results() -> None:
    lines: list[str] = []
    res = run(n=8, out=lines.append)
    text = "\n".join(lines)
    assert "format RowBlocks4" in text and "route:" in text and "relative residual" in text
    assert res["residual"] < 1e-10
    assert set(res["formats"]) >= {"CSR", "COO", "RowBlocks4", "MyDIA"}
    assert all(err == 0 or err < 1e-12 for err in res.get("spmv_error", {}).values())


def test_demo_with_a_matrix_market_file(tmp_path, capsys) -> None:
    path = tmp_path / "a.mtx"
    a = poisson3d(4) + sp.eye_array(64)
    scipy.io.mmwrite(path, sp.coo_matrix(a))
    assert main(["demo", "--matrix", str(path)]) == 0
    assert str(path) in capsys.readouterr().out


def test_poisson_is_spd() -> None:
    a = poisson3d(3).toarray()
    assert np.allclose(a, a.T) and np.linalg.eigvalsh(a).min() > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "/nonexistent/formats.ust"],
        ["show", "(i, j) -> (i : dense, j : sing)"],
        ["show", "/nonexistent/matrix.mtx"],
        ["convert", "/nonexistent/matrix.mtx", "--format", "CSR", "-o", "/tmp/x.npz"],
        ["solve", "/nonexistent/a.mtx"],
        ["demo", "--matrix", "/nonexistent/a.mtx"],
    ],
)
def test_bad_input_exits_1_with_one_line(argv, capsys) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "error" in err and "Traceback" not in err


def test_wrong_shapes_in_solve(tmp_path, capsys) -> None:
    a = tmp_path / "a.mtx"
    b = tmp_path / "b.mtx"
    scipy.io.mmwrite(a, sp.coo_matrix(poisson3d(3)))
    scipy.io.mmwrite(b, np.ones((5, 1)))
    assert main(["solve", str(a), "--rhs", str(b)]) == 1
    assert "shape" in capsys.readouterr().err.lower()


def test_spmv_and_explain_commands(tmp_path, capsys) -> None:
    path = tmp_path / "p.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix(poisson3d(5)))
    assert main(["spmv", str(path), "--format", "DIA", "--k", "3", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "route:" in out and "max relative error vs SciPy" in out
    assert main(["explain", "matmul", str(path), "--format", "DCSR"]) == 0
    assert "generated-c" in capsys.readouterr().out
    assert main(["explain", "convert", str(path), "--to", "DIA"]) == 0
    assert main(["explain", "convert", str(path)]) == 1  # --to missing: one-line error


def test_progress_line_only_for_long_work() -> None:
    import io
    import time

    from ust.cli.progress import progress

    buf = io.StringIO()
    with progress("quick", stream=buf, force=True, delay=0.5):
        pass
    assert buf.getvalue() == ""
    with progress("slow", stream=buf, force=True, delay=0.05):
        time.sleep(0.4)
    assert "slow ... done in" in buf.getvalue()
