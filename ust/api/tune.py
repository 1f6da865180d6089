"""``ust.tune``: autotune an op once and keep what was measured, for every later plan.

``ust.tune("matmul", A, x)`` plans ``ust.Matmul(A, x)``, times every candidate route and
variant on the real operands and writes a tuning record (:mod:`ust.plan.tuning`): later
``ust.matmul`` calls and ``Matmul.plan()`` on matrices of similar size and shape (the record's
buckets) then run the recorded route without timing anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ust.api.matmul import Matmul
from ust.runtime.errors import InvalidValueError, UnsupportedError

__all__ = ["TuneResult", "tune"]

#: The ops ``tune`` takes, and the names they go by.
TUNABLE = ("matmul", "spmv", "spmm")


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found: the fastest route and variant, every timing (seconds, by
    ``"route:variant"``) and where the record was written (None: nothing could hold it)."""

    op: str
    route: str
    variant: Any
    timings: dict[str, float] = field(default_factory=dict)
    record: Path | None = None

    def __str__(self) -> str:
        rows = [f"{self.op}: fastest {self.route} (variant {self.variant!r})"]
        rows += [
            f"  {name:<32} {1e3 * t:10.4f} ms"
            for name, t in sorted(self.timings.items(), key=lambda kv: kv[1])
        ]
        rows.append(f"record: {self.record}" if self.record else "record: not written")
        return "\n".join(rows)


def tune(op: str, *operands: Any, iterations: int = 5, **kwargs: Any) -> TuneResult:
    """Autotune ``op`` on ``operands`` and write a tuning record that later calls follow.

    ``op`` is ``"matmul"`` (``"spmv"`` / ``"spmm"`` are accepted too); ``operands`` and
    ``kwargs`` are those of :class:`ust.Matmul` (``A, B[, C]``, ``alpha=``, ``execution=``, ...).

    >>> import numpy as np, scipy.sparse as sp, ust
    >>> A = sp.random_array((300, 300), density=0.05, format="csr", random_state=0)
    >>> r = ust.tune("matmul", A, np.ones(300), iterations=2)
    >>> r.route in {name.split(":")[0] for name in r.timings}
    True
    """
    if op not in TUNABLE:
        raise UnsupportedError(f"ust.tune tunes {', '.join(map(repr, TUNABLE))}, not {op!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InvalidValueError(f"iterations must be a positive integer, not {iterations!r}")
    if len(operands) not in (2, 3):
        raise InvalidValueError(f"ust.tune('matmul', A, B[, C]) takes 2 or 3 operands, not {len(operands)}")
    with Matmul(*operands, **kwargs) as mm:
        mm.plan()
        timings = mm.autotune(iterations)
        return TuneResult(mm.problem.op, mm.decision.route, mm.variant, dict(timings), mm.record_path)
