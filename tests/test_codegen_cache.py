"""The artefact cache (atomic publish, corrupt entries rebuilt) and the in-process memo.

What makes the cache safe to trust (owners, modes, HMAC, private loads) is in test_cache_safety.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from ust.backends.generated.compile_c import toolchain
from ust.backends.generated.disk_cache import Artifact, ArtifactCache, cache_dir
from ust.codegen.cache import Memo, content_key


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("UST_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "ust"


def test_content_key_separates_its_parts() -> None:
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("src", ["-O3", "-fopenmp"]) != content_key("src", ["-O3"])
    assert content_key("src", "sm_90") != content_key("src", "sm_80")
    assert len(content_key("x")) == 64


def test_store_lookup_and_corruption_is_rebuilt(tmp_path: Path) -> None:
    cache = ArtifactCache("c", root=tmp_path)
    key = content_key("source")
    assert cache.lookup(key, ".so") is None
    calls: list[int] = []

    def build() -> bytes:
        calls.append(1)
        return b"artefact bytes"

    art = cache.get_or_build(key, ".so", build)
    assert art.built and art.data == b"artefact bytes" and art.path == cache.path(key, ".so")
    assert cache.get_or_build(key, ".so", build) == Artifact(b"artefact bytes", art.path, False)
    assert cache.lookup(key, ".so") == b"artefact bytes"
    assert len(calls) == 1
    path = cache.path(key, ".so")
    path.write_bytes(path.read_bytes()[:-2])  # truncated by a crash or a full disk
    assert cache.lookup(key, ".so") is None and not path.exists()
    art2 = cache.get_or_build(key, ".so", build)
    assert art2.built and art2.data == b"artefact bytes" and len(calls) == 2
    assert cache.lookup(key, ".so") == b"artefact bytes"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temporaries left behind


def test_an_entry_without_its_authentication_counts_as_corrupt(tmp_path: Path) -> None:
    cache = ArtifactCache("cuda", root=tmp_path)
    path = cache.store("k", ".cubin", b"123")
    assert path is not None
    path.write_bytes(b"123")  # the bare artefact, as an older ust (or an attacker) writes it
    assert cache.lookup("k", ".cubin") is None


def test_memo_builds_once_even_under_threads() -> None:
    memo = Memo()
    calls: list[int] = []

    def build() -> object:
        calls.append(1)
        return object()

    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(memo.get(("CSR", "mv"), build))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(r) for r in results}) == 1
    assert ("CSR", "mv") in memo and len(memo) == 1
    memo.clear()
    assert len(memo) == 0


@pytest.mark.skipif(toolchain() is None, reason="no C compiler")
def test_compiled_library_is_cached_on_disk_and_a_corrupt_one_rebuilt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ust.backends.generated import compile_c

    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path))
    src = "int ust_answer(void) { return 42; }\n"
    art = compile_c.compile_shared(src, name="answer")
    assert art.built and art.path is not None and art.path.parent == tmp_path / "c"
    path = art.path
    runs: list[int] = []
    real = compile_c.subprocess.run

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        runs.append(1)
        return real(*a, **k)

    monkeypatch.setattr(compile_c.subprocess, "run", counting)
    again = compile_c.compile_shared(src, name="answer")
    assert (again.path, again.built, again.data) == (path, False, art.data)
    assert runs == []  # a cache hit runs no compiler
    path.write_bytes(path.read_bytes()[:100])
    art2 = compile_c.compile_shared(src, name="answer")
    assert art2.built and runs == [1]
    assert compile_c.load_library(src, name="answer").ust_answer() == 42
    assert runs == [1]


@pytest.mark.skipif(toolchain() is None, reason="no C compiler")
def test_second_request_is_an_in_process_lookup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ust.formats as F
    from ust.backends.cpu import ckernels

    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ckernels, "_memo", Memo())
    k1 = ckernels.c_kernel(F.CSR, "mv", "row", "auto", "float32", "int32", "int32")
    monkeypatch.setattr(ckernels, "emit_c", lambda *a, **k: pytest.fail("source generated twice"))
    assert ckernels.c_kernel(F.CSR, "mv", "row", "auto", "float32", "int32", "int32") is k1
    y = np.empty(2, dtype=np.float32)
    args = {
        "D0": 2, "has_y0": 0, "alpha": 1.0, "beta": 0.0,
        "pos1": np.array([0, 1, 2], np.int32), "crd1": np.array([1, 0], np.int32),
        "val": np.array([2.0, 3.0], np.float32), "x": np.array([10.0, 20.0], np.float32),
        "y0": np.zeros(2, np.float32), "y": y,
    }  # fmt: skip
    k1(args)
    np.testing.assert_array_equal(y, [40.0, 30.0])
