"""Load-balanced generated kernels (issue 18): the C row split by rows + entries, the lowering
of the CUDA nnz split, and the planner's choice from the row lengths.

Every result is compared with SciPy's (rtol 1e-12) on skewed (R-MAT), empty-row,
single-huge-row and empty matrices, int32 and int64 indices, real and complex values.
The CUDA kernel itself runs in tests/gpu/test_balance_gpu.py; its source is compiled by
NVRTC here (no GPU needed) when NVRTC is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ust
import ust.runtime.cpu_threads as cpu_threads
from ust.backends.cpu.ckernels import _empty, matmul_c
from ust.backends.generated.launch import prepare
from ust.codegen import interpret
from ust.codegen.emit_c import emit_c
from ust.codegen.emit_cuda import NNZ_CHUNK, emit_cuda
from ust.codegen.lower import balance_level, lower
from ust.codegen.schedule import balance_choice, parse_balance
from ust.runtime.errors import UnsupportedError

CSR_USER = "(i, j) -> (i : dense, j : compressed)"
DCSR_USER = "(i, j) -> (i : compressed, j : compressed)"
FORMATS = (CSR_USER, DCSR_USER)


def rmat(scale: int, ef: int = 16, seed: int = 0) -> sp.csr_matrix:
    """An R-MAT graph (a = 0.57, b = c = 0.19), rows not permuted: the hubs come first."""
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, ef << scale
    i = np.zeros(m, np.int64)
    j = np.zeros(m, np.int64)
    for _ in range(scale):
        r = rng.random(m)
        i = 2 * i + (r >= 0.76)
        j = 2 * j + (((r >= 0.57) & (r < 0.76)) | (r >= 0.95))
    a = sp.csr_matrix((rng.random(m), (i, j)), shape=(n, n))
    a.sum_duplicates()
    return a


def empty_rows(n: int = 300, seed: int = 1) -> sp.csr_matrix:
    """Random rows with every third row empty, the first and the last rows among them."""
    a = sp.random(n, n, density=0.05, format="lil", random_state=seed)
    for r in [0, n - 1, *range(3, n, 3)]:
        a.rows[r], a.data[r] = [], []
    return a.tocsr()


def one_huge_row(n: int = 400, seed: int = 2) -> sp.csr_matrix:
    """One full row (n entries) among rows of about two entries: the single-huge-row case."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=2 / n, format="lil", random_state=seed)
    a[n // 3, :] = rng.random(n)
    return a.tocsr()


MATRICES = {
    "rmat": lambda: rmat(9),
    "empty_rows": empty_rows,
    "one_huge_row": one_huge_row,
    "all_empty": lambda: sp.csr_matrix((200, 150)),
}


def _cast(a: sp.csr_matrix, dtype: str, index: str) -> sp.csr_matrix:
    rng = np.random.default_rng(5)
    b = a.astype(dtype)
    if np.dtype(dtype).kind == "c":
        b.data = b.data + 1j * rng.random(b.nnz)
    b.indptr = b.indptr.astype(index)
    b.indices = b.indices.astype(index)
    return b


@pytest.fixture(params=[2, 3], ids=["2threads", "3threads"])
def threads(request: pytest.FixtureRequest) -> int:
    """More threads than rows per thread is also checked (3 on a 2-core machine)."""
    old = cpu_threads.THREADS
    cpu_threads.THREADS = request.param
    yield request.param
    cpu_threads.THREADS = old


@pytest.mark.parametrize("matrix", sorted(MATRICES))
@pytest.mark.parametrize("fmt", FORMATS, ids=["csr", "dcsr"])
@pytest.mark.parametrize(
    ("dtype", "index"), [("float64", "int32"), ("complex128", "int64"), ("float64", "int64")]
)
def test_c_row_split_equals_scipy(matrix: str, fmt: str, dtype: str, index: str, threads: int) -> None:
    a = _cast(MATRICES[matrix](), dtype, index)
    t = ust.asarray(a).convert(ust.format(fmt))
    assert str(np.dtype(t.index_dtype)) == index
    rng = np.random.default_rng(3)
    n = a.shape[1]
    x = rng.random(n).astype(dtype)
    xs = rng.random((n, 5)).astype(dtype)
    c = rng.random((a.shape[0], 5)).astype(dtype)
    x_before = x.copy()
    np.testing.assert_allclose(matmul_c(t, x, balance="rows"), a @ x, rtol=1e-12, atol=0)
    assert np.array_equal(x, x_before)  # caller arrays never written
    np.testing.assert_allclose(matmul_c(t, xs, balance="rows"), a @ xs, rtol=1e-12, atol=0)
    # column-major operand, alpha * A @ X + beta * C
    got = matmul_c(t, np.asfortranarray(xs), c, alpha=2.0, beta=-0.5, balance="rows")
    np.testing.assert_allclose(got, 2.0 * (a @ xs) - 0.5 * c, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("matrix", sorted(MATRICES))
@pytest.mark.parametrize("fmt", FORMATS, ids=["csr", "dcsr"])
@pytest.mark.parametrize("op", ["mv", "mm"])
def test_nnz_split_lowering_equals_scipy(matrix: str, fmt: str, op: str) -> None:
    """The IR of the CUDA nnz split (an init pass, then rows accumulated) on the interpreter."""
    a = _cast(MATRICES[matrix](), "complex128", "int32")
    if a.shape[0] > 300:  # the interpreter is scalar Python
        a = a[:300, :300].tocsr()
    t = ust.asarray(a).convert(ust.format(fmt))
    rng = np.random.default_rng(4)
    x = rng.random(a.shape[1]) if op == "mv" else rng.random((a.shape[1], 3))
    c = rng.random(a.shape[0]) if op == "mv" else rng.random((a.shape[0], 3))
    launch = prepare(t, x, c, alpha=1.5, beta=0.25)
    k = lower(t.format, op, value_dtype=launch.dtype, index_dtype="int32", itype="int64", balance="nnz")
    assert k.init is not None and k.info["balance"] == "nnz" and k.name.endswith("_nz")
    y = _empty(launch.out_shape, launch.dtype, launch.layout)
    interpret.run(k, launch.args(k, y))
    np.testing.assert_allclose(y, 1.5 * (a @ x) + 0.25 * c, rtol=1e-12, atol=1e-14)


def test_balanced_variants_leave_the_default_kernels_alone() -> None:
    fmt = ust.format(CSR_USER)
    plain, rows = lower(fmt, "mv"), lower(fmt, "mv", balance="rows")
    assert rows.body == plain.body and rows.name == plain.name + "_rb"
    assert "ust_split_i32" in emit_c(rows) and "ust_split" not in emit_c(plain)
    src = emit_cuda(lower(fmt, "mv", balance="nnz"))
    assert "ust_atomic_add(&y[c0]" in src and f"/ {NNZ_CHUNK}" in src


@pytest.mark.parametrize(
    ("fmt", "level"),
    [(CSR_USER, 1), (DCSR_USER, 1), ("CSC", None), ("COO", None), ("DIA", None), ("BatchedCSR", None)],
)
def test_balance_level(fmt: str, level: int | None) -> None:
    assert balance_level(ust.format(fmt), "mv") == level


def test_unsupported_balance_fails_with_the_rule() -> None:
    with pytest.raises(UnsupportedError, match="compressed level under it"):
        lower(ust.format("COO"), "mv", balance="rows")
    with pytest.raises(UnsupportedError, match="unknown balance"):
        lower(ust.format("CSR"), "mv", balance="merge")


def test_variant_strings() -> None:
    assert parse_balance(None) is None and parse_balance("auto") is None
    assert parse_balance("storage") == "none" and parse_balance("storage:nnz") == "nnz"


# ------------------------------------------------------------------------------ the planner's choice


def _tensor(a: sp.csr_matrix, fmt: str = DCSR_USER) -> ust.Tensor:
    return ust.asarray(a).convert(ust.format(fmt))


def test_choice_from_row_lengths_c() -> None:
    skewed = _tensor(rmat(10))
    uniform = _tensor(sp.random(1024, 1024, density=0.01, format="csr", random_state=0))
    assert balance_choice(skewed, "mv", "auto", "c", threads=2) == "nnz"
    assert balance_choice(uniform, "mv", "auto", "c", threads=2) == "none"
    assert balance_choice(skewed, "mv", "auto", "c", threads=1) == "none"  # one thread: nothing to split
    assert balance_choice(_tensor(sp.csr_matrix((64, 64))), "mv", "auto", "c", threads=2) == "none"
    assert balance_choice(_tensor(skewed.to_scipy(), "COO"), "mv", "auto", "c", threads=2) == "none"


def test_choice_from_row_lengths_cuda() -> None:
    hub = _tensor(one_huge_row(4 * NNZ_CHUNK))
    poisson = _tensor(sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4096, 4096), format="csr"))
    assert balance_choice(hub, "mv", "auto", "cuda") == "nnz"
    assert balance_choice(poisson, "mv", "auto", "cuda") == "none"


def test_matmul_takes_the_balanced_kernel_on_skewed_rows(threads: int) -> None:
    a = rmat(10)
    t = _tensor(a)
    x = np.random.default_rng(0).random(a.shape[1])
    mm = ust.Matmul(t, x)
    mm.plan()
    assert mm.decision.route == "generated-c"
    assert mm.executor._kernel_balance("mv") == "rows"
    np.testing.assert_allclose(mm.execute(), a @ x, rtol=1e-12)
    timings = mm.autotune(iterations=2)
    assert any(key.endswith(":nnz") for key in timings)
    np.testing.assert_allclose(mm.execute(), a @ x, rtol=1e-12)
    # a uniform matrix keeps the plain static split
    u = sp.random(1024, 1024, density=0.01, format="csr", random_state=0)
    mu = ust.Matmul(_tensor(u), x)
    mu.plan()
    assert mu.executor._kernel_balance("mv") == "none"


def test_saved_plan_keeps_the_balanced_variant(tmp_path: object, threads: int) -> None:
    import pathlib

    a = rmat(9)
    t = _tensor(a)
    x = np.ones(a.shape[1])
    mm = ust.Matmul(t, x, options={"variant": "storage:nnz"})
    mm.plan()
    assert mm.executor._kernel_balance("mv") == "rows"
    path = pathlib.Path(str(tmp_path)) / "plan.json"
    mm.save_plan(path)
    again = ust.Matmul.load_plan(path, t, x)
    assert again.from_saved_plan and again.variant == "storage:nnz"
    np.testing.assert_allclose(again.execute(), a @ x, rtol=1e-12)
