"""FFT prologues and epilogues on the CPU (the semantics every route shares) and their checks.

Every result is compared with NumPy's FFT followed (or preceded) by the same function written in
NumPy: fp64 at rtol 1e-12, fp32 at 1e-5.  The generated CUDA of each callback is compiled by NVRTC
(LTO-IR, as cuFFT takes it, and the separate kernel) where NVRTC is installed; no GPU is needed.
"""

from __future__ import annotations

import numpy as np
import pytest

import ust
from ust import dense
from ust.api import fft_callbacks
from ust.codegen import fft_callback as fc
from ust.runtime.errors import (
    BackendUnavailableError,
    InvalidTypeError,
    ShapeError,
    UnsupportedError,
    UstSyntaxError,
)

RNG = np.random.default_rng(21)
RTOL = {"float64": 1e-12, "complex128": 1e-12, "float32": 1e-5, "complex64": 1e-5}


def rand(shape, dtype):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def close(got, want, dtype):
    tol = RTOL[str(np.dtype(dtype))]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def signed(n, m=None):
    """NumPy's fftfreq(n) * n over the first m indices (the signed index ``f``)."""
    return (np.fft.fftfreq(n) * n)[: n if m is None else m]


# ------------------------------------------------------------------------------- 1-D, every kind

SIGMA = 3.0


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_c2c_epilog_gaussian_with_a_parameter(dtype, norm):
    x = rand((5, 64), dtype)
    x0 = x.copy()
    got = dense.fft(x, norm=norm, epilog="v * exp(-(f * f) / (2 * sigma * sigma))", params={"sigma": SIGMA})
    f = signed(64)
    want = np.fft.fft(x.astype(np.complex128), norm=norm) * np.exp(-(f * f) / (2 * SIGMA**2))
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    close(got, want, dtype)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_c2c_prolog_and_epilog_with_array_parameters_and_padding(dtype):
    x = rand((3, 40), dtype)
    h = rand((48,), "float64")
    g = rand((48,), "complex128")
    got = dense.ifft(x, n=48, prolog="v * h[k] + k / n", epilog="conj(v) * g[k] - N", params={"h": h, "g": g})
    xin = np.zeros((3, 48), np.complex128)
    xin[:, :40] = x
    k = np.arange(48)
    want = np.conj(np.fft.ifft(xin * h + k / 48)) * g - 48
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_r2c_prolog_and_epilog(dtype):
    x = rand((4, 30), dtype)
    w = rand((17,), "float64")
    k = np.arange(32)
    xin = np.zeros((4, 32))
    xin[:, :30] = x
    want = np.fft.rfft(xin * (1 - np.cos(2 * np.pi * k / 32))) * w + np.arange(17)
    got = dense.rfft(
        x,
        n=32,
        prolog="v * (1 - cos(2 * 3.141592653589793 * k / n))",
        epilog="v * w[k] + f",
        params={"w": w},
    )
    assert got.dtype == np.dtype("complex64" if dtype == "float32" else "complex128")
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_c2r_prolog_on_the_half_spectrum_and_real_epilog(dtype):
    spec = rand((3, 17), dtype)
    h = rand((17,), "float64")
    got = dense.irfft(
        spec, n=33, prolog="v * h[k] * (f <= 8)", epilog="max(v, 0) + sqrt(abs(v))", params={"h": h}
    )
    mask = np.arange(17) <= 8  # on a half spectrum f is k
    y = np.fft.irfft(spec.astype(np.complex128) * h * mask, n=33)
    want = np.maximum(y, 0) + np.sqrt(np.abs(y))
    assert got.dtype == np.dtype("float32" if dtype == "complex64" else "float64")
    close(got, want, dtype)


def test_real_input_of_a_c2c_transform_is_promoted_before_the_prolog():
    x = rand((2, 16), "float64")
    got = dense.fft(x, prolog="v * (1 + 2 * k)")
    close(got, np.fft.fft(x * (1 + 2 * np.arange(16))), "float64")


# ------------------------------------------------------------------------------------------- n-D


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("axes", [(1, 2), (2, 1), (0, 2), (0, 1, 2)])
def test_nd_epilog_and_prolog_name_axes_in_the_users_order(dtype, axes):
    x = rand((4, 6, 10), dtype)
    ext = [x.shape[a] for a in axes]
    h = rand(tuple(ext[:2]), "complex128")
    names = ", ".join(f"k{i}" for i in range(2))
    text = f"v * h[{names}] + f0 * n{len(axes) - 1}"
    got = dense.fftn(x, axes=axes, epilog=text, params={"h": h}, norm="ortho")
    y = np.fft.fftn(x.astype(np.complex128), axes=axes, norm="ortho")
    hb = h.transpose(np.argsort(axes[:2])).reshape([x.shape[a] if a in axes[:2] else 1 for a in range(3)])
    f0 = signed(ext[0]).reshape([-1 if a == axes[0] else 1 for a in range(3)])
    close(got, y * hb + f0 * ext[-1], dtype)
    got = dense.ifftn(x, axes=axes, prolog="v * exp(-(k0 * k0) / 8)")
    k0 = np.arange(ext[0]).reshape([-1 if a == axes[0] else 1 for a in range(3)])
    close(got, np.fft.ifftn(x.astype(np.complex128) * np.exp(-(k0 * k0) / 8), axes=axes), dtype)


def test_gaussian_filter_on_an_image_round_trip():
    img = rand((32, 48), "float64")
    blurred = dense.ifftn(
        dense.fftn(img, epilog="v * exp(-(f0 * f0 + f1 * f1) / (2 * s * s))", params={"s": 4.0})
    ).real
    f0, f1 = signed(32)[:, None], signed(48)[None, :]
    want = np.fft.ifftn(np.fft.fftn(img) * np.exp(-(f0**2 + f1**2) / 32.0)).real
    close(blurred, want, "float64")


def test_one_axis_fftn_also_knows_the_unnumbered_names():
    x = rand((3, 8), "complex128")
    k = np.arange(8)
    close(dense.fftn(x, axes=(1,), epilog="v * k + n * k0"), np.fft.fft(x) * k + 8 * k, "complex128")


# ------------------------------------------------------------------------- Python functions


def test_python_epilog_and_prolog_in_nvmaths_convention():
    x = rand((4, 32), "complex128")
    filt = rand((4 * 32,), "complex128")

    def epilog(data_out, offset, element, info, unused):
        data_out[offset] = element * info[offset]

    def prolog(data_in, offset, info, unused):
        return data_in[offset] * 2

    close(dense.fft(x, epilog=epilog, params=filt), np.fft.fft(x) * filt.reshape(4, 32), "complex128")
    close(dense.fft(x, prolog=prolog), np.fft.fft(x * 2), "complex128")
    close(
        dense.fft(x, epilog=epilog, params={"info": filt}), np.fft.fft(x) * filt.reshape(4, 32), "complex128"
    )


def test_whole_array_epilogues_keep_their_meaning():
    x = rand((4, 32), "float64")
    g = np.exp(-np.arange(17) / 5)
    close(dense.rfft(x, epilog=np.multiply, epilog_args=(g,)), np.fft.rfft(x) * g, "float64")
    close(dense.rfft(x, epilog=lambda s: s * 2), np.fft.rfft(x) * 2, "float64")


# --------------------------------------------------------------------------------- stateful


def test_stateful_fft_keeps_callbacks_and_reads_new_operands():
    x = rand((6, 64), "complex64")
    h = rand((64,), "complex64")
    with dense.FFT(x, "fft", norm="forward") as f:
        f.plan(epilog="v * h[k] * scale", params={"h": h, "scale": 0.5})
        assert f.route == "scipy.fft+pass"
        close(f.execute(), np.fft.fft(x.astype(np.complex128), norm="forward") * h * 0.5, "complex64")
        x2 = rand((6, 64), "complex64")
        f.reset_operands(x=x2)
        close(f.execute(), np.fft.fft(x2.astype(np.complex128), norm="forward") * h * 0.5, "complex64")
        f.plan()
        assert f.route == "scipy.fft"


def test_explain_says_where_callbacks_run():
    x = rand((8, 16), "complex128")
    text = ust.explain("fft", x, epilog="v * h[k]", params={"h": np.ones(16)})
    assert "route: scipy.fft+pass" in text and "one array pass after scipy.fft" in text
    gpu = ust.explain("fft", x, epilog="v * 2", execution="cuda")
    assert "epilog: text 'v * 2'" in gpu
    assert ("fused into cuFFT" in gpu and "route: cufft.callbacks" in gpu) or (
        "not fused" in gpu and "route: cufft+kernel" in gpu
    )
    sep = ust.explain("fft", x, epilog="v * 2", execution="cuda", options={"callbacks": "separate"})
    assert "route: cufft+kernel" in sep and "asks for a separate kernel" in sep
    moved = ust.explain("fft", x, kind="fftn", axes=(0,), epilog="v * 2", execution="cuda")
    assert "not the trailing axes" in moved


def test_forced_fusion_names_what_is_missing(monkeypatch):
    from ust.backends.cuda import cufft_callbacks

    monkeypatch.setattr(fft_callbacks, "_has_numba", lambda: False)
    monkeypatch.setattr(cufft_callbacks, "lto_support", lambda: (True, "stand-in"))
    x = rand((8, 16), "complex128")

    def epilog(out, off, v, info, sh):
        out[off] = v

    with pytest.raises(BackendUnavailableError, match="numba-cuda") as info:
        ust.explain("fft", x, epilog=epilog, execution="cuda", options={"callbacks": "fused"})
    assert "fft-callbacks" in info.value.pip_command
    auto = ust.explain("fft", x, epilog=epilog, execution="cuda")
    assert "not fused" in auto and "numba-cuda" in auto
    fused = ust.explain("fft", x, epilog="v", execution="cuda")
    assert "route: cufft.callbacks" in fused


# ------------------------------------------------------------------------------------- errors


def _no_transform(monkeypatch):
    from ust.backends.cpu import dense as cpu

    def refuse(*a, **k):
        raise AssertionError("a transform ran before the callbacks were checked")

    monkeypatch.setattr(cpu, "fft", refuse)


def _bad(v):
    raise ValueError("boom")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"epilog": "v * sigma"}, UnsupportedError, r"params=\{'sigma'"),
        ({"epilog": "v * q", "params": {"p": 1.0}}, UnsupportedError, "neither a built-in name"),
        ({"epilog": "v * h[k]", "params": {"h": np.ones(15)}}, ShapeError, "extent 15"),
        ({"epilog": "v * h[k]", "params": {"h": np.ones((16, 2))}}, ShapeError, "2 dimension"),
        ({"epilog": "v * h", "params": {"h": np.ones(16)}}, UnsupportedError, "index it"),
        ({"epilog": "v * h[k + 1]", "params": {"h": np.ones(16)}}, UnsupportedError, "index names"),
        ({"epilog": "v * s[k]", "params": {"s": 2.0}}, UnsupportedError, "only array parameters"),
        ({"epilog": "v * k0"}, UnsupportedError, "known: built-in names v, k, f, N, n"),
        ({"epilog": "v > 0"}, UnsupportedError, "compares real values only"),
        ({"epilog": "max(v, 1)"}, UnsupportedError, "takes real arguments"),
        ({"epilog": "v * foo(k)"}, UnsupportedError, "unknown function 'foo'"),
        ({"epilog": "v * (k"}, UstSyntaxError, "line 1"),
        ({"epilog": "v * n", "params": {"n": 2.0}}, UnsupportedError, "built-in names"),
        ({"epilog": "v", "params": [1.0]}, InvalidTypeError, "dict"),
        ({"epilog": "v * s", "params": {"s": "x"}}, InvalidTypeError, "number or an array"),
        ({"prolog": lambda a, b: a}, UnsupportedError, "4 arguments"),
        ({"prolog": lambda d, o, i, s: _bad(d)}, UnsupportedError, "fails on a trial element.*boom"),
        ({"epilog": "v", "epilog_args": (1,)}, UnsupportedError, "epilog_args go with"),
        ({"epilog_args": (1,)}, UnsupportedError, "without an epilog"),
        ({"epilog": "v", "options": {"callbacks": "always"}}, UnsupportedError, "auto, fused, separate"),
    ],
)
def test_bad_callbacks_fail_before_any_transform(monkeypatch, kwargs, error, match):
    _no_transform(monkeypatch)
    with pytest.raises(error, match=match):
        dense.fft(rand((4, 16), "complex128"), **kwargs)


def test_complex_results_cannot_feed_a_real_array(monkeypatch):
    _no_transform(monkeypatch)
    with pytest.raises(UnsupportedError, match="input is real"):
        dense.rfft(rand((4, 16), "float64"), prolog="v * c", params={"c": 1j})
    with pytest.raises(UnsupportedError, match="output is real"):
        dense.irfft(rand((4, 9), "complex128"), epilog="v * c", params={"c": 2 + 1j})


def test_matmul_epilogues_refuse_subscripts():
    from ust.codegen.epilog import compile_epilog

    with pytest.raises(UnsupportedError, match="FFT callbacks only"):
        compile_epilog("y * h[k]")


# ------------------------------------------------------------------------- generated CUDA source


CASES = [
    ("fft", (4, 64), "complex64", None, "v * exp(-(f * f) / (2 * sigma * sigma))", {"sigma": 3.0}),
    ("fft", (4, 64), "complex128", "v * h[k] + k / n", "abs(v) ** 2 + tanh(v) / log(v + 2)", {"h": np.ones(64)}),
    ("rfft", (3, 30), "float32", "where(k < 10, v, 0) + min(v, 1)", "v * w[k] + sqrt(v) ** c", {"w": np.ones(16), "c": 1 + 2j}),
    ("irfft", (3, 17), "complex128", "conj(v) * g[k]", "max(v, 0) + real(v) - imag(v)", {"g": np.ones(17, np.complex64)}),
    ("fftn", (2, 8, 10), "complex64", "v * h[k1, k0]", "v * (f0 + f1 + N)", {"h": np.ones((10, 8))}),
]  # fmt: skip


def _sites(kind, shape, dtype, prolog, epilog, params):
    n, axes = dense._fft_args(kind, np.empty(shape, dtype), None, (1, 2) if kind == "fftn" else None, None)
    geo = fft_callbacks.geometry(kind, shape, dtype, n, axes, dense._FFT_ND)
    cbs = fft_callbacks.build_callbacks(geo, prolog, epilog, params, ())
    out_dtype = geo.out_dtype if geo.out_dtype.startswith("complex") else geo.in_dtype
    return cbs, out_dtype


@pytest.mark.parametrize(("kind", "shape", "dtype", "prolog", "epilog", "params"), CASES)
def test_generated_callbacks_compile_with_nvrtc(kind, shape, dtype, prolog, epilog, params):
    from ust.backends.cuda.cufft_callbacks import NVRTC_LTO_OPTIONS
    from ust.backends.cuda.kernels import nvrtc_options
    from ust.backends.cuda.nvrtc import compile_cuda, load_nvrtc

    try:
        lib = load_nvrtc()
    except BackendUnavailableError:
        pytest.skip("NVRTC is not installed")
    cbs, tdtype = _sites(kind, shape, dtype, prolog, epilog, params)
    for phase, cb in cbs.phases():
        assert isinstance(cb, fc.FFTCallback)
        kernel = fc.cuda_kernel_source(cb, tdtype, "ust_k")
        assert compile_cuda(kernel, nvrtc_options("90"), name="k.cu")
        if hasattr(lib, "nvrtcGetLTOIR"):
            src = fc.cuda_callback_source(cb.with_scale(0.25), tdtype, f"ust_fft_{phase}")
            assert "__device__" in src and 'extern "C"' not in src and "#include" not in src
            ltoir = compile_cuda(src, (*NVRTC_LTO_OPTIONS, "--gpu-architecture=compute_90"), target="ltoir")
            assert len(ltoir) > 100


def test_callback_types_and_parameter_block():
    cbs, tdtype = _sites(*CASES[2])
    assert fc.callback_type(cbs.prolog, tdtype) == "LD_REAL"
    assert fc.callback_type(cbs.epilog, tdtype) == "ST_COMPLEX"
    cbs, tdtype = _sites(*CASES[3])
    assert fc.callback_type(cbs.prolog, tdtype) == "LD_COMPLEX_DOUBLE"
    assert fc.callback_type(cbs.epilog, tdtype) == "ST_REAL_DOUBLE"
    specs = fc.param_specs({"a": 2.0, "z": 1 - 3j, "h": np.ones(4)})
    block = fc.param_block(specs, {"a": 2.0, "z": 1 - 3j, "h": "H"}, lambda v: 4096)
    assert block == [2.0, 1.0, -3.0, 4096]
    site = fc.CallbackSite("epilog", (2, 4), (1,), (4,), (), "complex", False)
    src = fc.cuda_kernel_source(fc.compile_fft_callback("v * a * z * h[k]", site, specs), "complex128", "k")
    assert "ust_pd[0]" in src and "ust_pd[1]" in src and "ust_pd[2]" in src and "ust_pu[3]" in src


def test_a_folded_norm_scales_an_epilogues_input_and_a_prologues_output():
    """The separate route folds the norm's factor into a pass: epilog(s * v), s * prolog(x); both
    equal the normalised transform's result because the transform is linear."""
    x = rand((3, 16), "complex128")
    for phase in ("prolog", "epilog"):
        site = fc.CallbackSite(phase, (3, 16), (1,), (16,), (), "complex", False)
        cb = fc.compile_fft_callback("v * v + k", site, ())
        k = np.arange(16.0)
        s = 0.125
        want = (s * x) ** 2 + k if phase == "epilog" else s * (x**2 + k)
        np.testing.assert_allclose(fc.evaluate(cb.with_scale(s), x, {}, np), want, rtol=1e-14)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_callback_symbols_are_the_names_nvrtc_gives_cuffts_prototypes(dtype):
    """cuFFT resolves the C++ (mangled) name of its callback prototype: the generated source must
    define exactly that symbol, and a numba callback is given it as its C name."""
    from ust.backends.cuda.nvrtc import compile_cuda, load_nvrtc

    try:
        load_nvrtc()
    except BackendUnavailableError:
        pytest.skip("NVRTC is not installed")
    import re

    value = "complex" if dtype.startswith("complex") else "real"
    for phase in ("prolog", "epilog"):
        site = fc.CallbackSite(phase, (2, 8), (1,), (8,), (), value, False)
        cb = fc.compile_fft_callback("v * 2", site, ())
        src = fc.cuda_callback_source(cb, dtype, f"ust_fft_{phase}")
        ptx = compile_cuda(
            src, ("--relocatable-device-code=true", "--gpu-architecture=compute_90"), target="ptx"
        ).decode()
        assert fc.callback_symbol(f"ust_fft_{phase}", phase, dtype) in re.findall(r"(_Z\w+)", ptx)


K_GAIN = 2.0


def _helper(v):
    return v


def test_numba_callbacks_are_cached_on_disk_only_when_their_source_says_it_all():
    import math

    from ust.backends.cuda.cufft_callbacks import _numba_disk_key

    def reads_numbers_and_modules(out, off, v, info, shared):
        out[off] = v * K_GAIN * math.exp(1.0)

    def calls_a_helper(out, off, v, info, shared):
        out[off] = _helper(v)

    key = _numba_disk_key(reads_numbers_and_modules, ("epilog", "complex64"))
    assert isinstance(key, str) and len(key) == 64
    assert key != _numba_disk_key(reads_numbers_and_modules, ("epilog", "complex128"))
    assert _numba_disk_key(calls_a_helper, ("epilog",)) is None


# --------------------------------------------- the cuFFT binding against a stand-in libcufft (C)

_STAND_IN_CUFFT = r"""
#include <string.h>
typedef struct { long long rank, n[3], inembed[3], istride, idist, onembed[3], ostride, odist, type, batch; } plan_t;
plan_t rec_plan;
char rec_names[2][64];
long long rec_sizes[2], rec_types[2], rec_infos[2], rec_first_bytes[2];
int rec_callbacks = 0, rec_exec_direction = 99;
long long rec_stream = -1, rec_in = 0, rec_out = 0;
int cufftCreate(int* h) { *h = 7; return 0; }
int cufftDestroy(int h) { return h == 7 ? 0 : 1; }
int cufftSetStream(int h, void* s) { rec_stream = (long long)s; return 0; }
int cufftGetVersion(int* v) { *v = VERSION; return 0; }
int SETJIT(int h, const char* name, const void* blob, size_t size, int type, void** info) {
  if (rec_callbacks >= 2) return 4;
  strncpy(rec_names[rec_callbacks], name, 63);
  rec_sizes[rec_callbacks] = (long long)size; rec_types[rec_callbacks] = type;
  rec_infos[rec_callbacks] = (long long)info[0]; rec_first_bytes[rec_callbacks] = ((const unsigned char*)blob)[0];
  rec_callbacks++; return 0;
}
int cufftMakePlanMany64(int h, int rank, long long* n, long long* inembed, long long istride, long long idist,
                        long long* onembed, long long ostride, long long odist, int type, long long batch, size_t* ws) {
  rec_plan.rank = rank;
  for (int i = 0; i < rank; i++) { rec_plan.n[i] = n[i]; rec_plan.inembed[i] = inembed[i]; rec_plan.onembed[i] = onembed[i]; }
  rec_plan.istride = istride; rec_plan.idist = idist; rec_plan.ostride = ostride; rec_plan.odist = odist;
  rec_plan.type = type; rec_plan.batch = batch; *ws = 0; return 0;
}
int cufftExecC2C(int h, void* i, void* o, int d) { rec_in = (long long)i; rec_out = (long long)o; rec_exec_direction = d; return 0; }
int cufftExecZ2Z(int h, void* i, void* o, int d) { return cufftExecC2C(h, i, o, d); }
int cufftExecR2C(int h, void* i, void* o) { return cufftExecC2C(h, i, o, 0); }
int cufftExecD2Z(int h, void* i, void* o) { return cufftExecC2C(h, i, o, 0); }
int cufftExecC2R(int h, void* i, void* o) { return cufftExecC2C(h, i, o, 0); }
int cufftExecZ2D(int h, void* i, void* o) { return cufftExecC2C(h, i, o, 0); }
"""


class _FakeDeviceArray(np.ndarray):
    @property
    def data(self):  # type: ignore[override]
        import types

        return types.SimpleNamespace(ptr=self.ctypes.data)

    def set(self, host):
        self[...] = host


def _fake_cupy_for_cufft():
    import contextlib
    import types

    def dev(i=0):
        d = contextlib.nullcontext()
        return types.SimpleNamespace(compute_capability="90", __enter__=d.__enter__, __exit__=d.__exit__)

    class Device:
        def __init__(self, i=0):
            self.compute_capability = "90"

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def wrap(fn):
        return lambda *a, **k: np.asarray(fn(*a, **k)).view(_FakeDeviceArray)

    stream = types.SimpleNamespace(ptr=4242)
    cuda = types.SimpleNamespace(Device=Device, get_current_stream=lambda: stream)
    return types.SimpleNamespace(__name__="cupy", zeros=wrap(np.zeros), empty=wrap(np.empty), cuda=cuda)


@pytest.mark.parametrize(
    ("version", "setjit"), [(12000, "cufftXtSetJITCallback"), (11400, "__cufftXtSetJITCallback_12_7")]
)
def test_cufft_binding_passes_layout_callbacks_and_parameters(tmp_path, monkeypatch, version, setjit):
    import ctypes
    import subprocess
    import sys

    from ust.backends.cuda import cufft_callbacks as cbk
    from ust.backends.generated.compile_c import find_compiler

    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "cufft.c"
    src.write_text(_STAND_IN_CUFFT.replace("VERSION", str(version)).replace("SETJIT", setjit))
    lib_path = tmp_path / "libcufft.so"
    # -Bsymbolic: each stand-in binds its own records
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", "-o", str(lib_path), str(src)], check=True
    )
    monkeypatch.setenv("UST_CUFFT_LIBRARY", str(lib_path))
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy_for_cufft())
    import os

    from ust.backends.cuda import _lib

    # RTLD_LOCAL: the stand-in's cufft* symbols must not shadow a real libcufft loaded later
    monkeypatch.setattr(_lib, "_open", lambda path: ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL))
    _lib.load_library.cache_clear()
    cbk._api.cache_clear()
    cbk.lto_support.cache_clear()
    monkeypatch.setattr(cbk, "text_ltoir", lambda cb, dtype, symbol, arch: (b"L" * 300, "compiled", 0.0))
    try:
        ok, how = cbk.lto_support()
        assert (ok, setjit in how) == (True, True) or "NVRTC" in how
        x = rand((5, 6, 8), "complex64")
        n, axes = dense._fft_args("ifftn", x, None, (1, 2), None)
        geo = fft_callbacks.geometry("ifftn", x.shape, "complex64", n, axes, dense._FFT_ND)
        cbs = fft_callbacks.build_callbacks(
            geo, "v * h[k0, k1]", "v * s", {"h": np.ones((6, 8)), "s": 0.5}, ()
        )
        layout = cbk.Layout("c2c", "single", 1, (6, 8), geo.in_shape, geo.out_shape, "complex64", "complex64")
        plan = cbk.FusedFFT(
            layout, 0, (cbs.prolog, "complex64"), (cbs.epilog.with_scale(1 / 48), "complex64"), "complex64"
        )
        lib = ctypes.CDLL(str(lib_path))
        ll = ctypes.c_longlong
        rec = (ll * 16).in_dll(
            lib, "rec_plan"
        )  # rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch
        assert list(rec) == [2, 6, 8, 0, 6, 8, 0, 1, 48, 6, 8, 0, 1, 48, 0x29, 5]
        names = (ctypes.c_char * 64 * 2).in_dll(lib, "rec_names")
        assert [names[0].value, names[1].value] == [b"ust_fft_prolog", b"ust_fft_epilog"]
        assert list((ll * 2).in_dll(lib, "rec_types")) == [0, 4]  # LD_COMPLEX, ST_COMPLEX
        assert list((ll * 2).in_dll(lib, "rec_sizes")) == [300, 300]
        assert list((ll * 2).in_dll(lib, "rec_first_bytes")) == [ord("L")] * 2
        infos = list((ll * 2).in_dll(lib, "rec_infos"))
        assert infos == [plan.blocks["prolog"].ptr, plan.blocks["epilog"].ptr]
        h = np.full((6, 8), 2.0, np.float32).view(_FakeDeviceArray)
        xin = np.ascontiguousarray(x).view(_FakeDeviceArray)
        out = plan.run(xin, {"prolog": {"h": h, "s": 0.5}, "epilog": {"h": h, "s": 0.5}})
        assert out.shape == (5, 6, 8) and out.dtype == np.complex64
        assert ctypes.c_int.in_dll(lib, "rec_exec_direction").value == 1
        assert ll.in_dll(lib, "rec_stream").value == 4242
        assert (
            ll.in_dll(lib, "rec_in").value == xin.ctypes.data
            and ll.in_dll(lib, "rec_out").value == out.ctypes.data
        )
        # the parameter blocks hold what the generated code reads, in params order: h's address, s
        for block in plan.blocks.values():
            assert int(block.device[0]) == h.ctypes.data and block.device.view(np.float64)[1] == 0.5
        plan.free()
    finally:
        _lib.load_library.cache_clear()
        cbk._api.cache_clear()
        cbk.lto_support.cache_clear()


# ------------------------------------- the generated CUDA body, compiled for the host, vs NumPy

_HOST_SHIM = """#define __device__
#define __forceinline__ inline
#define _GNU_SOURCE 1
#include <math.h>
struct alignas(8) float2 { float x, y; };
struct alignas(16) double2 { double x, y; };
"""  # CUDA's vector types, as vector_types.h declares them, for this host build


@pytest.mark.parametrize(("kind", "shape", "dtype", "prolog", "epilog", "params"), CASES)
def test_generated_callback_body_computes_what_the_array_program_does(
    tmp_path, kind, shape, dtype, prolog, epilog, params
):
    """The CUDA body (index recovery from the offset, parameter block, complex helpers, the norm's
    scale) built as host C++ and run over every element agrees with :func:`fc.evaluate`."""
    import ctypes
    import shutil
    import subprocess

    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    cbs, tdtype = _sites(kind, shape, dtype, prolog, epilog, params)
    single = tdtype == "complex64"
    for phase, cb in cbs.phases():
        cb = cb.with_scale(0.25)  # epilog(v * s), s * prolog(x): both built into the body
        real, f = ("float", "f") if single else ("double", "")
        vdtype = cbs.geo.value_dtype(phase)
        src = _HOST_SHIM + fc._PREAMBLE.format(R=real, f=f) + fc._Emitter(cb, f).body("ust_body")
        vt = "uc" if vdtype.startswith("complex") else "ust_r"
        src += (
            f'\nextern "C" void run(const {vt}* in, {vt}* out, const void* info, unsigned long long count) '
            "{ for (unsigned long long i = 0; i < count; i++) out[i] = ust_body(in[i], i, info); }\n"
        )
        path = tmp_path / f"{phase}.cpp"
        path.write_text(src)
        so = tmp_path / f"lib{phase}.so"
        subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(so), str(path)], check=True)
        lib = ctypes.CDLL(str(so))
        y = rand(cb.site.shape, vdtype)
        if vdtype.startswith("float"):
            y = np.abs(y) + 0.5  # sqrt / log of real values stay real, as in NumPy
        prec = {"c": np.complex64 if single else np.complex128, "f": np.float32 if single else np.float64}
        values = {
            k: np.ascontiguousarray(v, dtype=prec["c" if np.iscomplexobj(v) else "f"])
            if hasattr(v, "shape")
            else v
            for k, v in params.items()
        }
        block = np.array(
            [
                int(np.float64(s).view(np.uint64)) if isinstance(s, float) else s
                for s in fc.param_block(cb.params, values, lambda a: a.ctypes.data)
            ]
            or [0],
            dtype=np.uint64,
        )
        out = np.empty_like(y)
        lib.run(
            ctypes.c_void_p(y.ctypes.data),
            ctypes.c_void_p(out.ctypes.data),
            ctypes.c_void_p(block.ctypes.data),
            ctypes.c_ulonglong(y.size),
        )
        want = fc.evaluate(cb, y, values, np)
        close(out, want, vdtype)


def test_saved_plan_with_callbacks_loads_with_them_again(tmp_path):
    x = rand((4, 32), "complex128")
    path = tmp_path / "fft.json"
    with dense.FFT(x, "fft") as f:
        f.plan(epilog="v * s", params={"s": np.float64(3.0)})  # a NumPy scalar is read once as a number
        f.save_plan(path)
    with dense.FFT(x, "fft") as g:
        assert g.load_plan(path, epilog="v * s", params={"s": np.array(3.0)}) is True
        assert g.route == "scipy.fft+pass"
        close(g.execute(), np.fft.fft(x) * 3, "complex128")
