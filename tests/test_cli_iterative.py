"""``ust solve A.mtx --method cg --precond amg`` (issue 19, item 5): the Krylov solvers and their
preconditioners from the command line, their summary line, their argument checks (before the
matrix is read), non-convergence (exit 1, one line), and ``ust explain solve --method``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from ust.linalg import IterativeSolver

import ust
from ust.cli import main
from ust.cli.demo import poisson3d
from ust.cli.solve import METHODS, PRECONDS

ROOT = Path(__file__).resolve().parents[1]

SUMMARY = re.compile(
    r"^(?:column (?P<col>\d+): )?(?P<method>\w+), preconditioner (?P<pre>\w+), SpMV route (?P<route>\S+): "
    r"(?P<its>\d+) iterations, relative residual (?P<res>\S+), (?P<ms>\S+) ms, "
    r"(?P<state>converged|not converged|broke down)$"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli_iterative")
    rng = np.random.default_rng(7)
    out = {
        "poisson": d / "poisson.mtx",  # 125 x 125, symmetric positive definite
        "b": d / "b.npy",
        "b2": d / "b2.npy",
        "swap": d / "swap.mtx",  # [[0, 1], [1, 0]]: CG breaks down on b = e_0
        "e0": d / "e0.npy",
        "junk": d / "junk.mtx",  # not Matrix Market: reading it would fail
    }
    scipy.io.mmwrite(out["poisson"], sp.coo_matrix(poisson3d(5)))
    np.save(out["b"], rng.standard_normal(125))
    np.save(out["b2"], rng.standard_normal((125, 2)))
    scipy.io.mmwrite(out["swap"], sp.coo_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])))
    np.save(out["e0"], np.array([1.0, 0.0]))
    out["junk"].write_text("this is not a matrix\n", encoding="utf-8")
    return {k: str(v) for k, v in out.items()}


@pytest.fixture
def solutions(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """Every x the CLI's IterativeSolver returns (the CLI prints x's errors, not x itself)."""
    seen: list[np.ndarray] = []
    solve = IterativeSolver.solve

    def spy(self: IterativeSolver, *args: Any, **kwargs: Any) -> Any:
        x = solve(self, *args, **kwargs)
        seen.append(np.array(x))
        return x

    monkeypatch.setattr(IterativeSolver, "solve", spy)
    return seen


def _summary(out: str) -> list[re.Match[str]]:
    found = [m for m in (SUMMARY.match(line) for line in out.splitlines()) if m]
    assert found, out
    return found


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("ust solve: error: ") and "Traceback" not in err, err
    return err.strip()


def _system(files: dict[str, str]) -> tuple[sp.csr_matrix, np.ndarray]:
    return sp.csr_matrix(scipy.io.mmread(files["poisson"])), np.load(files["b"])


# ----------------------------------------------------------------------------- every method


CASES = [(m, p) for m in METHODS[1:] for p in ("none", "jacobi")] + [
    ("cg", p) for p in PRECONDS if p not in ("none", "jacobi")
]


@pytest.mark.parametrize(("method", "precond"), CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_each_method_and_preconditioner_matches_spsolve(
    method: str,
    precond: str,
    files: dict[str, str],
    solutions: list[np.ndarray],
    capsys: pytest.CaptureFixture[str],
) -> None:
    if precond == "amg":
        pytest.importorskip("pyamg")
    argv = ["solve", files["poisson"], "--rhs", files["b"], "--method", method, "--precond", precond]
    assert main([*argv, "--rtol", "1e-10", "--execution", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    a, b = _system(files)
    (x,) = solutions
    ref = spla.spsolve(a.tocsc(), b)
    assert np.linalg.norm(x - ref) <= 1e-7 * np.linalg.norm(ref)
    (m,) = _summary(out)
    assert (m["method"], m["pre"], m["state"]) == (method, precond, "converged")
    assert m["col"] is None and int(m["its"]) >= 1 and float(m["ms"]) >= 0
    assert float(m["res"]) <= 1e-10
    assert m["route"] == "scipy"  # the planner's SpMV for CSR on the CPU
    for phase in ("read 125 x 125", "setup on cpu", "solve (median of 1)", "relative residual ||b - Ax||"):
        assert phase in out
    described = [line for line in out.splitlines() if line.startswith("preconditioner: ")]
    assert len(described) == 1 and (described[0] == "preconditioner: none") == (precond == "none")


def test_the_summary_is_the_solver_result(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    results: list[Any] = []
    record = IterativeSolver._record

    def spy(self: IterativeSolver, *args: Any) -> None:
        record(self, *args)
        results.append(self.result)

    monkeypatch.setattr(IterativeSolver, "_record", spy)
    assert main(["solve", files["poisson"], "--rhs", files["b"], "--method", "cg", "--precond", "ic0"]) == 0
    out = capsys.readouterr().out
    (m,) = _summary(out)
    (r,) = results
    assert int(m["its"]) == r.iterations and m["res"] == f"{r.residual:.3e}" and m["route"] == r.spmv_route
    assert r.converged and r.residual <= 1e-5  # the default rtol is SciPy's 1e-5
    assert f"preconditioner: {r.preconditioner}" in out.splitlines()


def test_without_rhs_the_error_against_ones_is_printed(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyamg")
    assert main(["solve", files["poisson"], "--method", "minres", "--precond", "amg", "--rtol", "1e-12"]) == 0
    out = capsys.readouterr().out
    err = float(out.split("max |x - x_exact| = ")[1].split()[0])
    assert err < 1e-9
    assert _summary(out)[0]["state"] == "converged"


def test_a_format_repeat_and_options_reach_the_solver(
    files: dict[str, str], solutions: list[np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["solve", files["poisson"], "--rhs", files["b"], "--format", "BSR[5,5]", "--method", "gmres"]
    argv += ["--restart", "7", "--check-every", "2", "--maxiter", "500", "--atol", "1e-12", "--repeat", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "store A as BSR[5,5]" in out and "solve (median of 3)" in out
    (m,) = _summary(out)
    assert m["method"] == "gmres" and m["state"] == "converged"
    assert len(solutions) == 3
    a, b = _system(files)
    assert np.linalg.norm(b - a @ solutions[-1]) <= 1e-5 * np.linalg.norm(b)


def test_every_column_of_b_is_solved(
    files: dict[str, str], solutions: list[np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["solve", files["poisson"], "--rhs", files["b2"], "--method", "bicgstab", "--rtol", "1e-9"]) == 0
    )
    out = capsys.readouterr().out
    lines = _summary(out)
    assert [m["col"] for m in lines] == ["0", "1"] and all(m["state"] == "converged" for m in lines)
    a = sp.csr_matrix(scipy.io.mmread(files["poisson"]))
    b = np.load(files["b2"])
    x = np.stack(solutions, axis=1)
    assert np.abs(x - spla.spsolve(a.tocsc(), b)).max() <= 1e-6
    assert "solve (median of 2, 2 columns)" in out


def test_method_direct_is_todays_solve(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", files["poisson"], "--method", "direct", "--precond", "none"]) == 0
    out = capsys.readouterr().out
    assert "analysis" in out and "factorization" in out and not SUMMARY.search(out)
    assert main(["solve", files["poisson"]]) == 0
    plain = capsys.readouterr().out
    assert [line[:30] for line in plain.splitlines()] == [line[:30] for line in out.splitlines()]


def test_help_names_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["solve", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default 1e-5" in text and "--precond" in text and 'pip install "ust[amg]"' in text
    assert "{direct,cg,minres,gmres,bicgstab}" in text
    assert "writes no file" in text


# ----------------------------------------------------------------------------- bad values


BAD = [
    (["--precond", "jacobi"], "--precond jacobi needs an iterative --method"),
    (["--method", "direct", "--precond", "amg"], "the direct solver takes no preconditioner"),
    (["--rtol", "1e-6"], "--rtol applies to an iterative --method"),
    (["--maxiter", "10"], "--maxiter applies to an iterative --method"),
    (["--method", "cg", "--rtol", "-1"], "--rtol must be a finite number >= 0, not -1.0"),
    (["--method", "cg", "--rtol", "nan"], "--rtol must be a finite number >= 0, not nan"),
    (["--method", "cg", "--atol", "inf"], "--atol must be a finite number >= 0, not inf"),
    (["--method", "cg", "--maxiter", "0"], "--maxiter must be at least 1, not 0"),
    (["--method", "gmres", "--restart", "0"], "--restart must be at least 1, not 0"),
    (["--method", "cg", "--restart", "5"], "--restart applies to --method gmres, not to cg"),
    (["--method", "cg", "--check-every", "-2"], "--check-every must be at least 1, not -2"),
    (["--method", "cg", "--matrix-type", "spd"], "--matrix-type applies to --method direct, not to cg"),
    (["--method", "minres", "--no-check"], "--no-check applies to --method direct, not to minres"),
]


@pytest.mark.parametrize(("extra", "fragment"), BAD, ids=[" ".join(e) for e, _ in BAD])
def test_bad_values_exit_1_with_one_line_before_the_matrix_is_read(
    extra: list[str], fragment: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["solve", files["junk"], *extra]) == 1  # junk.mtx: an error of reading would differ
    assert fragment in _one_error(capsys)


USAGE = [
    (["--method", "cgg"], "argument --method: invalid choice: 'cgg'; did you mean 'cg'?"),
    (
        ["--method", "cg", "--precond", "amgg"],
        "argument --precond: invalid choice: 'amgg'; did you mean 'amg'?",
    ),
    (["--method", "cg", "--precond", "ilu"], "did you mean 'ilu0'"),
    (["--method", "cg", "--rtol", "small"], "argument --rtol: invalid float value: 'small'"),
    (["--method", "cg", "--maxiter", "1.5"], "argument --maxiter: invalid int value: '1.5'"),
]


@pytest.mark.parametrize(("extra", "fragment"), USAGE, ids=[" ".join(e) for e, _ in USAGE])
def test_usage_errors_are_argparses(
    extra: list[str], fragment: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["solve", files["poisson"], *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert err.startswith("usage: ") and fragment in last and "Traceback" not in err, err


def test_amg_without_pyamg_uses_usts_own_setup(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyamg", None)  # `import pyamg` raises ImportError
    assert main(["solve", files["poisson"], "--method", "cg", "--precond", "amg"]) == 0
    (m,) = _summary(capsys.readouterr()[0])
    assert m["state"] == "converged"


# ----------------------------------------------------------------------------- not converged


def test_a_solve_that_does_not_converge_exits_1_naming_the_residual(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["solve", files["poisson"], "--rhs", files["b"], "--method", "cg", "--maxiter", "2"]
    assert main([*argv, "--rtol", "1e-12"]) == 1
    out, err = capsys.readouterr()
    (m,) = _summary(out)
    assert m["state"] == "not converged" and m["its"] == "2"
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(
        f"ust solve: error: cg did not converge in 2 iterations: relative residual {m['res']} "
    )
    assert "asked for rtol=1e-12, atol=0" in err and "--maxiter" in err


def test_a_breakdown_exits_1_naming_it(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", files["swap"], "--rhs", files["e0"], "--method", "cg"]) == 1
    out, err = capsys.readouterr()
    assert _summary(out)[0]["state"] == "broke down"
    assert err.count("\n") == 1 and "cg broke down after 1 iterations" in err, err
    assert "relative residual 1.000e+00 reached" in err


def test_one_unconverged_column_fails_the_solve(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "solve",
                files["poisson"],
                "--rhs",
                files["b2"],
                "--method",
                "gmres",
                "--maxiter",
                "1",
                "--restart",
                "2",
            ]
        )
        == 1
    )
    out, err = capsys.readouterr()
    assert [m["state"] for m in _summary(out)] == ["not converged", "not converged"]
    assert err.startswith("ust solve: error: gmres (column ") and err.count("\n") == 1


def test_not_converging_in_a_real_process_is_one_line(files: dict[str, str]) -> None:
    """No IterativeSolverWarning (nor NumPy's divide warning of a breakdown) reaches stderr."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for argv in (
        [files["poisson"], "--rhs", files["b"], "--method", "bicgstab", "--maxiter", "1", "--rtol", "1e-14"],
        [files["swap"], "--rhs", files["e0"], "--method", "cg"],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "ust", "solve", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert res.returncode == 1
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("ust solve: error: "), res.stderr
        assert "Warning" not in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------- explain


def test_explain_solve_prints_explain_iterative(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "solve", files["poisson"], "--method", "cg", "--precond", "amg"]) == 0
    out = capsys.readouterr().out
    t = ust.io.read(files["poisson"])
    expected = _explain_iterative(t, method="cg", M="amg")
    assert out == expected + "\n"
    assert "operation: iterative solve (A x = b by cg)" in out and "preconditioner: amg" in out
    assert main(["explain", "solve", files["poisson"], "--method", "gmres"]) == 0
    assert "preconditioner: none" in capsys.readouterr().out
    assert main(["explain", "solve", files["poisson"], "--method", "direct"]) == 0
    direct = capsys.readouterr().out
    assert main(["explain", "solve", files["poisson"]]) == 0
    assert capsys.readouterr().out == direct and "operation: solve (A x = b" in direct


def _explain_iterative(t: Any, **kwargs: Any) -> str:
    from ust.api.explain import explain_iterative

    return explain_iterative(t, np.ones(t.shape[0], dtype=t.dtype), **kwargs)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["solve", "{p}", "--precond", "amg"], "--precond amg needs an iterative --method"),
        (
            ["solve", "{p}", "--method", "direct", "--precond", "ic0"],
            "the direct solver takes no preconditioner",
        ),
        (["matmul", "{p}", "--method", "cg"], "--method applies to explain solve, not to explain matmul"),
        (["sum", "{p}", "--precond", "jacobi"], "--precond applies to explain solve, not to explain sum"),
    ],
)
def test_explain_refuses_misplaced_options(
    argv: list[str], fragment: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", *(a.format(p=files["poisson"]) for a in argv)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ust explain: error: ") and fragment in err, err


def test_explain_suggests_a_method(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["explain", "solve", files["poisson"], "--method", "bicgstb"])
    assert exc.value.code == 2
    assert "did you mean 'bicgstab'?" in capsys.readouterr().err


def test_the_choices_are_the_librarys() -> None:
    from ust.api.krylov import METHODS as KRYLOV
    from ust.api.precond import PRECONDITIONERS

    assert ("direct", *KRYLOV) == METHODS and ("none", *PRECONDITIONERS) == PRECONDS
