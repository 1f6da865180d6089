"""The on-disk compiled-artefact cache: by content hash (:func:`ust.codegen.cache.content_key`), authenticated.

On disk, an artefact (a shared library, a cubin) lives in ``$UST_CACHE_DIR`` (default
``$XDG_CACHE_HOME/ust`` or ``~/.cache/ust``), in a sub-directory per kind, under the SHA-256
of everything that decides its bytes: source, compiler identity, flags, target architecture.
That key is predictable, so the cache is trusted only as far as it is checked:

* the root and each kind directory must be directories owned by the effective user and not
  writable by group or others (ust creates them with mode 0700); an entry must be a regular
  file (not a link), owned by the user and not writable by group or others;
* an entry is ``MAGIC + HMAC-SHA256(secret, name, data) + data``, the secret being 32 random
  bytes in ``<root>/secret.key`` (mode 0600, created with ``O_CREAT | O_EXCL``, refused when
  its owner or mode is wrong), so a planted or swapped file does not verify;
* :meth:`ArtifactCache.lookup` reads an entry once and returns the verified bytes; loaders
  write those to :func:`private_copy` and load that, never the cache path, so nothing can be
  swapped between the check and the load.

An entry that fails a check is refused with a WARNING on ``ust.backends.generated.disk_cache``, removed and
rebuilt.  A cache directory that fails one, or cannot be created or written, is replaced
(WARNING once) by a private temporary cache of this process (``mkdtemp``, 0700, removed at
exit), so the operation still succeeds.  Writes go to a temporary file in the same directory
and are published with ``os.replace``: a reader never sees a half-written file.

The in-process memo of loaded kernels is :class:`ust.codegen.cache.Memo`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import itertools
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ust.codegen.cache import content_key
from ust.runtime.log import get_logger

__all__ = [
    "KINDS",
    "Artifact",
    "ArtifactCache",
    "CacheEntry",
    "CacheReport",
    "cache_dir",
    "clear_cache",
    "content_key",
    "private_copy",
    "prune_cache",
    "remove_entries",
    "scan_cache",
]

_log = get_logger(__name__)

MAGIC = b"ust-cache-hmac-v1\n"
KEY_FILE = "secret.key"
_KEY_BYTES = 32
_MAC_BYTES = hashlib.sha256().digest_size
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted at an entry's path must not hang the read


def cache_dir() -> Path:
    """``$UST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ust``, else ``~/.cache/ust``."""
    env = os.environ.get("UST_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ust"


class _Untrusted(Exception):
    """A cache directory, key or entry that fails a check (the message says which and why)."""


def _check_owner_and_mode(st: os.stat_result, what: str, path: Path, forbidden: int = 0o022) -> None:
    if os.name == "nt":  # no POSIX owners or modes to check there
        return
    euid = os.geteuid() if hasattr(os, "geteuid") else None
    if euid is not None and st.st_uid != euid:
        raise _Untrusted(f"{what} {path} is owned by uid {st.st_uid}, not by this user (uid {euid})")
    if st.st_mode & forbidden:
        raise _Untrusted(f"{what} {path} has mode {oct(st.st_mode & 0o777)}: others could change it")


def _trusted_dir(path: Path, *, top: bool) -> None:
    """Create ``path`` (mode 0700) if missing, then check that only this user can write it.

    The root may be reached through a link (its target is checked); a kind directory inside
    it may not.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=top)
    st = os.stat(path) if top else os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise _Untrusted(f"cache directory {path} is not a directory")
    _check_owner_and_mode(st, "cache directory", path)


def _create_secret(path: Path) -> None:
    """Write a new random key so that no process can read a partial one.

    The key goes to a temporary file made with ``O_CREAT | O_EXCL`` and mode 0600, then is
    published with ``link``, which fails rather than replace a key another process published
    first.  Where the file system has no hard links the key file is created in place.
    """
    key = secrets.token_bytes(_KEY_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:
            with contextlib.suppress(FileExistsError):
                fd = os.open(path, flags, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(key)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _secret(root: Path) -> bytes:
    """The per-user HMAC key of the cache at ``root`` (created on first use)."""
    path = root / KEY_FILE
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
        except FileNotFoundError:
            _create_secret(path)
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Untrusted(f"cache key {path} is not a regular file")
            _check_owner_and_mode(st, "cache key", path, forbidden=0o077)
            key = _read_all(fd)
        finally:
            os.close(fd)
        if len(key) != _KEY_BYTES:
            raise _Untrusted(f"cache key {path} is not a ust cache key ({len(key)} bytes)")
        return key
    raise _Untrusted(f"cache key {path} could not be created")


def _mac(secret: bytes, name: str, data: bytes) -> bytes:
    return hmac.new(secret, name.encode() + b"\0" + data, hashlib.sha256).digest()


def _read_entry(path: Path) -> bytes | None:
    """The bytes of the file at ``path``, read once; None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ELOOP), no permission, ...
        raise _Untrusted(f"cache entry {path} cannot be read safely ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Untrusted(f"cache entry {path} is not a regular file")
        _check_owner_and_mode(st, "cache entry", path)
        return _read_all(fd)
    finally:
        os.close(fd)


def _touch(path: Path) -> None:
    """Mark an entry used now: its modification time is its last use, so that pruning removes the
    least recently used first (the access time is no record of use: noatime / relatime mounts,
    and any reader -- ``ust cache info`` too -- changes it)."""
    if os.utime in os.supports_follow_symlinks:
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ private per-process directory

_private: tuple[int, Path] | None = None
_private_lock = threading.Lock()
_counter = itertools.count()
_warned: set[str] = set()


def _remove_private(pid: int, path: Path) -> None:
    if os.getpid() == pid:  # a forked child leaves its parent's directory alone
        shutil.rmtree(path, ignore_errors=True)


def _private_dir() -> Path:
    """This process's own directory (``mkdtemp``: mode 0700), removed when the process exits."""
    global _private
    with _private_lock:
        if _private is None or _private[0] != os.getpid() or not _private[1].is_dir():
            path = Path(tempfile.mkdtemp(prefix="ust-"))
            _private = (os.getpid(), path)
            atexit.register(_remove_private, os.getpid(), path)
        return _private[1]


def _fallback_root() -> Path | None:
    """The private temporary cache root, if this process has had to use it."""
    p = _private
    if p is None or p[0] != os.getpid():
        return None
    root = p[1] / "cache"
    return root if root.is_dir() else None


def private_copy(data: bytes, name: str) -> Path:
    """A new file only this user can read, holding ``data``: what loaders open.

    Loading verified bytes from a copy nobody else can reach closes the gap between checking
    a cache entry and loading it.  Names are unique in the process, because the dynamic
    loader hands back an already loaded library for a path it has seen.  The file lives in
    the private directory (removed at exit); a caller done with it may remove it sooner.
    """
    d = _private_dir() / "load"
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-120:] or "artefact"
    path = d / f"{next(_counter)}-{safe}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        _log.warning("%s", message)


# ------------------------------------------------------------------------------------- the cache


@dataclass(frozen=True)
class Artifact:
    """An artefact's verified bytes, where it is cached (None: nowhere) and whether it was just built.

    Load ``data`` (through :func:`private_copy`), never ``path``: the file at ``path`` may
    have changed since it was read.
    """

    data: bytes
    path: Path | None
    built: bool


class ArtifactCache:
    """Content-addressed, authenticated artefacts in one directory (``kind``: "c", "cuda")."""

    def __init__(self, kind: str, root: Path | None = None) -> None:
        self.kind = kind
        self._root = root

    @property
    def directory(self) -> Path:
        """The configured directory (a private temporary one is used instead if this one is unsafe)."""
        return (self._root or cache_dir()) / self.kind

    def path(self, key: str, suffix: str) -> Path:
        return self.directory / f"{key}{suffix}"

    def _open(self, root: Path) -> tuple[Path, bytes]:
        _trusted_dir(root, top=True)
        secret = _secret(root)
        d = root / self.kind
        _trusted_dir(d, top=False)
        return d, secret

    def _fallback(self) -> tuple[Path, bytes] | None:
        try:
            root = _private_dir() / "cache"
            return self._open(root)
        except (OSError, _Untrusted) as exc:
            _warn_once(
                f"the private temporary kernel cache is unusable too ({exc}): artefacts are not cached"
            )
            return None

    def _locations(self) -> list[tuple[Path, bytes]]:
        """(directory, secret) pairs to use: the configured cache if it is safe, and the fallback."""
        root = self._root or cache_dir()
        out: list[tuple[Path, bytes]] = []
        try:
            out.append(self._open(root))
        except (OSError, _Untrusted) as exc:
            _warn_once(
                f"not using the kernel cache at {root}: {exc}; "
                "using a private temporary cache for this process instead"
            )
        if not out or _fallback_root() is not None:
            fb = self._fallback()
            if fb is not None and fb[0] not in [d for d, _ in out]:
                out.append(fb)
        return out

    def _lookup_in(self, d: Path, secret: bytes, key: str, suffix: str) -> bytes | None:
        path = d / f"{key}{suffix}"
        name = f"{self.kind}/{key}{suffix}"
        try:
            blob = _read_entry(path)
            if blob is None:
                return None
            head = len(MAGIC) + _MAC_BYTES
            if not blob.startswith(MAGIC) or len(blob) < head:
                raise _Untrusted(f"cache entry {path} is not an authenticated ust artefact")
            data = blob[head:]
            if not hmac.compare_digest(blob[len(MAGIC) : head], _mac(secret, name, data)):
                raise _Untrusted(f"cache entry {path} fails its HMAC check (corrupt or tampered)")
            _touch(path)
            return data
        except _Untrusted as exc:
            _log.warning("refusing a cache entry: %s; rebuilding it", exc)
            for p in (path, path.with_name(path.name + ".sha256")):  # .sha256: older ust's sidecar
                with contextlib.suppress(OSError):
                    if p.is_symlink() or not p.is_dir():
                        p.unlink()
            return None

    def _find(self, key: str, suffix: str) -> tuple[bytes, Path] | None:
        for d, secret in self._locations():
            data = self._lookup_in(d, secret, key, suffix)
            if data is not None:
                return data, d / f"{key}{suffix}"
        return None

    def lookup(self, key: str, suffix: str) -> bytes | None:
        """The artefact's verified bytes, or None; an entry that fails a check is removed."""
        hit = self._find(key, suffix)
        return None if hit is None else hit[0]

    def _write(self, d: Path, secret: bytes, key: str, suffix: str, data: bytes) -> Path | None:
        path = d / f"{key}{suffix}"
        try:
            _atomic_write(path, MAGIC + _mac(secret, f"{self.kind}/{key}{suffix}", data) + data)
            return path
        except OSError as exc:
            _log.warning("cannot write cache entry %s (%s)", path, exc)
            return None

    def store(self, key: str, suffix: str, data: bytes) -> Path | None:
        """Publish ``data`` atomically under ``key``; its path, or None where nothing could hold it."""
        tried = []
        for d, secret in self._locations():
            path = self._write(d, secret, key, suffix, data)
            if path is not None:
                return path
            tried.append(d)
        fb = self._fallback()
        if fb is not None and fb[0] not in tried:
            _log.warning("using a private temporary cache for this process instead")
            path = self._write(*fb, key, suffix, data)
            if path is not None:
                return path
        _log.warning("the artefact %s/%s%s is not cached", self.kind, key, suffix)
        return None

    def get_or_build(self, key: str, suffix: str, build: Callable[[], bytes]) -> Artifact:
        """The cached artefact, or ``build()``'s bytes, published first."""
        hit = self._find(key, suffix)
        if hit is not None:
            return Artifact(hit[0], hit[1], False)
        data = build()
        return Artifact(data, self.store(key, suffix, data), True)


# ------------------------------------------------------------------------- seeing and bounding it
#
# ``ust cache info | clear | prune``.  The same rules as above hold: nothing is created, the root
# must be a directory only this user can write (it may be reached through a link, as above), a
# kind directory must be one too and is never followed when it is a link, and only files ust
# wrote are removed: regular files (never links) owned by the user, named as ust names entries,
# beginning with ust's MAGIC.  Anything else is counted as "other" and left alone.

#: The kinds of artefact, one directory each under the root (ArtifactCache's ``kind``).
KINDS = ("c", "cuda", "tune")  # "tune": tuning records (ust.backends.generated.tuning_store)
_ENTRY_RE = re.compile(r"^[0-9a-f]{64}\.[A-Za-z0-9_]+$")  # <content key><suffix>, e.g. <sha256>.so
_TEMP_RE = re.compile(r"^\.[0-9a-f]{64}\.[A-Za-z0-9_]+\..+\.tmp$")  # _atomic_write's temporaries
#: A temporary file older than this is left over from a process that died while writing it.
STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True)
class CacheEntry:
    """A file ust wrote in the cache: an artefact, or a temporary one a dead writer left."""

    kind: str
    path: Path
    size: int
    last_used: float  # seconds since the epoch: its modification time, which every hit renews (_touch)
    temporary: bool
    ident: tuple[int, int]  # (st_dev, st_ino) when scanned: removal checks it is still this file


@dataclass(frozen=True)
class CacheReport:
    """What the cache at ``root`` holds (:func:`scan_cache`).  ``problem`` says why ust does not
    use (or touch) the root at all, ``notes`` which kind directories it skipped and why, and
    ``other`` lists what was left alone because ust did not write it."""

    root: Path
    exists: bool
    problem: str | None
    entries: tuple[CacheEntry, ...]
    other: tuple[Path, ...]
    notes: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(e.size for e in self.entries)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """kind -> (entries, bytes), every kind listed."""
        out = dict.fromkeys(KINDS, (0, 0))
        for e in self.entries:
            n, b = out[e.kind]
            out[e.kind] = (n + 1, b + e.size)
        return out


def _is_ours(st: os.stat_result) -> bool:
    """A regular file (not a link) owned by this user that only this user can write."""
    try:
        _check_owner_and_mode(st, "file", Path())
    except _Untrusted:
        return False
    return stat.S_ISREG(st.st_mode)


def _starts_with_magic(path: Path, st: os.stat_result, *, partial: bool) -> bool:
    """Whether the file (still the one ``st`` describes) begins with MAGIC (``partial``: a
    temporary file may hold only the first bytes of it)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
    except OSError:
        return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            return False
        head = os.read(fd, len(MAGIC))
    except OSError:
        return False
    finally:
        os.close(fd)
    return head == MAGIC or (partial and MAGIC.startswith(head))


def scan_cache(root: Path | None = None, *, now: float | None = None) -> CacheReport:
    """The entries of the cache at ``root`` (default :func:`cache_dir`), creating nothing."""
    root = root or cache_dir()
    now = time.time() if now is None else now
    try:
        st = os.stat(root)  # the root may be reached through a link; its target is checked
    except FileNotFoundError:
        return CacheReport(root, False, None, (), ())
    except OSError as exc:
        return CacheReport(root, True, f"cannot inspect {root} ({exc.strerror or exc})", (), ())
    try:
        if not stat.S_ISDIR(st.st_mode):
            raise _Untrusted(f"cache directory {root} is not a directory")
        _check_owner_and_mode(st, "cache directory", root)
    except _Untrusted as exc:
        return CacheReport(root, True, str(exc), (), ())
    entries: list[CacheEntry] = []
    other: list[Path] = []
    problems: list[str] = []
    for kind in KINDS:
        d = root / kind
        try:
            dst = os.lstat(d)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"cannot inspect {d} ({exc.strerror or exc})")
            continue
        try:
            if stat.S_ISLNK(dst.st_mode):
                raise _Untrusted(f"cache directory {d} is a link (not followed)")
            if not stat.S_ISDIR(dst.st_mode):
                raise _Untrusted(f"cache directory {d} is not a directory")
            _check_owner_and_mode(dst, "cache directory", d)
        except _Untrusted as exc:
            problems.append(str(exc))
            other.append(d)
            continue
        try:
            names = sorted(os.listdir(d))
        except OSError as exc:
            problems.append(f"cannot list {d} ({exc.strerror or exc})")
            continue
        for name in names:
            path = d / name
            entry = _ENTRY_RE.match(name) is not None
            temp = not entry and _TEMP_RE.match(name) is not None
            try:
                fst = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
            stale = temp and now - fst.st_mtime > STALE_TEMP_SECONDS
            if (entry or stale) and _is_ours(fst) and _starts_with_magic(path, fst, partial=temp):
                entries.append(
                    CacheEntry(kind, path, fst.st_size, fst.st_mtime, temp, (fst.st_dev, fst.st_ino))
                )
            elif not temp:  # a fresh temporary file is a writer's at work: not "other" either
                other.append(path)
    return CacheReport(root, True, None, tuple(entries), tuple(other), tuple(problems))


def remove_entries(entries: tuple[CacheEntry, ...] | list[CacheEntry]) -> tuple[int, int]:
    """Remove these entries of a :func:`scan_cache` report; (files removed, bytes freed).

    Each file is checked again just before: still the same file (device and inode), still a
    regular file owned by this user, its directory still a real directory.  A file that changed
    is left alone; ``unlink`` removes a name, never what a link points to.
    """
    removed = freed = 0
    checked: dict[Path, bool] = {}
    for e in entries:
        d = e.path.parent
        if d not in checked:
            try:
                dst = os.lstat(d)
                checked[d] = stat.S_ISDIR(dst.st_mode) and not stat.S_ISLNK(dst.st_mode)
            except OSError:
                checked[d] = False
        if not checked[d]:
            continue
        try:
            st = os.lstat(e.path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) != e.ident or not _is_ours(st):
            continue
        try:
            os.unlink(e.path)
        except OSError as exc:
            _log.warning("cannot remove cache entry %s (%s)", e.path, exc.strerror or exc)
            continue
        removed += 1
        freed += e.size
    return removed, freed


def _usable(report: CacheReport) -> CacheReport:
    if report.problem:
        from ust.runtime.errors import InvalidStateError

        raise InvalidStateError(f"not touching the kernel cache: {report.problem}")
    return report


def clear_cache(root: Path | None = None) -> tuple[CacheReport, int, int]:
    """Remove every entry ust wrote (nothing else); (the report before, files removed, bytes freed)."""
    report = _usable(scan_cache(root))
    removed, freed = remove_entries(report.entries)
    return report, removed, freed


def prune_cache(
    max_bytes: int | None = None,
    older_than: float | None = None,
    root: Path | None = None,
    *,
    now: float | None = None,
) -> tuple[CacheReport, int, int]:
    """Bound the cache: remove entries unused for ``older_than`` seconds, then the least recently
    used ones until at most ``max_bytes`` remain; stale temporary files always go.
    (the report before, files removed, bytes freed)."""
    now = time.time() if now is None else now
    report = _usable(scan_cache(root, now=now))
    doomed = [
        e
        for e in report.entries
        if e.temporary or (older_than is not None and now - e.last_used > older_than)
    ]
    if max_bytes is not None:
        gone = {e.path for e in doomed}
        keep = sorted((e for e in report.entries if e.path not in gone), key=lambda e: e.last_used)
        total = sum(e.size for e in keep)
        for e in keep:  # least recently used first
            if total <= max_bytes:
                break
            doomed.append(e)
            total -= e.size
    removed, freed = remove_entries(doomed)
    return report, removed, freed
