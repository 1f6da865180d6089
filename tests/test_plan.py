"""The planner's rule table: each rule fires for the inputs it claims, and only those."""

from __future__ import annotations

import pytest

import ust
from ust.plan import Problem, classify, decide
from ust.plan.rules import CONDITIONS, RULES


def problem(fmt: str, device: str, *, op: str = "spmv", dtype: str = "float64", plain: bool = True,
            compiler: bool = True, index: str = "int32") -> Problem:  # fmt: skip
    c = classify(ust.format(fmt))
    return Problem(op, device, c.name, c.params, c.canonical, dtype, index, plain, has_compiler=compiler)


@pytest.mark.parametrize(
    ("fmt", "klass"),
    [
        ("CSR", "CSR"),
        ("(r, c) -> (r : dense, c : compressed)", "CSR"),
        ("(r, c) -> (r : dense, c : compressed(nonordered))", "CSR"),
        ("CSC", "CSC"),
        ("COO", "COO"),
        ("(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique, nonordered))", "COO"),
        ("DIA", "DIA"),
        ("BSR[2,3]", "BSR[2, 3]"),
        ("DCSR", "DCSR"),
        ("(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)", "OTHER"),
    ],
)
def test_classify_is_structural(fmt: str, klass: str) -> None:
    assert str(classify(ust.format(fmt))) == klass


def test_canonical_flag() -> None:
    assert classify(ust.formats.COO).canonical
    assert not classify(ust.format("(i, j) -> (i : dense, j : compressed(nonordered))")).canonical
    assert not classify(ust.format("(i, j) -> (i : dense, j : compressed(nonunique))")).canonical


@pytest.mark.parametrize(
    ("fmt", "device", "kwargs", "route"),
    [
        ("CSR", "cuda", {}, "cusparse"),
        ("CSC", "cuda", {}, "cusparse"),
        ("COO", "cuda", {}, "cusparse"),
        ("BSR[2,2]", "cuda", {}, "cusparse"),
        ("BSR[2,3]", "cuda", {}, "generated-cuda"),  # cuSPARSE BSR needs square blocks
        ("BSR[1,1]", "cuda", {}, "generated-cuda"),
        ("DIA", "cuda", {}, "generated-cuda"),
        ("DCSR", "cuda", {}, "generated-cuda"),
        ("(i, j) -> (i : dense, j : compressed(nonordered))", "cuda", {}, "generated-cuda"),
        ("CSR", "cuda", {"op": "spmm"}, "cusparse"),
        ("CSR", "cpu", {}, "scipy"),
        ("DIA", "cpu", {}, "scipy"),
        ("CSR", "cpu", {"plain": False}, "generated-c"),  # fused alpha/beta: one pass
        ("DCSR", "cpu", {}, "generated-c"),
        ("DCSR", "cpu", {"compiler": False}, "convert-scipy"),
        ("CSR", "cpu", {"plain": False, "compiler": False}, "scipy"),
        ("CSR", "cpu", {"dtype": "int64"}, "scipy"),
    ],
)
def test_rule_fires(fmt: str, device: str, kwargs: dict, route: str) -> None:
    d = decide(problem(fmt, device, **kwargs))
    assert d.route == route
    assert d.reason and "{" not in d.reason


def test_reason_names_format_and_dtype() -> None:
    d = decide(problem("CSR", "cuda", dtype="complex64"))
    assert "CSR" in d.reason and "complex64" in d.reason


def test_convert_route_names_target() -> None:
    d = decide(problem("DCSR", "cpu", compiler=False))
    assert d.rule.convert_to == "CSR"


def test_alternatives_are_other_matching_rules() -> None:
    d = decide(problem("CSR", "cuda"))
    assert [r.route for r in d.alternatives] == ["generated-cuda"]


def test_unsupported_names_combination_and_lists_supported() -> None:
    with pytest.raises(
        ust.UnsupportedError, match=r"spmv on cuda .* int64 values.*supported for spmv: .*cuda"
    ):
        decide(problem("DCSR", "cuda", dtype="int64"))


def test_every_rule_is_well_formed() -> None:
    for r in RULES:
        assert r.when in CONDITIONS
        assert r.device in ("cpu", "cuda")
        assert r.reason
