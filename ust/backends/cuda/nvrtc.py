"""NVRTC through ctypes: compile CUDA C++ to a cubin without CuPy, and without a GPU.

Used at run time by :mod:`ust.backends.cuda.kernels` (the cubin goes into ust's artefact
cache and is loaded by CuPy) and by CI, which compiles every generated kernel with the run-
time options on a machine with no GPU.  The library is found, in order, through
``$UST_NVRTC_PATH``, ``cuda.pathfinder``, the ``nvidia-cuda-nvrtc`` wheels (CUDA 13's
``nvidia/cu13/lib`` and CUDA 12's ``nvidia/cuda_nvrtc/lib``), ``$CUDA_PATH``/``$CUDA_HOME``,
``/usr/local/cuda`` and the dynamic loader.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import logging
import os
import sys
import threading
from pathlib import Path

from ust.runtime.errors import BackendUnavailableError, UstError
from ust.runtime.log import get_logger

__all__ = ["NvrtcError", "compile_cuda", "find_nvrtc", "load_nvrtc", "nvrtc_version"]

_log = get_logger("backends.cuda.nvrtc")
_log.addHandler(logging.NullHandler())

PIP_COMMAND = "pip install nvidia-cuda-nvrtc"
_lock = threading.Lock()


class NvrtcError(UstError):
    """NVRTC rejected a program; ``log`` holds the compiler's messages."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


def _candidates() -> list[str]:
    out: list[str] = []
    env = os.environ.get("UST_NVRTC_PATH")
    if env:
        out.append(env)
    try:  # pragma: no cover - optional dependency
        from ust.backends.cuda._lib import pathfinder_usable

        if pathfinder_usable():
            from cuda import pathfinder

            out.append(pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:
        pass
    for base in sys.path:
        for pattern in (
            "nvidia/cu*/lib/libnvrtc.so*",
            "nvidia/cuda_nvrtc/lib/libnvrtc.so*",
            "nvidia/cu*/bin/nvrtc64_*.dll",
        ):
            out += sorted(glob.glob(os.path.join(base, pattern)), reverse=True)
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root:
            out += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    out += sorted(glob.glob("/usr/local/cuda/lib64/libnvrtc.so*"), reverse=True)
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    return [p for p in out if "builtins" not in Path(p).name and "alt" not in Path(p).name]


@functools.cache
def find_nvrtc() -> str | None:
    """Path (or loader name) of a loadable libnvrtc, or None."""
    for path in _candidates():
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        return path
    return None


@functools.cache
def load_nvrtc() -> ctypes.CDLL:
    """The NVRTC library with argument types declared; BackendUnavailableError if missing."""
    path = find_nvrtc()
    if path is None:
        raise BackendUnavailableError("NVRTC (libnvrtc) was not found", pip_command=PIP_COMMAND)
    lib = ctypes.CDLL(path)
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    lib.nvrtcCreateProgram.argtypes = [
        ctypes.POINTER(vp),
        cp,
        cp,
        ctypes.c_int,
        ctypes.POINTER(cp),
        ctypes.POINTER(cp),
    ]
    lib.nvrtcCompileProgram.argtypes = [vp, ctypes.c_int, ctypes.POINTER(cp)]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]
    lib.nvrtcGetProgramLogSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetProgramLog.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetCUBINSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetCUBIN.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvrtcGetPTX.argtypes = [vp, ctypes.c_char_p]
    if hasattr(lib, "nvrtcGetLTOIR"):  # CUDA >= 12.0: link-time-optimisable IR (``-dlto``)
        lib.nvrtcGetLTOIRSize.argtypes = [vp, ctypes.POINTER(sz)]
        lib.nvrtcGetLTOIR.argtypes = [vp, ctypes.c_char_p]
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    _log.info("loaded NVRTC from %s", path)
    return lib


def nvrtc_version() -> tuple[int, int]:
    lib = load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        msg = lib.nvrtcGetErrorString(status)
        raise NvrtcError(f"{what} failed: {msg.decode() if msg else status}")


def compile_cuda(
    source: str, options: tuple[str, ...], *, name: str = "ust.cu", target: str = "cubin"
) -> bytes:
    """Compile ``source`` with NVRTC and return the cubin (PTX: ``target="ptx"``, LTO-IR: ``"ltoir"``) bytes.

    ``options`` must name the architecture (``--gpu-architecture=sm_90`` for a cubin); LTO-IR
    needs ``-dlto`` among them and an NVRTC of CUDA 12 or later (BackendUnavailableError otherwise).
    A program that does not compile raises :class:`NvrtcError` carrying NVRTC's log.
    """
    lib = load_nvrtc()
    if target == "ltoir" and not hasattr(lib, "nvrtcGetLTOIR"):
        raise BackendUnavailableError(
            "this NVRTC cannot emit LTO-IR (CUDA 12 or later needed)", pip_command=PIP_COMMAND
        )
    prog = ctypes.c_void_p()
    with _lock:
        _check(
            lib,
            lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
    try:
        opts = [o.encode() for o in options]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status != 0:
            raise NvrtcError(f"NVRTC could not compile {name} (options {' '.join(options)})", log)
        get_size, get = {
            "cubin": (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN),
            "ptx": (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX),
            "ltoir": (getattr(lib, "nvrtcGetLTOIRSize", None), getattr(lib, "nvrtcGetLTOIR", None)),
        }[target]
        assert get_size is not None and get is not None  # checked above
        get_size(prog, ctypes.byref(size))
        out = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, out), f"reading the {target}")
        return out.raw[: size.value]
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
