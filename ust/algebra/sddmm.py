"""SDDMM: ``alpha * (A @ B)`` sampled at S's stored positions ``+ beta * S``, in S's format.

The result keeps S's structure exactly (index buffers copied): every stored slot -- explicit
zeros and block padding included, DIA padding outside the matrix excluded -- gets
``alpha * dot(A[i, :], B[:, j]) + beta * S[slot]``.  A format that may hold duplicates is
canonicalised first, so the dense form of the result is ``alpha * (A @ B) * pattern(S) + beta * S``.

Routes: cuSPARSE SDDMM for canonical CSR on the GPU (epilogue applied in place afterwards);
a generated CUDA kernel for every other format (one warp per stored entry, the epilogue fused
into the store); an array program written once against ``xp`` (row gathers and a batched dot,
in chunks that bound the temporary memory) on the CPU and for the remaining GPU dtypes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from ust.algebra.epilogue import check_epilog_params
from ust.algebra.problem import choose, problem
from ust.plan.routes import Route, register, route_of
from ust.runtime.errors import ShapeError, UnsupportedError

__all__ = ["KERNEL_TEMPLATE", "kernel_source", "sddmm"]

#: Elements of each gathered operand per chunk of the array program: small enough to stay in
#: the CPU's caches (measured: 2 MiB chunks run 2x faster than one 400 MB gather), large on a
#: GPU where each chunk is a few kernel launches.
_CHUNK_ELEMENTS = 1 << 18
_CHUNK_ELEMENTS_GPU = 1 << 27


class _Job:
    """One SDDMM: operands on one device, the result dtype, scalars and the epilogue."""

    def __init__(
        self, s: Any, a: Any, b: Any, alpha: complex, beta: complex, dtype: Any, epilog: Any, params: Any
    ):
        self.s, self.a, self.b = s, a, b
        self.alpha, self.beta = alpha, beta
        self.dtype = np.dtype(dtype)
        self.epilog = epilog
        self.params = dict(params or {})


def _result_with(s: Any, values: Any) -> Any:
    from ust.algebra.elementwise import _copy_structure

    return _copy_structure(s, values)


def _array_program(job: _Job) -> Any:
    from ust.algebra.slots import slots

    s = job.s
    xp = s.xp
    dt = job.dtype
    sl = slots(s)
    rows, cols = sl.dims
    a = xp.ascontiguousarray(job.a, dtype=dt)
    bt = xp.ascontiguousarray(job.b.T, dtype=dt)  # (n, k): row j is column j of B
    k = int(a.shape[1])
    n = int(rows.shape[0])
    dots = xp.empty(n, dtype=dt)
    step = max(1, (_CHUNK_ELEMENTS if xp is np else _CHUNK_ELEMENTS_GPU) // max(k, 1))
    for lo in range(0, n, step):  # chunks of entries, not a loop over entries
        hi = min(n, lo + step)
        dots[lo:hi] = xp.einsum("ij,ij->i", a[rows[lo:hi]], bt[cols[lo:hi]])
    vals = dots if job.alpha == 1 else dots * dt.type(job.alpha)
    if job.beta != 0:
        vals = vals + dt.type(job.beta) * s.values.reshape(-1)[sl.slot].astype(dt)
    if job.epilog is not None:
        job.epilog.apply(vals, job.params)
    out = xp.zeros(s.values.shape, dtype=dt)
    if sl.all_slots:
        out.reshape(-1)[...] = vals
    else:
        out.reshape(-1)[sl.slot] = vals
    return _result_with(s, out)


def _cusparse(job: _Job) -> Any:
    from ust.backends.cuda.cusparse_algebra import sddmm_csr
    from ust.backends.generated.launch import dense_operand

    s = job.s
    xp = s.xp
    dt = job.dtype
    vals = s.values.astype(dt, copy=True)
    # cuSPARSE reads a pointer and a leading dimension: row- or column-major, else a copy
    a, b = dense_operand(xp, job.a, dt), dense_operand(xp, job.b, dt)
    dev = int(s.device.split(":")[1])
    sddmm_csr(s.shape, {"pos": s.pos(1), "crd": s.crd(1), "values": vals}, a, b, job.alpha, job.beta, dev)
    if job.epilog is not None:
        job.epilog.apply(vals, job.params)
    return _result_with(s, vals)


# ----------------------------------------------------------------------------- generated CUDA

KERNEL_TEMPLATE = r"""
extern "C" __global__ void ust_sddmm_warp(
    const long long n_entries, const long long* __restrict__ rows, const long long* __restrict__ cols,
    const long long* __restrict__ slot, const {T}* __restrict__ A, const {T}* __restrict__ BT,
    const {T}* __restrict__ S, {T}* __restrict__ out, const long long k,
    const {T} alpha, const {T} beta{PARAMS})
{{
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (e >= n_entries) return;  /* the whole warp leaves together: e is uniform in a warp */
    const {T}* a = A + rows[e] * k;
    const {T}* b = BT + cols[e] * k;
    {T} acc = ({T})0;
    for (long long t = lane; t < k; t += 32) acc += a[t] * b[t];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) {{
        const long long p = slot[e];
        {T} y = alpha * acc;
        if (beta != ({T})0) y += beta * S[p];
        out[p] = {EPILOG};
    }}
}}
"""

_CUDA_TYPES = {"float32": "float", "float64": "double"}


def kernel_source(dtype: Any, epilog: Any = None) -> str:
    """CUDA source of the warp-per-entry SDDMM kernel for ``dtype`` with ``epilog`` fused."""
    ctype = _CUDA_TYPES.get(np.dtype(dtype).name)
    if ctype is None:
        raise UnsupportedError(
            f"the generated SDDMM kernel takes {', '.join(_CUDA_TYPES)} values, not {dtype}"
        )
    params = "".join(f", const {ctype} p_{name}" for name in (epilog.params if epilog is not None else ()))
    body = "y" if epilog is None else epilog.to_c(real_type=ctype, value_expr="y", param_prefix="p_")
    return KERNEL_TEMPLATE.format(T=ctype, PARAMS=params, EPILOG=body)


@functools.lru_cache(maxsize=64)
def _kernel(dtype_name: str, epilog_text: str | None) -> Any:
    from ust.codegen.epilog import compile_epilog
    from ust.runtime.xp import import_cupy

    ep = compile_epilog(epilog_text) if epilog_text is not None else None
    return import_cupy().RawKernel(kernel_source(dtype_name, ep), "ust_sddmm_warp", options=("--std=c++14",))


def _generated_cuda(job: _Job) -> Any:
    from ust.algebra.slots import slots

    s = job.s
    xp = s.xp
    dt = job.dtype
    sl = slots(s)
    rows, cols = (c.astype(np.int64, copy=False) for c in sl.dims)
    a = xp.ascontiguousarray(job.a, dtype=dt)
    bt = xp.ascontiguousarray(job.b.T, dtype=dt)
    svals = xp.ascontiguousarray(s.values.reshape(-1), dtype=dt)
    out = xp.zeros(s.values.shape, dtype=dt)
    n = int(rows.shape[0])
    if n:
        ep = job.epilog
        kern = _kernel(dt.name, ep.text if ep is not None else None)
        if ep is not None:
            ep.check_params(job.params)
        extra = tuple(dt.type(job.params[p]) for p in (ep.params if ep is not None else ()))
        threads = 256
        blocks = (n * 32 + threads - 1) // threads
        kern(
            (blocks,),
            (threads,),
            (np.int64(n), rows, cols, sl.slot, a, bt, svals, out, np.int64(a.shape[1]),
             dt.type(job.alpha), dt.type(job.beta), *extra),
        )  # fmt: skip
    return _result_with(s, out)


# the routes of the "sddmm" rules: build(job) -> the result
for _name, _build in (
    ("cusparse", _cusparse),
    ("generated-cuda", _generated_cuda),
    ("array-program", _array_program),
):
    register(Route("sddmm", _name, _build))
del _name, _build


def sddmm(
    s: Any,
    a: Any,
    b: Any,
    *,
    alpha: complex = 1,
    beta: complex = 0,
    epilog: str | None = None,
    epilog_params: Mapping[str, Any] | None = None,
    route: str | None = None,
    dry: bool = False,
) -> tuple[Any, Any]:
    """SDDMM on one device (``s`` a Tensor, ``a`` / ``b`` NumPy or CuPy arrays); (result, decision)
    (``dry``: the checks and the decision only, result None)."""
    from ust.formats.analysis import entries_unique

    if s.ndim != 2 or s.is_batched:
        raise UnsupportedError(f"sddmm samples a 2-D pattern; S has shape {s.shape} in {s.format.map_text()}")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"sddmm needs 2-D dense A and B, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    m, n = s.shape
    if a.shape[0] != m or b.shape[1] != n or a.shape[1] != b.shape[0]:
        raise ShapeError(
            f"sddmm: A {tuple(a.shape)} @ B {tuple(b.shape)} does not match the pattern S of shape {s.shape}"
        )
    ep = None
    if epilog is not None:
        from ust.codegen.epilog import compile_epilog

        ep = compile_epilog(epilog)
        check_epilog_params(epilog_params)
        ep.check_params(epilog_params or {})
    dtype = np.result_type(s.dtype, a.dtype, b.dtype, alpha, beta)
    if ep is not None and dtype.kind == "c" and ep.uses_real_only():
        raise UnsupportedError(
            f"epilogue {epilog!r} uses comparisons or min/max/where, which are defined for real dtypes only"
        )
    d = choose(problem("sddmm", s, device=s.device, dtype=dtype, other_kind="dense"), route)
    if dry:
        return None, d
    if not entries_unique(s.format):
        from ust.algebra.coiterate import canonical

        s = canonical(s)
    job = _Job(s, a, b, alpha, beta, dtype, ep, epilog_params)
    return route_of(d.rule).build(job), d
