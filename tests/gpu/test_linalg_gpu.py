"""ust.linalg on the GPU (cuDSS): the CPU cases again, plus streams, packages, saved plans and the check.

Run on the GPU machine with cuDSS installed (see ../shared/device/README.md).
"""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import ust.linalg as L

from ust.runtime.errors import InvalidStateError, ShapeError, SingularMatrixError, SolverAccuracyError

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")


def poisson2d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return sp.csr_matrix(sp.kron(sp.eye(m), t) + sp.kron(t, sp.eye(m)))


def poisson3d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    i = sp.eye(m)
    return sp.csr_matrix(sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t))


def general(n: int, seed: int = 0) -> sp.csr_matrix:
    a = sp.random(n, n, density=4.0 / n, random_state=seed, format="csr")
    return sp.csr_matrix(a + sp.diags(np.full(n, 2.0)) + sp.diags(np.ones(n - 3), 3))


def symmetric_indefinite(n: int, seed: int = 1) -> sp.csr_matrix:
    a = sp.random(n, n, density=3.0 / n, random_state=seed, format="csr")
    d = np.where(np.arange(n) % 3 == 0, -4.0, 4.0)
    return sp.csr_matrix(a + a.T + sp.diags(d))


MATRICES = {
    "general": (general(400), "general"),
    "symmetric": (symmetric_indefinite(300), "symmetric"),
    "spd": (poisson3d(8), "spd"),
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
    np.testing.assert_allclose(x, ref, rtol=0, atol=rtol * max(1.0, float(np.abs(ref).max())))


def test_library_version_and_threading_layer() -> None:
    from ust.backends.cuda.cudss import ABIS, get_library

    lib = get_library()
    assert (lib.version[0], lib.version[1]) in ABIS
    assert lib.threading_layer, "libcudss_mtlayer_gomp.so not found: analysis would run single-threaded"


@pytest.mark.parametrize("name", sorted(MATRICES))
@pytest.mark.parametrize("k", [None, 1, 4])
def test_scipy_operands_on_cuda(name: str, k: int | None) -> None:
    a, mtype = MATRICES[name]
    b = rhs(a.shape[0], k)
    x = L.solve(a, b, matrix_type=mtype, execution="cuda")
    assert isinstance(x, np.ndarray)
    assert_close(x, reference(a, b))


def test_scipy_operands_run_on_the_cpu_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    a, b = general(100), rhs(100, None)
    with caplog.at_level(logging.INFO, logger="ust"), L.DirectSolver(a, b) as s:
        assert s.backend == "superlu"
        assert_close(s.execute(), reference(a, b))
    assert "operands are in cpu memory; the execution space is cpu" in caplog.text
    with caplog.at_level(logging.INFO, logger="ust"), L.DirectSolver(a, b, execution="cuda") as s:
        assert s.backend == "cudss"
        assert_close(s.execute(), reference(a, b))
    assert "operands are in cpu memory; the execution space is cuda device 0" in caplog.text
    assert "route: cuDSS" in caplog.text


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_cupy_operands_stay_on_device(name: str, caplog: pytest.LogCaptureFixture) -> None:
    a, mtype = MATRICES[name]
    b = rhs(a.shape[0], 3)
    da, db = csp.csr_matrix(a), cupy.asarray(b)
    before = (da.data.copy(), da.indices.copy(), da.indptr.copy(), db.copy())
    with caplog.at_level(logging.INFO, logger="ust"):
        x = L.solve(da, db, matrix_type=mtype)
    assert isinstance(x, cupy.ndarray)
    assert_close(cupy.asnumpy(x), reference(a, b))
    assert "moved" not in caplog.text
    for arr, old in zip((da.data, da.indices, da.indptr, db), before):
        assert bool((arr == old).all())


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_dtypes(dtype: type) -> None:
    a = general(200)
    if np.dtype(dtype).kind == "c":
        a = sp.csr_matrix(a + 1j * sp.random(200, 200, density=0.02, random_state=5))
    a = a.astype(dtype)
    b = rhs(200, 2, dtype)
    x = L.solve(a, b, execution="cuda")
    assert x.dtype == np.dtype(dtype)
    tol = 1e-4 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-9
    ref = reference(a.astype(np.complex128 if x.dtype.kind == "c" else np.float64), b)
    assert_close(x, ref, rtol=tol)


@pytest.mark.parametrize("view", ["lower", "upper"])
def test_triangular_view(view: str) -> None:
    a = poisson3d(7)
    b = rhs(a.shape[0], 2)
    tri = sp.tril(a) if view == "lower" else sp.triu(a)
    assert_close(
        L.solve(tri.tocsr(), b, matrix_type="spd", matrix_view=view, execution="cuda"), reference(a, b)
    )


def test_refactorize_and_new_rhs() -> None:
    a, b = general(500), rhs(500, 2)
    da = csp.csr_matrix(a)
    with L.DirectSolver(da, cupy.asarray(b)) as s:
        s.plan()
        f = s.factorize()
        assert f.lu_nnz and f.lu_nnz >= a.nnz
        assert_close(cupy.asnumpy(s.solve()), reference(a, b))
        a2 = a.copy()
        a2.data = a2.data * np.linspace(0.5, 2.0, a2.nnz)
        s.reset_operands(a=csp.csr_matrix(a2))
        with pytest.raises(InvalidStateError, match=r"refactorize\(\)"):
            s.solve()
        assert s.refactorize().phase == "refactorization"
        assert_close(cupy.asnumpy(s.solve()), reference(a2, b))
        b2 = rhs(500, 5, seed=8)
        s.reset_operands(b=cupy.asarray(b2))
        assert_close(cupy.asnumpy(s.solve()), reference(a2, b2))
        with pytest.raises(ShapeError, match="sparsity pattern"):
            s.reset_operands(a=csp.csr_matrix(general(500, seed=9)))


def test_symmetric_inertia_and_info() -> None:
    a = symmetric_indefinite(200)
    with L.DirectSolver(a, rhs(200, None), options={"matrix_type": "symmetric"}, execution="cuda") as s:
        s.plan()
        f = s.factorize()
        assert f.info == 0
        if f.inertia is not None:
            eig = np.linalg.eigvalsh(a.toarray())
            assert f.inertia == (int((eig > 0).sum()), int((eig < 0).sum()))


def test_options_reach_cudss() -> None:
    a = general(300)
    for opts in (
        {"reordering": "amd"},
        {"reordering": "nested_dissection", "refinement_steps": 2},
        {"hybrid_memory": True},
        {"host_threads": 2},
        {"pivoting": "none", "matrix_type": "spd", "reordering": "default"},
    ):
        m = poisson3d(6) if opts.get("matrix_type") == "spd" else a
        bb = rhs(m.shape[0], 2)
        assert_close(L.solve(m, bb, execution="cuda", **opts), reference(m, bb))


def test_stream_argument() -> None:
    a, b = general(200), rhs(200, 1)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        db = cupy.asarray(b)
    x = L.solve(csp.csr_matrix(a), db, stream=stream)
    stream.synchronize()
    assert_close(cupy.asnumpy(x), reference(a, b))


def test_torch_operands() -> None:
    torch = pytest.importorskip("torch")
    a, b = general(150), rhs(150, 2)
    ta = torch.sparse_csr_tensor(
        torch.from_numpy(a.indptr).long(),
        torch.from_numpy(a.indices).long(),
        torch.from_numpy(a.data),
        size=a.shape,
    ).cuda()
    tb = torch.from_numpy(b).cuda()
    x = L.solve(ta, tb)
    assert isinstance(x, torch.Tensor) and x.device.type == "cuda"
    assert_close(x.cpu().numpy(), reference(a, b))
    xc = L.solve(ta.cpu(), tb.cpu(), execution="cuda")
    assert xc.device.type == "cpu"


def test_cupy_operands_on_the_cpu() -> None:
    a, b = general(100), rhs(100, None)
    x = L.solve(csp.csr_matrix(a), cupy.asarray(b), execution="cpu")
    assert isinstance(x, cupy.ndarray)
    assert_close(cupy.asnumpy(x), reference(a, b))


def test_singular_matrix_errors() -> None:
    a = general(50).tolil()
    a[7, :] = 0
    with pytest.raises(SingularMatrixError, match="row 7 has no nonzero entry"):
        L.solve(csp.csr_matrix(sp.csr_matrix(a)), cupy.ones(50))


def _singular_with_full_structure(m: int) -> sp.csr_matrix:
    """A 2-D Poisson matrix whose row 1 repeats row 0: singular, yet no row or column is empty."""
    a = poisson2d(m).tolil()
    a[1, :] = a[0, :]
    return sp.csr_matrix(a)


def test_check_catches_a_wrong_but_silent_solution() -> None:
    a = _singular_with_full_structure(10)
    b = rhs(a.shape[0], None, seed=5)  # almost surely not in the range of a
    # a perturbed zero pivot of 1e-4 makes x exact for A + E with ||E|| ~ 1e-4: backward error ~ 1e-5
    opts = {"pivoting": "none", "pivot_epsilon": 1e-4}
    try:
        with L.DirectSolver(a, b, options={**opts, "check": False}, execution="cuda") as s:
            x = s.execute()
            silent = True
    except SingularMatrixError:
        silent = False  # cuDSS noticed by itself on this version
    if silent:
        full = sp.csr_matrix(a)
        be = L.backward_error(full, x.reshape(-1, 1), b.reshape(-1, 1))
        tol = L.DirectSolverOptions().tolerance(np.dtype(np.float64))
        assert tol is not None and be > tol, f"expected a wrong solution, got backward error {be:.2e}"
    with pytest.raises((SolverAccuracyError, SingularMatrixError)) as info:
        L.solve(a, b, execution="cuda", **opts)
    if silent:
        assert isinstance(info.value, SolverAccuracyError)
        assert "backward error" in str(info.value)


def test_saved_plan_reuses_the_reordering(tmp_path: object) -> None:
    path = tmp_path / "cudss_plan.json"  # type: ignore[operator]
    a, b = poisson3d(12), rhs(12**3, 1)
    with L.DirectSolver(a, b, options={"matrix_type": "spd"}, execution="cuda") as s:
        s.plan()
        f = s.factorize()
        s.save_plan(path)
    import json

    tree = json.loads(path.read_text())["plan"].get("nd_partition_tree")  # type: ignore[attr-defined]
    assert tree is not None  # saved beside the permutation: a loaded analysis keeps its fast symbolic phase
    a2 = sp.csr_matrix(a * 2.0)
    with L.DirectSolver.load_plan(path, a2, b, options={"matrix_type": "spd"}, execution="cuda") as s2:
        assert s2._user_tree is not None and s2._user_tree.shape[0] % 2 == 1
        assert s2.plan().from_saved_plan
        f2 = s2.factorize()
        # about the same fill shows the saved permutation was taken the right way round (the
        # inverse permutation fills in far more); cuDSS's supernode amalgamation may differ a little
        assert abs(f2.lu_nnz - f.lu_nnz) <= 0.01 * f.lu_nnz
        assert_close(s2.solve(), reference(a2, b))
    code = (
        "import numpy as np, scipy.sparse as sp, ust.linalg as L\n"
        "t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(12, 12)); i = sp.eye(12)\n"
        "a = sp.csr_matrix(sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t))\n"
        f"s = L.DirectSolver.load_plan({str(path)!r}, a, np.ones(a.shape[0]), options={{'matrix_type': 'spd'}}, "
        "execution='cuda')\n"
        "print(s.plan().from_saved_plan, s.factorize().lu_nnz, float(np.abs(a @ s.solve() - 1).max()) < 1e-8)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    # a fresh process takes the saved permutation too: the same fill within 1% (as above)
    assert words[0] == "True" and abs(int(words[1]) - f.lu_nnz) <= 0.01 * f.lu_nnz and words[2] == "True"


def test_batch_list() -> None:
    mats = [general(60, seed=s) for s in range(3)]
    bs = [rhs(60, None, seed=s) for s in range(3)]
    for a, b, x in zip(mats, bs, L.solve(mats, bs, execution="cuda")):
        assert_close(x, reference(a, b))


def test_non_uniform_batch_of_cupy_operands() -> None:
    mats = [general(n, seed=n) for n in (40, 60, 80)]
    bs = [rhs(a.shape[0], k, seed=i) for i, (a, k) in enumerate(zip(mats, (None, 2, 1)))]
    xs = L.solve([csp.csr_matrix(a) for a in mats], [cupy.asarray(b) for b in bs])
    for a, b, x in zip(mats, bs, xs):
        assert isinstance(x, cupy.ndarray)
        assert_close(cupy.asnumpy(x), reference(a, b))
