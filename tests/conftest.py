"""Shared test configuration: the ``gpu`` marker's skip logic and the hypothesis CI profile."""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@functools.cache
def gpu_unusable_reason() -> str | None:
    """None when CuPy imports and a CUDA device answers; otherwise why not."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        cupy.zeros(1).sum().item()
    except Exception as exc:
        return f"no usable CUDA device/driver ({type(exc).__name__}: {exc})"
    return None


@functools.cache
def gpu_count() -> int:
    if gpu_unusable_reason() is not None:
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/gpu/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
        if "gpu" in item.keywords or "multigpu" in item.keywords:
            reason = gpu_unusable_reason()
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))
            elif "multigpu" in item.keywords and gpu_count() < 2:
                item.add_marker(pytest.mark.skip(reason="multigpu test: fewer than 2 CUDA devices"))


@pytest.fixture(autouse=True)
def _private_tuning_records(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test reads and writes tuning records of its own (an autotune in one test must not
    change the routes another test expects); the store is created only when a record is written."""
    import uuid

    monkeypatch.setenv("UST_TUNING_DIR", str(tmp_path_factory.getbasetemp() / "tune" / uuid.uuid4().hex))
