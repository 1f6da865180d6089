"""Generated C kernels (system compiler + ctypes) against NumPy, for every format and op.

Every kernel the module needs is compiled up front in one compiler run (``prebuild``), into
a per-session cache directory, so the whole table costs one compile.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen_cases import (
    ALL_2D,
    ALL_3D,
    ALL_BATCHED,
    OP_VARIANTS,
    check,
    get_format,
    inputs,
    is_batched,
    make_case,
    pack,
    reference,
    requests,
    scalars,
)
from ust.backends.cpu import ckernels
from ust.backends.generated.compile_c import toolchain
from ust.backends.generated.launch import prepare
from ust.runtime.errors import BackendUnavailableError, DeviceError, ShapeError, UnsupportedError

pytestmark = pytest.mark.skipif(toolchain() is None, reason="no C compiler on this machine")

ALL = ALL_2D + ALL_3D + ALL_BATCHED


@pytest.fixture(scope="module", autouse=True)
def _compiled(tmp_path_factory: pytest.TempPathFactory) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("UST_CACHE_DIR", str(tmp_path_factory.mktemp("ust-cache")))
    reqs = requests(ALL, ["float64"])
    reqs += requests(ALL, ["float64"], [("mv", "row", None), ("mm", "row", 3)], order="storage")
    reqs += requests(["CSR", "DIA", "BatchedCSR"], ["float64"], [("mv", "row", None)], itype="int64")
    reqs += requests(["COO", "CSC", "BatchedCOO"], ["complex128", "float32"], OP_VARIANTS[:2])
    ckernels.prebuild(reqs)
    yield
    mp.undo()


def _run(name: str, dtype: str, op: str, layout: str, ncols: int | None, **kw) -> None:
    a, dense, x, c = inputs(name, dtype, op, layout, ncols, **kw)
    alpha, beta = scalars(dtype)
    before = [x.copy(), c.copy(), a.values.copy()]
    index_before = {k: v.copy() for k, v in (*a._pos.items(), *((k + 100, v) for k, v in a._crd.items()))}
    y = ckernels.matmul_c(a, x, c, alpha=alpha, beta=beta)
    check(y, reference(dense, x, c, alpha, beta, is_batched(name)), dtype)
    np.testing.assert_array_equal(x, before[0])  # inputs never written
    np.testing.assert_array_equal(c, before[1])
    np.testing.assert_array_equal(a.values, before[2])
    for k, v in (*a._pos.items(), *((k + 100, v) for k, v in a._crd.items())):
        np.testing.assert_array_equal(v, index_before[k])
    if op == "mm":
        assert y.flags.c_contiguous if layout == "row" else y.swapaxes(-1, -2).flags.c_contiguous


@pytest.mark.parametrize(("op", "layout", "ncols"), OP_VARIANTS)
@pytest.mark.parametrize("name", ALL)
def test_every_format_and_op(name: str, op: str, layout: str, ncols: int | None) -> None:
    _run(name, "float64", op, layout, ncols)  # float32 / complex128: test_codegen_c_dtypes.py


@pytest.mark.parametrize("ncols", [1, 8])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("name", ["CSR", "DIA", "COO", "BSR[2,3]", "CSC", "BatchedCSR", "CSF"])
def test_spmm_column_counts(name: str, layout: str, ncols: int) -> None:
    _run(name, "float64", "mm", layout, ncols)


@pytest.mark.parametrize(("op", "layout", "ncols"), [("mv", "row", None), ("mm", "row", 3)])
@pytest.mark.parametrize("name", ALL)
def test_storage_order(name: str, op: str, layout: str, ncols: int | None) -> None:
    a, dense, x, c = inputs(name, "float64", op, layout, ncols)
    launch = prepare(a, x, c, alpha=2.0, beta=0.5)
    y = ckernels.run_launch(a.format, launch, None, order="storage")
    check(y, reference(dense, x, c, 2.0, 0.5, is_batched(name)), "float64")


@pytest.mark.parametrize("shape", [(0, 12), (6, 0), (0, 0)])
@pytest.mark.parametrize("name", ALL_2D)
def test_zero_size_shapes(name: str, shape: tuple[int, int]) -> None:
    for op, layout, ncols in OP_VARIANTS:
        a, dense, x, c = inputs(name, "float64", op, layout, ncols, shape=shape)
        y = ckernels.matmul_c(a, x, c, alpha=2.0, beta=3.0)
        check(y, reference(dense, x, c, 2.0, 3.0, False), "float64")
        y = ckernels.matmul_c(a, x)
        check(y, np.zeros_like(y), "float64")


@pytest.mark.parametrize("name", ["CSR", "COO", "DIA", "DCSR", "BSR[2,2]", "CSC"])
def test_all_zero_matrix_and_beta_zero_ignores_c(name: str) -> None:
    fmt = get_format(name)
    a = pack(np.zeros((6, 12)), fmt)
    x = np.ones(12)
    c = np.full(6, np.nan)  # beta == 0: c must not be read (NaN would show)
    np.testing.assert_array_equal(ckernels.matmul_c(a, x, c, alpha=2.0, beta=0.0), np.zeros(6))


def test_int64_indices_and_compute_type() -> None:
    for name in ("CSR", "DIA", "BatchedCSR"):
        a, dense = make_case(name, "float64", index_dtype="int64")
        x = np.random.default_rng(0).standard_normal(
            (dense.shape[0], dense.shape[-1]) if is_batched(name) else dense.shape[-1]
        )
        launch = prepare(a, x)
        assert launch.index_dtype == "int64"
        kern = ckernels.c_kernel(a.format, "mv", "row", "auto", "float64", "int64", "int64")
        y = np.empty(launch.out_shape)
        kern(launch.args(kern.kernel, y))
        check(y, reference(dense, x, None, 1.0, 0.0, is_batched(name)), "float64")


def test_out_argument_is_written_and_layout_follows_it() -> None:
    a, dense, x, _ = inputs("CSR", "float64", "mm", "row", 4)
    out = np.empty((6, 4), order="F")
    y = ckernels.matmul_c(a, x, out=out)
    assert y is out
    check(out, dense @ x, "float64")


def test_mixed_dtypes_promote() -> None:
    a, dense = make_case("CSR", "float32")
    x = np.arange(12, dtype=np.int64)
    y = ckernels.matmul_c(a, x)
    assert y.dtype == np.float64
    check(y, dense.astype(np.float64) @ x, "float64")
    y = ckernels.matmul_c(a, x.astype(np.float32), alpha=1j)
    assert y.dtype == np.complex64


def test_real_tensors_from_ust_asarray() -> None:
    sp = pytest.importorskip("scipy.sparse")
    from ust.convert import asarray

    m = sp.random_array((6, 12), density=0.4, format="csr", random_state=3)
    x = np.random.default_rng(1).standard_normal(12)
    for name in ["CSR", "CSC", "COO", "DCSR", "DCSC", "CROW", "CCOL", "DIA", "DIAI", "BSR[2,3]", "BSC[2,2]"]:
        t = asarray(m, format=name)
        check(ckernels.matmul_c(t, x, alpha=0.5), 0.5 * (m @ x), "float64")


def test_errors_before_any_work() -> None:
    a, _dense = make_case("CSR", "float64")
    with pytest.raises(ShapeError, match="x must have shape"):
        ckernels.matmul_c(a, np.ones(11))
    with pytest.raises(ShapeError, match="c has shape"):
        ckernels.matmul_c(a, np.ones(12), np.ones(5), beta=1.0)
    with pytest.raises(ShapeError, match="out has shape"):
        ckernels.matmul_c(a, np.ones(12), out=np.empty(7))
    with pytest.raises(UnsupportedError, match="value dtype"):
        ckernels.matmul_c(a, np.ones(12, dtype="datetime64[s]"))
    with pytest.raises(UnsupportedError, match="2 or more dimensions"):
        vec = pack(np.ones(5), get_format("SparseVector"))
        ckernels.matmul_c(vec, np.ones(5))


def test_device_mismatch_is_a_device_error() -> None:
    class FakeCupy:  # an array that claims to live in CuPy
        __module__ = "cupy._core"
        shape = (12,)
        dtype = np.dtype(np.float64)

    a, _ = make_case("CSR", "float64")
    with pytest.raises(DeviceError, match="same memory"):
        ckernels.matmul_c(a, FakeCupy())


def test_no_compiler_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.backends.generated import compile_c

    monkeypatch.setattr(compile_c, "toolchain", lambda: None)
    with pytest.raises(BackendUnavailableError, match="no C compiler"):
        compile_c.compile_shared("void f(void) {}\n")


def test_shared_outputs_atomic_fallback_when_partials_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.codegen import emit_c

    monkeypatch.setattr(emit_c, "PARTIAL_LIMIT", 0)  # no partial buffers: every thread uses atomics
    monkeypatch.setattr(ckernels, "_memo", ckernels.Memo())
    for name, dtype in (("COO", "float64"), ("CSC", "complex128"), ("BatchedCOO", "float32")):
        _run(name, dtype, "mv", "row", None)
        _run(name, dtype, "mm", "row", 3)


@pytest.mark.parametrize("threads", [1, 3])
def test_shared_outputs_with_other_thread_counts(threads: int, tmp_path) -> None:
    import os
    import subprocess
    import sys

    code = (
        "from tests.test_codegen_c import _run, requests, OP_VARIANTS, ckernels\n"
        "names = ['COO', 'CSC', 'COO-dups', 'BatchedCOO']\n"
        "ckernels.prebuild(requests(names, ['float64', 'complex128'], OP_VARIANTS[:2]))\n"
        "for name in names:\n"
        "    for dtype in ('float64', 'complex128'):\n"
        "        _run(name, dtype, 'mv', 'row', None)\n"
        "        _run(name, dtype, 'mm', 'row', 4)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "UST_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.stdout.strip() == "ok", out.stderr[-3000:]


def test_no_working_compiler_falls_back_to_scipy_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sp = pytest.importorskip("scipy.sparse")
    from ust.backends.generated import compile_c
    from ust.backends.generated import executors as runtime
    from ust.convert import asarray

    monkeypatch.setattr(compile_c, "toolchain", lambda: None)
    monkeypatch.setattr(runtime, "_warned_no_compiler", False)
    m = sp.random_array((6, 12), density=0.4, format="csr", random_state=3)
    x = np.random.default_rng(1).standard_normal(12)
    c = np.ones(6)
    with caplog.at_level("WARNING", logger="ust.backends.generated.executors"):
        for fmt in ("DIA", "BSR[2,3]"):
            y = runtime.matmul_generated(asarray(m, format=fmt), x, c, alpha=2.0, beta=0.5)
            check(y, 2.0 * (m @ x) + 0.5 * c, "float64")
    assert sum("no working C compiler" in r.message for r in caplog.records) == 1
    with pytest.raises(BackendUnavailableError, match="batched"):
        a3, _ = make_case("BatchedCSR", "float64")
        runtime.matmul_generated(a3, np.ones((3, 8)))


def test_executor_reuses_its_bound_launch_and_sees_new_values() -> None:
    from ust.backends.generated.executors import GeneratedMatmul

    a, dense, x, c = inputs("DIA", "float64", "mv", "row", None)
    ex = GeneratedMatmul(a, 2.0, 0.5, "float64", "c")
    out = np.empty(6)
    assert ex.run(x, c, out) is out
    check(out, 2.0 * (dense @ x) + 0.5 * c, "float64")
    bound = ex._bound
    x *= 3.0  # same object, new contents: the bound launch reads them
    ex.run(x, c, out)
    assert ex._bound is bound
    check(out, 2.0 * (dense @ x) + 0.5 * c, "float64")
    x2 = x.copy()
    ex.run(x2, None, None)  # other operands: a new binding
    assert ex._bound is not bound
