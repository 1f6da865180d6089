"""The runtime core on the CPU: spaces, transfers, logging, streams, stateful base, saved plans, loader."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import json
import logging
import subprocess
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

from ust.backends.cuda import _lib
from ust.backends.cuda.arrays import import_cupy
from ust.runtime import log as ust_log
from ust.runtime.errors import (
    BackendUnavailableError,
    DeviceError,
    InvalidStateError,
    UnsupportedError,
    UstError,
)
from ust.runtime.spaces import (
    CPU,
    ExecutionSpace,
    log_placement,
    operand_package,
    operand_space,
    parse_execution,
    resolve_space,
    to_package,
    to_space,
)
from ust.runtime.stateful import PlanFileError, StatefulOperation, decode_array, encode_array
from ust.runtime.streams import current_stream, stream_pointer

# ------------------------------------------------------------------ fakes standing in for GPU objects


def _fake(module: str, name: str, **attrs: object) -> object:
    cls = type(name, (), {})
    cls.__module__ = module
    obj = cls()
    for k, v in attrs.items():
        setattr(obj, k, v)
    return obj


def fake_cupy(device_id: int) -> object:
    return _fake("cupy._core.core", "ndarray", device=types.SimpleNamespace(id=device_id))


def fake_cupyx(device_id: int) -> object:
    data = types.SimpleNamespace(device=types.SimpleNamespace(id=device_id))
    return _fake("cupyx.scipy.sparse._csr", "csr_matrix", data=data)


def fake_torch(kind: str, index: int | None) -> object:
    return _fake("torch", "Tensor", device=types.SimpleNamespace(type=kind, index=index))


# ------------------------------------------------------------------ execution spaces


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("cpu", CPU),
        ("CPU", CPU),
        ("cuda", ExecutionSpace("cuda", None)),
        ("cuda:3", ExecutionSpace("cuda", 3)),
        (1, ExecutionSpace("cuda", 1)),
        ({"name": "cuda", "device_id": 2}, ExecutionSpace("cuda", 2)),
        (ExecutionSpace("cuda", 0), ExecutionSpace("cuda", 0)),
    ],
)
def test_parse_execution(value: object, expected: ExecutionSpace | None) -> None:
    assert parse_execution(value) == expected


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cpu:0", -1, True, 1.5])
def test_parse_execution_rejects(bad: object) -> None:
    with pytest.raises(DeviceError, match=r"execution|device"):
        parse_execution(bad)


def test_space_text() -> None:
    assert str(CPU) == "cpu" and CPU.describe() == "cpu"
    assert str(ExecutionSpace("cuda", 1)) == "cuda:1"
    assert ExecutionSpace("cuda", 1).describe() == "cuda device 1"
    assert hash(ExecutionSpace("cuda", 1)) == hash(ExecutionSpace("cuda", 1))


def test_operand_package_and_space() -> None:
    cases = [
        (np.zeros(3), "numpy", CPU),
        (sp.csr_array(np.eye(2)), "scipy", CPU),
        (sp.coo_matrix(np.eye(2)), "scipy", CPU),
        ([1.0, 2.0], "numpy", CPU),
        (fake_cupy(1), "cupy", ExecutionSpace("cuda", 1)),
        (fake_cupyx(2), "cupyx", ExecutionSpace("cuda", 2)),
        (fake_torch("cpu", None), "torch", CPU),
        (fake_torch("cuda", 3), "torch", ExecutionSpace("cuda", 3)),
        (_fake("ust.tensor", "Tensor", device="cuda:1"), "ust", ExecutionSpace("cuda", 1)),
        (_fake("ust.tensor", "Tensor", device="cpu"), "ust", CPU),
    ]
    for x, pkg, space in cases:
        assert operand_package(x) == pkg
        assert operand_space(x) == space


def test_operand_package_unknown() -> None:
    with pytest.raises(UnsupportedError, match="supported: NumPy"):
        operand_package(_fake("pandas.core.frame", "DataFrame"))


def test_resolve_space_defaults_and_overrides() -> None:
    a, b = sp.csr_array(np.eye(2)), np.ones(2)
    assert resolve_space([a, b]) == CPU
    assert resolve_space([]) == CPU
    assert resolve_space([a, None]) == CPU
    assert resolve_space([fake_cupy(1), fake_cupyx(1)]) == ExecutionSpace("cuda", 1)
    assert resolve_space([a, b], "cuda") == ExecutionSpace("cuda", 0)
    assert resolve_space([fake_cupy(2), b], "cuda") == ExecutionSpace("cuda", 2)
    assert resolve_space([fake_cupy(2)], "cpu") == CPU
    assert resolve_space({"a": fake_cupy(0), "b": fake_torch("cuda", 1)}, "cuda:1") == ExecutionSpace(
        "cuda", 1
    )


def test_resolve_space_mixed_devices_names_each_operand() -> None:
    with pytest.raises(DeviceError) as info:
        resolve_space({"a": sp.csr_array(np.eye(2)), "b": fake_cupy(1)})
    msg = str(info.value)
    assert "a is on cpu" in msg and "b is on cuda:1" in msg and "execution=" in msg
    assert isinstance(info.value, ValueError) and isinstance(info.value, UstError)
    with pytest.raises(DeviceError, match=r"operand 0 is on cuda:0, operand 1 is on cuda:1"):
        resolve_space([fake_cupy(0), fake_torch("cuda", 1)])


def test_to_space_numpy_stays_put() -> None:
    x = np.arange(4.0)
    moved = to_space(x, CPU)
    assert moved.array is x and moved.nbytes == 0
    moved = to_package(x, "numpy", CPU)
    assert moved.array is x
    with pytest.raises(DeviceError, match="numpy arrays cannot live"):
        to_package(x, "numpy", ExecutionSpace("cuda", 0))
    with pytest.raises(UnsupportedError, match="numpy, cupy, torch"):
        to_package(sp.csr_array(np.eye(2)), "numpy", CPU)


def test_log_placement(caplog: pytest.LogCaptureFixture) -> None:
    logger = ust_log.get_logger("test.placement")
    with caplog.at_level(logging.INFO, logger="ust"):
        log_placement(logger, CPU, ExecutionSpace("cuda", 0))
        log_placement(logger, ExecutionSpace("cuda", 1), ExecutionSpace("cuda", 1))
    assert "operands are in cpu memory; the execution space is cuda device 0" in caplog.messages
    assert (
        "operands are in the memory of cuda device 1; the execution space is cuda device 1" in caplog.messages
    )


# ------------------------------------------------------------------ logging


def test_get_logger_names_and_null_handler() -> None:
    assert ust_log.get_logger("linalg").name == "ust.linalg"
    assert ust_log.get_logger("ust.ops").name == "ust.ops"
    importlib.reload(ust_log)
    importlib.reload(ust_log)
    handlers = logging.getLogger("ust").handlers
    assert sum(isinstance(h, logging.NullHandler) for h in handlers) == 1


def test_timed_logs(caplog: pytest.LogCaptureFixture) -> None:
    logger = ust_log.get_logger("test.timed")
    with caplog.at_level(logging.INFO, logger="ust"), ust_log.timed(logger, "the phase X") as t:
        pass
    assert t["seconds"] >= 0
    assert any(m.startswith("the phase X took ") and m.endswith(" ms") for m in caplog.messages)


# ------------------------------------------------------------------ streams


def test_stream_pointer() -> None:
    assert stream_pointer(None) == 0
    assert stream_pointer(1234) == 1234
    assert stream_pointer(types.SimpleNamespace(ptr=7)) == 7  # CuPy
    assert stream_pointer(types.SimpleNamespace(cuda_stream=8)) == 8  # torch

    class Proto:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 9)

    assert stream_pointer(Proto()) == 9
    with pytest.raises(UnsupportedError, match="cudaStream_t"):
        stream_pointer("stream")
    with pytest.raises(UnsupportedError, match="cupy, torch"):
        current_stream("numpy")


# ------------------------------------------------------------------ stateful base and saved plans


class Doubler(StatefulOperation):
    kind = "doubler"

    def __init__(self, x: np.ndarray, device: str = "cpu", versions: dict[str, str] | None = None) -> None:
        super().__init__()
        self.x = x
        self.freed_calls = 0
        self.device = device
        self.versions = versions or {"numpy": np.__version__}

    def _plan(self) -> str:
        self.factor = 2.0
        return "planned"

    def _execute(self) -> np.ndarray:
        return self.factor * self.x

    def _reset_operands(self, *, x: np.ndarray) -> None:
        self.x = x

    def _free(self) -> None:
        self.freed_calls += 1

    def _plan_payload(self) -> dict[str, object]:
        return {"factor": self.factor, "perm": encode_array(np.arange(5, dtype=np.int32)[::-1])}

    def _plan_device(self) -> str:
        return self.device

    def _plan_versions(self) -> dict[str, str]:
        return self.versions


def test_lifecycle_order_is_checked() -> None:
    op = Doubler(np.ones(3))
    with pytest.raises(InvalidStateError, match=r"cannot execute before plan\(\)"):
        op.execute()
    assert not op.is_planned
    assert op.plan() == "planned" and op.is_planned
    np.testing.assert_array_equal(op.execute(), 2 * np.ones(3))
    op.reset_operands(x=np.arange(3.0))
    np.testing.assert_array_equal(op.execute(), [0.0, 2.0, 4.0])
    op.free()
    op.free()  # idempotent
    assert op.freed_calls == 1 and op.is_freed and not op.is_planned
    for call in (op.execute, op.plan, lambda: op.reset_operands(x=np.ones(3))):
        with pytest.raises(InvalidStateError, match="has been freed"):
            call()
    assert isinstance(InvalidStateError("x"), RuntimeError)


def test_context_manager_frees() -> None:
    with Doubler(np.ones(2)) as op:
        op.plan()
        op.execute()
    assert op.is_freed and op.freed_calls == 1
    with pytest.raises(InvalidStateError):
        op.__enter__()


def test_saved_plan_round_trip(tmp_path: object) -> None:
    path = tmp_path / "plan.json"  # type: ignore[operator]
    op = Doubler(np.ones(2))
    with pytest.raises(InvalidStateError, match=r"before plan\(\)"):
        op.save_plan(path)
    op.plan()
    op.save_plan(path)
    doc = json.loads(path.read_text())
    assert set(doc) == {"ust_version", "kind", "device", "versions", "plan"}
    assert doc["kind"] == "doubler" and doc["device"] == "cpu"
    assert doc["versions"] == {"numpy": np.__version__}
    plan = Doubler.read_plan(path, device="cpu", versions={"numpy": np.__version__})
    assert plan is not None and plan["factor"] == 2.0
    perm = decode_array(plan["perm"])
    np.testing.assert_array_equal(perm, [4, 3, 2, 1, 0])
    assert perm.dtype == np.int32 and perm.flags.writeable


@pytest.mark.parametrize(
    ("device", "versions", "needle"),
    [
        ("cpu", {"numpy": "0.0.1"}, "numpy"),
        ("cuda:0 NVIDIA H200", None, "device"),
        ("cpu", {"numpy": np.__version__, "cudss": "0.8.0"}, "cudss"),
    ],
)
def test_saved_plan_mismatch_warns_and_replans(
    tmp_path: object,
    caplog: pytest.LogCaptureFixture,
    device: str,
    versions: dict[str, str] | None,
    needle: str,
) -> None:
    path = tmp_path / "plan.json"  # type: ignore[operator]
    op = Doubler(np.ones(2))
    op.plan()
    op.save_plan(path)
    with caplog.at_level(logging.WARNING, logger="ust"):
        got = Doubler.read_plan(path, device=device, versions=versions or {"numpy": np.__version__})
    assert got is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and needle in warnings[-1].getMessage() and "planning afresh" in warnings[-1].getMessage()


def test_saved_plan_other_ust_version(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plan.json"  # type: ignore[operator]
    op = Doubler(np.ones(2))
    op.plan()
    op.save_plan(path)
    doc = json.loads(path.read_text())
    doc["ust_version"] = "0.0.0"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="ust"):
        assert Doubler.read_plan(path, device="cpu", versions={"numpy": np.__version__}) is None
    assert "ust 0.0.0" in caplog.text


def test_saved_plan_bad_files(tmp_path: object) -> None:
    bad = tmp_path / "bad.json"  # type: ignore[operator]
    bad.write_text("{not json")
    with pytest.raises(PlanFileError, match="invalid JSON"):
        Doubler.read_plan(bad, device="cpu", versions={})
    bad.write_text(json.dumps({"kind": "doubler"}))
    with pytest.raises(PlanFileError, match="missing keys"):
        Doubler.read_plan(bad, device="cpu", versions={})
    bad.write_text(json.dumps({"kind": "matmul", "plan": {}, "versions": {}, "device": "cpu"}))
    with pytest.raises(PlanFileError, match="holds a matmul plan, not a doubler plan"):
        Doubler.read_plan(bad, device="cpu", versions={})


# ------------------------------------------------------------------ library loader and optional imports


def test_loader_reports_missing_library() -> None:
    with pytest.raises(BackendUnavailableError) as info:
        _lib.load_library("ustnosuchlib")
    msg = str(info.value)
    assert "libustnosuchlib.so" in msg and 'pip install "ust[cu13]"' in msg and "ust[cu12]" in msg
    assert info.value.pip_command == 'pip install "ust[cu13]"'
    with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[cu12\]"'):
        _lib.load_library("ustnosuchlib", "cu12")
    assert isinstance(info.value, ImportError)


def test_loader_finds_wheel_dirs(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    libdir = tmp_path / "nvidia" / "cu13" / "lib"  # type: ignore[operator]
    libdir.mkdir(parents=True)
    for name in ("libfake.so.1", "libfake.so.12", "libfakeLt.so.13", "libfake_mtlayer_gomp.so.0"):
        (libdir / name).write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert str(libdir) in _lib.candidate_dirs()
    assert _lib._find_in_dirs("fake", [str(libdir)]) == str(libdir / "libfake.so.12")
    assert _lib.find_file("libfake_mtlayer_gomp.so.*") == str(libdir / "libfake_mtlayer_gomp.so.0")
    assert _lib.find_file("libnothing_here.so.*") is None


def test_declare_binds_types() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    strlen = _lib.declare(libc, "strlen", ctypes.c_size_t, [ctypes.c_char_p])
    assert strlen(b"hello") == 5
    assert strlen.argtypes == [ctypes.c_char_p]
    with pytest.raises(BackendUnavailableError, match="ust_no_such_symbol is missing"):
        _lib.declare(libc, "ust_no_such_symbol", ctypes.c_int, [])
    assert _lib.library_path(libc, "strlen").startswith("/")


def test_import_cupy_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[cu13\]"'):
        import_cupy()


def test_import_ust_loads_no_gpu_package() -> None:
    code = (
        "import sys, ust, ust.runtime.spaces, ust.runtime.stateful, ust.runtime.streams, ust.runtime.log, "
        "ust.backends.cuda._lib, ust.backends.cuda.arrays, ust.backends.cuda.cudss, ust.backends.cpu.superlu, "
        "ust.linalg, ust.cli.solve\n"
        "bad = [m for m in ('cupy', 'cupyx', 'torch', 'cuda', 'numba') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_cupy_names_the_extra_for_submodules_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.runtime import xp

    monkeypatch.setitem(sys.modules, "cupyx", None)
    with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[cu13\]"'):
        xp.import_cupy("cupyx.scipy.sparse")
    with pytest.raises(ValueError, match="CuPy modules only"):
        xp.import_cupy("torch")
    assert import_cupy is xp.import_cupy  # one helper: the CUDA backend re-exports it


def test_import_cupy_takes_imported_submodules_without_the_import_machinery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-call lookups of a CuPy submodule (cupyx.scipy.sparse in every elementwise call) come
    from sys.modules once CuPy's version was checked; before that the import system is asked."""
    import importlib
    import types

    from ust.runtime import xp

    fake, sub = types.ModuleType("cupy"), types.ModuleType("cupyx.fake")
    fake.__version__ = "14.0.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupyx.fake", sub)
    asked: list[str] = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name: asked.append(name) or real(name))
    assert xp.import_cupy("cupyx.fake") is sub and asked == ["cupyx.fake"]  # the first: checked
    assert id(fake) in xp._VERSION_CHECKED
    assert xp.import_cupy("cupyx.fake") is sub and xp.import_cupy() is fake
    assert asked == ["cupyx.fake"]  # later calls: no import machinery
    xp._VERSION_CHECKED.discard(id(fake))
