"""``ust.advise``: which storage format pays for its conversion, and after how many calls.

For a matrix and an op (SpMV, or SpMM with ``k`` columns), the candidate formats that fit it
are tried on the device: CSR always, DIA when its diagonals are few (the padded storage at
most ``DIA_MAX_PADDING`` times the entries), BSR at the block sizes whose blocks are mostly
full, DCSR when most rows are empty, and the caller's own.  For each, the conversion from the
matrix as given and the per-call time (after autotuning the candidate's routes) are measured;
the break-even number of calls is the conversion time over the time each call saves.  The
structure is read once with O(nnz) array programs (diagonal offsets, distinct blocks), never
by a Python loop over entries.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ust.api.matmul import Matmul
from ust.plan.stats import matrix_stats
from ust.runtime.errors import InvalidValueError, ShapeError, UnsupportedError
from ust.runtime.log import get_logger

__all__ = ["Advice", "AdviceRow", "advise", "candidate_formats"]

_log = get_logger("ops.advise")

#: DIA is a candidate when its padded storage (diagonals x rows) is at most this many times nnz.
DIA_MAX_PADDING = 2.0
#: BSR[b, b] is a candidate when at least this share of its stored block slots are entries.
BSR_MIN_FILL = 0.6
BSR_SIZES = (2, 3, 4, 8)
#: DCSR is a candidate when at least this share of rows is empty.
DCSR_MIN_EMPTY = 0.5
ADVISE_OPS = ("spmv", "spmm")


@dataclass(frozen=True)
class AdviceRow:
    """One candidate: its format, the route its calls take, seconds to convert to it and per
    call, speed-up over the format as given, and calls after which converting pays (None: never)."""

    format: str
    route: str
    convert_s: float
    call_s: float
    speedup: float
    break_even: float | None
    why: str


@dataclass(frozen=True)
class Advice:
    """The table :func:`advise` returns; ``str()`` prints it, :meth:`plot` draws it."""

    op: str
    k: int
    device: str
    given: str
    rows: tuple[AdviceRow, ...] = field(default=())

    @property
    def best(self) -> AdviceRow:
        """The fastest per call."""
        return min(self.rows, key=lambda r: r.call_s)

    def table(self) -> str:
        head = f"{self.op} (k={self.k}) on {self.device}; A as given: {self.given}"
        cols = ("format", "route", "convert ms", "per call ms", "speed-up", "break-even calls", "why")
        body = [
            (
                r.format,
                r.route,
                f"{1e3 * r.convert_s:.3f}",
                f"{1e3 * r.call_s:.4f}",
                f"{r.speedup:.2f}x",
                "-"
                if r.convert_s == 0
                else ("never" if r.break_even is None else f"{math.ceil(r.break_even)}"),
                r.why,
            )
            for r in sorted(self.rows, key=lambda r: r.call_s)
        ]
        widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
        line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        return "\n".join([head, line(cols), line(tuple("-" * w for w in widths)), *(line(b) for b in body)])

    def __str__(self) -> str:
        return self.table()

    def as_dicts(self) -> list[dict[str, Any]]:
        return [r.__dict__.copy() for r in self.rows]

    def plot(self, path: Any = None) -> Any:
        """A bar chart of per-call time and break-even calls (matplotlib: ``pip install "ust[plot]"``)."""
        from ust.io.plot import plot_advice

        return plot_advice(self.as_dicts(), f"{self.op} (k={self.k}) on {self.device}", path)


def _structure(csr: Any) -> tuple[int, dict[int, float]]:
    """(diagonal count, {b: block fill}) of a host CSR matrix: O(nnz) array programs."""
    indptr, indices = np.asarray(csr.indptr), np.asarray(csr.indices)
    m, n = csr.shape
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
    cols = indices.astype(np.int64, copy=False)
    ndiag = int(np.unique(cols - rows).size)
    fill = {}
    nnz = max(int(indices.size), 1)
    for b in BSR_SIZES:
        if m % b or n % b:
            continue
        blocks = np.unique((rows // b) * ((n + b - 1) // b) + cols // b).size
        fill[b] = nnz / max(int(blocks) * b * b, 1)
    return ndiag, fill


def candidate_formats(a: Any, extra: Any = ()) -> list[tuple[str, str]]:
    """(format, why) pairs that fit ``a`` (a ust Tensor): CSR, and DIA / BSR / DCSR where the
    structure suits them, then the caller's ``extra`` formats."""
    out = [("CSR", "the general row format")]
    host = a if a.device == "cpu" else a.to("cpu")
    as_csr = host.convert("CSR")
    csr = as_csr.to_scipy()
    ndiag, fill = _structure(csr)
    m = int(a.shape[0])
    if ndiag * m <= DIA_MAX_PADDING * max(int(csr.nnz), 1):
        out.append(("DIA", f"{ndiag} diagonals"))
    for b, share in fill.items():
        if share >= BSR_MIN_FILL:
            out.append((f"BSR[{b}, {b}]", f"{b}x{b} blocks {100 * share:.0f}% full"))
    st = matrix_stats(as_csr)
    if st.empty_rows >= DCSR_MIN_EMPTY:
        out.append(("DCSR", f"{100 * st.empty_rows:.0f}% of rows empty"))
    out += [(c if isinstance(c, str) else c.to_text(), "your candidate") for c in extra]
    kept: dict[str, str] = {}
    for name, why in out:
        kept.setdefault(name, why)  # the first reason for each name
    return list(kept.items())


def _name(fmt: Any) -> str:
    """A format as the table names it: its standard name, a class with "(non-canonical)", or its text."""
    from ust.plan.classify import classify

    if fmt.standard_name:
        return str(fmt.standard_name)
    fc = classify(fmt)
    return fmt.to_text() if fc.name == "OTHER" else f"{fc} (non-canonical)"


def _best_of(fn: Any, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _per_call(t: Any, x: Any, device: Any, repeat: int, sync: Any) -> tuple[float, str]:
    with Matmul(t, x, execution=device) as mm:
        mm.plan()
        mm.autotune(iterations=max(3, repeat // 2), record=False)

        def run() -> None:
            mm.execute()
            sync()

        run()
        return _best_of(run, repeat), mm.decision.route


def advise(
    A: Any,
    op: str = "spmv",
    k: int = 1,
    device: Any = None,
    candidates: Any = (),
    *,
    repeat: int = 10,
) -> Advice:
    """Measure which storage format runs ``op`` fastest on ``A`` and after how many calls the
    conversion pays for itself.

    ``op`` is ``"spmv"`` or ``"spmm"`` (``k`` columns of B); ``device`` an execution space
    (``"cpu"``, ``"cuda"``; default: where A is); ``candidates`` more formats to try (names or
    DSL text).  The table's baseline is A in the format it is given in.  Returns an ``Advice``:
    ``str(advice)`` is the table (format, route, conversion and per-call milliseconds, speed-up,
    break-even calls), ``advice.rows`` its rows, ``advice.best`` the fastest, and
    ``advice.plot(path)`` draws it (matplotlib: ``pip install "ust[plot]"``).

    >>> import scipy.sparse as sp, ust
    >>> A = sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(2000, 2000), format="csr")
    >>> adv = ust.advise(A, repeat=3)
    >>> "DIA" in [r.format for r in adv.rows]
    True
    """
    from ust.convert import asarray
    from ust.formats.library import resolve
    from ust.runtime.spaces import parse_execution

    if op not in ADVISE_OPS:
        raise UnsupportedError(f"ust.advise measures {', '.join(map(repr, ADVISE_OPS))}, not {op!r}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidValueError(f"k must be a positive integer, not {k!r}")
    if op == "spmv" and k != 1:
        raise InvalidValueError(f"spmv multiplies by one vector: k must be 1 (use op='spmm' for k={k})")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidValueError(f"repeat must be a positive integer, not {repeat!r}")
    extra = [c if isinstance(c, str) else c.to_text() for c in candidates]
    for c in extra:
        resolve(c)  # a bad candidate fails before any work
    space = parse_execution(device)
    t = asarray(A)
    if t.ndim != 2:
        raise ShapeError(f"ust.advise takes a matrix; A is {t.ndim}-D")
    xp: Any = np
    sync: Any = lambda: None  # noqa: E731
    if space is not None and space.is_cuda:
        from ust.runtime.xp import import_cupy

        xp = import_cupy()
        sync = xp.cuda.get_current_stream().synchronize
    rng = np.random.default_rng(0)
    dtype = t.dtype if np.dtype(t.dtype).kind in "fc" else np.float64
    shape = (int(t.shape[1]),) if op == "spmv" else (int(t.shape[1]), int(k))
    x = xp.asarray(rng.standard_normal(shape).astype(dtype))
    if space is not None:
        t = t.to(device)
    given = _name(t.format)
    base_call, base_route = _per_call(t, x, device, repeat, sync)
    rows = [AdviceRow(f"{given} (as given)", base_route, 0.0, base_call, 1.0, None, "the matrix as given")]
    for fmt, why in candidate_formats(t, extra):
        if resolve(fmt) == t.format:
            continue
        try:
            conv = _best_of(lambda fmt=fmt: (t.convert(fmt), sync()), max(1, repeat // 3))
            tc = t.convert(fmt)
            call, route = _per_call(tc, x, device, repeat, sync)
        except (UnsupportedError, MemoryError) as exc:
            _log.info("advise: %s cannot be tried (%s)", fmt, exc)
            continue
        saved = base_call - call
        rows.append(
            AdviceRow(fmt, route, conv, call, base_call / call, conv / saved if saved > 0 else None, why)
        )
    return Advice(
        op, int(k), "cpu" if space is None or not space.is_cuda else space.describe(), given, tuple(rows)
    )
