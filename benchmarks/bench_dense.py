"""Dense fall-through: ust.dense (cuBLASLt / cuFFT) side by side with CuPy and nvmath-python.

    python -m benchmarks.bench_dense                      # GPU cases of issue 7 (H200 sizes)
    python -m benchmarks.bench_dense --device cpu         # small CPU versions vs NumPy / SciPy
    python -m benchmarks.bench_dense --device cpu --append-results   # ... and append to RESULTS.md

Cases (GPU sizes; ``--device cpu`` shrinks them):

* ``tall-skinny``: ``1.5 * A @ B + 0.5 * C``, A 10,000,000 x 10, B 10 x 40, float32: ust one-shot
  ``matmul(a, b, c=c, alpha=1.5, beta=0.5)`` and stateful ``execute()`` (autotuned) vs
  ``alpha * cp.matmul(a, b) + beta * c`` and nvmath-python's one-shot / stateful matmul.
* ``batched relu+bias``: 1024 x (1024 x 1024) float32 with a bias vector and ReLU vs CuPy
  ``cp.maximum(cp.matmul(a, b) + bias, 0)`` and nvmath-python (autotuned); ust autotuned over the
  heuristic's candidates and with ``search="exhaustive"`` (every configuration cuBLASLt accepts).
* ``amortised``: 10 executions of one stateful object (construction and planning included) vs 10
  one-shot calls, on the tall-and-skinny case.
* ``fft``: 2^24 complex128 points: ``ust.dense.fft`` and the stateful ``FFT.execute()`` vs
  ``cupy.fft.fft`` and nvmath-python's fft.
* ``gaussian filter`` (issue 21; ``--cases callbacks`` runs only these): FFT, multiply by a
  Gaussian, inverse FFT on 8192^2 and 2^26 complex64 points.  ust with the filter fused into
  cuFFT as an LTO callback (as the inverse's prologue, computed from the text or read from an
  array ``h[k0, k1]``; or as the forward's epilogue) vs CuPy (``fftn``, ``*``, ``ifftn``) and
  nvmath-python's ``ifftn`` with a numba prologue reading the filter; then the compile and cached
  load times of one callback and cuFFT's JIT link of a plan.

Every number is a median over repeats after warm-up (GPU: ``cupyx.profiler.benchmark``, CUDA
events); ratios are ust / baseline (below 1: ust is faster).  Writes ``bench_dense.json`` and
``bench_dense.md`` to ``--out`` (default ``$OUT`` or ``benchmarks/results``) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ust import dense

GOALS_MS = {  # issue 7, measured on the H200
    "tall-skinny stateful": 1.69,
    "tall-skinny one-shot": 2.0,
    "batched relu+bias": 41.7,
}


# ------------------------------------------------------------------------------------- timing


def time_cpu(fn: Callable[[], Any], repeat: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in ms."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def time_gpu(fn: Callable[[], Any], repeat: int = 20, warmup: int = 3) -> float:
    """Median time of ``fn`` in ms from CUDA events around each call (host overhead included)."""
    from cupyx.profiler import benchmark

    result = benchmark(fn, n_repeat=repeat, n_warmup=warmup)
    return 1e3 * float(np.median(result.gpu_times[0]))


def try_time(timer: Callable[..., float], fn: Callable[[], Any], **kw: Any) -> float | str:
    try:
        return timer(fn, **kw)
    except Exception as exc:  # a baseline that is missing or fails must not stop the others
        return f"n/a ({type(exc).__name__}: {str(exc)[:60]})"


def nvmath_module() -> Any:
    """nvmath-python with its dense matmul and FFT, or None when it does not import here."""
    try:
        import nvmath
        import nvmath.fft
        import nvmath.linalg.advanced

        return nvmath
    except Exception as exc:
        print(f"nvmath-python not used: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


# ----------------------------------------------------------------------------------- GPU cases


def gpu_cases(scale: float, fft_log2: int = 24, cases: str = "all") -> list[dict[str, Any]]:
    import cupy as cp

    rows: list[dict[str, Any]] = []
    nv = nvmath_module()
    chosen = (
        (_gpu_filter,) if cases == "callbacks" else (_gpu_tall_skinny, _gpu_batched, _gpu_fft, _gpu_filter)
    )
    for case in chosen:
        rows += case(cp, nv, scale, fft_log2)
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _gpu_tall_skinny(cp: Any, nv: Any, scale: float, fft_log2: int) -> list[dict[str, Any]]:
    """alpha * A @ B + beta * C with A 10M x 10: one pass over memory as one cuBLASLt call."""
    rows = []
    rng = cp.random.default_rng(0)
    m = int(10_000_000 * scale)
    a = rng.standard_normal((m, 10), dtype=cp.float32)
    b = rng.standard_normal((10, 40), dtype=cp.float32)
    c = rng.standard_normal((m, 40), dtype=cp.float32)
    base = time_gpu(lambda: 1.5 * cp.matmul(a, b) + 0.5 * c)
    ref = 1.5 * cp.matmul(a, b) + 0.5 * c
    err = float(cp.abs(dense.matmul(a, b, c=c, alpha=1.5, beta=0.5) - ref).max())
    one = time_gpu(lambda: dense.matmul(a, b, c=c, alpha=1.5, beta=0.5))
    mm = dense.Matmul(a, b, c, alpha=1.5, beta=0.5)
    mm.plan()
    tune = mm.autotune(iterations=10)
    stateful = time_gpu(mm.execute)
    mm.free()
    case = f"tall-skinny {m:,} x 10 @ 10 x 40 f32, alpha/beta, c"
    cupy_name = "CuPy alpha*matmul+beta*c"
    rows.append(_row(case, "one-shot", cupy_name, base, one, goal=GOALS_MS["tall-skinny one-shot"]))
    rows.append(
        _row(case, "stateful execute", cupy_name, base, stateful, goal=GOALS_MS["tall-skinny stateful"])
    )
    rows[-1]["max_abs_err"] = err
    rows[-1]["autotune_ms"] = tune
    if nv is not None:
        nv_one = try_time(time_gpu, lambda: nv.linalg.advanced.matmul(a, b, c=c, alpha=1.5, beta=0.5))
        rows.append(_row(case, "one-shot", "nvmath-python one-shot", nv_one, one))
        try:
            nmm = nv.linalg.advanced.Matmul(a, b, c=c, alpha=1.5, beta=0.5)
            nmm.plan()
            nmm.autotune(iterations=10)
            nv_st: float | str = time_gpu(nmm.execute)
            nmm.free()
        except Exception as exc:
            nv_st = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
        rows.append(_row(case, "stateful execute", "nvmath-python stateful", nv_st, stateful))

    def stateful10() -> None:
        with dense.Matmul(a, b, c, alpha=1.5, beta=0.5) as obj:
            obj.plan()
            for _ in range(10):
                obj.execute()

    def oneshot10() -> None:
        for _ in range(10):
            dense.matmul(a, b, c=c, alpha=1.5, beta=0.5)

    amortised = time_gpu(stateful10, repeat=5)
    rows.append(
        _row(
            "amortised, tall-skinny x 10",
            "stateful: plan + 10 execute",
            "10 ust one-shot calls",
            time_gpu(oneshot10, repeat=5),
            amortised,
        )
    )
    return rows


def _gpu_batched(cp: Any, nv: Any, scale: float, fft_log2: int) -> list[dict[str, Any]]:
    """1024 x (1024 x 1024) float32 with relu+bias fused into the matmul's epilogue."""
    rows = []
    rng = cp.random.default_rng(1)
    nb = max(2, int(1024 * scale))
    a = rng.standard_normal((nb, 1024, 1024), dtype=cp.float32)
    b = rng.standard_normal((nb, 1024, 1024), dtype=cp.float32)
    bias = rng.standard_normal(1024, dtype=cp.float32)
    inputs = {"bias": bias}
    base = time_gpu(lambda: cp.maximum(cp.matmul(a, b) + bias, 0), repeat=5, warmup=1)
    one = time_gpu(lambda: dense.matmul(a, b, epilog="relu_bias", epilog_inputs=inputs), repeat=5, warmup=1)
    case = f"batched {nb} x (1024 x 1024) f32, relu+bias"
    rows.append(_row(case, "one-shot", "CuPy matmul + epilogue", base, one))
    tuned_ms: dict[str, float] = {}
    for variant, options, search in (
        ("stateful, autotuned", None, "heuristic"),
        ("stateful, autotuned (exhaustive)", None, "exhaustive"),
        ("stateful, autotuned, TF32", {"tf32": True}, "heuristic"),
    ):
        with dense.Matmul(a, b, options=options) as bm:
            bm.plan(epilog="relu_bias", epilog_inputs=inputs)
            bm.autotune(iterations=3, search=search)
            tuned = time_gpu(bm.execute, repeat=5, warmup=1)
        goal = GOALS_MS["batched relu+bias"] if search == "exhaustive" else None
        rows.append(_row(case, variant, "CuPy matmul + epilogue", base, tuned, goal=goal))
        tuned_ms[variant] = tuned
    if nv is not None:
        try:
            nmm = nv.linalg.advanced.Matmul(a, b)
            nmm.plan(epilog=nv.linalg.advanced.MatmulEpilog.RELU_BIAS, epilog_inputs=inputs)
            nmm.autotune(iterations=3)
            nv_b: float | str = time_gpu(nmm.execute, repeat=5, warmup=1)
            nmm.free()
        except Exception as exc:
            nv_b = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
        for variant in ("stateful, autotuned", "stateful, autotuned (exhaustive)"):
            rows.append(_row(case, variant, "nvmath-python autotuned", nv_b, tuned_ms[variant]))
    return rows


def _gpu_fft(cp: Any, nv: Any, scale: float, fft_log2: int) -> list[dict[str, Any]]:
    """2^24 complex128 points: ust's one-shot and stateful FFT vs cupy.fft.fft."""
    rows = []
    rng = cp.random.default_rng(2)
    n = 1 << fft_log2
    x = rng.standard_normal(n, dtype=cp.float64) + 1j * rng.standard_normal(n, dtype=cp.float64)
    base = time_gpu(lambda: cp.fft.fft(x))
    one = time_gpu(lambda: dense.fft(x))
    with dense.FFT(x, "fft") as f:
        f.plan()
        st = time_gpu(f.execute)
        err = float(cp.abs(f.execute() - cp.fft.fft(x)).max())
    case = f"fft 2^{fft_log2} complex128"
    rows.append(_row(case, "one-shot", "cupy.fft.fft", base, one, goal_ratio=1.05))
    rows.append(_row(case, "stateful execute", "cupy.fft.fft", base, st, goal_ratio=1.05))
    rows[-1]["max_abs_err"] = err
    if nv is not None:
        rows.append(
            _row(case, "one-shot", "nvmath-python fft", try_time(time_gpu, lambda: nv.fft.fft(x)), one)
        )
    return rows


def _gauss_text(nd: int) -> str:
    terms = " + ".join(f"f{i} * f{i}" for i in range(nd)) if nd > 1 else "f * f"
    return f"v * exp(-({terms}) * c)"


def _gauss_filter(xp: Any, shape: tuple[int, ...], sigma: float, dtype: Any) -> Any:
    """exp(-|f|^2 / (2 sigma^2)) over the signed frequency indices of ``shape`` (one array)."""
    h = None
    for axis, n in enumerate(shape):
        f = xp.fft.fftfreq(n, d=1.0 / n).astype(dtype)
        g = xp.exp(-(f * f) / (2 * sigma * sigma)).reshape(
            [-1 if a == axis else 1 for a in range(len(shape))]
        )
        h = g if h is None else h * g
    return xp.ascontiguousarray(h)


def _gpu_filter(cp: Any, nv: Any, scale: float, fft_log2: int) -> list[dict[str, Any]]:
    """FFT, Gaussian filter, inverse FFT: ust's fused callbacks vs CuPy and nvmath-python (issue 21)."""
    rows: list[dict[str, Any]] = []
    side = max(64, int(8192 * scale**0.5))
    length = max(1 << 12, int((1 << 26) * scale))
    for shape in ((side, side), (length,)):
        rows += _gpu_filter_case(cp, nv, shape)
        cp.get_default_memory_pool().free_all_blocks()
    return rows + _callback_compile_times(cp)


def _gpu_filter_case(cp: Any, nv: Any, shape: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    rng = cp.random.default_rng(4)
    nd = len(shape)
    axes = tuple(range(nd))
    x = rng.standard_normal(shape, dtype=cp.float32) + 1j * rng.standard_normal(shape, dtype=cp.float32)
    x = x.astype(cp.complex64)
    sigma = shape[0] / 16
    c = 1.0 / (2 * sigma * sigma)
    h = _gauss_filter(cp, shape, sigma, cp.float32)
    text = _gauss_text(nd)
    hidx = "h[" + ", ".join(f"k{i}" for i in range(nd)) + "]" if nd > 1 else "h[k]"
    kw: dict[str, Any] = {"axes": axes} if nd > 1 else {}
    fwd = getattr(dense, "fftn" if nd > 1 else "fft")
    inv = getattr(dense, "ifftn" if nd > 1 else "ifft")

    def cupy_run() -> Any:
        return cp.fft.ifftn(cp.fft.fftn(x, axes=axes) * h, axes=axes)

    want = cupy_run()
    base = time_gpu(cupy_run, repeat=10)
    variants: list[tuple[str, Callable[[], Any]]] = [
        ("fused: inverse's prolog (text)", lambda: inv(fwd(x, **kw), prolog=text, params={"c": c}, **kw)),
        (
            "fused: inverse's prolog h[k] (array)",
            lambda: inv(fwd(x, **kw), prolog=f"v * {hidx}", params={"h": h}, **kw),
        ),
        (
            "fused: forward's epilog (text), plain inverse",
            lambda: inv(fwd(x, epilog=text, params={"c": c}, **kw), **kw),
        ),
        (
            "separate kernel (options callbacks=separate)",
            lambda: inv(fwd(x, **kw), prolog=text, params={"c": c}, options={"callbacks": "separate"}, **kw),
        ),
    ]
    case = f"gaussian filter {'x'.join(map(str, shape))} complex64"
    with dense.FFT(x, "ifftn" if nd > 1 else "ifft", axes=axes if nd > 1 else -1) as probe:
        probe.plan(prolog=text, params={"c": c})
        route = probe.route
    stateful, routes = _stateful_filter(x, nd, axes, text, c)
    variants.append((f"planned objects, autotuned ({routes})", stateful))
    first_ms: float | str = "n/a"
    for name, fn in variants:
        try:
            err = float(cp.abs(fn() - want).max() / cp.abs(want).max())
            ms: float | str = time_gpu(fn, repeat=10)
        except Exception as exc:
            err, ms = float("nan"), f"n/a ({type(exc).__name__}: {str(exc)[:80]})"
        if first_ms == "n/a":
            first_ms = ms
        row = _row(case, f"{name} [{route}]", "CuPy fftn * h ifftn", base, ms)
        speedup = base / ms if isinstance(ms, float) else 0.0
        row["goal"] = f"CuPy / ust >= 1.3: {'met' if speedup >= 1.3 else 'not met'} ({speedup:.2f}x)"
        row["rel_err"] = err
        rows.append(row)
    if nv is not None:
        rows += _nvmath_filter(cp, nv, x, h, axes, want, case, rows[-1]["ust_ms"])
    return rows


def _stateful_filter(x: Any, nd: int, axes: tuple[int, ...], text: str, c: float) -> tuple[Any, str]:
    """The filter with two planned ``dense.FFT`` objects (forward plain, inverse with the prolog),
    the inverse autotuned between the fused and the separate route."""
    fwd = dense.FFT(x, "fftn" if nd > 1 else "fft", axes=axes if nd > 1 else -1)
    fwd.plan()
    inv = dense.FFT(fwd.execute(), "ifftn" if nd > 1 else "ifft", axes=axes if nd > 1 else -1)
    inv.plan(prolog=text, params={"c": c})
    inv.autotune()

    def run() -> Any:
        inv.reset_operands_unchecked(fwd.execute())
        return inv.execute()

    return run, f"fft {fwd.route}, ifft {inv.route}"


def _nvmath_filter(
    cp: Any, nv: Any, x: Any, h: Any, axes: Any, want: Any, case: str, ust_ms: Any
) -> list[dict[str, Any]]:
    """nvmath-python: forward fft, inverse with a numba prologue multiplying by the filter array."""
    if not hasattr(np, "row_stack"):
        # NumPy 2.3 removed this alias of vstack, which the GPU machine's numba-cuda still calls:
        # restore it (the same function) so that the baseline can run at all
        np.row_stack = np.vstack
    try:

        def prolog(data_in, offset, info, unused):  # type: ignore[no-untyped-def]
            return data_in[offset] * info[offset]

        with cp.cuda.Device():
            ltoir = nv.fft.compile_prolog(prolog, "complex64", "float32")
        n = x.size
        best = None
        y0 = cp.fft.fftn(x, axes=axes)
        for factor in (1.0, 1.0 / n):  # nvmath's inverse may or may not scale by 1/N
            hs = cp.ascontiguousarray(h * cp.float32(factor))
            # planned once (a one-shot nvmath call JIT-links its plan on every call): CuPy's forward,
            # nvmath's planned inverse with the numba prologue
            inv = nv.fft.FFT(y0, axes=list(axes))
            inv.plan(prolog={"ltoir": ltoir, "data": hs.data.ptr}, direction="inverse")

            def run(inv: Any = inv) -> Any:
                inv.reset_operand(cp.fft.fftn(x, axes=axes))
                return inv.execute(direction="inverse")

            err = float(cp.abs(run() - want).max() / cp.abs(want).max())
            if best is None or err < best[0]:
                best = (err, run)
        assert best is not None
        ms: float | str = time_gpu(best[1], repeat=10)
        err = best[0]
    except Exception as exc:
        ms, err = f"n/a ({type(exc).__name__}: {str(exc)[:80]})", float("nan")
    row = _row(
        case,
        "planned objects, autotuned",
        "CuPy fftn + nvmath-python planned ifftn with numba prolog",
        ms,
        ust_ms,
    )
    row["goal"] = f"ust <= nvmath: {'met' if row['ratio'] is not None and row['ratio'] <= 1.0 else 'not met'}"
    row["nvmath_rel_err"] = err
    return [row]


def _callback_compile_times(cp: Any) -> list[dict[str, Any]]:
    """NVRTC -dlto compile of one callback, its load from ust's cache, and cuFFT's JIT link of a plan."""
    import tempfile

    from ust.api.fft_callbacks import build_callbacks, geometry
    from ust.backends.cuda import cufft_callbacks as cbk

    rows = []
    old = os.environ.get("UST_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        os.environ["UST_CACHE_DIR"] = tmp
        try:
            shape = (64, 1024)
            n, axes = dense._fft_args("fft", cp.empty(shape, cp.complex64), None, None, None)
            geo = geometry("fft", shape, "complex64", n, axes, dense._FFT_ND)
            cb = build_callbacks(geo, None, _gauss_text(1), {"c": 0.1}, ()).epilog
            arch = str(cp.cuda.Device().compute_capability)
            _, how1, first = cbk.text_ltoir(cb, "complex64", "ust_fft_epilog", arch)
            _, how2, again = cbk.text_ltoir(cb, "complex64", "ust_fft_epilog", arch)
            rows.append(_row("callback compile (NVRTC -dlto)", how1, "-", "-", 1e3 * first))
            rows.append(_row("callback load from ust's cache", how2, "-", "-", 1e3 * again))
            x = cp.ones(shape, cp.complex64)
            t0 = time.perf_counter()
            with dense.FFT(x, "fft", options={"callbacks": "fused"}) as f:
                f.plan(epilog=_gauss_text(1) + " + 0.5", params={"c": 0.1})
                plan_ms = 1e3 * (time.perf_counter() - t0)
            rows.append(
                _row("plan with a new callback (compile + cuFFT JIT link)", f.route, "-", "-", plan_ms)
            )
        except Exception as exc:
            rows.append(
                _row("callback compile", f"n/a ({type(exc).__name__}: {str(exc)[:80]})", "-", "-", "-")
            )
        finally:
            if old is None:
                os.environ.pop("UST_CACHE_DIR", None)
            else:
                os.environ["UST_CACHE_DIR"] = old
    return rows


# ----------------------------------------------------------------------------------- CPU cases


def cpu_cases(scale: float, fft_log2: int = 20) -> list[dict[str, Any]]:
    import scipy.fft

    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    m = int(1_000_000 * scale)
    a = rng.standard_normal((m, 10), dtype=np.float32)
    b = rng.standard_normal((10, 40), dtype=np.float32)
    c = rng.standard_normal((m, 40), dtype=np.float32)
    base = time_cpu(lambda: 1.5 * (a @ b) + 0.5 * c)
    one = time_cpu(lambda: dense.matmul(a, b, c=c, alpha=1.5, beta=0.5))
    mm = dense.Matmul(a, b, c, alpha=1.5, beta=0.5)
    mm.plan()
    st = time_cpu(mm.execute)
    err = float(np.abs(mm.execute() - (1.5 * (a.astype(np.float64) @ b) + 0.5 * c)).max())
    case = f"tall-skinny {m:,} x 10 @ 10 x 40 f32, alpha/beta, c"
    rows.append(_row(case, f"one-shot ({mm.route})", "NumPy 1.5*(a@b)+0.5*c", base, one))
    rows.append(_row(case, "stateful execute", "NumPy 1.5*(a@b)+0.5*c", base, st))
    rows[-1]["max_abs_err"] = err
    mm.free()

    def stateful10() -> None:
        with dense.Matmul(a, b, c, alpha=1.5, beta=0.5) as obj:
            obj.plan()
            for _ in range(10):
                obj.execute()

    def oneshot10() -> None:
        for _ in range(10):
            dense.matmul(a, b, c=c, alpha=1.5, beta=0.5)

    rows.append(
        _row(
            "amortised, tall-skinny x 10",
            "stateful: plan + 10 execute",
            "10 ust one-shot calls",
            time_cpu(oneshot10, repeat=3),
            time_cpu(stateful10, repeat=3),
        )
    )

    nb = max(2, int(64 * scale))
    A = rng.standard_normal((nb, 256, 256), dtype=np.float32)
    B = rng.standard_normal((nb, 256, 256), dtype=np.float32)
    bias = rng.standard_normal(256, dtype=np.float32)
    base = time_cpu(lambda: np.maximum(A @ B + bias, 0))
    one = time_cpu(lambda: dense.matmul(A, B, epilog="relu_bias", epilog_inputs={"bias": bias}))
    rows.append(
        _row(
            f"batched {nb} x (256 x 256) f32, relu+bias", "one-shot", "NumPy maximum(a@b+bias, 0)", base, one
        )
    )
    base = time_cpu(
        lambda: (lambda y: 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y**3))))(A @ B + bias)
    )
    one = time_cpu(lambda: dense.matmul(A, B, epilog="gelu_bias", epilog_inputs={"bias": bias}))
    rows.append(
        _row(f"batched {nb} x (256 x 256) f32, gelu+bias", "one-shot", "NumPy gelu(a@b+bias)", base, one)
    )

    n = 1 << fft_log2
    x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    base = time_cpu(lambda: scipy.fft.fft(x))
    np_base = time_cpu(lambda: np.fft.fft(x))
    one = time_cpu(lambda: dense.fft(x))
    f = dense.FFT(x, "fft")
    f.plan()
    st = time_cpu(f.execute)
    case = f"fft 2^{n.bit_length() - 1} complex128"
    rows.append(_row(case, "one-shot (workers=all)", "scipy.fft.fft (1 worker)", base, one))
    rows.append(_row(case, "stateful execute", "numpy.fft.fft", np_base, st))
    f.free()
    return rows + cpu_filter(scale)


def cpu_filter(scale: float) -> list[dict[str, Any]]:
    """FFT, Gaussian filter, inverse FFT on the CPU: ust's callbacks (one array pass) vs NumPy / SciPy."""
    side = max(64, int(1024 * scale**0.5))
    return [
        r
        for shape in ((side, side), (max(1 << 12, int((1 << 20) * scale)),))
        for r in _cpu_filter_case(shape)
    ]


def _cpu_filter_case(shape: tuple[int, ...]) -> list[dict[str, Any]]:
    import scipy.fft

    rng = np.random.default_rng(5)
    nd = len(shape)
    axes = tuple(range(nd))
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    sigma = shape[0] / 16
    c = 1.0 / (2 * sigma * sigma)
    h = _gauss_filter(np, shape, sigma, np.float32)
    text = _gauss_text(nd)

    def base_run() -> Any:
        return scipy.fft.ifftn(scipy.fft.fftn(x, axes=axes, workers=-1) * h, axes=axes, workers=-1)

    def ust_run() -> Any:
        return dense.ifftn(dense.fftn(x, axes=axes), axes=axes, prolog=text, params={"c": c})

    def ust_array() -> Any:
        hidx = "h[" + ", ".join(f"k{i}" for i in range(nd)) + "]"
        return dense.ifftn(dense.fftn(x, axes=axes), axes=axes, prolog=f"v * {hidx}", params={"h": h})

    want = base_run()
    case = f"gaussian filter {'x'.join(map(str, shape))} complex64"
    rows = []
    base = time_cpu(base_run)
    for name, fn in (("ifftn(prolog=text)", ust_run), ("ifftn(prolog='v * h[k...]')", ust_array)):
        row = _row(case, name, "scipy.fft fftn * h ifftn", base, time_cpu(fn))
        row["rel_err"] = float(np.abs(fn() - want).max() / np.abs(want).max())
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ reporting


def _row(
    case: str,
    variant: str,
    baseline: str,
    base_ms: float | str,
    ust_ms: float | str,
    *,
    goal: float | None = None,
    goal_ratio: float | None = None,
) -> dict[str, Any]:
    ratio = ust_ms / base_ms if isinstance(base_ms, float) and isinstance(ust_ms, float) else None
    row: dict[str, Any] = {
        "case": case,
        "ust": variant,
        "baseline": baseline,
        "baseline_ms": base_ms,
        "ust_ms": ust_ms,
        "ratio": ratio,
    }
    if goal is not None:
        row["goal"] = (
            f"ust < {goal} ms: {'met' if isinstance(ust_ms, float) and ust_ms < goal else 'not met'}"
        )
    if goal_ratio is not None:
        row["goal"] = (
            f"ratio <= {goal_ratio}: {'met' if ratio is not None and ratio <= goal_ratio else 'not met'}"
        )
    return row


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 100 else f"{v:.1f}"
    return str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| case | ust | ust ms | baseline | baseline ms | ust / baseline | goal |\n|---|---|---:|---|---:|---:|---|\n"
    body = "".join(
        f"| {r['case']} | {r['ust']} | {_fmt(r['ust_ms'])} | {r['baseline']} | {_fmt(r['baseline_ms'])} | "
        f"{'' if r['ratio'] is None else format(r['ratio'], '.2f')} | {r.get('goal', '')} |\n"
        for r in rows
    )
    return head + body


def machine(device: str) -> str:
    if device == "cpu":
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.system()}"
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return f"{name}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, CuPy {cp.__version__}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--scale", type=float, default=1.0, help="shrink the problem sizes (e.g. 0.1)")
    p.add_argument(
        "--fft-log2", type=int, default=None, help="FFT length 2^N (default 24 on the GPU, 20 on the CPU)"
    )
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("benchmarks", "results"))
    p.add_argument("--append-results", action="store_true", help="append the table to benchmarks/RESULTS.md")
    p.add_argument("--cases", choices=("all", "callbacks"), default="all", help="callbacks: only issue 21's")
    args = p.parse_args(argv)
    if args.device == "gpu":
        rows = gpu_cases(args.scale, args.fft_log2 or 24, args.cases)
    elif args.cases == "callbacks":
        rows = cpu_filter(args.scale)
    else:
        rows = cpu_cases(args.scale, args.fft_log2 or 20)
    table = markdown(rows)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(args.device),
        "command": "python -m benchmarks.bench_dense " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    with open(os.path.join(args.out, "bench_dense.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "rows": rows}, f, indent=1, default=str)
    with open(os.path.join(args.out, "bench_dense.md"), "w", encoding="utf-8") as f:
        f.write(table)
    if args.append_results:
        title = "## Dense (CPU)" if args.device == "cpu" else "## Dense (GPU)"
        with open(os.path.join("benchmarks", "RESULTS.md"), "a", encoding="utf-8") as f:
            f.write(f"\n{title}\n\n{meta['date']}, {meta['machine']}, `{meta['command'].strip()}`\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
