"""ust.codegen.record: the frozen records of the IR and the lowering's plans behave as the
``@dataclass(frozen=True)`` classes they replaced (construction, defaults, equality and hash,
repr, immutability, replace, pickling), and importing the IR generates no code."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import pytest

from ust.codegen.ir import Bin, Block, Const, Kernel, Loop, Param, Var
from ust.codegen.record import Record, field, replace


class Point(Record):
    x: int
    y: int = 0
    note: str = field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    note: str = dataclasses.field(default="", compare=False)


CASES = [((1,), {}), ((1, 2), {}), ((), {"x": 3, "y": 4}), ((5,), {"note": "n"}), ((1, 2, "m"), {})]


@pytest.mark.parametrize(("args", "kwargs"), CASES)
def test_records_construct_compare_hash_and_print_as_frozen_dataclasses(args: tuple, kwargs: dict) -> None:
    r, d = Point(*args, **kwargs), DataPoint(*args, **kwargs)
    assert (r.x, r.y, r.note) == (d.x, d.y, d.note)
    assert repr(r) == repr(d).replace("DataPoint", "Point")
    assert hash(r) == hash(d)  # both hash the tuple of the compared fields
    assert r == Point(r.x, r.y, "other note")  # note is not compared
    assert r != Point(r.x + 1, r.y)
    assert (r == d) is False  # another class never compares equal


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1, 2, "n", 4), {}), ((1,), {"x": 2}), ((1,), {"z": 2})],
)
def test_bad_construction_raises_type_error_as_a_dataclass_does(args: tuple, kwargs: dict) -> None:
    with pytest.raises(TypeError):
        DataPoint(*args, **kwargs)
    with pytest.raises(TypeError):
        Point(*args, **kwargs)


def test_records_are_frozen_and_replace_makes_a_new_one() -> None:
    r = Point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.x = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.y  # type: ignore[misc]
    s = replace(r, y=7)
    assert (s.x, s.y) == (1, 7) and (r.x, r.y) == (1, 2)
    with pytest.raises(TypeError):
        replace(r, z=1)
    assert replace(DataPoint(1), y=3) == DataPoint(1, 3)  # dataclasses go to dataclasses.replace


def test_post_init_checks_run() -> None:
    with pytest.raises(ValueError, match="unknown binary operator"):
        Bin("**", Const(1), Const(2))


def test_ir_nodes_pickle_copy_and_key_dicts() -> None:
    loop = Loop("i", Const(0), Var("n"), Block((Var("x"),)), parallel=True)
    k = Kernel("k", (Param("a", "vbuf"),), Block((loop,)), meta=(("op", "mv"),))
    for clone in (pickle.loads(pickle.dumps(k)), copy.deepcopy(k), copy.copy(k)):
        assert clone == k and hash(clone) == hash(k) and clone.meta == k.meta
    assert replace(k, meta=(("op", "mm"),)) == k  # meta is not compared, as before
    assert {loop: 1}[Loop("i", Const(0), Var("n"), Block((Var("x"),)), parallel=True)] == 1


def test_a_default_field_may_not_precede_a_required_one() -> None:
    with pytest.raises(TypeError):

        class Bad(Record):
            a: int = 0
            b: int


def test_importing_the_ir_creates_no_dataclass() -> None:
    """The IR and the level walkers define records, not dataclasses (``import ust`` first: the
    rest of ust keeps its dataclasses)."""
    code = (
        "import dataclasses, sys, ust\n"
        "made = []\n"
        "real = dataclasses._process_class\n"
        "dataclasses._process_class = lambda cls, *a, **k: (made.append(cls.__module__), real(cls, *a, **k))[1]\n"
        "import ust.codegen.ir, ust.codegen.levels\n"
        "print(sorted(set(m for m in made if m in ('ust.codegen.ir', 'ust.codegen.levels'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
