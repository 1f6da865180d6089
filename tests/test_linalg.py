"""ust.linalg on the CPU (SuperLU route): results against scipy.sparse.linalg.spsolve, phases, errors."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import ust.linalg as L

from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    InvalidStateError,
    InvalidValueError,
    ShapeError,
    SingularMatrixError,
    SolverAccuracyError,
    UnsupportedError,
    UstError,
)


@pytest.fixture(autouse=True)
def _cpu_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """These are the CPU tests: even on a machine with a GPU, operands without execution= stay on the CPU."""
    monkeypatch.setattr("ust.runtime.xp.gpu_available", lambda: False)


# ------------------------------------------------------------------ matrices


def poisson2d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return sp.csr_matrix(sp.kron(sp.eye(m), t) + sp.kron(t, sp.eye(m)))


def general(n: int, seed: int = 0) -> sp.csr_matrix:
    a = sp.random(n, n, density=4.0 / n, random_state=seed, format="csr")
    return sp.csr_matrix(a + sp.diags(np.full(n, 2.0)) + sp.diags(np.ones(n - 3), 3))


def symmetric_indefinite(n: int, seed: int = 1) -> sp.csr_matrix:
    a = sp.random(n, n, density=3.0 / n, random_state=seed, format="csr")
    d = np.where(np.arange(n) % 3 == 0, -4.0, 4.0)
    return sp.csr_matrix(a + a.T + sp.diags(d))


def advection_diffusion(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.3, 2.0, -0.7], [-1, 0, 1], shape=(m, m))
    return sp.csr_matrix(sp.kron(sp.eye(m), t) + sp.kron(t, sp.eye(m)))


MATRICES = {
    "general": (general(150), "general"),
    "advection": (advection_diffusion(12), "general"),
    "symmetric": (symmetric_indefinite(120), "symmetric"),
    "spd": (poisson2d(12), "spd"),
}


def rhs(n: int, k: int | None, dtype: type = np.float64, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (n,) if k is None else (n, k)
    b = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(shape)
    return b.astype(dtype)


def reference(a: sp.spmatrix, b: np.ndarray) -> np.ndarray:
    return np.asarray(sla.spsolve(sp.csc_matrix(a), b)).reshape(b.shape)


def assert_close(x: np.ndarray, ref: np.ndarray, rtol: float = 1e-9) -> None:
    assert x.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(x, ref, rtol=0, atol=rtol * scale)


# ------------------------------------------------------------------ results


@pytest.mark.parametrize("name", sorted(MATRICES))
@pytest.mark.parametrize("k", [None, 1, 4])
def test_solve_matches_spsolve(name: str, k: int | None) -> None:
    a, mtype = MATRICES[name]
    b = rhs(a.shape[0], k)
    x = L.solve(a, b, matrix_type=mtype, execution="cpu")
    assert isinstance(x, np.ndarray) and x.dtype == np.float64
    assert_close(x, reference(a, b))


@pytest.mark.parametrize("fmt", ["coo", "csc", "bsr", "dia", "lil", "dok"])
def test_any_scipy_format(fmt: str) -> None:
    a = advection_diffusion(8)
    b = rhs(a.shape[0], 2)
    x = L.solve(a.asformat(fmt), b, execution="cpu")
    assert_close(x, reference(a, b))
    x = L.solve(sp.csr_array(a), b[:, 0], execution="cpu")
    assert_close(x, reference(a, b[:, 0]))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_dtypes(dtype: type) -> None:
    a = general(80)
    if np.dtype(dtype).kind == "c":
        a = sp.csr_matrix(a + 1j * sp.random(80, 80, density=0.03, random_state=5))
    a = a.astype(dtype)
    b = rhs(80, 2, dtype)
    x = L.solve(a, b)
    assert x.dtype == np.dtype(dtype)
    tol = 1e-4 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-9
    assert_close(x, reference(a.astype(np.complex128 if x.dtype.kind == "c" else np.float64), b), rtol=tol)


def test_mixed_dtypes_promote() -> None:
    a = general(60).astype(np.float32)
    b = rhs(60, None)  # float64
    x = L.solve(a, b)
    assert x.dtype == np.float64
    assert_close(x, reference(a.astype(np.float64), b))
    xc = L.solve(general(60), rhs(60, None, np.complex128))
    assert xc.dtype == np.complex128


def test_integer_matrix_becomes_float64(caplog: pytest.LogCaptureFixture) -> None:
    a = sp.csr_matrix(np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]], dtype=np.int64))
    b = np.array([1, 2, 3])
    with caplog.at_level(logging.INFO, logger="ust"):
        x = L.solve(a, b)
    assert x.dtype == np.float64
    np.testing.assert_allclose(a @ x, b, atol=1e-12)
    assert any("solved in float64" in m for m in caplog.messages)


@pytest.mark.parametrize("view", ["lower", "upper"])
def test_triangular_views(view: str) -> None:
    a = poisson2d(10)
    b = rhs(a.shape[0], 3)
    tri = sp.tril(a) if view == "lower" else sp.triu(a)
    x = L.solve(tri.tocsr(), b, matrix_type="spd", matrix_view=view)
    assert_close(x, reference(a, b))
    # the other triangle of a full matrix is ignored under a view
    x2 = L.solve(a + sp.triu(a, 1) * 0 if view == "lower" else a, b, matrix_type="spd", matrix_view=view)
    assert_close(x2, reference(a, b))


def test_hermitian_lower_view() -> None:
    n = 50
    m = sp.random(n, n, density=0.05, random_state=7) * (1 + 2j)
    h = sp.csr_matrix(m + m.conj().T + sp.diags(np.full(n, 6.0)))
    b = rhs(n, 2, np.complex128)
    x = L.solve(sp.tril(h).tocsr(), b, matrix_type="hpd", matrix_view="lower")
    assert_close(x, reference(h, b))


def test_ust_tensor_like_operand() -> None:
    a = general(40)
    cls = type("Tensor", (), {"__module__": "ust.tensor"})
    t = cls()
    t.shape, t.dtype, t.device = a.shape, a.dtype, "cpu"
    t.to_scipy = lambda: sp.coo_array(a)
    b = rhs(40, None)
    assert_close(L.solve(t, b), reference(a, b))


def test_batch_of_systems() -> None:
    mats = [general(30, seed=s) for s in range(3)]
    bs = [rhs(30, None, seed=s) for s in range(3)]
    xs = L.solve(mats, bs)
    assert len(xs) == 3
    for a, b, x in zip(mats, bs, xs):
        assert_close(x, reference(a, b))
    with pytest.raises(ShapeError, match="same length"):
        L.solve(mats, bs[:2])


# ------------------------------------------------------------------ the stateful solver


def test_phases_refactorize_and_new_rhs() -> None:
    a = general(200)
    b = rhs(200, 3)
    with L.DirectSolver(a, b) as s:
        plan = s.plan()
        assert plan.backend == "superlu" and plan.ordering == "COLAMD" and plan.n == 200 and plan.nnz == a.nnz
        assert sorted(plan.row_permutation) == list(range(200))
        f = s.factorize()
        assert f.lu_nnz and f.lu_nnz >= a.nnz and f.fill == pytest.approx(f.lu_nnz / a.nnz)
        assert_close(s.solve(), reference(a, b))
        assert s.backward_error is not None and s.backward_error < 1e-13
        # new values, same pattern
        a2 = a.copy()
        a2.data = a2.data * np.linspace(0.5, 2.0, a2.nnz)
        s.reset_operands(a=a2)
        with pytest.raises(InvalidStateError, match=r"call refactorize\(\)"):
            s.solve()
        f2 = s.refactorize()
        assert f2.phase == "refactorization"
        assert_close(s.solve(), reference(a2, b))
        # new right-hand side, another count of columns and another package shape
        b2 = rhs(200, None, seed=9)
        s.reset_operands(b=b2)
        assert_close(s.solve(), reference(a2, b2))
        assert set(s.timings) >= {"analysis", "factorization", "refactorization", "solve"}
    assert s.is_freed


def test_execute_runs_missing_phases() -> None:
    a, b = poisson2d(8), rhs(64, 2)
    s = L.DirectSolver(a, b, options=L.DirectSolverOptions(matrix_type="spd"))
    assert_close(s.execute(), reference(a, b))
    a2 = sp.csr_matrix(a * 3.0)
    s.reset_operands(a=a2)
    assert_close(s.execute(), reference(a2, b))
    assert s.factorization_info is not None and s.factorization_info.phase == "refactorization"
    s.free()
    with pytest.raises(InvalidStateError, match="freed"):
        s.execute()


def test_phase_order_is_checked() -> None:
    s = L.DirectSolver(general(20), rhs(20, None))
    with pytest.raises(InvalidStateError, match=r"before plan\(\)"):
        s.factorize()
    s.plan()
    with pytest.raises(InvalidStateError, match=r"before factorize\(\)"):
        s.solve()
    with pytest.raises(InvalidStateError, match=r"before factorize\(\)"):
        s.refactorize()
    s.free()
    with pytest.raises(InvalidStateError, match="freed"):
        s.plan()


def test_symmetric_inertia() -> None:
    a = symmetric_indefinite(60)
    with L.DirectSolver(a, rhs(60, None), options={"matrix_type": "symmetric"}) as s:
        s.plan()
        f = s.factorize()
        eig = np.linalg.eigvalsh(a.toarray())
        if f.inertia is not None:
            assert f.inertia == (int((eig > 0).sum()), int((eig < 0).sum()))
        assert f.npivots is not None


def test_refinement_steps() -> None:
    a, b = general(100), rhs(100, 2)
    x = L.solve(a, b, refinement_steps=2)
    assert_close(x, reference(a, b))


def test_reset_operands_checks() -> None:
    a, b = general(50), rhs(50, None)
    s = L.DirectSolver(a, b)
    s.execute()
    with pytest.raises(ShapeError, match="shape"):
        s.reset_operands(a=general(51))
    other = general(50, seed=11)
    with pytest.raises(ShapeError, match="sparsity pattern"):
        s.reset_operands(a=other)
    with pytest.raises(ShapeError, match=r"\(50,\) or \(50, k\)"):
        s.reset_operands(b=np.ones(49))
    with pytest.raises(UnsupportedError, match="complex128"):
        s.reset_operands(b=np.ones(50, dtype=np.complex128))
    bad = a.copy()
    bad.data[0] = np.nan
    with pytest.raises(InvalidValueError, match="NaN or Inf"):
        s.reset_operands(a=bad)
    with pytest.raises(UnsupportedError, match="a= and b="):
        s.reset_operands(c=1)


# ------------------------------------------------------------------ errors, before any work


def test_shape_errors() -> None:
    with pytest.raises(ShapeError, match="square"):
        L.solve(sp.random(4, 5, density=0.5, format="csr"), np.ones(4))
    with pytest.raises(ShapeError, match=r"\(6,\) or \(6, k\)"):
        L.solve(general(6), np.ones(5))
    with pytest.raises(ShapeError, match="right-hand sides"):
        L.solve(general(6), np.ones((6, 2, 2)))
    with pytest.raises(ShapeError):
        L.solve(general(6), np.ones((6, 0)))
    assert issubclass(ShapeError, ValueError)


def test_non_finite_values() -> None:
    a = general(10)
    bad = a.copy()
    bad.data[3] = np.inf
    with pytest.raises(InvalidValueError, match="the matrix contains 1 NaN or Inf"):
        L.solve(bad, np.ones(10))
    b = np.ones(10)
    b[2] = np.nan
    with pytest.raises(InvalidValueError, match="b contains 1 NaN"):
        L.solve(a, b)


def test_unsupported_operands_and_dtypes() -> None:
    with pytest.raises(UnsupportedError, match="must be sparse"):
        L.solve(np.eye(3), np.ones(3))
    with pytest.raises(UnsupportedError, match="b must be a NumPy"):
        L.solve(general(5), sp.csr_matrix(np.ones((5, 1))))
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(UnsupportedError, match="float64"):
            L.solve(general(5).astype(np.longdouble), np.ones(5))
    with pytest.raises(UnsupportedError, match="operands of type"):
        L.solve(types.SimpleNamespace(shape=(2, 2)), np.ones(2))


def test_option_errors() -> None:
    with pytest.raises(UnsupportedError, match="matrix_type='banded' is not supported; supported: general"):
        L.solve(general(5), np.ones(5), matrix_type="banded")
    with pytest.raises(UnsupportedError, match="unknown solver option"):
        L.solve(general(5), np.ones(5), colour="red")
    with pytest.raises(InvalidValueError, match="check must be"):
        L.DirectSolverOptions(check=-1.0)
    with pytest.raises(InvalidValueError, match="host_threads"):
        L.DirectSolverOptions(host_threads=0)
    with pytest.raises(UnsupportedError, match="not available with SuperLU"):
        L.solve(general(5), np.ones(5), reordering="btf_colamd")


def test_empty_row_names_it() -> None:
    a = general(8).tolil()
    a[5, :] = 0
    a = sp.csr_matrix(a)  # explicit zeros may remain stored: still an empty row
    with pytest.raises(SingularMatrixError, match="row 5 has no nonzero entry") as info:
        L.solve(a, np.ones(8))
    assert info.value.row == 5
    c = sp.csr_matrix(np.array([[1.0, 0.0], [2.0, 0.0]]))
    with pytest.raises(SingularMatrixError, match="column 1 has no nonzero entry"):
        L.solve(c, np.ones(2))


def test_structurally_and_numerically_singular() -> None:
    s = sp.csr_matrix(np.array([[1.0, 0, 0], [1, 0, 0], [0, 1, 1]]))
    with pytest.raises(SingularMatrixError, match=r"structurally singular \(structural rank 2 < 3\)"):
        L.solve(s, np.ones(3))
    with pytest.raises(SingularMatrixError, match="numerically singular"):
        L.solve(sp.csr_matrix(np.ones((2, 2))), np.ones(2))
    assert issubclass(SingularMatrixError, UstError)


def test_check_catches_a_bad_solution() -> None:
    n = 200
    a = sp.csr_matrix(sp.random(n, n, density=0.05, random_state=2) + sp.diags(np.full(n, 1e-14)))
    b = rhs(n, None)
    with pytest.raises(
        SolverAccuracyError, match=r"backward error \d\.\d+e[-+]\d+, above the tolerance"
    ) as info:
        L.solve(a, b, pivoting="none")
    assert info.value.backward_error > 1e-11
    s = L.DirectSolver(a, b, options={"pivoting": "none", "check": False})
    s.execute()
    assert s.backward_error is None
    with pytest.raises(SolverAccuracyError):  # a user tolerance no solver can meet
        L.solve(general(30), rhs(30, None), check=1e-30)


def test_inputs_are_not_modified() -> None:
    coo = sp.coo_matrix(
        (np.array([1, 2, 3, 4, 5, 6]), (np.array([0, 0, 1, 2, 2, 1]), np.array([0, 0, 1, 2, 0, 2]))),
        shape=(3, 3),
    )
    before = (coo.data.copy(), coo.row.copy(), coo.col.copy())
    b = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], order="C")
    b0 = b.copy()
    x = L.solve(coo, b)
    np.testing.assert_allclose(coo.toarray() @ x, b)
    for arr, old in zip((coo.data, coo.row, coo.col), before):
        np.testing.assert_array_equal(arr, old)
    np.testing.assert_array_equal(b, b0)
    csr = general(40)
    snap = (csr.data.copy(), csr.indices.copy(), csr.indptr.copy())
    s = L.DirectSolver(csr, b0[:1].repeat(40, axis=0)[:, 0])
    s.execute()
    s.reset_operands(a=sp.csr_matrix((csr.data * 2, csr.indices, csr.indptr), shape=csr.shape))
    s.execute()
    for arr, old in zip((csr.data, csr.indices, csr.indptr), snap):
        np.testing.assert_array_equal(arr, old)


def test_execution_cuda_without_gpu_is_clear() -> None:
    from ust.runtime.xp import gpu_available  # the fixture's stand-in: no GPU

    if gpu_available():
        pytest.skip("a GPU is usable here")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[cu1[23]\]"'):
            L.solve(general(5), np.ones(5), execution="cuda")
    else:
        with pytest.raises(DeviceError, match="no usable CUDA device"):
            L.solve(general(5), np.ones(5), execution="cuda")


def test_logging_says_what_ran(caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.INFO, logger="ust"),
        L.DirectSolver(poisson2d(5), np.ones(25), execution="cpu") as s,
    ):
        s.execute()
    text = "\n".join(caplog.messages)
    assert "operands are in cpu memory; the execution space is cpu" in text
    assert "route: SuperLU" in text and "MMD_AT_PLUS_A because the nonzero pattern is symmetric" in text
    assert "superlu factorization took" in text and "backward error" in text
    assert all(r.name.startswith("ust.") for r in caplog.records)


def test_logging_says_a_small_one_shot_solve_ran_the_dense_lu(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ust"):
        L.solve(poisson2d(5), np.ones(25), execution="cpu")
    text = "\n".join(caplog.messages)
    assert "route for solve: dense-lu (a one-shot solve of a small system (n <= 128)" in text
    assert "route: dense LU (LAPACK" in text and "dense-lu factorization took" in text


# ------------------------------------------------------------------ saved plans


def test_saved_plan_round_trip(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "solver.json"  # type: ignore[operator]
    a, b = general(150), rhs(150, 2)
    with L.DirectSolver(a, b) as s:
        s.plan()
        f = s.factorize()
        s.save_plan(path)
    doc = json.loads(path.read_text())
    assert doc["kind"] == "direct_solver" and doc["plan"]["backend"] == "superlu"
    assert doc["plan"]["nd_partition_tree"] is None  # cuDSS's alone; SuperLU's plan is its permutation
    a2 = sp.csr_matrix((a.data + 1.0, a.indices, a.indptr), shape=a.shape)
    with L.DirectSolver.load_plan(path, a2, b) as s2:
        info = s2.plan()
        assert info.from_saved_plan
        f2 = s2.factorize()
        assert f2.lu_nnz == pytest.approx(f.lu_nnz, rel=0.2)
        assert_close(s2.solve(), reference(a2, b))
    # another pattern: warned about and planned afresh
    with caplog.at_level(logging.WARNING, logger="ust"):
        s3 = L.DirectSolver.load_plan(path, general(150, seed=4), b)
    assert not s3.plan().from_saved_plan
    assert "does not fit" in caplog.text and "planning afresh" in caplog.text
    same_nnz = sp.csr_matrix(a[np.roll(np.arange(150), 1)])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ust"):
        assert not L.DirectSolver.load_plan(path, same_nnz, b).plan().from_saved_plan
    assert "another sparsity pattern" in caplog.text


def test_saved_plan_loads_in_a_fresh_process(tmp_path: object) -> None:
    path = tmp_path / "solver.json"  # type: ignore[operator]
    a = poisson2d(9)
    with L.DirectSolver(a, np.ones(81)) as s:
        s.plan()
        s.save_plan(path)
    code = (
        "import numpy as np, scipy.sparse as sp, ust.linalg as L\n"
        "t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(9, 9))\n"
        "a = sp.csr_matrix(sp.kron(sp.eye(9), t) + sp.kron(t, sp.eye(9)))\n"
        f"s = L.DirectSolver.load_plan({str(path)!r}, a, np.ones(81), execution='cpu')\n"
        "print(s.plan().from_saved_plan, float(np.abs(a @ s.execute() - 1).max()) < 1e-10)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["True", "True"]


# ------------------------------------------------------------------ the `ust solve` command


def test_solve_command_prints_phases(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    import scipy.io

    from ust.cli.solve import configure, solve_command

    path = tmp_path / "a.mtx"  # type: ignore[operator]
    scipy.io.mmwrite(str(path), advection_diffusion(10))
    parser = argparse.ArgumentParser()
    configure(parser)
    assert solve_command(parser.parse_args([str(path), "--execution", "cpu", "--repeat", "2"])) == 0
    out = capsys.readouterr().out
    for word in ("read 100 x 100", "analysis", "factorization", "solve (median of 2)", "relative residual"):
        assert word in out
    err = float(out.split("max |x - x_exact| = ")[1].split()[0])
    assert err < 1e-10
    rhs_path = tmp_path / "b.npy"  # type: ignore[operator]
    np.save(rhs_path, np.ones((100, 2)))
    assert solve_command(parser.parse_args([str(path), "--rhs", str(rhs_path), "--execution", "cpu"])) == 0
    assert "backward error" in capsys.readouterr().out


# ------------------------------------------------------------------ cuDSS tables (no GPU needed)


def test_cudss_tables_match_the_headers() -> None:
    """Spot values read from cudss_data_types.h of nvidia-cudss-cu13 0.8.0.10 and 1.0.0.35."""
    from ust.backends.cuda import cudss as C

    v08, v10 = C.ABIS[(0, 8)].config, C.ABIS[(1, 0)].config
    assert len(v08) == 26 and len(v10) == 30
    assert v08["reordering_alg"][0] == 0 and v08["host_nthreads"][0] == 14 and v08["nd_ubfactor"][0] == 25
    assert v10["memory_optimization_setting"][0] == 29 and "downcast_factors" not in v08
    assert C.PHASE["analysis"] == 3 and C.PHASE["factorization"] == 4 and C.PHASE["solve"] == 1008
    assert C.DATA_PARAM["perm_reorder_row"][0] == 4 and C.DATA_PARAM["memory_estimates"][0] == 13
    assert C.DATA_TYPE[np.dtype(np.complex128)] == 5 and C.DATA_TYPE[np.dtype(np.int64)] == 24
    assert C.REORDERING["nested_dissection"] == 4 and C.PIVOT["local_block"] == 5


def test_cudss_version_gate(caplog: pytest.LogCaptureFixture) -> None:
    from ust.backends.cuda import cudss as C

    assert C.abi_for((0, 8, 0)) is C.ABIS[(0, 8)]
    assert C.abi_for((1, 0, 0)).has_jit_cache_dir
    with pytest.raises(BackendUnavailableError, match=r"cuDSS 0\.7\.1 is too old.*0\.8, 1\.0"):
        C.abi_for((0, 7, 1))
    with caplog.at_level(logging.WARNING, logger="ust"):
        assert C.abi_for((1, 2, 0)) is C.ABIS[(1, 0)]
    assert "newer than the versions" in caplog.text
    err = C.CudssError("cudssExecute(FACTORIZATION)", 2)
    assert "CUDSS_STATUS_ALLOC_FAILED (2)" in str(err) and "hybrid_memory" in str(err) and err.status == 2
    assert isinstance(err, UstError)
