"""Compile generated C with the system compiler and load it with ctypes.

The compiler is ``$UST_CC``, ``$CC``, or the first of ``cc``, ``gcc``, ``clang`` on the PATH;
flags ``-O3 -fopenmp -fPIC -shared -std=c99`` (OpenMP dropped, with one warning, where the
compiler lacks it), plus ``-march=native`` with ``UST_NATIVE=1`` (off by default: it doubles
compile time and measured no gain on SpMV, which is bound by memory).  Tuning for the host puts
the CPU model into the cache key, so a shared cache directory never hands one machine's
library to another.  Artefacts go through :class:`ust.backends.generated.disk_cache.ArtifactCache`, which
authenticates them; a library is loaded from a private copy of the verified bytes, never from
the cache file itself (see :func:`dlopen_bytes`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ust.backends.generated.disk_cache import Artifact, ArtifactCache, private_copy
from ust.codegen.cache import content_key
from ust.runtime.errors import BackendUnavailableError, UstError
from ust.runtime.log import get_logger

__all__ = ["Toolchain", "compile_shared", "dlopen_bytes", "load_library", "toolchain"]

_log = get_logger(__name__)

BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c99")
_PROBE = "#include <stdint.h>\nint ust_probe(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < n; ++i) s += i;\nreturn s; }\n"


@dataclass(frozen=True)
class Toolchain:
    """A usable C compiler: its path, version line, flags and the host it tunes for."""

    cc: str
    version: str
    flags: tuple[str, ...]
    host: str

    def key_parts(self) -> tuple[str, ...]:
        return (self.cc, self.version, " ".join(self.flags), self.host)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown-cpu"


def _try_compile(cc: str, flags: tuple[str, ...]) -> bool:
    with tempfile.TemporaryDirectory(prefix="ust-probe-") as d:
        src = Path(d) / "probe.c"
        src.write_text(_PROBE)
        try:
            r = subprocess.run(
                [cc, *flags, "-o", str(Path(d) / "probe.so"), str(src)],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0


def find_compiler() -> str | None:
    """Path of the C compiler to use, or None."""
    for env in ("UST_CC", "CC"):
        v = os.environ.get(env)
        if v:
            found = shutil.which(v)
            if found:
                return found
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


@functools.cache
def _toolchain(cc: str | None, native: bool) -> Toolchain | None:
    if cc is None:
        return None
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
        version = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else cc
    except (OSError, subprocess.TimeoutExpired):
        return None
    flags: tuple[str, ...] = (*BASE_FLAGS, "-fopenmp")
    if not _try_compile(cc, flags):
        if not _try_compile(cc, BASE_FLAGS):
            _log.warning("the C compiler %s cannot build shared libraries; generated C kernels are off", cc)
            return None
        _log.warning("the C compiler %s has no OpenMP: generated C kernels run on one thread", cc)
        flags = BASE_FLAGS
    host = platform.machine()
    if native and _try_compile(cc, (*flags, "-march=native")):
        flags = (*flags, "-march=native")
        host = f"{host} {_cpu_model()}"
    return Toolchain(cc, version, flags, host)


def toolchain() -> Toolchain | None:
    """The C toolchain (probed once per compiler and tuning choice), or None without a compiler."""
    native = os.environ.get("UST_NATIVE", "0") not in ("0", "false", "no", "")
    return _toolchain(find_compiler(), native)


def compile_shared(source: str, tc: Toolchain | None = None, *, name: str = "kernel") -> Artifact:
    """The shared library built from ``source`` (verified bytes from the cache, or just built)."""
    tc = tc or toolchain()
    if tc is None:
        raise BackendUnavailableError("no C compiler found (set UST_CC or install cc/gcc/clang)")
    key = content_key(source, *tc.key_parts())

    def build() -> bytes:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="ust-cc-") as d:
            src = Path(d) / f"{name}.c"
            lib = Path(d) / f"{name}.so"
            src.write_text(source)
            r = subprocess.run(
                [tc.cc, *tc.flags, "-o", str(lib), str(src)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if r.returncode != 0:
                raise UstError(f"the C compiler failed on generated kernel {name}:\n{r.stderr[-4000:]}")
            data = lib.read_bytes()
        _log.info("compiled C kernel %s in %.1f ms", name, 1e3 * (time.perf_counter() - t0))
        return data

    return ArtifactCache("c").get_or_build(key, ".so", build)


_memfds: list[int] = []  # kept open: fd numbers are reused, and the loader matches libraries by path


def dlopen_bytes(data: bytes, name: str) -> ctypes.CDLL:
    """``dlopen`` a private copy of ``data`` (bytes already verified), never a shared path.

    The copy is a fresh file in this process's 0700 directory, removed once loaded; where that
    directory cannot map code (a ``noexec`` temporary file system) an anonymous memory file
    (``memfd_create``) is used instead.
    """
    path = private_copy(data, name)
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        first = exc
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        except OSError:
            os.close(fd)
        else:
            _memfds.append(fd)
            return lib
    raise UstError(f"cannot load the compiled library {name}: {first}") from first


def load_library(source: str, *, name: str = "kernel") -> ctypes.CDLL:
    """Compile (or find in the cache) and ``dlopen`` the library of ``source``."""
    t0 = time.perf_counter()
    art = compile_shared(source, name=name)
    lib = dlopen_bytes(art.data, f"{name}.so")
    if not art.built:
        _log.info("loaded C kernel %s from the cache in %.1f ms", name, 1e3 * (time.perf_counter() - t0))
    return lib
