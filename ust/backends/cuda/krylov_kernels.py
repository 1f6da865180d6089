"""Fused vector operations of the GPU Krylov iterations: fewer kernels per CG iteration.

One CG iteration written with plain CuPy operations is about ten kernels besides the SpMV (two
vdots, two axpys, a norm, the Jacobi scale, the two-step update of p, copies).  With these it is
five, and each vector is read once per pass:

* :func:`dot` ``(p, q)``: per-block partial sums of ``conj(p) q``, then their sum (one kernel
  when one block covers the vector);
* :func:`cg_step`: ``x += alpha p``, ``r -= alpha q``, ``z = dinv r`` and the partial sums of
  ``r^H z`` and ``r^H r`` in one pass, then the two sums (one small kernel, one block per sum);
* :func:`xpby`: ``p = z + beta p`` in place.

The recurrence scalars stay on the device: ``alpha`` and ``beta`` are each a 0-d array, or a pair
``(num, den)`` of 0-d arrays divided inside the kernel that uses them (so the division costs no
kernel of its own), and the results are 0-d arrays.  Nothing here waits for the device.

No atomics: the grid depends only on the length (:data:`BLOCK` threads, at most
:data:`MAX_BLOCKS` blocks), every thread adds its elements in a fixed order, every block sums
its threads' values by the same shared-memory tree, and one block adds the partials of a sum in
a fixed order.  The results are bitwise the same run to run.

float32, float64, complex64 and complex128; complex values are plain ``{re, im}`` structs as in
the generated kernels (:mod:`ust.codegen.emit_cuda`), the complex dot is ``sum conj(a) b``
(``xp.vdot``).  Every kernel of a dtype is in one CUDA source, compiled once per dtype and device
through ust's NVRTC binding and artefact cache (:mod:`ust.backends.cuda.kernels`).  CuPy is
imported inside the functions only, so importing this module imports no GPU package.
"""

from __future__ import annotations

import functools
import string
from typing import Any

import numpy as np

from ust.runtime.log import get_logger

__all__ = [
    "BLOCK",
    "DTYPES",
    "KERNEL_NAMES",
    "MAX_BLOCKS",
    "capture",
    "cg_step",
    "dot",
    "kernel_source",
    "sum_partials",
    "workspace",
    "xpby",
]

_log = get_logger("backends.cuda.krylov_kernels")

#: Threads per block of every kernel here.
BLOCK = 256
#: The most blocks a pass uses (grid-stride loops beyond): a fixed grid for a given length.
MAX_BLOCKS = 1024
#: The dtypes the kernels are built for.
DTYPES = ("float32", "float64", "complex64", "complex128")

_REAL = r"""
typedef $R T;
typedef $R R;
__device__ __forceinline__ T ust_zero() { return (T)0; }
__device__ __forceinline__ T ust_add(T a, T b) { return a + b; }
__device__ __forceinline__ T ust_sub(T a, T b) { return a - b; }
__device__ __forceinline__ T ust_mul(T a, T b) { return a * b; }
__device__ __forceinline__ T ust_cmul(T a, T b) { return a * b; }  /* conj(a) * b */
__device__ __forceinline__ R ust_abs2(T a) { return a * a; }
__device__ __forceinline__ T ust_real(R v) { return v; }
__device__ __forceinline__ T ust_div(T a, T b) { return a / b; }
"""

_COMPLEX = r"""
struct __align__($ALIGN) ust_complex { $R re, im; };
typedef ust_complex T;
typedef $R R;
__device__ __forceinline__ T ust_make(R re, R im) { T o; o.re = re; o.im = im; return o; }
__device__ __forceinline__ T ust_zero() { return ust_make(0, 0); }
__device__ __forceinline__ T ust_add(T a, T b) { return ust_make(a.re + b.re, a.im + b.im); }
__device__ __forceinline__ T ust_sub(T a, T b) { return ust_make(a.re - b.re, a.im - b.im); }
__device__ __forceinline__ T ust_mul(T a, T b) {
    return ust_make(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
__device__ __forceinline__ T ust_cmul(T a, T b) {  /* conj(a) * b */
    return ust_make(a.re * b.re + a.im * b.im, a.re * b.im - a.im * b.re);
}
__device__ __forceinline__ R ust_abs2(T a) { return a.re * a.re + a.im * a.im; }
__device__ __forceinline__ T ust_real(R v) { return ust_make(v, 0); }
__device__ __forceinline__ T ust_div(T a, T b) {  /* Smith's algorithm: no overflow of |b|^2 */
    if ($FABS(b.re) >= $FABS(b.im)) {
        const R s = b.im / b.re, d = b.re + b.im * s;
        return ust_make((a.re + a.im * s) / d, (a.im - a.re * s) / d);
    }
    const R s = b.re / b.im, d = b.re * s + b.im;
    return ust_make((a.re * s + a.im) / d, (a.im * s - a.re) / d);
}
"""

_KERNELS = r"""
#define UST_BLOCK $BLOCK

/* sh[0] = the sum of sh[0 .. UST_BLOCK), always by the same tree; every thread of the block calls it */
__device__ __forceinline__ void ust_tree(T* sh) {
    const int t = threadIdx.x;
    __syncthreads();
    for (int s = UST_BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = ust_add(sh[t], sh[t + s]);
        __syncthreads();
    }
}

/* part[block] = the block's partial sum of conj(a[i]) * b[i] */
extern "C" __global__ void ust_krylov_dot(
    const T* __restrict__ a, const T* __restrict__ b, long long n, T* __restrict__ part) {
    __shared__ T sh[UST_BLOCK];
    const long long stride = (long long)gridDim.x * UST_BLOCK;
    T acc = ust_zero();
    for (long long i = (long long)blockIdx.x * UST_BLOCK + threadIdx.x; i < n; i += stride)
        acc = ust_add(acc, ust_cmul(a[i], b[i]));
    sh[threadIdx.x] = acc;
    ust_tree(sh);
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* out[row] = part[row * nb] + ... + part[row * nb + nb - 1]: one block per row */
extern "C" __global__ void ust_krylov_sum_rows(const T* __restrict__ part, long long nb, T* __restrict__ out) {
    __shared__ T sh[UST_BLOCK];
    const T* row = part + (long long)blockIdx.x * nb;
    T acc = ust_zero();
    for (long long j = threadIdx.x; j < nb; j += UST_BLOCK) acc = ust_add(acc, row[j]);
    sh[threadIdx.x] = acc;
    ust_tree(sh);
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

/* x += alpha p; r -= alpha q; z = r dinv (JACOBI); part[block] = the block's sum of conj(r) z
   (conj(r) r without JACOBI), part[nb + block] = its sum of |r|^2.  alpha = num / den (RATIO)
   or num. */
template <bool JACOBI, bool RATIO>
__device__ __forceinline__ void ust_cg_step(
    T* __restrict__ x, T* __restrict__ r, const T* __restrict__ p, const T* __restrict__ q,
    const T* num, const T* den, const T* __restrict__ dinv, T* __restrict__ z, long long n,
    T* __restrict__ part) {
    __shared__ T sh_rz[UST_BLOCK];
    __shared__ T sh_rr[UST_BLOCK];
    const T alpha = RATIO ? ust_div(num[0], den[0]) : num[0];
    const long long stride = (long long)gridDim.x * UST_BLOCK;
    T rz = ust_zero();
    T rr = ust_zero();
    for (long long i = (long long)blockIdx.x * UST_BLOCK + threadIdx.x; i < n; i += stride) {
        x[i] = ust_add(x[i], ust_mul(alpha, p[i]));
        const T ri = ust_sub(r[i], ust_mul(alpha, q[i]));
        r[i] = ri;
        if (JACOBI) {
            const T zi = ust_mul(ri, dinv[i]);
            z[i] = zi;
            rz = ust_add(rz, ust_cmul(ri, zi));
        }
        rr = ust_add(rr, ust_real(ust_abs2(ri)));
    }
    sh_rr[threadIdx.x] = rr;
    ust_tree(sh_rr);
    if (JACOBI) {
        sh_rz[threadIdx.x] = rz;
        ust_tree(sh_rz);
    }
    if (threadIdx.x == 0) {
        part[blockIdx.x] = JACOBI ? sh_rz[0] : sh_rr[0];
        part[gridDim.x + blockIdx.x] = sh_rr[0];
    }
}

#define UST_CG_STEP(NAME, JACOBI, RATIO)                                                          \
    extern "C" __global__ void NAME(T* x, T* r, const T* p, const T* q, const T* num, const T* den, \
                                    const T* dinv, T* z, long long n, T* part) {                  \
        ust_cg_step<JACOBI, RATIO>(x, r, p, q, num, den, dinv, z, n, part);                        \
    }
UST_CG_STEP(ust_krylov_cg_step, false, false)
UST_CG_STEP(ust_krylov_cg_step_ratio, false, true)
UST_CG_STEP(ust_krylov_cg_step_jacobi, true, false)
UST_CG_STEP(ust_krylov_cg_step_jacobi_ratio, true, true)

/* p = p beta + z, beta = num / den (RATIO) or num */
template <bool RATIO>
__device__ __forceinline__ void ust_xpby(
    const T* __restrict__ z, const T* num, const T* den, T* __restrict__ p, long long n) {
    const T beta = RATIO ? ust_div(num[0], den[0]) : num[0];
    const long long stride = (long long)gridDim.x * UST_BLOCK;
    for (long long i = (long long)blockIdx.x * UST_BLOCK + threadIdx.x; i < n; i += stride)
        p[i] = ust_add(ust_mul(p[i], beta), z[i]);
}

extern "C" __global__ void ust_krylov_xpby(const T* z, const T* num, const T* den, T* p, long long n) {
    ust_xpby<false>(z, num, den, p, n);
}
extern "C" __global__ void ust_krylov_xpby_ratio(const T* z, const T* num, const T* den, T* p, long long n) {
    ust_xpby<true>(z, num, den, p, n);
}
"""

#: Every kernel of a dtype's source, by name.
KERNEL_NAMES = (
    "ust_krylov_dot",
    "ust_krylov_sum_rows",
    "ust_krylov_cg_step",
    "ust_krylov_cg_step_ratio",
    "ust_krylov_cg_step_jacobi",
    "ust_krylov_cg_step_jacobi_ratio",
    "ust_krylov_xpby",
    "ust_krylov_xpby_ratio",
)

_TYPES = {
    "float32": (_REAL, {"R": "float"}),
    "float64": (_REAL, {"R": "double"}),
    "complex64": (_COMPLEX, {"R": "float", "ALIGN": "8", "FABS": "fabsf"}),
    "complex128": (_COMPLEX, {"R": "double", "ALIGN": "16", "FABS": "fabs"}),
}


def _dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.name not in _TYPES:
        raise TypeError(f"the fused Krylov kernels take {', '.join(DTYPES)} vectors, not {dt}")
    return dt


def kernel_source(dtype: Any) -> str:
    """The CUDA source of every kernel here for ``dtype`` (NVRTC only: no headers)."""
    types, subs = _TYPES[_dtype(dtype).name]
    head = "/* ust.backends.cuda.krylov_kernels: fused Krylov vector operations. No headers: NVRTC-only. */\n"
    return (
        head
        + string.Template(types).substitute(subs)
        + string.Template(_KERNELS).substitute(BLOCK=str(BLOCK))
    )


@functools.cache
def _functions(dtype_name: str, device_id: int) -> dict[str, Any]:
    """The loaded kernels of a dtype on a device (compiled once; the cubin cached on disk)."""
    from ust.backends.cuda.arrays import import_cupy
    from ust.backends.cuda.kernels import _arch, _load_module

    cp = import_cupy()
    with cp.cuda.Device(device_id):
        mod, how = _load_module(kernel_source(dtype_name), _arch(device_id), KERNEL_NAMES[0])
        fns = {name: mod.get_function(name) for name in KERNEL_NAMES}
    _log.info("fused Krylov kernels for %s on device %d: %s", dtype_name, device_id, how)
    return fns


def _blocks(n: int) -> int:
    return max(1, min(-(-n // BLOCK), MAX_BLOCKS))


def _device_of(cp: Any, a: Any, what: str) -> int:
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{what} must be a CuPy array, not {type(a).__name__}")
    return int(a.device.id)


def _vector(cp: Any, a: Any, dt: np.dtype, n: int | None, what: str, *, written: bool) -> Any:
    """``a`` as the kernels read it: a C-contiguous 1-D CuPy array of ``dt`` (a copy where it is
    not one and only read; an array written in place must already be one)."""
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{what} must be a CuPy array, not {type(a).__name__}")
    if a.dtype != dt or a.ndim != 1 or not a.flags.c_contiguous:
        if written:
            raise ValueError(
                f"{what} is written in place: it must be a C-contiguous 1-D {dt} array, "
                f"not {a.dtype} of shape {a.shape}"
            )
        a = cp.ascontiguousarray(a.reshape(-1), dtype=dt)
    if n is not None and int(a.shape[0]) != n:
        raise ValueError(f"{what} has {a.shape[0]} entries, not {n}")
    return a


def _scalar(cp: Any, s: Any, dt: np.dtype, what: str) -> tuple[Any, Any, bool]:
    """``(num, den, ratio)`` of a 0-d device scalar or of a pair ``(num, den)`` of them."""
    if isinstance(s, tuple):
        if len(s) != 2:
            raise ValueError(f"{what} must be a 0-d device array or a pair (num, den) of them")
        num, den = (_one(cp, v, dt, what) for v in s)
        return num, den, True
    one = _one(cp, s, dt, what)
    return one, one, False


def _one(cp: Any, v: Any, dt: np.dtype, what: str) -> Any:
    if not isinstance(v, cp.ndarray) or v.size != 1:
        raise TypeError(f"{what} must be a one-element CuPy array (it stays on the device), not {v!r}")
    return v if v.dtype == dt and v.flags.c_contiguous else cp.ascontiguousarray(v, dtype=dt)


def _sums(cp: Any, fns: dict[str, Any], part: Any, nb: int, rows: int, dt: np.dtype, out: Any = None) -> Any:
    """The ``rows`` sums of ``part`` (``rows`` rows of ``nb`` partials), one block per row, into
    ``out`` when given (else a new array, or ``part`` itself when one block covered the vector)."""
    if nb == 1 and (out is None or out.data.ptr == part.data.ptr):
        return part  # one block covered the vector: its partials are the sums
    if out is None:
        out = cp.empty(rows, dtype=dt)
    fns["ust_krylov_sum_rows"]((rows,), (BLOCK,), (part, np.int64(nb), out))
    return out


def _buffer(cp: Any, given: Any, size: int, dt: np.dtype, what: str) -> Any:
    """``given`` (a C-contiguous array of ``dt`` with at least ``size`` entries, used as flat
    scratch) or a new array: callers that replay launches (a CUDA graph) pass their own."""
    if given is None:
        return cp.empty(size, dtype=dt)
    if (
        not isinstance(given, cp.ndarray)
        or given.dtype != dt
        or not given.flags.c_contiguous
        or given.size < size
    ):
        raise ValueError(f"{what} must be a C-contiguous {dt} CuPy array of at least {size} entries")
    return given.reshape(-1)[:size]


def workspace(n: int, dtype: Any) -> Any:
    """Scratch for :func:`dot` and :func:`cg_step` on vectors of ``n`` entries (their ``work=``):
    allocated once by a caller that records the launches in a CUDA graph."""
    from ust.backends.cuda.arrays import import_cupy

    return import_cupy().empty(2 * _blocks(n), dtype=_dtype(dtype))


def dot(a: Any, b: Any, *, out: Any = None, work: Any = None) -> Any:
    """``vdot(a, b)`` (``sum conj(a) b``) as a 0-d CuPy array, without waiting for the device.

    Two kernels (one when a block covers the vector).  ``out`` (a one-element array) receives
    the sum and ``work`` (from :func:`workspace`) holds the partials: with both given nothing
    is allocated, so the launches can be recorded in a CUDA graph."""
    from ust.backends.cuda.arrays import import_cupy

    cp = import_cupy()
    dev = _device_of(cp, a, "a")
    dt = _dtype(a.dtype)
    with cp.cuda.Device(dev):
        a = _vector(cp, a, dt, None, "a", written=False)
        n = int(a.shape[0])
        b = _vector(cp, b, dt, n, "b", written=False)
        fns = _functions(dt.name, dev)
        nb = _blocks(n)
        res = None if out is None else _buffer(cp, out, 1, dt, "out")
        part = res if nb == 1 and res is not None else _buffer(cp, work, nb, dt, "work")
        fns["ust_krylov_dot"]((nb,), (BLOCK,), (a, b, np.int64(n), part))
        return _sums(cp, fns, part, nb, 1, dt, res).reshape(())


def sum_partials(part: Any, count: int, *, out: Any = None) -> Any:
    """The sum of ``part[:count]`` (block partial sums, e.g. of an SpMV's ``dot`` kernel) as a
    0-d CuPy array, into ``out`` (a one-element array) when given; one kernel, no wait."""
    from ust.backends.cuda.arrays import import_cupy

    cp = import_cupy()
    dev = _device_of(cp, part, "part")
    dt = _dtype(part.dtype)
    with cp.cuda.Device(dev):
        res = cp.empty(1, dtype=dt) if out is None else _buffer(cp, out, 1, dt, "out")
        return _sums(cp, _functions(dt.name, dev), part, int(count), 1, dt, res).reshape(())


def cg_step(
    x: Any,
    r: Any,
    p: Any,
    q: Any,
    alpha: Any,
    dinv: Any = None,
    *,
    out: Any = None,
    sums: Any = None,
    work: Any = None,
) -> tuple[Any, Any, Any]:
    """One CG update in one pass: ``x += alpha p``, ``r -= alpha q``, ``z = dinv r`` (``z`` is ``r``
    itself when ``dinv`` is None); returns ``(z, vdot(r, z), vdot(r, r).real)``, the two sums as
    0-d device arrays.

    ``x`` and ``r`` (C-contiguous vectors of one dtype) are updated in place; ``alpha`` is a 0-d
    device array or a pair ``(num, den)`` of them (``alpha = num / den``, divided in the kernel);
    ``z`` is written into ``out`` when given (a C-contiguous vector like ``r``, not ``r``).  Two
    kernels (one when a block covers the vector), no host synchronisation.  ``sums`` (a
    two-element array: ``r^H z``, ``r^H r``) and ``work`` (from :func:`workspace`) given,
    nothing is allocated (the launches can be recorded in a CUDA graph).
    """
    from ust.backends.cuda.arrays import import_cupy

    cp = import_cupy()
    dev = _device_of(cp, r, "r")
    dt = _dtype(r.dtype)
    jacobi = dinv is not None
    with cp.cuda.Device(dev):
        r = _vector(cp, r, dt, None, "r", written=True)
        n = int(r.shape[0])
        x = _vector(cp, x, dt, n, "x", written=True)
        p = _vector(cp, p, dt, n, "p", written=False)
        q = _vector(cp, q, dt, n, "q", written=False)
        num, den, ratio = _scalar(cp, alpha, dt, "alpha")
        if jacobi:
            dinv = _vector(cp, dinv, dt, n, "dinv", written=False)
            z = cp.empty(n, dtype=dt) if out is None else _vector(cp, out, dt, n, "out", written=True)
            if z.data.ptr == r.data.ptr:
                raise ValueError("out must not be r: the step needs both z and r")
        else:
            z = r
        name = "ust_krylov_cg_step" + ("_jacobi" if jacobi else "") + ("_ratio" if ratio else "")
        fns = _functions(dt.name, dev)
        nb = _blocks(n)
        res = None if sums is None else _buffer(cp, sums, 2, dt, "sums")
        part = res if nb == 1 and res is not None else _buffer(cp, work, 2 * nb, dt, "work")
        # without dinv the kernel reads neither dinv nor z: p and r stand in for them
        args = (x, r, p, q, num, den, dinv if jacobi else p, z, np.int64(n), part)
        fns[name]((nb,), (BLOCK,), args)
        got = _sums(cp, fns, part, nb, 2, dt, res)
    rr = got[1, ...]  # 0-d views (an integer index would give a NumPy scalar there)
    return z, got[0, ...], (rr.real if dt.kind == "c" else rr)


def capture(body: Any) -> Any:
    """``body()``'s launches recorded as a CUDA graph (nothing runs now); ``graph.launch()``
    replays them on the current stream.  The body must allocate nothing and never wait for
    the device (every buffer made beforehand): an error inside ends the capture and is raised."""
    from ust.backends.cuda.arrays import import_cupy

    cp = import_cupy()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            body()
        finally:
            graph = stream.end_capture()
    return graph


def xpby(z: Any, beta: Any, p: Any) -> Any:
    """``p = z + beta p`` in place (one kernel); ``beta`` is a 0-d device array or a pair
    ``(num, den)`` of them (``beta = num / den``, divided in the kernel).  Returns ``p``."""
    from ust.backends.cuda.arrays import import_cupy

    cp = import_cupy()
    dev = _device_of(cp, p, "p")
    dt = _dtype(p.dtype)
    with cp.cuda.Device(dev):
        p = _vector(cp, p, dt, None, "p", written=True)
        n = int(p.shape[0])
        z = _vector(cp, z, dt, n, "z", written=False)
        num, den, ratio = _scalar(cp, beta, dt, "beta")
        fns = _functions(dt.name, dev)
        name = "ust_krylov_xpby_ratio" if ratio else "ust_krylov_xpby"
        fns[name]((_blocks(n),), (BLOCK,), (z, num, den, p, np.int64(n)))
    return p
