"""The pointer rebind of a bound generated-kernel launch (issue 18's per-call cost), on the host:
which arguments change, and when the full path must run instead.  The GPU results are in
tests/gpu/test_oneshot_rebind_gpu.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from ust.backends.cuda.kernels import BoundLaunch, _operand_slots
from ust.backends.generated.executors import _rebound
from ust.codegen.ir import Param


def _launch(x: Any, target: Any) -> BoundLaunch:
    params = (
        Param("D0", "iscalar"),
        Param("val", "vbuf"),
        Param("x", "vbuf"),
        Param("y0", "vbuf"),
        Param("y", "vbuf"),
    )
    args = [np.int32(4), np.ones(3), x, x, target]
    return BoundLaunch([("main", (1, 1, 1), args)], target, 0, [_operand_slots(params)])


def test_slots_name_the_dense_operands_only() -> None:
    params = (Param("y", "vbuf"), Param("pos0", "ibuf", "int32"), Param("x", "vbuf"), Param("NY", "iscalar"))
    assert _operand_slots(params) == {"y": 0, "x": 2}


def test_rebound_swaps_the_operand_pointers_and_keeps_the_rest() -> None:
    x, y = np.zeros(4), np.zeros(4)
    bound = _launch(x, y)
    x2, c2, y2 = np.ones(4), np.full(4, 2.0), np.empty(4)
    new = bound.rebound(x2, c2, y2)
    ((fn, grid, args),) = new.steps
    assert fn == "main" and grid == (1, 1, 1) and new.target is y2 and new.slots == bound.slots
    assert args[2] is x2 and args[3] is c2 and args[4] is y2
    assert args[1] is bound.steps[0][2][1]  # the format's buffers: the same objects
    assert bound.steps[0][2][2] is x  # the template is not changed


def test_rebind_only_for_operands_laid_out_like_the_last() -> None:
    x, y = np.zeros(4), np.zeros(4)
    last = (x, None, None, _launch(x, y), True, False)
    assert _rebound(last, np.ones(5), None, None) is None  # another shape
    assert _rebound(last, np.ones(4, dtype=np.float32), None, None) is None  # another dtype
    assert _rebound(last, np.ones(8)[::2], None, None) is None  # another layout
    assert _rebound(last, np.ones(4), np.ones(4), None) is None  # c where there was none
    assert _rebound((*last[:4], False, False), np.ones(4), None, None) is None  # the kernel read a copy
    out = np.empty(4)
    got = _rebound(last, np.ones(4), None, out)
    assert got is not None and got.target is out
    assert _rebound(last, np.ones(4), None, np.empty(4, dtype=np.float32)) is None  # out unlike the last
