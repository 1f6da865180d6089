"""A progress line for long CLI work: after about a second, ``label ... 2.5 s`` ticks on stderr.

Work that ends sooner prints nothing, and nothing is printed when stderr is not a terminal
(logs and pipes stay clean).  A thread redraws the line; the work itself is untouched.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["progress"]

_SPINNER = "|/-\\"


@contextmanager
def progress(
    label: str, *, delay: float = 1.0, stream: TextIO | None = None, force: bool = False
) -> Iterator[None]:
    """Show ``label`` with a spinner and the elapsed time while the block runs longer than ``delay``."""
    out = stream or sys.stderr
    if not (force or (hasattr(out, "isatty") and out.isatty())):
        yield
        return
    done = threading.Event()
    start = time.perf_counter()
    drew = False

    def tick() -> None:
        nonlocal drew
        if done.wait(delay):
            return
        k = 0
        while not done.is_set():
            out.write(f"\r{_SPINNER[k % 4]} {label} ... {time.perf_counter() - start:.1f} s")
            out.flush()
            drew = True
            k += 1
            done.wait(0.25)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if drew:
            out.write(f"\r{label} ... done in {time.perf_counter() - start:.1f} s\n")
            out.flush()
