"""Dense work on the CPU: BLAS / NumPy matmul with in-place epilogues, and scipy.fft.

The matmul mirrors cuBLASLt's semantics, ``D = epilogue(alpha * A @ B + beta * C + bias)``: a 2-D
problem in a BLAS dtype is one ``?gemm`` call that reads C and writes D in one pass (D starts as a
copy of C); anything else is ``np.matmul(..., out=D)`` followed by in-place ufuncs.  Epilogues
never allocate a full-size temporary: bias and ReLU are single in-place ufuncs, GELU works through
a cache-sized scratch block.  float16 accumulates in float32, as cuBLASLt's compute type does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = [
    "CPU_DTYPES",
    "FFT_KINDS",
    "CpuMatmul",
    "alloc_matrices",
    "apply_epilogue",
    "fft",
    "gelu_inplace",
    "scale_add",
    "storage",
]

_log = get_logger("backends.cpu.dense")

# dtypes the CPU matmul runs, and the ones a single BLAS gemm call covers
CPU_DTYPES = ("float16", "float32", "float64", "complex64", "complex128")
_BLAS_DTYPES = ("float32", "float64", "complex64", "complex128")
_GELU_C = math.sqrt(2.0 / math.pi)
_SCRATCH = 1 << 16  # elements per GELU block: stays in L2


def alloc_matrices(xp: Any, shape: tuple[int, ...], dtype: Any, order: str) -> Any:
    """An uninitialised array of ``shape`` whose matrices are row- (``"C"``) or column-major (``"F"``).

    Batches are contiguous either way, so one batch stride describes the whole array.
    """
    if order == "C" or len(shape) < 2:
        return xp.empty(shape, dtype=dtype)
    swapped = (*shape[:-2], shape[-1], shape[-2])
    return xp.empty(swapped, dtype=dtype).swapaxes(-1, -2)


def storage(d: Any) -> Any:
    """A 1-D view of all of ``d``'s elements (any order), or None when ``d`` is not contiguous.

    Elementwise epilogues do not care about order, so row- and column-major matrices alike
    (and batches of them from :func:`alloc_matrices`) are walked as one flat buffer.
    """
    if d.flags.c_contiguous:
        return d.reshape(-1)
    if d.flags.f_contiguous:
        return d.T.reshape(-1)
    if d.ndim >= 2 and d.swapaxes(-1, -2).flags.c_contiguous:
        return d.swapaxes(-1, -2).reshape(-1)
    return None


def gelu_inplace(d: Any, xp: Any = np) -> None:
    """GELU, tanh form (as cuBLASLt): ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, in place.

    Runs through a scratch block of at most ``_SCRATCH`` elements, so no full-size temporary.
    """
    flat = storage(d)
    if flat is None:  # not contiguous in any order: plain ufuncs with a temporary
        d *= 0.5 * (1.0 + xp.tanh(_GELU_C * (d + 0.044715 * d * d * d)))
        return
    if flat.size == 0:
        return
    block = min(_SCRATCH, flat.size) if xp is np else flat.size  # on a GPU one block is best
    scratch = xp.empty(block, dtype=d.dtype)
    for start in range(0, flat.size, block):
        x = flat[start : start + block]
        t = scratch[: x.size]
        xp.multiply(x, x, out=t)
        t *= 0.044715
        t += 1.0
        t *= x
        t *= _GELU_C
        xp.tanh(t, out=t)
        t += 1.0
        t *= 0.5
        x *= t


def apply_epilogue(d: Any, epilog: str, bias: Any = None, xp: Any = np) -> None:
    """Add ``bias`` (broadcast against ``d``) then apply the activation of ``epilog``, in place."""
    if "bias" in epilog:
        xp.add(d, bias, out=d)
    if epilog.startswith("relu"):
        xp.maximum(d, 0, out=d)
    elif epilog.startswith("gelu"):
        gelu_inplace(d, xp)


def scale_add(d: Any, c: Any, alpha: Any, beta: Any) -> None:
    """``d = alpha * d + beta * c`` in place, with no temporary of d's size.

    For beta other than 0 and 1 it is computed as ``beta * ((alpha / beta) * d + c)``.
    """
    if c is None or beta == 0:
        if alpha != 1:
            d *= alpha
        return
    if beta == 1:
        if alpha != 1:
            d *= alpha
        np.add(d, c, out=d)
        return
    ratio = alpha / beta
    if ratio != 1:
        d *= ratio
    np.add(d, c, out=d)
    d *= beta


def _blas_operand(x: np.ndarray, name: str) -> tuple[np.ndarray, int]:
    """``(array, trans)`` with ``op(array) == x`` and the array Fortran-contiguous (BLAS's own layout)."""
    if x.flags.f_contiguous:
        return x, 0
    if x.flags.c_contiguous:
        return x.T, 1
    _log.info(
        "operand %s (strides %s) is not contiguous; copying it for BLAS (%d bytes)", name, x.strides, x.nbytes
    )
    return np.asfortranarray(x), 0


class CpuMatmul:
    """The CPU route of one dense matmul: ``"blas.gemm"`` for 2-D BLAS dtypes, else ``"numpy.matmul"``."""

    def __init__(
        self, *, dtype: str, out_shape: tuple[int, ...], k: int, epilog: str, order: str = "C"
    ) -> None:
        if dtype not in CPU_DTYPES:
            raise UnsupportedError(
                f"dense matmul of {dtype} is not supported on the CPU; supported there: {', '.join(CPU_DTYPES)}"
                + (" (bfloat16 runs on the GPU: pass execution='cuda')" if dtype == "bfloat16" else "")
            )
        self.dtype = np.dtype(dtype)
        self.out_shape = out_shape
        self.epilog = epilog
        self.order = order
        empty = math.prod(out_shape) == 0 or k == 0
        self.route = (
            "blas.gemm" if (len(out_shape) == 2 and dtype in _BLAS_DTYPES and not empty) else "numpy.matmul"
        )
        self.acc_dtype = np.dtype(np.float32) if dtype == "float16" else self.dtype

    def run(
        self, a: np.ndarray, b: np.ndarray, c: Any, alpha: Any, beta: Any, bias: Any = None
    ) -> np.ndarray:
        """D for these operands (a fresh array; the operands are only read)."""
        if self.route == "blas.gemm":
            d = self._gemm(a, b, c, alpha, beta)
        else:
            d = alloc_matrices(np, self.out_shape, self.acc_dtype, self.order)
            np.matmul(a, b, out=d, dtype=self.acc_dtype)
            scale_add(d, c, alpha, beta)
        if self.epilog != "none":
            apply_epilogue(d, self.epilog, bias)
        if d.dtype != self.dtype:
            d = d.astype(self.dtype, order="K")
        return d

    def _gemm(self, a: np.ndarray, b: np.ndarray, c: Any, alpha: Any, beta: Any) -> np.ndarray:
        from scipy.linalg import blas

        gemm = blas.get_blas_funcs("gemm", dtype=self.dtype)
        d = alloc_matrices(np, self.out_shape, self.dtype, self.order)
        use_c = c is not None and beta != 0
        if use_c:
            np.copyto(d, c)
        if self.order == "F":  # D = A B, column-major: BLAS's own layout
            (x, tx), (y, ty), target = _blas_operand(a, "a"), _blas_operand(b, "b"), d
        else:  # row-major D is the column-major D^T = B^T A^T
            (x, tx), (y, ty), target = _blas_operand(b.T, "b"), _blas_operand(a.T, "a"), d.T
        out = gemm(alpha, x, y, beta=beta if use_c else 0, c=target, trans_a=tx, trans_b=ty, overwrite_c=1)
        if not np.shares_memory(out, d):  # f2py copied the output after all (it should not)
            np.copyto(target, out)
        return d


# ------------------------------------------------------------------------------------------- FFT

# kind -> (scipy.fft function name, takes n/axis (1-D) or s/axes (N-D), input must be real)
FFT_KINDS: dict[str, tuple[str, bool, bool]] = {
    "fft": ("fft", False, False),
    "ifft": ("ifft", False, False),
    "rfft": ("rfft", False, True),
    "irfft": ("irfft", False, False),
    "fftn": ("fftn", True, False),
    "ifftn": ("ifftn", True, False),
}


def fft(kind: str, x: np.ndarray, n: Any, axes: Any, norm: str | None, workers: int | None) -> np.ndarray:
    """One scipy.fft transform (``n``/``axes`` are the 1-D or N-D arguments of ``kind``)."""
    import scipy.fft

    fn = getattr(scipy.fft, FFT_KINDS[kind][0])
    if FFT_KINDS[kind][1]:
        return fn(x, s=n, axes=axes, norm=norm, workers=workers)
    return fn(x, n=n, axis=axes, norm=norm, workers=workers)
