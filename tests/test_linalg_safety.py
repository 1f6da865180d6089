"""The safety of ust.solve on the CPU: the solution check, 0 x 0 systems, bool values, damaged plans.

The check's decision is a pure function (:func:`ust.linalg.solution_error`), tested here with
numbers; the same function judges cuDSS solutions (tests/gpu/test_linalg_safety_gpu.py runs the
families below on both devices and compares the outcome classes).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import ust.linalg as L
from hypothesis import given
from hypothesis import strategies as st

import ust
from tests.linalg_safety_cases import (
    FAMILIES,
    ISSUE_MATRIX,
    SEEDS,
    assert_solves,
    outcome,
    reference,
    regular,
    rhs_for,
    with_singular_values,
)
from ust.runtime.errors import (
    InvalidStateError,
    ShapeError,
    SingularMatrixError,
    SolverAccuracyError,
    UnsupportedError,
)
from ust.runtime.spaces import CPU
from ust.runtime.stateful import PlanFileError


@pytest.fixture(autouse=True)
def _cpu_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU tests: even on a machine with a GPU, operands without execution= stay on the CPU."""
    monkeypatch.setattr("ust.runtime.xp.gpu_available", lambda: False)


TOL = L.DirectSolverOptions().tolerance(np.dtype(np.float64))


# ------------------------------------------------------------------ the decision, as numbers


def verdict(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "backend": "cudss",
        "dtype": np.float64,
        "tolerance": TOL,
        "backward_error": 1e-17,
        "relative_residual": 1e-16,
        "small_pivots": 0,
    }
    args.update(kw)
    return L.solution_error(**args)


def test_perturbed_pivots_and_a_large_residual_are_singular() -> None:
    err = verdict(small_pivots=2, relative_residual=0.29)
    assert isinstance(err, SingularMatrixError)
    text = str(err)
    assert "singular to working precision" in text and "perturbed 2 small pivot(s)" in text
    assert "2.900e-01" in text and "CUDSS_DATA_NPIVOTS" in text
    cpu = verdict(backend="superlu", small_pivots=1, relative_residual=0.29)
    assert isinstance(cpu, SingularMatrixError) and "SuperLU's factor has 1 pivot(s)" in str(cpu)
    nan = verdict(small_pivots=1, relative_residual=float("nan"), backward_error=float("nan"))
    assert isinstance(nan, SingularMatrixError) and "NaN" in str(nan)


def test_small_pivots_with_a_small_residual_pass() -> None:
    assert verdict(small_pivots=3, relative_residual=TOL / 2) is None
    # no small pivots: a large relative residual alone is ill-conditioning, not singularity
    assert verdict(small_pivots=0, relative_residual=1e-3) is None
    assert verdict(small_pivots=None, relative_residual=1e-3) is None


def test_backward_error_above_tolerance_is_an_accuracy_error() -> None:
    err = verdict(backward_error=1e-6)
    assert isinstance(err, SolverAccuracyError) and err.backward_error == 1e-6
    assert "backward error 1.000e-06, above the tolerance" in str(err)
    assert isinstance(verdict(backward_error=float("nan")), SolverAccuracyError)
    # with small pivots too (and pivoting allowed) the singular diagnosis wins
    assert isinstance(
        verdict(backward_error=1e-6, small_pivots=1, relative_residual=1.0), SingularMatrixError
    )


def test_without_pivoting_small_pivots_blame_the_factorisation() -> None:
    err = verdict(small_pivots=1, relative_residual=0.5, pivoting=False)
    assert isinstance(err, SolverAccuracyError) and not isinstance(err, SingularMatrixError)
    assert "relative residual 5.000e-01" in str(err) and "pivoting='auto'" in str(err)


def test_no_tolerance_means_no_check() -> None:
    assert verdict(tolerance=None, small_pivots=5, relative_residual=1.0, backward_error=1.0) is None


def test_the_issue_solution_passes_the_backward_error_but_not_the_rule() -> None:
    """cuDSS's answer for the issue's matrix: [5e12, -2.5e12, 1], residual 0.29 ||b||."""
    a = sp.csr_matrix(ISSUE_MATRIX)
    x = np.array([[5e12], [-2.5e12], [1.0]])
    b = np.ones((3, 1))
    be, rel = L.backward_error(a, x, b), L.relative_residual(a, x, b)
    assert be <= TOL  # why the old check let it through
    assert rel > 0.1
    err = verdict(backward_error=be, relative_residual=rel, small_pivots=1)
    assert isinstance(err, SingularMatrixError)


def test_relative_residual() -> None:
    a = sp.csr_matrix(np.diag([2.0, 4.0]))
    b = np.array([[2.0, 0.0], [4.0, 0.0]])
    assert L.relative_residual(a, np.array([[1.0, 0.0], [1.0, 0.0]]), b) == 0.0
    assert L.relative_residual(a, np.array([[1.0, 0.0], [0.5, 0.0]]), b) == pytest.approx(0.5)
    assert L.relative_residual(a, np.array([[1.0, 1.0], [1.0, 0.0]]), b) == np.inf  # b_j = 0, r_j != 0
    assert L.relative_residual(a, np.zeros((0, 1)), np.zeros((0, 1))) == 0.0


# ------------------------------------------------------------------ the CPU route


def test_the_issue_matrix_is_singular_on_the_cpu() -> None:
    a = sp.csr_matrix(ISSUE_MATRIX)
    with pytest.raises(SingularMatrixError, match="singular"):
        L.solve(a, np.ones(3), execution="cpu")
    with pytest.raises(SingularMatrixError):  # even with b in the range of A, as SciPy
        L.solve(a, np.array([1.0, 2.0, 1.0]), execution="cpu")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", list(SEEDS))
def test_families_on_the_cpu(family: str, seed: int) -> None:
    build, expected = FAMILIES[family]
    a = build(seed)
    b = rhs_for(a, seed)
    cls, x = outcome(lambda: L.solve(a, b, execution="cpu"))
    assert cls == expected, f"{family}[{seed}]: {cls}: {x}"
    if cls == "ok":
        assert_solves(a, x, b)
        if family == "regular":
            np.testing.assert_allclose(x, reference(a, b), rtol=0, atol=1e-10)


@given(
    seed=st.integers(0, 2**16),
    smallest=st.sampled_from([0.0, 1e-17, 1e-18, 1e-20]),
    k=st.sampled_from([None, 1, 3]),
)
def test_numerically_singular_matrices_are_refused(seed: int, smallest: float, k: int | None) -> None:
    """Property: singular to working precision (cond >= 1e17) -> SingularMatrixError, never a junk x."""
    a = with_singular_values(seed, smallest, n=6)
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(6 if k is None else (6, k))
    with pytest.raises(SingularMatrixError):
        L.solve(a, b, execution="cpu")


@given(seed=st.integers(0, 2**16), smallest=st.sampled_from([1.0, 1e-4, 1e-8]))
def test_nonsingular_matrices_are_solved(seed: int, smallest: float) -> None:
    """Property: cond <= 1e8 -> a backward-stable solution, whatever the residual criterion says."""
    a = with_singular_values(seed, smallest, n=6)
    b = np.random.default_rng(seed).standard_normal(6)
    assert_solves(a, L.solve(a, b, execution="cpu"), b)


def test_small_pivots_are_reported() -> None:
    a = with_singular_values(0, 1e-17)
    with L.DirectSolver(a, np.ones(8), options={"check": False}) as s:
        s.execute()
        f = s.factorization_info
        assert f is not None and f.small_pivots is not None and f.small_pivots >= 1
    with L.DirectSolver(regular(0), np.ones(40)) as s:
        s.execute()
        assert s.factorization_info is not None and s.factorization_info.small_pivots == 0


def test_no_pivoting_is_an_accuracy_error_not_singular() -> None:
    """[[1e-15, 1], [1, 1]] is well conditioned; only LU without pivoting turns it into junk."""
    a = sp.csr_matrix(np.array([[1e-15, 1.0], [1.0, 1.0]]))
    b = np.array([1.0, 2.0])
    np.testing.assert_allclose(L.solve(a, b, execution="cpu"), reference(a, b), atol=1e-14)
    try:
        x = L.solve(a, b, execution="cpu", pivoting="none", reordering="natural")
    except SolverAccuracyError as exc:
        assert not isinstance(exc, SingularMatrixError)
    else:  # SuperLU happened to be accurate: then it is a correct solution
        assert_solves(a, x, b)


def test_check_false_accepts_what_it_gets() -> None:
    a = with_singular_values(1, 1e-17)
    x = L.solve(a, np.ones(8), check=False)
    assert x.shape == (8,)


# ------------------------------------------------------------------ 0 x 0 systems


@pytest.mark.parametrize("shape", [(0,), (0, 1), (0, 3)])
@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_empty_system_gives_an_empty_solution(shape: tuple[int, ...], fmt: str) -> None:
    a = sp.csr_matrix((0, 0)).asformat(fmt)
    x = L.solve(a, np.ones(shape))
    assert isinstance(x, np.ndarray) and x.shape == shape and x.dtype == np.float64
    xc = L.solve(a, np.ones(shape, dtype=np.complex64))
    assert xc.shape == shape and xc.dtype == np.complex128  # float64 A with complex64 b, as NumPy promotes
    xi = L.solve(a, np.ones(shape, dtype=np.int32))
    assert xi.dtype == np.float64


def test_empty_system_phases_and_errors() -> None:
    a = sp.csr_matrix((0, 0))
    with L.DirectSolver(a, np.ones(0)) as s:
        info = s.plan()
        assert info.n == 0 and info.nnz == 0
        f = s.factorize()
        assert f.lu_nnz == 0 and f.small_pivots == 0
        assert s.solve().shape == (0,)
        s.reset_operands(b=np.ones((0, 2)))
        assert s.solve().shape == (0, 2)
        assert s.backward_error == 0.0
    with pytest.raises(ShapeError, match=r"\(0,\) or \(0, k\)"):
        L.solve(a, np.ones(1))
    with pytest.raises(ShapeError):
        L.solve(a, np.ones((0, 0)))
    with pytest.raises(ShapeError, match="square"):
        L.solve(sp.csr_matrix((0, 3)), np.ones(0))
    assert L.solve([a, regular(1)], [np.ones(0), np.ones(40)])[0].shape == (0,)


# ------------------------------------------------------------------ bool values


def _asarray_message(value: Any) -> str:
    with pytest.raises(UnsupportedError) as info:
        ust.asarray(value)
    return str(info.value)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "bsr", "dia"])
def test_bool_matrices_are_refused_as_asarray_does(fmt: str) -> None:
    a = sp.csr_matrix(np.eye(4, dtype=bool)).asformat(fmt)
    with pytest.raises(UnsupportedError) as info:
        L.solve(a, np.ones(4))
    assert str(info.value) == _asarray_message(sp.csr_matrix(np.eye(4, dtype=bool)))
    assert "bool" in str(info.value) and "float64" in str(info.value)
    with pytest.raises(UnsupportedError, match="bool"):
        L.DirectSolver(a, np.ones(4))


def test_bool_right_hand_sides_are_refused() -> None:
    a = regular(2)
    with pytest.raises(UnsupportedError, match=r"^b values of dtype bool are not supported; use float32"):
        L.solve(a, np.ones(40, dtype=bool))
    with pytest.raises(UnsupportedError, match="bool"):
        L.solve([a], [np.ones(40, dtype=bool)])
    s = L.DirectSolver(a, np.ones(40))
    s.execute()
    with pytest.raises(UnsupportedError, match="bool"):
        s.reset_operands(b=np.ones(40, dtype=bool))
    b_bool_matrix = sp.csr_matrix((a.data != 0, a.indices, a.indptr), shape=a.shape)
    with pytest.raises(UnsupportedError, match="bool"):
        s.reset_operands(a=b_bool_matrix)
    np.testing.assert_allclose(s.solve(), reference(a, np.ones(40)), atol=1e-12)  # still usable
    s.free()


def test_integers_are_still_solved_in_float64() -> None:
    a = sp.csr_matrix(np.array([[4, 1], [1, 3]], dtype=np.int8))
    x = L.solve(a, np.array([1, 2], dtype=np.uint8))
    assert x.dtype == np.float64
    np.testing.assert_allclose(a @ x, [1, 2], atol=1e-14)


# ------------------------------------------------------------------ damaged solver plans


def _saved(tmp_path: Path, a: Any) -> dict[str, Any]:
    path = tmp_path / "plan.json"
    with L.DirectSolver(a, np.ones(a.shape[0])) as s:
        s.plan()
        s.factorize()
        s.save_plan(path)
    return dict(json.loads(path.read_text()))


def _encoded(values: Any, dtype: str = "<i8") -> dict[str, Any]:
    from ust.runtime.stateful import encode_array

    return encode_array(np.asarray(values).astype(dtype))


def _digest(a: Any) -> str:
    return L._pattern_digest(L._canonical(sp.csr_matrix(a), np.dtype(np.float64), CPU))


A5 = regular(3, n=5)
A3 = regular(4, n=3)


def _tamper(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    out["plan"].update(fields)
    return out


TAMPERED = {
    "perm_out_of_range": lambda d: _tamper(d, permutation=_encoded([0, 1, 2, 3, 7])),
    "perm_negative": lambda d: _tamper(d, permutation=_encoded([0, 1, 2, 3, -1])),
    "perm_repeats": lambda d: _tamper(d, permutation=_encoded([0, 1, 1, 3, 4])),
    "perm_too_short": lambda d: _tamper(d, permutation=_encoded([0, 1, 2])),
    "perm_2d": lambda d: _tamper(d, permutation=_encoded([[0, 1, 2, 3, 4]])),
    "perm_float": lambda d: _tamper(d, permutation=_encoded([0, 1, 2, 3, 4], "<f8")),
    "perm_object_dtype": lambda d: _tamper(d, permutation={"dtype": "|O", "shape": [5], "base64": "AAAA"}),
    "perm_bad_dtype_text": lambda d: _tamper(
        d, permutation={"dtype": "nonsense", "shape": [5], "base64": ""}
    ),
    "perm_bad_base64": lambda d: _tamper(d, permutation={"dtype": "<i8", "shape": [5], "base64": "!!!"}),
    "perm_short_bytes": lambda d: _tamper(d, permutation={"dtype": "<i8", "shape": [5], "base64": "AAAA"}),
    "perm_not_a_dict": lambda d: _tamper(d, permutation=[0, 1, 2, 3, 4]),
    "perm_missing_key": lambda d: _tamper(d, permutation={"dtype": "<i8", "shape": [5]}),
    "n_as_text": lambda d: _tamper(d, n="5"),
    "n_as_bool": lambda d: _tamper(d, n=True),
    "n_negative": lambda d: _tamper(d, n=-5),
    "nnz_float": lambda d: _tamper(d, nnz=3.5),
    "lu_nnz_text": lambda d: _tamper(d, lu_nnz="many"),
    "backend_number": lambda d: _tamper(d, backend=7),
    "matrix_type_null": lambda d: _tamper(d, matrix_type=None),
    "pattern_list": lambda d: _tamper(d, pattern_sha256=[1, 2]),
    "tree_wrong_length": lambda d: _tamper(d, nd_partition_tree=_encoded([1, 2])),
    "tree_empty": lambda d: _tamper(d, nd_partition_tree=_encoded([])),
    "tree_2d": lambda d: _tamper(d, nd_partition_tree=_encoded([[1, 2, 3]])),
    "tree_beyond_int32": lambda d: _tamper(d, nd_partition_tree=_encoded([1, 1, 2**40])),
    "plan_empty": lambda d: {**d, "plan": {}},
}


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_a_damaged_plan_is_warned_about_and_planned_afresh(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = TAMPERED[name](_saved(tmp_path, A5))
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(doc))
    b = np.arange(5.0)
    with caplog.at_level(logging.WARNING, logger="ust"):
        s = L.DirectSolver.load_plan(path, A5, b)
    assert "is damaged" in caplog.text and "planning afresh" in caplog.text, caplog.text
    assert s._user_perm is None and s._user_tree is None and s._saved_lu_nnz is None
    assert not s.plan().from_saved_plan
    s.factorize()
    np.testing.assert_allclose(s.solve(), reference(A5, b), atol=1e-12)
    s.free()


def test_a_plan_lying_about_its_shape(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A plan for n = 5 whose n, nnz and pattern were rewritten to those of a 3 x 3 matrix."""
    doc = _saved(tmp_path, A5)
    doc["plan"].update(n=3, nnz=int(sp.csr_matrix(A3).nnz), pattern_sha256=_digest(A3))
    path = tmp_path / "liar.json"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="ust"):
        s = L.DirectSolver.load_plan(path, A3, np.ones(3))
    assert "is damaged" in caplog.text and "(5,)" in caplog.text
    assert not s.plan().from_saved_plan
    s.factorize()
    np.testing.assert_allclose(s.solve(), reference(A3, np.ones(3)), atol=1e-12)


def test_a_valid_but_foreign_permutation_is_used_and_correct(tmp_path: Path) -> None:
    doc = _tamper(_saved(tmp_path, A5), permutation=_encoded([4, 3, 2, 1, 0]))
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    b = np.arange(5.0)
    with L.DirectSolver.load_plan(path, A5, b) as s:
        assert s.plan().from_saved_plan
        s.factorize()
        np.testing.assert_allclose(s.solve(), reference(A5, b), atol=1e-12)


def test_a_plan_for_another_matrix_still_does_not_fit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = _saved(tmp_path, A5)
    path = tmp_path / "plan5.json"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="ust"):
        s = L.DirectSolver.load_plan(path, A3, np.ones(3))
    assert "does not fit" in caplog.text and "n 5 (now 3)" in caplog.text
    assert not s.plan().from_saved_plan


def test_validation_raises_plan_file_error() -> None:
    with pytest.raises(PlanFileError, match="not a mapping"):
        L._validated_plan([1, 2], 3, "f.json")
    with pytest.raises(PlanFileError, match="'n' must be a non-negative integer"):
        L._validated_plan(
            {
                "backend": "superlu",
                "pattern_sha256": "x",
                "matrix_type": "general",
                "matrix_view": "full",
                "n": 1.0,
            },
            3,
            "f.json",
        )


def test_superlu_refuses_a_bad_permutation_itself() -> None:
    """Defence in depth: the engine checks a user permutation even if a caller did not."""
    from ust.backends.cpu.superlu import SuperLUFactorization

    e = SuperLUFactorization(
        sp.csr_matrix(A5), matrix_type="general", reordering="default", pivoting="auto", pivot_threshold=None
    )
    for bad in ([0, 1, 2, 3, 5], [0, 0, 1, 2, 3], [0, 1, 2]):
        with pytest.raises(ShapeError):
            e.analyze(np.array(bad))


def test_phase_errors_are_unchanged_by_the_retry_state() -> None:
    s = L.DirectSolver(A5, np.ones(5))
    with pytest.raises(InvalidStateError):
        s.solve()
    s.free()


# ------------------------------------------------------------------ the `ust solve` command


def test_cli_reports_a_singular_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import scipy.io

    from ust.cli import main

    path = tmp_path / "singular.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(ISSUE_MATRIX))
    assert main(["solve", str(path), "--execution", "cpu", "--rhs", str(_npy(tmp_path, np.ones(3)))]) == 1
    assert "SuperLU" in capsys.readouterr().err
    path2 = tmp_path / "nonsquare.mtx"
    scipy.io.mmwrite(str(path2), sp.coo_matrix(np.ones((2, 3))))
    assert main(["solve", str(path2), "--execution", "cpu"]) == 1
    assert "square" in capsys.readouterr().err


def _npy(tmp_path: Path, b: np.ndarray) -> Path:
    p = tmp_path / "b.npy"
    np.save(p, b)
    return p
