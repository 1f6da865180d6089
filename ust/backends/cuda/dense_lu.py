"""cuSOLVER's ``getrf`` / ``getrs`` for the GPU's dense LU route
(:class:`ust.backends.dense_lu.DenseLUEngine`): a small system solved in well under a millisecond,
where cuDSS's analysis alone takes about ten."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ust.runtime.errors import UstError

__all__ = ["DeviceLapack"]

#: cuSOLVER's typed entry points by the dtype's character (s, d, c, z).
_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}


@functools.cache
def _scatter_kernel() -> Any:
    """Row ``i`` of a CSR matrix into column-major ``out`` (``+=``: duplicates, in one thread, add up)."""
    import cupy

    return cupy.ElementwiseKernel(
        "raw I indptr, raw J indices, raw T data, int64 n",
        "raw T out",
        "for (long long k = indptr[i]; k < indptr[i + 1]; ++k) out[(long long)indices[k] * n + i] += data[k];",
        "ust_csr_to_dense_f",
    )


class DeviceLapack:
    """The dense LU's library calls on one GPU, queued on the solver's stream."""

    def __init__(self, device_id: int, stream: int) -> None:
        import cupy
        from cupy_backends.cuda.libs import cusolver

        self.xp = self._cupy = cupy
        self._cusolver = cusolver
        self.device_id, self.stream = device_id, stream
        self.version = f"cuSOLVER {cusolver.getVersion()}" if hasattr(cusolver, "getVersion") else "cuSOLVER"

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        """The device current and, where the solver was given another stream, that stream
        current, ordered after the work already queued on the caller's current stream and
        before whatever the caller queues next (events both ways: no host synchronisation)."""
        cp = self._cupy
        with cp.cuda.Device(self.device_id):
            caller = cp.cuda.get_current_stream()
            if not self.stream or self.stream == caller.ptr:
                yield
                return
            ours = cp.cuda.ExternalStream(self.stream, self.device_id)
            ours.wait_event(caller.record())
            with ours:
                yield
            caller.wait_event(ours.record())

    def _fn(self, name: str, dtype: np.dtype) -> Any:
        try:
            return getattr(self._cusolver, _PREFIX[np.dtype(dtype).char] + name)
        except KeyError:
            raise UstError(f"cuSOLVER has no {name} for {dtype}") from None

    def densify(self, full: Any) -> Any:
        """``A`` column-major, one thread per row scattering its entries (cupyx's ``toarray``
        copies and sorts the matrix first; this one is canonical already)."""
        cp = self._cupy
        n = int(full.shape[0])
        with self._on_stream():
            # flat: a raw 2-D argument's [] reads its index in row-major order whatever its layout
            flat = cp.zeros(n * n, dtype=full.dtype)
            if n:
                _scatter_kernel()(full.indptr, full.indices, full.data, n, flat, size=n)
        return flat.reshape((n, n), order="F")

    def getrf(self, a: Any, count_swaps: bool) -> tuple[Any, Any, int, int, float]:
        cp = self._cupy
        n = int(a.shape[0])
        with self._on_stream():
            handle = cp.cuda.device.get_cusolver_handle()
            lwork = self._fn("getrf_bufferSize", a.dtype)(handle, n, n, a.data.ptr, n)
            work = cp.empty(max(int(lwork), 1), dtype=a.dtype)
            piv = cp.empty(n, dtype=np.int32)
            info = cp.zeros(1, dtype=np.int32)
            self._fn("getrf", a.dtype)(
                handle, n, n, a.data.ptr, n, work.data.ptr, piv.data.ptr, info.data.ptr
            )
            # info, the smallest pivot and the row interchanges (cuSOLVER's pivots are 1-based)
            # in one transfer
            parts = [info.astype(np.float64), cp.abs(a.diagonal()).min(keepdims=True).astype(np.float64)]
            if count_swaps:
                parts.append(
                    cp.count_nonzero(piv != cp.arange(1, n + 1, dtype=np.int32)).reshape(1).astype(np.float64)
                )
            got = cp.concatenate(parts).get()
        if got[0] < 0:
            raise UstError(f"cuSOLVER getrf rejected argument {-int(got[0])}")
        return a, piv, int(got[0]), int(got[2]) if count_swaps else 0, float(got[1])

    def getrs(self, lu: Any, piv: Any, b: Any, trans: int = 0) -> Any:
        """``x`` of ``op(A) x = b``: ``trans`` 0 for ``A``, 2 for ``A^H`` (cuBLAS's operation codes)."""
        cp = self._cupy
        n = int(lu.shape[0])
        with self._on_stream():
            handle = cp.cuda.device.get_cusolver_handle()
            x = cp.array(b, dtype=lu.dtype, order="F", copy=True)
            info = cp.zeros(1, dtype=np.int32)
            nrhs = int(x.shape[1]) if x.ndim == 2 else 1
            # the arguments are this adapter's own, so info (< 0 only for a bad argument) is not
            # read back: no synchronisation in a solve
            self._fn("getrs", lu.dtype)(
                handle, trans, n, nrhs, lu.data.ptr, n, piv.data.ptr, x.data.ptr, n, info.data.ptr
            )
        return x

    def rcond(self, lu: Any, piv: Any, norm_inf: float) -> float:
        """Hager's estimate over cuSOLVER solves (cuSOLVER has no ``gecon``)."""
        from ust.backends.dense_lu import hager_inverse_norm

        n = int(lu.shape[0])
        with self._on_stream():
            inv = hager_inverse_norm(n, lambda v, t: self.getrs(lu, piv, v, t), self._cupy, lu.dtype)
        return 0.0 if inv == float("inf") else 1.0 / (norm_inf * inv)
