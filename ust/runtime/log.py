"""Logging: one ``ust`` logger tree with a NullHandler, never the root logger.

Applications opt in with ``logging.basicConfig(level=logging.INFO)`` (or a handler on
``logging.getLogger("ust")``); ust itself never configures output.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

__all__ = ["get_logger", "timed"]

_ROOT = logging.getLogger("ust")
if not any(isinstance(h, logging.NullHandler) for h in _ROOT.handlers):
    _ROOT.addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger ``ust.<name>`` (a name already starting with ``ust`` is used as is)."""
    if name == "ust" or name.startswith("ust."):
        return logging.getLogger(name)
    return logging.getLogger("ust." + name)


@contextlib.contextmanager
def timed(logger: logging.Logger, what: str, *, level: int = logging.INFO) -> Iterator[dict[str, float]]:
    """Time a block and log ``"<what> took X ms"``; the dict it yields gets ``seconds`` at the end."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - t0
        if logger.isEnabledFor(level):
            logger.log(level, "%s took %.3f ms", what, 1e3 * out["seconds"])
