"""The fused GPU Krylov kernels (ust.backends.cuda.krylov_kernels) without a GPU.

* Importing the module, and solving with ``ust.linalg.cg`` on the CPU, imports no CuPy.
* Every dtype's CUDA source compiles with NVRTC (the library of the ``nvrtc`` extra; no GPU).
* The same source, compiled by the host C++ compiler with one thread per CUDA thread (a barrier
  per block for ``__syncthreads``, blocks one after another), runs under a stand-in CuPy: the
  Python wrappers, the kernels' index arithmetic, reductions and complex arithmetic are checked
  against NumPy, and CG through them against the unfused device-scalar recurrence.  The real
  device runs are tests/gpu/test_krylov_kernels_gpu.py.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.api import krylov
from ust.api.precond import build_preconditioner
from ust.backends.cuda import krylov_kernels as kk
from ust.backends.cuda.nvrtc import compile_cuda, find_nvrtc

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_module_imports_and_builds_its_source_without_cupy() -> None:
    code = (
        "import sys\n"
        "sys.modules['cupy'] = None  # CuPy absent: importing it fails\n"
        "from ust.backends.cuda import krylov_kernels as k\n"
        "from ust.runtime.errors import BackendUnavailableError\n"
        "for dt in k.DTYPES: assert 'ust_krylov_cg_step_jacobi_ratio' in k.kernel_source(dt)\n"
        "try:\n"
        "    k.dot(None, None)\n"
        "except BackendUnavailableError:\n"
        "    print('unavailable')\n"
        "assert sys.modules['cupy'] is None\n"
    )
    assert _python(code) == "unavailable"


def test_cg_imports_no_cupy_and_the_cpu_path_no_fused_module() -> None:
    _python("import ust, sys; ust.linalg.cg; assert 'cupy' not in sys.modules")
    code = (
        "import sys, numpy as np, scipy.sparse as sp, ust\n"
        "a = sp.diags_array([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(30, 30)).tocsr()\n"
        "x, info = ust.linalg.cg(a, np.ones(30), M='jacobi')\n"
        "assert info == 0\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'cupy' or m.endswith('krylov_kernels')]\n"
        "print(','.join(bad))\n"
    )
    assert _python(code) == ""


def test_the_cpu_path_is_not_fused() -> None:
    s = krylov._Setup(np, lambda v: v, None, np.ones(3), 1e-8, 10, 1, None)
    assert krylov._fused_ops(s) is None


def test_other_dtypes_are_refused() -> None:
    with pytest.raises(TypeError, match="float32, float64, complex64, complex128"):
        kk.kernel_source(np.float16)


@pytest.mark.skipif(find_nvrtc() is None, reason="libnvrtc not found (the nvrtc extra)")
@pytest.mark.parametrize("dtype", kk.DTYPES)
def test_every_kernel_compiles_with_nvrtc(dtype: str) -> None:
    from ust.backends.cuda.kernels import nvrtc_options

    src = kk.kernel_source(dtype)
    assert "#include" not in src  # NVRTC has no host headers
    ptx = compile_cuda(src, nvrtc_options("90"), name=f"krylov_{dtype}.cu", target="ptx").decode()
    for name in kk.KERNEL_NAMES:
        assert f".entry {name}(" in ptx
    assert not re.search(r"^\s*(atom|red)\.", ptx, re.M)  # no atomics: reproducible sums
    assert compile_cuda(src, nvrtc_options("90"), name=f"krylov_{dtype}.cu")[:4] == b"\x7fELF"


# ------------------------------------------------------------------------- Jacobi's vector


def test_jacobi_says_its_inverse_diagonal() -> None:
    a = sp.diags_array([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(20, 20)).tocsr()
    pre = build_preconditioner("jacobi", ust.asarray(a))
    r = np.random.default_rng(0).standard_normal(20)
    for dt in (np.float64, np.float32):
        d = pre.diagonal_inverse(dt)
        assert d.dtype == dt and d.shape == (20,)
        np.testing.assert_array_equal(pre.apply(r.astype(dt)), r.astype(dt) * d)
    assert pre.diagonal_inverse(np.complex128) is None  # a complex r on a real A: apply casts


# ------------------------------------------------------------------------- the emulation

PRELUDE = r"""
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>
struct ust_dim { unsigned x; };
thread_local ust_dim threadIdx;
ust_dim blockIdx, gridDim;
std::barrier<>* ust_bar;
#define __syncthreads() ust_bar->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) alignas(n)
using std::fabs;
"""

LAUNCHERS = r"""
template <class F> static void ust_run(unsigned grid, F f) {
    gridDim.x = grid;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        std::barrier<> bar(UST_BLOCK);
        ust_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < UST_BLOCK; ++t) ts.emplace_back([&, t] { threadIdx.x = t; f(); });
        for (auto& th : ts) th.join();
    }
}
extern "C" void emu_ust_krylov_dot(unsigned g, const T* a, const T* b, long long n, T* part) {
    ust_run(g, [=] { ust_krylov_dot(a, b, n, part); });
}
extern "C" void emu_ust_krylov_sum_rows(unsigned g, const T* part, long long nb, T* out) {
    ust_run(g, [=] { ust_krylov_sum_rows(part, nb, out); });
}
#define EMU_CG(NAME)                                                                              \
    extern "C" void emu_##NAME(unsigned g, T* x, T* r, const T* p, const T* q, const T* num,      \
                               const T* den, const T* dinv, T* z, long long n, T* part) {          \
        ust_run(g, [=] { NAME(x, r, p, q, num, den, dinv, z, n, part); });                         \
    }
EMU_CG(ust_krylov_cg_step)
EMU_CG(ust_krylov_cg_step_ratio)
EMU_CG(ust_krylov_cg_step_jacobi)
EMU_CG(ust_krylov_cg_step_jacobi_ratio)
#define EMU_XPBY(NAME)                                                                            \
    extern "C" void emu_##NAME(unsigned g, const T* z, const T* num, const T* den, T* p, long long n) { \
        ust_run(g, [=] { NAME(z, num, den, p, n); });                                              \
    }
EMU_XPBY(ust_krylov_xpby)
EMU_XPBY(ust_krylov_xpby_ratio)
"""

#: A small block and grid cap in the emulation: grid-stride loops, several blocks and the
#: partials' second pass all run on short vectors, and few host threads are started.
EMU_BLOCK = 32
EMU_MAX_BLOCKS = 4


@functools.cache
def _cxx() -> str | None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None
    probe = subprocess.run(
        [cxx, "-std=c++20", "-fsyntax-only", "-x", "c++", "-"],
        input="#include <barrier>\nstd::barrier<> b(1);\n",
        capture_output=True,
        text=True,
    )
    return cxx if probe.returncode == 0 else None


class FakeArray(np.ndarray):
    """A NumPy array that says it is a CuPy array on device 0."""

    @property
    def device(self) -> Any:
        return types.SimpleNamespace(id=0)

    @property
    def data(self) -> Any:
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


FakeArray.__module__ = "cupy"


def _fake(a: Any) -> FakeArray:
    return np.asarray(a).view(FakeArray)


class _Device:
    def __init__(self, i: int = 0) -> None:
        self.id = i

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _stand_in_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.ndarray = FakeArray
    # fresh buffers hold NaN, as device garbage would poison a kernel that reads before writing
    cp.empty = lambda shape, dtype=float: _fake(np.full(shape, np.nan, dtype=dtype))
    cp.empty_like = lambda a: _fake(np.full_like(np.asarray(a), np.nan))
    cp.zeros_like = lambda a: _fake(np.zeros_like(np.asarray(a)))
    cp.ascontiguousarray = lambda a, dtype=None: _fake(np.ascontiguousarray(np.asarray(a), dtype=dtype))
    cp.vdot = lambda a, b: _fake(np.asarray(np.vdot(np.asarray(a), np.asarray(b))))
    cp.linalg = types.SimpleNamespace(norm=lambda a: np.linalg.norm(np.asarray(a)))
    cp.cuda = types.SimpleNamespace(Device=_Device)
    return cp


def _argument(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        assert a.flags.c_contiguous
        return ctypes.c_void_p(a.__array_interface__["data"][0])
    assert isinstance(a, np.int64), type(a)
    return ctypes.c_longlong(int(a))


class Emulator:
    """The kernels of each dtype built as a host library; ``launches`` names every launch."""

    def __init__(self, cxx: str, where: Path) -> None:
        self.cxx = cxx
        self.where = where
        self.launches: list[str] = []
        self._libs: dict[str, ctypes.CDLL] = {}

    def library(self, dtype: str) -> ctypes.CDLL:
        if dtype not in self._libs:
            src = PRELUDE + kk.kernel_source(dtype) + LAUNCHERS
            so = self.where / f"krylov_{dtype}_{hashlib.sha256(src.encode()).hexdigest()[:12]}.so"
            cpp = so.with_suffix(".cpp")
            cpp.write_text(src)
            cmd = [self.cxx, "-std=c++20", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-pthread"]
            subprocess.run([*cmd, "-o", str(so), str(cpp)], check=True, capture_output=True)
            self._libs[dtype] = ctypes.CDLL(str(so))
        return self._libs[dtype]

    def functions(self, dtype: str, device_id: int) -> dict[str, Any]:
        lib = self.library(dtype)

        def kernel(name: str) -> Any:
            fn = getattr(lib, "emu_" + name)
            fn.restype = None

            def launch(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
                assert block == (kk.BLOCK,) and len(grid) == 1 and 1 <= grid[0] <= kk.MAX_BLOCKS
                self.launches.append(name)
                fn(ctypes.c_uint(grid[0]), *(_argument(a) for a in args))

            return launch

        return {name: kernel(name) for name in kk.KERNEL_NAMES}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Emulator:
    cxx = _cxx()
    if cxx is None:
        pytest.skip("no C++20 compiler with <barrier> (g++ 11 or later) for the kernel emulation")
    return Emulator(cxx, tmp_path_factory.mktemp("krylov_kernels"))


@pytest.fixture
def cp(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    from ust.backends.cuda import arrays

    fake = _stand_in_cupy()
    monkeypatch.setattr(arrays, "import_cupy", lambda *a, **k: fake)
    monkeypatch.setattr(kk, "_functions", emulator.functions)
    monkeypatch.setattr(kk, "BLOCK", EMU_BLOCK)
    monkeypatch.setattr(kk, "MAX_BLOCKS", EMU_MAX_BLOCKS)
    emulator.launches.clear()
    return fake


def _random(rng: np.random.Generator, n: int, dt: str) -> FakeArray:
    v = rng.standard_normal(n)
    if np.dtype(dt).kind == "c":
        v = v + 1j * rng.standard_normal(n)
    return _fake(v.astype(dt))


def _scalar(rng: np.random.Generator, dt: str) -> FakeArray:
    return _fake(np.asarray(_random(rng, 1, dt)).reshape(()))


def _tol(dt: str) -> float:
    return 1e-5 if dt in ("float32", "complex64") else 1e-12


def _close(got: Any, want: Any, dt: str, scale: float = 1.0) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert np.all(np.abs(got - want) <= _tol(dt) * (np.abs(want) + scale)), (got, want)


#: Lengths: empty, one block, a block boundary, several blocks, past the grid cap (grid-stride).
SIZES = [0, 1, 31, 32, 33, 100, 128, 129, 700]


@pytest.mark.parametrize("dtype", kk.DTYPES)
def test_dot_is_vdot(cp: Any, emulator: Emulator, dtype: str) -> None:
    for n in SIZES:
        rng = np.random.default_rng(n)
        a, b = _random(rng, n, dtype), _random(rng, n, dtype)
        emulator.launches.clear()
        d = kk.dot(a, b)
        assert d.shape == () and d.dtype == dtype
        scale = float(np.linalg.norm(a) * np.linalg.norm(b))
        _close(d, np.vdot(np.asarray(a), np.asarray(b)), dtype, scale)
        assert len(emulator.launches) == (1 if n <= EMU_BLOCK else 2)


@pytest.mark.parametrize("dtype", kk.DTYPES)
@pytest.mark.parametrize("jacobi", [False, True])
@pytest.mark.parametrize("ratio", [False, True])
def test_cg_step_is_the_unfused_update(
    cp: Any, emulator: Emulator, dtype: str, jacobi: bool, ratio: bool
) -> None:
    for n in SIZES:
        rng = np.random.default_rng(n)
        x, r, p, q = (_random(rng, n, dtype) for _ in range(4))
        dinv = _random(rng, n, dtype) if jacobi else None
        num, den = _scalar(rng, dtype), _scalar(rng, dtype)
        alpha = np.asarray(num) / np.asarray(den) if ratio else np.asarray(num)
        x0, r0 = np.array(x), np.array(r)
        emulator.launches.clear()
        z, rz, rr = kk.cg_step(x, r, p, q, (num, den) if ratio else num, dinv)
        r_want = r0 - alpha * np.asarray(q)
        z_want = r_want * np.asarray(dinv) if jacobi else r_want
        _close(x, x0 + alpha * np.asarray(p), dtype)
        _close(r, r_want, dtype)
        _close(z, z_want, dtype)
        assert jacobi or z is r
        assert rz.shape == () and rz.dtype == dtype
        assert rr.shape == () and rr.dtype == np.empty(0, dtype).real.dtype
        _close(rz, np.vdot(r_want, z_want), dtype, float(np.linalg.norm(r_want) * np.linalg.norm(z_want)))
        _close(rr, np.vdot(r_want, r_want).real, dtype)
        assert len(emulator.launches) == (1 if n <= EMU_BLOCK else 2)
        # bitwise reproducible, and into a given z
        again = [(_fake(x0.copy()), _fake(r0.copy())) for _ in range(2)]
        outs = [kk.cg_step(xa, ra, p, q, (num, den) if ratio else num, dinv) for xa, ra in again]
        for k in range(3):
            assert np.asarray(outs[0][k]).tobytes() == np.asarray(outs[1][k]).tobytes()
        assert np.asarray(again[0][0]).tobytes() == np.asarray(again[1][0]).tobytes()
        if jacobi:
            buf = cp.empty(n, dtype)
            zb = kk.cg_step(
                _fake(x0.copy()), _fake(r0.copy()), p, q, (num, den) if ratio else num, dinv, out=buf
            )
            assert zb[0] is buf and np.asarray(buf).tobytes() == np.asarray(outs[0][0]).tobytes()


@pytest.mark.parametrize("dtype", kk.DTYPES)
@pytest.mark.parametrize("ratio", [False, True])
def test_xpby_is_the_unfused_update(cp: Any, emulator: Emulator, dtype: str, ratio: bool) -> None:
    for n in SIZES:
        rng = np.random.default_rng(n)
        z, p = _random(rng, n, dtype), _random(rng, n, dtype)
        num, den = _scalar(rng, dtype), _scalar(rng, dtype)
        beta = np.asarray(num) / np.asarray(den) if ratio else np.asarray(num)
        p0 = np.array(p)
        emulator.launches.clear()
        assert kk.xpby(z, (num, den) if ratio else num, p) is p
        _close(p, np.asarray(z) + beta * p0, dtype)
        assert emulator.launches == ["ust_krylov_xpby_ratio" if ratio else "ust_krylov_xpby"]


def test_written_vectors_must_be_contiguous(cp: Any) -> None:
    x = _fake(np.zeros(8))
    with pytest.raises(ValueError, match="written in place"):
        kk.xpby(x, _fake(np.ones(())), x[::2])
    with pytest.raises(TypeError, match="stays on the device"):
        kk.xpby(x, 1.0, x)


class _Jacobi:
    def __init__(self, d: np.ndarray) -> None:
        self.inv = _fake(1 / d)

    def apply(self, r: Any) -> Any:
        return r * self.inv

    def diagonal_inverse(self, dtype: Any) -> Any:
        return self.inv if np.dtype(dtype) == self.inv.dtype else None


def _system(dtype: str) -> tuple[sp.csr_array, FakeArray]:
    m = 12
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    e = sp.eye_array(m)
    a = (sp.kron(t, e) + sp.kron(e, t) + sp.diags_array(np.linspace(0.5, 3.0, m * m))).astype(dtype)
    rng = np.random.default_rng(0)
    b = rng.standard_normal(m * m) + (1j * rng.standard_normal(m * m) if np.dtype(dtype).kind == "c" else 0)
    return a.tocsr(), _fake(b.astype(dtype))


@pytest.mark.parametrize("dtype", kk.DTYPES)
@pytest.mark.parametrize("pre", ["none", "jacobi", "other"])
@pytest.mark.parametrize("check_every", [1, 8])
def test_fused_cg_is_the_unfused_recurrence(
    cp: Any, emulator: Emulator, monkeypatch: pytest.MonkeyPatch, dtype: str, pre: str, check_every: int
) -> None:
    a, b = _system(dtype)
    d = a.diagonal()
    jac = _Jacobi(d)
    psolve = {"none": None, "jacobi": jac.apply, "other": lambda r: _fake(np.asarray(r) / d)}[pre]
    rtol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    tol = rtol * float(np.linalg.norm(b))
    seen: list[int] = []

    def solve(fused: bool) -> krylov.KrylovOutcome:
        monkeypatch.setattr(krylov, "FUSED_GPU_CG", fused)
        emulator.launches.clear()
        seen.clear()
        return krylov.run(
            "cg",
            lambda v: _fake(a @ np.asarray(v)),
            b,
            None,
            xp=cp,
            tol=tol,
            maxiter=500,
            psolve=psolve,
            check_every=check_every,
            callback=lambda x: seen.append(1),
        )

    fused = solve(True)
    launches = len(emulator.launches)
    assert len(seen) == fused.iterations
    plain = solve(False)
    assert emulator.launches == []
    assert fused.info == plain.info == 0
    assert fused.iterations == plain.iterations
    err = np.linalg.norm(np.asarray(fused.x) - np.asarray(plain.x)) / np.linalg.norm(np.asarray(plain.x))
    assert err <= (1e-4 if dtype in ("float32", "complex64") else 1e-10)
    # the first r^H z (2 kernels); per iteration p^H q (2), the step (2), p = z + beta p (1), and
    # r^H z again (2) after a preconditioner that is not fused; the last iteration stops after the step
    per = 5 + (2 if pre == "other" else 0)
    assert launches == 2 + per * (fused.iterations - 1) + 4


def test_fused_cg_breakdown_returns_the_last_finite_iterate(cp: Any) -> None:
    a = sp.diags_array([1.0, -1.0, 2.0, 3.0]).tocsr()  # indefinite: p^H A p = 0 at the first step
    b = _fake(np.array([1.0, 1.0, 0.0, 0.0]))
    out = krylov.run("cg", lambda v: _fake(a @ np.asarray(v)), b, None, xp=cp, tol=1e-8, maxiter=10)
    assert out.info == -1 and out.breakdown is not None
    assert np.all(np.isfinite(np.asarray(out.x)))


def test_the_switches_turn_fusion_off(cp: Any, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _system("float64")
    s = krylov._Setup(cp, lambda v: _fake(a @ np.asarray(v)), None, b, 1e-8, 10, 1, None)
    assert krylov._fused_ops(s) is kk
    monkeypatch.setenv("UST_KRYLOV_FUSED", "0")
    assert krylov._fused_ops(s) is None
    monkeypatch.delenv("UST_KRYLOV_FUSED")
    monkeypatch.setattr(krylov, "FUSED_GPU_CG", False)
    assert krylov._fused_ops(s) is None
