"""The CUDA route's host side without a GPU: a stand-in ``cupy`` runs each launched kernel's IR
through the interpreter, so argument order, the init/main sequence, layouts, the output and
the NVRTC compile into the artefact cache are all exercised here.  The thread mapping itself
is checked by NVRTC (tests/test_codegen_nvrtc.py) and on the GPU (tests/gpu/)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
from typing import Any

import numpy as np
import pytest

from tests.codegen_cases import ALL_2D, ALL_3D, ALL_BATCHED, check, inputs, is_batched, reference, scalars
from ust.backends.cuda.nvrtc import find_nvrtc
from ust.codegen import interpret
from ust.codegen.emit_cuda import init_params, kernel_params
from ust.codegen.record import replace


class FakeArray(np.ndarray):
    """A NumPy array that says it is a CuPy array."""

    @property
    def device(self) -> Any:
        return types.SimpleNamespace(id=0)


FakeArray.__module__ = "cupy"


def _fake(a: Any) -> FakeArray:
    return np.asarray(a).view(FakeArray)


class _Device:
    def __init__(self, i: int | None = None) -> None:
        self.id = 0 if i is None else i
        self.compute_capability = "90"

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Function:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name = name
        self.calls = calls

    def __call__(self, grid: tuple, block: tuple, args: list[Any]) -> None:
        from ust.backends.cuda import kernels

        assert all(g >= 1 for g in grid) and block == (256,)
        main = self.name.rsplit("_init", 1)[0] if self.name.endswith("_init") else self.name
        ck = next(v for v in kernels._memo._items.values() if v.name == main)
        k = ck.kernel
        if self.name.endswith("_init"):
            params = init_params(k)
            k = replace(k, body=k.init, init=None, params=params)
        else:
            params = kernel_params(k)
            k = replace(k, init=None)
        assert len(args) == len(params)
        named = {}
        for p, a in zip(params, args):
            if p.kind == "iscalar":
                assert isinstance(a, np.integer) and a.dtype == np.dtype(k.itype), (p.name, a)
            elif p.kind == "vscalar":
                assert isinstance(a, np.generic) and a.dtype == np.dtype(k.value_dtype), (p.name, a)
            else:
                assert isinstance(a, FakeArray), p.name
            named[p.name] = np.asarray(a)
        self.calls.append(self.name)
        interpret.run(k, named)


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> list[str]:
    calls: list[str] = []
    cp = types.ModuleType("cupy")
    cp.ndarray = FakeArray  # type: ignore[attr-defined]
    cp.empty = lambda shape, dtype=float: _fake(np.empty(shape, dtype))  # type: ignore[attr-defined]
    cp.ascontiguousarray = lambda a, dtype=None: _fake(np.ascontiguousarray(a, dtype))  # type: ignore[attr-defined]
    cp.asarray = _fake  # type: ignore[attr-defined]
    cuda = types.SimpleNamespace(
        Device=_Device,
        ExternalStream=lambda ptr: contextlib.nullcontext(),
        get_current_stream=lambda: contextlib.nullcontext(),
        driver=types.SimpleNamespace(CUDADriverError=RuntimeError),
    )
    cp.cuda = cuda  # type: ignore[attr-defined]

    class RawModule:
        def __init__(self, code: str | None = None, path: str | None = None, options: tuple = ()) -> None:
            assert path is not None and path.endswith(".cubin")  # ust's own NVRTC compile was used
            with open(path, "rb") as fh:
                assert fh.read(4) == b"\x7fELF"

        def get_function(self, name: str) -> _Function:
            return _Function(name, calls)

    cp.RawModule = RawModule  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path))
    from ust.backends.cuda import kernels
    from ust.codegen.cache import Memo

    monkeypatch.setattr(kernels, "_memo", Memo())
    return calls


pytestmark = pytest.mark.skipif(
    find_nvrtc() is None, reason="libnvrtc not found: pip install nvidia-cuda-nvrtc"
)


def _to_fake(a: Any) -> Any:
    b = dataclasses.replace(a)
    b.values = _fake(a.values)
    b._pos = {k: _fake(v) for k, v in a._pos.items()}
    b._crd = {k: _fake(v) for k, v in a._crd.items()}
    return b


@pytest.mark.parametrize(("op", "layout"), [("mv", "row"), ("mm", "row"), ("mm", "col")])
@pytest.mark.parametrize(
    "name", ["CSR", "DIA", "COO", "BSR[2,3]", "CSC", "DCSR", "NM[2,4]", *ALL_3D[:2], *ALL_BATCHED]
)
def test_cuda_route_host_side(fake_cupy: list[str], name: str, op: str, layout: str) -> None:
    from ust.backends.cuda import kernels

    dtype = "complex128" if name in ("COO", "CSC") else "float64"
    a, dense, x, c = inputs(name, dtype, op, layout, None if op == "mv" else 3)
    alpha, beta = scalars(dtype)
    y = kernels.matmul_cuda(_to_fake(a), _fake(x), _fake(c), alpha=alpha, beta=beta)
    assert isinstance(y, FakeArray)
    check(np.asarray(y), reference(dense, x, c, alpha, beta, is_batched(name)), dtype)
    ck = next(iter(kernels._memo._items.values()))
    assert ck.how == "compiled"
    assert fake_cupy == ([ck.name + "_init"] if ck.init is not None else []) + [ck.name]


def test_group_default_out_and_cache_reload(fake_cupy: list[str]) -> None:
    from ust.backends.cuda import kernels
    from ust.backends.generated.launch import prepare
    from ust.codegen.cache import Memo
    from ust.codegen.schedule import default_group

    a, dense, x, _ = inputs("CSR", "float64", "mv", "row", None)
    assert default_group(a, "mv") == 1  # ~2 entries per row
    fa = _to_fake(a)
    out = _fake(np.empty(6))
    y = kernels.run_launch_cuda(a.format, prepare(fa, _fake(x), out=out), out, "auto", 4)
    assert y is out and fake_cupy[-1].endswith("_g4")
    check(np.asarray(out), dense @ x, "float64")
    kernels._memo = Memo()  # a new process: the cubin comes from the cache
    kernels.run_launch_cuda(a.format, prepare(fa, _fake(x)), None, "auto", 4)
    assert next(iter(kernels._memo._items.values())).how == "cache"


def test_zero_size_launches_nothing(fake_cupy: list[str]) -> None:
    from ust.backends.cuda import kernels

    for name in ALL_2D[:4]:
        a, _dense, x, c = inputs(name, "float64", "mv", "row", None, shape=(0, 12))
        y = kernels.matmul_cuda(_to_fake(a), _fake(x), _fake(c), beta=1.0)
        assert y.shape == (0,)
    assert fake_cupy == []
