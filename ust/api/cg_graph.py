"""CG on a GPU with the iterations between two convergence tests replayed as one CUDA graph.

The fused kernels of :mod:`ust.backends.cuda.krylov_kernels` leave four launches per iteration
besides the SpMV; launched from Python one by one, each costs tens of microseconds of host time,
and after every convergence test (a host read) the device idles until the host has queued the
next kernels again.  Here the ``check_every`` iterations between two tests (SpMV, ``p^H q``, the
fused update, ``p = z + beta p``) are recorded once as a CUDA graph over fixed buffers and
replayed: one launch per block, no host work per iteration.  The recurrence, the scalars (0-d
device values divided inside the kernels) and the tests are those of the eager fused loop in
:mod:`ust.api.krylov`, so both give the same iterates to the bit.

Used when there is nothing per iteration the graph cannot hold: no callback, no preconditioner
other than Jacobi (fused into the update), a matvec that writes into a given buffer (``into``:
the planner's product), at least two iterations per test.  When the recording fails (a route
that allocates or synchronises inside its SpMV), the caller runs the eager loop instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ust.runtime.log import get_logger

__all__ = ["cg_graphed"]

_log = get_logger("linalg.iterative")


class _Buffers:
    """Every array the recorded launches touch, made before recording and kept for the solve."""

    def __init__(self, xp: Any, b: Any, k: int, ops: Any) -> None:
        dt = b.dtype
        self.q = xp.empty_like(b)
        self.rz0 = xp.empty(1, dtype=dt)  # r^H z at the start of a block
        self.pq = xp.empty((k, 1), dtype=dt)  # p^H q of each iteration of the block
        self.sums = xp.empty((k, 2), dtype=dt)  # (r^H z, r^H r) after each iteration
        self.work = ops.workspace(int(b.shape[0]), dt)
        self.dpart = ops.workspace(int(b.shape[0]), dt)  # the SpMV-with-dot kernel's partials

    def rz(self, j: int) -> Any:
        """``r^H z`` at the start of the block's iteration ``j``."""
        return self.rz0 if j == 0 else self.sums[j - 1, 0:1]


def cg_graphed(
    s: Any, x: Any, r: Any, ops: Any, dinv: Any, into: Callable[[Any, Any], Any], into_dot: Any
) -> tuple[Any, int, int, float, str | None] | None:
    """:func:`ust.api.krylov._cg_fused`'s iteration from ``x`` and its residual ``r``,
    ``s.check_every`` (>= 2) iterations per graph launch: ``(x, info, iterations, residual norm,
    breakdown)``, or None when the block cannot be recorded (before any iteration ran).
    ``into_dot`` (or None): the SpMV that also gives ``p^H A p``'s block partials."""
    xp = s.xp
    r = xp.ascontiguousarray(r)
    k = s.check_every
    buf = _Buffers(xp, s.b, k, ops)
    z = r if dinv is None else xp.empty_like(s.b)

    def precondition() -> None:
        """``z = dinv r`` (z is r itself without Jacobi) and ``rz0 = r^H z``."""
        if dinv is not None:
            xp.multiply(r, dinv, out=z)
        ops.dot(r, z, out=buf.rz0, work=buf.work)

    def iterations(count: int) -> None:
        """``count`` iterations; the last one's ``p`` update is left to the host's test."""
        for j in range(count):
            if j:
                ops.xpby(z, (buf.rz(j), buf.rz(j - 1)), p)
            if nb is not None:  # A p and the partials of p^H A p in one kernel
                into_dot(p, buf.q, buf.dpart)
                ops.sum_partials(buf.dpart, nb, out=buf.pq[j])
            else:
                into(p, buf.q)
                ops.dot(p, buf.q, out=buf.pq[j], work=buf.work)
            ops.cg_step(x, r, p, buf.q, (buf.rz(j), buf.pq[j]), dinv, out=None if dinv is None else z,
                        sums=buf.sums[j], work=buf.work)  # fmt: skip

    precondition()
    p = z.copy()
    # binds the SpMV's launch to these buffers before recording
    nb = None if into_dot is None else into_dot(p, buf.q, buf.dpart)
    if nb is None:
        into(p, buf.q)
    try:
        graph = ops.capture(lambda: iterations(k))
    except Exception as exc:  # a route that cannot be recorded: the eager loop runs instead
        _log.info(
            "CG iterations not recorded as a CUDA graph (%s: %s); running them eagerly",
            type(exc).__name__,
            exc,
        )
        return None
    _log.debug("CG: %d iterations per CUDA graph launch", k)
    good = x.copy()  # the last x whose residual was finite, refreshed at each test
    breakdown = "a non-finite CG scalar (p^H A p = 0?)"
    it = 0
    while it < s.maxiter:
        count = min(k, s.maxiter - it)
        if count == k:
            graph.launch()
        else:
            iterations(count)  # the tail before maxiter, launched eagerly
        it += count
        rr = buf.sums[count - 1, 1]
        rn = math.sqrt(float(rr.real if rr.dtype.kind == "c" else rr))
        if not math.isfinite(rn):
            return good, -1, it, s.true_residual(good)[1], breakdown
        restart = False
        if rn <= s.tol:
            true_r, rn = s.true_residual(x)
            if rn <= s.tol:
                return x, 0, it, rn, None
            r[...] = true_r  # the recurrence goes on from the true residual
            restart = True
        good[...] = x
        if it >= s.maxiter:
            break
        last = buf.rz(count - 1)
        if restart:
            precondition()  # rz0 = the restarted r^H z
            ops.xpby(z, (buf.rz0, last), p)
        else:
            ops.xpby(z, (buf.sums[count - 1, 0:1], last), p)
            buf.rz0[...] = buf.sums[count - 1, 0]
    _, rn = s.true_residual(x)
    return x, 0 if rn <= s.tol else s.maxiter, it, rn, None
