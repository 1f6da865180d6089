"""The GPU merge kernel's place in the rule table (no GPU needed): the route two canonical CSR /
CSC operands get on the GPU, the alternatives offered, and one list of the value dtypes it takes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ust.algebra.elementwise import cupyx_pair
from ust.algebra.problem import choose, problem_of
from ust.backends.cuda.merge_kernels import MERGE_OPS, MERGE_VALUES
from ust.formats.library import get
from ust.plan.rules import MERGE_KERNEL_VALUES


def _decision(op: str, name: str, dtype=np.float64, other: str | None = None):
    fmt = get(name)
    return choose(problem_of(op, fmt, "cuda", dtype, np.int32, 2, 100, other=get(other or name)))


@pytest.mark.parametrize("name", ["CSR", "CSC"])
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_canonical_csr_and_csc_pairs_take_the_merge_kernel(op: str, name: str) -> None:
    d = _decision(op, name)
    assert d.route == "merge-kernel"
    offered = {a.route for a in d.alternatives}
    # csrgeam2 stays on request for CSR addition; CuPy's product is not offered (it drops nan * 0)
    assert ("cupyx" in offered) == (op == "add" and name == "CSR")


def test_mixed_pairs_and_float16_go_elsewhere() -> None:
    assert _decision("add", "CSR", other="CSC").route != "merge-kernel"
    assert _decision("add", "COO").route != "merge-kernel"
    assert _decision("multiply", "CSR", dtype=np.float16).route != "merge-kernel"


def test_one_list_of_value_dtypes_and_ops() -> None:
    assert set(MERGE_VALUES) == set(MERGE_KERNEL_VALUES)
    assert set(MERGE_OPS) == {"add", "subtract", "multiply"}


def test_the_cupyx_fast_path_leaves_other_operands_alone() -> None:
    a = sp.random_array((5, 5), density=0.5, format="csr", rng=0)
    assert cupyx_pair("add", a, a) is None  # SciPy operands: not CuPy's
    assert cupyx_pair("add", a.toarray(), a.toarray()) is None


def test_the_unchecked_level_is_handed_out_only_for_the_compressed_bounds_debt() -> None:
    """The merge kernel and the checked transpose read a cupyx intake's buffers before its owed
    check (they make it themselves); any other owed check runs first, and a checked tensor's
    buffers are read the usual way."""
    from ust.convert.scipy import _CSR_CSC
    from ust.tensor import Tensor

    a = sp.random_array((6, 6), density=0.4, format="csr", rng=1)
    ran = []

    class Bounds:
        compressed_bounds = True

        def __call__(self, *args):
            ran.append("bounds")

    class Other:
        def __call__(self, *args):
            ran.append("other")

    fmt = _CSR_CSC["csr"]
    t = Tensor._trusted((6, 6), fmt, a.data, (None, a.indptr), (None, a.indices), Bounds())
    held = t._compressed_level_unchecked()
    assert held is not None and held[0] is a.indptr and held[1] is a.indices and held[2] is a.data
    assert ran == []  # nothing was checked: the caller's kernel checks
    u = Tensor._trusted((6, 6), fmt, a.data, (None, a.indptr), (None, a.indices), Other())
    assert u._compressed_level_unchecked() is None
    assert (
        Tensor._trusted(
            (6, 6), fmt, a.data, (None, a.indptr), (None, a.indices)
        )._compressed_level_unchecked()
        is None
    )
