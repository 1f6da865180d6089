"""Compiled-artefact cache: on disk by content hash, in process by request tuple.

On disk, an artefact (a shared library, a cubin) lives in ``$UST_CACHE_DIR`` (default
``$XDG_CACHE_HOME/ust`` or ``~/.cache/ust``) under the SHA-256 of everything that decides
its bytes: source, compiler identity, flags, target architecture.  Writes go to a temporary
file in the same directory and are published with ``os.replace``, so a reader never sees a
half-written file and concurrent builders race harmlessly.  A sidecar ``.sha256`` holds the
artefact's own digest; an entry whose bytes no longer match it (truncated, corrupted) is
deleted and rebuilt.

In process, :class:`Memo` maps a request tuple such as (format, op, dtypes, variant) to the
loaded kernel, so a repeated call neither regenerates nor hashes source.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ArtifactCache", "Memo", "cache_dir", "content_key"]

_log = logging.getLogger("ust.codegen.cache")
_log.addHandler(logging.NullHandler())

T = TypeVar("T")


def cache_dir() -> Path:
    """``$UST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ust``, else ``~/.cache/ust``."""
    env = os.environ.get("UST_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ust"


def content_key(*parts: str | bytes | Iterable[str]) -> str:
    """SHA-256 over the parts (strings, bytes, or lists of strings such as flags)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes):
            data = part
        elif isinstance(part, str):
            data = part.encode()
        else:
            data = "\x1f".join(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ArtifactCache:
    """Content-addressed artefacts in one directory (``kind`` is a sub-directory: "c", "cuda")."""

    def __init__(self, kind: str, root: Path | None = None) -> None:
        self.kind = kind
        self._root = root

    @property
    def directory(self) -> Path:
        return (self._root or cache_dir()) / self.kind

    def path(self, key: str, suffix: str) -> Path:
        return self.directory / f"{key}{suffix}"

    def lookup(self, key: str, suffix: str) -> Path | None:
        """The artefact's path if present and intact; a corrupt entry is removed (None)."""
        path = self.path(key, suffix)
        side = path.with_name(path.name + ".sha256")
        try:
            data = path.read_bytes()
            want = side.read_text().strip()
        except OSError:
            return None
        if _digest(data) != want:
            _log.warning("cache entry %s is corrupt (checksum mismatch): rebuilding it", path)
            for p in (path, side):
                with contextlib.suppress(OSError):
                    p.unlink()
            return None
        return path

    def store(self, key: str, suffix: str, data: bytes) -> Path:
        """Publish ``data`` atomically under ``key`` and return its path."""
        path = self.path(key, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)
        _atomic_write(path.with_name(path.name + ".sha256"), (_digest(data) + "\n").encode())
        return path

    def get_or_build(self, key: str, suffix: str, build: Callable[[], bytes]) -> tuple[Path, bool]:
        """(path, built): the cached artefact, or ``build()``'s bytes published first."""
        hit = self.lookup(key, suffix)
        if hit is not None:
            return hit, False
        return self.store(key, suffix, build()), True


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Memo:
    """A thread-safe in-process map from request tuples to built objects."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        try:
            return self._items[key]
        except KeyError:
            pass
        with self._lock:
            if key not in self._items:
                self._items[key] = build()
            return self._items[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
