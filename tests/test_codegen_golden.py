"""Golden generated source for CSR and DIA SpMV, reviewed like code.

A change to the emitted text shows up here as a diff.  To accept it, regenerate with
``UST_UPDATE_GOLDEN=1 python -m pytest tests/test_codegen_golden.py`` and review the files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ust.codegen as cg

GOLDEN = Path(__file__).with_name("golden")
CASES = {
    "csr_spmv.c": ("spmv", "CSR", "c", 1),
    "dia_spmv.c": ("spmv", "DIA", "c", 1),
    "csr_spmv.cu": ("spmv", "CSR", "cuda", 1),
    "csr_spmv_warp.cu": ("spmv", "CSR", "cuda", 32),
    "dia_spmv.cu": ("spmv", "DIA", "cuda", 1),
}


@pytest.mark.parametrize("filename", sorted(CASES))
def test_generated_source_matches_golden(filename: str) -> None:
    op, fmt, target, group = CASES[filename]
    text = cg.source(op, fmt, target=target, dtype="float64", index_dtype="int32", itype="int32", group=group)
    path = GOLDEN / filename
    if os.environ.get("UST_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}: run with UST_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{filename} changed: review and rerun with UST_UPDATE_GOLDEN=1"
