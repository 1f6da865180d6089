"""cuFFT with the user's prologue / epilogue fused in as LTO callbacks, or run as one extra kernel.

Fused route: the callback is compiled to LTO-IR (NVRTC ``-dlto`` for expression text,
numba-cuda for a Python function in nvmath-python's calling convention), cached in ust's
authenticated artefact cache (key: source, options, architecture, NVRTC and cuFFT versions),
and handed to ``cufftXtSetJITCallback`` before the plan is made, so cuFFT links it into its own
kernels: the callback costs no pass over memory.  The call's C signature takes the callback's
symbol name since cuFFT 11.3: CUDA 13's cuFFT (12.x) exports it as ``cufftXtSetJITCallback``,
CUDA 12.8+'s (11.3, 11.4) as ``__cufftXtSetJITCallback_12_7`` (its ``cufftXtSetJITCallback``
keeps the older form without the name, which ust does not call).  Where neither exists, NVRTC
cannot emit LTO-IR, or cuFFT refuses the plan, the same text runs as one generated elementwise
kernel before / after a plain cuFFT call (the "separate" route), and the log says why.

The offset cuFFT passes is the element's flat index in the (C-contiguous, batched) buffer; the
generated body recovers ``k``/``k0, k1, ...`` from it with the array's extents, which are
compile-time constants.  CuPy is imported only inside functions.
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.backends.cuda._lib import declare, load_library
from ust.backends.generated.disk_cache import ArtifactCache
from ust.codegen.cache import content_key
from ust.codegen.fft_callback import (
    FFTCallback,
    callback_symbol,
    callback_type,
    cuda_callback_source,
    cuda_kernel_source,
    param_block,
)
from ust.runtime.errors import BackendUnavailableError, UnsupportedError, UstError
from ust.runtime.log import get_logger

__all__ = [
    "PLANS",
    "CufftError",
    "FusedFFT",
    "Layout",
    "PlanCache",
    "SeparatePass",
    "cufft_version",
    "lto_support",
    "numba_ltoir",
    "text_ltoir",
]

_log = get_logger("backends.cuda.cufft_callbacks")

_CB_TYPES = {
    "LD_COMPLEX": 0,
    "LD_COMPLEX_DOUBLE": 1,
    "LD_REAL": 2,
    "LD_REAL_DOUBLE": 3,
    "ST_COMPLEX": 4,
    "ST_COMPLEX_DOUBLE": 5,
    "ST_REAL": 6,
    "ST_REAL_DOUBLE": 7,
}
#: (transform kind, precision) -> (cufftType, exec function, direction or None).
_TYPES = {
    ("c2c", "single"): (0x29, "cufftExecC2C"),
    ("c2c", "double"): (0x69, "cufftExecZ2Z"),
    ("r2c", "single"): (0x2A, "cufftExecR2C"),
    ("r2c", "double"): (0x6A, "cufftExecD2Z"),
    ("c2r", "single"): (0x2C, "cufftExecC2R"),
    ("c2r", "double"): (0x6C, "cufftExecZ2D"),
}
_STATUS = {
    1: "INVALID_PLAN",
    2: "ALLOC_FAILED",
    3: "INVALID_TYPE",
    4: "INVALID_VALUE",
    5: "INTERNAL_ERROR",
    6: "EXEC_FAILED",
    7: "SETUP_FAILED",
    8: "INVALID_SIZE",
    10: "INCOMPLETE_PARAMETER_LIST",
    11: "INVALID_DEVICE",
    13: "NO_WORKSPACE",
    14: "NOT_IMPLEMENTED",
    16: "NOT_SUPPORTED",
}
NVRTC_LTO_OPTIONS = ("--std=c++17", "-dlto", "--relocatable-device-code=true")
NUMBA_PIP = 'pip install "ust[cu13,fft-callbacks]"'


class CufftError(UstError):
    """cuFFT returned an error status."""

    def __init__(self, what: str, status: int) -> None:
        super().__init__(f"{what} failed: CUFFT_{_STATUS.get(status, status)}")
        self.status = status


# ------------------------------------------------------------------------------------ the library


@dataclass(frozen=True)
class _Api:
    lib: Any
    version: int
    set_jit: Any  # None: no LTO callbacks with a symbol name
    jit_name: str


@functools.cache
def _api() -> _Api:
    lib = load_library("cufft")
    i, vp, ll, sz = ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_size_t
    declare(lib, "cufftCreate", i, [ctypes.POINTER(i)])
    declare(lib, "cufftDestroy", i, [i])
    declare(lib, "cufftSetStream", i, [i, vp])
    declare(lib, "cufftGetVersion", i, [ctypes.POINTER(i)])
    declare(
        lib,
        "cufftMakePlanMany64",
        i,
        [
            i,
            i,
            ctypes.POINTER(ll),
            ctypes.POINTER(ll),
            ll,
            ll,
            ctypes.POINTER(ll),
            ll,
            ll,
            i,
            ll,
            ctypes.POINTER(sz),
        ],
    )
    for name in ("cufftExecC2C", "cufftExecZ2Z"):
        declare(lib, name, i, [i, vp, vp, i])
    for name in ("cufftExecR2C", "cufftExecD2Z", "cufftExecC2R", "cufftExecZ2D"):
        declare(lib, name, i, [i, vp, vp])
    version = ctypes.c_int()
    lib.cufftGetVersion(ctypes.byref(version))
    set_jit, jit_name = None, ""
    # CUDA 12.8+ (cuFFT 11.3, 11.4): the form with the symbol name under its own name first
    for name, floor in (("__cufftXtSetJITCallback_12_7", 11300), ("cufftXtSetJITCallback", 12000)):
        if version.value >= floor and hasattr(lib, name):
            set_jit = declare(lib, name, i, [i, ctypes.c_char_p, vp, sz, i, ctypes.POINTER(vp)])
            jit_name = name
            break
    return _Api(lib, version.value, set_jit, jit_name)


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CufftError(what, status)


@functools.cache
def lto_support() -> tuple[bool, str]:
    """(True, how) where cuFFT here links LTO callbacks and NVRTC emits LTO-IR; else (False, why)."""
    try:
        api = _api()
    except BackendUnavailableError as exc:
        return False, f"cuFFT could not be loaded ({str(exc).split(';')[0]})"
    if api.set_jit is None:
        return False, (
            f"cuFFT {api.version} has no cufftXtSetJITCallback taking a symbol name "
            "(CUDA 12.8 or later is needed for LTO callbacks)"
        )
    try:
        # cuFFT links the callbacks with nvJitLink, which it opens by name at planning time: loaded
        # here (globally) from wherever the wheels or the toolkit keep it (where it cannot be
        # found, cuFFT may still find it itself; a refused plan falls back to separate kernels)
        load_library("nvJitLink")
    except BackendUnavailableError as exc:
        _log.info("nvJitLink not preloaded for cuFFT's LTO callbacks: %s", str(exc)[:200])
    try:
        from ust.backends.cuda.nvrtc import load_nvrtc

        if not hasattr(load_nvrtc(), "nvrtcGetLTOIR"):
            return False, "this NVRTC cannot emit LTO-IR"
    except BackendUnavailableError as exc:
        return False, f"NVRTC is unavailable ({exc})"
    return True, f"cuFFT {api.version} links LTO callbacks through {api.jit_name}"


def cufft_version() -> int:
    return _api().version


# ---------------------------------------------------------------------------------- compilation


def _arch(device_id: int) -> str:
    import cupy

    return str(cupy.cuda.Device(device_id).compute_capability)


def text_ltoir(cb: FFTCallback, dtype: str, symbol: str, arch: str) -> tuple[bytes, str, float]:
    """LTO-IR of an expression callback: (bytes, "compiled" | "cache", seconds)."""
    from ust.backends.cuda.nvrtc import compile_cuda, nvrtc_version

    t0 = time.perf_counter()
    source = cuda_callback_source(cb, dtype, symbol)
    opts = (*NVRTC_LTO_OPTIONS, f"--gpu-architecture=compute_{arch}")
    key = content_key(source, "nvrtc-ltoir", repr(nvrtc_version()), opts, str(cufft_version()))
    art = ArtifactCache("cuda").get_or_build(
        key, ".ltoir", lambda: compile_cuda(source, opts, name=f"{symbol}.cu", target="ltoir")
    )
    how = "compiled" if art.built else "cache"
    seconds = time.perf_counter() - t0
    _log.info(
        "FFT %s callback: LTO-IR %s in %.1f ms (%d bytes)", cb.site.phase, how, 1e3 * seconds, len(art.data)
    )
    return art.data, how, seconds


_NUMBA_MEMO: dict[Any, bytes] = {}


def _numba_disk_key(fn: Any, parts: tuple[str, ...]) -> str | None:
    """A content key for ust's artefact cache, or None when the function's meaning is not all in
    its source: it reads a global that is neither a number nor a module (a helper that could change
    elsewhere), or Python cannot show its source."""
    import inspect
    import types as pytypes

    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    values = []
    for name in fn.__code__.co_names:
        if name not in fn.__globals__:
            continue
        v = fn.__globals__[name]
        if isinstance(v, pytypes.ModuleType):
            values.append(f"{name}=module {v.__name__}")
        elif isinstance(v, (int, float, complex)) and not isinstance(v, bool):
            values.append(f"{name}={v!r}")
        else:
            return None
    for cell in fn.__closure__ or ():
        v = cell.cell_contents
        if isinstance(v, pytypes.ModuleType):
            values.append(f"module {v.__name__}")
        elif isinstance(v, (int, float, complex)) and not isinstance(v, bool):
            values.append(repr(v))
        else:
            return None
    return content_key(source, "numba-ltoir", values, parts)


def _numba_key(fn: Any) -> Any:
    """What a compiled Python callback depends on: its code, constants, and the numbers it reads."""
    code = fn.__code__
    closure = tuple(c.cell_contents for c in fn.__closure__ or ())
    glob = tuple(
        (n, fn.__globals__.get(n))
        for n in code.co_names
        if isinstance(fn.__globals__.get(n), (int, float, complex))
    )
    return (code.co_code, code.co_consts, code.co_names, repr(closure), glob)


def numba_ltoir(
    fn: Any, phase: str, value_dtype: str, info_dtype: str, symbol: str, arch: str
) -> tuple[bytes, str, float]:
    """LTO-IR of a Python callback compiled by numba-cuda (nvmath-python's calling convention).

    Prologue ``fn(data_in, offset, info, shared) -> element``; epilogue ``fn(data_out, offset,
    element, info, shared)`` storing ``data_out[offset]``.  A function numba cannot compile raises
    :class:`UnsupportedError` with numba's message; no numba-cuda raises BackendUnavailableError.
    """
    try:
        from numba import cuda, types
    except Exception as exc:  # not installed, or an install that fails on import (NumPy too new)
        raise BackendUnavailableError(
            f"fusing a Python {phase} into cuFFT needs a working numba-cuda "
            f"({type(exc).__name__}: {str(exc)[:200]})",
            pip_command=NUMBA_PIP,
        ) from None
    key = (_numba_key(fn), phase, value_dtype, info_dtype, symbol, arch)
    t0 = time.perf_counter()
    if key in _NUMBA_MEMO:
        return _NUMBA_MEMO[key], "memo", time.perf_counter() - t0
    data = getattr(types, value_dtype)
    ptr, info = types.CPointer(data), types.CPointer(getattr(types, info_dtype))
    if phase == "prolog":
        sig = data(ptr, types.uint64, info, ptr)
    else:
        sig = types.void(ptr, types.uint64, data, info, ptr)

    name = callback_symbol(symbol, phase, value_dtype)  # the C++ name cuFFT resolves for ``symbol``

    def build() -> bytes:
        try:
            ltoir, _ = cuda.compile(
                fn,
                sig,
                device=True,
                abi="c",
                abi_info={"abi_name": name},
                output="ltoir",
                cc=(int(arch[:-1]), int(arch[-1])),
            )
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if isinstance(exc, AttributeError) and "module 'numpy'" in first:
                raise BackendUnavailableError(
                    f"the installed numba-cuda does not work with NumPy {np.__version__} ({first})",
                    pip_command=NUMBA_PIP,
                ) from None
            raise UnsupportedError(
                f"numba-cuda cannot compile the {phase} {getattr(fn, '__name__', fn)!r} ({type(exc).__name__}: {first})"
            ) from None
        return bytes(ltoir)

    import numba

    parts = (phase, value_dtype, info_dtype, name, arch, numba.__version__, str(cufft_version()))
    disk = _numba_disk_key(fn, parts)
    if disk is None:
        data_bytes, how = (
            build(),
            "compiled (not cached on disk: it reads globals beyond numbers and modules)",
        )
    else:
        art = ArtifactCache("cuda").get_or_build(disk, ".ltoir", build)
        data_bytes, how = art.data, "compiled" if art.built else "cache"
    _NUMBA_MEMO[key] = data_bytes
    seconds = time.perf_counter() - t0
    _log.info("FFT %s callback: numba-cuda LTO-IR of %r %s in %.1f ms", phase, fn, how, 1e3 * seconds)
    return data_bytes, how, seconds


# ------------------------------------------------------------------------------- the callbacks


@dataclass
class _Blob:
    """One callback ready for cuFFT: LTO-IR, its symbol and type, and what cuFFT passes as callerInfo."""

    ltoir: bytes
    symbol: str
    cb_type: int
    info_ptr: int


class _ParamBlock:
    """A callback's parameters in device memory: a fixed buffer whose contents ``update`` rewrites
    (cuFFT keeps the pointer it was given at plan time)."""

    def __init__(self, cb: FFTCallback | None) -> None:
        import cupy

        self.cb = cb
        n = 0 if cb is None else len(param_block(cb.params, _zeros(cb), lambda a: 0))
        self.device = cupy.zeros(max(n, 1), dtype=np.uint64)
        self.last: Any = None

    def update(self, values: Mapping[str, Any]) -> None:
        if self.cb is None or not self.cb.params:
            return
        slots = param_block(self.cb.params, values, lambda a: a.data.ptr)
        host = np.array([_bits(s) for s in slots], dtype=np.uint64)
        if self.last is not None and np.array_equal(host, self.last):
            return
        self.device.set(host)
        self.last = host

    @property
    def ptr(self) -> int:
        return int(self.device.data.ptr)


def _zeros(cb: FFTCallback) -> dict[str, Any]:
    return {p.name: (0.0 if not p.is_array else None) for p in cb.params}


def _bits(slot: float | int) -> int:
    if isinstance(slot, float):
        return int(np.float64(slot).view(np.uint64))
    return int(slot)


# ------------------------------------------------------------------------------------ the routes


@dataclass(frozen=True)
class Layout:
    """A transform over the trailing axes of C-contiguous arrays: what cufftMakePlanMany64 needs."""

    kind: str  # "c2c" | "r2c" | "c2r"
    precision: str  # "single" | "double"
    direction: int  # -1 forward, 1 inverse (c2c)
    sizes: tuple[int, ...]  # logical lengths, memory order
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    in_dtype: str
    out_dtype: str


class FusedFFT:
    """A cuFFT plan with LTO callbacks linked in; ``run(x, values)`` returns a fresh output array."""

    route = "cufft.callbacks"
    direct = None

    def __init__(
        self,
        layout: Layout,
        device_id: int,
        prolog: tuple[Any, str] | None,
        epilog: tuple[Any, str] | None,
        dtype: str,
    ) -> None:
        """``prolog`` / ``epilog``: (an FFTCallback, or a Python function with ``fn`` and ``info``,
        and the value dtype it sees)."""
        import cupy

        self.cp = cupy
        self.layout, self.device_id = layout, device_id
        self.compile_seconds = 0.0
        self.how: list[str] = []
        api = _api()
        if api.set_jit is None:
            raise BackendUnavailableError(lto_support()[1])
        with cupy.cuda.Device(device_id):
            arch = _arch(device_id)
            self.blocks: dict[str, _ParamBlock] = {}
            blobs = []
            for phase, spec in (("prolog", prolog), ("epilog", epilog)):
                if spec is None:
                    continue
                cb, value_dtype = spec
                blobs.append(self._blob(phase, cb, value_dtype, dtype, arch))
            handle = ctypes.c_int()
            _check(api.lib.cufftCreate(ctypes.byref(handle)), "cufftCreate")
            self.handle: int | None = handle.value
            try:
                self._infos: list[Any] = []
                for b in blobs:
                    # cuFFT keeps these three pointers and reads them when the plan is made (the
                    # symbol name too): each must live as long as the plan, not just the call
                    info = (ctypes.c_void_p * 1)(b.info_ptr)
                    blob = ctypes.create_string_buffer(b.ltoir, len(b.ltoir))
                    symbol = ctypes.create_string_buffer(b.symbol.encode())
                    self._infos.append((info, blob, symbol))
                    status = api.set_jit(
                        self.handle,
                        symbol,
                        ctypes.cast(blob, ctypes.c_void_p),
                        len(b.ltoir),
                        b.cb_type,
                        info,
                    )
                    _check(status, api.jit_name)
                self._make_plan(api)
            except Exception:
                self.free()
                raise

    def _blob(self, phase: str, cb: Any, value_dtype: str, dtype: str, arch: str) -> _Blob:
        symbol = f"ust_fft_{phase}"
        if hasattr(cb, "fn"):  # a Python function (nvmath-python's convention), compiled by numba-cuda
            info = cb.info
            info_dtype = "float64" if info is None else str(info.dtype)
            ltoir, how, s = numba_ltoir(cb.fn, phase, value_dtype, info_dtype, symbol, arch)
            ptr = 0 if info is None else int(info.data.ptr)
            cbt = _CB_TYPES[("LD_" if phase == "prolog" else "ST_") + _value_type(value_dtype)]
        else:
            ltoir, how, s = text_ltoir(cb, dtype, symbol, arch)
            block = _ParamBlock(cb)
            self.blocks[phase] = block
            ptr = block.ptr
            cbt = _CB_TYPES[callback_type(cb, dtype)]
        self.compile_seconds += s
        self.how.append(f"{phase}: {how}")
        return _Blob(ltoir, symbol, cbt, ptr)

    def _make_plan(self, api: _Api) -> None:
        lay = self.layout
        rank = len(lay.sizes)
        tail_in, tail_out = lay.in_shape[-rank:], lay.out_shape[-rank:]
        arr = ctypes.c_longlong * rank
        batch = math.prod(lay.in_shape[:-rank])
        cufft_type, self._exec_name = _TYPES[(lay.kind, lay.precision)]
        work = ctypes.c_size_t()
        t0 = time.perf_counter()
        _check(
            api.lib.cufftMakePlanMany64(
                self.handle, rank, arr(*lay.sizes), arr(*tail_in), 1, math.prod(tail_in),
                arr(*tail_out), 1, math.prod(tail_out), cufft_type, batch, ctypes.byref(work),
            ),
            "cufftMakePlanMany64 (with LTO callbacks)",
        )  # fmt: skip
        self.plan_seconds = time.perf_counter() - t0
        self._exec = getattr(api.lib, self._exec_name)
        _log.info(
            "cuFFT plan with LTO callbacks: %s %s sizes %s x %d (%s), JIT-linked in %.1f ms",
            lay.kind, lay.precision, lay.sizes, batch, ", ".join(self.how), 1e3 * self.plan_seconds,
        )  # fmt: skip

    def run(self, x: Any, values: Mapping[str, Mapping[str, Any]], stream: int | None = None) -> Any:
        """Transform the prepared input ``x`` (logical shape, C-contiguous, the plan's dtype)."""
        cp = self.cp
        lay = self.layout
        for phase, block in self.blocks.items():
            block.update(values.get(phase, {}))
        out = cp.empty(lay.out_shape, dtype=lay.out_dtype)
        ptr = cp.cuda.get_current_stream().ptr if stream is None else stream
        _check(_api().lib.cufftSetStream(self.handle, ctypes.c_void_p(ptr)), "cufftSetStream")
        if lay.kind == "c2c":
            status = self._exec(self.handle, x.data.ptr, out.data.ptr, lay.direction)
        else:
            status = self._exec(self.handle, x.data.ptr, out.data.ptr)
        _check(status, self._exec_name)
        return out

    def free(self) -> None:
        if self.handle is not None:
            try:
                _api().lib.cufftDestroy(self.handle)
            finally:
                self.handle = None

    def __del__(self) -> None:  # plans hold device memory: give it back with the object
        try:  # noqa: SIM105 - no module globals (contextlib): at interpreter exit they may be gone
            self.free()
        except Exception:
            pass


def _value_type(value_dtype: str) -> str:
    return {
        "complex64": "COMPLEX",
        "complex128": "COMPLEX_DOUBLE",
        "float32": "REAL",
        "float64": "REAL_DOUBLE",
    }[value_dtype]


class SeparatePass:
    """An expression callback as one generated elementwise kernel (the route without fusion)."""

    def __init__(self, cb: FFTCallback, dtype: str, device_id: int) -> None:
        import cupy

        from ust.backends.cuda.kernels import _load_module

        self.cp, self.cb = cupy, cb
        name = f"ust_fft_{cb.site.phase}_pass"
        t0 = time.perf_counter()
        with cupy.cuda.Device(device_id):
            module, self.how = _load_module(cuda_kernel_source(cb, dtype, name), _arch(device_id), name)
            self.fn = module.get_function(name)
            self.block = _ParamBlock(cb)
        self.compile_seconds = time.perf_counter() - t0
        _log.info(
            "FFT %s as a separate kernel: %s in %.1f ms", cb.site.phase, self.how, 1e3 * self.compile_seconds
        )

    def run(self, a: Any, values: Mapping[str, Any], *, in_place: bool) -> Any:
        cp = self.cp
        a = cp.ascontiguousarray(a)
        out = a if in_place else cp.empty_like(a)
        self.block.update(values)
        count = a.size
        threads = 256
        blocks = max(1, min((count + threads - 1) // threads, 65535 * 8))
        self.fn((blocks,), (threads,), (a, out, self.block.device, np.uint64(count)))
        return out


# ------------------------------------------------------------------------------ plan reuse


class PlanCache:
    """Fused plans of one-shot calls, least recently used first out (a cuFFT JIT link costs ~0.1 s)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, build: Any) -> Any:
        hit = self.items.get(key)
        if hit is not None:
            self.items.move_to_end(key)
            return hit
        value = build()
        self.items[key] = value
        while len(self.items) > self.size:
            _, old = self.items.popitem(last=False)
            if hasattr(old, "free"):
                old.free()
        return value


PLANS = PlanCache()
