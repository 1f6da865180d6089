"""ust.dense on the GPU: cuBLASLt matmul with epilogues, autotune and saved plans; cuFFT transforms.

Every result is compared with NumPy / scipy.fft on the host.  Run on the GPU machine:
``python -m pytest -q -p no:cacheprovider tests/gpu/test_dense_gpu.py``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.fft as sfft

from ust import dense
from ust.runtime.errors import InvalidStateError, ShapeError, UnsupportedError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

RNG = np.random.default_rng(11)
TOL = {"float16": 2e-2, "float32": 2e-5, "float64": 1e-12, "complex64": 2e-5, "complex128": 1e-12}


def rand(shape, dtype, order="C"):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return np.array(x, dtype=dtype, order=order)


def to_gpu(x, order="C"):
    """x on the GPU with its matrices row- ("C") or column-major ("F"), batches contiguous."""
    g = cp.asarray(np.ascontiguousarray(x))
    if order == "F" and g.ndim >= 2:
        g = cp.ascontiguousarray(g.swapaxes(-1, -2)).swapaxes(-1, -2)
    return g


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


def close(got, want, dtype, tol=None):
    tol = tol or TOL[dtype]
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else got
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got.astype(want.dtype), want, rtol=tol, atol=tol * scale)


def gpu_matmul(*args, **kwargs):
    """dense.matmul, skipping (with the library's reason) a combination cuBLASLt reports unsupported."""
    try:
        return dense.matmul(*args, **kwargs)
    except UnsupportedError as exc:
        if "cuBLASLt" in str(exc) or "NOT_SUPPORTED" in str(exc):
            pytest.skip(f"cuBLASLt on this GPU: {exc}")
        raise


# ------------------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("epilog", dense.EPILOGS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["CC", "CF", "FC", "FF"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_matmul_epilogs_dtypes_layouts(epilog, dtype, layout, batch):
    M, K, N = 33, 17, 24
    a, b = rand((*batch, M, K), dtype), rand((*batch, K, N), dtype)
    c = rand((*batch, M, N), dtype)
    bias = rand((N,), dtype) if "bias" in epilog else None
    ga, gb, gc = to_gpu(a, layout[0]), to_gpu(b, layout[1]), to_gpu(c)
    assert ga.flags.c_contiguous == (layout[0] == "C")
    copies = [x.copy() for x in (ga, gb, gc)]
    inputs = None if bias is None else {"bias": cp.asarray(bias)}
    d = gpu_matmul(ga, gb, gc, alpha=1.5, beta=0.5, epilog=epilog, epilog_inputs=inputs)
    assert isinstance(d, cp.ndarray)
    # cuBLASLt's GELU epilogue is a tanh approximation good to ~1e-8 relative even in float64
    gelu_tol = max(TOL[dtype], 1e-7) if epilog and epilog.startswith("gelu") else None
    close(d, reference(a, b, c, 1.5, 0.5, epilog, bias), dtype, tol=gelu_tol)
    for x, x0 in zip((ga, gb, gc), copies):
        assert bool((x == x0).all())


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_matmul_complex(dtype, batch):
    a, b, c = rand((*batch, 9, 5), dtype), rand((*batch, 5, 7), dtype), rand((*batch, 9, 7), dtype)
    d = gpu_matmul(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha=0.5 - 1j, beta=2j)
    close(d, reference(a, b, c, 0.5 - 1j, 2j), dtype)


def test_tf32_option():
    a, b = rand((64, 128), "float32"), rand((128, 32), "float32")
    d = dense.matmul(cp.asarray(a), cp.asarray(b), options={"tf32": True})
    close(d, reference(a, b), "float32", tol=5e-3)


@pytest.mark.parametrize("bias_shape", [(12,), (1, 12), (10, 1), (4, 1, 12), (4, 10, 1)])
def test_bias_shapes(bias_shape):
    a, b, bias = rand((4, 10, 6), "float32"), rand((4, 6, 12), "float32"), rand(bias_shape, "float32")
    d = dense.matmul(
        cp.asarray(a), cp.asarray(b), epilog="relu_bias", epilog_inputs={"bias": cp.asarray(bias)}
    )
    close(d, reference(a, b, epilog="relu_bias", bias=bias), "float32")


def test_broadcast_operands_and_vectors():
    a, b, c = rand((5, 8, 4), "float32"), rand((4, 3), "float32"), rand((8, 3), "float32")
    close(
        dense.matmul(cp.asarray(a), cp.asarray(b), cp.asarray(c), beta=1), reference(a, b, c, 1, 1), "float32"
    )
    v = rand((4,), "float32")
    close(dense.matmul(cp.asarray(a), cp.asarray(v)), reference(a, v), "float32")
    close(dense.matmul(cp.asarray(v), cp.asarray(b)), reference(v, b), "float32")


def test_non_contiguous_operands_are_copied_with_a_log_line(caplog):
    big = rand((40, 24), "float32")
    a = cp.asarray(big)[::2, ::3]
    b = cp.asarray(rand((8, 5), "float32"))
    with caplog.at_level(logging.INFO, logger="ust"):
        d = dense.matmul(a, b)
    close(d, reference(cp.asnumpy(a), cp.asnumpy(b)), "float32")
    assert any("copying it" in r.getMessage() for r in caplog.records)
    padded = cp.asarray(rand((16, 12), "float32"))[:, :8]  # a row stride cuBLASLt takes as ld: no copy
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ust"):
        d = dense.matmul(padded, b)
    close(d, reference(cp.asnumpy(padded), cp.asnumpy(b)), "float32")
    assert not any("copying it" in r.getMessage() for r in caplog.records)


def test_execution_spaces_move_and_return_in_the_operands_package():
    a, b = rand((6, 4), "float64"), rand((4, 5), "float64")
    d = dense.matmul(a, b, execution="cuda")
    assert isinstance(d, np.ndarray)
    close(d, reference(a, b), "float64")
    d = dense.matmul(cp.asarray(a), cp.asarray(b), execution="cpu")
    assert isinstance(d, cp.ndarray)
    close(d, reference(a, b), "float64")
    with dense.Matmul(a, b, execution="cuda") as mm:
        mm.plan()
        assert mm.route == "cublasLt"


def test_stateful_autotune_reset_free():
    a, b, c = rand((2, 256, 64), "float32"), rand((2, 64, 128), "float32"), rand((2, 256, 128), "float32")
    bias = rand((128,), "float32")
    ga, gb, gc, gbias = (cp.asarray(x) for x in (a, b, c, bias))
    mm = dense.Matmul(ga, gb, gc, alpha=2, beta=0.5)
    mm.plan(epilog="gelu_bias", epilog_inputs={"bias": gbias})
    times = mm.autotune(iterations=3)
    assert times and all(t > 0 for t in times)
    close(mm.execute(), reference(a, b, c, 2, 0.5, "gelu_bias", bias), "float32")
    a2, bias2 = rand(a.shape, "float32"), rand((128,), "float32")
    mm.reset_operands(a=cp.asarray(a2), alpha=-1, epilog_inputs={"bias": cp.asarray(bias2)})
    close(mm.execute(), reference(a2, b, c, -1, 0.5, "gelu_bias", bias2), "float32")
    b3 = rand(b.shape, "float32")
    mm.reset_operands_unchecked(b=cp.asarray(b3))
    close(mm.execute(), reference(a2, b3, c, -1, 0.5, "gelu_bias", bias2), "float32")
    with pytest.raises(ShapeError):
        mm.reset_operands(a=cp.asarray(rand((2, 255, 64), "float32")))
    stream = cp.cuda.Stream()
    with stream:
        d = mm.execute(stream=stream)
    stream.synchronize()
    close(d, reference(a2, b3, c, -1, 0.5, "gelu_bias", bias2), "float32")
    mm.free()
    with pytest.raises(InvalidStateError):
        mm.execute()


def test_exhaustive_autotune_runs_every_accepted_configuration(tmp_path):
    from ust.backends.cuda import cublaslt as cublaslt_sweep

    a, b, bias = rand((4, 512, 256), "float32"), rand((4, 256, 384), "float32"), rand((384,), "float32")
    ga, gb, gbias = (cp.asarray(x) for x in (a, b, bias))
    with dense.Matmul(ga, gb) as mm:
        mm.plan(epilog="relu_bias", epilog_inputs={"bias": gbias})
        heuristic = len(mm._runner.lt.candidates)
        lt_run = mm._runner.lt
        configs = list(cublaslt_sweep.configurations(lt_run, workspace_limit=mm._runner.workspace_limit))
        assert configs, "cuBLASLt accepts no configuration of a plain float32 matmul"
        ids = set(cublaslt_sweep.algorithm_ids(lt_run))
        for algo, ws in configs:
            assert cublaslt_sweep.configuration(lt_run, algo)["id"] in ids
            assert lt_run.check(algo) == ws
        times = mm.autotune(iterations=2, search="exhaustive")
        assert len(times) > heuristic and np.isfinite(min(times))
        close(mm.execute(), reference(a, b, epilog="relu_bias", bias=bias), "float32")
        path = tmp_path / "mm.json"
        mm.save_plan(path)
        chosen = [int(v) for v in lt_run.algorithm_data()]
    with dense.Matmul(ga, gb) as again:
        assert again.load_plan(path, epilog_inputs={"bias": gbias}) is True
        assert [int(v) for v in again._runner.lt.algorithm_data()] == chosen
        close(again.execute(), reference(a, b, epilog="relu_bias", bias=bias), "float32")


_CHILD = textwrap.dedent(
    """
    import json, sys
    import cupy as cp, numpy as np
    from ust import dense
    rng = np.random.default_rng(5)
    a, b, bias = (cp.asarray(rng.standard_normal(s).astype(np.float32)) for s in ((8, 512, 256), (8, 256, 384), (384,)))
    mm = dense.Matmul(a, b)
    used = mm.load_plan(sys.argv[1], epilog_inputs={"bias": bias})
    d = cp.asnumpy(mm.execute())
    ref = np.maximum(cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b) + cp.asnumpy(bias), 0)
    algo = [int(v) for v in mm._runner.lt.algorithm_data()]
    print(json.dumps({"used": used, "route": mm.route, "err": float(np.abs(d - ref).max()), "algo": algo}))
    """
)


def test_autotuned_plan_saved_and_loaded_in_another_process(tmp_path):
    rng = np.random.default_rng(5)
    a, b, bias = (
        cp.asarray(rng.standard_normal(s).astype(np.float32)) for s in ((8, 512, 256), (8, 256, 384), (384,))
    )
    path = tmp_path / "mm.json"
    with dense.Matmul(a, b) as mm:
        mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias})
        mm.autotune(iterations=3)
        mm.save_plan(path)
        saved_algo = [int(v) for v in mm._runner.lt.algorithm_data()]
    doc = json.loads(path.read_text())
    assert doc["device"].startswith("cuda:0") and "cublasLt" in doc["versions"]
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["used"] is True and child["route"] == "cublasLt"
    assert child["algo"] == saved_algo  # the search was skipped: the saved algorithm runs
    assert child["err"] < 1e-2


# ------------------------------------------------------------------------------------------ FFT

FFT_CASES = [
    ("fft", {}),
    ("fft", {"n": 50}),
    ("fft", {"axis": 0}),
    ("ifft", {}),
    ("rfft", {}),
    ("rfft", {"n": 33, "axis": 0}),
    ("irfft", {}),
    ("irfft", {"n": 61}),
    ("fftn", {}),
    ("ifftn", {"axes": (0,)}),
    ("fftn", {"s": (10, 40), "axes": (0, 1)}),
]


@pytest.mark.parametrize(("kind", "kwargs"), FFT_CASES)
@pytest.mark.parametrize("dtype", dense.FFT_DTYPES)
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_fft_family_and_stateful_match_scipy(kind, kwargs, dtype, norm):
    if kind == "rfft" and dtype.startswith("complex"):
        pytest.skip("rfft takes real input")
    x = rand((12, 64), dtype)
    gx = cp.asarray(x)
    g0 = gx.copy()
    want = getattr(sfft, kind)(x, norm=norm, **kwargs)
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    got = getattr(dense, kind)(gx, norm=norm, **kwargs)
    np.testing.assert_allclose(
        cp.asnumpy(got), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max()))
    )
    n_kw = {"n": kwargs.get("n", kwargs.get("s")), "axes": kwargs.get("axis", kwargs.get("axes"))}
    with dense.FFT(gx, kind, norm=norm, **n_kw) as f:
        f.plan()
        for _ in range(2):
            got = f.execute()
            np.testing.assert_allclose(
                cp.asnumpy(got), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max()))
            )
    assert bool((gx == g0).all())


def test_stateful_fft_calls_cufft_directly_and_resets():
    x = rand((4, 1024), "complex128")
    with dense.FFT(cp.asarray(x), "fft") as f:
        f.plan()
        assert f.route == "cufft" and f._runner.direct is not None
        np.testing.assert_allclose(cp.asnumpy(f.execute()), sfft.fft(x), atol=1e-9)
        x2 = rand((4, 1024), "complex128")
        f.reset_operands(x=cp.asarray(x2))
        np.testing.assert_allclose(cp.asnumpy(f.execute()), sfft.fft(x2), atol=1e-9)
        with pytest.raises(ShapeError):
            f.reset_operands(x=cp.asarray(rand((4, 1023), "complex128")))


def test_fft_epilogues_on_the_gpu():
    x = rand((4, 256), "float64")
    gauss = np.exp(-((sfft.rfftfreq(256) / 0.05) ** 2))
    got = dense.rfft(cp.asarray(x), epilog=np.multiply, epilog_args=(cp.asarray(gauss),))
    np.testing.assert_allclose(cp.asnumpy(got), sfft.rfft(x) * gauss, atol=1e-9)

    def damp(s, g):
        return s * g + 1.0

    got = dense.rfft(cp.asarray(x), epilog=damp, epilog_args=(cp.asarray(gauss),))  # fused by cupy.fuse
    np.testing.assert_allclose(cp.asnumpy(got), sfft.rfft(x) * gauss + 1.0, atol=1e-9)
    with dense.FFT(cp.asarray(x), "rfft") as f:
        f.plan(epilog=damp, epilog_args=(cp.asarray(gauss),))
        np.testing.assert_allclose(cp.asnumpy(f.execute()), sfft.rfft(x) * gauss + 1.0, atol=1e-9)


def test_fft_execution_spaces():
    x = rand((8, 128), "complex64")
    got = dense.fft(x, execution="cuda")
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, sfft.fft(x), rtol=1e-4, atol=1e-3)
    got = dense.fft(cp.asarray(x), execution="cpu")
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(got), sfft.fft(x), rtol=1e-4, atol=1e-3)


def test_fft_plan_saved_and_loaded(tmp_path):
    x = cp.asarray(rand((4, 512), "complex64"))
    path = tmp_path / "fft.json"
    with dense.FFT(x, "ifft") as f:
        f.plan()
        f.save_plan(path)
    with dense.FFT(x, "ifft") as g:
        assert g.load_plan(path) is True
        np.testing.assert_allclose(cp.asnumpy(g.execute()), sfft.ifft(cp.asnumpy(x)), atol=1e-5)
