"""The planner's rule table: data, not if-chains.

Each :class:`Rule` says: for this op on this device, for these format classes, dtypes and
index widths, when this named condition holds, take this route -- and why.  The first rule
that matches wins; with autotuning every matching rule is a candidate.  The same table
drives ``UnsupportedError`` messages (what *is* supported) and the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ust.formats.library import instance_name

__all__ = ["ANY", "CONDITIONS", "PUBLIC_OPS", "RULES", "Problem", "Rule"]

ANY: frozenset[str] = frozenset({"*"})
FLOATS = frozenset({"float32", "float64", "complex64", "complex128"})
ALL_VALUES = FLOATS | frozenset({"float16", "int8", "int16", "int32", "int64", "uint8"})
INDEX = frozenset({"int32", "int64"})
LIBRARY_FORMATS_CPU = frozenset({"CSR", "CSC", "COO", "BSR", "DIA"})  # scipy has a kernel for each


@dataclass(frozen=True)
class Problem:
    """What the planner knows about one operation, before touching any data."""

    op: str  # "spmv" | "spmm" | "ttv" | ...
    device: str  # "cpu" | "cuda"
    format_class: str  # "CSR", "BSR", ..., "OTHER"
    format_params: tuple[int, ...]
    canonical: bool
    dtype: str
    index_dtype: str
    plain: bool  # alpha == 1 and beta == 0, no epilogue
    has_compiler: bool = True
    ndim: int = 2
    batched: bool = False
    epilog: bool = False
    max_extent: int = 0  # the largest dimension: libraries allocate vectors that long
    one_shot: bool = False  # a one-shot call: no plan is kept for later calls (ust.solve)

    @property
    def format_text(self) -> str:
        """``"CSR"``, ``"BSR[2, 2]"``: the format class with its parameters."""
        return instance_name(self.format_class, self.format_params)


#: Above this extent a library reduction's vector of ones (or its dense intermediate) would take
#: over 1 GiB of float64 for a tensor whose own storage may be a few entries: hypersparse shapes
#: take the O(nnz) array program instead.
LIBRARY_EXTENT_LIMIT = 2**27


def _square_blocks(p: Problem) -> bool:
    return len(p.format_params) == 2 and p.format_params[0] == p.format_params[1] and p.format_params[0] > 1


#: Named conditions a rule may require (kept small and obvious); read-only once the table is built.
_CONDITIONS: dict[str, Callable[[Problem], bool]] = {
    "always": lambda p: True,
    "canonical": lambda p: p.canonical,
    "canonical_square_blocks": lambda p: p.canonical and _square_blocks(p),
    "plain": lambda p: p.plain,
    "compiler": lambda p: p.has_compiler,
    "no_compiler": lambda p: not p.has_compiler,
    "plain_or_no_compiler": lambda p: p.plain or not p.has_compiler,
    "modest_extents": lambda p: p.max_extent <= LIBRARY_EXTENT_LIMIT,
    "canonical_modest_extents": lambda p: p.canonical and p.max_extent <= LIBRARY_EXTENT_LIMIT,
}


@dataclass(frozen=True)
class Rule:
    op: str
    device: str
    formats: frozenset[str]
    route: str
    reason: str
    dtypes: frozenset[str] = FLOATS
    index_dtypes: frozenset[str] = INDEX
    when: str = "always"
    convert_to: str | None = None

    def matches(self, p: Problem) -> bool:
        return (
            self.op == p.op
            and self.device == p.device
            and (self.formats is ANY or p.format_class in self.formats)
            and (self.dtypes is ANY or p.dtype in self.dtypes)
            and (self.index_dtypes is ANY or p.index_dtype in self.index_dtypes)
            and CONDITIONS[self.when](p)
        )

    def reason_for(self, p: Problem) -> str:
        """The reason text for ``p``: the format class with its parameters ("BSR[2, 2]") and dtype."""
        return self.reason.format(fmt=p.format_text, dtype=p.dtype)

    def describe(self) -> dict[str, Any]:
        fmts = "any format" if self.formats is ANY else ", ".join(sorted(self.formats))
        return {"op": self.op, "device": self.device, "formats": fmts, "route": self.route, "when": self.when}


def _matmul_rules(op: str) -> tuple[Rule, ...]:
    lib = "SpMV" if op == "spmv" else "SpMM"
    return (
        # ---- GPU
        Rule(op, "cuda", frozenset({"DIA"}), "generated-cuda",
             f"DIA has no cuSPARSE {lib}; the generated kernel reads x coalesced along each diagonal "
             "and moves no column indices, so it beats converting to CSR for cuSPARSE"),
        Rule(op, "cuda", frozenset({"CSR", "CSC", "COO"}), "cusparse",
             f"cuSPARSE generic {lib} supports {{fmt}} with {{dtype}} values and fuses alpha/beta",
             when="canonical"),
        Rule(op, "cuda", frozenset({"BSR"}), "cusparse",
             f"cuSPARSE generic {lib} supports BSR with square blocks larger than 1",
             when="canonical_square_blocks"),
        Rule(op, "cuda", ANY, "generated-cuda",
             f"no library {lib} for this storage: a CUDA kernel generated for exactly its levels"),
        # ---- CPU
        Rule(op, "cpu", LIBRARY_FORMATS_CPU, "scipy",
             f"SciPy has a compiled {lib} kernel for {{fmt}}; alpha=1, beta=0 need no fusion",
             when="plain_or_no_compiler", dtypes=ALL_VALUES),
        Rule(op, "cpu", ANY, "generated-c",
             "a C kernel generated for exactly this storage, alpha/beta (and epilogue) fused into one pass",
             when="compiler"),
        Rule(op, "cpu", ANY, "convert-scipy",
             "no C compiler on this machine: convert to CSR once, then SciPy's kernel (alpha/beta applied in place)",
             when="no_compiler", convert_to="CSR", dtypes=ALL_VALUES),
    )  # fmt: skip


_MATMUL_RULES: tuple[Rule, ...] = (
    *_matmul_rules("spmv"),
    *_matmul_rules("spmm"),
    Rule("ttv", "cuda", ANY, "generated-cuda", "tensor-times-vector on the last mode: a generated kernel"),
    Rule("ttv", "cpu", ANY, "generated-c", "tensor-times-vector on the last mode: a generated C kernel",
         when="compiler"),
)  # fmt: skip


# ---------------------------------------------------------------------------- sparse algebra (issue 8)
# Binary ops describe their second operand in ``Problem.other`` (see ust.algebra.problem):
# its format class text ("CSR", "BSR[2, 2]"), "DENSE", "SCALAR", or "" for unary ops.
ALGEBRA_VALUES = ALL_VALUES | frozenset({"uint16", "uint32", "uint64"})  # every value dtype a Tensor holds
SCIPY_VALUES = ALGEBRA_VALUES - {"float16"}  # scipy.sparse rejects float16
MERGE_KERNEL_VALUES = ALGEBRA_VALUES - {"float16"}  # ust.backends.cuda.merge_kernels.MERGE_VALUES


_CONDITIONS.update(
    {
        # both operands canonical and of the same class (same block size): the library's fast path
        "same_canonical_class": lambda p: p.canonical and getattr(p, "other", "") == p.format_text,
        # both operands are layouts SciPy stores (it converts a mixed pair itself)
        "both_library": lambda p: getattr(p, "other", "").partition("[")[0] in LIBRARY_FORMATS_CPU,
    }
)


# fmt: off
def _algebra_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for dev in ("cpu", "cuda"):
        rules.append(Rule(
            "transpose", dev, ANY, "relabel",
            "transposing permutes dimensions: the same buffers under the permuted map ({fmt}.T), no data moved",
            dtypes=ALGEBRA_VALUES))
        rules.append(Rule(
            "scale", dev, ANY, "values",
            "scalar and sparse-times-dense products keep {fmt}'s structure: one pass over the stored values",
            dtypes=ALGEBRA_VALUES))
    rules += [
        # ---- SpGEMM
        Rule("spgemm", "cpu", ANY, "generated-c",
             "a C Gustavson SpGEMM over rows (OpenMP) that emits sorted rows in the same sweep; SciPy's "
             "is single-threaded and needs a second pass to sort (operands as CSR, converted if they are not)",
             when="compiler", dtypes=ALGEBRA_VALUES),
        Rule("spgemm", "cpu", LIBRARY_FORMATS_CPU, "scipy",
             "SciPy's compiled SpGEMM takes {fmt} operands as they are (zero-copy views)",
             when="both_library", dtypes=SCIPY_VALUES),
        Rule("spgemm", "cpu", ANY, "convert-scipy",
             "SciPy has no kernel for {fmt}: both operands converted to CSR once, then SciPy's SpGEMM",
             convert_to="CSR", dtypes=SCIPY_VALUES),
        Rule("spgemm", "cpu", ANY, "array-program",
             "expand-sort-compress SpGEMM as a vectorised array program (memory grows with the products)",
             dtypes=ALGEBRA_VALUES),
        Rule("spgemm", "cuda", frozenset({"CSR"}), "cusparse",
             "cuSPARSE generic SpGEMM multiplies canonical CSR x CSR with {dtype} values and 32-bit indices",
             when="same_canonical_class", index_dtypes=frozenset({"int32"})),
        Rule("spgemm", "cuda", ANY, "convert-cusparse",
             "cuSPARSE SpGEMM takes CSR only: operands converted to CSR (int32 indices) once, then cuSPARSE",
             convert_to="CSR"),
        Rule("spgemm", "cuda", ANY, "array-program",
             "no cuSPARSE SpGEMM for {dtype}: expand-sort-compress as a CuPy array program",
             dtypes=ALGEBRA_VALUES),
        # ---- SDDMM
        # measured on the H200 (1 M x 1 M, 8/row, rank 64): generated 3.6-3.8 ms, cuSPARSE 11-12 ms
        Rule("sddmm", "cuda", ANY, "generated-cuda",
             "a kernel generated for {fmt}, one warp per stored entry, epilogue fused: about 3x faster "
             "than cuSPARSE SDDMM on the H200",
             dtypes=frozenset({"float32", "float64"})),
        Rule("sddmm", "cuda", frozenset({"CSR"}), "cusparse",
             "cuSPARSE SDDMM samples A @ B on canonical CSR with {dtype} values, alpha/beta fused",
             when="canonical"),
        Rule("sddmm", "cuda", ANY, "array-program",
             "SDDMM as a CuPy array program (row gathers and a batched dot, in chunks)",
             dtypes=ALGEBRA_VALUES),
        Rule("sddmm", "cpu", ANY, "array-program",
             "SDDMM as a NumPy array program on {fmt}'s stored positions (row gathers and a batched dot, in chunks)",
             dtypes=ALGEBRA_VALUES),
    ]
    # ---- elementwise (union: add / subtract; intersection: multiply)
    for op, how in (("add", "union"), ("multiply", "intersection")):
        rules += [
            Rule(op, "cpu", frozenset({"CSR", "CSC", "BSR"}), "scipy",
                 f"SciPy's compiled {how} of two canonical {{fmt}} operands (zero-copy views)",
                 when="same_canonical_class", dtypes=SCIPY_VALUES),
            Rule(op, "cpu", ANY, "array-program",
                 f"{how} co-iteration in {{fmt}}'s level order as a NumPy array program (merge by searchsorted)",
                 dtypes=ALGEBRA_VALUES),
        ]
        rules.append(Rule(op, "cuda", frozenset({"CSR", "CSC"}), "merge-kernel",
                          f"ust's CUDA merge kernel: the {how} of two canonical {{fmt}} operands, one thread per "
                          "row, counted then written (SciPy's arithmetic; the operands' index checks in the "
                          "counting pass, one host sync)",
                          when="same_canonical_class", dtypes=MERGE_KERNEL_VALUES))
        if op == "add":  # CuPy's product drops nan * (implicit 0), which SciPy stores: not offered
            rules.append(Rule(op, "cuda", frozenset({"CSR"}), "cupyx",
                              "cuSPARSE csrgeam2 (through CuPy) adds two canonical CSR operands "
                              "(their indices checked first, zeros dropped after)",
                              when="same_canonical_class"))
        rules.append(Rule(op, "cuda", ANY, "array-program",
                          f"{how} co-iteration in {{fmt}}'s level order as a CuPy array program",
                          dtypes=ALGEBRA_VALUES))
    # ---- reductions
    for op in ("sum", "max", "min"):
        rules += [
            Rule(op, "cpu", LIBRARY_FORMATS_CPU if op == "sum" else LIBRARY_FORMATS_CPU - {"DIA"}, "scipy",
                 f"SciPy's {op} on a zero-copy {{fmt}} view (implicit zeros counted as SciPy does)",
                 dtypes=SCIPY_VALUES, when="modest_extents"),
            Rule(op, "cpu", ANY, "array-program",
                 f"{op} as a NumPy array program over {{fmt}}'s entries (segmented reduction)",
                 dtypes=ALGEBRA_VALUES),
            *([Rule(op, "cuda", frozenset({"CSR", "CSC"}), "cupyx",
                    "CuPy's sum of a zero-copy {fmt} view (a cuSPARSE product with a vector of ones)",
                    when="canonical_modest_extents")] if op == "sum" else []),
            Rule(op, "cuda", ANY, "array-program",
                 f"{op} as a CuPy array program over {{fmt}}'s entries (segmented reduction)",
                 dtypes=ALGEBRA_VALUES),
        ]
    return tuple(rules)
# fmt: on


# ---------------------------------------------------------------------------- conversion
# A conversion's Problem (ust.plan.convert.ConvertProblem) names the source's library layout as its
# format class and the target's in ``other``; the flags below say what the pair tables of
# ust.convert.routes offer for the pair (the tables are the data; these rules the order).
def _flag(name: str) -> Callable[[Problem], bool]:
    return lambda p: bool(getattr(p, name, False))


def _scipy_dtype(p: Problem) -> bool:
    return p.dtype != "float16"  # scipy's compiled conversions have no float16


_CONDITIONS.update(
    {
        "dia_source": _flag("dia_source"),
        "library_pair_int32": lambda p: _flag("library_pair")(p) and _flag("fits_int32")(p),
        "coordinate_twin_int32": lambda p: _flag("twin")(p) and _flag("fits_int32")(p),
        "library_pair_scipy": lambda p: _flag("library_pair")(p) and _scipy_dtype(p),
        "staged_source_scipy": lambda p: _flag("staged")(p) and _scipy_dtype(p),
        "bsr_target_scipy": lambda p: _flag("bsr_target")(p) and _scipy_dtype(p),
        "direct_pair": _flag("direct_pair"),
    }
)

# fmt: off
_CONVERT_RULES: tuple[Rule, ...] = (
    # ---- GPU (measured on the H200: see ust.convert.routes.GPU_ROUTES)
    Rule("convert", "cuda", ANY, "dia-compaction",
         "a DIA source goes straight to CSR or CSC by masked compaction: slots are read in the "
         "target's order, so nothing is sorted", dtypes=ANY, index_dtypes=ANY, when="dia_source"),
    Rule("convert", "cuda", frozenset({"CSR", "CSC", "COO"}), "library",
         "cuSPARSE (through cupyx) converts between canonical {fmt} and the target's library layout",
         index_dtypes=ANY, when="library_pair_int32"),
    Rule("convert", "cuda", ANY, "twin",
         "the same entries in the same order, one coordinate per entry: cuSPARSE's csr.tocoo on the "
         "level coordinates", index_dtypes=ANY, when="coordinate_twin_int32"),
    Rule("convert", "cuda", ANY, "general",
         "the general path: unpack levels, order, merge, pack (a CuPy array program)",
         dtypes=ANY, index_dtypes=ANY),
    # ---- CPU
    Rule("convert", "cpu", ANY, "direct",
         "one pass over the source's index buffers (CSR <-> DCSR, CSC <-> DCSC: the empty rows or "
         "columns dropped or put back; COO -> CSR: indptr from the runs of equal rows, the column "
         "coordinates and values kept as they are)", dtypes=ANY, index_dtypes=ANY, when="direct_pair"),
    Rule("convert", "cpu", LIBRARY_FORMATS_CPU, "library",
         "SciPy's compiled conversion (or the C CSR -> BSR merge) between canonical library layouts",
         dtypes=ANY, index_dtypes=ANY, when="library_pair_scipy"),
    Rule("convert", "cpu", frozenset({"BSR", "DIA"}), "staged",
         "a canonical {fmt} source is turned into CSR by SciPy first: reading its padded slots costs "
         "more than that conversion", dtypes=ANY, index_dtypes=ANY, when="staged_source_scipy"),
    Rule("convert", "cpu", ANY, "general-then-bsr",
         "a BSR target is made from CSR by the C merge kernel: the general path to CSR first",
         dtypes=ANY, index_dtypes=ANY, when="bsr_target_scipy"),
    Rule("convert", "cpu", ANY, "general",
         "the general path: unpack levels, order, merge, pack (a NumPy array program)",
         dtypes=ANY, index_dtypes=ANY),
)

# ---------------------------------------------------------------------------- direct solve, dense, FFT
#: The largest n a one-shot solve factors as a dense matrix, by device: below it the ``(2/3) n^3``
#: flops of LAPACK's / cuSOLVER's dense LU cost less than a sparse factorisation's fixed work
#: (SuperLU's ordering and bookkeeping, ~200 us at n = 100 on the CPU; cuDSS's analysis phase,
#: ~10 ms on the H200 whatever the size).  Measured (benchmarks/RESULTS.md, "Dense LU route"):
#: n = 100 on both devices, n = 1000 on the H200 (4.2 ms against cuDSS's 41); the GPU cap is
#: the size whose 5.7 GFLOP still fit well inside cuDSS's analysis time, not a measured crossover.
DENSE_SOLVE_MAX_N = MappingProxyType({"cpu": 128, "cuda": 2048})
#: The largest n the dense LU route takes when forced (``route="dense-lu"``): n^2 values in memory.
DENSE_SOLVE_LIMIT = 8192

_CONDITIONS["small_dense_solve"] = lambda p: (
    p.one_shot and p.plain and 0 < p.max_extent <= DENSE_SOLVE_MAX_N.get(p.device, 0)
)
_CONDITIONS["dense_fits"] = lambda p: 0 < p.max_extent <= DENSE_SOLVE_LIMIT

_DENSE_LU_REASON = (
    "a one-shot solve of a small system (n <= {n}): LAPACK's / cuSOLVER's dense LU with partial "
    "pivoting costs less than any sparse factorisation's analysis; no ordering is kept for later calls"
)
_SOLVE_RULES: tuple[Rule, ...] = (
    Rule("solve", "cuda", ANY, "dense-lu", _DENSE_LU_REASON.replace("{n}", str(DENSE_SOLVE_MAX_N["cuda"])),
         index_dtypes=ANY, when="small_dense_solve"),
    Rule("solve", "cpu", ANY, "dense-lu", _DENSE_LU_REASON.replace("{n}", str(DENSE_SOLVE_MAX_N["cpu"])),
         index_dtypes=ANY, when="small_dense_solve"),
    Rule("solve", "cuda", ANY, "cudss",
         "cuDSS factorises on the GPU (A converted to CSR; refinement and mixed precision inside "
         "its solve phase)", index_dtypes=ANY),
    Rule("solve", "cpu", ANY, "superlu",
         "SciPy's SuperLU with an ordering chosen for the pattern at plan time (A converted to CSR)",
         index_dtypes=ANY),
    *(Rule("solve", dev, ANY, "dense-lu",
           f"a dense LU with partial pivoting of the densified matrix (n <= {DENSE_SOLVE_LIMIT}; "
           "chosen by route='dense-lu')", index_dtypes=ANY, when="dense_fits")
      for dev in ("cuda", "cpu")),
)

_ITERATIVE_RULES: tuple[Rule, ...] = (
    Rule("iterative_solve", "cuda", ANY, "krylov",
         "a Krylov iteration on the GPU: the planner's SpMV for A's own format ({fmt}), vector updates "
         "as device array operations, the host reading a norm only at convergence tests",
         dtypes=ANY, index_dtypes=ANY),
    Rule("iterative_solve", "cpu", ANY, "krylov",
         "a Krylov iteration on the CPU: the planner's SpMV for A's own format ({fmt}), vector updates "
         "in NumPy", dtypes=ANY, index_dtypes=ANY),
)

_CONDITIONS["empty"] = lambda p: p.max_extent == 0  # dense problems: the smallest of m, n, k
_CONDITIONS["fft_callbacks"] = lambda p: p.epilog  # an FFT with a prologue or epilogue callback
_CONDITIONS["fft_fused"] = lambda p: p.epilog and getattr(p, "fusable", False)  # ... that cuFFT can link in
_DENSE_RULES: tuple[Rule, ...] = (
    Rule("dense_matmul", "cuda", ANY, "empty",
         "an empty product (m, n or k is 0): D is C scaled by beta, or zeros; no library call",
         dtypes=ANY, index_dtypes=ANY, when="empty"),
    Rule("dense_matmul", "cuda", ANY, "cublasLt",
         "cuBLASLt matmul with the epilogue fused, algorithm from its heuristic (autotune times others)",
         dtypes=ANY, index_dtypes=ANY),
    Rule("dense_matmul", "cpu", ANY, "numpy",
         "BLAS gemm through SciPy for 2-D BLAS dtypes, NumPy's matmul otherwise; the epilogue in place",
         dtypes=ANY, index_dtypes=ANY),
    Rule("fft", "cuda", ANY, "cufft.callbacks",
         "cuFFT with the prologue / epilogue compiled to LTO-IR and linked into its kernels "
         "(cufftXtSetJITCallback): no extra pass over memory", dtypes=ANY, index_dtypes=ANY, when="fft_fused"),
    Rule("fft", "cuda", ANY, "cufft+kernel",
         "cuFFT plus one generated elementwise kernel for the prologue / epilogue (they cannot be fused "
         "here: see the callback lines)", dtypes=ANY, index_dtypes=ANY, when="fft_callbacks"),
    Rule("fft", "cuda", ANY, "cufft", "cuFFT plan for this shape, dtype and axes, reused on every execute",
         dtypes=ANY, index_dtypes=ANY),
    Rule("fft", "cpu", ANY, "scipy.fft+pass",
         "scipy.fft with the prologue / epilogue as one array program before / after it",
         dtypes=ANY, index_dtypes=ANY, when="fft_callbacks"),
    Rule("fft", "cpu", ANY, "scipy.fft", "scipy.fft (pocketfft) with the configured worker threads",
         dtypes=ANY, index_dtypes=ANY),
)
_COMPILED_ALGEBRA_RULES: tuple[Rule, ...] = tuple(
    Rule(op, dev, ANY, "compiled",
         f"the tensor-algebra compiler: a {'CUDA' if dev == 'cuda' else 'C'} kernel generated for "
         f"{text} over {{fmt}} and the other operand's format, exact zeros dropped after{extra} (SciPy's rule)",
         dtypes=ANY, index_dtypes=ANY)
    for op, text, extra in (
        ("spgemm", "C(i,j) = A(i,k) * B(k,j)", ""),
        ("add", "C(i,j) = A(i,j) + B(i,j)", ""),
        ("multiply", "C(i,j) = A(i,j) * B(i,j)", ", NaN / inf stored in one operand only added as NaN"),
    )
    for dev in ("cpu", "cuda")
)

_COMPUTE_RULES: tuple[Rule, ...] = (
    Rule("compute", "cuda", ANY, "generated-cuda",
         "a CUDA kernel generated for this expression and these formats: merge-lattice co-iteration, "
         "one GPU thread per outer coordinate, a count pass and a fill pass for a sparse result",
         dtypes=ANY, index_dtypes=ANY),
    Rule("compute", "cpu", ANY, "generated-c",
         "a C kernel generated for this expression and these formats: merge-lattice co-iteration, "
         "OpenMP over the outer loop, a row workspace and two passes for a sparse result",
         dtypes=ANY, index_dtypes=ANY),
)
# fmt: on

# ---------------------------------------------------------------------------- indexing (t[key])
# An indexing Problem (ust.api.indexing.IndexProblem) says in ``key`` what the key selects:
# "columns" (every row kept, columns chosen), "rows" (any other matrix key CSR serves), "nd"
# (index arrays or a result of more than two dimensions: COO's semantics), "" (not a matrix).
_CONDITIONS.update(
    {
        "matrix_row_key": lambda p: p.ndim == 2 and getattr(p, "key", "") == "rows",
        "matrix_column_key": lambda p: p.ndim == 2 and getattr(p, "key", "") == "columns",
    }
)


# fmt: off
def _getitem_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for dev in ("cpu", "cuda"):
        rules += [
            Rule("getitem", dev, frozenset({"CSR"}), "direct",
                 "{fmt} is indexed in place: the rows the key reaches are gathered through its row "
                 "positions, then matched against the key (an array program)",
                 dtypes=ANY, index_dtypes=ANY),
            Rule("getitem", dev, frozenset({"CSC"}), "direct",
                 "{fmt} is indexed in place: the columns the key reaches are gathered through its "
                 "column positions, then matched against the key (an array program)",
                 dtypes=ANY, index_dtypes=ANY),
            Rule("getitem", dev, frozenset({"COO", "COO3", "SparseVector"}), "direct",
                 "{fmt} is indexed in place: its coordinates are masked and matched against the key "
                 "(an array program), as SciPy's COO indexes",
                 dtypes=ANY, index_dtypes=ANY),
            Rule("getitem", dev, ANY, "via-csc",
                 "{fmt} has no index of its own: converted once to CSC, since the key selects columns, "
                 "then indexed as CSC", dtypes=ANY, index_dtypes=ANY, when="matrix_column_key",
                 convert_to="CSC"),
            Rule("getitem", dev, ANY, "via-csr",
                 "{fmt} has no index of its own: converted once to CSR (the key selects rows or "
                 "elements), then indexed as CSR", dtypes=ANY, index_dtypes=ANY, when="matrix_row_key",
                 convert_to="CSR"),
            Rule("getitem", dev, ANY, "via-coo",
                 "{fmt} has no index of its own and the key needs COO's indexing (a tensor that is not "
                 "a matrix, or a result or index arrays of more than two dimensions): its entries are "
                 "unpacked once into coordinates, then indexed as SciPy's COO indexes",
                 dtypes=ANY, index_dtypes=ANY, convert_to="COO"),
        ]
    return tuple(rules)
# fmt: on

_GETITEM_RULES: tuple[Rule, ...] = _getitem_rules()

#: The rule table: read-only (a tuple of frozen rules; the conditions a read-only mapping).
RULES: tuple[Rule, ...] = (
    *_MATMUL_RULES,
    *_algebra_rules(),
    *_CONVERT_RULES,
    *_SOLVE_RULES,
    *_ITERATIVE_RULES,
    *_DENSE_RULES,
    *_GETITEM_RULES,
    *_COMPUTE_RULES,
    *_COMPILED_ALGEBRA_RULES,
)
CONDITIONS: Mapping[str, Callable[[Problem], bool]] = MappingProxyType(_CONDITIONS)

#: Every public op, the rule ops that plan it and the devices it runs on (tests/test_architecture.py
#: checks that each has rules for each device, and that every rule's route is registered).
PUBLIC_OPS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType(
    {
        "matmul": (("spmv", "spmm"), ("cpu", "cuda")),
        "ttv": (("ttv",), ("cpu", "cuda")),
        "spgemm": (("spgemm",), ("cpu", "cuda")),
        "sddmm": (("sddmm",), ("cpu", "cuda")),
        "add": (("add",), ("cpu", "cuda")),
        "multiply": (("multiply",), ("cpu", "cuda")),
        "scale": (("scale",), ("cpu", "cuda")),
        "transpose": (("transpose",), ("cpu", "cuda")),
        "sum": (("sum",), ("cpu", "cuda")),
        "max": (("max",), ("cpu", "cuda")),
        "min": (("min",), ("cpu", "cuda")),
        "convert": (("convert",), ("cpu", "cuda")),
        "solve": (("solve",), ("cpu", "cuda")),
        "iterative_solve": (("iterative_solve",), ("cpu", "cuda")),
        "dense_matmul": (("dense_matmul",), ("cpu", "cuda")),
        "fft": (("fft",), ("cpu", "cuda")),
        "getitem": (("getitem",), ("cpu", "cuda")),
        "compute": (("compute",), ("cpu", "cuda")),
        "einsum": (("compute",), ("cpu", "cuda")),
    }
)
