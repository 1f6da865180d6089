"""The package metadata agrees with the code: the extras' version floors are the run-time
minimums of ``ust.runtime.versions``, the version has one source, the wheel carries LICENSE
and ``py.typed``, and the optional-extra layout is what ``.ci/run`` and the README rely on."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import ust
from ust.runtime import versions

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _extra(name: str) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"][name]]
    return {canonicalize_name(r.name): r for r in reqs}


# ------------------------------------------------------------------------------- version floors


@pytest.mark.parametrize("major", versions.CUDA_MAJORS)
@pytest.mark.parametrize("component", sorted(versions.MINIMUM_VERSIONS))
def test_extra_floor_is_the_runtime_minimum(component: str, major: int) -> None:
    dist = versions.distribution(component, major)
    floor = versions.version_text(versions.minimum(component, major))
    extra = _extra(f"cu{major}")
    assert canonicalize_name(dist) in extra, f"ust[cu{major}] does not list {dist}"
    assert extra[canonicalize_name(dist)].specifier == SpecifierSet(f">={floor}"), (
        f"ust[cu{major}] asks {extra[canonicalize_name(dist)]}; ust.runtime.versions accepts {dist}>={floor}"
    )
    assert versions.requirement(component, major) == f"{dist}>={floor}"


def test_cudss_floor_is_0_8_on_both_cuda_majors() -> None:
    assert {versions.minimum("cudss", m) for m in versions.CUDA_MAJORS} == {(0, 8)}
    assert [versions.distribution("cudss", m) for m in versions.CUDA_MAJORS] == [
        "nvidia-cudss-cu12",
        "nvidia-cudss-cu13",
    ]


def test_cudss_minimum_is_the_oldest_abi_table() -> None:
    """The binding's oldest ABI table is the minimum: nothing accepted is without a table."""
    from ust.backends.cuda import cudss

    assert min(cudss.ABIS) == versions.minimum("cudss", 12) == versions.minimum("cudss", 13)


@pytest.mark.parametrize("extra", ["cu12", "cu13"])
def test_cudss_refusal_names_the_floor(extra: str) -> None:
    from ust.backends.cuda import cudss
    from ust.runtime.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match=r"0\.7\.1 is too old") as info:
        cudss.abi_for((0, 7, 1), extra)
    assert f"nvidia-cudss-{extra}>=0.8" in str(info.value.pip_command)
    assert cudss.abi_for((0, 9, 0), extra) is cudss.ABIS[(0, 8)]  # between tables: the older one


def test_old_cuda_pathfinder_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from ust.backends.cuda import _lib

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.2.3")
    _lib.pathfinder_usable.cache_clear()
    try:
        assert _lib.pathfinder_usable() is False
        assert _lib._via_pathfinder("cudss") is None
    finally:
        _lib.pathfinder_usable.cache_clear()


def test_old_cupy_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from ust.runtime import xp

    xp._check_cupy_version.cache_clear()
    with caplog.at_level(logging.WARNING, logger="ust"):
        xp._check_cupy_version("13.6.0", 13)
        xp._check_cupy_version("14.0.0", 13)
        xp._check_cupy_version("13.0.0", 12)
    xp._check_cupy_version.cache_clear()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "CuPy 13.6.0" in warned[0] and "cupy-cuda13x>=14" in warned[0]


def test_parse_version() -> None:
    assert versions.parse_version("14.2.0rc1") == (14, 2, 0)
    assert versions.parse_version("0.0+stand-in") == (0, 0)
    assert versions.parse_version("installed") is None


# ---------------------------------------------------------------------------------- the metadata


def test_one_version_source() -> None:
    project = _pyproject()["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert _pyproject()["tool"]["hatch"]["version"] == {"path": "ust/_version.py"}
    text = (ROOT / "ust" / "_version.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "([^"]+)"$', text, flags=re.MULTILINE) == [ust.__version__]
    # nothing else in the package spells the version out
    spelled = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "ust").rglob("*.py")
        if p.name != "_version.py" and re.search(r"__version__\s*=", p.read_text(encoding="utf-8"))
    ]
    assert spelled == []


def test_license_is_stated_once_and_consistently() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    # PEP 639: a license expression excludes the License :: classifiers
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert "Apache-2.0" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_classifiers_are_one_sorted_set() -> None:
    classifiers = _pyproject()["project"]["classifiers"]
    assert len(classifiers) == len(set(classifiers))
    assert classifiers == sorted(classifiers)
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "ust" / "py.typed").is_file()


def test_no_made_up_project_urls() -> None:
    """There is no public address of the project yet; URLs are added when there is one."""
    assert "urls" not in _pyproject()["project"]


def test_extras_layout() -> None:
    test = _extra("test")
    assert not [n for n in test if "nvrtc" in n], "NVRTC belongs to the nvrtc extra, not test"
    assert "binsparse" in test
    assert "nvidia-cuda-nvrtc" in _extra("nvrtc")
    assert {"sphinx", "numpydoc", "myst-parser"} <= set(_extra("docs"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '".[nvrtc]"' in ci
    assert re.search(r"sphinx -n -W\b", ci)


def test_readme_says_how_to_install_torch_without_cuda() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "CPU wheel" in readme and '".[torch]"' in readme


# -------------------------------------------------------------------------------------- the wheel


def _build_wheel(out: Path) -> Path:
    """Build the wheel with what this machine has; skip (with the reason) where it cannot."""
    try:
        import hatchling  # noqa: F401

        isolation = ["--no-build-isolation"]
    except ImportError:
        isolation = []  # pip fetches the build backend from the package index
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", str(out), str(ROOT)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("building the wheel took over 300 s (no package index reachable for hatchling?)")
    if run.returncode != 0:
        if not isolation:
            pytest.skip(
                "the build backend (hatchling) is not installed and pip could not fetch it: "
                + run.stderr.strip().splitlines()[-1][-300:]
            )
        pytest.fail(f"the wheel did not build:\n{run.stdout}\n{run.stderr}")
    wheels = sorted(out.glob("ust-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_carries_license_and_py_typed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "ust/py.typed" in names
    assert "ust/formats/standard.ust" in names
    assert [n for n in names if n.endswith(".dist-info/licenses/LICENSE")], names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]


def test_wheel_metadata(wheel: Path) -> None:
    z = zipfile.ZipFile(wheel)
    (meta_name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    meta = z.read(meta_name).decode()
    assert f"\nVersion: {ust.__version__}\n" in meta
    assert "\nLicense-Expression: Apache-2.0\n" in meta
    assert wheel.name.startswith(f"ust-{ust.__version__}-")
    for major in versions.CUDA_MAJORS:
        for component in versions.MINIMUM_VERSIONS:
            assert f"Requires-Dist: {versions.requirement(component, major)}; extra == 'cu{major}'" in meta
