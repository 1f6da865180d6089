"""The cost model: which candidate route (and GPU threads per row) fits a matrix, from cheap statistics.

Where no tuning record exists (:mod:`ust.plan.tuning`), a matmul's route among the rule table's
candidates is chosen here from :class:`~ust.plan.stats.MatrixStats` and ``k``.  The model is a
table, like the rules: the first :class:`CostRule` whose device, op, formats and condition fit
names the route it prefers, the threads per row (GPU) and why -- the why being what the
measurements in ``benchmarks/RESULTS.md`` showed.  A preferred route that is not a candidate for
the problem (a forced compiler-less machine, a non-plain product SciPy cannot fuse) is passed
over; when no cost rule applies, the rule table's first candidate stands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ust.plan.rules import ANY, Problem, Rule
from ust.plan.stats import MatrixStats
from ust.runtime.cpu_threads import _SMALL as PARALLEL_WORK  # below it a C kernel runs on one thread
from ust.runtime.cpu_threads import usable_cores

__all__ = ["COST_RULES", "PARALLEL_WORK", "SMALL_WORK", "CostChoice", "CostRule", "choose_by_cost"]

#: Below this much work (stored entries times k) the route does not matter: per-call overheads
#: of a few microseconds dominate, so the rule table's default stands.
SMALL_WORK = 1 << 14


@dataclass(frozen=True)
class CostChoice:
    """The cost model's pick: a candidate rule, GPU threads per row (None: the kernel's own
    default), and the reason (the statistics it read and the rule it applied)."""

    rule: Rule
    group: int | None
    reason: str


Cond = Callable[[Problem, MatrixStats, int], bool]


@dataclass(frozen=True)
class CostRule:
    device: str
    ops: frozenset[str]
    formats: frozenset[str]
    route: str
    when: Cond
    why: str
    group: int | None = None


def _work(s: MatrixStats, k: int) -> int:
    return s.nnz * max(k, 1)


def _small(p: Problem, s: MatrixStats, k: int) -> bool:
    return _work(s, k) < SMALL_WORK


def _uniform(s: MatrixStats) -> bool:
    return s.row_cv <= 0.5 and s.skew <= 4


def _skewed(s: MatrixStats) -> bool:
    return s.skew > 16 or s.row_cv > 1.5


_MV = frozenset({"spmv"})
_MM = frozenset({"spmm"})
_BOTH = frozenset({"spmv", "spmm"})
_ROWS = frozenset({"CSR", "CSC", "COO"})

# fmt: off
#: The cost table, first match wins.  Conditions read the statistics and k; the text says why.
COST_RULES: tuple[CostRule, ...] = (
    CostRule("cpu", _BOTH, ANY, "", _small,
             "too little work for the route to matter (per-call overhead dominates): the rule table's default"),
    CostRule("cuda", _BOTH, ANY, "", _small,
             "too little work for the route to matter (launch latency dominates): the rule table's default"),
    # ---- GPU (H200, benchmarks/RESULTS.md "SpMV / SpMM kernels (GPU)" and "Issue 18 on the H200:
    # GPU per-call cost ... one-shot SpMV / SpMM": Poisson 128^3 and R-MAT scale 21, every format)
    CostRule("cuda", _MV, frozenset({"BSR", "OTHER"}), "generated-cuda", lambda p, s, k: _skewed(s),
             "rows of very unequal length in a format without a balanced library kernel: a warp per (block) "
             "row of the generated kernel (BSR: 2.9x cuSPARSE's bsrmv; a loose_compressed user format: 3.4x "
             "the kernel's default threads, on R-MAT scale 21)", group=32),
    CostRule("cuda", _MM, frozenset({"BSR"}), "generated-cuda", lambda p, s, k: _skewed(s),
             "BSR with rows of very unequal length, k > 1: four threads per block row of the generated "
             "kernel (5.9x cuSPARSE's bsrmm on R-MAT scale 21)", group=4),
    CostRule("cuda", _BOTH, frozenset({"BSR"}), "generated-cuda", lambda p, s, k: True,
             "BSR with rows of similar length: one thread per block row of the generated kernel, the "
             "block unrolled (2.5x cuSPARSE's bsrmv, 6.7x its bsrmm at k = 8 on Poisson 128^3)", group=1),
    CostRule("cuda", _BOTH, _ROWS, "cusparse", lambda p, s, k: _skewed(s),
             "rows of very unequal length (power-law): cuSPARSE balances the work across threads; a "
             "thread or group per row would wait on the longest rows"),
    CostRule("cuda", _MM, ANY, "generated-cuda",
             lambda p, s, k: not _skewed(s) and s.row_mean <= 64,
             "k > 1 with rows of similar length: one thread per row keeps B's row in registers and reads "
             "A once (4-7x cuSPARSE SpMM on the H200; 3x the kernel's default for DCSR and a "
             "loose_compressed user format)", group=1),
    CostRule("cuda", _MV, ANY, "generated-cuda",
             lambda p, s, k: _uniform(s) and s.row_mean <= 16,
             "short rows of similar length: one thread per row, coalesced reads of the row pointer "
             "(1.2-1.6x cuSPARSE SpMV on the H200; 1.3-1.5x the kernel's default for DIA, DCSR and a "
             "loose_compressed user format)", group=1),
    # ---- CPU (2-core machine: benchmarks/RESULTS.md, "One-shot matmul with tuning records (cpu)")
    CostRule("cpu", _BOTH, frozenset({"BSR"}), "generated-c",
             lambda p, s, k: k > 1 or s.block_fill >= 0.5,
             "SciPy's BSR kernel multiplies block by block through a generic inner loop; the generated "
             "kernel unrolls the block and runs on every core (2-6x at k = 8)"),
    CostRule("cpu", _MM, _ROWS | {"DIA"}, "generated-c",
             lambda p, s, k: True,
             "k > 1: SciPy's SpMM is single-threaded and walks A once per column block; the generated "
             "kernel reads each stored entry once for all k columns, on every core"),
    CostRule("cpu", _MV, _ROWS, "generated-c",
             lambda p, s, k: s.skew > 8 and _work(s, k) >= PARALLEL_WORK and usable_cores() > 1,
             "rows of very unequal length and enough work for every core: the generated kernel splits "
             "the stored entries evenly over the cores (the split is taken from the row lengths; 1.7x "
             "SciPy on R-MAT scale 18 with two cores)"),
    CostRule("cpu", _MV, _ROWS, "scipy",
             lambda p, s, k: s.skew > 8,
             "rows of very unequal length and one usable core: SciPy's single pass is as fast"),
    CostRule("cpu", _MV, _ROWS, "generated-c",
             lambda p, s, k: _work(s, k) >= PARALLEL_WORK and usable_cores() > 1,
             "rows of similar length and enough work for every core: the generated kernel splits the "
             "rows over the cores (SciPy's SpMV is single-threaded)"),
)
# fmt: on


def choose_by_cost(problem: Problem, stats: MatrixStats, k: int, candidates: tuple[Rule, ...]) -> CostChoice:
    """The candidate the cost table prefers for these statistics, else the first candidate."""
    first = candidates[0]
    for c in COST_RULES:
        if c.device != problem.device or problem.op not in c.ops:
            continue
        if c.formats is not ANY and problem.format_class not in c.formats:
            continue
        if not c.when(problem, stats, k):
            continue
        if not c.route:
            return CostChoice(first, None, f"{c.why} ({stats.describe()}, k={k})")
        rule = next((r for r in candidates if r.route == c.route), None)
        if rule is None:
            continue
        return CostChoice(rule, c.group, f"{c.why} ({stats.describe()}, k={k})")
    return CostChoice(
        first, None, f"no cost rule applies: the rule table's default ({stats.describe()}, k={k})"
    )
