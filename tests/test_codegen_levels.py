"""Level walkers (one per level type) and the one dimension solver behind plans and lowering."""

from __future__ import annotations

import pytest

from tests.codegen_cases import ALL_2D, ALL_3D, ALL_BATCHED, get_format
from ust.codegen.ir import Const, Var
from ust.codegen.levels import WALKERS, walkers
from ust.codegen.lower import ORDERS, lower, plan, solve_dims
from ust.formats.library import resolve
from ust.formats.model import LevelFormat
from ust.runtime.errors import UnsupportedError


def test_every_level_type_has_a_walker() -> None:
    assert set(WALKERS) == set(LevelFormat)
    for lt, cls in WALKERS.items():
        assert cls.type_name is lt
        assert cls.locatable == cls.counted  # dense, batch and range: counted and locatable


@pytest.mark.parametrize("name", [*ALL_2D, *ALL_3D, *ALL_BATCHED])
def test_walkers_own_the_buffers_their_level_stores(name: str) -> None:
    fmt = get_format(name)
    for w in walkers(fmt):
        t = w.level.type
        want = [f"pos{w.k}"] * t.stores_pos + [f"crd{w.k}"] * t.stores_crd
        assert [n for n, _ in w.buffers()] == want


@pytest.mark.parametrize("name", [*ALL_2D, *ALL_3D, *ALL_BATCHED])
@pytest.mark.parametrize("order", [o for o in ORDERS if o != "auto"])
def test_the_plan_and_the_kernel_know_the_same_dimensions(name: str, order: str) -> None:
    """Plans and lowering share one solver: the output dimensions the plan says are known at
    the accumulator are bound there in the kernel (else y's index would not be built)."""
    fmt = get_format(name)
    try:
        p = plan(fmt, "mv", order)
    except UnsupportedError:
        pytest.skip(f"{name} cannot be walked in {order} order")
    assert 0 <= p.acc_step < len(p.steps)
    k = lower(fmt, "mv", order=order)  # a dimension the plan knows but the kernel does not: KeyError
    assert k.info["order"] == order


def test_solver_blocks_and_diagonals() -> None:
    bsr = resolve("BSR[2,3]")  # (i, j) -> (i floordiv 2, j floordiv 3, i mod 2, j mod 3)
    coords = {k: Var(f"c{k}") for k in range(4)}
    s = solve_dims(bsr, coords, {})
    assert set(s.dims) == {0, 1} and not s.checked
    assert [let.name for let in s.lets] == ["i0", "i1"]

    dia = resolve("DIA")
    diag = next(w.k for w in walkers(dia) if len(w.level.expr.dims) == 2)
    row = next(w.k for w in walkers(dia) if w.k != diag)
    s = solve_dims(dia, {diag: Var("o"), row: Var("r")}, {})
    assert set(s.dims) == {0, 1}
    assert len(s.checked) == 1  # the dimension found through the diagonal needs a bounds check
    # a known dimension is never re-derived
    s2 = solve_dims(dia, {diag: Var("o")}, {0: Const(0, "index"), 1: Var("j")})
    assert not s2.lets and not s2.checked
