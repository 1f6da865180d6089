"""Every CUDA kernel the compiler generates for the expressions of the test suite compiles with NVRTC.

No GPU needed: ``Compute.source("cuda")`` is the exact source the GPU route compiles (the same
lowering, in the GPU's expand / atomic modes), and NVRTC is called through ctypes with the
run-time options, as :mod:`ust.backends.cuda.kernels` does.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.backends.cuda.nvrtc import compile_cuda, find_nvrtc

pytestmark = pytest.mark.skipif(
    find_nvrtc() is None,
    reason='libnvrtc not found: pip install -e ".[nvrtc]" (the nvrtc extra, which .ci/run installs)',
)

ARCH = os.environ.get("UST_NVRTC_ARCH", "90")


def _m(fmt: str, dtype: str = "float64", shape: tuple[int, int] = (6, 5), seed: int = 0) -> ust.Tensor:
    a = sp.random_array(shape, density=0.4, random_state=seed, format="csr").astype(dtype)
    t = ust.asarray(a)
    return t if fmt == "CSR" else t.convert(fmt)


def _t3(dtype: str = "float64") -> ust.Tensor:
    rng = np.random.default_rng(0)
    d = rng.random((3, 4, 5))
    d[d < 0.6] = 0
    return ust.asarray(d.astype(dtype), format="COO3")


MINE = "(i, j) -> (i : compressed, j : compressed)"
CASES = {
    "spmv-csr": ("y(i) = A(i,j) * x(j)", lambda: {"A": _m("CSR"), "x": np.ones(5)}, None),
    "spmv-coo-transposed": ("y(j) = A(i,j) * x(i)", lambda: {"A": _m("COO"), "x": np.ones(6)}, None),
    "spmm-dcsr": ("C(i,k) = A(i,j) * B(j,k)", lambda: {"A": _m("DCSR"), "B": np.ones((5, 3))}, None),
    "spgemm-csr-csc": (
        "C(i,j) = A(i,k) * B(k,j)",
        lambda: {"A": _m("CSR"), "B": _m("CSC", shape=(5, 4))},
        None,
    ),
    "spgemm-user": ("C(i,j) = A(i,k) * B(k,j)", lambda: {"A": _m(MINE), "B": _m(MINE, shape=(5, 4))}, None),
    "add3": (
        "C(i,j) = A(i,j) + B(i,j) - 2 * D(i,j)",
        lambda: {"A": _m("CSR"), "B": _m("COO", seed=1), "D": _m("DCSR", seed=2)},
        None,
    ),
    "multiply-int": (
        "C(i,j) = A(i,j) * B(i,j)",
        lambda: {"A": _m("CSR", "int64"), "B": _m("CSC", "int64", seed=3)},
        None,
    ),
    "sddmm": (
        "C(i,j) = S(i,j) * U(i,k) * V(j,k)",
        lambda: {"S": _m("CSR"), "U": np.ones((6, 3)), "V": np.ones((5, 3))},
        None,
    ),
    "inner": ("s = A(i,j) * B(i,j)", lambda: {"A": _m("CSR"), "B": _m("CSR", seed=4)}, None),
    "complex-axpy": (
        "y(i) = alpha * A(i,j) * x(j) + B(i,j) * z(j)",
        lambda: {
            "A": _m("CSR", "complex128"),
            "B": _m("COO", "complex128", seed=5),
            "x": np.ones(5, complex),
            "z": np.ones(5, complex),
            "alpha": 2j,
        },
        None,
    ),
    "mttkrp": (
        "M(i,r) = T(i,j,k) * B(j,r) * C(k,r)",
        lambda: {"T": _t3(), "B": np.ones((4, 2)), "C": np.ones((5, 2))},
        None,
    ),
    "ttv-mode1": (
        "Y(i,k) = T(i,j,k) * v(j)",
        lambda: {"T": _t3("float32"), "v": np.ones(4, np.float32)},
        None,
    ),
    "min-plus": ("y(i) = A(i,j) * x(j)", lambda: {"A": _m("CSR"), "x": np.ones(5)}, "min_plus"),
    "min-plus-spgemm": ("C(i,j) = A(i,k) * A(k,j)", lambda: {"A": _m("CSR", shape=(5, 5))}, "min_plus"),
    "max-times-shared": ("y(j) = A(i,j) * x(i)", lambda: {"A": _m("CSR"), "x": np.ones(6)}, "max_times"),
    "or-and": (
        "y(i) = A(i,j) * x(j)",
        lambda: {"A": _m("CSR", "int32"), "x": np.ones(5, np.int32)},
        "or_and",
    ),
    "plus-pair": ("C(i,j) = A(i,k) * A(j,k)", lambda: {"A": _m("CSR")}, "plus_pair"),
    "custom": (
        "y(i) = A(i,j) * x(j)",
        lambda: {"A": _m("CSR", "float32"), "x": np.ones(5, np.float32)},
        ust.Semiring(add="max(a, b)", multiply="min(a, b)", identity=float("-inf")),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_cuda_compiles(name: str) -> None:
    from ust.backends.cuda.kernels import nvrtc_options

    expr, make, semiring = CASES[name]
    src = ust.Compute(expr, semiring=semiring, **make()).source("cuda")
    assert "#include" not in src  # NVRTC has no host headers
    cubin = compile_cuda(src, nvrtc_options(ARCH), name=f"{name}.cu")
    assert cubin[:4] == b"\x7fELF"


def test_c_and_ir_sources_are_text() -> None:
    c = ust.Compute("y(i) = A(i,j) * x(j)", A=_m("CSR"), x=np.ones(5))
    assert "#pragma omp parallel for" in c.source("c")
    assert "for x_i in [0, E_i)" in c.source("ir")
    with pytest.raises(ust.InvalidValueError):
        c.source("fortran")


def test_split_variants_exist_where_a_row_sum_can_be_cut_and_compile() -> None:
    """Few long rows: a row summed in a register over one loop has a ``_split`` variant (atomic
    combine); sparse results and merged rows do not."""
    from ust.backends.cuda.compute_cuda import MAX_PARTS, split_parts
    from ust.codegen.emit_compute_cuda import SPLIT, kernel_name, supports_split

    def kernels(expr: str, **ops: object) -> list:
        c = ust.Compute(expr, **ops)
        return list(c._build(gpu=True).ck.kernels)

    X = ust.asarray(_t3(), format="CSF")
    mttkrp = kernels("M(i,r) = X(i,j,k) * B(j,r) * C(k,r)", X=X, B=np.ones((4, 3)), C=np.ones((5, 3)))
    spmv = kernels("y(i) = A(i,j) * x(j)", A=_m("CSR"), x=np.ones(5))
    spgemm = kernels("C(i,j) = A(i,k) * B(k,j)", A=_m("CSR"), B=_m("CSR", shape=(5, 4)))
    assert supports_split(mttkrp[0]) and supports_split(spmv[0])
    assert not any(supports_split(k) for k in spgemm)
    src = ust.Compute(
        "M(i,r) = X(i,j,k) * B(j,r) * C(k,r)", X=X, B=np.ones((4, 3)), C=np.ones((5, 3))
    ).source("cuda")
    assert kernel_name(mttkrp[0], SPLIT) in src and "ust_atomic_add(&out[" in src
    assert compile_cuda(src, (f"--gpu-architecture=sm_{ARCH}", "--std=c++17"))
    # the launcher's choice: few long rows split, many rows or short rows not, a forced count kept
    assert split_parts(200 * 32, 1_000_000, 200) > 1
    assert split_parts(1 << 20, 8 << 20, 1 << 20) == 1
    assert split_parts(64, 64 * 4, 64) == 1
    assert split_parts(10, 10, 10, forced=5) == 5 and split_parts(10, 10, 10, forced=10**9) == MAX_PARTS


def test_split_option_is_checked() -> None:
    with pytest.raises(ust.InvalidValueError, match="split"):
        ust.Compute("y(i) = A(i,j) * x(j)", A=_m("CSR"), x=np.ones(5), options={"split": -1})
    with pytest.raises(ust.InvalidValueError, match="split"):
        ust.Compute("y(i) = A(i,j) * x(j)", A=_m("CSR"), x=np.ones(5), options={"split": 1.5})
