"""The Krylov iterations behind ``ust.linalg.cg / minres / gmres / bicgstab``.

Written once against the array namespace of the operands (NumPy on the CPU, CuPy on a GPU):
``matvec`` is the planner's SpMV for the user's format, ``psolve`` the preconditioner
(``z = M r``, M approximating A^-1 as in SciPy).  Scalars stay 0-d arrays on the device between
convergence tests, so a GPU iteration queues its kernels without waiting for the host; the
host reads a norm only every ``check_every`` iterations (and GMRES reads its Hessenberg
columns then, in one copy).  Convergence always means the *true* residual
``||b - A x|| <= max(rtol * ||b||, atol)``: when the recurrence says so, one more SpMV checks
it, and the iteration goes on from the true residual when the two disagree.  A breakdown
(a zero or non-finite recurrence scalar) returns the last iterate whose residual was finite,
with ``info < 0``: never a NaN-filled x.

On a GPU, CG runs its vector operations through the fused kernels of
:mod:`ust.backends.cuda.krylov_kernels` (five kernels per iteration besides the SpMV, a Jacobi
preconditioner applied inside the update pass; :data:`FUSED_GPU_CG`): the same recurrence as the
plain CuPy operations, to rounding.  The CPU path is plain NumPy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.runtime.xp import is_cupy

__all__ = ["FUSED_GPU_CG", "GRAPHED_GPU_CG", "METHODS", "KrylovOutcome", "run"]

#: Whether CG on a GPU runs the fused vector kernels of :mod:`ust.backends.cuda.krylov_kernels`
#: (five kernels per iteration besides the SpMV) rather than plain CuPy operations (about ten);
#: the environment variable ``UST_KRYLOV_FUSED=0`` turns them off too.  Both run the same
#: recurrence and agree to rounding.
FUSED_GPU_CG = True
#: Whether fused GPU CG replays each block of ``check_every`` iterations as one CUDA graph
#: (:mod:`ust.api.cg_graph`) where nothing per iteration needs the host; ``UST_KRYLOV_GRAPHS=0``
#: turns it off too.  Same iterates as the eager fused loop.
GRAPHED_GPU_CG = True

Vector = Any
Op = Callable[[Vector], Vector]


@dataclass
class KrylovOutcome:
    """What one iteration run ended with (``info``: SciPy's code; 0 converged, > 0 the iteration
    limit was reached, < 0 a breakdown)."""

    x: Vector
    info: int
    iterations: int
    residual_norm: float
    breakdown: str | None = None


@dataclass
class _Setup:
    xp: Any
    matvec: Op
    psolve: Op | None
    b: Vector
    tol: float
    maxiter: int
    check_every: int
    callback: Callable[[Any], Any] | None

    def precondition(self, r: Vector) -> Vector:
        return r if self.psolve is None else self.psolve(r)

    def true_residual(self, x: Vector) -> tuple[Vector, float]:
        r = self.b - self.matvec(x)
        return r, float(self.xp.linalg.norm(r))

    @property
    def host_scalars(self) -> bool:
        """Whether the recurrence scalars are host numbers (NumPy), free to test every step."""
        return self.xp is np

    def checks(self, it: int) -> bool:
        return it % self.check_every == 0 or it >= self.maxiter


def _eps(dtype: Any) -> float:
    """Machine epsilon of the real type under ``dtype``."""
    return float(np.finfo(np.empty(0, dtype=dtype).real.dtype).eps)


def _dot(xp: Any, a: Vector, b: Vector) -> Any:
    return xp.vdot(a, b)


def _finite(v: float) -> bool:
    return bool(np.isfinite(v))


def _start(s: _Setup, x0: Vector | None) -> tuple[Vector, Vector, float]:
    if x0 is None:
        x = s.xp.zeros_like(s.b)
        r = s.b.copy()
        return x, r, float(s.xp.linalg.norm(r))
    x = x0.copy()
    r, rn = s.true_residual(x)
    return x, r, rn


def _cg(s: _Setup, x0: Vector | None, **_: Any) -> KrylovOutcome:
    ops = _fused_ops(s)
    if ops is not None:
        return _cg_fused(s, x0, ops)
    xp = s.xp
    x, r, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    # host scalars (NumPy): a non-finite step is seen before x takes it, so no copy of x is
    # kept; device scalars: the last x whose residual was finite, refreshed at each test
    good = None if s.host_scalars else x.copy()
    breakdown = "a non-finite CG scalar (p^H A p = 0?)"
    z = s.precondition(r)
    p = z.copy()
    rz = _dot(xp, r, z)
    it = 0
    while it < s.maxiter:
        it += 1
        q = s.matvec(p)
        with np.errstate(divide="ignore", invalid="ignore"):  # p^H A p = 0: the breakdown below
            alpha = rz / _dot(xp, p, q)
        if good is None and not _finite(abs(alpha)):
            return KrylovOutcome(x, -1, it, s.true_residual(x)[1], breakdown)
        x += alpha * p
        r -= alpha * q
        if s.callback is not None:
            s.callback(x)
        if s.checks(it):
            rn = float(xp.linalg.norm(r))
            if not _finite(rn):
                last = x if good is None else good
                return KrylovOutcome(last, -1, it, s.true_residual(last)[1], breakdown)
            if rn <= s.tol:
                r, rn = s.true_residual(x)
                if rn <= s.tol:
                    return KrylovOutcome(x, 0, it, rn)
            if good is not None:
                good[...] = x
        z = s.precondition(r)
        rz_new = _dot(xp, r, z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    _, rn = s.true_residual(x)
    return KrylovOutcome(x, 0 if rn <= s.tol else s.maxiter, it, rn)


_FUSED_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _fused_ops(s: _Setup) -> Any:
    """The fused GPU vector operations for this CG (the module :mod:`ust.backends.cuda.krylov_kernels`),
    or None: on the CPU, for a dtype they do not take, or when :data:`FUSED_GPU_CG` (or
    ``UST_KRYLOV_FUSED=0``) turns them off."""
    if s.host_scalars or not FUSED_GPU_CG or os.environ.get("UST_KRYLOV_FUSED", "1").strip() == "0":
        return None
    if not is_cupy(s.b) or s.b.ndim != 1 or s.b.dtype not in _FUSED_DTYPES:
        return None
    from ust.backends.cuda import krylov_kernels

    return krylov_kernels


def _jacobi_inverse(s: _Setup) -> Vector | None:
    """The vector ``d`` of a preconditioner whose ``apply(r)`` is ``r * d`` (Jacobi: it says so by
    a ``diagonal_inverse(dtype)`` method), when ``d`` can be fused into the CG step (a
    C-contiguous vector of b's dtype on b's device); else None."""
    owner = getattr(s.psolve, "__self__", s.psolve)
    get = getattr(owner, "diagonal_inverse", None)
    if not callable(get):
        return None
    d = get(s.b.dtype)
    if (
        d is None
        or not is_cupy(d)
        or d.dtype != s.b.dtype
        or tuple(d.shape) != tuple(s.b.shape)
        or not d.flags.c_contiguous
        or d.device.id != s.b.device.id
    ):
        return None
    return d


def _product_with_dot(s: _Setup, ops: Any) -> Callable[[Vector], tuple[Vector, Any]]:
    """``p -> (A p, p^H A p)``: one SpMV kernel that also sums the dot product where the route
    has one (the matvec's ``into_dot``), else the SpMV and a dot kernel.  The same arithmetic as
    the graphed loop's (:mod:`ust.api.cg_graph`), so both give the same iterates."""
    into_dot = getattr(s.matvec, "into_dot", None)
    q = s.xp.empty_like(s.b)
    part = ops.workspace(int(s.b.shape[0]), s.b.dtype)

    def product(p: Vector) -> tuple[Vector, Any]:
        nb = None if into_dot is None else into_dot(p, q, part)
        if nb is not None:
            return q, ops.sum_partials(part, nb)
        out = s.matvec(p)
        return out, ops.dot(p, out)

    return product


def _graphed(s: _Setup, x0: Vector | None, ops: Any, dinv: Vector | None) -> KrylovOutcome | None:
    """CG with each block of ``check_every`` iterations replayed as one CUDA graph
    (:mod:`ust.api.cg_graph`), where nothing per iteration needs the host; else None."""
    into = getattr(s.matvec, "into", None)
    capturable = getattr(s.matvec, "capturable", None)
    if (
        not GRAPHED_GPU_CG
        or os.environ.get("UST_KRYLOV_GRAPHS", "1").strip() == "0"
        or into is None
        or capturable is None
        or s.callback is not None
        or s.check_every < 2
        or (s.psolve is not None and dinv is None)
    ):
        return None
    if not capturable(s.b):  # planned when the operator was set up (else: the eager loop plans it)
        return None
    from ust.api.cg_graph import cg_graphed

    x, r, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    out = cg_graphed(s, x, r, ops, dinv, into, getattr(s.matvec, "into_dot", None))
    return None if out is None else KrylovOutcome(*out)


def _cg_fused(s: _Setup, x0: Vector | None, ops: Any) -> KrylovOutcome:
    """:func:`_cg`'s recurrence on a GPU through fused kernels (``ops``): per iteration the SpMV,
    ``p^H q`` (two kernels), one pass that updates x and r, applies a Jacobi preconditioner and
    forms ``r^H z`` and ``r^H r`` (two kernels), and ``p = z + beta p`` (one).  alpha and beta are
    divided inside the kernels that use them; the convergence test reads ``r^H r`` (one host
    read every ``check_every`` iterations, as the unfused path reads its norm).  Another
    preconditioner runs after the fused update, and ``r^H z`` is then one more dot."""
    dinv = _jacobi_inverse(s)
    graphed = _graphed(s, x0, ops, dinv)
    if graphed is not None:
        return graphed
    x, r, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    good = x.copy()  # the last x whose residual was finite, refreshed at each test
    breakdown = "a non-finite CG scalar (p^H A p = 0?)"
    general = s.psolve is not None and dinv is None  # a preconditioner the step cannot fuse
    zbuf = None if dinv is None else s.xp.empty_like(s.b)

    def precondition(r: Vector) -> tuple[Vector, Any]:
        z = r if s.psolve is None else r * dinv if dinv is not None else s.psolve(r)
        return z, ops.dot(r, z)

    z, rz = precondition(r)
    p = z.astype(s.b.dtype, order="C", copy=True)
    product = _product_with_dot(s, ops)
    it = 0
    while it < s.maxiter:
        it += 1
        q, pq = product(p)
        z, rz_new, rr = ops.cg_step(x, r, p, q, (rz, pq), dinv, out=zbuf)
        if s.callback is not None:
            s.callback(x)
        restart = general
        if s.checks(it):
            rn = math.sqrt(float(rr))
            if not _finite(rn):
                return KrylovOutcome(good, -1, it, s.true_residual(good)[1], breakdown)
            if rn <= s.tol:
                r, rn = s.true_residual(x)
                if rn <= s.tol:
                    return KrylovOutcome(x, 0, it, rn)
                r = s.xp.ascontiguousarray(r)
                restart = True  # the recurrence goes on from the true residual
            good[...] = x
        if restart:
            z, rz_new = precondition(r)
        ops.xpby(z, (rz_new, rz), p)
        rz = rz_new
    _, rn = s.true_residual(x)
    return KrylovOutcome(x, 0 if rn <= s.tol else s.maxiter, it, rn)


def _bicgstab(s: _Setup, x0: Vector | None, **_: Any) -> KrylovOutcome:
    """SciPy's preconditioned BiCGSTAB (rtilde = r0), its breakdown codes -10 (rho) / -11 (omega)."""
    xp = s.xp
    x, r, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    tiny = _eps(s.b.dtype) ** 2
    good = x.copy()
    rtilde = r.copy()
    rho_prev: Any = None
    alpha: Any = None
    omega: Any = None
    p: Any = None
    v: Any = None
    it = 0
    while it < s.maxiter:
        it += 1
        rho = _dot(xp, rtilde, r)
        check = s.checks(it)
        if check and abs(complex(rho)) < tiny:
            return KrylovOutcome(good, -10, it, s.true_residual(good)[1], "rho breakdown")
        if p is None:
            p = r.copy()
        else:
            if check and abs(complex(omega)) < tiny:
                return KrylovOutcome(good, -11, it, s.true_residual(good)[1], "omega breakdown")
            beta = (rho / rho_prev) * (alpha / omega)
            p -= omega * v
            p *= beta
            p += r
        phat = s.precondition(p)
        v = s.matvec(phat)
        alpha = rho / _dot(xp, rtilde, v)
        r -= alpha * v  # r is s of the textbook from here
        if check:
            sn = float(xp.linalg.norm(r))
            if _finite(sn) and sn <= s.tol:
                x += alpha * phat
                _r_true, rn = s.true_residual(x)
                if rn <= s.tol:
                    if s.callback is not None:
                        s.callback(x)
                    return KrylovOutcome(x, 0, it, rn)
                x -= alpha * phat
        shat = s.precondition(r)
        t = s.matvec(shat)
        omega = _dot(xp, t, r) / _dot(xp, t, t)
        x += alpha * phat
        x += omega * shat
        r -= omega * t
        rho_prev = rho
        if s.callback is not None:
            s.callback(x)
        if check:
            rn = float(xp.linalg.norm(r))
            if not _finite(rn):
                return KrylovOutcome(good, -11, it, s.true_residual(good)[1], "a non-finite BiCGSTAB scalar")
            if rn <= s.tol:
                r, rn = s.true_residual(x)
                if rn <= s.tol:
                    return KrylovOutcome(x, 0, it, rn)
            good[...] = x
    _, rn = s.true_residual(x)
    return KrylovOutcome(x, 0 if rn <= s.tol else s.maxiter, it, rn)


def _minres(s: _Setup, x0: Vector | None, *, shift: float = 0.0, **_: Any) -> KrylovOutcome:
    """Paige and Saunders' MINRES (M symmetric positive definite), as SciPy's, stopped on the true
    residual: the recurrence's estimate |phibar| (in the M^-1 norm when M is given) is scaled
    by its ratio to the true residual at the last check."""
    xp = s.xp
    x, r1, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    eps = _eps(s.b.dtype)
    y = s.precondition(r1)
    beta1 = float(np.sqrt(abs(complex(_dot(xp, r1, y)))))
    if not _finite(beta1) or beta1 == 0.0:
        return KrylovOutcome(x, -1, 0, rn, "M is not positive definite (r^H M r = 0)")
    good = x.copy()
    scale = rn / beta1  # true residual / preconditioned estimate, refreshed at each true check
    oldb = 0.0
    beta: Any = beta1
    dbar: Any = 0.0
    epsln: Any = 0.0
    phibar: Any = beta1
    cs: Any = -1.0
    sn: Any = 0.0
    w = xp.zeros_like(s.b)
    w2 = xp.zeros_like(s.b)
    r2 = r1
    it = 0
    while it < s.maxiter:
        it += 1
        v = y * (1.0 / beta)
        y = s.matvec(v)
        if shift:
            y = y - shift * v
        if it >= 2:
            y = y - (beta / oldb) * r1
        alfa = _dot(xp, v, y).real
        y = y - (alfa / beta) * r2
        r1, r2 = r2, y
        y = s.precondition(r2)
        oldb = beta
        beta = xp.sqrt(xp.abs(_dot(xp, r2, y)))
        oldeps = epsln
        delta = cs * dbar + sn * alfa
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta
        dbar = -cs * beta
        gamma = xp.maximum(xp.sqrt(gbar * gbar + beta * beta), eps)
        cs = gbar / gamma
        sn = beta / gamma
        phi = cs * phibar
        phibar = sn * phibar
        w1, w2 = w2, w
        w = (v - oldeps * w1 - delta * w2) * (1.0 / gamma)
        x += phi * w
        if s.callback is not None:
            s.callback(x)
        if s.checks(it):
            est = abs(float(phibar)) * scale
            if not _finite(est) or not _finite(float(beta)):
                return KrylovOutcome(good, -1, it, s.true_residual(good)[1], "a non-finite MINRES scalar")
            if est <= s.tol or float(beta) == 0.0:
                _, rn = s.true_residual(x)
                if rn <= s.tol:
                    return KrylovOutcome(x, 0, it, rn)
                scale = rn / max(abs(float(phibar)), 1e-300)
            good[...] = x
    _, rn = s.true_residual(x)
    return KrylovOutcome(x, 0 if rn <= s.tol else s.maxiter, it, rn)


def _lartg(f: complex, g: complex) -> tuple[float, complex, complex]:
    """A Givens rotation (c real, s) with [c s; -conj(s) c] [f; g] = [r; 0] (LAPACK's lartg)."""
    af, ag = abs(f), abs(g)
    if ag == 0.0:
        return 1.0, 0.0, f
    if af == 0.0:
        return 0.0, np.conj(g) / ag, ag
    norm = float(np.hypot(af, ag))
    c = af / norm
    alpha = f / af
    return c, alpha * np.conj(g) / norm, alpha * norm


def _gmres(
    s: _Setup,
    x0: Vector | None,
    *,
    restart: int = 20,
    callback_type: str | None = None,
    **_: Any,
) -> KrylovOutcome:
    """Restarted GMRES, right-preconditioned (the Arnoldi residual is the true one in exact
    arithmetic), classical Gram-Schmidt twice (two matrix-vector products with the basis per
    step: few kernels on a GPU), Givens rotations on the host over the Hessenberg columns read
    every ``check_every`` steps.  ``maxiter`` counts restart cycles (inner steps for
    ``callback_type="legacy"``), as SciPy's."""
    xp = s.xp
    n = s.b.shape[0]
    m = max(1, min(restart, n))
    x, r, rn = _start(s, x0)
    if rn <= s.tol:
        return KrylovOutcome(x, 0, 0, rn)
    dtype = s.b.dtype
    eps = _eps(dtype)
    bnorm = float(xp.linalg.norm(s.b))
    V = xp.empty((m + 1, n), dtype=dtype)
    Hd = xp.zeros((m + 1, m), dtype=dtype)  # Hessenberg columns on the device
    legacy = callback_type == "legacy"
    every = 1 if legacy else s.check_every  # legacy counts (and calls back) per inner step
    inner_total = 0
    cycles = 0
    while cycles < s.maxiter:
        cycles += 1
        V[0] = r / rn
        H = np.zeros((m + 1, m), dtype=dtype)
        g = np.zeros(m + 1, dtype=dtype)
        g[0] = rn
        rot: list[tuple[float, complex]] = []
        col = -1
        stop = False
        pending = 0
        done_cols = 0
        presid = rn
        while col + 1 < m and not stop:
            col += 1
            w = s.matvec(s.precondition(V[col]))
            h = V[: col + 1].conj() @ w
            w -= V[: col + 1].T @ h
            h2 = V[: col + 1].conj() @ w
            w -= V[: col + 1].T @ h2
            h = h + h2
            hn = xp.linalg.norm(w)
            Hd[: col + 1, col] = h
            Hd[col + 1, col] = hn
            V[col + 1] = w / xp.where(hn == 0, 1, hn)
            pending += 1
            inner_total += 1
            if not (pending >= every or col + 1 == m):
                continue
            pending = 0
            block = _host(xp, Hd[: col + 2, done_cols : col + 1])
            for j in range(done_cols, col + 1):
                hj = block[:, j - done_cols].copy()
                for k, (c, sk) in enumerate(rot):
                    hj[k], hj[k + 1] = c * hj[k] + sk * hj[k + 1], -np.conj(sk) * hj[k] + c * hj[k + 1]
                h_sub = abs(hj[j + 1])
                breakdown = h_sub <= eps * float(np.linalg.norm(hj[: j + 2]))
                c, sk, mag = _lartg(hj[j], hj[j + 1])
                rot.append((c, sk))
                hj[j], hj[j + 1] = mag, 0.0
                H[: j + 2, j] = hj[: j + 2]
                g[j], g[j + 1] = c * g[j], -np.conj(sk) * g[j]
                presid = abs(g[j + 1])
                if s.callback is not None and callback_type in ("legacy", "pr_norm"):
                    s.callback(presid / bnorm)
                if not _finite(presid):
                    return KrylovOutcome(x, -1, inner_total, s.true_residual(x)[1], "a non-finite GMRES step")
                if presid <= s.tol or breakdown:
                    col = j
                    stop = True
                    break
            done_cols = col + 1
            if legacy and inner_total >= s.maxiter:  # legacy: maxiter counts inner steps
                stop = True
        k = col + 1
        y = _upper_solve(H[:k, :k], g[:k])
        x += s.precondition(xp.asarray(y) @ V[:k])
        r, rn = s.true_residual(x)
        if s.callback is not None and callback_type == "x":
            s.callback(x)
        if rn <= s.tol or (legacy and inner_total >= s.maxiter):
            break
    info = 0 if rn <= s.tol else s.maxiter
    return KrylovOutcome(x, info, inner_total, rn)


def _host(xp: Any, a: Any) -> np.ndarray:
    return a if xp is np else a.get()


def _upper_solve(R: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``R y = g`` for the rotated Hessenberg (upper triangular) block; a zero pivot gives a zero
    component, as SciPy's pseudo-solve."""
    k = g.shape[0]
    y = g.astype(R.dtype, copy=True)
    for i in range(k - 1, -1, -1):
        if R[i, i] == 0:
            y[i] = 0
            continue
        y[i] /= R[i, i]
        y[:i] -= y[i] * R[:i, i]
    return y


#: The methods by name: the iteration of each.
METHODS: dict[str, Callable[..., KrylovOutcome]] = {
    "cg": _cg,
    "minres": _minres,
    "gmres": _gmres,
    "bicgstab": _bicgstab,
}


def run(
    method: str,
    matvec: Op,
    b: Vector,
    x0: Vector | None,
    *,
    xp: Any,
    tol: float,
    maxiter: int,
    psolve: Op | None = None,
    check_every: int = 1,
    callback: Callable[[Any], Any] | None = None,
    **extra: Any,
) -> KrylovOutcome:
    """Run ``method`` on ``A x = b`` until ``||b - A x|| <= tol`` or ``maxiter``."""
    setup = _Setup(xp, matvec, psolve, b, tol, maxiter, max(1, int(check_every)), callback)
    return METHODS[method](setup, x0, **extra)
