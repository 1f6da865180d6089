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
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ust.backends.generated.disk_cache import Artifact, ArtifactCache, private_copy
from ust.codegen.cache import content_key
from ust.runtime.errors import BackendUnavailableError, UstError
from ust.runtime.log import get_logger

__all__ = [
    "THREADS_HELPER",
    "Toolchain",
    "compile_shared",
    "dlopen_bytes",
    "load_library",
    "thread_setter",
    "toolchain",
]

_log = get_logger(__name__)

BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-std=c99")
_PROBE = "#include <stdint.h>\nint ust_probe(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < n; ++i) s += i;\nreturn s; }\n"

#: Appended to every generated C library (not to the emitted kernel text, which stays as
#: codegen and its golden files have it): ``ust_set_threads(n)`` sets the OpenMP thread count
#: of the calling thread's next parallel regions and returns the previous one, so the launcher
#: applies :func:`ust.runtime.cpu_threads.threads` just before each call and restores the
#: process's setting after it.  Without OpenMP it does nothing and returns 1.
THREADS_HELPER = (
    "\n#ifdef _OPENMP\n#include <omp.h>\n#endif\n"
    "int ust_set_threads(int n) {\n#ifdef _OPENMP\n  int prev = omp_get_max_threads();\n"
    "  if (n > 0) omp_set_num_threads(n);\n  return prev;\n#else\n  (void)n;\n  return 1;\n#endif\n}\n"
)


def thread_setter(lib: ctypes.CDLL) -> Any:
    """The library's ``ust_set_threads`` (from :data:`THREADS_HELPER`), typed for ctypes."""
    fn = lib.ust_set_threads
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int]
    return fn


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
    global probe_compiles
    probe_compiles += 1
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


#: Test compiles run by this process (the probe, uncached); tests read it.
probe_compiles = 0
_PROBE_SUFFIX = ".probe"


def _probe_key(cc: str, version_text: str, native: bool) -> str | None:
    """The cache key of a probe result: the compiler's path (and where it leads), its whole
    ``--version`` output, its binary's size and modification time, the flags probed and, when
    tuning for the host, the CPU model; None if the compiler cannot be inspected."""
    try:
        st = os.stat(cc)
    except OSError:
        return None
    parts = [cc, os.path.realpath(cc), version_text, str(st.st_size), str(st.st_mtime_ns)]
    parts += [_PROBE, " ".join(BASE_FLAGS), platform.machine(), "native" if native else "portable"]
    if native:
        parts.append(_cpu_model())
    return content_key("ust-toolchain-probe-v1", *parts)


def _cached_probe(key: str) -> dict[str, Any] | None:
    """The probe result stored under ``key`` (authenticated by :class:`ArtifactCache`, which
    refuses and logs a tampered or foreign entry), or None."""
    data = ArtifactCache("c").lookup(key, _PROBE_SUFFIX)
    if data is None:
        return None
    try:
        rec = json.loads(data.decode())
        if not isinstance(rec, dict) or not isinstance(rec.get("usable"), bool):
            raise ValueError("no 'usable'")
        if rec["usable"]:
            flags, host, openmp = rec.get("flags"), rec.get("host"), rec.get("openmp")
            if not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
                raise ValueError("bad 'flags'")
            if not isinstance(host, str) or not isinstance(openmp, bool):
                raise ValueError("bad 'host' or 'openmp'")
    except (ValueError, UnicodeDecodeError) as exc:
        _log.warning("ignoring the cached toolchain probe %s (%s); probing again", key, exc)
        return None
    return rec


def _probe(cc: str, native: bool) -> dict[str, Any]:
    """Test-compile with OpenMP (then without), and with ``-march=native`` when asked."""
    flags: tuple[str, ...] = (*BASE_FLAGS, "-fopenmp")
    openmp = True
    if not _try_compile(cc, flags):
        if not _try_compile(cc, BASE_FLAGS):
            return {"usable": False}
        openmp = False
        flags = BASE_FLAGS
    host = platform.machine()
    if native and _try_compile(cc, (*flags, "-march=native")):
        flags = (*flags, "-march=native")
        host = f"{host} {_cpu_model()}"
    return {"usable": True, "flags": list(flags), "host": host, "openmp": openmp}


_VERSION_SUFFIX = ".ccversion"
#: ``cc --version`` subprocesses run by this process (tests read it).
version_runs = 0


def _binary_identity(cc: str) -> str | None:
    """The cache key of ``cc --version``'s answer: the compiler's path, where it leads, and
    that binary's size, modification and change times (None if it cannot be inspected)."""
    try:
        real = os.path.realpath(cc)
        st = os.stat(real)
    except OSError:
        return None
    return content_key(
        "ust-cc-version-v1", cc, real, str(st.st_size), str(st.st_mtime_ns), str(st.st_ctime_ns)
    )


def _version_output(cc: str) -> tuple[int, str] | None:
    """``(returncode, output)`` of ``cc --version``, read back from the kernel cache (kind ``c``,
    authenticated like every entry) while the compiler binary is unchanged: a process's first
    generated C kernel then starts no subprocess.  None if the compiler cannot be run."""
    key = _binary_identity(cc)
    if key is not None:
        data = ArtifactCache("c").lookup(key, _VERSION_SUFFIX)
        if data is not None:
            try:
                rec = json.loads(data.decode())
                if isinstance(rec.get("returncode"), int) and isinstance(rec.get("text"), str):
                    return rec["returncode"], rec["text"]
            except (ValueError, UnicodeDecodeError, AttributeError):
                pass
            _log.warning("ignoring the cached version of %s (malformed); asking the compiler", cc)
    global version_runs
    version_runs += 1
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout or out.stderr
    if key is not None and out.returncode == 0:
        rec = {"returncode": out.returncode, "text": text}
        ArtifactCache("c").store(key, _VERSION_SUFFIX, json.dumps(rec, sort_keys=True).encode())
    return out.returncode, text


@functools.cache
def _toolchain(cc: str | None, native: bool) -> Toolchain | None:
    """Probed once per process; a successful OpenMP probe is kept in the kernel cache (kind
    ``c``, suffix ``.probe``, authenticated like every entry) per compiler identity
    (:func:`_probe_key`), so a new process reads it back instead of test-compiling again.
    A refused entry (tampered, foreign, unsafe directory) is logged and the probe runs again.
    ``ust cache clear`` drops it (needed only if the OpenMP runtime is removed while the
    compiler binary stays the same)."""
    if cc is None:
        return None
    answer = _version_output(cc)
    if answer is None:
        return None
    returncode, text = answer
    version = text.splitlines()[0] if text.strip() else cc
    key = _probe_key(cc, f"{returncode}\n{text}", native)
    rec = None if key is None else _cached_probe(key)
    if rec is not None:
        _log.info("toolchain probe of %s: cached result used", cc)
    else:
        t0 = time.perf_counter()
        rec = _probe(cc, native)
        _log.info("toolchain probe of %s: %.1f ms", cc, 1e3 * (time.perf_counter() - t0))
        if key is not None and rec["usable"] and rec["openmp"]:
            # only a full success is kept: a missing OpenMP runtime may be installed later
            # without changing the compiler binary, and a degraded result must not outlive that
            ArtifactCache("c").store(key, _PROBE_SUFFIX, json.dumps(rec, sort_keys=True).encode())
    if not rec["usable"]:
        _log.warning("the C compiler %s cannot build shared libraries; generated C kernels are off", cc)
        return None
    if not rec["openmp"]:
        _log.warning("the C compiler %s has no OpenMP: generated C kernels run on one thread", cc)
    return Toolchain(cc, version, tuple(rec["flags"]), rec["host"])


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


def quiet_openmp() -> None:
    """Make OpenMP's idle threads sleep rather than spin (``OMP_WAIT_POLICY=PASSIVE``) unless
    the user chose a policy, before the first kernel library loads the OpenMP runtime (which
    reads the variable once).  Spinning threads keep a core busy for milliseconds after each
    parallel kernel, and the BLAS threads of the NumPy calls in between (a Krylov solver's dot
    products) then wait for that core: CG on Poisson 60^3 took 4x longer on a 2-core machine
    with a busy neighbour process (1.95 s against 0.5 s)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def load_library(source: str, *, name: str = "kernel") -> ctypes.CDLL:
    """Compile (or find in the cache) and ``dlopen`` the library of ``source``."""
    t0 = time.perf_counter()
    quiet_openmp()
    art = compile_shared(source, name=name)
    lib = dlopen_bytes(art.data, f"{name}.so")
    if not art.built:
        _log.info("loaded C kernel %s from the cache in %.1f ms", name, 1e3 * (time.perf_counter() - t0))
    return lib
