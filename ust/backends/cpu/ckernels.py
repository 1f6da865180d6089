"""Run generated C kernels on NumPy buffers (compiled once per request, then memoised).

A request is (format, op, layout, loop order, value dtype, index dtype, compute index type);
the first call lowers, emits, compiles (or loads from the artefact cache) and ``dlopen``\\ s
the kernel; later calls find it in an in-process dict and only marshal pointers.

Each library also carries ``ust_set_threads`` (appended here, at compile time, so the emitted
kernel text is unchanged): every call first sets the OpenMP thread count from
:func:`ust.runtime.cpu_threads.threads` for the call's work (stored entries times columns,
or the output's size if larger), so a small product or a busy machine does not wake every
core.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import ust.runtime.cpu_threads as cpu_threads
from ust.backends.generated.launch import Launch, array_layout, kernel_scalar, prepare
from ust.codegen.cache import Memo
from ust.codegen.emit_c import c_abi, emit_c
from ust.codegen.ir import Kernel
from ust.codegen.lower import lower
from ust.formats.model import Format
from ust.runtime.cpu_threads import threads
from ust.runtime.log import get_logger

__all__ = ["CKernel", "Memo", "bind_launch", "c_kernel", "matmul_c", "prebuild", "run_launch"]

_log = get_logger("backends.cpu.ckernels")
_log.addHandler(logging.NullHandler())
_memo = Memo()
_CINT = {"int32": ctypes.c_int32, "int64": ctypes.c_int64}
#: Entries below which a generated kernel runs on one thread (cpu_threads.threads' ``small``);
#: above it at most one thread per ``SMALL // 2`` entries.  Measured on SpMV (CSR, DCSR; 1 and
#: 10 entries a row): two threads lose below ~3 K entries and win from ~5 K (1.2x) to 20 K
#: (1.6x); 4 K entries a thread keeps a wide machine's fork and join small against the work.
SMALL = 1 << 13
#: Seconds a bound call keeps its chosen count (the load estimate itself changes no faster;
#: a change of ``cpu_threads.THREADS`` applies at once, of ``$UST_NUM_THREADS`` within this):
#: the rule costs ~2 us, a 20 K-entry SpMV ~25 us.
REPICK = 0.1


class CKernel:
    """A loaded C kernel: call it with a dict of arguments by parameter name."""

    def __init__(self, kernel: Kernel, fn: Any, seconds: float, set_threads: Any = None) -> None:
        self.kernel = kernel
        self.fn = fn
        self.set_threads = set_threads
        self.abi = c_abi(kernel)
        self.load_seconds = seconds
        self._iscalar = _CINT[kernel.itype]

    def __call__(self, args: Mapping[str, Any]) -> None:
        self.bind(args)()

    def bind(self, args: Mapping[str, Any], nthreads: int | None = None) -> Any:
        """A zero-argument callable running the kernel on ``args`` (marshalled once), on
        ``nthreads`` threads, else on :func:`ust.runtime.cpu_threads.threads`' count for the
        work, chosen at call time (and kept for :data:`REPICK` seconds)."""
        k = self.kernel
        vt = np.dtype(k.value_dtype)
        keep: list[Any] = []
        cargs: list[Any] = []
        for name, kind in self.abi:
            if kind == "iscalar":
                cargs.append(self._iscalar(int(args[name])))
            elif kind == "vscal":
                vs = np.array(
                    [kernel_scalar(k.value_dtype, args[p.name]) for p in k.params if p.kind == "vscalar"],
                    dtype=vt,
                )
                keep.append(vs)
                cargs.append(ctypes.c_void_p(vs.ctypes.data))
            else:
                arr = args[name]
                p = k.param(name)
                want = np.dtype(p.dtype) if p.kind == "ibuf" else vt
                if name in ("x", "y0", "y"):  # laid out by launch.prepare / run_launch
                    if not isinstance(arr, np.ndarray) or arr.dtype != want or array_layout(arr) is None:
                        raise TypeError(f"buffer {name} must be a contiguous {want} NumPy array")
                else:
                    arr = np.ascontiguousarray(arr, dtype=want)
                keep.append(arr)
                cargs.append(ctypes.c_void_p(arr.ctypes.data))
        fn, setter = self.fn, self.set_threads
        work = max(int(np.size(args.get("val", 0))) * max(int(args.get("NC", 1)), 1), int(args.get("NY", 0)))

        chosen: list[Any] = [0.0, 0, None]  # (when, count, THREADS): chosen again after REPICK s

        def call() -> None:
            if setter is None:
                fn(*cargs)
                return
            nt = nthreads
            if nt is None:
                now = time.monotonic()
                if now - chosen[0] >= REPICK or not chosen[1] or chosen[2] != cpu_threads.THREADS:
                    chosen[:] = [now, threads(work, SMALL), cpu_threads.THREADS]
                nt = int(chosen[1])
            prev = setter(nt)
            try:
                fn(*cargs)
            finally:
                setter(prev)

        call.keep = keep  # type: ignore[attr-defined]  # the buffers live as long as the call
        return call


def default_cols(op: str, layout: str) -> str:
    """Column loop placement on the CPU: innermost (contiguous) for row-major SpMM operands."""
    return "inner" if op == "mm" and layout == "row" else "outer"


def c_kernel(
    fmt: Format,
    op: str,
    layout: str,
    order: str,
    value_dtype: str,
    index_dtype: str,
    itype: str,
    cols: str | None = None,
    balance: str = "none",
) -> CKernel:
    """The compiled kernel for a request (memoised in process, cached on disk); ``balance``
    ``"rows"`` splits the rows by rows + entries (:func:`ust.codegen.lower.lower`)."""
    layout = layout if op == "mm" else "row"
    cols = cols or default_cols(op, layout)
    key = ("c", fmt, op, layout, order, value_dtype, index_dtype, itype, cols, balance)

    def build() -> CKernel:
        from ust.backends.generated.compile_c import THREADS_HELPER, load_library, thread_setter

        t0 = time.perf_counter()
        k = lower(
            fmt,
            op,
            layout=layout,
            order=order,
            value_dtype=value_dtype,
            index_dtype=index_dtype,
            itype=itype,
            cols=cols,
            balance=balance,
        )
        lib = load_library(emit_c(k) + THREADS_HELPER, name=k.name)
        fn = getattr(lib, k.name)
        fn.restype = None
        fn.argtypes = [_CINT[itype] if kind == "iscalar" else ctypes.c_void_p for _, kind in c_abi(k)]
        return CKernel(k, fn, time.perf_counter() - t0, thread_setter(lib))

    return _memo.get(key, build)


def prebuild(requests: list[tuple[Any, ...]]) -> list[CKernel]:
    """Compile every not-yet-loaded kernel of ``requests`` in one compiler run (one library).

    A request is the argument tuple of :func:`c_kernel` (``cols`` and ``balance`` optional).  Warms a process up for many
    formats or variants at the cost of a single compile (autotuning, test suites).
    """
    from ust.backends.generated.compile_c import THREADS_HELPER, load_library, thread_setter

    todo: dict[tuple[Any, ...], Kernel] = {}
    for req in requests:
        fmt, op, layout, order, vd, idt, it, *rest = req
        layout = layout if op == "mm" else "row"
        cols = (rest[0] if rest else None) or default_cols(op, layout)
        bal = rest[1] if len(rest) > 1 else "none"
        key = ("c", fmt, op, layout, order, vd, idt, it, cols, bal)
        if key not in _memo and key not in todo:
            todo[key] = lower(
                fmt,
                op,
                layout=layout,
                order=order,
                value_dtype=vd,
                index_dtype=idt,
                itype=it,
                cols=cols,
                balance=bal,
            )
    if todo:
        t0 = time.perf_counter()
        kernels = list({k.name: k for k in todo.values()}.values())
        nproc = max(1, min(os.cpu_count() or 1, len(kernels) // 8 or 1))
        chunks = [kernels[i::nproc] for i in range(nproc)]
        with ThreadPoolExecutor(max_workers=nproc) as pool:  # compilers run as processes: real parallelism
            libs = list(
                pool.map(
                    lambda ks: load_library(emit_c(ks) + THREADS_HELPER, name=f"ust_batch_{len(ks)}"), chunks
                )
            )
        where = {k.name: lib for ks, lib in zip(chunks, libs) for k in ks}
        for key, k in todo.items():
            fn = getattr(where[k.name], k.name)
            fn.restype = None
            fn.argtypes = [_CINT[k.itype] if kind == "iscalar" else ctypes.c_void_p for _, kind in c_abi(k)]
            setter = thread_setter(where[k.name])
            _memo.get(key, functools.partial(CKernel, k, fn, time.perf_counter() - t0, setter))
    return [c_kernel(*req) for req in requests]


def _empty(shape: tuple[int, ...], dtype: str, layout: str) -> np.ndarray:
    if layout == "col" and len(shape) >= 2:
        return np.empty((*shape[:-2], shape[-1], shape[-2]), dtype=dtype).swapaxes(-1, -2)
    return np.empty(shape, dtype=dtype)


def bind_launch(
    fmt: Format, launch: Launch, out: np.ndarray | None = None, order: str = "auto", balance: str = "none"
) -> tuple[Any, np.ndarray]:
    """(zero-argument callable, the array it writes) for a prepared launch."""
    kern = c_kernel(
        fmt,
        launch.op,
        launch.layout,
        order,
        launch.dtype,
        launch.index_dtype,
        launch.itype(),
        balance=balance,
    )
    target = out
    if target is None or target.dtype != np.dtype(launch.dtype) or not _fits(target, launch.layout):
        target = _empty(launch.out_shape, launch.dtype, launch.layout)
    if not target.size:
        return (lambda: None), target
    return kern.bind(launch.args(kern.kernel, target)), target


def run_launch(
    fmt: Format, launch: Launch, out: np.ndarray | None = None, order: str = "auto", balance: str = "none"
) -> np.ndarray:
    """Run a prepared launch through the C kernel; ``out`` is written if given and suitable."""
    kern = c_kernel(
        fmt,
        launch.op,
        launch.layout,
        order,
        launch.dtype,
        launch.index_dtype,
        launch.itype(),
        balance=balance,
    )
    target = out
    if target is None or target.dtype != np.dtype(launch.dtype) or not _fits(target, launch.layout):
        target = _empty(launch.out_shape, launch.dtype, launch.layout)
    if target.size:
        kern(launch.args(kern.kernel, target))
    if out is not None and target is not out:
        out[...] = target
        return out
    return target


def _fits(a: np.ndarray, layout: str) -> bool:
    return array_layout(a) == layout


def matmul_c(
    a: Any,
    x: Any,
    c: Any = None,
    *,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    out: np.ndarray | None = None,
    order: str = "auto",
    balance: str = "none",
) -> np.ndarray:
    """``alpha * a @ x + beta * c`` through the generated C kernel for ``a``'s format
    (``balance="rows"``: the load-balanced row split)."""
    launch = prepare(a, x, c, alpha=alpha, beta=beta, out=out)
    return run_launch(a.format, launch, out, order, balance)
