"""The on-disk kernel cache can be trusted: owners and modes checked, entries authenticated, loads private.

Tests run as root here, so "another user" is simulated by chmod-ing directories or entries
writable by others and, where the test runs as root, by chown-ing a file to ``nobody``.  A
planted library's constructor writes a marker file: the marker must never appear.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ust.backends.generated import disk_cache as cache_mod
from ust.backends.generated.compile_c import toolchain
from ust.backends.generated.disk_cache import KEY_FILE, MAGIC, ArtifactCache
from ust.codegen.cache import content_key

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534
SRC = "int ust_answer(void) { return 42; }\n"

needs_cc = pytest.mark.skipif(
    shutil.which("cc") is None or toolchain() is None, reason="needs the system C compiler cc"
)
root_only = pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts like a new process: no private fallback cache yet, no warning given yet."""
    monkeypatch.setattr(cache_mod, "_private", None)
    monkeypatch.setattr(cache_mod, "_warned", set())


def _warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage()
        for r in caplog.records
        if r.name == "ust.backends.generated.disk_cache" and r.levelno == logging.WARNING
    )


def _planted_library(tmp_path: Path, marker: Path) -> bytes:
    """A shared library whose constructor writes ``marker`` and whose ust_answer returns 666."""
    src = tmp_path / "evil.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n'
        "}\n"
        "int ust_answer(void) { return 666; }\n"
    )
    lib = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return lib.read_bytes()


def _key(source: str) -> str:
    tc = toolchain()
    assert tc is not None
    return content_key(source, *tc.key_parts())


@pytest.fixture
def cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache root in use (key and kind directory made by ust itself)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("UST_CACHE_DIR", str(root))
    ArtifactCache("c").store("0" * 64, ".so", b"warm-up")
    return root


# ---------------------------------------------------------------------------- planted libraries


@needs_cc
@pytest.mark.parametrize("forgery", ["sha256-sidecar", "forged-hmac"])
def test_a_planted_library_is_refused_rebuilt_and_its_constructor_never_runs(
    cached: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, forgery: str
) -> None:
    from ust.backends.generated import compile_c

    marker = tmp_path / "constructor-ran"
    evil = _planted_library(tmp_path, marker)
    entry = cached / "c" / f"{_key(SRC)}.so"
    if forgery == "sha256-sidecar":  # what the old cache accepted: bytes plus their bare digest
        entry.write_bytes(evil)
        entry.with_name(entry.name + ".sha256").write_text(hashlib.sha256(evil).hexdigest() + "\n")
    else:  # the new format, with a MAC made without the secret key
        entry.write_bytes(MAGIC + hashlib.sha256(b"guess" + evil).digest() + evil)
    entry.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="ust"):
        lib = compile_c.load_library(SRC, name="answer")
    assert lib.ust_answer() == 42
    assert not marker.exists()
    assert "refusing" in _warnings(caplog) and str(entry) in _warnings(caplog)
    assert not entry.with_name(entry.name + ".sha256").exists()
    data = ArtifactCache("c").lookup(_key(SRC), ".so")  # the rebuilt entry verifies
    assert data is not None and data != evil


@needs_cc
@pytest.mark.parametrize("where", ["root", "kind"])
@pytest.mark.parametrize("mode", [0o777, 0o757, 0o775])
def test_a_cache_directory_others_can_write_is_not_used(
    cached: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str, mode: int
) -> None:
    from ust.backends.generated import compile_c

    marker = tmp_path / "constructor-ran"
    evil = _planted_library(tmp_path, marker)
    ArtifactCache("c").store(_key(SRC), ".so", evil)  # even a validly signed entry: the directory decides
    (cached if where == "root" else cached / "c").chmod(mode)
    with caplog.at_level(logging.WARNING, logger="ust"):
        lib = compile_c.load_library(SRC, name="answer")
        again = compile_c.compile_shared(SRC, name="answer")
    assert lib.ust_answer() == 42 and not marker.exists()
    assert "not using the kernel cache" in _warnings(caplog) and oct(mode) in _warnings(caplog)
    assert not again.built and again.path is not None and cached not in again.path.parents
    assert os.stat(again.path.parent).st_mode & 0o077 == 0  # the private cache


@root_only
@needs_cc
def test_a_cache_root_owned_by_another_user_is_not_used(
    cached: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ust.backends.generated import compile_c

    marker = tmp_path / "constructor-ran"
    ArtifactCache("c").store(_key(SRC), ".so", _planted_library(tmp_path, marker))
    os.chown(cached, NOBODY, NOBODY)
    with caplog.at_level(logging.WARNING, logger="ust"):
        assert compile_c.load_library(SRC, name="answer").ust_answer() == 42
    assert not marker.exists() and f"owned by uid {NOBODY}" in _warnings(caplog)


@needs_cc
def test_the_cache_file_itself_is_never_dlopened(
    cached: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ust.backends.generated import compile_c

    opened: list[str] = []
    real = ctypes.CDLL

    def recording(name: str, *a, **k):  # type: ignore[no-untyped-def]
        opened.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(compile_c.ctypes, "CDLL", recording)
    compile_c.load_library(SRC, name="answer")  # built
    compile_c.load_library(SRC, name="answer")  # from the cache
    assert len(opened) == 2 and len(set(opened)) == 2  # a fresh private copy each time
    for name in opened:
        assert cached not in Path(name).parents and not Path(name).exists()  # removed once loaded


# ------------------------------------------------------------------------------ entries


@pytest.mark.parametrize(
    "tamper", ["writable-by-others", "symlink", "fifo", pytest.param("chown", marks=root_only)]
)
def test_an_entry_that_fails_its_checks_is_refused_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tamper: str
) -> None:
    cache = ArtifactCache("c", root=tmp_path)
    path = cache.store("k", ".so", b"good")
    assert path is not None and cache.lookup("k", ".so") == b"good"
    if tamper == "writable-by-others":
        path.chmod(0o666)
    elif tamper == "chown":
        os.chown(path, NOBODY, NOBODY)
    elif tamper == "symlink":
        other = cache.store("other", ".so", b"good")
        assert other is not None
        path.unlink()
        path.symlink_to(other)
    else:
        path.unlink()
        os.mkfifo(path)  # must not hang the reader
    with caplog.at_level(logging.WARNING, logger="ust"):
        assert cache.lookup("k", ".so") is None
        art = cache.get_or_build("k", ".so", lambda: b"rebuilt")
    assert "refusing" in _warnings(caplog)
    assert art.built and art.data == b"rebuilt" and art.path == path
    assert cache.lookup("k", ".so") == b"rebuilt"


def test_an_entry_is_bound_to_its_name(tmp_path: Path) -> None:
    cache = ArtifactCache("c", root=tmp_path)
    a = cache.store("a", ".so", b"library a")
    b = cache.path("b", ".so")
    assert a is not None
    shutil.copyfile(a, b)  # a genuine entry copied under another key does not verify there
    assert cache.lookup("b", ".so") is None


def test_new_entries_directories_and_key_are_private(tmp_path: Path) -> None:
    root = tmp_path / "new" / "cache"
    path = ArtifactCache("c", root=root).store("k", ".so", b"x")
    assert path is not None
    assert os.stat(root).st_mode & 0o777 == 0o700 and os.stat(root / "c").st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o777 == 0o600
    key = root / KEY_FILE
    assert os.stat(key).st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]
    if AS_ROOT:
        assert os.stat(path).st_uid == os.geteuid()


@pytest.mark.parametrize(
    "bad", ["mode-0644", "wrong-length", "symlink", pytest.param("chown", marks=root_only)]
)
def test_a_bad_secret_key_makes_the_cache_unused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    root = tmp_path / "cache"
    cache = ArtifactCache("c", root=root)
    assert cache.store("k", ".so", b"good") is not None
    key = root / KEY_FILE
    if bad == "mode-0644":
        key.chmod(0o644)
    elif bad == "wrong-length":
        key.write_bytes(b"short")
    elif bad == "chown":
        os.chown(key, NOBODY, NOBODY)
    else:
        real = tmp_path / "elsewhere.key"
        real.write_bytes(key.read_bytes())
        real.chmod(0o600)
        key.unlink()
        key.symlink_to(real)
    with caplog.at_level(logging.WARNING, logger="ust"):
        art = cache.get_or_build("k", ".so", lambda: b"rebuilt")
    assert art.built and art.data == b"rebuilt"
    assert art.path is not None and root not in art.path.parents
    assert "not using the kernel cache" in _warnings(caplog)


def test_concurrent_first_use_agrees_on_one_key(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from ust.backends.generated.disk_cache import ArtifactCache\n"
        "c = ArtifactCache('c', root=Path(sys.argv[1]))\n"
        "for i in range(20): c.store(f'k{i}', '.so', b'x' * i)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    cache = ArtifactCache("c", root=tmp_path)
    assert all(cache.lookup(f"k{i}", ".so") == b"x" * i for i in range(20))


# ----------------------------------------------------------------- unusable caches (issue 8)


def _make_unusable(tmp_path: Path, how: str) -> Path:
    if how == "root-is-a-file":
        (tmp_path / "cache").write_text("not a directory")
        return tmp_path / "cache"
    if how == "parent-is-a-file":
        (tmp_path / "file").write_text("x")
        return tmp_path / "file" / "cache"
    if how == "read-only-parent":
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        return ro / "cache"
    return Path("/proc/ust-no-such-dir/cache")  # cannot be created, even by root


@pytest.mark.parametrize(
    "how",
    [
        "root-is-a-file",
        "parent-is-a-file",
        pytest.param("read-only-parent", marks=pytest.mark.skipif(AS_ROOT, reason="root ignores modes")),
        pytest.param(
            "uncreatable", marks=pytest.mark.skipif(not Path("/proc/self").exists(), reason="linux")
        ),
    ],
)
def test_an_unusable_cache_directory_falls_back_to_a_private_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    root = _make_unusable(tmp_path, how)
    cache = ArtifactCache("c", root=root)
    with caplog.at_level(logging.WARNING, logger="ust"):
        art = cache.get_or_build("k", ".so", lambda: b"built")
        again = cache.get_or_build("k", ".so", lambda: pytest.fail("rebuilt"))
    assert art.built and art.data == b"built" and not again.built and again.data == b"built"
    assert art.path is not None and art.path == again.path
    assert os.stat(art.path.parent.parent).st_mode & 0o777 == 0o700
    assert "private temporary cache" in _warnings(caplog)
    assert _warnings(caplog).count("not using the kernel cache") == 1  # said once, not on every call


@pytest.mark.parametrize("what", ["directory", "garbage"])
def test_something_else_at_an_entry_path_is_survived(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, what: str
) -> None:
    cache = ArtifactCache("c", root=tmp_path)
    assert cache.store("warm", ".so", b"w") is not None
    path = cache.path("k", ".so")
    if what == "directory":
        path.mkdir()
    else:
        path.write_bytes(os.urandom(300))
        path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="ust"):
        art = cache.get_or_build("k", ".so", lambda: b"built")
        again = cache.get_or_build("k", ".so", lambda: pytest.fail("rebuilt"))
    assert art.built and art.data == b"built" and again == type(art)(b"built", art.path, False)
    assert "refusing" in _warnings(caplog)
    if what == "directory":
        assert path.is_dir() and art.path is not None and tmp_path not in art.path.parents
        assert "private temporary cache" in _warnings(caplog)
    else:
        assert art.path == path


@needs_cc
def test_the_operation_succeeds_even_with_no_cache_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ust.backends.generated import compile_c

    (tmp_path / "cache").write_text("not a directory")
    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path / "cache"))
    real = cache_mod._private_dir

    def no_fallback() -> Path:
        d = real()
        (d / "cache").write_text("blocked")  # the private cache cannot be made either
        return d

    monkeypatch.setattr(cache_mod, "_private_dir", no_fallback)
    with caplog.at_level(logging.WARNING, logger="ust"):
        art = compile_c.compile_shared(SRC, name="answer")
        assert compile_c.load_library(SRC, name="answer").ust_answer() == 42
    assert art.built and art.path is None
    assert "not cached" in _warnings(caplog)


def test_a_forked_child_gets_its_own_private_directory() -> None:
    parent = cache_mod._private_dir()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        os.write(w, str(cache_mod._private_dir()).encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 4096).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert child != str(parent) and parent.is_dir()
    shutil.rmtree(child, ignore_errors=True)  # the child left through os._exit, skipping its clean-up
