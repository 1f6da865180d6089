"""What this installation can do: versions, devices, and every route's availability.

Each probe is a row of a table (name, what it enables, how to check, the pip extra that
fixes it); nothing is imported at ``import ust`` time, only when ``ust info`` asks.  A GPU
library (cuSPARSE, NVRTC, ...) is reported twice over: whether it is *present* (installed and
loadable; NVRTC then compiles) and whether a CUDA *device* answers; it is *available* only with
both, so a machine without a GPU never reads as able to run GPU routes.
"""

from __future__ import annotations

import importlib
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["collect_info", "format_info"]


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "installed"))


def _cupy() -> str:
    from ust.backends.cuda.arrays import import_cupy

    cupy = import_cupy()
    return f"cupy {getattr(cupy, '__version__', 'installed')}"


def _cupy_device() -> str:
    try:
        from ust.backends.cuda.arrays import import_cupy

        cupy = import_cupy()
    except ImportError:
        raise RuntimeError("no CuPy, so no CUDA device can be used") from None
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # no driver, or a driver without a device: CUDA's own error types
        raise RuntimeError(f"no CUDA device answers ({type(exc).__name__}: {exc})") from None
    if n < 1:
        raise RuntimeError("no CUDA device")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{n} device(s); device 0: {name}"


def _library(name: str) -> Callable[[], str]:
    def probe() -> str:
        from ust.backends.cuda._lib import library_path, load_library

        return library_path(load_library(name))

    return probe


def _compiler() -> str:
    import shutil

    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return path
    raise RuntimeError("no cc, gcc or clang on PATH")


def _module(name: str) -> Callable[[], str]:
    def probe() -> str:
        v = _version(name)
        if v is None:
            raise RuntimeError(f"{name} is not importable")
        return f"{name} {v}"

    return probe


@dataclass(frozen=True)
class _Probe:
    name: str
    enables: str
    check: Callable[[], str]
    fix: str
    #: a GPU piece: usable only with a CUDA device too (its own check says whether it is *present*)
    needs_device: bool = False


_DEVICE_FIX = 'a machine with an NVIDIA GPU, its driver installed, and CuPy (pip install "ust[cu13]")'

_PROBES = (
    _Probe(
        "C compiler",
        "generated C kernels on the CPU",
        _compiler,
        "install a C compiler (apt-get install gcc)",
    ),
    _Probe(
        "CuPy", "GPU arrays (every GPU route needs it)", _cupy, 'pip install "ust[cu13]" (or "ust[cu12]")'
    ),
    _Probe("CUDA device", "running anything on the GPU", _cupy_device, _DEVICE_FIX),
    _Probe(
        "cuSPARSE",
        "cuSPARSE SpMV/SpMM/SpGEMM/SDDMM",
        _library("cusparse"),
        'pip install "ust[cu13]"',
        needs_device=True,
    ),
    _Probe(
        "cuDSS",
        "the GPU direct solver (ust.solve)",
        _library("cudss"),
        'pip install "ust[cu13]"',
        needs_device=True,
    ),
    _Probe(
        "cuBLASLt",
        "dense matmul with fused epilogues",
        _library("cublasLt"),
        'pip install "ust[cu13]"',
        needs_device=True,
    ),
    _Probe("cuFFT", "GPU FFTs", _library("cufft"), 'pip install "ust[cu13]"', needs_device=True),
    _Probe(
        "NVRTC",
        "generated CUDA kernels (the compiler; running them needs a device)",
        _library("nvrtc"),
        'pip install "ust[cu13]"',
        needs_device=True,
    ),
    _Probe("PyTorch", "torch operands", _module("torch"), 'pip install "ust[torch]"'),
    _Probe("matplotlib", "Tensor.plot / ust show --png", _module("matplotlib"), 'pip install "ust[plot]"'),
    _Probe("h5py", "Binsparse HDF5 files", _module("h5py"), 'pip install "ust[hdf5]"'),
)


def collect_info() -> dict[str, Any]:
    """A JSON-safe report: versions, and for every optional piece whether it works and why not."""
    import ust

    versions = {"ust": ust.__version__, "python": sys.version.split()[0], "platform": platform.platform()}
    for mod in ("numpy", "scipy", "lark"):
        versions[mod] = _version(mod) or "missing"
    routes = []
    device: tuple[bool, str] | None = None
    for p in _PROBES:
        present, detail = _run(p.check)
        row: dict[str, Any] = {"name": p.name, "enables": p.enables, "present": present}
        available, fix = present, (None if present else p.fix)
        if p.needs_device:
            if device is None:
                device = _run(_cupy_device)
            row["device"] = device[0]
            if present and not device[0]:  # e.g. NVRTC compiles here, but nothing can run what it builds
                detail = f"{detail}; but no CUDA device to run on ({device[1]})"
                available, fix = False, _DEVICE_FIX
        row.update(available=available, detail=detail, fix=fix)
        routes.append(row)
    return {"versions": versions, "routes": routes}


def _run(check: Callable[[], str]) -> tuple[bool, str]:
    """(whether the check passed, its detail or the first line of why not)."""
    try:
        return True, check()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def format_info(report: dict[str, Any]) -> str:
    lines = ["versions:"]
    lines += [f"  {k:<9} {v}" for k, v in report["versions"].items()]
    lines.append("routes:")
    for r in report["routes"]:
        mark = "yes" if r["available"] else "no "
        lines.append(f"  [{mark}] {r['name']:<19} {r['enables']}")
        if "device" in r:  # a GPU piece: present (installed) and device (a GPU answers) are separate
            have = "present" if r["present"] else "missing"
            lines.append(f"        library {have}; CUDA device {'present' if r['device'] else 'missing'}")
        lines.append(f"        {r['detail']}")
        if not r["available"]:
            lines.append(f"        fix: {r['fix']}")
    return "\n".join(lines)
