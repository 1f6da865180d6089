"""FFT prologues / epilogues on the GPU: fused into cuFFT as LTO callbacks, and the separate-kernel route.

Each result is compared with NumPy's FFT plus the same function in NumPy on the host (fp64 rtol
1e-12, fp32 1e-5).  Run on the GPU machine:
``python -m pytest -q -p no:cacheprovider tests/gpu/test_fft_callbacks_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import ust
from ust import dense
from ust.runtime.errors import BackendUnavailableError, ShapeError, UnsupportedError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

if not hasattr(np, "row_stack"):
    # NumPy 2.3 removed this alias of vstack; the numba-cuda on the GPU machine still calls it.
    # Restoring the alias (same function) lets the numba-compiled (fused) callbacks be tested there.
    np.row_stack = np.vstack

RNG = np.random.default_rng(2121)
RTOL = {"float64": 1e-12, "complex128": 1e-12, "float32": 1e-5, "complex64": 1e-5}


def _lto() -> tuple[bool, str]:
    from ust.backends.cuda.cufft_callbacks import lto_support

    return lto_support()


def rand(shape, dtype):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def close(got, want, dtype):
    got = cp.asnumpy(got)
    tol = RTOL[str(np.dtype(dtype))]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def signed(n):
    return np.fft.fftfreq(n) * n


MODES = ["auto", "separate"]


def _reason(f) -> str:
    """Why the planned FFT's callbacks are fused or not (the runner's reason, where it has one)."""
    return str(getattr(getattr(f, "_runner", None), "reason", ""))


def _expect_route(f, mode):
    if mode == "separate":
        assert f.route == "cufft+kernel"
    elif _lto()[0]:
        assert f.route == "cufft.callbacks", f"{_lto()[1]}; {_reason(f)}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_c2c_gaussian_epilog(mode, dtype, norm):
    x = rand((8, 256), dtype)
    gx = cp.asarray(x)
    g0 = gx.copy()
    with dense.FFT(gx, "fft", norm=norm, options={"callbacks": mode}) as f:
        f.plan(epilog="v * exp(-(f * f) / (2 * sigma * sigma))", params={"sigma": 9.0})
        _expect_route(f, mode)
        fr = signed(256)
        want = np.fft.fft(x.astype(np.complex128), norm=norm) * np.exp(-(fr * fr) / (2 * 81.0))
        close(f.execute(), want, dtype)
        f.plan(
            epilog="v * exp(-(f * f) / (2 * sigma * sigma))", params={"sigma": 4.0}
        )  # same plan, new value
        close(f.execute(), np.fft.fft(x.astype(np.complex128), norm=norm) * np.exp(-(fr * fr) / 32.0), dtype)
    assert bool((gx == g0).all())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_c2c_prolog_and_epilog_with_arrays_and_padding(mode, dtype):
    x = rand((3, 40), dtype)
    h, g = rand((48,), "float64"), rand((48,), "complex128")
    got = dense.ifft(
        cp.asarray(x),
        n=48,
        prolog="v * h[k] + k / n",
        epilog="conj(v) * g[k] - N",
        params={"h": cp.asarray(h), "g": cp.asarray(g)},
        options={"callbacks": mode},
    )
    xin = np.zeros((3, 48), np.complex128)
    xin[:, :40] = x
    want = np.conj(np.fft.ifft(xin * h + np.arange(48) / 48)) * g - 48
    close(got, want, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_r2c_and_c2r_callbacks(mode, dtype):
    x = rand((4, 32), dtype)
    w = rand((17,), "float64")
    opts = {"callbacks": mode}
    got = dense.rfft(
        cp.asarray(x), prolog="v * (1 + k / n)", epilog="v * w[k] + f", params={"w": w}, options=opts
    )
    want = np.fft.rfft(x.astype(np.float64) * (1 + np.arange(32) / 32)) * w + np.arange(17)
    close(got, want, dtype)
    spec = np.fft.rfft(x.astype(np.float64)).astype("complex64" if dtype == "float32" else "complex128")
    gs = cp.asarray(spec)
    g0 = gs.copy()
    with dense.FFT(gs, "irfft", n=32, options=opts) as f:
        f.plan(prolog="v * w[k]", epilog="max(v, 0) + 1", params={"w": w})
        _expect_route(f, mode)
        y = np.fft.irfft(spec.astype(np.complex128) * w, n=32)
        close(f.execute(), np.maximum(y, 0) + 1, dtype)
    assert bool((gs == g0).all()), "the caller's spectrum was overwritten"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("axes", [(1, 2), (2, 1), (0, 1, 2), (0, 2)])
def test_nd_callbacks(mode, dtype, axes):
    x = rand((4, 6, 10), dtype)
    ext = [x.shape[a] for a in axes]
    h = rand(tuple(ext[:2]), "complex128")
    with dense.FFT(cp.asarray(x), "fftn", axes=axes, norm="ortho", options={"callbacks": mode}) as f:
        f.plan(prolog="v * (1 + k0)", epilog="v * h[k0, k1] + f0", params={"h": cp.asarray(h)})
        if axes != (0, 2):
            _expect_route(f, mode)
        else:
            assert f.route == "cufft+kernel"  # not the trailing axes: never fused
        k0 = np.arange(ext[0]).reshape([-1 if a == axes[0] else 1 for a in range(3)])
        y = np.fft.fftn(x.astype(np.complex128) * (1 + k0), axes=axes, norm="ortho")
        hb = h.transpose(np.argsort(axes[:2])).reshape([x.shape[a] if a in axes[:2] else 1 for a in range(3)])
        f0 = signed(ext[0]).reshape([-1 if a == axes[0] else 1 for a in range(3)])
        close(f.execute(), y * hb + f0, dtype)


def test_gaussian_filter_on_an_image_fused_both_ways():
    img = rand((256, 384), "complex64")
    s = 6.0
    gi = cp.asarray(img)
    text = "v * exp(-(f0 * f0 + f1 * f1) / (2 * s * s))"
    a = dense.ifftn(dense.fftn(gi, epilog=text, params={"s": s}))
    b = dense.ifftn(dense.fftn(gi), prolog=text, params={"s": s})
    f0, f1 = signed(256)[:, None], signed(384)[None, :]
    want = np.fft.ifftn(np.fft.fftn(img.astype(np.complex128)) * np.exp(-(f0**2 + f1**2) / (2 * s * s)))
    close(a, want, "complex64")
    close(b, want, "complex64")


def test_explain_says_fused_on_this_gpu():
    x = cp.asarray(rand((8, 64), "complex64"))
    text = ust.explain("fft", x, epilog="v * 2")
    ok, how = _lto()
    if ok:
        assert "route: cufft.callbacks" in text and "fused:" in text
    else:
        assert "not fused" in text and how in text


# ------------------------------------------------------------------------ Python functions (numba)


def test_python_callbacks_fused_with_numba_or_run_on_the_array():
    x = rand((4, 128), "complex64")
    filt = rand((4 * 128,), "complex64")

    def epilog(data_out, offset, element, info, unused):
        data_out[offset] = element * info[offset]

    def prolog(data_in, offset, info, unused):
        return data_in[offset] * 2

    got = dense.fft(cp.asarray(x), prolog=prolog, epilog=epilog, params=cp.asarray(filt))
    want = np.fft.fft(x.astype(np.complex128) * 2) * filt.reshape(4, 128)
    close(got, want, "complex64")
    with dense.FFT(cp.asarray(x), "fft") as f:
        f.plan(epilog=epilog, params=cp.asarray(filt))
        has_numba = _has_numba()
        if has_numba and _lto()[0] and "numba" not in _reason(f):
            assert f.route == "cufft.callbacks"
        else:
            assert f.route == "cufft+kernel"
        close(f.execute(), np.fft.fft(x.astype(np.complex128)) * filt.reshape(4, 128), "complex64")


def _has_numba():
    try:
        import numba.cuda  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_function_numba_cannot_compile_fails_before_the_transform():
    if not (_has_numba() and _lto()[0]):
        pytest.skip("needs numba-cuda and LTO callbacks")

    def epilog(data_out, offset, element, info, unused):
        data_out[offset] = {"a": element}["a"] + "text"

    x = cp.asarray(rand((4, 64), "complex64"))
    with pytest.raises(UnsupportedError, match="numba-cuda cannot compile the epilog 'epilog'"):
        dense.fft(x, epilog=epilog, options={"callbacks": "fused"})


def test_forced_fusion_of_non_trailing_axes_is_an_error():
    x = cp.asarray(rand((8, 64), "complex64"))
    with pytest.raises(BackendUnavailableError, match="trailing axes"):
        dense.fft(x, axis=0, epilog="v * 2", options={"callbacks": "fused"})


def test_bad_array_parameter_fails_before_the_transform():
    x = cp.asarray(rand((8, 64), "complex64"))
    with pytest.raises(ShapeError, match="extent 63"):
        dense.fft(x, epilog="v * h[k]", params={"h": cp.ones(63)})


def test_compile_and_cached_load_of_a_callback(tmp_path, monkeypatch):
    if not _lto()[0]:
        pytest.skip(_lto()[1])
    from ust.api.fft_callbacks import build_callbacks, geometry
    from ust.backends.cuda import cufft_callbacks as cbk

    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path))
    x = cp.asarray(rand((4, 64), "complex64"))
    n, axes = dense._fft_args("fft", x, None, None, None)
    geo = geometry("fft", (4, 64), "complex64", n, axes, dense._FFT_ND)
    cb = build_callbacks(geo, None, f"v * {RNG.random()}", None, ()).epilog
    arch = str(cp.cuda.Device().compute_capability)
    _, how1, _ = cbk.text_ltoir(cb, "complex64", "ust_fft_epilog", arch)
    _, how2, _ = cbk.text_ltoir(cb, "complex64", "ust_fft_epilog", arch)
    assert (how1, how2) == ("compiled", "cache")


# ------------------------------------------------------------------------------ route by measurement


@pytest.mark.parametrize("kind", ["fft", "ifft"])
def test_autotune_keeps_the_faster_route_and_the_same_result(kind, tmp_path):
    x = rand((16, 512), "complex64")
    text, params = "v * exp(-(f * f) * c)", {"c": 1e-3}
    want = getattr(np.fft, kind)(x.astype(np.complex128) * np.exp(-(signed(512) ** 2) * 1e-3))
    with dense.FFT(cp.asarray(x), kind) as f:
        f.plan(prolog=text, params=params)
        fused_before = f.route == "cufft.callbacks"
        timings = f.autotune(iterations=3)
        if fused_before:
            assert set(timings) == {"cufft.callbacks", "cufft+kernel"}
            assert all(t > 0 for t in timings.values())
            assert f.route == min(timings, key=timings.get)
        else:
            assert timings == {}
        close(f.execute(), want, "complex64")
        path = tmp_path / "plan.json"
        f.save_plan(path)
        chosen = f.route
    with dense.FFT(cp.asarray(x), kind) as g:
        assert g.load_plan(path, prolog=text, params=params)
        assert g.route == chosen  # the saved choice, not the default
        close(g.execute(), want, "complex64")


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("kind", ["fft", "ifft"])
def test_separate_passes_carry_the_norms_factor(kind, norm):
    """Without fusion cuFFT runs unscaled and the pass applies the norm: prologue-only, epilogue-only."""
    x = rand((4, 256), "complex128")
    npfn = getattr(np.fft, kind)
    for kw, want in (
        ({"prolog": "v * 2 + k"}, npfn(x * 2 + np.arange(256), norm=norm)),
        ({"epilog": "v * v"}, npfn(x, norm=norm) ** 2),
    ):
        got = getattr(dense, kind)(cp.asarray(x), norm=norm, options={"callbacks": "separate"}, **kw)
        close(got, want, "complex128")
