"""The planner's view of a conversion, and the routes its ``"convert"`` rules name.

A conversion's :class:`ConvertProblem` names the source's library layout (``"CSR"``,
``"BSR"``, ..., ``"OTHER"``) as its format class and the target's in ``other``, and says what
the pair tables of :mod:`ust.convert.routes` offer for the pair (a direct library call, a
coordinate twin, a staged route through CSR).  The rules (:mod:`ust.plan.rules`) choose in
table order; each route's ``build(t, fmt)`` returns the typed
:class:`~ust.convert.routes.ConvertStep` list that :func:`ust.convert.routes.convert` runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.convert.dia import is_dia
from ust.convert.hypersparse import direct_step
from ust.convert.layouts import coordinate_twin, library_layout
from ust.convert.routes import CUPYX_DTYPES, ConvertStep, general_step, library_step
from ust.formats.library import get as get_format
from ust.formats.model import Format
from ust.plan.planner import Decision, choose, decide
from ust.plan.routes import Route, register
from ust.plan.rules import Problem
from ust.tensor.dispatch import CONVERSIONS
from ust.tensor.dispatch import register as register_conversion

__all__ = ["ConvertProblem", "convert_problem", "plan_convert"]


@dataclass(frozen=True)
class ConvertProblem(Problem):
    """A :class:`~ust.plan.rules.Problem` for ``t.convert(fmt)`` (see the module docstring)."""

    other: str = ""  # the target's library layout, upper case, or "OTHER"
    dia_source: bool = False  # GPU: a DIA source (its masked compaction)
    fits_int32: bool = True  # cupyx's conversions index with 32 bits
    library_pair: bool = False  # the device's pair table converts source -> target directly
    twin: bool = False  # GPU: the target is the source's coordinate twin
    staged: bool = False  # CPU: canonical BSR / DIA source, target not CSR: through CSR first
    bsr_target: bool = False  # CPU: canonical BSR target from a source that is not CSR
    direct_pair: bool = False  # CPU: ust.convert.hypersparse converts source -> target in one pass


def _layout_name(fmt: Format) -> tuple[str, bool]:
    lay = library_layout(fmt)
    return ("OTHER", False) if lay is None else (lay.name.upper(), lay.canonical)


def convert_problem(t: Any, fmt: Format) -> ConvertProblem:
    """What the planner knows about ``t.convert(fmt)``: the same facts give the same (cached)
    problem, so a repeated conversion does no planner work."""
    return _convert_problem(*_facts(t, fmt))


def _facts(t: Any, fmt: Format) -> tuple[Any, ...]:
    """The facts of ``t.convert(fmt)`` the problem is built from (the caches' key)."""
    on_gpu = t.device != "cpu"
    dtype = t.dtype
    shape = t.shape
    largest = max(shape, default=0)
    fits_int32 = max(t.nse_bound, largest) < 2**31 and (not on_gpu or dtype in CUPYX_DTYPES)
    return (t.format, fmt, on_gpu, dtype, t.index_dtype, len(shape), largest, fits_int32)


@functools.lru_cache(maxsize=1024)
def _convert_problem(
    source: Format,
    fmt: Format,
    on_gpu: bool,
    dtype: np.dtype[Any],
    index_dtype: np.dtype[Any],
    ndim: int,
    max_extent: int,
    fits_int32: bool,
) -> ConvertProblem:
    src, src_canonical = _layout_name(source)
    dst, dst_canonical = _layout_name(fmt)
    csr = get_format("CSR")
    staged = bool(
        not on_gpu
        and src_canonical
        and src in ("BSR", "DIA")
        and fmt != csr
        and library_step(source, csr, False) is not None
    )
    bsr_target = bool(
        not on_gpu
        and dst_canonical
        and dst == "BSR"
        and source != csr
        and library_step(csr, fmt, False) is not None
    )
    return ConvertProblem(
        op="convert",
        device="cuda" if on_gpu else "cpu",
        format_class=src,
        format_params=(),
        canonical=src_canonical,
        dtype=str(dtype),
        index_dtype=str(index_dtype),
        plain=True,
        ndim=ndim,
        max_extent=max_extent,
        other=dst,
        dia_source=on_gpu and is_dia(source),
        fits_int32=fits_int32,
        library_pair=library_step(source, fmt, on_gpu) is not None,
        twin=on_gpu and fmt == coordinate_twin(source),
        staged=staged,
        bsr_target=bsr_target,
        direct_pair=not on_gpu and direct_step(source, fmt) is not None,
    )


# ----------------------------------------------------------------------------- the routes: build(t, fmt)


def _general(t: Any, fmt: Format) -> list[ConvertStep]:
    return [general_step(fmt)]


def _library(t: Any, fmt: Format) -> list[ConvertStep]:
    step = library_step(t.format, fmt, t.device != "cpu")
    assert step is not None  # the rule's condition says the pair table has it
    return [step]


def _direct(t: Any, fmt: Format) -> list[ConvertStep]:
    """CPU: one pass over the source's index buffers (:mod:`ust.convert.hypersparse`)."""
    entry = direct_step(t.format, fmt)
    assert entry is not None  # the rule's condition says the pair table has it
    return [ConvertStep("direct", entry[0], fmt, entry[1])]


def _twin(t: Any, fmt: Format) -> list[ConvertStep]:
    return [ConvertStep("twin", "cupyx csr.tocoo (cuSPARSE) on the level coordinates", fmt)]


def _staged(t: Any, fmt: Format) -> list[ConvertStep]:
    """CPU, a canonical BSR / DIA source: SciPy to CSR first, then CSR -> target."""
    csr = get_format("CSR")
    first = library_step(t.format, csr, False)
    assert first is not None
    rest = library_step(csr, fmt, False)
    return [first, rest if rest is not None else general_step(fmt)]


def _general_then_bsr(t: Any, fmt: Format) -> list[ConvertStep]:
    """CPU, a canonical BSR target: the general path to CSR, then the C merge kernel."""
    csr = get_format("CSR")
    last = library_step(csr, fmt, False)
    assert last is not None
    return [general_step(csr), last]


def _dia_compaction(t: Any, fmt: Format) -> list[ConvertStep]:
    """GPU, DIA source: straight to CSR or CSC (column-major targets through CSC), then on."""
    by_column = fmt.levels[0].expr.dims == (1,)  # DCSC, CSC, column-major COO, ...
    mid = get_format("CSC" if by_column else "CSR")
    first = ConvertStep(
        "dia", f"DIA -> {'CSC' if by_column else 'CSR'} (masked compaction)", mid, by_column=by_column
    )
    if fmt == mid:
        return [first]
    rest = library_step(mid, fmt, True)
    return [first, rest if rest is not None else general_step(fmt)]


for _name, _build in (
    ("general", _general),
    ("library", _library),
    ("direct", _direct),
    ("twin", _twin),
    ("staged", _staged),
    ("general-then-bsr", _general_then_bsr),
    ("dia-compaction", _dia_compaction),
):
    register(Route("convert", _name, _build))
del _name, _build


@register_conversion(CONVERSIONS, "plan_convert")
def plan_convert(t: Any, fmt: Format, route: str | None = None) -> tuple[list[ConvertStep], Decision]:
    """The steps of ``t.convert(fmt)`` and the decision behind them (``route=`` forces one of the
    candidates; ``"general"`` is one for every conversion)."""
    facts = _facts(t, fmt)
    if route is None:  # the steps follow from the facts: planned once
        steps, d = _planned(*facts)
        return list(steps), d
    d = choose(_convert_problem(*facts), route)  # every conversion logs on ust.convert already
    return _steps(d, t.format, fmt), d


@functools.lru_cache(maxsize=1024)
def _planned(source: Format, fmt: Format, *facts: Any) -> tuple[tuple[ConvertStep, ...], Decision]:
    d = decide(_convert_problem(source, fmt, *facts))
    return tuple(_steps(d, source, fmt)), d


def _steps(d: Decision, source: Format, fmt: Format) -> list[ConvertStep]:
    """The route's steps: every builder reads only the source's format and device, which
    ``_Source`` carries (so a cached plan holds no tensor)."""
    from ust.plan.routes import route_of

    return list(route_of(d.rule).build(_Source(source, d.problem.device), fmt))


class _Source:
    """What a route builder reads of the tensor it converts: its format and device."""

    __slots__ = ("device", "format")

    def __init__(self, fmt: Format, device: str) -> None:
        self.format = fmt
        self.device = device
