"""The loop IR, the lowering's plans (which loop is parallel, who owns the output) and the
public ``ust.codegen.source`` API."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import ust.codegen as cg
import ust.formats as F
from tests.codegen_cases import get_format
from ust.codegen import ir
from ust.codegen.lower import kernel_info, lower, plan
from ust.runtime.errors import UnsupportedError

# format -> (loop order, row-owned parallel loop, plain stores without an init pass)
PLANS = {
    "CSR": ("storage", True, True),
    "CSC": ("storage", False, False),
    "COO": ("storage", False, False),
    "DCSR": ("storage", True, False),
    "DCSC": ("storage", False, False),
    "CROW": ("storage", True, False),
    "CCOL": ("outer", True, True),
    "DIA": ("outer", True, True),
    "DIAI": ("outer", True, True),
    "BSR[2,3]": ("storage", True, False),
    "BSC[2,2]": ("storage", False, False),
    "NM[2,4]": ("storage", True, True),
    "DenseRowMajor": ("storage", True, True),
    "DenseColMajor": ("outer", True, True),
    "CSF": ("storage", True, False),
    "COO3": ("storage", False, False),
    "BatchedCSR": ("storage", True, True),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_plan_order_ownership_and_init(name: str) -> None:
    order, owned, store = PLANS[name]
    p = plan(F.get(name), "mv")
    assert (p.order, p.owned, p.store) == (order, owned, store)
    k = lower(F.get(name), "mv")
    info = kernel_info(k)
    assert info.init is (not store)
    atomics = [n for n in ir.walk(k.body) if isinstance(n, ir.Accumulate) and n.atomic]
    assert bool(atomics) is (not owned)  # atomics exactly where the output is not owned


def test_dia_is_row_parallel_with_a_bounds_check_and_storage_dia_uses_the_column_range() -> None:
    text = ir.to_text(lower(F.DIA, "mv"))
    assert "for i0 in [0, D0):  # parallel, rows" in text
    assert "if 0 <= i1 && i1 < D1:" in text
    storage = ir.to_text(lower(F.DIA, "mv", order="storage"))
    assert "for c1 in [max(0, c0), min(D1, c0 + D0)):" in storage  # offset o: max(0, o) .. min(n, m + o)
    main = storage.split("main:")[1]
    assert "if 0 <=" not in main  # no per-entry bounds check left
    # only the padding guard: empty slots never meet x (a select: x is loaded with the value)
    assert "acc = (ust_v != 0.0 ? acc + ust_v * ust_xv : acc)" in main
    assert "+=!" in storage  # diagonals overlap in rows: atomic


def test_csr_reduction_loop_and_group_support() -> None:
    from ust.codegen.emit_cuda import supports_group

    k = lower(F.CSR, "mv")
    loops = [n for n in ir.walk(k.body) if isinstance(n, ir.Loop)]
    assert [lp.reduce for lp in loops] == [None, "acc"]
    assert supports_group(k)
    assert not supports_group(lower(F.COO, "mv"))


def test_spmm_columns_placement() -> None:
    outer = lower(F.CSR, "mm")
    cols = [n for n in ir.walk(outer.body) if isinstance(n, ir.Loop) and n.var == "col"]
    assert cols[0].parallel and cols[0].tag == "cols"  # one GPU thread per (row, column)
    assert kernel_info(outer).col_par
    inner = lower(F.CSR, "mm", cols="inner")
    assert inner.name.endswith("_ci")
    assert not kernel_info(inner).col_par
    assert "y[c0 * NC + col] += a * x[c1 * NC + col]" in ir.to_text(inner)


def test_batched_buffers_are_offset_per_member_and_x_per_member() -> None:
    text = ir.to_text(lower(F.BatchedCSR, "mv"))
    assert "let ob_pos2: index = t * BP2" in text
    assert "x[i0 * D2 + c2]" in text
    assert "for t in [0, NB):  # parallel, batch" in text


def test_params_are_only_those_used() -> None:
    names = [p.name for p in lower(F.CSR, "mv").params]
    assert names == ["D0", "has_y0", "alpha", "beta", "pos1", "crd1", "val", "x", "y0", "y"]
    nm = [p.name for p in lower(F.get("NM[2,4]"), "mv").params]
    assert "pos2" not in nm and "crd2" in nm


def test_user_formats_lower_like_their_standard_twins() -> None:
    mine = F.format("(r, c) -> (r : dense, c : compressed)")
    assert lower(mine, "mv").body == lower(F.CSR, "mv").body


def test_ir_nodes_are_frozen_and_validated() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ir.Var("x").name = "y"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown binary operator"):
        ir.Bin("**", ir.Var("a"), ir.Var("b"))
    with pytest.raises(ValueError, match="unknown unary operator"):
        ir.Un("~", ir.Var("a"))


def test_printer_and_traversal() -> None:
    loop = ir.Loop(
        "i",
        ir.Const(0),
        ir.Var("n"),
        ir.block(
            ir.Accumulate("y", ir.Var("i"), ir.Bin("*", ir.Load("a", ir.Var("i")), ir.Var("s")), atomic=True)
        ),
        parallel=True,
        tag="rows",
    )
    text = ir.to_text(loop)
    assert text == "for i in [0, n):  # parallel, rows\n  y[i] +=! a[i] * s\n"
    assert ir.free_names(loop) == {"i", "n", "y", "a", "s"}
    assert ir.expr_text(ir.Bin("*", ir.Bin("+", ir.Var("a"), ir.Var("b")), ir.Var("c"))) == "(a + b) * c"
    assert ir.block(None, ir.block(ir.Store("y", ir.Const(0), ir.Const(1.0, "value")))).body[0].buf == "y"


def test_errors_name_what_is_supported() -> None:
    with pytest.raises(UnsupportedError, match="supported: mv, mm"):
        lower(F.CSR, "sddmm")
    with pytest.raises(UnsupportedError, match="2 or more dimensions"):
        lower(F.SparseVector, "mv")
    with pytest.raises(UnsupportedError, match="value dtype"):
        lower(F.CSR, "mv", value_dtype="int8")
    with pytest.raises(UnsupportedError, match="storage"):
        plan(F.CSC, "mv", "outer")
    with pytest.raises(UnsupportedError, match="layout"):
        lower(F.CSR, "mm", layout="diagonal")
    with pytest.raises(UnsupportedError, match="target"):
        cg.source("spmv", "CSR", target="llvm")
    with pytest.raises(UnsupportedError, match="unknown op"):
        cg.source("spgemm", "CSR")


def test_source_api_accepts_names_text_formats_and_tensors() -> None:
    c = cg.source("spmv", "CSR")
    assert "#pragma omp parallel for" in c and "void ust_mv_CSR_storage_f64_i32_i32(" in c
    cu = cg.source("spmv", "DIA", target="cuda")
    assert "#include" not in cu and 'extern "C" __global__' in cu
    assert cg.source("spmv", F.DIA, target="cuda") == cu
    text = cg.source("ttv", "(i, j, k) -> (i : compressed, j : compressed, k : compressed)", target="ir")
    assert text.startswith("kernel ust_mv_CSF_")
    a = get_format("COO-dups")
    assert "#pragma omp atomic" in cg.source("spmm", a, dtype="complex128")
    body = cg.source("spmv", "CSR", target="cuda", group=32).split("extern")[1]
    assert "ust_shfl_down(acc" in body and "ust_lane == 0" in body and body.startswith(' "C"')
    coo = cg.source("spmv", "COO", target="cuda", group=32).split("extern")[1]
    assert "ust_shfl_down" not in coo and "_g1(" in coo  # no reduction loop: one thread per entry


def test_importing_codegen_loads_no_gpu_package_and_no_compiler() -> None:
    code = (
        "import sys, ust, ust.codegen, ust.codegen.schedule, ust.backends.generated.executors, ust.backends.cuda.kernels, ust.backends.cuda.nvrtc;"
        "bad = [m for m in ('cupy', 'torch', 'cuda') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_default_threads_per_row() -> None:
    import numpy as np

    from tests.codegen_cases import pack
    from ust.codegen.schedule import default_group

    rng = np.random.default_rng(0)
    wide = np.where(rng.random((8, 400)) < 0.5, 1.0, 0.0)
    assert default_group(pack(wide, F.CSR), "mv") == 32  # ~200 entries per row: a warp per row
    assert default_group(pack(wide[:, :16], F.CSR), "mv") == 4  # ~8 per row
    band = np.eye(8) + np.eye(8, k=1) + np.eye(8, k=-1)
    assert default_group(pack(band, F.DIA), "mv") == 1  # the diagonals are every row's: one thread
    assert default_group(pack(band, F.COO), "mv") == 1  # no reduction loop
