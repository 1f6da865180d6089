"""Cache keys and the in-process memo of built kernels (pure: no file system, no compiler).

:func:`content_key` is the SHA-256 of everything that decides an artefact's bytes (source,
compiler identity, flags, target architecture); the authenticated on-disk cache that stores
artefacts under such keys is :mod:`ust.backends.generated.disk_cache`.  :class:`Memo` maps a
request tuple such as (format, op, dtypes, variant) to the loaded kernel, so a repeated call
neither regenerates nor hashes source.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

__all__ = ["Memo", "content_key"]

T = TypeVar("T")


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
