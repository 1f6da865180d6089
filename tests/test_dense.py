"""ust.dense on the CPU: matmul / Matmul against NumPy, the fft family / FFT against scipy.fft,
the cuBLASLt layout mapping against a NumPy emulation of cuBLASLt, saved plans, every error."""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import subprocess
import sys
import textwrap
import time
import types
import typing

import numpy as np
import pytest
import scipy.fft as sfft
from numpy.lib.stride_tricks import as_strided

from ust import dense
from ust.backends.cpu.dense import alloc_matrices
from ust.backends.cuda import cublaslt as lt
from ust.runtime.errors import (
    InvalidStateError,
    InvalidTypeError,
    ShapeError,
    UnsupportedError,
    UstSyntaxError,
)
from ust.runtime.stateful import PlanFileError, decode_array

RNG = np.random.default_rng(7)
REAL = ("float16", "float32", "float64")
TOL = {"float16": 2e-2, "float32": 2e-5, "float64": 1e-12, "complex64": 2e-5, "complex128": 1e-12}


def rand(shape, dtype, order="C"):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return np.array(x, dtype=dtype, order=order)


def in_order(x, order):
    """x with its matrices (last two axes) stored column-major when order is "F"."""
    if order == "C" or x.ndim < 2:
        return np.ascontiguousarray(x)
    out = alloc_matrices(np, x.shape, x.dtype, "F")
    out[...] = x
    return out


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def reference(a, b, c=None, alpha=1, beta=0, epilog="none", bias=None):
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    d = alpha * np.matmul(a.astype(wide), b.astype(wide))
    if c is not None:
        d = d + beta * c.astype(wide)
    if bias is not None:
        d = d + bias.astype(wide)
    if epilog.startswith("relu"):
        d = np.maximum(d, 0)
    elif epilog.startswith("gelu"):
        d = gelu(d)
    return d


def close(got, want, dtype):
    tol = TOL[str(np.dtype(dtype))]
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    assert got.dtype == np.dtype(dtype)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(want.dtype), want, rtol=tol, atol=tol * scale)


# ------------------------------------------------------------------------------ matmul vs NumPy


@pytest.mark.parametrize("epilog", dense.EPILOGS)
@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("layout", ["CC", "CF", "FC", "FF"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_matmul_epilogs_dtypes_layouts(epilog, dtype, layout, batch):
    M, K, N = 7, 5, 6
    a = in_order(rand((*batch, M, K), dtype), layout[0])
    b = in_order(rand((*batch, K, N), dtype), layout[1])
    c = rand((*batch, M, N), dtype)
    bias = rand((N,), dtype) if "bias" in epilog else None
    a0, b0, c0 = a.copy(), b.copy(), c.copy()
    inputs = {"bias": bias} if bias is not None else None
    d = dense.matmul(a, b, c, alpha=1.5, beta=0.5, epilog=epilog, epilog_inputs=inputs)
    close(d, reference(a, b, c, 1.5, 0.5, epilog, bias), dtype)
    for x, x0 in ((a, a0), (b, b0), (c, c0)):  # the caller's arrays are only read
        np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("layout", ["CC", "FF", "CF"])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_matmul_complex(dtype, layout, batch):
    a = in_order(rand((*batch, 4, 3), dtype), layout[0])
    b = in_order(rand((*batch, 3, 5), dtype), layout[1])
    c = rand((*batch, 4, 5), dtype)
    d = dense.matmul(a, b, c, alpha=0.5 - 1j, beta=2j)
    close(d, reference(a, b, c, 0.5 - 1j, 2j), dtype)


@pytest.mark.parametrize(
    ("alpha", "beta"), [(1, 0), (1, 1), (2.5, 1), (0.5, -3.0), (1.0, 0.25), (0, 2), (2 + 0j, np.float32(0.5))]
)
@pytest.mark.parametrize("batch", [(), (4,)])
def test_matmul_alpha_beta(alpha, beta, batch):
    a, b, c = (
        rand((*batch, 9, 4), "float64"),
        rand((*batch, 4, 3), "float64"),
        rand((*batch, 9, 3), "float64"),
    )
    close(dense.matmul(a, b, c, alpha=alpha, beta=beta), reference(a, b, c, alpha, beta), "float64")


def test_matmul_without_c_and_broadcast_batches():
    a, b = rand((5, 6, 4), "float32"), rand((4, 3), "float32")
    close(dense.matmul(a, b), reference(a, b), "float32")
    close(dense.matmul(b.T, a.swapaxes(-1, -2)), reference(b.T, a.swapaxes(-1, -2)), "float32")
    c2 = rand((6, 3), "float32")  # one c for every batch entry
    close(dense.matmul(a, b, c2, beta=1), reference(a, b, c2, 1, 1), "float32")
    a1 = rand((1, 6, 4), "float32")  # a batch of one broadcasts like no batch
    bb = rand((2, 4, 3), "float32")
    close(dense.matmul(a1, bb), reference(a1, bb), "float32")


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "bias_shape"),
    [
        ((4,), (4, 3), (3,)),
        ((5, 4), (4,), (5,)),
        ((4,), (4,), None),
        ((2, 5, 4), (4,), (5,)),
        ((4,), (2, 4, 3), (3,)),
    ],
)
def test_matmul_vectors(a_shape, b_shape, bias_shape):
    a, b = rand(a_shape, "float64"), rand(b_shape, "float64")
    want_shape = np.matmul(a, b).shape
    c = rand(want_shape, "float64")
    if bias_shape is None:
        d = dense.matmul(a, b, c, alpha=2, beta=1)
        close(d, reference(a, b, c, 2, 1), "float64")
        return
    bias = rand(bias_shape, "float64")
    d = dense.matmul(a, b, c, alpha=2, beta=1, epilog="relu_bias", epilog_inputs={"bias": bias})
    close(d, reference(a, b, c, 2, 1, "relu_bias", bias), "float64")


@pytest.mark.parametrize(
    ("bias_shape", "order"),
    [((6,), "C"), ((1, 6), "C"), ((7, 1), "F"), ((3, 1, 6), "C"), ((3, 7, 1), "F"), ((1, 1, 6), "C")],
)
def test_bias_shapes_and_result_layout(bias_shape, order):
    a, b = rand((3, 7, 5), "float32"), rand((3, 5, 6), "float32")
    bias = rand(bias_shape, "float32")
    d = dense.matmul(a, b, epilog="gelu_bias", epilog_inputs={"bias": bias})
    close(d, reference(a, b, epilog="gelu_bias", bias=bias), "float32")
    # D follows the bias orientation (cuBLASLt adds the bias along its column-major rows)
    assert d.swapaxes(-1, -2).flags.c_contiguous if order == "F" else d.flags.c_contiguous


def test_result_follows_column_major_c():
    a, b, c = rand((8, 3), "float64"), rand((3, 5), "float64"), rand((8, 5), "float64", "F")
    d = dense.matmul(a, b, c, beta=1)
    assert d.flags.f_contiguous
    close(d, reference(a, b, c, 1, 1), "float64")


def test_non_contiguous_operands_are_copied_with_a_log_line(caplog):
    big = rand((20, 12), "float32")
    a = big[::2, ::3]  # strided both ways: BLAS cannot take it as is
    b = rand((4, 6), "float32")
    a0 = a.copy()
    with caplog.at_level(logging.INFO, logger="ust"):
        d = dense.matmul(a, b, epilog="relu")
    close(d, reference(a, b, epilog="relu"), "float32")
    np.testing.assert_array_equal(a, a0)
    assert any("not contiguous; copying" in r.getMessage() for r in caplog.records)
    assert any("execution space is cpu" in r.getMessage() for r in caplog.records)


def test_gelu_runs_blockwise_on_large_results():
    a, b = rand((300, 8), "float32"), rand((8, 500), "float32")  # 150000 elements > one scratch block
    close(dense.matmul(a, b, epilog="gelu"), reference(a, b, epilog="gelu"), "float32")


def test_routes():
    a, b = rand((6, 4), "float32"), rand((4, 3), "float32")
    with dense.Matmul(a, b) as mm:
        assert mm.route == "unplanned"
        mm.plan()
        assert mm.route == "blas.gemm"
    with dense.Matmul(a[None], b) as mm:
        mm.plan()
        assert mm.route == "numpy.matmul"
    with dense.Matmul(a.astype(np.float16), b.astype(np.float16)) as mm:
        mm.plan()
        assert mm.route == "numpy.matmul"
    with dense.Matmul(np.zeros((3, 0)), np.zeros((0, 2)), np.ones((3, 2)), beta=2) as mm:
        mm.plan(epilog="relu")
        np.testing.assert_array_equal(mm.execute(), np.full((3, 2), 2.0))


# ------------------------------------------------------------------------------------- stateful


def test_stateful_lifecycle():
    a, b, c = rand((10, 4), "float32"), rand((4, 6), "float32"), rand((10, 6), "float32")
    bias = rand((6,), "float32")
    mm = dense.Matmul(a, b, c, alpha=2, beta=0.5)
    with pytest.raises(InvalidStateError, match="before plan"):
        mm.execute()
    mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias})
    assert mm.autotune(iterations=3) is None  # the CPU has one route: nothing to time
    close(mm.execute(), reference(a, b, c, 2, 0.5, "relu_bias", bias), "float32")
    a2, bias2 = rand((10, 4), "float32"), rand((6,), "float32")
    mm.reset_operands(a=a2, beta=1.5, epilog_inputs={"bias": bias2})
    close(mm.execute(), reference(a2, b, c, 2, 1.5, "relu_bias", bias2), "float32")
    b3 = rand((4, 6), "float32")
    mm.reset_operands_unchecked(b=b3, alpha=-1)
    close(mm.execute(), reference(a2, b3, c, -1, 1.5, "relu_bias", bias2), "float32")
    mm.plan(epilog="gelu")  # planning again replaces the epilogue
    close(mm.execute(), reference(a2, b3, c, -1, 1.5, "gelu"), "float32")
    mm.free()
    assert mm.is_freed
    with pytest.raises(InvalidStateError, match="freed"):
        mm.execute()
    with pytest.raises(InvalidStateError):
        mm.plan()


def test_context_manager_frees():
    a, b = rand((3, 3), "float64"), rand((3, 3), "float64")
    with dense.Matmul(a, b) as mm:
        mm.plan()
        close(mm.execute(), reference(a, b), "float64")
    assert mm.is_freed


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"a": np.zeros((9, 4), np.float32)}, ShapeError, "plan is for"),
        ({"a": np.zeros((10, 4), np.float64)}, ShapeError, "plan is for"),
        ({"c": np.zeros((10, 6), np.float32)}, UnsupportedError, "not given at construction"),
        ({"epilog_inputs": {"bias": np.zeros(6, np.float32)}}, UnsupportedError, "no bias"),
        ({"alpha": 1j}, UnsupportedError, "complex"),
        ({"a": [[0.0] * 4] * 10}, ShapeError, "plan is for"),
    ],
)
def test_reset_operands_errors(kwargs, error, match):
    with dense.Matmul(rand((10, 4), "float32"), rand((4, 6), "float32")) as mm:
        mm.plan()
        with pytest.raises(error, match=match):
            mm.reset_operands(**kwargs)


# ---------------------------------------------------------------------------------- saved plans

_SUBPROCESS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ust import dense
    path, what = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(3)
    if what == "matmul":
        a, b = rng.standard_normal((3, 8, 5)).astype(np.float32), rng.standard_normal((3, 5, 4)).astype(np.float32)
        bias = rng.standard_normal(4).astype(np.float32)
        mm = dense.Matmul(a, b)
        used = mm.load_plan(path, epilog_inputs={"bias": bias})
        d = mm.execute()
        ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
        err = float(np.abs(d - ref).max())
        print(json.dumps({"used": used, "route": mm.route, "err": err}))
    else:
        x = rng.standard_normal((4, 64))
        f = dense.FFT(x, "rfft", norm="ortho")
        used = f.load_plan(path)
        err = float(np.abs(f.execute() - np.fft.rfft(x, norm="ortho")).max())
        print(json.dumps({"used": used, "route": f.route, "err": err}))
    """
)


def _run_child(path, what):
    out = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS, str(path), what], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_matmul_plan_round_trip_in_another_process(tmp_path):
    rng = np.random.default_rng(3)
    a, b = (
        rng.standard_normal((3, 8, 5)).astype(np.float32),
        rng.standard_normal((3, 5, 4)).astype(np.float32),
    )
    bias = rng.standard_normal(4).astype(np.float32)
    path = tmp_path / "mm.json"
    with dense.Matmul(a, b) as mm:
        mm.plan(epilog="relu+bias", epilog_inputs={"bias": bias})
        mm.save_plan(path)
    doc = json.loads(path.read_text())
    assert doc["kind"] == "dense.matmul" and doc["device"] == "cpu"
    assert doc["plan"]["route"] == "numpy.matmul" and doc["plan"]["epilog"] == "relu_bias"
    child = _run_child(path, "matmul")
    assert child == {"used": True, "route": "numpy.matmul", "err": child["err"]} and child["err"] < 1e-4


def test_load_plan_from_another_library_version_plans_afresh(tmp_path, caplog):
    a, b = rand((4, 3), "float64"), rand((3, 2), "float64")
    path = tmp_path / "mm.json"
    with dense.Matmul(a, b) as mm:
        mm.plan(epilog="relu")
        mm.save_plan(path)
    doc = json.loads(path.read_text())
    doc["versions"]["numpy"] = "0.0"
    path.write_text(json.dumps(doc))
    with dense.Matmul(a, b) as mm, caplog.at_level(logging.WARNING, logger="ust"):
        assert mm.load_plan(path) is False
        close(mm.execute(), reference(a, b, epilog="relu"), "float64")
    assert any("planning afresh" in r.getMessage() for r in caplog.records)


def test_load_plan_for_other_operands_warns_and_plans_afresh(tmp_path, caplog):
    # the module contract of ust.runtime.stateful: a plan that does not fit these operands is
    # not used (a WARNING says why); a file holding another kind of plan is an error
    path = tmp_path / "mm.json"
    with dense.Matmul(rand((4, 3), "float64"), rand((3, 2), "float64")) as mm:
        mm.plan(epilog="relu")
        mm.save_plan(path)
    a, b = rand((5, 3), "float64"), rand((3, 2), "float64")
    with dense.Matmul(a, b) as mm, caplog.at_level(logging.WARNING, logger="ust"):
        assert mm.load_plan(path) is False
        close(mm.execute(), reference(a, b, epilog="relu"), "float64")
    assert "not for these operands" in caplog.text and "planning afresh" in caplog.text
    with dense.FFT(np.ones(8)) as f, pytest.raises(PlanFileError, match="matmul plan"):
        f.load_plan(path)


def test_fft_plan_round_trip_in_another_process(tmp_path):
    x = np.random.default_rng(3).standard_normal((4, 64))
    path = tmp_path / "fft.json"
    with dense.FFT(x, "rfft", norm="ortho", options={"workers": 2}) as f:
        f.plan()
        f.save_plan(path)
    assert json.loads(path.read_text())["plan"]["route"] == "scipy.fft"
    child = _run_child(path, "fft")
    assert child["used"] is True and child["route"] == "scipy.fft" and child["err"] < 1e-12


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (((4, 3), (4, 2)), {}, ShapeError, "do not fit"),
        (((2, 4, 3), (3, 3, 2)), {}, ShapeError, "do not broadcast"),
        (((2, 1, 4, 3), (1, 5, 3, 2)), {}, UnsupportedError, "axis by axis"),
        (((4, 3), (3, 2), (4, 3)), {"beta": 1}, ShapeError, "c has shape"),
        (((4, 3), (3, 2), (1, 2)), {"beta": 1}, UnsupportedError, "only broadcasts"),
        (((4, 3), (3, 2)), {"beta": 0.5}, ShapeError, "no c was given"),
        (((4, 3), (3, 2)), {"alpha": 2j}, UnsupportedError, "complex alpha"),
        (((4, 3), (3, 2)), {"alpha": "2"}, UnsupportedError, "scalar"),
        (((4, 3), (3, 2)), {"epilog": "swish"}, UnsupportedError, "supported: none, relu"),
        (((4, 3), (3, 2)), {"epilog": "relu_bias"}, ShapeError, "needs epilog_inputs"),
        (
            ((4, 3), (3, 2)),
            {"epilog": "relu", "epilog_inputs": {"bias": np.ones(2)}},
            UnsupportedError,
            "takes none",
        ),
        (
            ((4, 3), (3, 2)),
            {"epilog": "bias", "epilog_inputs": {"scale": np.ones(2)}},
            UnsupportedError,
            "unknown",
        ),
        (
            ((4, 3), (3, 2)),
            {"epilog": "bias", "epilog_inputs": {"bias": np.ones(3)}},
            ShapeError,
            "broadcast",
        ),
        (
            ((4, 3), (3, 2)),
            {"epilog": "bias", "epilog_inputs": {"bias": np.ones((4, 2))}},
            UnsupportedError,
            "(2,)",
        ),
        (
            ((4, 3), (3, 2)),
            {"epilog": "bias", "epilog_inputs": {"bias": np.ones(())}},
            UnsupportedError,
            "scalar",
        ),
        (
            ((4, 3), (3, 2)),
            {"epilog": "bias", "epilog_inputs": {"bias": np.ones(2, np.float32)}},
            UnsupportedError,
            "dtype",
        ),
        (((4, 3), (3, 2)), {"options": {"tf33": True}}, UnsupportedError, "tf32"),
        (((), (3, 2)), {}, ShapeError, "at least 1"),
    ],
)
def test_matmul_errors(args, kwargs, error, match):
    operands = [np.ones(s) for s in args]
    with pytest.raises(error, match=match):
        dense.matmul(*operands, **kwargs)


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.ones((2, 2), np.float32), np.ones((2, 2)), "share one dtype"),
        (np.ones((2, 2), np.int64), np.ones((2, 2), np.int64), "supported there: float16, float32"),
    ],
)
def test_matmul_dtype_errors_name_what_is_supported(a, b, match):
    with pytest.raises(UnsupportedError, match=match):
        dense.matmul(a, b)


def test_epilogues_need_a_real_dtype():
    z = np.ones((2, 2), np.complex64)
    with pytest.raises(UnsupportedError, match="real dtype"):
        dense.matmul(z, z, epilog="relu")


def test_sparse_operands_are_sent_elsewhere():
    import scipy.sparse as sp

    with pytest.raises(UnsupportedError, match=r"ust\.matmul"):
        dense.matmul(sp.eye(3, format="csr"), np.ones((3, 2)))


# ------------------------------------------------------------------ cuBLASLt mapping, emulated


def _emulate_cublaslt(problem, first, second, c, d, alpha, beta, bias, bias_stride):
    """What cublasLtMatmul computes on these buffers, per its column-major layout descriptors."""

    def view(x, lay):
        assert lay.ld >= max(1, lay.rows), "cuBLASLt needs ld >= rows for column-major layouts"
        item = x.itemsize
        return as_strided(
            x, (lay.batch_count, lay.rows, lay.cols), (lay.batch_stride * item, item, lay.ld * item)
        )

    A, B = view(first, problem.a), view(second, problem.b)
    A = A.swapaxes(-1, -2) if problem.transa == lt.OP_T else A
    B = B.swapaxes(-1, -2) if problem.transb == lt.OP_T else B
    assert A.shape[1:] == (problem.m, problem.k) and B.shape[1:] == (problem.k, problem.n)
    acc = alpha * np.matmul(A.astype(np.float64), B) + beta * view(c, problem.c)
    if bias is not None:
        vec = bias.reshape(-1)
        rows = np.arange(problem.m)[None, :] + bias_stride * np.arange(problem.d.batch_count)[:, None]
        acc = acc + vec[rows][:, :, None]
    if problem.epilogue.startswith("relu"):
        acc = np.maximum(acc, 0)
    out = view(d, problem.d)
    out[...] = acc


LAYOUTS = ["C", "F", "padded-C", "padded-F", "strided"]


def _make(shape, how):
    if how in ("C", "F"):
        return in_order(rand(shape, "float64"), how)
    if how == "padded-C":  # rows further apart than their length (a column slice)
        return rand((*shape[:-1], shape[-1] + 3), "float64")[..., : shape[-1]]
    if how == "padded-F":
        big = in_order(rand((*shape[:-2], shape[-2] + 2, shape[-1]), "float64"), "F")
        return big[..., : shape[-2], :]
    return rand((*shape[:-2], shape[-2] * 2, shape[-1] * 2), "float64")[..., ::2, ::2]  # needs a copy


@pytest.mark.parametrize("a_how", LAYOUTS)
@pytest.mark.parametrize("b_how", LAYOUTS)
@pytest.mark.parametrize("c_how", [None, "C", "F", "strided"])
@pytest.mark.parametrize("bias_kind", [None, "row", "col"])
def test_describe_matches_numpy_under_emulation(a_how, b_how, c_how, bias_kind):
    M, K, N, batch = 5, 3, 4, (2,)
    a, b = _make((*batch, M, K), a_how), _make((*batch, K, N), b_how)
    c = None if c_how is None else _make((*batch, M, N), c_how)
    bias = {None: None, "row": rand((N,), "float64"), "col": rand((*batch, M, 1), "float64")}[bias_kind]
    order = lt.choose_d_order(bias_kind, c)
    fa, fb, fc = (lt.fit_operand(np, n, x, order) for n, x in (("a", a), ("b", b), ("c", c)))
    fbias = lt.fit_operand(np, "bias", bias, order)
    for how, x, fx in ((a_how, a, fa), (b_how, b, fb)):
        assert (fx is x) == (how != "strided")  # only what cuBLASLt cannot read is copied
    epilogue = "none" if bias is None else "relu_bias"
    length = N if order == "C" else M
    stride = lt.bias_batch_stride(fbias, length)
    problem = lt.describe(
        dtype="float64",
        shape=(M, N, K),
        batch_count=2,
        a=lt.element_view(fa, order),
        b=lt.element_view(fb, order),
        c=None if fc is None else lt.element_view(fc, order),
        d_order=order,
        epilogue=epilogue,
        bias_batch_stride=stride,
    )
    assert lt.Problem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem
    d = alloc_matrices(np, (*batch, M, N), np.float64, order)
    first, second = (fa, fb) if problem.first == "a" else (fb, fa)
    _emulate_cublaslt(
        problem, first, second, d if fc is None else fc, d, 1.5, 0.5 if c is not None else 0, fbias, stride
    )
    want = reference(a, b, c, 1.5, 0.5, epilogue, bias)
    np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)


def test_describe_unbatched_operand_broadcasts_with_stride_zero():
    a, b = rand((3, 4, 2), "float32"), rand((2, 5), "float32")
    va, vb = lt.element_view(a, "C"), lt.element_view(b, "C")
    assert vb[2] == 0 and va[2] == 8
    p = lt.describe(dtype="float32", shape=(4, 5, 2), batch_count=3, a=va, b=vb, c=None, d_order="C")
    assert (p.m, p.n, p.k, p.first) == (5, 4, 2, "b")
    assert p.b.batch_stride == 8 and p.a.batch_stride == 0 and p.d.batch_stride == 20


def test_describe_rejects_what_cublaslt_cannot_do():
    with pytest.raises(UnsupportedError, match="supported: float16"):
        lt.describe(
            dtype="int8", shape=(1, 1, 1), batch_count=1, a=("C", 1, 0), b=("C", 1, 0), c=None, d_order="C"
        )
    with pytest.raises(UnsupportedError, match="float32 operands only"):
        lt.describe(
            dtype="float64",
            shape=(1, 1, 1),
            batch_count=1,
            a=("C", 1, 0),
            b=("C", 1, 0),
            c=None,
            d_order="C",
            tf32=True,
        )


def test_matrix_view_and_batch_stride():
    assert lt.matrix_view(4, 3, 3, 1) == ("C", 3)
    assert lt.matrix_view(4, 3, 1, 4) == ("F", 4)
    assert lt.matrix_view(4, 3, 1, 6) == ("F", 6)
    assert lt.matrix_view(1, 3, 99, 1, prefer="F") == ("F", 1)
    assert lt.matrix_view(4, 3, 2, 8) is None
    assert lt.matrix_view(4, 3, 0, 1) is None  # broadcast rows
    assert lt.batch_stride((2, 3), (12, 4)) == 4
    assert lt.batch_stride((2, 3), (13, 4)) is None
    assert lt.batch_stride((1, 1), (5, 7)) == 0
    assert lt.batch_stride((3,), (0,)) == 0
    assert lt.alignment(0x1000) == 256 and lt.alignment(0x1008) == 8


def test_status_codes_become_errors():
    lt.check_status(0, "x")
    with pytest.raises(UnsupportedError, match="NOT_SUPPORTED"):
        lt.check_status(15, "cublasLtMatmul")
    with pytest.raises(lt.CublasLtError, match="INVALID_VALUE") as info:
        lt.check_status(7, "cublasLtMatmulDescSetAttribute")
    assert info.value.status == 7


# ------------------------------------------------------------------------------------ FFT vs scipy

FFT_CASES = [
    ("fft", {}),
    ("fft", {"n": 20}),
    ("fft", {"n": 9, "axis": 0}),
    ("ifft", {"axis": 0}),
    ("rfft", {}),
    ("rfft", {"n": 15, "axis": 0}),
    ("irfft", {}),
    ("irfft", {"n": 11}),
    ("fftn", {}),
    ("fftn", {"s": (6, 8), "axes": (0, 1)}),
    ("ifftn", {"axes": (1,)}),
]


@pytest.mark.parametrize(("kind", "kwargs"), FFT_CASES)
@pytest.mark.parametrize("dtype", dense.FFT_DTYPES)
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_family_matches_scipy(kind, kwargs, dtype, norm):
    if kind == "rfft" and dtype.startswith("complex"):
        pytest.skip("rfft takes real input (tested among the errors)")
    x = rand((7, 16), dtype)
    x0 = x.copy()
    got = getattr(dense, kind)(x, norm=norm, **kwargs)
    want = getattr(sfft, kind)(x, norm=norm, **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(x, x0)


def test_fft_workers_and_lists():
    x = rand((64, 32), "complex128")
    np.testing.assert_allclose(dense.fft(x, options={"workers": 2}), sfft.fft(x), atol=1e-12)
    np.testing.assert_allclose(dense.fft([1.0, 2.0, 3.0]), sfft.fft(np.array([1.0, 2.0, 3.0])))


def test_fft_epilogues():
    x = rand((4, 32), "float64")
    freqs = sfft.rfftfreq(32)
    gauss = np.exp(-((freqs / 0.1) ** 2))
    x0 = x.copy()
    # a ufunc runs in place on the spectrum
    np.testing.assert_allclose(dense.rfft(x, epilog=np.multiply, epilog_args=(gauss,)), sfft.rfft(x) * gauss)
    # any other callable is applied as is
    got = dense.fft(x, epilog=lambda s, g: np.abs(s) * g, epilog_args=(2.0,))
    np.testing.assert_allclose(got, np.abs(sfft.fft(x)) * 2.0)
    np.testing.assert_array_equal(x, x0)


def test_stateful_fft():
    x = rand((8, 64), "complex64")
    with dense.FFT(x, "fftn", axes=(0, 1), norm="ortho") as f:
        assert f.route == "unplanned"
        f.plan(epilog=np.multiply, epilog_args=(3.0,))
        assert f.route == "scipy.fft"
        np.testing.assert_allclose(f.execute(), 3 * sfft.fftn(x, norm="ortho"), rtol=1e-5, atol=1e-4)
        x2 = rand((8, 64), "complex64")
        f.reset_operands(x=x2)
        np.testing.assert_allclose(f.execute(), 3 * sfft.fftn(x2, norm="ortho"), rtol=1e-5, atol=1e-4)
        f.reset_operands_unchecked(x)
        np.testing.assert_allclose(f.execute(), 3 * sfft.fftn(x, norm="ortho"), rtol=1e-5, atol=1e-4)
        with pytest.raises(ShapeError, match="plan is for"):
            f.reset_operands(x=rand((8, 63), "complex64"))
        with pytest.raises(ShapeError, match="plan is for"):
            f.reset_operands(x=rand((8, 64), "complex128"))
    assert f.is_freed
    with pytest.raises(InvalidStateError):
        f.execute()
    g = dense.FFT(rand(16, "float64"), "irfft", n=30)
    with pytest.raises(InvalidStateError, match="before plan"):
        g.execute()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: dense.fft(np.arange(4)), UnsupportedError, "supported: float32, float64"),
        (lambda: dense.rfft(np.ones(4, complex)), UnsupportedError, "real input"),
        (lambda: dense.fft(np.ones(4), norm="unitary"), UnsupportedError, "norm"),
        (lambda: dense.fft(np.ones(4), axis=1), ShapeError, "out of range"),
        (lambda: dense.fft(np.ones(4), n=0), ShapeError, "positive"),
        (lambda: dense.fft(np.ones(())), ShapeError, "scalar"),
        (lambda: dense.irfft(np.ones(1)), ShapeError, "no output"),
        (lambda: dense.fftn(np.ones((2, 2)), s=(2,), axes=(0, 1)), ShapeError, "different lengths"),
        (lambda: dense.fftn(np.ones((2, 2)), axes=(0, 0)), ShapeError, "repeat"),
        (lambda: dense.fft(np.ones(4), epilog="abs"), UstSyntaxError, "is a function"),
        (lambda: dense.fft(np.ones(4), epilog=3), InvalidTypeError, "expression text"),
        (lambda: dense.FFT(np.ones(4), "dct"), UnsupportedError, "supported: fft"),
        (lambda: dense.fft(np.ones(4), options={"threads": 2}), UnsupportedError, "workers"),
    ],
)
def test_fft_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_import_loads_no_gpu_package():
    code = "import sys, ust, ust.dense; print(any(m.split('.')[0] in ('cupy', 'torch') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------- the GPU glue against NumPy stand-ins for CuPy and cuBLASLt


class FakeDeviceArray(np.ndarray):
    """A NumPy array that CuPy code can take: ``.data.ptr`` and ``.device``, module named cupy."""

    @property
    def data(self):  # type: ignore[override]
        return types.SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    def get(self):
        return np.array(self.view(np.ndarray))


FakeDeviceArray.__module__ = "cupy._core.core"


def _fake_cupy():
    def wrap(fn):
        return lambda *a, **k: np.asarray(fn(*a, **k)).view(FakeDeviceArray)

    class Event:
        def record(self, stream=None):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    cuda = types.SimpleNamespace(
        Device=lambda i=0: contextlib.nullcontext(),
        get_current_stream=lambda: stream,
        ExternalStream=lambda ptr: stream,
        Event=Event,
        get_elapsed_time=lambda a, b: 1e3 * (b.t - a.t) + 1e-3,
        runtime=types.SimpleNamespace(
            getDeviceProperties=lambda i: {"name": b"Stand-in GPU", "major": 9, "minor": 0},
            getDevice=lambda: 0,
            runtimeGetVersion=lambda: 13000,
        ),
    )
    return types.SimpleNamespace(
        __name__="cupy",
        __version__="0.0+stand-in",
        empty=wrap(np.empty),
        zeros=wrap(np.zeros),
        broadcast_to=wrap(np.broadcast_to),
        tanh=np.tanh,
        add=np.add,
        maximum=np.maximum,
        multiply=np.multiply,
        ascontiguousarray=wrap(np.ascontiguousarray),
        asarray=wrap(np.asarray),
        cuda=cuda,
    )


class FakeCublasLt:
    """cuBLASLt's C API in Python over raw host pointers: what the binding passes is what it computes."""

    TYPES: typing.ClassVar = {0: np.float32, 1: np.float64, 2: np.float16, 4: np.complex64, 5: np.complex128}

    def __init__(self):
        self.objects = {}
        self.calls = []
        self.refuse_broadcast = False
        self.fastest: tuple[int, int, int] | None = None  # (data[0], tile, swizzle) that runs without a delay

    def _new(self, out, value):
        key = len(self.objects) + 1000
        self.objects[key] = value
        out._obj.value = key
        return 0

    def api(self):
        def set_attr(obj, attr, buf, size):
            assert ctypes.sizeof(buf._obj) == size
            self.objects[obj]["attrs"][attr] = buf._obj.value
            return 0

        def heuristic(h, desc, a, b, c, d, pref, count, results, returned):
            if self.refuse_broadcast and any(
                self.objects[x]["attrs"].get(lt._LAYOUT_BATCH_COUNT, 1) > 1
                and self.objects[x]["attrs"].get(lt._LAYOUT_BATCH_OFFSET, 0) == 0
                for x in (a, b, c)
            ):
                return 15  # CUBLAS_STATUS_NOT_SUPPORTED, as a library that takes no stride 0 would say
            for i in range(2):  # two candidates, as a heuristic returns several
                results[i].algo.data[0] = 41 + i
                results[i].workspaceSize = 64 * i
                results[i].state = 0
            returned._obj.value = 2
            return 0

        def check(h, desc, a, b, c, d, algo, result):
            data = algo._obj.data
            if data[0] == 107 and data[1] == 3 and data[4] == 1:
                return 15  # one configuration the library refuses for this problem
            result._obj.workspaceSize = 32 * (data[1] == 2)
            return 0

        def algo_ids(h, compute, scale, at, bt, ct, dt, requested, ids, returned):
            ids[0], ids[1] = 7, 9
            returned._obj.value = 2
            return 0

        def algo_init(h, compute, scale, at, bt, ct, dt, algo_id, algo):
            algo._obj.data[:] = [100 + algo_id] + [0] * 7
            return 0

        def cap_get(algo, attr, buf, size, written):
            algo_id = algo._obj.data[0] - 100
            caps = {
                2: int(algo_id == 7),  # CTA swizzling support
                7: 0,  # custom option max
                12: 0xFFFF if algo_id == 7 else 1 | 2,  # epilogue mask: id 9 has no bias epilogues
            }
            if attr in (6, 13):  # tile ids [1, 2, 3]; no stage ids
                values = [1, 2, 3] if attr == 6 else []
                written._obj.value = 4 * len(values)
                if buf is not None:
                    buf[: len(values)] = values
                return 0
            if attr not in caps:
                return 15
            buf._obj.value = caps[attr]
            return 0

        def config_set(algo, attr, buf, size):
            if 1 <= attr <= 6:
                algo._obj.data[attr] = buf._obj.value
            return 0

        def config_get(algo, attr, buf, size, written):
            data = algo._obj.data
            buf._obj.value = (
                (data[0] - 100 if data[0] >= 100 else data[0])
                if attr == 0
                else data[attr]
                if attr <= 6
                else 0
            )
            return 0

        return types.SimpleNamespace(
            create=lambda out: self._new(out, "handle"),
            destroy=lambda h: 0,
            version=lambda: 130000,
            desc_create=lambda out, compute, scale: self._new(
                out, {"compute": compute, "scale": scale, "attrs": {}}
            ),
            desc_destroy=lambda d: 0,
            desc_set=set_attr,
            layout_create=lambda out, t, r, c, ld: self._new(
                out, {"type": t, "shape": (r, c, ld), "attrs": {}}
            ),
            layout_destroy=lambda d: 0,
            layout_set=set_attr,
            pref_create=lambda out: self._new(out, {"attrs": {}}),
            pref_destroy=lambda d: 0,
            pref_set=set_attr,
            heuristic=heuristic,
            check=check,
            algo_ids=algo_ids,
            algo_init=algo_init,
            cap_get=cap_get,
            config_set=config_set,
            config_get=config_get,
            matmul=self.matmul,
        )

    def _matrix(self, ptr, layout):
        rows, cols, ld = layout["shape"]
        count = layout["attrs"].get(lt._LAYOUT_BATCH_COUNT, 1)
        stride = layout["attrs"].get(lt._LAYOUT_BATCH_OFFSET, 0)
        assert layout["attrs"].get(lt._LAYOUT_ORDER) == lt.ORDER_COL and ld >= rows
        dtype = np.dtype(self.TYPES[layout["type"]])
        extent = (count - 1) * stride + (cols - 1) * ld + rows
        flat = np.ndarray(
            (extent,), dtype, buffer=(ctypes.c_char * (extent * dtype.itemsize)).from_address(ptr)
        )
        return as_strided(
            flat, (count, rows, cols), (stride * dtype.itemsize, dtype.itemsize, ld * dtype.itemsize)
        )

    def _scalar(self, ptr, scale):
        dtype = np.dtype(self.TYPES[scale])
        return np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(ptr), dtype)[0]

    def matmul(self, h, desc, alpha, a, ad, b, bd, beta, c, cd, d, dd, algo, ws, ws_size, stream):
        op = self.objects[desc]
        attrs = op["attrs"]
        data = algo._obj.data
        self.calls.append(int(data[0]))
        if self.fastest is not None and (data[0], data[1], data[4]) != self.fastest:
            time.sleep(0.02)  # every other algorithm is slower: what autotune must see
        A, B = self._matrix(a, self.objects[ad]), self._matrix(b, self.objects[bd])
        A = A.swapaxes(-1, -2) if attrs.get(lt._DESC_TRANSA, 0) == lt.OP_T else A
        B = B.swapaxes(-1, -2) if attrs.get(lt._DESC_TRANSB, 0) == lt.OP_T else B
        wide = np.complex128 if np.iscomplexobj(A) else np.float64
        acc = self._scalar(alpha, op["scale"]) * np.matmul(A.astype(wide), B.astype(wide))
        be = self._scalar(beta, op["scale"])
        if be != 0:
            acc = acc + be * self._matrix(c, self.objects[cd])
        epilogue = attrs.get(lt._DESC_EPILOGUE, 1)
        D = self._matrix(d, self.objects[dd])
        if epilogue & 4:  # bias: one value per row of the column-major D
            m, count = D.shape[1], D.shape[0]
            bstride = attrs.get(lt._DESC_BIAS_BATCH_STRIDE, 0)
            extent = (count - 1) * bstride + m
            vec = np.frombuffer(
                (ctypes.c_char * (extent * D.itemsize)).from_address(attrs[lt._DESC_BIAS_POINTER]), D.dtype
            )
            rows = np.arange(m)[None, :] + bstride * np.arange(count)[:, None]
            acc = acc + vec[rows][:, :, None]
        if epilogue & 2:
            acc = np.maximum(acc, 0)
        if epilogue & 32:
            acc = gelu(acc)
        D[...] = acc
        return 0


@pytest.fixture
def stand_in_gpu(monkeypatch):
    """Route dense.* through the real GPU code path, with NumPy stand-ins for CuPy and cuBLASLt."""
    fake_cp, fake_lt = _fake_cupy(), FakeCublasLt()
    api = fake_lt.api()
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    monkeypatch.setattr(lt, "_api", lambda: api)
    monkeypatch.setattr(lt, "_handles", {})
    monkeypatch.setattr(lt, "_heuristic_cache", {})
    return fake_lt


def dev(x, order="C"):
    return in_order(np.asarray(x), order).view(FakeDeviceArray)


@pytest.mark.parametrize("epilog", dense.EPILOGS)
@pytest.mark.parametrize("layout", ["CC", "FC", "CF", "FF"])
@pytest.mark.parametrize("bias_shape", [(6,), (2, 5, 1)])
def test_gpu_route_with_stand_ins(stand_in_gpu, epilog, layout, bias_shape):
    a, b, c = rand((2, 5, 4), "float32"), rand((2, 4, 6), "float32"), rand((2, 5, 6), "float32")
    bias = rand(bias_shape, "float32") if "bias" in epilog else None
    inputs = None if bias is None else {"bias": dev(bias)}
    d = dense.matmul(
        dev(a, layout[0]), dev(b, layout[1]), dev(c), alpha=1.5, beta=0.5, epilog=epilog, epilog_inputs=inputs
    )
    assert isinstance(d, FakeDeviceArray)
    close(np.asarray(d), reference(a, b, c, 1.5, 0.5, epilog, bias), "float32")


@pytest.mark.parametrize("dtype", ["float16", "float64", "complex64", "complex128"])
def test_gpu_route_dtypes_and_vectors_with_stand_ins(stand_in_gpu, dtype):
    a, b = rand((7, 3), dtype), rand((3, 2), dtype)
    close(np.asarray(dense.matmul(dev(a), dev(b), alpha=2)), reference(a, b, alpha=2), dtype)
    v = rand((3,), dtype)
    close(np.asarray(dense.matmul(dev(a), dev(v))), reference(a, v), dtype)
    close(np.asarray(dense.matmul(dev(v), dev(b))), reference(v, b), dtype)


def test_gpu_stateful_with_stand_ins(stand_in_gpu, tmp_path, caplog):
    a, b, c = rand((3, 6, 4), "float64"), rand((4, 5), "float64"), rand((6, 5), "float64")
    bias = rand((5,), "float64")
    mm = dense.Matmul(dev(a), dev(b), dev(c), alpha=2, beta=1)
    mm.plan(epilog="relu_bias", epilog_inputs={"bias": dev(bias)})
    assert mm.route == "cublasLt"
    times = mm.autotune(iterations=2)
    assert len(times) == 2
    close(np.asarray(mm.execute()), reference(a, b, c, 2, 1, "relu_bias", bias), "float64")
    a2, bias2 = rand(a.shape, "float64"), rand((5,), "float64")
    mm.reset_operands(a=dev(a2), beta=0.25, epilog_inputs={"bias": dev(bias2)})
    close(np.asarray(mm.execute()), reference(a2, b, c, 2, 0.25, "relu_bias", bias2), "float64")
    with caplog.at_level(
        logging.INFO, logger="ust"
    ):  # a strided new operand is copied into the planned layout
        strided = dev(rand((3, 12, 4), "float64"))[:, ::2]
        mm.reset_operands(a=strided)
    assert any("copying it" in r.getMessage() for r in caplog.records)
    close(
        np.asarray(mm.execute()), reference(np.asarray(strided), b, c, 2, 0.25, "relu_bias", bias2), "float64"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ust"):  # column-major where the plan has row-major: copied
        mm.reset_operands(a=dev(a2, "F"))
    assert any("the plan has" in r.getMessage() for r in caplog.records)
    close(np.asarray(mm.execute()), reference(a2, b, c, 2, 0.25, "relu_bias", bias2), "float64")
    mm.reset_operands(a=strided)
    mm.reset_operands_unchecked(b=dev(2 * b))
    close(
        np.asarray(mm.execute()),
        reference(np.asarray(strided), 2 * b, c, 2, 0.25, "relu_bias", bias2),
        "float64",
    )
    path = tmp_path / "mm.json"
    mm.save_plan(path)
    saved = json.loads(path.read_text())
    assert saved["device"] == "cuda:0 Stand-in GPU sm_90" and saved["plan"]["route"] == "cublasLt"
    mm.free()
    stand_in_gpu.calls.clear()
    with dense.Matmul(dev(a), dev(b), dev(c), alpha=2, beta=1) as mm2:
        assert mm2.load_plan(path, epilog_inputs={"bias": dev(bias)}) is True
        close(np.asarray(mm2.execute()), reference(a, b, c, 2, 1, "relu_bias", bias), "float64")
    saved_algo = int(decode_array(saved["plan"]["algorithm"])[0])
    assert saved_algo == 41 + int(np.argmin(times))  # autotune's choice survives resets
    assert stand_in_gpu.calls == [saved_algo]  # the saved algorithm ran, no search


@pytest.mark.parametrize(("epilog", "configs"), [("relu_bias", 5), ("relu", 8)])
def test_exhaustive_autotune_with_stand_ins(stand_in_gpu, tmp_path, epilog, configs):
    """Every accepted configuration is a candidate; the fastest one runs and is what a plan saves."""
    a, b = rand((2, 6, 4), "float32"), rand((2, 4, 5), "float32")
    bias = rand((5,), "float32") if "bias" in epilog else None
    inputs = None if bias is None else {"bias": dev(bias)}
    stand_in_gpu.fastest = (107, 2, 1)  # algorithm 7, tile 2, CTA swizzling on
    mm = dense.Matmul(dev(a), dev(b))
    mm.plan(epilog=epilog, epilog_inputs=inputs)
    times = mm.autotune(iterations=2, search="exhaustive")
    # 2 heuristic candidates + algorithm 7's tiles x swizzling less the refused one (+ algorithm 9's
    # three tiles when the epilogue has no bias, which algorithm 9 lacks)
    assert len(times) == 2 + configs
    lt_run = mm._runner.lt
    best = int(np.argmin(times))
    assert tuple(lt_run.candidates[best][0].data)[:5] == (107, 2, 0, 0, 1)
    assert lt_run.workspace_size == 32  # the chosen configuration's own workspace
    assert sum(np.isfinite(times)) == len(times)  # screened ones keep their screening time
    stand_in_gpu.calls.clear()
    close(np.asarray(mm.execute()), reference(a, b, epilog=epilog, bias=bias), "float32")
    assert stand_in_gpu.calls == [107]
    path = tmp_path / "mm.json"
    mm.save_plan(path)
    mm.free()
    stand_in_gpu.calls.clear()
    with dense.Matmul(dev(a), dev(b)) as again:
        assert again.load_plan(path, epilog_inputs=inputs) is True
        close(np.asarray(again.execute()), reference(a, b, epilog=epilog, bias=bias), "float32")
        assert tuple(again._runner.lt.algorithm_data())[:5] == (107, 2, 0, 0, 1)
    assert stand_in_gpu.calls == [107]  # no search: the saved configuration ran


def test_autotune_search_is_checked_before_any_work(stand_in_gpu):
    a, b = rand((6, 4), "float32"), rand((4, 5), "float32")
    mm = dense.Matmul(dev(a), dev(b))
    mm.plan()
    stand_in_gpu.calls.clear()
    with pytest.raises(UnsupportedError, match="search must be one of heuristic, exhaustive"):
        mm.autotune(search="everything")
    assert stand_in_gpu.calls == []
    cpu = dense.Matmul(a, b)
    cpu.plan()
    assert cpu.autotune(iterations=1, search="exhaustive") is None  # one CPU route: nothing to search
    with pytest.raises(UnsupportedError, match="search must be"):
        cpu.autotune(search="")


@pytest.mark.parametrize(("m", "k", "n"), [(3, 0, 2), (0, 4, 2), (3, 4, 0)])
def test_gpu_empty_dimensions_with_stand_ins(stand_in_gpu, m, k, n):
    a, b, c, bias = (
        rand((m, k), "float32"),
        rand((k, n), "float32"),
        rand((m, n), "float32"),
        rand((n,), "float32"),
    )
    with dense.Matmul(dev(a), dev(b), dev(c), beta=2) as mm:
        mm.plan(epilog="gelu_bias", epilog_inputs={"bias": dev(bias)})
        assert mm.route == "empty"
        close(np.asarray(mm.execute()), reference(a, b, c, 1, 2, "gelu_bias", bias), "float32")


@pytest.mark.parametrize("refuse", [False, True])
def test_gpu_broadcast_batches_with_stand_ins(stand_in_gpu, refuse, caplog):
    stand_in_gpu.refuse_broadcast = refuse
    a, b, c = rand((3, 5, 4), "float32"), rand((4, 2), "float32"), rand((5, 2), "float32")
    with caplog.at_level(logging.INFO, logger="ust"), dense.Matmul(dev(a), dev(b), dev(c), beta=1) as mm:
        mm.plan()
        close(np.asarray(mm.execute()), reference(a, b, c, 1, 1), "float32")
        b2 = rand((4, 2), "float32")
        mm.reset_operands(b=dev(b2))
        close(np.asarray(mm.execute()), reference(a, b2, c, 1, 1), "float32")
    assert any("materialising" in r.getMessage() for r in caplog.records) == refuse


def test_gpu_reset_to_a_layout_the_plan_cannot_take(stand_in_gpu):
    padded = dev(rand((6, 7), "float32"))[:, :4]  # planned with ld 7
    with dense.Matmul(padded, dev(rand((4, 3), "float32"))) as mm:
        mm.plan()
        with pytest.raises(ShapeError, match="plan was made for"):
            mm.reset_operands(a=dev(rand((6, 4), "float32")))


def test_gpu_execution_override_with_stand_ins(stand_in_gpu):
    a, b = rand((4, 3), "float32"), rand((3, 2), "float32")
    d = dense.matmul(a, b, execution="cuda")  # NumPy operands run on the (stand-in) GPU, come back NumPy
    assert type(d) is np.ndarray
    close(d, reference(a, b), "float32")


class FakePlan1d:
    """cupy.cuda.cufft.Plan1d over NumPy: unnormalised transforms along the last axis, as cuFFT's."""

    def __init__(self, n, fft_type, batch):
        self.n, self.fft_type, self.batch = n, fft_type, batch

    def fft(self, a, out, direction):
        assert a.shape[-1] == self.n and a.size // self.n == self.batch
        x = np.asarray(a)
        if self.fft_type in ("R2C", "D2Z"):
            y = np.fft.rfft(x)
        else:
            y = np.fft.fft(x) if direction == -1 else np.fft.ifft(x) * self.n
        out[...] = y


@pytest.fixture
def stand_in_cufft(stand_in_gpu, monkeypatch):
    fake = sys.modules["cupy"]
    cufft = types.SimpleNamespace(
        CUFFT_C2C="C2C", CUFFT_Z2Z="Z2Z", CUFFT_R2C="R2C", CUFFT_D2Z="D2Z",
        CUFFT_FORWARD=-1, CUFFT_INVERSE=1, Plan1d=FakePlan1d, getVersion=lambda: 12000,
    )  # fmt: skip
    fake.cuda.cufft = cufft
    fake.result_type = np.result_type
    fake.complex64 = np.complex64
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.cufft", cufft)
    return cufft


@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft"])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_gpu_stateful_fft_direct_plan_with_stand_ins(stand_in_cufft, tmp_path, kind, norm, dtype):
    if kind == "rfft" and dtype.startswith("complex"):
        pytest.skip("rfft takes real input")
    x = rand((3, 32), dtype if kind == "rfft" else ("complex64" if dtype == "float32" else dtype))
    with dense.FFT(dev(x), kind, norm=norm) as f:
        f.plan(epilog=np.multiply, epilog_args=(2.0,))
        assert f.route == "cufft" and f._runner.direct is not None
        want = 2 * getattr(sfft, kind)(x, norm=norm)
        got = np.asarray(f.execute())
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        f.save_plan(tmp_path / "f.json")
    with dense.FFT(dev(x), kind, norm=norm) as g:
        assert g.load_plan(tmp_path / "f.json") is True
