"""How many threads an OpenMP kernel runs on: the cores that other processes leave free.

Every C kernel -- the generated ones (SpMV / SpMM, set through ``ust_set_threads`` before each
call, see :func:`ust.backends.generated.compile_c.set_threads`) and the hand-written ones
(SpGEMM, CSR -> BSR) -- takes its count from this one rule, so it lives in the runtime layer,
below the conversions, backends and algebra that call it.  On a shared machine a thread that waits for a busy
core costs more than it brings, so :func:`threads` picks one thread for small work and
otherwise the usable cores less what :func:`other_load` measures other processes keep busy:
the machine's busy CPU time less this process's own (the load average counted this
process's spinning OpenMP threads as other work, so back-to-back calls fell to one thread).
"""

from __future__ import annotations

import os
import time

__all__ = ["ENV", "THREADS", "other_load", "threads", "usable_cores"]

#: Threads for every kernel that asks :func:`threads`: None picks them; an int forces a count
#: (benchmarks compare 1 and all).
THREADS: int | None = None
#: The environment variable that forces a count for every kernel (as :data:`THREADS` does).
ENV = "UST_NUM_THREADS"
#: Units of work (stored entries) below which one thread runs: :func:`threads`' default.
_SMALL = 1 << 18


def _forced() -> int | None:
    """The count forced by :data:`THREADS`, else by ``$UST_NUM_THREADS`` (a positive integer)."""
    if THREADS is not None:
        return max(1, int(THREADS))
    env = os.environ.get(ENV, "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def threads(entries: int, small: int = _SMALL) -> int:
    """How many OpenMP threads to use for ``entries`` units of work (stored entries, or the
    products of a SpGEMM with its own ``small``).

    :data:`THREADS` or ``$UST_NUM_THREADS`` force a count.  Otherwise one thread below
    ``small``; above it at most one thread per ``small // 2`` entries (the work size's cap: a
    thread must have enough work to pay for waking it), and ``OMP_NUM_THREADS`` when set,
    else, as OpenMP's dynamic adjustment does (libgomp
    with ``OMP_DYNAMIC``), the usable cores that other processes leave free, at least one (a
    shared machine: a thread that waits for a busy core costs more than it brings, and takes
    that core's time from someone else).  What other processes use is measured by
    :func:`other_load`, which does not count this process's own threads -- the load average
    does, so after one parallel call it saw this process's spinning OpenMP threads as other
    work and dropped the next call to one thread.
    """
    forced = _forced()
    if forced is not None:
        return forced
    if entries < small:
        return 1
    cap = max(1, entries // max(1, small // 2))
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return min(int(env), cap)
    cores = min(usable_cores(), cap)
    if cores == 1:
        return 1
    return max(1, min(cores, int(usable_cores() - other_load() + 0.5)))


_WINDOW = (0.1, 30.0)  # seconds: shortest and longest window between two CPU-time samples
_sample: tuple[float, float, float] | None = None  # (monotonic time, busy CPU seconds, own CPU seconds)
_estimate: float | None = None


def _busy_cpu_seconds() -> float | None:
    """CPU seconds all cores have spent busy since boot (``/proc/stat``; steal counts as busy)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return None


def _runnable_elsewhere() -> float | None:
    """Threads of other processes runnable right now (``/proc/loadavg`` less this process's)."""
    try:
        with open("/proc/loadavg") as f:
            total = int(f.read().split()[3].split("/")[0])
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            own += stat[stat.rindex(")") + 2 : stat.rindex(")") + 3] == "R"
        return float(max(total - own, 0))
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return None


def other_load() -> float:
    """Cores that other processes keep busy: the machine's busy CPU time less this process's
    over the time since the previous sample (0.1 to 30 s ago); without such a sample, the
    threads of other processes runnable right now; without ``/proc``, the 1-minute load
    average less one (this thread)."""
    global _sample, _estimate
    now = time.monotonic()
    prev = _sample
    if prev is not None and now - prev[0] < _WINDOW[0] and _estimate is not None:
        return _estimate  # too short a window for a new estimate: the last one
    busy = _busy_cpu_seconds()
    if busy is not None and (prev is None or now - prev[0] >= _WINDOW[0]):
        own = time.process_time()
        _sample = (now, busy, own)
        if prev is not None and now - prev[0] <= _WINDOW[1]:
            _estimate = max(0.0, (busy - prev[1] - (own - prev[2])) / (now - prev[0]))
            return _estimate
    estimate = _runnable_elsewhere()
    if estimate is None:
        try:
            estimate = max(os.getloadavg()[0] - 1.0, 0.0)
        except OSError:  # pragma: no cover - no load average on this platform
            estimate = 0.0
    _estimate = estimate
    return estimate
