"""The per-user store of tuning records, beside the compiled kernels and as guarded as they are.

Records (:mod:`ust.plan.tuning`) live in ``<cache>/tune/<sha256 of the key>.json``, ``<cache>``
being the kernel cache's root (:func:`~ust.backends.generated.disk_cache.cache_dir`) or
``$UST_TUNING_DIR`` when set.  They go through :class:`~ust.backends.generated.disk_cache.ArtifactCache`,
so they get the same guarantees as kernels: directories and files owned by the user and not
writable by others, an HMAC with the user's secret key over the file's name and bytes (a record
planted by another user, or copied from another key's file, does not verify and is removed),
atomic writes (temporary file, then ``os.replace``).  ``ust cache clear`` / ``prune`` treat them
as entries of kind ``tune``.  A verified record is still only data: the caller checks it.

Reads are memoised per process (root and key), so a one-shot call that plans afresh does
not read the disk each time; a write updates the memo.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ust.backends.generated.disk_cache import ArtifactCache, cache_dir
from ust.runtime.log import get_logger

__all__ = ["ENV", "KIND", "clear_memo", "read_record", "store_root", "write_record"]

_log = get_logger(__name__)

#: The environment variable that moves the records elsewhere (tests, a shared tuning run).
ENV = "UST_TUNING_DIR"
#: Their directory (and cache kind) under the root.
KIND = "tune"
_SUFFIX = ".json"
_MAX_BYTES = 1 << 16  # a record is a few hundred bytes: anything larger is not one
_memo: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def store_root() -> Path:
    """``$UST_TUNING_DIR``, else the kernel cache's root."""
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else cache_dir()


def _cache() -> tuple[str, ArtifactCache]:
    root = store_root()
    return str(root), ArtifactCache(KIND, root)


def read_record(digest: str) -> Any:
    """The JSON value stored under ``digest`` (verified as written by this user), or None."""
    root, cache = _cache()
    with _lock:
        if (root, digest) in _memo:
            return _memo[(root, digest)]
    data = cache.lookup(digest, _SUFFIX)
    doc: Any = None
    if data is not None:
        if len(data) > _MAX_BYTES:
            _log.warning("ignoring a tuning record of %d bytes (records are small)", len(data))
        else:
            try:
                parsed = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                _log.warning("ignoring a tuning record that is not JSON (%s)", type(exc).__name__)
            else:
                if isinstance(parsed, dict):
                    doc = parsed
                else:
                    _log.warning(
                        "ignoring a tuning record that is not a JSON object (%s)", type(parsed).__name__
                    )
    with _lock:
        _memo[(root, digest)] = doc
    return doc


def write_record(digest: str, doc: dict[str, Any]) -> Path | None:
    """Publish ``doc`` under ``digest`` atomically; its path, or None where nothing could hold it."""
    root, cache = _cache()
    data = json.dumps(doc, sort_keys=True, indent=1).encode()
    path = cache.store(digest, _SUFFIX, data)
    with _lock:
        _memo[(root, digest)] = json.loads(data) if path is not None else None  # a copy, not the caller's
    return path


def clear_memo() -> None:
    """Forget what was read (tests; a process that edited the store behind ust's back)."""
    with _lock:
        _memo.clear()
