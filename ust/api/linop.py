"""A Tensor as a ``scipy.sparse.linalg.LinearOperator`` (CPU) or its cupyx twin (GPU).

``matvec`` / ``matmat`` run ``ust.matmul`` (the planned SpMV / SpMM route for the format);
``rmatvec`` / ``rmatmat`` compute ``A^H x`` through the transposed view (free: the same
buffers under the permuted map) and conjugation of the vector, never of the matrix.  The
planned ``Matmul`` objects are built once per operand shape and reused, so an iterative
solver pays the planning once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["aslinearoperator"]


class _Product:
    """``A @ x`` through the planned route, one planned Matmul per operand shape, reused.

    Where the planner picks SciPy (plain SpMV / SpMM of a SciPy layout) the zero-copy SciPy
    view is kept and called directly: that *is* the route, without per-call re-planning.
    """

    def __init__(self, a: Any) -> None:
        self.a = a
        self._plans: dict[tuple[tuple[int, ...], str], Any] = {}
        self._view: Any = None
        self._dot: tuple[Any, Any, Any, Any] | None = None  # (x, out, part, bound dot launch)

    def __call__(self, x: Any) -> Any:
        from ust.api.matmul import Matmul

        x = x if x.flags.c_contiguous else x.copy()
        key = (tuple(x.shape), str(x.dtype))
        mm = self._plans.get(key)
        if mm is None:
            mm = Matmul(self.a, x)
            mm.plan()
            self._plans[key] = mm
            if mm.decision.route == "scipy" and self._view is None:
                self._view = self.a.to_scipy()
        if mm.decision.route == "scipy":
            return self._view @ x
        # the planned executor, called on this x (the executor protocol of ust.api.matmul:
        # run(b, c, out, stream)); no re-planning, no rebuilt executor per product
        xp = self.a.xp
        b = x if x.dtype == mm.dtype else x.astype(mm.dtype)
        out = xp.empty((self.a.shape[0], *x.shape[1:]), dtype=mm.dtype)
        return mm.executor.run(b, None, out, mm._stream())

    def into_dot(self, x: Any, out: Any, part: Any) -> int | None:
        """``out[...] = A @ x`` and ``part[:n]`` = the block partial sums of ``x^H out``, one kernel
        (the generated SpMV's ``dot`` variant): ``n``, or None where the route has no such
        kernel (nothing is then written).  The same objects call after call reuse the bound
        launch, so a Krylov loop can record it in a CUDA graph."""
        key = (tuple(x.shape), str(x.dtype))
        if key not in self._plans:
            self(x)  # plans
        mm = self._plans[key]
        if mm.decision.route != "generated-cuda" or mm.dtype != x.dtype or mm.dtype != out.dtype:
            return None
        last = self._dot
        if last is None or last[0] is not x or last[1] is not out or last[2] is not part:
            bound = getattr(mm.executor, "bind_dot", lambda *_: None)(x, out, part)
            last = self._dot = (x, out, part, bound)
        if last[3] is None:
            return None
        launch, n = last[3]
        launch(mm._stream())
        return int(n)

    def capturable(self, x: Any) -> bool:
        """Whether :meth:`into` on ``x`` only launches kernels over buffers made beforehand (the
        generated CUDA route: a bound launch), so that it may be recorded in a CUDA graph."""
        mm = self._plans.get((tuple(x.shape), str(x.dtype)))
        return mm is not None and mm.decision.route == "generated-cuda" and mm.dtype == x.dtype

    def into(self, x: Any, out: Any) -> Any:
        """``out[...] = A @ x`` for a C-contiguous ``x`` and ``out`` of the planned dtype, the same
        objects call after call: the executor's bound launch (arguments marshalled once) is
        reused, nothing is allocated, so a Krylov loop can record it in a CUDA graph."""
        key = (tuple(x.shape), str(x.dtype))
        if key not in self._plans:
            self(x)  # plans (the result is dropped: planning is the point)
        mm = self._plans[key]
        if mm.decision.route == "scipy" or mm.dtype != x.dtype or mm.dtype != out.dtype:
            out[...] = self(x)
            return out
        return mm.executor.run(x, None, out, mm._stream())


def aslinearoperator(a: Any) -> Any:
    """A LinearOperator of ``a`` (any 2-D ust Tensor or sparse matrix) for iterative solvers.

    >>> import numpy as np, scipy.sparse as sp, scipy.sparse.linalg as spla
    >>> from ust.convert import asarray
    >>> A = asarray(sp.diags_array([4.0, -1.0, -1.0], offsets=[0, 1, -1], shape=(50, 50)), "DIA")
    >>> x, info = spla.cg(aslinearoperator(A), np.ones(50))
    >>> info, bool(np.allclose(A.to_scipy() @ x, 1, atol=1e-4))
    (0, True)
    """
    from ust.algebra.operands import as_tensor, require_2d
    from ust.algebra.transpose import transpose

    t = as_tensor(a)
    require_2d(t, "aslinearoperator")
    forward = _Product(t)
    backward = _Product(transpose(t))
    is_complex = np.dtype(t.dtype).kind == "c"

    def rmatvec(x: Any) -> Any:
        return backward(x.conj()).conj() if is_complex else backward(x)

    if t.device == "cpu":
        from scipy.sparse.linalg import LinearOperator
    else:  # pragma: no cover - GPU
        from ust.runtime.xp import import_cupy

        LinearOperator = import_cupy("cupyx.scipy.sparse.linalg").LinearOperator
    return LinearOperator(
        t.shape, matvec=forward, rmatvec=rmatvec, matmat=forward, rmatmat=rmatvec, dtype=t.dtype
    )
