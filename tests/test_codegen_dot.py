"""The SpMV-with-dot variant of the generated CUDA kernels (emit_cuda(..., dot=True)): which
kernels take it, what it adds, and a clear error elsewhere.  The GPU results are checked in
tests/gpu/test_cg_graph_gpu.py."""

from __future__ import annotations

import re

import pytest

from ust.codegen import kernel
from ust.codegen.emit_cuda import emit_cuda, supports_dot
from ust.runtime.errors import UnsupportedError

#: Formats whose SpMV writes each row once from one thread (the dot applies) and those that do
#: not (an init pass with atomics, or rows that are not the parallel loop).
DOT = ["DIA", "CSR", "DIAI", "(i, j) -> (i : dense, j : loose_compressed)"]
NO_DOT = ["COO", "CSC", "DCSR", "BSR[2,2]", "CROW"]


@pytest.mark.parametrize("fmt", DOT)
def test_kernels_with_a_dot_variant(fmt: str) -> None:
    k = kernel("spmv", fmt, dtype="float64", index_dtype="int32")
    assert supports_dot(k)
    src = emit_cuda(k, dot=True)
    assert f"{k.name}_g1_dot(" in src
    # the row's value feeds both y and the running sum; the block writes one partial
    assert re.search(r"y\[(\w+)\] = ust_y; ust_dot = ust_dot \+ ust_cdot\(x\[\1\], ust_y\);", src)
    assert src.count("__syncthreads();") == 2 and "ust_dot_part[blockIdx.x] = ust_dsh[0];" in src
    assert "ust_dot" not in emit_cuda(k)  # the plain kernel is unchanged


@pytest.mark.parametrize("fmt", NO_DOT)
def test_kernels_without_a_dot_variant_refuse_it(fmt: str) -> None:
    k = kernel("spmv", fmt, dtype="float64", index_dtype="int32")
    assert not supports_dot(k)
    with pytest.raises(UnsupportedError, match="cannot return a dot product"):
        emit_cuda(k, dot=True)


def test_spmm_has_no_dot_variant() -> None:
    assert not supports_dot(kernel("spmm", "CSR", dtype="float64", index_dtype="int32"))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_dot_conjugates_x(dtype: str) -> None:
    src = emit_cuda(kernel("spmv", "DIA", dtype=dtype, index_dtype="int32"), dot=True)
    assert "a.re * b.re + a.im * b.im, a.re * b.im - a.im * b.re" in src  # conj(a) * b
