"""The one loader of vendor shared libraries (cuDSS, cuSPARSE, cuBLAS(Lt), cuFFT, NVRTC).

Search order: ``cuda.pathfinder`` when installed (it knows the NVIDIA wheels, conda and the
toolkit), then the NVIDIA wheel directories on ``sys.path`` (``nvidia/*/lib``: ``nvidia/cudss/lib``
for CUDA 12 wheels, ``nvidia/cu13/lib`` for CUDA 13), ``$CUDA_HOME`` / ``$CUDA_PATH``
(``lib64``, ``lib``), then the system loader (``LD_LIBRARY_PATH``, ``ctypes.util.find_library``).
Libraries are opened with ``RTLD_GLOBAL`` so that a library loaded first (libcublas) satisfies
the dependencies of one loaded later (libcudss).  A library that is nowhere raises
:class:`~ust.runtime.errors.BackendUnavailableError` with the pip command that installs it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import os
import re
import site
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ust.runtime import versions
from ust.runtime.errors import BackendUnavailableError
from ust.runtime.log import get_logger

__all__ = [
    "candidate_dirs",
    "declare",
    "find_file",
    "library_path",
    "load_library",
    "pathfinder_usable",
    "pip_command",
]

_log = get_logger("backends.cuda.lib")

# Library short name -> the wheel extra that ships it (all are in ust[cu12] / ust[cu13]).
_WHEEL = {
    "cudss": "nvidia-cudss",
    "cusparse": "nvidia-cusparse",
    "cublas": "nvidia-cublas",
    "cublasLt": "nvidia-cublas",
    "cufft": "nvidia-cufft",
    "nvrtc": "nvidia-cuda-nvrtc",
}


def pip_command(extra: str = "cu13") -> str:
    return f'pip install "ust[{extra}]"'


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    with contextlib.suppress(AttributeError):  # some virtualenvs lack it
        dirs += site.getsitepackages()
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user, str):
        dirs.append(user)
    return list(dict.fromkeys(dirs))


def candidate_dirs() -> list[str]:
    """Directories searched for vendor libraries, in order (wheel dirs, then the toolkit)."""
    dirs: list[str] = []
    for base in _site_dirs():
        dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    dirs.append("/usr/local/cuda/lib64")
    dirs += sorted(glob.glob("/usr/local/cuda-*/lib64"), key=_version_key, reverse=True)
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _version_key(path: str) -> tuple[int, ...]:
    tail = path.rpartition(".so")[2]
    return tuple(int(p) for p in tail.split(".") if p.isdigit())


def find_file(pattern: str, dirs: Iterable[str] | None = None) -> str | None:
    """The first file matching the glob ``pattern`` in ``dirs`` (highest version in a directory)."""
    for d in candidate_dirs() if dirs is None else dirs:
        hits = sorted(glob.glob(os.path.join(d, pattern)), key=_version_key, reverse=True)
        if hits:
            return hits[0]
    return None


def _find_in_dirs(name: str, dirs: Iterable[str], major: int | None = None) -> str | None:
    exact = re.compile(rf"^lib{re.escape(name)}\.so(\.\d+)*$")
    for d in dirs:
        hits = [p for p in glob.glob(os.path.join(d, f"lib{name}.so*")) if exact.match(os.path.basename(p))]
        if major is not None:
            hits = [p for p in hits if _version_key(p)[:1] == (major,)]
        if hits:
            return max(hits, key=_version_key)
    return None


@functools.cache
def pathfinder_usable() -> bool:
    """True when ``cuda.pathfinder`` is installed in a version ust accepts
    (:mod:`ust.runtime.versions`; an older one does not know every library ust loads)."""
    try:
        import importlib.metadata

        installed = importlib.metadata.version("cuda-pathfinder")
    except Exception:  # not installed (or no metadata: then the import below decides)
        installed = None
    found = versions.parse_version(installed) if installed else None
    floor = versions.minimum("cuda-pathfinder")
    if found is not None and found < floor:
        _log.debug(
            "cuda-pathfinder %s is older than %s: not used, the library directories are searched",
            installed,
            versions.version_text(floor),
        )
        return False
    try:
        import cuda.pathfinder  # noqa: F401
    except ImportError:
        return False
    return True


def _via_pathfinder(name: str) -> str | None:
    if not pathfinder_usable():
        return None
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        return None
    try:
        loaded = load_nvidia_dynamic_lib(name)
    except Exception as exc:  # DynamicLibNotFoundError, or a name this pathfinder does not know
        _log.debug("cuda.pathfinder did not find %s: %s", name, exc)
        return None
    return getattr(loaded, "abs_path", None)


def _open(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)


@functools.cache
def load_library(
    name: str, extra: str = "cu13", sonames: Sequence[str] = (), major: int | None = None
) -> ctypes.CDLL:
    """Open ``lib<name>.so`` (e.g. ``"cudss"``, ``"cublasLt"``) once per process.

    ``sonames`` are extra file names to try with the system loader (``"libcudss.so.0"``);
    ``major`` restricts the search to ``lib<name>.so.<major>*`` (e.g. the libcublas a libcudss
    was linked against).  ``$UST_<NAME>_LIBRARY`` (e.g. ``UST_CUDSS_LIBRARY``), when set, is
    the full path to use instead of any search.
    """
    tried: list[str] = []
    override = os.environ.get(f"UST_{name.upper()}_LIBRARY")
    path = override or (None if major is not None else _via_pathfinder(name))
    if override:
        tried.append(f"$UST_{name.upper()}_LIBRARY={override}")
    elif path:
        tried.append(f"cuda.pathfinder: {path}")
    else:
        tried.append("cuda.pathfinder (not installed, not found, or a specific major was asked for)")
        dirs = candidate_dirs()
        path = _find_in_dirs(name, dirs, major)
        tried.append("directories: " + (", ".join(dirs) or "none found"))
    names = [path] if path else []
    if major is not None:
        names.append(f"lib{name}.so.{major}")
    names += [*sonames] + ([] if major is not None else [f"lib{name}.so"])
    found = ctypes.util.find_library(name)
    if found and not override and (major is None or _version_key(found)[:1] == (major,)):
        names.append(found)
    if override:
        names = [override]
    errors = []
    for candidate in names:
        try:
            lib = _open(candidate)
        except OSError as exc:
            errors.append(f"{candidate}: {exc}")
            continue
        _log.debug("loaded %s from %s", name, candidate)
        return lib
    other = "cu12" if extra == "cu13" else "cu13"
    raise BackendUnavailableError(
        f"the {name} library (lib{name}.so, from the {_WHEEL.get(name, 'NVIDIA')} wheel) could not be loaded; "
        f"searched {'; '.join(tried)}; errors: {'; '.join(errors) or 'none'}. "
        f'For CUDA {other[2:]} use pip install "ust[{other}]"',
        pip_command=pip_command(extra),
    )


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def library_path(lib: ctypes.CDLL, symbol: str | None = None) -> str:
    """The absolute path of a loaded library, for finding its siblings (asks ``dladdr`` about ``symbol``)."""
    name = str(lib._name)
    if os.path.isabs(name) or symbol is None:
        return os.path.realpath(name) if os.path.isabs(name) else name
    libdl = ctypes.CDLL(ctypes.util.find_library("dl") or "libdl.so.2")
    libdl.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    libdl.dladdr.restype = ctypes.c_int
    info = _DlInfo()
    addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
    if libdl.dladdr(addr, ctypes.byref(info)) and info.dli_fname:
        return os.path.realpath(info.dli_fname.decode())
    return name


def declare(lib: ctypes.CDLL, name: str, restype: Any, argtypes: Sequence[Any]) -> Callable[..., Any]:
    """Bind ``name`` from ``lib`` with its argument and result types declared."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise BackendUnavailableError(
            f"{name} is missing from {lib._name}; this version of the library is too old or too new for ust"
        ) from None
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn
