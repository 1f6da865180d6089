"""Which matrices the GPU bitmap transpose takes (ust.convert.gpu_transpose.fits; no GPU needed):
those whose row bitmaps are small and whose stored entries can all be distinct, the rest going
to cuSPARSE; and importing the module touches no GPU package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ust.convert import gpu_transpose as gt


@pytest.mark.parametrize(
    ("m", "n", "nidx", "taken"),
    [
        (0, 0, 0, True),
        (100, 100, 500, True),
        (1000, 1000, 50_000, True),
        (1000, 1000, 1_000_000, True),  # every position stored: the longest columns, still exact
        (1000, 1000, 1_000_001, False),  # more entries than positions: duplicates, cuSPARSE's order
        (32, gt._MAX_COLUMNS, 10, True),
        (32, gt._MAX_COLUMNS + 1, 10, False),  # the one-block scan's limit
        (32 * 4096, 32, 10, True),  # 4096 words a column, 32 columns: the bitmap limit
        (32 * 4096 + 1, 32, 10, False),
    ],
)
def test_the_envelope(m: int, n: int, nidx: int, taken: bool) -> None:
    assert gt.fits(m, n, nidx) is taken


def test_importing_the_route_loads_no_gpu_package() -> None:
    code = "import sys, ust.convert.gpu_transpose; print(any(k.startswith('cupy') for k in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
