"""What this installation can do: versions, devices, and every route's availability.

Each probe is a row of a table (name, what it enables, how to check, the pip extra that
fixes it); nothing is imported at ``import ust`` time, only when ``ust info`` asks.
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


def _cupy_device() -> str:
    from ust.backends.cuda.arrays import import_cupy

    cupy = import_cupy()
    n = int(cupy.cuda.runtime.getDeviceCount())
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


_PROBES = (
    _Probe(
        "C compiler",
        "generated C kernels on the CPU",
        _compiler,
        "install a C compiler (apt-get install gcc)",
    ),
    _Probe(
        "CuPy + CUDA device",
        "every GPU route",
        _cupy_device,
        'pip install "ust[cu13]" (or "ust[cu12]") and a CUDA driver',
    ),
    _Probe("cuSPARSE", "cuSPARSE SpMV/SpMM/SpGEMM/SDDMM", _library("cusparse"), 'pip install "ust[cu13]"'),
    _Probe("cuDSS", "the GPU direct solver (ust.solve)", _library("cudss"), 'pip install "ust[cu13]"'),
    _Probe("cuBLASLt", "dense matmul with fused epilogues", _library("cublasLt"), 'pip install "ust[cu13]"'),
    _Probe("cuFFT", "GPU FFTs", _library("cufft"), 'pip install "ust[cu13]"'),
    _Probe("NVRTC", "generated CUDA kernels", _library("nvrtc"), 'pip install "ust[cu13]"'),
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
    for p in _PROBES:
        try:
            detail, ok = p.check(), True
        except Exception as exc:
            detail, ok = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", False
        routes.append(
            {
                "name": p.name,
                "enables": p.enables,
                "available": ok,
                "detail": detail,
                "fix": None if ok else p.fix,
            }
        )
    return {"versions": versions, "routes": routes}


def format_info(report: dict[str, Any]) -> str:
    lines = ["versions:"]
    lines += [f"  {k:<9} {v}" for k, v in report["versions"].items()]
    lines.append("routes:")
    for r in report["routes"]:
        mark = "yes" if r["available"] else "no "
        lines.append(f"  [{mark}] {r['name']:<19} {r['enables']}")
        lines.append(f"        {r['detail']}")
        if not r["available"]:
            lines.append(f"        fix: {r['fix']}")
    return "\n".join(lines)
