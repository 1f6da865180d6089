"""ctypes binding of cuBLASLt: one fused ``D = epilogue(alpha * op(A) @ op(B) + beta * C + bias)`` call.

cuBLASLt thinks in strided batches of column-major matrices.  The first half of this module is
pure Python and loads nothing: it maps NumPy-style operands (row- or column-major, batched) onto
that model (:func:`matrix_view`, :func:`describe`), so the mapping is tested on any machine.  The
second half opens ``libcublasLt`` (through :func:`ust.backends.cuda._lib.load_library`) on first use
and wraps descriptors, heuristics and the matmul call in :class:`LtMatmul`.

Row-major output is produced as the column-major transpose: ``D^T = op(B)^T op(A)^T``, which is
why a bias vector runs along the rows of ``D^T``, i.e. the columns of a row-major D (the usual
``(N,)`` bias of a linear layer).  Enum values are those of ``cublasLt.h`` / ``cublas_api.h``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ust.runtime.errors import ShapeError, UnsupportedError, UstError
from ust.runtime.log import get_logger

__all__ = [
    "DTYPES",
    "EPILOGUES",
    "CublasLtError",
    "Layout",
    "LtMatmul",
    "Problem",
    "algorithm_ids",
    "check_status",
    "choose_d_order",
    "configuration",
    "configurations",
    "describe",
    "element_view",
    "fit_operand",
    "library_version",
    "matrix_view",
]

_log = get_logger("backends.cuda.cublaslt")

# ------------------------------------------------------------------------------------- status codes

# cublasStatus_t -> (name, what it usually means here)
STATUS = {
    0: ("CUBLAS_STATUS_SUCCESS", "success"),
    1: ("CUBLAS_STATUS_NOT_INITIALIZED", "cuBLASLt is not initialised (no usable CUDA device or driver)"),
    3: ("CUBLAS_STATUS_ALLOC_FAILED", "cuBLASLt could not allocate memory"),
    7: ("CUBLAS_STATUS_INVALID_VALUE", "an argument or descriptor attribute is invalid"),
    8: ("CUBLAS_STATUS_ARCH_MISMATCH", "the requested feature is not available on this GPU architecture"),
    11: ("CUBLAS_STATUS_MAPPING_ERROR", "access to GPU memory failed"),
    13: ("CUBLAS_STATUS_EXECUTION_FAILED", "the GPU kernel failed to launch or run"),
    14: ("CUBLAS_STATUS_INTERNAL_ERROR", "internal cuBLASLt error"),
    15: ("CUBLAS_STATUS_NOT_SUPPORTED", "this combination of types, layouts and epilogue is not supported"),
    16: ("CUBLAS_STATUS_LICENSE_ERROR", "license error"),
}
_NOT_SUPPORTED = 15


class CublasLtError(UstError, RuntimeError):
    """A cuBLASLt call that returned an error status (``status`` holds the code)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


def check_status(status: int, call: str) -> None:
    """Raise for a non-zero ``cublasStatus_t``: UnsupportedError for NOT_SUPPORTED, else CublasLtError."""
    if status == 0:
        return
    name, meaning = STATUS.get(status, (f"status {status}", "unknown cuBLAS status"))
    message = f"{call} failed with {name} ({status}): {meaning}"
    if status == _NOT_SUPPORTED:
        raise UnsupportedError(message)
    raise CublasLtError(message, status=status)


# ------------------------------------------------------------------------------------------ tables

# cudaDataType_t of each supported NumPy dtype name, and (compute type, scale dtype) for it.
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_C_32F, CUDA_C_64F, CUDA_R_16BF = 0, 1, 2, 4, 5, 14
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70

# dtype name -> (cudaDataType, compute type, scale cudaDataType, scale NumPy dtype)
DTYPES: dict[str, tuple[int, int, int, str]] = {
    "float16": (CUDA_R_16F, COMPUTE_32F, CUDA_R_32F, "float32"),
    "bfloat16": (CUDA_R_16BF, COMPUTE_32F, CUDA_R_32F, "float32"),
    "float32": (CUDA_R_32F, COMPUTE_32F, CUDA_R_32F, "float32"),
    "float64": (CUDA_R_64F, COMPUTE_64F, CUDA_R_64F, "float64"),
    "complex64": (CUDA_C_32F, COMPUTE_32F, CUDA_C_32F, "complex64"),
    "complex128": (CUDA_C_64F, COMPUTE_64F, CUDA_C_64F, "complex128"),
}
COMPUTE_NAMES = {COMPUTE_32F: "32F", COMPUTE_32F_FAST_TF32: "32F_FAST_TF32", COMPUTE_64F: "64F"}

# cublasLtEpilogue_t by ust's epilogue name
EPILOGUES = {"none": 1, "relu": 2, "bias": 4, "relu_bias": 6, "gelu": 32, "gelu_bias": 36}

OP_N, OP_T = 0, 1

# attribute enum -> ctypes type of its value
_DESC_COMPUTE_TYPE, _DESC_SCALE_TYPE, _DESC_TRANSA, _DESC_TRANSB = 0, 1, 3, 4
_DESC_EPILOGUE, _DESC_BIAS_POINTER, _DESC_BIAS_BATCH_STRIDE = 7, 8, 10
_DESC_ATTR_TYPES = {
    _DESC_COMPUTE_TYPE: ctypes.c_int32,
    _DESC_SCALE_TYPE: ctypes.c_int32,
    _DESC_TRANSA: ctypes.c_int32,
    _DESC_TRANSB: ctypes.c_int32,
    _DESC_EPILOGUE: ctypes.c_uint32,
    _DESC_BIAS_POINTER: ctypes.c_void_p,
    _DESC_BIAS_BATCH_STRIDE: ctypes.c_int64,
}
_LAYOUT_ORDER, _LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_OFFSET = 1, 5, 6
_LAYOUT_ATTR_TYPES = {
    _LAYOUT_ORDER: ctypes.c_int32,
    _LAYOUT_BATCH_COUNT: ctypes.c_int32,
    _LAYOUT_BATCH_OFFSET: ctypes.c_int64,
}
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}
_PREF_ATTR_TYPES = {_PREF_MAX_WORKSPACE: ctypes.c_uint64, **dict.fromkeys(range(5, 9), ctypes.c_uint32)}
ORDER_COL = 0


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes, serialisable for the same library version."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [
        ("algo", Algo),
        ("workspaceSize", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("wavesCount", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


# --------------------------------------------------------------------------- pure layout mapping


@dataclass(frozen=True)
class Layout:
    """A strided batch of column-major matrices: cuBLASLt's matrix layout descriptor."""

    rows: int
    cols: int
    ld: int
    batch_count: int = 1
    batch_stride: int = 0


@dataclass(frozen=True)
class Problem:
    """Everything cuBLASLt needs to know about one matmul, in its own column-major terms.

    ``first`` names the NumPy operand passed as cuBLASLt's A (``"a"``, or ``"b"`` when D is
    row-major and computed transposed).  JSON-safe through :func:`dataclasses.asdict`.
    """

    dtype: str
    compute_type: int
    m: int
    n: int
    k: int
    transa: int
    transb: int
    a: Layout
    b: Layout
    c: Layout
    d: Layout
    epilogue: str
    bias_batch_stride: int
    first: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Problem:
        layouts = {key: Layout(**d[key]) for key in ("a", "b", "c", "d")}
        return cls(**{**d, **layouts})


def matrix_view(rows: int, cols: int, s_row: int, s_col: int, prefer: str = "C") -> tuple[str, int] | None:
    """How a NumPy matrix with element strides ``(s_row, s_col)`` fits cuBLASLt: ``(order, ld)``.

    ``"C"``: rows are contiguous (unit column stride), ``ld`` is the row stride; ``"F"``: the
    transpose.  A single row or column fits both ways (``prefer`` picks).  None means it does not
    fit at all (broadcast, negative or two non-unit strides) and must be copied.
    """
    fits_c = (cols <= 1 or s_col == 1) and (rows <= 1 or s_row >= max(cols, 1))
    fits_f = (rows <= 1 or s_row == 1) and (cols <= 1 or s_col >= max(rows, 1))
    order = prefer if (fits_c and fits_f) else ("C" if fits_c else ("F" if fits_f else None))
    if order is None:
        return None
    if order == "C":
        return "C", (s_row if rows > 1 else max(cols, 1))
    return "F", (s_col if cols > 1 else max(rows, 1))


def batch_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """One element stride between consecutive matrices of a batch, or None if there is none.

    Batch axes of length 1 do not count; all-broadcast batches (stride 0) give 0.
    """
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 0
    for (_, outer), (n_inner, inner) in itertools.pairwise(dims):
        if outer != inner * n_inner:
            return None
    stride = dims[-1][1]
    return stride if stride >= 0 else None


def operand_layout(order: str, rows: int, cols: int, ld: int, count: int, stride: int) -> Layout:
    """The column-major layout of a NumPy matrix stored in ``order`` (``"C"`` is its transpose)."""
    r, c = (rows, cols) if order == "F" else (cols, rows)
    return Layout(r, c, ld, count, stride)


def describe(
    *,
    dtype: str,
    shape: tuple[int, int, int],
    batch_count: int,
    a: tuple[str, int, int],
    b: tuple[str, int, int],
    c: tuple[str, int, int] | None,
    d_order: str,
    epilogue: str = "none",
    bias_batch_stride: int = 0,
    tf32: bool = False,
) -> Problem:
    """The cuBLASLt problem for ``D (M x N) = op(A) (M x K) @ op(B) (K x N)``.

    ``a``, ``b``, ``c`` are ``(order, ld, batch_stride)`` of the NumPy operands (C must already be
    in ``d_order``); D is allocated contiguous in ``d_order``.  A row-major D swaps the operands.
    """
    if dtype not in DTYPES:
        raise UnsupportedError(f"cuBLASLt matmul of {dtype} is not supported; supported: {', '.join(DTYPES)}")
    M, N, K = shape
    compute = DTYPES[dtype][1]
    if tf32:
        if dtype != "float32":
            raise UnsupportedError(f"tf32 applies to float32 operands only, not {dtype}")
        compute = COMPUTE_32F_FAST_TF32
    if c is not None and c[0] != d_order:
        raise UnsupportedError("cuBLASLt needs C stored in the order of D; copy it first")
    a_layout = operand_layout(a[0], M, K, a[1], batch_count, a[2])
    b_layout = operand_layout(b[0], K, N, b[1], batch_count, b[2])
    if d_order == "F":
        m, n, first, second = M, N, (a, a_layout), (b, b_layout)
        d_layout = Layout(M, N, max(M, 1), batch_count, M * N if batch_count > 1 else 0)
    else:
        m, n, first, second = N, M, (b, b_layout), (a, a_layout)
        d_layout = Layout(N, M, max(N, 1), batch_count, M * N if batch_count > 1 else 0)
    c_layout = d_layout if c is None else Layout(m, n, c[1], batch_count, c[2])
    return Problem(
        dtype=dtype,
        compute_type=compute,
        m=m,
        n=n,
        k=K,
        transa=OP_N if first[0][0] == d_order else OP_T,
        transb=OP_N if second[0][0] == d_order else OP_T,
        a=first[1],
        b=second[1],
        c=c_layout,
        d=d_layout,
        epilogue=epilogue,
        bias_batch_stride=bias_batch_stride,
        first="a" if d_order == "F" else "b",
    )


def alignment(ptr: int) -> int:
    """The largest power of two up to 256 that divides a device pointer (cuBLASLt's alignment hint)."""
    if ptr == 0:
        return 256
    return min(256, ptr & -ptr)


# ------------------------------------------------------------------------------- library binding

_c_void_p = ctypes.c_void_p
_p_void = ctypes.POINTER(ctypes.c_void_p)


@functools.cache
def _api() -> SimpleNamespace:
    """Open libcublasLt and declare the functions ust calls (once per process)."""
    from ust.backends.cuda._lib import declare, load_library

    lib = load_library("cublasLt", sonames=("libcublasLt.so.13", "libcublasLt.so.12"))
    st = ctypes.c_int
    # (algo, attribute, buffer, size, size written): capability and configuration getters alike
    algo_get_args = [
        ctypes.POINTER(Algo),
        ctypes.c_int,
        _c_void_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t),
    ]
    api = SimpleNamespace(
        create=declare(lib, "cublasLtCreate", st, [_p_void]),
        destroy=declare(lib, "cublasLtDestroy", st, [_c_void_p]),
        version=declare(lib, "cublasLtGetVersion", ctypes.c_size_t, []),
        desc_create=declare(lib, "cublasLtMatmulDescCreate", st, [_p_void, ctypes.c_int, ctypes.c_int]),
        desc_destroy=declare(lib, "cublasLtMatmulDescDestroy", st, [_c_void_p]),
        desc_set=declare(
            lib, "cublasLtMatmulDescSetAttribute", st, [_c_void_p, ctypes.c_int, _c_void_p, ctypes.c_size_t]
        ),
        layout_create=declare(
            lib,
            "cublasLtMatrixLayoutCreate",
            st,
            [_p_void, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
        ),
        layout_destroy=declare(lib, "cublasLtMatrixLayoutDestroy", st, [_c_void_p]),
        layout_set=declare(
            lib, "cublasLtMatrixLayoutSetAttribute", st, [_c_void_p, ctypes.c_int, _c_void_p, ctypes.c_size_t]
        ),
        pref_create=declare(lib, "cublasLtMatmulPreferenceCreate", st, [_p_void]),
        pref_destroy=declare(lib, "cublasLtMatmulPreferenceDestroy", st, [_c_void_p]),
        pref_set=declare(
            lib,
            "cublasLtMatmulPreferenceSetAttribute",
            st,
            [_c_void_p, ctypes.c_int, _c_void_p, ctypes.c_size_t],
        ),
        heuristic=declare(
            lib,
            "cublasLtMatmulAlgoGetHeuristic",
            st,
            [*[_c_void_p] * 7, ctypes.c_int, ctypes.POINTER(HeuristicResult), ctypes.POINTER(ctypes.c_int)],
        ),
        check=declare(
            lib,
            "cublasLtMatmulAlgoCheck",
            st,
            [*[_c_void_p] * 6, ctypes.POINTER(Algo), ctypes.POINTER(HeuristicResult)],
        ),
        algo_ids=declare(
            lib,
            "cublasLtMatmulAlgoGetIds",
            st,
            [_c_void_p, *[ctypes.c_int] * 7, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        ),
        algo_init=declare(
            lib, "cublasLtMatmulAlgoInit", st, [_c_void_p, *[ctypes.c_int] * 7, ctypes.POINTER(Algo)]
        ),
        cap_get=declare(lib, "cublasLtMatmulAlgoCapGetAttribute", st, algo_get_args),
        config_set=declare(
            lib,
            "cublasLtMatmulAlgoConfigSetAttribute",
            st,
            [ctypes.POINTER(Algo), ctypes.c_int, _c_void_p, ctypes.c_size_t],
        ),
        config_get=declare(lib, "cublasLtMatmulAlgoConfigGetAttribute", st, algo_get_args),
        matmul=declare(
            lib,
            "cublasLtMatmul",
            st,
            [
                _c_void_p,  # handle
                _c_void_p,  # computeDesc
                _c_void_p,  # alpha (host)
                _c_void_p,  # A
                _c_void_p,  # Adesc
                _c_void_p,  # B
                _c_void_p,  # Bdesc
                _c_void_p,  # beta (host)
                _c_void_p,  # C
                _c_void_p,  # Cdesc
                _c_void_p,  # D
                _c_void_p,  # Ddesc
                ctypes.POINTER(Algo),
                _c_void_p,  # workspace
                ctypes.c_size_t,
                _c_void_p,  # stream
            ],
        ),
    )
    return api


def library_version() -> int:
    """cublasLtGetVersion(), e.g. 130100 (a saved algorithm is valid for this version only)."""
    return int(_api().version())


_handles: dict[int, int] = {}
_handles_lock = threading.Lock()


def handle(device_id: int) -> int:
    """The process-wide cuBLASLt handle of a device (created once; creation costs milliseconds)."""
    with _handles_lock:
        h = _handles.get(device_id)
        if h is None:
            ptr = ctypes.c_void_p()
            check_status(_api().create(ctypes.byref(ptr)), "cublasLtCreate")
            h = _handles[device_id] = int(ptr.value or 0)
        return h


def _set(setter: Any, obj: int, attr: int, ctype: Any, value: int, call: str) -> None:
    buf = ctype(value)
    check_status(setter(obj, attr, ctypes.byref(buf), ctypes.sizeof(buf)), call)


class LtMatmul:
    """Descriptors, candidate algorithms and the chosen one for one :class:`Problem` on one device.

    Built by ``plan()``, used by every ``execute()``; :meth:`free` destroys the descriptors.
    """

    def __init__(self, problem: Problem, device_id: int, *, bias_ptr: int = 0) -> None:
        self.problem = problem
        self.device_id = device_id
        self.api = _api()
        self.handle = handle(device_id)
        self._desc = 0
        self._layouts: dict[str, int] = {}
        self._pref = 0
        self.candidates: list[tuple[Algo, int]] = []
        self.algo: Algo | None = None
        self.workspace_size = 0
        self._create(bias_ptr)

    # ----------------------------------------------------------------------------- descriptors

    def _create(self, bias_ptr: int) -> None:
        api, p = self.api, self.problem
        _, _, scale_type, _ = DTYPES[p.dtype]
        ptr = ctypes.c_void_p()
        check_status(
            api.desc_create(ctypes.byref(ptr), p.compute_type, scale_type), "cublasLtMatmulDescCreate"
        )
        self._desc = int(ptr.value or 0)
        attrs = [
            (_DESC_TRANSA, p.transa),
            (_DESC_TRANSB, p.transb),
            (_DESC_EPILOGUE, EPILOGUES[p.epilogue]),
        ]
        if "bias" in p.epilogue:
            attrs += [(_DESC_BIAS_POINTER, bias_ptr), (_DESC_BIAS_BATCH_STRIDE, p.bias_batch_stride)]
        for attr, value in attrs:
            _set(
                api.desc_set,
                self._desc,
                attr,
                _DESC_ATTR_TYPES[attr],
                value,
                "cublasLtMatmulDescSetAttribute",
            )
        cuda_type = DTYPES[p.dtype][0]
        for name in ("a", "b", "c", "d"):
            lay: Layout = getattr(p, name)
            ptr = ctypes.c_void_p()
            check_status(
                api.layout_create(ctypes.byref(ptr), cuda_type, lay.rows, lay.cols, lay.ld),
                "cublasLtMatrixLayoutCreate",
            )
            self._layouts[name] = int(ptr.value or 0)
            for attr, value in (
                (_LAYOUT_ORDER, ORDER_COL),
                (_LAYOUT_BATCH_COUNT, lay.batch_count),
                (_LAYOUT_BATCH_OFFSET, lay.batch_stride),
            ):
                _set(
                    api.layout_set,
                    self._layouts[name],
                    attr,
                    _LAYOUT_ATTR_TYPES[attr],
                    value,
                    "cublasLtMatrixLayoutSetAttribute",
                )

    def set_bias(self, bias_ptr: int) -> None:
        """Point the epilogue at another bias vector (same length and dtype)."""
        _set(
            self.api.desc_set,
            self._desc,
            _DESC_BIAS_POINTER,
            ctypes.c_void_p,
            bias_ptr,
            "cublasLtMatmulDescSetAttribute",
        )

    def _layout_args(self) -> list[int]:
        return [self._layouts[n] for n in ("a", "b", "c", "d")]

    # ------------------------------------------------------------------------------- algorithms

    def search(self, *, workspace_limit: int, alignments: dict[str, int], count: int = 8) -> None:
        """Ask the heuristic for up to ``count`` algorithms; keep them, best first."""
        api = self.api
        if self._pref:
            api.pref_destroy(self._pref)
        ptr = ctypes.c_void_p()
        check_status(api.pref_create(ctypes.byref(ptr)), "cublasLtMatmulPreferenceCreate")
        self._pref = int(ptr.value or 0)
        settings = [(_PREF_MAX_WORKSPACE, workspace_limit)]
        settings += [(_PREF_MIN_ALIGNMENT[k], v) for k, v in alignments.items()]
        for attr, value in settings:
            _set(
                api.pref_set,
                self._pref,
                attr,
                _PREF_ATTR_TYPES[attr],
                value,
                "cublasLtMatmulPreferenceSetAttribute",
            )
        results = (HeuristicResult * count)()
        returned = ctypes.c_int(0)
        check_status(
            api.heuristic(
                self.handle,
                self._desc,
                *self._layout_args(),
                self._pref,
                count,
                results,
                ctypes.byref(returned),
            ),
            "cublasLtMatmulAlgoGetHeuristic",
        )
        self.candidates = [
            (results[i].algo, int(results[i].workspaceSize))
            for i in range(returned.value)
            if results[i].state == 0
        ]
        if not self.candidates:
            raise UnsupportedError(
                f"cuBLASLt has no algorithm for {self.problem.dtype} with epilogue {self.problem.epilogue!r} "
                f"(m={self.problem.m}, n={self.problem.n}, k={self.problem.k}) on this GPU"
            )
        self.choose(0)
        _log.debug("cuBLASLt heuristic returned %d algorithm(s)", len(self.candidates))

    def choose(self, index: int) -> None:
        self.algo, self.workspace_size = self.candidates[index]

    def use_algorithm(self, data: np.ndarray) -> None:
        """Adopt a saved algorithm (8 uint64) after cublasLtMatmulAlgoCheck accepts it here."""
        algo = Algo()
        algo.data[:] = [int(x) for x in np.asarray(data, dtype=np.uint64).ravel()]
        self.candidates = [(algo, self.check(algo))]
        self.choose(0)

    def check(self, algo: Algo) -> int:
        """The workspace bytes ``algo`` needs for this problem; raises if cuBLASLt refuses it here."""
        result = HeuristicResult()
        check_status(
            self.api.check(
                self.handle, self._desc, *self._layout_args(), ctypes.byref(algo), ctypes.byref(result)
            ),
            "cublasLtMatmulAlgoCheck",
        )
        return int(result.workspaceSize)

    def describe_choice(self) -> str:
        """The chosen algorithm's id, tile, stages, ... for log lines."""
        assert self.algo is not None
        return " ".join(f"{k}={v}" for k, v in configuration(self, self.algo).items())

    def algorithm_data(self) -> np.ndarray:
        """The chosen algorithm's 64 bytes as 8 uint64 (what a saved plan stores)."""
        assert self.algo is not None
        return np.array(list(self.algo.data), dtype=np.uint64)

    # ---------------------------------------------------------------------------------- running

    def run(
        self,
        alpha: Any,
        a_ptr: int,
        b_ptr: int,
        beta: Any,
        c_ptr: int,
        d_ptr: int,
        workspace_ptr: int,
        stream: int,
        algo: Algo | None = None,
        workspace_size: int | None = None,
    ) -> None:
        """One cublasLtMatmul; ``alpha``/``beta`` are host scalars (NumPy arrays of the scale dtype)."""
        chosen = algo if algo is not None else self.algo
        assert chosen is not None, "no algorithm chosen: search() or use_algorithm() first"
        status = self.api.matmul(
            self.handle,
            self._desc,
            alpha.ctypes.data,
            a_ptr,
            self._layouts["a"],
            b_ptr,
            self._layouts["b"],
            beta.ctypes.data,
            c_ptr,
            self._layouts["c"],
            d_ptr,
            self._layouts["d"],
            ctypes.byref(chosen),
            workspace_ptr,
            self.workspace_size if workspace_size is None else workspace_size,
            stream,
        )
        if status:
            check_status(status, "cublasLtMatmul")

    def free(self) -> None:
        api = self.api
        if self._pref:
            api.pref_destroy(self._pref)
            self._pref = 0
        for ptr in self._layouts.values():
            api.layout_destroy(ptr)
        self._layouts.clear()
        if self._desc:
            api.desc_destroy(self._desc)
            self._desc = 0

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone
            self.free()


# ----------------------------------------------------------------------------- CuPy operands

# autotune's searches: the heuristic's candidates, or every configuration cuBLASLt accepts
SEARCHES = ("heuristic", "exhaustive")
FINALISTS = 4  # exhaustive: candidates re-timed with the caller's iterations after one screening call

# (problem, alignments, workspace limit, device) -> heuristic candidates: a one-shot call that
# repeats a problem skips the heuristic, as a stateful object does.
_heuristic_cache: dict[tuple[Any, ...], list[tuple[Algo, int]]] = {}
_HEURISTIC_CACHE_SIZE = 256


def element_view(x: Any, prefer: str) -> tuple[str, int, int] | None:
    """``(order, ld, batch_stride)`` of an array of matrices (the last two axes), or None if it needs a copy."""
    item = x.itemsize
    if any(s % item for s in x.strides):
        return None
    strides = tuple(s // item for s in x.strides)
    rows, cols = x.shape[-2], x.shape[-1]
    mv = matrix_view(rows, cols, strides[-2], strides[-1], prefer)
    bs = batch_stride(tuple(x.shape[:-2]), strides[:-2])
    if mv is None or bs is None:
        return None
    return mv[0], mv[1], bs


def choose_d_order(bias_kind: str | None, c: Any) -> str:
    """D's layout: the bias orientation decides (cuBLASLt adds the bias along the rows of its
    column-major D), else C's layout, else row-major."""
    if bias_kind is not None:
        return "C" if bias_kind == "row" else "F"
    if c is not None:
        view = element_view(c, "C")
        return view[0] if view is not None else "C"
    return "C"


def _copy_to(xp: Any, x: Any, order: str) -> Any:
    from ust.backends.cpu.dense import alloc_matrices

    out = alloc_matrices(xp, tuple(x.shape), x.dtype, order)
    out[...] = x
    return out


def fit_operand(xp: Any, name: str, x: Any, d_order: str) -> Any:
    """``x`` as cuBLASLt can take it: a strided batch of matrices (C in D's order), a packed bias.

    Returns ``x`` itself when it fits, else a copy (logged at INFO, with the bytes copied).
    """
    if x is None:
        return None
    if name == "bias":
        return x if x.flags.c_contiguous else xp.ascontiguousarray(x)
    view = element_view(x, d_order)
    if view is not None and (name != "c" or view[0] == d_order):
        return x
    _log.info(
        "operand %s (shape %s, strides %s) is not a strided batch of %s; copying it (%d bytes)",
        name,
        tuple(x.shape),
        tuple(x.strides),
        "matrices in D's order" if name == "c" else "row- or column-major matrices",
        x.nbytes,
    )
    return _copy_to(xp, x, d_order)


def bias_batch_stride(bias: Any, length: int) -> int:
    """Elements between the bias vectors of consecutive batch entries (0: one vector for all)."""
    return length if bias is not None and bias.size > length else 0


class GpuMatmul:
    """The cuBLASLt route of one dense matmul on CuPy operands (promoted to at least 2-D).

    ``bind`` attaches operands (copying those whose strides cuBLASLt cannot take, with an INFO
    line), ``execute`` runs the chosen algorithm, ``autotune`` times the heuristic's candidates.
    """

    route = "cublasLt"

    def __init__(
        self,
        *,
        a: Any,
        b: Any,
        c: Any,
        bias: Any,
        bias_kind: str | None,
        mnk: tuple[int, int, int],
        batch: tuple[int, ...],
        epilog: str,
        device_id: int,
        tf32: bool = False,
        workspace_limit: int = 32 << 20,
        max_algorithms: int = 8,
        algorithm: np.ndarray | None = None,
    ) -> None:
        import cupy

        self.cp = cupy
        self.device_id = device_id
        self.mnk = mnk
        self.batch = batch
        self.batch_count = int(np.prod(batch)) if batch else 1
        self.epilog = epilog
        self.workspace_limit = workspace_limit
        self.max_algorithms = max_algorithms
        self.dtype = str(a.dtype)
        self.d_order = choose_d_order(bias_kind, c)
        self.ops: dict[str, Any] = {}
        self.views: dict[str, tuple[str, int, int] | None] = {}
        self.copied: set[str] = set()
        self.tf32 = tf32
        self.workspace: Any = None
        with cupy.cuda.Device(device_id):
            for name, x in (("a", a), ("b", b), ("c", c), ("bias", bias)):
                self.ops[name] = self._fit(name, x)
            try:
                self._build(algorithm)
            except UnsupportedError:
                broadcast = [
                    n
                    for n in ("a", "b", "c")
                    if self.batch_count > 1 and (self.views.get(n) or ("", 0, 1))[2] == 0
                ]
                if not broadcast:
                    raise
                # cuBLASLt may refuse a batch stride of 0: give it every matrix of the batch
                full = self._full_shapes()
                for n in broadcast:
                    x = self.ops[n]
                    _log.info(
                        "cuBLASLt takes no broadcast %s here; materialising it (%d bytes)",
                        n,
                        x.nbytes * self.batch_count,
                    )
                    self.ops[n] = _copy_to(cupy, cupy.broadcast_to(x, full[n]), self.d_order)
                    self.copied.add(n)
                if hasattr(self, "lt"):
                    self.lt.free()
                self._build(algorithm)
        _log.info(
            "cuBLASLt plan: %s, m=%d n=%d k=%d, batch %d, D %s-major, epilogue %s, compute type %s",
            self.dtype,
            self.problem.m,
            self.problem.n,
            self.problem.k,
            self.batch_count,
            "row" if self.d_order == "C" else "column",
            epilog,
            COMPUTE_NAMES.get(self.problem.compute_type, self.problem.compute_type),
        )

    def _build(self, algorithm: np.ndarray | None) -> None:
        """Describe the bound operands, create the descriptors and pick an algorithm."""
        for name, x in self.ops.items():
            self.views[name] = None if x is None else self._view_of(name, x)
        va, vb = self.views["a"], self.views["b"]
        assert va is not None and vb is not None
        self.problem = describe(
            dtype=self.dtype,
            shape=self.mnk,
            batch_count=self.batch_count,
            a=va,
            b=vb,
            c=self.views["c"],
            d_order=self.d_order,
            epilogue=self.epilog,
            bias_batch_stride=bias_batch_stride(self.ops["bias"], self.mnk_m_of_d()),
            tf32=self.tf32,
        )
        self.lt = LtMatmul(self.problem, self.device_id, bias_ptr=self._ptr("bias"))
        if algorithm is not None:
            self.planned_alignments = self._alignments()
            self.lt.use_algorithm(algorithm)
            if self.workspace is None or self.workspace.nbytes < self.lt.workspace_size:
                self.workspace = self.cp.empty(self.lt.workspace_size, dtype=np.uint8)
        else:
            self._search()

    def _full_shapes(self) -> dict[str, tuple[int, ...]]:
        M, N, K = self.mnk
        return {"a": (*self.batch, M, K), "b": (*self.batch, K, N), "c": (*self.batch, M, N)}

    def mnk_m_of_d(self) -> int:
        """Length of the bias vector: the rows of cuBLASLt's (possibly transposed) D."""
        M, N, _ = self.mnk
        return N if self.d_order == "C" else M

    # ---------------------------------------------------------------------------------- operands

    def _view_of(self, name: str, x: Any) -> tuple[str, int, int] | None:
        if name == "bias":
            return ("C", x.size, 0)
        return element_view(x, self.d_order)

    def _fit(self, name: str, x: Any) -> Any:
        fitted = fit_operand(self.cp, name, x, self.d_order)
        if fitted is not x:
            self.copied.add(name)
        return fitted

    def bind(self, checked: bool = True, **ops: Any) -> None:
        """Attach new operands (same shapes and dtype as planned); ``checked=False`` skips every check."""
        for name, x in ops.items():
            if not checked:
                self.ops[name] = x
            else:
                fitted = self._fit(name, x)
                planned = self.views[name]
                if fitted is not None and planned is not None and self._view_of(name, fitted) != planned:
                    _log.info(
                        "new operand %s has layout %s, the plan has %s; copying it (%d bytes)",
                        name,
                        self._view_of(name, fitted),
                        planned,
                        x.nbytes,
                    )
                    if planned[2] != 0 and name in ("a", "b", "c"):  # the plan has every matrix of the batch
                        fitted = self.cp.broadcast_to(fitted, self._full_shapes()[name])
                    fitted = _copy_to(self.cp, fitted, planned[0])
                if self._view_of(name, fitted) != planned:
                    raise ShapeError(
                        f"new operand {name} has strides {tuple(x.strides)}, but the plan was made for "
                        f"layout {self.views[name]}; create a new Matmul for it"
                    )
                self.ops[name] = fitted
                if fitted is not None and alignment(int(fitted.data.ptr)) < self.planned_alignments.get(
                    name, 1
                ):
                    _log.info("new operand %s is less aligned than planned; re-running the heuristic", name)
                    chosen = None if self.lt.algo is None else tuple(self.lt.algo.data)
                    self._search()
                    keep = [i for i, (al, _) in enumerate(self.lt.candidates) if tuple(al.data) == chosen]
                    if keep:  # the tuned algorithm still fits these pointers: keep it
                        self.lt.choose(keep[0])
                    else:
                        _log.info("the chosen algorithm needs more alignment; using the heuristic's first")
            if name == "bias":
                self.lt.set_bias(self._ptr("bias"))

    def _ptr(self, name: str) -> int:
        x = self.ops.get(name)
        return 0 if x is None else int(x.data.ptr)

    def _alignments(self) -> dict[str, int]:
        """Pointer alignment of each bound operand, by NumPy name (D comes from CuPy's pool: 256)."""
        return {
            name: alignment(self._ptr(name))
            for name in ("a", "b", "c", "bias")
            if self.ops.get(name) is not None
        }

    def problem_first(self) -> str:
        """The NumPy operand passed as cuBLASLt's A (B when D is row-major, computed transposed)."""
        return "a" if self.d_order == "F" else "b"

    def _search(self, count: int | None = None) -> None:
        """Ask the heuristic (``count`` candidates, default max_algorithms), through a per-process cache."""
        count = count or self.max_algorithms
        aligns = self._alignments()
        first, second = ("a", "b") if self.problem_first() == "a" else ("b", "a")
        hint = {"a": aligns[first], "b": aligns[second], "c": aligns.get("c", 256), "d": 256}
        self.planned_alignments = aligns
        key = (self.problem, tuple(sorted(aligns.items())), self.workspace_limit, self.device_id, count)
        cached = _heuristic_cache.get(key)
        if cached is not None:
            self.lt.candidates = list(cached)
            self.lt.choose(0)
        else:
            self.lt.search(workspace_limit=self.workspace_limit, alignments=hint, count=count)
            if len(_heuristic_cache) >= _HEURISTIC_CACHE_SIZE:
                _heuristic_cache.pop(next(iter(_heuristic_cache)))
            _heuristic_cache[key] = list(self.lt.candidates)
        self._ensure_workspace()

    def _ensure_workspace(self) -> None:
        needed = max(ws for _, ws in self.lt.candidates)
        if getattr(self, "workspace", None) is None or self.workspace.nbytes < needed:
            self.workspace = self.cp.empty(needed, dtype=np.uint8)

    def _sweep(self) -> None:
        """Add every configuration cuBLASLt accepts for the problem to the heuristic's candidates."""
        seen = {tuple(algo.data) for algo, _ in self.lt.candidates}
        added = 0
        for algo, ws in configurations(self.lt, workspace_limit=self.workspace_limit):
            if tuple(algo.data) not in seen:
                seen.add(tuple(algo.data))
                self.lt.candidates.append((algo, ws))
                added += 1
        _log.info("exhaustive search: %d configuration(s) beyond the heuristic's", added)
        self._ensure_workspace()

    # ----------------------------------------------------------------------------------- running

    def _scalars(self, alpha: Any, beta: Any) -> tuple[np.ndarray, np.ndarray]:
        scale = DTYPES[self.dtype][3]
        return np.array(alpha, dtype=scale), np.array(beta if self.ops["c"] is not None else 0, dtype=scale)

    def _alloc_d(self) -> Any:
        from ust.backends.cpu.dense import alloc_matrices

        M, N, _ = self.mnk
        return alloc_matrices(self.cp, (*self.batch, M, N), self.dtype, self.d_order)

    def execute(self, alpha: Any, beta: Any, stream: int, *, index: int | None = None, d: Any = None) -> Any:
        """D for the bound operands (a fresh array unless ``d`` is given)."""
        with self.cp.cuda.Device(self.device_id):
            if d is None:
                d = self._alloc_d()
            al, be = self._scalars(alpha, beta)
            first, second = (
                (self.ops["a"], self.ops["b"])
                if self.problem_first() == "a"
                else (
                    self.ops["b"],
                    self.ops["a"],
                )
            )
            c = self.ops["c"]
            algo, ws = (None, None) if index is None else self.lt.candidates[index]
            self.lt.run(
                al,
                int(first.data.ptr),
                int(second.data.ptr),
                be,
                int(c.data.ptr) if c is not None else int(d.data.ptr),
                int(d.data.ptr),
                int(self.workspace.data.ptr),
                stream,
                algo=algo,
                workspace_size=ws,
            )
        return d

    def _time_candidate(
        self, index: int, alpha: Any, beta: Any, stream: int, iterations: int, d: Any
    ) -> float:
        """Milliseconds per call of candidate ``index`` after one warm-up (inf if it fails here)."""
        cp = self.cp
        try:
            self.execute(alpha, beta, stream, index=index, d=d)
        except (UnsupportedError, CublasLtError) as exc:
            _log.debug("candidate %d fails on these operands: %s", index, exc)
            return float("inf")
        from ust.runtime.streams import gpu_seconds_per_call

        def call() -> Any:
            return self.execute(alpha, beta, stream, index=index, d=d)

        s = cp.cuda.ExternalStream(stream) if stream else None
        return 1e3 * gpu_seconds_per_call(call, iterations, s)

    def autotune(
        self,
        alpha: Any,
        beta: Any,
        stream: int,
        iterations: int = 10,
        algorithms: int | None = None,
        search: str = "heuristic",
    ) -> list[float]:
        """Time the candidates on the bound operands; keep the fastest.

        ``search="heuristic"`` times up to ``algorithms`` heuristic candidates ``iterations`` times
        each.  ``"exhaustive"`` adds every configuration :func:`configurations` finds, screens all
        with one call each and times the :data:`FINALISTS` fastest ``iterations`` times.  Returns
        the milliseconds per call of each candidate (inf for one that fails here).
        """
        if search not in SEARCHES:
            raise UnsupportedError(f"search must be one of {', '.join(SEARCHES)}, not {search!r}")
        with self.cp.cuda.Device(self.device_id):
            if algorithms and algorithms > len(self.lt.candidates):
                self._search(algorithms)
            if search == "exhaustive":
                self._sweep()
            d = self._alloc_d()
            count = len(self.lt.candidates)
            finalists: list[int] = list(range(count))
            times = [float("inf")] * count
            if search == "exhaustive" and count > FINALISTS:
                times = [self._time_candidate(i, alpha, beta, stream, 1, d) for i in range(count)]
                finalists = [int(i) for i in np.argsort(times, kind="stable")[:FINALISTS]]
            for i in finalists:
                times[i] = self._time_candidate(i, alpha, beta, stream, iterations, d)
        best = min(finalists, key=lambda i: times[i])
        self.lt.choose(best)
        _log.info(
            "autotune (%s): %d candidate(s), ms per call %s; chose %d, %s (heuristic's first: %.3f ms)",
            search,
            count,
            ", ".join(f"{t:.3f}" for t in times),
            best,
            self.lt.describe_choice(),
            times[0],
        )
        return times

    def payload(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "workspace_size": self.lt.workspace_size}

    def free(self) -> None:
        self.lt.free()
        self.workspace = None
        self.ops.clear()


# ----------------------------------------------------------------------------- exhaustive sweep
# Every configuration cuBLASLt accepts for one problem: the exhaustive side of autotuning.
#
# cuBLASLt's heuristic ranks a few algorithms with a performance model.  For a long-running
# problem (a batch of large matmuls) the model's first pick is not always the fastest kernel, and
# the candidates it returns are variations of one or two kernels.  This module enumerates what
# the library can run instead: every algorithm id (``cublasLtMatmulAlgoGetIds``) crossed with the
# tiles, stages, CTA swizzling and custom options its capabilities list, each configuration kept
# only if ``cublasLtMatmulAlgoCheck`` accepts it for the problem and its workspace fits.  Timing
# the survivors is the caller's job (:meth:`ust.backends.cuda.cublaslt.GpuMatmul.autotune`).
#
# Split-K is left at 1: it pays off when ``m x n`` is too small to fill the GPU, which is what the
# heuristic already covers; a sweep is for the large problems where it does not.

# cublasLtMatmulAlgoCapAttributes_t
_CAP_CTA_SWIZZLING_SUPPORT, _CAP_TILE_IDS, _CAP_CUSTOM_OPTION_MAX = 2, 6, 7
_CAP_EPILOGUE_MASK, _CAP_STAGES_IDS = 12, 13

# cublasLtMatmulAlgoConfigAttributes_t -> ctypes type of its value
_CONFIG = {
    "id": (0, ctypes.c_int32),
    "tile": (1, ctypes.c_uint32),
    "split_k": (2, ctypes.c_uint32),
    "reduction": (3, ctypes.c_uint32),
    "swizzle": (4, ctypes.c_uint32),
    "custom": (5, ctypes.c_uint32),
    "stages": (6, ctypes.c_uint32),
    "inner_shape": (7, ctypes.c_uint16),
    "cluster_shape": (8, ctypes.c_uint16),
}
_SWEPT = ("tile", "stages", "swizzle", "custom")


def _types(lt: LtMatmul) -> list[int]:
    """computeType, scaleType, Atype, Btype, Ctype, Dtype of the problem (as AlgoGetIds takes them)."""
    cuda_type, _, scale_type, _ = DTYPES[lt.problem.dtype]
    return [lt.problem.compute_type, scale_type, cuda_type, cuda_type, cuda_type, cuda_type]


def algorithm_ids(lt: LtMatmul, limit: int = 512) -> list[int]:
    """The algorithm ids cuBLASLt has for the problem's types (any shape, any epilogue)."""
    ids = (ctypes.c_int * limit)()
    returned = ctypes.c_int(0)
    check_status(
        lt.api.algo_ids(lt.handle, *_types(lt), limit, ids, ctypes.byref(returned)),
        "cublasLtMatmulAlgoGetIds",
    )
    return [int(ids[i]) for i in range(returned.value)]


def _read(getter: Any, algo: Algo, attr: int, ctype: Any) -> int | None:
    """One scalar attribute through a cap_get / config_get style call; None where it has none."""
    value = ctype(0)
    written = ctypes.c_size_t(0)
    status = getter(
        ctypes.byref(algo), attr, ctypes.byref(value), ctypes.sizeof(value), ctypes.byref(written)
    )
    return int(value.value) if status == 0 else None


def _cap_scalar(lt: LtMatmul, algo: Algo, attr: int, ctype: Any) -> int:
    return _read(lt.api.cap_get, algo, attr, ctype) or 0


def _cap_array(lt: LtMatmul, algo: Algo, attr: int) -> list[int]:
    """A uint32 array capability (tiles, stages); [0] (undefined: the kernel's own) when empty."""
    written = ctypes.c_size_t(0)
    lt.api.cap_get(ctypes.byref(algo), attr, None, 0, ctypes.byref(written))
    count = written.value // ctypes.sizeof(ctypes.c_uint32)
    if count == 0:
        return [0]
    values = (ctypes.c_uint32 * count)()
    status = lt.api.cap_get(ctypes.byref(algo), attr, values, ctypes.sizeof(values), ctypes.byref(written))
    return [int(v) for v in values] if status == 0 else [0]


def _set_config(lt: LtMatmul, algo: Algo, name: str, value: int) -> bool:
    attr, ctype = _CONFIG[name]
    holder = ctype(value)
    return lt.api.config_set(ctypes.byref(algo), attr, ctypes.byref(holder), ctypes.sizeof(holder)) == 0


def configuration(lt: LtMatmul, algo: Algo) -> dict[str, int]:
    """An algorithm's configuration by name (id, tile, stages, ...): what a log line shows."""
    values = {name: _read(lt.api.config_get, algo, attr, ctype) for name, (attr, ctype) in _CONFIG.items()}
    return {name: v for name, v in values.items() if v is not None}


def _options(lt: LtMatmul, algo: Algo) -> dict[str, list[int]]:
    """The values of each swept attribute that ``algo``'s capabilities allow."""
    return {
        "tile": _cap_array(lt, algo, _CAP_TILE_IDS),
        "stages": _cap_array(lt, algo, _CAP_STAGES_IDS),
        "swizzle": [0, 1] if _cap_scalar(lt, algo, _CAP_CTA_SWIZZLING_SUPPORT, ctypes.c_uint32) else [0],
        "custom": list(range(_cap_scalar(lt, algo, _CAP_CUSTOM_OPTION_MAX, ctypes.c_int32) + 1)),
    }


def configurations(lt: LtMatmul, *, workspace_limit: int, limit: int = 4096) -> Iterator[tuple[Algo, int]]:
    """Yield ``(algorithm, workspace bytes)`` for every configuration cuBLASLt accepts, up to ``limit``.

    Algorithms whose epilogue mask lacks the problem's epilogue are skipped without checking
    their configurations.
    """
    epilogue = EPILOGUES[lt.problem.epilogue]
    found = 0
    for algo_id in algorithm_ids(lt):
        base = Algo()
        if lt.api.algo_init(lt.handle, *_types(lt), algo_id, ctypes.byref(base)):
            continue
        if (
            epilogue != 1
            and _cap_scalar(lt, base, _CAP_EPILOGUE_MASK, ctypes.c_uint32) & epilogue != epilogue
        ):
            continue
        options = _options(lt, base)
        for values in itertools.product(*(options[name] for name in _SWEPT)):
            algo = Algo()
            algo.data[:] = base.data[:]
            if not all(_set_config(lt, algo, name, v) for name, v in zip(_SWEPT, values)):
                continue
            try:
                workspace = lt.check(algo)
            except (UnsupportedError, CublasLtError) as exc:  # this configuration, not the problem
                _log.debug("algorithm %d %s refused: %s", algo_id, dict(zip(_SWEPT, values)), exc)
                continue
            if workspace > workspace_limit:
                continue
            yield algo, workspace
            found += 1
            if found >= limit:
                return
