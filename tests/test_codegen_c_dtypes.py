"""Generated C kernels in float32 and complex128 (complex: C99 ``double _Complex``; shared
outputs: per-thread partials split into real and imaginary atomics where they fall back)."""

from __future__ import annotations

import pytest

from tests.codegen_cases import ALL_2D, ALL_3D, ALL_BATCHED, OP_VARIANTS, requests
from tests.test_codegen_c import _run
from ust.backends.cpu import ckernels
from ust.backends.generated.compile_c import toolchain

pytestmark = pytest.mark.skipif(toolchain() is None, reason="no C compiler on this machine")

ALL = ALL_2D + ALL_3D + ALL_BATCHED
DTYPES = ["float32", "complex128"]


@pytest.fixture(scope="module", autouse=True)
def _compiled(tmp_path_factory: pytest.TempPathFactory) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("UST_CACHE_DIR", str(tmp_path_factory.mktemp("ust-cache")))
    ckernels.prebuild(requests(ALL, DTYPES))
    yield
    mp.undo()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("op", "layout", "ncols"), OP_VARIANTS)
@pytest.mark.parametrize("name", ALL)
def test_every_format_op_and_dtype(name: str, op: str, layout: str, ncols: int | None, dtype: str) -> None:
    _run(name, dtype, op, layout, ncols)
