"""Every generated CUDA kernel of the test suite compiles with NVRTC, with the run-time options.

NVRTC needs no GPU: the library comes from the ``nvidia-cuda-nvrtc`` wheel (CUDA 13) and is
called through ctypes, exactly as :mod:`ust.backends.cuda.kernels` does at run time, so a
kernel that would fail to compile on the GPU machine fails here.  The architecture is the
GPU machine's (H200: ``sm_90``) unless ``UST_NVRTC_ARCH`` says otherwise.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from tests.codegen_cases import get_format, gpu_suite
from ust.backends.cuda.nvrtc import NvrtcError, compile_cuda, find_nvrtc, nvrtc_version
from ust.codegen.emit_cuda import NVRTC_OPTIONS, emit_cuda
from ust.codegen.lower import lower
from ust.formats import format as ust_format

pytestmark = pytest.mark.skipif(
    find_nvrtc() is None,
    reason='libnvrtc not found: pip install -e ".[nvrtc]" (the nvrtc extra, which .ci/run installs)',
)

ARCH = os.environ.get("UST_NVRTC_ARCH", "90")


def _suite_by_format() -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = defaultdict(list)
    for case in gpu_suite():
        out[case[0]].append(case)
    return out


SUITE = _suite_by_format()


def _options() -> tuple[str, ...]:
    from ust.backends.cuda.kernels import nvrtc_options

    opts = nvrtc_options(ARCH)
    assert opts[: len(NVRTC_OPTIONS)] == NVRTC_OPTIONS
    return opts


@pytest.mark.parametrize("name", sorted(SUITE))
def test_every_kernel_of_the_suite_compiles(name: str) -> None:
    kernels, groups = [], []
    for _name, op, layout, dtype, idt, itype, group, order in SUITE[name]:
        # the same lowering call as ust.backends.cuda.kernels.cuda_kernel
        k = lower(
            get_format(name), op, layout=layout, order=order, value_dtype=dtype, index_dtype=idt, itype=itype
        )
        kernels.append(k)
        groups.append(group)
    src = emit_cuda(kernels, group=groups)
    assert "#include" not in src  # NVRTC has no host headers
    cubin = compile_cuda(src, _options(), name=f"{name}.cu")
    assert cubin[:4] == b"\x7fELF"


def test_a_broken_kernel_fails_with_nvrtcs_log() -> None:
    with pytest.raises(NvrtcError, match="undefined") as err:
        compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', _options())
    assert "undefined_thing" in err.value.log


def test_version_is_cuda_12_or_13() -> None:
    assert nvrtc_version()[0] >= 12


def test_every_nnz_split_kernel_compiles() -> None:
    """The load-balanced CUDA kernels (balance="nnz"): every op, layout, dtype and index type."""
    kernels = []
    for text in ("(i, j) -> (i : dense, j : compressed)", "(i, j) -> (i : compressed, j : compressed)"):
        for op, layout in (("mv", "row"), ("mm", "row"), ("mm", "col")):
            for dtype in ("float32", "float64", "complex64", "complex128"):
                for idt, itype in (("int32", "int32"), ("int32", "int64"), ("int64", "int64")):
                    kernels.append(
                        lower(
                            ust_format(text),
                            op,
                            layout=layout,
                            value_dtype=dtype,
                            index_dtype=idt,
                            itype=itype,
                            balance="nnz",
                        )
                    )
    src = emit_cuda(kernels)
    assert "#include" not in src and src.count("_nz_g1(") == len(kernels)
    cubin = compile_cuda(src, _options(), name="nnz_split.cu")
    assert cubin[:4] == b"\x7fELF"


def test_every_spmv_dot_kernel_compiles() -> None:
    """The SpMV kernels that also sum ``x^H y`` (CG's ``p^H A p``): every dtype and index type of
    every format whose kernel supports it."""
    from ust.codegen.emit_cuda import supports_dot

    kernels = []
    for text in ("DIA", "CSR", "DIAI", "(i, j) -> (i : dense, j : loose_compressed)"):
        for dtype in ("float32", "float64", "complex64", "complex128"):
            for idt, itype in (("int32", "int32"), ("int64", "int64")):
                k = lower(get_format(text) if "(" not in text else ust_format(text), "mv",
                          value_dtype=dtype, index_dtype=idt, itype=itype)  # fmt: skip
                assert supports_dot(k)
                kernels.append(k)
    src = emit_cuda(kernels, dot=True)
    assert src.count("_g1_dot(") == len(kernels) and src.count("ust_dot_part[blockIdx.x]") == len(kernels)
    cubin = compile_cuda(src, _options(), name="spmv_dot.cu")
    assert cubin[:4] == b"\x7fELF"
