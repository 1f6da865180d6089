"""Which way a conversion goes: a library's own conversion, or the general path.

The route table is data: (source layout, target layout) -> the library call that produces
exactly the target's canonical buffers, per device.  A route is taken only when the source
is canonical (sorted, no duplicates) in a library layout and the target is one too; every
other pair goes through the general path written once against ``xp``
(:func:`~ust.convert.unpack.unpack` then :func:`~ust.convert.pack.pack`).  The choice and
the reason are logged on ``ust.convert``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.convert.dia import dia_to_compressed
from ust.convert.layouts import library_layout
from ust.formats.library import get as get_format
from ust.formats.model import Format
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.runtime.log import get_logger
from ust.tensor.dispatch import conversion
from ust.tensor.limits import check_index_dtype, check_storage, default_index_dtype, min_value_slots

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = [
    "CPU_ROUTES",
    "CUPYX_DTYPES",
    "GPU_ROUTES",
    "ConvertStep",
    "convert",
    "explain_route",
    "general_step",
    "library_step",
    "plan_route",
]

log = get_logger("convert")

# Library routes: (source layout, target layout) -> function(library object, target blocksize)
# returning a library object whose buffers are the target's canonical buffers.
_Route = Callable[[Any, Any], Any]


def _tobsr(a: Any, bs: Any) -> Any:
    """Canonical BSR from a scipy CSR (a C merge kernel; scipy's tobsr + a block sort without one)."""
    from ust.convert.scipy import csr_tobsr_sorted

    return csr_tobsr_sorted(a, bs)


def _transpose(a: Any, bs: Any) -> Any:
    """SciPy's csr -> csc (or csc -> csr) kernel without its Python around it."""
    from ust.convert.scipy import compressed_transpose

    return compressed_transpose(a)


def _transpose_gpu(a: Any, bs: Any) -> Any:
    """cupyx's csr -> csc (or csc -> csr), cuSPARSE's csr2cscEx2; for a canonical CSR / CSC
    tensor :func:`_run_library` runs that kernel on the tensor's buffers instead."""
    return a.tocsc() if a.format == "csr" else a.tocsr()


CPU_ROUTES: dict[tuple[str, str], tuple[str, _Route]] = {
    ("csr", "csc"): ("scipy csr.tocsc", _transpose),
    ("csr", "coo"): ("scipy csr.tocoo", lambda a, bs: a.tocoo()),
    ("csc", "csr"): ("scipy csc.tocsr", _transpose),
    ("csc", "coo"): ("scipy csc.tocsr.tocoo", lambda a, bs: a.tocsr().tocoo()),
    ("coo", "csr"): ("scipy coo.tocsr", lambda a, bs: a.tocsr()),
    ("coo", "csc"): ("scipy coo.tocsc", lambda a, bs: a.tocsc()),
    ("bsr", "csr"): ("scipy bsr.tocsr", lambda a, bs: a.tocsr()),
    ("bsr", "csc"): ("scipy bsr.tocsc", lambda a, bs: a.tocsc()),
    ("bsr", "coo"): ("scipy bsr.tocsr.tocoo", lambda a, bs: a.tocsr().tocoo()),
    ("csr", "bsr"): ("csr -> bsr C merge", _tobsr),
    ("coo", "bsr"): ("scipy coo.tocsr then csr -> bsr C merge", lambda a, bs: _tobsr(a.tocsr(), bs)),
    ("csc", "bsr"): ("scipy csc.tocsr then csr -> bsr C merge", lambda a, bs: _tobsr(a.tocsr(), bs)),
    ("dia", "bsr"): ("scipy dia.tocsr then csr -> bsr C merge", lambda a, bs: _tobsr(a.tocsr(), bs)),
    ("dia", "csr"): ("scipy dia.tocsr", lambda a, bs: a.tocsr()),
    ("dia", "csc"): ("scipy dia.tocsc", lambda a, bs: a.tocsr().tocsc()),
    ("dia", "coo"): ("scipy dia.tocsr.tocoo", lambda a, bs: a.tocsr().tocoo()),
}

# Measured on the H200 (52 M nonzeros, ns per nonzero): COO -> CSC is left to the general path
# (0.10 there vs 0.65 through cupyx); CSC -> COO goes through CSR because cupyx's csc.tocoo is
# column-ordered, and canonical COO is row-ordered.  DIA sources stay on the general path: routing
# them through cupyx's dia.tocsr/tocsc lost entries in a GPU test (DIA @ DIA SpGEMM, 2026-12-02).
GPU_ROUTES: dict[tuple[str, str], tuple[str, _Route]] = {
    ("csr", "csc"): ("cupyx csr.tocsc (cuSPARSE)", _transpose_gpu),
    ("csr", "coo"): ("cupyx csr.tocoo (cuSPARSE)", lambda a, bs: a.tocoo()),
    ("csc", "csr"): ("cupyx csc.tocsr (cuSPARSE)", _transpose_gpu),
    ("csc", "coo"): ("cupyx csc.tocsr.tocoo (cuSPARSE)", lambda a, bs: a.tocsr().tocoo()),
    ("coo", "csr"): ("cupyx coo.tocsr (cuSPARSE)", lambda a, bs: a.tocsr()),
}

#: Value dtypes cupyx.scipy.sparse accepts.
CUPYX_DTYPES = frozenset(np.dtype(c) for c in "fdFD")


@dataclass(frozen=True)
class ConvertStep:
    """One step of a conversion: ``kind`` is ``"library"`` (``fn(library object, blocksize)``),
    ``"direct"`` (``fn(tensor, target)``, :mod:`ust.convert.hypersparse`), ``"dia"`` (masked
    compaction of a DIA source, ``by_column``), ``"twin"`` (the coordinate twin through cupyx) or
    ``"general"`` (unpack, order, merge, pack); ``target`` is the step's format."""

    kind: str
    description: str
    target: Format
    fn: _Route | None = None
    blocksize: Any = None
    by_column: bool = False


def general_step(fmt: Format) -> ConvertStep:
    return ConvertStep("general", "general path", fmt)


def library_step(t_fmt: Format, fmt: Format, on_gpu: bool) -> ConvertStep | None:
    """The library call that converts canonical ``t_fmt`` into canonical ``fmt`` directly, if any."""
    src = library_layout(t_fmt)
    dst = library_layout(fmt)
    if src is None or dst is None or not src.canonical or not dst.canonical:
        return None
    if src.name == dst.name == "bsr":
        return None
    entry = (GPU_ROUTES if on_gpu else CPU_ROUTES).get((src.name, dst.name))
    if entry is None:
        return None
    return ConvertStep("library", entry[0], fmt, entry[1], dst.blocksize)


def plan_route(t: Tensor, fmt: Format, route: str | None = None) -> list[ConvertStep]:
    """The steps of ``t.convert(fmt)``: library calls and at most one general-path pass.

    The planner's ``"convert"`` rules choose (:mod:`ust.plan.rules`; :mod:`ust.plan.convert`
    registers the planner here): CPU: a direct SciPy conversion where one exists; a BSR or DIA
    source is first turned into CSR by SciPy's compiled conversion (reading its padded slots
    costs more than the conversion); a BSR target is made from CSR by a C merge kernel (SciPy's
    ``tobsr`` and a block sort without a compiler).  GPU: cuSPARSE through cupyx for CSR/CSC/COO
    pairs.  Everything else: the general path.
    """
    steps, _ = conversion("plan_convert")(t, fmt, route)
    return list(steps)


def explain_route(t: Tensor, fmt: Format | str, *, route: str | None = None) -> str:
    """One line saying how ``t.convert(fmt)`` would run, and why."""
    from ust.formats.library import resolve

    fmt = resolve(fmt)
    if fmt == t.format:
        return "no conversion: the tensor already has this format"
    steps = plan_route(t, fmt, route)
    kinds = {s.kind for s in steps}
    what = " then ".join(s.description for s in steps)
    if kinds == {"library"}:
        return f"library route: {what} (both formats are canonical library layouts)"
    if kinds == {"twin"}:
        return f"library route: {what} (the same entries in the same order, one coordinate per entry)"
    if kinds == {"direct"}:
        return f"direct route: {what} (one pass over the index buffers, no unpack)"
    if kinds == {"dia"}:
        return f"direct route: {what} (no sort: slots are read in the target's order)"
    if kinds == {"general"}:
        src = t.format.standard_name or "custom"
        dst = fmt.standard_name or "custom"
        return f"general path on {t.device} ({src} -> {dst}): unpack levels, order, merge, pack"
    return f"staged route: {what}"


def convert(
    t: Tensor,
    fmt: Format,
    *,
    index_dtype: Any = None,
    prune: bool = False,
    max_padding: int | None = None,
    route: str | None = None,
) -> Tensor:
    """``t`` in ``fmt`` (see :meth:`ust.Tensor.convert`); ``route="general"`` forces the
    general path (benchmarks and tests compare the two)."""
    if fmt.ndim != t.ndim:
        raise ShapeError(f"cannot convert a {t.ndim}-D tensor to the {fmt.ndim}-D format {fmt.map_text()}")
    fmt.lvl_bounds(t.shape)  # block sizes must divide the shape: FormatError before any work
    itype = None if index_dtype is None else np.dtype(index_dtype)
    if itype is not None and itype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise UnsupportedError(f"index_dtype must be int32 or int64, not {itype}")
    if itype is not None:  # the coordinates and value slots of the target must fit: before any work
        check_index_dtype(itype, fmt, t.shape, min_value_slots(fmt, t.shape, t.nse))
    if fmt == t.format and route is None:
        if itype is None or itype == t.index_dtype:
            return t
        return _cast_index(t, itype)
    # O(extent) storage (CSR's pos, a dense or range level) that no machine holds: before any work
    est = itype or default_index_dtype(t.index_dtype, fmt, t.shape, 0)
    check_storage(t.xp, fmt, t.shape, t.nse_bound, est, t.dtype)
    t0 = time.perf_counter()
    steps = plan_route(t, fmt, route)
    out = t
    for i, step in enumerate(steps):
        step_fmt = step.target
        if step.kind == "library":
            assert step.fn is not None
            out = _run_library(out, step_fmt, step.fn, step.blocksize, None)
        elif step.kind == "direct":
            assert step.fn is not None
            out = step.fn(out, step_fmt)
        elif step.kind == "dia":
            out = dia_to_compressed(out, step_fmt, by_column=step.by_column)
        elif step.kind == "twin":
            from ust.convert.cupyx import coordinate_twin_of

            out = coordinate_twin_of(out, step_fmt)
        else:
            from ust.convert.pack import pack
            from ust.convert.unpack import unpack

            last = i == len(steps) - 1
            # dense -> dense moves every slot (a -0.0 stays -0.0): no zero is fill on either side
            keep = True if out.format.is_dense and step_fmt.is_dense else None
            out = pack(
                unpack(out, keep_zeros=keep),
                step_fmt,
                index_dtype=itype if last else None,
                prune=prune,
                max_padding=max_padding,
                source_index_dtype=t.index_dtype,
            )
    want = itype or _result_index_dtype(t.index_dtype, fmt, t.shape, out)
    if want != out.index_dtype:
        out = _cast_index(out, want)
    if log.isEnabledFor(logging.INFO):
        log.info(
            "convert %s -> %s on %s: %s (%d entries, %.3f ms)",
            t.format.standard_name or t.format.map_text(),
            fmt.standard_name or fmt.map_text(),
            t.device,
            " then ".join(s.description for s in steps),
            t.nse_bound,
            1e3 * (time.perf_counter() - t0),
        )
    return out


def _result_index_dtype(source: np.dtype, fmt: Format, shape: tuple[int, ...], out: Tensor) -> np.dtype:
    """The default rule's index dtype of a conversion's result (:func:`default_index_dtype`),
    its buffers measured only where the rule reads them (an int32 source)."""
    if source == np.int64:
        return np.dtype(np.int64)
    return default_index_dtype(source, fmt, shape, _largest_count(out))


def _largest_count(t: Tensor, *, with_pos: bool = True) -> int:
    """The largest length of ``t``'s value and coordinate buffers (it bounds every position a
    ``pos`` buffer holds) and, ``with_pos``, of its ``pos`` buffers too (the count the default
    rule sizes kernels' position arithmetic by)."""
    # the buffers as held, sizes only: a deferred check (a GPU synchronisation) is not run
    held = [t._values, *t._crd, *(t._pos if with_pos else ())]
    return max(int(a.size) for a in held if a is not None)


def _cast_index(t: Tensor, itype: np.dtype) -> Tensor:
    """``t`` with its index buffers in ``itype`` (a ShapeError where int32 cannot hold them)."""
    check_index_dtype(itype, t.format, t.shape, _largest_count(t, with_pos=False))
    nl = t.format.nlevels
    return t._replace(
        [None if a is None else a.astype(itype) for a in (t.pos(k) for k in range(nl))],
        [None if a is None else a.astype(itype) for a in (t.crd(k) for k in range(nl))],
        t.values,
        itype,
    )


@functools.cache
def _standard_csr_csc() -> frozenset[Format]:
    """The canonical CSR and CSC formats, whose transpose runs on the buffers (:func:`_run_library`);
    built on first use, so ``import ust`` parses no format."""
    return frozenset({get_format("CSR"), get_format("CSC")})


def _run_library(t: Tensor, fmt: Format, fn: _Route, blocksize: Any, itype: np.dtype | None) -> Tensor:
    import warnings

    if t.device == "cpu":
        from ust.convert.scipy import from_scipy_trusted, to_scipy, transpose_tensor

        direct = transpose_tensor(t, fmt) if fn is _transpose and t.format in _standard_csr_csc() else None
        if direct is not None:  # SciPy's kernel on the buffers: no SciPy objects around them
            out = direct
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = fn(to_scipy(t), blocksize)
            out = from_scipy_trusted(res, fmt)
    else:
        from ust.convert.cupyx import from_cupyx_trusted, to_cupyx
        from ust.convert.cupyx import transpose_tensor as transpose_gpu

        direct = transpose_gpu(t, fmt) if fn is _transpose_gpu and t.format in _standard_csr_csc() else None
        if direct is not None:  # cuSPARSE's kernel on the buffers: no cupyx objects around them
            out = direct
        else:
            res = fn(to_cupyx(t), blocksize)
            out = from_cupyx_trusted(res, fmt)
    if itype is not None and itype != out.index_dtype:
        out = convert(out, fmt, index_dtype=itype)
    return out
